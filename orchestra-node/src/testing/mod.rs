//! The [`RuntimeBackend`] conformance suite (feature `testing`). Every
//! backend of this crate runs it; a third-party backend can too.
//!
//! The backend's test describes what its containers do as [`Workloads`]:
//! [`ContainerConfig`]s the backend understands (host programs for the
//! process backend; environment variables a simulated backend reads, for
//! instance), returned by its [`RuntimeBuilder`]. The suite then drives each
//! check against a fresh backend from the builder:
//!
//! ```ignore
//! Suite::test_all(&MyBuilder::default()).await;   // or one check: Suite::checks(&builder).logs().await
//! ```
//!
//! Each check panics with a message naming the check and what differed.
//! Waits poll with the workloads' `patience`, never assert on fixed sleeps.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::broadcast;

use crate::runtime::cri_log::{Stream, parse_entry};
use crate::runtime::{
    ContainerConfig, ContainerEvent, ContainerFilter, ContainerId, ContainerState, ContainerStatus, ExecRequest,
    LABEL_CONTAINER_NAME, LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID, PodSandboxConfig, PodSandboxMetadata,
    RuntimeBackend, RuntimeError, SandboxFilter, SandboxId, SandboxState,
};
use orchestra_core::api::net::Ipv4Cidr;

/// A container that exits by itself.
#[derive(Debug, Clone)]
pub struct ExitingWorkload {
    /// The container.
    pub config: ContainerConfig,
    /// The line it writes to stdout before exiting.
    pub line: String,
    /// Its exit code.
    pub exit_code: i32,
}

/// A container that ignores SIGTERM.
#[derive(Debug, Clone)]
pub struct StubbornWorkload {
    /// The container.
    pub config: ContainerConfig,
    /// The line it writes to stdout once it ignores SIGTERM (the suite
    /// waits for it before stopping the container).
    pub ready_line: String,
}

/// A command run by `exec_sync` in the long-running container.
#[derive(Debug, Clone)]
pub struct ExecWorkload {
    /// The command.
    pub command: Vec<String>,
    /// Text its stdout must contain.
    pub stdout_contains: String,
}

/// What the backend's containers do, in the backend's terms.
#[derive(Debug, Clone)]
pub struct Workloads {
    /// Runs until stopped; exits promptly on SIGTERM (or the backend's
    /// equivalent).
    pub long_running: ContainerConfig,
    /// Writes a line to stdout and exits with a given code.
    pub exiting: ExitingWorkload,
    /// Ignores SIGTERM, so that stopping it must escalate to SIGKILL
    /// (exit code 137). `None` skips that part.
    pub ignores_sigterm: Option<StubbornWorkload>,
    /// An image reference the backend does not have.
    pub unknown_image: String,
    /// A command `exec_sync` runs; `None` when the backend has no exec, which
    /// must then answer [`RuntimeError::Unsupported`].
    pub exec: Option<ExecWorkload>,
    /// Pod CIDR given to `update_runtime_config` (a /29 or larger).
    pub pod_cidr: String,
    /// The address of `host_network` sandboxes, when the backend has a
    /// known one.
    pub host_ip: Option<IpAddr>,
    /// Directory under which the suite puts the sandboxes' log directories.
    pub log_root: PathBuf,
    /// How long to wait for anything (generous: CI machines are loaded).
    pub patience: Duration,
}

impl Workloads {
    /// Workloads with the defaults: pod CIDR `127.77.0.0/24`, no
    /// SIGTERM-ignoring container, no exec, 20 s of patience.
    pub fn new(
        long_running: ContainerConfig,
        exiting: ExitingWorkload,
        unknown_image: impl Into<String>,
        log_root: impl Into<PathBuf>,
    ) -> Self {
        Self {
            long_running,
            exiting,
            ignores_sigterm: None,
            unknown_image: unknown_image.into(),
            exec: None,
            pod_cidr: "127.77.0.0/24".to_owned(),
            host_ip: None,
            log_root: log_root.into(),
            patience: Duration::from_secs(20),
        }
    }
}

/// Makes the runtimes the suite runs on, as `orchestra_store::testing::StoreBuilder`
/// makes stores: every [`build`](RuntimeBuilder::build) returns a fresh
/// runtime, and [`workloads`](RuntimeBuilder::workloads) says what its
/// containers do.
///
/// The simulated runtime's builder (its containers are configured through
/// environment variables; [`runtime::sim::workloads`](crate::runtime::sim::workloads)
/// has them), and one check run on it:
///
/// ```
/// use std::sync::Arc;
/// use orchestra_node::runtime::RuntimeBackend;
/// use orchestra_node::runtime::sim::{SimRuntime, workloads};
/// use orchestra_node::testing::{ExitingWorkload, RuntimeBuilder, Suite, Workloads};
///
/// struct SimBuilder {
///     logs: tempfile::TempDir,
/// }
///
/// #[async_trait::async_trait]
/// impl RuntimeBuilder for SimBuilder {
///     async fn build(&self) -> Arc<dyn RuntimeBackend> {
///         Arc::new(SimRuntime::default())
///     }
///
///     fn workloads(&self) -> Workloads {
///         let exiting = ExitingWorkload { config: workloads::exiting("bye", 3), line: "bye".into(), exit_code: 3 };
///         Workloads::new(workloads::long_running(), exiting, workloads::UNKNOWN_IMAGE, self.logs.path())
///     }
/// }
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let builder = SimBuilder { logs: tempfile::tempdir().unwrap() };
/// Suite::checks(&builder).container_lifecycle().await;
/// # });
/// ```
#[async_trait::async_trait]
pub trait RuntimeBuilder: Send + Sync {
    /// Builds a fresh runtime.
    async fn build(&self) -> Arc<dyn RuntimeBackend>;

    /// What the runtime's containers do, in its terms.
    fn workloads(&self) -> Workloads;
}

/// The conformance suite: [`Suite::test_all`] runs every check,
/// [`Suite::checks`] one at a time.
#[derive(Debug)]
pub struct Suite;

impl Suite {
    /// Runs every check in turn, each on a fresh runtime from `builder`;
    /// panics on the first difference from the contract.
    pub async fn test_all<B: RuntimeBuilder + ?Sized>(builder: &B) {
        Suite::checks(builder).run_all().await;
    }

    /// The checks, to run one at a time (one test per check).
    pub fn checks<B: RuntimeBuilder + ?Sized>(builder: &B) -> Checks<'_, B> {
        Checks { builder, workloads: builder.workloads() }
    }
}

static UNIQUE: AtomicU64 = AtomicU64::new(0);

fn unique() -> u64 {
    UNIQUE.fetch_add(1, Ordering::Relaxed)
}

type Backend = Arc<dyn RuntimeBackend>;

/// The suite's checks over runtimes from one builder: one method per check.
pub struct Checks<'a, B: ?Sized> {
    builder: &'a B,
    workloads: Workloads,
}

impl<B: RuntimeBuilder + ?Sized> Checks<'_, B> {
    /// Every check, one after the other.
    pub async fn run_all(&self) {
        self.version().await;
        self.sandbox_addresses().await;
        self.sandbox_needs_a_cidr().await;
        self.images().await;
        self.container_lifecycle().await;
        self.logs().await;
        self.stop_escalates().await;
        self.idempotent_stop_and_remove().await;
        self.sandbox_stop_and_removal().await;
        self.list_filters().await;
        self.exec().await;
        self.concurrent_pods().await;
    }

    async fn backend(&self) -> Backend {
        self.builder.build().await
    }

    async fn configured_backend(&self) -> Backend {
        let backend = self.backend().await;
        backend
            .update_runtime_config(&self.workloads.pod_cidr)
            .await
            .expect("update_runtime_config with the workloads' pod CIDR");
        backend
    }

    fn cidr(&self) -> Ipv4Cidr {
        self.workloads.pod_cidr.parse().expect("the workloads' pod CIDR parses")
    }

    /// A sandbox configuration for a pod named `name`.
    fn pod(&self, check: &str, name: &str) -> PodSandboxConfig {
        let uid = format!("{check}-{name}-{}-{}", std::process::id(), unique());
        let labels: BTreeMap<String, String> = [
            (LABEL_POD_NAME.to_owned(), name.to_owned()),
            (LABEL_POD_NAMESPACE.to_owned(), "conformance".to_owned()),
            (LABEL_POD_UID.to_owned(), uid.clone()),
            ("conformance/check".to_owned(), check.to_owned()),
        ]
        .into();
        PodSandboxConfig {
            metadata: PodSandboxMetadata {
                name: name.to_owned(),
                namespace: "conformance".to_owned(),
                uid: uid.clone(),
                attempt: 0,
            },
            hostname: name.to_owned(),
            log_directory: self.workloads.log_root.join(format!("conformance_{name}_{uid}")),
            host_network: false,
            labels,
            annotations: BTreeMap::new(),
            runtime_handler: String::new(),
        }
    }

    /// `base` named `name` in the pod, with the agent's labels and log path.
    fn container(base: &ContainerConfig, pod: &PodSandboxConfig, name: &str) -> ContainerConfig {
        let mut config = base.clone();
        config.name = name.to_owned();
        config.attempt = 0;
        config.log_path = PathBuf::from(format!("{name}/0.log"));
        config.labels.insert(LABEL_POD_NAME.to_owned(), pod.metadata.name.clone());
        config.labels.insert(LABEL_POD_NAMESPACE.to_owned(), pod.metadata.namespace.clone());
        config.labels.insert(LABEL_POD_UID.to_owned(), pod.metadata.uid.clone());
        config.labels.insert(LABEL_CONTAINER_NAME.to_owned(), name.to_owned());
        config
    }

    async fn run_pod(&self, backend: &Backend, check: &str, name: &str) -> (SandboxId, PodSandboxConfig) {
        let pod = self.pod(check, name);
        let id = backend
            .run_pod_sandbox(&pod)
            .await
            .unwrap_or_else(|e| panic!("{check}: run_pod_sandbox({name}) failed: {e}"));
        (id, pod)
    }

    async fn create(
        &self,
        backend: &Backend,
        check: &str,
        sandbox: &SandboxId,
        pod: &PodSandboxConfig,
        base: &ContainerConfig,
        name: &str,
    ) -> ContainerId {
        backend
            .pull_image(&base.image)
            .await
            .unwrap_or_else(|e| panic!("{check}: pull_image({:?}) failed: {e}", base.image));
        let config = Self::container(base, pod, name);
        backend
            .create_container(sandbox, &config, pod)
            .await
            .unwrap_or_else(|e| panic!("{check}: create_container({name}) failed: {e}"))
    }

    async fn create_and_start(
        &self,
        backend: &Backend,
        check: &str,
        sandbox: &SandboxId,
        pod: &PodSandboxConfig,
        base: &ContainerConfig,
        name: &str,
    ) -> ContainerId {
        let id = self.create(backend, check, sandbox, pod, base, name).await;
        backend.start_container(&id).await.unwrap_or_else(|e| panic!("{check}: start_container({name}) failed: {e}"));
        id
    }

    async fn status(backend: &Backend, check: &str, id: &ContainerId) -> ContainerStatus {
        backend.container_status(id).await.unwrap_or_else(|e| panic!("{check}: container_status({id}) failed: {e}"))
    }

    async fn wait_state(
        &self,
        backend: &Backend,
        check: &str,
        id: &ContainerId,
        state: ContainerState,
    ) -> ContainerStatus {
        let deadline = Instant::now() + self.workloads.patience;
        loop {
            let status = Self::status(backend, check, id).await;
            if status.state == state {
                return status;
            }
            if Instant::now() >= deadline {
                panic!(
                    "{check}: container {} still {:?} after {:?}, expected {state:?}: {status:?}",
                    status.name, status.state, self.workloads.patience
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn expect_event(
        &self,
        events: &mut broadcast::Receiver<ContainerEvent>,
        check: &str,
        what: &str,
        matches: impl Fn(&ContainerEvent) -> bool,
    ) {
        let deadline = tokio::time::Instant::now() + self.workloads.patience;
        loop {
            match tokio::time::timeout_at(deadline, events.recv()).await {
                Ok(Ok(event)) if matches(&event) => return,
                Ok(Ok(_)) | Ok(Err(broadcast::error::RecvError::Lagged(_))) => continue,
                Ok(Err(broadcast::error::RecvError::Closed)) => {
                    panic!("{check}: the event channel closed before {what}")
                }
                Err(_) => panic!("{check}: no {what} event within {:?}", self.workloads.patience),
            }
        }
    }

    /// `version` names the runtime.
    pub async fn version(&self) {
        let backend = self.backend().await;
        let version = backend.version().await.expect("version: failed");
        assert!(!version.runtime_name.is_empty(), "version: empty runtime name");
        assert!(!version.runtime_version.is_empty(), "version: empty runtime version");
        assert_eq!(
            version.container_runtime_version(),
            format!("{}://{}", version.runtime_name, version.runtime_version),
            "version: containerRuntimeVersion format"
        );
    }

    /// Sandboxes get distinct addresses inside the pod CIDR; stopping one
    /// releases its address.
    pub async fn sandbox_addresses(&self) {
        let check = "sandbox_addresses";
        let backend = self.configured_backend().await;
        let cidr = self.cidr();
        let (a, _) = self.run_pod(&backend, check, "a").await;
        let (b, _) = self.run_pod(&backend, check, "b").await;
        let ip = |status: crate::runtime::PodSandboxStatus| match status.ip {
            Some(IpAddr::V4(ip)) if cidr.contains(ip) => ip,
            other => panic!("{check}: sandbox {} has address {other:?}, not one inside {cidr}", status.metadata.name),
        };
        let status_a = backend.pod_sandbox_status(&a).await.expect("sandbox_addresses: pod_sandbox_status");
        assert_eq!(status_a.state, SandboxState::Ready, "{check}: a new sandbox is Ready");
        assert_eq!(status_a.metadata.name, "a", "{check}: sandbox metadata kept");
        let ip_a = ip(status_a);
        let ip_b = ip(backend.pod_sandbox_status(&b).await.expect("sandbox_addresses: pod_sandbox_status"));
        assert_ne!(ip_a, ip_b, "{check}: two sandboxes share an address");
        let listed = backend.list_pod_sandboxes(&SandboxFilter::default()).await.expect("list_pod_sandboxes");
        assert_eq!(listed.len(), 2, "{check}: list_pod_sandboxes lists both sandboxes: {listed:?}");

        backend.stop_pod_sandbox(&a).await.expect("sandbox_addresses: stop_pod_sandbox");
        let stopped = backend.pod_sandbox_status(&a).await.expect("sandbox_addresses: status of a stopped sandbox");
        assert_eq!(
            (stopped.state, stopped.ip),
            (SandboxState::NotReady, None),
            "{check}: a stopped sandbox is NotReady without address"
        );

        // Released addresses are reused: in a /29 (five usable addresses or
        // fewer, whatever the backend reserves) sandboxes run out, and
        // stopping one makes room for another.
        let small = Ipv4Cidr::new(cidr.network(), 29).expect("a /29");
        backend
            .update_runtime_config(&small.to_string())
            .await
            .expect("sandbox_addresses: update_runtime_config to a /29");
        let mut live = Vec::new();
        let exhausted = loop {
            assert!(live.len() <= 8, "{check}: more than 8 sandboxes in the /29 {small}");
            match backend.run_pod_sandbox(&self.pod(check, &format!("fill{}", live.len()))).await {
                Ok(id) => live.push(id),
                Err(RuntimeError::Network(_)) => break true,
                Err(e) => panic!("{check}: filling {small}: expected Network once exhausted, got {e}"),
            }
        };
        assert!(exhausted && !live.is_empty(), "{check}: {small} gave no address");
        let freed = live.pop().expect("one");
        backend.stop_pod_sandbox(&freed).await.expect("sandbox_addresses: stop_pod_sandbox");
        let again = backend
            .run_pod_sandbox(&self.pod(check, "again"))
            .await
            .unwrap_or_else(|e| panic!("{check}: a stopped sandbox's address was not released: {e}"));
        let again_ip = backend.pod_sandbox_status(&again).await.expect("status").ip;
        assert!(
            matches!(again_ip, Some(IpAddr::V4(ip)) if small.contains(ip)),
            "{check}: reused address {again_ip:?} outside {small}"
        );
        for id in live.iter().chain([&a, &b, &freed, &again]) {
            backend.remove_pod_sandbox(id).await.expect("sandbox_addresses: remove_pod_sandbox");
        }
    }

    /// Without a pod CIDR, sandboxes fail with `Network` unless `host_network`.
    pub async fn sandbox_needs_a_cidr(&self) {
        let check = "sandbox_needs_a_cidr";
        let backend = self.backend().await;
        match backend.run_pod_sandbox(&self.pod(check, "nocidr")).await {
            Err(RuntimeError::Network(_)) => {}
            other => panic!("{check}: a sandbox before any pod CIDR must fail with Network, got {other:?}"),
        }
        let mut host = self.pod(check, "host");
        host.host_network = true;
        let id = backend
            .run_pod_sandbox(&host)
            .await
            .unwrap_or_else(|e| panic!("{check}: a host-network sandbox needs no CIDR: {e}"));
        let status = backend.pod_sandbox_status(&id).await.expect("sandbox_needs_a_cidr: status");
        assert!(status.ip.is_some(), "{check}: a host-network sandbox has the node's address");
        if let Some(host_ip) = self.workloads.host_ip {
            assert_eq!(status.ip, Some(host_ip), "{check}: a host-network sandbox has the node's address");
        }
        backend.remove_pod_sandbox(&id).await.expect("sandbox_needs_a_cidr: remove");
    }

    /// Unknown images fail with `ImageNotFound`; known ones are listed.
    pub async fn images(&self) {
        let check = "images";
        let backend = self.backend().await;
        let unknown = &self.workloads.unknown_image;
        match backend.pull_image(unknown).await {
            Err(RuntimeError::ImageNotFound { image, .. }) => {
                assert_eq!(&image, unknown, "{check}: ImageNotFound names the image")
            }
            other => panic!("{check}: pulling {unknown:?} must fail with ImageNotFound, got {other:?}"),
        }
        assert_eq!(
            backend.image_status(unknown).await.expect("images: image_status"),
            None,
            "{check}: an unknown image has no status"
        );
        let image = &self.workloads.long_running.image;
        let id = backend.pull_image(image).await.unwrap_or_else(|e| panic!("{check}: pulling {image:?} failed: {e}"));
        assert!(!id.is_empty(), "{check}: empty image id");
        assert_eq!(
            backend.pull_image(image).await.expect("images: second pull"),
            id,
            "{check}: pulling again gives the same id"
        );
        let status = backend
            .image_status(image)
            .await
            .expect("images: image_status")
            .unwrap_or_else(|| panic!("{check}: {image:?} pulled but absent"));
        assert_eq!(status.id, id, "{check}: image_status id");
        assert!(!status.repo_tags.is_empty(), "{check}: an image has repo tags");
        let listed = backend.list_images().await.expect("images: list_images");
        assert!(listed.iter().any(|i| i.id == id), "{check}: list_images lacks {id}: {listed:?}");
    }

    /// Created → Running → Exited, with timestamps, exit codes, events.
    pub async fn container_lifecycle(&self) {
        let check = "container_lifecycle";
        let backend = self.configured_backend().await;
        let mut events = backend.events();
        let (sandbox, pod) = self.run_pod(&backend, check, "life").await;
        let exiting = &self.workloads.exiting;
        let image_id = backend.pull_image(&exiting.config.image).await.expect("container_lifecycle: pull");
        let id = self.create(&backend, check, &sandbox, &pod, &exiting.config, "exits").await;
        let created = Self::status(&backend, check, &id).await;
        assert_eq!(created.state, ContainerState::Created, "{check}: state after create");
        assert_eq!(
            (created.started_at, created.finished_at, created.exit_code),
            (None, None, None),
            "{check}: a created container has not run"
        );
        assert_eq!(
            (created.name.as_str(), created.sandbox_id.as_str()),
            ("exits", sandbox.as_str()),
            "{check}: name and sandbox"
        );
        assert_eq!(created.image, exiting.config.image, "{check}: image as given");
        assert_eq!(created.image_ref, image_id, "{check}: image_ref is the pulled id");
        self.expect_event(
            &mut events,
            check,
            "Created",
            |e| matches!(e, ContainerEvent::Created { id: i, .. } if *i == id),
        )
        .await;

        backend.start_container(&id).await.unwrap_or_else(|e| panic!("{check}: start failed: {e}"));
        self.expect_event(
            &mut events,
            check,
            "Started",
            |e| matches!(e, ContainerEvent::Started { id: i, .. } if *i == id),
        )
        .await;
        let code = exiting.exit_code;
        self.expect_event(
            &mut events,
            check,
            "Exited",
            |e| matches!(e, ContainerEvent::Exited { id: i, exit_code, .. } if *i == id && *exit_code == code),
        )
        .await;
        let exited = self.wait_state(&backend, check, &id, ContainerState::Exited).await;
        assert_eq!(exited.exit_code, Some(code), "{check}: exit code");
        let reason = if code == 0 { "Completed" } else { "Error" };
        assert_eq!(exited.reason.as_deref(), Some(reason), "{check}: reason of exit code {code}");
        let (started, finished) = match (exited.started_at, exited.finished_at) {
            (Some(s), Some(f)) => (s, f),
            other => panic!("{check}: an exited container has start and finish times, got {other:?}"),
        };
        assert!(created.created_at <= started && started <= finished, "{check}: created ≤ started ≤ finished");
        assert!(finished <= SystemTime::now(), "{check}: finished in the future");
        assert!(backend.start_container(&id).await.is_err(), "{check}: starting an exited container must fail");

        let long = self.create_and_start(&backend, check, &sandbox, &pod, &self.workloads.long_running, "runs").await;
        let running = Self::status(&backend, check, &long).await;
        assert_eq!(running.state, ContainerState::Running, "{check}: state once start_container returned");
        assert!(running.started_at.is_some() && running.finished_at.is_none(), "{check}: running times");
        assert!(backend.start_container(&long).await.is_err(), "{check}: starting a running container must fail");
        backend.remove_pod_sandbox(&sandbox).await.expect("container_lifecycle: remove_pod_sandbox");
    }

    /// Output lands in the CRI log file at `log_directory/log_path`.
    pub async fn logs(&self) {
        let check = "logs";
        let backend = self.configured_backend().await;
        let (sandbox, pod) = self.run_pod(&backend, check, "logs").await;
        let id = self.create_and_start(&backend, check, &sandbox, &pod, &self.workloads.exiting.config, "writer").await;
        let status = self.wait_state(&backend, check, &id, ContainerState::Exited).await;
        let expected: PathBuf = pod.log_directory.join("writer/0.log");
        assert_eq!(status.log_path, expected, "{check}: log path is log_directory/log_path");
        let text =
            std::fs::read(&expected).unwrap_or_else(|e| panic!("{check}: cannot read {}: {e}", expected.display()));
        let entries: Vec<_> = text
            .split_inclusive(|&b| b == b'\n')
            .map(|line| {
                parse_entry(line).unwrap_or_else(|e| panic!("{check}: {e}: {:?}", String::from_utf8_lossy(line)))
            })
            .collect();
        let line = self.workloads.exiting.line.as_bytes();
        assert!(
            entries.iter().any(|e| e.stream == Stream::Stdout && e.complete && e.content == line),
            "{check}: no complete stdout entry {:?} in {}",
            self.workloads.exiting.line,
            String::from_utf8_lossy(&text)
        );
        backend.remove_pod_sandbox(&sandbox).await.expect("logs: remove_pod_sandbox");
        assert!(expected.exists(), "{check}: removing the pod must leave its logs (the agent removes them)");
    }

    /// Stop ends a container on SIGTERM, and escalates to SIGKILL after the
    /// timeout.
    pub async fn stop_escalates(&self) {
        let check = "stop_escalates";
        let backend = self.configured_backend().await;
        let (sandbox, pod) = self.run_pod(&backend, check, "stop").await;
        let polite =
            self.create_and_start(&backend, check, &sandbox, &pod, &self.workloads.long_running, "polite").await;
        let began = Instant::now();
        backend
            .stop_container(&polite, self.workloads.patience * 3)
            .await
            .unwrap_or_else(|e| panic!("{check}: stop failed: {e}"));
        assert!(
            began.elapsed() < self.workloads.patience,
            "{check}: a container exiting on SIGTERM took {:?} to stop",
            began.elapsed()
        );
        let stopped = Self::status(&backend, check, &polite).await;
        assert_eq!(stopped.state, ContainerState::Exited, "{check}: state once stop_container returned");
        assert!(
            stopped.exit_code.is_some() && stopped.finished_at.is_some(),
            "{check}: a stopped container has an exit code"
        );

        if let Some(stubborn) = &self.workloads.ignores_sigterm {
            let id = self.create_and_start(&backend, check, &sandbox, &pod, &stubborn.config, "stubborn").await;
            let log = pod.log_directory.join("stubborn/0.log");
            let deadline = Instant::now() + self.workloads.patience;
            while !std::fs::read_to_string(&log).unwrap_or_default().contains(&stubborn.ready_line) {
                assert!(
                    Instant::now() < deadline,
                    "{check}: no {:?} in {} within {:?}",
                    stubborn.ready_line,
                    log.display(),
                    self.workloads.patience
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let grace = Duration::from_millis(800);
            let began = Instant::now();
            backend.stop_container(&id, grace).await.unwrap_or_else(|e| panic!("{check}: stop failed: {e}"));
            let took = began.elapsed();
            assert!(
                took >= grace.mul_f32(0.9),
                "{check}: a container ignoring SIGTERM stopped after {took:?}, before the {grace:?} timeout"
            );
            let status = Self::status(&backend, check, &id).await;
            assert_eq!(
                (status.state, status.exit_code),
                (ContainerState::Exited, Some(137)),
                "{check}: SIGKILL escalation gives 137"
            );
        }
        let quick = self.create_and_start(&backend, check, &sandbox, &pod, &self.workloads.long_running, "quick").await;
        backend
            .stop_container(&quick, Duration::ZERO)
            .await
            .unwrap_or_else(|e| panic!("{check}: stop with no timeout failed: {e}"));
        let status = Self::status(&backend, check, &quick).await;
        assert_eq!(
            (status.state, status.exit_code),
            (ContainerState::Exited, Some(137)),
            "{check}: a zero timeout kills at once"
        );
        backend.remove_pod_sandbox(&sandbox).await.expect("stop_escalates: remove_pod_sandbox");
    }

    /// Stop and remove succeed again on what is already stopped or removed.
    pub async fn idempotent_stop_and_remove(&self) {
        let check = "idempotent_stop_and_remove";
        let backend = self.configured_backend().await;
        let mut events = backend.events();
        let (sandbox, pod) = self.run_pod(&backend, check, "twice").await;
        let id = self.create_and_start(&backend, check, &sandbox, &pod, &self.workloads.long_running, "c").await;
        for round in 0..2 {
            backend
                .stop_container(&id, Duration::from_secs(10))
                .await
                .unwrap_or_else(|e| panic!("{check}: stop #{round} failed: {e}"));
        }
        for round in 0..2 {
            backend.remove_container(&id).await.unwrap_or_else(|e| panic!("{check}: remove #{round} failed: {e}"));
        }
        self.expect_event(
            &mut events,
            check,
            "Removed",
            |e| matches!(e, ContainerEvent::Removed { id: i, .. } if *i == id),
        )
        .await;
        match backend.container_status(&id).await {
            Err(RuntimeError::NotFound { .. }) => {}
            other => panic!("{check}: status of a removed container must be NotFound, got {other:?}"),
        }
        // A created, never started container stops and goes too.
        let created = self.create(&backend, check, &sandbox, &pod, &self.workloads.long_running, "idle").await;
        backend
            .stop_container(&created, Duration::from_secs(1))
            .await
            .unwrap_or_else(|e| panic!("{check}: stop of a created container: {e}"));
        backend
            .remove_container(&created)
            .await
            .unwrap_or_else(|e| panic!("{check}: remove of a created container: {e}"));
        for round in 0..2 {
            backend
                .stop_pod_sandbox(&sandbox)
                .await
                .unwrap_or_else(|e| panic!("{check}: stop_pod_sandbox #{round}: {e}"));
        }
        for round in 0..2 {
            backend
                .remove_pod_sandbox(&sandbox)
                .await
                .unwrap_or_else(|e| panic!("{check}: remove_pod_sandbox #{round}: {e}"));
        }
        match backend.pod_sandbox_status(&sandbox).await {
            Err(RuntimeError::NotFound { .. }) => {}
            other => panic!("{check}: status of a removed sandbox must be NotFound, got {other:?}"),
        }
    }

    /// Stopping a sandbox stops its containers; removing it removes them.
    pub async fn sandbox_stop_and_removal(&self) {
        let check = "sandbox_stop_and_removal";
        let backend = self.configured_backend().await;
        let (sandbox, pod) = self.run_pod(&backend, check, "whole").await;
        let running =
            self.create_and_start(&backend, check, &sandbox, &pod, &self.workloads.long_running, "running").await;
        let created = self.create(&backend, check, &sandbox, &pod, &self.workloads.long_running, "created").await;
        backend.stop_pod_sandbox(&sandbox).await.unwrap_or_else(|e| panic!("{check}: stop_pod_sandbox: {e}"));
        let status = Self::status(&backend, check, &running).await;
        assert_eq!(status.state, ContainerState::Exited, "{check}: stop_pod_sandbox stops running containers");
        let refused = backend
            .create_container(&sandbox, &Self::container(&self.workloads.long_running, &pod, "late"), &pod)
            .await;
        assert!(refused.is_err(), "{check}: creating a container in a stopped sandbox must fail");
        assert!(
            backend.start_container(&created).await.is_err(),
            "{check}: starting a container of a stopped sandbox must fail"
        );

        backend.remove_pod_sandbox(&sandbox).await.unwrap_or_else(|e| panic!("{check}: remove_pod_sandbox: {e}"));
        let left = backend
            .list_containers(&ContainerFilter { sandbox_id: Some(sandbox.clone()), ..Default::default() })
            .await
            .expect("sandbox_stop_and_removal: list_containers");
        assert!(left.is_empty(), "{check}: remove_pod_sandbox leaves containers: {left:?}");
        for id in [&running, &created] {
            assert!(
                matches!(backend.container_status(id).await, Err(RuntimeError::NotFound { .. })),
                "{check}: container {id} outlived its sandbox"
            );
        }

        // Removing a ready sandbox stops and removes its running containers.
        let (ready, pod) = self.run_pod(&backend, check, "ready").await;
        let inside = self.create_and_start(&backend, check, &ready, &pod, &self.workloads.long_running, "inside").await;
        backend.remove_pod_sandbox(&ready).await.unwrap_or_else(|e| panic!("{check}: remove of a ready sandbox: {e}"));
        assert!(
            matches!(backend.container_status(&inside).await, Err(RuntimeError::NotFound { .. })),
            "{check}: running container survived"
        );
        let sandboxes = backend.list_pod_sandboxes(&SandboxFilter::default()).await.expect("list_pod_sandboxes");
        assert!(sandboxes.is_empty(), "{check}: removed sandboxes still listed: {sandboxes:?}");
    }

    /// List filters: id, sandbox, state, labels.
    pub async fn list_filters(&self) {
        let check = "list_filters";
        let backend = self.configured_backend().await;
        let (one, pod_one) = self.run_pod(&backend, check, "one").await;
        let (two, pod_two) = self.run_pod(&backend, check, "two").await;
        let running =
            self.create_and_start(&backend, check, &one, &pod_one, &self.workloads.long_running, "running").await;
        let exited =
            self.create_and_start(&backend, check, &one, &pod_one, &self.workloads.exiting.config, "exited").await;
        let other = self.create(&backend, check, &two, &pod_two, &self.workloads.long_running, "other").await;
        self.wait_state(&backend, check, &exited, ContainerState::Exited).await;

        let ids = |list: Vec<ContainerStatus>| {
            let mut ids: Vec<ContainerId> = list.into_iter().map(|s| s.id).collect();
            ids.sort();
            ids
        };
        let sorted = |mut v: Vec<ContainerId>| {
            v.sort();
            v
        };
        let list = |filter: ContainerFilter| {
            let backend = &backend;
            async move { ids(backend.list_containers(&filter).await.expect("list_filters: list_containers")) }
        };
        assert_eq!(
            list(ContainerFilter::default()).await,
            sorted(vec![running.clone(), exited.clone(), other.clone()]),
            "{check}: no filter"
        );
        assert_eq!(
            list(ContainerFilter { sandbox_id: Some(one.clone()), ..Default::default() }).await,
            sorted(vec![running.clone(), exited.clone()]),
            "{check}: by sandbox"
        );
        assert_eq!(
            list(ContainerFilter { id: Some(other.clone()), ..Default::default() }).await,
            vec![other.clone()],
            "{check}: by id"
        );
        assert_eq!(
            list(ContainerFilter { state: Some(ContainerState::Running), ..Default::default() }).await,
            vec![running.clone()],
            "{check}: Running"
        );
        assert_eq!(
            list(ContainerFilter { state: Some(ContainerState::Exited), ..Default::default() }).await,
            vec![exited.clone()],
            "{check}: Exited"
        );
        assert_eq!(
            list(ContainerFilter { state: Some(ContainerState::Created), ..Default::default() }).await,
            vec![other.clone()],
            "{check}: Created"
        );
        let by_name = |name: &str| ContainerFilter {
            labels: [(LABEL_CONTAINER_NAME.to_owned(), name.to_owned())].into(),
            ..Default::default()
        };
        assert_eq!(list(by_name("exited")).await, vec![exited.clone()], "{check}: by label");
        let mut both = by_name("running");
        both.sandbox_id = Some(two.clone());
        assert!(list(both).await.is_empty(), "{check}: every filter field must match");

        let sandbox_ids = |filter: SandboxFilter| {
            let backend = &backend;
            async move {
                let mut ids: Vec<SandboxId> = backend
                    .list_pod_sandboxes(&filter)
                    .await
                    .expect("list_pod_sandboxes")
                    .into_iter()
                    .map(|s| s.id)
                    .collect();
                ids.sort();
                ids
            }
        };
        let pod_label = |pod: &PodSandboxConfig| SandboxFilter {
            labels: [(LABEL_POD_UID.to_owned(), pod.metadata.uid.clone())].into(),
            ..Default::default()
        };
        assert_eq!(sandbox_ids(pod_label(&pod_two)).await, vec![two.clone()], "{check}: sandboxes by label");
        assert_eq!(
            sandbox_ids(SandboxFilter { id: Some(one.clone()), ..Default::default() }).await,
            vec![one.clone()],
            "{check}: sandbox by id"
        );
        backend.stop_pod_sandbox(&two).await.expect("list_filters: stop_pod_sandbox");
        assert_eq!(
            sandbox_ids(SandboxFilter { state: Some(SandboxState::NotReady), ..Default::default() }).await,
            vec![two.clone()],
            "{check}: sandboxes by state"
        );
        assert_eq!(
            sandbox_ids(SandboxFilter { state: Some(SandboxState::Ready), ..Default::default() }).await,
            vec![one.clone()],
            "{check}: sandboxes by state"
        );
        for id in [&one, &two] {
            backend.remove_pod_sandbox(id).await.expect("list_filters: remove_pod_sandbox");
        }
    }

    /// `exec_sync` runs a command in a running container, or the backend
    /// says `Unsupported`.
    pub async fn exec(&self) {
        let check = "exec";
        let backend = self.configured_backend().await;
        let (sandbox, pod) = self.run_pod(&backend, check, "exec").await;
        let id = self.create_and_start(&backend, check, &sandbox, &pod, &self.workloads.long_running, "target").await;
        match &self.workloads.exec {
            None => match backend.exec_sync(&id, &["true".to_owned()], self.workloads.patience).await {
                Err(RuntimeError::Unsupported(_)) => {}
                other => panic!("{check}: a backend without exec must answer Unsupported, got {other:?}"),
            },
            Some(workload) => {
                let result = backend
                    .exec_sync(&id, &workload.command, self.workloads.patience)
                    .await
                    .unwrap_or_else(|e| panic!("{check}: exec_sync({:?}) failed: {e}", workload.command));
                assert_eq!(
                    result.exit_code,
                    0,
                    "{check}: exit code of {:?} (stderr {:?})",
                    workload.command,
                    String::from_utf8_lossy(&result.stderr)
                );
                let stdout = String::from_utf8_lossy(&result.stdout);
                assert!(
                    stdout.contains(&workload.stdout_contains),
                    "{check}: stdout {stdout:?} lacks {:?}",
                    workload.stdout_contains
                );
                // The same command with its streams attached, where the
                // backend can attach them.
                let request = ExecRequest { command: workload.command.clone(), tty: false, stdin: false };
                match backend.exec(&id, request).await {
                    Err(RuntimeError::Unsupported(_)) => {}
                    Err(e) => panic!("{check}: exec({:?}) failed: {e}", workload.command),
                    Ok(session) => {
                        use tokio::io::AsyncReadExt as _;
                        let mut stdout = session.stdout;
                        let mut out = Vec::new();
                        let read = stdout.read_to_end(&mut out);
                        let (read, code) =
                            tokio::time::timeout(self.workloads.patience, async { tokio::join!(read, session.exit) })
                                .await
                                .unwrap_or_else(|_| panic!("{check}: the attached exec did not end"));
                        read.expect("exec: reading stdout");
                        assert_eq!(code.expect("exec: exit"), 0, "{check}: exit code of the attached exec");
                        let out = String::from_utf8_lossy(&out);
                        assert!(
                            out.contains(&workload.stdout_contains),
                            "{check}: attached stdout {out:?} lacks {:?}",
                            workload.stdout_contains
                        );
                    }
                }
                backend.stop_container(&id, Duration::ZERO).await.expect("exec: stop");
                assert!(
                    backend.exec_sync(&id, &workload.command, self.workloads.patience).await.is_err(),
                    "{check}: exec in an exited container must fail"
                );
            }
        }
        backend.remove_pod_sandbox(&sandbox).await.expect("exec: remove_pod_sandbox");
    }

    /// Pods run side by side: four at once, each with its own address,
    /// exit code and log.
    pub async fn concurrent_pods(&self) {
        let check = "concurrent_pods";
        let backend = self.configured_backend().await;
        let pods = (0..4).map(|n| {
            let backend = &backend;
            async move {
                let (sandbox, pod) = self.run_pod(backend, check, &format!("pod{n}")).await;
                let id =
                    self.create_and_start(backend, check, &sandbox, &pod, &self.workloads.exiting.config, "main").await;
                let status = self.wait_state(backend, check, &id, ContainerState::Exited).await;
                assert_eq!(status.exit_code, Some(self.workloads.exiting.exit_code), "{check}: pod{n} exit code");
                let log = std::fs::read_to_string(pod.log_directory.join("main/0.log")).unwrap_or_default();
                assert!(log.contains(&self.workloads.exiting.line), "{check}: pod{n} log lacks its line: {log:?}");
                let ip = backend.pod_sandbox_status(&sandbox).await.expect("concurrent_pods: status").ip;
                (sandbox, ip)
            }
        });
        let results = futures::future::join_all(pods).await;
        let mut ips: Vec<_> = results
            .iter()
            .map(|(_, ip)| ip.unwrap_or_else(|| panic!("{check}: a ready sandbox without address")))
            .collect();
        ips.sort();
        ips.dedup();
        assert_eq!(ips.len(), 4, "{check}: concurrent sandboxes share addresses");
        for (sandbox, _) in &results {
            backend.remove_pod_sandbox(sandbox).await.expect("concurrent_pods: remove_pod_sandbox");
        }
    }
}
