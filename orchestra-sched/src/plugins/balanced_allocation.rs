//! NodeResourcesBalancedAllocation: prefers nodes whose CPU and memory
//! utilization would stay close to each other.

use std::sync::Arc;

use crate::framework::*;
use crate::node_info::{NodeInfo, PodInfo};
use crate::plugins::node_resources_fit::{ResourceSpec, requested_and_allocatable};
use crate::registry::{PluginError, PluginSet};

/// The plugin's name.
pub const NAME: &str = "NodeResourcesBalancedAllocation";

/// Scores `(1 - stddev(utilization fractions)) * 100` over cpu and memory.
#[derive(Debug, Clone)]
pub struct BalancedAllocation {
    /// Resources considered (default cpu, memory).
    pub resources: Vec<String>,
}

impl Default for BalancedAllocation {
    fn default() -> Self {
        BalancedAllocation { resources: vec!["cpu".into(), "memory".into()] }
    }
}

impl Plugin for BalancedAllocation {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        Vec::new()
    }
}

impl Score for BalancedAllocation {
    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let mut fractions = Vec::with_capacity(self.resources.len());
        for r in &self.resources {
            let (req, alloc) = requested_and_allocatable(pod, node, r);
            if alloc == 0 {
                continue;
            }
            fractions.push((req as f64 / alloc as f64).min(1.0));
        }
        let std = match fractions.len() {
            0 | 1 => 0.0,
            2 => (fractions[0] - fractions[1]).abs() / 2.0,
            n => {
                let mean = fractions.iter().sum::<f64>() / n as f64;
                (fractions.iter().map(|f| (f - mean) * (f - mean)).sum::<f64>() / n as f64).sqrt()
            }
        };
        Ok(((1.0 - std) * MAX_NODE_SCORE as f64) as i64)
    }
}

/// The plugin's arguments (upstream's `NodeResourcesBalancedAllocationArgs`).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct Args {
    /// The resources whose utilization is balanced (default cpu and
    /// memory); their weights are not used.
    pub resources: Vec<ResourceSpec>,
}

impl Default for Args {
    fn default() -> Self {
        Args {
            resources: BalancedAllocation::default()
                .resources
                .into_iter()
                .map(|name| ResourceSpec { name, weight: 1 })
                .collect(),
        }
    }
}

impl Args {
    /// Balances `resources` instead of cpu and memory.
    pub fn with_resources(mut self, resources: Vec<ResourceSpec>) -> Args {
        self.resources = resources;
        self
    }
}

/// Builds the plugin, as registered under [`NAME`].
pub fn new(args: Args, _: &Handle) -> Result<PluginSet, PluginError> {
    let p = Arc::new(BalancedAllocation { resources: args.resources.into_iter().map(|r| r.name).collect() });
    Ok(PluginSet::new(&p).score(&p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder, node_info, pod_info};

    #[test]
    fn table() {
        for (cpu, mem, want) in [("2", "4Gi", 100), ("4", "0", 50), ("1", "6Gi", 75)] {
            let n = node_info(NodeBuilder::new("n").cpu("4").memory("8Gi").build(), vec![]);
            let p = pod_info(PodBuilder::new("p").cpu(cpu).memory(mem).build());
            // memory "0" counts the 200Mi default: (1 - 0.0244)/2 -> 51
            let got = BalancedAllocation::default().score(&CycleState::new(), &p, &n).unwrap();
            assert!((got - want).abs() <= 2, "{cpu} {mem}: {got}");
        }
    }
}
