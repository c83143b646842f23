//! Filter: whether a pod can run on a node.

use super::{CycleState, Plugin, Status};
use crate::node_info::{NodeInfo, PodInfo};

/// Decides whether `pod` fits `node`. Contract: synchronous, cheap, side-effect
/// free and thread-safe (called in parallel for many nodes); reads only the
/// cycle state, the pod and the node info. Success: the node fits;
/// Unschedulable: it does not, preemption may help; UnschedulableAndUnresolvable:
/// preemption cannot help. Reasons are Kubernetes' words (`Insufficient cpu`).
pub trait Filter: Plugin {
    /// Filters one node.
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status;
}
