//! DefaultPreemption: when no node fits, finds the node where evicting the
//! fewest, lowest-priority pods makes room — preferring victims whose
//! eviction violates fewer PodDisruptionBudgets — deletes them through the
//! API and nominates the node (`status.nominatedNodeName`).
//!
//! As upstream's asynchronous preemption, the victims are deleted off the
//! scheduling cycle. Room promised to other nominated pods of at least the
//! preemptor's priority counts as taken in the dry runs, and a pod whose
//! earlier preemption is still under way (deletes in flight, or a victim
//! still terminating on its nominated node) waits instead of choosing new
//! victims. The scheduler wakes such a pod once its node has no victim of
//! it left terminating.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams};
use orchestra_core::api::{selector_is_empty, selector_matches};

use crate::framework::*;
use crate::listers::Listers;
use crate::node_info::{NodeInfo, PodInfo};
use crate::plugins::helpers::{pod_labels, pod_priority};
use crate::registry::{NoArgs, PluginError, PluginSet};
use crate::snapshot::Snapshot;

/// The plugin's name.
pub const NAME: &str = "DefaultPreemption";
/// Candidate nodes examined at most.
pub const MAX_CANDIDATES: usize = 100;

/// The plugin.
pub struct DefaultPreemption {
    client: Option<kube::Client>,
    listers: Arc<Listers>,
    /// Preemptors (by UID) whose victims are still being deleted.
    running: Arc<parking_lot::Mutex<std::collections::HashSet<String>>>,
    /// Counts attempts and victims.
    metrics: Arc<crate::metrics::Metrics>,
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
    /// The victims, most important first.
    pub victims: Vec<Arc<PodInfo>>,
    /// How many victims' eviction violates a PodDisruptionBudget.
    pub num_pdb_violations: usize,
}

/// A PodDisruptionBudget as preemption sees it: the disruptions it allows
/// now, and the pods whose disruption the API server already recorded.
#[derive(Debug, Clone)]
pub struct Budget {
    /// The budget.
    pub pdb: Arc<PodDisruptionBudget>,
    /// Disruptions allowed now.
    pub allowed: i64,
}

/// The budgets in `listers` with the disruptions each allows: its
/// `status.disruptionsAllowed` when a controller maintains the status
/// (`observedGeneration` current), otherwise computed from the snapshot's
/// pods as the eviction subresource does.
pub fn budgets(listers: &Listers, snapshot: &Snapshot) -> Vec<Budget> {
    let pdbs = listers.pdbs.list();
    if pdbs.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for pdb in pdbs {
        let ns = pdb.metadata.namespace.clone().unwrap_or_default();
        let value = serde_json::to_value(pdb.as_ref()).unwrap_or_default();
        let maintained = orchestra_core::api::pdb::status_maintained(&value);
        let allowed = if maintained {
            pdb.status.as_ref().map_or(0, |s| s.disruptions_allowed as i64)
        } else {
            let pods: Vec<serde_json::Value> = snapshot
                .nodes
                .iter()
                .flat_map(|n| n.pods.iter())
                .filter(|p| p.namespace() == ns)
                .filter_map(|p| serde_json::to_value(p.pod.as_ref()).ok())
                .collect();
            orchestra_core::api::pdb::budget(&value, &pods).disruptions_allowed
        };
        out.push(Budget { pdb, allowed });
    }
    out
}

/// Splits `pods` into those whose eviction violates a budget and the others
/// (upstream's `filterPodsWithPDBViolation`); each matching pod uses one of
/// its budgets' allowed disruptions, in order. A budget with an empty
/// selector matches nothing; a pod the budget already lists in
/// `status.disruptedPods` does not count.
pub fn split_by_pdb_violation(pods: &[Arc<PodInfo>], budgets: &[Budget]) -> (Vec<Arc<PodInfo>>, Vec<Arc<PodInfo>>) {
    let mut allowed: Vec<i64> = budgets.iter().map(|b| b.allowed).collect();
    let (mut violating, mut fine) = (Vec::new(), Vec::new());
    for p in pods {
        let mut violated = false;
        if pod_labels(&p.pod).is_some_and(|l| !l.is_empty()) {
            for (i, b) in budgets.iter().enumerate() {
                if b.pdb.metadata.namespace.as_deref() != Some(p.namespace()) {
                    continue;
                }
                let Some(sel) = b.pdb.spec.as_ref().and_then(|s| s.selector.as_ref()) else { continue };
                // A budget with an empty selector matches no pod here (upstream's preemption).
                if selector_is_empty(sel) || !selector_matches(sel, pod_labels(&p.pod)) {
                    continue;
                }
                let name = p.pod.metadata.name.as_deref().unwrap_or("");
                if b.pdb.status.as_ref().and_then(|s| s.disrupted_pods.as_ref()).is_some_and(|d| d.contains_key(name)) {
                    continue;
                }
                allowed[i] -= 1;
                if allowed[i] < 0 {
                    violated = true;
                }
            }
        }
        if violated { violating.push(p.clone()) } else { fine.push(p.clone()) }
    }
    (violating, fine)
}

fn start_time(p: &PodInfo) -> Option<k8s_openapi::jiff::Timestamp> {
    p.pod.status.as_ref().and_then(|s| s.start_time.as_ref()).map(|t| t.0)
}

/// Upstream's `MoreImportantPod`: higher priority first, then the one that
/// started earlier.
fn importance_order(a: &Arc<PodInfo>, b: &Arc<PodInfo>) -> std::cmp::Ordering {
    pod_priority(&b.pod).cmp(&pod_priority(&a.pod)).then_with(|| match (start_time(a), start_time(b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    })
}

/// Finds the minimal victims on `node` for `pod` and how many of them
/// violate a budget (None: preemption does not help), as upstream's
/// `selectVictimsOnNode`: remove every lower-priority pod; if the pod then
/// fits, reprieve as many as possible — the budget-violating ones first,
/// each group most important first.
pub fn select_victims(
    args: &PostFilterArgs<'_>,
    node: &NodeInfo,
    budgets: &[Budget],
) -> Option<(Vec<Arc<PodInfo>>, usize)> {
    let prio = pod_priority(&args.pod.pod);
    let mut trial = node.clone();
    // Room already promised to another preemptor is not there to take.
    for p in args.snapshot.nominated_before(node.name(), args.pod) {
        trial.add_pod(p);
    }
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
    lower.sort_by(importance_order);
    let (violating, fine) = split_by_pdb_violation(&lower, budgets);
    let mut victims = Vec::new();
    let mut violations = 0;
    let mut reprieve = |p: &Arc<PodInfo>, trial: &mut NodeInfo| -> bool {
        trial.add_pod(p.clone());
        if args.profile.run_filters(args.state, args.pod, trial).is_success() {
            return true;
        }
        trial.remove_pod(p.uid());
        victims.push(p.clone());
        false
    };
    for p in &violating {
        if !reprieve(p, &mut trial) {
            violations += 1;
        }
    }
    for p in &fine {
        reprieve(p, &mut trial);
    }
    victims.sort_by(importance_order);
    Some((victims, violations))
}

/// Picks the best candidate as upstream's `pickOneNodeForPreemption`: fewest
/// budget violations, then lowest highest-victim priority, then lowest sum
/// of priorities, then fewest victims, then the latest start among the
/// highest-priority victims; ties go to the first.
pub fn pick(candidates: &[Candidate]) -> Option<&Candidate> {
    candidates.iter().min_by_key(|c| {
        let prios: Vec<i64> = c.victims.iter().map(|v| pod_priority(&v.pod) as i64).collect();
        let highest = prios.iter().copied().max().unwrap_or(i64::MIN);
        let sum: i64 = prios.iter().map(|p| p + i32::MAX as i64 + 1).sum();
        let earliest_top = c
            .victims
            .iter()
            .filter(|v| pod_priority(&v.pod) as i64 == highest)
            .filter_map(|v| start_time(v))
            .min()
            .map(|t| std::cmp::Reverse(t.as_nanosecond()));
        (c.num_pdb_violations, highest, sum, prios.len(), earliest_top)
    })
}

#[async_trait::async_trait]
impl PostFilter for DefaultPreemption {
    async fn post_filter(&self, args: PostFilterArgs<'_>) -> (Option<String>, Status) {
        // Every run is an attempt, as upstream counts them.
        self.metrics.preemption_attempts.inc();
        let spec = args.pod.pod.spec.as_ref();
        if spec.and_then(|s| s.preemption_policy.as_deref()) == Some("Never") {
            return (None, Status::unschedulable("preemption: not eligible due to preemptionPolicy=Never."));
        }
        // Upstream's `PodEligibleToPreemptOthers`: a pod whose earlier
        // preemption is still under way (a lower-priority pod terminating on
        // its nominated node) waits for it instead of choosing new victims.
        let prio = pod_priority(&args.pod.pod);
        let running = self.running.lock().contains(args.pod.uid());
        if running
            || args.snapshot.nominated_node_of(args.pod).and_then(|name| args.snapshot.get(name)).is_some_and(|node| {
                node.pods.iter().any(|p| p.pod.metadata.deletion_timestamp.is_some() && pod_priority(&p.pod) < prio)
            })
        {
            return (
                None,
                Status::unschedulable("preemption: not eligible due to a terminating pod on the nominated node."),
            );
        }
        let n = args.snapshot.len();
        let mut not_helpful = 0;
        let mut no_victims = 0;
        let mut candidates = Vec::new();
        let budgets = budgets(&self.listers, args.snapshot);
        for node in args.snapshot.nodes.iter() {
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
            match select_victims(&args, node, &budgets) {
                Some((victims, num_pdb_violations)) if !victims.is_empty() => {
                    candidates.push(Candidate { node: node.name().to_owned(), victims, num_pdb_violations })
                }
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
            return (
                None,
                Status::unschedulable(format!("preemption: 0/{n} nodes are available: {}.", reasons.join(", "))),
            );
        };
        self.metrics.preemption_victims.observe(best.victims.len() as f64);
        if let Some(client) = &self.client {
            // Like upstream's asynchronous preemption, the victims are
            // deleted off the scheduling cycle, all at once. The nominee
            // waits for them to go; should a delete fail, the victim is not
            // terminating, so the nominee's next attempt preempts afresh.
            let deletes: Vec<_> = best
                .victims
                .iter()
                .map(|v| {
                    let api: Api<Pod> = Api::namespaced(client.clone(), v.namespace());
                    let name = v.pod.metadata.name.clone().unwrap_or_default();
                    async move {
                        match api.delete(&name, &DeleteParams::default()).await {
                            Err(e) if !matches!(&e, kube::Error::Api(s) if s.code == 404) => {
                                tracing::warn!(victim = %name, error = %e, "preemption: delete failed");
                            }
                            _ => {}
                        }
                    }
                })
                .collect();
            let (running, preemptor) = (self.running.clone(), args.pod.uid().to_owned());
            running.lock().insert(preemptor.clone());
            tokio::spawn(async move {
                futures::future::join_all(deletes).await;
                running.lock().remove(&preemptor);
            });
        }
        (Some(best.node), Status::success())
    }
}

/// The plugin's arguments: it has no options.
pub type Args = NoArgs;

/// Builds the plugin, as registered under [`NAME`].
pub fn new(_: Args, handle: &Handle) -> Result<PluginSet, PluginError> {
    let p = Arc::new(DefaultPreemption {
        client: handle.client.clone(),
        listers: handle.listers.clone(),
        running: Default::default(),
        metrics: handle.metrics.clone(),
    });
    Ok(PluginSet::new(&p).post_filter(&p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Profile;
    use crate::testing::{NodeBuilder, PodBuilder, node_info, pod_info};
    use k8s_openapi::api::policy::v1::{PodDisruptionBudgetSpec, PodDisruptionBudgetStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
    use std::collections::HashMap;

    /// A budget over pods labelled app=`app` allowing `allowed` disruptions
    /// (a maintained status).
    fn pdb(app: &str, allowed: i32) -> PodDisruptionBudget {
        PodDisruptionBudget {
            metadata: ObjectMeta {
                name: Some(app.into()),
                namespace: Some("default".into()),
                generation: Some(1),
                ..Default::default()
            },
            spec: Some(PodDisruptionBudgetSpec {
                selector: Some(LabelSelector {
                    match_labels: Some([("app".to_owned(), app.to_owned())].into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            status: Some(PodDisruptionBudgetStatus {
                disruptions_allowed: allowed,
                observed_generation: Some(1),
                ..Default::default()
            }),
        }
    }

    fn names(pods: &[Arc<PodInfo>]) -> Vec<String> {
        pods.iter().map(|v| v.pod.metadata.name.clone().unwrap()).collect()
    }

    /// Candidates (node, victims, violations) for a 2-cpu pod of priority 10.
    fn candidates(nodes: Vec<NodeInfo>, pdbs: Vec<PodDisruptionBudget>) -> (Vec<Candidate>, Option<String>) {
        let profile = Profile::default_profile();
        let snapshot = Snapshot::from_nodes(nodes);
        let listers = Listers::new();
        for b in pdbs {
            listers.pdbs.insert(b);
        }
        let budgets = budgets(&listers, &snapshot);
        let pod = pod_info(PodBuilder::new("p").cpu("2").priority(10).build());
        let state = CycleState::new();
        let statuses: HashMap<String, Status> =
            snapshot.nodes.iter().map(|n| (n.name().to_owned(), Status::unschedulable("Insufficient cpu"))).collect();
        let args =
            PostFilterArgs { state: &state, pod: &pod, snapshot: &snapshot, statuses: &statuses, profile: &profile };
        let mut cands = Vec::new();
        for n in snapshot.nodes.iter() {
            if let Some((victims, num_pdb_violations)) = select_victims(&args, n, &budgets) {
                cands.push(Candidate { node: n.name().into(), victims, num_pdb_violations });
            }
        }
        let best = pick(&cands).map(|c| c.node.clone());
        (cands, best)
    }

    #[test]
    fn chooses_minimal_lowest_priority_victims() {
        let (cands, best) = candidates(
            vec![
                node_info(
                    NodeBuilder::new("a").cpu("4").build(),
                    vec![
                        PodBuilder::new("a-hi").cpu("2").priority(5).build(),
                        PodBuilder::new("a-lo").cpu("2").priority(1).build(),
                    ],
                ),
                node_info(
                    NodeBuilder::new("b").cpu("4").build(),
                    vec![
                        PodBuilder::new("b-1").cpu("2").priority(3).build(),
                        PodBuilder::new("b-2").cpu("2").priority(3).build(),
                    ],
                ),
                node_info(
                    NodeBuilder::new("c").cpu("4").build(),
                    vec![PodBuilder::new("c-top").cpu("4").priority(100).build()],
                ),
            ],
            vec![],
        );
        assert_eq!(cands.len(), 2);
        assert_eq!((cands[0].node.as_str(), names(&cands[0].victims)), ("a", vec!["a-lo".to_string()]));
        assert_eq!(cands[1].victims.len(), 1);
        assert_eq!(best.as_deref(), Some("a"));
    }

    #[test]
    fn budgets_table() {
        // Node "a": a lower-priority pod guarded by a budget; node "b": a
        // higher (but still lower than the preemptor) unguarded pod.
        let nodes = || {
            vec![
                node_info(
                    NodeBuilder::new("a").cpu("2").build(),
                    vec![PodBuilder::new("guarded").label("app", "db").cpu("2").priority(1).build()],
                ),
                node_info(
                    NodeBuilder::new("b").cpu("2").build(),
                    vec![PodBuilder::new("free").label("app", "web").cpu("2").priority(5).build()],
                ),
            ]
        };
        let cases: Vec<(&str, Vec<PodDisruptionBudget>, &str, usize)> = vec![
            ("no budgets: lowest priority victim", vec![], "a", 0),
            ("budget allows the disruption", vec![pdb("db", 1)], "a", 0),
            ("budget violated: avoid it", vec![pdb("db", 0)], "b", 0),
            ("both violated: lowest priority again", vec![pdb("db", 0), pdb("web", 0)], "a", 1),
            ("budget selects other pods", vec![pdb("cache", 0)], "a", 0),
        ];
        for (name, pdbs, want, want_violations) in cases {
            let (cands, best) = candidates(nodes(), pdbs);
            assert_eq!(best.as_deref(), Some(want), "{name}");
            let c = cands.iter().find(|c| c.node == want).unwrap();
            assert_eq!(c.num_pdb_violations, want_violations, "{name}");
        }
    }

    #[test]
    fn violating_victims_are_reprieved_first() {
        // Room for the 2-cpu preemptor needs one of two 1-cpu pods gone.
        // Reprieving the higher-priority one first evicts "guarded"; with a
        // budget protecting it, "guarded" is reprieved first and "plain" goes.
        let nodes = || {
            vec![node_info(
                NodeBuilder::new("a").cpu("4").build(),
                vec![
                    PodBuilder::new("guarded").label("app", "db").cpu("1").priority(1).build(),
                    PodBuilder::new("plain").label("app", "web").cpu("1").priority(2).build(),
                    PodBuilder::new("top").cpu("1").priority(50).build(),
                ],
            )]
        };
        let (cands, _) = candidates(nodes(), vec![]);
        assert_eq!(names(&cands[0].victims), ["guarded"], "without budgets the lowest priority goes");
        let (cands, _) = candidates(nodes(), vec![pdb("db", 0)]);
        assert_eq!(names(&cands[0].victims), ["plain"], "the budget-violating pod is reprieved first");
        assert_eq!(cands[0].num_pdb_violations, 0);
    }

    #[test]
    fn split_counts_allowed_disruptions() {
        let pods: Vec<Arc<PodInfo>> =
            (0..3).map(|i| Arc::new(pod_info(PodBuilder::new(&format!("db{i}")).label("app", "db").build()))).collect();
        let budgets = vec![Budget { pdb: Arc::new(pdb("db", 2)), allowed: 2 }];
        let (violating, fine) = split_by_pdb_violation(&pods, &budgets);
        assert_eq!(
            (names(&violating), names(&fine)),
            (vec!["db2".to_string()], vec!["db0".to_string(), "db1".to_string()])
        );
    }
}
