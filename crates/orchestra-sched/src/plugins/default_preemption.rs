//! DefaultPreemption: when no node fits, finds the node where evicting the
//! fewest, lowest-priority pods makes room, deletes them through the API and
//! nominates the node (`status.nominatedNodeName`).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};

use crate::framework::*;
use crate::node_info::{NodeInfo, PodInfo};
use crate::plugins::helpers::pod_priority;
use crate::registry::PluginSet;

/// The plugin's name.
pub const NAME: &str = "DefaultPreemption";
/// Candidate nodes examined at most.
pub const MAX_CANDIDATES: usize = 100;

/// The plugin.
pub struct DefaultPreemption {
    client: Option<kube::Client>,
}

impl Plugin for DefaultPreemption {
    fn name(&self) -> &'static str {
        NAME
    }
}

/// A node and the pods to evict from it.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// The node.
    pub node: String,
    /// The victims.
    pub victims: Vec<Arc<PodInfo>>,
}

/// Finds the minimal victims on `node` for `pod` (None: preemption does not help).
pub fn select_victims(args: &PostFilterArgs<'_>, node: &NodeInfo) -> Option<Vec<Arc<PodInfo>>> {
    let prio = pod_priority(&args.pod.pod);
    let mut trial = node.clone();
    let mut lower: Vec<Arc<PodInfo>> = node.pods.iter().filter(|p| pod_priority(&p.pod) < prio).cloned().collect();
    if lower.is_empty() {
        return None;
    }
    for p in &lower {
        trial.remove_pod(p.uid());
    }
    if !args.profile.run_filters(args.state, args.pod, &trial).is_success() {
        return None;
    }
    // Reprieve as many as possible, highest priority first.
    lower.sort_by_key(|p| std::cmp::Reverse(pod_priority(&p.pod)));
    let mut victims = Vec::new();
    for p in lower {
        trial.add_pod(p.clone());
        if !args.profile.run_filters(args.state, args.pod, &trial).is_success() {
            trial.remove_pod(p.uid());
            victims.push(p);
        }
    }
    Some(victims)
}

/// Picks the best candidate: lowest highest-victim priority, then lowest
/// priority sum, then fewest victims.
pub fn pick(candidates: &[Candidate]) -> Option<&Candidate> {
    candidates.iter().min_by_key(|c| {
        let prios: Vec<i64> = c.victims.iter().map(|v| pod_priority(&v.pod) as i64).collect();
        (prios.iter().copied().max().unwrap_or(i64::MIN), prios.iter().sum::<i64>(), prios.len())
    })
}

#[async_trait::async_trait]
impl PostFilter for DefaultPreemption {
    async fn post_filter(&self, args: PostFilterArgs<'_>) -> (Option<String>, Status) {
        let spec = args.pod.pod.spec.as_ref();
        if spec.and_then(|s| s.preemption_policy.as_deref()) == Some("Never") {
            return (None, Status::unschedulable("preemption: not eligible due to preemptionPolicy=Never."));
        }
        let n = args.snapshot.len();
        let mut not_helpful = 0;
        let mut no_victims = 0;
        let mut candidates = Vec::new();
        for node in &args.snapshot.nodes {
            match args.statuses.get(node.name()) {
                Some(s) if s.code == Code::UnschedulableAndUnresolvable => {
                    not_helpful += 1;
                    continue;
                }
                None => {
                    not_helpful += 1;
                    continue;
                }
                _ => {}
            }
            if candidates.len() >= MAX_CANDIDATES {
                continue;
            }
            match select_victims(&args, node) {
                Some(victims) if !victims.is_empty() => candidates.push(Candidate { node: node.name().to_owned(), victims }),
                _ => no_victims += 1,
            }
        }
        let Some(best) = pick(&candidates).cloned() else {
            let mut reasons = Vec::new();
            if no_victims > 0 {
                reasons.push(format!("{no_victims} No preemption victims found for incoming pod"));
            }
            if not_helpful > 0 {
                reasons.push(format!("{not_helpful} Preemption is not helpful for scheduling"));
            }
            return (None, Status::unschedulable(format!("preemption: 0/{n} nodes are available: {}.", reasons.join(", "))));
        };
        if let Some(client) = &self.client {
            for v in &best.victims {
                let api: Api<Pod> = Api::namespaced(client.clone(), v.namespace());
                let name = v.pod.metadata.name.clone().unwrap_or_default();
                if let Err(e) = api.delete(&name, &DeleteParams::default()).await {
                    if !matches!(&e, kube::Error::Api(s) if s.code == 404) {
                        return (None, Status::error(format!("preemption: deleting {name}: {e}")));
                    }
                }
            }
        }
        (Some(best.node), Status::success())
    }
}

/// The factory.
pub fn factory(handle: &Handle) -> PluginSet {
    let p = Arc::new(DefaultPreemption { client: handle.client.clone() });
    PluginSet::new(&p).post_filter(&p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Profile;
    use crate::snapshot::Snapshot;
    use crate::testing::{NodeBuilder, PodBuilder, node_info, pod_info};
    use std::collections::HashMap;

    #[test]
    fn chooses_minimal_lowest_priority_victims() {
        let profile = Profile::default_profile();
        let snapshot = Snapshot::from_nodes(vec![
            node_info(
                NodeBuilder::new("a").cpu("4").build(),
                vec![PodBuilder::new("a-hi").cpu("2").priority(5).build(), PodBuilder::new("a-lo").cpu("2").priority(1).build()],
            ),
            node_info(
                NodeBuilder::new("b").cpu("4").build(),
                vec![PodBuilder::new("b-1").cpu("2").priority(3).build(), PodBuilder::new("b-2").cpu("2").priority(3).build()],
            ),
            node_info(NodeBuilder::new("c").cpu("4").build(), vec![PodBuilder::new("c-top").cpu("4").priority(100).build()]),
        ]);
        let pod = pod_info(PodBuilder::new("p").cpu("2").priority(10).build());
        let state = CycleState::new();
        let statuses: HashMap<String, Status> =
            ["a", "b", "c"].iter().map(|n| (n.to_string(), Status::unschedulable("Insufficient cpu"))).collect();
        let args = PostFilterArgs { state: &state, pod: &pod, snapshot: &snapshot, statuses: &statuses, profile: &profile };
        let mut cands = Vec::new();
        for n in &snapshot.nodes {
            if let Some(v) = select_victims(&args, n) {
                cands.push(Candidate { node: n.name().into(), victims: v });
            }
        }
        let got: Vec<(String, Vec<String>)> = cands
            .iter()
            .map(|c| (c.node.clone(), c.victims.iter().map(|v| v.pod.metadata.name.clone().unwrap()).collect()))
            .collect();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], ("a".to_string(), vec!["a-lo".to_string()]));
        assert_eq!(got[1].1.len(), 1);
        assert_eq!(pick(&cands).unwrap().node, "a");
    }
}
