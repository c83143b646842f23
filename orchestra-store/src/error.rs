//! The store's typed errors.
//!
//! Normal outcomes of a guarded write (the key exists, the revision moved on)
//! are errors here too, because every caller must handle them: the API server
//! maps them to `409 Conflict` / `404 Not Found`, watchers map [`Error::Compacted`]
//! to `410 Gone`.

use crate::kv::Revision;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything a [`Store`](crate::Store) operation can fail with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The key is empty, too long, or contains characters keys may not hold.
    #[error("invalid key {key:?}: {reason}")]
    InvalidKey {
        /// The offending key (possibly truncated).
        key: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// A value is larger than [`MAX_VALUE_BYTES`](crate::limits::MAX_VALUE_BYTES).
    #[error("value for key {key:?} is {size} bytes, over the limit of {limit} bytes")]
    ValueTooLarge {
        /// The key the value was written to.
        key: String,
        /// Size of the refused value.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// A transaction holds more operations than [`MAX_TXN_OPS`](crate::limits::MAX_TXN_OPS).
    #[error("transaction has {ops} operations, over the limit of {limit}")]
    TooManyOperations {
        /// Number of operations in the refused transaction.
        ops: usize,
        /// The limit.
        limit: usize,
    },
    /// A transaction writes the same key twice.
    #[error("transaction writes key {key:?} more than once")]
    DuplicateKey {
        /// The key written twice.
        key: String,
    },
    /// A TTL that is zero or too long to represent.
    #[error("invalid TTL for key {key:?}: {reason}")]
    InvalidTtl {
        /// The key the TTL was attached to.
        key: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// `create` found the key already present.
    #[error("key {key:?} already exists")]
    AlreadyExists {
        /// The key.
        key: String,
    },
    /// The key does not exist (guarded update or delete).
    #[error("key {key:?} not found")]
    NotFound {
        /// The key.
        key: String,
    },
    /// A guarded write's expected mod revision did not match.
    #[error("conflict on key {key:?}: expected mod revision {expected}, found {actual}")]
    Conflict {
        /// The key.
        key: String,
        /// The mod revision the caller expected.
        expected: Revision,
        /// The key's actual mod revision (0 when the key is absent).
        actual: Revision,
    },
    /// The requested revision has been compacted away.
    #[error("revision {requested} has been compacted (oldest retained revision is {compacted})")]
    Compacted {
        /// The revision asked for.
        requested: Revision,
        /// The store's compaction revision: reads at or after it succeed.
        compacted: Revision,
    },
    /// The requested revision is newer than the store's current revision.
    #[error("revision {requested} is in the future (current revision is {current})")]
    FutureRevision {
        /// The revision asked for.
        requested: Revision,
        /// The store's current revision.
        current: Revision,
    },
    /// This replica cannot serve the request now (no leader, shutting down,
    /// a watcher fell behind and must restart). Safe to retry.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The backend failed (I/O error, corruption). Not retryable in general.
    #[error("storage failure: {0}")]
    Storage(String),
    /// A [`FencedStore`](crate::FencedStore) refused a write: its guard key
    /// no longer allows the writer to write.
    #[error("write fenced by {guard:?}: {reason}")]
    Fenced {
        /// The guard key.
        guard: String,
        /// Why the guard refuses the write.
        reason: String,
    },
}

impl Error {
    /// True for errors that a caller may retry unchanged.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Unavailable(_))
    }
}
