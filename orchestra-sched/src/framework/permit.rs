//! Permit: approves, rejects or delays binding.

use std::time::Duration;

use super::{CycleState, Plugin, Status};
use crate::node_info::PodInfo;

/// Called at the end of the scheduling cycle. Contract: Success lets the pod
/// bind; Unschedulable rejects it; Wait parks it (for at most the returned
/// duration) until the plugin allows or rejects it through the
/// [`WaitingPods`](super::WaitingPods) handle; binding waits off the
/// scheduling loop.
///
/// A permit plugin holding pods labelled `hold: "true"` for up to a minute
/// (until something allows them through the waiting-pods handle):
///
/// ```
/// use std::time::Duration;
/// use orchestra_sched::framework::{Code, CycleState, Permit, Plugin, Status};
/// use orchestra_sched::node_info::PodInfo;
/// use orchestra_sched::testing::{PodBuilder, pod_info};
///
/// struct Hold;
///
/// impl Plugin for Hold {
///     fn name(&self) -> &'static str {
///         "Hold"
///     }
/// }
///
/// impl Permit for Hold {
///     fn permit(&self, _: &CycleState, pod: &PodInfo, _: &str) -> (Status, Duration) {
///         match pod.pod.metadata.labels.as_ref().and_then(|l| l.get("hold")) {
///             Some(v) if v == "true" => (Status::wait(), Duration::from_secs(60)),
///             _ => (Status::success(), Duration::ZERO),
///         }
///     }
/// }
///
/// let state = CycleState::new();
/// let held = pod_info(PodBuilder::new("batch").label("hold", "true").build());
/// assert_eq!(Hold.permit(&state, &held, "n1").0.code, Code::Wait);
/// assert!(Hold.permit(&state, &pod_info(PodBuilder::new("web").build()), "n1").0.is_success());
/// ```
pub trait Permit: Plugin {
    /// Decides for `pod` on `node`.
    fn permit(&self, state: &CycleState, pod: &PodInfo, node: &str) -> (Status, Duration);
}
