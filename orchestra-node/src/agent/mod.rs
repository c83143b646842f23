//! The node agent: what the kubelet does, through the API server only.
//!
//! ```no_run
//! # async fn demo(client: kube::Client) -> Result<(), orchestra_node::agent::AgentError> {
//! use std::sync::Arc;
//! use orchestra_node::agent::{NodeAgent, NodeConfig};
//! use orchestra_node::runtime::sim::SimRuntime;
//!
//! let config = NodeConfig::new("node-1").pod_cidr("10.244.1.0/24");
//! let agent = NodeAgent::builder(client, Arc::new(SimRuntime::default()), config).build();
//! let handle = agent.handle();
//! tokio::spawn(agent.run(std::future::pending()));
//! handle.registered().await;
//! # Ok(()) }
//! ```
//!
//! What runs inside [`NodeAgent::run`]:
//!
//! - the **node loop** ([`node_status`], [`lease`]): registers the Node
//!   (retrying while the API is unreachable), posts its status when it
//!   changes and at least every `node_status_report_frequency`, renews the
//!   Lease, and passes `spec.podCIDR` to the runtime;
//! - the **dispatcher**: a pod informer restricted to
//!   `spec.nodeName=<node>`, the static pod directory, the runtime's events
//!   and housekeeping, feeding one **pod worker** per pod UID (see
//!   `pod_worker`: sandbox, images, init and app containers, restarts,
//!   probes, status, termination);
//! - the **event publisher**: events go through
//!   [`orchestra_ctrl::events::Recorder`] from one task, so workers never
//!   wait on them.
//!
//! Many agents in one process (a simulated cluster of thousands of nodes):
//! give them one [`SharedPods`] ([`NodeAgentBuilder::shared_pods`]) so the
//! API server keeps one pod watch instead of one per node, and a
//! [`SimRuntime`](crate::runtime::sim::SimRuntime) with `write_logs: false`.
//! An idle agent then costs one Lease patch per `lease_renew_interval` and a
//! local status check per `node_status_update_frequency`, on jittered timers.

pub mod backoff;
pub(crate) mod config;
mod dispatcher;
pub mod env;
mod event_sink;
pub mod lease;
mod mirror_pods;
mod node_loop;
pub mod node_status;
mod pod_source;
mod pod_worker;
pub mod probes;
pub mod resources;
mod security;
mod service_links;
pub mod static_pods;
pub mod status;
pub mod tokens;
pub mod volumes;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use orchestra_ctrl::events::{EventType, Recorder};
use parking_lot::Mutex;
use tokio::sync::{mpsc, watch};

pub use config::{CapacitySource, NodeConfig, NodeInfoOverrides, Resources};
pub use pod_source::SharedPods;

use crate::runtime::{RuntimeBackend, RuntimeError, SandboxId};
use dispatcher::Dispatcher;
use event_sink::{EventMsg, EventSink, publish_events};
use mirror_pods::scan_static_pods;
use node_loop::node_loop;
use pod_source::PodView;
use pod_worker::WorkerInput;
use service_links::CachedServices;

/// Label the agent puts on its sandboxes and containers: the node's name.
/// Sandboxes without it (or with another node's) are never touched.
pub const LABEL_NODE_NAME: &str = "io.orchestra.node.name";

/// Faults that stop the agent.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The runtime refused the configuration.
    #[error("runtime: {0}")]
    Runtime(#[from] RuntimeError),
}

/// Counters of an agent.
#[derive(Debug, Default)]
pub struct Stats {
    /// Pod status writes.
    pub status_writes: AtomicU64,
    /// Node status writes.
    pub node_status_posts: AtomicU64,
    /// Lease renewals.
    pub lease_renewals: AtomicU64,
    /// Failed lease renewals.
    pub lease_failures: AtomicU64,
    /// Events dropped because the publisher lagged.
    pub events_dropped: AtomicU64,
}

/// A copy of an agent's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AgentStats {
    /// Pod status writes.
    pub status_writes: u64,
    /// Node status writes.
    pub node_status_posts: u64,
    /// Lease renewals.
    pub lease_renewals: u64,
    /// Failed lease renewals.
    pub lease_failures: u64,
    /// Events dropped.
    pub events_dropped: u64,
}

/// A cheap deterministic jitter source (xorshift), one per timer owner.
pub(crate) struct Jitter(u64);

impl Jitter {
    pub(crate) fn new(seed: &str) -> Self {
        let h = seed.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        Self(h | 1)
    }

    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `d` spread over ±10%.
    pub(crate) fn spread(&mut self, d: Duration) -> Duration {
        d.mul_f64(0.9 + 0.2 * self.next())
    }
}

struct WorkerEntry {
    input: Arc<WorkerInput>,
    requests: Resources,
    is_static: bool,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct NodeState {
    uid: Option<String>,
    pod_cidr: Option<String>,
    allocatable: Resources,
}

/// What the dispatcher, the node loop and the workers share.
pub(crate) struct Shared {
    pub(crate) config: NodeConfig,
    pub(crate) client: Client,
    pub(crate) runtime: Arc<dyn RuntimeBackend>,
    pub(crate) events: EventSink,
    pub(crate) stats: Arc<Stats>,
    node: Mutex<NodeState>,
    sandboxes: Mutex<HashMap<SandboxId, String>>,
    workers: Mutex<HashMap<String, WorkerEntry>>,
    registered: watch::Sender<bool>,
    network_ready: watch::Sender<bool>,
    done: mpsc::UnboundedSender<String>,
    services: Mutex<HashMap<String, CachedServices>>,
}

impl Shared {
    pub(crate) fn allocatable(&self) -> Resources {
        self.node.lock().allocatable
    }

    pub(crate) fn remember_sandbox(&self, id: &SandboxId, uid: &str) {
        let mut map = self.sandboxes.lock();
        if !map.contains_key(id) {
            map.insert(id.clone(), uid.to_owned());
        }
    }

    pub(crate) fn forget_sandbox(&self, id: &SandboxId) {
        self.sandboxes.lock().remove(id);
    }

    pub(crate) fn worker_done(&self, uid: &str) {
        let _ = self.done.send(uid.to_owned());
    }

    fn node_reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(self.config.node_name.clone()),
            uid: Some(self.config.node_name.clone()),
            ..Default::default()
        }
    }

    fn node_event(&self, type_: EventType, reason: &str, note: String) {
        self.events.send(self.node_reference(), type_, reason, note);
    }

    fn kick_all(&self) {
        for entry in self.workers.lock().values() {
            entry.input.kick();
        }
    }
}

/// A handle on a running agent, for tests and benchmarks.
#[derive(Clone)]
pub struct AgentHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for AgentHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentHandle").field("node", &self.shared.config.node_name).finish()
    }
}

impl AgentHandle {
    /// The node's name.
    pub fn node_name(&self) -> &str {
        &self.shared.config.node_name
    }

    /// Whether the Node is registered.
    pub fn is_registered(&self) -> bool {
        *self.shared.registered.borrow()
    }

    /// Waits until the Node is registered.
    pub async fn registered(&self) {
        let mut rx = self.shared.registered.subscribe();
        let _ = rx.wait_for(|r| *r).await;
    }

    /// Pods the agent has a worker for (terminating ones included).
    pub fn pods(&self) -> usize {
        self.shared.workers.lock().len()
    }

    /// Pods with at least one running container.
    pub fn running_pods(&self) -> usize {
        self.shared.workers.lock().values().filter(|w| w.input.running.load(Ordering::Relaxed)).count()
    }

    /// The pod CIDR in use, if any.
    pub fn pod_cidr(&self) -> Option<String> {
        self.shared.node.lock().pod_cidr.clone()
    }

    /// A copy of the counters.
    pub fn stats(&self) -> AgentStats {
        let s = &self.shared.stats;
        AgentStats {
            status_writes: s.status_writes.load(Ordering::Relaxed),
            node_status_posts: s.node_status_posts.load(Ordering::Relaxed),
            lease_renewals: s.lease_renewals.load(Ordering::Relaxed),
            lease_failures: s.lease_failures.load(Ordering::Relaxed),
            events_dropped: s.events_dropped.load(Ordering::Relaxed),
        }
    }
}

/// Builds a [`NodeAgent`].
///
/// From [`NodeAgent::builder`]; here against an in-process API server, with
/// the node's state in a temporary directory:
///
/// ```
/// use std::sync::Arc;
/// use k8s_openapi::api::core::v1::Node;
/// use orchestra::testing::TestCluster;
/// use orchestra_node::agent::{NodeAgent, NodeConfig};
/// use orchestra_node::runtime::sim::SimRuntime;
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let cluster = TestCluster::start().await;
/// let root = tempfile::tempdir().unwrap();
/// let config = NodeConfig::new("worker-1").root_dir(root.path()).pod_cidr("10.244.1.0/24");
/// let agent = NodeAgent::builder(cluster.client(), Arc::new(SimRuntime::default()), config).build();
/// let handle = agent.handle();
/// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
/// let running = tokio::spawn(agent.run(async move {
///     let _ = stopped.await;
/// }));
///
/// handle.registered().await;
/// let nodes: kube::Api<Node> = kube::Api::all(cluster.client());
/// assert!(nodes.get_opt("worker-1").await.unwrap().is_some());
/// stop.send(()).unwrap();
/// running.await.unwrap().unwrap();
/// # });
/// ```
pub struct NodeAgentBuilder {
    client: Client,
    runtime: Arc<dyn RuntimeBackend>,
    config: NodeConfig,
    recorder: Option<Recorder>,
    shared_pods: Option<SharedPods>,
}

impl NodeAgentBuilder {
    /// Learns about pods from `pods` (one watch shared by every agent of the
    /// process) instead of a watch of its own.
    pub fn shared_pods(mut self, pods: SharedPods) -> Self {
        self.shared_pods = Some(pods);
        self
    }

    /// Publishes events through `recorder` (shared by many agents, say)
    /// instead of one of its own.
    pub fn recorder(mut self, recorder: Recorder) -> Self {
        self.recorder = Some(recorder);
        self
    }

    /// The agent, ready to [`run`](NodeAgent::run).
    pub fn build(self) -> NodeAgent {
        let stats = Arc::new(Stats::default());
        let (events_tx, events_rx) = mpsc::channel(1024);
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        let recorder =
            self.recorder.unwrap_or_else(|| Recorder::new(self.client.clone(), "kubelet", &self.config.node_name));
        let allocatable = node_status::capacity(&self.config).saturating_sub(&self.config.reserved);
        let shared = Arc::new(Shared {
            client: self.client,
            runtime: self.runtime,
            events: EventSink { tx: events_tx, stats: stats.clone() },
            stats,
            node: Mutex::new(NodeState { allocatable, ..NodeState::default() }),
            sandboxes: Mutex::default(),
            workers: Mutex::default(),
            registered: watch::channel(false).0,
            network_ready: watch::channel(false).0,
            done: done_tx,
            services: Mutex::default(),
            config: self.config,
        });
        NodeAgent { shared, events_rx, done_rx, recorder, shared_pods: self.shared_pods }
    }
}

/// A node agent (see the module documentation).
pub struct NodeAgent {
    shared: Arc<Shared>,
    events_rx: mpsc::Receiver<EventMsg>,
    done_rx: mpsc::UnboundedReceiver<String>,
    recorder: Recorder,
    shared_pods: Option<SharedPods>,
}

impl NodeAgent {
    /// An agent for `config.node_name`, talking to the API through `client`
    /// and running pods on `runtime`.
    pub fn builder(client: Client, runtime: Arc<dyn RuntimeBackend>, config: NodeConfig) -> NodeAgentBuilder {
        NodeAgentBuilder { client, runtime, config, recorder: None, shared_pods: None }
    }

    /// A handle for observing the agent while it runs.
    pub fn handle(&self) -> AgentHandle {
        AgentHandle { shared: self.shared.clone() }
    }

    /// Runs until `shutdown` completes. Containers keep running when the
    /// agent stops; the next agent on this runtime adopts them.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), AgentError> {
        let NodeAgent { shared, events_rx, done_rx, recorder, shared_pods } = self;
        let config = &shared.config;
        let mut tasks: Vec<tokio::task::JoinHandle<()>> = Vec::new();
        tasks.push(tokio::spawn(publish_events(events_rx, recorder)));
        shared.node_event(EventType::Normal, "Starting", "Starting kubelet.".into());
        if let Some(cidr) = &config.pod_cidr {
            shared.runtime.update_runtime_config(cidr).await?;
            shared.node.lock().pod_cidr = Some(cidr.clone());
            shared.network_ready.send_replace(true);
        }
        tasks.push(tokio::spawn(node_loop(shared.clone())));
        let (pods, pod_events) = match &shared_pods {
            Some(source) => {
                let view = PodView::shared(source, &config.node_name);
                let events = view.subscribe(Some(source));
                (view, events)
            }
            None => {
                let (view, informer) = PodView::own(&config.node_name);
                let events = view.subscribe(None);
                tasks.push(tokio::spawn(PodView::run_own(informer, shared.client.clone(), config.node_name.clone())));
                (view, events)
            }
        };
        let (static_tx, static_rx) = mpsc::unbounded_channel();
        match &config.static_pod_path {
            Some(dir) => tasks.push(tokio::spawn(scan_static_pods(
                dir.clone(),
                config.node_name.clone(),
                config.static_pod_check_interval,
                static_tx,
            ))),
            None => {
                let _ = static_tx.send(Vec::new());
            }
        }
        let mut dispatcher = Dispatcher {
            shared: shared.clone(),
            pods,
            static_pods: HashMap::new(),
            static_seen: false,
            mirror_busy: Arc::new(AtomicBool::new(false)),
            housekeeping: None,
        };
        let result = dispatcher.run(shutdown, pod_events, static_rx, done_rx).await;
        // The orphan sweep ends before the workers go: with no workers left
        // it would take every sandbox for an orphan and stop containers
        // that must outlive the agent.
        if let Some(sweep) = dispatcher.housekeeping.take() {
            sweep.abort();
            let _ = sweep.await;
        }
        for task in tasks {
            task.abort();
        }
        for (_, entry) in shared.workers.lock().drain() {
            entry.task.abort();
        }
        result
    }
}
