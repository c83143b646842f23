//! [`EmbeddedRuntime`]: containers that are components of the agent's own
//! process — how an all-in-one assembly lets its node agent run the control
//! plane as static pods (kubeadm runs them as containers; here the scheduler
//! and the controller manager are Tokio tasks of the same binary).
//!
//! An image is a registered [`Component`]: starting a container calls it with
//! a [`ComponentContext`] (the container's environment, a stop signal, a log
//! writer in the CRI format); the container runs while the returned future
//! runs, and its output is the future's exit code. Stopping a container
//! signals the stop and, after the grace period, drops the future (exit code
//! 137, as a SIGKILL would give). Sandboxes share the node's address (host
//! network). `exec` is not supported: there is no separate process.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio::sync::{broadcast, watch};

use super::cri_log::{self, Stream};
use super::{
    ContainerConfig, ContainerEvent, ContainerFilter, ContainerId, ContainerState, ContainerStatus, ExecResult, Image,
    PodSandboxConfig, PodSandboxStatus, Result, RuntimeBackend, RuntimeError, RuntimeVersion, SandboxFilter, SandboxId,
    SandboxState,
};

/// What a component gets when its container starts.
pub struct ComponentContext {
    /// The container's environment, as resolved by the agent.
    pub envs: Vec<(String, String)>,
    /// The container's arguments (command then args, as in the pod spec).
    pub args: Vec<String>,
    /// Becomes `true` when the container is asked to stop.
    pub stop: watch::Receiver<bool>,
    /// Writes lines to the container's log.
    pub log: ComponentLog,
}

impl ComponentContext {
    /// Completes when the container is asked to stop.
    pub async fn stopped(&mut self) {
        let _ = self.stop.wait_for(|stop| *stop).await;
    }
}

/// A container's log file, written in the CRI format.
#[derive(Clone)]
pub struct ComponentLog {
    path: Arc<PathBuf>,
}

impl ComponentLog {
    /// Appends one line to stdout.
    pub fn line(&self, text: impl AsRef<str>) {
        let mut out = Vec::new();
        cri_log::write_output(&mut out, SystemTime::now(), Stream::Stdout, format!("{}\n", text.as_ref()).as_bytes());
        use std::io::Write as _;
        let written =
            std::fs::OpenOptions::new().create(true).append(true).open(&*self.path).and_then(|mut f| f.write_all(&out));
        if let Err(error) = written {
            tracing::warn!(path = %self.path.display(), %error, "cannot write a component's log");
        }
    }
}

/// A component: called once per container start; the container runs until
/// the future completes with the exit code.
pub type Component = Arc<dyn Fn(ComponentContext) -> BoxFuture<'static, i32> + Send + Sync>;

struct Sandbox {
    status: PodSandboxStatus,
    log_directory: PathBuf,
}

struct Container {
    status: ContainerStatus,
    config: ContainerConfig,
    stop: Option<watch::Sender<bool>>,
    done: watch::Receiver<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

#[derive(Default)]
struct State {
    sandboxes: HashMap<SandboxId, Sandbox>,
    containers: HashMap<ContainerId, Container>,
    next_id: u64,
}

/// A runtime whose images are in-process [`Component`]s.
pub struct EmbeddedRuntime {
    components: HashMap<String, Component>,
    node_ip: IpAddr,
    state: Arc<Mutex<State>>,
    events: broadcast::Sender<ContainerEvent>,
}

/// The reference an image is registered and asked for under: without a
/// registry host, `:latest` implied.
fn normalise(image: &str) -> String {
    let image = image.strip_prefix("docker.io/").unwrap_or(image);
    let last = image.rsplit('/').next().unwrap_or(image);
    if last.contains(':') || last.contains('@') { image.to_owned() } else { format!("{image}:latest") }
}

impl EmbeddedRuntime {
    /// A runtime with no components, whose sandboxes take `node_ip`.
    pub fn new(node_ip: IpAddr) -> Self {
        let (events, _) = broadcast::channel(256);
        Self { components: HashMap::new(), node_ip, state: Arc::default(), events }
    }

    /// Registers `component` as image `image` (e.g. `orchestra/kube-scheduler`).
    pub fn component<F, Fut>(mut self, image: &str, component: F) -> Self
    where
        F: Fn(ComponentContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = i32> + Send + 'static,
    {
        self.components.insert(normalise(image), Arc::new(move |ctx| Box::pin(component(ctx))));
        self
    }

    fn image_of(&self, image: &str) -> Result<(&String, &Component)> {
        self.components.get_key_value(&normalise(image)).ok_or_else(|| RuntimeError::ImageNotFound {
            image: image.to_owned(),
            message: "not an embedded component of this node".into(),
        })
    }

    fn image_id(name: &str) -> String {
        format!("embedded://{name}")
    }

    fn finish(state: &Mutex<State>, events: &broadcast::Sender<ContainerEvent>, id: &str, exit_code: i32) {
        let mut state = state.lock();
        let Some(container) = state.containers.get_mut(id) else { return };
        if container.status.state == ContainerState::Exited {
            return;
        }
        container.status.state = ContainerState::Exited;
        container.status.finished_at = Some(SystemTime::now());
        container.status.exit_code = Some(exit_code);
        container.status.reason = Some(if exit_code == 0 { "Completed" } else { "Error" }.into());
        container.stop = None;
        let _ = events.send(ContainerEvent::Exited {
            id: id.to_owned(),
            sandbox_id: container.status.sandbox_id.clone(),
            exit_code,
        });
    }
}

#[async_trait]
impl RuntimeBackend for EmbeddedRuntime {
    async fn version(&self) -> Result<RuntimeVersion> {
        Ok(RuntimeVersion {
            runtime_name: "orchestra-embedded".into(),
            runtime_version: env!("CARGO_PKG_VERSION").into(),
        })
    }

    async fn update_runtime_config(&self, _pod_cidr: &str) -> Result<()> {
        Ok(())
    }

    async fn run_pod_sandbox(&self, config: &PodSandboxConfig) -> Result<SandboxId> {
        std::fs::create_dir_all(&config.log_directory)?;
        let mut state = self.state.lock();
        state.next_id += 1;
        let id = format!("embedded-sandbox-{}", state.next_id);
        let status = PodSandboxStatus {
            id: id.clone(),
            metadata: config.metadata.clone(),
            state: SandboxState::Ready,
            created_at: SystemTime::now(),
            ip: Some(self.node_ip),
            labels: config.labels.clone(),
        };
        state.sandboxes.insert(id.clone(), Sandbox { status, log_directory: config.log_directory.clone() });
        Ok(id)
    }

    async fn stop_pod_sandbox(&self, id: &SandboxId) -> Result<()> {
        let members: Vec<ContainerId> = {
            let state = self.state.lock();
            state.containers.values().filter(|c| &c.status.sandbox_id == id).map(|c| c.status.id.clone()).collect()
        };
        for container in members {
            self.stop_container(&container, Duration::ZERO).await?;
        }
        if let Some(sandbox) = self.state.lock().sandboxes.get_mut(id) {
            sandbox.status.state = SandboxState::NotReady;
            sandbox.status.ip = None;
        }
        Ok(())
    }

    async fn remove_pod_sandbox(&self, id: &SandboxId) -> Result<()> {
        self.stop_pod_sandbox(id).await?;
        let mut state = self.state.lock();
        state.sandboxes.remove(id);
        state.containers.retain(|_, c| &c.status.sandbox_id != id);
        Ok(())
    }

    async fn pod_sandbox_status(&self, id: &SandboxId) -> Result<PodSandboxStatus> {
        let state = self.state.lock();
        state
            .sandboxes
            .get(id)
            .map(|s| s.status.clone())
            .ok_or_else(|| RuntimeError::NotFound { kind: "sandbox", id: id.clone() })
    }

    async fn list_pod_sandboxes(&self, filter: &SandboxFilter) -> Result<Vec<PodSandboxStatus>> {
        let state = self.state.lock();
        Ok(state.sandboxes.values().map(|s| &s.status).filter(|s| filter.matches(s)).cloned().collect())
    }

    async fn create_container(
        &self,
        sandbox_id: &SandboxId,
        config: &ContainerConfig,
        _sandbox_config: &PodSandboxConfig,
    ) -> Result<ContainerId> {
        let (name, _) = self.image_of(&config.image)?;
        let image_ref = Self::image_id(name);
        let mut state = self.state.lock();
        let sandbox = super::ready_sandbox(sandbox_id, state.sandboxes.get(sandbox_id), |s| s.status.state)?;
        let log_path = sandbox.log_directory.join(&config.log_path);
        if let Some(parent) = log_path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        state.next_id += 1;
        let id = format!("embedded-{}", state.next_id);
        let (_, done) = watch::channel(false);
        let status = ContainerStatus::created(id.clone(), sandbox_id.clone(), config, image_ref, log_path);
        state.containers.insert(id.clone(), Container { status, config: config.clone(), stop: None, done, task: None });
        let _ = self.events.send(ContainerEvent::Created { id: id.clone(), sandbox_id: sandbox_id.clone() });
        Ok(id)
    }

    async fn start_container(&self, id: &ContainerId) -> Result<()> {
        let mut state = self.state.lock();
        let container =
            state.containers.get_mut(id).ok_or_else(|| RuntimeError::NotFound { kind: "container", id: id.clone() })?;
        if container.status.state != ContainerState::Created {
            return Err(RuntimeError::InvalidState(format!("container {id} is not in the created state")));
        }
        let (_, component) = self.image_of(&container.config.image)?;
        let (stop, stop_rx) = watch::channel(false);
        let (done_tx, done) = watch::channel(false);
        let context = ComponentContext {
            envs: container.config.envs.clone(),
            args: container.config.command.iter().chain(&container.config.args).cloned().collect(),
            stop: stop_rx,
            log: ComponentLog { path: Arc::new(container.status.log_path.clone()) },
        };
        let future = component(context);
        let (shared, events, finished_id) = (self.state.clone(), self.events.clone(), id.clone());
        container.task = Some(tokio::spawn(async move {
            let exit_code = future.await;
            Self::finish(&shared, &events, &finished_id, exit_code);
            let _ = done_tx.send(true);
        }));
        container.stop = Some(stop);
        container.done = done;
        container.status.state = ContainerState::Running;
        container.status.started_at = Some(SystemTime::now());
        let _ = self
            .events
            .send(ContainerEvent::Started { id: id.clone(), sandbox_id: container.status.sandbox_id.clone() });
        Ok(())
    }

    async fn stop_container(&self, id: &ContainerId, timeout: Duration) -> Result<()> {
        let (mut done, task) = {
            let mut state = self.state.lock();
            let Some(container) = state.containers.get_mut(id) else { return Ok(()) };
            if container.status.state != ContainerState::Running {
                if container.status.state == ContainerState::Created {
                    container.status.state = ContainerState::Exited;
                    container.status.exit_code = Some(0);
                    container.status.finished_at = Some(SystemTime::now());
                }
                return Ok(());
            }
            if let Some(stop) = &container.stop {
                let _ = stop.send(true);
            }
            (container.done.clone(), container.task.take())
        };
        if tokio::time::timeout(timeout, done.wait_for(|d| *d)).await.is_err() {
            if let Some(task) = task {
                task.abort();
            }
            Self::finish(&self.state, &self.events, id, 137);
        }
        Ok(())
    }

    async fn remove_container(&self, id: &ContainerId) -> Result<()> {
        let mut state = self.state.lock();
        if let Some(container) = state.containers.get(id)
            && container.status.state == ContainerState::Running
        {
            return Err(RuntimeError::InvalidState(format!("container {id} is running")));
        }
        if let Some(container) = state.containers.remove(id) {
            let _ =
                self.events.send(ContainerEvent::Removed { id: id.clone(), sandbox_id: container.status.sandbox_id });
        }
        Ok(())
    }

    async fn container_status(&self, id: &ContainerId) -> Result<ContainerStatus> {
        let state = self.state.lock();
        state
            .containers
            .get(id)
            .map(|c| c.status.clone())
            .ok_or_else(|| RuntimeError::NotFound { kind: "container", id: id.clone() })
    }

    async fn list_containers(&self, filter: &ContainerFilter) -> Result<Vec<ContainerStatus>> {
        let state = self.state.lock();
        Ok(state.containers.values().map(|c| &c.status).filter(|c| filter.matches(c)).cloned().collect())
    }

    async fn exec_sync(&self, _id: &ContainerId, _command: &[String], _timeout: Duration) -> Result<ExecResult> {
        Err(RuntimeError::Unsupported("embedded components have no process to exec in".into()))
    }

    async fn pull_image(&self, image: &str) -> Result<String> {
        let (name, _) = self.image_of(image)?;
        Ok(Self::image_id(name))
    }

    async fn image_status(&self, image: &str) -> Result<Option<Image>> {
        Ok(self.image_of(image).ok().map(|(name, _)| Image {
            id: Self::image_id(name),
            repo_tags: vec![name.clone()],
            size_bytes: 0,
        }))
    }

    async fn list_images(&self) -> Result<Vec<Image>> {
        Ok(self
            .components
            .keys()
            .map(|name| Image { id: Self::image_id(name), repo_tags: vec![name.clone()], size_bytes: 0 })
            .collect())
    }

    fn events(&self) -> broadcast::Receiver<ContainerEvent> {
        self.events.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::cri_log::parse_entry;

    fn sandbox(dir: &std::path::Path) -> PodSandboxConfig {
        PodSandboxConfig { log_directory: dir.to_owned(), ..Default::default() }
    }

    fn container(image: &str) -> ContainerConfig {
        ContainerConfig { name: "c".into(), image: image.into(), log_path: "c/0.log".into(), ..Default::default() }
    }

    #[tokio::test]
    async fn a_component_runs_logs_and_stops_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let runtime =
            EmbeddedRuntime::new("127.0.0.1".parse().unwrap()).component("orchestra/worker", |mut ctx| async move {
                ctx.log.line(format!("started with {:?}", ctx.args));
                ctx.stopped().await;
                ctx.log.line("stopping");
                0
            });
        let mut events = runtime.events();
        assert!(
            matches!(runtime.pull_image("docker.io/orchestra/worker:latest").await, Ok(id) if id == "embedded://orchestra/worker:latest")
        );
        assert!(matches!(runtime.pull_image("orchestra/other").await, Err(RuntimeError::ImageNotFound { .. })));
        let config = sandbox(dir.path());
        let sandbox_id = runtime.run_pod_sandbox(&config).await.unwrap();
        assert_eq!(runtime.pod_sandbox_status(&sandbox_id).await.unwrap().ip, Some("127.0.0.1".parse().unwrap()));
        let mut spec = container("orchestra/worker");
        spec.args = vec!["--flag".into()];
        let id = runtime.create_container(&sandbox_id, &spec, &config).await.unwrap();
        runtime.start_container(&id).await.unwrap();
        assert_eq!(runtime.container_status(&id).await.unwrap().state, ContainerState::Running);
        runtime.stop_container(&id, Duration::from_secs(10)).await.unwrap();
        let status = runtime.container_status(&id).await.unwrap();
        assert_eq!((status.state, status.exit_code), (ContainerState::Exited, Some(0)));
        let log = std::fs::read(dir.path().join("c/0.log")).unwrap();
        let lines: Vec<_> = log.split_inclusive(|&b| b == b'\n').map(|l| parse_entry(l).unwrap().content).collect();
        assert_eq!(lines, [b"started with [\"--flag\"]".to_vec(), b"stopping".to_vec()]);
        let mut seen = Vec::new();
        while let Ok(event) = events.try_recv() {
            seen.push(event);
        }
        assert!(seen.iter().any(|e| matches!(e, ContainerEvent::Exited { exit_code: 0, .. })), "{seen:?}");
    }

    #[tokio::test]
    async fn a_component_ignoring_the_stop_is_dropped_after_the_grace_period() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = EmbeddedRuntime::new("127.0.0.1".parse().unwrap())
            .component("stubborn", |_ctx| async { std::future::pending::<i32>().await });
        let config = sandbox(dir.path());
        let sandbox_id = runtime.run_pod_sandbox(&config).await.unwrap();
        let id = runtime.create_container(&sandbox_id, &container("stubborn"), &config).await.unwrap();
        runtime.start_container(&id).await.unwrap();
        runtime.stop_container(&id, Duration::from_millis(50)).await.unwrap();
        assert_eq!(runtime.container_status(&id).await.unwrap().exit_code, Some(137));
        runtime.remove_pod_sandbox(&sandbox_id).await.unwrap();
        assert!(runtime.list_containers(&ContainerFilter::default()).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_component_that_returns_is_an_exited_container() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = EmbeddedRuntime::new("127.0.0.1".parse().unwrap()).component("oneshot", |_ctx| async { 3 });
        let config = sandbox(dir.path());
        let sandbox_id = runtime.run_pod_sandbox(&config).await.unwrap();
        let id = runtime.create_container(&sandbox_id, &container("oneshot"), &config).await.unwrap();
        let mut events = runtime.events();
        runtime.start_container(&id).await.unwrap();
        loop {
            if let ContainerEvent::Exited { exit_code, .. } = events.recv().await.unwrap() {
                assert_eq!(exit_code, 3);
                break;
            }
        }
        let status = runtime.container_status(&id).await.unwrap();
        assert_eq!((status.state, status.reason.as_deref()), (ContainerState::Exited, Some("Error")));
    }
}
