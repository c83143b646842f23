//! [`RocksStore`]: the durable embedded backend.
//!
//! # Write path
//!
//! Every write is a transaction handed to one committer thread. The committer
//! takes all the transactions waiting for it (a *commit group*), evaluates them
//! in order against the current state plus the group's earlier writes, gives
//! each writing transaction the next revision, and writes the whole group as
//! one RocksDB `WriteBatch` with a synced WAL. Only then are the callers
//! answered and the changes published to watches. While one group is being
//! synced the next one queues up, so one `fdatasync` serves many writers and
//! throughput grows with concurrency (group commit).
//!
//! # Read path
//!
//! Reads at the current revision come from the `kv` family through a RocksDB
//! snapshot (consistent with the revision counter, which is written in the same
//! batch); reads at a past revision and watch replays come from the `hist` and
//! `log` families. See [`codec`] for the layout.

mod codec;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rocksdb::{
    BlockBasedOptions, ColumnFamily, ColumnFamilyDescriptor, DB, DBCompressionType, Direction, IteratorMode, Options,
    ReadOptions, WriteBatch, WriteOptions,
};
use tokio::sync::{mpsc, oneshot};

use self::codec::LogEntry;
use crate::backend::{self, EventLog, ReadView, WatchHub};
use crate::background::StoreOptions;
use crate::error::{Error, Result};
use crate::kv::{Event, EventKind, KeyRange, KeyValue, Revision};
use crate::store::{RangeRequest, RangeResponse, Store, StoreStatus};
use crate::txn::{Txn, TxnResponse};
use crate::watch::{WatchRequest, WatchStream};

const CF_KV: &str = "kv";
const CF_HIST: &str = "hist";
const CF_LOG: &str = "log";
const CF_TTL: &str = "ttl";
const CF_META: &str = "meta";
/// Every column family.
const COLUMN_FAMILIES: [&str; 5] = [CF_KV, CF_HIST, CF_LOG, CF_TTL, CF_META];

/// Most transactions in one commit group.
const MAX_GROUP: usize = 1024;

/// Transactions that may wait for the committer before writers are slowed down.
const QUEUE_DEPTH: usize = 8192;

/// Deletes per write batch while compacting.
const COMPACTION_CHUNK: usize = 10_000;

/// Where and how a [`RocksStore`] keeps its data.
///
/// Built with [`new`](Self::new) (the directory is required) and the chained
/// setters, so that a new setting is not a breaking change:
///
/// ```
/// use orchestra_store::{RocksOptions, StoreOptions};
///
/// let options = RocksOptions::new("/var/lib/orchestra/db").store_options(StoreOptions::default().compaction(None));
/// assert_eq!(options.store.compaction, None);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RocksOptions {
    /// The RocksDB directory (created if missing).
    pub path: PathBuf,
    /// Compaction and TTL settings.
    pub store: StoreOptions,
}

impl RocksOptions {
    /// Default options for a store in `path`.
    pub fn new(path: impl Into<PathBuf>) -> RocksOptions {
        RocksOptions { path: path.into(), store: StoreOptions::default() }
    }

    /// Replaces the compaction and TTL settings.
    pub fn store_options(mut self, options: StoreOptions) -> RocksOptions {
        self.store = options;
        self
    }
}

/// The durable embedded [`Store`], on RocksDB. Cloning gives another handle to
/// the same store; the database closes when the last handle (and the last
/// watch reading its history) is dropped.
#[derive(Clone)]
pub struct RocksStore {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for RocksStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksStore")
            .field("path", &self.shared.core.db.path())
            .field("revision", &self.shared.core.revision.load(Ordering::Acquire))
            .finish()
    }
}

/// What the handles share.
struct Shared {
    core: Arc<Core>,
    hub: Arc<WatchHub>,
    commands: Option<mpsc::Sender<Request>>,
    committer: Option<JoinHandle<()>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Closing the queue stops the committer after the writes already queued.
        self.commands.take();
        if let Some(committer) = self.committer.take() {
            let _ = committer.join();
        }
    }
}

/// The database and the revisions, shared by the committer, readers and watches.
struct Core {
    db: DB,
    /// The last durable, readable revision.
    revision: AtomicI64,
    compact_revision: AtomicI64,
    /// Serializes compactions.
    compacting: parking_lot::Mutex<()>,
}

/// A transaction waiting for the committer.
struct Request {
    txn: Txn,
    reply: oneshot::Sender<Result<TxnResponse>>,
}

fn storage(e: rocksdb::Error) -> Error {
    Error::Storage(e.into_string())
}

impl RocksStore {
    /// The name of the thread that commits every write, one group at a
    /// time; profilers and CPU meters find it by this name (Linux keeps the
    /// first 15 bytes of a thread's name).
    pub const COMMIT_THREAD: &'static str = "store-commit";

    /// Opens (or creates) the store in `path` with default options.
    pub async fn open(path: impl AsRef<Path>) -> Result<RocksStore> {
        RocksStore::open_with(RocksOptions::new(path.as_ref())).await
    }

    /// Opens (or creates) a store. Recovers every acknowledged write, the
    /// revision counter and the TTL deadlines. Must be called inside a Tokio
    /// runtime, which runs TTL expiry and compaction.
    pub async fn open_with(options: RocksOptions) -> Result<RocksStore> {
        let path = options.path.clone();
        let core = tokio::task::spawn_blocking(move || Core::open(&path))
            .await
            .map_err(|e| Error::Storage(format!("open task failed: {e}")))??;
        let core = Arc::new(core);
        let hub = Arc::new(WatchHub::new(core.revision.load(Ordering::Acquire)));
        let (commands, queue) = mpsc::channel(QUEUE_DEPTH);
        let committer = {
            let (core, hub) = (core.clone(), hub.clone());
            std::thread::Builder::new()
                .name(RocksStore::COMMIT_THREAD.into())
                .spawn(move || run_committer(&core, &hub, queue))
                .map_err(|e| Error::Storage(format!("cannot start the committer thread: {e}")))?
        };
        let shared = Arc::new(Shared { core, hub, commands: Some(commands), committer: Some(committer) });
        backend::spawn_background(
            &shared,
            &options.store,
            |shared, now_ms| shared.core.due(now_ms),
            |shared| RocksStore { shared },
        );
        Ok(RocksStore { shared })
    }

    /// The directory the store lives in.
    pub fn path(&self) -> &Path {
        self.shared.core.db.path()
    }

    /// Writes the engine's in-memory tables to disk files and waits until
    /// they are written. Every acknowledged write is durable without this
    /// (the write-ahead log holds it); it is for callers that want the engine
    /// in a settled state, such as benchmarks between measured runs.
    pub async fn flush(&self) -> Result<()> {
        let core = self.shared.core.clone();
        tokio::task::spawn_blocking(move || {
            let families: Vec<_> = COLUMN_FAMILIES.iter().map(|name| core.cf(name)).collect();
            core.db.flush_cfs_opt(&families, &rocksdb::FlushOptions::default()).map_err(storage)
        })
        .await
        .map_err(|e| Error::Storage(format!("flush task failed: {e}")))?
    }

    /// Whether the engine has background work running or due: table
    /// flushes and the engine's own compactions (not the revision history
    /// compaction of [`crate::Store::compact`]).
    pub fn background_busy(&self) -> Result<bool> {
        let core = &self.shared.core;
        let int =
            |value: std::result::Result<Option<u64>, rocksdb::Error>| value.map(|v| v.unwrap_or(0)).map_err(storage);
        let running = int(core.db.property_int_value("rocksdb.num-running-flushes"))?
            + int(core.db.property_int_value("rocksdb.num-running-compactions"))?;
        let mut pending = 0;
        for name in COLUMN_FAMILIES {
            let cf = core.cf(name);
            pending += int(core.db.property_int_value_cf(cf, "rocksdb.mem-table-flush-pending"))?
                + int(core.db.property_int_value_cf(cf, "rocksdb.compaction-pending"))?;
        }
        Ok(running + pending > 0)
    }
}

impl Core {
    fn open(path: &Path) -> Result<Core> {
        let mut options = Options::default();
        options.create_if_missing(true);
        options.create_missing_column_families(true);
        options.increase_parallelism(2);
        options.set_max_background_jobs(2);
        options.set_compression_type(DBCompressionType::Lz4);
        options.set_bottommost_compression_type(DBCompressionType::Lz4);
        // Write-ahead log files are reused rather than created: a commit
        // then writes over bytes the file already has, so its `fdatasync`
        // need not also write the inode for a new file size. Every commit
        // syncs, so this is a fixed cost per commit group (a fifth more puts
        // a second for a lone writer on ext4). Recovery stays
        // point-in-time (the default), which recycled logs require.
        options.set_recycle_log_file_num(4);
        let mut point_lookups = Options::default();
        point_lookups.set_compression_type(DBCompressionType::Lz4);
        // A bloom filter over the in-memory table's keys: a create reads its
        // key first, and a new key is absent, which the filter answers
        // without searching the table (the memtable's share of the
        // committer's time fell from 9 % to 1.4 %). Sized at 2 % of the
        // write buffer: about 1.3 MiB a memtable.
        point_lookups.set_memtable_whole_key_filtering(true);
        point_lookups.set_memtable_prefix_bloom_ratio(0.02);
        let mut table = BlockBasedOptions::default();
        table.set_bloom_filter(10.0, false);
        point_lookups.set_block_based_table_factory(&table);
        let families = [
            ColumnFamilyDescriptor::new(CF_KV, point_lookups.clone()),
            ColumnFamilyDescriptor::new(CF_HIST, point_lookups),
            ColumnFamilyDescriptor::new(CF_LOG, options.clone()),
            ColumnFamilyDescriptor::new(CF_TTL, options.clone()),
            ColumnFamilyDescriptor::new(CF_META, options.clone()),
        ];
        let db = DB::open_cf_descriptors(&options, path, families).map_err(storage)?;
        let meta = |name: &[u8]| -> Result<i64> {
            let cf = db.cf_handle(CF_META).expect("meta family exists");
            db.get_cf(cf, name).map_err(storage)?.map_or(Ok(0), |v| codec::decode_i64(&v))
        };
        let revision = meta(codec::META_REVISION)?;
        let compact_revision = meta(codec::META_COMPACT)?;
        tracing::debug!(path = %path.display(), revision, compact_revision, "opened RocksStore");
        Ok(Core {
            revision: AtomicI64::new(revision),
            compact_revision: AtomicI64::new(compact_revision),
            compacting: parking_lot::Mutex::new(()),
            db,
        })
    }

    /// The current and compaction revisions.
    fn status(&self) -> StoreStatus {
        StoreStatus {
            revision: self.revision.load(Ordering::Acquire),
            compact_revision: self.compact_revision.load(Ordering::Acquire),
        }
    }

    fn cf(&self, name: &str) -> &ColumnFamily {
        self.db.cf_handle(name).expect("column families are created at open")
    }

    /// Resolves a read revision (0: current) against the snapshot's current
    /// revision and the compaction revision. The compaction revision is read
    /// after the snapshot was taken, so a compaction that could have removed
    /// what the snapshot holds is always noticed.
    fn read_revision(&self, requested: Revision, current: Revision) -> Result<Revision> {
        let compact_revision = self.compact_revision.load(Ordering::Acquire);
        StoreStatus { revision: current, compact_revision }.read_revision(requested)
    }

    fn range(&self, request: &RangeRequest) -> Result<RangeResponse> {
        let snapshot = self.db.snapshot();
        let current = snapshot
            .get_cf(self.cf(CF_META), codec::META_REVISION)
            .map_err(storage)?
            .map_or(Ok(0), |v| codec::decode_i64(&v))?;
        let revision = self.read_revision(request.revision, current)?;
        let mut response = RangeResponse { kvs: Vec::new(), more: false, count: 0, revision };
        if request.range.is_empty() {
            return Ok(response);
        }
        // `record` is a `kv` value (`hist == false`) or a `hist` value, which
        // may mark a delete. Past the limit keys are only counted.
        let mut found = |key: &str, record: &[u8], hist: bool| -> Result<()> {
            let full = request.limit != 0 && response.kvs.len() >= request.limit;
            if full {
                if !hist || record.first() == Some(&1) {
                    response.count += 1;
                    response.more = true;
                }
                return Ok(());
            }
            let kv = if hist { codec::decode_hist(key, record)? } else { Some(codec::decode_kv(key, record)?) };
            if let Some(kv) = kv {
                response.count += 1;
                response.kvs.push(kv);
            }
            Ok(())
        };
        let start = request.range.start().as_bytes();
        if revision == current && request.range.is_single_key() {
            // A point read: RocksDB's own lookup (memtable seek, bloom
            // filters) instead of an iterator over every table.
            let key = request.range.start();
            if let Some(value) = snapshot.get_pinned_cf(self.cf(CF_KV), key.as_bytes()).map_err(storage)? {
                found(key, &value, false)?;
            }
        } else if revision == current {
            let cf = self.cf(CF_KV);
            for item in snapshot.iterator_cf_opt(
                cf,
                bounded(&request.range, false),
                IteratorMode::From(start, Direction::Forward),
            ) {
                let (key, value) = item.map_err(storage)?;
                let key = std::str::from_utf8(&key).map_err(|_| Error::Storage("corrupt key".into()))?;
                if request.range.is_past_end(key) {
                    break;
                }
                if request.range.contains(key) {
                    found(key, &value, false)?;
                }
            }
        } else {
            // The history holds each key's versions in revision order: the
            // key's value at `revision` is its last version at or before it.
            let cf = self.cf(CF_HIST);
            let mut candidate: Option<(String, Box<[u8]>)> = None;
            for item in snapshot.iterator_cf_opt(
                cf,
                bounded(&request.range, true),
                IteratorMode::From(start, Direction::Forward),
            ) {
                let (hist_key, value) = item.map_err(storage)?;
                let (key, rev) = codec::split_hist_key(&hist_key)?;
                if request.range.is_past_end(key) {
                    break;
                }
                if candidate.as_ref().is_some_and(|(k, _)| k != key) {
                    let (k, v) = candidate.take().expect("checked");
                    found(&k, &v, true)?;
                }
                if rev <= revision && request.range.contains(key) {
                    candidate = Some((key.to_owned(), value));
                }
            }
            if let Some((k, v)) = candidate {
                found(&k, &v, true)?;
            }
        }
        Ok(response)
    }

    /// The `hist` record of `key` at exactly `revision`.
    fn hist_at(&self, snapshot: &rocksdb::Snapshot<'_>, key: &str, revision: Revision) -> Result<Option<KeyValue>> {
        let bytes = snapshot.get_cf(self.cf(CF_HIST), codec::hist_key(key, revision)).map_err(storage)?;
        match bytes {
            Some(bytes) => codec::decode_hist(key, &bytes),
            None => Err(Error::Storage(format!("history of {key:?} at revision {revision} is missing"))),
        }
    }

    fn events(&self, range: &KeyRange, from: Revision, to: Revision) -> Result<Vec<Event>> {
        let snapshot = self.db.snapshot();
        let compacted = self.compact_revision.load(Ordering::Acquire);
        if from < compacted {
            return Err(Error::Compacted { requested: from, compacted });
        }
        let mut events = Vec::new();
        let start = codec::log_key(from);
        let mut options = ReadOptions::default();
        if to < Revision::MAX {
            options.set_iterate_upper_bound(codec::log_key(to + 1));
        }
        for item in snapshot.iterator_cf_opt(self.cf(CF_LOG), options, IteratorMode::From(&start, Direction::Forward)) {
            let (rev, entries) = item.map_err(storage)?;
            let rev = codec::decode_i64(&rev)?;
            if rev > to {
                break;
            }
            for entry in codec::decode_log(&entries)? {
                if !range.contains(&entry.key) {
                    continue;
                }
                let prev_kv = match entry.prev_revision {
                    0 => None,
                    prev => self.hist_at(&snapshot, &entry.key, prev)?,
                };
                let event = match (entry.kind, prev_kv) {
                    (EventKind::Put, prev_kv) => {
                        let kv = self.hist_at(&snapshot, &entry.key, rev)?.ok_or_else(|| {
                            Error::Storage(format!("history of {:?} at {rev} is a delete", entry.key))
                        })?;
                        Event { kind: EventKind::Put, kv, prev_kv }
                    }
                    (EventKind::Delete, Some(prev)) => Event::deleted(prev, rev),
                    (EventKind::Delete, None) => {
                        return Err(Error::Storage(format!(
                            "delete of {:?} at {rev} has no previous value",
                            entry.key
                        )));
                    }
                };
                events.push(event);
            }
        }
        Ok(events)
    }

    /// Keys whose deadline has passed, with the mod revision the deadline belongs to.
    fn due(&self, now_ms: i64) -> Result<Vec<(String, Revision)>> {
        let mut due = Vec::new();
        for item in self.db.iterator_cf(self.cf(CF_TTL), IteratorMode::Start) {
            let (key, revision) = item.map_err(storage)?;
            let (deadline, key) = codec::split_ttl_key(&key)?;
            if deadline > now_ms || due.len() >= 1000 {
                break;
            }
            due.push((key.to_owned(), codec::decode_i64(&revision)?));
        }
        Ok(due)
    }

    fn compact(&self, revision: Revision) -> Result<()> {
        let _one_at_a_time = self.compacting.lock();
        if revision <= self.compact_revision.load(Ordering::Acquire) {
            return Ok(());
        }
        let current = self.revision.load(Ordering::Acquire);
        if revision > current {
            return Err(Error::FutureRevision { requested: revision, current });
        }
        // Make the new compaction revision durable and visible before deleting
        // anything, so no reader can see a half-compacted history.
        let mut sync = WriteOptions::default();
        sync.set_sync(true);
        let mut batch = WriteBatch::default();
        batch.put_cf(self.cf(CF_META), codec::META_COMPACT, revision.to_be_bytes());
        self.db.write_opt(batch, &sync).map_err(storage)?;
        self.compact_revision.store(revision, Ordering::Release);

        // Keep, for every key, the version visible just before `revision` (a
        // watch from `revision` needs it as the previous value of the first
        // change) unless it is a delete, and everything later.
        let boundary = revision - 1;
        let hist = self.cf(CF_HIST);
        let mut batch = WriteBatch::default();
        let mut group: Vec<(Box<[u8]>, bool)> = Vec::new();
        let mut group_key = String::new();
        let flush_group = |group: &mut Vec<(Box<[u8]>, bool)>, batch: &mut WriteBatch| {
            if let Some((_, is_delete)) = group.last() {
                let keep_last = !is_delete;
                let drop = if keep_last { group.len() - 1 } else { group.len() };
                for (k, _) in group.drain(..drop) {
                    batch.delete_cf(hist, k);
                }
            }
            group.clear();
        };
        for item in self.db.iterator_cf(hist, IteratorMode::Start) {
            let (hist_key, value) = item.map_err(storage)?;
            let (key, rev) = codec::split_hist_key(&hist_key)?;
            if key != group_key {
                flush_group(&mut group, &mut batch);
                group_key = key.to_owned();
            }
            if rev <= boundary {
                group.push((hist_key.clone(), value.first() == Some(&0)));
            }
            if batch.len() >= COMPACTION_CHUNK {
                self.db.write(std::mem::take(&mut batch)).map_err(storage)?;
            }
        }
        flush_group(&mut group, &mut batch);
        batch.delete_range_cf(self.cf(CF_LOG), codec::log_key(0), codec::log_key(revision));
        self.db.write(batch).map_err(storage)?;
        Ok(())
    }

    /// Adds the changes of one revision to `batch`.
    fn write_events(&self, batch: &mut WriteBatch, revision: Revision, events: &[Event]) {
        let mut entries = Vec::with_capacity(events.len());
        let mut buf = Vec::new();
        for event in events {
            let key = &event.kv.key;
            if let Some(prev) = &event.prev_kv
                && let Some(deadline) = prev.expires_at_ms
            {
                batch.delete_cf(self.cf(CF_TTL), codec::ttl_key(deadline, key));
            }
            match event.kind {
                EventKind::Put => {
                    buf.clear();
                    codec::encode_kv(&event.kv, &mut buf);
                    batch.put_cf(self.cf(CF_KV), key.as_bytes(), &buf);
                    batch.put_cf(self.cf(CF_HIST), codec::hist_key(key, revision), codec::encode_hist(Some(&event.kv)));
                    if let Some(deadline) = event.kv.expires_at_ms {
                        batch.put_cf(self.cf(CF_TTL), codec::ttl_key(deadline, key), revision.to_be_bytes());
                    }
                }
                EventKind::Delete => {
                    batch.delete_cf(self.cf(CF_KV), key.as_bytes());
                    batch.put_cf(self.cf(CF_HIST), codec::hist_key(key, revision), codec::encode_hist(None));
                }
            }
            entries.push(LogEntry {
                kind: event.kind,
                key: key.clone(),
                prev_revision: event.prev_kv.as_ref().map_or(0, |p| p.mod_revision),
            });
        }
        batch.put_cf(self.cf(CF_LOG), codec::log_key(revision), codec::encode_log(&entries));
    }
}

/// Pending writes layered over a [`ReadView`]: the state a transaction sees
/// after the earlier transactions of the same commit group.
struct Overlay<V> {
    base: V,
    pending: HashMap<String, Option<KeyValue>>,
}

impl<V: ReadView> Overlay<V> {
    fn new(base: V) -> Overlay<V> {
        Overlay { base, pending: HashMap::new() }
    }

    /// Records the effect of `events`.
    fn apply(&mut self, events: &[Event]) {
        for event in events {
            let value = match event.kind {
                EventKind::Put => Some(event.kv.clone()),
                EventKind::Delete => None,
            };
            self.pending.insert(event.kv.key.clone(), value);
        }
    }
}

impl<V: ReadView> ReadView for Overlay<V> {
    fn read(&mut self, key: &str) -> Result<Option<KeyValue>> {
        match self.pending.get(key) {
            Some(value) => Ok(value.clone()),
            None => self.base.read(key),
        }
    }
}

/// The committer's view of the current state: the `kv` family. It is the only
/// writer, so no snapshot is needed.
struct Current<'a>(&'a Core);

impl ReadView for Current<'_> {
    fn read(&mut self, key: &str) -> Result<Option<KeyValue>> {
        let bytes = self.0.db.get_pinned_cf(self.0.cf(CF_KV), key.as_bytes()).map_err(storage)?;
        bytes.map(|b| codec::decode_kv(key, &b)).transpose()
    }
}

/// The committer thread: one commit group at a time until the queue closes.
fn run_committer(core: &Core, hub: &WatchHub, mut queue: mpsc::Receiver<Request>) {
    let mut group = Vec::with_capacity(MAX_GROUP);
    while let Some(first) = next_request(&mut queue) {
        group.push(first);
        while group.len() < MAX_GROUP {
            match queue.try_recv() {
                Ok(request) => group.push(request),
                Err(_) => break,
            }
        }
        commit_group(core, hub, &mut group);
    }
}

/// How long the committer polls for the next transaction before it sleeps.
///
/// A writer that waits for its commit usually sends its next transaction
/// within tens of microseconds of the answer. Waking a sleeping thread costs
/// about as much (more on virtual machines, where it is an interrupt between
/// processors), and a lone writer pays it on every put; polling briefly first
/// takes that hand-off off the write path. Under load the queue is never
/// empty and the committer never polls.
const POLL_BEFORE_SLEEP: Duration = Duration::from_micros(100);

/// The next transaction: polled for [`POLL_BEFORE_SLEEP`], then waited for.
/// `None` once the queue is closed.
fn next_request(queue: &mut mpsc::Receiver<Request>) -> Option<Request> {
    let start = Instant::now();
    loop {
        match queue.try_recv() {
            Ok(request) => return Some(request),
            Err(mpsc::error::TryRecvError::Disconnected) => return None,
            Err(mpsc::error::TryRecvError::Empty) if start.elapsed() < POLL_BEFORE_SLEEP => std::thread::yield_now(),
            Err(mpsc::error::TryRecvError::Empty) => return queue.blocking_recv(),
        }
    }
}

fn commit_group(core: &Core, hub: &WatchHub, group: &mut Vec<Request>) {
    let first = core.revision.load(Ordering::Acquire) + 1;
    let mut next = first;
    let now = backend::now_ms();
    let mut view = Overlay::new(Current(core));
    let mut batch = WriteBatch::default();
    let mut published = Vec::new();
    let mut results = Vec::with_capacity(group.len());
    for request in group.iter() {
        let result = backend::execute(&request.txn, next, now, &mut view).map(|executed| {
            if !executed.events.is_empty() {
                core.write_events(&mut batch, next, &executed.events);
                view.apply(&executed.events);
                published.extend(executed.events);
                next += 1;
            }
            executed.response
        });
        results.push(result);
    }
    let last = next - 1;
    if last >= first {
        batch.put_cf(core.cf(CF_META), codec::META_REVISION, last.to_be_bytes());
        let mut sync = WriteOptions::default();
        sync.set_sync(true);
        if let Err(e) = core.db.write_opt(batch, &sync) {
            // Nothing of the group is acknowledged, reads included: they may
            // have seen the group's own writes.
            let error = storage(e);
            tracing::error!(%error, "commit failed");
            for request in group.drain(..) {
                let _ = request.reply.send(Err(error.clone()));
            }
            return;
        }
        core.revision.store(last, Ordering::Release);
        hub.publish(first, last, published);
    }
    for (request, result) in group.drain(..).zip(results) {
        // The caller may have given up waiting; the write stands regardless.
        let _ = request.reply.send(result);
    }
}

/// Read options whose iterator stops at the end of `range` instead of
/// stepping onto the next key (and over the tombstones before it). In the
/// `hist` family (`hist == true`) a key's records sort after the key itself
/// (`key \0 revision`), so the bound moves past every revision suffix.
fn bounded(range: &KeyRange, hist: bool) -> ReadOptions {
    let mut options = ReadOptions::default();
    if let Some(mut bound) = range.upper_bound() {
        if hist {
            bound.extend_from_slice(&[u8::MAX; 9]);
        }
        options.set_iterate_upper_bound(bound);
    }
    options
}

/// The history a lagging watch reads, off the async threads.
struct History(Arc<Core>);

#[async_trait]
impl EventLog for History {
    async fn events(&self, range: &KeyRange, from: Revision, to: Revision) -> Result<Vec<Event>> {
        let (core, range) = (self.0.clone(), range.clone());
        tokio::task::spawn_blocking(move || core.events(&range, from, to))
            .await
            .map_err(|e| Error::Storage(format!("history read failed: {e}")))?
    }
}

#[async_trait]
impl Store for RocksStore {
    async fn range(&self, request: RangeRequest) -> Result<RangeResponse> {
        if request.revision == 0 && (request.range.is_single_key() || request.limit > 0 && request.limit <= 500) {
            // Small reads at the current revision: cheaper inline than on a blocking thread.
            return self.shared.core.range(&request);
        }
        let core = self.shared.core.clone();
        tokio::task::spawn_blocking(move || core.range(&request))
            .await
            .map_err(|e| Error::Storage(format!("range task failed: {e}")))?
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        txn.validate()?;
        let commands = self.shared.commands.as_ref().expect("open until dropped");
        let (reply, response) = oneshot::channel();
        commands.send(Request { txn, reply }).await.map_err(|_| Error::Unavailable("the store is shut down".into()))?;
        response.await.map_err(|_| Error::Unavailable("the store is shut down".into()))?
    }

    async fn watch(&self, request: WatchRequest) -> Result<WatchStream> {
        self.shared.core.status().check_watch_from(request.start_revision)?;
        Ok(self.shared.hub.watch(Arc::new(History(self.shared.core.clone())), request))
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let core = self.shared.core.clone();
        tokio::task::spawn_blocking(move || core.compact(revision))
            .await
            .map_err(|e| Error::Storage(format!("compaction task failed: {e}")))?
    }

    async fn status(&self) -> Result<StoreStatus> {
        Ok(self.shared.core.status())
    }
}
