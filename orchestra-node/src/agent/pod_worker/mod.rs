//! One worker per pod UID: the kubelet's `syncPod`, level-triggered. Each
//! sync compares the pod spec with what the runtime has (listed by the pod's
//! UID label) and takes the next steps: volumes, sandbox, image pull, init
//! containers in order, app containers, restarts with crash-loop back-off,
//! probes; then writes the status if it changed. A sync returns when the
//! worker next needs to look (back-off expiry, probe due, deadline), and the
//! worker sleeps until then or until something happens (pod update, runtime
//! event, probe result).
//!
//! Termination (deletion timestamp, removal from the API, a removed static
//! manifest): graceful stop of every container (preStop hooks first), sandbox
//! stopped and removed, volumes removed, final status, and, for pods of the
//! API, the final delete with grace period 0 and a UID precondition.

mod containers;
mod hooks;
mod image_pull;
mod probing;
mod reporting;
mod sandbox;
mod termination;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::Shared;
use super::backoff::{Backoff, go_duration};
use super::probes::ProbeState;
use super::status::Waiting;
use crate::runtime::{
    ContainerFilter, ContainerStatus, LABEL_CONTAINER_NAME, LABEL_POD_UID, PodSandboxStatus, SandboxFilter,
};
use orchestra_ctrl::events::EventType;

/// What the dispatcher hands a worker; the worker reads it at each sync.
pub(crate) struct WorkerInput {
    state: Mutex<InputState>,
    notify: Notify,
    /// The pod reached Succeeded or Failed (its resources are free again).
    pub(crate) terminal: AtomicBool,
    /// The pod's containers are running (for the handle's counters).
    pub(crate) running: AtomicBool,
}

struct InputState {
    pod: Arc<Pod>,
    removed: bool,
    rejection: Option<(String, String)>,
    status_reset: bool,
}

impl WorkerInput {
    pub(crate) fn new(pod: Arc<Pod>, rejection: Option<(String, String)>) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(InputState { pod, removed: false, rejection, status_reset: false }),
            notify: Notify::new(),
            terminal: AtomicBool::new(false),
            running: AtomicBool::new(false),
        })
    }

    /// A newer version of the pod; `wake` when something the worker acts
    /// on changed (not for the echo of its own status write).
    pub(crate) fn update(&self, pod: Arc<Pod>, wake: bool) {
        self.state.lock().pod = pod;
        if wake {
            self.notify.notify_one();
        }
    }

    /// The pod is gone from its source: stop it (no final delete).
    pub(crate) fn remove(&self) {
        self.state.lock().removed = true;
        self.notify.notify_one();
    }

    /// The object the status is written to was recreated: write it again.
    pub(crate) fn reset_status(&self) {
        self.state.lock().status_reset = true;
        self.notify.notify_one();
    }

    /// Something happened (runtime event, network ready).
    pub(crate) fn kick(&self) {
        self.notify.notify_one();
    }

    pub(crate) fn pod(&self) -> Arc<Pod> {
        self.state.lock().pod.clone()
    }

    pub(crate) fn is_removed(&self) -> bool {
        self.state.lock().removed
    }
}

enum Flow {
    /// Sleep until then (or a trigger); `None`: until a trigger or resync.
    Wait(Option<Instant>),
    /// The pod is gone; the worker ends.
    Done,
}

/// The runtime's instances of one container name, newest first.
type Instances = Vec<ContainerStatus>;

struct ContainerProbes {
    startup: Option<ProbeState>,
    liveness: Option<ProbeState>,
    readiness: Option<ProbeState>,
}

pub(crate) struct PodWorker {
    shared: Arc<Shared>,
    input: Arc<WorkerInput>,
    uid: String,
    is_static: bool,
    crash: Backoff,
    image: Backoff,
    retry: Backoff,
    waiting: HashMap<String, Waiting>,
    failed_at: HashMap<String, Instant>,
    backoff_reported: HashMap<String, Instant>,
    probes: HashMap<String, ContainerProbes>,
    restart_pending: std::collections::HashSet<String>,
    /// The status last written to the API.
    written: Option<PodStatus>,
    /// The status the agent computed last (written or still to write).
    desired: Option<PodStatus>,
    rejected: bool,
    frozen: bool,
    forced: Option<(String, String, String)>,
    volumes: Option<HashMap<String, PathBuf>>,
    volumes_refreshed: Option<Instant>,
    /// The service account tokens of the pod's projected volumes.
    tokens: crate::agent::tokens::PodTokens,
    wake: Option<Instant>,
    resync: bool,
}

fn ms(d: Duration) -> String {
    go_duration(d)
}

fn pod_key(pod: &Pod) -> (String, String) {
    (pod.metadata.namespace.clone().unwrap_or_else(|| "default".into()), pod.metadata.name.clone().unwrap_or_default())
}

fn system_to_instant(at: SystemTime) -> Instant {
    let now = Instant::now();
    match SystemTime::now().duration_since(at) {
        Ok(ago) => now.checked_sub(ago).unwrap_or(now),
        Err(_) => now,
    }
}

fn is_terminal_phase(phase: Option<&str>) -> bool {
    matches!(phase, Some("Succeeded" | "Failed"))
}

impl PodWorker {
    pub(crate) fn new(shared: Arc<Shared>, input: Arc<WorkerInput>, uid: String, is_static: bool) -> Self {
        let pod = input.pod();
        let config = &shared.config;
        let frozen = !is_static && is_terminal_phase(pod.status.as_ref().and_then(|s| s.phase.as_deref()));
        Self {
            crash: Backoff::new(config.crash_backoff),
            image: Backoff::new(config.image_backoff),
            retry: Backoff::new(config.image_backoff),
            written: if is_static { None } else { pod.status.clone() },
            desired: if is_static { None } else { pod.status.clone() },
            restart_pending: Default::default(),
            rejected: false,
            shared,
            input,
            uid,
            is_static,
            waiting: HashMap::new(),
            failed_at: HashMap::new(),
            backoff_reported: HashMap::new(),
            probes: HashMap::new(),
            frozen,
            forced: None,
            volumes: None,
            volumes_refreshed: None,
            tokens: Default::default(),
            wake: None,
            resync: false,
        }
    }

    /// Runs until the pod is gone.
    pub(crate) async fn run(mut self) {
        let sync_every = self.shared.config.sync_frequency;
        let mut jitter = super::Jitter::new(&self.uid);
        loop {
            let flow = Box::pin(self.sync()).await;
            let next = match flow {
                Flow::Done => break,
                Flow::Wait(at) => at,
            };
            let resync_at = Instant::now() + jitter.spread(sync_every);
            let deadline = next.map_or(resync_at, |n| n.min(resync_at));
            tokio::select! {
                _ = self.input.notify.notified() => { self.resync = false; }
                _ = tokio::time::sleep_until(deadline) => { self.resync = deadline == resync_at; }
            }
        }
        self.input.running.store(false, Ordering::Relaxed);
        self.shared.worker_done(&self.uid);
    }

    fn wake_at(&mut self, at: Instant) {
        self.wake = Some(self.wake.map_or(at, |w| w.min(at)));
    }

    fn event(&self, pod: &Pod, container: Option<&str>, type_: EventType, reason: &str, note: String) {
        let mut reference = orchestra_ctrl::events::reference(pod);
        if let Some(c) = container {
            let init = pod.spec.iter().flat_map(|s| s.init_containers.iter().flatten()).any(|i| i.name == c);
            reference.field_path =
                Some(if init { format!("spec.initContainers{{{c}}}") } else { format!("spec.containers{{{c}}}") });
        }
        self.shared.events.send(reference, type_, reason, note);
    }

    async fn sync(&mut self) -> Flow {
        self.wake = None;
        let (pod, removed, rejection, status_reset) = {
            let mut s = self.input.state.lock();
            (s.pod.clone(), s.removed, s.rejection.take(), std::mem::take(&mut s.status_reset))
        };
        if status_reset {
            self.written = None;
        }
        if removed || pod.metadata.deletion_timestamp.is_some() {
            return self.terminate(&pod, removed).await;
        }
        if let Some((reason, message)) = rejection {
            self.event(&pod, None, EventType::Warning, &reason, message.clone());
            self.forced = Some(("Failed".into(), reason, message));
            self.rejected = true;
        }
        if self.frozen {
            self.cleanup_runtime().await;
            self.write_status(&pod, None).await;
            return Flow::Wait(self.wake);
        }
        if self.rejected {
            self.write_status(&pod, None).await;
            self.freeze().await;
            return Flow::Wait(self.wake);
        }
        if self.forced.is_none()
            && let Err(e) = self.sync_running(&pod).await
        {
            tracing::debug!(pod = %self.uid, error = %e, "sync failed");
            self.wake_at(Instant::now() + self.shared.config.api_retry);
        }
        let observed = self.observe(&pod).await;
        let status = self.write_status(&pod, Some(observed)).await;
        if is_terminal_phase(status.phase.as_deref()) {
            self.freeze().await;
            return Flow::Wait(self.wake);
        }
        self.check_deadline(&pod, &status).await;
        Flow::Wait(self.wake)
    }

    /// `activeDeadlineSeconds`: past it, the pod is killed and Failed.
    async fn check_deadline(&mut self, pod: &Pod, status: &PodStatus) {
        let Some(deadline) = pod.spec.as_ref().and_then(|s| s.active_deadline_seconds) else { return };
        let Some(start) = status.start_time.as_ref() else { return };
        let end = start.0.as_second() + deadline;
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        if now < end {
            self.wake_at(Instant::now() + Duration::from_secs((end - now) as u64));
            return;
        }
        let message = "Pod was active on the node longer than the specified deadline".to_string();
        self.event(pod, None, EventType::Normal, "DeadlineExceeded", message.clone());
        self.forced = Some(("Failed".into(), "DeadlineExceeded".into(), message));
        self.kill_all(pod, None).await;
        self.wake_at(Instant::now());
    }

    /// The pod ended: keep its status, free its sandbox.
    async fn freeze(&mut self) {
        self.frozen = true;
        self.input.terminal.store(true, Ordering::Relaxed);
        self.input.running.store(false, Ordering::Relaxed);
        self.cleanup_runtime().await;
    }

    async fn sandboxes(&self) -> Vec<PodSandboxStatus> {
        let filter =
            SandboxFilter { labels: [(LABEL_POD_UID.to_string(), self.uid.clone())].into(), ..Default::default() };
        self.shared.runtime.list_pod_sandboxes(&filter).await.unwrap_or_default()
    }

    async fn containers(&self) -> BTreeMap<String, Instances> {
        let filter =
            ContainerFilter { labels: [(LABEL_POD_UID.to_string(), self.uid.clone())].into(), ..Default::default() };
        let mut by_name: BTreeMap<String, Instances> = BTreeMap::new();
        for c in self.shared.runtime.list_containers(&filter).await.unwrap_or_default() {
            let name = c.labels.get(LABEL_CONTAINER_NAME).cloned().unwrap_or_else(|| c.name.clone());
            by_name.entry(name).or_default().push(c);
        }
        for list in by_name.values_mut() {
            list.sort_by(|a, b| b.attempt.cmp(&a.attempt).then(b.created_at.cmp(&a.created_at)));
        }
        by_name
    }
}
