//! The API server: a `tower::Service` (an axum `Router`) over a [`Store`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use orchestra_core::server::ApiServer;
//! use orchestra_store::MemStore;
//!
//! let server = ApiServer::new(Arc::new(MemStore::new())).await?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! axum::serve(listener, server.router()).await?;
//! # Ok(()) }
//! ```

mod body;
mod codec;
mod crd;
mod discovery;
mod eviction;
pub mod fence;
mod field_validation;
pub mod flowcontrol;
mod follow;
mod health;
mod impersonation;
mod late_authorizer;
mod list;
pub mod metrics;
mod namespaces;
mod node_proxy;
mod objects;
mod openapi;
mod patching;
mod protobuf;
mod quotas;
mod read_cache;
mod reader;
mod reviews;
mod route;
mod services;
mod state;
mod subresources;
mod table;
mod timeout;
mod token;
mod watch;
mod watch_objects;
mod webhooks;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::Method;
use axum::response::Response;
use orchestra_store::{Error as StoreError, Store};
use serde_json::json;

pub use crate::tls::{CoalescedWrites, CopiedWrites, ListenOptions, pki, serve};
pub use discovery::KUBERNETES_VERSION;
pub(crate) use follow::{Follower, follow};
pub(crate) use list::list_prefix;
pub use node_proxy::KubeletClient;
pub(crate) use objects::generated_name;
pub use services::ServiceRanges;
pub use timeout::parse_go_duration;

use self::objects::{Target, Written, respond};
use self::route::{Query, Route};
use self::state::State;
use crate::api::{ApiError, Registry, ResourceInfo};
use crate::auth::admission::{self, AdmissionChain, NamespaceLifecycle, ResourceQuota};
use crate::auth::{
    AllowAll, Attributes, AuthenticatorChain, AuthorizerChain, Decision, ExtensionAuthenticator, UserInfo,
};

/// Tunables of the API server.
///
/// Built from [`Default`] and the `with_*` setters, so that a new setting
/// is not a breaking change:
///
/// ```
/// use std::time::Duration;
/// use orchestra_core::server::ServerOptions;
///
/// let options = ServerOptions::default()
///     .with_bookmark_interval(Duration::from_millis(200))
///     .with_request_timeout(Duration::from_secs(30));
/// assert_eq!(options.bookmark_interval, Duration::from_millis(200));
/// assert_eq!(options.request_timeout, Some(Duration::from_secs(30)));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServerOptions {
    /// How often a watch that asked for bookmarks gets one when nothing
    /// changes (upstream: about a minute).
    pub bookmark_interval: Duration,
    /// How long a request that is not long-running (not a watch, exec,
    /// attach, port-forward, proxy or log) may take before it is answered
    /// 504 `Timeout` (upstream's `--request-timeout`, one minute). `None`:
    /// no limit.
    pub request_timeout: Option<Duration>,
    /// How many requests execute at once, and how the rest wait or are
    /// refused: API Priority and Fairness by default.
    pub flow_control: flowcontrol::FlowControl,
    /// Where Services' ClusterIPs and NodePorts come from.
    pub service_ranges: ServiceRanges,
    /// How often the server checks Services' ClusterIPs and NodePorts
    /// against what is recorded as allocated (upstream: every 3 minutes).
    pub service_repair_interval: Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            bookmark_interval: Duration::from_secs(60),
            request_timeout: Some(Duration::from_secs(60)),
            flow_control: Default::default(),
            service_ranges: ServiceRanges::default(),
            service_repair_interval: Duration::from_secs(180),
        }
    }
}

impl ServerOptions {
    /// Sets [`bookmark_interval`](Self::bookmark_interval).
    pub fn with_bookmark_interval(mut self, interval: Duration) -> Self {
        self.bookmark_interval = interval;
        self
    }

    /// Sets [`request_timeout`](Self::request_timeout).
    pub fn with_request_timeout(mut self, timeout: impl Into<Option<Duration>>) -> Self {
        self.request_timeout = timeout.into();
        self
    }

    /// Sets [`flow_control`](Self::flow_control).
    pub fn with_flow_control(mut self, flow_control: flowcontrol::FlowControl) -> Self {
        self.flow_control = flow_control;
        self
    }

    /// Sets [`service_ranges`](Self::service_ranges).
    pub fn with_service_ranges(mut self, ranges: ServiceRanges) -> Self {
        self.service_ranges = ranges;
        self
    }

    /// Sets [`service_repair_interval`](Self::service_repair_interval).
    pub fn with_service_repair_interval(mut self, interval: Duration) -> Self {
        self.service_repair_interval = interval;
        self
    }
}

/// Namespaces every cluster has.
pub const SYSTEM_NAMESPACES: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];

/// A Kubernetes-compatible API server over a store.
#[derive(Clone)]
pub struct ApiServer {
    state: Arc<State>,
}

/// Builds an [`ApiServer`]: the store, the kinds served, the request
/// pipeline, the options.
///
/// By default the pipeline is closed, as kube-apiserver's recommended
/// setup: only in-process identities are authenticated (no anonymous
/// requests; [`client::in_process`](crate::client::in_process) acts as
/// `system:apiserver` in `system:masters`), authorization is `Node,RBAC`
/// ([`authorization_modes`](Self::authorization_modes)) with upstream's
/// default roles created at start, and admission runs the server's
/// [`NamespaceLifecycle`] (creates in a namespace that does not exist or is
/// terminating are refused) and
/// [`NodeRestriction`](crate::auth::admission::NodeRestriction). An open pipeline is
/// asked for by name: `.authenticator(AuthenticatorChain::new().with(ExtensionAuthenticator).allow_anonymous(true))`
/// and `.authorization_modes(&[AuthorizationMode::AlwaysAllow])`.
///
/// [`admission`](Self::admission) replaces the whole admission chain; a
/// chain that should still refuse such creates includes
/// [`namespace_lifecycle`](Self::namespace_lifecycle), first:
///
/// ```
/// # async fn demo() -> Result<(), orchestra_core::api::ApiError> {
/// use std::sync::Arc;
/// use async_trait::async_trait;
/// use orchestra_core::auth::admission::{AdmissionChain, AdmissionPlugin};
/// use orchestra_core::auth::{AllowAll, AuthorizerChain};
/// use orchestra_core::server::{ApiServer, ServerOptions};
/// use orchestra_store::MemStore;
///
/// struct Audit;
///
/// #[async_trait]
/// impl AdmissionPlugin for Audit {
///     fn name(&self) -> &str {
///         "Audit"
///     }
/// }
///
/// let builder = ApiServer::builder(Arc::new(MemStore::new()));
/// let admission = AdmissionChain::new().with(builder.namespace_lifecycle()).with(Audit);
/// let server = builder
///     .authorizer(AuthorizerChain::new().with(AllowAll))
///     .admission(admission)
///     .options(ServerOptions::default())
///     .build()
///     .await?;
/// # let _ = server;
/// # Ok(()) }
/// ```
pub struct ApiServerBuilder {
    store: Arc<dyn Store>,
    registry: Registry,
    options: ServerOptions,
    authenticator: AuthenticatorChain,
    authorizer: AuthorizerChain,
    admission: AdmissionChain,
    kubelet_client: Option<KubeletClient>,
    token_signer: Option<Arc<crate::auth::service_account::TokenSigner>>,
    bootstrap_tokens: bool,
    /// The Node authorizer's graph the server keeps, once an authorizer
    /// asked for it.
    node_graph: std::sync::OnceLock<Arc<crate::auth::node::NodeGraph>>,
    audit: Option<crate::audit::Auditor>,
    /// The RBAC cache the server keeps, once an authorizer asked for it.
    rbac: std::sync::OnceLock<Arc<crate::auth::rbac::RbacCache>>,
    rbac_bootstrap: bool,
    /// The authorizer `--authorization-mode=Webhook` stands for.
    webhook_authorizer: Option<crate::auth::WebhookAuthorizer>,
    /// The authorizer `--authorization-mode=ABAC` stands for.
    abac_authorizer: Option<crate::auth::AbacAuthorizer>,
    /// Why the authorizer chain of the last
    /// [`authorization_modes`](Self::authorization_modes) could not be made;
    /// [`build`](Self::build) fails with it.
    mode_error: Option<crate::auth::ModeError>,
    /// The namespaces the server keeps from a watch, which its
    /// [`NamespaceLifecycle`] plugins read.
    namespaces: Arc<namespaces::NamespaceCache>,
    /// The reader admission plugins get; filled when the server is built.
    objects: reader::ServerObjects,
    /// The authorizer admission plugins get; filled when the server is built.
    late_authorizer: late_authorizer::ServerAuthorizer,
    /// The webhook configurations the server keeps from a watch, once an
    /// admission webhook plugin reads them.
    webhooks: Arc<crate::auth::admission::webhook::WebhookCache>,
    /// What the admission webhook plugins present to webhooks (mutating,
    /// validating).
    webhook_client_auth: (crate::auth::admission::WebhookClientAuth, crate::auth::admission::WebhookClientAuth),
    /// The configuration of the PodSecurity plugin of
    /// [`default_admission`](Self::default_admission).
    pod_security: crate::auth::admission::PodSecurityConfig,
}

impl ApiServerBuilder {
    /// Issues service account tokens with `signer` (the TokenRequest
    /// subresource, `kubectl create token`) and accepts them as bearer
    /// tokens, ahead of the other authenticators (upstream's
    /// `--service-account-signing-key-file`).
    pub fn service_account_tokens(mut self, signer: impl Into<Arc<crate::tokens::TokenSigner>>) -> ApiServerBuilder {
        self.token_signer = Some(signer.into());
        self
    }

    /// Accepts bootstrap tokens (upstream's `--enable-bootstrap-token-auth`):
    /// Secrets of type `bootstrap.kubernetes.io/token` in `kube-system`, read
    /// through [`object_reader`](Self::object_reader), ahead of the other
    /// authenticators; see [`crate::auth::bootstrap_token`].
    ///
    /// ```
    /// # async fn demo() -> Result<(), orchestra_core::api::ApiError> {
    /// use std::sync::Arc;
    /// use orchestra_core::server::ApiServer;
    /// use orchestra_store::MemStore;
    ///
    /// let server = ApiServer::builder(Arc::new(MemStore::new())).bootstrap_tokens().build().await?;
    /// # let _ = server;
    /// # Ok(()) }
    /// ```
    pub fn bootstrap_tokens(mut self) -> ApiServerBuilder {
        self.bootstrap_tokens = true;
        self
    }

    /// How `pods/log` and `pods/exec` reach node agents (upstream's
    /// `--kubelet-client-certificate` and `--kubelet-certificate-authority`).
    /// Without it those subresources answer 503.
    pub fn kubelet_client(mut self, client: KubeletClient) -> ApiServerBuilder {
        self.kubelet_client = Some(client);
        self
    }

    /// Records every request with `auditor` (kube-apiserver's
    /// `--audit-policy-file` and `--audit-log-*`); see [`crate::audit`].
    pub fn audit(mut self, auditor: crate::audit::Auditor) -> ApiServerBuilder {
        self.audit = Some(auditor);
        self
    }

    /// Serves an additional kind (or replaces a built-in one).
    pub fn register(mut self, resource: ResourceInfo) -> ApiServerBuilder {
        self.registry.register(resource);
        self
    }

    /// Sets the options.
    pub fn options(mut self, options: ServerOptions) -> ApiServerBuilder {
        self.options = options;
        self
    }

    /// Sets the authenticator chain.
    pub fn authenticator(mut self, chain: AuthenticatorChain) -> ApiServerBuilder {
        self.authenticator = chain;
        self
    }

    /// Sets the authorizer chain. The default roles are then created only
    /// if [`rbac_bootstrap`](Self::rbac_bootstrap) asks for them again.
    pub fn authorizer(mut self, chain: AuthorizerChain) -> ApiServerBuilder {
        self.authorizer = chain;
        self.rbac_bootstrap = false;
        self.mode_error = None;
        self
    }

    /// The authorizer `Webhook` stands for in
    /// [`authorization_modes`](Self::authorization_modes) (upstream's
    /// `--authorization-webhook-config-file`); set it before naming the
    /// modes.
    pub fn webhook_authorizer(mut self, authorizer: crate::auth::WebhookAuthorizer) -> ApiServerBuilder {
        self.webhook_authorizer = Some(authorizer);
        self
    }

    /// The credentials the admission webhook plugins made after this call
    /// present to webhooks, by host (upstream's `kubeConfigFile` of each
    /// plugin's `WebhookAdmissionConfiguration`): the mutating plugin's,
    /// then the validating plugin's. Without them, webhooks are called
    /// without credentials.
    pub fn admission_webhook_client_auth(
        mut self,
        mutating: crate::auth::admission::WebhookClientAuth,
        validating: crate::auth::admission::WebhookClientAuth,
    ) -> ApiServerBuilder {
        self.webhook_client_auth = (mutating, validating);
        self
    }

    /// The authorizer `ABAC` stands for in
    /// [`authorization_modes`](Self::authorization_modes) (upstream's
    /// `--authorization-policy-file`); set it before naming the modes.
    pub fn abac_authorizer(mut self, authorizer: crate::auth::AbacAuthorizer) -> ApiServerBuilder {
        self.abac_authorizer = Some(authorizer);
        self
    }

    /// Sets the authorizer chain from upstream's `--authorization-mode`
    /// entries, in order: `Node` is [`node_authorizer`](Self::node_authorizer),
    /// `RBAC` is [`rbac_authorizer`](Self::rbac_authorizer) with the default
    /// roles created at start ([`rbac_bootstrap`](Self::rbac_bootstrap)),
    /// `AlwaysAllow` and `AlwaysDeny` allow and deny everything, `Webhook`
    /// is the [`webhook_authorizer`](Self::webhook_authorizer) and `ABAC` the
    /// [`abac_authorizer`](Self::abac_authorizer) (without them,
    /// [`build`](Self::build) fails). The default is `Node,RBAC`.
    ///
    /// ```
    /// # async fn demo() -> Result<(), orchestra_core::api::ApiError> {
    /// use std::sync::Arc;
    /// use orchestra_core::auth::AuthorizationMode;
    /// use orchestra_core::server::ApiServer;
    /// use orchestra_store::MemStore;
    ///
    /// let modes = AuthorizationMode::parse_list("RBAC").unwrap();
    /// let server = ApiServer::builder(Arc::new(MemStore::new())).authorization_modes(&modes).build().await?;
    /// # let _ = server;
    /// # Ok(()) }
    /// ```
    pub fn authorization_modes(self, modes: &[crate::auth::AuthorizationMode]) -> ApiServerBuilder {
        let rbac = modes.contains(&crate::auth::AuthorizationMode::Rbac);
        match self.mode_authorizers(modes) {
            Ok(chain) => self.authorizer(chain).rbac_bootstrap(rbac),
            Err(error) => {
                let mut builder = self.authorizer(AuthorizerChain::new());
                builder.mode_error = Some(error);
                builder
            }
        }
    }

    /// The authorizers of `modes`, in order, as
    /// [`authorization_modes`](Self::authorization_modes) makes them, for a
    /// chain of one's own; it does not ask for the default roles. Fails
    /// when `Webhook` or `ABAC` is named without a
    /// [`webhook_authorizer`](Self::webhook_authorizer) or an
    /// [`abac_authorizer`](Self::abac_authorizer).
    pub fn mode_authorizers(
        &self,
        modes: &[crate::auth::AuthorizationMode],
    ) -> Result<AuthorizerChain, crate::auth::ModeError> {
        use crate::auth::AuthorizationMode as Mode;
        let mut chain = AuthorizerChain::new();
        for mode in modes {
            chain = match mode {
                Mode::AlwaysAllow => chain.with(AllowAll),
                Mode::AlwaysDeny => chain.with(crate::auth::DenyAll),
                Mode::Node => chain.with(self.node_authorizer()),
                Mode::Rbac => chain.with(self.rbac_authorizer()),
                Mode::Webhook => match &self.webhook_authorizer {
                    Some(webhook) => chain.with(webhook.clone()),
                    None => return Err(crate::auth::ModeError::Unconfigured(Mode::Webhook)),
                },
                Mode::Abac => match &self.abac_authorizer {
                    Some(abac) => chain.with(abac.clone()),
                    None => return Err(crate::auth::ModeError::Unconfigured(Mode::Abac)),
                },
            };
        }
        Ok(chain)
    }

    /// Sets the admission chain, replacing the default one
    /// ([`default_admission`](Self::default_admission) with nothing added).
    pub fn admission(mut self, chain: AdmissionChain) -> ApiServerBuilder {
        self.admission = chain;
        self
    }

    /// The server's default admission chain with `extra` plugins in it: the
    /// plugins kube-apiserver enables by default (and NodeRestriction, which
    /// every secured cluster adds), in upstream's order, with `extra` run
    /// after them and before [`ResourceQuota`], which comes last so that
    /// nothing refuses a write after its quota was charged:
    ///
    /// NamespaceLifecycle, LimitRanger, NodeRestriction, PodSecurity (levels
    /// from namespace labels, else [`pod_security`](Self::pod_security)'s:
    /// `privileged` by default), Priority,
    /// DefaultTolerationSeconds, DefaultStorageClass, CertificateApproval,
    /// CertificateSigning, CertificateSubjectRestriction, `extra`,
    /// MutatingAdmissionWebhook, ValidatingAdmissionWebhook, ResourceQuota.
    ///
    /// ```
    /// # async fn demo() -> Result<(), orchestra_core::api::ApiError> {
    /// use std::sync::Arc;
    /// use orchestra_core::auth::admission::{AdmissionChain, DefaultTolerationSeconds};
    /// use orchestra_core::server::ApiServer;
    /// use orchestra_store::MemStore;
    ///
    /// let builder = ApiServer::builder(Arc::new(MemStore::new()));
    /// let chain = builder.default_admission(AdmissionChain::new());
    /// assert_eq!(chain.names().last(), Some("ResourceQuota"));
    /// assert!(chain.names().any(|name| name == DefaultTolerationSeconds::NAME));
    /// let server = builder.admission(chain).build().await?;
    /// # let _ = server;
    /// # Ok(()) }
    /// ```
    pub fn default_admission(&self, extra: AdmissionChain) -> AdmissionChain {
        use crate::auth::admission::{
            DefaultStorageClass, DefaultTolerationSeconds, LimitRanger, PodSecurity, Priority,
        };
        let objects = self.object_reader();
        AdmissionChain::new()
            .with(self.namespace_lifecycle())
            .with(LimitRanger::new(objects.clone()))
            .with(self.node_restriction())
            .with(PodSecurity::new(objects.clone(), self.pod_security.clone()))
            .with(Priority::new(objects.clone()))
            .with(DefaultTolerationSeconds::new())
            .with(DefaultStorageClass::new(objects))
            .with(self.certificate_approval())
            .with(self.certificate_signing())
            .with(crate::auth::admission::CertificateSubjectRestriction::new())
            .then(extra)
            .with(self.mutating_admission_webhook())
            .with(self.validating_admission_webhook())
            .with(self.resource_quota())
    }

    /// The [`MutatingAdmissionWebhook`](crate::auth::admission::MutatingAdmissionWebhook)
    /// plugin of the server being built, for an admission chain of one's
    /// own. It reads the MutatingWebhookConfigurations from a cache the
    /// server fills from its store before it serves and keeps current from
    /// a watch (so a configuration just written applies a moment later, as
    /// upstream's), and namespaces through
    /// [`object_reader`](Self::object_reader).
    ///
    /// ```
    /// # async fn demo() -> Result<(), orchestra_core::api::ApiError> {
    /// use std::sync::Arc;
    /// use orchestra_core::auth::admission::AdmissionChain;
    /// use orchestra_core::server::ApiServer;
    /// use orchestra_store::MemStore;
    ///
    /// let builder = ApiServer::builder(Arc::new(MemStore::new()));
    /// let admission = AdmissionChain::new()
    ///     .with(builder.namespace_lifecycle())
    ///     .with(builder.mutating_admission_webhook())
    ///     .with(builder.validating_admission_webhook());
    /// let server = builder.admission(admission).build().await?;
    /// # let _ = server;
    /// # Ok(()) }
    /// ```
    pub fn mutating_admission_webhook(&self) -> crate::auth::admission::MutatingAdmissionWebhook {
        let dispatcher = self.webhook_dispatcher(crate::auth::admission::webhook::Kind::Mutating);
        crate::auth::admission::MutatingAdmissionWebhook::with_dispatcher(dispatcher)
    }

    /// The [`ValidatingAdmissionWebhook`](crate::auth::admission::ValidatingAdmissionWebhook)
    /// plugin of the server being built, reading ValidatingWebhookConfigurations
    /// as [`mutating_admission_webhook`](Self::mutating_admission_webhook)
    /// reads its configurations.
    pub fn validating_admission_webhook(&self) -> crate::auth::admission::ValidatingAdmissionWebhook {
        let dispatcher = self.webhook_dispatcher(crate::auth::admission::webhook::Kind::Validating);
        crate::auth::admission::ValidatingAdmissionWebhook::with_dispatcher(dispatcher)
    }

    /// The calls of one admission webhook plugin: configurations from the
    /// server's watch-fed cache, the plugin's client credentials.
    fn webhook_dispatcher(
        &self,
        kind: crate::auth::admission::webhook::Kind,
    ) -> crate::auth::admission::webhook::Dispatcher {
        use crate::auth::admission::webhook::{Dispatcher, Kind};
        let configurations =
            Arc::new(webhooks::ServerWebhooks { cache: self.webhooks.clone(), objects: self.objects.clone() });
        let (mutating, validating) = &self.webhook_client_auth;
        let auth = if kind == Kind::Mutating { mutating } else { validating };
        Dispatcher::new(kind, configurations, self.object_reader()).with_auth(auth.clone())
    }

    /// How the PodSecurity plugin of the
    /// [`default_admission`](Self::default_admission) chain decides for
    /// namespaces without labels (default: every level `privileged`, as
    /// upstream). Makes the server's chain the default one again with it:
    /// call it before [`admission`](Self::admission).
    ///
    /// ```
    /// # async fn demo() -> Result<(), orchestra_core::api::ApiError> {
    /// use std::sync::Arc;
    /// use orchestra_core::auth::admission::{PodSecurityConfig, PodSecurityLevel};
    /// use orchestra_core::server::ApiServer;
    /// use orchestra_store::MemStore;
    ///
    /// // hostPath volumes, privileged containers and host namespaces are
    /// // refused in namespaces without a `pod-security.kubernetes.io/enforce`
    /// // label, except in kube-system.
    /// let config = PodSecurityConfig::default().enforce(PodSecurityLevel::Baseline).exempt_namespaces(["kube-system"]);
    /// let server = ApiServer::builder(Arc::new(MemStore::new())).pod_security(config).build().await?;
    /// # let _ = server;
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
    /// ```
    pub fn pod_security(mut self, config: crate::auth::admission::PodSecurityConfig) -> ApiServerBuilder {
        self.pod_security = config;
        self.admission = self.default_admission(AdmissionChain::new());
        self
    }

    /// The [`NamespaceLifecycle`] plugin of the server being built, for an
    /// admission chain of one's own. It reads namespaces through the
    /// server: from a cache the server keeps from a watch of its store and
    /// updates on its own namespace deletes, and from the store itself for
    /// any namespace the cache does not know to be active.
    pub fn namespace_lifecycle(&self) -> NamespaceLifecycle {
        NamespaceLifecycle::new(namespaces::ServerNamespaces {
            cache: self.namespaces.clone(),
            store: self.store.clone(),
        })
    }

    /// The authorizer chain of the server being built, for admission
    /// plugins that ask it (CertificateApproval, CertificateSigning): it
    /// decides with the chain the server ends up with, whatever
    /// [`authorizer`](Self::authorizer) sets later. Before
    /// [`build`](Self::build) it denies everything.
    pub fn server_authorizer(&self) -> Arc<dyn crate::auth::Authorizer> {
        Arc::new(self.late_authorizer.clone())
    }

    /// The [`CertificateApproval`](crate::auth::admission::CertificateApproval)
    /// plugin of the server being built, deciding with
    /// [`server_authorizer`](Self::server_authorizer).
    pub fn certificate_approval(&self) -> crate::auth::admission::CertificateApproval {
        crate::auth::admission::CertificateApproval::new(self.server_authorizer())
    }

    /// The [`CertificateSigning`](crate::auth::admission::CertificateSigning)
    /// plugin of the server being built, deciding with
    /// [`server_authorizer`](Self::server_authorizer).
    pub fn certificate_signing(&self) -> crate::auth::admission::CertificateSigning {
        crate::auth::admission::CertificateSigning::new(self.server_authorizer())
    }

    /// The [`NodeRestriction`](crate::auth::admission::NodeRestriction)
    /// plugin of the server being built, for an admission chain of one's
    /// own; it reads pods through [`object_reader`](Self::object_reader).
    pub fn node_restriction(&self) -> crate::auth::admission::NodeRestriction {
        crate::auth::admission::NodeRestriction::new(self.object_reader())
    }

    /// The [`ResourceQuota`] admission plugin of the server being built, for
    /// an admission chain of one's own: it reads the quotas of a namespace
    /// from the store and charges them by writing their `status.used` with
    /// a compare-and-swap on their resource version. Every plugin this
    /// returns charges the same quotas; admission before
    /// [`build`](Self::build) fails with 503.
    ///
    /// ```
    /// # async fn demo() -> Result<(), orchestra_core::api::ApiError> {
    /// use std::sync::Arc;
    /// use orchestra_core::auth::admission::AdmissionChain;
    /// use orchestra_core::server::ApiServer;
    /// use orchestra_store::MemStore;
    ///
    /// let builder = ApiServer::builder(Arc::new(MemStore::new()));
    /// let admission = AdmissionChain::new().with(builder.namespace_lifecycle()).with(builder.resource_quota());
    /// let server = builder.admission(admission).build().await?;
    /// # let _ = server;
    /// # Ok(()) }
    /// ```
    pub fn resource_quota(&self) -> ResourceQuota {
        ResourceQuota::new(Arc::new(quotas::ServerQuotas { objects: self.objects.clone() }))
    }

    /// An [`ObjectReader`](crate::auth::admission::ObjectReader) over the
    /// server being built, for admission plugins of one's own: it reads
    /// objects from the store as the API serves them. Reads made before
    /// [`build`](Self::build) fail with 503.
    pub fn object_reader(&self) -> Arc<dyn crate::auth::admission::ObjectReader> {
        Arc::new(self.objects.clone())
    }

    /// An [`RbacAuthorizer`](crate::auth::rbac::RbacAuthorizer) deciding from this
    /// server's Roles, ClusterRoles, RoleBindings and ClusterRoleBindings,
    /// for an authorizer chain of one's own. The server fills its cache from
    /// the store before it serves and keeps it current from a watch; every
    /// authorizer this returns shares that cache.
    ///
    /// It does not put the authorizer in the chain: see [`rbac`](Self::rbac).
    pub fn rbac_authorizer(&self) -> crate::auth::rbac::RbacAuthorizer {
        crate::auth::rbac::RbacAuthorizer::new(self.rbac.get_or_init(Default::default).clone())
    }

    /// A [`NodeAuthorizer`](crate::auth::node::NodeAuthorizer) deciding from
    /// the pods bound to each node of this server, for an authorizer chain
    /// of one's own (upstream's `--authorization-mode=Node`, placed before
    /// RBAC). The server fills its graph from the store before it serves and
    /// keeps it current from a watch; every authorizer this returns shares
    /// that graph.
    pub fn node_authorizer(&self) -> crate::auth::node::NodeAuthorizer {
        let graph = self.node_graph.get_or_init(Default::default).clone();
        let prefix = |group: &str, plural: &str| {
            self.registry.get(group, "v1", plural).map(|info| info.storage_prefix()).unwrap_or_default()
        };
        let lookup = crate::auth::node::Lookup {
            store: self.store.clone(),
            pods: prefix("", "pods"),
            volumes: prefix("", "persistentvolumes"),
            attachments: prefix("storage.k8s.io", "volumeattachments"),
        };
        crate::auth::node::NodeAuthorizer::with_lookup(graph, lookup)
    }

    /// Whether the server creates upstream's default ClusterRoles and
    /// ClusterRoleBindings when it starts and reconciles those it finds
    /// ([`crate::auth::rbac::bootstrap`]; upstream does so whenever RBAC is
    /// on). Default: no.
    pub fn rbac_bootstrap(mut self, ensure: bool) -> ApiServerBuilder {
        self.rbac_bootstrap = ensure;
        self
    }

    /// Authorizes with RBAC alone (upstream's `--authorization-mode=RBAC`),
    /// replacing the authorizer chain, and creates the default roles and
    /// bindings ([`rbac_bootstrap`](Self::rbac_bootstrap)). Group
    /// `system:masters` may do anything (`cluster-admin`); others what the
    /// roles bound to them allow.
    ///
    /// ```
    /// # async fn demo() -> Result<(), orchestra_core::api::ApiError> {
    /// use std::sync::Arc;
    /// use orchestra_core::server::ApiServer;
    /// use orchestra_store::MemStore;
    ///
    /// let server = ApiServer::builder(Arc::new(MemStore::new())).rbac().build().await?;
    /// # let _ = server;
    /// # Ok(()) }
    /// ```
    pub fn rbac(self) -> ApiServerBuilder {
        self.authorization_modes(&[crate::auth::AuthorizationMode::Rbac])
    }

    /// Builds the server and makes sure the system namespaces and the
    /// built-in PriorityClasses (`system-node-critical`,
    /// `system-cluster-critical`) exist.
    pub async fn build(self) -> Result<ApiServer, ApiError> {
        if let Some(error) = self.mode_error {
            return Err(ApiError::bad_request(error.to_string()));
        }
        let objects = self.object_reader();
        let mut authenticator = self.authenticator;
        if let Some(signer) = &self.token_signer {
            let audiences = vec![signer.issuer().to_owned()];
            let tokens = crate::auth::service_account::ServiceAccountAuthenticator::new(
                signer.clone(),
                self.store.clone(),
                audiences,
            );
            authenticator = authenticator.first(tokens);
        }
        if self.bootstrap_tokens {
            let tokens = crate::auth::bootstrap_token::BootstrapTokenAuthenticator::new(objects);
            authenticator = authenticator.first(tokens);
        }
        let mut admission = self.admission;
        if let Some(cache) = self.rbac.get().filter(|cache| Arc::strong_count(cache) > 1) {
            // Whenever RBAC authorizes, writes of roles and bindings may not
            // grant more than their writer holds.
            let rbac = crate::auth::rbac::RbacAuthorizer::new(cache.clone());
            let guard = crate::auth::rbac::RbacEscalation::new(rbac, self.authorizer.clone());
            admission = AdmissionChain::new().with(guard).then(admission);
        }
        let _ = self.late_authorizer.chain.set(self.authorizer.clone());
        let pipeline = (authenticator, self.authorizer, admission);
        let cached =
            read_cache::CACHED.iter().filter_map(|(group, version, plural)| self.registry.get(group, version, plural));
        let read_cache = Arc::new(read_cache::ReadCache::new(cached.collect()));
        let store: Arc<dyn Store> = Arc::new(read_cache::FeedingStore { inner: self.store, cache: read_cache.clone() });
        let mut state = State::new(store, self.registry, self.options, pipeline);
        state.read_cache = read_cache.clone();
        state.namespaces = self.namespaces;
        state.kubelet_client = self.kubelet_client;
        state.token_signer = self.token_signer;
        state.audit = self.audit;
        let server = ApiServer { state: Arc::new(state) };
        let _ = self.objects.state.set(Arc::downgrade(&server.state));
        server.bootstrap().await?;
        let (store, registry) = (&server.state.store, server.state.registry());
        if let Some(info) = registry.get("", "v1", "services") {
            let interval = server.state.options.service_repair_interval;
            services::spawn_repair(Arc::downgrade(&server.state), info.storage_prefix(), interval);
        }
        if self.rbac_bootstrap {
            crate::auth::rbac::bootstrap::ensure(store, &registry).await?;
        }
        // The caches are kept only while some authorizer decides from them
        // (the builder's own reference aside).
        if let Some(graph) = self.node_graph.get().filter(|graph| Arc::strong_count(graph) > 1) {
            for (group, plural) in
                [("", "pods"), ("", "persistentvolumeclaims"), ("storage.k8s.io", "volumeattachments")]
            {
                let Some(info) = registry.get(group, "v1", plural) else { continue };
                follow(graph, store, info.storage_prefix(), "Node authorizer").await.map_err(ApiError::internal)?;
            }
        }
        if let Some(cache) = self.rbac.get().filter(|cache| Arc::strong_count(cache) > 1) {
            crate::auth::rbac::start(cache, store, &registry).await?;
        }
        for prefix in read_cache.prefixes() {
            follow(&read_cache, store, prefix.to_owned(), "admission reads").await.map_err(ApiError::internal)?;
        }
        if Arc::strong_count(&self.webhooks) > 1 {
            self.webhooks.start();
            for kind in
                [crate::auth::admission::webhook::Kind::Mutating, crate::auth::admission::webhook::Kind::Validating]
            {
                let Some(info) = registry.get("admissionregistration.k8s.io", "v1", kind.plural()) else {
                    // Not served: no configuration of the kind can exist.
                    follow::Follower::reset(&*self.webhooks, kind.plural(), Vec::new());
                    continue;
                };
                follow(&self.webhooks, store, info.storage_prefix(), "admission webhooks")
                    .await
                    .map_err(ApiError::internal)?;
            }
        }
        Ok(server)
    }
}

impl ApiServer {
    /// A server with the built-in kinds and default options.
    pub async fn new(store: Arc<dyn Store>) -> Result<ApiServer, ApiError> {
        ApiServer::builder(store).build().await
    }

    /// Starts building a server, with the defaults [`ApiServerBuilder`]
    /// describes.
    pub fn builder(store: Arc<dyn Store>) -> ApiServerBuilder {
        let mut builder = ApiServerBuilder {
            store,
            registry: Registry::builtin(),
            options: ServerOptions::default(),
            authenticator: AuthenticatorChain::new().with(ExtensionAuthenticator),
            authorizer: AuthorizerChain::new(),
            admission: AdmissionChain::new(),
            kubelet_client: None,
            token_signer: None,
            bootstrap_tokens: false,
            node_graph: Default::default(),
            audit: None,
            rbac: Default::default(),
            rbac_bootstrap: false,
            webhook_authorizer: None,
            abac_authorizer: None,
            mode_error: None,
            namespaces: Default::default(),
            objects: Default::default(),
            late_authorizer: Default::default(),
            webhooks: Default::default(),
            webhook_client_auth: Default::default(),
            pod_security: Default::default(),
        };
        builder.admission = builder.default_admission(AdmissionChain::new());
        let default_modes = [crate::auth::AuthorizationMode::Node, crate::auth::AuthorizationMode::Rbac];
        builder.authorization_modes(&default_modes)
    }

    /// The store behind the server.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.state.store
    }

    /// The server's metrics (served on `/metrics`); embedding programs may
    /// add their own.
    pub fn metrics(&self) -> &metrics::Metrics {
        &self.state.metrics
    }

    /// The server as a tower `Service` (an axum `Router`).
    pub fn router(&self) -> axum::Router {
        let state = self.state.clone();
        axum::Router::new().fallback(move |request: Request| {
            let state = state.clone();
            async move { handle(state, request).await }
        })
    }

    async fn bootstrap(&self) -> Result<(), ApiError> {
        let registry = self.state.registry();
        let Some(namespaces) = registry.get("", "v1", "namespaces") else {
            return Ok(());
        };
        let mut system_objects = Vec::new();
        for name in SYSTEM_NAMESPACES {
            let object = json!({
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            });
            system_objects.push((namespaces.clone(), object));
        }
        // The built-in PriorityClasses, which upstream's API server creates at start too.
        if let Some(classes) = registry.get("scheduling.k8s.io", "v1", "priorityclasses") {
            system_objects.extend(admission::Priority::system_classes().into_iter().map(|c| (classes.clone(), c)));
        }
        for (resource, mut object) in system_objects {
            let key = resource.storage_key(None, object["metadata"]["name"].as_str().unwrap_or_default());
            object["metadata"]["uid"] = uuid::Uuid::new_v4().to_string().into();
            object["metadata"]["creationTimestamp"] = crate::api::meta::now_rfc3339().into();
            match self.state.store.create(&key, codec::encode(&resource, &object), None).await {
                Ok(_) | Err(StoreError::AlreadyExists { .. }) => {}
                Err(e) => return Err(ApiError::internal(e)),
            }
        }
        let loaded = crd::load_all(&self.state).await?;
        crd::spawn(&self.state, loaded);
        namespaces::spawn(&self.state);
        Ok(())
    }
}

/// Serves one request and records its metrics. A panic in its handling is
/// answered 500 and the server goes on; a request that is not long-running
/// and outlives the request timeout is answered 504, as upstream.
async fn handle(state: Arc<State>, mut request: Request) -> Response {
    use futures::FutureExt as _;
    let started = std::time::Instant::now();
    let mut labels = metrics::RequestLabels::default();
    let audit = state.audit.as_ref().map(|auditor| crate::audit::Record::begin(auditor, &mut request));
    let long_running = flowcontrol::LongRunning::of(request.uri().path(), request.uri().query());
    let method = request.method().clone();
    let timeout = match long_running {
        flowcontrol::LongRunning::No => match timeout::deadline(request.uri().query(), state.options.request_timeout) {
            Ok(timeout) => timeout,
            Err(error) => return body::error(&error),
        },
        _ => None,
    };
    // Holds the request's seat until its response (a watch's: its start) is out.
    let mut admitted = None;
    let served = std::panic::AssertUnwindSafe(dispatch(&state, request, long_running, &mut labels, &mut admitted))
        .catch_unwind();
    // Admission plugins' warnings become `Warning` headers of the response,
    // their audit annotations annotations of the request's audit events.
    let (outcome, notes) = admission::collect_notes(async move {
        match timeout {
            Some(timeout) => tokio::time::timeout(timeout, served).await.unwrap_or_else(|_| {
                Ok(body::error(&ApiError::timeout("request did not complete within the allotted timeout")))
            }),
            None => served.await,
        }
    })
    .await;
    let panicked = outcome.is_err();
    let mut response = outcome.unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("a non-text panic payload");
        if let Some(record) = &audit {
            record.panicked();
        }
        tracing::error!(%method, request = ?labels, panic = message, "a request handler panicked; answered 500");
        body::error(&ApiError::internal("This request caused apiserver to panic. Look in the logs for details."))
    });
    body::add_warnings(&mut response, &notes.warnings);
    if let Some(record) = audit.filter(|_| !panicked) {
        record.annotate(notes.audit_annotations);
        response = record.finish(response).await;
    }
    if let Some(admitted) = &admitted {
        flowcontrol::Admitted::stamp(admitted, response.headers_mut());
    }
    if labels.verb.is_empty() {
        return response;
    }
    state.metrics.observe(&labels, response.status().as_u16(), started.elapsed());
    if labels.verb == "WATCH" && response.status().is_success() {
        let guard = state.metrics.long_running(&labels);
        return response.map(|body| {
            use http_body_util::BodyExt as _;
            axum::body::Body::new(body.map_frame(move |frame| {
                let _counted_until_the_stream_ends = &guard;
                frame
            }))
        });
    }
    response
}

/// Routes one request through authentication, flow control, authorization
/// and the handlers; fills `labels` once the request is understood, and
/// `admitted` once flow control let it execute.
async fn dispatch(
    state: &Arc<State>,
    request: Request,
    long_running: flowcontrol::LongRunning,
    labels: &mut metrics::RequestLabels,
    admitted: &mut Option<flowcontrol::Admitted>,
) -> Response {
    let (parts, body_stream) = request.into_parts();
    let registry = state.registry();
    let route = match Route::parse(parts.uri.path(), &registry) {
        Ok(route) => route,
        Err(error) => return body::error(&error),
    };
    let query = match Query::parse(parts.uri.query()) {
        Ok(query) => query,
        Err(error) => return body::error(&error),
    };
    let method = parts.method.clone();
    let user = match state.authenticator.authenticate(&parts).await {
        Ok(user) => user,
        Err(error) => {
            tracing::debug!(%error, path = %parts.uri.path(), "authentication failed");
            let anonymous = attributes(&route, &method, &query, UserInfo::default(), parts.uri.path());
            crate::audit::Record::note(&parts.extensions, &anonymous, None);
            return body::error(&ApiError::unauthorized());
        }
    };
    let user = match impersonation::acting_user(state, &parts.headers, parts.uri.path(), user).await {
        Ok(user) => user,
        Err(error) => return body::error(&error),
    };
    let attributes = attributes(&route, &method, &query, user, parts.uri.path());
    *labels = metric_labels(&attributes, &route, is_apply_patch(&parts.headers));
    match state.flow_control.admit(&attributes, long_running).await {
        Ok(seat) => *admitted = Some(seat),
        Err(refused) => return refused,
    }
    let decision = state.authorizer.authorize(&attributes).await;
    crate::audit::Record::note(&parts.extensions, &attributes, Some(&decision));
    if let Decision::Deny(reason) = decision {
        return body::error(&forbidden(&attributes, &reason));
    }
    let user = attributes.user;
    let headers = &parts.headers;
    let fenced = match headers.get(fence::HEADER).map(|v| {
        v.to_str().map_err(|e| e.to_string()).and_then(|v| fence::LeaseFence::parse(v).map_err(|e| e.to_string()))
    }) {
        None => None,
        Some(Ok(term)) => match fence::fenced_store(term, state.store.clone(), &registry) {
            Ok(store) => Some(store),
            Err(e) => return body::error(&e),
        },
        Some(Err(message)) => return body::error(&ApiError::bad_request(message)),
    };
    let extensions = &parts.extensions;
    let read = |body_stream| async move {
        let bytes = body::read_body(body_stream, headers).await;
        if let Ok(bytes) = &bytes
            && extensions.get::<crate::audit::Record>().is_some()
        {
            // The audit log holds request objects as JSON, whatever their
            // encoding on the wire (kubectl sends protobuf for built-in kinds).
            let json = match body::object_format(&body::content_type(headers)) {
                Some(body::Format::Json) => None,
                _ => body::decode_object(bytes, headers).ok().and_then(|object| serde_json::to_vec(&object).ok()),
            };
            crate::audit::Record::request_body(extensions, &json.map_or_else(|| bytes.clone(), bytes::Bytes::from));
        }
        bytes
    };
    if let Route::Collection { resource, .. } | Route::Object { resource, .. } = &route
        && let Some(review) = crate::api::review::ReviewKind::of_resource(resource)
    {
        let collection = matches!(route, Route::Collection { .. });
        let result = match read(body_stream).await {
            Ok(bytes) => reviews::serve(state, resource, review, &method, collection, &user, headers, &bytes).await,
            Err(e) => Err(e),
        };
        return respond(result, Written::Created);
    }
    match route {
        Route::Version if method == Method::GET => discovery::version(),
        Route::Health if method == Method::GET => health::check(state, parts.uri.path(), parts.uri.query()).await,
        Route::Metrics if method == Method::GET => {
            body::text_with_type(200, state.metrics.render(), metrics::CONTENT_TYPE)
        }
        Route::CoreVersions if method == Method::GET => discovery::core_versions(&registry, headers),
        Route::Groups if method == Method::GET => discovery::groups(&registry, headers),
        Route::OpenApiV3 { path } if method == Method::GET => openapi::serve(&state.openapi, &registry, &path, headers),
        Route::OpenApiV2 if method == Method::GET => openapi::serve_v2(&state.openapi, &registry, headers),
        Route::GroupVersion { group, version } if method == Method::GET => {
            discovery::group_version(&registry, &group, &version)
        }
        Route::Collection { resource, namespace } => {
            let target = Target { resource, namespace, user, fenced };
            let output = match method {
                Method::GET | Method::POST => {
                    match table::negotiate(headers, parts.uri.query(), query.watch && method == Method::GET) {
                        Ok(output) => output,
                        Err(e) => return body::error(&e),
                    }
                }
                _ => table::Output::Json,
            };
            match method {
                Method::GET if query.watch => watch::watch(state.clone(), target, query, output).await,
                Method::GET if output == table::Output::Json => match list::list_json(state, &target, &query).await {
                    Ok(bytes) => body::json_bytes(200, bytes, "application/json"),
                    Err(e) => body::error(&e),
                },
                Method::GET => table::respond(
                    list::list(state, &target, &query).await,
                    output,
                    &table::printer_of(&target.resource),
                    true,
                ),
                Method::POST => match read(body_stream).await.and_then(|bytes| {
                    let checked = field_validation::check(
                        &state.openapi,
                        &registry,
                        &target.resource,
                        None,
                        &method,
                        &query,
                        headers,
                        &bytes,
                    )?;
                    Ok(checked.with_body(bytes))
                }) {
                    Ok((mut checked, bytes)) => {
                        let object = checked.object(&bytes, headers);
                        // The body is not needed past its decoding.
                        drop(bytes);
                        let answer = match output {
                            table::Output::Json => objects::Answer::Json,
                            _ => objects::Answer::Object,
                        };
                        let created = match object {
                            Ok(object) => objects::create(state, &target, &query, headers, object, answer).await,
                            Err(e) => Err(e),
                        };
                        checked.finish(match created {
                            Ok(created) if answer == objects::Answer::Json => {
                                body::json_bytes(201, created.json(&target.resource), "application/json")
                            }
                            other => respond_write(
                                other.map(|c| c.into_object(&target.resource)),
                                Written::Created,
                                output,
                                &target,
                            ),
                        })
                    }
                    Err(e) => body::error(&e),
                },
                Method::DELETE => match read(body_stream).await {
                    Ok(bytes) => {
                        respond(objects::delete_collection(state, &target, &query, &bytes).await, Written::Changed)
                    }
                    Err(e) => body::error(&e),
                },
                _ => body::error(&ApiError::method_not_allowed(format!("{method} is not supported on a collection"))),
            }
        }
        Route::Object { resource, namespace, name, subresource } => {
            let target = Target { resource, namespace, user, fenced };
            let sub = subresource.as_deref();
            if let Some(sub) = sub
                && !target.resource.has_subresource(sub)
            {
                return body::error(&ApiError::no_route(parts.uri.path()));
            }
            let bytes = match method {
                Method::GET => bytes::Bytes::new(),
                _ => match read(body_stream).await {
                    Ok(bytes) => bytes,
                    Err(e) => return body::error(&e),
                },
            };
            let write_output = match method {
                Method::PUT | Method::PATCH if matches!(sub, None | Some("status" | "approval")) => {
                    match table::negotiate(headers, parts.uri.query(), false) {
                        Ok(output) => output,
                        Err(e) => return body::error(&e),
                    }
                }
                _ => table::Output::Json,
            };
            let (mut checked, bytes) = match field_validation::check(
                &state.openapi,
                &registry,
                &target.resource,
                sub,
                &method,
                &query,
                headers,
                &bytes,
            ) {
                Ok(checked) => checked.with_body(bytes),
                Err(e) => return body::error(&e),
            };
            let response = match (sub, &method) {
                (None | Some("status" | "approval"), &Method::GET) => {
                    match table::negotiate(headers, parts.uri.query(), false) {
                        Ok(table::Output::Json) => match objects::get_json(state, &target, &name).await {
                            Ok(bytes) => body::json_bytes(200, bytes, "application/json"),
                            Err(e) => body::error(&e),
                        },
                        Ok(output) => table::respond(
                            objects::get(state, &target, &name).await,
                            output,
                            &table::printer_of(&target.resource),
                            false,
                        ),
                        Err(e) => body::error(&e),
                    }
                }
                (None | Some("status" | "approval"), &Method::PUT) => respond_write(
                    match checked.object(&bytes, headers) {
                        Ok(new) => objects::update(state, &target, &name, sub, &query, headers, new).await,
                        Err(e) => Err(e),
                    },
                    Written::Changed,
                    write_output,
                    &target,
                ),
                (None | Some("status" | "approval"), &Method::PATCH) => {
                    let result = objects::patch(state, &target, &name, sub, &query, headers, &bytes).await;
                    let written = result.as_ref().map_or(Written::Changed, |(_, written)| *written);
                    respond_write(result.map(|(object, _)| object), written, write_output, &target)
                }
                (None, &Method::DELETE) => {
                    respond(objects::delete(state, &target, &name, &query, &bytes).await, Written::Changed)
                }
                (Some("finalize"), &Method::PUT) => {
                    respond(subresources::finalize(state, &target, &name, headers, &bytes).await, Written::Changed)
                }
                (Some("token"), &Method::POST) => {
                    respond(token::create(state, &target, &name, headers, &bytes).await, Written::Created)
                }
                (Some("binding"), &Method::POST) => {
                    respond(subresources::bind(state, &target, &name, headers, &bytes).await, Written::Created)
                }
                (Some("eviction"), &Method::POST) => {
                    respond(eviction::evict(state, &target, &name, &query, headers, &bytes).await, Written::Created)
                }
                (Some("log"), &Method::GET) => node_proxy::pod_log(state, &target, &name, parts.uri.query())
                    .await
                    .unwrap_or_else(|e| body::error(&e)),
                (Some("exec"), &Method::GET | &Method::POST) => {
                    let upgrade = parts.extensions.get::<hyper::upgrade::OnUpgrade>().cloned();
                    node_proxy::pod_exec(state, &target, &name, parts.uri.query(), headers, upgrade)
                        .await
                        .unwrap_or_else(|e| body::error(&e))
                }
                (Some("scale"), &Method::GET) => match table::negotiate(headers, parts.uri.query(), false) {
                    Ok(output) => table::respond(
                        subresources::get_scale(state, &target, &name).await,
                        output,
                        &crate::api::table::scale_printer(),
                        false,
                    ),
                    Err(e) => body::error(&e),
                },
                (Some("scale"), &Method::PUT | &Method::PATCH) => respond(
                    subresources::update_scale(state, &target, &name, &method, &query, headers, &bytes).await,
                    Written::Changed,
                ),
                _ => body::error(&ApiError::method_not_allowed(format!(
                    "{method} is not supported on {}{}",
                    target.resource.plural,
                    sub.map(|s| format!("/{s}")).unwrap_or_default()
                ))),
            };
            checked.finish(response)
        }
        _ => body::error(&ApiError::method_not_allowed(format!("{method} is not supported on {}", parts.uri.path()))),
    }
}

/// The answer to a create, update or patch: the object, or its one-row
/// Table (or YAML) when the client asked for one, like upstream, with the
/// status of what the write did.
fn respond_write(
    result: Result<serde_json::Value, ApiError>,
    written: Written,
    output: table::Output,
    target: &Target,
) -> Response {
    if output == table::Output::Json {
        return respond(result, written);
    }
    let mut response = table::respond(result, output, &table::printer_of(&target.resource), false);
    if written == Written::Created && response.status() == axum::http::StatusCode::OK {
        *response.status_mut() = axum::http::StatusCode::CREATED;
    }
    response
}

/// True for server-side apply requests (metric verb `APPLY`).
fn is_apply_patch(headers: &axum::http::HeaderMap) -> bool {
    body::content_type(headers) == "application/apply-patch+yaml"
}

/// The metric labels of a request, named as kube-apiserver names them.
fn metric_labels(attributes: &Attributes, route: &Route, is_apply: bool) -> metrics::RequestLabels {
    let version = match route {
        Route::Collection { resource, .. } | Route::Object { resource, .. } => resource.version.clone(),
        _ => String::new(),
    };
    let verb = match attributes.verb.as_str() {
        "list" => "LIST",
        "watch" => "WATCH",
        "get" => "GET",
        "create" => "POST",
        "update" => "PUT",
        "patch" if is_apply => "APPLY",
        "patch" => "PATCH",
        "delete" | "deletecollection" => "DELETE",
        other => return metrics::RequestLabels { verb: other.to_ascii_uppercase(), ..Default::default() },
    };
    let scope = match route {
        Route::Object { .. } => "resource",
        Route::Collection { namespace: Some(_), resource } if resource.namespaced => "namespace",
        _ => "cluster",
    };
    metrics::RequestLabels {
        verb: verb.into(),
        group: attributes.api_group.clone(),
        version,
        resource: attributes.resource.clone(),
        subresource: attributes.subresource.clone(),
        scope: scope.into(),
    }
}

/// What the authorizer is asked about a request.
fn attributes(route: &Route, method: &Method, query: &Query, user: UserInfo, path: &str) -> Attributes {
    let mut attributes = Attributes { user, path: path.to_owned(), ..Default::default() };
    let (resource, namespace, name, subresource, collection) = match route {
        Route::Collection { resource, namespace } => (resource, namespace, None, None, true),
        Route::Object { resource, namespace, name, subresource } => {
            (resource, namespace, Some(name), subresource.as_ref(), false)
        }
        _ => {
            attributes.verb = method.as_str().to_ascii_lowercase();
            return attributes;
        }
    };
    attributes.resource_request = true;
    attributes.verb = match (method.as_str(), collection) {
        ("GET", true) if query.watch => "watch",
        ("GET", true) => "list",
        // Streams into a pod run something: `create`, even for the GET of
        // a WebSocket upgrade (upstream's AuthorizePodWebsocketUpgradeCreatePermission).
        ("GET", false)
            if resource.group.is_empty()
                && resource.plural == "pods"
                && subresource.is_some_and(|s| ["exec", "attach", "portforward"].contains(&s.as_str())) =>
        {
            "create"
        }
        ("GET", false) => "get",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "deletecollection",
        ("DELETE", false) => "delete",
        (other, _) => {
            return Attributes { verb: other.to_ascii_lowercase(), ..attributes };
        }
    }
    .into();
    attributes.api_group = resource.group.clone();
    attributes.resource = resource.plural.clone();
    attributes.namespace = namespace.clone().unwrap_or_default();
    attributes.name = match name {
        Some(name) => name.clone(),
        // A list or watch of one object names it in a field selector; the
        // authorizers see that name, as upstream's (single-object watches of
        // node agents, RBAC rules with resourceNames).
        None if matches!(attributes.verb.as_str(), "list" | "watch") => query
            .field_selector
            .as_deref()
            .and_then(|selector| crate::api::FieldSelector::parse(selector).ok())
            .and_then(|selector| selector.pinned_name().map(str::to_owned))
            .unwrap_or_default(),
        None => String::new(),
    };
    attributes.subresource = subresource.cloned().unwrap_or_default();
    attributes
}

/// The 403 upstream returns, e.g. `pods is forbidden: User "x" cannot list
/// resource "pods" in API group "" in the namespace "default"` or
/// `deployments.apps "web" is forbidden: ...` for a named object, followed
/// by `: <reason>` when the denial has one.
fn forbidden(attributes: &Attributes, reason: &str) -> ApiError {
    let user = &attributes.user.name;
    let mut error = if attributes.resource_request {
        let resource = if attributes.subresource.is_empty() {
            attributes.resource.clone()
        } else {
            format!("{}/{}", attributes.resource, attributes.subresource)
        };
        let scope = if attributes.namespace.is_empty() {
            "at the cluster scope".to_owned()
        } else {
            format!("in the namespace {:?}", attributes.namespace)
        };
        let target = crate::api::ErrorTarget {
            group: attributes.api_group.clone(),
            resource: attributes.resource.clone(),
            kind: String::new(),
            name: attributes.name.clone(),
        };
        let verb = &attributes.verb;
        let group = &attributes.api_group;
        ApiError::forbidden_object(
            &target,
            format!("User {user:?} cannot {verb} resource {resource:?} in API group {group:?} {scope}"),
        )
    } else {
        ApiError::forbidden(format!("forbidden: User {user:?} cannot {} path {:?}", attributes.verb, attributes.path))
    };
    if !reason.is_empty() {
        error.message = format!("{}: {reason}", error.message);
    }
    error
}
