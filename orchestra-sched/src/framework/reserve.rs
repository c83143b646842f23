//! Reserve/Unreserve: claims resources for the chosen node.

use super::{CycleState, Plugin, Status};
use crate::node_info::PodInfo;

/// Called after the node is chosen and the pod assumed in the cache.
/// Contract: a failure unreserves every Reserve plugin (in reverse order) and
/// the pod is retried; `unreserve` must be idempotent and never fail.
pub trait Reserve: Plugin {
    /// Claims plugin state for `pod` on `node`.
    fn reserve(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status;
    /// Releases what `reserve` claimed.
    fn unreserve(&self, state: &CycleState, pod: &PodInfo, node: &str);
}
