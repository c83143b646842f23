//! PreScore: computes per-pod scoring state once.

use std::sync::Arc;

use super::{CycleState, Plugin, Status};
use crate::node_info::{NodeInfo, PodInfo};

/// Runs once before Score with the feasible nodes. Contract: writes what its
/// Score needs into the cycle state; Skip means its Score does not run.
///
/// A pre-score computing once what its Score reads for every node, kept in
/// the cycle state:
///
/// ```
/// use std::sync::Arc;
/// use orchestra_sched::framework::{CycleState, Plugin, PreScore, Status};
/// use orchestra_sched::node_info::{NodeInfo, PodInfo};
/// use orchestra_sched::testing::{NodeBuilder, PodBuilder, node_info, pod_info};
///
/// /// The most CPU any feasible node has free.
/// struct MostFreeCpu(i64);
///
/// struct FreeCpu;
///
/// impl FreeCpu {
///     const STATE: &'static str = "FreeCpu/max";
/// }
///
/// impl Plugin for FreeCpu {
///     fn name(&self) -> &'static str {
///         "FreeCpu"
///     }
/// }
///
/// impl PreScore for FreeCpu {
///     fn pre_score(&self, state: &mut CycleState, _: &PodInfo, nodes: &[Arc<NodeInfo>]) -> Status {
///         let max = nodes.iter().map(|n| n.allocatable.milli_cpu - n.requested.milli_cpu).max().unwrap_or(0);
///         state.write(Self::STATE, MostFreeCpu(max));
///         Status::success()
///     }
/// }
///
/// let node = |name: &str, cpu: &str| Arc::new(node_info(NodeBuilder::new(name).cpu(cpu).build(), vec![]));
/// let nodes = [node("n1", "2"), node("n2", "8")];
/// let mut state = CycleState::new();
/// assert!(FreeCpu.pre_score(&mut state, &pod_info(PodBuilder::new("web").build()), &nodes).is_success());
/// assert_eq!(state.read::<MostFreeCpu>(FreeCpu::STATE).map(|m| m.0), Some(8000));
/// ```
pub trait PreScore: Plugin {
    /// Prepares scoring of `pod` over `nodes`.
    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, nodes: &[Arc<NodeInfo>]) -> Status;
}
