//! Score: ranks the feasible nodes.

use std::sync::Arc;

use super::{CycleState, Plugin, Status};
use crate::node_info::{NodeInfo, PodInfo};

/// The highest score a plugin returns after normalisation.
pub const MAX_NODE_SCORE: i64 = 100;

/// A node's score for one plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeScore {
    /// The node's name.
    pub name: Arc<str>,
    /// Its score.
    pub score: i64,
}

/// Scores one node for a pod. Contract: synchronous, cheap and thread-safe;
/// after `normalize` every score is in 0..=MAX_NODE_SCORE; the framework
/// multiplies it by the plugin's weight and sums over plugins.
///
/// A score preferring the node with the most unrequested CPU, normalised with
/// [`default_normalize`]:
///
/// ```
/// use std::sync::Arc;
/// use orchestra_sched::framework::{CycleState, MAX_NODE_SCORE, NodeScore, Plugin, Score, Status, default_normalize};
/// use orchestra_sched::node_info::{NodeInfo, PodInfo};
/// use orchestra_sched::testing::{NodeBuilder, PodBuilder, node_info, pod_info};
///
/// struct FreeCpu;
///
/// impl Plugin for FreeCpu {
///     fn name(&self) -> &'static str {
///         "FreeCpu"
///     }
/// }
///
/// impl Score for FreeCpu {
///     fn score(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
///         Ok((node.allocatable.milli_cpu - node.requested.milli_cpu).max(0))
///     }
///     fn normalize(&self, _: &CycleState, _: &PodInfo, scores: &mut [NodeScore]) -> Status {
///         default_normalize(scores, false);
///         Status::success()
///     }
/// }
///
/// let (state, pod) = (CycleState::new(), pod_info(PodBuilder::new("web").cpu("500m").build()));
/// let busy = node_info(NodeBuilder::new("busy").cpu("4").build(), vec![PodBuilder::new("db").cpu("3").build()]);
/// let idle = node_info(NodeBuilder::new("idle").cpu("4").build(), vec![]);
/// let mut scores: Vec<NodeScore> = [&busy, &idle]
///     .iter()
///     .map(|n| NodeScore { name: Arc::from(n.name()), score: FreeCpu.score(&state, &pod, n).unwrap() })
///     .collect();
/// assert!(FreeCpu.normalize(&state, &pod, &mut scores).is_success());
/// assert_eq!(scores[1].score, MAX_NODE_SCORE);
/// assert_eq!(scores[0].score, MAX_NODE_SCORE / 4);
/// ```
pub trait Score: Plugin {
    /// The raw score of `node`.
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status>;
    /// Rescales the raw scores to 0..=MAX_NODE_SCORE (default: none needed).
    fn normalize(&self, _state: &CycleState, _pod: &PodInfo, _scores: &mut [NodeScore]) -> Status {
        Status::success()
    }
}

/// Rescales `scores` so the highest is MAX_NODE_SCORE, optionally reversed
/// (the highest raw score becomes 0), like upstream's default normaliser.
pub fn default_normalize(scores: &mut [NodeScore], reverse: bool) {
    let max = scores.iter().map(|s| s.score).max().unwrap_or(0);
    if max == 0 {
        if reverse {
            for s in scores {
                s.score = MAX_NODE_SCORE;
            }
        }
        return;
    }
    for s in scores {
        let mut v = MAX_NODE_SCORE * s.score / max;
        if reverse {
            v = MAX_NODE_SCORE - v;
        }
        s.score = v;
    }
}
