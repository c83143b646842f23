//! The scheduler: keeps the cache and the queue up to date from the shared
//! informers it reads (the `watch` submodule), runs scheduling cycles one
//! pod at a time and binding cycles concurrently.

mod watch;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use tokio::sync::watch as tokio_watch;

use crate::algorithm::{Algorithm, AlgorithmOptions, Decision, FitError};
use crate::cache::Cache;
use crate::config::SchedulerConfiguration;
use crate::events::{EventRecorder, Record, pod_ref};
use crate::framework::*;
use crate::listers::Listers;
use crate::metrics::Metrics;
use crate::node_info::pod_uid;
use crate::profile::{Profile, ProfileError};
use crate::queue::{QueueOptions, QueuedPodInfo, SchedulingQueue};
use crate::registry::Registry;
use crate::snapshot::Snapshot;
use orchestra_ctrl::informer::SharedInformerFactory;
use orchestra_ctrl::leader::{ElectionConfig, LeaderElector};

/// Errors that stop the scheduler.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A profile did not build.
    #[error(transparent)]
    Profile(#[from] ProfileError),
    /// Bad configuration.
    #[error("configuration: {0}")]
    Config(String),
    /// The leader lease was lost.
    #[error("leader election lost")]
    LeaderLost,
}

/// Builds a [`Scheduler`].
///
/// ```no_run
/// # async fn example(client: kube::Client) -> Result<(), orchestra_sched::scheduler::Error> {
/// use orchestra_ctrl::informer::SharedInformerFactory;
/// use orchestra_sched::scheduler::SchedulerBuilder;
/// use orchestra_sched::config::SchedulerConfiguration;
///
/// // One cache of nodes and pods for the scheduler and the controllers.
/// let informers = SharedInformerFactory::new(client.clone());
/// let scheduler = SchedulerBuilder::new(client)
///     .config(SchedulerConfiguration::default())
///     .informers(informers.clone())
///     .identity("scheduler-1")
///     .build()?;
/// scheduler.run().await
/// # }
/// ```
pub struct SchedulerBuilder {
    client: kube::Client,
    config: SchedulerConfiguration,
    registry: Registry,
    identity: Option<String>,
    events: bool,
    informers: Option<SharedInformerFactory>,
}

impl SchedulerBuilder {
    /// A scheduler with the default configuration and registry.
    pub fn new(client: kube::Client) -> SchedulerBuilder {
        SchedulerBuilder {
            client,
            config: SchedulerConfiguration::default(),
            registry: Registry::default(),
            identity: None,
            events: true,
            informers: None,
        }
    }
    /// Uses `config`.
    pub fn config(mut self, config: SchedulerConfiguration) -> Self {
        self.config = config;
        self
    }
    /// Uses `registry` (e.g. the default one plus custom plugins).
    pub fn registry(mut self, registry: Registry) -> Self {
        self.registry = registry;
        self
    }
    /// The identity used for leader election and events.
    pub fn identity(mut self, identity: &str) -> Self {
        self.identity = Some(identity.into());
        self
    }
    /// Whether to record Events (default true).
    pub fn events(mut self, on: bool) -> Self {
        self.events = on;
        self
    }
    /// Reads nodes, pods and what plugins list from `informers`, shared with
    /// the other components of the process (default: a factory of its own
    /// over the builder's client). Its informers keep their transform:
    /// the default one drops managedFields, which nothing here reads.
    pub fn informers(mut self, informers: SharedInformerFactory) -> Self {
        self.informers = Some(informers);
        self
    }
    /// Builds the profiles and the queue. The informers the listers read
    /// start here (in the current Tokio runtime), so that a standby instance
    /// has them ready when it takes the lease.
    pub fn build(self) -> Result<Scheduler, Error> {
        if self.config.profiles.is_empty() {
            return Err(Error::Config("at least one profile is needed".into()));
        }
        let informers = self.informers.unwrap_or_else(|| SharedInformerFactory::new(self.client.clone()));
        let metrics = Arc::new(Metrics::new());
        let handle = Handle {
            client: Some(self.client.clone()),
            waiting_pods: Arc::new(WaitingPods::default()),
            namespaces: Default::default(),
            listers: Arc::new(Listers::from_factory(&informers)),
            metrics: metrics.clone(),
        };
        let mut profiles = Vec::new();
        let mut by_name = HashMap::new();
        for cfg in &self.config.profiles {
            if by_name.contains_key(&cfg.scheduler_name) {
                return Err(Error::Config(format!("duplicate profile {:?}", cfg.scheduler_name)));
            }
            let p = Profile::build(cfg, &self.registry, &handle)?;
            by_name.insert(cfg.scheduler_name.clone(), profiles.len());
            profiles.push(Arc::new(p));
        }
        let first_sort = profiles[0].queue_sort.name();
        if profiles.iter().any(|p| p.queue_sort.name() != first_sort) {
            return Err(Error::Config("every profile must use the same QueueSort plugin".into()));
        }
        let mut interest: HashMap<&'static str, Vec<ClusterEvent>> = HashMap::new();
        for p in &profiles {
            for (k, v) in &p.events {
                interest.entry(k).or_default().extend(v.iter().copied());
            }
        }
        let queue = Arc::new(SchedulingQueue::new(
            profiles[0].queue_sort.clone(),
            QueueOptions::default()
                .with_initial_backoff(Duration::from_secs(self.config.pod_initial_backoff_seconds))
                .with_max_backoff(Duration::from_secs(self.config.pod_max_backoff_seconds)),
            interest,
        ));
        let identity = self.identity.unwrap_or_else(|| {
            format!(
                "{}_{:x}",
                std::env::var("HOSTNAME").unwrap_or_else(|_| "orchestra-scheduler".into()),
                std::process::id() as u64 ^ (Instant::now().elapsed().as_nanos() as u64)
            )
        });
        Ok(Scheduler {
            shared: Arc::new(Shared {
                client: self.client,
                profiles,
                by_name,
                queue,
                cache: Arc::new(Cache::new()),
                metrics,
                events: std::sync::OnceLock::new(),
                events_on: self.events,
                config: self.config,
                handle,
                identity,
                informers,
                synced: std::sync::OnceLock::new(),
            }),
        })
    }
}

struct Shared {
    client: kube::Client,
    profiles: Vec<Arc<Profile>>,
    by_name: HashMap<String, usize>,
    queue: Arc<SchedulingQueue>,
    cache: Arc<Cache>,
    metrics: Arc<Metrics>,
    events: std::sync::OnceLock<EventRecorder>,
    events_on: bool,
    config: SchedulerConfiguration,
    handle: Handle,
    identity: String,
    informers: SharedInformerFactory,
    /// Turns true once the informers' first lists are in the cache, the
    /// queue and the listers (set when the first run subscribes).
    synced: std::sync::OnceLock<tokio_watch::Receiver<bool>>,
}

/// A scheduler serving one or more profiles.
#[derive(Clone)]
pub struct Scheduler {
    shared: Arc<Shared>,
}

impl Scheduler {
    /// The cache.
    pub fn cache(&self) -> &Arc<Cache> {
        &self.shared.cache
    }
    /// The queue.
    pub fn queue(&self) -> &Arc<SchedulingQueue> {
        &self.shared.queue
    }
    /// The metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.shared.metrics
    }
    /// The profiles.
    pub fn profiles(&self) -> &[Arc<Profile>] {
        &self.shared.profiles
    }
    /// The identity (leader election, events).
    pub fn identity(&self) -> &str {
        &self.shared.identity
    }
    /// The handle plugins were built with.
    pub fn handle(&self) -> &Handle {
        &self.shared.handle
    }
    /// The informers the scheduler reads.
    pub fn informers(&self) -> &SharedInformerFactory {
        &self.shared.informers
    }

    fn profile_for(&self, pod: &Pod) -> Option<&Arc<Profile>> {
        let name = pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()).unwrap_or("default-scheduler");
        self.shared.by_name.get(name).map(|i| &self.shared.profiles[*i])
    }

    fn events(&self) -> &EventRecorder {
        self.shared.events.get_or_init(|| {
            if self.shared.events_on {
                EventRecorder::start(self.shared.client.clone(), self.shared.identity.clone(), 16)
            } else {
                EventRecorder::disabled()
            }
        })
    }

    /// Runs until the lease is lost (or forever): elects a leader if
    /// configured, watches, schedules.
    pub async fn run(self) -> Result<(), Error> {
        self.run_until(std::future::pending()).await
    }

    /// Runs until `shutdown` or until the lease is lost. With leader
    /// election (the controller runtime's, on a `coordination.k8s.io/v1`
    /// Lease), scheduling starts once this instance leads; on `shutdown` the
    /// lease is released so another instance takes over at once, and a lost
    /// lease ends the run with [`Error::LeaderLost`], as kube-scheduler exits.
    pub async fn run_until(self, shutdown: impl std::future::Future<Output = ()> + Send) -> Result<(), Error> {
        let le = self.shared.config.leader_election.clone();
        if !le.leader_elect {
            let (_stop, never) = tokio_watch::channel(false);
            let mut shutdown = std::pin::pin!(shutdown);
            return tokio::select! {
                r = self.schedule_until(never) => r,
                _ = &mut shutdown => Ok(()),
            };
        }
        let elector = LeaderElector::new(
            self.shared.client.clone(),
            &le.resource_namespace,
            &le.resource_name,
            &self.shared.identity,
        )
        .config(
            ElectionConfig::default()
                .with_lease_duration(Duration::from_secs(le.lease_duration_seconds))
                .with_renew_deadline(Duration::from_secs(le.renew_deadline_seconds))
                .with_retry_period(Duration::from_secs(le.retry_period_seconds)),
        );
        let outcome: Arc<parking_lot::Mutex<Option<Result<(), Error>>>> = Default::default();
        let (s, result) = (self.clone(), outcome.clone());
        // Told apart from a lost lease: a shutdown ends the run with Ok.
        let shut = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let shutdown = {
            let shut = shut.clone();
            async move {
                shutdown.await;
                shut.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        };
        elector
            .run(
                move |_fence, stop| async move {
                    tracing::info!("{} became the leader", s.shared.identity);
                    let r = s.schedule_until(stop).await;
                    *result.lock() = Some(r);
                },
                shutdown,
            )
            .await
            .map_err(|e| Error::Config(format!("leader election: {e}")))?;
        if shut.load(std::sync::atomic::Ordering::SeqCst) {
            return Ok(());
        }
        outcome.lock().take().unwrap_or(Ok(()))
    }

    /// Watches and schedules until `stop` turns true ([`Error::LeaderLost`]).
    async fn schedule_until(self, mut stop: tokio_watch::Receiver<bool>) -> Result<(), Error> {
        self.events();
        let synced = self.start_watches();
        synced.await;
        let flusher = {
            let s = self.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(200));
                loop {
                    tick.tick().await;
                    s.shared.queue.flush();
                    s.shared.metrics.queue_sizes(s.shared.queue.sizes());
                }
            })
        };
        let mut alg = Algorithm::new(
            AlgorithmOptions::default()
                .with_percentage_of_nodes_to_score(self.shared.config.percentage_of_nodes_to_score)
                .with_parallelism(self.shared.config.parallelism),
        );
        // Kept across cycles and brought up to date before each.
        let mut snapshot = Snapshot::default();
        let result = loop {
            let next = tokio::select! {
                q = self.shared.queue.pop() => q,
                _ = stop.wait_for(|stopped| *stopped) => break Err(Error::LeaderLost),
            };
            let Some(q) = next else { break Ok(()) };
            self.schedule_one(&mut alg, &mut snapshot, q).await;
        };
        flusher.abort();
        result
    }

    /// One scheduling cycle for `q`.
    async fn schedule_one(&self, alg: &mut Algorithm, snapshot: &mut Snapshot, mut q: QueuedPodInfo) {
        let pod = q.info.clone();
        let Some(profile) = self.profile_for(&pod.pod).cloned() else {
            self.shared.queue.done(pod.uid());
            return;
        };
        let start = Instant::now();
        self.shared.cache.update_snapshot(snapshot);
        let snapshot: &Snapshot = snapshot;
        let mut state = CycleState::new();
        match alg.schedule(&profile, &mut state, &pod, snapshot) {
            Decision::Fit { node, .. } => {
                self.shared.cache.assume(pod.clone(), &node);
                for r in &profile.reserve {
                    let s = r.reserve(&state, &pod, &node);
                    if !s.is_success() {
                        // Every Reserve plugin is unreserved, in reverse
                        // order, as upstream (unreserve is idempotent).
                        for r in profile.reserve.iter().rev() {
                            r.unreserve(&state, &pod, &node);
                        }
                        self.shared.cache.forget(pod.uid());
                        q.unschedulable_plugins.insert(r.name());
                        self.fail(&profile, q, rejected_on(&node, s.with_plugin(r.name())), None, start).await;
                        return;
                    }
                }
                let mut waiting = Vec::new();
                let mut max_wait = Duration::ZERO;
                for p in &profile.permit {
                    let (s, timeout) = p.permit(&state, &pod, &node);
                    match s.code {
                        Code::Success => {}
                        Code::Wait => {
                            waiting.push(p.name());
                            max_wait = max_wait.max(timeout);
                        }
                        _ => {
                            for r in profile.reserve.iter().rev() {
                                r.unreserve(&state, &pod, &node);
                            }
                            self.shared.cache.forget(pod.uid());
                            q.unschedulable_plugins.insert(p.name());
                            self.fail(&profile, q, rejected_on(&node, s.with_plugin(p.name())), None, start).await;
                            return;
                        }
                    }
                }
                let waiter = (!waiting.is_empty()).then(|| Waiter {
                    plugins: waiting.clone(),
                    rx: self.shared.handle.waiting_pods.add(pod.uid(), waiting),
                    timeout: max_wait,
                });
                self.shared.queue.done(pod.uid());
                // The attempt counts as scheduled once bound (binding cycle).
                let s = self.clone();
                state.take_snapshot();
                tokio::spawn(async move { s.bind_cycle(profile, Arc::new(state), q, node, waiter, start).await });
            }
            Decision::Unfit(mut fit) => {
                let mut nominated = None;
                if !profile.post_filter.is_empty() {
                    let statuses = std::mem::take(&mut fit.statuses);
                    for p in &profile.post_filter {
                        let (node, s) = p
                            .post_filter(PostFilterArgs {
                                state: &state,
                                pod: &pod,
                                snapshot,
                                statuses: &statuses,
                                profile: &profile,
                            })
                            .await;
                        if s.is_success() {
                            if let Some(node) = &node {
                                self.shared.cache.nominate(pod.clone(), node);
                            }
                            nominated = node;
                            break;
                        }
                        if !s.reasons.is_empty() {
                            fit.post_filter_message = Some(s.message());
                        }
                    }
                    fit.statuses = statuses;
                }
                q.unschedulable_plugins = fit.unschedulable_plugins.clone();
                let msg = fit.message();
                self.fail(&profile, q, Status::unschedulable(msg), nominated, start).await;
            }
            Decision::Error(s) => {
                self.fail(&profile, q, s, None, start).await;
            }
        }
    }

    /// Requeues `q`, sets PodScheduled=False and records FailedScheduling.
    async fn fail(
        &self,
        profile: &Profile,
        q: QueuedPodInfo,
        status: Status,
        nominated: Option<String>,
        start: Instant,
    ) {
        let error = status.code == Code::Error;
        let result = if error { "error" } else { "unschedulable" };
        self.shared.metrics.attempt(result, &profile.scheduler_name, start.elapsed().as_secs_f64());
        let pod = q.info.pod.clone();
        let message = status.message();
        let mut q = q;
        // A pod holding a nomination waits for its victims, not a backoff.
        q.nominated = nominated.is_some() || self.shared.cache.nominated_node(pod_uid(&pod)).is_some();
        self.shared.queue.add_unschedulable(q, error);
        let reason = if error { "SchedulerError" } else { "Unschedulable" };
        self.events().record(Record {
            pod: pod_ref(&pod),
            type_: "Warning",
            reason: "FailedScheduling",
            action: "Scheduling",
            message: message.clone(),
            component: profile.scheduler_name.clone(),
        });
        let current = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()));
        let same = current == Some(("False".into(), Some(reason.into()), Some(message.clone())));
        let nominated_same = nominated.is_none()
            || pod.status.as_ref().and_then(|s| s.nominated_node_name.as_ref()) == nominated.as_ref();
        if same && nominated_same {
            return;
        }
        let client = self.shared.client.clone();
        tokio::spawn(async move {
            let now = k8s_openapi::jiff::Timestamp::now();
            let mut status = serde_json::json!({
                "conditions": [{
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": reason,
                    "message": message,
                    "lastTransitionTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now),
                }]
            });
            if let Some(n) = nominated {
                status["nominatedNodeName"] = serde_json::json!(n);
            }
            let api: Api<Pod> = Api::namespaced(client, pod.metadata.namespace.as_deref().unwrap_or("default"));
            let name = pod.metadata.name.clone().unwrap_or_default();
            if let Err(e) = api
                .patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Strategic(serde_json::json!({ "status": status })),
                )
                .await
            {
                tracing::debug!("pod status not updated: {e}");
            }
        });
    }

    /// The binding cycle of a pod assumed on `node` in the scheduling cycle
    /// that started at `start`: waits at Permit, PreBind, Bind, PostBind.
    async fn bind_cycle(
        &self,
        profile: Arc<Profile>,
        state: Arc<CycleState>,
        q: QueuedPodInfo,
        node: String,
        waiter: Option<Waiter>,
        start: Instant,
    ) {
        let pod = q.info.clone();
        let mut status = Status::success();
        if let Some(w) = waiter {
            status = match tokio::time::timeout(w.timeout, w.rx).await {
                Ok(Ok(s)) => s,
                _ => {
                    let pending = self.shared.handle.waiting_pods.remove(pod.uid());
                    let plugin = pending.first().or(w.plugins.first()).copied().unwrap_or_default();
                    Status::unschedulable(format!(
                        "rejected due to timeout after waiting {:?} at plugin {plugin}",
                        w.timeout
                    ))
                    .with_plugin(plugin)
                }
            };
            if status.is_rejected() {
                // Upstream: a pod rejected at Permit is unschedulable (Permit
                // is the last point that may reject it), not a failed binding.
                for r in profile.reserve.iter().rev() {
                    r.unreserve(&state, &pod, &node);
                }
                self.shared.cache.forget(pod.uid());
                let mut q = q;
                q.unschedulable_plugins = HashSet::from([status.plugin]);
                tracing::debug!(pod = %pod.key(), %node, "rejected at permit: {}", status.message());
                let uid = pod.uid().to_owned();
                self.fail(&profile, q, rejected_on(&node, status), None, start).await;
                // The room it held is free again; the pod itself waits for an
                // event its rejecting plugin registered for.
                self.shared.queue.on_event_except(ClusterEvent::new(EventResource::AssignedPod, action::DELETE), &uid);
                return;
            }
        }
        if status.is_success() {
            for p in &profile.pre_bind {
                let s = p.pre_bind(&state, &pod, &node).await;
                if !s.is_success() {
                    status = s.with_plugin(p.name());
                    break;
                }
            }
        }
        if status.is_success() {
            status = Status::skip();
            for b in &profile.bind {
                let s = b.bind(&state, &pod, &node).await;
                if !s.is_skip() {
                    status = s.with_plugin(b.name());
                    break;
                }
            }
        }
        if status.is_success() {
            self.shared.metrics.attempt("scheduled", &profile.scheduler_name, start.elapsed().as_secs_f64());
            self.shared.metrics.e2e_duration.observe(q.initial_timestamp.elapsed().as_secs_f64());
            for p in &profile.post_bind {
                p.post_bind(&state, &pod, &node);
            }
            self.events().record(Record {
                pod: pod_ref(&pod.pod),
                type_: "Normal",
                reason: "Scheduled",
                action: "Binding",
                message: format!("Successfully assigned {} to {}", pod.key(), node),
                component: profile.scheduler_name.clone(),
            });
            return;
        }
        // Binding failed: undo and retry.
        for r in profile.reserve.iter().rev() {
            r.unreserve(&state, &pod, &node);
        }
        self.shared.cache.forget(pod.uid());
        let gone = status.code == Code::UnschedulableAndUnresolvable && status.message().starts_with("pod not found");
        if gone {
            self.shared.queue.done(pod.uid());
            return;
        }
        self.shared.queue.on_event(ClusterEvent::new(EventResource::AssignedPod, action::DELETE));
        let mut q = q;
        q.unschedulable_plugins.clear();
        let msg = format!("Binding rejected: {}", status.message());
        tracing::debug!(pod = %pod.key(), %node, "{msg}");
        self.fail(&profile, q, Status::error(msg), None, start).await;
    }
}

/// A pod parked at Permit: the plugins it waits for, the channel their
/// verdict comes on, and the longest wait.
struct Waiter {
    plugins: Vec<&'static str>,
    rx: tokio::sync::oneshot::Receiver<Status>,
    timeout: Duration,
}

/// A rejection at Reserve or Permit, worded as upstream's fit error over the
/// one node chosen (`0/1 nodes are available: 1 <reason>.`); other codes
/// (errors) are left as they are.
fn rejected_on(node: &str, status: Status) -> Status {
    if !status.is_rejected() {
        return status;
    }
    let message = FitError {
        num_all_nodes: 1,
        statuses: HashMap::from([(node.to_owned(), status.clone())]),
        ..Default::default()
    }
    .message();
    Status { code: status.code, reasons: vec![message], plugin: status.plugin }
}

/// Re-exported for tests: the fit error type.
pub type SchedulingFitError = FitError;
