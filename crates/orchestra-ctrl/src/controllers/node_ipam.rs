//! Node IPAM: gives each Node a `spec.podCIDR` (and `podCIDRs`) carved from a
//! cluster CIDR (IPv4), like kube-controller-manager's range allocator.

use std::future::Future;
use std::net::Ipv4Addr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use parking_lot::Mutex;
use std::collections::HashSet;

use crate::informer::{Informer, SharedInformerFactory};
use crate::{Action, Controller, Error};

/// Name of the controller.
pub const NAME: &str = "node-ipam-controller";

/// An IPv4 cluster CIDR cut into per-node blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CidrSet {
    base: u32,
    prefix: u8,
    node_prefix: u8,
}

impl CidrSet {
    /// `cluster` like `10.244.0.0/16`, blocks of `/node_prefix` (e.g. 24).
    pub fn new(cluster: &str, node_prefix: u8) -> Result<Self, Error> {
        let (addr, len) = cluster
            .split_once('/')
            .ok_or_else(|| Error::Other(format!("bad CIDR {cluster}")))?;
        let addr: Ipv4Addr = addr.parse().map_err(|e| Error::Other(format!("{e}")))?;
        let prefix: u8 = len.parse().map_err(|e| Error::Other(format!("{e}")))?;
        if prefix > node_prefix || node_prefix > 32 {
            return Err(Error::Other("node prefix must be longer than the cluster prefix".into()));
        }
        let mask = if prefix == 0 { 0 } else { u32::MAX << (32 - prefix) };
        Ok(Self {
            base: u32::from(addr) & mask,
            prefix,
            node_prefix,
        })
    }

    /// Number of node blocks.
    pub fn size(&self) -> u32 {
        1u32 << (self.node_prefix - self.prefix)
    }

    /// The `index`th block.
    pub fn block(&self, index: u32) -> String {
        let ip = self.base + (index << (32 - self.node_prefix));
        format!("{}/{}", Ipv4Addr::from(ip), self.node_prefix)
    }

    /// The first block not in `used`.
    pub fn first_free(&self, used: &HashSet<String>) -> Option<String> {
        (0..self.size()).map(|i| self.block(i)).find(|b| !used.contains(b))
    }
}

/// What the reconciler works with.
pub struct Context {
    /// Client for writes.
    pub client: Client,
    /// The shared Node cache.
    pub nodes: Arc<Informer<Node>>,
    /// The cluster CIDR.
    pub cidrs: CidrSet,
    /// Blocks handed out but maybe not yet seen in the cache.
    pub pending: Mutex<HashSet<String>>,
}

/// Assigns a block to a node without one.
pub async fn reconcile(node: Arc<Node>, ctx: Arc<Context>) -> Result<Action, Error> {
    if node.spec.as_ref().and_then(|s| s.pod_cidr.as_ref()).is_some() {
        return Ok(Action::await_change());
    }
    let mut used: HashSet<String> = ctx
        .nodes
        .list()
        .iter()
        .filter_map(|n| n.spec.as_ref().and_then(|s| s.pod_cidr.clone()))
        .collect();
    let block = {
        let mut pending = ctx.pending.lock();
        used.extend(pending.iter().cloned());
        let block = ctx
            .cidrs
            .first_free(&used)
            .ok_or_else(|| Error::Other("cluster CIDR exhausted".into()))?;
        pending.insert(block.clone());
        block
    };
    let api: Api<Node> = Api::all(ctx.client.clone());
    let patch = serde_json::json!({"spec": {"podCIDR": block, "podCIDRs": [block]}});
    let result = api
        .patch(node.metadata.name.as_deref().unwrap_or_default(), &PatchParams::default(), &Patch::Merge(&patch))
        .await;
    if result.is_err() {
        ctx.pending.lock().remove(&block);
    }
    result?;
    Ok(Action::await_change())
}

/// Runs the controller until `shutdown` (one worker: allocation is serial).
pub async fn run(factory: SharedInformerFactory, cluster_cidr: &str, node_prefix: u8, shutdown: impl Future<Output = ()> + Send) -> Result<(), Error> {
    let ctx = Arc::new(Context {
        client: factory.client().clone(),
        nodes: factory.informer::<Node>(),
        cidrs: CidrSet::new(cluster_cidr, node_prefix)?,
        pending: Mutex::default(),
    });
    Controller::<Node>::for_(&factory)
        .name(NAME)
        .concurrency(1)
        .run(reconcile, ctx, shutdown)
        .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks() {
        let set = CidrSet::new("10.244.0.0/16", 24).unwrap();
        assert_eq!(set.size(), 256);
        assert_eq!(set.block(0), "10.244.0.0/24");
        assert_eq!(set.block(3), "10.244.3.0/24");
        let used: HashSet<String> = ["10.244.0.0/24".to_string(), "10.244.1.0/24".to_string()].into();
        assert_eq!(set.first_free(&used).as_deref(), Some("10.244.2.0/24"));
        let tiny = CidrSet::new("10.0.0.0/24", 25).unwrap();
        let all: HashSet<String> = [tiny.block(0), tiny.block(1)].into();
        assert_eq!(tiny.first_free(&all), None);
        assert!(CidrSet::new("10.0.0.0/24", 16).is_err());
    }
}
