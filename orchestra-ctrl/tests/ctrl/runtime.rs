//! The runtime against the API server: shared informers, leader election.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};
use orchestra::testing::TestCluster;
use orchestra_ctrl::Action;
use orchestra_ctrl::controller::Controller;
use orchestra_ctrl::informer::SharedInformerFactory;
use orchestra_ctrl::leader::LeaderElector;
use tokio::sync::watch;

use super::support::{eventually, fast_election};

fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta { name: Some(name.into()), namespace: Some("default".into()), ..Default::default() },
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_informer_per_kind_and_a_closure_reconciler() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &config_map("before")).await.unwrap();
    let factory = SharedInformerFactory::new(client.clone());
    let a = factory.informer::<ConfigMap>();
    let b = factory.informer::<ConfigMap>();
    assert!(Arc::ptr_eq(&a, &b), "one informer per kind");
    a.wait_synced().await;

    let seen = Arc::new(AtomicUsize::new(0));
    let (stop, rx) = watch::channel(false);
    let counter = seen.clone();
    let controller = Controller::<ConfigMap>::for_(&factory).concurrency(2);
    let task = tokio::spawn(controller.run(
        move |_cm: Arc<ConfigMap>, _ctx: Arc<()>| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                Ok::<_, orchestra_ctrl::Error>(Action::await_change())
            }
        },
        Arc::new(()),
        async move {
            let mut rx = rx;
            let _ = rx.wait_for(|s| *s).await;
        },
    ));
    api.create(&PostParams::default(), &config_map("after")).await.unwrap();
    eventually(Duration::from_secs(5), "both reconciled", || async { seen.load(Ordering::SeqCst) >= 2 }).await;
    assert_eq!(a.by_namespace("default").len(), 2);
    let _ = stop.send(true);
    tokio::time::timeout(Duration::from_secs(5), task).await.unwrap().unwrap();
    assert_eq!(factory.informer::<ConfigMap>().stats().lists, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_hand_off_on_release() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let config = fast_election();
    let first = Arc::new(LeaderElector::new(client.clone(), "default", "ctrl", "a").config(config.clone()));
    let second = Arc::new(LeaderElector::new(client.clone(), "default", "ctrl", "b").config(config));
    let (stop_a, rx_a) = watch::channel(false);
    let (lead_a_tx, mut lead_a) = watch::channel(None);
    let a = tokio::spawn({
        let first = first.clone();
        async move {
            first
                .run(
                    move |fence, mut stop| async move {
                        let _ = lead_a_tx.send(Some(fence));
                        let _ = stop.wait_for(|s| *s).await;
                    },
                    async move {
                        let mut rx = rx_a;
                        let _ = rx.wait_for(|s| *s).await;
                    },
                )
                .await
        }
    });
    lead_a.wait_for(|t| t.is_some()).await.unwrap();
    let fence_a = lead_a.borrow().clone().unwrap();
    // The leader's writes carry its term, and land while it leads.
    let writes_a: Api<ConfigMap> = Api::namespaced(fence_a.client(&client), "default");
    writes_a.create(&PostParams::default(), &config_map("early")).await.unwrap();
    let (lead_b_tx, mut lead_b) = watch::channel(None);
    let b = tokio::spawn({
        let second = second.clone();
        async move {
            second
                .run(
                    move |fence, mut stop| async move {
                        let _ = lead_b_tx.send(Some((fence, Instant::now())));
                        let _ = stop.wait_for(|s| *s).await;
                    },
                    std::future::pending(),
                )
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(lead_b.borrow().is_none(), "only one leader");
    let released = Instant::now();
    let _ = stop_a.send(true);
    a.await.unwrap().unwrap();
    lead_b.wait_for(|t| t.is_some()).await.unwrap();
    let (fence_b, at) = lead_b.borrow().clone().unwrap();
    let hand_off = at.duration_since(released);
    println!("leader hand-off after release: {hand_off:?}");
    assert!(fence_b.token() > fence_a.token(), "fencing token grows");
    assert!(hand_off < Duration::from_secs(1), "{hand_off:?}");
    // The deposed leader's late writes are refused by the API server; the
    // new leader's land.
    match writes_a.create(&PostParams::default(), &config_map("late")).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 409, "{status:?}");
            assert!(status.message.contains("term") && status.message.contains("has ended"), "{status:?}");
        }
        other => panic!("a deposed leader's write landed: {other:?}"),
    }
    assert!(writes_a.delete("early", &Default::default()).await.is_err(), "a deposed leader deleted");
    let writes_b: Api<ConfigMap> = Api::namespaced(fence_b.client(&client), "default");
    writes_b.create(&PostParams::default(), &config_map("current")).await.unwrap();
    let plain: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    assert!(plain.get_opt("late").await.unwrap().is_none());
    assert!(plain.get_opt("early").await.unwrap().is_some());
    b.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reconciles_start_once_every_watched_cache_has_listed() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    // Many watched objects (a long list), and one primary object.
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), "default");
    for i in 0..300 {
        let secret = k8s_openapi::api::core::v1::Secret {
            metadata: ObjectMeta { name: Some(format!("s{i}")), ..Default::default() },
            ..Default::default()
        };
        secrets.create(&PostParams::default(), &secret).await.unwrap();
    }
    Api::<ConfigMap>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &config_map("c"))
        .await
        .unwrap();
    let factory = SharedInformerFactory::new(client.clone());
    let watched = factory.informer::<k8s_openapi::api::core::v1::Secret>();
    let seen_at_first: Arc<parking_lot::Mutex<Option<usize>>> = Default::default();
    let (stop, rx) = watch::channel(false);
    let (first, cache) = (seen_at_first.clone(), watched.clone());
    let controller =
        Controller::<ConfigMap>::for_(&factory).watches::<k8s_openapi::api::core::v1::Secret>(|_| Vec::new());
    let task = tokio::spawn(controller.run(
        move |_: Arc<ConfigMap>, _: Arc<()>| {
            let (first, cache) = (first.clone(), cache.clone());
            async move {
                first.lock().get_or_insert(cache.list().len());
                Ok::<_, orchestra_ctrl::Error>(Action::await_change())
            }
        },
        Arc::new(()),
        async move {
            let mut rx = rx;
            let _ = rx.wait_for(|s| *s).await;
        },
    ));
    eventually(Duration::from_secs(10), "a first reconcile", || async { seen_at_first.lock().is_some() }).await;
    assert_eq!(*seen_at_first.lock(), Some(300), "the first reconcile sees the watched kind's whole cache");
    let _ = stop.send(true);
    task.await.unwrap();
}
