//! `pods/eviction` with PodDisruptionBudgets: kube-rs, raw HTTP and `kubectl drain`.

use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, EvictParams, Patch, PatchParams, PostParams};
use orchestra::testing::TestCluster;
use serde_json::{Value, json};
use tower::ServiceExt;

/// A running, ready pod labelled `app=web` (optionally bound to a node).
async fn running_pod(pods: &Api<Pod>, name: &str, node: Option<&str>) -> Pod {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    });
    if let Some(node) = node {
        pod["spec"]["nodeName"] = node.into();
        pod["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-rs",
            "uid": "00000000-0000-0000-0000-000000000001", "controller": true,
        }]);
    }
    pods.create(&PostParams::default(), &serde_json::from_value(pod).unwrap()).await.unwrap();
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})),
    )
    .await
    .unwrap()
}

fn budget(spec: Value) -> PodDisruptionBudget {
    let mut spec = spec;
    spec["selector"] = json!({"matchLabels": {"app": "web"}});
    serde_json::from_value(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web"},
        "spec": spec,
    }))
    .unwrap()
}

fn status_of(err: kube::Error) -> kube::core::Status {
    match err {
        kube::Error::Api(status) => *status,
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evictions_respect_disruption_budgets() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let budgets: Api<PodDisruptionBudget> = Api::default_namespaced(client.clone());
    for name in ["p1", "p2", "p3"] {
        running_pod(&pods, name, None).await;
    }
    budgets.create(&PostParams::default(), &budget(json!({"minAvailable": 2}))).await.unwrap();

    // 3 healthy, 2 needed: one eviction is allowed (computed from live pods).
    let status = pods.evict("p1", &EvictParams::default()).await.unwrap();
    assert_eq!(status.status, Some(kube::core::response::StatusSummary::Success));
    assert!(matches!(pods.get("p1").await, Err(kube::Error::Api(s)) if s.code == 404));

    // 2 healthy, 2 needed: blocked with upstream's 429.
    let status = status_of(pods.evict("p2", &EvictParams::default()).await.unwrap_err());
    assert_eq!((status.code, status.reason.as_str()), (429, "TooManyRequests"));
    assert_eq!(status.message, "Cannot evict pod as it would violate the pod's disruption budget.");
    let cause = &status.details.unwrap().causes[0];
    assert_eq!(cause.reason, "DisruptionBudget");
    assert_eq!(cause.message, "The disruption budget web needs 2 healthy pods and has 2 currently");
    assert!(pods.get("p2").await.is_ok());

    // Pending pods are evictable whatever the budget says.
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "p4", "labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}})).unwrap(),
    )
    .await
    .unwrap();
    pods.evict("p4", &EvictParams::default()).await.unwrap();

    // A maintained status is respected and charged.
    budgets
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"observedGeneration": 1, "disruptionsAllowed": 1, "currentHealthy": 3, "desiredHealthy": 2, "expectedPods": 3}})),
        )
        .await
        .unwrap();
    pods.evict("p2", &EvictParams::default()).await.unwrap();
    let charged = budgets.get("web").await.unwrap().status.unwrap();
    assert_eq!(charged.disruptions_allowed, 0);
    assert!(charged.disrupted_pods.unwrap().contains_key("p2"));
    let status = status_of(pods.evict("p3", &EvictParams::default()).await.unwrap_err());
    assert_eq!(status.code, 429);

    budgets.delete("web", &DeleteParams::default()).await.unwrap();

    // Two budgets for one pod: upstream's 500.
    budgets.create(&PostParams::default(), &budget(json!({"maxUnavailable": 1}))).await.unwrap();
    let mut second = budget(json!({"maxUnavailable": 1}));
    second.metadata.name = Some("web-2".into());
    budgets.create(&PostParams::default(), &second).await.unwrap();
    let status = status_of(pods.evict("p3", &EvictParams::default()).await.unwrap_err());
    assert_eq!(status.code, 500);
    assert!(status.message.contains("This pod has more than one PodDisruptionBudget"), "{}", status.message);
    // With a budget charged, a conflicting delete is a 429 (upstream), so
    // the precondition below is checked without budgets.
    budgets.delete("web-2", &DeleteParams::default()).await.unwrap();
    budgets.delete("web", &DeleteParams::default()).await.unwrap();

    // Over raw HTTP (kube-rs sends its delete options as `delete_options`,
    // which the API ignores): a failed precondition is a conflict.
    let evict = |body: Value| {
        http::Request::post("/api/v1/namespaces/default/pods/p3/eviction")
            .header("content-type", "application/json")
            .body(axum::body::Body::from(body.to_string()))
            .unwrap()
    };
    let response = cluster
        .admin_router()
        .oneshot(evict(json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p3"}, "deleteOptions": {"preconditions": {"uid": "not-the-uid"}}})))
        .await
        .unwrap();
    assert_eq!(response.status(), 409);
    // A policy/v1beta1 body.
    let response = cluster
        .admin_router()
        .oneshot(evict(json!({"apiVersion": "policy/v1beta1", "kind": "Eviction", "metadata": {"name": "p3", "namespace": "default"}, "deleteOptions": {"gracePeriodSeconds": 0}})))
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let body: Value = serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(body["status"], "Success");
    assert!(matches!(pods.get("p3").await, Err(kube::Error::Api(s)) if s.code == 404));

    // A pod on a node is deleted gracefully and marked as a disruption target.
    running_pod(&pods, "bound", Some("n9")).await;
    pods.evict("bound", &EvictParams::default()).await.unwrap();
    let bound = pods.get("bound").await.unwrap();
    assert!(bound.metadata.deletion_timestamp.is_some());
    let conditions = bound.status.unwrap().conditions.unwrap();
    let target = conditions.iter().find(|c| c.type_ == "DisruptionTarget").unwrap();
    assert_eq!((target.status.as_str(), target.reason.as_deref()), ("True", Some("EvictionByEvictionAPI")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_drain_evicts_pods_of_a_node() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "n1"}})).unwrap())
        .await
        .unwrap();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    running_pod(&pods, "web-1", Some("n1")).await;
    running_pod(&pods, "elsewhere", Some("n2")).await;
    let kubectl = cluster.kubectl().await.clone();
    let budgets: Api<PodDisruptionBudget> = Api::default_namespaced(client.clone());
    budgets.create(&PostParams::default(), &budget(json!({"minAvailable": 2}))).await.unwrap();
    let blocked = kubectl.clone();
    tokio::task::spawn_blocking(move || {
        let (ok, out, err) =
            blocked.run(&["drain", "n1", "--ignore-daemonsets", "--timeout=2s", "--grace-period=0"]).into_parts();
        assert!(!ok, "{out}");
        assert!(err.contains("Cannot evict pod as it would violate the pod's disruption budget."), "{out}\n{err}");
    })
    .await
    .unwrap();
    budgets.delete("web", &DeleteParams::default()).await.unwrap();
    tokio::task::spawn_blocking(move || {
        // No kubelet runs here: a graceful delete would wait for one forever,
        // so the drain asks for an immediate one.
        let (ok, out, err) = kubectl
            .run(&["drain", "n1", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=20s", "--grace-period=0"])
            .into_parts();
        assert!(ok, "{out}\n{err}");
        assert!(out.contains("pod/web-1 evicted") && out.contains("node/n1 drained"), "{out}\n{err}");
    })
    .await
    .unwrap();
    assert!(matches!(pods.get("web-1").await, Err(kube::Error::Api(s)) if s.code == 404));
    assert!(pods.get("elsewhere").await.is_ok());
    assert_eq!(nodes.get("n1").await.unwrap().spec.unwrap().unschedulable, Some(true));
}
