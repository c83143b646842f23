//! A work queue like client-go's: de-duplication, a key never handed to two
//! workers at once, per-key exponential backoff with a cap, a global token
//! bucket, delayed requeue, and Prometheus metrics.
//!
//! Delayed adds work like client-go's delaying queue: one entry per key,
//! due at the earliest time any `add_after` asked for, and one timer task per
//! queue (not one per call) that moves due keys into the queue.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::sync::Notify;

/// Backoff and rate limit settings.
#[derive(Clone, Debug)]
pub struct RateLimit {
    /// First per-key retry delay, doubled on each failure.
    pub base_delay: Duration,
    /// Largest per-key retry delay.
    pub max_delay: Duration,
    /// Global retries per second (token bucket refill).
    pub qps: f64,
    /// Global bucket size.
    pub burst: u32,
}

impl Default for RateLimit {
    /// client-go's default controller rate limiter: 5 ms doubling to 1000 s,
    /// and 10 qps with a burst of 100.
    fn default() -> Self {
        Self { base_delay: Duration::from_millis(5), max_delay: Duration::from_secs(1000), qps: 10.0, burst: 100 }
    }
}

/// Metrics of one queue.
#[derive(Clone)]
pub struct QueueMetrics {
    /// Keys waiting.
    pub depth: Gauge,
    /// Keys added (including duplicates folded into one).
    pub adds: Counter,
    /// Rate-limited re-adds.
    pub retries: Counter,
    /// Seconds from add to hand-out.
    pub queue_latency: Histogram,
    /// Seconds from hand-out to done.
    pub work_duration: Histogram,
}

impl Default for QueueMetrics {
    fn default() -> Self {
        Self {
            depth: Gauge::default(),
            adds: Counter::default(),
            retries: Counter::default(),
            queue_latency: Histogram::new(exponential_buckets(1e-5, 4.0, 12)),
            work_duration: Histogram::new(exponential_buckets(1e-5, 4.0, 12)),
        }
    }
}

impl QueueMetrics {
    /// Registers the metrics under `prefix` (e.g. the controller's name).
    pub fn register(&self, registry: &mut Registry, prefix: &str) {
        let sub = registry.sub_registry_with_prefix(prefix.replace('-', "_"));
        sub.register("workqueue_depth", "Keys waiting", self.depth.clone());
        sub.register("workqueue_adds", "Keys added", self.adds.clone());
        sub.register("workqueue_retries", "Rate-limited re-adds", self.retries.clone());
        sub.register("workqueue_queue_duration_seconds", "Time waiting in the queue", self.queue_latency.clone());
        sub.register("workqueue_work_duration_seconds", "Time processing a key", self.work_duration.clone());
    }
}

/// Keys waiting for their delay: one entry per key, ordered by due time.
struct Delayed<T> {
    /// Due time of each waiting key (with a tie-breaking sequence number).
    due: HashMap<T, (tokio::time::Instant, u64)>,
    /// The same entries ordered by due time.
    order: BTreeMap<(tokio::time::Instant, u64), T>,
    next_seq: u64,
    /// Whether the timer task runs.
    timer: bool,
}

impl<T: Clone + Eq + Hash> Delayed<T> {
    /// Records `key` as due at `at` unless it is already due earlier;
    /// whether the earliest due time of the queue moved.
    fn insert(&mut self, key: T, at: tokio::time::Instant) -> bool {
        if let Some(&(existing, seq)) = self.due.get(&key) {
            if existing <= at {
                return false;
            }
            self.order.remove(&(existing, seq));
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.due.insert(key.clone(), (at, seq));
        self.order.insert((at, seq), key);
        self.order.keys().next() == Some(&(at, seq))
    }

    /// Removes and returns the keys due at `now`; the next due time.
    fn take_due(&mut self, now: tokio::time::Instant) -> (Vec<T>, Option<tokio::time::Instant>) {
        let mut ready = Vec::new();
        while let Some(entry) = self.order.first_entry() {
            if entry.key().0 > now {
                return (ready, Some(entry.key().0));
            }
            let key = entry.remove();
            self.due.remove(&key);
            ready.push(key);
        }
        (ready, None)
    }

    fn clear(&mut self) {
        self.due.clear();
        self.order.clear();
    }
}

struct Inner<T> {
    queue: VecDeque<T>,
    delayed: Delayed<T>,
    dirty: HashMap<T, Instant>,
    processing: HashMap<T, Instant>,
    failures: HashMap<T, u32>,
    tokens: f64,
    refilled: Instant,
    shutting_down: bool,
}

/// A de-duplicating work queue of keys `T`.
pub struct WorkQueue<T> {
    inner: Mutex<Inner<T>>,
    notify: Notify,
    /// Wakes the timer task: an earlier due time, shutdown, or drop.
    timer_wake: Arc<Notify>,
    limit: RateLimit,
    metrics: QueueMetrics,
}

impl<T: Clone + Eq + Hash + Send + Sync + 'static> WorkQueue<T> {
    /// An empty queue with the given backoff and rate limit.
    pub fn new(limit: RateLimit) -> Arc<Self> {
        Arc::new(Self {
            inner: Mutex::new(Inner {
                queue: VecDeque::new(),
                delayed: Delayed { due: HashMap::new(), order: BTreeMap::new(), next_seq: 0, timer: false },
                dirty: HashMap::new(),
                processing: HashMap::new(),
                failures: HashMap::new(),
                tokens: f64::from(limit.burst),
                refilled: Instant::now(),
                shutting_down: false,
            }),
            notify: Notify::new(),
            timer_wake: Arc::new(Notify::new()),
            limit,
            metrics: QueueMetrics::default(),
        })
    }

    /// The queue's metrics.
    pub fn metrics(&self) -> &QueueMetrics {
        &self.metrics
    }

    /// Adds `key` unless it is already waiting. A key being processed is
    /// queued again when its worker calls [`WorkQueue::done`].
    pub fn add(&self, key: T) {
        let mut inner = self.inner.lock();
        if inner.shutting_down {
            return;
        }
        self.metrics.adds.inc();
        if inner.dirty.contains_key(&key) {
            return;
        }
        inner.dirty.insert(key.clone(), Instant::now());
        if !inner.processing.contains_key(&key) {
            inner.queue.push_back(key);
            self.metrics.depth.set(inner.queue.len() as i64);
            drop(inner);
            self.notify.notify_one();
        }
    }

    /// Adds `key` after `delay`. A key already waiting keeps one entry, due
    /// at the earlier of the two times (client-go's delaying queue): many
    /// delayed adds of one key cost one entry and wake one processing.
    /// Needs a Tokio runtime (the queue's timer task starts on first use).
    pub fn add_after(self: &Arc<Self>, key: T, delay: Duration) {
        if delay.is_zero() {
            return self.add(key);
        }
        let at = tokio::time::Instant::now() + delay;
        let mut inner = self.inner.lock();
        if inner.shutting_down {
            return;
        }
        let earliest = inner.delayed.insert(key, at);
        let start = !inner.delayed.timer;
        inner.delayed.timer = true;
        drop(inner);
        if start {
            tokio::spawn(Self::timer(Arc::downgrade(self), self.timer_wake.clone()));
        } else if earliest {
            self.timer_wake.notify_one();
        }
    }

    /// Keys waiting for their delay ([`WorkQueue::add_after`]).
    pub fn delayed_len(&self) -> usize {
        self.inner.lock().delayed.due.len()
    }

    /// The timer task: moves due keys into the queue, sleeping until the
    /// next due time or a wake-up. It holds the queue only while it works,
    /// and ends once the queue is dropped or shut down.
    async fn timer(queue: std::sync::Weak<Self>, wake: Arc<Notify>) {
        loop {
            let next = {
                let Some(queue) = queue.upgrade() else { return };
                let (ready, next) = {
                    let mut inner = queue.inner.lock();
                    if inner.shutting_down {
                        inner.delayed.timer = false;
                        return;
                    }
                    inner.delayed.take_due(tokio::time::Instant::now())
                };
                for key in ready {
                    queue.add(key);
                }
                next
            };
            match next {
                Some(at) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(at) => {}
                        _ = wake.notified() => {}
                    }
                }
                None => wake.notified().await,
            }
        }
    }

    /// The delay the next rate-limited add of `key` waits: the larger of the
    /// key's exponential backoff and the global bucket's wait.
    pub fn when(&self, key: &T) -> Duration {
        let mut inner = self.inner.lock();
        let failures = inner.failures.entry(key.clone()).or_insert(0);
        let exp = *failures;
        *failures += 1;
        let backoff = self
            .limit
            .base_delay
            .checked_mul(2u32.saturating_pow(exp.min(31)))
            .unwrap_or(self.limit.max_delay)
            .min(self.limit.max_delay);
        let now = Instant::now();
        let elapsed = now.duration_since(inner.refilled).as_secs_f64();
        inner.refilled = now;
        inner.tokens = (inner.tokens + elapsed * self.limit.qps).min(f64::from(self.limit.burst));
        inner.tokens -= 1.0;
        let bucket = if inner.tokens >= 0.0 || self.limit.qps <= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-inner.tokens / self.limit.qps)
        };
        backoff.max(bucket)
    }

    /// Adds `key` after its backoff ([`WorkQueue::when`]).
    pub fn add_rate_limited(self: &Arc<Self>, key: T) {
        let delay = self.when(&key);
        self.metrics.retries.inc();
        self.add_after(key, delay);
    }

    /// Forgets `key`'s failures (its next backoff starts from the base).
    pub fn forget(&self, key: &T) {
        self.inner.lock().failures.remove(key);
    }

    /// How many times `key` failed since it was last forgotten.
    pub fn retries(&self, key: &T) -> u32 {
        self.inner.lock().failures.get(key).copied().unwrap_or(0)
    }

    /// The next key, waiting for one; `None` once shut down and drained.
    pub async fn get(&self) -> Option<T> {
        loop {
            let notified = self.notify.notified();
            {
                let mut inner = self.inner.lock();
                if let Some(key) = inner.queue.pop_front() {
                    let added = inner.dirty.remove(&key);
                    inner.processing.insert(key.clone(), Instant::now());
                    self.metrics.depth.set(inner.queue.len() as i64);
                    if let Some(added) = added {
                        self.metrics.queue_latency.observe(added.elapsed().as_secs_f64());
                    }
                    if !inner.queue.is_empty() {
                        self.notify.notify_one();
                    }
                    return Some(key);
                }
                if inner.shutting_down {
                    self.notify.notify_waiters();
                    return None;
                }
            }
            notified.await;
        }
    }

    /// Marks `key` processed; if it was added meanwhile it is queued again.
    pub fn done(&self, key: &T) {
        let mut inner = self.inner.lock();
        if let Some(started) = inner.processing.remove(key) {
            self.metrics.work_duration.observe(started.elapsed().as_secs_f64());
        }
        if inner.dirty.contains_key(key) {
            inner.queue.push_back(key.clone());
            self.metrics.depth.set(inner.queue.len() as i64);
            drop(inner);
            self.notify.notify_one();
        }
    }

    /// Keys waiting.
    pub fn len(&self) -> usize {
        self.inner.lock().queue.len()
    }

    /// Whether no key is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys being processed.
    pub fn processing(&self) -> usize {
        self.inner.lock().processing.len()
    }

    /// Refuses new keys and drops waiting ones; [`WorkQueue::get`] returns `None`.
    pub fn shut_down(&self) {
        let mut inner = self.inner.lock();
        inner.shutting_down = true;
        inner.queue.clear();
        inner.dirty.clear();
        inner.delayed.clear();
        self.metrics.depth.set(0);
        drop(inner);
        self.notify.notify_waiters();
        self.notify.notify_one();
        self.timer_wake.notify_one();
    }

    /// Whether [`WorkQueue::shut_down`] was called.
    pub fn is_shutting_down(&self) -> bool {
        self.inner.lock().shutting_down
    }
}

impl<T> Drop for WorkQueue<T> {
    fn drop(&mut self) {
        // The timer task finds the queue gone and ends.
        self.timer_wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue() -> Arc<WorkQueue<&'static str>> {
        WorkQueue::new(RateLimit {
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(80),
            qps: 1000.0,
            burst: 1000,
        })
    }

    #[tokio::test]
    async fn duplicates_fold() {
        let q = queue();
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!(q.len(), 2);
        assert_eq!(q.get().await, Some("a"));
        assert_eq!(q.get().await, Some("b"));
    }

    #[tokio::test]
    async fn a_key_in_flight_is_not_handed_out_twice() {
        let q = queue();
        q.add("a");
        let k = q.get().await.unwrap();
        q.add("a");
        assert_eq!(q.len(), 0, "held back while processing");
        q.done(&k);
        assert_eq!(q.len(), 1);
        assert_eq!(q.get().await, Some("a"));
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_and_forget_resets() {
        let q = queue();
        let table = [10, 20, 40, 80, 80];
        for expected in table {
            assert_eq!(q.when(&"a"), Duration::from_millis(expected));
        }
        assert_eq!(q.retries(&"a"), 5);
        q.forget(&"a");
        assert_eq!(q.when(&"a"), Duration::from_millis(10));
    }

    #[test]
    fn global_bucket_limits_bursts() {
        let q =
            WorkQueue::new(RateLimit { base_delay: Duration::ZERO, max_delay: Duration::ZERO, qps: 10.0, burst: 2 });
        assert_eq!(q.when(&1), Duration::ZERO);
        assert_eq!(q.when(&2), Duration::ZERO);
        let third = q.when(&3);
        assert!(third > Duration::from_millis(50), "{third:?}");
    }

    #[tokio::test]
    async fn delayed_requeue_and_shutdown() {
        let q = queue();
        q.add_after("a", Duration::from_millis(30));
        assert!(q.is_empty());
        let started = Instant::now();
        assert_eq!(q.get().await, Some("a"));
        assert!(started.elapsed() >= Duration::from_millis(25));
        q.done(&"a");
        q.shut_down();
        assert_eq!(q.get().await, None);
    }

    fn alive_tasks() -> usize {
        tokio::runtime::Handle::current().metrics().num_alive_tasks()
    }

    #[tokio::test]
    async fn many_delayed_adds_of_one_key_are_one_entry_one_timer_one_processing() {
        let q = queue();
        let before = alive_tasks();
        q.add_after("a", Duration::from_millis(1000));
        for i in 0..10_000u64 {
            // The earliest of them, 40 ms, is the one that counts.
            let delay = if i == 5_000 { 40 } else { 600 + i % 400 };
            q.add_after("a", Duration::from_millis(delay));
        }
        assert_eq!(q.delayed_len(), 1, "one entry per key");
        assert!(alive_tasks() <= before + 1, "one timer task, not one per call: {}", alive_tasks() - before);
        assert!(q.is_empty(), "not due yet");
        let started = Instant::now();
        let key = tokio::time::timeout(Duration::from_secs(2), q.get()).await.expect("due at the earliest time");
        let waited = started.elapsed();
        assert_eq!(key, Some("a"));
        assert!(waited < Duration::from_millis(550), "the earliest due time wins: {waited:?}");
        assert_eq!(q.delayed_len(), 0);
        q.done(&"a");
        // Every later due time has passed by now: nothing else comes.
        let again = tokio::time::timeout(Duration::from_millis(1100), q.get()).await;
        assert!(again.is_err(), "processed once, got {again:?}");
        assert_eq!(q.metrics().adds.get(), 1);
    }

    #[tokio::test]
    async fn an_earlier_delayed_add_overrides_a_later_one_and_not_the_reverse() {
        let q = queue();
        q.add_after("late-first", Duration::from_secs(30));
        q.add_after("late-first", Duration::from_millis(20));
        q.add_after("early-first", Duration::from_millis(30));
        q.add_after("early-first", Duration::from_secs(30));
        let mut got = Vec::new();
        for _ in 0..2 {
            let key = tokio::time::timeout(Duration::from_secs(2), q.get()).await.expect("both due soon");
            got.push(key.unwrap());
        }
        assert_eq!(got, ["late-first", "early-first"]);
        assert_eq!(q.delayed_len(), 0);
    }

    #[tokio::test]
    async fn the_timer_task_ends_with_the_queue() {
        let before = alive_tasks();
        let q = queue();
        q.add_after("a", Duration::from_secs(60));
        assert_eq!(alive_tasks(), before + 1);
        drop(q);
        let deadline = Instant::now() + Duration::from_secs(2);
        while alive_tasks() > before {
            assert!(Instant::now() < deadline, "timer task outlived its queue");
            tokio::task::yield_now().await;
        }
        let q = queue();
        q.add_after("a", Duration::from_secs(60));
        q.shut_down();
        assert_eq!(q.delayed_len(), 0);
        let deadline = Instant::now() + Duration::from_secs(2);
        while alive_tasks() > before {
            assert!(Instant::now() < deadline, "timer task outlived shutdown");
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_failing_key_comes_back_within_the_backoff_cap() {
        // Without the cap the 20th retry would wait 10 ms * 2^19 (~87 min).
        let q = queue();
        for _ in 0..19 {
            q.when(&"a");
        }
        q.add_rate_limited("a");
        let started = Instant::now();
        let key = tokio::time::timeout(Duration::from_secs(2), q.get()).await.expect("capped at 80 ms");
        assert_eq!(key, Some("a"));
        assert!(started.elapsed() >= Duration::from_millis(70), "{:?}", started.elapsed());
        assert_eq!(q.retries(&"a"), 20);
        // Another key's backoff is its own.
        assert_eq!(q.when(&"b"), Duration::from_millis(10));
    }

    #[tokio::test]
    async fn the_global_bucket_spaces_retries_of_different_keys() {
        let q = WorkQueue::new(RateLimit {
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(1),
            qps: 20.0,
            burst: 1,
        });
        let started = Instant::now();
        for key in 0..5 {
            q.add_rate_limited(key);
        }
        for _ in 0..5 {
            let key = tokio::time::timeout(Duration::from_secs(2), q.get()).await.expect("all come");
            q.done(&key.unwrap());
        }
        // One token at once, then one per 50 ms: the fifth after 200 ms.
        let elapsed = started.elapsed();
        assert!(elapsed >= Duration::from_millis(190), "{elapsed:?}");
        assert_eq!(q.metrics().retries.get(), 5);
    }
}
