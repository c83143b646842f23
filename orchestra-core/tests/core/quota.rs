//! ResourceQuota admission in a server built by hand: charges survive
//! concurrent creates, refusals carry upstream's messages, dry runs charge
//! nothing.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, ResourceQuota};
use kube::api::{Api, ListParams, PostParams};
use orchestra_core::auth::admission::AdmissionChain;
use orchestra_core::server::ApiServer;
use orchestra_store::MemStore;
use serde_json::{Value, json};

/// A server whose admission chain is NamespaceLifecycle then ResourceQuota,
/// and a client of it.
async fn server() -> (ApiServer, kube::Client) {
    let builder = ApiServer::builder(Arc::new(MemStore::new()));
    let admission = AdmissionChain::new().with(builder.namespace_lifecycle()).with(builder.resource_quota());
    let server = builder.admission(admission).build().await.expect("the server starts");
    let client = orchestra_core::client::in_process(&server, "default");
    (server, client)
}

/// Creates quota `q` in `default` with `hard`, and the status the quota
/// controller would give it: nothing used.
async fn quota(client: &kube::Client, hard: Value) -> Api<ResourceQuota> {
    let api: Api<ResourceQuota> = Api::namespaced(client.clone(), "default");
    let quota = serde_json::from_value(json!({"metadata": {"name": "q"}, "spec": {"hard": hard}})).unwrap();
    let mut created = api.create(&PostParams::default(), &quota).await.expect("creates the quota");
    let zero: serde_json::Map<String, Value> =
        hard.as_object().unwrap().keys().map(|k| (k.clone(), json!("0"))).collect();
    created.status = Some(serde_json::from_value(json!({"hard": hard, "used": zero})).unwrap());
    api.replace_status("q", &PostParams::default(), &created).await.expect("writes its status");
    api
}

fn pod(name: &str, resources: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "app", "image": "busybox", "resources": resources}]},
    }))
    .unwrap()
}

async fn used(api: &Api<ResourceQuota>) -> Value {
    serde_json::to_value(api.get("q").await.unwrap().status.unwrap().used).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_creates_never_exceed_the_quota() {
    let (_server, client) = server().await;
    let quotas = quota(&client, json!({"pods": "10"})).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let creates = (0..50).map(|i| {
        let pods = pods.clone();
        tokio::spawn(async move { pods.create(&PostParams::default(), &pod(&format!("p-{i}"), json!({}))).await })
    });
    let results = futures::future::join_all(creates).await;
    let mut created = 0;
    for result in results {
        match result.expect("the task runs") {
            Ok(_) => created += 1,
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 403, "{status:?}");
                let name = status.message.split('"').nth(1).unwrap_or_default().to_owned();
                assert_eq!(
                    status.message,
                    format!(
                        "pods \"{name}\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=10, limited: pods=10"
                    )
                );
            }
            Err(other) => panic!("unexpected error: {other}"),
        }
    }
    assert_eq!(created, 10);
    assert_eq!(pods.list(&ListParams::default()).await.unwrap().items.len(), 10);
    assert_eq!(used(&quotas).await, json!({"pods": "10"}));
}

#[tokio::test]
async fn refusals_and_dry_runs() {
    let (_server, client) = server().await;
    let quotas = quota(&client, json!({"pods": "5", "limits.cpu": "1", "configmaps": "1"})).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let error = pods.create(&PostParams::default(), &pod("bare", json!({}))).await.unwrap_err();
    let kube::Error::Api(status) = error else { panic!("{error}") };
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    assert_eq!(status.message, "pods \"bare\" is forbidden: failed quota: q: must specify limits.cpu for: app");
    let sized = pod("sized", json!({"limits": {"cpu": "600m"}}));
    let dry_run = PostParams { dry_run: true, ..Default::default() };
    pods.create(&dry_run, &sized).await.expect("a dry run is admitted");
    assert_eq!(used(&quotas).await, json!({"pods": "0", "limits.cpu": "0", "configmaps": "0"}));
    pods.create(&PostParams::default(), &sized).await.expect("within quota");
    assert_eq!(used(&quotas).await, json!({"pods": "1", "limits.cpu": "600m", "configmaps": "0"}));
    let error =
        pods.create(&PostParams::default(), &pod("more", json!({"limits": {"cpu": "500m"}}))).await.unwrap_err();
    let kube::Error::Api(status) = error else { panic!("{error}") };
    assert_eq!(
        status.message,
        "pods \"more\" is forbidden: exceeded quota: q, requested: limits.cpu=500m, used: limits.cpu=600m, limited: limits.cpu=1"
    );
    let config_maps: Api<ConfigMap> = Api::namespaced(client, "default");
    let config_map = |name: &str| serde_json::from_value::<ConfigMap>(json!({"metadata": {"name": name}})).unwrap();
    config_maps.create(&PostParams::default(), &config_map("one")).await.expect("within quota");
    let error = config_maps.create(&PostParams::default(), &config_map("two")).await.unwrap_err();
    assert!(matches!(error, kube::Error::Api(ref s) if s.code == 403), "{error}");
    assert_eq!(used(&quotas).await, json!({"pods": "1", "limits.cpu": "600m", "configmaps": "1"}));
}
