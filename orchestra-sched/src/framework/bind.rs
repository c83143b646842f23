//! Bind: writes the decision to the API.

use super::{CycleState, Plugin, Status};
use crate::node_info::PodInfo;

/// Binds the pod. Contract: binders run in order until one returns anything
/// but Skip; Success means the pod is bound.
#[async_trait::async_trait]
pub trait Bind: Plugin {
    /// Binds `pod` to `node`.
    async fn bind(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status;
}
