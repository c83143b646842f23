//! PreBind: work before the binding (volumes, ...).

use super::{CycleState, Plugin, Status};
use crate::node_info::PodInfo;

/// Runs in the binding cycle (asynchronously, off the scheduling loop).
/// Contract: anything but Success aborts binding, unreserves and retries.
#[async_trait::async_trait]
pub trait PreBind: Plugin {
    /// Prepares binding `pod` to `node`.
    async fn pre_bind(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status;
}
