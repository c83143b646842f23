//! The parallel filtering path: the first 1024 nodes are filtered on the
//! calling thread and the rest in chunks on worker threads, so clusters
//! where the search goes past 1024 nodes are decided partly in parallel.
//! The decision and the failure summary must not depend on that.

use std::collections::HashSet;

use orchestra_sched::algorithm::{Algorithm, AlgorithmOptions, Decision};
use orchestra_sched::framework::CycleState;
use orchestra_sched::profile::Profile;
use orchestra_sched::snapshot::Snapshot;
use orchestra_sched::testing::{NodeBuilder, PodBuilder, node_info, pod_info};

/// Past the sequential part: every test needs nodes beyond index 1024.
const NODES: usize = 3000;

/// `NODES` nodes; those for which `big(i)` holds have 8 cpus, the others 1;
/// those for which `tainted(i)` holds carry a NoSchedule taint.
fn cluster(big: impl Fn(usize) -> bool, tainted: impl Fn(usize) -> bool) -> Snapshot {
    Snapshot::from_nodes(
        (0..NODES)
            .map(|i| {
                let mut n = NodeBuilder::new(&format!("n{i:04}")).cpu(if big(i) { "8" } else { "1" }).memory("8Gi");
                if tainted(i) {
                    n = n.taint("dedicated", "gpu", "NoSchedule");
                }
                node_info(n.build(), vec![])
            })
            .collect(),
    )
}

fn algorithm(parallelism: usize, percentage: Option<i32>) -> Algorithm {
    Algorithm::new(
        AlgorithmOptions::default().with_percentage_of_nodes_to_score(percentage).with_parallelism(parallelism),
    )
}

#[test]
fn only_the_last_nodes_fit() {
    let profile = Profile::default_profile();
    let fitting: HashSet<String> = (NODES - 5..NODES).map(|i| format!("n{i:04}")).collect();
    let snapshot = cluster(|i| i >= NODES - 5, |_| false);
    for parallelism in [1, 2, 4] {
        let mut alg = algorithm(parallelism, None);
        for p in 0..3 {
            let pod = pod_info(PodBuilder::new(&format!("p{p}")).cpu("2").build());
            match alg.schedule(&profile, &mut CycleState::new(), &pod, &snapshot) {
                Decision::Fit { node, evaluated, feasible } => {
                    assert!(fitting.contains(&node), "{node} does not fit (parallelism {parallelism})");
                    // Fewer than the nodes to find fit: every node was filtered.
                    assert_eq!((evaluated, feasible), (NODES, 5), "parallelism {parallelism}");
                }
                other => panic!("parallelism {parallelism}: {other:?}"),
            }
        }
    }
}

#[test]
fn the_search_stops_once_enough_nodes_fit_in_the_parallel_part() {
    let profile = Profile::default_profile();
    // Nodes 1100..1400 fit; 1% of 3000 is below the floor of 100 nodes to
    // find, so the search ends with 100 feasible nodes, all found by the
    // parallel part.
    let fits = |i: usize| (1100..1400).contains(&i);
    let snapshot = cluster(fits, |_| false);
    for parallelism in [1, 2, 4] {
        let mut alg = algorithm(parallelism, Some(1));
        let pod = pod_info(PodBuilder::new("p").cpu("2").build());
        match alg.schedule(&profile, &mut CycleState::new(), &pod, &snapshot) {
            Decision::Fit { node, evaluated, feasible } => {
                let i: usize = node[1..].parse().unwrap();
                assert!(fits(i), "{node} does not fit (parallelism {parallelism})");
                assert_eq!(feasible, 100, "parallelism {parallelism}");
                assert!((1200..=1400).contains(&evaluated), "evaluated {evaluated} (parallelism {parallelism})");
            }
            other => panic!("parallelism {parallelism}: {other:?}"),
        }
    }
}

#[test]
fn nothing_fits_and_every_node_is_counted_once() {
    let profile = Profile::default_profile();
    // Every third node is big but tainted, the others too small: 1000
    // taints and 2000 Insufficient cpu, both in and past the sequential part.
    let snapshot = cluster(|i| i % 3 == 0, |i| i % 3 == 0);
    for parallelism in [1, 2, 4] {
        let mut alg = algorithm(parallelism, None);
        let pod = pod_info(PodBuilder::new("p").cpu("2").build());
        match alg.schedule(&profile, &mut CycleState::new(), &pod, &snapshot) {
            Decision::Unfit(fit) => {
                assert_eq!(fit.num_all_nodes, NODES);
                assert_eq!(fit.statuses.len(), NODES, "one status per node (parallelism {parallelism})");
                assert_eq!(
                    fit.message(),
                    "0/3000 nodes are available: 1000 node(s) had untolerated taint {dedicated: gpu}, 2000 Insufficient cpu.",
                    "parallelism {parallelism}"
                );
                assert_eq!(fit.statuses["n2997"].plugin, "TaintToleration");
                assert_eq!(fit.statuses["n2999"].plugin, "NodeResourcesFit");
                assert_eq!(fit.unschedulable_plugins, HashSet::from(["TaintToleration", "NodeResourcesFit"]));
            }
            other => panic!("parallelism {parallelism}: {other:?}"),
        }
    }
}

/// Through the scheduler: 1100 nodes, one of which fits, so every node is
/// filtered, past the sequential part; the pod is bound to that node, and a
/// pod that fits nowhere is reported with every node counted.
#[tokio::test]
async fn the_scheduler_finds_the_one_node_among_many() {
    use super::support::*;
    let (_cluster, client) = cluster().await;
    const MANY: usize = 1100;
    let nodes = (0..MANY)
        .map(|i| NodeBuilder::new(&format!("n{i:04}")).cpu(if i == 1066 { "8" } else { "1" }).memory("8Gi").build());
    create_nodes(&client, nodes.collect()).await;
    let _s = start(&client, orchestra_sched::config::SchedulerConfiguration::default());
    create_pod(&client, PodBuilder::new("p").cpu("2").build()).await;
    let p = wait_pod(&client, "default", "p", |p| node_of(p).is_some()).await;
    assert_eq!(node_of(&p), Some("n1066"));
    create_pod(&client, PodBuilder::new("big").cpu("7").build()).await;
    let p = wait_pod(&client, "default", "big", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "PodScheduled" && c.status == "False"))
    })
    .await;
    let cond = p.status.unwrap().conditions.unwrap().into_iter().find(|c| c.type_ == "PodScheduled").unwrap();
    assert!(
        cond.message
            .as_deref()
            .is_some_and(|m| m.starts_with("0/1100 nodes are available: 1100 Insufficient cpu. preemption: ")),
        "{:?}",
        cond.message
    );
}
