//! [`RuntimeMux`]: one node, several runtimes, chosen per pod by its
//! runtime handler — what a CRI runtime does with `RunPodSandbox`'s
//! `runtime_handler` (the pod's `runtimeClassName` → RuntimeClass handler).
//! Sandboxes go to the handler's backend; a container follows its sandbox.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::RwLock;
use tokio::sync::broadcast;

use super::{
    ContainerConfig, ContainerEvent, ContainerFilter, ContainerId, ContainerStatus, ExecRequest, ExecResult,
    ExecSession, Image, PodSandboxConfig, PodSandboxStatus, Result, RuntimeBackend, RuntimeError, RuntimeVersion,
    SandboxFilter, SandboxId,
};

/// Routes every call to the backend of the pod's runtime handler.
pub struct RuntimeMux {
    default: Arc<dyn RuntimeBackend>,
    handlers: HashMap<String, Arc<dyn RuntimeBackend>>,
    /// Which backend (handler name; "" = default) owns each sandbox and
    /// container id.
    owners: RwLock<HashMap<String, String>>,
    events: broadcast::Sender<ContainerEvent>,
}

impl RuntimeMux {
    /// A mux sending pods without a handler (or with an unknown one) to
    /// `default`.
    pub fn new(default: Arc<dyn RuntimeBackend>) -> Self {
        let (events, _) = broadcast::channel(1024);
        let mux = Self { default, handlers: HashMap::new(), owners: RwLock::default(), events };
        mux.forward(mux.default.events());
        mux
    }

    /// Serves pods whose runtime handler is `name` with `backend`. Call
    /// inside a Tokio runtime (events are forwarded by a task).
    pub fn handler(mut self, name: impl Into<String>, backend: Arc<dyn RuntimeBackend>) -> Self {
        self.forward(backend.events());
        self.handlers.insert(name.into(), backend);
        self
    }

    fn forward(&self, mut from: broadcast::Receiver<ContainerEvent>) {
        let to = self.events.clone();
        tokio::spawn(async move {
            loop {
                match from.recv().await {
                    Ok(event) => {
                        let _ = to.send(event);
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => break,
                }
            }
        });
    }

    fn backend_named(&self, handler: &str) -> &Arc<dyn RuntimeBackend> {
        self.handlers.get(handler).unwrap_or(&self.default)
    }

    fn owner_of(&self, id: &str) -> Option<Arc<dyn RuntimeBackend>> {
        self.owners.read().get(id).map(|handler| self.backend_named(handler).clone())
    }

    /// The backend owning `id`; ids created before this mux existed (after
    /// a restart) are looked up in every backend.
    async fn owner(&self, id: &str, kind: &'static str) -> Result<Arc<dyn RuntimeBackend>> {
        if let Some(backend) = self.owner_of(id) {
            return Ok(backend);
        }
        for (handler, backend) in self.all() {
            let found = match kind {
                "sandbox" => backend.pod_sandbox_status(&id.to_owned()).await.is_ok(),
                _ => backend.container_status(&id.to_owned()).await.is_ok(),
            };
            if found {
                self.owners.write().insert(id.to_owned(), handler.to_owned());
                return Ok(backend.clone());
            }
        }
        Err(RuntimeError::NotFound { kind, id: id.to_owned() })
    }

    fn all(&self) -> impl Iterator<Item = (&str, &Arc<dyn RuntimeBackend>)> {
        std::iter::once(("", &self.default)).chain(self.handlers.iter().map(|(name, backend)| (name.as_str(), backend)))
    }
}

#[async_trait]
impl RuntimeBackend for RuntimeMux {
    async fn version(&self) -> Result<RuntimeVersion> {
        self.default.version().await
    }

    async fn update_runtime_config(&self, pod_cidr: &str) -> Result<()> {
        for (_, backend) in self.all() {
            backend.update_runtime_config(pod_cidr).await?;
        }
        Ok(())
    }

    async fn run_pod_sandbox(&self, config: &PodSandboxConfig) -> Result<SandboxId> {
        let handler =
            if self.handlers.contains_key(&config.runtime_handler) { config.runtime_handler.as_str() } else { "" };
        let id = self.backend_named(handler).run_pod_sandbox(config).await?;
        self.owners.write().insert(id.clone(), handler.to_owned());
        Ok(id)
    }

    async fn stop_pod_sandbox(&self, id: &SandboxId) -> Result<()> {
        match self.owner(id, "sandbox").await {
            Ok(backend) => backend.stop_pod_sandbox(id).await,
            Err(_) => Ok(()),
        }
    }

    async fn remove_pod_sandbox(&self, id: &SandboxId) -> Result<()> {
        let Ok(backend) = self.owner(id, "sandbox").await else { return Ok(()) };
        backend.remove_pod_sandbox(id).await?;
        self.owners.write().remove(id);
        Ok(())
    }

    async fn pod_sandbox_status(&self, id: &SandboxId) -> Result<PodSandboxStatus> {
        self.owner(id, "sandbox").await?.pod_sandbox_status(id).await
    }

    async fn list_pod_sandboxes(&self, filter: &SandboxFilter) -> Result<Vec<PodSandboxStatus>> {
        let mut all = Vec::new();
        for (_, backend) in self.all() {
            all.extend(backend.list_pod_sandboxes(filter).await?);
        }
        Ok(all)
    }

    async fn create_container(
        &self,
        sandbox_id: &SandboxId,
        config: &ContainerConfig,
        sandbox_config: &PodSandboxConfig,
    ) -> Result<ContainerId> {
        let backend = self.owner(sandbox_id, "sandbox").await?;
        let handler = self.owners.read().get(sandbox_id).cloned().unwrap_or_default();
        let id = backend.create_container(sandbox_id, config, sandbox_config).await?;
        self.owners.write().insert(id.clone(), handler);
        Ok(id)
    }

    async fn start_container(&self, id: &ContainerId) -> Result<()> {
        self.owner(id, "container").await?.start_container(id).await
    }

    async fn stop_container(&self, id: &ContainerId, timeout: Duration) -> Result<()> {
        match self.owner(id, "container").await {
            Ok(backend) => backend.stop_container(id, timeout).await,
            Err(_) => Ok(()),
        }
    }

    async fn remove_container(&self, id: &ContainerId) -> Result<()> {
        let Ok(backend) = self.owner(id, "container").await else { return Ok(()) };
        backend.remove_container(id).await?;
        self.owners.write().remove(id);
        Ok(())
    }

    async fn container_status(&self, id: &ContainerId) -> Result<ContainerStatus> {
        self.owner(id, "container").await?.container_status(id).await
    }

    async fn list_containers(&self, filter: &ContainerFilter) -> Result<Vec<ContainerStatus>> {
        let mut all = Vec::new();
        for (_, backend) in self.all() {
            all.extend(backend.list_containers(filter).await?);
        }
        Ok(all)
    }

    async fn exec_sync(&self, id: &ContainerId, command: &[String], timeout: Duration) -> Result<ExecResult> {
        self.owner(id, "container").await?.exec_sync(id, command, timeout).await
    }

    async fn exec(&self, id: &ContainerId, request: ExecRequest) -> Result<ExecSession> {
        self.owner(id, "container").await?.exec(id, request).await
    }

    async fn pull_image(&self, image: &str) -> Result<String> {
        // The image's handler is not known here (CRI's PullImage carries the
        // sandbox config; ours does not): the first backend that has it.
        let mut first_error = None;
        for (_, backend) in self.all() {
            match backend.pull_image(image).await {
                Ok(id) => return Ok(id),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        Err(first_error.expect("at least the default backend"))
    }

    async fn image_status(&self, image: &str) -> Result<Option<Image>> {
        for (_, backend) in self.all() {
            if let Some(found) = backend.image_status(image).await? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    async fn list_images(&self) -> Result<Vec<Image>> {
        let mut all = Vec::new();
        for (_, backend) in self.all() {
            all.extend(backend.list_images().await?);
        }
        Ok(all)
    }

    fn events(&self) -> broadcast::Receiver<ContainerEvent> {
        self.events.subscribe()
    }
}
