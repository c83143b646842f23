//! The [`Store`] trait: an etcd-like MVCC key-value store with watch.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use crate::error::{Error, Result};
use crate::kv::{KeyRange, KeyValue, Revision};
use crate::txn::{Compare, CompareOp, Op, OpResponse, Txn, TxnResponse};
use crate::watch::{WatchRequest, WatchStream};

/// A read of a key range, at the current revision or at a past one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeRequest {
    /// The keys to read.
    pub range: KeyRange,
    /// The revision to read at; 0 reads the current revision.
    pub revision: Revision,
    /// At most this many keys; 0 for no limit.
    pub limit: usize,
}

impl RangeRequest {
    /// Reads every key of `range` at the current revision.
    pub fn new(range: KeyRange) -> RangeRequest {
        RangeRequest { range, revision: 0, limit: 0 }
    }

    /// Reads at `revision` instead.
    pub fn at_revision(mut self, revision: Revision) -> RangeRequest {
        self.revision = revision;
        self
    }

    /// Returns at most `limit` keys.
    pub fn with_limit(mut self, limit: usize) -> RangeRequest {
        self.limit = limit;
        self
    }

    /// The request for the page after `response`, or `None` if it was the
    /// last. The next page reads at the same revision as the first, so pages
    /// together form one consistent snapshot.
    pub fn next_page(&self, response: &RangeResponse) -> Option<RangeRequest> {
        let last = response.kvs.last()?;
        response.more.then(|| RangeRequest {
            range: self.range.after(&last.key),
            revision: response.revision,
            limit: self.limit,
        })
    }
}

/// The result of a [`RangeRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeResponse {
    /// The keys found, in key order.
    pub kvs: Vec<KeyValue>,
    /// True if the limit cut the result short.
    pub more: bool,
    /// How many keys the range holds in all (ignoring the limit).
    pub count: usize,
    /// The revision the read was served at.
    pub revision: Revision,
}

/// The store's revisions. The default is a fresh store's: both 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStatus {
    /// The revision of the last write.
    pub revision: Revision,
    /// Reads and watches at or after this revision are served; older ones
    /// fail with [`Error::Compacted`]. 0 before the first compaction.
    pub compact_revision: Revision,
}

/// The checks of the revisions a request names, for backends: the status
/// is their revision counter and compaction revision.
impl StoreStatus {
    /// Resolves the revision a read asks for ([`RangeRequest::revision`];
    /// 0 is the current revision): [`Error::FutureRevision`] if it is after
    /// the current revision, [`Error::Compacted`] if it is before the
    /// compaction revision.
    ///
    /// ```
    /// use orchestra_store::{Error, StoreStatus};
    ///
    /// let status = StoreStatus { revision: 9, compact_revision: 4 };
    /// assert_eq!(status.read_revision(0), Ok(9));
    /// assert_eq!(status.read_revision(4), Ok(4));
    /// assert!(matches!(status.read_revision(3), Err(Error::Compacted { .. })));
    /// assert!(matches!(status.read_revision(10), Err(Error::FutureRevision { .. })));
    /// ```
    pub fn read_revision(&self, requested: Revision) -> Result<Revision> {
        match requested {
            0 => Ok(self.revision),
            r if r > self.revision => Err(Error::FutureRevision { requested: r, current: self.revision }),
            r if r < self.compact_revision => Err(Error::Compacted { requested: r, compacted: self.compact_revision }),
            r => Ok(r),
        }
    }

    /// Checks that a watch may start, or catch up, at `revision`:
    /// [`Error::Compacted`] if the history before it is gone. 0 (from now on)
    /// and revisions not written yet always pass.
    pub fn check_watch_from(&self, revision: Revision) -> Result<()> {
        if revision != 0 && revision < self.compact_revision {
            return Err(Error::Compacted { requested: revision, compacted: self.compact_revision });
        }
        Ok(())
    }

    /// Checks a compaction to `revision` ([`Store::compact`]): `Ok(true)` if
    /// it drops history, `Ok(false)` if the history is compacted that far
    /// already, [`Error::FutureRevision`] if `revision` is after the current
    /// revision.
    pub fn check_compact(&self, revision: Revision) -> Result<bool> {
        if revision <= self.compact_revision {
            return Ok(false);
        }
        if revision > self.revision {
            return Err(Error::FutureRevision { requested: revision, current: self.revision });
        }
        Ok(true)
    }
}

/// An etcd-like MVCC key-value store with watch.
///
/// The semantics are those a Kubernetes API server relies on from etcd:
///
/// * **Revisions.** One global revision is bumped by every write (a
///   transaction that writes takes exactly one revision, whatever it wrote).
///   Every key carries its create revision, mod revision and version.
/// * **Durability.** A write returns only once it is durable (a synced WAL,
///   a Raft majority).
/// * **Linearizability.** A read started after a write returned sees that
///   write; so does a watch started at a revision the write is part of.
/// * **Watch.** A watch delivers every change after its start revision, in
///   revision order, exactly once, with the previous value; see
///   [`WatchRequest`].
/// * **Compaction.** History older than the compaction revision is dropped;
///   reading or watching before it fails with [`Error::Compacted`].
///
/// Backends implement five methods; the convenience writes are transactions
/// built by the provided methods. The trait is object safe: an assembly that
/// picks its backend at run time holds an `Arc<dyn Store>`. Every backend
/// passes `testing::Suite` (feature `testing`).
///
/// Code written against the trait runs on any backend; here a
/// compare-and-swap increment, retried on [`Error::Conflict`]:
///
/// ```
/// # async fn demo() -> orchestra_store::Result<()> {
/// use std::sync::Arc;
/// use orchestra_store::{Error, MemStore, Store};
///
/// async fn increment(store: &dyn Store, key: &str) -> orchestra_store::Result<u64> {
///     loop {
///         let Some(kv) = store.get(key).await? else {
///             match store.create(key, "1".into(), None).await {
///                 Err(Error::AlreadyExists { .. }) => continue,
///                 other => return other.map(|_| 1),
///             }
///         };
///         let next = std::str::from_utf8(&kv.value).unwrap().parse::<u64>().unwrap() + 1;
///         match store.update(key, next.to_string().into(), kv.mod_revision, None).await {
///             Err(Error::Conflict { .. }) => continue,
///             other => return other.map(|_| next),
///         }
///     }
/// }
///
/// let store: Arc<dyn Store> = Arc::new(MemStore::new());
/// assert_eq!(increment(&*store, "/counters/a").await?, 1);
/// assert_eq!(increment(&*store, "/counters/a").await?, 2);
/// assert_eq!(store.status().await?.revision, 2);
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
/// ```
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Reads a key range.
    async fn range(&self, request: RangeRequest) -> Result<RangeResponse>;

    /// Runs a transaction atomically.
    async fn txn(&self, txn: Txn) -> Result<TxnResponse>;

    /// Starts a watch. Fails with [`Error::Compacted`] at once if the start
    /// revision is already compacted.
    async fn watch(&self, request: WatchRequest) -> Result<WatchStream>;

    /// Drops the history before `revision`: afterwards reads at revisions
    /// `< revision` fail with [`Error::Compacted`]. Compacting to a revision
    /// at or below the current compaction revision does nothing; a revision
    /// above the current one fails with [`Error::FutureRevision`].
    async fn compact(&self, revision: Revision) -> Result<()>;

    /// The current and compaction revisions (a linearizable read).
    async fn status(&self) -> Result<StoreStatus>;

    /// True if the value of `key` at mod revision `revision` would be
    /// stored differently were it written again now: a store that
    /// transforms values says so when the transformation has changed since
    /// (an encryption key rotated out of the writing position). The API
    /// server then writes an update that changes nothing instead of
    /// skipping it, so that rewriting every object re-encrypts it, as
    /// upstream's storage does for a "stale" value. Stores that keep values
    /// as written answer false, the default; decorators ask what they wrap.
    /// A key that is gone, or written since `revision`, is not stale.
    async fn stale(&self, key: &str, revision: Revision) -> Result<bool> {
        let _ = (key, revision);
        Ok(false)
    }

    /// Reads one key at the current revision.
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        let response = self.range(RangeRequest::new(KeyRange::key(key))).await?;
        Ok(response.kvs.into_iter().next())
    }

    /// Writes `key` unconditionally and returns the new key-value.
    async fn put(&self, key: &str, value: Bytes, ttl: Option<Duration>) -> Result<KeyValue> {
        let txn = Txn::new().and_then([Op::Put { key: key.into(), value, ttl }]);
        let response = self.txn(txn).await?;
        match response.responses.into_iter().next() {
            Some(OpResponse::Put { kv, .. }) => Ok(kv),
            other => Err(unexpected(other)),
        }
    }

    /// Creates `key` if it is absent; [`Error::AlreadyExists`] otherwise.
    async fn create(&self, key: &str, value: Bytes, ttl: Option<Duration>) -> Result<KeyValue> {
        let txn = Txn::new().when([Compare::absent(key)]).and_then([Op::Put { key: key.into(), value, ttl }]);
        let response = self.txn(txn).await?;
        match response.responses.into_iter().next() {
            Some(OpResponse::Put { kv, .. }) if response.succeeded => Ok(kv),
            _ if !response.succeeded => Err(Error::AlreadyExists { key: key.into() }),
            other => Err(unexpected(other)),
        }
    }

    /// Replaces `key`'s value if its mod revision is still `expected`;
    /// [`Error::Conflict`] if it moved on, [`Error::NotFound`] if the key is gone.
    async fn update(&self, key: &str, value: Bytes, expected: Revision, ttl: Option<Duration>) -> Result<KeyValue> {
        let txn = Txn::new()
            .when([Compare::mod_revision(key, CompareOp::Equal, expected)])
            .and_then([Op::Put { key: key.into(), value, ttl }])
            .or_else([Op::get(key)]);
        let response = self.txn(txn).await?;
        match response.responses.into_iter().next() {
            Some(OpResponse::Put { kv, .. }) => Ok(kv),
            Some(OpResponse::Get { kv }) => Err(guard_failed(key, expected, kv)),
            other => Err(unexpected(other)),
        }
    }

    /// Deletes `key`, if `expected` is given only while its mod revision is
    /// still `expected`. Returns the deleted key-value; [`Error::NotFound`] if
    /// the key is absent, [`Error::Conflict`] if the revision moved on.
    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<KeyValue> {
        let txn = match expected {
            Some(rev) => Txn::new()
                .when([Compare::mod_revision(key, CompareOp::Equal, rev)])
                .and_then([Op::delete(key)])
                .or_else([Op::get(key)]),
            None => Txn::new().and_then([Op::delete(key)]),
        };
        let response = self.txn(txn).await?;
        match response.responses.into_iter().next() {
            Some(OpResponse::Delete { prev_kv: Some(prev) }) => Ok(prev),
            Some(OpResponse::Delete { prev_kv: None }) => Err(Error::NotFound { key: key.into() }),
            Some(OpResponse::Get { kv }) => Err(guard_failed(key, expected.unwrap_or(0), kv)),
            other => Err(unexpected(other)),
        }
    }
}

fn guard_failed(key: &str, expected: Revision, current: Option<KeyValue>) -> Error {
    match current {
        None => Error::NotFound { key: key.into() },
        Some(kv) => Error::Conflict { key: key.into(), expected, actual: kv.mod_revision },
    }
}

fn unexpected(response: Option<OpResponse>) -> Error {
    Error::Storage(format!("backend returned an unexpected transaction response: {response:?}"))
}
