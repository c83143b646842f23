//! A small version of the controllers benchmark: many Deployments at once.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kube::api::{Api, ListParams, PostParams};

use super::support::{self, eventually};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_deployments_of_ten() {
    let cluster = support::cluster(Duration::from_millis(5)).await;
    let api: Api<Deployment> = Api::namespaced(cluster.client.clone(), "default");
    let sets: Api<ReplicaSet> = Api::namespaced(cluster.client.clone(), "default");
    let started = Instant::now();
    let creates = (0..50).map(|i| {
        let api = api.clone();
        async move {
            let d: Deployment = serde_json::from_value(serde_json::json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": format!("d{i}"), "namespace": "default"},
                "spec": {"replicas": 10, "selector": {"matchLabels": {"app": format!("d{i}")}},
                         "template": {"metadata": {"labels": {"app": format!("d{i}")}},
                                      "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}
            }))
            .unwrap();
            api.create(&PostParams::default(), &d).await.unwrap();
        }
    });
    futures::future::join_all(creates).await;
    eventually(Duration::from_secs(60), "500 replicas reported", || async {
        let list = sets.list(&ListParams::default()).await.unwrap().items;
        list.len() == 50 && list.iter().all(|rs| rs.status.as_ref().is_some_and(|s| s.replicas == 10))
    })
    .await;
    println!("50 deployments x 10 replicas reported in {:?} (debug build)", started.elapsed());
}
