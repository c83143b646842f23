//! A container runtime of your own: `MemRuntime` keeps sandboxes and
//! containers as in-memory state machines (no processes), gives pods
//! addresses from the node's pod CIDR and writes each container's output
//! to its CRI log file. It passes the runtime conformance suite, and a node
//! agent runs pods on it in a control plane.
//!
//! Its images are two programs: `demo/server` writes `serving` and runs
//! until stopped; `demo/hello` writes its arguments and exits with the code
//! in `$EXIT_CODE`.
//!
//! ```text
//! cargo run -p orchestra-examples --example runtime_backend
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use orchestra::control_plane::NodeSlot;
use orchestra::core::api::net::Ipv4Cidr;
use orchestra::node::network::Ipam;
use orchestra::node::runtime::cri_log::{self, Stream};
use orchestra::node::runtime::{
    ContainerConfig, ContainerEvent, ContainerFilter, ContainerId, ContainerState, ContainerStatus, ExecResult, Image,
    PodSandboxConfig, PodSandboxStatus, Result, RuntimeError, RuntimeVersion, SandboxFilter, SandboxId, SandboxState,
};
use orchestra::node::testing::{ExitingWorkload, RuntimeBuilder, Suite, Workloads};
use orchestra::prelude::*;
use tokio::sync::broadcast;

/// The images the runtime has.
pub const IMAGES: [&str; 2] = ["demo/server", "demo/hello"];

/// What a container does once started, decided by its image.
#[derive(Clone)]
enum Program {
    /// `demo/server`: writes `serving`, runs until stopped.
    Serve,
    /// `demo/hello`: writes `line`, exits with `code`.
    Exit { line: String, code: i32 },
}

impl Program {
    fn of(config: &ContainerConfig) -> Option<Program> {
        let code = config.envs.iter().rev().find(|(k, _)| k == "EXIT_CODE").and_then(|(_, v)| v.parse().ok());
        match config.image.as_str() {
            "demo/server" => Some(Program::Serve),
            "demo/hello" => Some(Program::Exit { line: config.args.join(" "), code: code.unwrap_or(0) }),
            _ => None,
        }
    }
}

struct Sandbox {
    status: PodSandboxStatus,
    log_directory: PathBuf,
}

struct Container {
    status: ContainerStatus,
    program: Program,
}

#[derive(Default)]
struct State {
    sandboxes: BTreeMap<SandboxId, Sandbox>,
    containers: BTreeMap<ContainerId, Container>,
    pulled: BTreeSet<String>,
    next_id: u64,
}

/// Sandboxes and containers as in-memory state machines.
pub struct MemRuntime {
    host_ip: IpAddr,
    ipam: Ipam,
    state: Mutex<State>,
    events: broadcast::Sender<ContainerEvent>,
}

fn not_found(kind: &'static str, id: &str) -> RuntimeError {
    RuntimeError::NotFound { kind, id: id.to_owned() }
}

/// Appends `line` to a container's CRI log file.
fn write_log(path: &Path, line: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut entry = Vec::new();
    cri_log::write_entry(&mut entry, SystemTime::now(), Stream::Stdout, true, line.as_bytes());
    std::fs::create_dir_all(path.parent().unwrap_or(path))?;
    std::fs::OpenOptions::new().create(true).append(true).open(path)?.write_all(&entry)
}

impl MemRuntime {
    /// A runtime whose host-network pods get `host_ip`.
    pub fn new(host_ip: IpAddr) -> MemRuntime {
        MemRuntime { host_ip, ipam: Ipam::new(), state: Mutex::default(), events: broadcast::channel(1024).0 }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Moves a container to Exited with `code`.
    fn exit(&self, c: &mut ContainerStatus, code: i32) {
        (c.state, c.exit_code, c.finished_at) = (ContainerState::Exited, Some(code), Some(SystemTime::now()));
        c.reason = Some(if code == 0 { "Completed" } else { "Error" }.into());
        let (id, sandbox_id) = (c.id.clone(), c.sandbox_id.clone());
        let _ = self.events.send(ContainerEvent::Exited { id, sandbox_id, exit_code: code });
    }

    fn send(&self, event: fn(ContainerId, SandboxId) -> ContainerEvent, c: &ContainerStatus) {
        let _ = self.events.send(event(c.id.clone(), c.sandbox_id.clone()));
    }
}

#[async_trait::async_trait]
impl RuntimeBackend for MemRuntime {
    async fn version(&self) -> Result<RuntimeVersion> {
        Ok(RuntimeVersion { runtime_name: "example-mem".into(), runtime_version: "0.1.0".into() })
    }

    async fn update_runtime_config(&self, pod_cidr: &str) -> Result<()> {
        let cidr: Ipv4Cidr = pod_cidr.parse().map_err(|_| RuntimeError::InvalidArgument(pod_cidr.into()))?;
        self.ipam.set_range(cidr);
        Ok(())
    }

    async fn run_pod_sandbox(&self, config: &PodSandboxConfig) -> Result<SandboxId> {
        let ip = if config.host_network {
            self.host_ip
        } else {
            self.ipam.allocate().map_err(|e| RuntimeError::Network(e.to_string()))?
        };
        std::fs::create_dir_all(&config.log_directory)?;
        let mut state = self.state();
        state.next_id += 1;
        let id = format!("sandbox-{}", state.next_id);
        let (metadata, labels, created_at) = (config.metadata.clone(), config.labels.clone(), SystemTime::now());
        let status =
            PodSandboxStatus { id: id.clone(), metadata, state: SandboxState::Ready, created_at, ip: Some(ip), labels };
        state.sandboxes.insert(id.clone(), Sandbox { status, log_directory: config.log_directory.clone() });
        Ok(id)
    }

    async fn stop_pod_sandbox(&self, id: &SandboxId) -> Result<()> {
        let mut state = self.state();
        let State { sandboxes, containers, .. } = &mut *state;
        let Some(sandbox) = sandboxes.get_mut(id) else { return Ok(()) };
        sandbox.status.state = SandboxState::NotReady;
        if let Some(ip) = sandbox.status.ip.take().filter(|ip| *ip != self.host_ip) {
            self.ipam.release(ip);
        }
        let running = containers.values_mut().filter(|c| &c.status.sandbox_id == id);
        for c in running.filter(|c| c.status.state == ContainerState::Running) {
            self.exit(&mut c.status, 137);
        }
        Ok(())
    }

    async fn remove_pod_sandbox(&self, id: &SandboxId) -> Result<()> {
        self.stop_pod_sandbox(id).await?;
        let mut state = self.state();
        state.sandboxes.remove(id);
        let containers = std::mem::take(&mut state.containers);
        let (gone, kept): (BTreeMap<_, _>, _) = containers.into_iter().partition(|(_, c)| &c.status.sandbox_id == id);
        state.containers = kept;
        gone.values().for_each(|c| self.send(|id, sandbox_id| ContainerEvent::Removed { id, sandbox_id }, &c.status));
        Ok(())
    }

    async fn pod_sandbox_status(&self, id: &SandboxId) -> Result<PodSandboxStatus> {
        self.state().sandboxes.get(id).map(|s| s.status.clone()).ok_or_else(|| not_found("sandbox", id))
    }

    async fn list_pod_sandboxes(&self, filter: &SandboxFilter) -> Result<Vec<PodSandboxStatus>> {
        let state = self.state();
        let wanted = state.sandboxes.values().map(|s| &s.status).filter(|s| filter.matches(s));
        Ok(wanted.cloned().collect())
    }

    async fn create_container(
        &self,
        sandbox: &SandboxId,
        config: &ContainerConfig,
        _: &PodSandboxConfig,
    ) -> Result<ContainerId> {
        let mut state = self.state();
        let log_path = match state.sandboxes.get(sandbox).ok_or_else(|| not_found("sandbox", sandbox))? {
            s if s.status.state == SandboxState::Ready => s.log_directory.join(&config.log_path),
            _ => return Err(RuntimeError::InvalidState(format!("sandbox {sandbox} is stopped"))),
        };
        let program = Program::of(config).filter(|_| state.pulled.contains(&config.image));
        let program =
            program.ok_or_else(|| RuntimeError::CreateFailed(format!("image {} is not pulled", config.image)))?;
        state.next_id += 1;
        let id = format!("container-{}", state.next_id);
        let status = ContainerStatus::created(id, sandbox.clone(), config, config.image.clone(), log_path);
        self.send(|id, sandbox_id| ContainerEvent::Created { id, sandbox_id }, &status);
        let id = status.id.clone();
        state.containers.insert(id.clone(), Container { status, program });
        Ok(id)
    }

    async fn start_container(&self, id: &ContainerId) -> Result<()> {
        let mut state = self.state();
        let State { sandboxes, containers, .. } = &mut *state;
        let c = containers.get_mut(id).ok_or_else(|| not_found("container", id))?;
        let ready = sandboxes.get(&c.status.sandbox_id).is_some_and(|s| s.status.state == SandboxState::Ready);
        if c.status.state != ContainerState::Created || !ready {
            return Err(RuntimeError::InvalidState(format!("container {id} is {:?}", c.status.state)));
        }
        (c.status.state, c.status.started_at) = (ContainerState::Running, Some(SystemTime::now()));
        self.send(|id, sandbox_id| ContainerEvent::Started { id, sandbox_id }, &c.status);
        match c.program.clone() {
            Program::Serve => write_log(&c.status.log_path, "serving")?,
            Program::Exit { line, code } => {
                write_log(&c.status.log_path, &line)?;
                self.exit(&mut c.status, code);
            }
        }
        Ok(())
    }

    async fn stop_container(&self, id: &ContainerId, timeout: Duration) -> Result<()> {
        let mut state = self.state();
        let c = state.containers.get_mut(id).ok_or_else(|| not_found("container", id))?;
        // A server exits on SIGTERM (143), unless there is no time for it: SIGKILL (137).
        if c.status.state == ContainerState::Running {
            self.exit(&mut c.status, if timeout.is_zero() { 137 } else { 143 });
        }
        Ok(())
    }

    async fn remove_container(&self, id: &ContainerId) -> Result<()> {
        let mut state = self.state();
        match state.containers.get(id).map(|c| c.status.state) {
            Some(ContainerState::Running) => Err(RuntimeError::InvalidState(format!("container {id} is running"))),
            Some(_) => {
                let c = state.containers.remove(id).expect("present");
                self.send(|id, sandbox_id| ContainerEvent::Removed { id, sandbox_id }, &c.status);
                Ok(())
            }
            None => Ok(()),
        }
    }

    async fn container_status(&self, id: &ContainerId) -> Result<ContainerStatus> {
        self.state().containers.get(id).map(|c| c.status.clone()).ok_or_else(|| not_found("container", id))
    }

    async fn list_containers(&self, filter: &ContainerFilter) -> Result<Vec<ContainerStatus>> {
        let state = self.state();
        let wanted = state.containers.values().map(|c| &c.status).filter(|c| filter.matches(c));
        Ok(wanted.cloned().collect())
    }

    async fn exec_sync(&self, _: &ContainerId, _: &[String], _: Duration) -> Result<ExecResult> {
        Err(RuntimeError::Unsupported("containers of memory run no commands".into()))
    }

    async fn pull_image(&self, image: &str) -> Result<String> {
        if !IMAGES.contains(&image) {
            let message = format!("the images are {IMAGES:?}");
            return Err(RuntimeError::ImageNotFound { image: image.into(), message });
        }
        self.state().pulled.insert(image.into());
        Ok(image.into())
    }

    async fn image_status(&self, image: &str) -> Result<Option<Image>> {
        let pulled = self.state().pulled.contains(image);
        Ok(pulled.then(|| Image { id: image.into(), repo_tags: vec![image.into()], size_bytes: 0 }))
    }

    async fn list_images(&self) -> Result<Vec<Image>> {
        let pulled = self.state().pulled.clone();
        Ok(pulled.into_iter().map(|i| Image { id: i.clone(), repo_tags: vec![i], size_bytes: 0 }).collect())
    }

    fn events(&self) -> broadcast::Receiver<ContainerEvent> {
        self.events.subscribe()
    }
}

/// Fresh runtimes for the conformance suite, their logs under `dir`.
pub struct MemRuntimeBuilder(pub PathBuf);

#[async_trait::async_trait]
impl RuntimeBuilder for MemRuntimeBuilder {
    async fn build(&self) -> Arc<dyn RuntimeBackend> {
        Arc::new(MemRuntime::new("127.0.0.1".parse().expect("an address")))
    }

    fn workloads(&self) -> Workloads {
        let server = ContainerConfig { image: "demo/server".into(), ..Default::default() };
        let hello = ContainerConfig {
            image: "demo/hello".into(),
            args: vec!["hello".into()],
            envs: vec![("EXIT_CODE".into(), "3".into())],
            ..Default::default()
        };
        let exiting = ExitingWorkload { config: hello, line: "hello".into(), exit_code: 3 };
        Workloads::new(server, exiting, "demo/missing", &self.0)
    }
}

/// Runs a `demo/server` pod on a node of `MemRuntime`s in a control plane;
/// returns its phase and address once Running.
pub async fn run() -> Result<(String, String), Box<dyn std::error::Error>> {
    let runtime = NodeRuntime::custom(|slot: NodeSlot| async move { Ok(MemRuntime::new(slot.ip)) });
    let cluster = ControlPlane::builder().nodes(1, runtime).start().await?;
    let pods: Api<Pod> = Api::default_namespaced(cluster.client());
    let pod = serde_json::json!({"metadata": {"name": "web"}, "spec": {"containers": [{"name": "web", "image": "demo/server"}]}});
    pods.create(&PostParams::default(), &serde_json::from_value(pod)?).await?;
    let mut seen = (String::new(), String::new());
    for _ in 0..300 {
        let status = pods.get("web").await?.status.unwrap_or_default();
        seen = (status.phase.unwrap_or_default(), status.pod_ip.unwrap_or_default());
        if seen.0 == "Running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cluster.shutdown().await?;
    Ok(seen)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let logs = tempfile::tempdir()?;
    Suite::test_all(&MemRuntimeBuilder(logs.path().to_owned())).await;
    println!("MemRuntime passes the runtime conformance suite");
    let (phase, ip) = run().await?;
    println!("pod web on a MemRuntime node: {phase}, at {ip}");
    if phase == "Running" { Ok(()) } else { Err("the pod did not run".into()) }
}
