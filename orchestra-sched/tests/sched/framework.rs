//! The extension points through the real scheduler, with test plugins
//! registered next to the built-in ones: PreEnqueue gating, Permit waits
//! (allowed, rejected, timed out), Reserve rollback, PreBind failure and
//! PostBind, and the metrics the binding cycle counts.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use orchestra_sched::config::{ProfileConfig, SchedulerConfiguration};
use orchestra_sched::framework::{
    ClusterEvent, CycleState, EventResource, Permit, Plugin, PostBind, PreBind, PreEnqueue, Reserve, Status, action,
};
use orchestra_sched::node_info::PodInfo;
use orchestra_sched::registry::{NoArgs, PluginSet, Registry};
use orchestra_sched::scheduler::{Scheduler, SchedulerBuilder};
use orchestra_sched::testing::{NodeBuilder, PodBuilder};
use parking_lot::Mutex;

use super::support::*;

/// What the test plugins saw, in order (`"<plugin> <point> <pod> <node>"`).
type Log = Arc<Mutex<Vec<String>>>;

/// Starts a scheduler whose only profile (`default-scheduler`) is the
/// default one plus `plugins` (multiPoint, in order), taken from
/// `registry`; the scheduler is returned to look at its cache, queue,
/// metrics and waiting pods.
fn start_with(client: &kube::Client, registry: Registry, plugins: &[&str]) -> Scheduler {
    let profile = plugins.iter().fold(ProfileConfig::default(), |p, name| p.enable(name, None));
    // A 2 s first backoff leaves time to look at a failed attempt before
    // its retry.
    let config = SchedulerConfiguration::default().with_pod_initial_backoff_seconds(2).with_profiles(vec![profile]);
    let s = SchedulerBuilder::new(client.clone()).config(config).registry(registry).build().expect("scheduler builds");
    let run = s.clone();
    tokio::spawn(async move {
        let _ = run.run().await;
    });
    s
}

/// Polls `check` every 20 ms for up to 10 s.
async fn eventually(what: &str, check: impl Fn() -> bool) {
    for _ in 0..500 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("never happened: {what}");
}

/// The pod's PodScheduled condition as (status, reason, message).
fn scheduled_condition(p: &Pod) -> Option<(String, String, String)> {
    let c = p.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "PodScheduled")?;
    Some((c.status.clone(), c.reason.clone().unwrap_or_default(), c.message.clone().unwrap_or_default()))
}

/// Waits for PodScheduled=False with `reason`; its message.
async fn wait_not_scheduled(client: &kube::Client, name: &str, reason: &str) -> String {
    let p = wait_pod(client, "default", name, |p| {
        scheduled_condition(p).is_some_and(|(status, r, _)| status == "False" && r == reason)
    })
    .await;
    assert_eq!(node_of(&p), None, "{name} is not bound");
    scheduled_condition(&p).expect("condition").2
}

fn uid_of(p: &Pod) -> String {
    p.metadata.uid.clone().expect("the server sets the uid")
}

fn pod_name(pod: &PodInfo) -> &str {
    pod.pod.metadata.name.as_deref().unwrap_or("")
}

/// The scheduler's attempts as (scheduled, unschedulable, error).
fn attempts(s: &Scheduler) -> (u64, u64, u64) {
    let m = s.metrics();
    (m.attempts_with("scheduled"), m.attempts_with("unschedulable"), m.attempts_with("error"))
}

// ---------------------------------------------------------------- PreEnqueue

/// Keeps pods labelled `hold` out of the active queue.
struct HoldGate;

impl HoldGate {
    const NAME: &'static str = "HoldGate";
}

impl Plugin for HoldGate {
    fn name(&self) -> &'static str {
        Self::NAME
    }
}

impl PreEnqueue for HoldGate {
    fn pre_enqueue(&self, pod: &Pod) -> Status {
        if pod.metadata.labels.as_ref().is_some_and(|l| l.contains_key("hold")) {
            return Status::unresolvable("pod is on hold");
        }
        Status::success()
    }
}

#[tokio::test]
async fn pre_enqueue_keeps_a_pod_out_of_the_queue_until_it_is_updated() {
    let (_cluster, client) = cluster().await;
    create_nodes(&client, vec![NodeBuilder::new("n").cpu("4").memory("8Gi").build()]).await;
    let registry = Registry::default().with(HoldGate::NAME, |_: NoArgs, _| {
        let p = Arc::new(HoldGate);
        Ok(PluginSet::new(&p).pre_enqueue(&p))
    });
    let s = start_with(&client, registry, &[HoldGate::NAME]);
    assert_eq!(s.profiles()[0].pre_enqueue.iter().map(|p| p.name()).collect::<Vec<_>>(), [HoldGate::NAME]);
    create_pod(&client, PodBuilder::new("held").cpu("1").label("hold", "yes").build()).await;
    // The gated pod is counted (the queue sizes are published every 200 ms)...
    eventually("the gated gauge shows the pod", || {
        s.metrics().sample(r#"scheduler_pending_pods{queue="gated"}"#) == Some(1.0)
    })
    .await;
    assert_eq!(s.queue().sizes().gated, 1);
    assert_eq!(s.metrics().sample(r#"scheduler_pending_pods{queue="active"}"#), Some(0.0));
    // ...and never tried: no attempt, no condition, no FailedScheduling.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let p = api.get("held").await.unwrap();
    assert_eq!(node_of(&p), None);
    assert_eq!(scheduled_condition(&p), None);
    assert_eq!(attempts(&s), (0, 0, 0));
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let lp = ListParams::default().fields("involvedObject.name=held");
    assert!(events.list(&lp).await.unwrap().items.iter().all(|e| e.reason.as_deref() != Some("FailedScheduling")));
    // The label goes: the update lets it in and it is bound.
    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"labels": {"hold": null}}})),
    )
    .await
    .unwrap();
    let p = wait_pod(&client, "default", "held", |p| node_of(p).is_some()).await;
    assert_eq!(node_of(&p), Some("n"));
    eventually("the attempt is counted as scheduled", || attempts(&s) == (1, 0, 0)).await;
    eventually("the gated gauge empties", || {
        s.metrics().sample(r#"scheduler_pending_pods{queue="gated"}"#) == Some(0.0)
    })
    .await;
}

// -------------------------------------------------------------------- Permit

/// Permit: pods labelled `permit=wait` wait (for an allow or reject through
/// the waiting pods, or `timeout`); `permit=wait-once` wait on their first
/// attempt only. Also a Reserve plugin, to see unreserve.
struct Gatekeeper {
    timeout: Duration,
    calls: Mutex<HashMap<String, usize>>,
    log: Log,
}

impl Gatekeeper {
    const NAME: &'static str = "Gatekeeper";

    fn registry(timeout: Duration) -> (Registry, Arc<Gatekeeper>) {
        let p = Arc::new(Gatekeeper { timeout, calls: Mutex::default(), log: Log::default() });
        let plugin = p.clone();
        let registry = Registry::default()
            .with(Self::NAME, move |_: NoArgs, _| Ok(PluginSet::new(&plugin).permit(&plugin).reserve(&plugin)));
        (registry, p)
    }

    fn calls(&self, pod: &str) -> usize {
        self.calls.lock().get(pod).copied().unwrap_or(0)
    }
}

impl Plugin for Gatekeeper {
    fn name(&self) -> &'static str {
        Self::NAME
    }
    // A pod it rejected is retried when a node is added or a placed pod
    // goes (though not when that pod is the rejected one itself).
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::new(EventResource::Node, action::ADD),
            ClusterEvent::new(EventResource::AssignedPod, action::DELETE),
        ]
    }
}

impl Permit for Gatekeeper {
    fn permit(&self, _: &CycleState, pod: &PodInfo, _: &str) -> (Status, Duration) {
        let calls = {
            let mut calls = self.calls.lock();
            let n = calls.entry(pod_name(pod).to_owned()).or_default();
            *n += 1;
            *n
        };
        let label = pod.pod.metadata.labels.as_ref().and_then(|l| l.get("permit")).map(String::as_str);
        match label {
            Some("wait") => (Status::wait(), self.timeout),
            Some("wait-once") if calls == 1 => (Status::wait(), self.timeout),
            _ => (Status::success(), Duration::ZERO),
        }
    }
}

impl Reserve for Gatekeeper {
    fn reserve(&self, _: &CycleState, pod: &PodInfo, node: &str) -> Status {
        self.log.lock().push(format!("reserve {} {node}", pod_name(pod)));
        Status::success()
    }
    fn unreserve(&self, _: &CycleState, pod: &PodInfo, node: &str) {
        self.log.lock().push(format!("unreserve {} {node}", pod_name(pod)));
    }
}

/// Creates `name` (1 cpu, `permit=<permit>`) and waits until it is parked at
/// Permit; its uid.
async fn create_waiting(client: &kube::Client, s: &Scheduler, name: &str, permit: &str) -> String {
    let pod = create_pod(client, PodBuilder::new(name).cpu("1").label("permit", permit).build()).await;
    let uid = uid_of(&pod);
    eventually("the pod waits at Permit", || s.handle().waiting_pods.uids().contains(&uid)).await;
    uid
}

#[tokio::test]
async fn permit_wait_binds_once_allowed() {
    let (_cluster, client) = cluster().await;
    create_nodes(&client, vec![NodeBuilder::new("n").cpu("4").memory("8Gi").build()]).await;
    let (registry, gate) = Gatekeeper::registry(Duration::from_secs(30));
    let s = start_with(&client, registry, &[Gatekeeper::NAME]);
    let uid = create_waiting(&client, &s, "waiter", "wait").await;
    // Waiting: assumed on its node, not bound, not yet counted as scheduled.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    assert_eq!(node_of(&api.get("waiter").await.unwrap()), None);
    assert_eq!(s.cache().pod_node(&uid).as_deref(), Some("n"));
    assert_eq!(attempts(&s), (0, 0, 0), "an attempt counts as scheduled only once bound");
    s.handle().waiting_pods.allow(&uid, Gatekeeper::NAME);
    let p = wait_pod(&client, "default", "waiter", |p| node_of(p).is_some()).await;
    assert_eq!(node_of(&p), Some("n"));
    eventually("the attempt is counted as scheduled", || attempts(&s) == (1, 0, 0)).await;
    assert!(s.handle().waiting_pods.uids().is_empty());
    assert_eq!(*gate.log.lock(), ["reserve waiter n"]);
    assert_eq!(gate.calls("waiter"), 1);
}

#[tokio::test]
async fn permit_reject_while_waiting_is_unschedulable() {
    let (_cluster, client) = cluster().await;
    create_nodes(&client, vec![NodeBuilder::new("n").cpu("4").memory("8Gi").build()]).await;
    let (registry, gate) = Gatekeeper::registry(Duration::from_secs(30));
    let s = start_with(&client, registry, &[Gatekeeper::NAME]);
    let uid = create_waiting(&client, &s, "denied", "wait").await;
    s.handle().waiting_pods.reject(&uid, Gatekeeper::NAME, "denied by the test");
    // Upstream: rejected at Permit means unschedulable, not a scheduler error.
    let message = wait_not_scheduled(&client, "denied", "Unschedulable").await;
    assert_eq!(message, "0/1 nodes are available: 1 denied by the test.");
    eventually("the attempt is counted as unschedulable", || attempts(&s) == (0, 1, 0)).await;
    // Unreserved, forgotten, and parked until an event (not retried by the
    // event its own forgetting raised, nor after a backoff).
    assert_eq!(*gate.log.lock(), ["reserve denied n", "unreserve denied n"]);
    assert!(!s.cache().is_placed(&uid));
    assert_eq!(s.cache().snapshot().get("n").unwrap().requested.milli_cpu, 0);
    tokio::time::sleep(Duration::from_millis(3000)).await;
    assert_eq!(gate.calls("denied"), 1);
    assert_eq!(s.queue().sizes().unschedulable, 1);
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let lp = ListParams::default().fields("involvedObject.name=denied");
    for _ in 0..200 {
        let mut failed = events
            .list(&lp)
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("FailedScheduling"));
        if let Some(e) = failed.next_back() {
            assert_eq!(e.message.as_deref(), Some("0/1 nodes are available: 1 denied by the test."));
            assert_eq!(e.type_.as_deref(), Some("Warning"));
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no FailedScheduling event");
}

#[tokio::test]
async fn permit_timeout_is_unschedulable_and_retried_later() {
    let (_cluster, client) = cluster().await;
    create_nodes(&client, vec![NodeBuilder::new("n").cpu("4").memory("8Gi").build()]).await;
    let (registry, gate) = Gatekeeper::registry(Duration::from_millis(300));
    let s = start_with(&client, registry, &[Gatekeeper::NAME]);
    let uid = create_waiting(&client, &s, "slow", "wait-once").await;
    let message = wait_not_scheduled(&client, "slow", "Unschedulable").await;
    assert_eq!(message, "0/1 nodes are available: 1 rejected due to timeout after waiting 300ms at plugin Gatekeeper.");
    eventually("the attempt is counted as unschedulable", || attempts(&s) == (0, 1, 0)).await;
    assert!(s.handle().waiting_pods.uids().is_empty());
    assert!(!s.cache().is_placed(&uid));
    assert_eq!(*gate.log.lock(), ["reserve slow n", "unreserve slow n"]);
    // Parked until an event Gatekeeper registered for: a node is added.
    tokio::time::sleep(Duration::from_millis(3000)).await;
    assert_eq!(gate.calls("slow"), 1);
    create_nodes(&client, vec![NodeBuilder::new("m").cpu("4").memory("8Gi").build()]).await;
    let p = wait_pod(&client, "default", "slow", |p| node_of(p).is_some()).await;
    assert_eq!(gate.calls("slow"), 2, "retried once");
    let node = node_of(&p).unwrap().to_owned();
    eventually("the retry is counted as scheduled", || attempts(&s) == (1, 1, 0)).await;
    assert_eq!(gate.log.lock().last().cloned(), Some(format!("reserve slow {node}")));
}

// ------------------------------------------------- Reserve, PreBind, PostBind

/// A Reserve, PreBind and PostBind plugin that logs every call and fails
/// Reserve (or PreBind) for the first `fail_*` calls.
struct Probe {
    name: &'static str,
    log: Log,
    fail_reserve: Mutex<usize>,
    fail_pre_bind: Mutex<usize>,
}

impl Probe {
    fn new(name: &'static str, log: &Log) -> Arc<Probe> {
        Arc::new(Probe { name, log: log.clone(), fail_reserve: Mutex::new(0), fail_pre_bind: Mutex::new(0) })
    }
    fn failing_reserve(self: Arc<Self>, times: usize) -> Arc<Self> {
        *self.fail_reserve.lock() = times;
        self
    }
    fn failing_pre_bind(self: Arc<Self>, times: usize) -> Arc<Self> {
        *self.fail_pre_bind.lock() = times;
        self
    }
    fn record(&self, point: &str, pod: &PodInfo, node: &str) {
        self.log.lock().push(format!("{} {point} {} {node}", self.name, pod_name(pod)));
    }
    /// Whether this call fails, using up one of `left`.
    fn fails(left: &Mutex<usize>) -> bool {
        let mut left = left.lock();
        let fail = *left > 0;
        *left = left.saturating_sub(1);
        fail
    }
}

impl Plugin for Probe {
    fn name(&self) -> &'static str {
        self.name
    }
}

impl Reserve for Probe {
    fn reserve(&self, _: &CycleState, pod: &PodInfo, node: &str) -> Status {
        self.record("reserve", pod, node);
        if Self::fails(&self.fail_reserve) {
            return Status::error("reserve failed");
        }
        Status::success()
    }
    fn unreserve(&self, _: &CycleState, pod: &PodInfo, node: &str) {
        self.record("unreserve", pod, node);
    }
}

#[async_trait::async_trait]
impl PreBind for Probe {
    async fn pre_bind(&self, _: &CycleState, pod: &PodInfo, node: &str) -> Status {
        self.record("prebind", pod, node);
        if Self::fails(&self.fail_pre_bind) {
            return Status::error("volume not ready");
        }
        Status::success()
    }
}

impl PostBind for Probe {
    fn post_bind(&self, _: &CycleState, pod: &PodInfo, node: &str) {
        self.record("postbind", pod, node);
    }
}

/// A registry with each probe registered under its name at Reserve, PreBind
/// and PostBind.
fn probes(probes: &[Arc<Probe>]) -> Registry {
    let mut registry = Registry::default();
    for p in probes {
        let p = p.clone();
        registry.register(p.name, move |_: NoArgs, _| Ok(PluginSet::new(&p).reserve(&p).pre_bind(&p).post_bind(&p)));
    }
    registry
}

fn log_of(log: &Log, point: &str) -> Vec<String> {
    log.lock().iter().filter(|l| l.split(' ').nth(1) == Some(point)).cloned().collect()
}

#[tokio::test]
async fn reserve_failure_unreserves_in_reverse_forgets_and_retries() {
    let (_cluster, client) = cluster().await;
    create_nodes(&client, vec![NodeBuilder::new("n").cpu("4").memory("8Gi").build()]).await;
    let log = Log::default();
    // A reserves, B fails once; C comes after B and never reserved, but is
    // unreserved too (every Reserve plugin is, in reverse order).
    let (a, b, c) =
        (Probe::new("ReserveA", &log), Probe::new("ReserveB", &log).failing_reserve(1), Probe::new("ReserveC", &log));
    let s = start_with(&client, probes(&[a, b, c]), &["ReserveA", "ReserveB", "ReserveC"]);
    let pod = create_pod(&client, PodBuilder::new("p").cpu("1").build()).await;
    let uid = uid_of(&pod);
    eventually("the failed reserve is rolled back", || log.lock().len() >= 5).await;
    eventually("the pod is forgotten", || !s.cache().is_placed(&uid)).await;
    assert_eq!(
        log.lock()[..5],
        [
            "ReserveA reserve p n",
            "ReserveB reserve p n",
            "ReserveC unreserve p n",
            "ReserveB unreserve p n",
            "ReserveA unreserve p n"
        ]
    );
    assert_eq!(s.cache().snapshot().get("n").unwrap().requested.milli_cpu, 0, "the node's requests are as before");
    assert!(log_of(&log, "prebind").is_empty());
    // Retried after its backoff, and bound.
    let p = wait_pod(&client, "default", "p", |p| node_of(p).is_some()).await;
    assert_eq!(node_of(&p), Some("n"));
    eventually("the retry is counted as scheduled", || attempts(&s) == (1, 0, 1)).await;
    assert_eq!(log_of(&log, "reserve").len(), 5, "A and B once, then A, B and C");
    assert_eq!(log_of(&log, "unreserve").len(), 3, "no unreserve after the successful attempt");
    eventually("the bound pod's requests are counted", || {
        s.cache().snapshot().get("n").unwrap().requested.milli_cpu == 1000
    })
    .await;
}

#[tokio::test]
async fn post_bind_runs_once_with_the_node() {
    let (_cluster, client) = cluster().await;
    create_nodes(
        &client,
        vec![
            NodeBuilder::new("small").cpu("1").memory("8Gi").build(),
            NodeBuilder::new("big").cpu("8").memory("8Gi").build(),
        ],
    )
    .await;
    let log = Log::default();
    let s = start_with(&client, probes(&[Probe::new("Probe", &log)]), &["Probe"]);
    create_pod(&client, PodBuilder::new("p").cpu("2").build()).await;
    let p = wait_pod(&client, "default", "p", |p| node_of(p).is_some()).await;
    assert_eq!(node_of(&p), Some("big"));
    eventually("PostBind ran", || !log_of(&log, "postbind").is_empty()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(*log.lock(), ["Probe reserve p big", "Probe prebind p big", "Probe postbind p big"]);
    assert_eq!(attempts(&s), (1, 0, 0));
}

#[tokio::test]
async fn pre_bind_failure_unreserves_and_leaves_the_pod_unbound() {
    let (_cluster, client) = cluster().await;
    create_nodes(&client, vec![NodeBuilder::new("n").cpu("4").memory("8Gi").build()]).await;
    let log = Log::default();
    let probe = Probe::new("Probe", &log).failing_pre_bind(1);
    let s = start_with(&client, probes(&[probe]), &["Probe"]);
    let pod = create_pod(&client, PodBuilder::new("p").cpu("1").build()).await;
    let uid = uid_of(&pod);
    // A failure after Permit is an error (retried with backoff), not a
    // rejection.
    let message = wait_not_scheduled(&client, "p", "SchedulerError").await;
    assert!(message.contains("volume not ready"), "{message}");
    assert_eq!(*log.lock(), ["Probe reserve p n", "Probe prebind p n", "Probe unreserve p n"]);
    assert!(!s.cache().is_placed(&uid));
    assert_eq!(s.cache().snapshot().get("n").unwrap().requested.milli_cpu, 0);
    assert_eq!(attempts(&s), (0, 0, 1));
    // The retry binds; PostBind runs for it only.
    let p = wait_pod(&client, "default", "p", |p| node_of(p).is_some()).await;
    assert_eq!(node_of(&p), Some("n"));
    eventually("PostBind ran", || !log_of(&log, "postbind").is_empty()).await;
    assert_eq!(log_of(&log, "postbind"), ["Probe postbind p n"]);
    assert_eq!(log_of(&log, "unreserve").len(), 1);
    eventually("the retry is counted as scheduled", || attempts(&s) == (1, 0, 1)).await;
}

// ---------------------------------------------------------------- Preemption

#[tokio::test]
async fn preemption_is_counted() {
    let (_cluster, client) = cluster().await;
    create_nodes(&client, vec![NodeBuilder::new("n").cpu("2").memory("8Gi").build()]).await;
    let s = start_with(&client, Registry::default(), &[]);
    for i in 0..2 {
        create_pod(&client, PodBuilder::new(&format!("low{i}")).cpu("900m").priority(1).build()).await;
        wait_pod(&client, "default", &format!("low{i}"), |p| node_of(p).is_some()).await;
    }
    assert_eq!(s.metrics().sample("scheduler_preemption_attempts_total"), Some(0.0));
    // Needs both low pods gone: one nomination, two victims.
    create_pod(&client, PodBuilder::new("high").cpu("1500m").priority(100).build()).await;
    wait_pod(&client, "default", "high", |p| {
        p.status.as_ref().and_then(|s| s.nominated_node_name.as_deref()) == Some("n")
    })
    .await;
    let m = s.metrics();
    assert!(m.sample("scheduler_preemption_attempts_total").is_some_and(|v| v >= 1.0));
    assert_eq!(m.sample("scheduler_preemption_victims_count"), Some(1.0));
    assert_eq!(m.sample("scheduler_preemption_victims_sum"), Some(2.0));
    // A pod that cannot preempt is an attempt without victims.
    let before = m.sample("scheduler_preemption_attempts_total").unwrap();
    create_pod(&client, PodBuilder::new("huge").cpu("16").priority(100).build()).await;
    wait_not_scheduled(&client, "huge", "Unschedulable").await;
    eventually("the failed preemption is counted", || {
        m.sample("scheduler_preemption_attempts_total").is_some_and(|v| v > before)
    })
    .await;
    assert_eq!(m.sample("scheduler_preemption_victims_count"), Some(1.0));
    let text = m.encode();
    for name in [
        "scheduler_preemption_attempts_total",
        "scheduler_preemption_victims_bucket",
        "scheduler_schedule_attempts_total",
    ] {
        assert!(text.contains(name), "{name} missing");
    }
}
