//! The built-in controllers, one module each, with their tests beside them.
//!
//! | module | controller |
//! |---|---|
//! | [`replicaset`] | ReplicaSet and ReplicationController |
//! | [`deployment`] | Deployment (rolling update, Recreate, rollback, rollout status) |
//! | [`garbage_collector`] | ownerReferences: background, foreground, orphan |
//! | [`namespace`] | empties deleted namespaces, then finalizes them |
//! | [`serviceaccount`] | a `default` ServiceAccount per namespace |
//! | [`serviceaccount_token`] | tokens in `kubernetes.io/service-account-token` Secrets |
//! | [`node_lifecycle`] | node health, taints, taint-based eviction |
//! | [`endpoints`] | Endpoints and EndpointSlices of Services |
//! | [`node_ipam`] | `spec.podCIDR` of Nodes |

pub mod deployment;
pub mod discovery;
pub mod endpoints;
pub mod garbage_collector;
pub mod namespace;
pub mod node_ipam;
pub mod node_lifecycle;
pub mod replicaset;
pub mod serviceaccount;
pub mod serviceaccount_token;
pub mod util;

use std::time::Duration;

use crate::informer::SharedInformerFactory;
use crate::manager::ControllerManager;

/// What the built-in controller set needs to know about the cluster
/// (upstream's `kube-controller-manager` flags of the same names).
#[derive(Debug, Clone)]
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
    /// Which controllers run (`--controllers`): `*` turns on every
    /// controller on by default, `name` turns `name` on, `-name` turns it
    /// off; the first entry naming a controller decides for it. Names are
    /// those of [`CONTROLLERS`]. Default `["*"]`.
    pub controllers: Vec<String>,
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
            controllers: vec!["*".into()],
        }
    }
}

/// The built-in controllers by the names `--controllers` takes, in the
/// order they start. Every one is on by default (with `*`);
/// `serviceaccount-token` and `nodeipam` run only when configured (a
/// signing key, a cluster CIDR).
pub const CONTROLLERS: [&str; 10] = [
    "replicaset",
    "replicationcontroller",
    "deployment",
    "garbagecollector",
    "namespace",
    "serviceaccount",
    "nodelifecycle",
    "endpoints",
    "serviceaccount-token",
    "nodeipam",
];

/// A controller selection that cannot be run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectionError {
    /// A name that is not one of [`CONTROLLERS`] (nor `*`).
    #[error("{0:?} is not in the list of known controllers ({known})", known = CONTROLLERS.join(", "))]
    Unknown(String),
    /// A controller asked for by name that lacks its configuration.
    #[error("controller {0:?} is enabled but {1}")]
    NotConfigured(&'static str, &'static str),
}

/// Whether `--controllers` `selection` turns `name` on (upstream's
/// `IsControllerEnabled`): the first entry that is `name` or `-name`
/// decides; otherwise `*` turns it on.
pub fn is_enabled(name: &str, selection: &[String]) -> bool {
    let mut star = false;
    for entry in selection {
        if entry == name {
            return true;
        }
        if entry.strip_prefix('-') == Some(name) {
            return false;
        }
        star |= entry == "*";
    }
    star
}

impl ControllerManagerConfig {
    /// The controllers this configuration runs, in start order; an error
    /// for an unknown name, or for a controller enabled by name that is
    /// not configured. A controller that `*` alone turns on and is not
    /// configured (`nodeipam` without a cluster CIDR) is left out.
    pub fn enabled(&self) -> Result<Vec<&'static str>, SelectionError> {
        for entry in &self.controllers {
            let name = entry.strip_prefix('-').unwrap_or(entry);
            if entry != "*" && !CONTROLLERS.contains(&name) {
                return Err(SelectionError::Unknown(entry.clone()));
            }
        }
        let mut out = Vec::new();
        for name in CONTROLLERS {
            if !is_enabled(name, &self.controllers) {
                continue;
            }
            let missing = match name {
                "serviceaccount-token" if self.service_account_tokens.is_none() => Some("has no signing key"),
                "nodeipam" if self.cluster_cidr.is_none() => Some("has no cluster CIDR"),
                _ => None,
            };
            match missing {
                None => out.push(name),
                Some(why) if self.controllers.iter().any(|c| c == name) => {
                    return Err(SelectionError::NotConfigured(name, why));
                }
                Some(_) => {}
            }
        }
        Ok(out)
    }
}

/// The built-in controllers `config.controllers` selects (see
/// [`ControllerManagerConfig::enabled`]) in one [`ControllerManager`], as
/// `kube-controller-manager` runs them; by default every one of
/// [`CONTROLLERS`]: replicaset, replicationcontroller, deployment,
/// garbagecollector, namespace, serviceaccount, nodelifecycle, endpoints
/// (Endpoints and EndpointSlices), serviceaccount-token (with a signing
/// key) and nodeipam (with a cluster CIDR).
pub fn builtin(
    factory: SharedInformerFactory,
    config: ControllerManagerConfig,
) -> Result<ControllerManager, SelectionError> {
    let enabled = config.enabled()?;
    let workers = config.workers.max(1);
    let mut manager = ControllerManager::new(factory);
    for name in enabled {
        manager = match name {
            "replicaset" => manager.with(name, move |ctx| async move {
                replicaset::run(ctx.factory.clone(), workers, ctx.stopped()).await
            }),
            "replicationcontroller" => manager.with(name, move |ctx| async move {
                replicaset::run_replication_controllers(ctx.factory.clone(), workers, ctx.stopped()).await
            }),
            "deployment" => manager.with(name, move |ctx| async move {
                deployment::run(ctx.factory.clone(), workers, ctx.stopped()).await
            }),
            "garbagecollector" => {
                let interval = config.gc_interval;
                manager.with(name, move |ctx| async move {
                    garbage_collector::run(ctx.factory.client().clone(), interval, ctx.stopped()).await
                })
            }
            "namespace" => manager.with(name, move |ctx| async move {
                namespace::run(ctx.factory.clone(), workers, ctx.stopped()).await
            }),
            "serviceaccount" => {
                manager.with(name, |ctx| async move { serviceaccount::run(ctx.factory.clone(), ctx.stopped()).await })
            }
            "nodelifecycle" => {
                let lifecycle = config.node_lifecycle.clone();
                manager.with(name, move |ctx| async move {
                    node_lifecycle::NodeLifecycle::new(&ctx.factory, lifecycle).run(ctx.stopped()).await
                })
            }
            "endpoints" => manager.with(name, move |ctx| async move {
                endpoints::run(ctx.factory.clone(), workers, ctx.stopped()).await
            }),
            // Enabled only when configured (`enabled` checked).
            "serviceaccount-token" => match config.service_account_tokens.clone() {
                Some(tokens) => manager.with(name, move |ctx| async move {
                    serviceaccount_token::run(ctx.factory.clone(), tokens, ctx.stopped()).await
                }),
                None => manager,
            },
            "nodeipam" => match config.cluster_cidr.clone() {
                Some(cidr) => {
                    let mask = config.node_cidr_mask_size;
                    manager.with(name, move |ctx| async move {
                        if let Err(error) = node_ipam::run(ctx.factory.clone(), &cidr, mask, ctx.stopped()).await {
                            tracing::error!(%error, "nodeipam controller stopped");
                        }
                    })
                }
                None => manager,
            },
            other => unreachable!("{other} is in CONTROLLERS but not started"),
        };
    }
    Ok(manager)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selection(entries: &[&str]) -> Vec<String> {
        entries.iter().map(|e| e.to_string()).collect()
    }

    const ALL_BUT_TOKENS: [&str; 9] = [
        "replicaset",
        "replicationcontroller",
        "deployment",
        "garbagecollector",
        "namespace",
        "serviceaccount",
        "nodelifecycle",
        "endpoints",
        "nodeipam",
    ];

    #[test]
    fn enabled_follows_kube_controller_manager() {
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
                ],
            ),
            // The first entry naming a controller decides.
            (&["-deployment", "deployment", "namespace"], &["namespace"]),
            (&["deployment", "-deployment"], &["deployment"]),
            (
                &["-deployment", "*"],
                &[
                    "replicaset",
                    "replicationcontroller",
                    "garbagecollector",
                    "namespace",
                    "serviceaccount",
                    "nodelifecycle",
                    "endpoints",
                    "nodeipam",
                ],
            ),
            // No star, nothing named: nothing runs.
            (&[], &[]),
            (&["-replicaset"], &[]),
        ];
        for (entries, expected) in table {
            let config = ControllerManagerConfig { controllers: selection(entries), ..Default::default() };
            assert_eq!(config.enabled().unwrap(), *expected, "{entries:?}");
        }
        assert_eq!(ControllerManagerConfig::default().controllers, ["*"]);
    }

    #[test]
    fn unknown_or_unconfigured_controllers_are_errors() {
        let config =
            |entries: &[&str]| ControllerManagerConfig { controllers: selection(entries), ..Default::default() };
        assert_eq!(config(&["*", "bogus"]).enabled(), Err(SelectionError::Unknown("bogus".into())));
        assert_eq!(config(&["-bogus"]).enabled(), Err(SelectionError::Unknown("-bogus".into())));
        assert_eq!(config(&["**"]).enabled(), Err(SelectionError::Unknown("**".into())));
        let message = config(&["bogus"]).enabled().unwrap_err().to_string();
        assert!(
            message.contains("\"bogus\" is not in the list of known controllers") && message.contains("nodeipam"),
            "{message}"
        );
        // Asked for by name without its configuration.
        assert_eq!(
            config(&["serviceaccount-token"]).enabled(),
            Err(SelectionError::NotConfigured("serviceaccount-token", "has no signing key"))
        );
        let no_cidr = ControllerManagerConfig { cluster_cidr: None, ..config(&["nodeipam"]) };
        assert!(matches!(no_cidr.enabled(), Err(SelectionError::NotConfigured("nodeipam", _))));
        // Through `*` it is merely left out.
        let no_cidr = ControllerManagerConfig { cluster_cidr: None, ..config(&["*"]) };
        assert!(!no_cidr.enabled().unwrap().contains(&"nodeipam"));
    }

    #[tokio::test]
    async fn builtin_adds_only_the_chosen_controllers() {
        let fake = crate::testing::FakeCluster::new().await;
        let factory = || fake.factory().clone();
        let config =
            |entries: &[&str]| ControllerManagerConfig { controllers: selection(entries), ..Default::default() };
        assert_eq!(builtin(factory(), config(&["*"])).unwrap().names(), ALL_BUT_TOKENS);
        assert_eq!(
            builtin(factory(), config(&["endpoints", "namespace"])).unwrap().names(),
            ["namespace", "endpoints"]
        );
        assert!(builtin(factory(), config(&["*", "-endpoint"])).is_err());
    }

    #[tokio::test]
    async fn a_manager_of_one_controller_runs_it() {
        use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
        let fake = crate::testing::FakeCluster::new().await;
        let config = ControllerManagerConfig { controllers: selection(&["serviceaccount"]), ..Default::default() };
        let manager = builtin(fake.factory().clone(), config).unwrap();
        assert_eq!(manager.names(), ["serviceaccount"]);
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let running = tokio::spawn(manager.run(async move {
            let _ = stopped.wait_for(|s| *s).await;
        }));
        let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": "team"}})).unwrap();
        kube::Api::<Namespace>::all(fake.unrecorded()).create(&Default::default(), &ns).await.unwrap();
        crate::testing::eventually(std::time::Duration::from_secs(5), "a default ServiceAccount in team", || async {
            fake.get::<ServiceAccount>("team", serviceaccount::DEFAULT).await.is_some()
        })
        .await;
        let _ = stop.send(true);
        tokio::time::timeout(std::time::Duration::from_secs(5), running).await.expect("the manager stops").unwrap();
    }
}
