//! [`SimRuntime`]: a simulated [`RuntimeBackend`], as kwok simulates nodes.
//! Containers "run" without processes; what they do is described by
//! [`SimBehavior`], read from environment variables of the
//! [`ContainerConfig`] so a pod spec alone chooses it:
//!
//! | variable | effect |
//! |---|---|
//! | `SIM_START_LATENCY_MS` | `start_container` takes this long (default [`SimConfig::start_latency`]) |
//! | `SIM_EXIT_AFTER_MS` | the container exits by itself this long after it started (default: runs until stopped) |
//! | `SIM_EXIT_CODE` | exit code of that exit (default 0) |
//! | `SIM_EXIT_UNTIL_ATTEMPT` | the two above apply only to attempts below this one; later attempts run until stopped (a container that crashes N times, then recovers) |
//! | `SIM_LOG` | lines (separated by newlines) written to stdout in the CRI log file when the container starts |
//! | `SIM_LOG_STDERR` | the same on stderr |
//! | `SIM_FAIL_CREATE` | `create_container` fails with this message |
//! | `SIM_FAIL_START` | `start_container` fails with this message; the container is left exited (code 128, reason `StartError`) |
//! | `SIM_IGNORE_SIGTERM` | `stop_container` waits for its whole timeout, then the container dies with 137 |
//! | `SIM_STOP_DELAY_MS` | on a stop, the container takes this long (at most the timeout) to exit |
//! | `SIM_TERM_EXIT_CODE` | exit code after a graceful stop (default 0: the application handles SIGTERM) |
//!
//! Images: [`SimConfig::known_images`] (`None` = every image exists) and
//! [`SimConfig::missing_image_markers`] (default `does-not-exist`: an image
//! whose reference contains it cannot be pulled). Pulls take
//! [`SimConfig::pull_latency`].
//!
//! Sandboxes take their address from an [`Ipam`] over the pod CIDR given to
//! [`RuntimeBackend::update_runtime_config`]; nothing is bound.
//!
//! `exec_sync` runs a tiny built-in shell rather than processes: `true`,
//! `false`, `exit N`, `echo ARGS`, `cat PATH` and `test -e|-f|-d PATH` (paths
//! resolved through the container's mounts), `sleep SECONDS`, `env`, and
//! `sh -c 'CMD'` of one of those. Anything else is
//! [`RuntimeError::Unsupported`].
//!
//! Cost: no task per container. `start_container` waits on the caller's
//! task; self-exits are kept in one timer queue per runtime, driven by one
//! task that exists only while exits are pending. Thousands of runtimes with
//! dozens of containers each cost memory only.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use parking_lot::Mutex;
use tokio::sync::{Notify, broadcast};
use tokio::time::Instant;

use super::cri_log::{self, Stream};
use super::{
    ContainerConfig, ContainerEvent, ContainerFilter, ContainerId, ContainerState, ContainerStatus, ExecResult, Image,
    PodSandboxConfig, PodSandboxStatus, Result, RuntimeBackend, RuntimeError, RuntimeVersion, SandboxFilter, SandboxId,
    SandboxState,
};
use crate::network::Ipam;

/// Name the simulated runtime reports (`orchestra-sim://0.1.0`).
pub const SIM_RUNTIME_NAME: &str = "orchestra-sim";

/// Environment variable: `start_container` latency in milliseconds.
pub const ENV_START_LATENCY_MS: &str = "SIM_START_LATENCY_MS";
/// Environment variable: exit by itself this many milliseconds after start.
pub const ENV_EXIT_AFTER_MS: &str = "SIM_EXIT_AFTER_MS";
/// Environment variable: the exit code of a self-exit.
pub const ENV_EXIT_CODE: &str = "SIM_EXIT_CODE";
/// Environment variable: self-exits apply only to attempts below this one.
pub const ENV_EXIT_UNTIL_ATTEMPT: &str = "SIM_EXIT_UNTIL_ATTEMPT";
/// Environment variable: stdout lines written at start.
pub const ENV_LOG: &str = "SIM_LOG";
/// Environment variable: stderr lines written at start.
pub const ENV_LOG_STDERR: &str = "SIM_LOG_STDERR";
/// Environment variable: `create_container` fails with this message.
pub const ENV_FAIL_CREATE: &str = "SIM_FAIL_CREATE";
/// Environment variable: `start_container` fails with this message.
pub const ENV_FAIL_START: &str = "SIM_FAIL_START";
/// Environment variable: the container ignores SIGTERM.
pub const ENV_IGNORE_SIGTERM: &str = "SIM_IGNORE_SIGTERM";
/// Environment variable: a stopped container takes this long to exit.
pub const ENV_STOP_DELAY_MS: &str = "SIM_STOP_DELAY_MS";
/// Environment variable: exit code after a graceful stop.
pub const ENV_TERM_EXIT_CODE: &str = "SIM_TERM_EXIT_CODE";

/// How a simulated container behaves; read from (and written to) the
/// `SIM_*` environment variables of its [`ContainerConfig`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimBehavior {
    /// `start_container` latency; `None` = the runtime's default.
    pub start_latency: Option<Duration>,
    /// Exits by itself this long after starting; `None` = runs until stopped.
    pub exit_after: Option<Duration>,
    /// Exit code of the self-exit.
    pub exit_code: i32,
    /// The self-exit applies only to attempts below this one.
    pub exit_until_attempt: Option<u32>,
    /// Lines written to stdout at start.
    pub stdout: Vec<String>,
    /// Lines written to stderr at start.
    pub stderr: Vec<String>,
    /// `create_container` fails with this message.
    pub fail_create: Option<String>,
    /// `start_container` fails with this message.
    pub fail_start: Option<String>,
    /// Ignores SIGTERM: a stop waits for the whole timeout, then exit 137.
    pub ignore_sigterm: bool,
    /// A graceful stop takes this long (capped at the timeout).
    pub stop_delay: Option<Duration>,
    /// Exit code after a graceful stop.
    pub term_exit_code: i32,
}

fn millis(value: &str) -> Option<Duration> {
    value.trim().parse::<u64>().ok().map(Duration::from_millis)
}

fn lines(value: &str) -> Vec<String> {
    value.split('\n').map(str::to_owned).collect()
}

impl SimBehavior {
    /// A container that runs until stopped.
    pub fn runs_forever() -> Self {
        Self::default()
    }

    /// A container that exits with `code` `after` its start.
    pub fn exits(code: i32, after: Duration) -> Self {
        Self { exit_after: Some(after), exit_code: code, ..Self::default() }
    }

    /// Adds stdout lines written at start.
    pub fn with_stdout(mut self, lines: &[&str]) -> Self {
        self.stdout = lines.iter().map(|l| l.to_string()).collect();
        self
    }

    /// Reads the behaviour from a container's environment (later entries win).
    pub fn from_env(envs: &[(String, String)]) -> Self {
        let mut b = Self::default();
        for (name, value) in envs {
            match name.as_str() {
                ENV_START_LATENCY_MS => b.start_latency = millis(value),
                ENV_EXIT_AFTER_MS => b.exit_after = millis(value),
                ENV_EXIT_CODE => b.exit_code = value.trim().parse().unwrap_or(1),
                ENV_EXIT_UNTIL_ATTEMPT => b.exit_until_attempt = value.trim().parse().ok(),
                ENV_LOG => b.stdout = lines(value),
                ENV_LOG_STDERR => b.stderr = lines(value),
                ENV_FAIL_CREATE => b.fail_create = Some(value.clone()),
                ENV_FAIL_START => b.fail_start = Some(value.clone()),
                ENV_IGNORE_SIGTERM => b.ignore_sigterm = !matches!(value.trim(), "" | "0" | "false"),
                ENV_STOP_DELAY_MS => b.stop_delay = millis(value),
                ENV_TERM_EXIT_CODE => b.term_exit_code = value.trim().parse().unwrap_or(0),
                _ => {}
            }
        }
        b
    }

    /// The environment variables describing this behaviour (defaults omitted),
    /// to put in a pod spec or a [`ContainerConfig`].
    pub fn to_env(&self) -> Vec<(String, String)> {
        let mut env = Vec::new();
        let mut put = |k: &str, v: String| env.push((k.to_owned(), v));
        if let Some(d) = self.start_latency {
            put(ENV_START_LATENCY_MS, d.as_millis().to_string());
        }
        if let Some(d) = self.exit_after {
            put(ENV_EXIT_AFTER_MS, d.as_millis().to_string());
            put(ENV_EXIT_CODE, self.exit_code.to_string());
        }
        if let Some(a) = self.exit_until_attempt {
            put(ENV_EXIT_UNTIL_ATTEMPT, a.to_string());
        }
        if !self.stdout.is_empty() {
            put(ENV_LOG, self.stdout.join("\n"));
        }
        if !self.stderr.is_empty() {
            put(ENV_LOG_STDERR, self.stderr.join("\n"));
        }
        if let Some(m) = &self.fail_create {
            put(ENV_FAIL_CREATE, m.clone());
        }
        if let Some(m) = &self.fail_start {
            put(ENV_FAIL_START, m.clone());
        }
        if self.ignore_sigterm {
            put(ENV_IGNORE_SIGTERM, "1".into());
        }
        if let Some(d) = self.stop_delay {
            put(ENV_STOP_DELAY_MS, d.as_millis().to_string());
        }
        if self.term_exit_code != 0 {
            put(ENV_TERM_EXIT_CODE, self.term_exit_code.to_string());
        }
        env
    }

    fn exits_on_attempt(&self, attempt: u32) -> Option<Duration> {
        match self.exit_until_attempt {
            Some(until) if attempt >= until => None,
            _ => self.exit_after,
        }
    }
}

/// Settings of a [`SimRuntime`].
///
/// Built from [`Default`] and the `with_*` setters, so that a new setting is
/// not a breaking change:
///
/// ```
/// use std::time::Duration;
/// use orchestra_node::runtime::sim::SimConfig;
///
/// let config = SimConfig::default()
///     .with_write_logs(false)
///     .with_start_latency(Duration::from_millis(5))
///     .with_known_images(["nginx:1.27".to_string()].into());
/// assert!(!config.write_logs);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SimConfig {
    /// Default `start_container` latency (0).
    pub start_latency: Duration,
    /// `pull_image` latency for an image not yet present (0).
    pub pull_latency: Duration,
    /// Images that exist; `None` = every image not matching a marker.
    pub known_images: Option<HashSet<String>>,
    /// An image whose reference contains one of these cannot be pulled
    /// (default `does-not-exist`).
    pub missing_image_markers: Vec<String>,
    /// Images present before any pull (listed in `node.status.images`).
    pub preloaded_images: Vec<String>,
    /// Size reported for every image (10 MiB).
    pub image_size_bytes: u64,
    /// Create log directories and log files (default true). Benchmarks
    /// running thousands of nodes turn it off; `SIM_LOG` then writes nothing.
    pub write_logs: bool,
    /// Capacity of the event channel (1024).
    pub event_capacity: usize,
    /// The address of `host_network` sandboxes (the node's; 127.0.0.1).
    pub host_ip: IpAddr,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            start_latency: Duration::ZERO,
            pull_latency: Duration::ZERO,
            known_images: None,
            missing_image_markers: vec!["does-not-exist".into()],
            preloaded_images: Vec::new(),
            image_size_bytes: 10 << 20,
            write_logs: true,
            event_capacity: 1024,
            host_ip: IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        }
    }
}

impl SimConfig {
    /// Sets [`start_latency`](Self::start_latency).
    pub fn with_start_latency(mut self, latency: Duration) -> Self {
        self.start_latency = latency;
        self
    }

    /// Sets [`pull_latency`](Self::pull_latency).
    pub fn with_pull_latency(mut self, latency: Duration) -> Self {
        self.pull_latency = latency;
        self
    }

    /// Sets [`known_images`](Self::known_images): only these images exist.
    pub fn with_known_images(mut self, images: HashSet<String>) -> Self {
        self.known_images = Some(images);
        self
    }

    /// Sets [`missing_image_markers`](Self::missing_image_markers).
    pub fn with_missing_image_markers(mut self, markers: Vec<String>) -> Self {
        self.missing_image_markers = markers;
        self
    }

    /// Sets [`preloaded_images`](Self::preloaded_images).
    pub fn with_preloaded_images(mut self, images: Vec<String>) -> Self {
        self.preloaded_images = images;
        self
    }

    /// Sets [`image_size_bytes`](Self::image_size_bytes).
    pub fn with_image_size_bytes(mut self, bytes: u64) -> Self {
        self.image_size_bytes = bytes;
        self
    }

    /// Sets [`write_logs`](Self::write_logs).
    pub fn with_write_logs(mut self, on: bool) -> Self {
        self.write_logs = on;
        self
    }

    /// Sets [`event_capacity`](Self::event_capacity).
    pub fn with_event_capacity(mut self, capacity: usize) -> Self {
        self.event_capacity = capacity;
        self
    }

    /// Sets [`host_ip`](Self::host_ip).
    pub fn with_host_ip(mut self, ip: IpAddr) -> Self {
        self.host_ip = ip;
        self
    }
}

struct Sandbox {
    status: PodSandboxStatus,
    log_directory: PathBuf,
    host_network: bool,
}

struct Container {
    status: ContainerStatus,
    config: ContainerConfig,
    behavior: SimBehavior,
    /// Bumped on every state change so stale timers are ignored.
    generation: u64,
}

#[derive(Default)]
struct State {
    sandboxes: HashMap<SandboxId, Sandbox>,
    containers: HashMap<ContainerId, Container>,
    images: BTreeMap<String, Image>,
}

#[derive(Default)]
struct Timers {
    queue: BTreeMap<(Instant, u64), (ContainerId, u64)>,
    driver_running: bool,
}

struct Inner {
    config: SimConfig,
    ipam: Ipam,
    state: Mutex<State>,
    timers: Mutex<Timers>,
    wake: Arc<Notify>,
    events: broadcast::Sender<ContainerEvent>,
    next_id: AtomicU64,
    prefix: String,
}

/// A simulated container runtime (see the module documentation). Cheap to
/// clone: clones share the same state.
#[derive(Clone)]
pub struct SimRuntime {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SimRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.inner.state.lock();
        f.debug_struct("SimRuntime")
            .field("sandboxes", &state.sandboxes.len())
            .field("containers", &state.containers.len())
            .finish()
    }
}

impl Default for SimRuntime {
    fn default() -> Self {
        Self::new(SimConfig::default())
    }
}

static RUNTIME_SEQ: AtomicU64 = AtomicU64::new(1);

fn image_id(reference: &str) -> String {
    // FNV-1a, twice with different seeds: a stable fake digest.
    let hash = |seed: u64| reference.bytes().fold(seed, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    format!("sha256:{:016x}{:016x}{:016x}{:016x}", hash(0xcbf2_9ce4_8422_2325), hash(1), hash(2), hash(3))
}

fn exit_reason(code: i32) -> &'static str {
    if code == 0 { "Completed" } else { "Error" }
}

impl SimRuntime {
    /// A simulated runtime with `config`.
    pub fn new(config: SimConfig) -> Self {
        let (events, _) = broadcast::channel(config.event_capacity.max(1));
        let mut images = BTreeMap::new();
        for reference in &config.preloaded_images {
            images.insert(
                reference.clone(),
                Image {
                    id: image_id(reference),
                    repo_tags: vec![reference.clone()],
                    size_bytes: config.image_size_bytes,
                },
            );
        }
        let seq = RUNTIME_SEQ.fetch_add(1, Ordering::Relaxed);
        Self {
            inner: Arc::new(Inner {
                config,
                ipam: Ipam::new(),
                state: Mutex::new(State { images, ..State::default() }),
                timers: Mutex::default(),
                wake: Arc::new(Notify::new()),
                events,
                next_id: AtomicU64::new(1),
                prefix: format!("sim{seq:x}"),
            }),
        }
    }

    /// The address allocator of the pod network.
    pub fn ipam(&self) -> &Ipam {
        &self.inner.ipam
    }

    /// The config a container was created with (to assert on what the agent
    /// asked for: environment, mounts, command).
    pub fn container_config(&self, id: &ContainerId) -> Option<ContainerConfig> {
        self.inner.state.lock().containers.get(id).map(|c| c.config.clone())
    }

    /// Every container with its config, in creation order.
    pub fn containers(&self) -> Vec<(ContainerStatus, ContainerConfig)> {
        let state = self.inner.state.lock();
        let mut all: Vec<_> = state.containers.values().map(|c| (c.status.clone(), c.config.clone())).collect();
        all.sort_by_key(|(s, _)| (s.created_at, s.id.clone()));
        all
    }

    /// Number of containers currently running.
    pub fn running_containers(&self) -> usize {
        self.inner.state.lock().containers.values().filter(|c| c.status.state == ContainerState::Running).count()
    }

    /// Makes a running container exit now with `code` (a crash from outside).
    pub fn kill(&self, id: &ContainerId, code: i32) -> Result<()> {
        self.inner.exit(id, code, None).map(|_| ())
    }

    fn new_id(&self) -> String {
        let n = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n:08x}", self.inner.prefix)
    }

    fn image_exists(&self, reference: &str) -> bool {
        let config = &self.inner.config;
        if config.missing_image_markers.iter().any(|m| !m.is_empty() && reference.contains(m.as_str())) {
            return false;
        }
        match &config.known_images {
            Some(known) => known.contains(reference),
            None => true,
        }
    }

    fn schedule_exit(&self, id: &ContainerId, generation: u64, after: Duration) {
        let deadline = Instant::now() + after;
        let seq = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let mut timers = self.inner.timers.lock();
        let earliest = timers.queue.keys().next().is_none_or(|(at, _)| deadline < *at);
        timers.queue.insert((deadline, seq), (id.clone(), generation));
        if !timers.driver_running {
            timers.driver_running = true;
            tokio::spawn(drive_timers(Arc::downgrade(&self.inner)));
        } else if earliest {
            self.inner.wake.notify_one();
        }
    }

    fn write_log(&self, log_path: &Path, stream: Stream, lines: &[String]) {
        if lines.is_empty() || !self.inner.config.write_logs {
            return;
        }
        let mut out = Vec::new();
        let now = SystemTime::now();
        for line in lines {
            cri_log::write_entry(&mut out, now, stream, true, line.as_bytes());
        }
        use std::io::Write;
        if let Ok(mut file) = std::fs::OpenOptions::new().create(true).append(true).open(log_path) {
            let _ = file.write_all(&out);
        }
    }

    fn resolve(config: &ContainerConfig, path: &str) -> Option<PathBuf> {
        let path = Path::new(path);
        config
            .mounts
            .iter()
            .filter_map(|m| path.strip_prefix(&m.container_path).ok().map(|rest| (m, rest)))
            .max_by_key(|(m, _)| m.container_path.components().count())
            .map(|(m, rest)| if rest.as_os_str().is_empty() { m.host_path.clone() } else { m.host_path.join(rest) })
    }

    async fn run_builtin(&self, config: &ContainerConfig, command: &[String]) -> Result<ExecResult> {
        let ok = |stdout: Vec<u8>| ExecResult { exit_code: 0, stdout, stderr: Vec::new() };
        let fail =
            |code: i32, stderr: String| ExecResult { exit_code: code, stdout: Vec::new(), stderr: stderr.into_bytes() };
        let Some((program, args)) = command.split_first() else {
            return Err(RuntimeError::InvalidArgument("empty command".into()));
        };
        let program = program.rsplit('/').next().unwrap_or(program);
        match program {
            "sh" | "bash" if args.first().map(String::as_str) == Some("-c") && args.len() >= 2 => {
                let words: Vec<String> =
                    args[1].split_whitespace().map(|w| w.trim_matches(['\'', '"']).to_owned()).collect();
                Box::pin(self.run_builtin(config, &words)).await
            }
            "true" => Ok(ok(Vec::new())),
            "false" => Ok(fail(1, String::new())),
            "exit" => Ok(fail(args.first().and_then(|a| a.parse().ok()).unwrap_or(0), String::new())),
            "echo" => Ok(ok(format!("{}\n", args.join(" ")).into_bytes())),
            "env" => Ok(ok(config.envs.iter().map(|(k, v)| format!("{k}={v}\n")).collect::<String>().into_bytes())),
            "sleep" => {
                let secs: f64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(0.0);
                tokio::time::sleep(Duration::from_secs_f64(secs.max(0.0))).await;
                Ok(ok(Vec::new()))
            }
            "cat" => {
                let mut out = Vec::new();
                for arg in args {
                    match Self::resolve(config, arg).map(std::fs::read) {
                        Some(Ok(bytes)) => out.extend(bytes),
                        _ => return Ok(fail(1, format!("cat: {arg}: No such file or directory\n"))),
                    }
                }
                Ok(ok(out))
            }
            "test" | "[" => {
                let (flag, path) = match args {
                    [flag, path, ..] => (flag.as_str(), path.as_str()),
                    _ => return Ok(fail(2, "test: missing argument\n".into())),
                };
                let host = Self::resolve(config, path);
                let yes = match flag {
                    "-e" => host.is_some_and(|p| p.exists()),
                    "-f" => host.is_some_and(|p| p.is_file()),
                    "-d" => host.is_some_and(|p| p.is_dir()),
                    _ => return Ok(fail(2, format!("test: unknown flag {flag}\n"))),
                };
                Ok(if yes { ok(Vec::new()) } else { fail(1, String::new()) })
            }
            other => Err(RuntimeError::Unsupported(format!("the simulated runtime has no program {other:?}"))),
        }
    }
}

impl Inner {
    fn send(&self, event: ContainerEvent) {
        let _ = self.events.send(event);
    }

    /// Moves a running (or created) container to exited. `generation`: only
    /// if it still matches (timers). Returns whether it changed.
    fn exit(&self, id: &ContainerId, code: i32, generation: Option<u64>) -> Result<bool> {
        let sandbox_id = {
            let mut state = self.state.lock();
            let c = state
                .containers
                .get_mut(id)
                .ok_or_else(|| RuntimeError::NotFound { kind: "container", id: id.clone() })?;
            if generation.is_some_and(|g| g != c.generation) || c.status.state == ContainerState::Exited {
                return Ok(false);
            }
            c.generation += 1;
            c.status.state = ContainerState::Exited;
            c.status.finished_at = Some(SystemTime::now());
            c.status.exit_code = Some(code);
            c.status.reason = Some(exit_reason(code).into());
            c.status.sandbox_id.clone()
        };
        self.send(ContainerEvent::Exited { id: id.clone(), sandbox_id, exit_code: code });
        Ok(true)
    }
}

async fn drive_timers(inner: Weak<Inner>) {
    loop {
        let Some(strong) = inner.upgrade() else { return };
        let now = Instant::now();
        let (due, next) = {
            let mut timers = strong.timers.lock();
            let mut due = Vec::new();
            while let Some(entry) = timers.queue.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                due.push(entry.remove());
            }
            let next = timers.queue.keys().next().map(|(at, _)| *at);
            if next.is_none() && due.is_empty() {
                timers.driver_running = false;
                return;
            }
            (due, next)
        };
        for (id, generation) in due {
            let code = strong.state.lock().containers.get(&id).map(|c| c.behavior.exit_code);
            if let Some(code) = code {
                let _ = strong.exit(&id, code, Some(generation));
            }
        }
        let notify = strong.wake.clone();
        drop(strong);
        let wake = notify.notified();
        if let Some(at) = next {
            tokio::select! {
                _ = tokio::time::sleep_until(at) => {}
                _ = wake => {}
            }
        }
    }
}

#[async_trait]
impl RuntimeBackend for SimRuntime {
    async fn version(&self) -> Result<RuntimeVersion> {
        Ok(RuntimeVersion { runtime_name: SIM_RUNTIME_NAME.into(), runtime_version: env!("CARGO_PKG_VERSION").into() })
    }

    async fn update_runtime_config(&self, pod_cidr: &str) -> Result<()> {
        super::set_pod_cidr(&self.inner.ipam, pod_cidr)
    }

    async fn run_pod_sandbox(&self, config: &PodSandboxConfig) -> Result<SandboxId> {
        let ip = super::sandbox_ip(&self.inner.ipam, self.inner.config.host_ip, config)?;
        if self.inner.config.write_logs
            && !config.log_directory.as_os_str().is_empty()
            && let Err(e) = std::fs::create_dir_all(&config.log_directory)
        {
            if !config.host_network {
                self.inner.ipam.release(ip);
            }
            return Err(e.into());
        }
        let id = self.new_id();
        let mut labels = config.labels.clone();
        labels.entry(super::LABEL_POD_NAME.into()).or_insert_with(|| config.metadata.name.clone());
        labels.entry(super::LABEL_POD_NAMESPACE.into()).or_insert_with(|| config.metadata.namespace.clone());
        labels.entry(super::LABEL_POD_UID.into()).or_insert_with(|| config.metadata.uid.clone());
        let status = PodSandboxStatus {
            id: id.clone(),
            metadata: config.metadata.clone(),
            state: SandboxState::Ready,
            created_at: SystemTime::now(),
            ip: Some(ip),
            labels,
        };
        self.inner.state.lock().sandboxes.insert(
            id.clone(),
            Sandbox { status, log_directory: config.log_directory.clone(), host_network: config.host_network },
        );
        Ok(id)
    }

    async fn stop_pod_sandbox(&self, id: &SandboxId) -> Result<()> {
        let (ip, running) = {
            let mut state = self.inner.state.lock();
            // Idempotent, as the CRI wants: a removed sandbox is stopped.
            let Some(sandbox) = state.sandboxes.get_mut(id) else { return Ok(()) };
            sandbox.status.state = SandboxState::NotReady;
            let host_network = sandbox.host_network;
            let ip = sandbox.status.ip.take().filter(|_| !host_network);
            let running: Vec<ContainerId> = state
                .containers
                .values()
                .filter(|c| &c.status.sandbox_id == id && c.status.state != ContainerState::Exited)
                .map(|c| c.status.id.clone())
                .collect();
            (ip, running)
        };
        for c in running {
            let _ = self.inner.exit(&c, 137, None);
        }
        if let Some(ip) = ip {
            self.inner.ipam.release(ip);
        }
        Ok(())
    }

    async fn remove_pod_sandbox(&self, id: &SandboxId) -> Result<()> {
        if !self.inner.state.lock().sandboxes.contains_key(id) {
            return Ok(());
        }
        self.stop_pod_sandbox(id).await?;
        let removed: Vec<ContainerId> = {
            let mut state = self.inner.state.lock();
            state.sandboxes.remove(id);
            let ids: Vec<ContainerId> =
                state.containers.values().filter(|c| &c.status.sandbox_id == id).map(|c| c.status.id.clone()).collect();
            for c in &ids {
                state.containers.remove(c);
            }
            ids
        };
        for c in removed {
            self.inner.send(ContainerEvent::Removed { id: c, sandbox_id: id.clone() });
        }
        Ok(())
    }

    async fn pod_sandbox_status(&self, id: &SandboxId) -> Result<PodSandboxStatus> {
        self.inner
            .state
            .lock()
            .sandboxes
            .get(id)
            .map(|s| s.status.clone())
            .ok_or_else(|| RuntimeError::NotFound { kind: "sandbox", id: id.clone() })
    }

    async fn list_pod_sandboxes(&self, filter: &SandboxFilter) -> Result<Vec<PodSandboxStatus>> {
        let state = self.inner.state.lock();
        let mut out: Vec<PodSandboxStatus> =
            state.sandboxes.values().map(|s| &s.status).filter(|s| filter.matches(s)).cloned().collect();
        out.sort_by_key(|s| (s.created_at, s.id.clone()));
        Ok(out)
    }

    async fn create_container(
        &self,
        sandbox_id: &SandboxId,
        config: &ContainerConfig,
        _sandbox_config: &PodSandboxConfig,
    ) -> Result<ContainerId> {
        let behavior = SimBehavior::from_env(&config.envs);
        if let Some(message) = &behavior.fail_create {
            return Err(RuntimeError::CreateFailed(message.clone()));
        }
        let id = self.new_id();
        {
            let mut state = self.inner.state.lock();
            let sandbox = super::ready_sandbox(sandbox_id, state.sandboxes.get(sandbox_id), |s| s.status.state)?;
            let log_path = sandbox.log_directory.join(&config.log_path);
            let image_ref = state
                .images
                .get(&config.image)
                .map(|i| i.id.clone())
                .ok_or_else(|| RuntimeError::CreateFailed(format!("image {:?} is not present", config.image)))?;
            let mut labels = config.labels.clone();
            labels.entry(super::LABEL_CONTAINER_NAME.into()).or_insert_with(|| config.name.clone());
            for key in [super::LABEL_POD_NAME, super::LABEL_POD_NAMESPACE, super::LABEL_POD_UID] {
                if let Some(value) = state.sandboxes[sandbox_id].status.labels.get(key) {
                    labels.entry(key.into()).or_insert_with(|| value.clone());
                }
            }
            let status = ContainerStatus {
                labels,
                ..ContainerStatus::created(id.clone(), sandbox_id.clone(), config, image_ref, log_path)
            };
            state.containers.insert(id.clone(), Container { status, config: config.clone(), behavior, generation: 0 });
        }
        self.inner.send(ContainerEvent::Created { id: id.clone(), sandbox_id: sandbox_id.clone() });
        Ok(id)
    }

    async fn start_container(&self, id: &ContainerId) -> Result<()> {
        let (behavior, log_path, attempt) = {
            let state = self.inner.state.lock();
            let c =
                state.containers.get(id).ok_or_else(|| RuntimeError::NotFound { kind: "container", id: id.clone() })?;
            if c.status.state != ContainerState::Created {
                return Err(RuntimeError::InvalidState(format!("container {id} is not in the created state")));
            }
            (c.behavior.clone(), c.status.log_path.clone(), c.status.attempt)
        };
        let latency = behavior.start_latency.unwrap_or(self.inner.config.start_latency);
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        if self.inner.config.write_logs {
            if let Some(dir) = log_path.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            let _ = std::fs::OpenOptions::new().create(true).append(true).open(&log_path);
        }
        let now = SystemTime::now();
        let (sandbox_id, generation) = {
            let mut state = self.inner.state.lock();
            let c = state
                .containers
                .get_mut(id)
                .ok_or_else(|| RuntimeError::NotFound { kind: "container", id: id.clone() })?;
            if c.status.state != ContainerState::Created {
                return Err(RuntimeError::InvalidState(format!("container {id} was stopped while starting")));
            }
            c.generation += 1;
            if let Some(message) = &behavior.fail_start {
                c.status.state = ContainerState::Exited;
                c.status.exit_code = Some(128);
                c.status.reason = Some("StartError".into());
                c.status.message = Some(message.clone());
                c.status.started_at = Some(now);
                c.status.finished_at = Some(now);
                let sandbox_id = c.status.sandbox_id.clone();
                drop(state);
                self.inner.send(ContainerEvent::Exited { id: id.clone(), sandbox_id, exit_code: 128 });
                return Err(RuntimeError::StartFailed(message.clone()));
            }
            c.status.state = ContainerState::Running;
            c.status.started_at = Some(now);
            (c.status.sandbox_id.clone(), c.generation)
        };
        self.write_log(&log_path, Stream::Stdout, &behavior.stdout);
        self.write_log(&log_path, Stream::Stderr, &behavior.stderr);
        self.inner.send(ContainerEvent::Started { id: id.clone(), sandbox_id });
        if let Some(after) = behavior.exits_on_attempt(attempt) {
            self.schedule_exit(id, generation, after);
        }
        Ok(())
    }

    async fn stop_container(&self, id: &ContainerId, timeout: Duration) -> Result<()> {
        let (behavior, generation) = {
            let state = self.inner.state.lock();
            let c =
                state.containers.get(id).ok_or_else(|| RuntimeError::NotFound { kind: "container", id: id.clone() })?;
            if c.status.state == ContainerState::Exited {
                return Ok(());
            }
            if c.status.state == ContainerState::Created {
                drop(state);
                self.inner.exit(id, 0, None)?;
                return Ok(());
            }
            (c.behavior.clone(), c.generation)
        };
        let (delay, code) = if timeout.is_zero() {
            (Duration::ZERO, 137)
        } else if behavior.ignore_sigterm {
            (timeout, 137)
        } else {
            let delay = behavior.stop_delay.unwrap_or_default();
            if delay > timeout { (timeout, 137) } else { (delay, behavior.term_exit_code) }
        };
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        // It may have exited by itself meanwhile: then keep that exit.
        if !self.inner.exit(id, code, Some(generation))? {
            let _ = self.inner.exit(id, code, None);
        }
        Ok(())
    }

    async fn remove_container(&self, id: &ContainerId) -> Result<()> {
        let removed = {
            let mut state = self.inner.state.lock();
            match state.containers.get(id) {
                None => return Ok(()),
                Some(c) if c.status.state == ContainerState::Running => {
                    return Err(RuntimeError::InvalidState(format!("container {id} is running")));
                }
                Some(_) => state.containers.remove(id),
            }
        };
        if let Some(c) = removed {
            self.inner.send(ContainerEvent::Removed { id: id.clone(), sandbox_id: c.status.sandbox_id });
        }
        Ok(())
    }

    async fn container_status(&self, id: &ContainerId) -> Result<ContainerStatus> {
        self.inner
            .state
            .lock()
            .containers
            .get(id)
            .map(|c| c.status.clone())
            .ok_or_else(|| RuntimeError::NotFound { kind: "container", id: id.clone() })
    }

    async fn list_containers(&self, filter: &ContainerFilter) -> Result<Vec<ContainerStatus>> {
        let state = self.inner.state.lock();
        let mut out: Vec<ContainerStatus> =
            state.containers.values().map(|c| &c.status).filter(|c| filter.matches(c)).cloned().collect();
        out.sort_by_key(|c| (c.created_at, c.id.clone()));
        Ok(out)
    }

    async fn exec_sync(&self, id: &ContainerId, command: &[String], timeout: Duration) -> Result<ExecResult> {
        let config = {
            let state = self.inner.state.lock();
            let c =
                state.containers.get(id).ok_or_else(|| RuntimeError::NotFound { kind: "container", id: id.clone() })?;
            if c.status.state != ContainerState::Running {
                return Err(RuntimeError::InvalidState(format!("container {id} is not running")));
            }
            c.config.clone()
        };
        match tokio::time::timeout(timeout, self.run_builtin(&config, command)).await {
            Ok(result) => result,
            Err(_) => Err(RuntimeError::InvalidState(format!("command timed out after {timeout:?}"))),
        }
    }

    async fn pull_image(&self, image: &str) -> Result<String> {
        if let Some(found) = self.inner.state.lock().images.get(image) {
            return Ok(found.id.clone());
        }
        if !self.inner.config.pull_latency.is_zero() {
            tokio::time::sleep(self.inner.config.pull_latency).await;
        }
        if !self.image_exists(image) {
            return Err(RuntimeError::ImageNotFound {
                image: image.into(),
                message: format!(
                    "rpc error: code = NotFound desc = failed to pull and unpack image {image:?}: not found"
                ),
            });
        }
        let found = Image {
            id: image_id(image),
            repo_tags: vec![image.into()],
            size_bytes: self.inner.config.image_size_bytes,
        };
        let id = found.id.clone();
        self.inner.state.lock().images.insert(image.into(), found);
        Ok(id)
    }

    async fn image_status(&self, image: &str) -> Result<Option<Image>> {
        Ok(self.inner.state.lock().images.get(image).cloned())
    }

    async fn list_images(&self) -> Result<Vec<Image>> {
        Ok(self.inner.state.lock().images.values().cloned().collect())
    }

    fn events(&self) -> broadcast::Receiver<ContainerEvent> {
        self.inner.events.subscribe()
    }
}

/// Container configs describing the conformance suite's workloads in the
/// simulated runtime's terms (environment variables; any image exists).
pub mod workloads {
    use std::time::Duration;

    use super::SimBehavior;
    use crate::runtime::ContainerConfig;

    fn config(behavior: SimBehavior) -> ContainerConfig {
        ContainerConfig { image: "sim/workload:1".into(), envs: behavior.to_env(), ..Default::default() }
    }

    /// Runs until stopped; exits 0 on a graceful stop.
    pub fn long_running() -> ContainerConfig {
        config(SimBehavior::runs_forever())
    }

    /// Writes `line` to stdout and exits with `code` after 50 ms.
    pub fn exiting(line: &str, code: i32) -> ContainerConfig {
        config(SimBehavior::exits(code, Duration::from_millis(50)).with_stdout(&[line]))
    }

    /// Writes `ready_line` at start and ignores SIGTERM (a stop waits for
    /// its whole timeout, then exit 137).
    pub fn ignores_sigterm(ready_line: &str) -> ContainerConfig {
        config(SimBehavior { ignore_sigterm: true, ..SimBehavior::runs_forever().with_stdout(&[ready_line]) })
    }

    /// An image the simulated runtime never has.
    pub const UNKNOWN_IMAGE: &str = "sim/does-not-exist:1";

    /// An `exec_sync` command and what its stdout contains.
    pub fn exec() -> (Vec<String>, String) {
        (vec!["echo".into(), "hello".into()], "hello".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{LABEL_POD_UID, Mount, PodSandboxMetadata};

    fn sandbox_config(uid: &str, dir: &Path) -> PodSandboxConfig {
        PodSandboxConfig {
            metadata: PodSandboxMetadata { name: "p".into(), namespace: "default".into(), uid: uid.into(), attempt: 0 },
            hostname: "p".into(),
            log_directory: dir.join(uid),
            labels: [(LABEL_POD_UID.to_string(), uid.to_string())].into(),
            ..Default::default()
        }
    }

    fn container(name: &str, behavior: SimBehavior) -> ContainerConfig {
        ContainerConfig {
            name: name.into(),
            image: "busybox".into(),
            envs: behavior.to_env(),
            log_path: format!("{name}/0.log").into(),
            ..Default::default()
        }
    }

    async fn ready(rt: &SimRuntime) {
        rt.update_runtime_config("10.9.0.0/24").await.unwrap();
        rt.pull_image("busybox").await.unwrap();
    }

    #[tokio::test]
    async fn lifecycle_runs_exits_and_logs() {
        let dir = tempfile::tempdir().unwrap();
        let rt = SimRuntime::default();
        ready(&rt).await;
        let mut events = rt.events();
        let sc = sandbox_config("u1", dir.path());
        let sb = rt.run_pod_sandbox(&sc).await.unwrap();
        let status = rt.pod_sandbox_status(&sb).await.unwrap();
        assert_eq!(status.ip.unwrap().to_string(), "10.9.0.2");
        let behavior = SimBehavior::exits(3, Duration::from_millis(30)).with_stdout(&["hello", "world"]);
        let c = rt.create_container(&sb, &container("app", behavior), &sc).await.unwrap();
        rt.start_container(&c).await.unwrap();
        assert_eq!(rt.container_status(&c).await.unwrap().state, ContainerState::Running);
        loop {
            if let ContainerEvent::Exited { id, exit_code, .. } = events.recv().await.unwrap() {
                assert_eq!((id.as_str(), exit_code), (c.as_str(), 3));
                break;
            }
        }
        let st = rt.container_status(&c).await.unwrap();
        assert_eq!((st.state, st.exit_code, st.reason.as_deref()), (ContainerState::Exited, Some(3), Some("Error")));
        let log = std::fs::read_to_string(&st.log_path).unwrap();
        let entries: Vec<_> = log.lines().map(|l| cri_log::parse_entry(l.as_bytes()).unwrap()).collect();
        assert_eq!(
            entries.iter().map(|e| e.content.clone()).collect::<Vec<_>>(),
            [b"hello".to_vec(), b"world".to_vec()]
        );
        rt.stop_pod_sandbox(&sb).await.unwrap();
        assert_eq!(rt.ipam().in_use(), 0);
        rt.remove_pod_sandbox(&sb).await.unwrap();
        rt.remove_pod_sandbox(&sb).await.unwrap();
        assert!(rt.list_containers(&ContainerFilter::default()).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn stop_is_graceful_or_forced() {
        let rt = SimRuntime::new(SimConfig::default().with_write_logs(false));
        ready(&rt).await;
        let dir = tempfile::tempdir().unwrap();
        let sc = sandbox_config("u2", dir.path());
        let sb = rt.run_pod_sandbox(&sc).await.unwrap();
        let polite = rt.create_container(&sb, &container("a", SimBehavior::default()), &sc).await.unwrap();
        let stubborn = SimBehavior { ignore_sigterm: true, ..SimBehavior::default() };
        let stubborn = rt.create_container(&sb, &container("b", stubborn), &sc).await.unwrap();
        rt.start_container(&polite).await.unwrap();
        rt.start_container(&stubborn).await.unwrap();
        assert_eq!(rt.running_containers(), 2);
        rt.stop_container(&polite, Duration::from_secs(30)).await.unwrap();
        let started = std::time::Instant::now();
        rt.stop_container(&stubborn, Duration::from_millis(50)).await.unwrap();
        assert!(started.elapsed() >= Duration::from_millis(50));
        assert_eq!(rt.container_status(&polite).await.unwrap().exit_code, Some(0));
        assert_eq!(rt.container_status(&stubborn).await.unwrap().exit_code, Some(137));
        rt.stop_container(&polite, Duration::ZERO).await.unwrap();
        rt.remove_container(&polite).await.unwrap();
        let quick = rt.create_container(&sb, &container("q", SimBehavior::default()), &sc).await.unwrap();
        rt.start_container(&quick).await.unwrap();
        rt.stop_container(&quick, Duration::ZERO).await.unwrap();
        assert_eq!(rt.container_status(&quick).await.unwrap().exit_code, Some(137), "a zero timeout kills at once");
        rt.remove_container(&quick).await.unwrap();
        assert_eq!(rt.list_containers(&ContainerFilter::default()).await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn failures_images_and_network() {
        let rt = SimRuntime::default();
        let dir = tempfile::tempdir().unwrap();
        let sc = sandbox_config("u3", dir.path());
        assert!(matches!(rt.run_pod_sandbox(&sc).await, Err(RuntimeError::Network(_))));
        let host = PodSandboxConfig { host_network: true, ..sandbox_config("h", dir.path()) };
        let h = rt.run_pod_sandbox(&host).await.unwrap();
        assert_eq!(rt.pod_sandbox_status(&h).await.unwrap().ip, Some("127.0.0.1".parse().unwrap()));
        rt.remove_pod_sandbox(&h).await.unwrap();
        rt.stop_pod_sandbox(&h).await.unwrap();
        ready(&rt).await;
        assert!(matches!(rt.pull_image("x/does-not-exist:1").await, Err(RuntimeError::ImageNotFound { .. })));
        let sb = rt.run_pod_sandbox(&sc).await.unwrap();
        let mut cfg = container("c", SimBehavior { fail_create: Some("boom".into()), ..Default::default() });
        assert!(matches!(rt.create_container(&sb, &cfg, &sc).await, Err(RuntimeError::CreateFailed(_))));
        cfg = container("c", SimBehavior { fail_start: Some("no such file".into()), ..Default::default() });
        let c = rt.create_container(&sb, &cfg, &sc).await.unwrap();
        assert!(matches!(rt.start_container(&c).await, Err(RuntimeError::StartFailed(_))));
        let st = rt.container_status(&c).await.unwrap();
        assert_eq!((st.exit_code, st.reason.as_deref()), (Some(128), Some("StartError")));
        cfg.image = "never-pulled".into();
        cfg.envs.clear();
        assert!(matches!(rt.create_container(&sb, &cfg, &sc).await, Err(RuntimeError::CreateFailed(_))));
        let only = SimRuntime::new(SimConfig::default().with_known_images(["a".to_string()].into()));
        assert!(only.pull_image("a").await.is_ok());
        assert!(only.pull_image("b").await.is_err());
    }

    #[tokio::test]
    async fn exec_builtins_see_mounts() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("key"), "value").unwrap();
        let rt = SimRuntime::default();
        ready(&rt).await;
        let sc = sandbox_config("u4", dir.path());
        let sb = rt.run_pod_sandbox(&sc).await.unwrap();
        let mut cfg = container("c", SimBehavior::default());
        cfg.mounts.push(Mount { container_path: "/etc/cfg".into(), host_path: dir.path().into(), read_only: true });
        let c = rt.create_container(&sb, &cfg, &sc).await.unwrap();
        let cmd = |words: &[&str]| words.iter().map(|w| w.to_string()).collect::<Vec<_>>();
        assert!(matches!(
            rt.exec_sync(&c, &cmd(&["true"]), Duration::from_secs(1)).await,
            Err(RuntimeError::InvalidState(_))
        ));
        rt.start_container(&c).await.unwrap();
        let t = Duration::from_secs(1);
        assert_eq!(rt.exec_sync(&c, &cmd(&["cat", "/etc/cfg/key"]), t).await.unwrap().stdout, b"value");
        assert_eq!(rt.exec_sync(&c, &cmd(&["/bin/sh", "-c", "test -f /etc/cfg/key"]), t).await.unwrap().exit_code, 0);
        assert_eq!(rt.exec_sync(&c, &cmd(&["test", "-e", "/etc/cfg/nope"]), t).await.unwrap().exit_code, 1);
        assert_eq!(rt.exec_sync(&c, &cmd(&["echo", "a", "b"]), t).await.unwrap().stdout, b"a b\n");
        assert_eq!(rt.exec_sync(&c, &cmd(&["false"]), t).await.unwrap().exit_code, 1);
        assert!(matches!(rt.exec_sync(&c, &cmd(&["nginx"]), t).await, Err(RuntimeError::Unsupported(_))));
        assert!(rt.exec_sync(&c, &cmd(&["sleep", "5"]), Duration::from_millis(20)).await.is_err());
    }

    #[tokio::test]
    async fn behaviour_round_trips_through_env() {
        let b = SimBehavior {
            start_latency: Some(Duration::from_millis(5)),
            exit_after: Some(Duration::from_millis(7)),
            exit_code: 2,
            exit_until_attempt: Some(3),
            stdout: vec!["a".into(), "b".into()],
            stderr: vec!["e".into()],
            fail_create: None,
            fail_start: Some("x".into()),
            ignore_sigterm: true,
            stop_delay: Some(Duration::from_millis(9)),
            term_exit_code: 143,
        };
        assert_eq!(SimBehavior::from_env(&b.to_env()), b);
        assert_eq!(b.exits_on_attempt(2), Some(Duration::from_millis(7)));
        assert_eq!(b.exits_on_attempt(3), None);
    }

    #[tokio::test]
    async fn thousands_of_containers_need_no_tasks() {
        let rt = SimRuntime::new(SimConfig::default().with_write_logs(false));
        rt.update_runtime_config("10.0.0.0/16").await.unwrap();
        rt.pull_image("busybox").await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let sc = sandbox_config("many", dir.path());
        let sb = rt.run_pod_sandbox(&sc).await.unwrap();
        for i in 0..2000 {
            let behavior =
                if i % 2 == 0 { SimBehavior::default() } else { SimBehavior::exits(0, Duration::from_millis(10)) };
            let c = rt.create_container(&sb, &container(&format!("c{i}"), behavior), &sc).await.unwrap();
            rt.start_container(&c).await.unwrap();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while rt.running_containers() != 1000 {
            assert!(std::time::Instant::now() < deadline, "self-exits did not happen");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The timer driver goes away once nothing is pending.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!rt.inner.timers.lock().driver_running);
    }
}
