//! Work a store does on its own: TTL expiry and history compaction.
//!
//! Both run as Tokio tasks that hold only a weak reference to the store, so
//! they end when the store is dropped. [`spawn_background`] starts them and
//! [`expire`] deletes expired keys; both are public in [`crate::backend`].

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::kv::Revision;
use crate::store::Store;
use crate::txn::{Compare, CompareOp, Op, Txn};

/// How a store compacts its history.
///
/// Like the Kubernetes API server's compactor, the store keeps at least
/// `window` of history (5 minutes by default): every `window` it compacts up to
/// the revision that was current one window ago, so between one and two
/// windows of history are retained. With `max_revisions` set it
/// also never keeps more than that many revisions, which bounds the history of
/// a store under heavy write load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionPolicy {
    /// History younger than this is always kept.
    pub window: Duration,
    /// At most this many revisions of history are kept, if set.
    pub max_revisions: Option<i64>,
}

impl Default for CompactionPolicy {
    fn default() -> Self {
        CompactionPolicy { window: Duration::from_secs(300), max_revisions: None }
    }
}

impl CompactionPolicy {
    /// Never compact on its own (callers may still call `Store::compact`).
    pub fn disabled() -> Option<CompactionPolicy> {
        None
    }

    /// Keeps `window` of history.
    pub fn window(window: Duration) -> CompactionPolicy {
        CompactionPolicy { window, max_revisions: None }
    }

    /// Also caps the history at `max_revisions` revisions.
    pub fn with_max_revisions(mut self, max_revisions: i64) -> CompactionPolicy {
        self.max_revisions = Some(max_revisions.max(1));
        self
    }

    /// How often the compactor looks at the store: once a window, like the
    /// API server (so between one and two windows of history are kept), and
    /// every second when the history is also capped by revisions.
    fn tick(&self) -> Duration {
        let tick = match self.max_revisions {
            Some(_) => self.window.min(Duration::from_secs(1)),
            None => self.window,
        };
        tick.max(Duration::from_millis(10))
    }
}

/// Settings every backend shares.
///
/// Built from [`Default`] and the chained setters, so that a new setting is
/// not a breaking change:
///
/// ```
/// use std::time::Duration;
/// use orchestra_store::{CompactionPolicy, StoreOptions};
///
/// let options = StoreOptions::default()
///     .compaction(Some(CompactionPolicy::window(Duration::from_secs(60))))
///     .expiry_interval(Duration::from_millis(100));
/// assert_eq!(options.expiry_interval, Duration::from_millis(100));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreOptions {
    /// Automatic compaction; `None` leaves compaction to explicit
    /// `Store::compact` calls. Default: a 5 minute window.
    pub compaction: Option<CompactionPolicy>,
    /// How often the store looks for keys whose TTL ran out. Default: 500 ms.
    pub expiry_interval: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions { compaction: Some(CompactionPolicy::default()), expiry_interval: Duration::from_millis(500) }
    }
}

impl StoreOptions {
    /// Sets (or with `None` disables) automatic compaction.
    pub fn compaction(mut self, policy: Option<CompactionPolicy>) -> StoreOptions {
        self.compaction = policy;
        self
    }

    /// Sets how often expired keys are looked for.
    pub fn expiry_interval(mut self, interval: Duration) -> StoreOptions {
        self.expiry_interval = interval.max(Duration::from_millis(1));
        self
    }
}

/// The compactor's memory of which revision was current when.
struct Compactor {
    policy: CompactionPolicy,
    samples: VecDeque<(Instant, Revision)>,
}

impl Compactor {
    fn new(policy: CompactionPolicy) -> Compactor {
        Compactor { policy, samples: VecDeque::new() }
    }

    /// The revision to compact to, given the current revision at `now`.
    fn target(&mut self, now: Instant, current: Revision) -> Option<Revision> {
        self.samples.push_back((now, current));
        let mut target = None;
        while let Some(&(at, revision)) = self.samples.front() {
            if now.duration_since(at) < self.policy.window {
                break;
            }
            target = Some(revision);
            self.samples.pop_front();
        }
        if let Some(max) = self.policy.max_revisions {
            let floor = current - max + 1;
            if floor > 0 {
                target = Some(target.map_or(floor, |t: Revision| t.max(floor)));
            }
        }
        target.filter(|t| *t > 0)
    }

    /// One look at `store`: compacts if the policy says so.
    async fn run_once(&mut self, store: &dyn Store) {
        let status = match store.status().await {
            Ok(status) => status,
            Err(e) => return tracing::warn!(error = %e, "compactor cannot read the store status"),
        };
        if let Some(target) = self.target(Instant::now(), status.revision)
            && target > status.compact_revision
            && let Err(e) = store.compact(target).await
        {
            tracing::warn!(error = %e, target, "compaction failed");
        }
    }
}

/// Starts a store's background work, as `options` asks: every
/// `options.expiry_interval` it deletes the keys whose TTL ran out (with
/// [`expire`]), and with `options.compaction` set it compacts the history by
/// that policy. Must be called inside a Tokio runtime, which runs both.
///
/// `shared` is the state the store's handles share; the tasks hold it only
/// weakly, so they end when the last handle is dropped. Each time they run
/// they make a store handle of their own from it with `handle`, and ask
/// `due` for the keys whose deadline is at or before the time it is given
/// (see [`now_ms`](crate::backend::now_ms)), each with the mod revision of the
/// write that set the deadline — the list
/// [`ExpiryIndex::due`](crate::backend::ExpiryIndex::due) returns. An error
/// from `due` is logged, and the next tick tries again.
pub fn spawn_background<T, S, D>(shared: &Arc<T>, options: &StoreOptions, due: D, handle: fn(Arc<T>) -> S)
where
    T: Send + Sync + 'static,
    S: Store,
    D: Fn(&T, i64) -> Result<Vec<(String, Revision)>> + Send + 'static,
{
    let weak = Arc::downgrade(shared);
    spawn_periodic(weak.clone(), options.expiry_interval, move |shared| {
        let due = due(&shared, crate::txn::now_ms());
        async move {
            match due {
                Ok(due) if due.is_empty() => {}
                Ok(due) => expire(&handle(shared), due).await,
                Err(e) => tracing::warn!(error = %e, "cannot read TTL deadlines"),
            }
        }
    });
    if let Some(policy) = options.compaction.clone() {
        spawn_compactor(weak, policy, handle);
    }
}

/// Runs `step` every `interval` while `target` is alive.
fn spawn_periodic<T, F, Fut>(target: Weak<T>, interval: Duration, mut step: F)
where
    T: Send + Sync + 'static,
    F: FnMut(Arc<T>) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            let Some(target) = target.upgrade() else { return };
            step(target).await;
        }
    });
}

/// Starts a compactor for the store that `make_store` rebuilds from the weak
/// reference each tick.
fn spawn_compactor<T, S>(target: Weak<T>, policy: CompactionPolicy, make_store: fn(Arc<T>) -> S)
where
    T: Send + Sync + 'static,
    S: Store,
{
    let tick = policy.tick();
    let compactor = Arc::new(tokio::sync::Mutex::new(Compactor::new(policy)));
    spawn_periodic(target, tick, move |shared| {
        let compactor = compactor.clone();
        async move {
            let store = make_store(shared);
            compactor.lock().await.run_once(&store).await;
        }
    });
}

/// Deletes the keys whose TTL ran out, each only if it was not written again
/// since: `due` pairs a key with the mod revision of the write that set its
/// deadline, and each delete is a transaction guarded by that revision, so
/// it publishes a delete event like any other write. Failures are logged (a
/// store that is shutting down is not a failure); the next look retries.
pub async fn expire(store: &dyn Store, due: Vec<(String, Revision)>) {
    let deletes = due.into_iter().map(|(key, revision)| {
        let txn = Txn::new()
            .when([Compare::mod_revision(key.clone(), CompareOp::Equal, revision)])
            .and_then([Op::delete(key)]);
        store.txn(txn)
    });
    for result in futures::future::join_all(deletes).await {
        match result {
            Ok(_) | Err(Error::Unavailable(_)) => {}
            Err(e) => tracing::warn!(error = %e, "TTL expiry failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compacts_to_the_revision_one_window_ago() {
        let start = Instant::now();
        let mut c = Compactor::new(CompactionPolicy::window(Duration::from_secs(300)));
        assert_eq!(c.target(start, 10), None);
        assert_eq!(c.target(start + Duration::from_secs(100), 50), None);
        assert_eq!(c.target(start + Duration::from_secs(300), 80), Some(10));
        assert_eq!(c.target(start + Duration::from_secs(410), 90), Some(50));
        assert_eq!(c.target(start + Duration::from_secs(420), 95), None);
    }

    #[test]
    fn max_revisions_caps_history() {
        let start = Instant::now();
        let mut c = Compactor::new(CompactionPolicy::window(Duration::from_secs(300)).with_max_revisions(100));
        assert_eq!(c.target(start, 50), None);
        assert_eq!(c.target(start, 1000), Some(901));
    }
}
