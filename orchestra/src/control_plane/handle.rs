//! The running control plane: what [`ControlPlaneBuilder::start`](super::ControlPlaneBuilder::start)
//! started, the clients to reach it, and its ordered shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use orchestra_core::auth::UserInfo;
use orchestra_core::server::ApiServer;
use orchestra_core::server::pki::Pki;
use orchestra_core::tokens::TokenSigner;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::ControlPlaneError;

/// A stop signal many tasks wait for.
pub(crate) struct StopSignal(watch::Sender<bool>);

impl StopSignal {
    pub(crate) fn new() -> Self {
        StopSignal(watch::channel(false).0)
    }

    /// Completes once [`stop`](Self::stop) is called (or the signal dropped).
    pub(crate) fn stopped(&self) -> impl Future<Output = ()> + Send + 'static + use<> {
        let mut rx = self.0.subscribe();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    }

    pub(crate) fn receiver(&self) -> watch::Receiver<bool> {
        self.0.subscribe()
    }

    pub(crate) fn stop(&self) {
        self.0.send_replace(true);
    }
}

/// A node agent the control plane runs.
#[cfg(feature = "node")]
pub(crate) struct RunningNode {
    pub(crate) handle: orchestra_node::agent::AgentHandle,
    pub(crate) runtime: Arc<dyn orchestra_node::runtime::RuntimeBackend>,
    pub(crate) task: JoinHandle<Result<(), orchestra_node::agent::AgentError>>,
}

/// Everything started, in the order it stops.
pub(crate) struct Running {
    pub(crate) server: ApiServer,
    pub(crate) address: Option<SocketAddr>,
    pub(crate) pki: Option<Pki>,
    pub(crate) signer: Arc<TokenSigner>,
    pub(crate) data_dir: PathBuf,
    /// Paths the nodes' containers must not see.
    pub(crate) hidden_paths: Vec<PathBuf>,
    /// The data directory when the builder named none: removed when the
    /// handle is dropped.
    pub(crate) _temp_dir: Option<tempfile::TempDir>,
    /// The scheduler and the controllers: stopped first, so that they
    /// release their leases while the API server still answers.
    pub(crate) components_stop: StopSignal,
    pub(crate) components: Vec<(String, JoinHandle<()>)>,
    /// The node agents: stopped next, then their containers.
    pub(crate) nodes_stop: StopSignal,
    #[cfg(feature = "node")]
    pub(crate) nodes: Vec<RunningNode>,
    /// The API server's and the nodes' listeners: stopped last.
    pub(crate) listeners_stop: StopSignal,
    pub(crate) listeners: Vec<JoinHandle<std::io::Result<()>>>,
}

impl Running {
    pub(crate) fn new(
        server: ApiServer,
        data_dir: PathBuf,
        temp_dir: Option<tempfile::TempDir>,
        signer: Arc<TokenSigner>,
    ) -> Running {
        Running {
            server,
            address: None,
            pki: None,
            signer,
            data_dir,
            hidden_paths: Vec::new(),
            _temp_dir: temp_dir,
            components_stop: StopSignal::new(),
            components: Vec::new(),
            nodes_stop: StopSignal::new(),
            #[cfg(feature = "node")]
            nodes: Vec::new(),
            listeners_stop: StopSignal::new(),
            listeners: Vec::new(),
        }
    }

    /// The API server's HTTPS URL, with [`Listener::Tls`](super::Listener::Tls).
    pub(crate) fn url(&self) -> Option<String> {
        let address = self.address?;
        let host = if address.ip().is_unspecified() { "127.0.0.1".to_owned() } else { address.ip().to_string() };
        Some(if address.is_ipv6() {
            format!("https://[{host}]:{}", address.port())
        } else {
            format!("https://{host}:{}", address.port())
        })
    }

    /// An in-process client acting as `user`.
    pub(crate) fn client_as(&self, user: UserInfo) -> kube::Client {
        orchestra_core::client::in_process_as(&self.server, user, "default")
    }

    /// `config` with the service account token controller's key and CA,
    /// the cluster CA for the CSR signing controller (with certificates),
    /// and in-process clients acting as each controller's service account,
    /// unless it has its own.
    #[cfg(feature = "ctrl")]
    pub(crate) fn controller_config(
        &self,
        mut config: orchestra_ctrl::controllers::ControllerManagerConfig,
    ) -> orchestra_ctrl::controllers::ControllerManagerConfig {
        if config.credentials.is_none() {
            let server = self.server.clone();
            let credentials = move |account: &str| -> orchestra_ctrl::credentials::ClientFuture {
                let name = orchestra_ctrl::credentials::user_name(account);
                let user = UserInfo::new(name, &orchestra_ctrl::credentials::GROUPS);
                let client = orchestra_core::client::in_process_as(&server, user, "default");
                Box::pin(async move { Ok(client) })
            };
            config = config.with_credentials(Arc::new(credentials));
        }
        if config.service_account_tokens.is_none() {
            let mut tokens = orchestra_ctrl::controllers::serviceaccount_token::TokenConfig::new(self.signer.clone());
            tokens.root_ca = self.pki.as_ref().map(|pki| pki.ca_pem().to_owned());
            config.service_account_tokens = Some(tokens);
        }
        if config.root_ca.is_none() {
            config.root_ca = self.pki.as_ref().map(|pki| pki.ca_pem().to_owned());
        }
        // With certificates, CSRs are signed by the cluster CA, whose client
        // certificates the listener accepts.
        if config.csr_signing.is_none()
            && let Some(pki) = &self.pki
        {
            match pki.certificate_authority() {
                Ok(ca) => config.csr_signing = Some(orchestra_ctrl::controllers::csrsigning::SigningConfig::new(ca)),
                Err(error) => tracing::warn!(%error, "the cluster CA cannot sign: CSRs will not be issued"),
            }
        }
        config
    }

    #[cfg(feature = "sched")]
    pub(crate) fn start_scheduler(
        &mut self,
        registry: orchestra_sched::registry::Registry,
        config: orchestra_sched::config::SchedulerConfiguration,
        identity: &str,
    ) -> Result<(), ControlPlaneError> {
        let client = self.client_as(UserInfo::new("system:kube-scheduler", &[]));
        let scheduler = orchestra_sched::scheduler::SchedulerBuilder::new(client)
            .registry(registry)
            .config(config)
            .identity(identity)
            .build()?;
        let stopped = self.components_stop.stopped();
        let task = tokio::spawn(async move {
            if let Err(error) = scheduler.run_until(stopped).await {
                tracing::error!(%error, "the scheduler stopped");
            }
        });
        self.components.push(("scheduler".into(), task));
        Ok(())
    }

    #[cfg(feature = "ctrl")]
    pub(crate) fn start_controllers(
        &mut self,
        config: orchestra_ctrl::controllers::ControllerManagerConfig,
        identity: &str,
    ) -> Result<(), ControlPlaneError> {
        let client = self.client_as(UserInfo::new("system:kube-controller-manager", &[]));
        let manager = orchestra_ctrl::controllers::builtin(
            orchestra_ctrl::informer::SharedInformerFactory::new(client.clone()),
            config,
        )?;
        let elector = Arc::new(orchestra_ctrl::leader::LeaderElector::new(
            client,
            "kube-system",
            "kube-controller-manager",
            identity,
        ));
        let stopped = self.components_stop.stopped();
        let task = tokio::spawn(async move {
            if let Err(error) = manager.run_elected(elector, stopped).await {
                tracing::error!(%error, "the controller manager stopped");
            }
        });
        self.components.push(("controller-manager".into(), task));
        Ok(())
    }

    #[cfg(feature = "ctrl")]
    pub(crate) fn start_extra_controllers(&mut self, controllers: Vec<(String, super::ControllerStart)>) {
        if controllers.is_empty() {
            return;
        }
        // Controllers of the embedding program's own are its own code, as
        // trusted as the program: they may do anything.
        let client = self.client_as(UserInfo::new("system:controllers", &["system:masters"]));
        let mut manager = orchestra_ctrl::manager::ControllerManager::new(
            orchestra_ctrl::informer::SharedInformerFactory::new(client),
        );
        for (name, start) in controllers {
            manager = manager.with(&name, start);
        }
        let stopped = self.components_stop.stopped();
        self.components.push(("controllers".into(), tokio::spawn(manager.run(stopped))));
    }

    /// Stops everything in order: the scheduler and the controllers (which
    /// release their leases), the node agents, the nodes' containers, then
    /// the listeners. Returns the first failure among them.
    async fn shutdown(&mut self) -> Result<(), ControlPlaneError> {
        let mut first_error = None;
        self.components_stop.stop();
        for (name, task) in self.components.drain(..) {
            if let Err(error) = task.await {
                tracing::error!(component = %name, %error, "failed while stopping");
            }
        }
        self.nodes_stop.stop();
        #[cfg(feature = "node")]
        for node in self.nodes.drain(..) {
            let name = node.handle.node_name().to_owned();
            match node.task.await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    first_error
                        .get_or_insert(ControlPlaneError::Node { node: name.clone(), message: error.to_string() });
                }
                Err(error) => {
                    first_error
                        .get_or_insert(ControlPlaneError::Node { node: name.clone(), message: error.to_string() });
                }
            }
            orchestra_node::runtime::stop_running_containers(&*node.runtime, super::CONTAINER_GRACE).await;
        }
        self.listeners_stop.stop();
        for task in self.listeners.drain(..) {
            match task.await {
                Ok(Ok(())) => {}
                Ok(Err(source)) => {
                    first_error.get_or_insert(ControlPlaneError::Io { what: "serving".into(), source });
                }
                Err(error) => {
                    first_error.get_or_insert(ControlPlaneError::Io {
                        what: "serving".into(),
                        source: std::io::Error::other(error),
                    });
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// A running control plane; [`shutdown`](Self::shutdown) stops it in order.
/// Dropped without a shutdown, it signals every component to stop and does
/// not wait.
pub struct ControlPlaneHandle {
    running: Running,
}

impl std::fmt::Debug for ControlPlaneHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlaneHandle")
            .field("address", &self.running.address)
            .field("data_dir", &self.running.data_dir)
            .finish_non_exhaustive()
    }
}

impl ControlPlaneHandle {
    pub(crate) fn new(running: Running) -> Self {
        ControlPlaneHandle { running }
    }

    /// A client acting as the cluster's administrator (`system:admin` in
    /// `system:masters`), in process, default namespace `default`.
    pub fn client(&self) -> kube::Client {
        self.running.client_as(super::admin())
    }

    /// A client acting as `user` in `groups`, in process.
    pub fn client_as(&self, user: &str, groups: &[&str]) -> kube::Client {
        self.running.client_as(UserInfo::new(user, groups))
    }

    /// The API server as a tower service, to nest into an axum application
    /// (`Router::nest_service("/k8s", handle.router())`). Requests through
    /// it are authenticated like any other.
    pub fn router(&self) -> axum::Router {
        self.running.server.router()
    }

    /// The API server itself (its store, its metrics).
    pub fn api_server(&self) -> &ApiServer {
        &self.running.server
    }

    /// Where the API server listens, with [`Listener::Tls`](super::Listener::Tls).
    pub fn address(&self) -> Option<SocketAddr> {
        self.running.address
    }

    /// The API server's URL (`https://...`), with [`Listener::Tls`](super::Listener::Tls).
    pub fn url(&self) -> Option<String> {
        self.running.url()
    }

    /// The cluster's certificates, with [`Listener::Tls`](super::Listener::Tls).
    pub fn pki(&self) -> Option<&Pki> {
        self.running.pki.as_ref()
    }

    /// Writes a kubeconfig for the administrator (a client certificate of
    /// the cluster CA) to `path`, readable by its owner only. Needs
    /// [`Listener::Tls`](super::Listener::Tls).
    pub fn write_admin_kubeconfig(&self, path: &Path) -> Result<(), ControlPlaneError> {
        let (Some(pki), Some(url)) = (self.pki(), self.url()) else {
            return Err(ControlPlaneError::Config("an admin kubeconfig needs a TLS listener".into()));
        };
        Ok(pki.write_admin_kubeconfig(path, &url)?)
    }

    /// Writes a kubeconfig with a new client certificate of `user` (in
    /// `group`, if any) to `path`, readable by its owner only: the identity
    /// of a component run as its own process, e.g. `system:kube-scheduler`.
    /// Needs [`Listener::Tls`](super::Listener::Tls).
    pub fn write_client_kubeconfig(
        &self,
        path: &Path,
        user: &str,
        group: Option<&str>,
    ) -> Result<(), ControlPlaneError> {
        let (Some(pki), Some(url)) = (self.pki(), self.url()) else {
            return Err(ControlPlaneError::Config("a kubeconfig needs a TLS listener".into()));
        };
        Ok(pki.write_client_kubeconfig(path, &url, user, group)?)
    }

    /// The service account token signer (for tokens the API server accepts).
    pub fn token_signer(&self) -> &Arc<TokenSigner> {
        &self.running.signer
    }

    /// Where nodes keep their state.
    pub fn data_dir(&self) -> &Path {
        &self.running.data_dir
    }

    /// The node agents, in the order they were added.
    #[cfg(feature = "node")]
    pub fn nodes(&self) -> impl ExactSizeIterator<Item = &orchestra_node::agent::AgentHandle> {
        self.running.nodes.iter().map(|node| &node.handle)
    }

    /// The runtime of node `name`.
    #[cfg(feature = "node")]
    pub fn node_runtime(&self, name: &str) -> Option<&Arc<dyn orchestra_node::runtime::RuntimeBackend>> {
        self.running.nodes.iter().find(|node| node.handle.node_name() == name).map(|node| &node.runtime)
    }

    /// Stops everything, in order: the scheduler and the controllers
    /// release their leases; the node agents stop and their nodes'
    /// containers are stopped (SIGTERM, then SIGKILL after a grace period);
    /// the listeners close after their connections drain.
    pub async fn shutdown(mut self) -> Result<(), ControlPlaneError> {
        self.running.shutdown().await
    }
}

impl Drop for ControlPlaneHandle {
    fn drop(&mut self) {
        self.running.components_stop.stop();
        self.running.nodes_stop.stop();
        self.running.listeners_stop.stop();
    }
}
