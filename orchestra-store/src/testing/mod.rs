//! The conformance suite every [`Store`] backend runs (feature `testing`).
//!
//! A backend proves itself by handing the suite a [`StoreBuilder`] that makes
//! fresh, empty stores:
//!
//! ```no_run
//! use orchestra_store::testing::{MemStoreBuilder, Suite, model_test};
//!
//! #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
//! async fn conformance() {
//!     Suite::test_all(&MemStoreBuilder::new()).await;
//! }
//!
//! #[test]
//! fn model() {
//!     model_test(&MemStoreBuilder::new(), 32);
//! }
//! ```
//!
//! [`Suite::test_all`] runs every check, each on a store of its own; each
//! check is also a public function, so a backend can run them one by one. A
//! check panics with a message naming what it expected on the first
//! difference. [`model_test`] compares random operation sequences against
//! [`Model`], a small reference implementation of the semantics.
//!
//! The checks are grouped by area, one file each:
//!
//! | area | checks |
//! |---|---|
//! | keys and revisions | [`Suite::crud_and_revisions`], [`Suite::optimistic_concurrency`] |
//! | transactions | [`Suite::transactions`], [`Suite::refused_transactions`] |
//! | reads | [`Suite::ranges`], [`Suite::pagination_and_past_revisions`] |
//! | TTLs | [`Suite::ttl`] |
//! | watches | [`Suite::watch_order`], [`Suite::watch_filters`], [`Suite::watch_delete_events`], [`Suite::watch_history_and_resume`], [`Suite::watch_progress`], [`Suite::watch_slow_consumer`], [`Suite::watch_before_compaction_fails`] |
//! | load | [`Suite::concurrent_writers_and_watchers`] |
//! | compaction | [`Suite::compaction`] |

mod compaction;
mod concurrency;
mod crud;
mod model;
mod range;
mod ttl;
mod txn;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;

pub use self::model::{Model, model_test};
use crate::background::StoreOptions;
use crate::error::Result;
use crate::kv::{Event, KeyValue, Revision};
use crate::mem::MemStore;
use crate::store::{Store, StoreStatus};
use crate::watch::WatchStream;

/// Makes the stores the suite runs on.
///
/// Every call to [`build`](StoreBuilder::build) returns a fresh, empty store
/// (revision 0, nothing compacted) that
///
/// * never compacts on its own (the suite calls [`Store::compact`] itself), and
/// * deletes keys whose TTL ran out within about 100 ms.
///
/// [`suite_options`] are store options that do both. The builder owns what the
/// stores need to outlive (temporary directories, say): drop the stores
/// before the builder.
///
/// A backend's builder, and one check run on a store it built (a
/// [`MemStore`] stands in for the backend):
///
/// ```
/// use std::sync::Arc;
/// use async_trait::async_trait;
/// use orchestra_store::testing::{StoreBuilder, Suite, suite_options};
/// use orchestra_store::{MemStore, Store};
///
/// struct MyBackendBuilder;
///
/// #[async_trait]
/// impl StoreBuilder for MyBackendBuilder {
///     async fn build(&self) -> Arc<dyn Store> {
///         Arc::new(MemStore::with_options(suite_options()))
///     }
/// }
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// Suite::crud_and_revisions(&MyBackendBuilder.build().await).await;
/// # });
/// ```
#[async_trait]
pub trait StoreBuilder: Send + Sync {
    /// Builds a fresh, empty store.
    async fn build(&self) -> Arc<dyn Store>;
}

/// Store options for the suite: no automatic compaction, and expired keys
/// looked for every 50 ms so that TTL checks run fast.
pub fn suite_options() -> StoreOptions {
    StoreOptions::default().compaction(None).expiry_interval(Duration::from_millis(50))
}

/// Builds [`MemStore`]s with [`suite_options`].
///
/// ```
/// use orchestra_store::testing::{MemStoreBuilder, StoreBuilder};
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let builder = MemStoreBuilder::new();
/// let (first, second) = (builder.build().await, builder.build().await);
/// first.put("/registry/a", "1".into(), None).await.unwrap();
/// assert!(second.get("/registry/a").await.unwrap().is_none(), "every store starts empty");
/// # });
/// ```
#[derive(Debug, Default)]
pub struct MemStoreBuilder;

impl MemStoreBuilder {
    /// The builder.
    pub fn new() -> MemStoreBuilder {
        MemStoreBuilder
    }
}

#[async_trait]
impl StoreBuilder for MemStoreBuilder {
    async fn build(&self) -> Arc<dyn Store> {
        Arc::new(MemStore::with_options(suite_options()))
    }
}

#[cfg(feature = "rocksdb")]
pub use self::rocks_builder::RocksStoreBuilder;

#[cfg(feature = "rocksdb")]
mod rocks_builder {
    use std::path::PathBuf;
    use std::sync::Arc;

    use async_trait::async_trait;
    use parking_lot::Mutex;
    use tempfile::TempDir;

    use super::{StoreBuilder, suite_options};
    use crate::rocks::{RocksOptions, RocksStore};
    use crate::store::Store;

    /// Builds [`RocksStore`]s with [`suite_options`], each in a temporary
    /// directory of its own that lives as long as the builder.
    ///
    /// ```
    /// use orchestra_store::testing::{RocksStoreBuilder, StoreBuilder, Suite};
    ///
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let parent = tempfile::tempdir().unwrap();
    /// let builder = RocksStoreBuilder::in_dir(parent.path());
    /// let store = builder.build().await;
    /// Suite::crud_and_revisions(&store).await;
    /// assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 1);
    /// drop(store);
    /// # });
    /// ```
    #[derive(Debug, Default)]
    pub struct RocksStoreBuilder {
        /// Where the temporary directories go; the system's default if `None`.
        parent: Option<PathBuf>,
        dirs: Mutex<Vec<TempDir>>,
    }

    impl RocksStoreBuilder {
        /// A builder that makes its directories in the system's temporary directory.
        pub fn new() -> RocksStoreBuilder {
            RocksStoreBuilder::default()
        }

        /// A builder that makes its directories under `parent` (which must exist).
        pub fn in_dir(parent: impl Into<PathBuf>) -> RocksStoreBuilder {
            RocksStoreBuilder { parent: Some(parent.into()), dirs: Mutex::default() }
        }
    }

    #[async_trait]
    impl StoreBuilder for RocksStoreBuilder {
        async fn build(&self) -> Arc<dyn Store> {
            let mut dir = tempfile::Builder::new();
            dir.prefix("orchestra-store-");
            let dir = match &self.parent {
                Some(parent) => dir.tempdir_in(parent),
                None => dir.tempdir(),
            }
            .expect("cannot create a temporary directory for a RocksStore");
            let options = RocksOptions::new(dir.path()).store_options(suite_options());
            let store = RocksStore::open_with(options)
                .await
                .unwrap_or_else(|e| panic!("cannot open a RocksStore in {}: {e}", dir.path().display()));
            self.dirs.lock().push(dir);
            Arc::new(store)
        }
    }
}

/// The conformance suite. Every check takes a fresh store from a
/// [`StoreBuilder`] and panics on the first difference from the contract.
#[derive(Debug)]
pub struct Suite;

impl Suite {
    /// Runs every check in turn, each on a fresh store from `builder`, then
    /// returns; panics on the first failure. Which check runs is printed to
    /// stderr (shown with a failing test's output).
    pub async fn test_all<B: StoreBuilder + ?Sized>(builder: &B) {
        macro_rules! run {
            ($($check:ident),* $(,)?) => {$(
                eprintln!("conformance: {}", stringify!($check));
                Suite::$check(&builder.build().await).await;
            )*};
        }
        run!(
            crud_and_revisions,
            optimistic_concurrency,
            transactions,
            refused_transactions,
            ranges,
            pagination_and_past_revisions,
            ttl,
            watch_order,
            watch_filters,
            watch_delete_events,
            watch_history_and_resume,
            watch_progress,
            watch_slow_consumer,
            watch_before_compaction_fails,
            concurrent_writers_and_watchers,
            compaction,
        );
    }
}

// Helpers shared by the checks.

/// How long a check waits for something that should happen promptly.
const PATIENCE: Duration = Duration::from_secs(30);

/// Unwraps `result`, panicking with what was being done.
#[track_caller]
fn ok<T>(result: Result<T>, doing: &str) -> T {
    match result {
        Ok(value) => value,
        Err(e) => panic!("{doing}: unexpected error: {e} ({e:?})"),
    }
}

/// Checks that `store` is fresh and empty, as every check expects.
async fn expect_fresh(store: &dyn Store) {
    let status = ok(store.status().await, "status of a fresh store");
    assert_eq!(
        status,
        StoreStatus { revision: 0, compact_revision: 0 },
        "the suite needs a fresh, empty store from StoreBuilder::build"
    );
}

/// The store's current revision.
async fn revision(store: &dyn Store) -> Revision {
    ok(store.status().await, "status").revision
}

/// The key-value a check expects to read: no TTL.
fn kv(key: &str, value: &str, create_revision: Revision, mod_revision: Revision, version: i64) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: value.to_owned().into(),
        create_revision,
        mod_revision,
        version,
        expires_at_ms: None,
    }
}

/// The put event that wrote `kv` over `prev_kv`.
fn put_event(kv: KeyValue, prev_kv: Option<KeyValue>) -> Event {
    Event { kind: crate::kv::EventKind::Put, kv, prev_kv }
}

/// Reads `stream` until it has reported every change up to revision `until`
/// (a response at `until` or later) and returns the events. Checks on the way
/// that the watch keeps its promises about responses: each one's events are
/// after the previous response's revision and at most its own revision, in
/// revision order. Panics if that takes longer than [`PATIENCE`].
async fn events_until(stream: &mut WatchStream, until: Revision, what: &str) -> Vec<Event> {
    let mut events = Vec::new();
    let mut reported = 0;
    while reported < until {
        let response = match tokio::time::timeout(PATIENCE, stream.next()).await {
            Ok(Some(Ok(response))) => response,
            Ok(Some(Err(e))) => panic!("{what}: the watch failed with {e} after {} events", events.len()),
            Ok(None) => panic!("{what}: the watch ended after {} events", events.len()),
            Err(_) => panic!(
                "{what}: waited {PATIENCE:?} for the watch to reach revision {until}; it reported up to {reported} \
                 with {} events",
                events.len()
            ),
        };
        check_response(&response, reported, what);
        reported = reported.max(response.revision);
        events.extend(response.events);
    }
    events
}

/// Reads `stream` until it has delivered `count` events.
async fn count_events(stream: &mut WatchStream, count: usize, what: &str) -> Vec<Event> {
    let mut events = Vec::with_capacity(count);
    let mut reported = 0;
    while events.len() < count {
        let response = match tokio::time::timeout(PATIENCE, stream.next()).await {
            Ok(Some(Ok(response))) => response,
            Ok(Some(Err(e))) => panic!("{what}: the watch failed with {e} after {} events", events.len()),
            Ok(None) => panic!("{what}: the watch ended after {} events", events.len()),
            Err(_) => panic!("{what}: waited {PATIENCE:?} for {count} events, got {}", events.len()),
        };
        check_response(&response, reported, what);
        reported = reported.max(response.revision);
        events.extend(response.events);
    }
    events
}

/// The promises of one watch response that follows a response at `reported`.
fn check_response(response: &crate::watch::WatchResponse, reported: Revision, what: &str) {
    let mut last = reported;
    for event in &response.events {
        assert!(
            event.revision() > reported && event.revision() >= last && event.revision() <= response.revision,
            "{what}: event at revision {} in a response at revision {} that follows one at {reported} \
             (events out of order, repeated, or after the response's revision): {event:?}",
            event.revision(),
            response.revision,
        );
        last = event.revision();
    }
    assert!(
        response.revision >= reported,
        "{what}: response at revision {} after one at {reported}",
        response.revision
    );
}

/// Checks that `events` equals `expected`, reporting the first difference.
#[track_caller]
fn assert_events(events: &[Event], expected: &[Event], what: &str) {
    for (i, (got, want)) in events.iter().zip(expected).enumerate() {
        assert_eq!(got, want, "{what}: event #{i} differs");
    }
    assert_eq!(
        events.len(),
        expected.len(),
        "{what}: {} events delivered, {} expected; the extra or missing ones start with {:?}",
        events.len(),
        expected.len(),
        events.get(expected.len()).or(expected.get(events.len()))
    );
}

/// Writes to a store, checks every response against what it has written
/// before, and records the events a watch of everything must deliver.
struct Recorder {
    store: Arc<dyn Store>,
    /// The current value of every key written.
    current: std::collections::BTreeMap<String, KeyValue>,
    /// Every change, in revision order.
    events: Vec<Event>,
}

impl Recorder {
    fn new(store: &Arc<dyn Store>) -> Recorder {
        Recorder { store: store.clone(), current: Default::default(), events: Vec::new() }
    }

    /// Puts `value` under `key`.
    async fn put(&mut self, key: &str, value: &str) -> KeyValue {
        let kv = ok(self.store.put(key, value.to_owned().into(), None).await, &format!("put {key}"));
        self.put_done(key, value, kv.mod_revision, kv.clone());
        kv
    }

    /// Deletes `key`, which must exist, and returns the revision of the delete.
    async fn delete(&mut self, key: &str) -> Revision {
        self.txn(vec![crate::txn::Op::delete(key)]).await
    }

    /// Runs `ops` as one unconditional transaction and returns its revision.
    async fn txn(&mut self, ops: Vec<crate::txn::Op>) -> Revision {
        use crate::txn::{Op, OpResponse, Txn};
        let txn = Txn::new().and_then(ops.clone());
        let response = ok(self.store.txn(txn).await, &format!("transaction {ops:?}"));
        let revision = response.revision;
        assert_eq!(response.responses.len(), ops.len(), "one response per operation of {ops:?}");
        for (op, op_response) in ops.iter().zip(response.responses) {
            match (op, op_response) {
                (Op::Put { key, value, .. }, OpResponse::Put { kv, prev_kv }) => {
                    assert_eq!(prev_kv.as_ref(), self.current.get(key), "the previous value of {key}");
                    self.put_done(key, std::str::from_utf8(value).expect("UTF-8 values"), revision, kv);
                }
                (Op::Delete { key }, OpResponse::Delete { prev_kv }) => {
                    assert_eq!(prev_kv.as_ref(), self.current.get(key), "the value {key} had when deleted");
                    if let Some(prev) = self.current.remove(key) {
                        self.events.push(Event::deleted(prev, revision));
                    }
                }
                (Op::Get { key }, OpResponse::Get { kv }) => {
                    assert_eq!(kv.as_ref(), self.current.get(key), "a read of {key} in a transaction");
                }
                (op, response) => panic!("{op:?} answered with {response:?}"),
            }
        }
        revision
    }

    /// Checks and records a put of `value` under `key` at `revision` that
    /// returned `kv`.
    fn put_done(&mut self, key: &str, value: &str, revision: Revision, kv: KeyValue) {
        let prev = self.current.get(key).cloned();
        let expected = KeyValue {
            key: key.to_owned(),
            value: value.to_owned().into(),
            create_revision: prev.as_ref().map_or(revision, |p| p.create_revision),
            mod_revision: revision,
            version: prev.as_ref().map_or(1, |p| p.version + 1),
            expires_at_ms: kv.expires_at_ms,
        };
        assert_eq!(kv, expected, "the key-value a put returned");
        assert!(
            self.events.last().is_none_or(|e| e.revision() <= revision),
            "revision {revision} after revision {}",
            self.events.last().map_or(0, Event::revision)
        );
        self.current.insert(key.to_owned(), kv.clone());
        self.events.push(put_event(kv, prev));
    }

    /// The recorded events of `range`.
    fn events_in(&self, range: &crate::kv::KeyRange) -> Vec<Event> {
        self.events.iter().filter(|e| range.contains(&e.kv.key)).cloned().collect()
    }
}

/// Checks that `stream` has nothing more to deliver right now.
async fn assert_quiet(stream: &mut WatchStream, what: &str) {
    if let Ok(item) = tokio::time::timeout(Duration::from_millis(200), stream.next()).await {
        panic!("{what}: the watch delivered more than expected: {item:?}");
    }
}
