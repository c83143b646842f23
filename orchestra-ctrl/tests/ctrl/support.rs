//! The test cluster: API server, controllers, fake node agent.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use orchestra_core::server::{ApiServer, ServerOptions};
use orchestra_ctrl::SharedInformerFactory;
use orchestra_ctrl::informer::Event;
use orchestra_store::MemStore;
use tokio::sync::watch;

/// An API server on a MemStore with short bookmark intervals.
pub async fn server() -> ApiServer {
    ApiServer::builder(Arc::new(MemStore::new()))
        .options(ServerOptions::default().with_bookmark_interval(Duration::from_millis(200)))
        .build()
        .await
        .expect("server starts")
}

/// Serves `server` over plain HTTP on a free loopback port.
pub async fn listen(server: &ApiServer) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let router = server.router();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    address
}

/// A running test cluster; everything stops when it is dropped.
pub struct Cluster {
    /// The API server.
    pub server: ApiServer,
    /// A client over it.
    pub client: Client,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn stopped(rx: &watch::Receiver<bool>) -> impl std::future::Future<Output = ()> + Send + 'static {
    let mut rx = rx.clone();
    async move {
        let _ = rx.wait_for(|s| *s).await;
    }
}

/// A cluster with the ReplicaSet and Deployment controllers and a fake node
/// agent that marks every new pod Running and Ready after `ready_after`
/// (but for pods of an image starting with `stuck`: they stay Pending).
pub async fn cluster(ready_after: Duration) -> Cluster {
    let server = server().await;
    let client = orchestra_core::client::in_process(&server, "default");
    let (stop, rx) = watch::channel(false);
    let factory = SharedInformerFactory::new(client.clone());
    let mut tasks = vec![tokio::spawn(orchestra_ctrl::controllers::replicaset::run(factory.clone(), 4, stopped(&rx)))];
    tasks.push(tokio::spawn(orchestra_ctrl::controllers::deployment::run(factory.clone(), 4, stopped(&rx))));
    tasks.push(tokio::spawn(orchestra_ctrl::controllers::namespace::run(factory.clone(), 2, stopped(&rx))));
    tasks.push(tokio::spawn(
        // A full pass only every hour: collection in the tests comes from
        // watch events.
        orchestra_ctrl::controllers::garbage_collector::run(client.clone(), Duration::from_secs(3600), stopped(&rx)),
    ));
    tasks.push(tokio::spawn(fake_node_agent(client.clone(), ready_after)));
    Cluster { server, client, stop, tasks }
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
