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
        }
    }
}

/// Every built-in controller in one [`ControllerManager`], as
/// `kube-controller-manager` runs them: replicaset, replicationcontroller,
/// deployment, garbagecollector, namespace, serviceaccount, nodelifecycle,
/// endpoints (Endpoints and EndpointSlices), nodeipam (with a cluster CIDR)
/// and serviceaccount-token (with a signing key).
pub fn builtin(factory: SharedInformerFactory, config: ControllerManagerConfig) -> ControllerManager {
    let workers = config.workers.max(1);
    let mut manager = ControllerManager::new(factory)
        .with("replicaset", move |ctx| async move {
            replicaset::run(ctx.factory.clone(), workers, ctx.stopped()).await
        })
        .with("replicationcontroller", move |ctx| async move {
            replicaset::run_replication_controllers(ctx.factory.clone(), workers, ctx.stopped()).await
        })
        .with("deployment", move |ctx| async move {
            deployment::run(ctx.factory.clone(), workers, ctx.stopped()).await
        })
        .with("garbagecollector", move |ctx| async move {
            garbage_collector::run(ctx.factory.client().clone(), config.gc_interval, ctx.stopped()).await
        })
        .with("namespace", move |ctx| async move { namespace::run(ctx.factory.clone(), workers, ctx.stopped()).await })
        .with("serviceaccount", |ctx| async move { serviceaccount::run(ctx.factory.clone(), ctx.stopped()).await })
        .with("nodelifecycle", move |ctx| async move {
            node_lifecycle::NodeLifecycle::new(&ctx.factory, config.node_lifecycle).run(ctx.stopped()).await
        })
        .with("endpoints", move |ctx| async move { endpoints::run(ctx.factory.clone(), workers, ctx.stopped()).await });
    if let Some(tokens) = config.service_account_tokens {
        manager = manager.with("serviceaccount-token", move |ctx| {
            let tokens = tokens.clone();
            async move { serviceaccount_token::run(ctx.factory.clone(), tokens, ctx.stopped()).await }
        });
    }
    if let Some(cidr) = config.cluster_cidr {
        let mask = config.node_cidr_mask_size;
        manager = manager.with("nodeipam", move |ctx| async move {
            if let Err(error) = node_ipam::run(ctx.factory.clone(), &cidr, mask, ctx.stopped()).await {
                tracing::error!(%error, "nodeipam controller stopped");
            }
        });
    }
    manager
}
