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

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{ConfigMap, Container, LifecycleHandler, Pod, PodStatus, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::Shared;
use super::backoff::{Backoff, go_duration};
use super::env::{self, EnvContext, Objects};
use super::probes::{self, ProbeResult, ProbeState, ProbeType, Transition};
use super::resources::{int_value, milli_value};
use super::status::{self, ContainerView, PodObservation, Waiting};
use super::volumes;
use crate::runtime::{
    ContainerConfig, ContainerFilter, ContainerResources, ContainerState, ContainerStatus, LABEL_CONTAINER_NAME,
    LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID, PodSandboxConfig, PodSandboxMetadata, PodSandboxStatus,
    RuntimeError, SandboxFilter, SandboxState,
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

    fn grace(pod: &Pod) -> Duration {
        let secs = pod
            .metadata
            .deletion_grace_period_seconds
            .or_else(|| pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds))
            .unwrap_or(30)
            .max(0);
        Duration::from_secs(secs as u64)
    }

    /// Runs a lifecycle hook (exec, httpGet, sleep) within `budget`.
    async fn run_hook(
        &self,
        hook: &LifecycleHandler,
        spec: &Container,
        id: &String,
        pod_ip: Option<IpAddr>,
        budget: Duration,
    ) -> Result<(), String> {
        let runtime = self.shared.runtime.clone();
        let run = async {
            if let Some(exec) = &hook.exec {
                let command = exec.command.clone().unwrap_or_default();
                match runtime.exec_sync(id, &command, budget).await {
                    Ok(r) if r.exit_code == 0 => Ok(()),
                    Ok(r) => Err(format!(
                        "Exec lifecycle hook ({command:?}) for Container {:?} failed - error: command exited with {}, message: {:?}",
                        spec.name,
                        r.exit_code,
                        String::from_utf8_lossy(&r.stdout).to_string() + &String::from_utf8_lossy(&r.stderr)
                    )),
                    Err(e) => Err(e.to_string()),
                }
            } else if let Some(http) = &hook.http_get {
                let ip = http.host.as_deref().and_then(|h| h.parse().ok()).or(pod_ip);
                match (ip, probes::resolve_port(&http.port, spec)) {
                    (Some(ip), Some(port)) => match probes::http_get(ip, port, http, budget).await {
                        Ok(code) if (200..400).contains(&code) => Ok(()),
                        Ok(code) => Err(format!(
                            "HTTP lifecycle hook ({:?}) for Container {:?} failed - status {code}",
                            http.path, spec.name
                        )),
                        Err(e) => Err(e),
                    },
                    _ => Err("no address for the hook".into()),
                }
            } else if let Some(sleep) = &hook.sleep {
                tokio::time::sleep(Duration::from_secs(sleep.seconds.max(0) as u64)).await;
                Ok(())
            } else {
                Ok(())
            }
        };
        match tokio::time::timeout(budget, run).await {
            Ok(r) => r,
            Err(_) => Err(format!("lifecycle hook for Container {:?} timed out", spec.name)),
        }
    }

    async fn run_pre_stop(&self, pod: &Pod, spec: &Container, id: &String, pod_ip: Option<IpAddr>, budget: Duration) {
        let Some(hook) = spec.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()) else { return };
        if let Err(cause) = self.run_hook(hook, spec, id, pod_ip, budget).await {
            self.event(
                pod,
                Some(&spec.name),
                EventType::Warning,
                "FailedPreStopHook",
                format!("PreStopHook failed: {cause}"),
            );
        }
    }

    /// Stops every running container of the pod gracefully (preStop hooks
    /// first), at most `grace` (the pod's grace period when `None`).
    async fn kill_all(&mut self, pod: &Pod, grace: Option<Duration>) {
        let grace = grace.unwrap_or_else(|| Self::grace(pod));
        let containers = self.containers().await;
        let pod_ip = self.sandboxes().await.iter().find_map(|s| s.ip);
        let spec = pod.spec.clone().unwrap_or_default();
        let mut stops = Vec::new();
        for (name, instances) in &containers {
            for c in instances.iter().filter(|c| matches!(c.state, ContainerState::Running | ContainerState::Created)) {
                let spec_c = spec
                    .containers
                    .iter()
                    .chain(spec.init_containers.iter().flatten())
                    .find(|s| &s.name == name)
                    .cloned();
                let id = c.id.clone();
                let name = name.clone();
                let this = &*self;
                stops.push(async move {
                    let started = Instant::now();
                    this.event(pod, Some(&name), EventType::Normal, "Killing", format!("Stopping container {name}"));
                    if let Some(spec_c) = &spec_c {
                        this.run_pre_stop(pod, spec_c, &id, pod_ip, grace).await;
                    }
                    let left = grace.saturating_sub(started.elapsed());
                    let _ = this.shared.runtime.stop_container(&id, left).await;
                });
            }
        }
        futures::future::join_all(stops).await;
    }

    /// Stops and removes the pod's sandboxes (and with them its containers)
    /// and volumes; the statuses stay in `desired`.
    async fn cleanup_runtime(&mut self) {
        let sandboxes = self.sandboxes().await;
        if sandboxes.is_empty() && self.volumes.is_none() {
            return;
        }
        for s in sandboxes {
            let _ = self.shared.runtime.stop_pod_sandbox(&s.id).await;
            let _ = self.shared.runtime.remove_pod_sandbox(&s.id).await;
            self.shared.forget_sandbox(&s.id);
        }
        let _ = volumes::cleanup(&self.shared.config.root_dir, &self.uid);
        self.volumes = None;
        self.probes.clear();
    }

    async fn terminate(&mut self, pod: &Pod, removed: bool) -> Flow {
        self.kill_all(pod, None).await;
        if !removed && !self.frozen {
            let mut observed = self.observe(pod).await;
            observed.terminating = !self.is_static;
            self.write_status(pod, Some(observed)).await;
        }
        self.cleanup_runtime().await;
        self.input.running.store(false, Ordering::Relaxed);
        self.input.terminal.store(true, Ordering::Relaxed);
        let (namespace, name) = pod_key(pod);
        let api: Api<Pod> = Api::namespaced(self.shared.client.clone(), &namespace);
        // Static pods: the dispatcher deletes mirror pods whose manifest is gone.
        if self.is_static || removed {
            return Flow::Done;
        }
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions { uid: Some(self.uid.clone()), resource_version: None }),
            ..Default::default()
        };
        match api.delete(&name, &params).await {
            Ok(_) => Flow::Done,
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Flow::Done,
            Err(e) => {
                tracing::debug!(pod = %name, error = %e, "final delete failed; retrying");
                Flow::Wait(Some(Instant::now() + self.shared.config.api_retry))
            }
        }
    }

    async fn fetch_objects(&self, namespace: &str, refs: &[env::ObjectRef]) -> Result<Objects, kube::Error> {
        let mut objects = Objects::default();
        for (secret, name) in refs {
            if *secret {
                let api: Api<Secret> = Api::namespaced(self.shared.client.clone(), namespace);
                objects.secrets.insert(name.clone(), api.get_opt(name).await?);
            } else {
                let api: Api<ConfigMap> = Api::namespaced(self.shared.client.clone(), namespace);
                objects.config_maps.insert(name.clone(), api.get_opt(name).await?);
            }
        }
        Ok(objects)
    }

    fn env_context(&self, pod_ip: Option<IpAddr>) -> EnvContext {
        EnvContext {
            node_name: self.shared.config.node_name.clone(),
            host_ips: vec![self.shared.config.node_ip.to_string()],
            pod_ips: pod_ip.map(|ip| vec![ip.to_string()]).unwrap_or_default(),
            allocatable: self.shared.allocatable(),
            services: Vec::new(),
        }
    }

    fn sandbox_config(&self, pod: &Pod, attempt: u32) -> PodSandboxConfig {
        let (namespace, name) = pod_key(pod);
        let spec = pod.spec.clone().unwrap_or_default();
        let mut labels = pod.metadata.labels.clone().unwrap_or_default();
        labels.insert(LABEL_POD_NAME.into(), name.clone());
        labels.insert(LABEL_POD_NAMESPACE.into(), namespace.clone());
        labels.insert(LABEL_POD_UID.into(), self.uid.clone());
        labels.insert(super::LABEL_NODE_NAME.into(), self.shared.config.node_name.clone());
        PodSandboxConfig {
            metadata: PodSandboxMetadata {
                name: name.clone(),
                namespace: namespace.clone(),
                uid: self.uid.clone(),
                attempt,
            },
            hostname: spec.hostname.clone().unwrap_or_else(|| name.clone()),
            log_directory: self.shared.config.pod_log_dir.join(format!("{namespace}_{name}_{}", self.uid)),
            host_network: spec.host_network == Some(true),
            labels,
            annotations: pod.metadata.annotations.clone().unwrap_or_default(),
            // A RuntimeClass's handler is taken to be its name.
            runtime_handler: spec.runtime_class_name.clone().unwrap_or_default(),
        }
    }

    /// Volumes (first time and on resync), then a ready sandbox.
    async fn ensure_sandbox(&mut self, pod: &Pod) -> Result<Option<PodSandboxStatus>, String> {
        let (namespace, _) = pod_key(pod);
        let refresh = self.volumes.is_none()
            || (self.resync && self.volumes_refreshed.is_none_or(|t| t.elapsed() >= self.shared.config.sync_frequency));
        let sandboxes = self.sandboxes().await;
        let ready = sandboxes.iter().rev().find(|s| s.state == SandboxState::Ready).cloned();
        let objects = if refresh {
            match self.fetch_objects(&namespace, &volumes::volume_references(pod)).await {
                Ok(objects) => Some(objects),
                // The API is unreachable: keep the volumes as they are.
                Err(_) if self.volumes.is_some() => None,
                Err(e) => return Err(e.to_string()),
            }
        } else {
            None
        };
        if let Some(objects) = objects {
            let ctx = self.env_context(ready.as_ref().and_then(|s| s.ip));
            let root = self.shared.config.root_dir.clone();
            let has_volumes = pod.spec.as_ref().is_some_and(|s| s.volumes.as_ref().is_some_and(|v| !v.is_empty()));
            let result = if has_volumes {
                let pod_owned = pod.clone();
                tokio::task::spawn_blocking(move || volumes::setup_volumes(&root, &pod_owned, &objects, &ctx))
                    .await
                    .map_err(|e| e.to_string())?
            } else {
                Ok(HashMap::new())
            };
            match result {
                Ok(dirs) => {
                    self.volumes = Some(dirs);
                    self.volumes_refreshed = Some(Instant::now());
                    self.retry.reset("volumes");
                }
                Err(e) => {
                    self.event(pod, None, EventType::Warning, "FailedMount", e.to_string());
                    self.retry.next("volumes", Instant::now());
                    let delay = self.retry.delay("volumes", Instant::now()).unwrap_or_default();
                    self.wake_at(Instant::now() + delay);
                    if self.volumes.is_none() {
                        return Ok(None);
                    }
                }
            }
        }
        if let Some(s) = ready {
            self.shared.remember_sandbox(&s.id, &self.uid);
            return Ok(Some(s));
        }
        if let Some(at) = self.failed_at.get("sandbox")
            && let Some((left, _)) = self.retry.remaining("sandbox", *at, Instant::now())
        {
            self.wake_at(Instant::now() + left);
            return Ok(None);
        }
        // A dead sandbox: its containers go with it; start over.
        for s in &sandboxes {
            let _ = self.shared.runtime.remove_pod_sandbox(&s.id).await;
            self.shared.forget_sandbox(&s.id);
        }
        let config = self.sandbox_config(pod, sandboxes.len() as u32);
        match self.shared.runtime.run_pod_sandbox(&config).await {
            Ok(id) => {
                self.retry.reset("sandbox");
                self.failed_at.remove("sandbox");
                self.shared.remember_sandbox(&id, &self.uid);
                let status = self.shared.runtime.pod_sandbox_status(&id).await.map_err(|e| e.to_string())?;
                Ok(Some(status))
            }
            Err(e) => {
                self.event(
                    pod,
                    None,
                    EventType::Warning,
                    "FailedCreatePodSandBox",
                    format!("Failed to create pod sandbox: {e}"),
                );
                let now = Instant::now();
                self.retry.next("sandbox", now);
                self.failed_at.insert("sandbox".into(), now);
                let delay = self.retry.delay("sandbox", now).unwrap_or_default();
                self.wake_at(now + delay);
                Ok(None)
            }
        }
    }

    async fn sync_running(&mut self, pod: &Pod) -> Result<(), String> {
        let spec = pod.spec.clone().unwrap_or_default();
        let Some(sandbox) = self.ensure_sandbox(pod).await? else { return Ok(()) };
        let pod_ip = if spec.host_network == Some(true) { Some(self.shared.config.node_ip) } else { sandbox.ip };
        let policy = spec.restart_policy.clone().unwrap_or_else(|| "Always".into());
        let mut containers = self.containers().await;
        self.prune(&mut containers).await;

        // Init containers, in order.
        let mut initialized = true;
        for c in spec.init_containers.iter().flatten() {
            let sidecar = c.restart_policy.as_deref() == Some("Always");
            let latest = containers.get(&c.name).and_then(|l| l.first()).cloned();
            match latest {
                None => {
                    self.start(pod, c, self.first_attempt(&c.name), &sandbox, pod_ip).await;
                    initialized = false;
                    break;
                }
                Some(l) if l.state == ContainerState::Created => {
                    self.start_created(pod, c, &l).await;
                    initialized = false;
                    break;
                }
                Some(l) if l.state == ContainerState::Running => {
                    if sidecar {
                        let started = self.run_probes(pod, c, &l, pod_ip).await;
                        if started {
                            continue;
                        }
                    }
                    initialized = false;
                    break;
                }
                Some(l) => {
                    let code = l.exit_code.unwrap_or(0);
                    if code == 0 && !sidecar {
                        self.waiting.remove(&c.name);
                        continue;
                    }
                    if policy == "Never" && !sidecar {
                        initialized = false;
                        break;
                    }
                    self.restart(pod, c, &l, &sandbox, pod_ip).await;
                    initialized = false;
                    break;
                }
            }
        }
        if !initialized {
            return Ok(());
        }
        for c in &spec.containers {
            let latest = containers.get(&c.name).and_then(|l| l.first()).cloned();
            match latest {
                None => self.start(pod, c, self.first_attempt(&c.name), &sandbox, pod_ip).await,
                Some(l) if l.state == ContainerState::Created => self.start_created(pod, c, &l).await,
                Some(l) if l.state == ContainerState::Running => {
                    self.waiting.remove(&c.name);
                    self.run_probes(pod, c, &l, pod_ip).await;
                }
                Some(l) => {
                    let code = l.exit_code.unwrap_or(0);
                    let restart = match policy.as_str() {
                        "Never" => false,
                        "OnFailure" => code != 0,
                        _ => true,
                    };
                    if restart {
                        self.restart(pod, c, &l, &sandbox, pod_ip).await;
                    } else {
                        self.waiting.remove(&c.name);
                    }
                }
            }
        }
        Ok(())
    }

    /// The attempt of a container the runtime has no instance of: 0, or
    /// one past the restarts the API shows if it ran before (a runtime that
    /// lost its containers keeps counting, as the kubelet does).
    fn first_attempt(&self, name: &str) -> u32 {
        let status = self.desired.as_ref();
        let previous = status
            .iter()
            .flat_map(|s| s.container_statuses.iter().flatten().chain(s.init_container_statuses.iter().flatten()))
            .find(|c| c.name == name && c.container_id.is_some());
        previous.map(|c| c.restart_count.max(0) as u32 + 1).unwrap_or(0)
    }

    /// Keeps the two newest instances of each container.
    async fn prune(&self, containers: &mut BTreeMap<String, Instances>) {
        for list in containers.values_mut() {
            while list.len() > 2 {
                let old = list.pop().expect("len > 2");
                if old.state == ContainerState::Running {
                    let _ = self.shared.runtime.stop_container(&old.id, Duration::ZERO).await;
                }
                let _ = self.shared.runtime.remove_container(&old.id).await;
            }
        }
    }

    async fn start_created(&mut self, pod: &Pod, spec: &Container, c: &ContainerStatus) {
        match self.shared.runtime.start_container(&c.id).await {
            Ok(()) => {
                self.waiting.remove(&spec.name);
                self.event(
                    pod,
                    Some(&spec.name),
                    EventType::Normal,
                    "Started",
                    format!("Started container {}", spec.name),
                );
                self.input.kick();
            }
            Err(e) => {
                self.event(pod, Some(&spec.name), EventType::Warning, "Failed", format!("Error: {e}"));
                let _ = self.shared.runtime.stop_container(&c.id, Duration::ZERO).await;
                self.input.kick();
            }
        }
    }

    /// An exited container the policy restarts: now, or after its back-off.
    async fn restart(
        &mut self,
        pod: &Pod,
        spec: &Container,
        last: &ContainerStatus,
        sandbox: &PodSandboxStatus,
        pod_ip: Option<IpAddr>,
    ) {
        let now = Instant::now();
        let finished = last.finished_at.map(system_to_instant).unwrap_or(now);
        if let Some((left, delay)) = self.crash.remaining(&spec.name, finished, now) {
            let (namespace, name) = pod_key(pod);
            let message = format!(
                "back-off {} restarting failed container={} pod={}_{}({})",
                ms(delay),
                spec.name,
                name,
                namespace,
                self.uid
            );
            self.waiting.insert(spec.name.clone(), Waiting::new("CrashLoopBackOff", message));
            let reported = self.backoff_reported.get(&spec.name).is_some_and(|at| *at >= finished);
            if !reported {
                self.backoff_reported.insert(spec.name.clone(), now);
                self.event(
                    pod,
                    Some(&spec.name),
                    EventType::Warning,
                    "BackOff",
                    format!(
                        "Back-off restarting failed container {} in pod {}_{}({})",
                        spec.name, name, namespace, self.uid
                    ),
                );
            }
            self.wake_at(now + left);
            return;
        }
        // A restart whose start stopped short of creating the container
        // (image pull, configuration) goes on under their own back-off.
        if self.restart_pending.insert(spec.name.clone()) {
            self.crash.next(&spec.name, now);
        }
        self.start(pod, spec, last.attempt + 1, sandbox, pod_ip).await;
    }

    async fn pull(&mut self, pod: &Pod, spec: &Container) -> Option<String> {
        let image = spec.image.clone().unwrap_or_default();
        let key = format!("image:{}", spec.name);
        let now = Instant::now();
        if let Some(at) = self.failed_at.get(&key)
            && let Some((left, _)) = self.image.remaining(&key, *at, now)
        {
            let message = format!("Back-off pulling image {image:?}");
            self.waiting.insert(spec.name.clone(), Waiting::new("ImagePullBackOff", message.clone()));
            self.event(pod, Some(&spec.name), EventType::Normal, "BackOff", message);
            self.wake_at(now + left);
            return None;
        }
        let policy = spec.image_pull_policy.clone().unwrap_or_else(|| {
            if image.ends_with(":latest") || !image.rsplit('/').next().unwrap_or_default().contains(':') {
                "Always".into()
            } else {
                "IfNotPresent".into()
            }
        });
        let present = self.shared.runtime.image_status(&image).await.ok().flatten();
        if policy != "Always"
            && let Some(found) = present
        {
            self.event(
                pod,
                Some(&spec.name),
                EventType::Normal,
                "Pulled",
                format!("Container image {image:?} already present on machine"),
            );
            return Some(found.id);
        }
        if policy == "Never" {
            let message = format!("Container image {image:?} is not present with pull policy of Never");
            self.waiting.insert(spec.name.clone(), Waiting::new("ErrImageNeverPull", message.clone()));
            self.event(pod, Some(&spec.name), EventType::Warning, "ErrImageNeverPull", message);
            return None;
        }
        self.event(pod, Some(&spec.name), EventType::Normal, "Pulling", format!("Pulling image {image:?}"));
        let started = Instant::now();
        match self.shared.runtime.pull_image(&image).await {
            Ok(id) => {
                self.image.reset(&key);
                self.failed_at.remove(&key);
                let took = started.elapsed();
                let size =
                    self.shared.runtime.image_status(&image).await.ok().flatten().map(|i| i.size_bytes).unwrap_or(0);
                self.event(
                    pod,
                    Some(&spec.name),
                    EventType::Normal,
                    "Pulled",
                    format!(
                        "Successfully pulled image {image:?} in {:.3}s ({:.3}s including waiting). Image size: {size} bytes.",
                        took.as_secs_f64(),
                        took.as_secs_f64()
                    ),
                );
                Some(id)
            }
            Err(e) => {
                let now = Instant::now();
                self.image.next(&key, now);
                self.failed_at.insert(key.clone(), now);
                let message = match &e {
                    RuntimeError::ImageNotFound { message, .. } => format!("Failed to pull image {image:?}: {message}"),
                    other => format!("Failed to pull image {image:?}: {other}"),
                };
                self.waiting.insert(spec.name.clone(), Waiting::new("ErrImagePull", message.clone()));
                self.event(pod, Some(&spec.name), EventType::Warning, "Failed", message);
                self.event(pod, Some(&spec.name), EventType::Warning, "Failed", "Error: ErrImagePull".into());
                // Show ErrImagePull for half the back-off, ImagePullBackOff after.
                let delay = self.image.delay(&key, now).unwrap_or_default();
                self.wake_at(now + delay / 2);
                None
            }
        }
    }

    fn config_error(&mut self, pod: &Pod, spec: &Container, reason: &str, message: String) {
        self.waiting.insert(spec.name.clone(), Waiting::new(reason, message.clone()));
        self.event(pod, Some(&spec.name), EventType::Warning, "Failed", format!("Error: {message}"));
        let key = format!("config:{}", spec.name);
        let now = Instant::now();
        self.retry.next(&key, now);
        let delay = self.retry.delay(&key, now).unwrap_or_default();
        self.wake_at(now + delay);
    }

    /// Pulls, creates and starts attempt `attempt` of a container.
    async fn start(
        &mut self,
        pod: &Pod,
        spec: &Container,
        attempt: u32,
        sandbox: &PodSandboxStatus,
        pod_ip: Option<IpAddr>,
    ) {
        let Some(_image_id) = self.pull(pod, spec).await else { return };
        let (namespace, _) = pod_key(pod);
        let objects = match self.fetch_objects(&namespace, &env::env_references(spec)).await {
            Ok(o) => o,
            Err(e) => {
                self.wake_at(Instant::now() + self.shared.config.api_retry);
                tracing::debug!(error = %e, "fetching ConfigMaps/Secrets failed");
                return;
            }
        };
        let mut ctx = self.env_context(pod_ip);
        if self.shared.config.service_links {
            let all = pod.spec.as_ref().and_then(|s| s.enable_service_links) != Some(false);
            ctx.services = self.shared.service_env(&namespace, all).await;
        }
        let envs = match env::container_env(pod, spec, &ctx, &objects) {
            Ok(e) => e,
            Err(e) => return self.config_error(pod, spec, "CreateContainerConfigError", e.to_string()),
        };
        let mounts = match self.volumes.as_ref().map(|v| volumes::container_mounts(pod, spec, v)) {
            Some(Ok(m)) => m,
            Some(Err(e)) => return self.config_error(pod, spec, "CreateContainerConfigError", e.to_string()),
            None => return,
        };
        let (command, args) = env::expand_command(spec, &envs);
        let resources = spec.resources.as_ref();
        let limit = |n: &str| resources.and_then(|r| r.limits.as_ref()).and_then(|m| m.get(n).cloned());
        let request = |n: &str| resources.and_then(|r| r.requests.as_ref()).and_then(|m| m.get(n).cloned());
        let (pod_ns, pod_name) = pod_key(pod);
        let config = ContainerConfig {
            name: spec.name.clone(),
            attempt,
            image: spec.image.clone().unwrap_or_default(),
            command,
            args,
            working_dir: spec.working_dir.clone().filter(|w| !w.is_empty()).map(PathBuf::from),
            envs,
            mounts,
            log_path: PathBuf::from(&spec.name).join(format!("{attempt}.log")),
            resources: ContainerResources {
                cpu_limit_millis: limit("cpu").map(|q| milli_value(&q)),
                cpu_request_millis: request("cpu").or_else(|| limit("cpu")).map(|q| milli_value(&q)),
                memory_limit_bytes: limit("memory").map(|q| int_value(&q)),
            },
            labels: [
                (LABEL_POD_NAME.to_string(), pod_name),
                (LABEL_POD_NAMESPACE.to_string(), pod_ns),
                (LABEL_POD_UID.to_string(), self.uid.clone()),
                (LABEL_CONTAINER_NAME.to_string(), spec.name.clone()),
                (super::LABEL_NODE_NAME.to_string(), self.shared.config.node_name.clone()),
            ]
            .into(),
        };
        let sandbox_config = self.sandbox_config(pod, sandbox.metadata.attempt);
        let id = match self.shared.runtime.create_container(&sandbox.id, &config, &sandbox_config).await {
            Ok(id) => id,
            Err(e) => return self.config_error(pod, spec, "CreateContainerError", e.to_string()),
        };
        self.retry.reset(&format!("config:{}", spec.name));
        self.restart_pending.remove(&spec.name);
        self.event(pod, Some(&spec.name), EventType::Normal, "Created", format!("Created container: {}", spec.name));
        match self.shared.runtime.start_container(&id).await {
            Ok(()) => {
                self.waiting.remove(&spec.name);
                self.event(
                    pod,
                    Some(&spec.name),
                    EventType::Normal,
                    "Started",
                    format!("Started container {}", spec.name),
                );
                if let Some(hook) = spec.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) {
                    let grace = Self::grace(pod);
                    if let Err(cause) = self.run_hook(hook, spec, &id, pod_ip, grace).await {
                        self.event(
                            pod,
                            Some(&spec.name),
                            EventType::Warning,
                            "FailedPostStartHook",
                            format!("PostStartHook failed: {cause}"),
                        );
                        self.event(
                            pod,
                            Some(&spec.name),
                            EventType::Normal,
                            "Killing",
                            format!("FailedPostStartHook: stopping container {}", spec.name),
                        );
                        let _ = self.shared.runtime.stop_container(&id, grace).await;
                    }
                }
                // Sync again at once: the container is now Running, its
                // probes are due from its start (a runtime's Started event
                // may have been published before this pod knew the id).
                self.input.kick();
            }
            Err(e) => {
                self.waiting.remove(&spec.name);
                self.event(pod, Some(&spec.name), EventType::Warning, "Failed", format!("Error: {e}"));
                let _ = self.shared.runtime.stop_container(&id, Duration::ZERO).await;
            }
        }
    }

    /// Runs the due probes of a running container; returns whether it has
    /// started (startup probe passed or none).
    async fn run_probes(&mut self, pod: &Pod, spec: &Container, c: &ContainerStatus, pod_ip: Option<IpAddr>) -> bool {
        let started_at = c.started_at.map(system_to_instant).unwrap_or_else(Instant::now);
        let entry = self.probes.entry(spec.name.clone());
        let probes = match entry {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => v.insert(ContainerProbes {
                startup: spec.startup_probe.as_ref().map(|p| ProbeState::new(ProbeType::Startup, p, started_at)),
                liveness: spec.liveness_probe.as_ref().map(|p| ProbeState::new(ProbeType::Liveness, p, started_at)),
                readiness: spec.readiness_probe.as_ref().map(|p| ProbeState::new(ProbeType::Readiness, p, started_at)),
            }),
        };
        let now = Instant::now();
        let mut due: Vec<ProbeType> = Vec::new();
        let started = probes.startup.as_ref().is_none_or(|s| s.passing);
        if !started {
            if probes.startup.as_ref().is_some_and(|s| s.next_run <= now) {
                due.push(ProbeType::Startup);
            }
        } else {
            if probes.liveness.as_ref().is_some_and(|s| s.next_run <= now) {
                due.push(ProbeType::Liveness);
            }
            if probes.readiness.as_ref().is_some_and(|s| s.next_run <= now) {
                due.push(ProbeType::Readiness);
            }
        }
        let runtime = self.shared.runtime.clone();
        let results = futures::future::join_all(due.iter().map(|kind| {
            let probe = match kind {
                ProbeType::Startup => spec.startup_probe.as_ref(),
                ProbeType::Liveness => spec.liveness_probe.as_ref(),
                ProbeType::Readiness => spec.readiness_probe.as_ref(),
            }
            .expect("due probes exist");
            let runtime = runtime.clone();
            async move { probes::run_probe(probe, spec, &c.id, pod_ip, runtime.as_ref()).await }
        }))
        .await;
        tracing::debug!(pod = %self.uid, container = %spec.name, ?due, ?results, "probes ran");
        let mut kill: Option<(ProbeType, String)> = None;
        let mut events = Vec::new();
        let now = Instant::now();
        let probes = self.probes.get_mut(&spec.name).expect("inserted above");
        for (kind, result) in due.into_iter().zip(results) {
            let state = match kind {
                ProbeType::Startup => probes.startup.as_mut(),
                ProbeType::Liveness => probes.liveness.as_mut(),
                ProbeType::Readiness => probes.readiness.as_mut(),
            }
            .expect("due probes exist");
            let failed_cause = match &result {
                ProbeResult::Failure(cause) => Some(cause.clone()),
                ProbeResult::Success => None,
            };
            let transition = state.record(result, now);
            if let Some(cause) = failed_cause {
                events.push((kind, cause.clone()));
            }
            if let Transition::BecameFailure(cause) = transition
                && kind != ProbeType::Readiness
            {
                kill = Some((kind, cause));
            }
        }
        let next = [probes.startup.as_ref(), probes.liveness.as_ref(), probes.readiness.as_ref()]
            .into_iter()
            .flatten()
            .filter(|s| s.kind != ProbeType::Startup || !s.passing)
            .map(|s| s.next_run)
            .min();
        let started = probes.startup.as_ref().is_none_or(|s| s.passing);
        if let Some(next) = next {
            self.wake_at(next);
        }
        for (kind, cause) in events {
            self.event(
                pod,
                Some(&spec.name),
                EventType::Warning,
                "Unhealthy",
                format!("{} probe failed: {cause}", kind.as_str()),
            );
        }
        if let Some((kind, _)) = kill {
            let what = if kind == ProbeType::Liveness { "liveness" } else { "startup" };
            self.event(
                pod,
                Some(&spec.name),
                EventType::Normal,
                "Killing",
                format!("Container {} failed {what} probe, will be restarted", spec.name),
            );
            let grace = Duration::from_secs(
                spec.liveness_probe
                    .as_ref()
                    .and_then(|p| p.termination_grace_period_seconds)
                    .or_else(|| pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds))
                    .unwrap_or(30)
                    .max(0) as u64,
            );
            self.run_pre_stop(pod, spec, &c.id, pod_ip, grace).await;
            let _ = self.shared.runtime.stop_container(&c.id, grace).await;
            self.probes.remove(&spec.name);
            self.wake_at(Instant::now());
            return false;
        }
        started
    }

    /// What the runtime shows of the pod, as container statuses.
    async fn observe(&mut self, pod: &Pod) -> PodObservation {
        let spec = pod.spec.clone().unwrap_or_default();
        let sandboxes = self.sandboxes().await;
        let sandbox = sandboxes.iter().rev().find(|s| s.state == SandboxState::Ready);
        let containers = self.containers().await;
        // Probe state belongs to one instance: forget it once the instance stops running.
        let running_names: Vec<&String> = containers
            .iter()
            .filter(|(_, l)| l.first().is_some_and(|c| c.state == ContainerState::Running))
            .map(|(n, _)| n)
            .collect();
        self.probes.retain(|name, _| running_names.contains(&name));
        let init: Vec<_> = spec
            .init_containers
            .iter()
            .flatten()
            .map(|c| self.view(c, &containers, "PodInitializing"))
            .map(|(c, v)| status::container_status(c, &v))
            .collect();
        let default_app = if status::initialized(pod, &init) { "ContainerCreating" } else { "PodInitializing" };
        let app: Vec<_> = spec
            .containers
            .iter()
            .map(|c| self.view(c, &containers, default_app))
            .map(|(c, v)| status::container_status(c, &v))
            .collect();
        let running = app.iter().any(|s| s.state.as_ref().is_some_and(|st| st.running.is_some()));
        self.input.running.store(running, Ordering::Relaxed);
        let pod_ip = match sandbox {
            Some(_) if spec.host_network == Some(true) => Some(self.shared.config.node_ip),
            Some(s) => s.ip,
            None => None,
        };
        PodObservation {
            sandbox_ready: sandbox.is_some(),
            pod_ip: pod_ip.map(|ip| ip.to_string()),
            host_ip: self.shared.config.node_ip.to_string(),
            init,
            app,
            terminating: false,
            forced: self.forced.clone(),
        }
    }

    fn view<'a>(
        &self,
        spec: &'a Container,
        containers: &BTreeMap<String, Instances>,
        default: &'static str,
    ) -> (&'a Container, ContainerView) {
        let list = containers.get(&spec.name);
        let current = list.and_then(|l| l.first()).cloned();
        let previous = list.and_then(|l| l.get(1)).cloned();
        let probes = self.probes.get(&spec.name);
        let started = probes.and_then(|p| p.startup.as_ref()).is_none_or(|s| s.passing);
        let ready = started
            && probes.and_then(|p| p.readiness.as_ref()).is_none_or(|s| s.passing)
            && (spec.readiness_probe.is_none() || probes.is_some());
        let started = started && (spec.startup_probe.is_none() || probes.is_some());
        let mut waiting = self.waiting.get(&spec.name).cloned();
        if current.as_ref().is_some_and(|c| c.state == ContainerState::Running) {
            waiting = None;
        }
        (spec, ContainerView { current, previous, waiting, default_waiting: default, ready, started })
    }

    /// Computes the status (from `observed`; without, the last computed one,
    /// with a forced phase applied) and writes it if it differs from what was
    /// last written. Returns the status now in effect.
    async fn write_status(&mut self, pod: &Pod, observed: Option<PodObservation>) -> PodStatus {
        let mut base = pod.clone();
        if self.desired.is_some() {
            base.status = self.desired.clone();
        }
        let status = match observed {
            Some(obs) => status::pod_status(&base, obs, &status::now()),
            None => {
                let mut s = base.status.clone().unwrap_or_default();
                if let Some((phase, reason, message)) = &self.forced {
                    let now = status::now();
                    s.phase = Some(phase.clone());
                    s.reason = Some(reason.clone());
                    s.message = Some(message.clone());
                    for c in s.conditions.iter_mut().flatten() {
                        if c.type_ == "Ready" || c.type_ == "ContainersReady" {
                            if c.status != "False" {
                                c.last_transition_time = Some(now.clone());
                            }
                            c.status = "False".into();
                        }
                    }
                    if s.start_time.is_none() {
                        s.start_time = Some(now);
                    }
                    s.host_ip = Some(self.shared.config.node_ip.to_string());
                    s.qos_class = Some(super::resources::qos_class(pod).into());
                }
                s
            }
        };
        self.desired = Some(status.clone());
        if self.written.as_ref() == Some(&status) {
            return status;
        }
        let (namespace, name) = pod_key(pod);
        let api: Api<Pod> = Api::namespaced(self.shared.client.clone(), &namespace);
        let patch = serde_json::json!({ "status": status });
        match api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {
                self.shared.stats.status_writes.fetch_add(1, Ordering::Relaxed);
                self.written = Some(status.clone());
            }
            Err(e) => {
                tracing::debug!(pod = %name, error = %e, "status write failed");
                self.wake_at(Instant::now() + self.shared.config.api_retry);
            }
        }
        status
    }
}
