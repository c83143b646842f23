//! Permit: approves, rejects or delays binding.

use std::time::Duration;

use super::{CycleState, Plugin, Status};
use crate::node_info::PodInfo;

/// Called at the end of the scheduling cycle. Contract: Success lets the pod
/// bind; Unschedulable rejects it; Wait parks it (for at most the returned
/// duration) until the plugin allows or rejects it through the
/// [`WaitingPods`](super::WaitingPods) handle; binding waits off the
/// scheduling loop.
pub trait Permit: Plugin {
    /// Decides for `pod` on `node`.
    fn permit(&self, state: &CycleState, pod: &PodInfo, node: &str) -> (Status, Duration);
}
