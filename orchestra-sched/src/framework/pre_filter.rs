//! PreFilter: computes per-pod state once and may narrow the candidate nodes.

use std::collections::HashSet;

use super::{CycleState, Plugin, Status};
use crate::node_info::PodInfo;
use crate::snapshot::Snapshot;

/// What a PreFilter returns besides its status: an optional set of node
/// names; the nodes to filter are the intersection of all returned sets.
pub type PreFilterResult = Option<HashSet<String>>;

/// Runs once per scheduling attempt before any Filter. Contract: writes what
/// its Filter needs into the cycle state; Skip means its Filter does not run
/// for this pod; Unschedulable/UnschedulableAndUnresolvable rejects the pod on
/// every node; Error aborts the attempt.
pub trait PreFilter: Plugin {
    /// Prepares filtering of `pod` over `snapshot`.
    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, snapshot: &Snapshot) -> (PreFilterResult, Status);
}
