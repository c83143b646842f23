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
pub mod config;
pub mod env;
pub mod lease;
pub mod node_status;
mod pod_source;
mod pod_worker;
pub mod probes;
pub mod resources;
pub mod static_pods;
pub mod status;
pub mod volumes;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeStatus, ObjectReference, Pod, Service};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use orchestra_ctrl::events::{EventType, Recorder};
use orchestra_ctrl::informer::{Event, ObjectKey};
use parking_lot::Mutex;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::time::Instant;

pub use backoff::BackoffConfig;
pub use config::{CapacitySource, NodeConfig, NodeInfoOverrides, Resources};
pub use pod_source::SharedPods;

use crate::runtime::{ContainerEvent, LABEL_POD_UID, RuntimeBackend, RuntimeError, SandboxFilter, SandboxId};
use pod_source::PodView;
use pod_worker::{PodWorker, WorkerInput};
use static_pods::StaticPod;

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

struct EventMsg {
    regarding: ObjectReference,
    type_: EventType,
    reason: String,
    note: String,
}

/// Events queued for the publisher task.
pub(crate) struct EventSink {
    tx: mpsc::Sender<EventMsg>,
    stats: Arc<Stats>,
}

impl EventSink {
    pub(crate) fn send(&self, regarding: ObjectReference, type_: EventType, reason: &str, note: String) {
        let msg = EventMsg { regarding, type_, reason: reason.into(), note };
        if self.tx.try_send(msg).is_err() {
            self.stats.events_dropped.fetch_add(1, Ordering::Relaxed);
        }
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

/// The services of a namespace and when they were listed.
type CachedServices = (Instant, Arc<Vec<Service>>);

/// How long the services of a namespace are reused for service links.
const SERVICE_CACHE_TTL: Duration = Duration::from_secs(10);

impl Shared {
    async fn services_of(&self, namespace: &str) -> Arc<Vec<Service>> {
        if let Some((at, list)) = self.services.lock().get(namespace)
            && at.elapsed() < SERVICE_CACHE_TTL
        {
            return list.clone();
        }
        let api: Api<Service> = Api::namespaced(self.client.clone(), namespace);
        let list = Arc::new(api.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default());
        self.services.lock().insert(namespace.to_owned(), (Instant::now(), list.clone()));
        list
    }

    /// Service link variables for a container in `namespace`: the API
    /// server's (`KUBERNETES_SERVICE_HOST`...) always, the namespace's when
    /// `all`.
    pub(crate) async fn service_env(&self, namespace: &str, all: bool) -> Vec<(String, String)> {
        let mut services: Vec<Service> = Vec::new();
        if all {
            services.extend(self.services_of(namespace).await.iter().cloned());
        }
        if !all || namespace != "default" {
            let master = self.services_of("default").await;
            services.extend(master.iter().filter(|s| s.metadata.name.as_deref() == Some("kubernetes")).cloned());
        }
        env::service_env(&services)
    }

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

async fn publish_events(mut rx: mpsc::Receiver<EventMsg>, recorder: Recorder) {
    while let Some(msg) = rx.recv().await {
        if let Err(e) = recorder.publish(msg.regarding, msg.type_, &msg.reason, &msg.reason, &msg.note).await {
            tracing::debug!(error = %e, reason = %msg.reason, "event not recorded");
        }
    }
}

async fn scan_static_pods(
    dir: std::path::PathBuf,
    node_name: String,
    every: Duration,
    tx: mpsc::UnboundedSender<Vec<StaticPod>>,
) {
    let mut last: Option<Vec<StaticPod>> = None;
    loop {
        let (dir2, node2) = (dir.clone(), node_name.clone());
        let scanned = tokio::task::spawn_blocking(move || static_pods::load_dir(&dir2, &node2)).await;
        if let Ok((pods, errors)) = scanned {
            for e in errors {
                tracing::warn!(error = %e, "static pod manifest ignored");
            }
            if last.as_ref() != Some(&pods) {
                if tx.send(pods.clone()).is_err() {
                    return;
                }
                last = Some(pods);
            }
        }
        tokio::time::sleep(every).await;
    }
}

struct Dispatcher {
    shared: Arc<Shared>,
    pods: PodView,
    static_pods: HashMap<String, StaticPod>,
    static_seen: bool,
    mirror_busy: Arc<AtomicBool>,
    /// The orphan sweep in progress, if any (one at a time).
    housekeeping: Option<tokio::task::JoinHandle<()>>,
}

fn significant_change(old: &Pod, new: &Pod) -> bool {
    old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
        || old.metadata.deletion_grace_period_seconds != new.metadata.deletion_grace_period_seconds
        || old.spec != new.spec
        || old.metadata.labels != new.metadata.labels
        || old.metadata.annotations != new.metadata.annotations
}

impl Dispatcher {
    async fn run(
        &mut self,
        shutdown: impl Future<Output = ()> + Send,
        mut pod_events: mpsc::UnboundedReceiver<Event<Pod>>,
        mut static_rx: mpsc::UnboundedReceiver<Vec<StaticPod>>,
        mut done_rx: mpsc::UnboundedReceiver<String>,
    ) -> Result<(), AgentError> {
        let mut runtime_events = self.shared.runtime.events();
        let mut network = self.shared.network_ready.subscribe();
        let mut housekeeping = tokio::time::interval(self.shared.config.housekeeping_interval);
        housekeeping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => return Ok(()),
                Some(event) = pod_events.recv() => self.on_pod_event(event),
                Some(pods) = static_rx.recv() => self.on_static_pods(pods),
                Some(uid) = done_rx.recv() => self.on_done(&uid),
                event = runtime_events.recv() => match event {
                    Ok(ContainerEvent::Exited { sandbox_id, .. }) => {
                        let uid = self.shared.sandboxes.lock().get(&sandbox_id).cloned();
                        if let Some(uid) = uid
                            && let Some(entry) = self.shared.workers.lock().get(&uid)
                        {
                            entry.input.kick();
                        }
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => self.shared.kick_all(),
                    Err(broadcast::error::RecvError::Closed) => runtime_events = self.shared.runtime.events(),
                },
                Ok(()) = network.changed() => self.shared.kick_all(),
                _ = housekeeping.tick() => self.housekeeping(),
            }
        }
    }

    fn used_resources(&self) -> Resources {
        let mut used = Resources::default();
        for entry in self.shared.workers.lock().values() {
            if !entry.input.terminal.load(Ordering::Relaxed) {
                resources::accumulate(&mut used, &entry.requests);
            }
        }
        used
    }

    fn start_worker(&self, pod: Arc<Pod>, is_static: bool) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if uid.is_empty() || self.shared.workers.lock().contains_key(&uid) {
            return;
        }
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let terminal = matches!(phase, Some("Succeeded" | "Failed"));
        let requests = resources::pod_requests(&pod);
        let mut rejection = None;
        if !terminal
            && pod.metadata.deletion_timestamp.is_none()
            && let Err(r) = resources::admit(&requests, &self.used_resources(), &self.shared.allocatable())
        {
            rejection = Some((r.reason, r.message));
        }
        let rejected = rejection.is_some();
        let input = WorkerInput::new(pod, rejection);
        if terminal || rejected {
            input.terminal.store(true, Ordering::Relaxed);
        }
        let worker = PodWorker::new(self.shared.clone(), input.clone(), uid.clone(), is_static);
        let task = tokio::spawn(worker.run());
        self.shared.workers.lock().insert(uid, WorkerEntry { input, requests, is_static, task });
    }

    fn on_pod_event(&mut self, event: Event<Pod>) {
        match event {
            Event::Apply { old, new } => {
                if static_pods::is_mirror(&new) {
                    self.on_mirror(&new, old.as_deref());
                    return;
                }
                let uid = new.metadata.uid.clone().unwrap_or_default();
                let existing = self.shared.workers.lock().get(&uid).map(|e| e.input.clone());
                match existing {
                    Some(input) => {
                        let wake = old.as_deref().is_none_or(|o| significant_change(o, &new)) || {
                            let current = input.pod();
                            significant_change(&current, &new)
                        };
                        input.update(new, wake);
                    }
                    None => self.start_worker(new, false),
                }
            }
            Event::Delete(pod) => {
                if static_pods::is_mirror(&pod) {
                    self.reconcile_mirrors();
                    return;
                }
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                if let Some(entry) = self.shared.workers.lock().get(&uid) {
                    entry.input.remove();
                }
            }
        }
    }

    fn on_mirror(&mut self, mirror: &Pod, old: Option<&Pod>) {
        let hash = static_pods::mirror_hash(mirror).unwrap_or_default().to_owned();
        let recreated = old.is_none_or(|o| o.metadata.uid != mirror.metadata.uid);
        if recreated && let Some(entry) = self.shared.workers.lock().get(&hash) {
            entry.input.reset_status();
        }
        let stale = !self.static_pods.contains_key(&hash) || mirror.metadata.deletion_timestamp.is_some();
        if stale && self.static_seen {
            self.reconcile_mirrors();
        }
    }

    fn on_static_pods(&mut self, pods: Vec<StaticPod>) {
        self.static_seen = true;
        let wanted: HashMap<String, StaticPod> = pods.into_iter().map(|p| (p.uid().to_owned(), p)).collect();
        for uid in self.static_pods.keys() {
            if !wanted.contains_key(uid)
                && let Some(entry) = self.shared.workers.lock().get(uid)
            {
                entry.input.remove();
            }
        }
        for (uid, p) in &wanted {
            if !self.shared.workers.lock().contains_key(uid) {
                self.start_worker(Arc::new(p.pod.clone()), true);
            }
        }
        self.static_pods = wanted;
        self.reconcile_mirrors();
    }

    fn on_done(&mut self, uid: &str) {
        let entry = self.shared.workers.lock().remove(uid);
        let Some(entry) = entry else { return };
        let pod = entry.input.pod();
        self.shared.sandboxes.lock().retain(|_, u| u != uid);
        // The same UID still wanted (a static manifest put back): start over.
        if entry.is_static {
            if let Some(p) = self.static_pods.get(uid) {
                self.start_worker(Arc::new(p.pod.clone()), true);
            }
        } else if let Some(current) = self.pods.get(&ObjectKey::of(pod.as_ref()))
            && current.metadata.uid.as_deref() == Some(uid)
            && !entry.input.is_removed()
            && current.metadata.deletion_timestamp.is_none()
        {
            self.start_worker(current, false);
        }
    }

    /// Creates missing mirror pods, replaces stale ones, deletes orphans.
    fn reconcile_mirrors(&self) {
        if self.mirror_busy.swap(true, Ordering::AcqRel) {
            return;
        }
        let busy = self.mirror_busy.clone();
        let shared = self.shared.clone();
        let informer = self.pods.clone();
        let statics: Vec<Pod> = self.static_pods.values().map(|p| p.pod.clone()).collect();
        let static_seen = self.static_seen;
        tokio::spawn(async move {
            reconcile_mirrors(&shared, &informer, &statics, static_seen).await;
            busy.store(false, Ordering::Release);
        });
    }

    fn housekeeping(&mut self) {
        if self.static_seen && self.pods.has_synced() {
            if self.shared.config.static_pod_path.is_some() || !self.static_pods.is_empty() {
                self.reconcile_mirrors();
            }
            if self.housekeeping.as_ref().is_none_or(|sweep| sweep.is_finished()) {
                let shared = self.shared.clone();
                self.housekeeping = Some(tokio::spawn(async move { remove_orphans(&shared).await }));
            }
        }
    }
}

async fn reconcile_mirrors(shared: &Shared, informer: &PodView, statics: &[Pod], static_seen: bool) {
    let node_uid = shared.node.lock().uid.clone();
    let Some(node_uid) = node_uid else { return };
    let node = &shared.config.node_name;
    let wanted: HashSet<(String, String)> = statics
        .iter()
        .map(|p| (p.metadata.namespace.clone().unwrap_or_default(), p.metadata.name.clone().unwrap_or_default()))
        .collect();
    for p in statics {
        let namespace = p.metadata.namespace.clone().unwrap_or_default();
        let name = p.metadata.name.clone().unwrap_or_default();
        let uid = p.metadata.uid.clone().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(shared.client.clone(), &namespace);
        let existing = informer.get(&ObjectKey::new(namespace.clone(), name.clone()));
        if let Some(existing) = &existing {
            let ok = static_pods::mirror_hash(existing) == Some(uid.as_str())
                && existing.metadata.deletion_timestamp.is_none();
            if ok {
                continue;
            }
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: existing
                    .metadata
                    .uid
                    .clone()
                    .map(|u| Preconditions { uid: Some(u), resource_version: None }),
                ..Default::default()
            };
            if let Err(e) = api.delete(&name, &params).await
                && !matches!(&e, kube::Error::Api(s) if s.code == 404)
            {
                tracing::debug!(pod = %name, error = %e, "deleting a stale mirror pod failed");
                continue;
            }
        }
        let mirror = static_pods::mirror_pod(p, node, &node_uid);
        match api.create(&PostParams::default(), &mirror).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => tracing::debug!(pod = %name, error = %e, "creating a mirror pod failed"),
        }
    }
    if !static_seen {
        return;
    }
    // Mirror pods whose manifest is gone.
    for pod in informer.list() {
        if !static_pods::is_mirror(&pod) {
            continue;
        }
        let key = (pod.metadata.namespace.clone().unwrap_or_default(), pod.metadata.name.clone().unwrap_or_default());
        if wanted.contains(&key) {
            continue;
        }
        let api: Api<Pod> = Api::namespaced(shared.client.clone(), &key.0);
        let params = DeleteParams { grace_period_seconds: Some(0), ..Default::default() };
        let _ = api.delete(&key.1, &params).await;
    }
}

/// Stops and removes this node's sandboxes that belong to no known pod.
async fn remove_orphans(shared: &Shared) {
    let filter = SandboxFilter {
        labels: [(LABEL_NODE_NAME.to_string(), shared.config.node_name.clone())].into(),
        ..Default::default()
    };
    let Ok(sandboxes) = shared.runtime.list_pod_sandboxes(&filter).await else { return };
    let known: HashSet<String> = shared.workers.lock().keys().cloned().collect();
    for s in sandboxes {
        let Some(uid) = s.labels.get(LABEL_POD_UID) else { continue };
        if known.contains(uid) {
            continue;
        }
        tracing::info!(sandbox = %s.id, pod = %uid, "removing an orphaned sandbox");
        let _ = shared.runtime.stop_pod_sandbox(&s.id).await;
        let _ = shared.runtime.remove_pod_sandbox(&s.id).await;
        let _ = volumes::cleanup(&shared.config.root_dir, uid);
    }
}

/// Registration, node status and lease, in one task per agent.
async fn node_loop(shared: Arc<Shared>) {
    let config = &shared.config;
    let nodes: Api<Node> = Api::all(shared.client.clone());
    let mut lease = lease::LeaseKeeper::new(shared.client.clone(), &config.node_name, config.lease_duration_seconds);
    let mut jitter = Jitter::new(&config.node_name);
    let mut register_delay = Duration::from_millis(100).max(config.api_retry / 2);
    let mut last_posted: Option<NodeStatus> = None;
    let mut last_post_at = Instant::now();
    let mut runtime_version: Option<String> = None;
    let mut next_status = Instant::now();
    let mut next_lease = Instant::now();
    loop {
        if !*shared.registered.borrow() {
            match register(&shared, &nodes).await {
                Ok(node) => {
                    let uid = node.metadata.uid.clone();
                    shared.node.lock().uid = uid;
                    adopt_pod_cidr(&shared, &node).await;
                    shared.registered.send_replace(true);
                    next_status = Instant::now();
                    next_lease = Instant::now();
                }
                Err(e) => {
                    tracing::debug!(node = %config.node_name, error = %e, "registration failed; retrying");
                    tokio::time::sleep(jitter.spread(register_delay)).await;
                    register_delay = (register_delay * 2).min(Duration::from_secs(7));
                    continue;
                }
            }
        }
        tokio::time::sleep_until(next_status.min(next_lease)).await;
        let now = Instant::now();
        if now >= next_status {
            next_status = now + jitter.spread(config.node_status_update_frequency);
            if runtime_version.is_none() {
                runtime_version = shared.runtime.version().await.ok().map(|v| v.container_runtime_version());
            }
            let capacity = node_status::capacity(config);
            let allocatable = capacity.saturating_sub(&config.reserved);
            shared.node.lock().allocatable = allocatable;
            let pressure = if config.read_host_pressure {
                node_status::host_pressure(&config.root_dir)
            } else {
                Default::default()
            };
            let network_ready = shared.node.lock().pod_cidr.is_some();
            let observation = node_status::NodeObservation {
                capacity,
                allocatable,
                pressure,
                network_ready,
                runtime_version: runtime_version.clone().unwrap_or_default(),
                images: shared.runtime.list_images().await.unwrap_or_default(),
            };
            let status = node_status::node_status(config, &observation, last_posted.as_ref(), &status::now());
            let due = last_posted.as_ref().is_none_or(|old| node_status::changed(old, &status))
                || now.duration_since(last_post_at) >= config.node_status_report_frequency;
            if due {
                let patch = serde_json::json!({ "status": status });
                match nodes.patch_status(&config.node_name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                    Ok(node) => {
                        shared.stats.node_status_posts.fetch_add(1, Ordering::Relaxed);
                        let was_ready = last_posted.as_ref().is_some_and(is_ready);
                        if is_ready(&status) != was_ready {
                            let (reason, word) = if is_ready(&status) {
                                ("NodeReady", "NodeReady")
                            } else {
                                ("NodeNotReady", "NodeNotReady")
                            };
                            shared.node_event(
                                EventType::Normal,
                                reason,
                                format!("Node {} status is now: {word}", config.node_name),
                            );
                        }
                        last_posted = Some(status);
                        last_post_at = now;
                        shared.node.lock().uid = node.metadata.uid.clone();
                        if adopt_pod_cidr(&shared, &node).await {
                            next_status = Instant::now();
                        }
                    }
                    Err(kube::Error::Api(s)) if s.code == 404 => {
                        // Someone deleted the Node: register again.
                        shared.registered.send_replace(false);
                        last_posted = None;
                        continue;
                    }
                    Err(e) => {
                        tracing::debug!(node = %config.node_name, error = %e, "node status update failed");
                        next_status = Instant::now() + config.api_retry;
                    }
                }
            } else if !network_ready
                && let Ok(node) = nodes.get(&config.node_name).await
                && adopt_pod_cidr(&shared, &node).await
            {
                next_status = Instant::now();
            }
        }
        if now >= next_lease {
            let uid = shared.node.lock().uid.clone();
            match lease.renew(uid.as_deref()).await {
                Ok(()) => {
                    shared.stats.lease_renewals.fetch_add(1, Ordering::Relaxed);
                    next_lease = now + jitter.spread(config.lease_renew_interval);
                }
                Err(e) => {
                    tracing::debug!(node = %config.node_name, error = %e, "lease renewal failed");
                    shared.stats.lease_failures.fetch_add(1, Ordering::Relaxed);
                    next_lease = now + config.api_retry.min(config.lease_renew_interval);
                }
            }
        }
    }
}

fn is_ready(status: &NodeStatus) -> bool {
    status.conditions.iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True")
}

/// Takes `spec.podCIDR` of the Node if it changed; returns whether it did.
async fn adopt_pod_cidr(shared: &Shared, node: &Node) -> bool {
    let Some(cidr) = node.spec.as_ref().and_then(|s| s.pod_cidr.clone()).filter(|c| !c.is_empty()) else {
        return false;
    };
    if shared.node.lock().pod_cidr.as_deref() == Some(cidr.as_str()) {
        return false;
    }
    match shared.runtime.update_runtime_config(&cidr).await {
        Ok(()) => {
            shared.node.lock().pod_cidr = Some(cidr);
            shared.network_ready.send_replace(true);
            true
        }
        Err(e) => {
            tracing::warn!(node = %shared.config.node_name, error = %e, "the runtime refused the pod CIDR");
            false
        }
    }
}

async fn register(shared: &Shared, nodes: &Api<Node>) -> Result<Node, kube::Error> {
    let config = &shared.config;
    let node = node_status::initial_node(config);
    match nodes.create(&PostParams::default(), &node).await {
        Ok(created) => {
            let note = format!("Node {} status is now: NodeHasSufficientMemory", config.node_name);
            shared.node_event(EventType::Normal, "NodeHasSufficientMemory", note);
            let note = format!("Node {} status is now: NodeHasNoDiskPressure", config.node_name);
            shared.node_event(EventType::Normal, "NodeHasNoDiskPressure", note);
            let note = format!("Node {} status is now: NodeHasSufficientPID", config.node_name);
            shared.node_event(EventType::Normal, "NodeHasSufficientPID", note);
            let note = format!("Node {} event: Registered Node {} in Controller", config.node_name, config.node_name);
            shared.node_event(EventType::Normal, "RegisteredNode", note);
            Ok(created)
        }
        Err(kube::Error::Api(s)) if s.code == 409 => {
            // Already registered (an agent restart): make sure our labels are there.
            let patch = serde_json::json!({ "metadata": { "labels": node_status::node_labels(config) } });
            nodes.patch(&config.node_name, &PatchParams::default(), &Patch::Merge(&patch)).await
        }
        Err(e) => Err(e),
    }
}
