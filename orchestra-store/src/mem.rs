//! [`MemStore`]: the complete store semantics, in memory.
//!
//! Nothing survives the process, which makes it the store for tests, for
//! simulations and for embedders that keep their state elsewhere.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::RwLock;

use crate::backend::{EventLog, ExpiryIndex, KeyHistory, RevisionLog, WatchHub, execute, now_ms, spawn_background};
use crate::background::StoreOptions;
use crate::error::Result;
use crate::kv::{Event, KeyRange, Revision};
use crate::store::{RangeRequest, RangeResponse, Store, StoreStatus};
use crate::txn::{Txn, TxnResponse};
use crate::watch::{WatchRequest, WatchStream};

/// An in-memory [`Store`]. Cloning gives another handle to the same store.
///
/// It is built from the public building blocks of [`crate::backend`].
#[derive(Clone)]
pub struct MemStore {
    shared: Arc<Shared>,
}

struct Shared {
    state: RwLock<State>,
    hub: WatchHub,
}

#[derive(Default)]
struct State {
    status: StoreStatus,
    /// Every key's retained versions.
    keys: BTreeMap<String, KeyHistory>,
    /// The events of every retained revision.
    log: RevisionLog,
    /// The deadlines of the live keys written with a TTL.
    expiries: ExpiryIndex,
}

impl std::fmt::Debug for MemStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.shared.state.read();
        f.debug_struct("MemStore")
            .field("revision", &state.status.revision)
            .field("compact_revision", &state.status.compact_revision)
            .field("keys", &state.keys.len())
            .finish()
    }
}

impl Default for MemStore {
    fn default() -> Self {
        MemStore::new()
    }
}

impl MemStore {
    /// An empty store with default options. Must be called inside a Tokio
    /// runtime, which runs its TTL expiry and compaction.
    pub fn new() -> MemStore {
        MemStore::with_options(StoreOptions::default())
    }

    /// An empty store with `options`. Must be called inside a Tokio runtime.
    pub fn with_options(options: StoreOptions) -> MemStore {
        let shared = Arc::new(Shared { state: RwLock::new(State::default()), hub: WatchHub::new(0) });
        spawn_background(
            &shared,
            &options,
            |shared, now_ms| Ok(shared.state.read().expiries.due(now_ms)),
            |shared| MemStore { shared },
        );
        MemStore { shared }
    }
}

impl State {
    fn range(&self, request: &RangeRequest) -> Result<RangeResponse> {
        let revision = self.status.read_revision(request.revision)?;
        let mut response = RangeResponse { kvs: Vec::new(), more: false, count: 0, revision };
        if request.range.is_empty() {
            return Ok(response);
        }
        for (key, history) in
            self.keys.range::<str, _>((std::ops::Bound::Included(request.range.start()), std::ops::Bound::Unbounded))
        {
            if request.range.is_past_end(key) {
                break;
            }
            if !request.range.contains(key) {
                continue;
            }
            if let Some(kv) = history.at(revision) {
                response.count += 1;
                if request.limit == 0 || response.kvs.len() < request.limit {
                    response.kvs.push(kv.clone());
                } else {
                    response.more = true;
                }
            }
        }
        Ok(response)
    }

    fn apply(&mut self, revision: Revision, events: &[Event]) {
        self.expiries.apply(events);
        for event in events {
            self.keys.entry(event.kv.key.clone()).or_default().record(event);
        }
        self.log.append(revision, events.to_vec());
        self.status.revision = revision;
    }

    fn compact(&mut self, revision: Revision) -> Result<()> {
        if !self.status.check_compact(revision)? {
            return Ok(());
        }
        self.keys.retain(|_, history| {
            history.compact(revision);
            !history.is_empty()
        });
        self.log.compact(revision);
        self.status.compact_revision = revision;
        Ok(())
    }
}

#[async_trait]
impl EventLog for Shared {
    async fn events(&self, range: &KeyRange, from: Revision, to: Revision) -> Result<Vec<Event>> {
        let state = self.state.read();
        state.status.check_watch_from(from)?;
        Ok(state.log.events(range, from, to))
    }
}

#[async_trait]
impl Store for MemStore {
    async fn range(&self, request: RangeRequest) -> Result<RangeResponse> {
        self.shared.state.read().range(&request)
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        txn.validate()?;
        let mut state = self.shared.state.write();
        let revision = state.status.revision + 1;
        let executed = execute(&txn, revision, now_ms(), &mut &state.keys)?;
        if !executed.events.is_empty() {
            state.apply(revision, &executed.events);
            // Published under the lock: watches see revisions in order.
            self.shared.hub.publish(revision, revision, executed.events);
        }
        Ok(executed.response)
    }

    async fn watch(&self, request: WatchRequest) -> Result<WatchStream> {
        self.shared.state.read().status.check_watch_from(request.start_revision)?;
        Ok(self.shared.hub.watch(self.shared.clone(), request))
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.shared.state.write().compact(revision)
    }

    async fn status(&self) -> Result<StoreStatus> {
        Ok(self.shared.state.read().status)
    }
}
