//! A storage backend of your own: `MapStore`, a complete `Store` in a
//! `BTreeMap` behind a mutex, composed from the building blocks of
//! `orchestra_store::backend`. Like every backend it passes the conformance
//! suite, `orchestra_store::testing::Suite` (this example's test runs it on
//! `MapStoreBuilder`).
//!
//! The program writes, reads and watches a few keys and prints what it sees:
//!
//! ```text
//! cargo run -p orchestra-examples --example store_backend
//! ```

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use futures::StreamExt;
use orchestra_store::backend::{
    EventLog, Executed, ExpiryIndex, KeyHistory, RevisionLog, WatchHub, execute, now_ms, spawn_background,
};
use orchestra_store::testing::{StoreBuilder, suite_options};
use orchestra_store::{
    Event, KeyRange, RangeRequest, RangeResponse, Result, Revision, Store, StoreOptions, StoreStatus, Txn, TxnResponse,
    WatchRequest, WatchStream,
};

/// An in-memory store. Cloning gives another handle to the same store.
#[derive(Clone)]
pub struct MapStore {
    shared: Arc<Shared>,
}

/// What the handles share: the state behind one lock, and the watch fan-out.
struct Shared {
    state: Mutex<State>,
    hub: WatchHub,
}

/// Everything a write changes, changed all at once under the lock.
#[derive(Default)]
struct State {
    /// The revision counter and the compaction revision.
    status: StoreStatus,
    /// Each key's versions, for reads at the current and past revisions.
    keys: BTreeMap<String, KeyHistory>,
    /// Each revision's events, for watches that start in the past or fall behind.
    log: RevisionLog,
    /// The deadlines of the live keys written with a TTL.
    expiries: ExpiryIndex,
}

impl MapStore {
    /// An empty store. Must be called inside a Tokio runtime, which runs its
    /// background work: TTL expiry deletes the due keys through `txn` (so
    /// watches see the deletes), and compaction calls `compact`.
    pub fn new(options: StoreOptions) -> MapStore {
        let shared = Arc::new(Shared { state: Mutex::default(), hub: WatchHub::new(0) });
        let due = |shared: &Shared, now| Ok(shared.lock().expiries.due(now));
        spawn_background(&shared, &options, due, |shared| MapStore { shared });
        MapStore { shared }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("no panic while the store's lock is held")
    }
}

#[async_trait]
impl Store for MapStore {
    async fn range(&self, request: RangeRequest) -> Result<RangeResponse> {
        // One consistent snapshot: the current revision (0) or a retained
        // past one; `read_revision` refuses compacted and future revisions.
        let state = self.shared.lock();
        let revision = state.status.read_revision(request.revision)?;
        // The range's keys in key order, each as it was then (`KeyHistory::at`).
        let found = state
            .keys
            .range::<str, _>((Bound::Included(request.range.start()), Bound::Unbounded))
            .take_while(|(key, _)| !request.range.is_past_end(key))
            .filter(|(key, _)| request.range.contains(key))
            .filter_map(|(_, history)| history.at(revision));
        // `count` is every key found; past the limit (0: none) keys are only counted.
        let mut response = RangeResponse { kvs: Vec::new(), more: false, count: 0, revision };
        for kv in found {
            response.count += 1;
            if request.limit == 0 || response.kvs.len() < request.limit {
                response.kvs.push(kv.clone());
            } else {
                response.more = true;
            }
        }
        Ok(response)
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        // Atomic, one revision for the whole write. The limits first, so that
        // a refused transaction changes nothing.
        txn.validate()?;
        let mut state = self.shared.lock();
        // `execute` evaluates it as the write at the next revision against
        // the latest versions (a map of key histories is a `ReadView`), and
        // returns the changes as events; it changes nothing itself.
        let revision = state.status.revision + 1;
        let Executed { response, events } = execute(&txn, revision, now_ms(), &mut &state.keys)?;
        // A transaction that wrote nothing takes no revision. One that did
        // goes into all four parts of the state before the lock is released.
        if !events.is_empty() {
            for event in &events {
                state.keys.entry(event.kv.key.clone()).or_default().record(event);
            }
            state.expiries.apply(&events);
            state.log.append(revision, events.clone());
            state.status.revision = revision;
            // Published under the lock, so that watches see the revisions in order.
            self.shared.hub.publish(revision, revision, events);
        }
        Ok(response)
    }

    async fn watch(&self, request: WatchRequest) -> Result<WatchStream> {
        // Every change from the start revision on, exactly once and in order.
        // A compacted start fails now; the hub does the rest, replaying what
        // a watch missed from the log through `Shared`'s `EventLog`.
        self.shared.lock().status.check_watch_from(request.start_revision)?;
        Ok(self.shared.hub.watch(self.shared.clone(), request))
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        // Compacting to an older revision does nothing; to a future one fails.
        let mut state = self.shared.lock();
        if state.status.check_compact(revision)? {
            // Keep what reads at `revision` or later see; forget emptied keys.
            state.keys.retain(|_, history| {
                history.compact(revision);
                !history.is_empty()
            });
            state.log.compact(revision);
            state.status.compact_revision = revision;
        }
        Ok(())
    }

    async fn status(&self) -> Result<StoreStatus> {
        Ok(self.shared.lock().status)
    }
}

#[async_trait]
impl EventLog for Shared {
    async fn events(&self, range: &KeyRange, from: Revision, to: Revision) -> Result<Vec<Event>> {
        let state = self.lock();
        // A watch behind the compaction revision fails rather than skip changes.
        state.status.check_watch_from(from)?;
        Ok(state.log.events(range, from, to))
    }
}

/// Makes the stores the conformance suite runs on: fresh, with the suite's
/// options (no automatic compaction, TTL expiry every 50 ms).
pub struct MapStoreBuilder;

#[async_trait]
impl StoreBuilder for MapStoreBuilder {
    async fn build(&self) -> Arc<dyn Store> {
        Arc::new(MapStore::new(suite_options()))
    }
}

/// Writes, reads and watches a few keys; returns what it saw, a line each.
pub async fn run() -> Result<Vec<String>> {
    let store = MapStore::new(StoreOptions::default());
    let pods = KeyRange::prefix("/pods/");
    let mut watch = store.watch(WatchRequest::new(pods.clone())).await?;

    let web = store.create("/pods/web", "v1".into(), None).await?;
    store.update(&web.key, "v2".into(), web.mod_revision, None).await?;
    store.put("/pods/db", "v1".into(), None).await?;
    store.delete("/pods/db", None).await?;

    let mut lines = Vec::new();
    for revision in [0, web.mod_revision] {
        let response = store.range(RangeRequest::new(pods.clone()).at_revision(revision)).await?;
        for kv in response.kvs {
            lines.push(format!("read at {}: {} = {:?}", response.revision, kv.key, kv.value));
        }
    }
    let last = store.status().await?.revision;
    while let Some(response) = watch.next().await {
        let response = response?;
        for event in &response.events {
            lines.push(format!("watch: {:?} {} at {}", event.kind, event.kv.key, event.revision()));
        }
        if response.revision >= last {
            break;
        }
    }
    Ok(lines)
}

#[tokio::main]
async fn main() -> Result<()> {
    for line in run().await? {
        println!("{line}");
    }
    Ok(())
}
