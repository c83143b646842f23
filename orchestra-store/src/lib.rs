//! # orchestra-store
//!
//! An etcd-like MVCC key-value store with watch: the storage layer under
//! Orchestra's API server. It knows nothing of Kubernetes objects; it stores
//! bytes under `/`-rooted keys with the semantics the API server relies on
//! from etcd — one global revision, optimistic concurrency on mod revisions,
//! consistent paginated reads at a revision, TTL keys, gap-free watches with
//! previous values and progress notifications, and compaction.
//!
//! Where this crate sits among Orchestra's crates, and the rule that only
//! the API server touches the store: the repository's
//! [ARCHITECTURE.md](https://github.com/orchestra-rs/orchestra/blob/main/ARCHITECTURE.md).
//!
//! * [`Store`] — the trait every backend implements (object safe).
//! * [`MemStore`] — the full semantics in memory.
//! * `RocksStore` (feature `rocksdb`, on by default) — the durable embedded
//!   backend: WAL-synced group commit, MVCC history in RocksDB.
//! * [`FencedStore`] — a wrapper whose writes land only while a guard key
//!   allows them (fencing tokens).
//! * [`backend`] — the building blocks of a backend of your own: watch
//!   fan-out, transaction evaluation, in-memory MVCC history, TTL expiry.
//! * `testing::Suite` (feature `testing`) — the conformance suite every
//!   backend runs.
//!
//! ```
//! # async fn demo() -> orchestra_store::Result<()> {
//! use orchestra_store::{KeyRange, MemStore, Store, WatchRequest};
//! use futures::StreamExt;
//!
//! let store = MemStore::new();
//! let mut watch = store.watch(WatchRequest::new(KeyRange::prefix("/registry/pods/"))).await?;
//! let created = store.create("/registry/pods/default/web", "v1".into(), None).await?;
//! store.update(&created.key, "v2".into(), created.mod_revision, None).await?;
//! let first = watch.next().await.unwrap()?;
//! assert_eq!(first.events[0].kv.value, "v1");
//! # Ok(()) }
//! # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
//! ```

pub mod backend;
mod background;
mod error;
mod fence;
mod history;
mod kv;
pub mod limits;
mod mem;
mod store;
mod txn;
mod watch;

#[cfg(feature = "rocksdb")]
mod rocks;
#[cfg(feature = "testing")]
pub mod testing;

pub use background::{CompactionPolicy, StoreOptions};
pub use error::{Error, Result};
pub use fence::{FenceCheck, FencedStore};
pub use kv::{Event, EventKind, KeyRange, KeyValue, Revision};
pub use mem::MemStore;
#[cfg(feature = "rocksdb")]
pub use rocks::{RocksOptions, RocksStore};
pub use store::{RangeRequest, RangeResponse, Store, StoreStatus};
pub use txn::{Compare, CompareOp, CompareTarget, Op, OpResponse, Txn, TxnResponse};
pub use watch::{EventFilter, WatchRequest, WatchResponse, WatchStream};
