//! The test cluster: API server, controllers, fake node agent.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use orchestra::testing::TestCluster;
use orchestra_ctrl::controllers::ControllerManagerConfig;
use orchestra_ctrl::informer::Event;
use orchestra_ctrl::informer::SharedInformerFactory;
use orchestra_ctrl::leader::ElectionConfig;

/// A running test cluster; everything stops when it is dropped.
pub struct Cluster {
    /// A client acting as the administrator.
    pub client: Client,
    /// The control plane.
    pub inner: TestCluster,
    fake_node_agent: tokio::task::JoinHandle<()>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.fake_node_agent.abort();
    }
}

/// A cluster with the ReplicaSet, Deployment, Namespace and garbage
/// collector controllers and a fake node agent that marks every new pod
/// Running and Ready after `ready_after` (but for pods of an image starting
/// with `stuck`: they stay Pending).
pub async fn cluster(ready_after: Duration) -> Cluster {
    let controllers = ControllerManagerConfig::default()
        .with_controllers(["replicaset", "deployment", "namespace", "garbagecollector"])
        .with_workers(4)
        // A full pass only every hour: collection in the tests comes from
        // watch events.
        .with_gc_interval(Duration::from_secs(3600));
    // Pods get no default tolerations from admission: a lost node's pods
    // are evicted as soon as its taint is there.
    let builder =
        TestCluster::builder().controllers(controllers).disable_admission_plugins(["DefaultTolerationSeconds"]);
    let inner = TestCluster::start_with(builder).await;
    let client = inner.client();
    let fake_node_agent = tokio::spawn(fake_node_agent(client.clone(), ready_after));
    Cluster { client, inner, fake_node_agent }
}

/// Marks pods Running and Ready (there is no kubelet yet).
pub async fn fake_node_agent(client: Client, ready_after: Duration) {
    let factory = SharedInformerFactory::new(client.clone());
    let pods = factory.informer::<Pod>();
    let mut rx = pods.subscribe();
    while let Some(event) = rx.recv().await {
        let Event::Apply { new, .. } = event else {
            continue;
        };
        let running = new.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        let stuck = new
            .spec
            .as_ref()
            .and_then(|s| s.containers.first())
            .and_then(|c| c.image.as_deref())
            .is_some_and(|i| i.starts_with("stuck"));
        if running || stuck || new.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let client = client.clone();
        tokio::spawn(async move {
            tokio::time::sleep(ready_after).await;
            let api: Api<Pod> = Api::namespaced(client, new.metadata.namespace.as_deref().unwrap());
            let now = k8s_openapi::jiff::Timestamp::now().to_string();
            let patch = serde_json::json!({"status": {
                "phase": "Running",
                "podIP": "10.0.0.1",
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
            }});
            let _ = api
                .patch_status(new.metadata.name.as_deref().unwrap(), &PatchParams::default(), &Patch::Merge(&patch))
                .await;
        });
    }
}

/// How much longer than its stated bound a wait may take before it fails.
///
/// The bounds in these tests are what an idle machine needs with room to
/// spare; on 2 busy cores (CI, or a build alongside) a controller chain
/// (informer, queue, reconcile, write, watch) has been seen to miss bounds it
/// always meets when idle, and the whole binary to take nearly twice as long.
/// A wait that never completes (a lost event, a missing reconcile) fails just
/// the same, only later.
pub const SLACK: u32 = 3;

/// Polls `check` every 20 ms until it holds or `timeout` (times [`SLACK`])
/// passes.
pub async fn eventually<F, Fut>(timeout: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    eventually_explained(timeout, || {
        let holds = check();
        async move { if holds.await { Ok(()) } else { Err(what.to_owned()) } }
    })
    .await
}

/// [`eventually`] for a check that says what it saw when it does not hold:
/// the last such explanation is the failure's message.
pub async fn eventually_explained<F, Fut>(timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let deadline = tokio::time::Instant::now() + timeout * SLACK;
    loop {
        match check().await {
            Ok(()) => return,
            Err(seen) => assert!(tokio::time::Instant::now() < deadline, "timed out: {seen}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A leader election that hands over within a few seconds: a 2 s lease,
/// renewed within 1.5 s, retried every 50 ms.
pub fn fast_election() -> ElectionConfig {
    ElectionConfig::default()
        .with_lease_duration(Duration::from_secs(2))
        .with_renew_deadline(Duration::from_millis(1500))
        .with_retry_period(Duration::from_millis(50))
}
