//! NodeResourcesFit: the node has room for the pod's requests (cpu, memory,
//! ephemeral storage, pod count, extended resources); scored by
//! LeastAllocated (default), MostAllocated or RequestedToCapacityRatio.

use std::sync::Arc;

use serde::Deserialize;

use crate::framework::*;
use crate::node_info::{NodeInfo, PodInfo};
use crate::registry::{PluginError, PluginSet};
use crate::resource::Resource;

/// The plugin's name.
pub const NAME: &str = "NodeResourcesFit";

/// A resource and its weight in scoring.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct ResourceSpec {
    /// Resource name.
    pub name: String,
    /// Weight (default 1).
    #[serde(default = "one")]
    pub weight: i64,
}

fn one() -> i64 {
    1
}

/// A point of the RequestedToCapacityRatio shape: utilization (0-100) to score (0-10).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq)]
pub struct ShapePoint {
    /// Utilization in percent.
    pub utilization: i64,
    /// Score 0-10.
    pub score: i64,
}

/// How nodes are scored.
#[derive(Debug, Clone, PartialEq)]
pub enum Strategy {
    /// Prefer the emptiest nodes (spreads load).
    LeastAllocated,
    /// Prefer the fullest nodes (bin packing).
    MostAllocated,
    /// A piecewise-linear function of utilization.
    RequestedToCapacityRatio(Vec<ShapePoint>),
}

/// The plugin's arguments (upstream's `NodeResourcesFitArgs`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
#[non_exhaustive]
pub struct Args {
    /// Extended resources the filter does not check.
    pub ignored_resources: Vec<String>,
    /// Extended resource groups (the prefix before `/`) the filter does not check.
    pub ignored_resource_groups: Vec<String>,
    /// How nodes are scored (None: LeastAllocated over cpu and memory).
    pub scoring_strategy: Option<ScoringStrategy>,
}

impl Args {
    /// Leaves the extended `resources` unchecked by the filter.
    pub fn with_ignored_resources(mut self, resources: Vec<String>) -> Args {
        self.ignored_resources = resources;
        self
    }
    /// Leaves the extended resource `groups` unchecked by the filter.
    pub fn with_ignored_resource_groups(mut self, groups: Vec<String>) -> Args {
        self.ignored_resource_groups = groups;
        self
    }
    /// Scores by `strategy`.
    pub fn with_scoring_strategy(mut self, strategy: ScoringStrategy) -> Args {
        self.scoring_strategy = Some(strategy);
        self
    }
}

/// The scoring strategy in the arguments.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
#[non_exhaustive]
pub struct ScoringStrategy {
    /// Which strategy.
    #[serde(rename = "type")]
    pub type_: ScoringStrategyType,
    /// Resources scored, with weights (None: cpu and memory, weight 1).
    pub resources: Option<Vec<ResourceSpec>>,
    /// The shape, for RequestedToCapacityRatio.
    pub requested_to_capacity_ratio: Option<RequestedToCapacityRatioParam>,
}

impl ScoringStrategy {
    /// The strategy `type_` over the default resources.
    pub fn new(type_: ScoringStrategyType) -> ScoringStrategy {
        ScoringStrategy { type_, ..Default::default() }
    }
    /// Scores over `resources` instead of cpu and memory.
    pub fn with_resources(mut self, resources: Vec<ResourceSpec>) -> ScoringStrategy {
        self.resources = Some(resources);
        self
    }
    /// The RequestedToCapacityRatio function's `shape`.
    pub fn with_shape(mut self, shape: Vec<ShapePoint>) -> ScoringStrategy {
        self.requested_to_capacity_ratio = Some(RequestedToCapacityRatioParam { shape });
        self
    }
}

/// The strategies, by their configuration name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub enum ScoringStrategyType {
    /// Prefer the emptiest nodes.
    #[default]
    LeastAllocated,
    /// Prefer the fullest nodes.
    MostAllocated,
    /// A piecewise-linear function of utilization.
    RequestedToCapacityRatio,
}

/// The RequestedToCapacityRatio shape in the arguments.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct RequestedToCapacityRatioParam {
    /// Points of the function, by increasing utilization.
    pub shape: Vec<ShapePoint>,
}

/// The plugin.
#[derive(Debug, Clone)]
pub struct NodeResourcesFit {
    /// Scoring strategy.
    pub strategy: Strategy,
    /// Resources scored, with weights.
    pub resources: Vec<ResourceSpec>,
    /// Extended resources not checked by the filter.
    pub ignored_resources: Vec<String>,
    /// Extended resource groups (prefix before `/`) not checked.
    pub ignored_resource_groups: Vec<String>,
}

impl Default for NodeResourcesFit {
    fn default() -> Self {
        NodeResourcesFit {
            strategy: Strategy::LeastAllocated,
            resources: vec![
                ResourceSpec { name: "cpu".into(), weight: 1 },
                ResourceSpec { name: "memory".into(), weight: 1 },
            ],
            ignored_resources: Vec::new(),
            ignored_resource_groups: Vec::new(),
        }
    }
}

impl Plugin for NodeResourcesFit {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::new(EventResource::AssignedPod, action::DELETE | action::UPDATE_POD_SCALE_DOWN),
            ClusterEvent::new(
                EventResource::Node,
                action::ADD | action::UPDATE_NODE_ALLOCATABLE | action::UPDATE_NODE_TAINT | action::UPDATE_NODE_LABEL,
            ),
        ]
    }
}

/// The reasons `pod` does not fit `node`'s free resources (empty: it fits).
pub fn insufficient_resources(pod: &Resource, node: &NodeInfo, ignored: &dyn Fn(&str) -> bool) -> Vec<String> {
    let mut reasons = Vec::new();
    if node.pods.len() as i64 + 1 > node.allocatable.allowed_pod_number {
        reasons.push("Too many pods".to_owned());
    }
    if pod.milli_cpu == 0 && pod.memory == 0 && pod.ephemeral_storage == 0 && pod.scalar.values().all(|v| *v == 0) {
        return reasons;
    }
    let free = |name: &str| node.allocatable.get(name) - node.requested.get(name);
    if pod.milli_cpu > 0 && pod.milli_cpu > free("cpu") {
        reasons.push("Insufficient cpu".into());
    }
    if pod.memory > 0 && pod.memory > free("memory") {
        reasons.push("Insufficient memory".into());
    }
    if pod.ephemeral_storage > 0 && pod.ephemeral_storage > free("ephemeral-storage") {
        reasons.push("Insufficient ephemeral-storage".into());
    }
    for (name, v) in &pod.scalar {
        if *v == 0 || ignored(name) {
            continue;
        }
        if *v > free(name) {
            reasons.push(format!("Insufficient {name}"));
        }
    }
    reasons
}

impl Filter for NodeResourcesFit {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let ignored = |name: &str| {
            self.ignored_resources.iter().any(|r| r == name)
                || name.split_once('/').is_some_and(|(g, _)| self.ignored_resource_groups.iter().any(|x| x == g))
        };
        let reasons = insufficient_resources(&pod.requests, node, &ignored);
        if reasons.is_empty() { Status::success() } else { Status { code: Code::Unschedulable, reasons, plugin: NAME } }
    }
}

/// Requested (with the pod) and allocatable amounts of `name` for scoring.
pub fn requested_and_allocatable(pod: &PodInfo, node: &NodeInfo, name: &str) -> (i64, i64) {
    let requested = match name {
        "cpu" | "memory" => node.non_zero_requested.get(name) + pod.non_zero_requests.get(name),
        _ => node.requested.get(name) + pod.requests.get(name),
    };
    (requested, node.allocatable.get(name))
}

fn interpolate(shape: &[ShapePoint], utilization: i64) -> i64 {
    // Shape scores are 0-10, scaled to 0-100.
    let Some(first) = shape.first() else { return 0 };
    if utilization <= first.utilization {
        return first.score * 10;
    }
    for w in shape.windows(2) {
        let (a, b) = (w[0], w[1]);
        if utilization <= b.utilization {
            let (sa, sb) = (a.score * 10, b.score * 10);
            return sa + (sb - sa) * (utilization - a.utilization) / (b.utilization - a.utilization).max(1);
        }
    }
    shape.last().expect("non-empty").score * 10
}

impl Score for NodeResourcesFit {
    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let mut total = 0;
        let mut weights = 0;
        for r in &self.resources {
            let (requested, capacity) = requested_and_allocatable(pod, node, &r.name);
            if capacity == 0 {
                continue;
            }
            let s = match &self.strategy {
                Strategy::LeastAllocated => {
                    if requested > capacity {
                        0
                    } else {
                        (capacity - requested) * MAX_NODE_SCORE / capacity
                    }
                }
                Strategy::MostAllocated => requested.min(capacity) * MAX_NODE_SCORE / capacity,
                Strategy::RequestedToCapacityRatio(shape) => {
                    interpolate(shape, requested.min(capacity) * 100 / capacity)
                }
            };
            total += s * r.weight;
            weights += r.weight;
        }
        Ok(if weights == 0 { 0 } else { total / weights })
    }
}

/// Builds the plugin, as registered under [`NAME`].
pub fn new(args: Args, _: &Handle) -> Result<PluginSet, PluginError> {
    let mut p = NodeResourcesFit {
        ignored_resources: args.ignored_resources,
        ignored_resource_groups: args.ignored_resource_groups,
        ..Default::default()
    };
    if let Some(s) = args.scoring_strategy {
        if let Some(r) = s.resources {
            p.resources = r;
        }
        p.strategy = match s.type_ {
            ScoringStrategyType::LeastAllocated => Strategy::LeastAllocated,
            ScoringStrategyType::MostAllocated => Strategy::MostAllocated,
            ScoringStrategyType::RequestedToCapacityRatio => {
                let shape = s.requested_to_capacity_ratio.map(|r| r.shape).unwrap_or_default();
                if shape.is_empty() {
                    return Err(PluginError::invalid_argument(
                        "scoringStrategy.requestedToCapacityRatio.shape",
                        "must not be empty",
                    ));
                }
                Strategy::RequestedToCapacityRatio(shape)
            }
        };
    }
    let p = Arc::new(p);
    Ok(PluginSet::new(&p).filter(&p).score(&p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder, node_info, pod_info};

    fn node(pods: Vec<k8s_openapi::api::core::v1::Pod>) -> NodeInfo {
        node_info(
            NodeBuilder::new("n").cpu("4").memory("8Gi").allocatable("example.com/gpu", "2").pods("3").build(),
            pods,
        )
    }

    #[test]
    fn filter_table() {
        let cases: Vec<(&str, PodBuilder, Vec<k8s_openapi::api::core::v1::Pod>, Vec<&str>)> = vec![
            ("fits", PodBuilder::new("p").cpu("1").memory("1Gi"), vec![], vec![]),
            ("no requests", PodBuilder::new("p"), vec![], vec![]),
            ("cpu", PodBuilder::new("p").cpu("5"), vec![], vec!["Insufficient cpu"]),
            (
                "cpu and memory with others",
                PodBuilder::new("p").cpu("2").memory("5Gi"),
                vec![PodBuilder::new("o").cpu("3").memory("4Gi").build()],
                vec!["Insufficient cpu", "Insufficient memory"],
            ),
            (
                "extended",
                PodBuilder::new("p").request("example.com/gpu", "3"),
                vec![],
                vec!["Insufficient example.com/gpu"],
            ),
            (
                "missing extended",
                PodBuilder::new("p").request("example.com/fpga", "1"),
                vec![],
                vec!["Insufficient example.com/fpga"],
            ),
            ("init container counted", PodBuilder::new("p").cpu("1").init_cpu("5"), vec![], vec!["Insufficient cpu"]),
            ("overhead counted", PodBuilder::new("p").cpu("4").overhead_cpu("100m"), vec![], vec!["Insufficient cpu"]),
            (
                "too many pods",
                PodBuilder::new("p"),
                vec![PodBuilder::new("a").build(), PodBuilder::new("b").build(), PodBuilder::new("c").build()],
                vec!["Too many pods"],
            ),
            (
                "ephemeral storage",
                PodBuilder::new("p").request("ephemeral-storage", "1Gi"),
                vec![],
                vec!["Insufficient ephemeral-storage"],
            ),
        ];
        for (name, pod, pods, want) in cases {
            let s = NodeResourcesFit::default().filter(&CycleState::new(), &pod_info(pod.build()), &node(pods));
            assert_eq!(s.reasons, want, "{name}");
            assert_eq!(s.is_success(), want.is_empty(), "{name}");
        }
    }

    #[test]
    fn score_table() {
        let shape = vec![ShapePoint { utilization: 0, score: 0 }, ShapePoint { utilization: 100, score: 10 }];
        let cases = [
            // (strategy, existing cpu, pod cpu, expected score); memory uses the 200Mi default
            (Strategy::LeastAllocated, "0", "1", (75 + (8192 - 400) * 100 / 8192) / 2),
            (Strategy::LeastAllocated, "2", "1", (25 + (8192 - 400) * 100 / 8192) / 2),
            (Strategy::MostAllocated, "2", "1", (75 + 400 * 100 / 8192) / 2),
            (Strategy::RequestedToCapacityRatio(shape), "1", "1", (50 + 400 * 100 / 8192) / 2),
        ];
        for (strategy, existing, cpu, want) in cases {
            let p = NodeResourcesFit { strategy: strategy.clone(), ..Default::default() };
            let n = node(vec![PodBuilder::new("o").cpu(existing).memory("200Mi").build()]);
            let got = p.score(&CycleState::new(), &pod_info(PodBuilder::new("p").cpu(cpu).build()), &n).unwrap();
            assert_eq!(got, want, "{strategy:?}");
        }
    }

    #[test]
    fn args() {
        let decode = |v: serde_json::Value| serde_json::from_value::<Args>(v).map_err(|e| e.to_string());
        let cases = [
            ("empty", serde_json::json!({}), Ok(Args::default())),
            (
                "ignored",
                serde_json::json!({"ignoredResources": ["a/b"], "ignoredResourceGroups": ["c"]}),
                Ok(Args {
                    ignored_resources: vec!["a/b".into()],
                    ignored_resource_groups: vec!["c".into()],
                    scoring_strategy: None,
                }),
            ),
            (
                "strategy with resources",
                serde_json::json!({"scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "cpu", "weight": 3}]}}),
                Ok(Args {
                    scoring_strategy: Some(
                        ScoringStrategy::new(ScoringStrategyType::MostAllocated)
                            .with_resources(vec![ResourceSpec { name: "cpu".into(), weight: 3 }]),
                    ),
                    ..Default::default()
                }),
            ),
            (
                "type defaults to LeastAllocated, weight to 1",
                serde_json::json!({"scoringStrategy": {"resources": [{"name": "memory"}]}}),
                Ok(Args {
                    scoring_strategy: Some(
                        ScoringStrategy::new(ScoringStrategyType::LeastAllocated)
                            .with_resources(vec![ResourceSpec { name: "memory".into(), weight: 1 }]),
                    ),
                    ..Default::default()
                }),
            ),
        ];
        for (name, raw, want) in cases {
            assert_eq!(decode(raw), want, "{name}");
        }
        assert!(decode(serde_json::json!({"scoringStrategy": {"type": "Bogus"}})).is_err());

        let with = |strategy| Args::default().with_scoring_strategy(strategy);
        let shape = vec![ShapePoint { utilization: 0, score: 0 }, ShapePoint { utilization: 100, score: 10 }];
        let set = new(with(ScoringStrategy::new(ScoringStrategyType::MostAllocated)), &Handle::default()).unwrap();
        assert!(set.score.is_some() && set.filter.is_some());
        let ratio = ScoringStrategy::new(ScoringStrategyType::RequestedToCapacityRatio);
        assert!(new(with(ratio.clone().with_shape(shape)), &Handle::default()).is_ok());
        assert!(matches!(
            new(with(ratio), &Handle::default()),
            Err(PluginError::InvalidArgument { field: "scoringStrategy.requestedToCapacityRatio.shape", .. })
        ));
    }
}
