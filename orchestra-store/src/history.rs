//! MVCC history in memory: each key's versions, the events of each
//! revision, and the TTL deadlines of live keys. [`MemStore`](crate::MemStore)
//! is made of these; they are public in [`crate::backend`].

use std::collections::BTreeMap;

use crate::error::Result;
use crate::kv::{Event, EventKind, KeyRange, KeyValue, Revision};
use crate::txn::ReadView;

/// One key's retained versions, oldest first: what reads at past revisions
/// see. A delete is a version too (the key is absent from then on).
///
/// A backend keeps one per key, e.g. in a `BTreeMap<String, KeyHistory>`
/// (key order is the order range reads return), records every write's
/// events in it, and [compacts](KeyHistory::compact) it with the store.
///
/// ```
/// use orchestra_store::backend::KeyHistory;
/// use orchestra_store::{Event, EventKind, KeyValue};
///
/// let v1 = KeyValue {
///     key: "/a".into(),
///     value: "1".into(),
///     create_revision: 2,
///     mod_revision: 2,
///     version: 1,
///     expires_at_ms: None,
/// };
/// let mut history = KeyHistory::new();
/// history.record(&Event { kind: EventKind::Put, kv: v1.clone(), prev_kv: None });
/// history.record(&Event::deleted(v1.clone(), 5));
///
/// assert_eq!(history.at(1), None, "not created yet");
/// assert_eq!(history.at(4), Some(&v1));
/// assert_eq!(history.latest(), None, "deleted at 5");
///
/// // Reads at revision 5 and later never see `v1` again: compacting to 5
/// // leaves nothing, and the backend can forget the key.
/// history.compact(5);
/// assert!(history.is_empty());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyHistory {
    /// `(revision, value from then on)`, oldest first; `None` marks a delete.
    versions: Vec<(Revision, Option<KeyValue>)>,
}

impl KeyHistory {
    /// A key without history.
    pub fn new() -> KeyHistory {
        KeyHistory::default()
    }

    /// Records the key's value from `revision` on (`None`: deleted).
    /// Revisions are recorded in increasing order.
    pub fn push(&mut self, revision: Revision, value: Option<KeyValue>) {
        debug_assert!(
            self.versions.last().is_none_or(|(last, _)| *last < revision),
            "revision {revision} out of order"
        );
        self.versions.push((revision, value));
    }

    /// Records the change `event` made to the key.
    pub fn record(&mut self, event: &Event) {
        let value = match event.kind {
            EventKind::Put => Some(event.kv.clone()),
            EventKind::Delete => None,
        };
        self.push(event.revision(), value);
    }

    /// The key's value at `revision`: its last version at or before it.
    pub fn at(&self, revision: Revision) -> Option<&KeyValue> {
        let index = self.versions.partition_point(|(rev, _)| *rev <= revision);
        self.versions[..index].last().and_then(|(_, kv)| kv.as_ref())
    }

    /// The key's current value.
    pub fn latest(&self) -> Option<&KeyValue> {
        self.versions.last().and_then(|(_, kv)| kv.as_ref())
    }

    /// Drops the versions no read at `revision` or later can see: every one
    /// before the version visible at `revision`, and that one too if it is a
    /// delete.
    pub fn compact(&mut self, revision: Revision) {
        let visible = self.versions.partition_point(|(rev, _)| *rev <= revision);
        let keep_from = match visible.checked_sub(1) {
            Some(i) if self.versions[i].1.is_some() => i,
            _ => visible,
        };
        self.versions.drain(..keep_from);
    }

    /// True if no version is left: the key can be forgotten.
    pub fn is_empty(&self) -> bool {
        self.versions.is_empty()
    }
}

/// The current state of a map of key histories: each key's latest version.
impl ReadView for &BTreeMap<String, KeyHistory> {
    fn read(&mut self, key: &str) -> Result<Option<KeyValue>> {
        Ok(self.get(key).and_then(KeyHistory::latest).cloned())
    }
}

/// The events of every retained revision, in memory: what a backend's
/// [`EventLog`](crate::backend::EventLog) serves to watches that are behind.
///
/// ```
/// use orchestra_store::backend::RevisionLog;
/// use orchestra_store::{Event, EventKind, KeyRange, KeyValue};
///
/// let put = |key: &str, revision| Event {
///     kind: EventKind::Put,
///     kv: KeyValue {
///         key: key.into(),
///         value: "v".into(),
///         create_revision: revision,
///         mod_revision: revision,
///         version: 1,
///         expires_at_ms: None,
///     },
///     prev_kv: None,
/// };
/// let mut log = RevisionLog::new();
/// log.append(1, vec![put("/a/1", 1), put("/b/1", 1)]);
/// log.append(2, vec![put("/a/2", 2)]);
///
/// let a = log.events(&KeyRange::prefix("/a/"), 1, 2);
/// assert_eq!(a.iter().map(|e| e.kv.key.as_str()).collect::<Vec<_>>(), ["/a/1", "/a/2"]);
///
/// log.compact(2);
/// assert_eq!(log.events(&KeyRange::all(), 1, 2).len(), 1, "revision 1 is gone");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RevisionLog {
    revisions: BTreeMap<Revision, Vec<Event>>,
}

impl RevisionLog {
    /// An empty log.
    pub fn new() -> RevisionLog {
        RevisionLog::default()
    }

    /// Appends the events of `revision`, which is after every revision
    /// appended before.
    pub fn append(&mut self, revision: Revision, events: Vec<Event>) {
        debug_assert!(self.revisions.last_key_value().is_none_or(|(last, _)| *last < revision));
        self.revisions.insert(revision, events);
    }

    /// Every event at revisions `from..=to` within `range`, in revision
    /// order. The log does not know the compaction revision: checking `from`
    /// against it is the caller's part
    /// ([`StoreStatus::check_watch_from`](crate::StoreStatus::check_watch_from)).
    pub fn events(&self, range: &KeyRange, from: Revision, to: Revision) -> Vec<Event> {
        self.revisions
            .range(from..=to)
            .flat_map(|(_, events)| events)
            .filter(|e| range.contains(&e.kv.key))
            .cloned()
            .collect()
    }

    /// Drops the revisions before `revision`.
    pub fn compact(&mut self, revision: Revision) {
        self.revisions = self.revisions.split_off(&revision);
    }
}

/// The TTL deadlines of the live keys, soonest first: what TTL expiry
/// ([`spawn_background`](crate::backend::spawn_background)) asks a backend for.
///
/// Every write's events go through [`apply`](ExpiryIndex::apply): a put with
/// a TTL sets the key's deadline, and any later change of the key (a put, a
/// delete) clears it. [`due`](ExpiryIndex::due) lists the keys whose
/// deadline has passed.
///
/// ```
/// use orchestra_store::backend::ExpiryIndex;
/// use orchestra_store::{Event, EventKind, KeyValue};
///
/// let session = KeyValue {
///     key: "/sessions/a".into(),
///     value: "v".into(),
///     create_revision: 3,
///     mod_revision: 3,
///     version: 1,
///     expires_at_ms: Some(1_000),
/// };
/// let mut expiries = ExpiryIndex::new();
/// expiries.apply(&[Event { kind: EventKind::Put, kv: session.clone(), prev_kv: None }]);
/// assert!(expiries.due(999).is_empty());
/// assert_eq!(expiries.due(1_000), [("/sessions/a".to_string(), 3)]);
///
/// // Deleted before its deadline: nothing left to expire.
/// expiries.apply(&[Event::deleted(session, 4)]);
/// assert!(expiries.due(2_000).is_empty());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExpiryIndex {
    /// `(deadline in ms, key)` → the mod revision of the put that set it.
    deadlines: BTreeMap<(i64, String), Revision>,
}

impl ExpiryIndex {
    /// No deadlines.
    pub fn new() -> ExpiryIndex {
        ExpiryIndex::default()
    }

    /// Records the deadlines `events` set and clears those they end.
    pub fn apply(&mut self, events: &[Event]) {
        for event in events {
            if let Some(deadline) = event.prev_kv.as_ref().and_then(|prev| prev.expires_at_ms) {
                self.deadlines.remove(&(deadline, event.kv.key.clone()));
            }
            if let (EventKind::Put, Some(deadline)) = (event.kind, event.kv.expires_at_ms) {
                self.deadlines.insert((deadline, event.kv.key.clone()), event.revision());
            }
        }
    }

    /// The keys whose deadline is at or before `now_ms`, soonest first, each
    /// with the mod revision of the put that set the deadline: what
    /// [`expire`](crate::backend::expire) deletes.
    pub fn due(&self, now_ms: i64) -> Vec<(String, Revision)> {
        self.deadlines
            .iter()
            .take_while(|((deadline, _), _)| *deadline <= now_ms)
            .map(|((_, key), revision)| (key.clone(), *revision))
            .collect()
    }

    /// How many live keys have a deadline.
    pub fn len(&self) -> usize {
        self.deadlines.len()
    }

    /// True if no live key has a deadline.
    pub fn is_empty(&self) -> bool {
        self.deadlines.is_empty()
    }
}
