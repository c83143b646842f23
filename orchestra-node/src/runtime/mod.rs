//! The container runtime interface: [`RuntimeBackend`], shaped after the
//! Kubernetes CRI (`RuntimeService` + `ImageService`) so that what the node
//! agent asks of a runtime reads like what the kubelet asks of containerd.
//!
//! A pod is one *sandbox* (its network identity: the pod IP) holding
//! *containers*. The agent drives the lifecycle; the runtime only does what
//! it is told and reports state:
//!
//! ```text
//! run_pod_sandbox ─▶ pull_image ─▶ create_container ─▶ start_container
//!                                         ▲                  │ exits
//!                                         └── (restart) ◀────┘
//! stop_container ─▶ remove_container ─▶ stop_pod_sandbox ─▶ remove_pod_sandbox
//! ```
//!
//! Containers write their output to a log file in the CRI log format (see
//! [`cri_log`]) at `sandbox.log_directory/container.log_path`; the agent
//! reads those files to serve `kubectl logs`, as the kubelet does.
//!
//! Backends: [`process::ProcessRuntime`] runs containers as host processes,
//! its images named by an [`images::ImageCatalog`]. Every backend runs the
//! conformance suite in `orchestra_node::testing` (feature `testing`).

pub mod cri_log;
pub mod embedded;
pub mod images;
pub mod mux;
pub mod process;
pub mod sim;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use tokio::sync::broadcast;

/// Label the agent puts on sandboxes and containers: the pod's name.
pub const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
/// Label the agent puts on sandboxes and containers: the pod's namespace.
pub const LABEL_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
/// Label the agent puts on sandboxes and containers: the pod's UID.
pub const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";
/// Label the agent puts on containers: the container's name in the pod spec.
pub const LABEL_CONTAINER_NAME: &str = "io.kubernetes.container.name";

/// Identifier of a pod sandbox, unique within one runtime.
pub type SandboxId = String;
/// Identifier of a container, unique within one runtime.
pub type ContainerId = String;

/// Faults of a runtime call. Kubernetes' waiting reasons derive from them:
/// [`RuntimeError::ImageNotFound`] → `ErrImagePull`,
/// [`RuntimeError::CreateFailed`] → `CreateContainerError`,
/// [`RuntimeError::ConfigRefused`] → `CreateContainerConfigError`,
/// [`RuntimeError::StartFailed`] → `RunContainerError`.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// No sandbox, container or image with this id.
    #[error("{kind} {id:?} not found")]
    NotFound {
        /// `sandbox`, `container` or `image`.
        kind: &'static str,
        /// The id asked for.
        id: String,
    },
    /// The image cannot be pulled: unknown to the catalog or the registry.
    #[error("failed to pull image {image:?}: {message}")]
    ImageNotFound {
        /// The image reference as written in the pod spec.
        image: String,
        /// Why, in words.
        message: String,
    },
    /// The container could not be created (bad mount, bad config...).
    #[error("failed to create container: {0}")]
    CreateFailed(String),
    /// The container's configuration breaks a policy of the pod (a
    /// `runAsNonRoot` container that would run as root): the kubelet's
    /// `CreateContainerConfigError`. The message is the kubelet's.
    #[error("{0}")]
    ConfigRefused(String),
    /// The container's process could not be started (executable missing,
    /// permission denied...).
    #[error("failed to start container: {0}")]
    StartFailed(String),
    /// The call is valid but not in this state (start a running container,
    /// create in a stopped sandbox...).
    #[error("invalid state: {0}")]
    InvalidState(String),
    /// The request itself is malformed.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The backend cannot do this at all (exec in a backend without
    /// processes, for example).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The pod network could not give the sandbox an address.
    #[error("network: {0}")]
    Network(String),
    /// An I/O fault of the host.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

/// Result of runtime calls.
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

/// Name and version of a runtime, shown as the node's
/// `status.nodeInfo.containerRuntimeVersion` (`<name>://<version>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeVersion {
    /// Runtime name, e.g. `orchestra-process`.
    pub runtime_name: String,
    /// Runtime version, e.g. `0.1.0`.
    pub runtime_version: String,
}

impl RuntimeVersion {
    /// `<name>://<version>`, as the kubelet reports it.
    pub fn container_runtime_version(&self) -> String {
        format!("{}://{}", self.runtime_name, self.runtime_version)
    }
}

/// Identity of a pod, carried by its sandbox and used for filtering.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodSandboxMetadata {
    /// Pod name.
    pub name: String,
    /// Pod namespace.
    pub namespace: String,
    /// Pod UID.
    pub uid: String,
    /// How many sandboxes were created for this pod before this one.
    pub attempt: u32,
}

/// What [`RuntimeBackend::run_pod_sandbox`] needs.
#[derive(Debug, Clone, Default)]
pub struct PodSandboxConfig {
    /// The pod this sandbox is for.
    pub metadata: PodSandboxMetadata,
    /// Hostname the containers see (the pod name, or `spec.hostname`).
    pub hostname: String,
    /// Directory where the containers' log files go (the kubelet uses
    /// `/var/log/pods/<ns>_<name>_<uid>`); created by the runtime.
    pub log_directory: PathBuf,
    /// Run in the host's network (`spec.hostNetwork`): the sandbox takes the
    /// node's address instead of one from the pod network.
    pub host_network: bool,
    /// Labels of the pod, kept on the sandbox for filtering.
    pub labels: BTreeMap<String, String>,
    /// Annotations of the pod.
    pub annotations: BTreeMap<String, String>,
    /// Which runtime serves the pod (CRI's `runtime_handler`: the handler
    /// of the pod's RuntimeClass, here its `runtimeClassName`); empty for the
    /// default. See [`mux::RuntimeMux`].
    pub runtime_handler: String,
}

/// State of a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxState {
    /// Network set up; containers can run.
    Ready,
    /// Stopped (or failed): its containers are stopped and its address released.
    NotReady,
}

/// What [`RuntimeBackend::pod_sandbox_status`] and
/// [`RuntimeBackend::list_pod_sandboxes`] return.
#[derive(Debug, Clone)]
pub struct PodSandboxStatus {
    /// Sandbox id.
    pub id: SandboxId,
    /// The pod it belongs to.
    pub metadata: PodSandboxMetadata,
    /// Ready or not.
    pub state: SandboxState,
    /// When it was created.
    pub created_at: SystemTime,
    /// The pod IP (`None` once the sandbox is stopped).
    pub ip: Option<IpAddr>,
    /// Labels given at creation.
    pub labels: BTreeMap<String, String>,
}

/// A bind mount of a host path into the container (volumes: emptyDir,
/// ConfigMap, Secret, projected files all end up as host directories).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Path inside the container, as written in `volumeMounts[].mountPath`.
    pub container_path: PathBuf,
    /// Path on the host holding the volume's content.
    pub host_path: PathBuf,
    /// Mounted read-only.
    pub read_only: bool,
}

/// Resource limits the runtime enforces where it can (cgroup v2 for the
/// process backend).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ContainerResources {
    /// CPU limit in millicores (`cpu.max`); `None` = unlimited.
    pub cpu_limit_millis: Option<u64>,
    /// CPU request in millicores (`cpu.weight`).
    pub cpu_request_millis: Option<u64>,
    /// Memory limit in bytes (`memory.max`); `None` = unlimited.
    pub memory_limit_bytes: Option<u64>,
    /// Largest number of processes (`pids.max`); `None` = the runtime's
    /// default (the process backend's
    /// [`ProcessRuntimeConfig::pids_limit`](process::ProcessRuntimeConfig::pids_limit)).
    pub pids_limit: Option<u64>,
}

/// Who a container runs as and what it may do: the pod's and the
/// container's `securityContext` merged (the container's fields win), as
/// the kubelet hands CRI's `LinuxContainerSecurityContext` to a runtime.
///
/// The default asks for nothing: the runtime's default user, its default
/// capabilities, `no_new_privs` (see [`process`] for what the process
/// backend makes of each field).
///
/// ```
/// use orchestra_node::runtime::SecurityContext;
///
/// let restricted = SecurityContext {
///     run_as_user: Some(1000),
///     run_as_non_root: true,
///     drop_capabilities: vec!["ALL".into()],
///     ..Default::default()
/// };
/// assert!(!restricted.privileged);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SecurityContext {
    /// `runAsUser`: the uid; `None` = the image's (the runtime's default) user.
    pub run_as_user: Option<i64>,
    /// `runAsGroup`: the primary gid; `None` = the user's primary group.
    pub run_as_group: Option<i64>,
    /// Extra groups: the pod's `fsGroup` and `supplementalGroups`.
    pub supplemental_groups: Vec<i64>,
    /// `runAsNonRoot`: refuse to run the container as uid 0.
    pub run_as_non_root: bool,
    /// `privileged`: every capability, no `no_new_privs`.
    pub privileged: bool,
    /// `allowPrivilegeEscalation`; `None` = not set.
    pub allow_privilege_escalation: Option<bool>,
    /// `capabilities.add` (`NET_ADMIN`, `CAP_NET_ADMIN` or `ALL`).
    pub add_capabilities: Vec<String>,
    /// `capabilities.drop` (`NET_RAW`, `CAP_NET_RAW` or `ALL`).
    pub drop_capabilities: Vec<String>,
}

/// What [`RuntimeBackend::create_container`] needs.
#[derive(Debug, Clone, Default)]
pub struct ContainerConfig {
    /// Container name from the pod spec.
    pub name: String,
    /// How many times this container was created in this sandbox before
    /// (the restart count).
    pub attempt: u32,
    /// Image reference as written in the pod spec.
    pub image: String,
    /// Overrides the image's entrypoint (`command` in the pod spec).
    pub command: Vec<String>,
    /// Overrides the image's default arguments (`args` in the pod spec).
    pub args: Vec<String>,
    /// Working directory; the runtime picks one when empty.
    pub working_dir: Option<PathBuf>,
    /// Environment, in order (later entries win), already resolved by the
    /// agent (downward API, ConfigMap and Secret references expanded).
    pub envs: Vec<(String, String)>,
    /// Volumes.
    pub mounts: Vec<Mount>,
    /// Log file path relative to the sandbox's log directory
    /// (`<container>/<attempt>.log`).
    pub log_path: PathBuf,
    /// Limits to enforce.
    pub resources: ContainerResources,
    /// User, groups and privileges.
    pub security: SecurityContext,
    /// Labels kept on the container for filtering.
    pub labels: BTreeMap<String, String>,
}

/// State of a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerState {
    /// Created, not started.
    Created,
    /// Started and not exited.
    Running,
    /// Exited (or failed to start); see the exit code.
    Exited,
    /// The runtime lost track of it.
    Unknown,
}

/// What [`RuntimeBackend::container_status`] and
/// [`RuntimeBackend::list_containers`] return.
#[derive(Debug, Clone)]
pub struct ContainerStatus {
    /// Container id.
    pub id: ContainerId,
    /// Sandbox the container belongs to.
    pub sandbox_id: SandboxId,
    /// Container name from the pod spec.
    pub name: String,
    /// Creation attempt (restart count).
    pub attempt: u32,
    /// Current state.
    pub state: ContainerState,
    /// Image reference as given at creation.
    pub image: String,
    /// Resolved image id (what [`RuntimeBackend::pull_image`] returned).
    pub image_ref: String,
    /// When it was created.
    pub created_at: SystemTime,
    /// When it started, if it did.
    pub started_at: Option<SystemTime>,
    /// When it exited, if it did.
    pub finished_at: Option<SystemTime>,
    /// Exit code once exited (128 + signal number when killed by a signal).
    pub exit_code: Option<i32>,
    /// Short machine reason once exited: `Completed`, `Error`, `OOMKilled`,
    /// `StartError`.
    pub reason: Option<String>,
    /// Human message (a start failure's cause, for example).
    pub message: Option<String>,
    /// Absolute path of the log file.
    pub log_path: PathBuf,
    /// Host process id while running, where the backend has processes.
    pub pid: Option<u32>,
    /// Labels given at creation.
    pub labels: BTreeMap<String, String>,
}

impl ContainerStatus {
    /// The status of a container just created from `config` in
    /// `sandbox_id`: `Created` now, with the config's name, attempt, image
    /// and labels; what every backend's `create_container` records.
    pub fn created(
        id: ContainerId,
        sandbox_id: SandboxId,
        config: &ContainerConfig,
        image_ref: String,
        log_path: PathBuf,
    ) -> ContainerStatus {
        ContainerStatus {
            id,
            sandbox_id,
            name: config.name.clone(),
            attempt: config.attempt,
            state: ContainerState::Created,
            image: config.image.clone(),
            image_ref,
            created_at: SystemTime::now(),
            started_at: None,
            finished_at: None,
            exit_code: None,
            reason: None,
            message: None,
            log_path,
            pid: None,
            labels: config.labels.clone(),
        }
    }
}

/// Sets the pod address range of `ipam` from the node's pod CIDR: what
/// `update_runtime_config` does in the backends that hand out addresses.
pub(crate) fn set_pod_cidr(ipam: &crate::network::Ipam, pod_cidr: &str) -> Result<()> {
    let cidr: orchestra_core::api::net::Ipv4Cidr = pod_cidr
        .parse()
        .map_err(|e: orchestra_core::api::net::InvalidCidr| RuntimeError::InvalidArgument(e.to_string()))?;
    ipam.set_range(cidr);
    Ok(())
}

/// The address of a new sandbox: the host's with host networking, else a
/// free one from `ipam` (released again by the caller if the sandbox fails).
pub(crate) fn sandbox_ip(ipam: &crate::network::Ipam, host_ip: IpAddr, config: &PodSandboxConfig) -> Result<IpAddr> {
    if config.host_network {
        return Ok(host_ip);
    }
    ipam.allocate().map_err(|e| RuntimeError::Network(e.to_string()))
}

/// The sandbox a container is to be created in: it must exist (`found`,
/// looked up by `id`) and be ready (its `state`).
pub(crate) fn ready_sandbox<S>(id: &SandboxId, found: Option<S>, state: impl FnOnce(&S) -> SandboxState) -> Result<S> {
    let sandbox = found.ok_or_else(|| RuntimeError::NotFound { kind: "sandbox", id: id.clone() })?;
    if state(&sandbox) != SandboxState::Ready {
        return Err(RuntimeError::InvalidState(format!("sandbox {id} is not ready")));
    }
    Ok(sandbox)
}

/// True if `labels` carry every pair of `wanted`.
fn has_labels(labels: &BTreeMap<String, String>, wanted: &BTreeMap<String, String>) -> bool {
    wanted.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// Filter of [`RuntimeBackend::list_containers`]; every set field must match.
#[derive(Debug, Clone, Default)]
pub struct ContainerFilter {
    /// Only this container.
    pub id: Option<ContainerId>,
    /// Only containers of this sandbox.
    pub sandbox_id: Option<SandboxId>,
    /// Only containers in this state.
    pub state: Option<ContainerState>,
    /// Only containers carrying all these labels.
    pub labels: BTreeMap<String, String>,
}

/// Filter of [`RuntimeBackend::list_pod_sandboxes`]; every set field must match.
#[derive(Debug, Clone, Default)]
pub struct SandboxFilter {
    /// Only this sandbox.
    pub id: Option<SandboxId>,
    /// Only sandboxes in this state.
    pub state: Option<SandboxState>,
    /// Only sandboxes carrying all these labels.
    pub labels: BTreeMap<String, String>,
}

impl ContainerFilter {
    /// True if `status` passes every set field of the filter.
    pub fn matches(&self, status: &ContainerStatus) -> bool {
        self.id.as_ref().is_none_or(|id| *id == status.id)
            && self.sandbox_id.as_ref().is_none_or(|id| *id == status.sandbox_id)
            && self.state.is_none_or(|state| state == status.state)
            && has_labels(&status.labels, &self.labels)
    }
}

impl SandboxFilter {
    /// True if `status` passes every set field of the filter.
    pub fn matches(&self, status: &PodSandboxStatus) -> bool {
        self.id.as_ref().is_none_or(|id| *id == status.id)
            && self.state.is_none_or(|state| state == status.state)
            && has_labels(&status.labels, &self.labels)
    }
}

/// An image known to the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// Image id (the resolved reference, e.g. `orchestra/echo@sha256:...`
    /// or a catalog-specific id).
    pub id: String,
    /// References this image answers to (`orchestra/echo:latest`...).
    pub repo_tags: Vec<String>,
    /// Size in bytes, as reported in `node.status.images`.
    pub size_bytes: u64,
}

/// Output of [`RuntimeBackend::exec_sync`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecResult {
    /// Exit code of the command.
    pub exit_code: i32,
    /// What it wrote to stdout (truncated by the backend to a sane size).
    pub stdout: Vec<u8>,
    /// What it wrote to stderr.
    pub stderr: Vec<u8>,
}

/// What [`RuntimeBackend::exec`] runs (CRI `ExecRequest`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecRequest {
    /// The command and its arguments.
    pub command: Vec<String>,
    /// Run it on a terminal: stdout and stderr are then one stream and
    /// [`ExecSession::resize`] changes the terminal's size.
    pub tty: bool,
    /// Give it a stdin ([`ExecSession::stdin`]); otherwise it reads
    /// `/dev/null`.
    pub stdin: bool,
}

/// A terminal's size in characters (the `resize` channel of `kubectl exec`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
pub struct TerminalSize {
    /// Columns.
    #[serde(rename = "Width")]
    pub width: u16,
    /// Rows.
    #[serde(rename = "Height")]
    pub height: u16,
}

/// A boxed byte stream an [`ExecSession`] reads from.
pub type ExecOutput = std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>;

/// A command started by [`RuntimeBackend::exec`], its streams attached.
/// Dropping [`ExecSession::exit`] before it completes kills the command.
pub struct ExecSession {
    /// The command's stdin, if asked for; dropping it closes the stream.
    pub stdin: Option<std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>>,
    /// Its stdout (with a terminal: the terminal's output).
    pub stdout: ExecOutput,
    /// Its stderr; `None` with a terminal.
    pub stderr: Option<ExecOutput>,
    /// Resizes the terminal; `None` without one.
    pub resize: Option<Box<dyn Fn(TerminalSize) -> std::io::Result<()> + Send + Sync>>,
    /// Completes with the exit code once the command has exited.
    pub exit: futures::future::BoxFuture<'static, Result<i32>>,
}

impl std::fmt::Debug for ExecSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecSession")
            .field("stdin", &self.stdin.is_some())
            .field("stderr", &self.stderr.is_some())
            .field("tty", &self.resize.is_some())
            .finish_non_exhaustive()
    }
}

/// A change a backend reports as it happens (CRI `GetContainerEvents`), so
/// the agent reacts to an exit at once instead of waiting for its next poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContainerEvent {
    /// A container was created.
    Created {
        /// Its id.
        id: ContainerId,
        /// Its sandbox.
        sandbox_id: SandboxId,
    },
    /// A container started.
    Started {
        /// Its id.
        id: ContainerId,
        /// Its sandbox.
        sandbox_id: SandboxId,
    },
    /// A container exited (or was stopped).
    Exited {
        /// Its id.
        id: ContainerId,
        /// Its sandbox.
        sandbox_id: SandboxId,
        /// Its exit code.
        exit_code: i32,
    },
    /// A container was removed.
    Removed {
        /// Its id.
        id: ContainerId,
        /// Its sandbox.
        sandbox_id: SandboxId,
    },
}

/// A container runtime, CRI-shaped. All methods are idempotent where the CRI
/// says so: stopping a stopped container or removing a removed one succeeds.
///
/// Implementations must be cheap to share (`Arc<dyn RuntimeBackend>`) and
/// safe to call concurrently for different pods.
///
/// The node agent drives a backend through this trait only; here the same
/// calls run one container on the simulated runtime, [`sim::SimRuntime`].
/// A complete backend of your own, passing the conformance suite, is
/// `examples/examples/runtime_backend.rs` in the repository.
///
/// ```
/// # async fn demo() -> orchestra_node::runtime::Result<()> {
/// use std::time::Duration;
/// use orchestra_node::runtime::{ContainerState, PodSandboxConfig, PodSandboxMetadata, RuntimeBackend};
/// use orchestra_node::runtime::sim::{SimRuntime, workloads};
///
/// let logs = tempfile::tempdir().unwrap();
/// let runtime: &dyn RuntimeBackend = &SimRuntime::default();
/// runtime.update_runtime_config("10.244.1.0/24").await?;
///
/// let pod = PodSandboxConfig {
///     metadata: PodSandboxMetadata { name: "web".into(), namespace: "default".into(), uid: "u1".into(), attempt: 0 },
///     log_directory: logs.path().join("default_web_u1"),
///     ..PodSandboxConfig::default()
/// };
/// let sandbox = runtime.run_pod_sandbox(&pod).await?;
/// let container = workloads::long_running();
/// runtime.pull_image(&container.image).await?;
/// let id = runtime.create_container(&sandbox, &container, &pod).await?;
/// runtime.start_container(&id).await?;
/// assert_eq!(runtime.container_status(&id).await?.state, ContainerState::Running);
///
/// runtime.stop_container(&id, Duration::from_secs(1)).await?;
/// assert_eq!(runtime.container_status(&id).await?.state, ContainerState::Exited);
/// runtime.stop_pod_sandbox(&sandbox).await?;
/// runtime.remove_pod_sandbox(&sandbox).await?;
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
/// ```
#[async_trait]
pub trait RuntimeBackend: Send + Sync + 'static {
    /// Name and version of the runtime.
    async fn version(&self) -> Result<RuntimeVersion>;

    /// Tells the runtime the node's pod CIDR (`spec.podCIDR`), from which it
    /// gives sandboxes their addresses. Sandboxes created before the first
    /// call fail with [`RuntimeError::Network`] unless `host_network`.
    async fn update_runtime_config(&self, pod_cidr: &str) -> Result<()>;

    /// Creates and starts a sandbox: allocates the pod IP, creates the log
    /// directory. Returns its id.
    async fn run_pod_sandbox(&self, config: &PodSandboxConfig) -> Result<SandboxId>;

    /// Stops every container of the sandbox (forcibly: the agent stops them
    /// gracefully first) and releases its address. Idempotent.
    async fn stop_pod_sandbox(&self, id: &SandboxId) -> Result<()>;

    /// Removes a stopped sandbox and its containers. Idempotent.
    async fn remove_pod_sandbox(&self, id: &SandboxId) -> Result<()>;

    /// Status of one sandbox.
    async fn pod_sandbox_status(&self, id: &SandboxId) -> Result<PodSandboxStatus>;

    /// Every sandbox matching the filter.
    async fn list_pod_sandboxes(&self, filter: &SandboxFilter) -> Result<Vec<PodSandboxStatus>>;

    /// Creates a container in a ready sandbox from an image already pulled.
    async fn create_container(
        &self,
        sandbox_id: &SandboxId,
        config: &ContainerConfig,
        sandbox_config: &PodSandboxConfig,
    ) -> Result<ContainerId>;

    /// Starts a created container.
    async fn start_container(&self, id: &ContainerId) -> Result<()>;

    /// Stops a container: SIGTERM (or the backend's equivalent), then
    /// SIGKILL once `timeout` has passed. Returns once it has exited.
    /// Idempotent.
    async fn stop_container(&self, id: &ContainerId, timeout: Duration) -> Result<()>;

    /// Removes an exited container (its log file stays). Idempotent.
    async fn remove_container(&self, id: &ContainerId) -> Result<()>;

    /// Status of one container.
    async fn container_status(&self, id: &ContainerId) -> Result<ContainerStatus>;

    /// Every container matching the filter.
    async fn list_containers(&self, filter: &ContainerFilter) -> Result<Vec<ContainerStatus>>;

    /// Runs a command inside a running container and waits for it, at most
    /// `timeout` (exec probes; `kubectl exec` without a terminal).
    async fn exec_sync(&self, id: &ContainerId, command: &[String], timeout: Duration) -> Result<ExecResult>;

    /// Starts a command inside a running container with its streams
    /// attached (CRI `Exec`: `kubectl exec`, interactive or not, with or
    /// without a terminal). Backends without processes answer
    /// [`RuntimeError::Unsupported`], the default.
    async fn exec(&self, id: &ContainerId, request: ExecRequest) -> Result<ExecSession> {
        let _ = (id, request);
        Err(RuntimeError::Unsupported("this runtime cannot attach to a command's streams".into()))
    }

    /// Makes an image available; returns its image id.
    /// [`RuntimeError::ImageNotFound`] when it does not exist.
    async fn pull_image(&self, image: &str) -> Result<String>;

    /// The image if present on the node.
    async fn image_status(&self, image: &str) -> Result<Option<Image>>;

    /// Every image present on the node.
    async fn list_images(&self) -> Result<Vec<Image>>;

    /// Changes as they happen. Events may be dropped when a receiver lags
    /// (`RecvError::Lagged`); the agent then falls back to listing.
    fn events(&self) -> broadcast::Receiver<ContainerEvent>;
}

/// Stops every running container of `runtime` at once, each with `grace`
/// before it is killed, and returns once all have stopped: what a node does
/// with its containers when it shuts down for good. Failures are logged;
/// the runtime stays usable.
pub async fn stop_running_containers(runtime: &dyn RuntimeBackend, grace: Duration) {
    let filter = ContainerFilter { state: Some(ContainerState::Running), ..ContainerFilter::default() };
    let running = match runtime.list_containers(&filter).await {
        Ok(running) => running,
        Err(error) => {
            tracing::warn!(%error, "cannot list the containers to stop");
            return;
        }
    };
    let stops = running.iter().map(|container| runtime.stop_container(&container.id, grace));
    for (container, result) in running.iter().zip(futures::future::join_all(stops).await) {
        if let Err(error) = result {
            tracing::warn!(container = %container.id, %error, "cannot stop a container");
        }
    }
}
