//! Node agent benchmark (issue 6): pod start latency on the process runtime,
//! and thousands of simulated nodes in one process.
//!
//! `cargo bench -p orchestra-benches --bench node [-- --quick] [OPTIONS]`
//!
//! Both scenarios assemble a cluster in this process as `orchestra up` does:
//! an API server (in-process client, no TLS), the scheduler, the built-in
//! controller manager (NodeIPAM on `127.64.0.0/10`, so pods get loopback
//! addresses), and node agents fed by one shared pod watch (`SharedPods`).
//! Pods are bare pods created through the API by a pool of concurrent
//! clients; one watch of all pods records, per pod, when it was first seen
//! bound (`spec.nodeName`) and when first seen `Running` with `Ready=True`.
//! A pod's start latency runs from just before its create call to that
//! watch event (the Kubernetes pod-startup SLI: creation to observed running
//! through a watch; here images are "pulled" instantly, as the SLI excludes
//! pulls).
//!
//! 1. **process**: 3 agents on `ProcessRuntime` (image `bench/sleep` =
//!    `sleep infinity`, state under the scratch directory, node addresses
//!    `127.0.10.x`), API server on RocksStore in the scratch directory, as
//!    the reference assembly. Creates `--pods` pods, waits until all run,
//!    deletes them, shuts the runtimes down and checks that no process of
//!    this benchmark is left. Prints
//!    `node_process pods=.. start_p50_ms=.. start_p99_ms=.. slo_p99_ms=5000 ratio_to_slo=..`.
//! 2. **sim**: `--nodes` agents on `SimRuntime` (fixed capacity 8 CPUs,
//!    32 GiB, `--max-pods` pods), default timings (lease renewed every 10 s,
//!    status checked every 10 s), one shared pod watch and one shared event
//!    recorder. Measures the process RSS and CPU with every node registered
//!    and no pods (`heartbeat_cpu_pct`, over `--window` seconds), then creates
//!    `--sim-pods` pods and waits until all run. Prints
//!    `node sim_nodes=N pods=P rss_mb=M heartbeat_cpu_pct=C pod_start_p99_ms=L ...`.
//!
//! The CPU figures come with the whole machine's CPU use over the same
//! window (`machine_cpu_pct`, `others_cpu_pct`): the machines are shared.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::watcher;
use orchestra_benches::args::Args;
use orchestra_benches::stats::{Latencies, fmt_ms, ms};
use orchestra_benches::sys::{self, CpuMeter};
use orchestra_benches::watch::Liveness;
use orchestra_core::server::ApiServer;
use orchestra_ctrl::controllers::{self, ControllerManagerConfig};
use orchestra_ctrl::events::Recorder;
use orchestra_ctrl::informer::SharedInformerFactory;
use orchestra_node::agent::{AgentHandle, AgentStats, NodeAgent, NodeConfig, SharedPods};
use orchestra_node::runtime::images::{ImageCatalog, ImageEntry};
use orchestra_node::runtime::process::{ProcessRuntime, ProcessRuntimeConfig};
use orchestra_node::runtime::sim::{SimConfig, SimRuntime};
use orchestra_sched::scheduler::SchedulerBuilder;
use orchestra_store::{MemStore, RocksStore, Store};
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::task::JoinHandle;

const USAGE: &str = "\
usage: cargo bench -p orchestra-benches --bench node [-- OPTIONS]

  --quick               500 simulated nodes and 5000 pods, 20 process pods (< 90 s)
  --scenarios A,B       process, sim or both (default process,sim)
  --pods N              pods of the process scenario (default 100; quick 20)
  --process-nodes N     agents of the process scenario (default 3)
  --nodes N             simulated nodes (default 5000; quick 500)
  --sim-pods N          pods on the simulated nodes (default 150000; quick 5000)
  --max-pods N          pods per simulated node (default 110)
  --sim-store rocks|mem the sim scenario's API server store (default rocks)
  --creators N          concurrent creating clients (default 64; process scenario 8)
  --window SECONDS      heartbeat CPU window (default 30; quick 10)
  --settle SECONDS      wait after every node is Ready before the window (default 15; quick 3)
  --timeout SECONDS     give up waiting for pods to run (default 3600; quick 60)
  --gc-interval SECONDS the garbage collector's rescan period (default 5, the controller manager's;
                        a large value leaves only its first, empty scan: see the findings in the docs)
  --sim-event-capacity N  SimConfig::event_capacity of each simulated runtime (default 1024)
  --max-rss-mb N        stop the sim scenario when the process RSS passes N MB (default 18000;
                        the machines are shared)";

/// The pod CIDR the NodeIPAM controller splits (as `orchestra up`).
const CLUSTER_CIDR: &str = "127.64.0.0/10";
/// The Kubernetes pod startup SLO: p99 ≤ 5 s.
const SLO_P99: Duration = Duration::from_secs(5);
/// Environment variable set in every process container of this benchmark
/// (value: this process's id), so leftovers can be found in `/proc`.
const MARKER: &str = "ORCHESTRA_NODE_BENCH";
const NAMESPACE: &str = "default";

struct Options {
    quick: bool,
    scenarios: Vec<String>,
    pods: usize,
    process_nodes: usize,
    nodes: usize,
    sim_pods: usize,
    max_pods: u64,
    sim_store: String,
    creators: Option<usize>,
    window: u64,
    settle: u64,
    timeout: u64,
    gc_interval: u64,
    sim_event_capacity: usize,
    max_rss_mb: f64,
}

impl Options {
    fn parse(args: &Args) -> Result<Options, String> {
        let quick = args.flag("quick");
        let q = |full: usize, small: usize| if quick { small } else { full };
        let options = Options {
            quick,
            scenarios: args.list("scenarios", &["process".to_string(), "sim".to_string()])?,
            pods: args.get("pods", q(100, 20))?,
            process_nodes: args.get("process-nodes", 3)?,
            nodes: args.get("nodes", q(5000, 500))?,
            sim_pods: args.get("sim-pods", q(150_000, 5000))?,
            max_pods: args.get("max-pods", 110)?,
            sim_store: args.get("sim-store", "rocks".to_string())?,
            creators: args.get::<usize>("creators", 0).map(|c| (c > 0).then_some(c))?,
            window: args.get("window", q(30, 10) as u64)?,
            settle: args.get("settle", q(15, 3) as u64)?,
            timeout: args.get("timeout", q(3600, 60) as u64)?,
            gc_interval: args.get("gc-interval", ControllerManagerConfig::default().gc_interval.as_secs())?,
            sim_event_capacity: args.get("sim-event-capacity", SimConfig::default().event_capacity)?,
            max_rss_mb: args.get("max-rss-mb", 18_000.0)?,
        };
        args.finish()?;
        if let Some(s) = options.scenarios.iter().find(|s| !["process", "sim"].contains(&s.as_str())) {
            return Err(format!("unknown scenario {s:?} (process, sim)"));
        }
        if !["rocks", "mem"].contains(&options.sim_store.as_str()) {
            return Err(format!("--sim-store {:?}: rocks or mem", options.sim_store));
        }
        if options.process_nodes == 0 || options.process_nodes > 250 || options.nodes == 0 {
            return Err("--process-nodes must be 1..=250 and --nodes at least 1".into());
        }
        Ok(options)
    }
}

// ---------------------------------------------------------------------------
// The control plane: API server, scheduler, controller manager.

struct ControlPlane {
    server: ApiServer,
    stop: watch::Sender<bool>,
    scheduler: JoinHandle<()>,
    manager: JoinHandle<()>,
}

impl ControlPlane {
    async fn start(store: Arc<dyn Store>, gc_interval: Duration) -> Result<ControlPlane, String> {
        let server = ApiServer::new(store).await.map_err(|e| format!("API server: {e}"))?;
        let (stop, _) = watch::channel(false);
        let scheduler = SchedulerBuilder::new(client(&server)).build().map_err(|e| format!("scheduler: {e}"))?;
        let scheduler = tokio::spawn(async move {
            if let Err(e) = scheduler.run().await {
                eprintln!("scheduler stopped: {e}");
            }
        });
        let config = ControllerManagerConfig::default()
            .with_cluster_cidr(Some(CLUSTER_CIDR.into()))
            .with_gc_interval(gc_interval);
        let manager = controllers::builtin(SharedInformerFactory::new(client(&server)), config)
            .map_err(|e| format!("controller manager: {e}"))?;
        let manager = tokio::spawn(manager.run(stopped(&stop)));
        Ok(ControlPlane { server, stop, scheduler, manager })
    }

    /// A new client of the API server (its own request queue).
    fn client(&self) -> Client {
        client(&self.server)
    }

    async fn shutdown(self) {
        let _ = self.stop.send(true);
        self.scheduler.abort();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.manager).await;
    }
}

fn client(server: &ApiServer) -> Client {
    orchestra_core::client::in_process(server, NAMESPACE)
}

/// A future completing once `stop` says so.
fn stopped(stop: &watch::Sender<bool>) -> impl Future<Output = ()> + Send + 'static + use<> {
    let mut rx = stop.subscribe();
    async move {
        let _ = rx.wait_for(|s| *s).await;
    }
}

/// The `n`-th node's address (1-based): `127.0.10.n` for the first 254,
/// then further down the loopback range (as `orchestra up`).
fn node_ip(n: usize) -> IpAddr {
    let n = n as u32;
    IpAddr::V4(Ipv4Addr::new(127, 0, 10 + (n / 255) as u8, (n % 255) as u8))
}

// ---------------------------------------------------------------------------
// Agents.

struct Agents {
    handles: Vec<AgentHandle>,
    tasks: Vec<JoinHandle<()>>,
    stop: watch::Sender<bool>,
}

impl Agents {
    fn new() -> Agents {
        Agents { handles: Vec::new(), tasks: Vec::new(), stop: watch::channel(false).0 }
    }

    fn spawn(&mut self, agent: NodeAgent) {
        self.handles.push(agent.handle());
        let name = agent.handle().node_name().to_owned();
        let shutdown = stopped(&self.stop);
        self.tasks.push(tokio::spawn(async move {
            if let Err(e) = agent.run(shutdown).await {
                eprintln!("agent {name} stopped: {e}");
            }
        }));
    }

    fn stats(&self) -> AgentStats {
        self.handles.iter().map(AgentHandle::stats).fold(AgentStats::default(), |a, s| AgentStats {
            status_writes: a.status_writes + s.status_writes,
            node_status_posts: a.node_status_posts + s.node_status_posts,
            lease_renewals: a.lease_renewals + s.lease_renewals,
            lease_failures: a.lease_failures + s.lease_failures,
            events_dropped: a.events_dropped + s.events_dropped,
        })
    }

    /// Waits until every agent registered its Node and has a pod CIDR.
    async fn wait_network(&self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            let registered = self.handles.iter().filter(|h| h.is_registered()).count();
            let networked = self.handles.iter().filter(|h| h.pod_cidr().is_some()).count();
            if networked == self.handles.len() && registered == self.handles.len() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "after {timeout:?}: {registered}/{} nodes registered, {networked} with a pod CIDR",
                    self.handles.len()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn stop(self) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
    }
}

/// Waits until `n` Nodes are Ready and carry no NoSchedule/NoExecute taint
/// (the node lifecycle controller's not-ready taints are gone).
async fn wait_nodes_schedulable(client: &Client, n: usize, timeout: Duration) -> Result<(), String> {
    let nodes: Api<Node> = Api::all(client.clone());
    let deadline = Instant::now() + timeout;
    loop {
        let list = nodes.list(&ListParams::default()).await.map_err(|e| format!("listing nodes: {e}"))?;
        let ready = list
            .items
            .iter()
            .filter(|node| {
                let is_ready = node
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
                let tainted = node
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|t| t.iter().any(|t| t.effect == "NoSchedule" || t.effect == "NoExecute"));
                is_ready && !tainted
            })
            .count();
        if ready >= n {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("after {timeout:?}: {ready}/{n} nodes Ready and untainted"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

// ---------------------------------------------------------------------------
// Pod tracking: one watch of every pod.

#[derive(Default, Clone, Copy)]
struct Times {
    created: Option<Instant>,
    scheduled: Option<Instant>,
    running: Option<Instant>,
}

#[derive(Default)]
struct PodTracker {
    pods: Mutex<HashMap<String, Times>>,
    scheduled: AtomicUsize,
    running: AtomicUsize,
    deleted: AtomicUsize,
    /// Latencies of the create calls (ns).
    create_calls: Mutex<Vec<u64>>,
    create_errors: AtomicUsize,
    /// Set when the run is given up: the creators stop.
    abort: std::sync::atomic::AtomicBool,
    /// Whether the pod watch still delivers.
    watch: Liveness,
}

fn is_running_ready(pod: &Pod) -> bool {
    let Some(status) = pod.status.as_ref() else { return false };
    status.phase.as_deref() == Some("Running")
        && status.conditions.iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True")
}

impl PodTracker {
    /// Starts the watch; returns once its initial list is done.
    async fn start(client: Client) -> Arc<PodTracker> {
        let tracker = Arc::new(PodTracker::default());
        let (synced_tx, synced_rx) = tokio::sync::oneshot::channel::<()>();
        let t = tracker.clone();
        tokio::spawn(async move {
            let api: Api<Pod> = Api::namespaced(client, NAMESPACE);
            let mut synced = Some(synced_tx);
            let mut stream = watcher(api, watcher::Config::default()).boxed();
            while let Some(event) = stream.next().await {
                if event.is_ok() {
                    t.watch.event();
                } else {
                    t.watch.error();
                }
                match event {
                    Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => t.observe(&pod),
                    Ok(watcher::Event::Delete(pod)) => t.observe_delete(&pod),
                    Ok(watcher::Event::InitDone) => {
                        if let Some(tx) = synced.take() {
                            let _ = tx.send(());
                        }
                    }
                    Ok(watcher::Event::Init) => {}
                    Err(e) => eprintln!("# pod watch: {e}"),
                }
            }
        });
        let _ = synced_rx.await;
        tracker
    }

    fn observe(&self, pod: &Pod) {
        let now = Instant::now();
        let Some(name) = pod.metadata.name.as_deref() else { return };
        let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty());
        let running = is_running_ready(pod);
        if !bound && !running {
            return;
        }
        let mut pods = self.pods.lock();
        let times = pods.entry(name.to_owned()).or_default();
        if bound && times.scheduled.is_none() {
            times.scheduled = Some(now);
            self.scheduled.fetch_add(1, Ordering::Relaxed);
        }
        if running && times.running.is_none() {
            times.running = Some(now);
            self.running.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn observe_delete(&self, pod: &Pod) {
        if pod.metadata.name.as_deref().is_some_and(|n| self.pods.lock().contains_key(n)) {
            self.deleted.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn created(&self, name: &str) {
        self.pods.lock().entry(name.to_owned()).or_default().created = Some(Instant::now());
    }

    /// Create → scheduled and create → running latencies of the pods that got there.
    fn latencies(&self) -> (Latencies, Latencies) {
        let pods = self.pods.lock();
        let since = |at: Option<Instant>, t: &Times| Some(at?.saturating_duration_since(t.created?).as_nanos() as u64);
        let scheduled = pods.values().filter_map(|t| since(t.scheduled, t)).collect();
        let running = pods.values().filter_map(|t| since(t.running, t)).collect();
        (Latencies::from_nanos(scheduled), Latencies::from_nanos(running))
    }

    /// Up to `max` pods created but never seen running.
    fn missing(&self, max: usize) -> Vec<String> {
        let pods = self.pods.lock();
        let mut names: Vec<String> =
            pods.iter().filter(|(_, t)| t.created.is_some() && t.running.is_none()).map(|(n, _)| n.clone()).collect();
        names.sort();
        names.truncate(max);
        names
    }

    /// The last pod's running time (the end of the run).
    fn last_running(&self) -> Option<Instant> {
        self.pods.lock().values().filter_map(|t| t.running).max()
    }
}

/// Creates pods `0..n` (built by `make`) with `creators` concurrent clients.
async fn create_pods(api: &Api<Pod>, tracker: &Arc<PodTracker>, n: usize, creators: usize, make: fn(usize) -> Pod) {
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..creators.max(1) {
        let (api, tracker, next) = (api.clone(), tracker.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut calls = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n || tracker.abort.load(Ordering::Relaxed) {
                    break;
                }
                let pod = make(i);
                let name = pod.metadata.name.clone().unwrap_or_default();
                tracker.created(&name);
                for attempt in 0..5 {
                    let t = Instant::now();
                    match api.create(&PostParams::default(), &pod).await {
                        Ok(_) => {
                            calls.push(t.elapsed().as_nanos() as u64);
                            break;
                        }
                        Err(kube::Error::Api(s)) if s.code == 409 => break,
                        Err(e) => {
                            tracker.create_errors.fetch_add(1, Ordering::Relaxed);
                            if attempt == 4 {
                                eprintln!("# creating {name} failed: {e}");
                            }
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                    }
                }
            }
            tracker.create_calls.lock().extend(calls);
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// How a wait for running pods ended.
#[derive(Debug, Clone, Copy)]
struct Outcome {
    /// Every pod runs.
    complete: bool,
    /// The watch stopped delivering while the agents ran every pod: the
    /// latencies are those of the pods the watch saw.
    watch_stalled: bool,
    /// When the last pod was seen running (by the watch, or the agents).
    done_at: Option<Instant>,
}

/// A run in which no pod starts for this long once every pod is created is
/// given up (and reported).
const STALL: Duration = Duration::from_secs(120);

/// Prints what the API says of up to five pods that never ran.
async fn explain_missing(tracker: &PodTracker, api: &Api<Pod>) {
    for name in tracker.missing(5) {
        match api.get_opt(&name).await {
            Ok(Some(pod)) => {
                let status = pod.status.unwrap_or_default();
                let waiting: Vec<String> = status
                    .container_statuses
                    .iter()
                    .flatten()
                    .filter_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone())
                    .collect();
                let conditions: Vec<String> = status
                    .conditions
                    .iter()
                    .flatten()
                    .map(|c| {
                        format!(
                            "{}={}{}",
                            c.type_,
                            c.status,
                            c.reason.as_deref().map(|r| format!("({r})")).unwrap_or_default()
                        )
                    })
                    .collect();
                println!(
                    "#   never seen running: {name} node={} phase={} reason={} waiting={waiting:?} conditions={conditions:?} deleting={}",
                    pod.spec.and_then(|s| s.node_name).unwrap_or_default(),
                    status.phase.unwrap_or_default(),
                    status.reason.unwrap_or_default(),
                    pod.metadata.deletion_timestamp.is_some()
                );
            }
            Ok(None) => println!("#   never seen running: {name} is gone (deleted or evicted)"),
            Err(e) => println!("#   never seen running: {name}: {e}"),
        }
    }
}

/// Pods the agents run (at least one container running).
fn agent_running(agents: &[AgentHandle]) -> usize {
    agents.iter().map(AgentHandle::running_pods).sum()
}

/// Waits until `n` pods run (or `timeout`), printing progress every `every`.
/// The watch decides; if it falls silent while `agents` run every pod, the
/// wait ends after 30 s more with `watch_stalled`.
async fn wait_running(
    tracker: &PodTracker,
    agents: &[AgentHandle],
    n: usize,
    timeout: Duration,
    every: Duration,
    started: Instant,
    max_rss_mb: f64,
) -> Outcome {
    let deadline = started + timeout;
    let mut next_report = Instant::now() + every;
    let mut next_agent_check = Instant::now();
    let mut agents_done_at: Option<Instant> = None;
    // (watch-seen running, agents' running) and since when they stay put.
    let mut last_progress = (0usize, 0usize, Instant::now());
    let mut meter = CpuMeter::start();
    let give_up = |complete: bool, watch_stalled: bool, done_at: Option<Instant>| {
        if !complete {
            tracker.abort.store(true, Ordering::Relaxed);
        }
        Outcome { complete, watch_stalled, done_at }
    };
    loop {
        let running = tracker.running.load(Ordering::Relaxed);
        if running >= n {
            return give_up(true, false, tracker.last_running());
        }
        if Instant::now() > deadline {
            return give_up(false, false, tracker.last_running());
        }
        let rss = sys::rss_mb();
        if rss > max_rss_mb {
            println!("#   stopping: rss {rss:.0} MB passed --max-rss-mb {max_rss_mb:.0}");
            return give_up(false, false, tracker.last_running());
        }
        if Instant::now() >= next_agent_check {
            next_agent_check = Instant::now() + Duration::from_secs(1);
            let on_agents = agent_running(agents);
            if !agents.is_empty() && on_agents >= n && agents_done_at.is_none() {
                agents_done_at = Some(Instant::now());
            }
            // Progress is judged once every pod exists: while clients still
            // create, the agents may be starved without being stuck.
            let creating = tracker.pods.lock().values().filter(|t| t.created.is_some()).count() < n;
            if creating || (running, on_agents) != (last_progress.0, last_progress.1) {
                last_progress = (running, on_agents, Instant::now());
            } else if last_progress.2.elapsed() > STALL && running > 0 {
                println!(
                    "#   stopping: no pod started for {:.0}s ({running} seen running by the watch, {on_agents} by the agents, of {n})",
                    last_progress.2.elapsed().as_secs_f64()
                );
                return give_up(false, false, tracker.last_running());
            }
        }
        if let Some(at) = agents_done_at
            && at.elapsed() > Duration::from_secs(30)
            && tracker.watch.idle().as_secs_f64() > 20.0
        {
            println!(
                "#   the agents run all {n} pods since {:.0}s but the pod watch is silent for {:.0}s with {running} seen running",
                at.saturating_duration_since(started).as_secs_f64(),
                tracker.watch.idle().as_secs_f64()
            );
            return give_up(true, true, Some(at));
        }
        if Instant::now() >= next_report {
            let cpu = meter.read();
            println!(
                "#   t={:.0}s created={} scheduled={} running={} agent_running={} watch_events={} watch_idle_s={:.0} watch_errors={} \
                 rss_mb={:.0} cpu_pct={:.0} others_cpu_pct={:.0} load={}",
                started.elapsed().as_secs_f64(),
                tracker.pods.lock().values().filter(|t| t.created.is_some()).count(),
                tracker.scheduled.load(Ordering::Relaxed),
                running,
                agent_running(agents),
                tracker.watch.events(),
                tracker.watch.idle().as_secs_f64(),
                tracker.watch.errors(),
                sys::rss_mb(),
                cpu.process_pct,
                cpu.others_pct,
                sys::load_average(),
            );
            meter = CpuMeter::start();
            next_report = Instant::now() + every;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn pod(name: String, image: &str, cpu: &str, memory: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": "node-bench"}},
        "spec": {
            "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "c",
                "image": image,
                "resources": {"requests": {"cpu": cpu, "memory": memory}}
            }]
        }
    }))
    .expect("a valid pod")
}

fn process_pod(i: usize) -> Pod {
    pod(format!("proc-{i}"), "bench/sleep", "10m", "4Mi")
}

fn sim_pod(i: usize) -> Pod {
    pod(format!("sim-{i}"), "registry.k8s.io/pause:3.10", "100m", "128Mi")
}

/// Processes whose environment carries this benchmark's marker.
fn marked_processes() -> usize {
    let marker = format!("{MARKER}={}", std::process::id());
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()))
        .filter(|e| {
            std::fs::read(e.path().join("environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|kv| kv == marker.as_bytes()))
        })
        .count()
}

fn p(l: &Latencies, q: f64) -> String {
    fmt_ms(l.percentile(q))
}

// ---------------------------------------------------------------------------
// Scenario 1: pod start latency on the process runtime.

async fn process_scenario(dir: &Path, o: &Options) -> Result<(), String> {
    let dir = dir.join("process");
    let store = RocksStore::open(dir.join("store")).await.map_err(|e| format!("store: {e}"))?;
    let cp = ControlPlane::start(Arc::new(store), Duration::from_secs(o.gc_interval)).await?;
    let catalog = ImageCatalog::builder()
        .image("bench/sleep", ImageEntry::new(["sleep", "infinity"]).env(MARKER, std::process::id().to_string()))
        .build()
        .map_err(|e| format!("catalog: {e}"))?;
    let shared = SharedPods::start(cp.client());
    let mut agents = Agents::new();
    let mut runtimes = Vec::new();
    for n in 1..=o.process_nodes {
        let name = format!("proc-node-{n}");
        let root = dir.join("nodes").join(&name);
        let ip = node_ip(n);
        let mut runtime_config = ProcessRuntimeConfig::new(root.join("runtime"), catalog.clone());
        runtime_config.node_name = name.clone();
        runtime_config.host_ip = ip;
        let runtime = Arc::new(ProcessRuntime::new(runtime_config).await.map_err(|e| format!("process runtime: {e}"))?);
        if n == 1 {
            let caps = runtime.capabilities();
            println!(
                "# process runtime: mount namespaces {}, cgroups {:?}{}",
                caps.mount_namespaces,
                caps.cgroups,
                caps.notes.iter().map(|n| format!("; {n}")).collect::<String>()
            );
        }
        runtimes.push(runtime.clone());
        let mut config = NodeConfig::new(&name).root_dir(&root);
        config.node_ip = ip;
        config.kubelet_port = 0;
        agents.spawn(NodeAgent::builder(cp.client(), runtime, config).shared_pods(shared.clone()).build());
    }
    let result = process_measure(&cp, &agents, o).await;

    // Clean up whatever happened: pods deleted, agents stopped, runtimes shut down.
    let client = cp.client();
    let api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let deleting = Instant::now();
    let names: Vec<String> = api
        .list(&ListParams::default())
        .await
        .map(|l| l.items.into_iter().filter_map(|p| p.metadata.name).collect())
        .unwrap_or_default();
    futures::stream::iter(names.iter().cloned())
        .for_each_concurrent(16, |name| {
            let api = api.clone();
            async move {
                let _ = api.delete(&name, &DeleteParams::default()).await;
            }
        })
        .await;
    let gone = async {
        loop {
            match api.list(&ListParams::default()).await {
                Ok(l) if l.items.is_empty() => break,
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    };
    let all_gone = tokio::time::timeout(Duration::from_secs(60), gone).await.is_ok();
    let delete_s = deleting.elapsed().as_secs_f64();
    let running_before = marked_processes();
    agents.stop().await;
    for runtime in &runtimes {
        runtime.shutdown(Duration::from_secs(5)).await;
    }
    let left = marked_processes();
    println!(
        "# cleanup: {} pods deleted in {delete_s:.1}s ({}), {running_before} benchmark processes left before the runtimes' shutdown, {left} after",
        names.len(),
        if all_gone { "all gone" } else { "NOT all gone after 60 s" }
    );
    drop(runtimes);
    drop(shared);
    cp.shutdown().await;
    if left > 0 {
        return Err(format!("{left} container processes left behind"));
    }
    result
}

async fn process_measure(cp: &ControlPlane, agents: &Agents, o: &Options) -> Result<(), String> {
    let t = Instant::now();
    agents.wait_network(Duration::from_secs(60)).await?;
    wait_nodes_schedulable(&cp.client(), o.process_nodes, Duration::from_secs(60)).await?;
    println!("# {} process nodes Ready in {:.1}s", o.process_nodes, t.elapsed().as_secs_f64());
    let tracker = PodTracker::start(cp.client()).await;
    let api: Api<Pod> = Api::namespaced(cp.client(), NAMESPACE);
    let started = Instant::now();
    create_pods(&api, &tracker, o.pods, o.creators.unwrap_or(8), process_pod).await;
    let created_s = started.elapsed().as_secs_f64();
    let timeout = Duration::from_secs(o.timeout.min(600));
    let outcome =
        wait_running(&tracker, &agents.handles, o.pods, timeout, Duration::from_secs(5), started, f64::INFINITY).await;
    let complete = outcome.complete;
    if !complete {
        explain_missing(&tracker, &api).await;
    }
    let total_s = outcome.done_at.map_or(0.0, |at| at.saturating_duration_since(started).as_secs_f64());
    // Every Running pod is a live `sleep` process of this benchmark.
    let processes = marked_processes();
    let (scheduled, running) = tracker.latencies();
    let calls = Latencies::from_nanos(tracker.create_calls.lock().clone());
    let ratio = ms(running.percentile(99.0)) / ms(SLO_P99);
    println!(
        "node_process pods={} nodes={} start_p50_ms={} start_p90_ms={} start_p99_ms={} start_max_ms={} slo_p99_ms={} ratio_to_slo={ratio:.3} \
         sched_p50_ms={} sched_p99_ms={} create_call_p99_ms={} created_s={created_s:.2} total_s={total_s:.2} running={} processes={processes} complete={complete}",
        o.pods,
        o.process_nodes,
        p(&running, 50.0),
        p(&running, 90.0),
        p(&running, 99.0),
        fmt_ms(running.max()),
        SLO_P99.as_millis(),
        p(&scheduled, 50.0),
        p(&scheduled, 99.0),
        p(&calls, 99.0),
        running.len(),
    );
    println!(
        "# process runtime: {} pods created by {} clients in {created_s:.2}s; create→Running p50 {} ms, p99 {} ms ({:.0}% of the 5 s SLO); \
         create→scheduled p99 {} ms; {} running after {total_s:.1}s",
        o.pods,
        o.creators.unwrap_or(8),
        p(&running, 50.0),
        p(&running, 99.0),
        ratio * 100.0,
        p(&scheduled, 99.0),
        running.len()
    );
    let s = agents.stats();
    println!(
        "# agents: status_writes={} node_status_posts={} lease_renewals={}",
        s.status_writes, s.node_status_posts, s.lease_renewals
    );
    if !complete {
        return Err(format!("only {}/{} pods running after {timeout:?}", running.len(), o.pods));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Scenario 2: simulated nodes at scale.

async fn sim_scenario(dir: &Path, o: &Options) -> Result<(), String> {
    let dir = dir.join("sim");
    let rss_start = sys::rss_mb();
    let store: Arc<dyn Store> = match o.sim_store.as_str() {
        "mem" => Arc::new(MemStore::new()),
        _ => Arc::new(RocksStore::open(dir.join("store")).await.map_err(|e| format!("store: {e}"))?),
    };
    let cp = ControlPlane::start(store, Duration::from_secs(o.gc_interval)).await?;
    let shared = SharedPods::start(cp.client());
    let agent_client = cp.client();
    let recorder = Recorder::new(agent_client.clone(), "kubelet", "sim-nodes");
    let rss_control_plane = sys::rss_mb();
    let mut agents = Agents::new();
    let registering = Instant::now();
    for n in 1..=o.nodes {
        let name = format!("sim-node-{n}");
        let ip = node_ip(n);
        let runtime = SimRuntime::new(
            SimConfig::default().with_write_logs(false).with_host_ip(ip).with_event_capacity(o.sim_event_capacity),
        );
        let mut config = NodeConfig::new(&name).root_dir(dir.join("nodes").join(&name));
        config.max_pods = o.max_pods;
        config = config.fixed_capacity(8_000, 32 << 30);
        config.node_ip = ip;
        config.kubelet_port = 0;
        let agent = NodeAgent::builder(agent_client.clone(), Arc::new(runtime), config)
            .shared_pods(shared.clone())
            .recorder(recorder.clone())
            .build();
        agents.spawn(agent);
    }
    let result = sim_measure(&cp, &agents, o, registering, rss_start, rss_control_plane).await;
    // No cleanup through the API: the scratch directory goes with the process.
    agents.stop().await;
    drop(shared);
    cp.shutdown().await;
    result
}

async fn sim_measure(
    cp: &ControlPlane,
    agents: &Agents,
    o: &Options,
    registering: Instant,
    rss_start: f64,
    rss_control_plane: f64,
) -> Result<(), String> {
    let client = cp.client();
    let wait = Duration::from_secs(if o.quick { 60 } else { 600 });
    agents.wait_network(wait).await?;
    let networked_s = registering.elapsed().as_secs_f64();
    wait_nodes_schedulable(&client, o.nodes, wait).await?;
    let ready_s = registering.elapsed().as_secs_f64();
    println!(
        "# {} simulated nodes registered with a pod CIDR in {networked_s:.1}s, Ready and untainted after {ready_s:.1}s; rss {:.0} MB",
        o.nodes,
        sys::rss_mb()
    );
    tokio::time::sleep(Duration::from_secs(o.settle)).await;

    // Heartbeats: every node registered, no pods.
    let rss_idle = sys::rss_mb();
    let before = agents.stats();
    let meter = CpuMeter::start();
    tokio::time::sleep(Duration::from_secs(o.window)).await;
    let heartbeat = meter.read();
    let after = agents.stats();
    let renewals_per_s = (after.lease_renewals - before.lease_renewals) as f64 / heartbeat.seconds;
    let posts_per_s = (after.node_status_posts - before.node_status_posts) as f64 / heartbeat.seconds;
    println!(
        "# heartbeats over {:.0}s: process cpu {:.1}% of one CPU (machine {:.0}%, others {:.0}%), {renewals_per_s:.0} lease renewals/s, \
         {posts_per_s:.1} node status posts/s, {} renewal failures; rss {rss_idle:.0} MB = {rss_start:.0} at start + {:.0} control plane + {:.0} for {} agents ({:.1} KB each)",
        heartbeat.seconds,
        heartbeat.process_pct,
        heartbeat.machine_pct,
        heartbeat.others_pct,
        after.lease_failures - before.lease_failures,
        rss_control_plane - rss_start,
        rss_idle - rss_control_plane,
        o.nodes,
        (rss_idle - rss_control_plane) * 1024.0 / o.nodes as f64,
    );

    // Pods.
    let tracker = PodTracker::start(client.clone()).await;
    let api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let creators = o.creators.unwrap_or(64);
    let started = Instant::now();
    let meter = CpuMeter::start();
    let waiting = {
        let tracker = tracker.clone();
        let (n, timeout, max_rss) = (o.sim_pods, Duration::from_secs(o.timeout), o.max_rss_mb);
        let handles = agents.handles.clone();
        let every = Duration::from_secs(if o.quick { 5 } else { 15 });
        tokio::spawn(async move { wait_running(&tracker, &handles, n, timeout, every, started, max_rss).await })
    };
    create_pods(&api, &tracker, o.sim_pods, creators, sim_pod).await;
    let created_s = started.elapsed().as_secs_f64();
    println!(
        "# {} pods created by {creators} clients in {created_s:.1}s ({:.0}/s)",
        o.sim_pods,
        o.sim_pods as f64 / created_s
    );
    let outcome = waiting.await.unwrap_or(Outcome { complete: false, watch_stalled: false, done_at: None });
    let complete = outcome.complete;
    if !complete {
        explain_missing(&tracker, &api).await;
    }
    let load = meter.read();
    let total_s = outcome.done_at.map_or(0.0, |at| at.saturating_duration_since(started).as_secs_f64());
    let (scheduled, running) = tracker.latencies();
    let calls = Latencies::from_nanos(tracker.create_calls.lock().clone());
    // Pods running at the end (the agents' count when the watch fell silent).
    let finished = if outcome.watch_stalled { agent_running(&agents.handles) } else { running.len() };
    let rss = sys::rss_mb();
    let s = agents.stats();
    println!(
        "node sim_nodes={} pods={} rss_mb={rss:.0} heartbeat_cpu_pct={:.1} pod_start_p99_ms={} pod_start_p50_ms={} sched_p99_ms={} \
         create_call_p99_ms={} running={} total_s={total_s:.1} pods_per_s={:.0} rss_idle_mb={rss_idle:.0} peak_rss_mb={:.0} \
         heartbeat_others_cpu_pct={:.1} store={} gc_interval_s={} watch_stalled={} complete={complete}",
        o.nodes,
        o.sim_pods,
        heartbeat.process_pct,
        p(&running, 99.0),
        p(&running, 50.0),
        p(&scheduled, 99.0),
        p(&calls, 99.0),
        running.len(),
        finished as f64 / total_s.max(1e-9),
        sys::peak_rss_mb(),
        heartbeat.others_pct,
        o.sim_store,
        o.gc_interval,
        outcome.watch_stalled,
    );
    println!(
        "# {} pods on {} simulated nodes: all running after {total_s:.1}s ({:.0} pods/s; created in {created_s:.1}s), start p50 {} ms p99 {} ms max {} ms, \
         scheduled p99 {} ms; cpu {:.0}% of one CPU during the run (others {:.0}%); rss {rss:.0} MB ({:.1} KB per pod over idle); \
         pod status writes {}, events dropped {}, lease failures {}",
        running.len(),
        o.nodes,
        finished as f64 / total_s.max(1e-9),
        p(&running, 50.0),
        p(&running, 99.0),
        fmt_ms(running.max()),
        p(&scheduled, 99.0),
        load.process_pct,
        load.others_pct,
        (rss - rss_idle) * 1024.0 / running.len().max(1) as f64,
        s.status_writes,
        s.events_dropped,
        s.lease_failures,
    );
    if !complete {
        return Err(format!(
            "only {}/{} pods running after {}s ({} scheduled)",
            running.len(),
            o.sim_pods,
            o.timeout,
            tracker.scheduled.load(Ordering::Relaxed)
        ));
    }
    Ok(())
}

fn main() -> ExitCode {
    let options = match orchestra_benches::harness::parse_config(&["quick", "help"], USAGE, Options::parse) {
        Ok(options) => options,
        Err(code) => return code,
    };
    println!(
        "# node benchmark: {} CPUs ({}), {:.0} GiB, kernel {}, load {}{}",
        sys::nproc(),
        sys::cpu_model(),
        sys::memory_gib(),
        sys::kernel(),
        sys::load_average(),
        if options.quick { " (quick)" } else { "" }
    );
    orchestra_benches::harness::run_in_scratch("node", async |dir| {
        let began = Instant::now();
        if options.scenarios.iter().any(|s| s == "process") {
            process_scenario(dir, &options).await?;
        }
        if options.scenarios.iter().any(|s| s == "sim") {
            sim_scenario(dir, &options).await?;
        }
        println!("# node benchmark done in {:.1}s; load {}", began.elapsed().as_secs_f64(), sys::load_average());
        Ok(())
    })
}
