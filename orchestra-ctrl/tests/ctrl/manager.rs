//! The controller manager behind one election, and the event recorder.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use orchestra::testing::TestCluster;
use orchestra_ctrl::events::{EventType, Recorder, reference};
use orchestra_ctrl::informer::SharedInformerFactory;
use orchestra_ctrl::leader::LeaderElector;
use orchestra_ctrl::manager::ControllerManager;
use tokio::sync::watch;

use super::support::{eventually, fast_election};

fn manager(client: kube::Client) -> ControllerManager {
    ControllerManager::new(SharedInformerFactory::new(client))
        .with("replicaset", |ctx| {
            let stop = ctx.stopped();
            orchestra_ctrl::controllers::replicaset::run(ctx.factory, 2, stop)
        })
        .with("deployment", |ctx| {
            let stop = ctx.stopped();
            orchestra_ctrl::controllers::deployment::run(ctx.factory, 2, stop)
        })
}

fn deployment(name: &str) -> Deployment {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn managers_hand_over_behind_one_lease() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let config = fast_election();
    let elector = |id: &str| {
        Arc::new(
            LeaderElector::new(client.clone(), "kube-system", "kube-controller-manager", id).config(config.clone()),
        )
    };
    let m1 = manager(client.clone());
    assert_eq!(m1.names(), ["replicaset", "deployment"]);
    let (stop1, rx1) = watch::channel(false);
    let first = tokio::spawn(m1.run_elected(elector("m1"), async move {
        let mut rx = rx1;
        let _ = rx.wait_for(|s| *s).await;
    }));
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    deployments.create(&PostParams::default(), &deployment("one")).await.unwrap();
    eventually(Duration::from_secs(10), "first leader works", || async {
        pods.list(&ListParams::default().labels("app=one")).await.unwrap().items.len() == 2
    })
    .await;
    let second = tokio::spawn(manager(client.clone()).run_elected(elector("m2"), std::future::pending()));

    let released = Instant::now();
    let _ = stop1.send(true);
    first.await.unwrap().unwrap();
    deployments.create(&PostParams::default(), &deployment("two")).await.unwrap();
    eventually(Duration::from_secs(10), "second leader works", || async {
        pods.list(&ListParams::default().labels("app=two")).await.unwrap().items.len() == 2
    })
    .await;
    println!("controller manager hand-off to working controllers: {:?}", released.elapsed());
    second.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_events_are_aggregated() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm = maps
        .create(
            &PostParams::default(),
            &ConfigMap { metadata: ObjectMeta { name: Some("cm".into()), ..Default::default() }, ..Default::default() },
        )
        .await
        .unwrap();
    let recorder = Recorder::new(client.clone(), "test-controller", "test-1");
    for _ in 0..3 {
        recorder.publish(reference(&cm), EventType::Warning, "Failed", "Sync", "it broke").await.unwrap();
    }
    recorder.publish(reference(&cm), EventType::Normal, "Synced", "Sync", "fine").await.unwrap();
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let list = events.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(list.len(), 2);
    let failed = list.iter().find(|e| e.reason.as_deref() == Some("Failed")).unwrap();
    assert_eq!(failed.series.as_ref().unwrap().count, 3);
    assert_eq!(failed.regarding.as_ref().unwrap().name.as_deref(), Some("cm"));
}

/// Controllers publish from tasks of their own: repeats published at the
/// same time still make one Event.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_repeats_are_aggregated() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm = ConfigMap { metadata: ObjectMeta { name: Some("cm".into()), ..Default::default() }, ..Default::default() };
    let cm = maps.create(&PostParams::default(), &cm).await.unwrap();
    let recorder = Recorder::new(client.clone(), "test-controller", "test-1");
    let publishes = (0..8).map(|_| {
        let (recorder, regarding) = (recorder.clone(), reference(&cm));
        tokio::spawn(
            async move { recorder.publish(regarding, EventType::Normal, "Scaled", "Scale", "from 3 to 10").await },
        )
    });
    for publish in futures::future::join_all(publishes).await {
        publish.unwrap().unwrap();
    }
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let list = events.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(list.len(), 1, "one Event for eight repeats: {list:?}");
    assert_eq!(list[0].series.as_ref().map(|s| s.count), Some(8));
}
