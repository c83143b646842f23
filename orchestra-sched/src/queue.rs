//! The scheduling queue: an active queue ordered by QueueSort, a backoff
//! queue with per-pod exponential backoff, and unschedulable pods that wait
//! for a cluster event their rejecting plugins registered for.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::framework::{ClusterEvent, EventResource, QueueSort};
use crate::node_info::PodInfo;

/// True if `new` differs from `old` in what scheduling reads (upstream's
/// `isPodUpdated`: anything but the status and bookkeeping metadata).
fn updated(old: &k8s_openapi::api::core::v1::Pod, new: &k8s_openapi::api::core::v1::Pod) -> bool {
    old.spec != new.spec
        || old.metadata.labels != new.metadata.labels
        || old.metadata.annotations != new.metadata.annotations
        || old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
}

/// A pod in the queue with its scheduling history.
#[derive(Debug, Clone)]
pub struct QueuedPodInfo {
    /// The pod.
    pub info: Arc<PodInfo>,
    /// When it was (re)added to the queue.
    pub timestamp: Instant,
    /// When it was first added.
    pub initial_timestamp: Instant,
    /// Failed attempts so far.
    pub attempts: u32,
    /// Plugins that rejected it in the last attempt.
    pub unschedulable_plugins: HashSet<&'static str>,
    /// The scheduling cycle it was popped in.
    pub cycle: u64,
    /// Its last attempt nominated a node by preemption: it waits for its
    /// victims to go, not for a backoff (upstream skips the backoff of such
    /// pods as well).
    pub nominated: bool,
    generation: u64,
}

impl QueuedPodInfo {
    /// A fresh queue entry.
    pub fn new(info: Arc<PodInfo>) -> QueuedPodInfo {
        let now = Instant::now();
        QueuedPodInfo {
            info,
            timestamp: now,
            initial_timestamp: now,
            attempts: 0,
            unschedulable_plugins: HashSet::new(),
            cycle: 0,
            nominated: false,
            generation: 0,
        }
    }
    /// The pod's priority (0 when unset).
    pub fn priority(&self) -> i32 {
        self.info.pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Active,
    Backoff(Instant, u64),
    Unschedulable,
    Gated,
}

/// Queue timing.
///
/// Built from [`Default`] and the `with_*` setters, so that a new setting is
/// not a breaking change:
///
/// ```
/// use std::time::Duration;
/// use orchestra_sched::queue::QueueOptions;
///
/// let options = QueueOptions::default()
///     .with_initial_backoff(Duration::from_millis(20))
///     .with_max_backoff(Duration::from_millis(80))
///     .with_max_unschedulable(Duration::from_secs(60));
/// assert_eq!(options.max_backoff, Duration::from_millis(80));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct QueueOptions {
    /// Backoff after the first failure (default 1 s).
    pub initial_backoff: Duration,
    /// Largest backoff (default 10 s).
    pub max_backoff: Duration,
    /// Longest time in the unschedulable set before a retry (default 5 min).
    pub max_unschedulable: Duration,
}

impl Default for QueueOptions {
    fn default() -> Self {
        QueueOptions {
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(10),
            max_unschedulable: Duration::from_secs(300),
        }
    }
}

impl QueueOptions {
    /// Sets [`initial_backoff`](Self::initial_backoff).
    pub fn with_initial_backoff(mut self, backoff: Duration) -> Self {
        self.initial_backoff = backoff;
        self
    }

    /// Sets [`max_backoff`](Self::max_backoff).
    pub fn with_max_backoff(mut self, backoff: Duration) -> Self {
        self.max_backoff = backoff;
        self
    }

    /// Sets [`max_unschedulable`](Self::max_unschedulable).
    pub fn with_max_unschedulable(mut self, duration: Duration) -> Self {
        self.max_unschedulable = duration;
        self
    }
}

struct Inner {
    heap: Vec<QueuedPodInfo>,
    backoff: BTreeMap<(Instant, u64), String>,
    pods: HashMap<String, (QueuedPodInfo, Place)>,
    /// Keys of unschedulable pods (may hold stale keys; checked against `pods`).
    unschedulable: HashSet<String>,
    in_flight: HashSet<String>,
    /// In-flight pods [`activate`](SchedulingQueue::activate)d meanwhile:
    /// they go back to the active queue if their attempt fails.
    activated_in_flight: HashSet<String>,
    cycle: u64,
    move_request_cycle: u64,
    seq: u64,
    closed: bool,
}

/// Sizes of the sub-queues.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueSizes {
    /// Active.
    pub active: usize,
    /// Backing off.
    pub backoff: usize,
    /// Unschedulable.
    pub unschedulable: usize,
    /// Gated by PreEnqueue.
    pub gated: usize,
}

/// The scheduling queue shared by watch handlers and the scheduling loop.
pub struct SchedulingQueue {
    inner: Mutex<Inner>,
    notify: Notify,
    sort: Arc<dyn QueueSort>,
    options: QueueOptions,
    /// Events each plugin registered.
    interest: HashMap<&'static str, Vec<ClusterEvent>>,
}

impl SchedulingQueue {
    /// A queue ordered by `sort`, moving pods back on events in `interest`.
    pub fn new(
        sort: Arc<dyn QueueSort>,
        options: QueueOptions,
        interest: HashMap<&'static str, Vec<ClusterEvent>>,
    ) -> SchedulingQueue {
        SchedulingQueue {
            inner: Mutex::new(Inner {
                heap: Vec::new(),
                backoff: BTreeMap::new(),
                pods: HashMap::new(),
                unschedulable: HashSet::new(),
                in_flight: HashSet::new(),
                activated_in_flight: HashSet::new(),
                cycle: 0,
                move_request_cycle: 0,
                seq: 0,
                closed: false,
            }),
            notify: Notify::new(),
            sort,
            options,
            interest,
        }
    }

    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
        self.sort.less(a, b)
    }

    fn heap_push(&self, inner: &mut Inner, q: QueuedPodInfo) {
        inner.heap.push(q);
        let mut i = inner.heap.len() - 1;
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.less(&inner.heap[i], &inner.heap[parent]) {
                inner.heap.swap(i, parent);
                i = parent;
            } else {
                break;
            }
        }
    }

    fn heap_pop(&self, inner: &mut Inner) -> Option<QueuedPodInfo> {
        if inner.heap.is_empty() {
            return None;
        }
        let last = inner.heap.len() - 1;
        inner.heap.swap(0, last);
        let top = inner.heap.pop();
        let n = inner.heap.len();
        let mut i = 0;
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut best = i;
            if l < n && self.less(&inner.heap[l], &inner.heap[best]) {
                best = l;
            }
            if r < n && self.less(&inner.heap[r], &inner.heap[best]) {
                best = r;
            }
            if best == i {
                break;
            }
            inner.heap.swap(i, best);
            i = best;
        }
        top
    }

    fn to_active(&self, inner: &mut Inner, mut q: QueuedPodInfo) {
        inner.seq += 1;
        q.generation = inner.seq;
        let uid = q.info.uid().to_owned();
        inner.pods.insert(uid, (q.clone(), Place::Active));
        self.heap_push(inner, q);
        self.notify.notify_one();
    }

    fn backoff_duration(&self, attempts: u32) -> Duration {
        if attempts == 0 {
            return Duration::ZERO;
        }
        let mut d = self.options.initial_backoff;
        for _ in 1..attempts {
            d *= 2;
            if d >= self.options.max_backoff {
                return self.options.max_backoff;
            }
        }
        d.min(self.options.max_backoff)
    }

    fn backoff_expiry(&self, q: &QueuedPodInfo) -> Instant {
        q.timestamp + self.backoff_duration(q.attempts)
    }

    fn to_backoff_or_active(&self, inner: &mut Inner, mut q: QueuedPodInfo) {
        let expiry = self.backoff_expiry(&q);
        if q.nominated || expiry <= Instant::now() {
            self.to_active(inner, q);
        } else {
            inner.seq += 1;
            q.generation = inner.seq;
            let uid = q.info.uid().to_owned();
            inner.backoff.insert((expiry, inner.seq), uid.clone());
            inner.pods.insert(uid, (q, Place::Backoff(expiry, inner.seq)));
        }
    }

    /// Adds a new unscheduled pod (or updates a queued one). `gated` parks it
    /// (a PreEnqueue plugin said no).
    pub fn add(&self, info: Arc<PodInfo>, gated: bool) {
        let mut inner = self.inner.lock();
        let uid = info.uid().to_owned();
        if inner.in_flight.contains(&uid) {
            return;
        }
        match inner.pods.remove(&uid) {
            Some((mut q, Place::Unschedulable)) if !gated && !updated(&q.info.pod, &info.pod) => {
                // A status-only change (the scheduler's own condition or
                // nomination) cannot make it schedulable: it stays parked.
                q.info = info;
                inner.pods.insert(uid, (q, Place::Unschedulable));
            }
            Some((mut q, place)) => {
                q.info = info;
                match place {
                    Place::Backoff(at, seq) => {
                        inner.backoff.remove(&(at, seq));
                    }
                    Place::Active => {}
                    _ => {}
                }
                if gated {
                    inner.pods.insert(uid, (q, Place::Gated));
                } else if place == Place::Unschedulable || matches!(place, Place::Backoff(..)) {
                    // An update may make it schedulable: retry after its backoff.
                    self.to_backoff_or_active(&mut inner, q);
                } else {
                    self.to_active(&mut inner, q);
                }
            }
            None => {
                let q = QueuedPodInfo::new(info);
                if gated {
                    inner.pods.insert(uid, (q, Place::Gated));
                } else {
                    self.to_active(&mut inner, q);
                }
            }
        }
    }

    /// Removes a pod (deleted, or bound by someone else).
    pub fn delete(&self, uid: &str) {
        let mut inner = self.inner.lock();
        if let Some((_, Place::Backoff(at, seq))) = inner.pods.remove(uid) {
            inner.backoff.remove(&(at, seq));
        }
        // Active entries are skipped lazily at pop.
    }

    /// Waits for the next pod to schedule; `None` once closed.
    pub async fn pop(&self) -> Option<QueuedPodInfo> {
        loop {
            {
                let mut inner = self.inner.lock();
                if inner.closed {
                    return None;
                }
                while let Some(mut q) = self.heap_pop(&mut inner) {
                    let uid = q.info.uid().to_owned();
                    let current =
                        matches!(inner.pods.get(&uid), Some((c, Place::Active)) if c.generation == q.generation);
                    if !current {
                        continue;
                    }
                    inner.pods.remove(&uid);
                    inner.cycle += 1;
                    q.cycle = inner.cycle;
                    q.attempts += 1;
                    inner.in_flight.insert(uid);
                    return Some(q);
                }
            }
            self.notify.notified().await;
        }
    }

    /// The scheduling attempt of `q` failed: park it as unschedulable, or
    /// put it in backoff when a move request came in since it was popped (or
    /// the failure was an error).
    pub fn add_unschedulable(&self, mut q: QueuedPodInfo, error: bool) {
        let mut inner = self.inner.lock();
        let uid = q.info.uid().to_owned();
        inner.in_flight.remove(&uid);
        q.timestamp = Instant::now();
        // A nominee waits for its victims' deletion, whatever else happened
        // meanwhile (see `activate` for victims gone already).
        let activated = inner.activated_in_flight.remove(&uid);
        let wait = q.nominated && !error && !activated;
        if activated {
            self.to_active(&mut inner, q);
        } else if !wait && (error || inner.move_request_cycle >= q.cycle || q.unschedulable_plugins.is_empty()) {
            self.to_backoff_or_active(&mut inner, q);
        } else {
            inner.unschedulable.insert(uid.clone());
            inner.pods.insert(uid, (q, Place::Unschedulable));
        }
    }

    /// Moves a parked unschedulable pod to the active queue at once (the
    /// scheduler found its nominated node free after parking it).
    pub fn activate(&self, uid: &str) {
        let mut inner = self.inner.lock();
        if inner.in_flight.contains(uid) {
            inner.activated_in_flight.insert(uid.to_owned());
        } else if matches!(inner.pods.get(uid), Some((_, Place::Unschedulable))) {
            inner.unschedulable.remove(uid);
            let (q, _) = inner.pods.remove(uid).expect("present");
            self.to_active(&mut inner, q);
        }
    }

    /// The pod left the scheduling cycle successfully (assumed).
    pub fn done(&self, uid: &str) {
        let mut inner = self.inner.lock();
        inner.in_flight.remove(uid);
        inner.activated_in_flight.remove(uid);
    }

    /// A cluster event happened: unschedulable pods whose rejecting plugins
    /// registered for it go back to the active (or backoff) queue.
    pub fn on_event(&self, event: ClusterEvent) {
        self.move_on_event(event, None);
    }

    /// As [`on_event`](Self::on_event), but the pod `uid` stays where it is:
    /// the event is its own doing (its assumed placement was forgotten after
    /// a rejection at Permit), which cannot make it schedulable.
    pub fn on_event_except(&self, event: ClusterEvent, uid: &str) {
        self.move_on_event(event, Some(uid));
    }

    fn move_on_event(&self, event: ClusterEvent, except: Option<&str>) {
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        inner.move_request_cycle = inner.cycle;
        if inner.unschedulable.is_empty() {
            return;
        }
        let pods = &inner.pods;
        inner.unschedulable.retain(|k| matches!(pods.get(k), Some((_, Place::Unschedulable))));
        let moving: Vec<String> = inner
            .unschedulable
            .iter()
            .filter_map(|k| inner.pods.get(k).map(|v| (k, v)))
            .filter(|(k, (q, place))| {
                *place == Place::Unschedulable
                    && except != Some(k.as_str())
                    // A nominee waits for its node (see `activate`); only a
                    // change of nodes may send it elsewhere.
                    && (!q.nominated || event.resource == EventResource::Node)
                    && (q.unschedulable_plugins.is_empty()
                        || q.unschedulable_plugins.iter().any(|p| {
                            self.interest.get(p).is_none_or(|evs| evs.iter().any(|e| e.matches(&event)))
                        }))
            })
            .map(|(k, _)| k.clone())
            .collect();
        for uid in moving {
            inner.unschedulable.remove(&uid);
            let (q, _) = inner.pods.remove(&uid).expect("present");
            self.to_backoff_or_active(inner, q);
        }
    }

    /// Moves finished backoffs to the active queue and long-unschedulable
    /// pods back; called periodically.
    pub fn flush(&self) {
        let mut inner = self.inner.lock();
        let now = Instant::now();
        while let Some((&(at, seq), _)) = inner.backoff.iter().next() {
            if at > now {
                break;
            }
            let uid = inner.backoff.remove(&(at, seq)).expect("present");
            if let Some((q, Place::Backoff(..))) = inner.pods.remove(&uid) {
                self.to_active(&mut inner, q);
            }
        }
        let stale: Vec<String> = inner
            .unschedulable
            .iter()
            .filter(|k| {
                matches!(inner.pods.get(*k), Some((q, Place::Unschedulable)) if now - q.timestamp >= self.options.max_unschedulable)
            })
            .cloned()
            .collect();
        for uid in stale {
            inner.unschedulable.remove(&uid);
            let (q, _) = inner.pods.remove(&uid).expect("present");
            self.to_backoff_or_active(&mut inner, q);
        }
    }

    /// Sub-queue sizes.
    pub fn sizes(&self) -> QueueSizes {
        let inner = self.inner.lock();
        let mut s = QueueSizes::default();
        for (_, p) in inner.pods.values() {
            match p {
                Place::Active => s.active += 1,
                Place::Backoff(..) => s.backoff += 1,
                Place::Unschedulable => s.unschedulable += 1,
                Place::Gated => s.gated += 1,
            }
        }
        s
    }

    /// Stops `pop`.
    pub fn close(&self) {
        self.inner.lock().closed = true;
        self.notify.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::action;
    use crate::plugins::queue_sort::PrioritySort;
    use crate::testing::{PodBuilder, pod_info};

    fn queue(interest: HashMap<&'static str, Vec<ClusterEvent>>) -> SchedulingQueue {
        SchedulingQueue::new(
            Arc::new(PrioritySort),
            QueueOptions::default()
                .with_initial_backoff(Duration::from_millis(20))
                .with_max_backoff(Duration::from_millis(80)),
            interest,
        )
    }

    #[tokio::test]
    async fn priority_then_age() {
        let q = queue(HashMap::new());
        for (name, prio) in [("a", 0), ("b", 10), ("c", 0), ("d", 10)] {
            q.add(Arc::new(pod_info(PodBuilder::new(name).priority(prio).build())), false);
        }
        let mut order = Vec::new();
        for _ in 0..4 {
            order.push(q.pop().await.unwrap().info.pod.metadata.name.clone().unwrap());
        }
        assert_eq!(order, ["b", "d", "a", "c"]);
    }

    #[tokio::test]
    async fn unschedulable_moves_on_registered_event_only() {
        let interest = HashMap::from([("NodeResourcesFit", vec![ClusterEvent::new(EventResource::Node, action::ADD)])]);
        let q = queue(interest);
        q.add(Arc::new(pod_info(PodBuilder::new("p").build())), false);
        let mut p = q.pop().await.unwrap();
        p.unschedulable_plugins.insert("NodeResourcesFit");
        q.add_unschedulable(p, false);
        assert_eq!(q.sizes().unschedulable, 1);
        q.on_event(ClusterEvent::new(EventResource::AssignedPod, action::DELETE));
        assert_eq!(q.sizes().unschedulable, 1);
        q.on_event(ClusterEvent::new(EventResource::Node, action::ADD));
        assert_eq!(q.sizes().unschedulable, 0);
        assert_eq!(q.sizes().backoff, 1);
        tokio::time::sleep(Duration::from_millis(30)).await;
        q.flush();
        assert_eq!(q.sizes().active, 1);
        assert_eq!(q.pop().await.unwrap().attempts, 2);
    }

    #[tokio::test]
    async fn status_updates_leave_unschedulable_pods_parked_and_nominees_skip_backoff() {
        let q = queue(HashMap::new());
        q.add(Arc::new(pod_info(PodBuilder::new("p").build())), false);
        let mut p = q.pop().await.unwrap();
        p.unschedulable_plugins.insert("NodeResourcesFit");
        q.add_unschedulable(p, false);
        // The scheduler's own status write comes back through the watch.
        let mut written = PodBuilder::new("p").build();
        written.status =
            Some(k8s_openapi::api::core::v1::PodStatus { nominated_node_name: Some("n".into()), ..Default::default() });
        q.add(Arc::new(pod_info(written)), false);
        assert_eq!(q.sizes().unschedulable, 1);
        // A label change may make it schedulable.
        q.add(Arc::new(pod_info(PodBuilder::new("p").label("a", "b").build())), false);
        assert_eq!(q.sizes().unschedulable, 0);
        // A pod that nominated a node waits for that node, not for any pod
        // event, and then goes straight back, with no backoff.
        let mut p = q.pop_or_wait_backoff().await;
        p.unschedulable_plugins.insert("NodeResourcesFit");
        p.nominated = true;
        let uid = p.info.uid().to_owned();
        q.add_unschedulable(p, false);
        q.on_event(ClusterEvent::new(EventResource::AssignedPod, action::DELETE));
        assert_eq!(q.sizes().unschedulable, 1);
        q.activate(&uid);
        assert_eq!((q.sizes().backoff, q.sizes().active), (0, 1));
    }

    impl SchedulingQueue {
        /// Pops, flushing backoffs until something is active.
        async fn pop_or_wait_backoff(&self) -> QueuedPodInfo {
            loop {
                self.flush();
                if self.sizes().active > 0 {
                    return self.pop().await.unwrap();
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }

    #[test]
    fn backoff_doubles_up_to_max() {
        let q = queue(HashMap::new());
        let got: Vec<u128> = (1..=5).map(|a| q.backoff_duration(a).as_millis()).collect();
        assert_eq!(got, [20, 40, 80, 80, 80]);
    }

    /// A pod's own event (its forgotten placement) moves the other
    /// unschedulable pods but not the pod itself.
    #[tokio::test]
    async fn event_except_leaves_its_pod_parked() {
        let q = queue(HashMap::new());
        let mut uids = Vec::new();
        for name in ["own", "other"] {
            q.add(Arc::new(pod_info(PodBuilder::new(name).uid(name).build())), false);
            let mut p = q.pop().await.unwrap();
            p.unschedulable_plugins.insert("X");
            uids.push(p.info.uid().to_owned());
            q.add_unschedulable(p, false);
        }
        assert_eq!(q.sizes().unschedulable, 2);
        q.on_event_except(ClusterEvent::new(EventResource::AssignedPod, action::DELETE), &uids[0]);
        assert_eq!((q.sizes().unschedulable, q.sizes().backoff), (1, 1));
        q.on_event(ClusterEvent::new(EventResource::AssignedPod, action::DELETE));
        assert_eq!((q.sizes().unschedulable, q.sizes().backoff), (0, 2));
    }

    #[tokio::test]
    async fn event_during_cycle_sends_to_backoff() {
        let interest = HashMap::from([("X", vec![ClusterEvent::new(EventResource::Node, action::ADD)])]);
        let q = queue(interest);
        q.add(Arc::new(pod_info(PodBuilder::new("p").build())), false);
        let mut p = q.pop().await.unwrap();
        q.on_event(ClusterEvent::new(EventResource::Node, action::ADD));
        p.unschedulable_plugins.insert("X");
        q.add_unschedulable(p, false);
        assert_eq!(q.sizes().backoff, 1);
    }
}
