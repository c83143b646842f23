//! PostFilter: runs when no node fits (preemption).

use std::collections::HashMap;

use super::{CycleState, Plugin, Status};
use crate::node_info::PodInfo;
use crate::profile::Profile;
use crate::snapshot::Snapshot;

/// Everything a PostFilter sees.
pub struct PostFilterArgs<'a> {
    /// The cycle state after PreFilter.
    pub state: &'a CycleState,
    /// The pod that did not fit.
    pub pod: &'a PodInfo,
    /// The snapshot it was filtered against.
    pub snapshot: &'a Snapshot,
    /// The rejecting status per node name.
    pub statuses: &'a HashMap<String, Status>,
    /// The profile (to re-run filters on modified nodes).
    pub profile: &'a Profile,
}

/// Called, in order, only when no node passed Filter. Contract: Success with a
/// node name means the pod was nominated to that node (the pod is retried;
/// the next PostFilters are not run); Unschedulable means try the next one.
///
/// A post-filter that never preempts, and says so, with how many nodes
/// rejected the pod:
///
/// ```
/// use async_trait::async_trait;
/// use orchestra_sched::framework::{Plugin, PostFilter, PostFilterArgs, Status};
///
/// struct ExplainOnly;
///
/// impl Plugin for ExplainOnly {
///     fn name(&self) -> &'static str {
///         "ExplainOnly"
///     }
/// }
///
/// #[async_trait]
/// impl PostFilter for ExplainOnly {
///     async fn post_filter(&self, args: PostFilterArgs<'_>) -> (Option<String>, Status) {
///         let nodes = args.statuses.len();
///         (None, Status::unschedulable(format!("0/{nodes} nodes are available; preemption is disabled")))
///     }
/// }
/// ```
#[async_trait::async_trait]
pub trait PostFilter: Plugin {
    /// Tries to make room for the pod.
    async fn post_filter(&self, args: PostFilterArgs<'_>) -> (Option<String>, Status);
}
