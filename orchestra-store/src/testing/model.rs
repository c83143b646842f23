//! [`Model`], the store semantics written as simply as possible, and
//! [`model_test`], which holds a backend to it on random operation sequences.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use super::{StoreBuilder, events_until};
use crate::error::{Error, Result};
use crate::kv::{Event, KeyRange, KeyValue, Revision};
use crate::limits::{self, MAX_TXN_OPS};
use crate::store::{RangeRequest, RangeResponse, Store, StoreStatus};
use crate::txn::{Compare, CompareOp, CompareTarget, Op, OpResponse, Txn, TxnResponse};
use crate::watch::WatchRequest;

/// A reference model of the [`Store`] semantics: a map from each key to all
/// its versions, a revision counter, and the list of every change.
///
/// It is deliberately naive (every read scans, nothing is ever dropped:
/// compaction only moves the revision below which reads are refused) so that
/// it is obviously right. It has no clock: TTLs are not modelled, and a put
/// with a TTL is treated as one without.
#[derive(Debug, Clone, Default)]
pub struct Model {
    revision: Revision,
    compact_revision: Revision,
    /// Every key's versions, oldest first; `None` marks a delete.
    keys: BTreeMap<String, Vec<(Revision, Option<KeyValue>)>>,
    /// Every change, in revision order.
    events: Vec<Event>,
}

impl Model {
    /// An empty store.
    pub fn new() -> Model {
        Model::default()
    }

    /// The current and compaction revisions.
    pub fn status(&self) -> StoreStatus {
        StoreStatus { revision: self.revision, compact_revision: self.compact_revision }
    }

    /// Every change so far, in revision order (as a watch from revision 1 sees them).
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// The current value of `key`.
    pub fn get(&self, key: &str) -> Option<KeyValue> {
        self.value_at(key, self.revision).cloned()
    }

    /// The value of `key` at `revision`: its last version at or before it.
    fn value_at(&self, key: &str, revision: Revision) -> Option<&KeyValue> {
        let versions = self.keys.get(key)?;
        let (_, value) = versions.iter().rev().find(|(rev, _)| *rev <= revision)?;
        value.as_ref()
    }

    /// [`Store::range`].
    pub fn range(&self, request: &RangeRequest) -> Result<RangeResponse> {
        let revision = match request.revision {
            0 => self.revision,
            r if r > self.revision => return Err(Error::FutureRevision { requested: r, current: self.revision }),
            r if r < self.compact_revision => {
                return Err(Error::Compacted { requested: r, compacted: self.compact_revision });
            }
            r => r,
        };
        let found: Vec<KeyValue> = self
            .keys
            .keys()
            .filter(|key| request.range.contains(key))
            .filter_map(|key| self.value_at(key, revision).cloned())
            .collect();
        let count = found.len();
        let shown = if request.limit == 0 { count } else { request.limit.min(count) };
        Ok(RangeResponse { kvs: found[..shown].to_vec(), more: shown < count, count, revision })
    }

    /// [`Store::txn`].
    pub fn txn(&mut self, txn: &Txn) -> Result<TxnResponse> {
        validate(txn)?;
        let succeeded = txn.compares.iter().all(|c| holds(c, self.get(&c.key).as_ref()));
        let ops = if succeeded { &txn.success } else { &txn.failure };
        let revision = self.revision + 1;
        // The transaction's writes so far, which its later operations see.
        let mut written: BTreeMap<&str, Option<KeyValue>> = BTreeMap::new();
        let mut responses = Vec::new();
        let mut events = Vec::new();
        for op in ops {
            let current = match written.get(op.key()) {
                Some(value) => value.clone(),
                None => self.get(op.key()),
            };
            match op {
                Op::Get { .. } => responses.push(OpResponse::Get { kv: current }),
                Op::Put { key, value, .. } => {
                    let kv = KeyValue {
                        key: key.clone(),
                        value: value.clone(),
                        create_revision: current.as_ref().map_or(revision, |c| c.create_revision),
                        mod_revision: revision,
                        version: current.as_ref().map_or(0, |c| c.version) + 1,
                        expires_at_ms: None,
                    };
                    written.insert(key, Some(kv.clone()));
                    events.push(Event { kind: crate::kv::EventKind::Put, kv: kv.clone(), prev_kv: current.clone() });
                    responses.push(OpResponse::Put { kv, prev_kv: current });
                }
                Op::Delete { key } => {
                    if let Some(prev) = current.clone() {
                        written.insert(key, None);
                        events.push(Event::deleted(prev, revision));
                    }
                    responses.push(OpResponse::Delete { prev_kv: current });
                }
            }
        }
        if !events.is_empty() {
            for (key, value) in written {
                self.keys.entry(key.to_owned()).or_default().push((revision, value));
            }
            self.events.extend(events);
            self.revision = revision;
        }
        Ok(TxnResponse { succeeded, revision: self.revision, responses })
    }

    /// [`Store::put`].
    pub fn put(&mut self, key: &str, value: Bytes) -> Result<KeyValue> {
        self.write(key, value)
    }

    /// [`Store::create`].
    pub fn create(&mut self, key: &str, value: Bytes) -> Result<KeyValue> {
        match self.get(key) {
            Some(_) => Err(Error::AlreadyExists { key: key.into() }),
            None => self.write(key, value),
        }
    }

    /// [`Store::update`].
    pub fn update(&mut self, key: &str, value: Bytes, expected: Revision) -> Result<KeyValue> {
        match self.get(key) {
            current if current.as_ref().map_or(0, |kv| kv.mod_revision) == expected => self.write(key, value),
            None => Err(Error::NotFound { key: key.into() }),
            Some(kv) => Err(Error::Conflict { key: key.into(), expected, actual: kv.mod_revision }),
        }
    }

    /// [`Store::delete`].
    pub fn delete(&mut self, key: &str, expected: Option<Revision>) -> Result<KeyValue> {
        match (self.get(key), expected) {
            (None, _) => Err(Error::NotFound { key: key.into() }),
            (Some(kv), Some(expected)) if kv.mod_revision != expected => {
                Err(Error::Conflict { key: key.into(), expected, actual: kv.mod_revision })
            }
            (Some(kv), _) => {
                self.txn(&Txn::new().and_then([Op::delete(key)]))?;
                Ok(kv)
            }
        }
    }

    /// [`Store::compact`].
    pub fn compact(&mut self, revision: Revision) -> Result<()> {
        if revision > self.revision {
            return Err(Error::FutureRevision { requested: revision, current: self.revision });
        }
        self.compact_revision = self.compact_revision.max(revision);
        Ok(())
    }

    /// An unconditional put, as one transaction.
    fn write(&mut self, key: &str, value: Bytes) -> Result<KeyValue> {
        let response = self.txn(&Txn::new().and_then([Op::Put { key: key.into(), value, ttl: None }]))?;
        match response.responses.into_iter().next() {
            Some(OpResponse::Put { kv, .. }) => Ok(kv),
            other => unreachable!("a put answered with {other:?}"),
        }
    }
}

/// The limits of a transaction, checked in the order the backends check them.
fn validate(txn: &Txn) -> Result<()> {
    let ops = txn.compares.len() + txn.success.len().max(txn.failure.len());
    if ops > MAX_TXN_OPS {
        return Err(Error::TooManyOperations { ops, limit: MAX_TXN_OPS });
    }
    for compare in &txn.compares {
        limits::validate_key(&compare.key)?;
    }
    for branch in [&txn.success, &txn.failure] {
        let mut written = BTreeSet::new();
        for op in branch {
            limits::validate_key(op.key())?;
            if let Op::Put { key, value, ttl } = op {
                limits::validate_value(key, value)?;
                if let Some(ttl) = ttl {
                    limits::validate_ttl(key, *ttl)?;
                }
            }
            if !matches!(op, Op::Get { .. }) && !written.insert(op.key()) {
                return Err(Error::DuplicateKey { key: op.key().into() });
            }
        }
    }
    Ok(())
}

/// Whether `compare` holds for a key whose current value is `kv`.
fn holds(compare: &Compare, kv: Option<&KeyValue>) -> bool {
    let ordering = match (&compare.target, kv) {
        (CompareTarget::Value(_), None) => return false,
        (CompareTarget::Value(value), Some(kv)) => kv.value.as_ref().cmp(value.as_ref()),
        (CompareTarget::ModRevision(rev), kv) => kv.map_or(0, |kv| kv.mod_revision).cmp(rev),
        (CompareTarget::CreateRevision(rev), kv) => kv.map_or(0, |kv| kv.create_revision).cmp(rev),
        (CompareTarget::Version(version), kv) => kv.map_or(0, |kv| kv.version).cmp(version),
    };
    match compare.op {
        CompareOp::Equal => ordering == Ordering::Equal,
        CompareOp::NotEqual => ordering != Ordering::Equal,
        CompareOp::Less => ordering == Ordering::Less,
        CompareOp::Greater => ordering == Ordering::Greater,
    }
}

// The property test.

/// The key space: 8 keys under 2 prefixes.
const KEYS: [&str; 8] = ["/a/1", "/a/2", "/a/3", "/a/4", "/b/1", "/b/2", "/b/3", "/b/4"];
/// Values, few so that value compares sometimes hold.
const VALUES: [&str; 4] = ["v0", "v1", "v2", "v3"];
/// Ends of intervals: keys, prefixes and strings between keys.
const BOUNDS: [&str; 8] = ["/", "/a/", "/a/2", "/a/25", "/a/4", "/b/", "/b/3", "/c"];
/// Prefixes: the two of the key space, everything, a key, nothing.
const PREFIXES: [&str; 5] = ["/a/", "/b/", "/", "/a/2", "/c/"];

/// One step of a generated sequence. Revisions are chosen relative to the
/// model's state when the step runs, so that a sequence stays meaningful
/// while proptest shrinks it.
#[derive(Debug, Clone)]
enum Action {
    Put {
        key: usize,
        value: usize,
    },
    Create {
        key: usize,
        value: usize,
    },
    Update {
        key: usize,
        value: usize,
        expected: Expected,
    },
    Delete {
        key: usize,
        expected: Option<Expected>,
    },
    Get {
        key: usize,
    },
    Range {
        range: RangeSpec,
        limit: usize,
    },
    /// A read `back` revisions before the next one (0: a future revision).
    RangeAt {
        range: RangeSpec,
        limit: usize,
        back: i64,
    },
    /// Every page of a range, `page` keys at a time.
    Paginate {
        range: RangeSpec,
        page: usize,
    },
    Txn {
        compares: Vec<CompareSpec>,
        success: Vec<OpSpec>,
        failure: Vec<OpSpec>,
    },
    /// Compacts `back` revisions before the current one (-1: the future).
    Compact {
        back: i64,
    },
}

/// The revision a guarded write expects.
#[derive(Debug, Clone, Copy)]
enum Expected {
    /// The key's mod revision (1 if it is absent).
    Current,
    /// Another revision.
    Stale(u8),
}

#[derive(Debug, Clone)]
enum RangeSpec {
    Key(usize),
    Prefix(usize),
    Between(usize, usize),
    From(usize),
    All,
}

/// A compare of a key's field with its current value plus `delta` (values:
/// with one of [`VALUES`]).
#[derive(Debug, Clone)]
struct CompareSpec {
    key: usize,
    op: CompareOp,
    field: Field,
}

#[derive(Debug, Clone)]
enum Field {
    ModRevision(i64),
    CreateRevision(i64),
    Version(i64),
    Value(usize),
}

#[derive(Debug, Clone)]
enum OpSpec {
    Put { key: usize, value: usize },
    Delete { key: usize },
    Get { key: usize },
}

/// A step with its revisions resolved: what is sent to both store and model.
#[derive(Debug, Clone)]
enum Call {
    Put(String, Bytes),
    Create(String, Bytes),
    Update(String, Bytes, Revision),
    Delete(String, Option<Revision>),
    Get(String),
    Range(RangeRequest),
    Paginate(RangeRequest),
    Txn(Txn),
    Compact(Revision),
}

/// What a [`Call`] returned.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Kv(Result<KeyValue>),
    Get(Result<Option<KeyValue>>),
    Range(Result<RangeResponse>),
    Pages(Result<Vec<RangeResponse>>),
    Txn(Result<TxnResponse>),
    Compact(Result<()>),
}

impl Expected {
    fn resolve(self, model: &Model, key: &str) -> Revision {
        let current = model.get(key).map_or(0, |kv| kv.mod_revision);
        match self {
            Expected::Current => current.max(1),
            Expected::Stale(n) => {
                let other = 1 + i64::from(n) % (model.revision + 1);
                if other == current { other + 1 } else { other }
            }
        }
    }
}

impl RangeSpec {
    fn resolve(&self) -> KeyRange {
        match *self {
            RangeSpec::Key(k) => KeyRange::key(KEYS[k]),
            RangeSpec::Prefix(p) => KeyRange::prefix(PREFIXES[p]),
            RangeSpec::Between(a, b) => KeyRange::between(BOUNDS[a], BOUNDS[b]),
            RangeSpec::From(a) => KeyRange::from(BOUNDS[a]),
            RangeSpec::All => KeyRange::all(),
        }
    }
}

impl CompareSpec {
    fn resolve(&self, model: &Model) -> Compare {
        let key = KEYS[self.key];
        let current = model.get(key);
        let field = |f: fn(&KeyValue) -> i64| current.as_ref().map_or(0, f);
        match self.field {
            Field::ModRevision(d) => Compare::mod_revision(key, self.op, field(|kv| kv.mod_revision) + d),
            Field::CreateRevision(d) => Compare::create_revision(key, self.op, field(|kv| kv.create_revision) + d),
            Field::Version(d) => Compare::version(key, self.op, field(|kv| kv.version) + d),
            Field::Value(v) => Compare::value(key, self.op, VALUES[v]),
        }
    }
}

impl OpSpec {
    fn resolve(&self) -> Op {
        match *self {
            OpSpec::Put { key, value } => Op::put(KEYS[key], VALUES[value]),
            OpSpec::Delete { key } => Op::delete(KEYS[key]),
            OpSpec::Get { key } => Op::get(KEYS[key]),
        }
    }
}

impl Action {
    fn resolve(&self, model: &Model) -> Call {
        let key = |k: usize| KEYS[k].to_owned();
        let value = |v: usize| Bytes::from_static(VALUES[v].as_bytes());
        match self {
            Action::Put { key: k, value: v } => Call::Put(key(*k), value(*v)),
            Action::Create { key: k, value: v } => Call::Create(key(*k), value(*v)),
            Action::Update { key: k, value: v, expected } => {
                Call::Update(key(*k), value(*v), expected.resolve(model, KEYS[*k]))
            }
            Action::Delete { key: k, expected } => Call::Delete(key(*k), expected.map(|e| e.resolve(model, KEYS[*k]))),
            Action::Get { key: k } => Call::Get(key(*k)),
            Action::Range { range, limit } => Call::Range(RangeRequest::new(range.resolve()).with_limit(*limit)),
            Action::RangeAt { range, limit, back } => {
                let revision = (model.revision + 1 - back).max(1);
                Call::Range(RangeRequest::new(range.resolve()).with_limit(*limit).at_revision(revision))
            }
            Action::Paginate { range, page } => Call::Paginate(RangeRequest::new(range.resolve()).with_limit(*page)),
            Action::Txn { compares, success, failure } => Call::Txn(Txn {
                compares: compares.iter().map(|c| c.resolve(model)).collect(),
                success: success.iter().map(OpSpec::resolve).collect(),
                failure: failure.iter().map(OpSpec::resolve).collect(),
            }),
            Action::Compact { back } => Call::Compact((model.revision - back).max(0)),
        }
    }
}

impl Call {
    async fn run(&self, store: &dyn Store) -> Outcome {
        match self.clone() {
            Call::Put(key, value) => Outcome::Kv(store.put(&key, value, None).await),
            Call::Create(key, value) => Outcome::Kv(store.create(&key, value, None).await),
            Call::Update(key, value, expected) => Outcome::Kv(store.update(&key, value, expected, None).await),
            Call::Delete(key, expected) => Outcome::Kv(store.delete(&key, expected).await),
            Call::Get(key) => Outcome::Get(store.get(&key).await),
            Call::Range(request) => Outcome::Range(store.range(request).await),
            Call::Paginate(first) => {
                let mut pages = Vec::new();
                let mut request = Some(first);
                while let Some(page_request) = request {
                    let page = match store.range(page_request.clone()).await {
                        Ok(page) => page,
                        Err(e) => return Outcome::Pages(Err(e)),
                    };
                    request = page_request.next_page(&page);
                    pages.push(page);
                }
                Outcome::Pages(Ok(pages))
            }
            Call::Txn(txn) => Outcome::Txn(store.txn(txn).await),
            Call::Compact(revision) => Outcome::Compact(store.compact(revision).await),
        }
    }

    fn apply(&self, model: &mut Model) -> Outcome {
        match self.clone() {
            Call::Put(key, value) => Outcome::Kv(model.put(&key, value)),
            Call::Create(key, value) => Outcome::Kv(model.create(&key, value)),
            Call::Update(key, value, expected) => Outcome::Kv(model.update(&key, value, expected)),
            Call::Delete(key, expected) => Outcome::Kv(model.delete(&key, expected)),
            Call::Get(key) => Outcome::Get(Ok(model.get(&key))),
            Call::Range(request) => Outcome::Range(model.range(&request)),
            Call::Paginate(first) => {
                // The model's pages are cut from one unpaginated read.
                let Ok(all) = model.range(&RangeRequest { limit: 0, ..first.clone() }) else {
                    unreachable!("a paginated read at the current revision");
                };
                let chunks: Vec<&[KeyValue]> = all.kvs.chunks(first.limit.max(1)).collect();
                let pages = match chunks.len() {
                    0 => vec![all.clone()],
                    n => chunks
                        .iter()
                        .enumerate()
                        .map(|(i, chunk)| RangeResponse {
                            kvs: chunk.to_vec(),
                            more: i + 1 < n,
                            count: all.kvs.len() - i * first.limit,
                            revision: all.revision,
                        })
                        .collect(),
                };
                Outcome::Pages(Ok(pages))
            }
            Call::Txn(txn) => Outcome::Txn(model.txn(&txn)),
            Call::Compact(revision) => Outcome::Compact(model.compact(revision)),
        }
    }
}

fn key() -> impl Strategy<Value = usize> {
    0..KEYS.len()
}

fn value() -> impl Strategy<Value = usize> {
    0..VALUES.len()
}

fn expected() -> impl Strategy<Value = Expected> {
    prop_oneof![3 => Just(Expected::Current), 2 => any::<u8>().prop_map(Expected::Stale)]
}

fn range_spec() -> impl Strategy<Value = RangeSpec> {
    prop_oneof![
        key().prop_map(RangeSpec::Key),
        (0..PREFIXES.len()).prop_map(RangeSpec::Prefix),
        (0..BOUNDS.len(), 0..BOUNDS.len()).prop_map(|(a, b)| RangeSpec::Between(a, b)),
        (0..BOUNDS.len()).prop_map(RangeSpec::From),
        Just(RangeSpec::All),
    ]
}

fn compare_spec() -> impl Strategy<Value = CompareSpec> {
    let op =
        prop_oneof![Just(CompareOp::Equal), Just(CompareOp::NotEqual), Just(CompareOp::Less), Just(CompareOp::Greater)];
    let field = prop_oneof![
        (-1..=1i64).prop_map(Field::ModRevision),
        (-1..=1i64).prop_map(Field::CreateRevision),
        (-1..=1i64).prop_map(Field::Version),
        value().prop_map(Field::Value),
    ];
    (key(), op, field).prop_map(|(key, op, field)| CompareSpec { key, op, field })
}

/// Up to `max` operations; one branch in ten may write a key twice (the
/// transaction is then refused), the others write each key at most once.
fn branch(max: usize) -> impl Strategy<Value = Vec<OpSpec>> {
    let op = prop_oneof![
        2 => (key(), value()).prop_map(|(key, value)| OpSpec::Put { key, value }),
        1 => key().prop_map(|key| OpSpec::Delete { key }),
        1 => key().prop_map(|key| OpSpec::Get { key }),
    ];
    (proptest::collection::vec(op, 0..=max), 0..10u8).prop_map(|(ops, dice)| {
        if dice == 0 {
            return ops;
        }
        let mut written = BTreeSet::new();
        ops.into_iter()
            .filter(|op| match op {
                OpSpec::Get { .. } => true,
                OpSpec::Put { key, .. } | OpSpec::Delete { key } => written.insert(*key),
            })
            .collect()
    })
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        4 => (key(), value()).prop_map(|(key, value)| Action::Put { key, value }),
        2 => (key(), value()).prop_map(|(key, value)| Action::Create { key, value }),
        3 => (key(), value(), expected()).prop_map(|(key, value, expected)| Action::Update { key, value, expected }),
        2 => (key(), proptest::option::of(expected())).prop_map(|(key, expected)| Action::Delete { key, expected }),
        1 => key().prop_map(|key| Action::Get { key }),
        2 => (range_spec(), 0..4usize).prop_map(|(range, limit)| Action::Range { range, limit }),
        2 => (range_spec(), 0..4usize, 0..12i64)
            .prop_map(|(range, limit, back)| Action::RangeAt { range, limit, back }),
        1 => (range_spec(), 1..4usize).prop_map(|(range, page)| Action::Paginate { range, page }),
        4 => (proptest::collection::vec(compare_spec(), 0..=3), branch(4), branch(3))
            .prop_map(|(compares, success, failure)| Action::Txn { compares, success, failure }),
        1 => (-1..8i64).prop_map(|back| Action::Compact { back }),
    ]
}

/// Runs one generated sequence on a fresh store and on the model, comparing
/// every response, the status after every step, every retained revision at
/// the end, and what watches delivered: one of everything and one of `/a/`
/// that followed the sequence live, and one of everything replaying the
/// history from the oldest retained revision.
async fn run_case<B: StoreBuilder + ?Sized>(builder: &B, actions: &[Action]) -> Result<(), TestCaseError> {
    let store = builder.build().await;
    let mut model = Model::new();
    let fail = |what: String| TestCaseError::fail(what);
    let watch_error = |e: Error| fail(format!("watch: {e}"));
    let mut live = store.watch(WatchRequest::new(KeyRange::all())).await.map_err(watch_error)?;
    let mut live_a = store.watch(WatchRequest::new(KeyRange::prefix("/a/"))).await.map_err(watch_error)?;
    for (step, action) in actions.iter().enumerate() {
        let call = action.resolve(&model);
        let got = call.run(&*store).await;
        let want = call.apply(&mut model);
        if got != want {
            return Err(fail(format!("step {step}: {call:?}\n  store returned {got:?}\n  model expects {want:?}")));
        }
        let status = store.status().await.map_err(|e| fail(format!("status: {e}")))?;
        if status != model.status() {
            return Err(fail(format!("after step {step}: {call:?}: status {status:?}, model {:?}", model.status())));
        }
    }
    let status = model.status();
    for revision in status.compact_revision.max(1)..=status.revision {
        let request = RangeRequest::new(KeyRange::all()).at_revision(revision);
        let (got, want) = (store.range(request.clone()).await, model.range(&request));
        if got != want {
            return Err(fail(format!("at the end, {request:?}\n  store returned {got:?}\n  model expects {want:?}")));
        }
    }
    if status.revision > 0 {
        let events = events_until(&mut live, status.revision, "a watch of every key").await;
        if events != model.events() {
            return Err(fail(format!(
                "a watch of every key saw\n  {events:?}\n  model expects\n  {:?}",
                model.events()
            )));
        }
        let expected: Vec<_> = model.events().iter().filter(|e| e.kv.key.starts_with("/a/")).cloned().collect();
        if let Some(last) = expected.last() {
            let events = events_until(&mut live_a, last.revision(), "a watch of /a/").await;
            if events != expected {
                return Err(fail(format!("a watch of /a/ saw\n  {events:?}\n  model expects\n  {expected:?}")));
            }
        }
        let from = status.compact_revision.max(1);
        let request = WatchRequest::new(KeyRange::all()).from_revision(from);
        let mut replay = store.watch(request).await.map_err(|e| fail(format!("watch from {from}: {e}")))?;
        let events = events_until(&mut replay, status.revision, "a watch replaying history").await;
        let expected: Vec<_> = model.events().iter().filter(|e| e.revision() >= from).cloned().collect();
        if events != expected {
            return Err(fail(format!("a watch from {from} saw\n  {events:?}\n  model expects\n  {expected:?}")));
        }
    }
    Ok(())
}

/// Runs `cases` random sequences of 20 to 60 operations — puts, creates,
/// guarded updates and deletes at the right or a stale revision, reads,
/// limited ranges, reads at past (possibly compacted) and future revisions,
/// paginated reads, transactions with compares in both branches, compactions
/// — over 8 keys under 2 prefixes, each on a fresh store from `builder`, and
/// checks every response against [`Model`]. Panics with the smallest failing
/// sequence proptest finds.
///
/// Runs its own Tokio runtime on a thread of its own, so it may be called
/// from a plain `#[test]` or (through `tokio::task::block_in_place`) from an
/// async test. `PROPTEST_`-prefixed environment variables tune the runner;
/// `PROPTEST_CASES`, if set, replaces `cases` (for a longer run once in a
/// while). 32 cases take a few seconds.
pub fn model_test<B: StoreBuilder + ?Sized>(builder: &B, cases: u32) {
    let outcome = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("cannot start a Tokio runtime");
                let cases = std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(cases);
                let config = Config { cases, failure_persistence: None, max_shrink_time: 60_000, ..Config::default() };
                let mut runner = TestRunner::new(config);
                let sequences = proptest::collection::vec(action(), 20..=60);
                runner.run(&sequences, |actions| runtime.block_on(run_case(builder, &actions)))
            })
            .join()
    });
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(failure)) => panic!("the store differs from the model: {failure}"),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}
