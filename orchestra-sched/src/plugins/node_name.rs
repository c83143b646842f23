//! NodeName: a pod with `spec.nodeName` fits only that node.

use std::sync::Arc;

use crate::framework::*;
use crate::node_info::{NodeInfo, PodInfo};
use crate::registry::{NoArgs, PluginError, PluginSet};

/// The plugin's name.
pub const NAME: &str = "NodeName";
/// Upstream's reason.
pub const ERR_REASON: &str = "node(s) didn't match the requested node name";

/// Filters out every node but `spec.nodeName` when it is set.
#[derive(Debug, Default)]
pub struct NodeName;

impl Plugin for NodeName {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![ClusterEvent::new(EventResource::Node, action::ADD)]
    }
}

impl Filter for NodeName {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match pod.pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            Some(n) if !n.is_empty() && n != node.name() => Status::unresolvable(ERR_REASON),
            _ => Status::success(),
        }
    }
}

/// The plugin's arguments: it has no options.
pub type Args = NoArgs;

/// Builds the plugin, as registered under [`NAME`].
pub fn new(_: Args, _: &Handle) -> Result<PluginSet, PluginError> {
    let p = Arc::new(NodeName);
    Ok(PluginSet::new(&p).filter(&p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder, node_info, pod_info};

    #[test]
    fn table() {
        for (pod_node, node, want) in [
            (None, "n1", Code::Success),
            (Some("n1"), "n1", Code::Success),
            (Some("n2"), "n1", Code::UnschedulableAndUnresolvable),
        ] {
            let mut b = PodBuilder::new("p");
            if let Some(n) = pod_node {
                b = b.node(n);
            }
            let s = NodeName.filter(
                &CycleState::new(),
                &pod_info(b.build()),
                &node_info(NodeBuilder::new(node).build(), vec![]),
            );
            assert_eq!(s.code, want);
        }
    }
}
