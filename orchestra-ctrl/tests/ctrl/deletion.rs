//! Garbage collection and namespace deletion end to end.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use orchestra::testing::TestCluster;
use parking_lot::Mutex;

use super::support::{self, eventually};

fn deployment(namespace: &str, name: &str, replicas: i32) -> Deployment {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}
            }
        }
    }))
    .unwrap()
}

async fn count_pods(api: &Api<Pod>) -> usize {
    api.list(&ListParams::default()).await.unwrap().items.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn background_deletion_removes_replica_sets_and_pods() {
    let cluster = support::cluster(Duration::from_millis(10)).await;
    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    let sets: Api<ReplicaSet> = Api::namespaced(cluster.client.clone(), "default");
    deployments.create(&PostParams::default(), &deployment("default", "bg", 3)).await.unwrap();
    eventually(Duration::from_secs(10), "3 pods", || async { count_pods(&pods).await == 3 }).await;
    deployments.delete("bg", &DeleteParams::background()).await.unwrap();
    eventually(Duration::from_secs(10), "all gone", || async {
        count_pods(&pods).await == 0 && sets.list(&ListParams::default()).await.unwrap().items.is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn orphan_deletion_keeps_the_dependents_unowned() {
    let cluster = support::cluster(Duration::from_millis(10)).await;
    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), "default");
    let sets: Api<ReplicaSet> = Api::namespaced(cluster.client.clone(), "default");
    deployments.create(&PostParams::default(), &deployment("default", "keep", 2)).await.unwrap();
    eventually(Duration::from_secs(10), "a replica set", || async {
        sets.list(&ListParams::default()).await.unwrap().items.len() == 1
    })
    .await;
    deployments.delete("keep", &DeleteParams::orphan()).await.unwrap();
    eventually(Duration::from_secs(10), "the deployment gone, its replica set released", || async {
        let set = &sets.list(&ListParams::default()).await.unwrap().items;
        deployments.get_opt("keep").await.unwrap().is_none()
            && set.len() == 1
            && set[0].metadata.owner_references.as_ref().is_none_or(|r| r.is_empty())
    })
    .await;
    // Released, the replica set stays (and keeps its pods).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(sets.list(&ListParams::default()).await.unwrap().items.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn foreground_deletion_removes_dependents_first() {
    let cluster = support::cluster(Duration::from_millis(10)).await;
    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    deployments.create(&PostParams::default(), &deployment("default", "fg", 3)).await.unwrap();
    eventually(Duration::from_secs(10), "3 pods", || async { count_pods(&pods).await == 3 }).await;

    // Deletes ordered by the store's revision, which each DELETED watch
    // event carries as the object's resourceVersion (not by when separate
    // watches happened to deliver them).
    let order: Arc<Mutex<Vec<(&'static str, i64)>>> = Arc::default();
    let mut tasks = Vec::new();
    macro_rules! record {
        ($kind:ty, $label:expr) => {{
            let api: Api<$kind> = Api::namespaced(cluster.client.clone(), "default");
            let order = order.clone();
            let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
            tasks.push(tokio::spawn(async move {
                let mut ready = Some(ready_tx);
                let mut events = kube::runtime::watcher(api, kube::runtime::watcher::Config::default()).boxed();
                while let Some(e) = events.next().await {
                    match e {
                        Ok(kube::runtime::watcher::Event::InitDone) => {
                            if let Some(r) = ready.take() {
                                let _ = r.send(());
                            }
                        }
                        Ok(kube::runtime::watcher::Event::Delete(o)) => {
                            let revision =
                                o.metadata.resource_version.as_deref().and_then(|r| r.parse().ok()).unwrap_or(0);
                            order.lock().push(($label, revision));
                        }
                        _ => {}
                    }
                }
            }));
            ready_rx.await.unwrap();
        }};
    }
    record!(Pod, "pod");
    record!(ReplicaSet, "replicaset");
    record!(Deployment, "deployment");

    let marked = deployments.delete("fg", &DeleteParams::foreground()).await.unwrap().left().expect("marked, not gone");
    let started: i64 = marked.metadata.resource_version.unwrap().parse().unwrap();
    // The owner stays, marked, while its dependents go.
    let d = deployments.get("fg").await.unwrap();
    assert!(d.metadata.finalizers.unwrap().contains(&"foregroundDeletion".to_string()));
    eventually(Duration::from_secs(10), "deployment gone", || async {
        deployments.get_opt("fg").await.unwrap().is_none()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Only what the cascade deleted (a pod replaced earlier does not count).
    let order: Vec<(&str, i64)> = order.lock().iter().filter(|(_, r)| *r > started).cloned().collect();
    let last = |k: &str| order.iter().filter(|(l, _)| *l == k).map(|(_, t)| *t).max().unwrap();
    let first = |k: &str| order.iter().filter(|(l, _)| *l == k).map(|(_, t)| *t).min().unwrap();
    // The three pods go; a replacement that the ReplicaSet controller made
    // before its cache showed the ReplicaSet's own deletion goes too (as
    // upstream, where a stale cache can do the same), and still before the
    // ReplicaSet.
    assert!(order.iter().filter(|(l, _)| *l == "pod").count() >= 3, "{order:?}");
    assert!(last("pod") <= first("replicaset"), "pods before their ReplicaSet");
    assert!(last("replicaset") <= first("deployment"), "ReplicaSet before its Deployment");
    for t in tasks {
        t.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn namespace_deletion_empties_it() {
    let cluster = support::cluster(Duration::from_millis(10)).await;
    let namespaces: Api<Namespace> = Api::all(cluster.client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta { name: Some("doomed".into()), ..Default::default() },
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), "doomed");
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "doomed");
    let maps: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "doomed");
    deployments.create(&PostParams::default(), &deployment("doomed", "web", 2)).await.unwrap();
    maps.create(
        &PostParams::default(),
        &ConfigMap {
            metadata: ObjectMeta {
                name: Some("settings".into()),
                finalizers: Some(vec!["example.com/hold".into()]),
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .await
    .unwrap();
    eventually(Duration::from_secs(10), "2 pods", || async { count_pods(&pods).await == 2 }).await;
    namespaces.delete("doomed", &DeleteParams::default()).await.unwrap();
    eventually(Duration::from_secs(10), "emptied but held", || async {
        count_pods(&pods).await == 0 && deployments.list(&ListParams::default()).await.unwrap().items.is_empty()
    })
    .await;
    // The config map's finalizer holds the namespace.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let ns = namespaces.get("doomed").await.unwrap();
    assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Terminating"));
    let patch = serde_json::json!({"metadata": {"finalizers": null}});
    maps.patch("settings", &Default::default(), &kube::api::Patch::Merge(&patch)).await.unwrap();
    eventually(Duration::from_secs(10), "namespace gone", || async {
        namespaces.get_opt("doomed").await.unwrap().is_none()
    })
    .await;
}

/// A cluster, a client of it, its ConfigMaps in `default`, and there the
/// ConfigMap `owner` with `finalizer`, whose UID comes last.
async fn cluster_with_owner(finalizer: &str) -> (TestCluster, kube::Client, Api<ConfigMap>, String) {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let owner = ConfigMap {
        metadata: ObjectMeta {
            name: Some("owner".into()),
            finalizers: Some(vec![finalizer.into()]),
            ..Default::default()
        },
        ..Default::default()
    };
    let uid = maps.create(&PostParams::default(), &owner).await.unwrap().metadata.uid.unwrap();
    (cluster, client, maps, uid)
}

/// A ConfigMap `name` owned by the ConfigMap whose UID is `owner`.
fn owned_map(name: &str, owner: &str, block: Option<bool>) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            owner_references: Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                name: "owner".into(),
                uid: owner.into(),
                block_owner_deletion: block,
                ..Default::default()
            }]),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The garbage collector's kinds, and its node for a ConfigMap.
async fn collector_view(
    client: &kube::Client,
) -> (
    orchestra_ctrl::controllers::garbage_collector::Kinds,
    impl Fn(&ConfigMap) -> orchestra_ctrl::controllers::garbage_collector::Node,
) {
    use orchestra_ctrl::controllers::discovery::deletable;
    use orchestra_ctrl::controllers::garbage_collector::{Node, kinds};
    let resources: Vec<_> = deletable(client).await.unwrap().into_iter().filter(|r| r.watchable).collect();
    let configmaps =
        resources.iter().find(|r| r.resource.plural == "configmaps" && r.resource.group.is_empty()).unwrap().clone();
    let node = move |object: &ConfigMap| Node {
        object: kube::api::DynamicObject {
            types: None,
            metadata: object.metadata.clone(),
            data: serde_json::Value::Null,
        },
        resource: configmaps.clone(),
    };
    (kinds(&resources), node)
}

/// The graph can learn of an owner's orphaning deletion before its
/// dependents' watch delivers them. The `orphan` finalizer must then stay
/// until they are released, or they would be left owned by a deleted object
/// and collected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphaning_waits_for_dependents_the_graph_has_not_seen() {
    use orchestra_ctrl::controllers::garbage_collector::{Graph, ORPHAN, apply};

    let (_cluster, client, maps, owner_uid) = cluster_with_owner(ORPHAN).await;
    let dependent = maps.create(&PostParams::default(), &owned_map("dependent", &owner_uid, None)).await.unwrap();
    maps.delete("owner", &DeleteParams::default()).await.unwrap();

    let (kinds, node) = collector_view(&client).await;
    let deleting = maps.get("owner").await.unwrap();
    assert!(deleting.metadata.deletion_timestamp.is_some());

    // The graph has the deleting owner only: it would remove the finalizer at once.
    let mut graph = Graph::of([node(&deleting)]);
    let plan = graph.plan();
    assert_eq!(plan.finalize, [(owner_uid.clone(), ORPHAN.to_owned())]);
    // The API server still holds a dependent: the finalizer stays, the owner is tried again.
    assert_eq!(apply(&client, &graph, &kinds, &plan).await, std::slice::from_ref(&owner_uid));
    assert_eq!(maps.get("owner").await.unwrap().metadata.finalizers, Some(vec![ORPHAN.to_owned()]));

    // Once the graph has the dependent: it is released, then the owner goes.
    graph.upsert(node(&dependent));
    let plan = graph.plan();
    assert!(plan.finalize.is_empty());
    assert!(apply(&client, &graph, &kinds, &plan).await.is_empty());
    let released = maps.get("dependent").await.unwrap();
    assert!(released.metadata.owner_references.as_ref().is_none_or(|r| r.is_empty()));
    graph.upsert(node(&released));
    let plan = graph.plan();
    assert_eq!(plan.finalize, [(owner_uid.clone(), ORPHAN.to_owned())]);
    assert!(apply(&client, &graph, &kinds, &plan).await.is_empty());
    assert!(maps.get_opt("owner").await.unwrap().is_none());
    assert!(maps.get_opt("dependent").await.unwrap().is_some());
}

/// Likewise in the foreground: a dependent that blocks its owner's deletion
/// and that the graph has not seen yet (a pod a ReplicaSet controller made
/// from a stale cache while the cascade ran) keeps `foregroundDeletion` on
/// the owner; one that does not block does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreground_deletion_waits_for_blocking_dependents_the_graph_has_not_seen() {
    use orchestra_ctrl::controllers::garbage_collector::{FOREGROUND, Graph, apply};

    let (_cluster, client, maps, owner_uid) = cluster_with_owner(FOREGROUND).await;
    maps.create(&PostParams::default(), &owned_map("blocker", &owner_uid, Some(true))).await.unwrap();
    maps.create(&PostParams::default(), &owned_map("loose", &owner_uid, Some(false))).await.unwrap();
    maps.delete("owner", &DeleteParams::default()).await.unwrap();

    let (kinds, node) = collector_view(&client).await;
    // The graph has the deleting owner only: it would remove the finalizer at once.
    let graph = Graph::of([node(&maps.get("owner").await.unwrap())]);
    let plan = graph.plan();
    assert_eq!(plan.finalize, [(owner_uid.clone(), FOREGROUND.to_owned())]);
    // The blocking dependent keeps it; the owner is tried again.
    assert_eq!(apply(&client, &graph, &kinds, &plan).await, std::slice::from_ref(&owner_uid));
    assert_eq!(maps.get("owner").await.unwrap().metadata.finalizers, Some(vec![FOREGROUND.to_owned()]));
    // Without it, the dependent that does not block does not hold the owner.
    maps.delete("blocker", &DeleteParams::default()).await.unwrap();
    assert!(apply(&client, &graph, &kinds, &plan).await.is_empty());
    assert!(maps.get_opt("owner").await.unwrap().is_none());
}
