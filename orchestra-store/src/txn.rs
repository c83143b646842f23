//! Compare-and-swap transactions, and the one evaluator every backend uses.
//!
//! A [`Txn`] is etcd's: if every [`Compare`] holds, the `success` operations
//! run, otherwise the `failure` operations; the whole transaction is atomic and
//! takes a single revision if it changes anything. The convenience writes of
//! [`Store`](crate::Store) (`create`, `update`, `delete`) are transactions.
//! The evaluator, [`execute`], is public in [`crate::backend`].

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::time::Duration;

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::kv::{Event, EventKind, KeyValue, Revision};
use crate::limits::{self, MAX_TXN_OPS};

/// How a [`Compare`] relates the key's field to the given value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareOp {
    /// Field == value.
    Equal,
    /// Field != value.
    NotEqual,
    /// Field < value.
    Less,
    /// Field > value.
    Greater,
}

/// The field of a key a [`Compare`] looks at, with the value to compare to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompareTarget {
    /// The key's mod revision (0 when absent).
    ModRevision(Revision),
    /// The key's create revision (0 when absent).
    CreateRevision(Revision),
    /// The key's version (0 when absent).
    Version(i64),
    /// The key's value. A compare on the value of an absent key is false.
    Value(Bytes),
}

/// One condition of a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compare {
    /// The key whose field is compared.
    pub key: String,
    /// The comparison.
    pub op: CompareOp,
    /// The field and the value compared with it.
    pub target: CompareTarget,
}

impl Compare {
    /// `mod_revision(key) == rev`: the key is unchanged since `rev`
    /// (`rev == 0`: the key is absent).
    pub fn mod_revision(key: impl Into<String>, op: CompareOp, rev: Revision) -> Compare {
        Compare { key: key.into(), op, target: CompareTarget::ModRevision(rev) }
    }

    /// Compares the key's create revision.
    pub fn create_revision(key: impl Into<String>, op: CompareOp, rev: Revision) -> Compare {
        Compare { key: key.into(), op, target: CompareTarget::CreateRevision(rev) }
    }

    /// Compares the key's version.
    pub fn version(key: impl Into<String>, op: CompareOp, version: i64) -> Compare {
        Compare { key: key.into(), op, target: CompareTarget::Version(version) }
    }

    /// Compares the key's value.
    pub fn value(key: impl Into<String>, op: CompareOp, value: impl Into<Bytes>) -> Compare {
        Compare { key: key.into(), op, target: CompareTarget::Value(value.into()) }
    }

    /// The key is absent.
    pub fn absent(key: impl Into<String>) -> Compare {
        Compare::mod_revision(key, CompareOp::Equal, 0)
    }

    /// Evaluates the condition against the key's current value.
    pub fn holds(&self, current: Option<&KeyValue>) -> bool {
        use std::cmp::Ordering;
        let ordering: Ordering = match (&self.target, current) {
            (CompareTarget::Value(_), None) => return false,
            (CompareTarget::Value(v), Some(kv)) => kv.value.as_ref().cmp(v.as_ref()),
            (CompareTarget::ModRevision(r), kv) => kv.map_or(0, |kv| kv.mod_revision).cmp(r),
            (CompareTarget::CreateRevision(r), kv) => kv.map_or(0, |kv| kv.create_revision).cmp(r),
            (CompareTarget::Version(v), kv) => kv.map_or(0, |kv| kv.version).cmp(v),
        };
        match self.op {
            CompareOp::Equal => ordering == Ordering::Equal,
            CompareOp::NotEqual => ordering != Ordering::Equal,
            CompareOp::Less => ordering == Ordering::Less,
            CompareOp::Greater => ordering == Ordering::Greater,
        }
    }
}

/// One operation of a transaction branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Write `value` to `key`, creating it if absent. With a TTL the store
    /// deletes the key once the TTL has run out, unless it was written again
    /// since (a later write without TTL makes the key permanent).
    Put {
        /// The key.
        key: String,
        /// The value.
        value: Bytes,
        /// Time to live.
        ttl: Option<Duration>,
    },
    /// Delete `key` (nothing happens if it is absent).
    Delete {
        /// The key.
        key: String,
    },
    /// Read `key`, seeing the transaction's earlier writes.
    Get {
        /// The key.
        key: String,
    },
}

impl Op {
    /// A put without TTL.
    pub fn put(key: impl Into<String>, value: impl Into<Bytes>) -> Op {
        Op::Put { key: key.into(), value: value.into(), ttl: None }
    }

    /// A put with a TTL.
    pub fn put_with_ttl(key: impl Into<String>, value: impl Into<Bytes>, ttl: Duration) -> Op {
        Op::Put { key: key.into(), value: value.into(), ttl: Some(ttl) }
    }

    /// A delete.
    pub fn delete(key: impl Into<String>) -> Op {
        Op::Delete { key: key.into() }
    }

    /// A read.
    pub fn get(key: impl Into<String>) -> Op {
        Op::Get { key: key.into() }
    }

    /// The key the operation touches.
    pub fn key(&self) -> &str {
        match self {
            Op::Put { key, .. } | Op::Delete { key } | Op::Get { key } => key,
        }
    }
}

/// A compare-and-swap transaction. Build one with [`Txn::new`],
/// [`when`](Txn::when), [`and_then`](Txn::and_then) and [`or_else`](Txn::or_else).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Txn {
    /// Conditions; all must hold for `success` to run.
    pub compares: Vec<Compare>,
    /// Operations run when every compare holds.
    pub success: Vec<Op>,
    /// Operations run otherwise.
    pub failure: Vec<Op>,
}

impl Txn {
    /// An empty transaction.
    pub fn new() -> Txn {
        Txn::default()
    }

    /// Adds conditions.
    pub fn when(mut self, compares: impl IntoIterator<Item = Compare>) -> Txn {
        self.compares.extend(compares);
        self
    }

    /// Adds operations to the success branch.
    pub fn and_then(mut self, ops: impl IntoIterator<Item = Op>) -> Txn {
        self.success.extend(ops);
        self
    }

    /// Adds operations to the failure branch.
    pub fn or_else(mut self, ops: impl IntoIterator<Item = Op>) -> Txn {
        self.failure.extend(ops);
        self
    }

    /// True if neither branch writes: the transaction never takes a revision.
    pub fn is_read_only(&self) -> bool {
        self.success.iter().chain(&self.failure).all(|op| matches!(op, Op::Get { .. }))
    }

    /// Checks the limits: operation count, keys, value sizes, TTLs, and that
    /// no branch writes one key twice. Backends call this before anything else,
    /// so that a refused transaction changes nothing.
    pub fn validate(&self) -> Result<()> {
        let ops = self.compares.len() + self.success.len().max(self.failure.len());
        if ops > MAX_TXN_OPS {
            return Err(Error::TooManyOperations { ops, limit: MAX_TXN_OPS });
        }
        for compare in &self.compares {
            limits::validate_key(&compare.key)?;
        }
        for branch in [&self.success, &self.failure] {
            let mut written = std::collections::HashSet::new();
            for op in branch {
                limits::validate_key(op.key())?;
                if let Op::Put { key, value, ttl } = op {
                    limits::validate_value(key, value)?;
                    if let Some(ttl) = ttl {
                        limits::validate_ttl(key, *ttl)?;
                    }
                }
                if !matches!(op, Op::Get { .. }) && !written.insert(op.key()) {
                    return Err(Error::DuplicateKey { key: op.key().to_owned() });
                }
            }
        }
        Ok(())
    }
}

/// The result of one [`Op`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpResponse {
    /// A put: the key-value written and the one it replaced.
    Put {
        /// The new key-value.
        kv: KeyValue,
        /// The previous key-value, if any.
        prev_kv: Option<KeyValue>,
    },
    /// A delete: the key-value deleted, if the key existed.
    Delete {
        /// The deleted key-value.
        prev_kv: Option<KeyValue>,
    },
    /// A read.
    Get {
        /// The key-value, if present.
        kv: Option<KeyValue>,
    },
}

/// The outcome of a [`Txn`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnResponse {
    /// True if every compare held and the success branch ran.
    pub succeeded: bool,
    /// The store's revision after the transaction: the transaction's own
    /// revision if it wrote anything.
    pub revision: Revision,
    /// One response per operation of the branch that ran.
    pub responses: Vec<OpResponse>,
}

/// Read access to a backend's current state, as [`execute`] sees it: the
/// latest value of each key. Reads take `&mut self` so that a view may cache
/// or batch what it reads.
///
/// A map of [`KeyHistory`](crate::backend::KeyHistory) is a view already
/// (`&BTreeMap<String, KeyHistory>`).
///
/// A view over the latest values a backend caches, counting its reads:
///
/// ```
/// use std::collections::HashMap;
///
/// use orchestra_store::backend::{ReadView, execute, now_ms};
/// use orchestra_store::{Compare, KeyValue, Op, Result, Txn};
///
/// #[derive(Default)]
/// struct Latest {
///     keys: HashMap<String, KeyValue>,
///     reads: usize,
/// }
///
/// impl ReadView for Latest {
///     fn read(&mut self, key: &str) -> Result<Option<KeyValue>> {
///         self.reads += 1;
///         Ok(self.keys.get(key).cloned())
///     }
/// }
///
/// let mut view = Latest::default();
/// let txn = Txn::new().when([Compare::absent("/a")]).and_then([Op::put("/a", "1")]);
/// let executed = execute(&txn, 1, now_ms(), &mut view)?;
/// assert!(executed.response.succeeded);
/// assert_eq!(executed.events[0].kv.create_revision, 1);
/// assert!(view.reads > 0);
/// # Ok::<(), orchestra_store::Error>(())
/// ```
pub trait ReadView {
    /// The current value of `key`, `None` if it is absent. An error (a
    /// failed disk read) aborts the transaction.
    fn read(&mut self, key: &str) -> Result<Option<KeyValue>>;
}

/// The effect of one executed transaction: what [`execute`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Executed {
    /// What the caller gets back.
    pub response: TxnResponse,
    /// The changes, all at the transaction's revision, in operation order;
    /// empty if nothing was written (the revision then stays where it was).
    pub events: Vec<Event>,
}

/// Evaluates `txn` against `view` as the write at `revision` (the current
/// revision + 1): the compares, then the branch that runs, each operation
/// seeing the transaction's earlier writes. Builds the new key-values'
/// create revision, mod revision and version, and turns TTLs into deadlines
/// at `now_ms` (see [`now_ms`]).
///
/// The transaction must have passed [`Txn::validate`]. Nothing is written:
/// the backend applies the returned events to its state (and publishes
/// them to its watches) if there are any, in the same critical section
/// that read `view`, so that no other write comes between.
///
/// ```
/// use std::collections::BTreeMap;
///
/// use orchestra_store::backend::{KeyHistory, execute, now_ms};
/// use orchestra_store::{Compare, Op, Txn};
///
/// let mut keys: BTreeMap<String, KeyHistory> = BTreeMap::new();
/// let create = Txn::new().when([Compare::absent("/a")]).and_then([Op::put("/a", "1")]);
/// create.validate()?;
/// let executed = execute(&create, 1, now_ms(), &mut &keys)?;
/// assert!(executed.response.succeeded);
/// for event in &executed.events {
///     keys.entry(event.kv.key.clone()).or_default().record(event);
/// }
///
/// // The same create again fails its compare and writes nothing.
/// let again = execute(&create, 2, now_ms(), &mut &keys)?;
/// assert!(!again.response.succeeded && again.events.is_empty());
/// assert_eq!(again.response.revision, 1);
/// # Ok::<(), orchestra_store::Error>(())
/// ```
pub fn execute(txn: &Txn, revision: Revision, now_ms: i64, view: &mut impl ReadView) -> Result<Executed> {
    let mut succeeded = true;
    for compare in &txn.compares {
        if !compare.holds(view.read(&compare.key)?.as_ref()) {
            succeeded = false;
            break;
        }
    }
    let ops = if succeeded { &txn.success } else { &txn.failure };
    // The transaction's own writes, visible to its later reads.
    let mut written: HashMap<&str, Option<KeyValue>> = HashMap::new();
    let mut responses = Vec::with_capacity(ops.len());
    let mut events = Vec::new();
    for op in ops {
        let current = match written.entry(op.key()) {
            Entry::Occupied(e) => e.get().clone(),
            Entry::Vacant(_) => view.read(op.key())?,
        };
        match op {
            Op::Get { .. } => responses.push(OpResponse::Get { kv: current }),
            Op::Put { key, value, ttl } => {
                let kv = KeyValue {
                    key: key.clone(),
                    value: value.clone(),
                    create_revision: current.as_ref().map_or(revision, |c| c.create_revision),
                    mod_revision: revision,
                    version: current.as_ref().map_or(1, |c| c.version + 1),
                    expires_at_ms: ttl.map(|ttl| now_ms.saturating_add(ttl.as_millis() as i64)),
                };
                written.insert(key, Some(kv.clone()));
                events.push(Event { kind: EventKind::Put, kv: kv.clone(), prev_kv: current.clone() });
                responses.push(OpResponse::Put { kv, prev_kv: current });
            }
            Op::Delete { key } => {
                if let Some(prev) = &current {
                    written.insert(key, None);
                    events.push(Event::deleted(prev.clone(), revision));
                }
                responses.push(OpResponse::Delete { prev_kv: current });
            }
        }
    }
    let revision = if events.is_empty() { revision - 1 } else { revision };
    Ok(Executed { response: TxnResponse { succeeded, revision, responses }, events })
}

/// Milliseconds since the Unix epoch: the clock of TTL deadlines
/// ([`KeyValue::expires_at_ms`]).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(HashMap<String, KeyValue>);

    impl ReadView for Fixed {
        fn read(&mut self, key: &str) -> Result<Option<KeyValue>> {
            Ok(self.0.get(key).cloned())
        }
    }

    fn kv(key: &str, rev: Revision) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Bytes::from_static(b"v"),
            create_revision: rev,
            mod_revision: rev,
            version: 1,
            expires_at_ms: None,
        }
    }

    #[test]
    fn compares_on_absent_keys_see_zeroes() {
        assert!(Compare::absent("/a").holds(None));
        assert!(!Compare::absent("/a").holds(Some(&kv("/a", 3))));
        assert!(Compare::version("/a", CompareOp::Less, 1).holds(None));
        assert!(!Compare::value("/a", CompareOp::NotEqual, "x").holds(None));
        assert!(Compare::value("/a", CompareOp::Greater, "u").holds(Some(&kv("/a", 3))));
    }

    #[test]
    fn execute_branches_and_versions() {
        let mut view = Fixed(HashMap::from([("/a".to_string(), kv("/a", 3))]));
        let txn = Txn::new().when([Compare::mod_revision("/a", CompareOp::Equal, 3)]).and_then([
            Op::put("/a", "w"),
            Op::get("/a"),
            Op::delete("/c"),
            Op::put("/b", "x"),
        ]);
        txn.validate().unwrap();
        let done = execute(&txn, 5, 0, &mut view).unwrap();
        assert!(done.response.succeeded);
        assert_eq!(done.response.revision, 5);
        assert_eq!(done.events.len(), 2);
        let OpResponse::Get { kv: Some(read) } = &done.response.responses[1] else { panic!() };
        assert_eq!((read.version, read.create_revision, read.mod_revision), (2, 3, 5));
        assert_eq!(done.response.responses[2], OpResponse::Delete { prev_kv: None });

        let stale = Txn::new().when([Compare::mod_revision("/a", CompareOp::Equal, 2)]).and_then([Op::delete("/a")]);
        let done = execute(&stale, 5, 0, &mut view).unwrap();
        assert!(!done.response.succeeded);
        assert_eq!(done.response.revision, 4, "nothing written: no new revision");
        assert!(done.events.is_empty());
    }

    #[test]
    fn validation_refuses_before_anything_runs() {
        let too_many = Txn::new().and_then((0..=MAX_TXN_OPS).map(|i| Op::put(format!("/k{i}"), "v")));
        assert!(matches!(too_many.validate(), Err(Error::TooManyOperations { .. })));
        let dup = Txn::new().and_then([Op::put("/k", "a"), Op::delete("/k")]);
        assert!(matches!(dup.validate(), Err(Error::DuplicateKey { .. })));
        let bad_key = Txn::new().when([Compare::absent("nope")]);
        assert!(matches!(bad_key.validate(), Err(Error::InvalidKey { .. })));
        let ttl = Txn::new().and_then([Op::put_with_ttl("/k", "v", Duration::ZERO)]);
        assert!(matches!(ttl.validate(), Err(Error::InvalidTtl { .. })));
    }
}
