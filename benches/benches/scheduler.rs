//! Scheduler benchmark: kube-scheduler's `scheduler_perf` workload shapes.
//!
//! `cargo bench -p orchestra-benches --bench scheduler [-- --quick] [--store mem|rocks]`
//!
//! Workloads as in `test/integration/scheduler_perf`: SchedulingBasic,
//! NodeAffinity, PodAntiAffinity, PodAffinity, TopologySpread, PreemptionBasic
//! (every measured pod preempts three low-priority pods) and PreemptionAsync
//! (the floor's shape: plain pods measured while a high-priority pod that
//! must preempt arrives every 200 ms). Victims have a grace period of 0, as
//! upstream's templates, so they go at once without a node agent.
//!
//! End to end: an in-process API server on the embedded store (RocksStore
//! in a scratch directory by default, MemStore with `--store mem`), nodes
//! created through the API, the scheduler running against it through a
//! `kube::Client`, pods created through the API while it runs and bound
//! through `pods/binding`. Throughput is measured pods bound per second from
//! the first measured create to the last binding seen by a watch. Then the
//! algorithm alone (no API: a cache, the default profile, assume after each
//! decision). One line per workload:
//! `sched workload=NAME nodes=N pods=P pods_per_s=X kube_floor=Y ratio=R cpu_stddev=S`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use orchestra_benches::sys;
use orchestra_core::server::ApiServer;
use orchestra_sched::algorithm::{Algorithm, AlgorithmOptions, Decision};
use orchestra_sched::cache::Cache;
use orchestra_sched::config::SchedulerConfiguration;
use orchestra_sched::framework::CycleState;
use orchestra_sched::node_info::PodInfo;
use orchestra_sched::profile::Profile;
use orchestra_sched::scheduler::SchedulerBuilder;
use orchestra_sched::snapshot::Snapshot;
use orchestra_sched::testing::{NodeBuilder, PodBuilder};
use orchestra_store::{MemStore, RocksStore, Store};

const USAGE: &str = "\
usage: cargo bench -p orchestra-benches --bench scheduler [-- OPTIONS]

  --quick              short run (< 2 minutes): smaller workloads
  --store rocks|mem    the API server's store (default rocks, in $ORCHESTRA_BENCH_DIR)
  --workloads A,B      subset (SchedulingBasic,NodeAffinity,PodAntiAffinity,PodAffinity,
                       TopologySpread,PreemptionBasic,PreemptionAsync)
  --mode e2e,algo      end to end through the API, the algorithm alone, or both (default both)
  --create-concurrency N  concurrent pod creates (default 64)

With SCHED_BENCH_DEBUG set, each end-to-end workload also prints (to stderr) when its measured phase
starts (to attach a profiler), its pods left unbound with
their nomination and condition, the scheduler's attempts by result, and how many pods are terminating.";

#[derive(Clone)]
struct Workload {
    name: &'static str,
    nodes: usize,
    init_pods: usize,
    pods: usize,
    floor: Option<f64>,
    node: fn(usize) -> Node,
    init_pod: fn(usize) -> Pod,
    pod: fn(usize) -> Pod,
    /// Pods created every 200 ms while the measured pods are (upstream's
    /// `churn` op); not counted.
    churn: Option<fn(usize) -> Pod>,
    /// Whether the measured pods can be placed without preemption (else the
    /// algorithm alone has nothing to measure).
    placeable: bool,
}

fn basic_node(i: usize) -> Node {
    NodeBuilder::new(&format!("node-{i}"))
        .cpu("4")
        .memory("32Gi")
        .pods("110")
        .label("topology.kubernetes.io/zone", &format!("zone{}", i % 3))
        .build()
}
fn basic_pod(i: usize) -> Pod {
    PodBuilder::new(&format!("pod-{i}")).cpu("100m").memory("500Mi").build()
}
fn init_pod(i: usize) -> Pod {
    PodBuilder::new(&format!("init-{i}")).cpu("100m").memory("500Mi").build()
}
fn affinity_node(i: usize) -> Node {
    let mut n = basic_node(i);
    n.metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("disktype".into(), if i.is_multiple_of(2) { "ssd" } else { "hdd" }.into());
    n
}
fn node_affinity_pod(i: usize) -> Pod {
    PodBuilder::new(&format!("pod-{i}"))
        .cpu("100m")
        .memory("500Mi")
        .required_node_affinity("disktype", "In", &["ssd"])
        .build()
}
fn anti_affinity_pod(i: usize) -> Pod {
    PodBuilder::new(&format!("pod-{i}"))
        .cpu("100m")
        .memory("500Mi")
        .label("color", "green")
        .pod_anti_affinity(&[("color", "green")], "kubernetes.io/hostname")
        .build()
}
fn anti_affinity_init(i: usize) -> Pod {
    PodBuilder::new(&format!("init-{i}"))
        .cpu("100m")
        .memory("500Mi")
        .label("color", "green")
        .pod_anti_affinity(&[("color", "green")], "kubernetes.io/hostname")
        .build()
}
fn affinity_pod(i: usize) -> Pod {
    PodBuilder::new(&format!("pod-{i}"))
        .cpu("100m")
        .memory("500Mi")
        .label("foo", "")
        .pod_affinity(&[("foo", "")], "topology.kubernetes.io/zone")
        .build()
}
fn affinity_init(i: usize) -> Pod {
    PodBuilder::new(&format!("init-{i}")).cpu("100m").memory("500Mi").label("foo", "").build()
}
fn spread_pod(i: usize) -> Pod {
    PodBuilder::new(&format!("pod-{i}"))
        .cpu("100m")
        .memory("500Mi")
        .label("app", "spread")
        .spread(1, "topology.kubernetes.io/zone", "DoNotSchedule", &[("app", "spread")])
        .build()
}
fn preemption_node(i: usize) -> Node {
    NodeBuilder::new(&format!("node-{i}")).cpu("4").memory("32Gi").pods("110").build()
}
fn low_pod(i: usize) -> Pod {
    PodBuilder::new(&format!("init-{i}")).cpu("900m").memory("500Mi").priority(1).termination_grace(0).build()
}
fn high_pod(i: usize) -> Pod {
    PodBuilder::new(&format!("pod-{i}")).cpu("3").memory("500Mi").priority(10).build()
}
fn churn_high_pod(i: usize) -> Pod {
    PodBuilder::new(&format!("churn-{i}")).cpu("3").memory("500Mi").priority(10).build()
}

fn workloads(quick: bool) -> Vec<Workload> {
    let q = |full: usize, small: usize| if quick { small } else { full };
    let w = |name, nodes, init_pods, pods, floor, node, init_pod, pod| Workload {
        name,
        nodes,
        init_pods,
        pods,
        floor,
        node,
        init_pod,
        pod,
        churn: None,
        placeable: true,
    };
    vec![
        w("SchedulingBasic", 5000, q(1000, 500), q(10_000, 5000), Some(680.0), basic_node, init_pod, basic_pod),
        w(
            "NodeAffinity",
            q(5000, 1000),
            q(1000, 200),
            q(10_000, 2000),
            Some(220.0),
            affinity_node,
            init_pod,
            node_affinity_pod,
        ),
        w(
            "PodAntiAffinity",
            q(5000, 1000),
            q(1000, 100),
            q(1000, 500),
            Some(60.0),
            basic_node,
            anti_affinity_init,
            anti_affinity_pod,
        ),
        w(
            "PodAffinity",
            q(5000, 1000),
            q(1000, 100),
            q(1000, 500),
            Some(35.0),
            basic_node,
            affinity_init,
            affinity_pod,
        ),
        w("TopologySpread", q(5000, 1000), q(1000, 100), q(5000, 1000), None, basic_node, init_pod, spread_pod),
        // Upstream publishes no threshold for this one.
        Workload {
            placeable: false,
            ..w("PreemptionBasic", q(1000, 100), q(4000, 400), q(1000, 100), None, preemption_node, low_pod, high_pod)
        },
        Workload {
            churn: Some(churn_high_pod),
            ..w(
                "PreemptionAsync",
                q(5000, 500),
                q(20_000, 2000),
                q(5000, 500),
                Some(570.0),
                preemption_node,
                low_pod,
                basic_pod,
            )
        },
    ]
}

fn stddev(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    (values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / values.len() as f64).sqrt()
}

fn line(mode: &str, w: &Workload, pods: usize, rate: f64, cpu_stddev: f64) {
    let (floor, ratio) = match w.floor {
        Some(f) => (format!("{f:.0}"), format!("{:.2}", rate / f)),
        None => ("-".into(), "-".into()),
    };
    println!(
        "sched workload={} nodes={} pods={} pods_per_s={:.0} kube_floor={} ratio={} cpu_stddev={:.1} mode={}",
        w.name, w.nodes, pods, rate, floor, ratio, cpu_stddev, mode
    );
}

fn algorithm_alone(w: &Workload) {
    if !w.placeable {
        println!("# {}: no algorithm-alone figure (its pods need preemption, which acts through the API)", w.name);
        return;
    }
    let profile = Profile::default_profile();
    let cache = Cache::new();
    for i in 0..w.nodes {
        cache.upsert_node(Arc::new((w.node)(i)));
    }
    let mut alg = Algorithm::new(AlgorithmOptions::default());
    let mut snapshot = Snapshot::default();
    let mut place = |pod: Pod, alg: &mut Algorithm| -> bool {
        let info = Arc::new(PodInfo::new(Arc::new(pod)));
        cache.update_snapshot(&mut snapshot);
        match alg.schedule(&profile, &mut CycleState::new(), &info, &snapshot) {
            Decision::Fit { node, .. } => {
                cache.assume(info, &node);
                true
            }
            _ => false,
        }
    };
    for i in 0..w.init_pods {
        place(with_uid((w.init_pod)(i), "init", i), &mut alg);
    }
    let start = Instant::now();
    let mut ok = 0;
    for i in 0..w.pods {
        if place(with_uid((w.pod)(i), "pod", i), &mut alg) {
            ok += 1;
        }
    }
    let rate = ok as f64 / start.elapsed().as_secs_f64();
    let snap = cache.snapshot();
    let cpus: Vec<f64> = snap.nodes.iter().map(|n| n.requested.milli_cpu as f64).collect();
    line("algo", w, ok, rate, stddev(&cpus));
}

fn with_uid(mut p: Pod, kind: &str, i: usize) -> Pod {
    p.metadata.uid = Some(format!("{kind}-{i}"));
    p
}

async fn create_all<T>(api: &Api<T>, objs: Vec<T>, concurrency: usize)
where
    T: Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug + kube::Resource,
{
    futures::stream::iter(objs)
        .map(|o| {
            let api = api.clone();
            async move {
                let mut o = o;
                o.meta_mut().uid = None;
                if let Err(e) = api.create(&PostParams::default(), &o).await {
                    eprintln!("create failed: {e}");
                }
            }
        })
        .buffer_unordered(concurrency)
        .collect::<Vec<_>>()
        .await;
}

async fn end_to_end(w: &Workload, store_kind: &str, concurrency: usize) {
    let (store, _dir): (Arc<dyn Store>, Option<tempfile::TempDir>) = if store_kind == "mem" {
        (Arc::new(MemStore::new()), None)
    } else {
        let dir = sys::scratch_dir("orchestra-sched-bench").expect("scratch dir");
        (Arc::new(RocksStore::open(dir.path()).await.expect("rocks opens")), Some(dir))
    };
    let server = ApiServer::new(store).await.expect("server");
    let client = orchestra_core::client::in_process(&server, "default");
    let nodes: Api<Node> = Api::all(client.clone());
    create_all(&nodes, (0..w.nodes).map(w.node).collect(), concurrency).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    // Count bindings through a watch: initial pods (`init-`) and measured
    // pods (`pod-`) apart; churned pods are not counted.
    let bound = Arc::new(parking_lot::Mutex::new((HashSet::<String>::new(), HashSet::<String>::new())));
    let notify = Arc::new(tokio::sync::Notify::new());
    {
        let (bound, notify, pods) = (bound.clone(), notify.clone(), pods.clone());
        tokio::spawn(async move {
            let mut s = kube::runtime::watcher(pods, kube::runtime::watcher::Config::default()).boxed();
            while let Some(ev) = s.next().await {
                if let Ok(kube::runtime::watcher::Event::Apply(p) | kube::runtime::watcher::Event::InitApply(p)) = ev
                    && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
                {
                    let name = p.metadata.name.clone().unwrap_or_default();
                    let mut bound = bound.lock();
                    if name.starts_with("init-") {
                        bound.0.insert(name);
                    } else if name.starts_with("pod-") {
                        bound.1.insert(name);
                    }
                    notify.notify_one();
                }
            }
        });
    }
    let config = SchedulerConfiguration::default();
    let scheduler = SchedulerBuilder::new(client.clone()).config(config).build().expect("scheduler");
    let metrics = scheduler.metrics().clone();
    let task = tokio::spawn(scheduler.run());
    let wait_bound = |measured: bool, n: usize, deadline: Duration| {
        let (bound, notify) = (bound.clone(), notify.clone());
        async move {
            let end = Instant::now() + deadline;
            let count = || {
                let b = bound.lock();
                if measured { b.1.len() } else { b.0.len() }
            };
            while count() < n && Instant::now() < end {
                let _ = tokio::time::timeout(Duration::from_millis(100), notify.notified()).await;
            }
        }
    };
    create_all(&pods, (0..w.init_pods).map(w.init_pod).collect(), concurrency).await;
    let init_expected = if w.name == "PodAntiAffinity" { w.init_pods.min(w.nodes) } else { w.init_pods };
    wait_bound(false, init_expected, Duration::from_secs(120)).await;
    let placed_before = bound.lock().0.len();
    let churn = w.churn.map(|make| {
        let pods = pods.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(200));
            for i in 0.. {
                tick.tick().await;
                if let Err(e) = pods.create(&PostParams::default(), &make(i)).await {
                    eprintln!("churn create failed: {e}");
                }
            }
        })
    });
    if std::env::var("SCHED_BENCH_DEBUG").is_ok() {
        eprintln!("measuring {} (pid {})", w.name, std::process::id());
    }
    let start = Instant::now();
    create_all(&pods, (0..w.pods).map(w.pod).collect(), concurrency).await;
    let expected = match w.name {
        "PodAntiAffinity" => (w.nodes.saturating_sub(placed_before)).min(w.pods),
        _ => w.pods,
    };
    wait_bound(true, expected, Duration::from_secs(if w.placeable { 300 } else { 120 })).await;
    let done = bound.lock().1.len();
    let elapsed = start.elapsed().as_secs_f64();
    let rate = done as f64 / elapsed;
    if let Some(churn) = churn {
        churn.abort();
    }
    task.abort();
    let list = pods.list(&ListParams::default()).await.expect("list");
    if std::env::var("SCHED_BENCH_DEBUG").is_ok() {
        for p in list.items.iter().filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none()) {
            let st = p.status.as_ref();
            eprintln!(
                "pending {} nominated={:?} cond={:?}",
                p.metadata.name.as_deref().unwrap_or(""),
                st.and_then(|s| s.nominated_node_name.clone()),
                st.and_then(|s| s.conditions.as_ref()).and_then(|c| c.first()).and_then(|c| c.message.clone())
            );
        }
        eprintln!(
            "attempts scheduled={} unschedulable={} error={} elapsed={elapsed:.2}s",
            metrics.attempts_with("scheduled"),
            metrics.attempts_with("unschedulable"),
            metrics.attempts_with("error")
        );
        let terminating = list.items.iter().filter(|p| p.metadata.deletion_timestamp.is_some()).count();
        eprintln!("terminating {terminating} total {}", list.items.len());
    }
    let mut per_node: HashMap<String, f64> = HashMap::new();
    for p in &list.items {
        if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
            *per_node.entry(n).or_default() += orchestra_sched::resource::pod_requests(p, false).milli_cpu as f64;
        }
    }
    let cpus: Vec<f64> = (0..w.nodes).map(|i| per_node.get(&format!("node-{i}")).copied().unwrap_or(0.0)).collect();
    line(&format!("e2e-{store_kind}"), w, done, rate, stddev(&cpus));
    if w.churn.is_some() {
        let churned: Vec<&Pod> =
            list.items.iter().filter(|p| p.metadata.name.as_deref().is_some_and(|n| n.starts_with("churn-"))).collect();
        let placed = churned.iter().filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()).count();
        println!(
            "# {}: {placed} of {} churned high-priority pods bound by then (each by preemption)",
            w.name,
            churned.len()
        );
    }
}

fn main() -> std::process::ExitCode {
    let args = match orchestra_benches::harness::parse_args(&["quick", "help"], USAGE) {
        Ok(args) => args,
        Err(code) => return code,
    };
    let quick = args.flag("quick");
    let store: String = args.get("store", "rocks".to_string()).unwrap_or_else(|_| "rocks".into());
    let concurrency: usize = args.get("create-concurrency", 64).unwrap_or(64);
    let modes: Vec<String> = args.list("mode", &["e2e".to_string(), "algo".to_string()]).unwrap_or_default();
    let only: Vec<String> = args.list("workloads", &[]).unwrap_or_default();
    println!(
        "# scheduler benchmark: {} CPUs ({}), {:.0} GiB, load {}; store={store}{}",
        sys::nproc(),
        sys::cpu_model(),
        sys::memory_gib(),
        sys::load_average(),
        if quick { " (quick)" } else { "" }
    );
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    for w in workloads(quick) {
        if !only.is_empty() && !only.iter().any(|o| o == w.name) {
            continue;
        }
        if modes.iter().any(|m| m == "e2e") {
            rt.block_on(end_to_end(&w, &store, concurrency));
        }
        if modes.iter().any(|m| m == "algo") {
            algorithm_alone(&w);
        }
    }
    std::process::ExitCode::SUCCESS
}
