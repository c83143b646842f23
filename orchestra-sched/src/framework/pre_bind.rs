//! PreBind: work before the binding (volumes, ...).

use super::{CycleState, Plugin, Status};
use crate::node_info::PodInfo;

/// Runs in the binding cycle (asynchronously, off the scheduling loop).
/// Contract: anything but Success aborts binding, unreserves and retries.
///
/// A pre-bind checking, off the scheduling loop, that the node is still
/// there before the pod is bound to it:
///
/// ```
/// use std::collections::HashSet;
/// use async_trait::async_trait;
/// use parking_lot::Mutex;
/// use orchestra_sched::framework::{CycleState, Plugin, PreBind, Status};
/// use orchestra_sched::node_info::PodInfo;
/// use orchestra_sched::testing::{PodBuilder, pod_info};
///
/// /// The nodes known to exist (a lister, in a real plugin).
/// struct NodeStillThere(Mutex<HashSet<String>>);
///
/// impl Plugin for NodeStillThere {
///     fn name(&self) -> &'static str {
///         "NodeStillThere"
///     }
/// }
///
/// #[async_trait]
/// impl PreBind for NodeStillThere {
///     async fn pre_bind(&self, _: &CycleState, _: &PodInfo, node: &str) -> Status {
///         if self.0.lock().contains(node) { Status::success() } else { Status::error(format!("node {node} is gone")) }
///     }
/// }
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let plugin = NodeStillThere(Mutex::new(HashSet::from(["n1".to_owned()])));
/// let (state, pod) = (CycleState::new(), pod_info(PodBuilder::new("web").build()));
/// assert!(plugin.pre_bind(&state, &pod, "n1").await.is_success());
/// assert!(!plugin.pre_bind(&state, &pod, "n2").await.is_success());
/// # });
/// ```
#[async_trait::async_trait]
pub trait PreBind: Plugin {
    /// Prepares binding `pod` to `node`.
    async fn pre_bind(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status;
}
