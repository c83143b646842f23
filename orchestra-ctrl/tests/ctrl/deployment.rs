//! Deployments end to end: creation, scaling, rolling update, rollback.

use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use orchestra_ctrl::controllers::util::is_ready;
use orchestra_ctrl::informer::SharedInformerFactory;

use super::support::{self, eventually};

fn deployment(name: &str, replicas: i32, image: &str) -> Deployment {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": image}]}
            }
        }
    }))
    .unwrap()
}

async fn active_pods(api: &Api<Pod>, app: &str) -> Vec<Pod> {
    api.list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

async fn rolled_out(api: &Api<Deployment>, name: &str, replicas: i32) -> bool {
    let d = api.get(name).await.unwrap();
    let s = d.status.clone().unwrap_or_default();
    d.metadata.generation <= s.observed_generation
        && s.updated_replicas == Some(replicas)
        && s.replicas == Some(replicas)
        && s.available_replicas == Some(replicas)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deployment_creates_pods_and_scales() {
    let cluster = support::cluster(Duration::from_millis(10)).await;
    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    deployments.create(&PostParams::default(), &deployment("web", 3, "nginx:1")).await.unwrap();
    eventually(Duration::from_secs(10), "3 pods", || async {
        active_pods(&pods, "web").await.len() == 3 && rolled_out(&deployments, "web", 3).await
    })
    .await;
    let rs: Api<ReplicaSet> = Api::namespaced(cluster.client.clone(), "default");
    let sets = rs.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(sets.len(), 1);
    let annotations = sets[0].metadata.annotations.clone().unwrap();
    assert_eq!(annotations["deployment.kubernetes.io/revision"], "1");
    assert!(sets[0].metadata.labels.as_ref().unwrap().contains_key("pod-template-hash"));

    for replicas in [10, 3] {
        deployments
            .patch("web", &PatchParams::default(), &Patch::Merge(serde_json::json!({"spec": {"replicas": replicas}})))
            .await
            .unwrap();
        eventually(Duration::from_secs(10), "scaled", || async {
            active_pods(&pods, "web").await.len() == replicas as usize
                && rolled_out(&deployments, "web", replicas).await
        })
        .await;
    }
    // Nothing more is created once settled (expectations and status agree).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(active_pods(&pods, "web").await.len(), 3);
    // The ReplicaSet's events tell the story, as `kubectl describe rs` shows
    // it: 3 + 7 pods created, 7 deleted.
    let set_name = sets[0].metadata.name.clone().unwrap();
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(cluster.client.clone(), "default");
    let count = |events: &[k8s_openapi::api::core::v1::Event], reason: &str| {
        events
            .iter()
            .filter(|e| {
                e.reason.as_deref() == Some(reason) && e.involved_object.name.as_deref() == Some(set_name.as_str())
            })
            .count()
    };
    support::eventually_explained(Duration::from_secs(10), || async {
        let items = events.list(&ListParams::default()).await.unwrap().items;
        let (created, deleted) = (count(&items, "SuccessfulCreate"), count(&items, "SuccessfulDelete"));
        if (created, deleted) == (10, 7) {
            return Ok(());
        }
        let notes: Vec<_> = items.iter().map(|e| (e.reason.clone(), e.message.clone(), e.count)).collect();
        Err(format!(
            "the replica set's events: {created} SuccessfulCreate and {deleted} SuccessfulDelete, not 10 and 7; all events: {notes:?}"
        ))
    })
    .await;
    let items = events.list(&ListParams::default()).await.unwrap().items;
    let created = items.iter().find(|e| e.reason.as_deref() == Some("SuccessfulCreate")).unwrap();
    assert!(created.message.as_deref().unwrap_or("").starts_with("Created pod: "), "{created:?}");
    assert_eq!(created.involved_object.kind.as_deref(), Some("ReplicaSet"));
    // And the Deployment's, as `kubectl describe deployment` shows them.
    let expected = [
        format!("Scaled up replica set {set_name} from 0 to 3"),
        format!("Scaled up replica set {set_name} from 3 to 10"),
        format!("Scaled down replica set {set_name} from 10 to 3"),
    ];
    let scaling = || async {
        let mut notes: Vec<String> = events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| {
                e.reason.as_deref() == Some("ScalingReplicaSet")
                    && e.involved_object.kind.as_deref() == Some("Deployment")
            })
            .filter_map(|e| e.message)
            .collect();
        notes.sort();
        notes
    };
    eventually(Duration::from_secs(10), "the deployment's events", || async { scaling().await.len() >= 3 }).await;
    let mut expected = expected.to_vec();
    expected.sort();
    assert_eq!(scaling().await, expected);
}

/// `spec.replicas` of the ReplicaSets of Deployment `app`, by image.
async fn sizes_by_image(api: &Api<ReplicaSet>, app: &str) -> Vec<(String, i32)> {
    let mut sizes: Vec<(String, i32)> = api
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|rs| {
            let spec = rs.spec.unwrap_or_default();
            let image =
                spec.template.and_then(|t| t.spec).and_then(|s| s.containers[0].image.clone()).unwrap_or_default();
            (image, spec.replicas.unwrap_or(0))
        })
        .collect();
    sizes.sort();
    sizes
}

/// Scaled in the middle of a stuck rollout, a Deployment spreads the new
/// replicas over its old and new ReplicaSets in proportion (upstream's
/// documented example: 10 → 20 replicas with maxSurge 3 and
/// maxUnavailable 2, old at 8 and new at 5 → 14 and 9).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scaling_during_a_rollout_is_proportional() {
    let cluster = support::cluster(Duration::from_millis(10)).await;
    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), "default");
    let sets: Api<ReplicaSet> = Api::namespaced(cluster.client.clone(), "default");
    let mut d = deployment("prop", 10, "nginx:1");
    d.spec.as_mut().unwrap().strategy = serde_json::from_value(
        serde_json::json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 3, "maxUnavailable": 2}}),
    )
    .unwrap();
    deployments.create(&PostParams::default(), &d).await.unwrap();
    eventually(Duration::from_secs(15), "10 available", || async { rolled_out(&deployments, "prop", 10).await }).await;
    let image =
        serde_json::json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "stuck:2"}]}}}});
    deployments.patch("prop", &PatchParams::default(), &Patch::Strategic(image)).await.unwrap();
    let stalled = vec![("nginx:1".to_owned(), 8), ("stuck:2".to_owned(), 5)];
    eventually(Duration::from_secs(15), "the rollout stalls at 8 + 5", || async {
        sizes_by_image(&sets, "prop").await == stalled
    })
    .await;
    let scale = serde_json::json!({"spec": {"replicas": 20}});
    deployments.patch("prop", &PatchParams::default(), &Patch::Merge(scale)).await.unwrap();
    let proportional = vec![("nginx:1".to_owned(), 14), ("stuck:2".to_owned(), 9)];
    eventually(Duration::from_secs(15), "14 + 9", || async { sizes_by_image(&sets, "prop").await == proportional })
        .await;
    // And it stays there: the rollout cannot go on without available pods.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(sizes_by_image(&sets, "prop").await, proportional);
}

/// A ReplicaSet without a controller that the selector matches is adopted
/// (and, with another template, scaled down as an old one).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deployment_adopts_orphan_replica_sets() {
    let cluster = support::cluster(Duration::from_millis(10)).await;
    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), "default");
    let sets: Api<ReplicaSet> = Api::namespaced(cluster.client.clone(), "default");
    let legacy: ReplicaSet = serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "legacy", "namespace": "default", "labels": {"app": "adopt"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "adopt"}},
            "template": {"metadata": {"labels": {"app": "adopt"}}, "spec": {"containers": [{"name": "c", "image": "nginx:0"}]}}
        }
    }))
    .unwrap();
    sets.create(&PostParams::default(), &legacy).await.unwrap();
    let created = deployments.create(&PostParams::default(), &deployment("adopt", 3, "nginx:1")).await.unwrap();
    let uid = created.metadata.uid.clone().unwrap();
    eventually(Duration::from_secs(15), "legacy adopted and scaled down", || async {
        let rs = sets.get("legacy").await.unwrap();
        let adopted = rs.metadata.owner_references.iter().flatten().any(|r| r.uid == uid && r.controller == Some(true));
        adopted && rs.spec.and_then(|s| s.replicas) == Some(0) && rolled_out(&deployments, "adopt", 3).await
    })
    .await;
    assert_eq!(sizes_by_image(&sets, "adopt").await, vec![("nginx:0".to_owned(), 0), ("nginx:1".to_owned(), 3)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rolling_update_keeps_availability_and_rolls_back() {
    let cluster = support::cluster(Duration::from_millis(50)).await;
    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    deployments.create(&PostParams::default(), &deployment("app", 4, "nginx:1")).await.unwrap();
    eventually(Duration::from_secs(10), "rolled out", || async { rolled_out(&deployments, "app", 4).await }).await;

    // Watch every pod change and record the fewest ready pods ever seen.
    let watcher = SharedInformerFactory::new(cluster.client.clone());
    let informer = watcher.informer::<Pod>();
    informer.wait_synced().await;
    let min_ready = Arc::new(AtomicI32::new(i32::MAX));
    let observations = Arc::new(AtomicUsize::new(0));
    let mut rx = informer.subscribe();
    let observer = {
        let (informer, min_ready, observations) = (informer.clone(), min_ready.clone(), observations.clone());
        tokio::spawn(async move {
            while rx.recv().await.is_some() {
                let ready = informer
                    .by_label("app", "app")
                    .iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none() && is_ready(p))
                    .count() as i32;
                min_ready.fetch_min(ready, Ordering::SeqCst);
                observations.fetch_add(1, Ordering::SeqCst);
            }
        })
    };

    deployments
        .patch(
            "app",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx:2"}]}}}})),
        )
        .await
        .unwrap();
    eventually(Duration::from_secs(15), "updated", || async {
        rolled_out(&deployments, "app", 4).await
            && active_pods(&pods, "app")
                .await
                .iter()
                .all(|p| p.spec.as_ref().unwrap().containers[0].image.as_deref() == Some("nginx:2"))
            && active_pods(&pods, "app").await.len() == 4
    })
    .await;
    observer.abort();
    let seen = min_ready.load(Ordering::SeqCst);
    assert!(observations.load(Ordering::SeqCst) > 8);
    assert!(seen >= 3, "ready pods fell to {seen} (maxUnavailable 1 of 4)");

    let d = deployments.get("app").await.unwrap();
    assert_eq!(d.metadata.annotations.unwrap()["deployment.kubernetes.io/revision"], "2");

    // Rollback the way `kubectl rollout undo` does: the old template back.
    let rs: Api<ReplicaSet> = Api::namespaced(cluster.client.clone(), "default");
    let sets = rs.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(sets.len(), 2);
    let first = sets
        .iter()
        .find(|r| r.metadata.annotations.as_ref().unwrap()["deployment.kubernetes.io/revision"] == "1")
        .unwrap();
    let mut template = first.spec.clone().unwrap().template.unwrap();
    template.metadata.as_mut().unwrap().labels.as_mut().unwrap().remove("pod-template-hash");
    deployments
        .patch("app", &PatchParams::default(), &Patch::Merge(serde_json::json!({"spec": {"template": template}})))
        .await
        .unwrap();
    eventually(Duration::from_secs(15), "rolled back", || async {
        rolled_out(&deployments, "app", 4).await
            && active_pods(&pods, "app")
                .await
                .iter()
                .all(|p| p.spec.as_ref().unwrap().containers[0].image.as_deref() == Some("nginx:1"))
    })
    .await;
    let sets = rs.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(sets.len(), 2, "the old ReplicaSet is reused");
    let back = sets.iter().find(|r| r.metadata.name == first.metadata.name).unwrap();
    assert_eq!(back.metadata.annotations.as_ref().unwrap()["deployment.kubernetes.io/revision"], "3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replication_controller_adopts_orphans_and_releases_relabelled_pods() {
    use k8s_openapi::api::core::v1::ReplicationController;
    let cluster = support::cluster(Duration::from_millis(10)).await;
    let client = cluster.client.clone();
    let stop = Arc::new(tokio::sync::Notify::new());
    let task = tokio::spawn({
        let factory = SharedInformerFactory::new(client.clone());
        let stop = stop.clone();
        orchestra_ctrl::controllers::replicaset::run_replication_controllers(factory, 2, async move {
            stop.notified().await
        })
    });
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let orphan: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "orphan", "labels": {"app": "rc"}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &orphan).await.unwrap();
    let rcs: Api<ReplicationController> = Api::namespaced(client.clone(), "default");
    let rc: ReplicationController = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ReplicationController",
        "metadata": {"name": "rc"},
        "spec": {"replicas": 3, "selector": {"app": "rc"},
                 "template": {"metadata": {"labels": {"app": "rc"}},
                              "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}
    }))
    .unwrap();
    rcs.create(&PostParams::default(), &rc).await.unwrap();
    eventually(Duration::from_secs(10), "3 pods, orphan adopted", || async {
        let list = active_pods(&pods, "rc").await;
        let owned = list.iter().filter(|p| {
            p.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|r| r.kind == "ReplicationController" && r.controller == Some(true))
        });
        list.len() == 3
            && owned.count() == 3
            && rcs.get("rc").await.unwrap().status.is_some_and(|s| s.ready_replicas == Some(3))
    })
    .await;
    // Relabelled: released and replaced.
    pods.patch(
        "orphan",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"labels": {"app": "other"}}})),
    )
    .await
    .unwrap();
    eventually(Duration::from_secs(10), "released and replaced", || async {
        let released = pods.get("orphan").await.unwrap().metadata.owner_references.unwrap_or_default().is_empty();
        released && active_pods(&pods, "rc").await.len() == 3
    })
    .await;
    stop.notify_one();
    let _ = task.await;
}
