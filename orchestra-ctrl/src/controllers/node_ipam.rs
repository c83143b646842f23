//! Node IPAM: gives each Node a `spec.podCIDR` (and `podCIDRs`) carved from a
//! cluster CIDR (IPv4), like kube-controller-manager's range allocator.
//!
//! What is in use is what the nodes' `spec.podCIDR`s say (so a restarted
//! controller, which starts only once its node cache has listed, never hands
//! out a block a node already has), plus the blocks it has just written and
//! the cache has not shown yet. A deleted node's block is free again, and the
//! nodes still waiting for one are looked at again at once. When every block
//! is taken, the node gets a `CIDRNotAvailable` event and its key is retried
//! with backoff.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::net::Ipv4Addr;
use std::ops::Range;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use parking_lot::Mutex;

use crate::controller::Controller;
use crate::events::{EventType, Recorder, reference};
use crate::informer::{Event, Informer, ObjectKey, SharedInformerFactory};
use crate::{Action, Error};

/// Name of the controller.
pub const NAME: &str = "node-ipam-controller";
/// Reason of the event a node gets when no block is left (upstream's).
pub const CIDR_NOT_AVAILABLE: &str = "CIDRNotAvailable";

/// An IPv4 cluster CIDR cut into per-node blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CidrSet {
    base: u32,
    prefix: u8,
    node_prefix: u8,
}

/// Parses `a.b.c.d/len` into the network address (host bits cleared) and length.
fn parse_cidr(cidr: &str) -> Result<(u32, u8), Error> {
    let (addr, len) = cidr.split_once('/').ok_or_else(|| Error::Other(format!("bad CIDR {cidr}")))?;
    let addr: Ipv4Addr = addr.parse().map_err(|e| Error::Other(format!("bad CIDR {cidr}: {e}")))?;
    let len: u8 = len.parse().map_err(|e| Error::Other(format!("bad CIDR {cidr}: {e}")))?;
    if len > 32 {
        return Err(Error::Other(format!("bad CIDR {cidr}: prefix longer than 32")));
    }
    Ok((u32::from(addr) & mask(len), len))
}

fn mask(len: u8) -> u32 {
    if len == 0 { 0 } else { u32::MAX << (32 - len) }
}

impl CidrSet {
    /// `cluster` like `10.244.0.0/16`, blocks of `/node_prefix` (e.g. 24).
    pub fn new(cluster: &str, node_prefix: u8) -> Result<Self, Error> {
        let (base, prefix) = parse_cidr(cluster)?;
        if prefix > node_prefix || node_prefix > 32 {
            return Err(Error::Other("node prefix must be longer than the cluster prefix".into()));
        }
        // Upstream's limit too: at most 2^16 blocks.
        if node_prefix - prefix > 16 {
            return Err(Error::Other(format!(
                "a /{prefix} cut into /{node_prefix} blocks has too many blocks (the node prefix may be at most 16 longer)"
            )));
        }
        Ok(Self { base, prefix, node_prefix })
    }

    /// Number of node blocks.
    pub fn size(&self) -> u32 {
        1u32 << (self.node_prefix - self.prefix)
    }

    /// The cluster CIDR.
    pub fn cluster(&self) -> String {
        format!("{}/{}", Ipv4Addr::from(self.base), self.prefix)
    }

    /// The `index`th block.
    pub fn block(&self, index: u32) -> String {
        let ip = self.base + (index << (32 - self.node_prefix));
        format!("{}/{}", Ipv4Addr::from(ip), self.node_prefix)
    }

    /// The indices of the blocks `cidr` overlaps (empty if it lies outside
    /// the cluster CIDR or does not parse): a node given a larger range, or
    /// an address inside a block rather than the block itself, still takes
    /// the blocks it covers, as upstream's `Occupy` does.
    pub fn overlapping(&self, cidr: &str) -> Range<u32> {
        let Ok((addr, len)) = parse_cidr(cidr) else { return 0..0 };
        let shift = 32 - u32::from(self.node_prefix);
        if len <= self.prefix {
            // As large as the cluster CIDR or larger: all of it, if it holds it.
            return if self.base & mask(len) == addr { 0..self.size() } else { 0..0 };
        }
        if addr & mask(self.prefix) != self.base {
            return 0..0;
        }
        let first = (addr - self.base) >> shift;
        let count = if len >= self.node_prefix { 1 } else { 1u32 << (self.node_prefix - len) };
        first..(first + count).min(self.size())
    }

    /// The first block not in `used`.
    pub fn first_free(&self, used: &HashSet<String>) -> Option<String> {
        let taken: HashSet<u32> = used.iter().flat_map(|c| self.overlapping(c)).collect();
        (0..self.size()).find(|i| !taken.contains(i)).map(|i| self.block(i))
    }
}

/// A block written to a node that the cache does not show yet.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Pending {
    block: String,
    node: String,
    uid: String,
}

/// What the reconciler works with.
pub struct Context {
    /// Client for writes.
    pub client: Client,
    /// The shared Node cache.
    pub nodes: Arc<Informer<Node>>,
    /// The cluster CIDR.
    pub cidrs: CidrSet,
    /// Records `CIDRNotAvailable` events.
    pub recorder: Recorder,
    /// Blocks handed out but not yet seen in the cache, by node UID.
    pending: Mutex<HashMap<String, Pending>>,
}

impl Context {
    /// A context allocating from `cidrs` over `factory`'s node cache.
    pub fn new(factory: &SharedInformerFactory, cidrs: CidrSet) -> Self {
        Self {
            client: factory.client().clone(),
            nodes: factory.informer::<Node>(),
            cidrs,
            recorder: Recorder::new(factory.client().clone(), NAME, NAME),
            pending: Mutex::default(),
        }
    }

    /// The blocks in use: every cached node's, and those being written.
    /// Forgets pending blocks the cache now shows, or whose node is gone.
    pub fn used(&self) -> HashSet<String> {
        let mut used: HashSet<String> =
            self.nodes.list().iter().filter_map(|n| pod_cidr(n).map(str::to_owned)).collect();
        let mut pending = self.pending.lock();
        pending.retain(|_, p| {
            self.nodes
                .get(&ObjectKey::cluster(&p.node))
                .is_some_and(|n| n.metadata.uid.as_deref() == Some(p.uid.as_str()) && pod_cidr(&n).is_none())
        });
        used.extend(pending.values().map(|p| p.block.clone()));
        used
    }
}

fn pod_cidr(node: &Node) -> Option<&str> {
    node.spec
        .as_ref()
        .and_then(|s| {
            s.pod_cidr.as_deref().or_else(|| s.pod_cidrs.as_ref().and_then(|c| c.first()).map(String::as_str))
        })
        .filter(|c| !c.is_empty())
}

/// Assigns a block to a node without one.
pub async fn reconcile(node: Arc<Node>, ctx: Arc<Context>) -> Result<Action, Error> {
    if pod_cidr(&node).is_some() {
        return Ok(Action::await_change());
    }
    let name = node.metadata.name.clone().unwrap_or_default();
    let uid = node.metadata.uid.clone().unwrap_or_default();
    let used = ctx.used();
    let block = {
        let mut pending = ctx.pending.lock();
        if pending.contains_key(&uid) {
            // Written already; the cache has not caught up.
            return Ok(Action::await_change());
        }
        let block = ctx.cidrs.first_free(&used);
        if let Some(block) = &block {
            pending.insert(uid.clone(), Pending { block: block.clone(), node: name.clone(), uid: uid.clone() });
        }
        block
    };
    let Some(block) = block else {
        let note = format!(
            "Node {name} status is now: {CIDR_NOT_AVAILABLE} (no CIDR left in {} for a /{} block)",
            ctx.cidrs.cluster(),
            ctx.cidrs.node_prefix
        );
        if let Err(e) = ctx
            .recorder
            .publish(reference(node.as_ref()), EventType::Normal, CIDR_NOT_AVAILABLE, "AllocateCIDR", &note)
            .await
        {
            tracing::debug!(error = %e, "could not record {CIDR_NOT_AVAILABLE}");
        }
        tracing::warn!(node = %name, cluster_cidr = %ctx.cidrs.cluster(), "no pod CIDR left to allocate");
        return Err(Error::Other(format!(
            "CIDR allocation failed for node {name}: there are no remaining CIDRs left to allocate in {}",
            ctx.cidrs.cluster()
        )));
    };
    let api: Api<Node> = Api::all(ctx.client.clone());
    // The UID precondition: a node deleted and created again under the same
    // name is a new node, allocated on its own.
    let patch = serde_json::json!({"metadata": {"uid": uid}, "spec": {"podCIDR": block, "podCIDRs": [block]}});
    let result = api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await;
    if result.is_err() {
        ctx.pending.lock().remove(&uid);
    }
    match result {
        Ok(_) => Ok(Action::await_change()),
        // Deleted meanwhile: nothing to do.
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Action::await_change()),
        Err(e) => Err(e.into()),
    }
}

/// Runs the controller until `shutdown` (one worker: allocation is serial).
pub async fn run(
    factory: SharedInformerFactory,
    cluster_cidr: &str,
    node_prefix: u8,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), Error> {
    let ctx = Arc::new(Context::new(&factory, CidrSet::new(cluster_cidr, node_prefix)?));
    let mut controller = Controller::<Node>::for_(&factory).name(NAME).concurrency(1);
    // A deleted node's block is free: the nodes waiting for one (maybe in a
    // long backoff after finding the range full) try again now.
    let queue = controller.queue();
    let mut events = ctx.nodes.subscribe();
    let nodes = ctx.nodes.clone();
    let releases = tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            let Event::Delete(gone) = event else { continue };
            if pod_cidr(&gone).is_none() {
                continue;
            }
            for waiting in nodes.list().iter().filter(|n| pod_cidr(n).is_none()) {
                queue.add(ObjectKey::of(waiting.as_ref()));
            }
        }
    });
    controller.run(reconcile, ctx, shutdown).await;
    releases.abort();
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
        assert!(CidrSet::new("10.0.0.0/8", 25).is_err(), "2^17 blocks");
    }

    #[test]
    fn occupied_ranges_take_every_block_they_overlap() {
        let set = CidrSet::new("10.244.0.0/16", 24).unwrap();
        let table = [
            ("10.244.3.0/24", 3..4),
            // An address inside a block, not the block's own address.
            ("10.244.3.77/24", 3..4),
            ("10.244.4.0/23", 4..6),
            ("10.244.7.128/25", 7..8),
            ("10.244.0.0/16", 0..256),
            ("10.0.0.0/8", 0..256),
            ("10.245.0.0/24", 0..0),
            ("192.168.0.0/16", 0..0),
            ("nonsense", 0..0),
        ];
        for (cidr, expected) in table {
            assert_eq!(set.overlapping(cidr), expected, "{cidr}");
        }
        let used: HashSet<String> = ["10.244.0.0/23".to_string(), "10.244.2.9/24".to_string()].into();
        assert_eq!(set.first_free(&used).as_deref(), Some("10.244.3.0/24"));
    }
}
