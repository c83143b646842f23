//! PreEnqueue: gates a pod before it enters the active queue.

use k8s_openapi::api::core::v1::Pod;

use super::{Plugin, Status};

/// Decides whether a pod may enter the active queue. Contract: called on every
/// add and update of an unscheduled pod; anything but Success keeps the pod
/// parked (gated) until its next update. Must be cheap and must not block.
///
/// A gate keeping pods out of the active queue while their
/// `spec.schedulingGates` is not empty (what the built-in
/// `SchedulingGates` does):
///
/// ```
/// use k8s_openapi::api::core::v1::{Pod, PodSchedulingGate};
/// use orchestra_sched::framework::{Plugin, PreEnqueue, Status};
/// use orchestra_sched::testing::PodBuilder;
///
/// struct Gates;
///
/// impl Plugin for Gates {
///     fn name(&self) -> &'static str {
///         "Gates"
///     }
/// }
///
/// impl PreEnqueue for Gates {
///     fn pre_enqueue(&self, pod: &Pod) -> Status {
///         match pod.spec.as_ref().and_then(|s| s.scheduling_gates.as_ref()) {
///             Some(gates) if !gates.is_empty() => Status::unresolvable(format!("waiting for gate {}", gates[0].name)),
///             _ => Status::success(),
///         }
///     }
/// }
///
/// let gate = PodSchedulingGate { name: "quota".into() };
/// let gated = PodBuilder::new("web").with(|p| p.spec.as_mut().unwrap().scheduling_gates = Some(vec![gate])).build();
/// assert!(Gates.pre_enqueue(&gated).is_rejected());
/// assert!(Gates.pre_enqueue(&PodBuilder::new("web").build()).is_success());
/// ```
pub trait PreEnqueue: Plugin {
    /// Success lets the pod in.
    fn pre_enqueue(&self, pod: &Pod) -> Status;
}
