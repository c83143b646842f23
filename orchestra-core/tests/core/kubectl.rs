//! The installed kubectl against the API server over HTTPS on loopback, as
//! the administrator.

use orchestra::testing::TestCluster;

const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels:
    app: web
spec:
  containers:
  - name: c
    image: nginx:1.27
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_drives_the_server() {
    let cluster = TestCluster::start().await;
    let kubectl = cluster.kubectl().await.clone();
    tokio::task::spawn_blocking(move || {
        let run = |args: &[&str]| kubectl.run(args).into_parts();

        let (ok, out, err) = run(&["version", "-o", "json"]);
        assert!(ok, "{err}");
        let version: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(version["serverVersion"]["minor"], "33");

        let (ok, out, err) = run(&["api-resources"]);
        assert!(ok, "{err}");
        for expected in ["pods", "deployments", "customresourcedefinitions", "leases", "clusterroles"] {
            assert!(out.contains(expected), "api-resources lacks {expected}:\n{out}");
        }

        // OpenAPI is not served yet: client-side validation is off.
        let (ok, out, err) = kubectl.run_with_input(&["create", "--validate=false", "-f", "-"], Some(POD)).into_parts();
        assert!(ok, "{err}");
        assert!(out.contains("pod/web created"), "{out}");
        let (ok, _, err) = kubectl.run_with_input(&["create", "--validate=false", "-f", "-"], Some(POD)).into_parts();
        assert!(!ok);
        assert!(
            err.contains("Error from server (AlreadyExists)") && err.contains("pods \"web\" already exists"),
            "{err}"
        );

        let (ok, out, err) = run(&["get", "pods"]);
        assert!(ok, "{err}");
        assert!(out.contains("web"), "{out}");
        let (ok, out, err) = run(&["get", "pods", "-A", "-l", "app=web", "-o", "name"]);
        assert!(ok, "{err}");
        assert_eq!(out.trim(), "pod/web");
        let (ok, out, err) = run(&["get", "pod", "web", "-o", "yaml"]);
        assert!(ok, "{err}");
        assert!(out.contains("image: nginx:1.27") && out.contains("uid:"), "{out}");

        let (ok, out, err) = run(&["label", "pod", "web", "tier=front"]);
        assert!(ok, "{err}");
        assert!(out.contains("pod/web labeled"), "{out}");
        let (ok, out, err) = run(&["annotate", "pod", "web", "note=hello"]);
        assert!(ok, "{err}");
        assert!(out.contains("pod/web annotated"), "{out}");
        let (ok, out, _) =
            run(&["get", "pods", "-l", "tier=front", "-o", "jsonpath={.items[*].metadata.annotations.note}"]);
        assert!(ok);
        assert_eq!(out, "hello");

        let (ok, _, err) = run(&["get", "pod", "nope"]);
        assert!(!ok);
        assert!(err.contains("Error from server (NotFound): pods \"nope\" not found"), "{err}");

        let (ok, out, err) = run(&["delete", "pod", "web"]);
        assert!(ok, "{err}");
        assert!(out.contains("pod \"web\" deleted"), "{out}");
        let (ok, out, _) = run(&["get", "pods", "-o", "name"]);
        assert!(ok);
        assert!(out.trim().is_empty(), "{out}");

        let (ok, out, err) = run(&["get", "namespaces", "-o", "name"]);
        assert!(ok, "{err}");
        assert!(out.contains("namespace/kube-system"), "{out}");
    })
    .await
    .unwrap();
}

/// An Event recorded through `events.k8s.io/v1` (as the controllers, the
/// scheduler and the node agent record them) is the same object as a
/// `core/v1` Event: `kubectl describe` and `kubectl get events` read it
/// through `core/v1`, and a `core/v1` Event reads back as `events.k8s.io/v1`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_k8s_io_events_show_in_describe() {
    let cluster = TestCluster::start().await;
    let kubectl = cluster.kubectl().await.clone();
    tokio::task::spawn_blocking(move || {
        let (ok, out, err) = kubectl.run_with_input(&["create", "--validate=false", "-f", "-"], Some(POD)).into_parts();
        assert!(ok, "{err}");
        assert!(out.contains("pod/web created"), "{out}");
        let (ok, uid, err) = kubectl.run(&["get", "pod", "web", "-o", "jsonpath={.metadata.uid}"]).into_parts();
        assert!(ok, "{err}");
        let event = format!(
            r#"{{"apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {{"name": "web.pulled", "namespace": "default"}},
                "eventTime": "2026-11-30T08:00:00.000000Z",
                "reportingController": "orchestra.io/node", "reportingInstance": "node-a",
                "action": "Pulling", "reason": "Pulled", "type": "Normal",
                "regarding": {{"apiVersion": "v1", "kind": "Pod", "name": "web", "namespace": "default", "uid": "{uid}"}},
                "note": "Container image \"nginx:1.27\" already present on machine"}}"#
        );
        let (ok, _, err) = kubectl.run_with_input(&["create", "-f", "-"], Some(&event)).into_parts();
        assert!(ok, "{err}");
        let core_event = format!(
            r#"{{"apiVersion": "v1", "kind": "Event",
                "metadata": {{"name": "web.scheduled", "namespace": "default"}},
                "involvedObject": {{"apiVersion": "v1", "kind": "Pod", "name": "web", "namespace": "default", "uid": "{uid}"}},
                "reason": "Scheduled", "type": "Normal", "source": {{"component": "default-scheduler"}},
                "message": "Successfully assigned default/web to node-a",
                "firstTimestamp": "2026-11-30T08:00:00Z", "lastTimestamp": "2026-11-30T08:00:00Z", "count": 1}}"#
        );
        let (ok, _, err) = kubectl.run_with_input(&["create", "-f", "-"], Some(&core_event)).into_parts();
        assert!(ok, "{err}");

        let (ok, out, err) = kubectl.run(&["describe", "pod", "web"]).into_parts();
        assert!(ok, "{err}");
        let events = out.split("Events:").nth(1).unwrap_or_default();
        assert!(
            events.contains("Pulled") && events.contains("orchestra.io/node")
                && events.contains("Container image \"nginx:1.27\" already present on machine"),
            "{out}"
        );
        assert!(events.contains("Scheduled") && events.contains("default-scheduler"), "{out}");

        let (ok, out, err) = kubectl.run(&["get", "events", "--field-selector", "involvedObject.name=web", "-o", "name"]).into_parts();
        assert!(ok, "{err}");
        assert_eq!(out.lines().count(), 2, "{out}");
        let (ok, out, err) = kubectl.run(&["get", "events.v1.events.k8s.io", "web.scheduled", "-o", "jsonpath={.regarding.name} {.note} {.deprecatedSource.component}"]).into_parts();
        assert!(ok, "{err}");
        assert_eq!(out, "web Successfully assigned default/web to node-a default-scheduler");
    })
    .await
    .unwrap();
}
