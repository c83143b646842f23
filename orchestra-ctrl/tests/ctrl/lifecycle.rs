//! The node lifecycle controller against an API server: not-ready taints,
//! tolerationSeconds, and per-zone eviction rates (normal, partial and full
//! disruption, every zone down).

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use orchestra::testing::TestCluster;
use orchestra_ctrl::controllers::node_lifecycle::{self, NOT_READY, NodeLifecycle, UNREACHABLE, ZoneState};
use orchestra_ctrl::informer::ObjectKey;
use orchestra_ctrl::informer::SharedInformerFactory;
use parking_lot::Mutex;
use tokio::sync::watch;

use super::support::eventually;

/// A cluster whose pods get no default tolerations from admission: the
/// tests time evictions by the controller's own default.
async fn cluster() -> TestCluster {
    TestCluster::start_with(TestCluster::builder().disable_admission_plugins(["DefaultTolerationSeconds"])).await
}

fn stopped(rx: &watch::Receiver<bool>) -> impl std::future::Future<Output = ()> + Send + 'static {
    let mut rx = rx.clone();
    async move {
        let _ = rx.wait_for(|s| *s).await;
    }
}

/// Creates node `name` in `zone` with `taints`.
async fn create_node(client: &Client, name: &str, zone: &str, taints: Vec<Taint>) {
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone}},
        "spec": {"taints": taints},
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
}

/// Posts `name`'s Ready condition as `status`, last heard of `ago` seconds ago.
async fn post_ready(client: &Client, name: &str, status: &str, ago: i64) {
    let nodes: Api<Node> = Api::all(client.clone());
    let at = (k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(ago)).to_string();
    let patch = serde_json::json!({"status": {"conditions": [
        {"type": "Ready", "status": status, "reason": "Test", "lastHeartbeatTime": at, "lastTransitionTime": at}
    ]}});
    nodes.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
}

/// A node that has been silent for an hour.
async fn dead_node(client: &Client, name: &str, zone: &str) {
    create_node(client, name, zone, vec![]).await;
    post_ready(client, name, "True", 3600).await;
}

/// A node that just reported Ready.
async fn live_node(client: &Client, name: &str, zone: &str) {
    create_node(client, name, zone, vec![]).await;
    post_ready(client, name, "True", 0).await;
}

/// Renews `node`'s lease and posts its Ready condition (whatever `ready`
/// holds) every 100 ms: a kubelet that is alive but may report not ready.
async fn kubelet(client: Client, node: String, ready: Arc<Mutex<&'static str>>) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    loop {
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let lease = serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": node, "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": node, "leaseDurationSeconds": 1, "renewTime": now}
        });
        let _ = leases.patch(&node, &PatchParams::apply("test-kubelet").force(), &Patch::Apply(&lease)).await;
        let status = *ready.lock();
        post_ready(&client, &node, status, 0).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates pod `name` bound to `node`, with `tolerations` (JSON).
async fn create_pod(client: &Client, name: &str, node: &str, tolerations: serde_json::Value) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": node, "tolerations": tolerations,
                 "containers": [{"name": "c", "image": "busybox"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
}

/// Whether pod `name` was evicted (deleted, or being deleted).
async fn evicted(client: &Client, name: &str) -> bool {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.get_opt(name).await.unwrap().is_none_or(|p| p.metadata.deletion_timestamp.is_some())
}

/// The (key, effect) pairs of `node`'s taints.
async fn taints(client: &Client, node: &str) -> Vec<(String, String)> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut out: Vec<(String, String)> = nodes
        .get(node)
        .await
        .unwrap()
        .spec
        .unwrap_or_default()
        .taints
        .unwrap_or_default()
        .into_iter()
        .map(|t| (t.key, t.effect))
        .collect();
    out.sort();
    out
}

fn pair(key: &str, effect: &str) -> (String, String) {
    (key.to_owned(), effect.to_owned())
}

fn short_config() -> node_lifecycle::Config {
    node_lifecycle::Config::default()
        .with_monitor_period(Duration::from_millis(100))
        .with_grace_period(Duration::from_secs(2))
        .with_zone_qps(100.0)
        .with_default_toleration_seconds(300)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_reporting_not_ready_gets_the_not_ready_taints_until_it_is_ready() {
    let cluster = cluster().await;
    let client = cluster.client();
    create_node(&client, "n1", "z", vec![]).await;
    create_node(&client, "n2", "z", vec![]).await;
    let n1_ready = Arc::new(Mutex::new("False"));
    let mut tasks = vec![
        tokio::spawn(kubelet(client.clone(), "n1".into(), n1_ready.clone())),
        tokio::spawn(kubelet(client.clone(), "n2".into(), Arc::new(Mutex::new("True")))),
    ];
    let (stop, rx) = watch::channel(false);
    let factory = SharedInformerFactory::new(client.clone());
    tasks.push(tokio::spawn(NodeLifecycle::new(&factory, short_config()).run(stopped(&rx))));

    eventually(Duration::from_secs(8), "n1 tainted not-ready", || async {
        taints(&client, "n1").await == [pair(NOT_READY, "NoExecute"), pair(NOT_READY, "NoSchedule")]
    })
    .await;
    // The lease is fresh: the node is not ready, not unreachable.
    let nodes: Api<Node> = Api::all(client.clone());
    let n1 = nodes.get("n1").await.unwrap();
    let ready = n1.status.unwrap().conditions.unwrap().into_iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(ready.status, "False", "the kubelet's own report stands");
    assert!(taints(&client, "n2").await.is_empty());

    *n1_ready.lock() = "True";
    eventually(Duration::from_secs(8), "n1's taints removed", || async { taints(&client, "n1").await.is_empty() })
        .await;
    let _ = stop.send(true);
    for t in tasks {
        t.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pods_are_evicted_after_their_toleration_seconds_and_never_if_tolerating_forever() {
    let cluster = cluster().await;
    let client = cluster.client();
    dead_node(&client, "dead", "z").await;
    live_node(&client, "alive", "z").await;
    let tolerate = |seconds: Option<i64>| serde_json::json!([{"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}]);
    create_pod(&client, "two-seconds", "dead", tolerate(Some(2))).await;
    create_pod(&client, "forever", "dead", tolerate(None)).await;
    // No toleration of its own: the default, 3 s here.
    create_pod(&client, "default", "dead", serde_json::json!([])).await;

    let (stop, rx) = watch::channel(false);
    let factory = SharedInformerFactory::new(client.clone());
    let config = short_config().with_grace_period(Duration::from_secs(30)).with_default_toleration_seconds(3);
    let task = tokio::spawn(NodeLifecycle::new(&factory, config).run(stopped(&rx)));

    eventually(Duration::from_secs(5), "dead node tainted NoExecute", || async {
        taints(&client, "dead").await.contains(&pair(UNREACHABLE, "NoExecute"))
    })
    .await;
    let tainted = Instant::now();
    eventually(Duration::from_secs(6), "two-seconds evicted", || evicted(&client, "two-seconds")).await;
    let first = tainted.elapsed();
    assert!(first >= Duration::from_millis(1800), "evicted before its 2 s: {first:?}");
    assert!(!evicted(&client, "default").await, "the 3 s default has not run out yet");
    eventually(Duration::from_secs(6), "default evicted", || evicted(&client, "default")).await;
    let second = tainted.elapsed();
    assert!(second >= Duration::from_millis(2800), "evicted before its 3 s: {second:?}");
    // Longer under the taint than any finite toleration: still there.
    assert!(!evicted(&client, "forever").await, "a pod tolerating forever stays");
    assert!(!evicted(&client, "forever").await);
    let _ = stop.send(true);
    task.abort();
}

/// Creates the zones of the disruption tests: `a` with one live node of four,
/// `b` with one dead node of two, `c` with its only node dead; a pod without
/// tolerations on each dead node. Returns the controller, its caches synced.
async fn zones(client: &Client, config: node_lifecycle::Config) -> (NodeLifecycle, SharedInformerFactory) {
    live_node(client, "a1", "a").await;
    for n in ["a2", "a3", "a4"] {
        dead_node(client, n, "a").await;
    }
    live_node(client, "b1", "b").await;
    dead_node(client, "b2", "b").await;
    dead_node(client, "c1", "c").await;
    for n in ["a2", "a3", "a4", "b2", "c1"] {
        create_pod(client, &format!("on-{n}"), n, serde_json::json!([])).await;
    }
    let factory = SharedInformerFactory::new(client.clone());
    let lifecycle = NodeLifecycle::new(&factory, config);
    lifecycle.wait_synced().await;
    (lifecycle, factory)
}

/// Waits until `factory`'s node cache shows every node's taints as the API
/// server has them, so that the next pass works on what the last one did.
async fn settle(factory: &SharedInformerFactory, client: &Client) {
    let cache = factory.informer::<Node>();
    let nodes: Api<Node> = Api::all(client.clone());
    eventually(Duration::from_secs(5), "the node cache caught up", || async {
        let taints = |n: &Node| n.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
        nodes
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .all(|n| cache.get(&ObjectKey::of(n)).is_some_and(|c| taints(&c) == taints(n)))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partially_disrupted_small_zone_evicts_nothing_while_others_evict() {
    let cluster = cluster().await;
    let client = cluster.client();
    let config = short_config().with_grace_period(Duration::from_secs(30)).with_default_toleration_seconds(0);
    let (lifecycle, factory) = zones(&client, config).await;
    for _ in 0..3 {
        lifecycle.monitor().await.unwrap();
        settle(&factory, &client).await;
    }
    assert_eq!(lifecycle.zone_state("a"), Some(ZoneState::PartialDisruption));
    assert_eq!(lifecycle.zone_state("b"), Some(ZoneState::Normal));
    // Upstream: a fully disrupted zone evicts at the normal rate as long as
    // some other zone is healthy.
    assert_eq!(lifecycle.zone_state("c"), Some(ZoneState::FullDisruption));
    for n in ["b2", "c1"] {
        assert_eq!(taints(&client, n).await, [pair(UNREACHABLE, "NoExecute"), pair(UNREACHABLE, "NoSchedule")], "{n}");
        assert!(evicted(&client, &format!("on-{n}")).await, "pod on {n} evicted");
    }
    for n in ["a2", "a3", "a4"] {
        assert_eq!(taints(&client, n).await, [pair(UNREACHABLE, "NoSchedule")], "{n}: no NoExecute at rate 0");
        assert!(!evicted(&client, &format!("on-{n}")).await, "pod on {n} stays");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partially_disrupted_large_zone_taints_at_the_secondary_rate() {
    let cluster = cluster().await;
    let client = cluster.client();
    let config = short_config()
        .with_grace_period(Duration::from_secs(30))
        .with_default_toleration_seconds(0)
        // Zone a (4 nodes) counts as large; one token, then one per ~3 hours.
        .with_large_cluster_size_threshold(3)
        .with_secondary_zone_qps(0.0001);
    let (lifecycle, factory) = zones(&client, config).await;
    for _ in 0..3 {
        lifecycle.monitor().await.unwrap();
        settle(&factory, &client).await;
    }
    assert_eq!(lifecycle.zone_state("a"), Some(ZoneState::PartialDisruption));
    let mut tainted = 0;
    for n in ["a2", "a3", "a4"] {
        if taints(&client, n).await.contains(&pair(UNREACHABLE, "NoExecute")) {
            tainted += 1;
            assert!(evicted(&client, &format!("on-{n}")).await);
        } else {
            assert!(!evicted(&client, &format!("on-{n}")).await);
        }
    }
    assert_eq!(tainted, 1, "one NoExecute taint at the secondary rate, not three");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_every_zone_is_down_nothing_is_evicted_until_a_node_returns() {
    let cluster = cluster().await;
    let client = cluster.client();
    // x1 carries an unreachable NoExecute taint from before the outage.
    let old: Taint = serde_json::from_value(serde_json::json!({"key": UNREACHABLE, "effect": "NoExecute"})).unwrap();
    create_node(&client, "x1", "x", vec![old]).await;
    post_ready(&client, "x1", "True", 3600).await;
    dead_node(&client, "y1", "y").await;
    dead_node(&client, "y2", "y").await;
    for n in ["x1", "y1", "y2"] {
        create_pod(&client, &format!("on-{n}"), n, serde_json::json!([])).await;
    }
    let factory = SharedInformerFactory::new(client.clone());
    let config = short_config().with_grace_period(Duration::from_secs(30)).with_default_toleration_seconds(0);
    let lifecycle = NodeLifecycle::new(&factory, config);
    lifecycle.wait_synced().await;
    for _ in 0..3 {
        lifecycle.monitor().await.unwrap();
        settle(&factory, &client).await;
    }
    assert_eq!(lifecycle.zone_state("x"), Some(ZoneState::FullDisruption));
    assert_eq!(lifecycle.zone_state("y"), Some(ZoneState::FullDisruption));
    for n in ["x1", "y1", "y2"] {
        assert_eq!(
            taints(&client, n).await,
            [pair(UNREACHABLE, "NoSchedule")],
            "{n}: NoExecute removed or never added"
        );
        assert!(!evicted(&client, &format!("on-{n}")).await, "pod on {n} stays");
    }

    // y1 comes back: zone y is no longer fully disrupted, evictions resume.
    post_ready(&client, "y1", "True", 0).await;
    let nodes = factory.informer::<Node>();
    eventually(Duration::from_secs(5), "the cache shows y1 ready", || {
        let n = nodes.get(&ObjectKey::cluster("y1"));
        async move {
            n.is_some_and(|n| {
                n.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.status == "True"))
            })
        }
    })
    .await;
    lifecycle.monitor().await.unwrap();
    assert_eq!(lifecycle.zone_state("y"), Some(ZoneState::Normal));
    for n in ["x1", "y2"] {
        assert!(taints(&client, n).await.contains(&pair(UNREACHABLE, "NoExecute")), "{n}");
        assert!(evicted(&client, &format!("on-{n}")).await, "pod on {n} evicted");
    }
    assert!(taints(&client, "y1").await.is_empty());
    assert!(!evicted(&client, "on-y1").await);
}
