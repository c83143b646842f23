//! The installed kubectl's `rollout status` and `rollout undo` against the
//! Deployment controller.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};

use super::support::{self, eventually};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kubectl_rollout_status_and_undo() {
    let cluster = support::cluster(Duration::from_millis(30)).await;
    let kubectl = cluster.inner.kubectl().await;
    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), "default");
    let d: Deployment = serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}}
        }
    }))
    .unwrap();
    deployments.create(&PostParams::default(), &d).await.unwrap();
    let k = kubectl.clone();
    let (ok, out, err) = tokio::task::spawn_blocking(move || {
        k.run(&["rollout", "status", "deployment/web", "--timeout=20s"]).into_parts()
    })
    .await
    .unwrap();
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("successfully rolled out"), "{out}");

    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({
                "metadata": {"annotations": {"kubernetes.io/change-cause": "image nginx:2"}},
                "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx:2"}]}}},
            })),
        )
        .await
        .unwrap();
    let k = kubectl.clone();
    let (ok, out, err) = tokio::task::spawn_blocking(move || {
        let status = k.run(&["rollout", "status", "deployment/web", "--timeout=20s"]);
        assert!(status.success, "{}\n{}", status.stdout, status.stderr);
        k.run(&["rollout", "undo", "deployment/web"]).into_parts()
    })
    .await
    .unwrap();
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("rolled back"), "{out}");
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    eventually(Duration::from_secs(15), "back on nginx:1", || async {
        let items = pods.list(&ListParams::default().labels("app=web")).await.unwrap().items;
        let live: Vec<_> = items.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
        live.len() == 3
            && live.iter().all(|p| p.spec.as_ref().unwrap().containers[0].image.as_deref() == Some("nginx:1"))
    })
    .await;
    let k = kubectl.clone();
    let (ok, out, err) = tokio::task::spawn_blocking(move || {
        let status = k.run(&["rollout", "status", "deployment/web", "--timeout=20s"]);
        assert!(status.success, "{}\n{}", status.stdout, status.stderr);
        k.run(&["rollout", "history", "deployment/web"]).into_parts()
    })
    .await
    .unwrap();
    assert!(ok, "{out}\n{err}");
    assert!(out.contains('2') && out.contains('3'), "{out}");
    // The CHANGE-CAUSE of revision 2, from its ReplicaSet.
    assert!(out.lines().any(|l| l.starts_with('2') && l.contains("image nginx:2")), "{out}");
    // kubectl describe shows the Deployment's scaling events.
    let k = kubectl.clone();
    let (ok, out, err) =
        tokio::task::spawn_blocking(move || k.run(&["describe", "deployment", "web"]).into_parts()).await.unwrap();
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("ScalingReplicaSet") && out.contains("Scaled up replica set web-"), "{out}");
}
