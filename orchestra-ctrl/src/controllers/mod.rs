//! The built-in controllers, one module each, with their tests beside them,
//! and [`BUILTIN`], the table the controller manager starts them from: one
//! [`ControllerDescriptor`] per controller.
//!
//! | module | controller |
//! |---|---|
//! | [`replicaset`] | ReplicaSet and ReplicationController |
//! | [`deployment`] | Deployment (rolling update, Recreate, rollback, rollout status) |
//! | [`garbage_collector`] | ownerReferences: background, foreground, orphan |
//! | [`namespace`] | empties deleted namespaces, then finalizes them |
//! | [`serviceaccount`] | a `default` ServiceAccount per namespace |
//! | [`serviceaccount_token`] | tokens in `kubernetes.io/service-account-token` Secrets |
//! | [`root_ca_publisher`] | the cluster CA in a `kube-root-ca.crt` ConfigMap per namespace |
//! | [`node_lifecycle`] | node health, taints, taint-based eviction |
//! | [`endpoints`] | Endpoints and EndpointSlices of Services |
//! | [`node_ipam`] | `spec.podCIDR` of Nodes |
//! | [`clusterrole_aggregation`] | rules of ClusterRoles with an `aggregationRule` |
//! | [`resourcequota`] | `status.hard` and `status.used` of ResourceQuotas |
//! | [`csrapproving`] | approves node client CertificateSigningRequests after a SubjectAccessReview |
//! | [`csrsigning`] | issues approved CertificateSigningRequests with the cluster CA |
//! | [`csrcleaner`] | deletes CertificateSigningRequests past their use |

pub mod clusterrole_aggregation;
pub mod csrapproving;
pub mod csrcleaner;
pub mod csrsigning;
pub mod deployment;
pub mod discovery;
pub mod endpoints;
pub mod garbage_collector;
pub mod namespace;
pub mod node_ipam;
pub mod node_lifecycle;
pub mod replicaset;
pub mod resourcequota;
pub mod root_ca_publisher;
pub mod serviceaccount;
pub mod serviceaccount_token;
pub mod util;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::watch;

use crate::informer::SharedInformerFactory;
use crate::leader::Fence;
use crate::manager::{ControllerManager, ManagerContext};

/// What the built-in controller set needs to know about the cluster
/// (upstream's `kube-controller-manager` flags of the same names).
///
/// Built from [`Default`] and the `with_*` setters, so that a new setting
/// is not a breaking change:
///
/// ```
/// use orchestra_ctrl::controllers::ControllerManagerConfig;
///
/// let config = ControllerManagerConfig::default()
///     .with_cluster_cidr(Some("10.96.0.0/12".into()))
///     .with_workers(2)
///     .with_controllers(["*", "-garbagecollector"]);
/// let enabled = config.enabled().unwrap();
/// assert!(enabled.contains(&"nodeipam") && !enabled.contains(&"garbagecollector"));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ControllerManagerConfig {
    /// Pods' address space, split into one `spec.podCIDR` per node
    /// (`--cluster-cidr`); `None` turns the NodeIPAM controller off
    /// (`--allocate-node-cidrs=false`).
    pub cluster_cidr: Option<String>,
    /// Prefix length of each node's pod CIDR (`--node-cidr-mask-size`).
    pub node_cidr_mask_size: u8,
    /// Workers per queue-driven controller (`--concurrent-*-syncs`).
    pub workers: usize,
    /// How often the garbage collector looks at its whole ownership graph
    /// again (it acts on watch events in between).
    pub gc_interval: Duration,
    /// Node health monitoring and eviction.
    pub node_lifecycle: node_lifecycle::Config,
    /// The key and CA of service account token Secrets
    /// (`--service-account-private-key-file`, `--root-ca-file`); `None`
    /// turns the token controller off.
    pub service_account_tokens: Option<serviceaccount_token::TokenConfig>,
    /// The cluster CA bundle (PEM) published in every namespace's
    /// `kube-root-ca.crt` ConfigMap (`--root-ca-file`); `None` turns the
    /// root-ca-cert-publisher off.
    pub root_ca: Option<String>,
    /// The CA CertificateSigningRequests are signed with and the longest
    /// validity granted (`--cluster-signing-cert-file`,
    /// `--cluster-signing-key-file`, `--cluster-signing-duration`); `None`
    /// turns the `csrsigning` controller off.
    pub csr_signing: Option<csrsigning::SigningConfig>,
    /// Which controllers run (`--controllers`): `*` turns on every
    /// controller on by default, `name` turns `name` on, `-name` turns it
    /// off; the first entry naming a controller decides for it. Names are
    /// those of [`BUILTIN`]. Default `["*"]`.
    pub controllers: Vec<String>,
    /// Gives each controller with a
    /// [`service_account`](ControllerDescriptor::service_account) a client
    /// of that identity (`--use-service-account-credentials`); `None`: every
    /// controller writes with the manager's own client.
    pub credentials: Option<crate::credentials::Credentials>,
}

impl Default for ControllerManagerConfig {
    fn default() -> Self {
        Self {
            cluster_cidr: Some("10.244.0.0/16".into()),
            node_cidr_mask_size: 24,
            workers: 5,
            gc_interval: Duration::from_secs(60),
            node_lifecycle: node_lifecycle::Config::default(),
            service_account_tokens: None,
            root_ca: None,
            csr_signing: None,
            controllers: vec!["*".into()],
            credentials: None,
        }
    }
}

impl ControllerManagerConfig {
    /// Sets [`cluster_cidr`](Self::cluster_cidr).
    pub fn with_cluster_cidr(mut self, cidr: Option<String>) -> Self {
        self.cluster_cidr = cidr;
        self
    }

    /// Sets [`node_cidr_mask_size`](Self::node_cidr_mask_size).
    pub fn with_node_cidr_mask_size(mut self, prefix: u8) -> Self {
        self.node_cidr_mask_size = prefix;
        self
    }

    /// Sets [`workers`](Self::workers).
    pub fn with_workers(mut self, workers: usize) -> Self {
        self.workers = workers;
        self
    }

    /// Sets [`gc_interval`](Self::gc_interval).
    pub fn with_gc_interval(mut self, interval: Duration) -> Self {
        self.gc_interval = interval;
        self
    }

    /// Sets [`node_lifecycle`](Self::node_lifecycle).
    pub fn with_node_lifecycle(mut self, config: node_lifecycle::Config) -> Self {
        self.node_lifecycle = config;
        self
    }

    /// Sets [`service_account_tokens`](Self::service_account_tokens).
    pub fn with_service_account_tokens(mut self, tokens: impl Into<Option<serviceaccount_token::TokenConfig>>) -> Self {
        self.service_account_tokens = tokens.into();
        self
    }

    /// Sets [`root_ca`](Self::root_ca).
    pub fn with_root_ca(mut self, pem: impl Into<Option<String>>) -> Self {
        self.root_ca = pem.into();
        self
    }

    /// Sets [`csr_signing`](Self::csr_signing).
    pub fn with_csr_signing(mut self, signing: impl Into<Option<csrsigning::SigningConfig>>) -> Self {
        self.csr_signing = signing.into();
        self
    }

    /// Sets [`credentials`](Self::credentials).
    pub fn with_credentials(mut self, credentials: Arc<dyn crate::credentials::ControllerCredentials>) -> Self {
        self.credentials = Some(crate::credentials::Credentials(credentials));
        self
    }

    /// Sets [`controllers`](Self::controllers), the `--controllers` entries.
    pub fn with_controllers(mut self, entries: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.controllers = entries.into_iter().map(Into::into).collect();
        self
    }

    /// The built-in controllers this configuration runs, by name in start
    /// order: [`select`](Self::select) on [`BUILTIN`].
    pub fn enabled(&self) -> Result<Vec<&'static str>, SelectionError> {
        Ok(self.select(BUILTIN)?.into_iter().map(|d| d.name).collect())
    }

    /// The descriptors of `table` that [`controllers`](Self::controllers)
    /// selects, in table order (see [`ControllerDescriptor::is_selected`]).
    ///
    /// An entry naming no controller of `table` (nor `*`) is an error, and so
    /// is a controller enabled by name whose [`Requirement`] this
    /// configuration does not meet; one that only `*` turns on is then left
    /// out instead (`nodeipam` without a cluster CIDR).
    pub fn select<'t>(
        &self,
        table: &'t [ControllerDescriptor],
    ) -> Result<Vec<&'t ControllerDescriptor>, SelectionError> {
        for entry in &self.controllers {
            let name = entry.strip_prefix('-').unwrap_or(entry);
            if entry != "*" && !table.iter().any(|d| d.name == name) {
                let known = table.iter().map(|d| d.name).collect();
                return Err(SelectionError::Unknown { name: entry.clone(), known });
            }
        }
        let mut selected = Vec::new();
        for descriptor in table.iter().filter(|d| d.is_selected(&self.controllers)) {
            match descriptor.requires {
                Some(requirement) if !(requirement.met)(self) => {
                    if self.controllers.iter().any(|entry| entry == descriptor.name) {
                        return Err(SelectionError::NotConfigured {
                            controller: descriptor.name,
                            missing: requirement.missing,
                        });
                    }
                }
                _ => selected.push(descriptor),
            }
        }
        Ok(selected)
    }
}

/// A controller selection that cannot be run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectionError {
    /// An entry naming no controller of the table (nor `*`).
    #[error("{name:?} is not in the list of known controllers ({})", .known.join(", "))]
    Unknown {
        /// The entry, as given (`-bogus`).
        name: String,
        /// The names the table knows.
        known: Vec<&'static str>,
    },
    /// A controller enabled by name whose configuration is missing.
    #[error("controller {controller:?} is enabled but has no {missing}")]
    NotConfigured {
        /// The controller's name.
        controller: &'static str,
        /// What it lacks ([`Requirement::missing`]).
        missing: &'static str,
    },
}

/// Configuration a controller cannot run without.
#[derive(Debug, Clone, Copy)]
pub struct Requirement {
    /// What the controller lacks when `met` is false, for
    /// [`SelectionError::NotConfigured`]: `"signing key"`.
    pub missing: &'static str,
    /// Whether a configuration has it.
    pub met: fn(&ControllerManagerConfig) -> bool,
}

/// How a controller runs: until [`ControllerContext::stopped`] completes.
pub type RunFn = fn(ControllerContext) -> BoxFuture<'static, ()>;

/// One controller a [`ControllerManager`] can run, as a row of a table
/// such as [`BUILTIN`].
///
/// ```
/// use orchestra_ctrl::controllers::{BUILTIN, ControllerDescriptor, ControllerManagerConfig};
///
/// /// Logs until it is stopped.
/// static HELLO: ControllerDescriptor = ControllerDescriptor {
///     name: "hello",
///     enabled_by_default: false,
///     requires: None,
///     service_account: None,
///     run: |ctx| {
///         Box::pin(async move {
///             tracing::info!("hello");
///             ctx.stopped().await;
///         })
///     },
/// };
///
/// let table: Vec<ControllerDescriptor> = BUILTIN.iter().copied().chain([HELLO]).collect();
/// let config = ControllerManagerConfig::default().with_controllers(["hello", "namespace"]);
/// let names: Vec<_> = config.select(&table).unwrap().iter().map(|d| d.name).collect();
/// assert_eq!(names, ["namespace", "hello"]);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ControllerDescriptor {
    /// The name `--controllers` takes; also the name the manager logs.
    pub name: &'static str,
    /// Whether `*` turns it on (upstream's controllers disabled by default
    /// need their name given).
    pub enabled_by_default: bool,
    /// Configuration it cannot run without, if any.
    pub requires: Option<Requirement>,
    /// The service account in `kube-system` it writes as when the manager
    /// is given [credentials](ControllerManagerConfig::credentials)
    /// (upstream's names, e.g. `replicaset-controller`); `None`: the
    /// manager's own identity.
    pub service_account: Option<&'static str>,
    /// Runs it until it is told to stop.
    pub run: RunFn,
}

impl ControllerDescriptor {
    /// Whether the `--controllers` entries `selection` turn it on
    /// (upstream's `IsControllerEnabled`): the first entry that is `name`
    /// or `-name` decides; otherwise `*` turns it on if it is
    /// [enabled by default](Self::enabled_by_default).
    pub fn is_selected(&self, selection: &[String]) -> bool {
        let mut star = false;
        for entry in selection {
            if entry == self.name {
                return true;
            }
            if entry.strip_prefix('-') == Some(self.name) {
                return false;
            }
            star |= entry == "*";
        }
        star && self.enabled_by_default
    }
}

/// What a controller of a [`ControllerDescriptor`] is started with.
#[derive(Clone)]
#[non_exhaustive]
pub struct ControllerContext {
    /// The shared informers of the process, whose client carries the
    /// leadership term's fence.
    pub factory: SharedInformerFactory,
    /// The fencing token of the current leadership term.
    pub fence: Fence,
    /// Becomes `true` when the controller must stop.
    pub stop: watch::Receiver<bool>,
    /// The configuration the controller was selected with; its
    /// [`Requirement`] is met.
    pub config: Arc<ControllerManagerConfig>,
}

impl ControllerContext {
    /// The context of a controller the manager starts with `manager`.
    pub fn new(manager: ManagerContext, config: Arc<ControllerManagerConfig>) -> Self {
        let ManagerContext { factory, fence, stop } = manager;
        Self { factory, fence, stop, config }
    }

    /// A future completing when the controller must stop.
    pub fn stopped(&self) -> impl Future<Output = ()> + Send + 'static + use<> {
        let mut stop = self.stop.clone();
        async move {
            let _ = stop.wait_for(|s| *s).await;
        }
    }

    /// Workers per queue-driven controller (at least one).
    pub fn workers(&self) -> usize {
        self.config.workers.max(1)
    }
}

/// The built-in controllers, in the order they start. Each is on by
/// default (with `*`); `serviceaccount-token`, `root-ca-cert-publisher`,
/// `nodeipam` and `csrsigning` run only when configured (a signing key, a
/// CA bundle, a cluster CIDR, a signing CA).
pub static BUILTIN: &[ControllerDescriptor] = &[
    ControllerDescriptor {
        name: "replicaset",
        enabled_by_default: true,
        requires: None,
        service_account: Some("replicaset-controller"),
        run: |ctx| Box::pin(replicaset::run(ctx.factory.clone(), ctx.workers(), ctx.stopped())),
    },
    ControllerDescriptor {
        name: "replicationcontroller",
        enabled_by_default: true,
        requires: None,
        service_account: Some("replication-controller"),
        run: |ctx| Box::pin(replicaset::run_replication_controllers(ctx.factory.clone(), ctx.workers(), ctx.stopped())),
    },
    ControllerDescriptor {
        name: "deployment",
        enabled_by_default: true,
        requires: None,
        service_account: Some("deployment-controller"),
        run: |ctx| Box::pin(deployment::run(ctx.factory.clone(), ctx.workers(), ctx.stopped())),
    },
    ControllerDescriptor {
        name: "garbagecollector",
        enabled_by_default: true,
        requires: None,
        service_account: Some("generic-garbage-collector"),
        run: |ctx| Box::pin(garbage_collector::run_with(ctx.factory.clone(), ctx.config.gc_interval, ctx.stopped())),
    },
    ControllerDescriptor {
        name: "namespace",
        enabled_by_default: true,
        requires: None,
        service_account: Some("namespace-controller"),
        run: |ctx| Box::pin(namespace::run(ctx.factory.clone(), ctx.workers(), ctx.stopped())),
    },
    ControllerDescriptor {
        name: "serviceaccount",
        enabled_by_default: true,
        requires: None,
        service_account: Some("service-account-controller"),
        run: |ctx| Box::pin(serviceaccount::run(ctx.factory.clone(), ctx.stopped())),
    },
    ControllerDescriptor {
        name: "nodelifecycle",
        enabled_by_default: true,
        requires: None,
        service_account: Some("node-controller"),
        run: |ctx| {
            let lifecycle = node_lifecycle::NodeLifecycle::new(&ctx.factory, ctx.config.node_lifecycle.clone());
            Box::pin(lifecycle.run(ctx.stopped()))
        },
    },
    ControllerDescriptor {
        name: "endpoints",
        enabled_by_default: true,
        requires: None,
        service_account: Some("endpoint-controller"),
        run: |ctx| Box::pin(endpoints::run(ctx.factory.clone(), ctx.workers(), ctx.stopped())),
    },
    ControllerDescriptor {
        name: "serviceaccount-token",
        enabled_by_default: true,
        requires: Some(Requirement { missing: "signing key", met: |c| c.service_account_tokens.is_some() }),
        service_account: None,
        run: |ctx| {
            Box::pin(async move {
                // Present: the requirement was checked at selection.
                if let Some(tokens) = ctx.config.service_account_tokens.clone() {
                    serviceaccount_token::run(ctx.factory.clone(), tokens, ctx.stopped()).await;
                }
            })
        },
    },
    ControllerDescriptor {
        name: "root-ca-cert-publisher",
        enabled_by_default: true,
        requires: Some(Requirement { missing: "root CA", met: |c| c.root_ca.is_some() }),
        service_account: Some(root_ca_publisher::NAME),
        run: |ctx| {
            Box::pin(async move {
                // Present: the requirement was checked at selection.
                if let Some(root_ca) = ctx.config.root_ca.clone() {
                    root_ca_publisher::run(ctx.factory.clone(), root_ca, ctx.stopped()).await;
                }
            })
        },
    },
    ControllerDescriptor {
        name: "nodeipam",
        enabled_by_default: true,
        requires: Some(Requirement { missing: "cluster CIDR", met: |c| c.cluster_cidr.is_some() }),
        service_account: Some("node-controller"),
        run: |ctx| {
            Box::pin(async move {
                // Present: the requirement was checked at selection.
                let Some(cidr) = ctx.config.cluster_cidr.as_deref() else { return };
                let mask = ctx.config.node_cidr_mask_size;
                if let Err(error) = node_ipam::run(ctx.factory.clone(), cidr, mask, ctx.stopped()).await {
                    tracing::error!(%error, "nodeipam controller stopped");
                }
            })
        },
    },
    ControllerDescriptor {
        name: "clusterrole-aggregation",
        enabled_by_default: true,
        requires: None,
        service_account: Some(clusterrole_aggregation::NAME),
        run: |ctx| Box::pin(clusterrole_aggregation::run(ctx.factory.clone(), ctx.stopped())),
    },
    ControllerDescriptor {
        name: "resourcequota",
        enabled_by_default: true,
        requires: None,
        service_account: Some(resourcequota::NAME),
        run: |ctx| Box::pin(resourcequota::run(ctx.factory.clone(), ctx.workers(), ctx.stopped())),
    },
    ControllerDescriptor {
        name: "csrapproving",
        enabled_by_default: true,
        requires: None,
        service_account: Some(csrapproving::NAME),
        run: |ctx| Box::pin(csrapproving::run(ctx.factory.clone(), ctx.workers(), ctx.stopped())),
    },
    ControllerDescriptor {
        name: "csrcleaner",
        enabled_by_default: true,
        requires: None,
        service_account: Some(csrapproving::NAME),
        run: |ctx| Box::pin(csrcleaner::run(ctx.factory.clone(), ctx.workers(), ctx.stopped())),
    },
    ControllerDescriptor {
        name: "csrsigning",
        enabled_by_default: true,
        requires: Some(Requirement { missing: "cluster signing CA", met: |c| c.csr_signing.is_some() }),
        service_account: Some(csrapproving::NAME),
        run: |ctx| {
            Box::pin(async move {
                // Present: the requirement was checked at selection.
                if let Some(signing) = ctx.config.csr_signing.clone() {
                    csrsigning::run(ctx.factory.clone(), signing, ctx.workers(), ctx.stopped()).await;
                }
            })
        },
    },
];

/// The built-in controllers `config.controllers` selects (see
/// [`ControllerManagerConfig::enabled`]) in one [`ControllerManager`], as
/// `kube-controller-manager` runs them: [`manager`] on [`BUILTIN`].
pub fn builtin(
    factory: SharedInformerFactory,
    config: ControllerManagerConfig,
) -> Result<ControllerManager, SelectionError> {
    manager(BUILTIN, factory, config)
}

/// A client of service account `account` for controller `name`, retried
/// every second until it is given or the controller is stopped (`None`).
async fn own_client(
    credentials: &crate::credentials::Credentials,
    account: &str,
    name: &str,
    ctx: &ManagerContext,
) -> Option<kube::Client> {
    let stopped = ctx.stopped();
    tokio::pin!(stopped);
    loop {
        match credentials.0.client(account).await {
            Ok(client) => return Some(client),
            Err(error) => tracing::warn!(%error, controller = name, account, "no client for the controller; retrying"),
        }
        tokio::select! {
            _ = &mut stopped => return None,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// The controllers of `table` that `config.controllers` selects (see
/// [`ControllerManagerConfig::select`]) in one [`ControllerManager`], each
/// started with a [`ControllerContext`] holding `config`.
pub fn manager(
    table: &[ControllerDescriptor],
    factory: SharedInformerFactory,
    config: ControllerManagerConfig,
) -> Result<ControllerManager, SelectionError> {
    let runs: Vec<ControllerDescriptor> = config.select(table)?.into_iter().copied().collect();
    let config = Arc::new(config);
    let mut manager = ControllerManager::new(factory);
    for descriptor in runs {
        let config = config.clone();
        manager = manager.with(descriptor.name, move |mut ctx: ManagerContext| async move {
            if let (Some(credentials), Some(account)) = (&config.credentials, descriptor.service_account) {
                let Some(client) = own_client(credentials, account, descriptor.name, &ctx).await else { return };
                ctx.factory = ctx.factory.with_client(ctx.fence.client(&client));
            }
            (descriptor.run)(ControllerContext::new(ctx, config)).await
        });
    }
    Ok(manager)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every built-in controller but those needing configuration the
    /// default lacks (a token signing key, a cluster signing CA).
    const ALL_BUT_TOKENS: [&str; 13] = [
        "replicaset",
        "replicationcontroller",
        "deployment",
        "garbagecollector",
        "namespace",
        "serviceaccount",
        "nodelifecycle",
        "endpoints",
        "nodeipam",
        "clusterrole-aggregation",
        "resourcequota",
        "csrapproving",
        "csrcleaner",
    ];

    fn config(entries: &[&str]) -> ControllerManagerConfig {
        ControllerManagerConfig::default().with_controllers(entries.iter().copied())
    }

    fn idle(ctx: ControllerContext) -> BoxFuture<'static, ()> {
        Box::pin(ctx.stopped())
    }

    /// A table of its own: one controller off by default, one that needs
    /// a cluster CIDR.
    static TABLE: &[ControllerDescriptor] = &[
        ControllerDescriptor { name: "a", enabled_by_default: true, requires: None, service_account: None, run: idle },
        ControllerDescriptor {
            name: "opt-in",
            enabled_by_default: false,
            requires: None,
            service_account: None,
            run: idle,
        },
        ControllerDescriptor {
            name: "ipam",
            enabled_by_default: true,
            requires: Some(Requirement { missing: "cluster CIDR", met: |c| c.cluster_cidr.is_some() }),
            service_account: None,
            run: idle,
        },
    ];

    #[test]
    fn selection_follows_is_controller_enabled() {
        let table: &[(&[&str], &[&str])] = &[
            (&["*"], &["a", "ipam"]),
            (&["*", "opt-in"], &["a", "opt-in", "ipam"]),
            (&["opt-in"], &["opt-in"]),
            (&["*", "-a"], &["ipam"]),
            (&["ipam", "a"], &["a", "ipam"]),
            // The first entry naming a controller decides.
            (&["-a", "a", "*"], &["ipam"]),
            (&["a", "-a"], &["a"]),
            (&["-opt-in", "*", "opt-in"], &["a", "ipam"]),
            // No star, nothing named: nothing runs.
            (&[], &[]),
            (&["-a"], &[]),
        ];
        for (entries, expected) in table {
            let names: Vec<_> = config(entries).select(TABLE).unwrap().iter().map(|d| d.name).collect();
            assert_eq!(names, *expected, "{entries:?}");
        }
    }

    #[test]
    fn selection_errors() {
        let no_cidr = |entries: &[&str]| config(entries).with_cluster_cidr(None);
        let unknown = |name: &str| SelectionError::Unknown { name: name.into(), known: vec!["a", "opt-in", "ipam"] };
        let not_configured = SelectionError::NotConfigured { controller: "ipam", missing: "cluster CIDR" };
        let table: &[(ControllerManagerConfig, Result<&[&str], SelectionError>)] = &[
            (config(&["*", "bogus"]), Err(unknown("bogus"))),
            (config(&["-bogus"]), Err(unknown("-bogus"))),
            (config(&["**"]), Err(unknown("**"))),
            (config(&[""]), Err(unknown(""))),
            // Asked for by name without its configuration.
            (no_cidr(&["ipam"]), Err(not_configured.clone())),
            (no_cidr(&["*", "ipam"]), Err(not_configured)),
            // Through `*` it is merely left out; turned off it needs nothing.
            (no_cidr(&["*"]), Ok(&["a"])),
            (no_cidr(&["-ipam", "a"]), Ok(&["a"])),
        ];
        for (config, expected) in table {
            let got = config.select(TABLE).map(|ds| ds.iter().map(|d| d.name).collect::<Vec<_>>());
            assert_eq!(got, expected.clone().map(<[&str]>::to_vec), "{:?}", config.controllers);
        }
        let message = config(&["bogus"]).select(TABLE).unwrap_err().to_string();
        assert_eq!(message, "\"bogus\" is not in the list of known controllers (a, opt-in, ipam)");
        let message = no_cidr(&["ipam"]).select(TABLE).unwrap_err().to_string();
        assert_eq!(message, "controller \"ipam\" is enabled but has no cluster CIDR");
    }

    #[test]
    fn builtin_table_selection() {
        let table: &[(&[&str], &[&str])] = &[
            (&["*"], &ALL_BUT_TOKENS),
            (&["deployment", "replicaset"], &["replicaset", "deployment"]),
            (
                &["*", "-nodeipam", "-garbagecollector"],
                &[
                    "replicaset",
                    "replicationcontroller",
                    "deployment",
                    "namespace",
                    "serviceaccount",
                    "nodelifecycle",
                    "endpoints",
                    "clusterrole-aggregation",
                    "resourcequota",
                    "csrapproving",
                    "csrcleaner",
                ],
            ),
            (&["-deployment", "deployment", "namespace"], &["namespace"]),
        ];
        for (entries, expected) in table {
            assert_eq!(config(entries).enabled().unwrap(), *expected, "{entries:?}");
        }
        assert_eq!(ControllerManagerConfig::default().controllers, ["*"]);
        // Every name once; each controller of the table is on by default.
        let mut names: Vec<_> = BUILTIN.iter().map(|d| d.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), BUILTIN.len());
        assert!(BUILTIN.iter().all(|d| d.enabled_by_default));
        // Those that need configuration, asked for by name without it.
        assert_eq!(
            config(&["csrsigning"]).enabled(),
            Err(SelectionError::NotConfigured { controller: "csrsigning", missing: "cluster signing CA" })
        );
        assert_eq!(
            config(&["serviceaccount-token"]).enabled(),
            Err(SelectionError::NotConfigured { controller: "serviceaccount-token", missing: "signing key" })
        );
        assert_eq!(
            config(&["root-ca-cert-publisher"]).enabled(),
            Err(SelectionError::NotConfigured { controller: "root-ca-cert-publisher", missing: "root CA" })
        );
        assert_eq!(
            config(&["*"]).with_root_ca(Some("PEM".to_owned())).enabled().unwrap(),
            [&ALL_BUT_TOKENS[..8], &["root-ca-cert-publisher"], &ALL_BUT_TOKENS[8..]].concat()
        );
        assert_eq!(
            config(&["nodeipam"]).with_cluster_cidr(None).enabled(),
            Err(SelectionError::NotConfigured { controller: "nodeipam", missing: "cluster CIDR" })
        );
        let message = config(&["bogus"]).enabled().unwrap_err().to_string();
        assert!(message.contains("\"bogus\" is not in the list of known controllers (replicaset, "), "{message}");
    }

    #[tokio::test]
    async fn builtin_adds_only_the_chosen_controllers() {
        let fake = crate::testing::FakeCluster::new().await;
        let factory = || fake.factory().clone();
        assert_eq!(builtin(factory(), config(&["*"])).unwrap().names(), ALL_BUT_TOKENS);
        assert_eq!(
            builtin(factory(), config(&["endpoints", "namespace"])).unwrap().names(),
            ["namespace", "endpoints"]
        );
        assert!(builtin(factory(), config(&["*", "-endpoint"])).is_err());
        assert_eq!(manager(TABLE, factory(), config(&["*", "opt-in"])).unwrap().names(), ["a", "opt-in", "ipam"]);
    }

    #[tokio::test]
    async fn a_manager_of_one_controller_runs_it() {
        use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
        let fake = crate::testing::FakeCluster::new().await;
        let manager = builtin(fake.factory().clone(), config(&["serviceaccount"])).unwrap();
        assert_eq!(manager.names(), ["serviceaccount"]);
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let running = tokio::spawn(manager.run(async move {
            let _ = stopped.wait_for(|s| *s).await;
        }));
        let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": "team"}})).unwrap();
        kube::Api::<Namespace>::all(fake.unrecorded()).create(&Default::default(), &ns).await.unwrap();
        crate::testing::eventually(Duration::from_secs(5), "a default ServiceAccount in team", || async {
            fake.get::<ServiceAccount>("team", serviceaccount::DEFAULT).await.is_some()
        })
        .await;
        let _ = stop.send(true);
        tokio::time::timeout(Duration::from_secs(5), running).await.expect("the manager stops").unwrap();
    }
}
