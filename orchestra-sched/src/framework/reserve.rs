//! Reserve/Unreserve: claims resources for the chosen node.

use super::{CycleState, Plugin, Status};
use crate::node_info::PodInfo;

/// Called after the node is chosen and the pod assumed in the cache.
/// Contract: a failure unreserves every Reserve plugin (in reverse order) and
/// the pod is retried; `unreserve` must be idempotent and never fail.
///
/// A reserve plugin counting the pods it reserved per node, for a Filter of
/// the same plugin to take into account before the pods are bound:
///
/// ```
/// use std::collections::HashMap;
/// use parking_lot::Mutex;
/// use orchestra_sched::framework::{CycleState, Plugin, Reserve, Status};
/// use orchestra_sched::node_info::PodInfo;
/// use orchestra_sched::testing::{PodBuilder, pod_info};
///
/// #[derive(Default)]
/// struct Reserved(Mutex<HashMap<String, usize>>);
///
/// impl Plugin for Reserved {
///     fn name(&self) -> &'static str {
///         "Reserved"
///     }
/// }
///
/// impl Reserve for Reserved {
///     fn reserve(&self, _: &CycleState, _: &PodInfo, node: &str) -> Status {
///         *self.0.lock().entry(node.to_owned()).or_default() += 1;
///         Status::success()
///     }
///     fn unreserve(&self, _: &CycleState, _: &PodInfo, node: &str) {
///         if let Some(n) = self.0.lock().get_mut(node) {
///             *n = n.saturating_sub(1);
///         }
///     }
/// }
///
/// let (plugin, state, pod) = (Reserved::default(), CycleState::new(), pod_info(PodBuilder::new("web").build()));
/// assert!(plugin.reserve(&state, &pod, "n1").is_success());
/// plugin.unreserve(&state, &pod, "n1");
/// plugin.unreserve(&state, &pod, "n1");
/// assert_eq!(plugin.0.lock()["n1"], 0);
/// ```
pub trait Reserve: Plugin {
    /// Claims plugin state for `pod` on `node`.
    fn reserve(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status;
    /// Releases what `reserve` claimed.
    fn unreserve(&self, state: &CycleState, pod: &PodInfo, node: &str);
}
