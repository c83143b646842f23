//! QueueSort: the order of the active queue.

use super::Plugin;
use crate::queue::QueuedPodInfo;

/// Orders pods in the active queue. Contract: a strict weak order; exactly one
/// QueueSort per scheduler (every profile must use the same one).
pub trait QueueSort: Plugin {
    /// Whether `a` is scheduled before `b`.
    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool;
}
