//! PreEnqueue: gates a pod before it enters the active queue.

use k8s_openapi::api::core::v1::Pod;

use super::{Plugin, Status};

/// Decides whether a pod may enter the active queue. Contract: called on every
/// add and update of an unscheduled pod; anything but Success keeps the pod
/// parked (gated) until its next update. Must be cheap and must not block.
///
/// A gate keeping the pods of namespace `batch` out of the active queue
/// until a quota system labels them admitted (as Kueue does); the label's
/// arrival is an update, which asks the gate again:
///
/// ```
/// use k8s_openapi::api::core::v1::Pod;
/// use orchestra_sched::framework::{Plugin, PreEnqueue, Status};
/// use orchestra_sched::testing::PodBuilder;
///
/// const ADMITTED: &str = "queue.example.com/admitted";
///
/// struct QuotaGate;
///
/// impl Plugin for QuotaGate {
///     fn name(&self) -> &'static str {
///         "QuotaGate"
///     }
/// }
///
/// impl PreEnqueue for QuotaGate {
///     fn pre_enqueue(&self, pod: &Pod) -> Status {
///         let admitted = pod.metadata.labels.as_ref().and_then(|l| l.get(ADMITTED)).is_some_and(|v| v == "true");
///         if pod.metadata.namespace.as_deref() != Some("batch") || admitted {
///             Status::success()
///         } else {
///             Status::unresolvable("waiting for quota")
///         }
///     }
/// }
///
/// let job = PodBuilder::new("train").namespace("batch");
/// assert!(QuotaGate.pre_enqueue(&job.clone().build()).is_rejected());
/// assert!(QuotaGate.pre_enqueue(&job.label(ADMITTED, "true").build()).is_success());
/// assert!(QuotaGate.pre_enqueue(&PodBuilder::new("web").build()).is_success());
/// ```
pub trait PreEnqueue: Plugin {
    /// Success lets the pod in.
    fn pre_enqueue(&self, pod: &Pod) -> Status;
}
