//! [`ControlPlane`]: the store, the API server, the scheduler, the
//! controller manager and node agents, started in one call inside the
//! caller's process.
//!
//! Every component talks to the API server only — in process, through
//! `kube::Client`s over its tower service, each under its own identity — and
//! only the API server touches the store, exactly as when the components run
//! as separate processes over HTTPS.
//!
//! ```no_run
//! use std::sync::Arc;
//! use orchestra::prelude::*;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let cluster = ControlPlane::builder()
//!     .store(Arc::new(MemStore::new()))
//!     .listener(Listener::tls("127.0.0.1:0".parse()?, "/tmp/my-cluster/pki"))
//!     .nodes(3, NodeRuntime::simulated())
//!     .start()
//!     .await?;
//! println!("serving on {}", cluster.url().unwrap_or_default());
//! let nodes: Api<Node> = Api::all(cluster.client());
//! assert_eq!(nodes.list(&Default::default()).await?.items.len(), 3);
//! cluster.shutdown().await?;
//! # Ok(()) }
//! ```

mod handle;
#[cfg(feature = "node")]
mod nodes;
#[cfg(all(feature = "node", feature = "sched", feature = "ctrl"))]
mod static_pods;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use orchestra_core::auth::admission::{AdmissionChain, AdmissionPlugin, WebhookClientAuth};
use orchestra_core::auth::{
    Authenticator, AuthenticatorChain, AuthorizationMode, Authorizer, AuthorizerChain, ClientCertAuthenticator,
    ExtensionAuthenticator, UserInfo,
};
use orchestra_core::encryption::{EncryptedStore, EncryptionConfig};
use orchestra_core::server::pki::Pki;
use orchestra_core::server::{ApiServer, ApiServerBuilder, KubeletClient, ListenOptions, ServerOptions};
use orchestra_core::tokens::{DEFAULT_ISSUER, TokenSigner};
use orchestra_store::{MemStore, Store};

pub use handle::ControlPlaneHandle;
#[cfg(feature = "node")]
pub use nodes::{JoinOptions, JoinedNode, NodeRuntime, NodeSlot, NodeSpec, kubeconfig_cluster_ca, node_ip, node_name};

use handle::Running;

/// The entry point: [`ControlPlane::builder()`].
#[derive(Debug, Clone, Copy)]
pub struct ControlPlane;

impl ControlPlane {
    /// A builder with the defaults: a [`MemStore`], the API server in
    /// process only, the default scheduler profile, every built-in
    /// controller that needs no configuration, and no nodes.
    pub fn builder() -> ControlPlaneBuilder {
        ControlPlaneBuilder::new()
    }
}

/// Where the API server can be reached from outside the process.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Listener {
    /// Nowhere: only in-process clients ([`ControlPlaneHandle::client`]) and
    /// the router ([`ControlPlaneHandle::router`]) reach it.
    InProcess,
    /// HTTPS on `address`, with a cluster CA and certificates kept in
    /// `pki_dir` (created on first start, reused afterwards). Clients
    /// authenticate with certificates of that CA; node agents get an HTTPS
    /// endpoint of their own (logs, exec).
    Tls {
        /// Address and port (port 0: any free port).
        address: SocketAddr,
        /// The CA, the serving and client certificates, the service account key.
        pki_dir: PathBuf,
        /// Further names or addresses the serving certificate covers.
        extra_sans: Vec<String>,
    },
}

impl Listener {
    /// HTTPS on `address` with certificates in `pki_dir`.
    pub fn tls(address: SocketAddr, pki_dir: impl Into<PathBuf>) -> Listener {
        Listener::Tls { address, pki_dir: pki_dir.into(), extra_sans: Vec::new() }
    }

    /// The same listener with further names or addresses its serving
    /// certificate covers (kube-apiserver's `--tls-san`); no change to
    /// [`Listener::InProcess`].
    pub fn with_extra_sans(mut self, sans: impl IntoIterator<Item = String>) -> Listener {
        if let Listener::Tls { extra_sans, .. } = &mut self {
            extra_sans.extend(sans);
        }
        self
    }
}

/// Why a control plane did not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ControlPlaneError {
    /// The API server did not build (its store refused the bootstrap writes).
    #[error("API server: {0}")]
    ApiServer(#[from] orchestra_core::api::ApiError),
    /// The cluster's certificates could not be loaded, created or used.
    #[error("certificates: {0}")]
    Pki(#[from] orchestra_core::tls::pki::PkiError),
    /// The service account signing key could not be loaded or created.
    #[error("service account signing key: {0}")]
    SigningKey(#[from] orchestra_core::tokens::KeyError),
    /// A listener or a directory could not be set up, or a server failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The scheduler's configuration does not build.
    #[cfg(feature = "sched")]
    #[error("scheduler: {0}")]
    Scheduler(#[from] orchestra_sched::scheduler::Error),
    /// The controller selection cannot run.
    #[cfg(feature = "ctrl")]
    #[error("controllers: {0}")]
    Controllers(#[from] orchestra_ctrl::controllers::SelectionError),
    /// A node's runtime could not be created, or its agent failed.
    #[error("node {node}: {message}")]
    Node {
        /// The node's name.
        node: String,
        /// What went wrong.
        message: String,
    },
    /// The builder's settings contradict each other.
    #[error("configuration: {0}")]
    Config(String),
    /// A write the assembly makes through the API server (a role of its
    /// own, a node's labels) failed.
    #[error("{what}: {source}")]
    Api {
        /// What was being written.
        what: String,
        /// The cause.
        source: kube::Error,
    },
}

impl ControlPlaneError {
    fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ControlPlaneError {
        let what = what.into();
        move |source| ControlPlaneError::Io { what, source }
    }
}

type ApiCustomizer = Box<dyn FnOnce(ApiServerBuilder) -> ApiServerBuilder + Send>;
#[cfg(feature = "ctrl")]
type ControllerStart =
    Box<dyn FnOnce(orchestra_ctrl::manager::ManagerContext) -> BoxFuture<'static, ()> + Send + 'static>;

/// How the authorizer chain is made.
enum Authorization {
    /// These authorizers first, then those of the modes (default `Node,RBAC`;
    /// with RBAC, upstream's default roles are created).
    BeforeModes(AuthorizerChain, Vec<AuthorizationMode>),
    /// Exactly this chain.
    Exactly(AuthorizerChain),
}

/// Builds and starts a control plane; see [`ControlPlane`].
///
/// Every setting has a default; [`start`](ControlPlaneBuilder::start)
/// returns once the nodes have registered:
///
/// ```
/// use orchestra::prelude::*;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let cluster = ControlPlane::builder().nodes(1, NodeRuntime::simulated()).start().await?;
/// let nodes: Api<Node> = Api::all(cluster.client());
/// let registered = nodes.list(&ListParams::default()).await?;
/// assert_eq!(registered.items.len(), 1);
/// assert_eq!(cluster.nodes().len(), 1);
/// cluster.shutdown().await?;
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
/// ```
#[must_use = "a builder does nothing until start() is awaited"]
pub struct ControlPlaneBuilder {
    store: Option<Arc<dyn Store>>,
    data_dir: Option<PathBuf>,
    listener: Listener,
    authenticators: AuthenticatorChain,
    allow_anonymous: bool,
    authorization: Authorization,
    webhook_authorizer: Option<orchestra_core::auth::WebhookAuthorizer>,
    webhook_client_auth: Option<(WebhookClientAuth, WebhookClientAuth)>,
    abac_authorizer: Option<orchestra_core::auth::AbacAuthorizer>,
    admission: Option<AdmissionChain>,
    disabled_admission: Vec<String>,
    server_options: Option<ServerOptions>,
    encryption: Option<EncryptionConfig>,
    pod_security: Option<orchestra_core::auth::admission::PodSecurityConfig>,
    hidden_paths: Vec<PathBuf>,
    verify_node_certificates: bool,
    customize: Vec<ApiCustomizer>,
    identity: String,
    #[cfg(feature = "sched")]
    scheduler: Option<(orchestra_sched::registry::Registry, orchestra_sched::config::SchedulerConfiguration)>,
    #[cfg(feature = "ctrl")]
    controllers: Option<orchestra_ctrl::controllers::ControllerManagerConfig>,
    #[cfg(feature = "ctrl")]
    extra_controllers: Vec<(String, ControllerStart)>,
    #[cfg(feature = "node")]
    nodes: Vec<NodeSpec>,
    #[cfg(feature = "node")]
    kubelet_port: u16,
    #[cfg(feature = "node")]
    static_pods: bool,
}

impl Default for ControlPlaneBuilder {
    fn default() -> Self {
        ControlPlaneBuilder::new()
    }
}

impl ControlPlaneBuilder {
    /// See [`ControlPlane::builder`].
    pub fn new() -> Self {
        ControlPlaneBuilder {
            store: None,
            data_dir: None,
            listener: Listener::InProcess,
            authenticators: AuthenticatorChain::new(),
            allow_anonymous: false,
            authorization: Authorization::BeforeModes(
                AuthorizerChain::new(),
                vec![AuthorizationMode::Node, AuthorizationMode::Rbac],
            ),
            webhook_authorizer: None,
            webhook_client_auth: None,
            abac_authorizer: None,
            admission: None,
            disabled_admission: Vec::new(),
            server_options: None,
            encryption: None,
            pod_security: None,
            hidden_paths: Vec::new(),
            verify_node_certificates: true,
            customize: Vec::new(),
            identity: default_identity(),
            #[cfg(feature = "sched")]
            scheduler: Some((
                orchestra_sched::registry::Registry::default(),
                orchestra_sched::config::SchedulerConfiguration::default(),
            )),
            #[cfg(feature = "ctrl")]
            controllers: Some(orchestra_ctrl::controllers::ControllerManagerConfig::default()),
            #[cfg(feature = "ctrl")]
            extra_controllers: Vec::new(),
            #[cfg(feature = "node")]
            nodes: Vec::new(),
            #[cfg(feature = "node")]
            kubelet_port: 0,
            #[cfg(feature = "node")]
            static_pods: false,
        }
    }

    /// The store behind the API server (default: a new [`MemStore`]).
    pub fn store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// Where node agents keep their state and the static pod manifests live
    /// (default: a temporary directory removed at shutdown).
    pub fn data_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.data_dir = Some(dir.into());
        self
    }

    /// How PodSecurity admission decides for namespaces without
    /// `pod-security.kubernetes.io/*` labels (default: every level
    /// `privileged`, as upstream).
    pub fn pod_security(mut self, config: orchestra_core::auth::admission::PodSecurityConfig) -> Self {
        self.pod_security = Some(config);
        self
    }

    /// Hides `path` (a file or a directory) from every container of the
    /// nodes' process runtimes, besides the data directory and the PKI
    /// directory, which are always hidden: kubeconfigs, key files kept
    /// elsewhere. See
    /// [`ProcessRuntimeConfig::hidden_paths`](orchestra_node::runtime::process::ProcessRuntimeConfig::hidden_paths).
    pub fn hide_from_containers(mut self, path: impl Into<PathBuf>) -> Self {
        self.hidden_paths.push(path.into());
        self
    }

    /// Where the API server listens (default: [`Listener::InProcess`]).
    pub fn listener(mut self, listener: Listener) -> Self {
        self.listener = listener;
        self
    }

    /// Adds an authenticator. In-process identities
    /// ([`ExtensionAuthenticator`]) are recognised first and, with
    /// [`Listener::Tls`], client certificates of the cluster CA; then these,
    /// in the order added.
    pub fn authenticator(mut self, authenticator: impl Authenticator + 'static) -> Self {
        self.authenticators = self.authenticators.with(authenticator);
        self
    }

    /// Lets requests without credentials in as `system:anonymous` (default:
    /// refused with 401). What they may do is up to the authorizers: by
    /// default health and version only.
    pub fn allow_anonymous(mut self, allow: bool) -> Self {
        self.allow_anonymous = allow;
        self
    }

    /// Adds an authorizer, consulted (in the order added) before the
    /// defaults: the Node authorizer, then RBAC with upstream's default
    /// roles and bindings. The first to allow or deny decides.
    pub fn authorizer(mut self, authorizer: impl Authorizer + 'static) -> Self {
        self.authorization = match self.authorization {
            Authorization::BeforeModes(chain, modes) => Authorization::BeforeModes(chain.with(authorizer), modes),
            Authorization::Exactly(chain) => Authorization::Exactly(chain.with(authorizer)),
        };
        self
    }

    /// The authorizers after those [added](Self::authorizer), as
    /// kube-apiserver's `--authorization-mode` (default `Node,RBAC`; with
    /// `RBAC` upstream's default roles and bindings are created at start).
    pub fn authorization_modes(mut self, modes: &[AuthorizationMode]) -> Self {
        self.authorization = match self.authorization {
            Authorization::BeforeModes(chain, _) | Authorization::Exactly(chain) => {
                Authorization::BeforeModes(chain, modes.to_vec())
            }
        };
        self
    }

    /// The authorizer `Webhook` stands for in
    /// [`authorization_modes`](Self::authorization_modes) (kube-apiserver's
    /// `--authorization-webhook-config-file`); naming `Webhook` without it
    /// fails [`start`](Self::start).
    pub fn webhook_authorizer(mut self, authorizer: orchestra_core::auth::WebhookAuthorizer) -> Self {
        self.webhook_authorizer = Some(authorizer);
        self
    }

    /// What the admission webhook plugins present to webhooks (kube-apiserver's
    /// `--admission-control-config-file` `kubeConfigFile`s): the mutating
    /// plugin's credentials, then the validating plugin's.
    pub fn admission_webhook_client_auth(mut self, mutating: WebhookClientAuth, validating: WebhookClientAuth) -> Self {
        self.webhook_client_auth = Some((mutating, validating));
        self
    }

    /// The authorizer `ABAC` stands for in
    /// [`authorization_modes`](Self::authorization_modes) (kube-apiserver's
    /// `--authorization-policy-file`); naming `ABAC` without it fails
    /// [`start`](Self::start).
    pub fn abac_authorizer(mut self, authorizer: orchestra_core::auth::AbacAuthorizer) -> Self {
        self.abac_authorizer = Some(authorizer);
        self
    }

    /// Replaces the whole authorizer chain, defaults included. In-process
    /// components (scheduler, controllers, nodes) are authorized by it too.
    pub fn authorizer_chain(mut self, chain: AuthorizerChain) -> Self {
        self.authorization = Authorization::Exactly(chain);
        self
    }

    /// Adds an admission plugin, run (in the order added) on every write,
    /// within the API server's default chain: after its own plugins, before
    /// the admission webhooks and ResourceQuota
    /// ([`ApiServerBuilder::default_admission`]).
    pub fn admission(mut self, plugin: impl AdmissionPlugin + 'static) -> Self {
        self.admission = Some(self.admission.take().unwrap_or_default().with(plugin));
        self
    }

    /// Leaves the named plugins out of the API server's admission chain
    /// (upstream's `--disable-admission-plugins`), e.g. `["PodSecurity"]`.
    /// A name no plugin of the chain has fails [`start`](Self::start).
    pub fn disable_admission_plugins<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.disabled_admission.extend(names.into_iter().map(Into::into));
        self
    }

    /// The API server's tunables.
    pub fn server_options(mut self, options: ServerOptions) -> Self {
        self.server_options = Some(options);
        self
    }

    /// Encrypts the values of the resources `config` names before they
    /// reach the store (kube-apiserver's `--encryption-provider-config`):
    /// the API server gets the store wrapped in an [`EncryptedStore`].
    pub fn encryption(mut self, config: EncryptionConfig) -> Self {
        self.encryption = Some(config);
        self
    }

    /// Whether the API server verifies node agents' serving certificates
    /// against the cluster CA when it proxies logs and exec to them
    /// (default: yes). Nodes that join on their own and sign their serving
    /// certificate themselves need `false`, as upstream without
    /// `--kubelet-certificate-authority`.
    pub fn verify_node_certificates(mut self, verify: bool) -> Self {
        self.verify_node_certificates = verify;
        self
    }

    /// Any other API server setting (kinds of its own with
    /// [`ApiServerBuilder::register`], ...), applied last.
    pub fn configure_api_server(
        mut self,
        customize: impl FnOnce(ApiServerBuilder) -> ApiServerBuilder + Send + 'static,
    ) -> Self {
        self.customize.push(Box::new(customize));
        self
    }

    /// This process's identity in leader election and events (default
    /// `<hostname>_<pid>`).
    pub fn identity(mut self, identity: impl Into<String>) -> Self {
        self.identity = identity.into();
        self
    }

    /// Runs the scheduler with these plugins and this configuration.
    #[cfg(feature = "sched")]
    pub fn scheduler(
        mut self,
        registry: orchestra_sched::registry::Registry,
        config: orchestra_sched::config::SchedulerConfiguration,
    ) -> Self {
        self.scheduler = Some((registry, config));
        self
    }

    /// Runs no scheduler (pods stay unbound unless something else binds them).
    #[cfg(feature = "sched")]
    pub fn without_scheduler(mut self) -> Self {
        self.scheduler = None;
        self
    }

    /// Runs the built-in controllers `config` selects, behind leader election.
    #[cfg(feature = "ctrl")]
    pub fn controllers(mut self, config: orchestra_ctrl::controllers::ControllerManagerConfig) -> Self {
        self.controllers = Some(config);
        self
    }

    /// Runs none of the built-in controllers.
    #[cfg(feature = "ctrl")]
    pub fn without_controllers(mut self) -> Self {
        self.controllers = None;
        self
    }

    /// Runs a controller of the caller's beside the built-in ones, with the
    /// shared informers and a stop signal; it must return once stopped.
    #[cfg(feature = "ctrl")]
    pub fn controller<F, Fut>(mut self, name: impl Into<String>, start: F) -> Self
    where
        F: FnOnce(orchestra_ctrl::manager::ManagerContext) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        self.extra_controllers.push((name.into(), Box::new(move |ctx| Box::pin(start(ctx)))));
        self
    }

    /// Adds `count` nodes on `runtime`, named as kind names them
    /// (`orchestra-control-plane`, `orchestra-worker`, `orchestra-worker2`,
    /// ...), each on its own loopback address ([`node_ip`]).
    #[cfg(feature = "node")]
    pub fn nodes(mut self, count: usize, runtime: NodeRuntime) -> Self {
        for _ in 0..count {
            self.nodes.push(NodeSpec::new(runtime.clone()));
        }
        self
    }

    /// Adds one node as `spec` describes it.
    #[cfg(feature = "node")]
    pub fn node(mut self, spec: NodeSpec) -> Self {
        self.nodes.push(spec);
        self
    }

    /// Port of every node's HTTPS endpoint, at the node's own address (with
    /// [`Listener::Tls`]; default 0: any free port).
    #[cfg(feature = "node")]
    pub fn kubelet_port(mut self, port: u16) -> Self {
        self.kubelet_port = port;
        self
    }

    /// Runs the scheduler and the controller manager as static pods of the
    /// first node, as kubeadm lays a control plane out: manifests in
    /// `<data dir>/manifests`, mirror pods in `kube-system`, started,
    /// restarted and stopped by that node's agent.
    #[cfg(feature = "node")]
    pub fn control_plane_static_pods(mut self, on: bool) -> Self {
        self.static_pods = on;
        self
    }

    /// Starts everything and waits until every node has registered.
    pub async fn start(self) -> Result<ControlPlaneHandle, ControlPlaneError> {
        let (data_dir, temp_dir) = match &self.data_dir {
            Some(dir) => {
                // Keys, kubeconfigs and the store live here: owner only.
                orchestra_core::tls::pki::create_private_dir(dir)
                    .map_err(ControlPlaneError::io(format!("creating {}", dir.display())))?;
                (std::path::absolute(dir).map_err(ControlPlaneError::io("resolving the data directory"))?, None)
            }
            None => {
                let dir = tempfile::tempdir().map_err(ControlPlaneError::io("creating a temporary data directory"))?;
                (dir.path().to_owned(), Some(dir))
            }
        };
        let mut store = self.store.clone().unwrap_or_else(|| Arc::new(MemStore::new()));
        if let Some(config) = &self.encryption {
            store = Arc::new(EncryptedStore::new(store, config));
        }

        // Certificates and the service account key.
        let pki = match &self.listener {
            Listener::InProcess => None,
            Listener::Tls { address, pki_dir, extra_sans } => {
                let mut hosts = extra_sans.clone();
                if !address.ip().is_unspecified() {
                    hosts.push(address.ip().to_string());
                }
                Some(Pki::load_or_create(pki_dir, &hosts)?)
            }
        };
        let signer = Arc::new(match &pki {
            Some(pki) => TokenSigner::load_or_create(&pki.dir().join("sa.key"), DEFAULT_ISSUER)?,
            None => TokenSigner::generate(DEFAULT_ISSUER)?,
        });

        // The API server.
        let mut authenticators = self.authenticators;
        if pki.is_some() {
            authenticators = authenticators.first(ClientCertAuthenticator);
        }
        // In-process identities travel as a request extension, which a
        // request from the network cannot carry.
        let authenticators = authenticators.first(ExtensionAuthenticator).allow_anonymous(self.allow_anonymous);
        let mut api = ApiServer::builder(store).authenticator(authenticators).service_account_tokens(signer.clone());
        if let Some(config) = self.pod_security.clone() {
            api = api.pod_security(config);
        }
        if let Some((mutating, validating)) = self.webhook_client_auth.clone() {
            api = api.admission_webhook_client_auth(mutating, validating);
        }
        api = match self.authorization {
            Authorization::BeforeModes(chain, modes) => {
                if let Some(webhook) = self.webhook_authorizer {
                    api = api.webhook_authorizer(webhook);
                }
                if let Some(abac) = self.abac_authorizer {
                    api = api.abac_authorizer(abac);
                }
                let modes_chain = api.mode_authorizers(&modes).map_err(|e| ControlPlaneError::Config(e.to_string()))?;
                let chain = chain.then(modes_chain);
                api.authorizer(chain).rbac_bootstrap(modes.contains(&AuthorizationMode::Rbac))
            }
            Authorization::Exactly(chain) => api.authorizer(chain),
        };
        let mut extra = AdmissionChain::new();
        // Pods get their service account's token mounted where the
        // serviceaccount controller keeps accounts and a CA exists to
        // publish as `kube-root-ca.crt` (else every pod would wait for it).
        #[cfg(feature = "ctrl")]
        if pki.is_some()
            && self.controllers.as_ref().and_then(|c| c.enabled().ok()).is_some_and(|on| on.contains(&"serviceaccount"))
        {
            extra = extra.with(orchestra_core::auth::admission::ServiceAccount::new(api.object_reader()));
        }
        let chain = api.default_admission(extra.then(self.admission.unwrap_or_default()));
        if let Some(unknown) = self.disabled_admission.iter().find(|name| !chain.names().any(|n| n == name.as_str())) {
            let known = chain.names().collect::<Vec<_>>().join(", ");
            return Err(ControlPlaneError::Config(format!(
                "unknown admission plugin {unknown:?} to disable; the chain holds {known}"
            )));
        }
        api = api.admission(chain.without(&self.disabled_admission));
        if let Some(options) = self.server_options {
            api = api.options(options);
        }
        if let Some(pki) = &pki {
            let kubelet_identity = pki.issue_client("kube-apiserver-kubelet-client", Some("system:masters"))?;
            let kubelet_client = if self.verify_node_certificates {
                KubeletClient::new(&kubelet_identity, pki.ca_pem())?
            } else {
                KubeletClient::without_server_verification(&kubelet_identity)?
            };
            api = api.kubelet_client(kubelet_client);
        }
        for customize in self.customize {
            api = customize(api);
        }
        let server = api.build().await?;
        let mut running = Running::new(server.clone(), data_dir, temp_dir, signer);
        // What no container may see: the cluster's keys, store, kubeconfigs
        // and node state.
        running.hidden_paths.push(running.data_dir.clone());
        if let Listener::Tls { pki_dir, .. } = &self.listener {
            running.hidden_paths.push(std::path::absolute(pki_dir).unwrap_or_else(|_| pki_dir.clone()));
        }
        running.hidden_paths.extend(self.hidden_paths.iter().map(|p| std::path::absolute(p).unwrap_or(p.clone())));

        // The listener.
        if let (Listener::Tls { address, .. }, Some(pki)) = (&self.listener, &pki) {
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .map_err(ControlPlaneError::io(format!("binding the API server to {address}")))?;
            let address = listener.local_addr().map_err(ControlPlaneError::io("reading the listener's address"))?;
            let options = ListenOptions::default().with_tls(pki.server_tls_config()?);
            running.address = Some(address);
            running.listeners.push(tokio::spawn(orchestra_core::server::serve(
                listener,
                server.router(),
                options,
                running.listeners_stop.stopped(),
            )));
        }
        running.pki = pki;

        #[cfg(feature = "node")]
        let static_pods = self.static_pods && !self.nodes.is_empty();
        #[cfg(not(feature = "node"))]
        let static_pods = false;
        #[cfg(feature = "ctrl")]
        let controllers = self.controllers.map(|config| running.controller_config(config));

        // The scheduler and the controllers, unless the first node runs them.
        #[cfg(feature = "sched")]
        if let Some((registry, config)) = self.scheduler.clone()
            && !static_pods
        {
            running.start_scheduler(registry, config, &self.identity)?;
        }
        #[cfg(feature = "ctrl")]
        {
            if let Some(config) = controllers.clone()
                && !static_pods
            {
                running.start_controllers(config, &self.identity)?;
            }
            running.start_extra_controllers(self.extra_controllers);
        }

        // The nodes.
        #[cfg(feature = "node")]
        if !self.nodes.is_empty() {
            let control_plane = if static_pods {
                #[cfg(all(feature = "sched", feature = "ctrl"))]
                {
                    let components = static_pods::Components {
                        scheduler: self.scheduler.clone(),
                        controllers: controllers.clone(),
                        identity: self.identity.clone(),
                    };
                    Some(components.prepare(&running)?)
                }
                #[cfg(not(all(feature = "sched", feature = "ctrl")))]
                return Err(ControlPlaneError::Config(
                    "control-plane static pods need the sched and ctrl features".into(),
                ));
            } else {
                None
            };
            running.start_nodes(self.nodes, self.kubelet_port, control_plane).await?;
        }
        Ok(ControlPlaneHandle::new(running))
    }
}

/// The identity of the cluster's administrator: `system:admin` in
/// `system:masters`.
pub fn admin() -> UserInfo {
    UserInfo::new("system:admin", &["system:masters"])
}

/// `<hostname>_<pid>`: an identity for leader election that differs between
/// processes.
pub fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "orchestra".into());
    format!("{host}_{}", std::process::id())
}

/// How long running containers get to stop at shutdown before they are killed.
const CONTAINER_GRACE: Duration = Duration::from_secs(10);

#[cfg(all(test, feature = "node"))]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    #[tokio::test]
    async fn keys_kubeconfigs_and_data_directories_are_private() {
        let parent = tempfile::tempdir().unwrap();
        let data = parent.path().join("data");
        std::fs::create_dir(&data).unwrap();
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
        let cluster = ControlPlane::builder()
            .data_dir(&data)
            .listener(Listener::tls("127.0.0.1:0".parse().unwrap(), data.join("pki")))
            .without_scheduler()
            .without_controllers()
            .nodes(1, NodeRuntime::simulated())
            .start()
            .await
            .unwrap();
        cluster.write_admin_kubeconfig(&data.join("admin.kubeconfig")).unwrap();
        let mode = |path: &str| std::fs::metadata(data.join(path)).unwrap().permissions().mode() & 0o777;
        for dir in [".", "pki", "nodes/orchestra-control-plane"] {
            assert_eq!(mode(dir), 0o700, "{dir}");
        }
        for file in ["pki/ca.key", "pki/apiserver.key", "pki/admin.key", "pki/sa.key", "admin.kubeconfig"] {
            assert_eq!(mode(file), 0o600, "{file}");
        }
        cluster.shutdown().await.unwrap();
    }
}
