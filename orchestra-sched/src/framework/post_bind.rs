//! PostBind: informational, after a successful binding.

use super::{CycleState, Plugin};
use crate::node_info::PodInfo;

/// Called after the pod is bound. Contract: cannot fail; for cleanup and
/// bookkeeping only.
pub trait PostBind: Plugin {
    /// `pod` is bound to `node`.
    fn post_bind(&self, state: &CycleState, pod: &PodInfo, node: &str);
}
