//! Bind: writes the decision to the API.

use super::{CycleState, Plugin, Status};
use crate::node_info::PodInfo;

/// Binds the pod. Contract: binders run in order until one returns anything
/// but Skip; Success means the pod is bound.
///
/// A binder for the pods of one namespace, leaving the others to the next
/// binder (the default one writes a `Binding`):
///
/// ```
/// use async_trait::async_trait;
/// use parking_lot::Mutex;
/// use orchestra_sched::framework::{CycleState, Bind, Plugin, Status};
/// use orchestra_sched::node_info::PodInfo;
/// use orchestra_sched::testing::{PodBuilder, pod_info};
///
/// /// Records the bindings of namespace `sandbox` (an external system's
/// /// API call, in a real plugin).
/// #[derive(Default)]
/// struct SandboxBinder(Mutex<Vec<(String, String)>>);
///
/// impl Plugin for SandboxBinder {
///     fn name(&self) -> &'static str {
///         "SandboxBinder"
///     }
/// }
///
/// #[async_trait]
/// impl Bind for SandboxBinder {
///     async fn bind(&self, _: &CycleState, pod: &PodInfo, node: &str) -> Status {
///         if pod.namespace() != "sandbox" {
///             return Status::skip();
///         }
///         self.0.lock().push((pod.key(), node.to_owned()));
///         Status::success()
///     }
/// }
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let (binder, state) = (SandboxBinder::default(), CycleState::new());
/// let web = pod_info(PodBuilder::new("web").build());
/// assert!(binder.bind(&state, &web, "n1").await.is_skip());
/// let job = pod_info(PodBuilder::new("job").namespace("sandbox").build());
/// assert!(binder.bind(&state, &job, "n1").await.is_success());
/// assert_eq!(binder.0.lock().len(), 1);
/// # });
/// ```
#[async_trait::async_trait]
pub trait Bind: Plugin {
    /// Binds `pod` to `node`.
    async fn bind(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status;
}
