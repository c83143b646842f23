//! [`MemStore`]: the complete store semantics, in memory.
//!
//! Nothing survives the process, which makes it the store for tests, for
//! simulations and for embedders that keep their state elsewhere.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::RwLock;

use crate::background::{self, StoreOptions};
use crate::error::{Error, Result};
use crate::kv::{Event, EventKind, KeyRange, KeyValue, Revision};
use crate::store::{RangeRequest, RangeResponse, Store, StoreStatus};
use crate::txn::{self, ReadView, Txn, TxnResponse};
use crate::watch::{EventLog, WatchHub, WatchRequest, WatchStream};

/// An in-memory [`Store`]. Cloning gives another handle to the same store.
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
    revision: Revision,
    compact_revision: Revision,
    /// Every key's retained versions, oldest first; `None` marks a delete.
    keys: BTreeMap<String, Vec<(Revision, Option<KeyValue>)>>,
    /// The events of every retained revision.
    log: BTreeMap<Revision, Vec<Event>>,
    /// (deadline in ms, key) for every live key written with a TTL.
    expiries: BTreeSet<(i64, String)>,
}

impl std::fmt::Debug for MemStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.shared.state.read();
        f.debug_struct("MemStore")
            .field("revision", &state.revision)
            .field("compact_revision", &state.compact_revision)
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
        let weak = Arc::downgrade(&shared);
        background::spawn_periodic(weak.clone(), options.expiry_interval, |shared| async move {
            let due = shared.state.read().due(txn::now_ms());
            if !due.is_empty() {
                background::expire(&MemStore { shared }, due).await;
            }
        });
        if let Some(policy) = options.compaction {
            background::spawn_compactor(weak, policy, |shared| MemStore { shared });
        }
        MemStore { shared }
    }
}

impl State {
    /// The key's value at `revision`.
    fn value_at(versions: &[(Revision, Option<KeyValue>)], revision: Revision) -> Option<&KeyValue> {
        let index = versions.partition_point(|(rev, _)| *rev <= revision);
        versions[..index].last().and_then(|(_, kv)| kv.as_ref())
    }

    fn check_read_revision(&self, revision: Revision) -> Result<Revision> {
        match revision {
            0 => Ok(self.revision),
            r if r > self.revision => Err(Error::FutureRevision { requested: r, current: self.revision }),
            r if r < self.compact_revision => Err(Error::Compacted { requested: r, compacted: self.compact_revision }),
            r => Ok(r),
        }
    }

    fn range(&self, request: &RangeRequest) -> Result<RangeResponse> {
        let revision = self.check_read_revision(request.revision)?;
        let mut response = RangeResponse { kvs: Vec::new(), more: false, count: 0, revision };
        if request.range.is_empty() {
            return Ok(response);
        }
        for (key, versions) in
            self.keys.range::<str, _>((std::ops::Bound::Included(request.range.start()), std::ops::Bound::Unbounded))
        {
            if request.range.is_past_end(key) {
                break;
            }
            if !request.range.contains(key) {
                continue;
            }
            if let Some(kv) = State::value_at(versions, revision) {
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
        for event in events {
            if let Some(deadline) = event.prev_kv.as_ref().and_then(|p| p.expires_at_ms) {
                self.expiries.remove(&(deadline, event.kv.key.clone()));
            }
            let value = match event.kind {
                EventKind::Put => {
                    if let Some(deadline) = event.kv.expires_at_ms {
                        self.expiries.insert((deadline, event.kv.key.clone()));
                    }
                    Some(event.kv.clone())
                }
                EventKind::Delete => None,
            };
            self.keys.entry(event.kv.key.clone()).or_default().push((revision, value));
        }
        self.log.insert(revision, events.to_vec());
        self.revision = revision;
    }

    fn compact(&mut self, revision: Revision) -> Result<()> {
        if revision <= self.compact_revision {
            return Ok(());
        }
        if revision > self.revision {
            return Err(Error::FutureRevision { requested: revision, current: self.revision });
        }
        self.keys.retain(|_, versions| {
            // Keep the version visible at `revision` (unless it is a delete) and every later one.
            let visible = versions.partition_point(|(rev, _)| *rev <= revision);
            let keep_from = match visible.checked_sub(1) {
                Some(i) if versions[i].1.is_some() => i,
                _ => visible,
            };
            versions.drain(..keep_from);
            !versions.is_empty()
        });
        self.log = self.log.split_off(&revision);
        self.compact_revision = revision;
        Ok(())
    }

    fn events(&self, range: &KeyRange, from: Revision, to: Revision) -> Result<Vec<Event>> {
        if from < self.compact_revision {
            return Err(Error::Compacted { requested: from, compacted: self.compact_revision });
        }
        Ok(self
            .log
            .range(from..=to)
            .flat_map(|(_, events)| events)
            .filter(|e| range.contains(&e.kv.key))
            .cloned()
            .collect())
    }

    fn due(&self, now_ms: i64) -> Vec<(String, Revision)> {
        self.expiries
            .iter()
            .take_while(|(deadline, _)| *deadline <= now_ms)
            .filter_map(|(_, key)| {
                let (rev, kv) = self.keys.get(key)?.last()?;
                kv.as_ref().map(|_| (key.clone(), *rev))
            })
            .collect()
    }
}

impl ReadView for &State {
    fn read(&mut self, key: &str) -> Result<Option<KeyValue>> {
        Ok(self.keys.get(key).and_then(|versions| versions.last()).and_then(|(_, kv)| kv.clone()))
    }
}

#[async_trait]
impl EventLog for Shared {
    async fn events(&self, range: &KeyRange, from: Revision, to: Revision) -> Result<Vec<Event>> {
        self.state.read().events(range, from, to)
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
        let revision = state.revision + 1;
        let executed = txn::execute(&txn, revision, txn::now_ms(), &mut &*state)?;
        if !executed.events.is_empty() {
            state.apply(revision, &executed.events);
            // Published under the lock: watches see revisions in order.
            self.shared.hub.publish(revision, revision, executed.events);
        }
        Ok(executed.response)
    }

    async fn watch(&self, request: WatchRequest) -> Result<WatchStream> {
        let compacted = self.shared.state.read().compact_revision;
        if request.start_revision != 0 && request.start_revision < compacted {
            return Err(Error::Compacted { requested: request.start_revision, compacted });
        }
        Ok(self.shared.hub.watch(self.shared.clone(), request))
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.shared.state.write().compact(revision)
    }

    async fn status(&self) -> Result<StoreStatus> {
        let state = self.shared.state.read();
        Ok(StoreStatus { revision: state.revision, compact_revision: state.compact_revision })
    }
}
