//! NodeAffinity: `spec.nodeSelector` and required node affinity as a
//! filter; preferred node affinity as a score.

use std::sync::Arc;

use crate::framework::*;
use crate::node_info::{NodeInfo, PodInfo};
use crate::plugins::helpers::term_matches;
use crate::registry::{NoArgs, PluginError, PluginSet};

/// The plugin's name.
pub const NAME: &str = "NodeAffinity";
/// Upstream's reason.
pub const ERR_REASON: &str = "node(s) didn't match Pod's node affinity/selector";

/// The plugin.
#[derive(Debug, Default)]
pub struct NodeAffinity;

impl Plugin for NodeAffinity {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![ClusterEvent::new(EventResource::Node, action::ADD | action::UPDATE_NODE_LABEL)]
    }
}

/// Whether `node` satisfies the pod's nodeSelector and required node affinity.
pub fn required_matches(pod: &PodInfo, node: &NodeInfo) -> bool {
    let Some(spec) = pod.pod.spec.as_ref() else { return true };
    if let Some(sel) = spec.node_selector.as_ref() {
        let labels = node.labels();
        if !sel.iter().all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v)) {
            return false;
        }
    }
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref());
    match required {
        Some(r) => r.node_selector_terms.iter().any(|t| term_matches(t, &node.node)),
        None => true,
    }
}

impl Filter for NodeAffinity {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if required_matches(pod, node) { Status::success() } else { Status::unresolvable(ERR_REASON) }
    }
}

fn preferred(pod: &PodInfo) -> &[k8s_openapi::api::core::v1::PreferredSchedulingTerm] {
    pod.pod
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| n.preferred_during_scheduling_ignored_during_execution.as_deref())
        .unwrap_or_default()
}

impl PreScore for NodeAffinity {
    fn pre_score(&self, _: &mut CycleState, pod: &PodInfo, _: &[Arc<NodeInfo>]) -> Status {
        if preferred(pod).is_empty() { Status::skip() } else { Status::success() }
    }
}

impl Score for NodeAffinity {
    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        Ok(preferred(pod)
            .iter()
            .filter(|t| t.weight != 0 && term_matches(&t.preference, &node.node))
            .map(|t| t.weight as i64)
            .sum())
    }
    fn normalize(&self, _: &CycleState, _: &PodInfo, scores: &mut [NodeScore]) -> Status {
        default_normalize(scores, false);
        Status::success()
    }
}

/// The plugin's arguments: it has no options.
pub type Args = NoArgs;

/// Builds the plugin, as registered under [`NAME`].
pub fn new(_: Args, _: &Handle) -> Result<PluginSet, PluginError> {
    let p = Arc::new(NodeAffinity);
    Ok(PluginSet::new(&p).filter(&p).pre_score(&p).score(&p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder, node_info, pod_info};

    #[test]
    fn filter_table() {
        let node = || node_info(NodeBuilder::new("n").label("zone", "a").label("gen", "3").build(), vec![]);
        let cases = [
            ("nothing", PodBuilder::new("p"), true),
            ("selector match", PodBuilder::new("p").node_selector("zone", "a"), true),
            ("selector mismatch", PodBuilder::new("p").node_selector("zone", "b"), false),
            ("In", PodBuilder::new("p").required_node_affinity("zone", "In", &["a", "b"]), true),
            ("NotIn", PodBuilder::new("p").required_node_affinity("zone", "NotIn", &["a"]), false),
            ("Exists", PodBuilder::new("p").required_node_affinity("zone", "Exists", &[]), true),
            ("DoesNotExist", PodBuilder::new("p").required_node_affinity("zone", "DoesNotExist", &[]), false),
            ("Gt", PodBuilder::new("p").required_node_affinity("gen", "Gt", &["2"]), true),
            ("Lt", PodBuilder::new("p").required_node_affinity("gen", "Lt", &["2"]), false),
            (
                "terms are ORed",
                PodBuilder::new("p").required_node_affinity("zone", "In", &["x"]).required_node_affinity(
                    "gen",
                    "In",
                    &["3"],
                ),
                true,
            ),
            (
                "selector and affinity both",
                PodBuilder::new("p").node_selector("zone", "a").required_node_affinity("gen", "In", &["9"]),
                false,
            ),
        ];
        for (name, pod, want) in cases {
            let s = NodeAffinity.filter(&CycleState::new(), &pod_info(pod.build()), &node());
            assert_eq!(s.is_success(), want, "{name}");
            if !want {
                assert_eq!(s.reasons, [ERR_REASON]);
                assert_eq!(s.code, Code::UnschedulableAndUnresolvable);
            }
        }
    }

    #[test]
    fn score_table() {
        let pod = pod_info(
            PodBuilder::new("p")
                .preferred_node_affinity(10, "zone", "In", &["a"])
                .preferred_node_affinity(5, "disk", "In", &["ssd"])
                .build(),
        );
        let cases = [
            (NodeBuilder::new("a").label("zone", "a").label("disk", "ssd").build(), 15),
            (NodeBuilder::new("b").label("zone", "a").build(), 10),
            (NodeBuilder::new("c").build(), 0),
        ];
        let mut scores = Vec::new();
        for (node, want) in cases {
            let got = NodeAffinity.score(&CycleState::new(), &pod, &node_info(node, vec![])).unwrap();
            assert_eq!(got, want);
            scores.push(NodeScore { name: "".into(), score: got });
        }
        NodeAffinity.normalize(&CycleState::new(), &pod, &mut scores);
        assert_eq!(scores.iter().map(|s| s.score).collect::<Vec<_>>(), [100, 66, 0]);
    }
}
