//! The installed kubectl's `rollout status` and `rollout undo` against the
//! Deployment controller.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};

use super::support::{self, eventually};

fn kubectl(dir: &Path, args: &[&str]) -> (bool, String, String) {
    let output = Command::new("kubectl")
        .arg(format!("--kubeconfig={}", dir.join("kubeconfig").display()))
        .arg(format!("--cache-dir={}", dir.join("cache").display()))
        .args(args)
        .output()
        .expect("kubectl is installed");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kubectl_rollout_status_and_undo() {
    let cluster = support::cluster(Duration::from_millis(30)).await;
    let address = support::listen(&cluster.server).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("kubeconfig"),
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://{address}\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: ctx\n  context:\n    cluster: c\n    user: u\n    namespace: default\ncurrent-context: ctx\n"
        ),
    )
    .unwrap();
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
    let path = dir.path().to_owned();
    let (ok, out, err) =
        tokio::task::spawn_blocking(move || kubectl(&path, &["rollout", "status", "deployment/web", "--timeout=20s"]))
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
    let path = dir.path().to_owned();
    let (ok, out, err) = tokio::task::spawn_blocking(move || {
        let status = kubectl(&path, &["rollout", "status", "deployment/web", "--timeout=20s"]);
        assert!(status.0, "{}\n{}", status.1, status.2);
        kubectl(&path, &["rollout", "undo", "deployment/web"])
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
    let path = dir.path().to_owned();
    let (ok, out, err) = tokio::task::spawn_blocking(move || {
        let status = kubectl(&path, &["rollout", "status", "deployment/web", "--timeout=20s"]);
        assert!(status.0, "{}\n{}", status.1, status.2);
        kubectl(&path, &["rollout", "history", "deployment/web"])
    })
    .await
    .unwrap();
    assert!(ok, "{out}\n{err}");
    assert!(out.contains('2') && out.contains('3'), "{out}");
    // The CHANGE-CAUSE of revision 2, from its ReplicaSet.
    assert!(out.lines().any(|l| l.starts_with('2') && l.contains("image nginx:2")), "{out}");
    // kubectl describe shows the Deployment's scaling events.
    let path = dir.path().to_owned();
    let (ok, out, err) =
        tokio::task::spawn_blocking(move || kubectl(&path, &["describe", "deployment", "web"])).await.unwrap();
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("ScalingReplicaSet") && out.contains("Scaled up replica set web-"), "{out}");
}
