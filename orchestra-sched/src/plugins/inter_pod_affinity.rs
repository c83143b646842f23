//! InterPodAffinity: required pod affinity and anti-affinity (of the pod,
//! and existing pods' anti-affinity against it) over topology keys as a
//! filter; preferred terms (both ways) as a score.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodAffinityTerm};
use orchestra_core::api::selector_matches;

use crate::framework::*;
use crate::listers::NamespaceLabels;
use crate::node_info::{NodeInfo, PodInfo};
use crate::plugins::helpers::pod_labels;
use crate::registry::{PluginError, PluginSet};
use crate::snapshot::Snapshot;

/// The plugin's name.
pub const NAME: &str = "InterPodAffinity";
/// Upstream's reasons.
pub const ERR_AFFINITY: &str = "node(s) didn't match pod affinity rules";
/// Upstream's reasons.
pub const ERR_ANTI_AFFINITY: &str = "node(s) didn't match pod anti-affinity rules";
/// Upstream's reasons.
pub const ERR_EXISTING_ANTI_AFFINITY: &str = "node(s) didn't satisfy existing pods anti-affinity rules";

/// The plugin.
#[derive(Default)]
pub struct InterPodAffinity {
    namespaces: NamespaceLabels,
    /// Weight of existing pods' required affinity in scoring (default 1).
    pub hard_pod_affinity_weight: i64,
}

impl Plugin for InterPodAffinity {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::new(EventResource::AssignedPod, action::ADD | action::DELETE | action::UPDATE_POD_LABEL),
            ClusterEvent::new(EventResource::Node, action::ADD | action::UPDATE_NODE_LABEL),
            // A namespace gaining labels can bring pods into a term's namespaceSelector.
            ClusterEvent::new(EventResource::Namespace, action::ADD | action::UPDATE_NAMESPACE_LABEL),
        ]
    }
}

type Pair = (String, String);

#[derive(Default)]
struct FilterState {
    /// Topology pairs where an existing pod's required anti-affinity matches the pod.
    existing_anti: HashMap<Pair, i64>,
    /// Per required affinity term: matching pods per topology pair.
    affinity: HashMap<Pair, i64>,
    /// Per required anti-affinity term: matching pods per topology pair.
    anti: HashMap<Pair, i64>,
    affinity_terms: Vec<PodAffinityTerm>,
    anti_terms: Vec<PodAffinityTerm>,
}

impl InterPodAffinity {
    /// A plugin reading namespace labels from `namespaces`.
    pub fn new(namespaces: NamespaceLabels) -> InterPodAffinity {
        InterPodAffinity { namespaces, hard_pod_affinity_weight: 1 }
    }

    /// Whether `term` (of pod `owner`) selects `target`.
    fn term_matches(&self, term: &PodAffinityTerm, owner: &Pod, target: &Pod) -> bool {
        // A null selector selects nothing (and matchLabelKeys need one).
        let Some(sel) = term.label_selector.as_ref() else { return false };
        let owner_ns = ns(owner);
        let target_ns = ns(target);
        let listed = term.namespaces.as_deref().unwrap_or_default();
        let ns_ok = match &term.namespace_selector {
            None => {
                if listed.is_empty() {
                    target_ns == owner_ns
                } else {
                    listed.iter().any(|n| n == target_ns)
                }
            }
            Some(sel) => {
                // An empty namespace selector selects every namespace.
                listed.iter().any(|n| n == target_ns) || selector_matches(sel, self.namespaces.read().get(target_ns))
            }
        };
        if !ns_ok {
            return false;
        }
        let target_labels = pod_labels(target);
        if !selector_matches(sel, target_labels) {
            return false;
        }
        // matchLabelKeys / mismatchLabelKeys: upstream merges `key In
        // [owner's value]` / `key NotIn [owner's value]` into the selector
        // for every key the owner has (keys it lacks are ignored); the same
        // requirements, checked without copying the selector. The owner is
        // the incoming pod for its own terms, the existing pod for its terms.
        let owner_labels = pod_labels(owner);
        let owner_value = |k: &String| owner_labels.and_then(|l| l.get(k));
        let target_value = |k: &String| target_labels.and_then(|l| l.get(k));
        term.match_label_keys.iter().flatten().all(|k| owner_value(k).is_none_or(|v| target_value(k) == Some(v)))
            && term
                .mismatch_label_keys
                .iter()
                .flatten()
                .all(|k| owner_value(k).is_none_or(|v| target_value(k) != Some(v)))
    }
}

fn affinity_terms(pod: &Pod) -> (&[PodAffinityTerm], &[PodAffinityTerm]) {
    let a = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
    let req = a
        .and_then(|a| a.pod_affinity.as_ref())
        .and_then(|p| p.required_during_scheduling_ignored_during_execution.as_deref())
        .unwrap_or_default();
    let anti = a
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|p| p.required_during_scheduling_ignored_during_execution.as_deref())
        .unwrap_or_default();
    (req, anti)
}

fn preferred_terms(
    pod: &Pod,
) -> (&[k8s_openapi::api::core::v1::WeightedPodAffinityTerm], &[k8s_openapi::api::core::v1::WeightedPodAffinityTerm]) {
    let a = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
    let aff = a
        .and_then(|a| a.pod_affinity.as_ref())
        .and_then(|p| p.preferred_during_scheduling_ignored_during_execution.as_deref())
        .unwrap_or_default();
    let anti = a
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|p| p.preferred_during_scheduling_ignored_during_execution.as_deref())
        .unwrap_or_default();
    (aff, anti)
}

fn ns(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

impl PreFilter for InterPodAffinity {
    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, snapshot: &Snapshot) -> (PreFilterResult, Status) {
        let (aff, anti) = affinity_terms(&pod.pod);
        if aff.is_empty() && anti.is_empty() && snapshot.pods_with_required_anti_affinity == 0 {
            // No term of this pod, none of an existing pod against it.
            return (None, Status::skip());
        }
        let mut st = FilterState { affinity_terms: aff.to_vec(), anti_terms: anti.to_vec(), ..Default::default() };
        for node in snapshot.nodes.iter() {
            // Existing pods' required anti-affinity against the incoming pod.
            for existing in &node.pods_with_required_anti_affinity {
                for term in affinity_terms(&existing.pod).1 {
                    if self.term_matches(term, &existing.pod, &pod.pod)
                        && let Some(v) = node.label(&term.topology_key)
                    {
                        *st.existing_anti.entry((term.topology_key.clone(), v.to_owned())).or_default() += 1;
                    }
                }
            }
            if aff.is_empty() && anti.is_empty() {
                continue;
            }
            for existing in &node.pods {
                for term in aff {
                    if self.term_matches(term, &pod.pod, &existing.pod)
                        && let Some(v) = node.label(&term.topology_key)
                    {
                        *st.affinity.entry((term.topology_key.clone(), v.to_owned())).or_default() += 1;
                    }
                }
                for term in anti {
                    if self.term_matches(term, &pod.pod, &existing.pod)
                        && let Some(v) = node.label(&term.topology_key)
                    {
                        *st.anti.entry((term.topology_key.clone(), v.to_owned())).or_default() += 1;
                    }
                }
            }
        }
        if st.existing_anti.is_empty() && aff.is_empty() && anti.is_empty() {
            return (None, Status::skip());
        }
        state.write(NAME, st);
        (None, Status::success())
    }
}

impl Filter for InterPodAffinity {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(st) = state.read::<FilterState>(NAME) else { return Status::success() };
        // Affinity: every term has a matching pod in the node's domain, or
        // no pod matches anywhere and the pod matches its own terms.
        if !st.affinity_terms.is_empty() {
            let all_in_domain = st.affinity_terms.iter().all(|t| {
                node.label(&t.topology_key)
                    .is_some_and(|v| st.affinity.get(&(t.topology_key.clone(), v.to_owned())).copied().unwrap_or(0) > 0)
            });
            if !all_in_domain {
                let first_of_group = st.affinity.is_empty()
                    && st.affinity_terms.iter().all(|t| self.term_matches(t, &pod.pod, &pod.pod))
                    && st.affinity_terms.iter().all(|t| node.label(&t.topology_key).is_some());
                if !first_of_group {
                    return Status::unresolvable(ERR_AFFINITY);
                }
            }
        }
        for t in &st.anti_terms {
            if let Some(v) = node.label(&t.topology_key)
                && st.anti.get(&(t.topology_key.clone(), v.to_owned())).copied().unwrap_or(0) > 0
            {
                return Status::unschedulable(ERR_ANTI_AFFINITY);
            }
        }
        if !st.existing_anti.is_empty()
            && let Some(labels) = node.labels()
        {
            for (k, v) in labels {
                if st.existing_anti.get(&(k.clone(), v.clone())).copied().unwrap_or(0) > 0 {
                    return Status::unschedulable(ERR_EXISTING_ANTI_AFFINITY);
                }
            }
        }
        Status::success()
    }
}

struct ScoreState {
    scores: HashMap<Pair, i64>,
}

impl PreScore for InterPodAffinity {
    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, nodes: &[Arc<NodeInfo>]) -> Status {
        let (pref_aff, pref_anti) = preferred_terms(&pod.pod);
        let has_own = !pref_aff.is_empty() || !pref_anti.is_empty();
        let mut scores: HashMap<Pair, i64> = HashMap::new();
        // Every node counts, not only the feasible `nodes`: a pod elsewhere
        // in a topology domain scores the domain's feasible nodes.
        let _ = nodes;
        let Some(snapshot) = state.snapshot() else { return Status::skip() };
        if !has_own && snapshot.pods_with_affinity == 0 {
            return Status::skip();
        }
        for node in snapshot.nodes.iter() {
            let pods: &[Arc<PodInfo>] = if has_own { &node.pods } else { &node.pods_with_affinity };
            for existing in pods {
                let mut add = |key: &str, w: i64| {
                    if let Some(v) = node.label(key) {
                        *scores.entry((key.to_owned(), v.to_owned())).or_default() += w;
                    }
                };
                for t in pref_aff {
                    if self.term_matches(&t.pod_affinity_term, &pod.pod, &existing.pod) {
                        add(&t.pod_affinity_term.topology_key, t.weight as i64);
                    }
                }
                for t in pref_anti {
                    if self.term_matches(&t.pod_affinity_term, &pod.pod, &existing.pod) {
                        add(&t.pod_affinity_term.topology_key, -(t.weight as i64));
                    }
                }
                if existing.has_affinity {
                    let (e_aff, e_anti) = preferred_terms(&existing.pod);
                    for t in e_aff {
                        if self.term_matches(&t.pod_affinity_term, &existing.pod, &pod.pod) {
                            add(&t.pod_affinity_term.topology_key, t.weight as i64);
                        }
                    }
                    for t in e_anti {
                        if self.term_matches(&t.pod_affinity_term, &existing.pod, &pod.pod) {
                            add(&t.pod_affinity_term.topology_key, -(t.weight as i64));
                        }
                    }
                    if self.hard_pod_affinity_weight > 0 {
                        for t in affinity_terms(&existing.pod).0 {
                            if self.term_matches(t, &existing.pod, &pod.pod) {
                                add(&t.topology_key, self.hard_pod_affinity_weight);
                            }
                        }
                    }
                }
            }
        }
        if scores.is_empty() {
            return Status::skip();
        }
        state.write(NAME, ScoreState { scores });
        Status::success()
    }
}

impl Score for InterPodAffinity {
    fn score(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(st) = state.read::<ScoreState>(NAME) else { return Ok(0) };
        let mut total = 0;
        if let Some(labels) = node.labels() {
            for (k, v) in labels {
                total += st.scores.get(&(k.clone(), v.clone())).copied().unwrap_or(0);
            }
        }
        Ok(total)
    }
    fn normalize(&self, _: &CycleState, _: &PodInfo, scores: &mut [NodeScore]) -> Status {
        let max = scores.iter().map(|s| s.score).max().unwrap_or(0);
        let min = scores.iter().map(|s| s.score).min().unwrap_or(0);
        for s in scores {
            s.score = if max == min { 0 } else { MAX_NODE_SCORE * (s.score - min) / (max - min) };
        }
        Status::success()
    }
}

/// The plugin's arguments (upstream's `InterPodAffinityArgs`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(default, rename_all = "camelCase")]
#[non_exhaustive]
pub struct Args {
    /// Weight of existing pods' required affinity terms matching the pod,
    /// in scoring: 0 to 100, default 1.
    pub hard_pod_affinity_weight: i64,
}

impl Default for Args {
    fn default() -> Self {
        Args { hard_pod_affinity_weight: 1 }
    }
}

impl Args {
    /// Sets [`hard_pod_affinity_weight`](Self::hard_pod_affinity_weight).
    pub fn with_hard_pod_affinity_weight(mut self, weight: i64) -> Args {
        self.hard_pod_affinity_weight = weight;
        self
    }
}

/// Builds the plugin, as registered under [`NAME`]; it reads namespace
/// labels from the handle.
pub fn new(args: Args, handle: &Handle) -> Result<PluginSet, PluginError> {
    if !(0..=100).contains(&args.hard_pod_affinity_weight) {
        return Err(PluginError::invalid_argument("hardPodAffinityWeight", "must be in 0..=100"));
    }
    let mut p = InterPodAffinity::new(handle.namespaces.clone());
    p.hard_pod_affinity_weight = args.hard_pod_affinity_weight;
    let p = Arc::new(p);
    Ok(PluginSet::new(&p).pre_filter(&p).filter(&p).pre_score(&p).score(&p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder, node_info, pod_info};

    fn run(pod: PodBuilder, nodes: Vec<NodeInfo>) -> Vec<Status> {
        let set = new(Args::default(), &Handle::default()).unwrap();
        let snapshot = Snapshot::from_nodes(nodes);
        let pod = pod_info(pod.build());
        let mut state = CycleState::new();
        let (_, s) = set.pre_filter.as_ref().unwrap().pre_filter(&mut state, &pod, &snapshot);
        snapshot
            .nodes
            .iter()
            .map(|n| if s.is_skip() { Status::success() } else { set.filter.as_ref().unwrap().filter(&state, &pod, n) })
            .collect()
    }

    fn zone_nodes(pods_a: Vec<Pod>) -> Vec<NodeInfo> {
        vec![
            node_info(NodeBuilder::new("a1").label("zone", "a").build(), pods_a),
            node_info(NodeBuilder::new("a2").label("zone", "a").build(), vec![]),
            node_info(NodeBuilder::new("b1").label("zone", "b").build(), vec![]),
        ]
    }

    #[test]
    fn filter_table() {
        let web = || PodBuilder::new("web").label("app", "web").build();
        let anti_web = || PodBuilder::new("aw").label("app", "db").pod_anti_affinity(&[("app", "db")], "zone").build();
        let cases: Vec<(&str, PodBuilder, Vec<Pod>, Vec<bool>)> = vec![
            ("no terms", PodBuilder::new("p"), vec![web()], vec![true, true, true]),
            (
                "affinity to zone a",
                PodBuilder::new("p").pod_affinity(&[("app", "web")], "zone"),
                vec![web()],
                vec![true, true, false],
            ),
            (
                "affinity by hostname",
                PodBuilder::new("p").pod_affinity(&[("app", "web")], "kubernetes.io/hostname"),
                vec![web()],
                vec![true, false, false],
            ),
            (
                "affinity nothing matches, self does not match",
                PodBuilder::new("p").pod_affinity(&[("app", "x")], "zone"),
                vec![web()],
                vec![false, false, false],
            ),
            (
                "affinity first of its group",
                PodBuilder::new("p").label("app", "x").pod_affinity(&[("app", "x")], "zone"),
                vec![web()],
                vec![true, true, true],
            ),
            (
                "anti-affinity to zone a",
                PodBuilder::new("p").pod_anti_affinity(&[("app", "web")], "zone"),
                vec![web()],
                vec![false, false, true],
            ),
            (
                "existing pod's anti-affinity",
                PodBuilder::new("p").label("app", "db"),
                vec![anti_web()],
                vec![false, false, true],
            ),
            (
                "other namespace does not match",
                PodBuilder::new("p").namespace("other").pod_anti_affinity(&[("app", "web")], "zone"),
                vec![web()],
                vec![true, true, true],
            ),
        ];
        for (name, pod, pods, want) in cases {
            let got: Vec<bool> = run(pod, zone_nodes(pods)).iter().map(|s| s.is_success()).collect();
            assert_eq!(got, want, "{name}");
        }
        let s = run(PodBuilder::new("p").pod_anti_affinity(&[("app", "web")], "zone"), zone_nodes(vec![web()]));
        assert_eq!(s[0].reasons, [ERR_ANTI_AFFINITY]);
        let s = run(PodBuilder::new("p").label("app", "db"), zone_nodes(vec![anti_web()]));
        assert_eq!(s[0].reasons, [ERR_EXISTING_ANTI_AFFINITY]);
        let s = run(PodBuilder::new("p").pod_affinity(&[("app", "web")], "zone"), zone_nodes(vec![web()]));
        assert_eq!(s[2].reasons, [ERR_AFFINITY]);
    }

    /// Sets a namespaceSelector `team=<team>` on every required term.
    fn ns_selector(team: &'static str) -> impl FnOnce(&mut Pod) {
        move |p: &mut Pod| {
            let a = p.spec.as_mut().unwrap().affinity.as_mut().unwrap();
            let terms = a
                .pod_affinity
                .iter_mut()
                .flat_map(|x| x.required_during_scheduling_ignored_during_execution.iter_mut().flatten())
                .chain(
                    a.pod_anti_affinity
                        .iter_mut()
                        .flat_map(|x| x.required_during_scheduling_ignored_during_execution.iter_mut().flatten()),
                );
            for t in terms {
                t.namespace_selector = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                    match_labels: Some([("team".to_owned(), team.to_owned())].into()),
                    ..Default::default()
                });
            }
        }
    }

    #[test]
    fn namespace_selector_table() {
        let namespaces: NamespaceLabels = Default::default();
        namespaces.write().insert("shop".into(), [("team".to_owned(), "blue".to_owned())].into());
        namespaces.write().insert("lab".into(), [("team".to_owned(), "red".to_owned())].into());
        let set = new(Args::default(), &Handle { namespaces, ..Default::default() }).unwrap();
        let web_in = |ns: &str| PodBuilder::new("web").namespace(ns).label("app", "web").build();
        let cases: Vec<(&str, PodBuilder, Pod, Vec<bool>)> = vec![
            (
                "affinity, selected namespace",
                PodBuilder::new("p").pod_affinity(&[("app", "web")], "zone").with(ns_selector("blue")),
                web_in("shop"),
                vec![true, true, false],
            ),
            (
                "affinity, unselected namespace",
                PodBuilder::new("p").pod_affinity(&[("app", "web")], "zone").with(ns_selector("blue")),
                web_in("lab"),
                vec![false, false, false],
            ),
            (
                "affinity, own namespace not implied",
                PodBuilder::new("p").pod_affinity(&[("app", "web")], "zone").with(ns_selector("blue")),
                web_in("default"),
                vec![false, false, false],
            ),
            (
                "anti-affinity, selected namespace",
                PodBuilder::new("p").pod_anti_affinity(&[("app", "web")], "zone").with(ns_selector("red")),
                web_in("lab"),
                vec![false, false, true],
            ),
            (
                "anti-affinity, unknown namespace",
                PodBuilder::new("p").pod_anti_affinity(&[("app", "web")], "zone").with(ns_selector("red")),
                web_in("gone"),
                vec![true, true, true],
            ),
        ];
        for (name, pod, web, want) in cases {
            let snapshot = Snapshot::from_nodes(zone_nodes(vec![web]));
            let pod = pod_info(pod.build());
            let mut state = CycleState::new();
            let (_, s) = set.pre_filter.as_ref().unwrap().pre_filter(&mut state, &pod, &snapshot);
            let got: Vec<bool> = snapshot
                .nodes
                .iter()
                .map(|n| s.is_skip() || set.filter.as_ref().unwrap().filter(&state, &pod, n).is_success())
                .collect();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn score_table() {
        let set = new(Args::default(), &Handle::default()).unwrap();
        let snapshot = Snapshot::from_nodes(zone_nodes(vec![PodBuilder::new("web").label("app", "web").build()]));
        let cases = [
            (
                "prefer with web",
                PodBuilder::new("p").preferred_pod_affinity(10, &[("app", "web")], "zone"),
                vec![100, 100, 0],
            ),
            (
                "prefer away from web",
                PodBuilder::new("p").preferred_pod_affinity(-10, &[("app", "web")], "zone"),
                vec![0, 0, 100],
            ),
        ];
        for (name, pod, want) in cases {
            let pod = pod_info(pod.build());
            let mut state = CycleState::new();
            state.set_snapshot(snapshot.clone());
            set.pre_filter.as_ref().unwrap().pre_filter(&mut state, &pod, &snapshot);
            set.pre_score.as_ref().unwrap().pre_score(&mut state, &pod, &snapshot.nodes);
            let score = set.score.as_ref().unwrap();
            let mut scores: Vec<NodeScore> = snapshot
                .nodes
                .iter()
                .map(|n| NodeScore { name: n.name().into(), score: score.score(&state, &pod, n).unwrap() })
                .collect();
            score.normalize(&state, &pod, &mut scores);
            assert_eq!(scores.iter().map(|s| s.score).collect::<Vec<_>>(), want, "{name}");
        }
    }

    /// Sets matchLabelKeys / mismatchLabelKeys on every (anti-)affinity term, required and preferred.
    fn label_keys(matching: &'static [&'static str], mismatching: &'static [&'static str]) -> impl FnOnce(&mut Pod) {
        move |p: &mut Pod| {
            let a = p.spec.as_mut().unwrap().affinity.as_mut().unwrap();
            let mut terms: Vec<&mut PodAffinityTerm> = Vec::new();
            if let Some(x) = a.pod_affinity.as_mut() {
                terms.extend(x.required_during_scheduling_ignored_during_execution.iter_mut().flatten());
                terms.extend(
                    x.preferred_during_scheduling_ignored_during_execution
                        .iter_mut()
                        .flatten()
                        .map(|w| &mut w.pod_affinity_term),
                );
            }
            if let Some(x) = a.pod_anti_affinity.as_mut() {
                terms.extend(x.required_during_scheduling_ignored_during_execution.iter_mut().flatten());
                terms.extend(
                    x.preferred_during_scheduling_ignored_during_execution
                        .iter_mut()
                        .flatten()
                        .map(|w| &mut w.pod_affinity_term),
                );
            }
            for t in terms {
                t.match_label_keys = Some(matching.iter().map(|k| k.to_string()).collect());
                t.mismatch_label_keys = Some(mismatching.iter().map(|k| k.to_string()).collect());
            }
        }
    }

    /// Nodes a1, b1, c1 in zones a, b, c, holding the pods named for them.
    fn zones_abc(pods: Vec<(&str, Pod)>) -> Vec<NodeInfo> {
        let mut by_node: HashMap<&str, Vec<Pod>> = HashMap::new();
        for (node, pod) in pods {
            by_node.entry(node).or_default().push(pod);
        }
        ["a", "b", "c"]
            .iter()
            .map(|z| {
                let name = format!("{z}1");
                let pods = by_node.remove(name.as_str()).unwrap_or_default();
                node_info(NodeBuilder::new(&name).label("zone", z).build(), pods)
            })
            .collect()
    }

    #[test]
    fn label_keys_table() {
        // web v1 in zone a, web v2 in zone b, zone c empty.
        let webs = || {
            vec![
                ("a1", PodBuilder::new("w1").label("app", "web").label("version", "v1").build()),
                ("b1", PodBuilder::new("w2").label("app", "web").label("version", "v2").build()),
            ]
        };
        let p = |version: Option<&str>| {
            let p = PodBuilder::new("p");
            match version {
                Some(v) => p.label("version", v),
                None => p,
            }
        };
        // An existing db of tenant t1 in zone a, away from dbs of its own tenant.
        let tenant_db = || {
            vec![(
                "a1",
                PodBuilder::new("db1")
                    .label("app", "db")
                    .label("tenant", "t1")
                    .pod_anti_affinity(&[("app", "db")], "zone")
                    .with(label_keys(&["tenant"], &[]))
                    .build(),
            )]
        };
        // (case, incoming pod, existing pods by node, feasible per node)
        type Case<'a> = (&'a str, PodBuilder, Vec<(&'a str, Pod)>, Vec<bool>);
        let cases: Vec<Case<'_>> = vec![
            (
                "affinity without keys: both webs",
                p(Some("v2")).pod_affinity(&[("app", "web")], "zone"),
                webs(),
                vec![true, true, false],
            ),
            (
                "affinity, matchLabelKeys: same version only",
                p(Some("v2")).pod_affinity(&[("app", "web")], "zone").with(label_keys(&["version"], &[])),
                webs(),
                vec![false, true, false],
            ),
            (
                "affinity, matchLabelKeys the pod lacks: ignored",
                p(None).pod_affinity(&[("app", "web")], "zone").with(label_keys(&["version"], &[])),
                webs(),
                vec![true, true, false],
            ),
            (
                "affinity, mismatchLabelKeys: other versions only",
                p(Some("v2")).pod_affinity(&[("app", "web")], "zone").with(label_keys(&[], &["version"])),
                webs(),
                vec![true, false, false],
            ),
            (
                "affinity, matchLabelKeys nothing matches",
                p(Some("v3")).pod_affinity(&[("app", "web")], "zone").with(label_keys(&["version"], &[])),
                webs(),
                vec![false, false, false],
            ),
            (
                "anti-affinity, matchLabelKeys: away from the same version",
                p(Some("v1")).pod_anti_affinity(&[("app", "web")], "zone").with(label_keys(&["version"], &[])),
                webs(),
                vec![false, true, true],
            ),
            (
                "anti-affinity, mismatchLabelKeys: away from other versions",
                p(Some("v1")).pod_anti_affinity(&[("app", "web")], "zone").with(label_keys(&[], &["version"])),
                webs(),
                vec![true, false, true],
            ),
            (
                "anti-affinity, mismatchLabelKeys the pod lacks: ignored",
                p(None).pod_anti_affinity(&[("app", "web")], "zone").with(label_keys(&[], &["version"])),
                webs(),
                vec![false, false, true],
            ),
            (
                "first of its group, matchLabelKeys: matches itself",
                p(Some("v1"))
                    .label("app", "x")
                    .pod_affinity(&[("app", "x")], "zone")
                    .with(label_keys(&["version"], &[])),
                webs(),
                vec![true, true, true],
            ),
            (
                "first of its group, mismatchLabelKeys: does not match itself",
                p(Some("v1"))
                    .label("app", "x")
                    .pod_affinity(&[("app", "x")], "zone")
                    .with(label_keys(&[], &["version"])),
                webs(),
                vec![false, false, false],
            ),
            // An existing pod's terms take the existing pod's values.
            (
                "existing anti-affinity, same tenant",
                PodBuilder::new("p").label("app", "db").label("tenant", "t1"),
                tenant_db(),
                vec![false, true, true],
            ),
            (
                "existing anti-affinity, other tenant",
                PodBuilder::new("p").label("app", "db").label("tenant", "t2"),
                tenant_db(),
                vec![true, true, true],
            ),
        ];
        for (name, pod, pods, want) in cases {
            let got: Vec<bool> = run(pod, zones_abc(pods)).iter().map(|s| s.is_success()).collect();
            assert_eq!(got, want, "{name}");
        }
    }

    /// PreFilter, PreScore (with the cycle's snapshot), Score and NormalizeScore on every node.
    fn scores(set: &PluginSet, pod: PodBuilder, nodes: Vec<NodeInfo>) -> Vec<i64> {
        let snapshot = Snapshot::from_nodes(nodes);
        let pod = pod_info(pod.build());
        let mut state = CycleState::new();
        state.set_snapshot(snapshot.clone());
        set.pre_filter.as_ref().unwrap().pre_filter(&mut state, &pod, &snapshot);
        set.pre_score.as_ref().unwrap().pre_score(&mut state, &pod, &snapshot.nodes);
        let score = set.score.as_ref().unwrap();
        let mut scores: Vec<NodeScore> = snapshot
            .nodes
            .iter()
            .map(|n| NodeScore { name: n.name().into(), score: score.score(&state, &pod, n).unwrap() })
            .collect();
        score.normalize(&state, &pod, &mut scores);
        scores.iter().map(|s| s.score).collect()
    }

    #[test]
    fn score_both_ways_table() {
        let with = |name: &str, app: &str| PodBuilder::new(name).label("app", app);
        // The incoming pod is app=p; existing pods' terms select it or not.
        let p = || PodBuilder::new("p").label("app", "p");
        // (case, hardPodAffinityWeight, incoming pod, existing pods by zone, scores)
        type Case<'a> = (&'a str, Option<i64>, PodBuilder, Vec<(&'a str, Pod)>, Vec<i64>);
        let cases: Vec<Case<'_>> = vec![
            // The incoming pod's preferred anti-affinity: a -10, b -5, c 0.
            (
                "preferred anti-affinity, weights per term",
                None,
                p().preferred_pod_affinity(-10, &[("app", "web")], "zone").preferred_pod_affinity(
                    -5,
                    &[("app", "db")],
                    "zone",
                ),
                vec![("a1", with("w", "web").build()), ("b1", with("d", "db").build())],
                vec![0, 50, 100],
            ),
            // Two matching pods in a domain count twice: a -20, b -10.
            (
                "preferred anti-affinity, per matching pod",
                None,
                p().preferred_pod_affinity(-10, &[("app", "web")], "zone"),
                vec![
                    ("a1", with("w1", "web").build()),
                    ("a1", with("w2", "web").build()),
                    ("b1", with("w3", "web").build()),
                ],
                vec![0, 50, 100],
            ),
            // Affinity 10 to web and anti-affinity 4 to db: a 10 - 4, b -4, c 0.
            (
                "preferred affinity and anti-affinity together",
                None,
                p().preferred_pod_affinity(10, &[("app", "web")], "zone").preferred_pod_affinity(
                    -4,
                    &[("app", "db")],
                    "zone",
                ),
                vec![
                    ("a1", with("w", "web").build()),
                    ("a1", with("d1", "db").build()),
                    ("b1", with("d2", "db").build()),
                ],
                vec![100, 0, 40],
            ),
            (
                "preferred affinity, matchLabelKeys: same version only",
                None,
                p().label("version", "v2")
                    .preferred_pod_affinity(10, &[("app", "web")], "zone")
                    .with(label_keys(&["version"], &[])),
                vec![
                    ("a1", with("w1", "web").label("version", "v1").build()),
                    ("b1", with("w2", "web").label("version", "v2").build()),
                ],
                vec![0, 100, 0],
            ),
            // Symmetry: an existing pod's preferred terms that select the incoming pod.
            (
                "existing pod's preferred affinity",
                None,
                p(),
                vec![("b1", with("e", "e").preferred_pod_affinity(8, &[("app", "p")], "zone").build())],
                vec![0, 100, 0],
            ),
            (
                "existing pod's preferred anti-affinity",
                None,
                p(),
                vec![("b1", with("e", "e").preferred_pod_affinity(-8, &[("app", "p")], "zone").build())],
                vec![100, 0, 100],
            ),
            (
                "existing pods' terms both ways: a 8 - 2, b -2",
                None,
                p(),
                vec![
                    ("a1", with("e1", "e").preferred_pod_affinity(8, &[("app", "p")], "zone").build()),
                    ("a1", with("e2", "e").preferred_pod_affinity(-2, &[("app", "p")], "zone").build()),
                    ("b1", with("e3", "e").preferred_pod_affinity(-2, &[("app", "p")], "zone").build()),
                ],
                vec![100, 0, 25],
            ),
            (
                "existing pod's term not selecting the pod",
                None,
                p(),
                vec![("b1", with("e", "e").preferred_pod_affinity(8, &[("app", "other")], "zone").build())],
                vec![0, 0, 0],
            ),
            (
                "existing pod's term in its own namespace only",
                None,
                p(),
                vec![(
                    "b1",
                    with("e", "e").namespace("other").preferred_pod_affinity(8, &[("app", "p")], "zone").build(),
                )],
                vec![0, 0, 0],
            ),
            (
                "existing pod's and the pod's terms add up: a 8, b 5",
                None,
                p().preferred_pod_affinity(5, &[("app", "web")], "zone"),
                vec![
                    ("a1", with("e", "e").preferred_pod_affinity(8, &[("app", "p")], "zone").build()),
                    ("b1", with("w", "web").build()),
                ],
                vec![100, 62, 0],
            ),
            // hardPodAffinityWeight: an existing pod in zone a requires the
            // incoming pod's app (scored with the weight), one in zone b
            // prefers it with weight 3.
            ("hardPodAffinityWeight 1 (default): a 1, b 3", None, p(), hard_and_soft(), vec![33, 100, 0]),
            ("hardPodAffinityWeight 5: a 5, b 3", Some(5), p(), hard_and_soft(), vec![100, 60, 0]),
            ("hardPodAffinityWeight 0: required terms not scored", Some(0), p(), hard_and_soft(), vec![0, 100, 0]),
            (
                "hardPodAffinityWeight, required term not selecting the pod",
                Some(5),
                p(),
                vec![("a1", with("e", "e").pod_affinity(&[("app", "other")], "zone").build())],
                vec![0, 0, 0],
            ),
        ];
        for (name, weight, pod, pods, want) in cases {
            let args = weight.map_or_else(Args::default, |w| Args::default().with_hard_pod_affinity_weight(w));
            let set = new(args, &Handle::default()).unwrap();
            assert_eq!(scores(&set, pod, zones_abc(pods)), want, "{name}");
        }
    }

    fn hard_and_soft() -> Vec<(&'static str, Pod)> {
        vec![
            ("a1", PodBuilder::new("h").label("app", "h").pod_affinity(&[("app", "p")], "zone").build()),
            ("b1", PodBuilder::new("s").label("app", "s").preferred_pod_affinity(3, &[("app", "p")], "zone").build()),
        ]
    }

    #[test]
    fn hard_pod_affinity_weight_args() {
        for (weight, ok) in [(0, true), (1, true), (100, true), (101, false), (-1, false)] {
            let got = new(Args::default().with_hard_pod_affinity_weight(weight), &Handle::default());
            match got {
                Ok(_) => assert!(ok, "{weight}"),
                Err(PluginError::InvalidArgument { field, .. }) => {
                    assert!(!ok, "{weight}");
                    assert_eq!(field, "hardPodAffinityWeight");
                }
                Err(e) => panic!("{weight}: {e}"),
            }
        }
    }
}
