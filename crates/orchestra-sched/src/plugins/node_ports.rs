//! NodePorts: the host ports a pod asks for must be free on the node.

use std::sync::Arc;

use crate::framework::*;
use crate::node_info::{NodeInfo, PodInfo};
use crate::registry::PluginSet;

/// The plugin's name.
pub const NAME: &str = "NodePorts";
/// Upstream's reason.
pub const ERR_REASON: &str = "node(s) didn't have free ports for the requested pod ports";

/// The plugin.
#[derive(Debug, Default)]
pub struct NodePorts;

impl Plugin for NodePorts {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![ClusterEvent::new(EventResource::AssignedPod, action::DELETE), ClusterEvent::new(EventResource::Node, action::ADD)]
    }
}

impl PreFilter for NodePorts {
    fn pre_filter(&self, _: &mut CycleState, pod: &PodInfo, _: &crate::snapshot::Snapshot) -> (PreFilterResult, Status) {
        if pod.host_ports.is_empty() { (None, Status::skip()) } else { (None, Status::success()) }
    }
}

impl Filter for NodePorts {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if pod.host_ports.iter().any(|p| node.port_conflicts(p)) { Status::unschedulable(ERR_REASON) } else { Status::success() }
    }
}

/// The factory.
pub fn factory() -> PluginSet {
    let p = Arc::new(NodePorts);
    PluginSet::new(&p).pre_filter(&p).filter(&p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder, node_info, pod_info};

    #[test]
    fn table() {
        let cases = [
            ("free", vec![], 80, true),
            ("other port used", vec![PodBuilder::new("o").host_port(8080).build()], 80, true),
            ("same port used", vec![PodBuilder::new("o").host_port(80).build()], 80, false),
        ];
        for (name, pods, port, want) in cases {
            let n = node_info(NodeBuilder::new("n").build(), pods);
            let s = NodePorts.filter(&CycleState::new(), &pod_info(PodBuilder::new("p").host_port(port).build()), &n);
            assert_eq!(s.is_success(), want, "{name}");
        }
    }
}
