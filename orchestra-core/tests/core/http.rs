//! Raw HTTP against the server's tower service: discovery shapes and the
//! Status errors for bad input.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use orchestra::testing::TestCluster;
use serde_json::{Value, json};
use tower::ServiceExt;

async fn call(cluster: &TestCluster, request: Request<Body>) -> (StatusCode, String, Value) {
    let response = cluster.admin_router().oneshot(request).await.unwrap();
    let status = response.status();
    let content_type =
        response.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, content_type, value)
}

fn get(uri: &str, accept: &str) -> Request<Body> {
    Request::get(uri).header("accept", accept).body(Body::empty()).unwrap()
}

fn post(uri: &str, content_type: &str, body: impl Into<Body>) -> Request<Body> {
    Request::post(uri).header("content-type", content_type).body(body.into()).unwrap()
}

const AGG: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

#[tokio::test]
async fn discovery_shapes() {
    let cluster = TestCluster::start().await;
    let (status, content_type, body) = call(&cluster, get("/apis", AGG)).await;
    assert_eq!(status, 200);
    assert_eq!(content_type, "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList");
    let apps = body["items"].as_array().unwrap().iter().find(|g| g["metadata"]["name"] == "apps").unwrap();
    let deployments =
        apps["versions"][0]["resources"].as_array().unwrap().iter().find(|r| r["resource"] == "deployments").unwrap();
    assert_eq!(deployments["responseKind"]["kind"], "Deployment");
    assert_eq!(deployments["shortNames"], json!(["deploy"]));
    assert!(
        deployments["subresources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["subresource"] == "scale" && s["responseKind"]["group"] == "autoscaling")
    );

    let (_, content_type, body) =
        call(&cluster, get("/api", "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList")).await;
    assert!(content_type.contains("v=v2beta1"));
    assert_eq!(body["apiVersion"], "apidiscovery.k8s.io/v2beta1");
    assert_eq!(body["items"][0]["metadata"]["name"], "");

    let (_, content_type, body) = call(&cluster, get("/apis", "application/json")).await;
    assert_eq!(content_type, "application/json");
    assert_eq!(body["kind"], "APIGroupList");
    let (_, _, body) = call(&cluster, get("/api/v1", "application/json")).await;
    assert_eq!(body["kind"], "APIResourceList");
    let eviction = body["resources"].as_array().unwrap().iter().find(|r| r["name"] == "pods/eviction").unwrap();
    assert_eq!(eviction["group"], "policy");
    let (status, _, body) = call(&cluster, get("/version/", "application/json")).await;
    assert_eq!((status.as_u16(), body["minor"].as_str()), (200, Some("33")));
}

#[tokio::test]
async fn bad_input_gets_status_errors_and_writes_nothing() {
    let cluster = TestCluster::start().await;
    let pods = "/api/v1/namespaces/default/pods";
    let (status, _, body) = call(&cluster, post(pods, "application/json", "{not json")).await;
    assert_eq!(status, 400);
    assert_eq!((body["kind"].as_str(), body["reason"].as_str()), (Some("Status"), Some("BadRequest")));

    let (status, _, body) = call(&cluster, post(pods, "text/csv", "a,b")).await;
    assert_eq!(status, 415);
    assert_eq!(body["reason"], "UnsupportedMediaType");

    let huge = vec![b' '; 3 * 1024 * 1024 + 1];
    let (status, _, body) = call(&cluster, post(pods, "application/json", huge)).await;
    assert_eq!(status, 413);
    assert_eq!(body["code"], 413);

    let wrong_type =
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": "nope"}});
    let (status, _, body) = call(&cluster, post(pods, "application/json", wrong_type.to_string())).await;
    assert_eq!(status, 400, "{body}");

    let no_name = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
    let (status, _, body) = call(&cluster, post(pods, "application/json", no_name.to_string())).await;
    assert_eq!(status, 422);
    assert_eq!(body["details"]["causes"][0]["field"], "metadata.name");

    let generated = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "web-"}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
    let (status, _, body) = call(&cluster, post(pods, "application/yaml", generated.to_string())).await;
    assert_eq!(status, 201);
    assert!(body["metadata"]["name"].as_str().unwrap().starts_with("web-"));

    // Nothing but the generated pod was written.
    let (_, _, list) = call(&cluster, get(pods, "application/json")).await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    assert_eq!(list["kind"], "PodList");

    let (status, _, body) = call(&cluster, get("/api/v1/namespaces/default/widgets", "application/json")).await;
    assert_eq!((status.as_u16(), body["reason"].as_str()), (404, Some("NotFound")));

    // A watch from a compacted revision ends with an Expired error event.
    let revision = cluster.server().store().status().await.unwrap().revision;
    cluster.server().store().compact(revision).await.unwrap();
    let response = cluster
        .admin_router()
        .oneshot(get(&format!("{pods}?watch=true&resourceVersion=1"), "application/json"))
        .await
        .unwrap();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let event: Value = serde_json::from_slice(bytes.split(|b| *b == b'\n').next().unwrap()).unwrap();
    assert_eq!(event["type"], "ERROR");
    assert_eq!(event["object"]["code"], 410);
    assert_eq!(event["object"]["reason"], "Expired");
}

/// A namespace's lifecycle as writes see it, with no pause between steps
/// (the server's namespace cache must never let a write through that a
/// store read would refuse): content in a new namespace is accepted at
/// once, refused with 403 while the namespace terminates, and refused with
/// 404 once it is gone — and a namespace made again under the same name
/// takes content again.
#[tokio::test]
async fn namespace_lifecycle_gates_creates() {
    let cluster = TestCluster::start().await;
    let cm = |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}).to_string();
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "life"}}).to_string();
    let create_cm = |name: &str| post("/api/v1/namespaces/life/configmaps", "application/json", cm(name));
    let delete = |uri: &str| Request::delete(uri).body(Body::empty()).unwrap();
    for round in 0..3 {
        let (status, _, _) = call(&cluster, post("/api/v1/namespaces", "application/json", ns.clone())).await;
        assert_eq!(status, StatusCode::CREATED, "round {round}");
        let (status, _, body) = call(&cluster, create_cm(&format!("a{round}"))).await;
        assert_eq!(status, StatusCode::CREATED, "round {round}: {body}");
        // The `kubernetes` finalizer keeps the namespace terminating.
        let (status, _, body) = call(&cluster, delete("/api/v1/namespaces/life")).await;
        assert_eq!(status, StatusCode::OK, "round {round}: {body}");
        let (status, _, body) = call(&cluster, create_cm(&format!("b{round}"))).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "round {round}: {body}");
        assert!(body["message"].as_str().unwrap().contains("because it is being terminated"), "{body}");
        // A status write on the terminating namespace keeps it: only
        // `finalize` may take its last `spec.finalizers` away.
        let status_update = Request::put("/api/v1/namespaces/life/status")
            .header("content-type", "application/json")
            .body(Body::from(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "life"},
                       "status": {"phase": "Terminating", "conditions": [{"type": "NamespaceContentRemaining",
                       "status": "True", "reason": "SomeResourcesRemain", "message": "configmaps has 1 object"}]}})
                .to_string(),
            ))
            .unwrap();
        let (status, _, body) = call(&cluster, status_update).await;
        assert_eq!(status, StatusCode::OK, "round {round}: {body}");
        let (status, _, body) = call(&cluster, get("/api/v1/namespaces/life", "application/json")).await;
        assert_eq!(status, StatusCode::OK, "round {round}: the namespace survives its status write");
        assert_eq!(body["status"]["conditions"][0]["type"], "NamespaceContentRemaining", "{body}");
        // Empty it and drop the finalizer (the namespace controller's job).
        let (status, _, body) = call(&cluster, delete(&format!("/api/v1/namespaces/life/configmaps/a{round}"))).await;
        assert_eq!(status, StatusCode::OK, "round {round}: {body}");
        let finalize = Request::put("/api/v1/namespaces/life/finalize")
            .header("content-type", "application/json")
            .body(Body::from(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "life"}, "spec": {"finalizers": []}})
                    .to_string(),
            ))
            .unwrap();
        let (status, _, body) = call(&cluster, finalize).await;
        assert_eq!(status, StatusCode::OK, "round {round}: {body}");
        let (status, _, _) = call(&cluster, get("/api/v1/namespaces/life", "application/json")).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "round {round}");
        let (status, _, body) = call(&cluster, create_cm(&format!("c{round}"))).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "round {round}: {body}");
    }
}

/// `pods/<name>/binding`: the pod gets its node and `PodScheduled=True`;
/// a binding naming another pod's UID, and a second binding, are refused.
#[tokio::test]
async fn binding_assigns_once_and_marks_the_pod_scheduled() {
    let cluster = TestCluster::start().await;
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    });
    let (status, _, created) =
        call(&cluster, post("/api/v1/namespaces/default/pods", "application/json", pod.to_string())).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let status_body = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}});
    let put = Request::put("/api/v1/namespaces/default/pods/p/status")
        .header("content-type", "application/json")
        .body(Body::from(status_body.to_string()))
        .unwrap();
    let (status, _, body) = call(&cluster, put).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let binding = |uid: &str| {
        json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p", "uid": uid}, "target": {"kind": "Node", "name": "n1"}})
            .to_string()
    };
    let uri = "/api/v1/namespaces/default/pods/p/binding";
    let (status, _, body) = call(&cluster, post(uri, "application/json", binding("not-the-uid"))).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body["message"].as_str().unwrap().contains("Precondition failed"), "{body}");
    let uid = created["metadata"]["uid"].as_str().unwrap();
    let (status, _, body) = call(&cluster, post(uri, "application/json", binding(uid))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (_, _, bound) = call(&cluster, get("/api/v1/namespaces/default/pods/p", "application/json")).await;
    assert_eq!(bound["spec"]["nodeName"], "n1");
    let conditions = bound["status"]["conditions"].as_array().unwrap();
    let scheduled: Vec<_> = conditions.iter().filter(|c| c["type"] == "PodScheduled").collect();
    assert_eq!(scheduled.len(), 1, "{conditions:?}");
    assert_eq!(scheduled[0]["status"], "True");
    assert!(scheduled[0].get("reason").is_none());
    let (status, _, body) = call(&cluster, post(uri, "application/json", binding(uid))).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body["message"].as_str().unwrap().contains("already assigned"), "{body}");
}

/// Lists and objects served as JSON (stored bytes with the resource version
/// spliced in, or decoded where the kind converts) hold what the decoding
/// path serves (the same as YAML), with selectors and pages.
#[tokio::test]
async fn json_lists_match_decoded_lists() {
    let cluster = TestCluster::start().await;
    for (i, labels) in [json!({"app": "web"}), json!({"app": "db", "tier": "x"}), json!(null), json!({"app": "web"})]
        .iter()
        .enumerate()
    {
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("c{i}"), "labels": labels, "annotations": {"a": "é \"q\""}},
            "data": {"k": format!("v{i}")}});
        let (status, _, body) =
            call(&cluster, post("/api/v1/namespaces/default/configmaps", "application/json", object.to_string())).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let (_, _, stored) =
            call(&cluster, get(&format!("/api/v1/namespaces/default/configmaps/c{i}"), "application/json")).await;
        assert_eq!(body, stored, "a create answers with the object as stored");
        assert_eq!(body["data"]["k"], format!("v{i}"));
    }
    let event = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e1"},
        "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "c", "reportingInstance": "i",
        "action": "A", "reason": "R", "regarding": {"kind": "Pod", "name": "p"}, "type": "Normal"});
    let (status, _, body) =
        call(&cluster, post("/apis/events.k8s.io/v1/namespaces/default/events", "application/json", event.to_string()))
            .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let yaml = |uri: &str| {
        let request = get(uri, "application/yaml");
        let router = cluster.admin_router();
        async move {
            let response = router.oneshot(request).await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            let bytes = response.into_body().collect().await.unwrap().to_bytes();
            serde_yaml::from_slice::<Value>(&bytes).unwrap()
        }
    };
    let queries = [
        "/api/v1/namespaces/default/configmaps",
        "/api/v1/configmaps?labelSelector=app%3Dweb",
        "/api/v1/namespaces/default/configmaps?labelSelector=app%21%3Dweb",
        "/api/v1/namespaces/default/configmaps?fieldSelector=metadata.name%3Dc1",
        "/api/v1/namespaces/default/configmaps?labelSelector=app&fieldSelector=metadata.name%21%3Dc0",
        "/api/v1/namespaces/default/configmaps?limit=3",
        "/api/v1/namespaces/default/events",
        "/apis/events.k8s.io/v1/namespaces/default/events",
    ];
    for uri in queries {
        let (status, content_type, json_list) = call(&cluster, get(uri, "application/json")).await;
        assert_eq!(status, StatusCode::OK, "{uri}: {json_list}");
        assert_eq!(content_type, "application/json");
        let mut decoded = yaml(uri).await;
        // A continue token names the revision; both lists were read at the same one.
        assert_eq!(json_list, decoded, "{uri}");
        if let Some(token) = json_list["metadata"]["continue"].as_str() {
            let next = format!("{uri}&continue={token}");
            let (_, _, page) = call(&cluster, get(&next, "application/json")).await;
            decoded = yaml(&next).await;
            assert_eq!(page, decoded, "{next}");
            assert_eq!(page["items"].as_array().unwrap().len(), 1, "{page}");
        }
    }
    let (_, _, all) = call(&cluster, get("/api/v1/namespaces/default/configmaps", "application/json")).await;
    let items = all["items"].as_array().unwrap();
    assert_eq!(items.len(), 4);
    for item in items {
        let name = item["metadata"]["name"].as_str().unwrap();
        let (_, _, one) =
            call(&cluster, get(&format!("/api/v1/namespaces/default/configmaps/{name}"), "application/json")).await;
        assert_eq!(item, &one, "a listed item is what a GET serves");
        let uri = format!("/api/v1/namespaces/default/configmaps/{name}");
        assert_eq!(one, yaml(&uri).await, "a GET as JSON serves what the decoding path does");
        assert_ne!(item["metadata"].get("labels"), Some(&Value::Null), "null labels are dropped");
        assert!(item["metadata"]["resourceVersion"].as_str().unwrap().parse::<u64>().unwrap() > 0);
    }
    for uri in ["/apis/events.k8s.io/v1/namespaces/default/events/e1", "/api/v1/namespaces/default/events/e1"] {
        let (status, _, event) = call(&cluster, get(uri, "application/json")).await;
        assert_eq!(status, StatusCode::OK, "{event}");
        assert_eq!(event, yaml(uri).await, "{uri}");
    }
    let (status, _, missing) =
        call(&cluster, get("/api/v1/namespaces/default/configmaps/nope", "application/json")).await;
    assert_eq!((status, missing["reason"].as_str()), (StatusCode::NOT_FOUND, Some("NotFound")));
    let (_, _, web) = call(&cluster, get("/api/v1/configmaps?labelSelector=app%3Dweb", "application/json")).await;
    assert_eq!(web["items"].as_array().unwrap().len(), 2, "{web}");
    assert_eq!(web["kind"], "ConfigMapList");
    assert_eq!(web["apiVersion"], "v1");
}
