//! Filter: whether a pod can run on a node.

use super::{CycleState, Plugin, Status};
use crate::node_info::{NodeInfo, PodInfo};

/// Decides whether `pod` fits `node`. Contract: synchronous, cheap, side-effect
/// free and thread-safe (called in parallel for many nodes); reads only the
/// cycle state, the pod and the node info. Success: the node fits;
/// Unschedulable: it does not, preemption may help; UnschedulableAndUnresolvable:
/// preemption cannot help. Reasons are Kubernetes' words (`Insufficient cpu`).
///
/// A filter admitting pods labelled `gpu: "true"` only to nodes with the same
/// label:
///
/// ```
/// use orchestra_sched::framework::{CycleState, Filter, Plugin, Status};
/// use orchestra_sched::node_info::{NodeInfo, PodInfo};
/// use orchestra_sched::testing::{NodeBuilder, PodBuilder, node_info, pod_info};
///
/// struct GpuNodes;
///
/// impl Plugin for GpuNodes {
///     fn name(&self) -> &'static str {
///         "GpuNodes"
///     }
/// }
///
/// impl Filter for GpuNodes {
///     fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
///         let gpu = |labels: Option<&std::collections::BTreeMap<String, String>>| {
///             labels.and_then(|l| l.get("gpu")).is_some_and(|v| v == "true")
///         };
///         if !gpu(pod.pod.metadata.labels.as_ref()) || gpu(node.node.metadata.labels.as_ref()) {
///             Status::success()
///         } else {
///             Status::unresolvable("node has no GPU")
///         }
///     }
/// }
///
/// let state = CycleState::new();
/// let pod = pod_info(PodBuilder::new("train").label("gpu", "true").build());
/// let plain = node_info(NodeBuilder::new("n1").build(), vec![]);
/// let gpu = node_info(NodeBuilder::new("n2").label("gpu", "true").build(), vec![]);
/// assert!(GpuNodes.filter(&state, &pod, &gpu).is_success());
/// assert!(GpuNodes.filter(&state, &pod, &plain).is_rejected());
/// ```
pub trait Filter: Plugin {
    /// Filters one node.
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status;
}
