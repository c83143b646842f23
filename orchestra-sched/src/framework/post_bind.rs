//! PostBind: informational, after a successful binding.

use super::{CycleState, Plugin};
use crate::node_info::PodInfo;

/// Called after the pod is bound. Contract: cannot fail; for cleanup and
/// bookkeeping only.
///
/// A post-bind counting the bindings per node:
///
/// ```
/// use std::collections::HashMap;
/// use parking_lot::Mutex;
/// use orchestra_sched::framework::{CycleState, Plugin, PostBind};
/// use orchestra_sched::node_info::PodInfo;
/// use orchestra_sched::testing::{PodBuilder, pod_info};
///
/// #[derive(Default)]
/// struct BindCount(Mutex<HashMap<String, u64>>);
///
/// impl Plugin for BindCount {
///     fn name(&self) -> &'static str {
///         "BindCount"
///     }
/// }
///
/// impl PostBind for BindCount {
///     fn post_bind(&self, _: &CycleState, _: &PodInfo, node: &str) {
///         *self.0.lock().entry(node.to_owned()).or_default() += 1;
///     }
/// }
///
/// let (plugin, state) = (BindCount::default(), CycleState::new());
/// plugin.post_bind(&state, &pod_info(PodBuilder::new("a").build()), "n1");
/// plugin.post_bind(&state, &pod_info(PodBuilder::new("b").build()), "n1");
/// assert_eq!(plugin.0.lock()["n1"], 2);
/// ```
pub trait PostBind: Plugin {
    /// `pod` is bound to `node`.
    fn post_bind(&self, state: &CycleState, pod: &PodInfo, node: &str);
}
