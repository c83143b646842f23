//! TaintToleration: NoSchedule/NoExecute taints must be tolerated (filter);
//! fewer untolerated PreferNoSchedule taints score higher.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Taint, Toleration};

use crate::framework::*;
use crate::node_info::{NodeInfo, PodInfo};
use crate::registry::{NoArgs, PluginError, PluginSet};

/// The plugin's name.
pub const NAME: &str = "TaintToleration";

/// The plugin.
#[derive(Debug, Default)]
pub struct TaintToleration;

impl Plugin for TaintToleration {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![ClusterEvent::new(EventResource::Node, action::ADD | action::UPDATE_NODE_TAINT)]
    }
}

/// Whether `t` tolerates `taint` (Kubernetes' rules: empty effect matches
/// all effects, Exists with an empty key matches every taint).
pub fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if let Some(e) = t.effect.as_deref().filter(|e| !e.is_empty())
        && e != taint.effect
    {
        return false;
    }
    let key = t.key.as_deref().unwrap_or("");
    let op = t.operator.as_deref().unwrap_or("Equal");
    if key.is_empty() {
        return op == "Exists";
    }
    if key != taint.key {
        return false;
    }
    match op {
        "Exists" => true,
        "Equal" | "" => t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        _ => false,
    }
}

fn tolerations(pod: &PodInfo) -> &[Toleration] {
    pod.pod.spec.as_ref().and_then(|s| s.tolerations.as_deref()).unwrap_or_default()
}

fn taints(node: &NodeInfo) -> &[Taint] {
    &node.taints
}

impl Filter for TaintToleration {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let tols = tolerations(pod);
        for taint in taints(node) {
            if taint.effect != "NoSchedule" && taint.effect != "NoExecute" {
                continue;
            }
            if !tols.iter().any(|t| tolerates(t, taint)) {
                return Status::unresolvable(format!(
                    "node(s) had untolerated taint {{{}: {}}}",
                    taint.key,
                    taint.value.as_deref().unwrap_or("")
                ));
            }
        }
        Status::success()
    }
}

impl Score for TaintToleration {
    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let tols: Vec<&Toleration> = tolerations(pod)
            .iter()
            .filter(|t| t.effect.as_deref().is_none_or(|e| e.is_empty() || e == "PreferNoSchedule"))
            .collect();
        Ok(taints(node)
            .iter()
            .filter(|taint| taint.effect == "PreferNoSchedule" && !tols.iter().any(|t| tolerates(t, taint)))
            .count() as i64)
    }
    fn normalize(&self, _: &CycleState, _: &PodInfo, scores: &mut [NodeScore]) -> Status {
        default_normalize(scores, true);
        Status::success()
    }
}

/// The plugin's arguments: it has no options.
pub type Args = NoArgs;

/// Builds the plugin, as registered under [`NAME`].
pub fn new(_: Args, _: &Handle) -> Result<PluginSet, PluginError> {
    let p = Arc::new(TaintToleration);
    Ok(PluginSet::new(&p).filter(&p).score(&p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder, node_info, pod_info};

    #[test]
    fn filter_table() {
        let node = || {
            node_info(
                NodeBuilder::new("n")
                    .taint("dedicated", "gpu", "NoSchedule")
                    .taint("soft", "x", "PreferNoSchedule")
                    .build(),
                vec![],
            )
        };
        let cases = [
            ("untolerated", PodBuilder::new("p"), false),
            ("Equal", PodBuilder::new("p").toleration("dedicated", "Equal", Some("gpu"), Some("NoSchedule")), true),
            (
                "wrong value",
                PodBuilder::new("p").toleration("dedicated", "Equal", Some("cpu"), Some("NoSchedule")),
                false,
            ),
            ("Exists", PodBuilder::new("p").toleration("dedicated", "Exists", None, None), true),
            ("wrong effect", PodBuilder::new("p").toleration("dedicated", "Exists", None, Some("NoExecute")), false),
            ("tolerate all", PodBuilder::new("p").toleration("", "Exists", None, None), true),
        ];
        for (name, pod, want) in cases {
            let s = TaintToleration.filter(&CycleState::new(), &pod_info(pod.build()), &node());
            assert_eq!(s.is_success(), want, "{name}");
            if !want {
                assert_eq!(s.reasons, ["node(s) had untolerated taint {dedicated: gpu}"]);
            }
        }
    }

    #[test]
    fn no_execute_filter_table() {
        // NoExecute taints filter as NoSchedule ones do; tolerationSeconds
        // (how long a running pod stays after the taint) does not matter here.
        let node = || node_info(NodeBuilder::new("n").taint("evict", "now", "NoExecute").build(), vec![]);
        let seconds = |s: i64| {
            move |p: &mut k8s_openapi::api::core::v1::Pod| {
                p.spec.as_mut().unwrap().tolerations.as_mut().unwrap()[0].toleration_seconds = Some(s)
            }
        };
        let cases = [
            ("untolerated", PodBuilder::new("p"), false),
            ("tolerated", PodBuilder::new("p").toleration("evict", "Equal", Some("now"), Some("NoExecute")), true),
            (
                "tolerated with tolerationSeconds",
                PodBuilder::new("p").toleration("evict", "Equal", Some("now"), Some("NoExecute")).with(seconds(300)),
                true,
            ),
            (
                "Exists, any effect, with tolerationSeconds",
                PodBuilder::new("p").toleration("evict", "Exists", None, None).with(seconds(0)),
                true,
            ),
            (
                "NoSchedule toleration only",
                PodBuilder::new("p").toleration("evict", "Exists", None, Some("NoSchedule")),
                false,
            ),
            (
                "wrong value",
                PodBuilder::new("p").toleration("evict", "Equal", Some("later"), Some("NoExecute")).with(seconds(300)),
                false,
            ),
        ];
        for (name, pod, want) in cases {
            let s = TaintToleration.filter(&CycleState::new(), &pod_info(pod.build()), &node());
            assert_eq!(s.is_success(), want, "{name}");
            if !want {
                assert_eq!(s.code, Code::UnschedulableAndUnresolvable, "{name}");
                assert_eq!(s.reasons, ["node(s) had untolerated taint {evict: now}"], "{name}");
            }
        }
    }

    #[test]
    fn score_table() {
        let pod = pod_info(PodBuilder::new("p").toleration("a", "Exists", None, Some("PreferNoSchedule")).build());
        let nodes = [
            (NodeBuilder::new("clean").build(), 0),
            (NodeBuilder::new("tolerated").taint("a", "1", "PreferNoSchedule").build(), 0),
            (NodeBuilder::new("one").taint("b", "1", "PreferNoSchedule").build(), 1),
            (
                NodeBuilder::new("two").taint("b", "1", "PreferNoSchedule").taint("c", "1", "PreferNoSchedule").build(),
                2,
            ),
        ];
        let mut scores = Vec::new();
        for (n, want) in nodes {
            let got = TaintToleration.score(&CycleState::new(), &pod, &node_info(n, vec![])).unwrap();
            assert_eq!(got, want);
            scores.push(NodeScore { name: "".into(), score: got });
        }
        TaintToleration.normalize(&CycleState::new(), &pod, &mut scores);
        assert_eq!(scores.iter().map(|s| s.score).collect::<Vec<_>>(), [100, 100, 50, 0]);
    }
}
