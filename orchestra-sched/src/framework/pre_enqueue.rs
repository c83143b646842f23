//! PreEnqueue: gates a pod before it enters the active queue.

use k8s_openapi::api::core::v1::Pod;

use super::{Plugin, Status};

/// Decides whether a pod may enter the active queue. Contract: called on every
/// add and update of an unscheduled pod; anything but Success keeps the pod
/// parked (gated) until its next update. Must be cheap and must not block.
pub trait PreEnqueue: Plugin {
    /// Success lets the pod in.
    fn pre_enqueue(&self, pod: &Pod) -> Status;
}
