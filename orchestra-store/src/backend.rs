//! Building blocks for [`Store`] backends: the parts [`MemStore`] is made of.
//!
//! A backend implements the five required methods of [`Store`]. What those
//! must guarantee — one revision per write, consistent reads at past
//! revisions, watches that deliver every change exactly once and in order,
//! TTL keys — is the same for every backend, and the parts here provide it:
//! a backend composes them around its own storage and a lock.
//!
//! # The state
//!
//! A backend keeps four things, and changes all four in each write:
//!
//! * **The revision counter and the compaction revision**, as a
//!   [`StoreStatus`]. Its methods check the revisions requests name:
//!   [`read_revision`](crate::StoreStatus::read_revision),
//!   [`check_watch_from`](crate::StoreStatus::check_watch_from) and
//!   [`check_compact`](crate::StoreStatus::check_compact).
//! * **Each key's version history**, a [`KeyHistory`] per key in key order
//!   (a `BTreeMap<String, KeyHistory>`): reads at past revisions look up
//!   [`KeyHistory::at`], and transactions read the latest versions through
//!   [`ReadView`], which the map implements.
//! * **The event log**, the events of each revision in a [`RevisionLog`]:
//!   watches that are behind (started in the past, or slower than the live
//!   feed) replay it through the backend's [`EventLog`].
//! * **The TTL deadlines** of the live keys, in an [`ExpiryIndex`].
//!
//! A durable backend keeps the same four on disk, and implements
//! [`ReadView`] and [`EventLog`] over its own storage instead.
//!
//! # The methods
//!
//! * [`Store::txn`]: [`Txn::validate`] first (the [limits](crate::limits)),
//!   so that a refused transaction changes nothing. Then, under the write
//!   lock, [`execute`] the transaction against the current state as the
//!   write at the next revision; if it returned events, apply them to the
//!   state and [`publish`](WatchHub::publish) them to the backend's
//!   [`WatchHub`] — still under the lock, so that watches see the revisions
//!   in order.
//! * [`Store::range`]: resolve the revision, then walk the keys of the
//!   range in key order, taking each one's value at that revision; count
//!   them all, return at most `limit`, and say if there were `more`.
//! * [`Store::watch`]: check the start revision, then
//!   [`WatchHub::watch`] does the rest.
//! * [`Store::compact`]: check the revision, then compact every
//!   [`KeyHistory`] (forgetting the keys left empty) and the
//!   [`RevisionLog`], and move the compaction revision.
//! * [`Store::status`]: the [`StoreStatus`].
//!
//! # Background work
//!
//! A backend's constructor calls [`spawn_background`]: it deletes the keys
//! of [`ExpiryIndex::due`] with [`expire`] (through [`Store::txn`], so an
//! expiry publishes a delete event like any other write), and compacts the
//! history as the [`StoreOptions`](crate::StoreOptions) say.
//!
//! The conformance suite, `testing::Suite` (feature `testing`), checks the
//! result. The `store_backend` example of the `orchestra-examples` crate
//! (`examples/examples/store_backend.rs`) is a backend built from these
//! parts, and runs the suite in its test.
//!
//! [`MemStore`]: crate::MemStore
//! [`Store`]: crate::Store
//! [`Store::txn`]: crate::Store::txn
//! [`Store::range`]: crate::Store::range
//! [`Store::watch`]: crate::Store::watch
//! [`Store::compact`]: crate::Store::compact
//! [`Store::status`]: crate::Store::status
//! [`StoreStatus`]: crate::StoreStatus
//! [`Txn::validate`]: crate::Txn::validate

pub use crate::background::{expire, spawn_background};
pub use crate::history::{ExpiryIndex, KeyHistory, RevisionLog};
pub use crate::txn::{Executed, ReadView, execute, now_ms};
pub use crate::watch::{EventLog, WatchHub};
