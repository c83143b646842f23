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
///
/// A pre-filter pinning pods labelled `pin: <node>` to that node: it narrows
/// the candidates, and its Filter is skipped for pods without the label:
///
/// ```
/// use std::collections::HashSet;
/// use orchestra_sched::framework::{CycleState, Plugin, PreFilter, PreFilterResult, Status};
/// use orchestra_sched::node_info::PodInfo;
/// use orchestra_sched::snapshot::Snapshot;
/// use orchestra_sched::testing::{NodeBuilder, PodBuilder, node_info, pod_info};
///
/// struct Pin;
///
/// impl Plugin for Pin {
///     fn name(&self) -> &'static str {
///         "Pin"
///     }
/// }
///
/// impl PreFilter for Pin {
///     fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, snapshot: &Snapshot) -> (PreFilterResult, Status) {
///         let Some(node) = pod.pod.metadata.labels.as_ref().and_then(|l| l.get("pin")) else {
///             state.skip_filter.insert(self.name());
///             return (None, Status::success());
///         };
///         match snapshot.get(node) {
///             Some(_) => (Some(HashSet::from([node.clone()])), Status::success()),
///             None => (None, Status::unresolvable(format!("node {node} does not exist"))),
///         }
///     }
/// }
///
/// let snapshot = Snapshot::from_nodes(vec![
///     node_info(NodeBuilder::new("n1").build(), vec![]),
///     node_info(NodeBuilder::new("n2").build(), vec![]),
/// ]);
/// let mut state = CycleState::new();
/// let pinned = pod_info(PodBuilder::new("web").label("pin", "n2").build());
/// let (nodes, status) = Pin.pre_filter(&mut state, &pinned, &snapshot);
/// assert!(status.is_success());
/// assert_eq!(nodes, Some(HashSet::from(["n2".to_owned()])));
/// let lost = pod_info(PodBuilder::new("web").label("pin", "n9").build());
/// assert!(Pin.pre_filter(&mut CycleState::new(), &lost, &snapshot).1.is_rejected());
/// ```
pub trait PreFilter: Plugin {
    /// Prepares filtering of `pod` over `snapshot`.
    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, snapshot: &Snapshot) -> (PreFilterResult, Status);
}
