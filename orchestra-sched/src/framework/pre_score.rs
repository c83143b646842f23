//! PreScore: computes per-pod scoring state once.

use std::sync::Arc;

use super::{CycleState, Plugin, Status};
use crate::node_info::{NodeInfo, PodInfo};

/// Runs once before Score with the feasible nodes. Contract: writes what its
/// Score needs into the cycle state; Skip means its Score does not run.
pub trait PreScore: Plugin {
    /// Prepares scoring of `pod` over `nodes`.
    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, nodes: &[Arc<NodeInfo>]) -> Status;
}
