//! The per-cycle view of the cluster: an immutable list of node infos.

use std::collections::HashMap;
use std::sync::Arc;

use crate::node_info::{NodeInfo, PodInfo};
use crate::plugins::helpers::pod_priority;

/// The nodes as one scheduling cycle sees them. Cheap to clone: the node
/// list is shared, and the cache replaces a changed node info rather than
/// changing it in place.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Every node.
    pub nodes: Arc<Vec<Arc<NodeInfo>>>,
    /// Node name to index in `nodes`.
    pub index: Arc<HashMap<String, usize>>,
    /// How many nodes hold each image.
    pub image_nodes: Arc<HashMap<String, usize>>,
    /// Pods on these nodes with (anti-)affinity terms of any kind.
    pub pods_with_affinity: usize,
    /// Pods on these nodes with required anti-affinity terms.
    pub pods_with_required_anti_affinity: usize,
    /// Pods nominated to a node by preemption and not yet bound, by node.
    pub nominated: Arc<HashMap<String, Vec<Arc<PodInfo>>>>,
    /// The cache's node layout and change generation this snapshot has
    /// caught up with (`None`: never updated from a cache).
    pub(crate) layout: Option<u64>,
    pub(crate) generation: u64,
}

impl Snapshot {
    /// A snapshot of `nodes` (for tests and the algorithm benchmark).
    pub fn from_nodes(nodes: Vec<NodeInfo>) -> Snapshot {
        let mut index = HashMap::new();
        let mut images: HashMap<String, usize> = HashMap::new();
        let (mut affinity, mut anti) = (0, 0);
        for (i, n) in nodes.iter().enumerate() {
            index.insert(n.name().to_owned(), i);
            for name in n.images.keys() {
                *images.entry(name.clone()).or_default() += 1;
            }
            affinity += n.pods_with_affinity.len();
            anti += n.pods_with_required_anti_affinity.len();
        }
        Snapshot {
            nodes: Arc::new(nodes.into_iter().map(Arc::new).collect()),
            index: Arc::new(index),
            image_nodes: Arc::new(images),
            pods_with_affinity: affinity,
            pods_with_required_anti_affinity: anti,
            nominated: Default::default(),
            layout: None,
            generation: 0,
        }
    }
    /// The pods nominated to `node` that `pod` must leave room for: those
    /// of at least its priority, itself excepted (upstream's
    /// `addNominatedPods`).
    pub fn nominated_before(&self, node: &str, pod: &PodInfo) -> Vec<Arc<PodInfo>> {
        let Some(pods) = self.nominated.get(node) else { return Vec::new() };
        let priority = pod_priority(&pod.pod);
        pods.iter().filter(|p| p.uid() != pod.uid() && pod_priority(&p.pod) >= priority).cloned().collect()
    }
    /// The node `pod` is nominated to, if any.
    pub fn nominated_node_of<'a>(&'a self, pod: &'a PodInfo) -> Option<&'a str> {
        self.nominated
            .iter()
            .find(|(_, pods)| pods.iter().any(|p| p.uid() == pod.uid()))
            .map(|(node, _)| node.as_str())
            .or_else(|| pod.pod.status.as_ref().and_then(|s| s.nominated_node_name.as_deref()))
    }
    /// The node named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<NodeInfo>> {
        self.index.get(name).map(|i| &self.nodes[*i])
    }
    /// Nodes that hold pods with (anti-)affinity.
    pub fn with_affinity(&self) -> impl Iterator<Item = &Arc<NodeInfo>> {
        self.nodes.iter().filter(|n| !n.pods_with_affinity.is_empty())
    }
    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }
    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}
