//! PodTopologySpread: `DoNotSchedule` constraints as a filter (maxSkew,
//! minDomains, node inclusion policies), `ScheduleAnyway` as a score.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::TopologySpreadConstraint;
use orchestra_core::api::LabelSelector;

use crate::framework::*;
use crate::node_info::{NodeInfo, PodInfo};
use crate::plugins::helpers::pod_labels;
use crate::plugins::node_affinity::required_matches;
use crate::plugins::taint_toleration::tolerates;
use crate::registry::{NoArgs, PluginError, PluginSet};
use crate::snapshot::Snapshot;

/// The plugin's name.
pub const NAME: &str = "PodTopologySpread";
/// Upstream's reason when the skew is too large.
pub const ERR_CONSTRAINTS: &str = "node(s) didn't match pod topology spread constraints";
/// Upstream's reason when the node lacks a topology label.
pub const ERR_MISSING_LABEL: &str = "node(s) didn't match pod topology spread constraints (missing required label)";

/// The plugin.
#[derive(Debug, Default)]
pub struct PodTopologySpread;

impl Plugin for PodTopologySpread {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::new(EventResource::AssignedPod, action::ADD | action::DELETE | action::UPDATE_POD_LABEL),
            ClusterEvent::new(
                EventResource::Node,
                action::ADD | action::DELETE | action::UPDATE_NODE_LABEL | action::UPDATE_NODE_TAINT,
            ),
        ]
    }
}

/// What a pod without labels has.
static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

#[derive(Debug, Clone)]
struct Constraint {
    max_skew: i64,
    key: String,
    /// The constraint's selector, converted once: a nil one selects
    /// nothing, an invalid one too.
    selector: LabelSelector,
    min_domains: i64,
    honor_affinity: bool,
    honor_taints: bool,
}

fn constraints(pod: &PodInfo, when: &str) -> Vec<Constraint> {
    let spec = pod.pod.spec.as_ref();
    spec.and_then(|s| s.topology_spread_constraints.as_ref())
        .into_iter()
        .flatten()
        .filter(|c: &&TopologySpreadConstraint| c.when_unsatisfiable == when)
        .map(|c| {
            let mut typed = c.label_selector.clone();
            // matchLabelKeys: the pod's own values join the selector.
            for k in c.match_label_keys.iter().flatten() {
                if let (Some(typed), Some(v)) = (typed.as_mut(), pod_labels(&pod.pod).and_then(|l| l.get(k))) {
                    typed.match_labels.get_or_insert_with(Default::default).insert(k.clone(), v.clone());
                }
            }
            let selector = LabelSelector::from_meta(typed.as_ref()).unwrap_or_else(|_| LabelSelector::nothing());
            Constraint {
                max_skew: c.max_skew as i64,
                key: c.topology_key.clone(),
                selector,
                min_domains: c.min_domains.unwrap_or(1) as i64,
                honor_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
                honor_taints: c.node_taints_policy.as_deref() == Some("Honor"),
            }
        })
        .collect()
}

fn node_included(c: &Constraint, pod: &PodInfo, node: &NodeInfo) -> bool {
    if c.honor_affinity && !required_matches(pod, node) {
        return false;
    }
    if c.honor_taints {
        let tols = pod.pod.spec.as_ref().and_then(|s| s.tolerations.as_deref()).unwrap_or_default();
        let taints = &node.taints;
        if taints
            .iter()
            .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
            .any(|t| !tols.iter().any(|tol| tolerates(tol, t)))
        {
            return false;
        }
    }
    true
}

fn count_matching(c: &Constraint, pod: &PodInfo, node: &NodeInfo) -> i64 {
    let ns = pod.namespace();
    node.pods
        .iter()
        .filter(|p| {
            p.namespace() == ns
                && p.pod.metadata.deletion_timestamp.is_none()
                && c.selector.matches(pod_labels(&p.pod).unwrap_or(&NO_LABELS))
        })
        .count() as i64
}

/// Adds `n` to the count of topology value `value`; the value is copied
/// only the first time it is seen (domains are few, nodes many).
fn add_count(counts: &mut HashMap<String, i64>, value: &str, n: i64) {
    match counts.get_mut(value) {
        Some(count) => *count += n,
        None => {
            counts.insert(value.to_owned(), n);
        }
    }
}

struct FilterState {
    constraints: Vec<Constraint>,
    /// Per constraint: matching pods per topology value.
    counts: Vec<HashMap<String, i64>>,
    /// Per constraint: the global minimum (0 when fewer domains than minDomains).
    min: Vec<i64>,
}

impl PreFilter for PodTopologySpread {
    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, snapshot: &Snapshot) -> (PreFilterResult, Status) {
        let cs = constraints(pod, "DoNotSchedule");
        if cs.is_empty() {
            return (None, Status::skip());
        }
        let mut counts: Vec<HashMap<String, i64>> = vec![HashMap::new(); cs.len()];
        for node in snapshot.nodes.iter() {
            if !cs.iter().all(|c| node.label(&c.key).is_some()) {
                continue;
            }
            for (i, c) in cs.iter().enumerate() {
                if !node_included(c, pod, node) {
                    continue;
                }
                let v = node.label(&c.key).expect("checked");
                add_count(&mut counts[i], v, count_matching(c, pod, node));
            }
        }
        let min = cs
            .iter()
            .zip(&counts)
            .map(|(c, m)| if (m.len() as i64) < c.min_domains { 0 } else { m.values().copied().min().unwrap_or(0) })
            .collect();
        state.write(NAME, FilterState { constraints: cs, counts, min });
        (None, Status::success())
    }
}

impl Filter for PodTopologySpread {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(st) = state.read::<FilterState>(NAME) else { return Status::success() };
        for (i, c) in st.constraints.iter().enumerate() {
            let Some(v) = node.label(&c.key) else { return Status::unresolvable(ERR_MISSING_LABEL) };
            let self_match = c.selector.matches(pod_labels(&pod.pod).unwrap_or(&NO_LABELS)) as i64;
            let count = st.counts[i].get(v).copied().unwrap_or(0);
            if count + self_match - st.min[i] > c.max_skew {
                return Status::unschedulable(ERR_CONSTRAINTS);
            }
        }
        Status::success()
    }
}

/// The hostname label: spreading over it is counted per node in Score
/// (one domain per node; no map of every node's name).
const HOSTNAME: &str = "kubernetes.io/hostname";

fn has_all_keys(cs: &[Constraint], node: &NodeInfo) -> bool {
    cs.iter().all(|c| node.label(&c.key).is_some())
}

struct ScoreState {
    constraints: Vec<Constraint>,
    /// Per constraint: matching pods per topology value, for the values of
    /// the feasible nodes (empty for the hostname key).
    counts: Vec<HashMap<String, i64>>,
    weights: Vec<f64>,
}

impl PreScore for PodTopologySpread {
    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, nodes: &[Arc<NodeInfo>]) -> Status {
        let cs = constraints(pod, "ScheduleAnyway");
        if cs.is_empty() || nodes.is_empty() {
            return Status::skip();
        }
        // The domains come from the feasible nodes that have every topology
        // key (the others are not scored) ...
        let mut counts: Vec<HashMap<String, i64>> = vec![HashMap::new(); cs.len()];
        let mut scored = 0usize;
        for node in nodes.iter().filter(|n| has_all_keys(&cs, n)) {
            scored += 1;
            for (i, c) in cs.iter().enumerate() {
                if c.key == HOSTNAME {
                    continue;
                }
                let v = node.label(&c.key).expect("checked");
                if !counts[i].contains_key(v) {
                    counts[i].insert(v.to_owned(), 0);
                }
            }
        }
        let weights = cs
            .iter()
            .zip(&counts)
            .map(|(c, m)| {
                let size = if c.key == HOSTNAME { scored } else { m.len() };
                ((size + 2) as f64).ln()
            })
            .collect();
        // ... and their pods are counted on every node of the cluster that
        // passes the inclusion policies, as upstream: a domain's infeasible
        // nodes (full, or tainted under the default Ignore policy) still
        // hold its pods. Without the cycle's snapshot (outside the
        // algorithm) only the given nodes are known.
        let all: &[Arc<NodeInfo>] = state.snapshot().map_or(nodes, |s| &s.nodes[..]);
        if counts.iter().any(|m| !m.is_empty()) {
            for node in all.iter().filter(|n| has_all_keys(&cs, n)) {
                for (i, c) in cs.iter().enumerate() {
                    let Some(count) = counts[i].get_mut(node.label(&c.key).expect("checked")) else { continue };
                    if node_included(c, pod, node) {
                        *count += count_matching(c, pod, node);
                    }
                }
            }
        }
        state.write(NAME, ScoreState { constraints: cs, counts, weights });
        Status::success()
    }
}

impl Score for PodTopologySpread {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(st) = state.read::<ScoreState>(NAME) else { return Ok(0) };
        let mut total = 0.0;
        for (i, c) in st.constraints.iter().enumerate() {
            let Some(v) = node.label(&c.key) else { return Ok(-1) };
            let n = if c.key == HOSTNAME {
                count_matching(c, pod, node)
            } else {
                st.counts[i].get(v).copied().unwrap_or(0)
            };
            total += (n as f64) * st.weights[i] + (c.max_skew - 1) as f64;
        }
        Ok(total.round() as i64)
    }
    fn normalize(&self, _: &CycleState, _: &PodInfo, scores: &mut [NodeScore]) -> Status {
        // Fewer matching pods is better; nodes without the labels (-1) score 0.
        let valid = scores.iter().filter(|s| s.score >= 0);
        let max = valid.clone().map(|s| s.score).max().unwrap_or(0);
        let min = valid.map(|s| s.score).min().unwrap_or(0);
        for s in scores {
            s.score = if s.score < 0 {
                0
            } else if max == 0 {
                MAX_NODE_SCORE
            } else {
                MAX_NODE_SCORE * (max + min - s.score) / max
            };
        }
        Status::success()
    }
}

/// The plugin's arguments: it has no options.
pub type Args = NoArgs;

/// Builds the plugin, as registered under [`NAME`].
pub fn new(_: Args, _: &Handle) -> Result<PluginSet, PluginError> {
    let p = Arc::new(PodTopologySpread);
    Ok(PluginSet::new(&p).pre_filter(&p).filter(&p).pre_score(&p).score(&p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder, node_info, pod_info};

    fn run(pod: PodBuilder, nodes: Vec<NodeInfo>) -> Vec<Status> {
        let snapshot = Snapshot::from_nodes(nodes);
        let pod = pod_info(pod.build());
        let mut state = CycleState::new();
        let (_, s) = PodTopologySpread.pre_filter(&mut state, &pod, &snapshot);
        snapshot
            .nodes
            .iter()
            .map(|n| if s.is_skip() { Status::success() } else { PodTopologySpread.filter(&state, &pod, n) })
            .collect()
    }

    fn app(name: &str) -> k8s_openapi::api::core::v1::Pod {
        PodBuilder::new(name).label("app", "x").build()
    }

    #[test]
    fn filter_table() {
        let nodes = || {
            vec![
                node_info(NodeBuilder::new("a1").label("zone", "a").build(), vec![app("1"), app("2")]),
                node_info(NodeBuilder::new("b1").label("zone", "b").build(), vec![app("3")]),
                node_info(NodeBuilder::new("c1").label("zone", "c").build(), vec![]),
                node_info(NodeBuilder::new("nolabel").build(), vec![]),
            ]
        };
        let spread =
            |skew| PodBuilder::new("p").label("app", "x").spread(skew, "zone", "DoNotSchedule", &[("app", "x")]);
        let cases = [
            ("maxSkew 1", spread(1), vec![false, false, true, false]),
            ("maxSkew 2", spread(2), vec![false, true, true, false]),
            ("maxSkew 3", spread(3), vec![true, true, true, false]),
            ("no constraints", PodBuilder::new("p"), vec![true, true, true, true]),
        ];
        for (name, pod, want) in cases {
            let got: Vec<bool> = run(pod, nodes()).iter().map(|s| s.is_success()).collect();
            assert_eq!(got, want, "{name}");
        }
        let s = run(spread(1), nodes());
        assert_eq!(s[0].reasons, [ERR_CONSTRAINTS]);
        assert_eq!(s[3].reasons, [ERR_MISSING_LABEL]);
        // minDomains 4 with 3 domains: the global minimum counts as 0 (as it
        // already is with zone c empty; min_domains_table has cases it decides).
        let pod = spread(1)
            .with(|p| p.spec.as_mut().unwrap().topology_spread_constraints.as_mut().unwrap()[0].min_domains = Some(4));
        let got: Vec<bool> = run(pod, nodes()).iter().map(|s| s.is_success()).collect();
        assert_eq!(got, [false, false, true, false]);
        // node affinity policy Honor: excluded zone c does not count, the minimum is 1.
        let pod = spread(1).required_node_affinity("zone", "In", &["a", "b"]);
        let got: Vec<bool> = run(pod, nodes()).iter().map(|s| s.is_success()).collect();
        assert_eq!(got, [false, true, true, false]);
    }

    /// Sets minDomains on the pod's first constraint.
    fn min_domains(n: i32) -> impl FnOnce(&mut k8s_openapi::api::core::v1::Pod) {
        move |p| p.spec.as_mut().unwrap().topology_spread_constraints.as_mut().unwrap()[0].min_domains = Some(n)
    }

    /// Sets nodeAffinityPolicy / nodeTaintsPolicy on the pod's first constraint.
    fn policies(
        affinity: Option<&'static str>,
        taints: Option<&'static str>,
    ) -> impl FnOnce(&mut k8s_openapi::api::core::v1::Pod) {
        move |p| {
            let c = &mut p.spec.as_mut().unwrap().topology_spread_constraints.as_mut().unwrap()[0];
            c.node_affinity_policy = affinity.map(Into::into);
            c.node_taints_policy = taints.map(Into::into);
        }
    }

    #[test]
    fn min_domains_table() {
        // Two domains, one matching pod in each: the global minimum is 1
        // unless minDomains asks for more domains than exist, then it is 0
        // and a pod that fits either domain at maxSkew 1 fits neither.
        let nodes = || {
            vec![
                node_info(NodeBuilder::new("a1").label("zone", "a").build(), vec![app("1")]),
                node_info(NodeBuilder::new("b1").label("zone", "b").build(), vec![app("2")]),
            ]
        };
        let spread = || PodBuilder::new("p").label("app", "x").spread(1, "zone", "DoNotSchedule", &[("app", "x")]);
        let cases = [
            ("no minDomains", spread(), vec![true, true]),
            ("minDomains 1", spread().with(min_domains(1)), vec![true, true]),
            ("minDomains 2, met", spread().with(min_domains(2)), vec![true, true]),
            ("minDomains 3, unmet: minimum 0", spread().with(min_domains(3)), vec![false, false]),
        ];
        for (name, pod, want) in cases {
            let s = run(pod, nodes());
            assert_eq!(s.iter().map(|s| s.is_success()).collect::<Vec<_>>(), want, "{name}");
            for st in s.iter().filter(|s| !s.is_success()) {
                assert_eq!(st.reasons, [ERR_CONSTRAINTS], "{name}");
            }
        }
    }

    #[test]
    fn node_inclusion_policy_table() {
        // Zone a: one matching pod. Zone b: an empty node b1 and a node b2
        // holding two matching pods that the policy may exclude. Counted:
        // a=1, b=2, minimum 1 -> only a1 fits; excluded: a=1, b=0, minimum 0
        // -> only zone b fits.
        let counted = vec![true, false, false];
        let excluded = vec![false, true, true];
        let tainted = |effect: &str| {
            vec![
                node_info(NodeBuilder::new("a1").label("zone", "a").build(), vec![app("1")]),
                node_info(NodeBuilder::new("b1").label("zone", "b").build(), vec![]),
                node_info(
                    NodeBuilder::new("b2").label("zone", "b").taint("dedicated", "gpu", effect).build(),
                    vec![app("2"), app("3")],
                ),
            ]
        };
        let tiered = || {
            vec![
                node_info(NodeBuilder::new("a1").label("zone", "a").label("tier", "x").build(), vec![app("1")]),
                node_info(NodeBuilder::new("b1").label("zone", "b").label("tier", "x").build(), vec![]),
                node_info(
                    NodeBuilder::new("b2").label("zone", "b").label("tier", "y").build(),
                    vec![app("2"), app("3")],
                ),
            ]
        };
        let spread = || PodBuilder::new("p").label("app", "x").spread(1, "zone", "DoNotSchedule", &[("app", "x")]);
        let cases: Vec<(&str, Vec<NodeInfo>, PodBuilder, Vec<bool>)> = vec![
            ("taints: Ignore by default, tainted node counts", tainted("NoSchedule"), spread(), counted.clone()),
            (
                "taints: Ignore, tainted node counts",
                tainted("NoSchedule"),
                spread().with(policies(None, Some("Ignore"))),
                counted.clone(),
            ),
            (
                "taints: Honor, NoSchedule node excluded",
                tainted("NoSchedule"),
                spread().with(policies(None, Some("Honor"))),
                excluded.clone(),
            ),
            (
                "taints: Honor, NoExecute node excluded",
                tainted("NoExecute"),
                spread().with(policies(None, Some("Honor"))),
                excluded.clone(),
            ),
            (
                "taints: Honor, PreferNoSchedule node counts",
                tainted("PreferNoSchedule"),
                spread().with(policies(None, Some("Honor"))),
                counted.clone(),
            ),
            (
                "taints: Honor, tolerated taint counts",
                tainted("NoSchedule"),
                spread()
                    .toleration("dedicated", "Equal", Some("gpu"), Some("NoSchedule"))
                    .with(policies(None, Some("Honor"))),
                counted.clone(),
            ),
            ("affinity: no affinity, every node counts", tiered(), spread(), counted.clone()),
            (
                "affinity: Honor by default, non-matching node excluded",
                tiered(),
                spread().required_node_affinity("tier", "In", &["x"]),
                excluded.clone(),
            ),
            (
                "affinity: Honor, nodeSelector excludes too",
                tiered(),
                spread().node_selector("tier", "x"),
                excluded.clone(),
            ),
            (
                "affinity: Honor explicit",
                tiered(),
                spread().required_node_affinity("tier", "In", &["x"]).with(policies(Some("Honor"), None)),
                excluded.clone(),
            ),
            (
                "affinity: Ignore, non-matching node counts",
                tiered(),
                spread().required_node_affinity("tier", "In", &["x"]).with(policies(Some("Ignore"), None)),
                counted.clone(),
            ),
        ];
        for (name, nodes, pod, want) in cases {
            let got: Vec<bool> = run(pod, nodes).iter().map(|s| s.is_success()).collect();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn score_prefers_emptier_domains() {
        let nodes = vec![
            node_info(NodeBuilder::new("a1").label("zone", "a").build(), vec![app("1"), app("2")]),
            node_info(NodeBuilder::new("b1").label("zone", "b").build(), vec![]),
        ];
        let snapshot = Snapshot::from_nodes(nodes);
        let pod = pod_info(
            PodBuilder::new("p").label("app", "x").spread(1, "zone", "ScheduleAnyway", &[("app", "x")]).build(),
        );
        let mut state = CycleState::new();
        PodTopologySpread.pre_score(&mut state, &pod, &snapshot.nodes);
        let mut scores: Vec<NodeScore> = snapshot
            .nodes
            .iter()
            .map(|n| NodeScore { name: n.name().into(), score: PodTopologySpread.score(&state, &pod, n).unwrap() })
            .collect();
        PodTopologySpread.normalize(&state, &pod, &mut scores);
        assert!(scores[1].score > scores[0].score, "{scores:?}");
    }

    /// PreScore on the `feasible` nodes of `nodes` (with the cycle's snapshot
    /// of all of them), then Score and NormalizeScore; the feasible nodes' scores.
    fn scores(pod: PodBuilder, nodes: Vec<NodeInfo>, feasible: &[&str]) -> Vec<i64> {
        let snapshot = Snapshot::from_nodes(nodes);
        let pod = pod_info(pod.build());
        let feasible: Vec<Arc<NodeInfo>> = feasible.iter().map(|n| snapshot.get(n).unwrap().clone()).collect();
        let mut state = CycleState::new();
        state.set_snapshot(snapshot.clone());
        assert!(PodTopologySpread.pre_score(&mut state, &pod, &feasible).is_success());
        let mut scores: Vec<NodeScore> = feasible
            .iter()
            .map(|n| NodeScore { name: n.name().into(), score: PodTopologySpread.score(&state, &pod, n).unwrap() })
            .collect();
        PodTopologySpread.normalize(&state, &pod, &mut scores);
        scores.iter().map(|s| s.score).collect()
    }

    #[test]
    fn score_table() {
        // a1 and b1 are feasible; a2 (zone a, not feasible) holds three
        // matching pods, b1 one. Counting every node: a=3, b=1, a1 scores
        // lower; counting only the feasible nodes would give a=0 and invert it.
        let nodes = |a2_taint: Option<&str>| {
            let mut a2 = NodeBuilder::new("a2").label("zone", "a");
            if let Some(effect) = a2_taint {
                a2 = a2.taint("dedicated", "gpu", effect);
            }
            vec![
                node_info(NodeBuilder::new("a1").label("zone", "a").build(), vec![]),
                node_info(a2.build(), vec![app("1"), app("2"), app("3")]),
                node_info(NodeBuilder::new("b1").label("zone", "b").build(), vec![app("4")]),
                node_info(NodeBuilder::new("nolabel").build(), vec![app("5")]),
            ]
        };
        let spread =
            |key: &str| PodBuilder::new("p").label("app", "x").spread(1, key, "ScheduleAnyway", &[("app", "x")]);
        // (case, incoming pod, nodes, the feasible ones, scores)
        type Case<'a> = (&'a str, PodBuilder, Vec<NodeInfo>, &'a [&'a str], Vec<i64>);
        let cases: Vec<Case<'_>> = vec![
            // weight ln(2 domains + 2): a1 round(3 * 1.39) = 4, b1 1 -> 100 * (4 + 1 - s) / 4.
            ("infeasible node's pods count", spread("zone"), nodes(None), &["a1", "b1"], vec![25, 100]),
            (
                "tainted node counts (taints Ignore)",
                spread("zone"),
                nodes(Some("NoSchedule")),
                &["a1", "b1"],
                vec![25, 100],
            ),
            (
                "tainted node excluded (taints Honor)",
                spread("zone").with(policies(None, Some("Honor"))),
                nodes(Some("NoSchedule")),
                &["a1", "b1"],
                vec![100, 0],
            ),
            (
                "node affinity excludes a2",
                spread("zone").required_node_affinity("kubernetes.io/hostname", "NotIn", &["a2"]),
                nodes(None),
                &["a1", "b1"],
                vec![100, 0],
            ),
            ("node without the key scores 0", spread("zone"), nodes(None), &["a1", "b1", "nolabel"], vec![25, 100, 0]),
            // hostname: one domain per node, counted on the node itself; weight
            // ln(3 nodes + 2): a2 round(3 * 1.61) = 5, b1 2 -> 100 * (5 - s) / 5.
            ("hostname", spread("kubernetes.io/hostname"), nodes(None), &["a1", "a2", "b1"], vec![100, 0, 60]),
        ];
        for (name, pod, nodes, feasible, want) in cases {
            assert_eq!(scores(pod, nodes, feasible), want, "{name}");
        }
    }
}
