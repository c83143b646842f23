//! QueueSort: the order of the active queue.

use super::Plugin;
use crate::queue::QueuedPodInfo;

/// Orders pods in the active queue. Contract: a strict weak order; exactly one
/// QueueSort per scheduler (every profile must use the same one).
///
/// Higher priority first, then first come, first served (what the built-in
/// `PrioritySort` does):
///
/// ```
/// use std::sync::Arc;
/// use orchestra_sched::framework::{Plugin, QueueSort};
/// use orchestra_sched::queue::QueuedPodInfo;
/// use orchestra_sched::testing::{PodBuilder, pod_info};
///
/// struct ByPriority;
///
/// impl Plugin for ByPriority {
///     fn name(&self) -> &'static str {
///         "ByPriority"
///     }
/// }
///
/// impl QueueSort for ByPriority {
///     fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
///         (a.priority(), b.timestamp) > (b.priority(), a.timestamp)
///     }
/// }
///
/// let queued = |name: &str, priority: i32| {
///     QueuedPodInfo::new(Arc::new(pod_info(PodBuilder::new(name).priority(priority).build())))
/// };
/// let (low, high) = (queued("low", 0), queued("high", 1000));
/// assert!(ByPriority.less(&high, &low));
/// assert!(!ByPriority.less(&low, &high));
/// ```
pub trait QueueSort: Plugin {
    /// Whether `a` is scheduled before `b`.
    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool;
}
