//! NodeUnschedulable: cordoned nodes take only pods tolerating
//! `node.kubernetes.io/unschedulable:NoSchedule`.

use std::sync::Arc;

use crate::framework::*;
use crate::node_info::{NodeInfo, PodInfo};
use crate::registry::{NoArgs, PluginError, PluginSet};

/// The plugin's name.
pub const NAME: &str = "NodeUnschedulable";
/// Upstream's reason.
pub const ERR_REASON: &str = "node(s) were unschedulable";
/// The taint key a cordoned node implies.
pub const TAINT_KEY: &str = "node.kubernetes.io/unschedulable";

/// Filters out nodes with `spec.unschedulable` unless tolerated.
#[derive(Debug, Default)]
pub struct NodeUnschedulable;

impl Plugin for NodeUnschedulable {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![ClusterEvent::new(EventResource::Node, action::ADD | action::UPDATE_NODE_TAINT)]
    }
}

impl Filter for NodeUnschedulable {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if !node.unschedulable {
            return Status::success();
        }
        let tolerated = pod.pod.spec.as_ref().and_then(|s| s.tolerations.as_ref()).is_some_and(|ts| {
            ts.iter().any(|t| {
                let key_ok = t.key.as_deref().is_none_or(|k| k.is_empty() || k == TAINT_KEY);
                let op_exists = t.operator.as_deref() == Some("Exists");
                let effect_ok = t.effect.as_deref().is_none_or(|e| e.is_empty() || e == "NoSchedule");
                key_ok
                    && effect_ok
                    && (op_exists
                        || (t.key.as_deref() == Some(TAINT_KEY) && t.value.as_deref().unwrap_or("").is_empty()))
            })
        });
        if tolerated { Status::success() } else { Status::unresolvable(ERR_REASON) }
    }
}

/// The plugin's arguments: it has no options.
pub type Args = NoArgs;

/// Builds the plugin, as registered under [`NAME`].
pub fn new(_: Args, _: &Handle) -> Result<PluginSet, PluginError> {
    let p = Arc::new(NodeUnschedulable);
    Ok(PluginSet::new(&p).filter(&p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder, node_info, pod_info};

    #[test]
    fn table() {
        let cases = [
            (NodeBuilder::new("n").build(), PodBuilder::new("p").build(), Code::Success),
            (
                NodeBuilder::new("n").unschedulable().build(),
                PodBuilder::new("p").build(),
                Code::UnschedulableAndUnresolvable,
            ),
            (
                NodeBuilder::new("n").unschedulable().build(),
                PodBuilder::new("p").toleration(TAINT_KEY, "Exists", None, Some("NoSchedule")).build(),
                Code::Success,
            ),
        ];
        for (node, pod, want) in cases {
            assert_eq!(
                NodeUnschedulable.filter(&CycleState::new(), &pod_info(pod), &node_info(node, vec![])).code,
                want
            );
        }
    }
}
