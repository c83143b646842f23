//! Keys, values, revisions, events and key ranges: the store's data model.

use bytes::Bytes;

/// A store revision. Revision 0 means "none" (an absent key's mod revision,
/// "the current revision" in a read, "from now" in a watch); the first write
/// has revision 1 and every write after it takes the next one.
pub type Revision = i64;

/// One key with its value and MVCC metadata, as of some revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    /// The key, e.g. `/registry/pods/default/web-0`.
    pub key: String,
    /// The value (opaque bytes).
    pub value: Bytes,
    /// Revision at which the key was (last) created.
    pub create_revision: Revision,
    /// Revision of the last write to the key.
    pub mod_revision: Revision,
    /// Number of writes since the key was created: 1 after the create.
    pub version: i64,
    /// When the key expires, in milliseconds since the Unix epoch, if it was
    /// written with a TTL.
    pub expires_at_ms: Option<i64>,
}

/// What happened to a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// The key was created or updated.
    Put,
    /// The key was deleted (explicitly or because its TTL ran out).
    Delete,
}

/// A change to one key, as delivered by a watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Put or delete.
    pub kind: EventKind,
    /// For a put, the new key-value. For a delete, the key with an empty value,
    /// `mod_revision` set to the revision of the delete and version 0.
    pub kv: KeyValue,
    /// The key-value before this change, if the key existed.
    pub prev_kv: Option<KeyValue>,
}

impl Event {
    /// The revision at which the change happened.
    pub fn revision(&self) -> Revision {
        self.kv.mod_revision
    }

    /// Builds the delete event for `prev`, deleted at `revision`.
    pub fn deleted(prev: KeyValue, revision: Revision) -> Event {
        Event {
            kind: EventKind::Delete,
            kv: KeyValue {
                key: prev.key.clone(),
                value: Bytes::new(),
                create_revision: 0,
                mod_revision: revision,
                version: 0,
                expires_at_ms: None,
            },
            prev_kv: Some(prev),
        }
    }
}

/// A set of keys: one key, every key under a prefix, or a half-open interval.
///
/// Ranges are compared on the keys' UTF-8 bytes, the order a `BTreeMap<String, _>`
/// and RocksDB both use.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyRange {
    start: String,
    end: RangeEnd,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum RangeEnd {
    /// Only `start` itself.
    Single,
    /// Keys `>= start` that begin with the prefix.
    Prefix(String),
    /// Keys `>= start` and `< end`.
    Before(String),
    /// Keys `>= start`.
    Unbounded,
}

impl KeyRange {
    /// Exactly one key.
    pub fn key(key: impl Into<String>) -> KeyRange {
        KeyRange { start: key.into(), end: RangeEnd::Single }
    }

    /// Every key that begins with `prefix` (the prefix itself included).
    pub fn prefix(prefix: impl Into<String>) -> KeyRange {
        let prefix = prefix.into();
        KeyRange { start: prefix.clone(), end: RangeEnd::Prefix(prefix) }
    }

    /// Keys in `[start, end)`.
    pub fn between(start: impl Into<String>, end: impl Into<String>) -> KeyRange {
        KeyRange { start: start.into(), end: RangeEnd::Before(end.into()) }
    }

    /// Every key `>= start`.
    pub fn from(start: impl Into<String>) -> KeyRange {
        KeyRange { start: start.into(), end: RangeEnd::Unbounded }
    }

    /// Every key in the store.
    pub fn all() -> KeyRange {
        KeyRange::from("")
    }

    /// The smallest key the range can hold.
    pub fn start(&self) -> &str {
        &self.start
    }

    /// True if the range holds exactly one key.
    pub fn is_single_key(&self) -> bool {
        self.end == RangeEnd::Single
    }

    /// True if `key` lies in the range.
    pub fn contains(&self, key: &str) -> bool {
        key >= self.start.as_str() && !self.is_past_end(key)
    }

    /// True if `key` sorts after every key of the range (so a scan that has
    /// reached it can stop). Keys before `start` are not "past the end".
    pub fn is_past_end(&self, key: &str) -> bool {
        match &self.end {
            RangeEnd::Single => key > self.start.as_str(),
            RangeEnd::Prefix(p) => !key.starts_with(p.as_str()) && key > p.as_str(),
            RangeEnd::Before(end) => key >= end.as_str(),
            RangeEnd::Unbounded => false,
        }
    }

    /// The smallest byte string above every key of the range (an exclusive
    /// upper bound a storage iterator can stop at), or `None` when the range
    /// is unbounded.
    pub fn upper_bound(&self) -> Option<Vec<u8>> {
        match &self.end {
            RangeEnd::Single => {
                let mut bound = self.start.as_bytes().to_vec();
                bound.push(0);
                Some(bound)
            }
            RangeEnd::Prefix(p) => prefix_end(p.as_bytes()),
            RangeEnd::Before(end) => Some(end.as_bytes().to_vec()),
            RangeEnd::Unbounded => None,
        }
    }

    /// The same range, restricted to keys strictly after `key`: the
    /// continuation of a paginated read whose last returned key was `key`.
    pub fn after(&self, key: &str) -> KeyRange {
        let mut start = String::with_capacity(key.len() + 1);
        start.push_str(key);
        start.push('\0');
        let end = match &self.end {
            // The single key was `key` itself (or not in range): nothing after it.
            RangeEnd::Single => RangeEnd::Before(start.clone()),
            other => other.clone(),
        };
        KeyRange { start: start.max(self.start.clone()), end }
    }

    /// True if no key can lie in the range.
    pub fn is_empty(&self) -> bool {
        match &self.end {
            RangeEnd::Before(end) => end.as_str() <= self.start.as_str(),
            RangeEnd::Prefix(p) => !self.start.starts_with(p.as_str()) && self.start.as_str() > p.as_str(),
            RangeEnd::Single | RangeEnd::Unbounded => false,
        }
    }
}

/// The first byte string after every string that begins with `prefix`, or
/// `None` if there is none (an empty prefix, or one made only of `0xff`).
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_contains_only_its_keys() {
        let r = KeyRange::prefix("/registry/pods/");
        assert!(r.contains("/registry/pods/"));
        assert!(r.contains("/registry/pods/default/a"));
        assert!(!r.contains("/registry/pods"));
        assert!(!r.contains("/registry/podsx"));
        assert!(!r.contains("/registry/pod/"));
        assert!(!r.is_past_end("/registry/pod/"));
        assert!(r.is_past_end("/registry/pods0"));
    }

    #[test]
    fn between_is_half_open() {
        let r = KeyRange::between("/b", "/d");
        assert!(!r.contains("/a"));
        assert!(r.contains("/b"));
        assert!(r.contains("/c/zzz"));
        assert!(!r.contains("/d"));
        assert!(KeyRange::between("/d", "/b").is_empty());
    }

    #[test]
    fn after_continues_a_scan() {
        let r = KeyRange::prefix("/p/");
        let next = r.after("/p/b");
        assert!(!next.contains("/p/b"));
        assert!(next.contains("/p/b/c"));
        assert!(next.contains("/p/c"));
        assert!(!next.contains("/q"));
        let single = KeyRange::key("/k").after("/k");
        assert!(single.is_empty());
        assert!(!single.contains("/k"));
    }

    #[test]
    fn single_key() {
        let r = KeyRange::key("/a");
        assert!(r.contains("/a"));
        assert!(!r.contains("/a/b"));
        assert!(r.is_past_end("/a/b"));
        assert!(!r.is_past_end("/"));
    }

    #[test]
    fn upper_bounds_are_exclusive_and_tight() {
        assert_eq!(KeyRange::key("/a").upper_bound(), Some(b"/a\0".to_vec()));
        assert_eq!(KeyRange::prefix("/p/").upper_bound(), Some(b"/p0".to_vec()));
        assert_eq!(KeyRange::between("/b", "/d").upper_bound(), Some(b"/d".to_vec()));
        assert_eq!(KeyRange::from("/x").upper_bound(), None);
        assert_eq!(KeyRange::prefix("").upper_bound(), None);
        assert_eq!(prefix_end(&[b'a', 0xff, 0xff]), Some(vec![b'b']));
        // Every key of the range sorts below its bound.
        let r = KeyRange::prefix("/p/");
        let bound = r.upper_bound().unwrap();
        for key in ["/p/", "/p/a", "/p/\u{7f}\u{7f}"] {
            assert!(r.contains(key) && key.as_bytes() < bound.as_slice(), "{key}");
        }
    }
}
