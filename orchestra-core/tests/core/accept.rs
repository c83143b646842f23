//! The acceptance sweep of issue 3: the installed kubectl's remaining
//! commands and error texts, one server for the whole sequence.

use std::io::{BufRead, BufReader};
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use orchestra::testing::{Kubectl, TestCluster};
use serde_json::Value;

/// Runs kubectl and insists on success; returns stdout.
fn ok(kubectl: &Kubectl, args: &[&str], stdin: Option<&str>) -> String {
    let (ok, out, err) = kubectl.run_with_input(args, stdin).into_parts();
    assert!(ok, "kubectl {args:?} failed: {err}\n{out}");
    out
}

/// Runs kubectl and insists on failure; returns stderr.
fn fails(kubectl: &Kubectl, args: &[&str], stdin: Option<&str>) -> String {
    let (ok, out, err) = kubectl.run_with_input(args, stdin).into_parts();
    assert!(!ok, "kubectl {args:?} succeeded: {out}");
    err
}

fn json_of(kubectl: &Kubectl, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.extend(["-o", "json"]);
    serde_json::from_str(&ok(kubectl, &args, None)).unwrap()
}

fn exists(kubectl: &Kubectl, kind: &str, name: &str) -> bool {
    kubectl.run(&["get", kind, name, "-o", "name"]).success
}

/// Lines of a long-running kubectl, read on a thread.
struct Stream {
    child: std::process::Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Stream {
    fn spawn(mut command: Command) -> Stream {
        let mut child = command.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Stream { child, lines, seen: Vec::new() }
    }

    /// Waits (up to 20 s) for a line matching `what`.
    fn wait_for(&mut self, what: impl Fn(&str) -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            match self.lines.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => {
                    let done = what(&line);
                    self.seen.push(line);
                    if done {
                        return true;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return false,
            }
        }
        false
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels:
    app: web
spec:
  replicas: 1
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: main
        image: nginx:1
      - name: sidecar
        image: busybox:1
"#;

fn pod(name: &str, image: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  labels:\n    app: {name}\nspec:\n  containers:\n  - name: c\n    image: {image}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_acceptance() {
    let cluster = TestCluster::start().await;
    let kubectl = cluster.kubectl().await.clone();
    let address = kubectl.address().expect("served on loopback");
    // Compacted past the bootstrap writes: a watch from revision 1 expires.
    let revision = cluster.server().store().status().await.unwrap().revision;
    cluster.server().store().compact(revision).await.unwrap();
    tokio::task::spawn_blocking(move || {
        let kubectl = &kubectl;

        let out = ok(
            kubectl,
            &["get", "--raw", "/api/v1/namespaces/default/pods?watch=true&resourceVersion=1"],
            None,
        );
        let event: Value = serde_json::from_str(out.lines().next().unwrap_or("")).unwrap();
        assert_eq!(event["type"], "ERROR", "{out}");
        assert_eq!(event["object"]["code"], 410, "{out}");
        assert_eq!(event["object"]["reason"], "Expired", "{out}");

        // cluster-info: discovery plus the cluster-service list.
        let out = ok(kubectl, &["cluster-info"], None);
        assert!(
            out.contains("Kubernetes control plane is running at")
                && out.contains(&address.to_string()),
            "{out}"
        );

        // Health and metrics through --raw.
        let out = ok(kubectl, &["get", "--raw", "/readyz?verbose"], None);
        assert!(out.contains("readyz check passed"), "{out}");
        let out = ok(kubectl, &["get", "--raw", "/livez"], None);
        assert_eq!(out.trim(), "ok");

        // Invalid: a container without an image.
        let err = fails(
            kubectl,
            &["create", "-f", "-"],
            Some(&pod("noimage", "x").replace("    image: x\n", "")),
        );
        assert!(
            err.contains(r#"The Pod "noimage" is invalid: spec.containers[0].image: Required value"#),
            "{err}"
        );
        assert!(!exists(kubectl, "pod", "noimage"));

        // Conflict: replace with a stale resourceVersion.
        ok(kubectl, &["create", "-f", "-"], Some(&pod("p1", "nginx:1")));
        let stale = json_of(kubectl, &["get", "pod", "p1"]);
        ok(kubectl, &["label", "pod", "p1", "x=1"], None);
        let mut changed = stale.clone();
        changed["spec"]["containers"][0]["image"] = "nginx:2".into();
        let err = fails(kubectl, &["replace", "-f", "-"], Some(&changed.to_string()));
        assert!(
            err.contains(r#"Error from server (Conflict): error when replacing "STDIN": Operation cannot be fulfilled on pods "p1": the object has been modified; please apply your changes to the latest version and try again"#),
            "{err}"
        );
        let now = json_of(kubectl, &["get", "pod", "p1"]);
        assert_eq!(now["spec"]["containers"][0]["image"], "nginx:1");

        // Client-side apply twice: a change, then a removed container.
        let out = ok(kubectl, &["apply", "-f", "-"], Some(DEPLOYMENT));
        assert!(out.contains("deployment.apps/web created"), "{out}");
        let out = ok(
            kubectl,
            &["apply", "-f", "-"],
            Some(&DEPLOYMENT.replace("nginx:1", "nginx:2")),
        );
        assert!(out.contains("deployment.apps/web configured"), "{out}");
        let live = json_of(kubectl, &["get", "deploy", "web"]);
        assert_eq!(
            live["spec"]["template"]["spec"]["containers"][0]["image"],
            "nginx:2"
        );
        assert_eq!(live["metadata"]["generation"], 2);
        let single = DEPLOYMENT
            .replace("nginx:1", "nginx:2")
            .replace("      - name: sidecar\n        image: busybox:1\n", "");
        let out = ok(kubectl, &["apply", "-f", "-"], Some(&single));
        assert!(out.contains("deployment.apps/web configured"), "{out}");
        let live = json_of(kubectl, &["get", "deploy", "web"]);
        let containers = live["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap();
        assert_eq!(containers.len(), 1, "{live}");
        assert_eq!(containers[0]["name"], "main");
        let out = ok(kubectl, &["apply", "-f", "-"], Some(&single));
        assert!(out.contains("deployment.apps/web unchanged"), "{out}");

        // diff and apply --dry-run=server leave the object alone.
        let changed = single.replace("nginx:2", "nginx:3");
        let (_, out, err) = kubectl.run_with_input(&["diff", "-f", "-"], Some(&changed)).into_parts();
        assert!(
            out.contains("-      - image: nginx:2") && out.contains("+      - image: nginx:3"),
            "{out}{err}"
        );
        let out = ok(
            kubectl,
            &["apply", "--dry-run=server", "-f", "-"],
            Some(&changed),
        );
        assert!(out.contains("(server dry run)"), "{out}");
        let out = ok(
            kubectl,
            &["create", "--dry-run=server", "-f", "-"],
            Some(&pod("dry", "nginx:1")),
        );
        assert!(out.contains("pod/dry created (server dry run)"), "{out}");
        assert!(!exists(kubectl, "pod", "dry"));
        let out = ok(kubectl, &["delete", "pod", "p1", "--dry-run=server"], None);
        assert!(out.contains("(server dry run)"), "{out}");
        assert!(exists(kubectl, "pod", "p1"));
        let live = json_of(kubectl, &["get", "deploy", "web"]);
        assert_eq!(
            live["spec"]["template"]["spec"]["containers"][0]["image"],
            "nginx:2"
        );

        // scale, seen by get deploy and in managedFields.
        let out = ok(kubectl, &["scale", "deployment", "web", "--replicas=3"], None);
        assert!(out.contains("deployment.apps/web scaled"), "{out}");
        let out = ok(kubectl, &["get", "deploy", "web"], None);
        assert!(out.contains("0/3"), "{out}");
        let live = json_of(kubectl, &["get", "deploy", "web", "--show-managed-fields"]);
        assert_eq!(live["spec"]["replicas"], 3);
        let scaler = live["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["manager"] == "kubectl")
            .cloned()
            .unwrap_or_default();
        assert_eq!(scaler["subresource"], "scale", "{live}");
        assert!(
            scaler["fieldsV1"]["f:spec"].get("f:replicas").is_some(),
            "{scaler}"
        );

        // --resource-version is a precondition (checked by kubectl, and sent
        // in the scale patch).
        let err = fails(
            kubectl,
            &["scale", "deployment", "web", "--replicas=5", "--resource-version=1"],
            None,
        );
        assert!(err.contains("Expected resource version to be 1"), "{err}");
        let rv = json_of(kubectl, &["get", "deploy", "web"])["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_owned();
        let arg = format!("--resource-version={rv}");
        ok(kubectl, &["scale", "deployment", "web", "--replicas=2", &arg], None);
        assert_eq!(json_of(kubectl, &["get", "deploy", "web"])["spec"]["replicas"], 2);

        // Server-side apply with validation on.
        let ssa = pod("ssa", "nginx:1");
        let out = ok(kubectl, &["apply", "--server-side", "-f", "-"], Some(&ssa));
        assert!(out.contains("pod/ssa serverside-applied"), "{out}");
        let err = fails(
            kubectl,
            &["apply", "--server-side", "-f", "-"],
            Some(&ssa.replace("spec:\n", "spec:\n  bogus: 1\n")),
        );
        assert!(err.contains(r#"unknown field "spec.bogus""#), "{err}");

        // edit with a scripted editor.
        let editor = kubectl.dir().join("editor.sh");
        std::fs::write(&editor, "#!/bin/sh\nsed -i 's/nginx:1/nginx:9/' \"$1\"\n").unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&editor, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let mut edit = kubectl.command(&["edit", "pod", "ssa"]);
        edit.env("KUBE_EDITOR", &editor);
        let output = edit.output().unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let live = json_of(kubectl, &["get", "pod", "ssa"]);
        assert_eq!(live["spec"]["containers"][0]["image"], "nginx:9");

        // run and expose.
        let out = ok(kubectl, &["run", "runner", "--image=nginx:1", "--labels=app=runner"], None);
        assert!(out.contains("pod/runner created"), "{out}");
        let out = ok(
            kubectl,
            &["expose", "pod", "runner", "--port=80", "--target-port=8080"],
            None,
        );
        assert!(out.contains("service/runner exposed"), "{out}");
        let service = json_of(kubectl, &["get", "service", "runner"]);
        assert_eq!(service["spec"]["selector"]["app"], "runner");
        assert_eq!(service["spec"]["ports"][0]["targetPort"], 8080);

        // get -w with the WatchList client: initial events, then the
        // bookmark that ends them, then live changes.
        let mut watch = kubectl.command(&["get", "pods", "-w"]);
        watch.env("KUBE_FEATURE_WatchListClient", "true");
        let mut stream = Stream::spawn(watch);
        assert!(stream.wait_for(|l| l.starts_with("runner ")), "{:?}", stream.seen);
        ok(kubectl, &["label", "pod", "runner", "later=yes"], None);
        ok(kubectl, &["delete", "pod", "ssa", "--wait=false"], None);
        assert!(stream.wait_for(|l| l.starts_with("ssa ")), "{:?}", stream.seen);
        drop(stream);
        let mut watch = kubectl.command(&["get", "pod", "runner", "-w", "-o", "name"]);
        watch.env("KUBE_FEATURE_WatchListClient", "true");
        let mut stream = Stream::spawn(watch);
        assert!(stream.wait_for(|l| l == "pod/runner"), "{:?}", stream.seen);
        ok(kubectl, &["annotate", "pod", "runner", "seen=1"], None);
        assert!(stream.wait_for(|l| l == "pod/runner"), "{:?}", stream.seen);
        drop(stream);

        // kubectl wait (an informer) over WatchList: sees a later change.
        let mut wait = kubectl.command(&["wait", "pod/runner", "--for=jsonpath={.metadata.labels.ready}=yes", "--timeout=20s"],);
        wait.env("KUBE_FEATURE_WatchListClient", "true");
        let waiting = wait.spawn().unwrap();
        std::thread::sleep(Duration::from_millis(500));
        ok(kubectl, &["label", "pod", "runner", "ready=yes"], None);
        let output = waiting.wait_with_output().unwrap();
        assert!(
            output.status.success() && String::from_utf8_lossy(&output.stdout).contains("pod/runner condition met"),
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );

        // delete with --cascade variants and --wait. Without a garbage
        // collector, foreground and orphan deletions wait on their finalizer
        // (as upstream); removing it completes the deletion.
        ok(kubectl, &["create", "-f", "-"], Some(&pod("c1", "nginx:1")));
        let out = ok(kubectl, &["delete", "pod", "c1", "--cascade=background", "--wait=true"], None);
        assert!(out.contains("pod \"c1\" deleted"), "{out}");
        assert!(!exists(kubectl, "pod", "c1"));
        for (cascade, name, finalizer) in [
            ("foreground", "c2", "foregroundDeletion"),
            ("orphan", "c3", "orphan"),
        ] {
            ok(kubectl, &["create", "-f", "-"], Some(&pod(name, "nginx:1")));
            let arg = format!("--cascade={cascade}");
            let out = ok(kubectl, &["delete", "pod", name, &arg, "--wait=false"], None);
            assert!(out.contains(&format!("pod \"{name}\" deleted")), "{out}");
            let live = json_of(kubectl, &["get", "pod", name]);
            assert!(live["metadata"]["deletionTimestamp"].is_string(), "{live}");
            assert_eq!(live["metadata"]["finalizers"][0], finalizer, "{live}");
            ok(
                kubectl,
                &["patch", "pod", name, "--type=json", "-p", r#"[{"op":"remove","path":"/metadata/finalizers"}]"#],
                None,
            );
            assert!(!exists(kubectl, "pod", name), "{cascade}");
        }
        // A label-selected delete.
        let out = ok(kubectl, &["delete", "pods", "-l", "app=runner"], None);
        assert!(out.contains("pod \"runner\" deleted"), "{out}");

        // Metrics count what happened.
        let out = ok(kubectl, &["get", "--raw", "/metrics"], None);
        assert!(out.contains("apiserver_request_total"), "{out}");
        assert!(out.contains("resource=\"pods\""), "{out}");
        assert!(
            out.contains("verb=\"WATCH\"") && out.contains("apiserver_request_duration_seconds_bucket"),
            "{out}"
        );
        assert!(out.contains("apiserver_longrunning_requests"), "{out}");
    })
    .await
    .unwrap();
}

/// One request to the in-process service: (status, body).
async fn call(
    cluster: &TestCluster,
    method: &str,
    uri: &str,
    content_type: &str,
    body: impl Into<axum::body::Body>,
) -> (u16, Value) {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let request = axum::http::Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", content_type)
        .header("accept", "application/json")
        .body(body.into())
        .unwrap();
    let response = cluster.admin_router().oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// Asserts a failure Status with `code` and `reason`.
fn status(result: (u16, Value), code: u16, reason: &str) -> Value {
    let (got, body) = result;
    assert_eq!(got, code, "{body}");
    assert_eq!(body["kind"], "Status", "{body}");
    assert_eq!(body["status"], "Failure", "{body}");
    assert_eq!(body["code"], code, "{body}");
    assert_eq!(body["reason"], reason, "{body}");
    body
}

#[tokio::test]
async fn error_statuses_write_nothing() {
    use serde_json::json;
    let cluster = TestCluster::start().await;
    let pods = "/api/v1/namespaces/default/pods";
    let json_type = "application/json";
    let good = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "a"}},
                      "spec": {"containers": [{"name": "c", "image": "i"}]}});
    let (code, created) = call(&cluster, "POST", pods, json_type, good.to_string()).await;
    assert_eq!(code, 201, "{created}");
    let revision = || async { cluster.server().store().status().await.unwrap().revision };
    let before = revision().await;

    status(call(&cluster, "POST", pods, "application/yaml", "a: [b\n").await, 400, "BadRequest");
    status(call(&cluster, "POST", pods, "text/plain", "x").await, 415, "UnsupportedMediaType");
    let huge = format!("{{\"x\":\"{}\"}}", "a".repeat(3 * 1024 * 1024));
    status(call(&cluster, "POST", pods, json_type, huge).await, 413, "RequestEntityTooLarge");
    let mut bad_name = good.clone();
    bad_name["metadata"]["name"] = "Bad_Name".into();
    let body = status(call(&cluster, "POST", pods, json_type, bad_name.to_string()).await, 422, "Invalid");
    assert_eq!(body["details"]["kind"], "Pod");
    assert_eq!(body["details"]["causes"][0]["field"], "metadata.name", "{body}");
    assert_eq!(body["details"]["causes"][0]["reason"], "FieldValueInvalid", "{body}");
    let mut unknown = good.clone();
    unknown["metadata"]["name"] = "q".into();
    unknown["spec"]["foo"] = 1.into();
    let body = status(
        call(&cluster, "POST", &format!("{pods}?fieldValidation=Strict"), json_type, unknown.to_string()).await,
        400,
        "BadRequest",
    );
    assert!(body["message"].as_str().unwrap().contains(r#"unknown field "spec.foo""#), "{body}");
    let mut stale = created.clone();
    stale["metadata"]["resourceVersion"] = "1".into();
    stale["metadata"]["labels"]["app"] = "b".into();
    let body = status(call(&cluster, "PUT", &format!("{pods}/p"), json_type, stale.to_string()).await, 409, "Conflict");
    assert!(body["message"].as_str().unwrap().contains("the object has been modified"), "{body}");
    status(call(&cluster, "PATCH", &format!("{pods}/p"), json_type, "{}").await, 415, "UnsupportedMediaType");
    status(call(&cluster, "DELETE", &format!("{pods}/p"), json_type, "{oops").await, 400, "BadRequest");
    status(call(&cluster, "GET", &format!("{pods}/nope"), json_type, "").await, 404, "NotFound");
    status(
        call(&cluster, "GET", &format!("{pods}?watch=true&sendInitialEvents=true"), json_type, "").await,
        422,
        "Invalid",
    );
    // dryRun=All on every write verb.
    let mut dry = good.clone();
    dry["metadata"]["name"] = "dry".into();
    let (code, body) = call(&cluster, "POST", &format!("{pods}?dryRun=All"), json_type, dry.to_string()).await;
    assert_eq!((code, &body["metadata"]["name"]), (201, &json!("dry")), "{body}");
    let (code, body) = call(
        &cluster,
        "PATCH",
        &format!("{pods}/p?dryRun=All"),
        "application/merge-patch+json",
        r#"{"metadata":{"labels":{"app":"dry"}}}"#,
    )
    .await;
    assert_eq!((code, &body["metadata"]["labels"]["app"]), (200, &json!("dry")), "{body}");
    let (code, _) = call(&cluster, "DELETE", &format!("{pods}/p?dryRun=All"), json_type, "").await;
    assert_eq!(code, 200);
    assert_eq!(revision().await, before, "a failed or dry-run request wrote");

    // Scale: PUT with a stale resourceVersion conflicts, a good one records
    // its manager with subresource scale.
    let deployments = "/apis/apps/v1/namespaces/default/deployments";
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "d"}},
                 "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
    let (code, _) = call(&cluster, "POST", deployments, json_type, deployment.to_string()).await;
    assert_eq!(code, 201);
    let scale_uri = format!("{deployments}/d/scale?fieldManager=hpa");
    let (code, mut scale) = call(&cluster, "GET", &scale_uri, json_type, "").await;
    assert_eq!(code, 200, "{scale}");
    scale["spec"]["replicas"] = 5.into();
    let mut stale_scale = scale.clone();
    stale_scale["metadata"]["resourceVersion"] = "1".into();
    status(call(&cluster, "PUT", &scale_uri, json_type, stale_scale.to_string()).await, 409, "Conflict");
    status(
        call(
            &cluster,
            "PATCH",
            &scale_uri,
            "application/merge-patch+json",
            r#"{"metadata":{"resourceVersion":"1"},"spec":{"replicas":7}}"#,
        )
        .await,
        409,
        "Conflict",
    );
    let (code, body) = call(&cluster, "PUT", &format!("{scale_uri}&dryRun=All"), json_type, scale.to_string()).await;
    assert_eq!((code, &body["spec"]["replicas"]), (200, &json!(5)), "{body}");
    let (_, live) = call(&cluster, "GET", &format!("{deployments}/d"), json_type, "").await;
    assert_eq!(live["spec"]["replicas"], 1, "dry run");
    let (code, body) = call(&cluster, "PUT", &scale_uri, "application/yaml", scale.to_string()).await;
    assert_eq!((code, &body["spec"]["replicas"]), (200, &json!(5)), "{body}");
    let (_, live) = call(&cluster, "GET", &format!("{deployments}/d"), json_type, "").await;
    assert_eq!(live["spec"]["replicas"], 5);
    let entry = live["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["manager"] == "hpa")
        .cloned()
        .unwrap_or_default();
    assert_eq!(entry["subresource"], "scale", "{live}");
    assert_eq!(entry["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}), "{live}");

    // deletecollection with a label selector removes only the matches.
    for (name, app) in [("a1", "x"), ("a2", "x"), ("b1", "y")] {
        let mut pod = good.clone();
        pod["metadata"]["name"] = name.into();
        pod["metadata"]["labels"]["app"] = app.into();
        let (code, _) = call(&cluster, "POST", pods, json_type, pod.to_string()).await;
        assert_eq!(code, 201);
    }
    let (code, body) = call(&cluster, "DELETE", &format!("{pods}?labelSelector=app%3Dx"), json_type, "").await;
    assert_eq!(code, 200, "{body}");
    let (_, list) = call(&cluster, "GET", pods, json_type, "").await;
    let mut names: Vec<&str> =
        list["items"].as_array().unwrap().iter().map(|p| p["metadata"]["name"].as_str().unwrap()).collect();
    names.sort();
    assert_eq!(names, ["b1", "p"]);

    // WatchList: every item ADDED, then the bookmark that ends the initial
    // events, then the stream (here: until timeoutSeconds).
    {
        use http_body_util::BodyExt;
        use tower::ServiceExt;
        let uri = format!(
            "{pods}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1"
        );
        let request = axum::http::Request::get(uri).body(axum::body::Body::empty()).unwrap();
        let response = cluster.admin_router().oneshot(request).await.unwrap();
        assert_eq!(response.status().as_u16(), 200);
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let events: Vec<Value> = bytes
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect();
        let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(types[..3], ["ADDED", "ADDED", "BOOKMARK"], "{events:?}");
        let bookmark = &events[2]["object"]["metadata"];
        assert_eq!(bookmark["annotations"]["k8s.io/initial-events-end"], "true");
        assert!(bookmark["resourceVersion"].as_str().is_some_and(|rv| !rv.is_empty()));
    }

    // Writes asking for a Table get their object's one-row Table.
    let table = |method: &str, uri: &str, content_type: &str, body: String| {
        axum::http::Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", content_type)
            .header("accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
            .body(axum::body::Body::from(body))
            .unwrap()
    };
    let mut row = good.clone();
    row["metadata"]["name"] = "row".into();
    for (request, code) in [
        (table("POST", pods, json_type, row.to_string()), 201),
        (
            table(
                "PATCH",
                &format!("{pods}/row"),
                "application/merge-patch+json",
                r#"{"metadata":{"labels":{"t":"1"}}}"#.into(),
            ),
            200,
        ),
    ] {
        use http_body_util::BodyExt;
        use tower::ServiceExt;
        let response = cluster.admin_router().oneshot(request).await.unwrap();
        assert_eq!(response.status().as_u16(), code);
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let body: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(body["kind"], "Table", "{body}");
        assert_eq!(body["rows"][0]["cells"][0], "row", "{body}");
    }
}
