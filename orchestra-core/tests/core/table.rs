//! Server-side Table output: `kubectl get` columns as against Kubernetes,
//! `-o wide`, `-A`, `--show-labels`, `describe`, `get -w`, and the raw
//! Table JSON with its `includeObject` variants.

use std::io::{BufRead, BufReader};
use std::sync::mpsc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use orchestra::testing::{Kubectl, TestCluster};
use serde_json::{Value, json};
use tower::ServiceExt;

const TBL: &str =
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

async fn call(
    cluster: &TestCluster,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> (StatusCode, String, Value) {
    let mut request = Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let body = match body {
        Some(value) => Body::from(serde_json::to_vec(&value).unwrap()),
        None => Body::empty(),
    };
    let response = cluster.admin_router().oneshot(request.body(body).unwrap()).await.unwrap();
    let status = response.status();
    let content_type =
        response.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let value =
        serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, content_type, value)
}

fn arr(value: &Value) -> &[Value] {
    value.as_array().expect("an array")
}

/// Creates an object, then sets its status if it has one.
async fn create(cluster: &TestCluster, collection: &str, mut object: Value) -> Value {
    let status = object.as_object_mut().unwrap().remove("status");
    let json = [("content-type", "application/json")];
    let (code, _, created) = call(cluster, "POST", collection, &json, Some(object)).await;
    assert_eq!(code, 201, "{created}");
    let Some(status) = status else {
        return created;
    };
    let name = created["metadata"]["name"].as_str().unwrap();
    let uri = format!("{collection}/{name}/status");
    let merge = [("content-type", "application/merge-patch+json")];
    let (code, _, patched) = call(cluster, "PATCH", &uri, &merge, Some(json!({"status": status}))).await;
    assert_eq!(code, 200, "{patched}");
    patched
}

fn pod(name: &str, namespace: &str, app: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": app}},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "nginx:1.27"}]},
        "status": {"phase": "Running", "podIP": "10.0.0.5", "podIPs": [{"ip": "10.0.0.5"}],
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "c", "ready": true, "restartCount": 0, "image": "nginx:1.27", "imageID": "",
                "state": {"running": {"startedAt": "2024-01-01T00:00:00Z"}}}]},
    })
}

/// A cluster with a node, pods, a deployment, a service, a config map and
/// an event about the pod `web`.
async fn populate(cluster: &TestCluster) {
    create(
        cluster,
        "/api/v1/nodes",
        json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/control-plane": ""}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                "addresses": [{"type": "InternalIP", "address": "192.168.1.10"}],
                "nodeInfo": {"kubeletVersion": "v1.33.0", "osImage": "Debian GNU/Linux 12", "kernelVersion": "6.1.0",
                    "containerRuntimeVersion": "orchestra://0.1", "machineID": "", "systemUUID": "", "bootID": "",
                    "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"}},
        }),
    )
    .await;
    let web = create(cluster, "/api/v1/namespaces/default/pods", pod("web", "default", "web")).await;
    create(cluster, "/api/v1/namespaces/kube-system/pods", pod("dns", "kube-system", "dns")).await;
    create(cluster, "/apis/apps/v1/namespaces/default/deployments", json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}},
        "status": {"replicas": 2, "readyReplicas": 1, "updatedReplicas": 2, "availableReplicas": 1},
    }))
    .await;
    create(cluster, "/api/v1/namespaces/default/services", json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {"type": "NodePort", "clusterIP": "127.96.0.20", "clusterIPs": ["127.96.0.20"], "selector": {"app": "web"},
            "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}, {"name": "tls", "port": 443, "nodePort": 30443, "protocol": "TCP"}]},
    }))
    .await;
    create(
        cluster,
        "/api/v1/namespaces/default/configmaps",
        json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"a": "1", "b": "2"},
        }),
    )
    .await;
    create(
        cluster,
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
        }),
    )
    .await;
    let now = orchestra_core::api::meta::now_rfc3339();
    for (name, uid) in [("web.1", web["metadata"]["uid"].clone()), ("web.2", json!("someone-else"))] {
        create(cluster, "/api/v1/namespaces/default/events", json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name},
            "involvedObject": {"kind": "Pod", "namespace": "default", "name": "web", "uid": uid, "apiVersion": "v1"},
            "reason": "Scheduled", "message": format!("Successfully assigned default/web to n1 ({name})"), "type": "Normal",
            "source": {"component": "default-scheduler"}, "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }))
        .await;
    }
}

/// Runs kubectl to completion; panics on failure; returns stdout.
fn run(kubectl: &Kubectl, args: &[&str]) -> String {
    let output = kubectl.command(args).output().expect("kubectl is installed");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "kubectl {args:?}: {stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if std::env::var_os("ORCHESTRA_SHOW_KUBECTL").is_some() {
        eprintln!("$ kubectl {}\n{stdout}", args.join(" "));
    }
    stdout
}

/// The whitespace-separated words of each line.
fn words(out: &str) -> Vec<Vec<String>> {
    out.lines().map(|l| l.split_whitespace().map(str::to_owned).collect()).collect()
}

/// The row whose first words are `start`.
fn row<'a>(rows: &'a [Vec<String>], start: &[&str]) -> &'a [String] {
    rows.iter()
        .find(|r| r.len() >= start.len() && r.iter().zip(start).all(|(a, b)| a == b))
        .unwrap_or_else(|| panic!("no row starting with {start:?} in {rows:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_prints_upstream_columns() {
    let cluster = TestCluster::start().await;
    populate(&cluster).await;
    let kubectl = cluster.kubectl().await.clone();
    tokio::task::spawn_blocking(move || {
        let out = words(&run(&kubectl, &["get", "pods"]));
        assert_eq!(out[0], ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]);
        let web = row(&out, &["web"]);
        assert_eq!(web[1..4], ["1/1", "Running", "0"], "{out:?}");
        assert!(web[4].ends_with('s') || web[4].ends_with('m'), "age {web:?}");

        let out = words(&run(&kubectl, &["get", "pods", "-o", "wide"]));
        assert_eq!(
            out[0],
            ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED", "NODE", "READINESS", "GATES"]
        );
        assert_eq!(row(&out, &["web"])[5..], ["10.0.0.5", "n1", "<none>", "<none>"]);

        let out = words(&run(&kubectl, &["get", "pods", "-A"]));
        assert_eq!(out[0], ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]);
        row(&out, &["default", "web", "1/1", "Running"]);
        row(&out, &["kube-system", "dns", "1/1", "Running"]);

        let out = words(&run(&kubectl, &["get", "pods", "--show-labels"]));
        assert_eq!(out[0].last().unwrap(), "LABELS");
        assert_eq!(row(&out, &["web"]).last().unwrap(), "app=web");
        let out = words(&run(&kubectl, &["get", "pods", "-L", "app"]));
        assert_eq!(out[0].last().unwrap(), "APP");

        // --sort-by asks for includeObject=Object.
        let out = words(&run(&kubectl, &["get", "pods", "-A", "--sort-by=.metadata.name"]));
        assert_eq!(out[1][1], "dns");
        assert_eq!(out[2][1], "web");

        let out = words(&run(&kubectl, &["get", "pod", "web"]));
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(out[1][..4], ["web", "1/1", "Running", "0"]);

        let out = words(&run(&kubectl, &["get", "nodes", "-o", "wide"]));
        assert_eq!(out[0][..5], ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]);
        assert_eq!(out[0][5..7], ["INTERNAL-IP", "EXTERNAL-IP"]);
        let n1 = row(&out, &["n1"]);
        assert_eq!(n1[1..3], ["Ready", "control-plane"]);
        assert_eq!(n1[4..7], ["v1.33.0", "192.168.1.10", "<none>"]);

        let out = run(&kubectl, &["get", "deploy,svc,cm"]);
        let rows = words(&out);
        assert!(out.contains("NAME") && out.contains("UP-TO-DATE") && out.contains("CLUSTER-IP"), "{out}");
        assert_eq!(row(&rows, &["deployment.apps/web"])[1..4], ["1/2", "2", "1"]);
        assert_eq!(
            row(&rows, &["service/web"])[1..5],
            ["NodePort", "127.96.0.20", "<none>", "80:30080/TCP,443:30443/TCP"]
        );
        assert_eq!(row(&rows, &["configmap/settings"])[1], "2");

        let out = words(&run(&kubectl, &["get", "deployment", "web", "--subresource=scale"]));
        assert_eq!(out[0], ["NAME", "DESIRED", "AVAILABLE", "AGE"]);
        assert_eq!(out[1][..3], ["web", "2", "2"]);

        let out = run(&kubectl, &["get", "all"]);
        for expected in ["pod/web", "service/web", "deployment.apps/web"] {
            assert!(out.contains(expected), "get all lacks {expected}:\n{out}");
        }

        let out = words(&run(&kubectl, &["get", "namespaces"]));
        assert_eq!(out[0], ["NAME", "STATUS", "AGE"]);
        assert_eq!(row(&out, &["kube-system"])[1], "Active");

        let out = words(&run(&kubectl, &["get", "events"]));
        assert_eq!(out[0], ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]);
        assert!(out.iter().any(|r| r.contains(&"pod/web".to_owned()) && r.contains(&"Scheduled".to_owned())));

        let out = words(&run(&kubectl, &["get", "clusterroles"]));
        assert_eq!(out[0], ["NAME", "CREATED", "AT"]);
        assert!(row(&out, &["reader"])[1].ends_with('Z'), "{out:?}");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_describe_and_watch() {
    let cluster = TestCluster::start().await;
    populate(&cluster).await;
    let kubectl = cluster.kubectl().await.clone();

    let describe = {
        let kubectl = kubectl.clone();
        tokio::task::spawn_blocking(move || run(&kubectl, &["describe", "pod", "web"])).await.unwrap()
    };
    for expected in [
        "Name:",
        "web",
        "Namespace:",
        "default",
        "Node:",
        "n1",
        "nginx:1.27",
        "Events:",
        "Scheduled",
        "default-scheduler",
    ] {
        assert!(describe.contains(expected), "describe lacks {expected}:\n{describe}");
    }
    // Only the event about this pod's uid.
    assert!(describe.contains("(web.1)") && !describe.contains("(web.2)"), "{describe}");
    let (node, deployment) = {
        let kubectl = kubectl.clone();
        tokio::task::spawn_blocking(move || {
            (run(&kubectl, &["describe", "node", "n1"]), run(&kubectl, &["describe", "deployment", "web"]))
        })
        .await
        .unwrap()
    };
    assert!(node.contains("Non-terminated Pods:") && node.contains("web"), "{node}");
    assert!(deployment.contains("Replicas:") && deployment.contains("app=web"), "{deployment}");

    // `get pods -w`: the list, then rows for later changes.
    let mut child = kubectl.command(&["get", "pods", "-w"]).spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (lines_tx, lines) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let wait_for = |what: &dyn Fn(&str) -> bool, seen: &mut Vec<String>| {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while std::time::Instant::now() < deadline {
            match lines.recv_timeout(Duration::from_millis(200)) {
                Ok(line) => {
                    let done = what(&line);
                    seen.push(line);
                    if done {
                        return true;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return false,
            }
        }
        false
    };
    let mut seen = Vec::new();
    let listed = wait_for(&|l| l.starts_with("web "), &mut seen);
    assert!(listed, "no initial row: {seen:?}");
    assert!(seen[0].starts_with("NAME") && seen[0].contains("RESTARTS"), "{seen:?}");
    create(&cluster, "/api/v1/namespaces/default/pods", pod("late", "default", "late")).await;
    let appeared = wait_for(&|l| l.starts_with("late ") && l.contains("Running"), &mut seen);
    let _ = child.kill();
    let _ = child.wait();
    assert!(appeared, "the new pod never showed: {seen:?}");
    // Column headers are printed once.
    assert_eq!(seen.iter().filter(|l| l.starts_with("NAME")).count(), 1, "{seen:?}");
}

#[tokio::test]
async fn table_json_shape_and_include_object() {
    let cluster = TestCluster::start().await;
    populate(&cluster).await;
    let pods = "/api/v1/namespaces/default/pods";

    let (status, content_type, table) = call(&cluster, "GET", pods, &[("accept", TBL)], None).await;
    assert_eq!(status, 200);
    assert_eq!(content_type, "application/json;as=Table;v=v1;g=meta.k8s.io");
    assert_eq!((table["kind"].as_str(), table["apiVersion"].as_str()), (Some("Table"), Some("meta.k8s.io/v1")));
    assert!(table["metadata"]["resourceVersion"].as_str().is_some());
    let names: Vec<&str> =
        table["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["Name", "Ready", "Status", "Restarts", "Age", "IP", "Node", "Nominated Node", "Readiness Gates"]
    );
    assert_eq!(table["columnDefinitions"][0]["format"], "name");
    assert_eq!(table["columnDefinitions"][5]["priority"], 1);
    let row = &table["rows"][0];
    assert_eq!(arr(&row["cells"])[..4], [json!("web"), json!("1/1"), json!("Running"), json!("0")]);
    assert_eq!(arr(&row["cells"])[5..], [json!("10.0.0.5"), json!("n1"), json!("<none>"), json!("<none>")]);
    assert_eq!(row["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(row["object"]["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(row["object"]["metadata"]["labels"]["app"], "web");
    assert!(row["object"].get("spec").is_none());

    let (_, _, full) = call(&cluster, "GET", &format!("{pods}?includeObject=Object"), &[("accept", TBL)], None).await;
    assert_eq!(full["rows"][0]["object"]["kind"], "Pod");
    assert_eq!(full["rows"][0]["object"]["spec"]["nodeName"], "n1");
    let (_, _, none) = call(&cluster, "GET", &format!("{pods}?includeObject=None"), &[("accept", TBL)], None).await;
    assert!(none["rows"][0].get("object").is_none());
    let (status, _, bad) = call(&cluster, "GET", &format!("{pods}?includeObject=All"), &[("accept", TBL)], None).await;
    assert_eq!(status, 400, "{bad}");

    // Pagination metadata carries over.
    let (_, _, page) = call(&cluster, "GET", "/api/v1/pods?limit=1", &[("accept", TBL)], None).await;
    assert_eq!(page["rows"].as_array().unwrap().len(), 1);
    assert!(page["metadata"]["continue"].as_str().is_some());
    assert_eq!(page["metadata"]["remainingItemCount"], 1);

    // One object: a one-row Table with the object's resource version.
    let (_, _, one) = call(&cluster, "GET", &format!("{pods}/web"), &[("accept", TBL)], None).await;
    assert_eq!(one["rows"].as_array().unwrap().len(), 1);
    let (_, _, plain) = call(&cluster, "GET", &format!("{pods}/web"), &[], None).await;
    assert_eq!(one["metadata"]["resourceVersion"], plain["metadata"]["resourceVersion"]);
    assert_eq!(plain["kind"], "Pod");

    // v1beta1 and metadata-only.
    let v1beta1 = [("accept", "application/json;as=Table;v=v1beta1;g=meta.k8s.io")];
    let (_, _, beta) = call(&cluster, "GET", pods, &v1beta1, None).await;
    assert_eq!(beta["apiVersion"], "meta.k8s.io/v1beta1");
    let partial = [("accept", "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io")];
    let (_, _, metadata) = call(&cluster, "GET", pods, &partial, None).await;
    assert_eq!(metadata["kind"], "PartialObjectMetadataList");
    assert_eq!(metadata["items"][0]["kind"], "PartialObjectMetadata");

    // Unacceptable Accept: 406, unless there is a fallback.
    let v2 = [("accept", "application/json;as=Table;v=v2;g=meta.k8s.io")];
    let (status, _, error) = call(&cluster, "GET", pods, &v2, None).await;
    assert_eq!(status, 406);
    assert_eq!(error["reason"], "NotAcceptable");
    let (status, _, _) = call(
        &cluster,
        "GET",
        pods,
        &[("accept", "application/json;as=Table;v=v2;g=meta.k8s.io, application/json")],
        None,
    )
    .await;
    assert_eq!(status, 200);
    let (status, content_type, yaml) =
        call(&cluster, "GET", &format!("{pods}/web"), &[("accept", "application/yaml")], None).await;
    assert_eq!((status.as_u16(), content_type.as_str()), (200, "application/yaml"));
    assert!(yaml.as_str().unwrap().contains("kind: Pod"), "{yaml}");

    // Other kinds, and a custom kind's default columns.
    let (_, _, nodes) = call(&cluster, "GET", "/api/v1/nodes", &[("accept", TBL)], None).await;
    assert_eq!(arr(&nodes["rows"][0]["cells"])[..3], [json!("n1"), json!("Ready"), json!("control-plane")]);
    let (_, _, roles) =
        call(&cluster, "GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles", &[("accept", TBL)], None).await;
    assert_eq!(roles["columnDefinitions"][1]["name"], "Created At");

    // Field selectors: the labels each kind supports.
    let (_, _, events) = call(
        &cluster,
        "GET",
        "/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dweb%2CinvolvedObject.namespace%3Ddefault%2Creason%3DScheduled%2Csource%3Ddefault-scheduler",
        &[],
        None,
    )
    .await;
    assert_eq!(events["items"].as_array().unwrap().len(), 2, "{events}");
    let (_, _, on_node) = call(
        &cluster,
        "GET",
        "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1%2Cstatus.phase%3DRunning%2Cstatus.podIP%3D10.0.0.5",
        &[],
        None,
    )
    .await;
    assert_eq!(on_node["items"].as_array().unwrap().len(), 2);
    let (status, _, error) = call(&cluster, "GET", "/api/v1/pods?fieldSelector=spec.containers%3Dx", &[], None).await;
    assert_eq!(status, 400);
    assert_eq!(error["message"], "field label not supported: spec.containers");
    let (status, _, error) =
        call(&cluster, "GET", "/api/v1/namespaces/default/configmaps?fieldSelector=data.a%3D1&watch=true", &[], None)
            .await;
    assert_eq!(status, 400);
    assert_eq!(
        error["message"],
        "\"data.a\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
    );
    let (_, _, cordoned) =
        call(&cluster, "GET", "/api/v1/nodes?fieldSelector=spec.unschedulable%3Dfalse", &[], None).await;
    assert_eq!(cordoned["items"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn watch_sends_one_row_tables() {
    let cluster = TestCluster::start().await;
    populate(&cluster).await;
    let request = Request::get("/api/v1/namespaces/default/pods?watch=true&timeoutSeconds=1")
        .header("accept", TBL)
        .body(Body::empty())
        .unwrap();
    let response = cluster.admin_router().oneshot(request).await.unwrap();
    assert_eq!(response.headers()["content-type"], "application/json;as=Table;v=v1;g=meta.k8s.io");
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let events: Vec<Value> =
        bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()).map(|l| serde_json::from_slice(l).unwrap()).collect();
    assert_eq!(events.len(), 1, "{events:?}");
    let table = &events[0]["object"];
    assert_eq!(events[0]["type"], "ADDED");
    assert_eq!(table["kind"], "Table");
    assert_eq!(table["rows"].as_array().unwrap().len(), 1);
    assert_eq!(table["rows"][0]["cells"][0], "web");
    assert!(table["columnDefinitions"].as_array().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_kinds_print_their_columns() {
    use orchestra_core::api::ResourceInfo;
    use orchestra_core::api::table::{Printer, TableColumns};

    let columns = TableColumns::from_crd_version(&json!({"name": "v1", "additionalPrinterColumns": [
        {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
        {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
        {"name": "Owner", "type": "string", "jsonPath": ".spec.owner", "priority": 1},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]}));
    let cluster = TestCluster::start_with(TestCluster::builder().configure_api_server(move |api| {
        api.register(
            ResourceInfo::new("example.com", "v1", "Widget", "widgets", true)
                .with_status()
                .with_printer(Printer::new(columns)),
        )
        .register(ResourceInfo::new("example.com", "v1", "Gadget", "gadgets", true))
    }))
    .await;
    create(
        &cluster,
        "/apis/example.com/v1/namespaces/default/widgets",
        json!({
            "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"},
            "spec": {"size": 3, "owner": "ann"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }),
    )
    .await;
    create(
        &cluster,
        "/apis/example.com/v1/namespaces/default/gadgets",
        json!({
            "apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g1"},
        }),
    )
    .await;
    let (_, _, table) =
        call(&cluster, "GET", "/apis/example.com/v1/namespaces/default/widgets", &[("accept", TBL)], None).await;
    assert_eq!(arr(&table["rows"][0]["cells"])[..4], [json!("w1"), json!(3), json!("True"), json!("ann")]);
    assert_eq!(table["columnDefinitions"][3]["priority"], 1);

    let kubectl = cluster.kubectl().await.clone();
    tokio::task::spawn_blocking(move || {
        let out = words(&run(&kubectl, &["get", "widgets"]));
        assert_eq!(out[0], ["NAME", "SIZE", "READY", "AGE"]);
        assert_eq!(out[1][..3], ["w1", "3", "True"]);
        let out = words(&run(&kubectl, &["get", "widgets", "-o", "wide"]));
        assert_eq!(out[0], ["NAME", "SIZE", "READY", "OWNER", "AGE"]);
        let out = words(&run(&kubectl, &["get", "gadgets"]));
        assert_eq!(out[0], ["NAME", "AGE"]);
        assert_eq!(out[1][0], "g1");
    })
    .await
    .unwrap();
}
