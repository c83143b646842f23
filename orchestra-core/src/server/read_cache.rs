//! The objects admission plugins read on nearly every write — Namespaces,
//! LimitRanges, ResourceQuotas, PriorityClasses, ServiceAccounts — kept
//! decoded in memory, so that a pod create does not read them from the
//! store (upstream's plugins read the same kinds from informers).
//!
//! The cache is filled from a list and kept current from a watch of each
//! kind's prefix ([`follow`](super::follow)), and the server's own writes
//! of those kinds are applied to it before their response is sent
//! ([`FeedingStore`]): what a client wrote through this server, the next
//! request sees. Writes made through another server reach it by the watch's
//! delay, as an informer's cache. Each key keeps the revision it was last
//! seen at (a deleted key a tombstone), so that the watch's older events
//! never undo a newer write. Until a kind's first list is in, and whenever
//! an object of it does not decode, reads of that kind go to the store.

use std::collections::{BTreeMap, HashSet};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use orchestra_store::{
    Event, EventKind, KeyValue, OpResponse, RangeRequest, RangeResponse, Result, Revision, Store, StoreStatus, Txn,
    TxnResponse, WatchRequest, WatchStream,
};
use serde_json::Value;

use super::codec::decode_served;
use super::follow::Follower;
use crate::api::ResourceInfo;

/// The kinds the cache holds, as (group, version, plural).
pub(crate) const CACHED: [(&str, &str, &str); 5] = [
    ("", "v1", "namespaces"),
    ("", "v1", "limitranges"),
    ("", "v1", "resourcequotas"),
    ("", "v1", "serviceaccounts"),
    ("scheduling.k8s.io", "v1", "priorityclasses"),
];

/// One key's state: the revision it was last seen at and its object
/// (`None`: deleted).
type Entry = (Revision, Option<Arc<Value>>);

/// One cached kind.
struct Kind {
    /// Its store prefix.
    prefix: String,
    /// How to decode its objects.
    info: Arc<ResourceInfo>,
    /// Whether the cache holds its objects. A flag per kind, read without a
    /// lock: every admitted write asks.
    ready: AtomicBool,
}

/// Decoded objects of the [`CACHED`] kinds, by store key.
#[derive(Default)]
pub(crate) struct ReadCache {
    kinds: Vec<Kind>,
    entries: RwLock<BTreeMap<String, Entry>>,
}

impl ReadCache {
    /// A cache of `kinds` (not filled yet).
    pub(crate) fn new(kinds: Vec<Arc<ResourceInfo>>) -> ReadCache {
        let kinds =
            kinds.into_iter().map(|info| Kind { prefix: info.storage_prefix(), info, ready: AtomicBool::new(false) });
        ReadCache { kinds: kinds.collect(), ..Default::default() }
    }

    /// The store prefixes to follow.
    pub(crate) fn prefixes(&self) -> impl Iterator<Item = &str> {
        self.kinds.iter().map(|kind| kind.prefix.as_str())
    }

    /// The kind whose prefix `key` (or a narrower prefix) is under, if it is
    /// cached and ready.
    fn ready_kind(&self, key: &str) -> Option<&Kind> {
        self.kind_of(key).filter(|kind| kind.ready.load(Ordering::Acquire))
    }

    fn kind_of(&self, key: &str) -> Option<&Kind> {
        self.kinds.iter().find(|kind| key.starts_with(kind.prefix.as_str()))
    }

    /// The object at `key`: `None` when the cache cannot tell (not one of
    /// its kinds, or not ready), `Some(None)` when there is none.
    pub(crate) fn get(&self, key: &str) -> Option<Option<Arc<Value>>> {
        self.ready_kind(key)?;
        let entries = self.entries.read().unwrap_or_else(|e| e.into_inner());
        Some(entries.get(key).and_then(|(_, object)| object.clone()))
    }

    /// The objects under `prefix` (a kind's, or one namespace's of it), in
    /// key order; `None` when the cache cannot tell.
    pub(crate) fn list(&self, prefix: &str) -> Option<Vec<Arc<Value>>> {
        self.ready_kind(prefix)?;
        let entries = self.entries.read().unwrap_or_else(|e| e.into_inner());
        let under = entries
            .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(|(key, _)| key.starts_with(prefix));
        Some(under.filter_map(|(_, (_, object))| object.clone()).collect())
    }

    /// Records `key` as `object` at `revision`, unless the cache has seen
    /// it at a later revision.
    fn record(&self, key: &str, revision: Revision, object: Option<Arc<Value>>) {
        let mut entries = self.entries.write().unwrap_or_else(|e| e.into_inner());
        match entries.get(key) {
            Some((seen, _)) if *seen >= revision => {}
            _ => {
                entries.insert(key.to_owned(), (revision, object));
            }
        }
    }

    /// A put of `kv`: decoded and recorded; a value that does not decode
    /// takes its kind out of service (reads go to the store) until the next
    /// full list. False for such a value.
    fn put(&self, kv: &KeyValue) -> bool {
        let Some(kind) = self.kind_of(&kv.key) else { return true };
        match decode_served(&kind.info, kv) {
            Ok(object) => {
                self.record(&kv.key, kv.mod_revision, Some(Arc::new(object)));
                true
            }
            Err(error) => {
                tracing::warn!(key = kv.key, %error, "an object of a cached kind does not decode; reading the store");
                kind.ready.store(false, Ordering::Release);
                false
            }
        }
    }

    fn delete(&self, key: &str, revision: Revision) {
        if self.kind_of(key).is_some() {
            self.record(key, revision, None);
        }
    }
}

impl Follower for ReadCache {
    fn reset(&self, prefix: &str, listed: Vec<KeyValue>) {
        {
            // What the list does not hold is gone. A write of this server's
            // own made after the list was read is dropped with it for a
            // moment: the watch, which starts after the list's revision,
            // brings it back.
            let mut entries = self.entries.write().unwrap_or_else(|e| e.into_inner());
            let keep: HashSet<&str> = listed.iter().map(|kv| kv.key.as_str()).collect();
            entries.retain(|key, _| !key.starts_with(prefix) || keep.contains(key.as_str()));
        }
        let mut decoded = true;
        for kv in &listed {
            decoded &= self.put(kv);
        }
        if decoded && let Some(kind) = self.kinds.iter().find(|kind| kind.prefix == prefix) {
            kind.ready.store(true, Ordering::Release);
        }
    }

    fn apply(&self, _prefix: &str, event: &Event) {
        match event.kind {
            EventKind::Put => {
                self.put(&event.kv);
            }
            EventKind::Delete => self.delete(&event.kv.key, event.kv.mod_revision),
        }
    }
}

/// The server's store, applying each successful write of a cached kind to
/// the [`ReadCache`] before returning.
pub(crate) struct FeedingStore {
    pub inner: Arc<dyn Store>,
    pub cache: Arc<ReadCache>,
}

#[async_trait]
impl Store for FeedingStore {
    async fn range(&self, request: RangeRequest) -> Result<RangeResponse> {
        self.inner.range(request).await
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        let response = self.inner.txn(txn).await?;
        for op in &response.responses {
            match op {
                OpResponse::Put { kv, .. } => {
                    self.cache.put(kv);
                }
                OpResponse::Delete { prev_kv: Some(prev) } => self.cache.delete(&prev.key, response.revision),
                _ => {}
            }
        }
        Ok(response)
    }

    async fn watch(&self, request: WatchRequest) -> Result<WatchStream> {
        self.inner.watch(request).await
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.inner.compact(revision).await
    }

    async fn status(&self) -> Result<StoreStatus> {
        self.inner.status().await
    }

    async fn stale(&self, key: &str, revision: Revision) -> Result<bool> {
        self.inner.stale(key, revision).await
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use orchestra_store::MemStore;
    use serde_json::json;

    use super::*;
    use crate::api::Registry;

    fn cache() -> Arc<ReadCache> {
        let registry = Registry::builtin();
        let kinds = CACHED.iter().filter_map(|(g, v, r)| registry.get(g, v, r)).collect();
        Arc::new(ReadCache::new(kinds))
    }

    fn range(name: &str, namespace: &str) -> Bytes {
        json!({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": name, "namespace": namespace}})
            .to_string()
            .into()
    }

    fn names(objects: &[Arc<Value>]) -> Vec<&str> {
        objects.iter().filter_map(|o| o["metadata"]["name"].as_str()).collect()
    }

    #[tokio::test]
    async fn serves_what_was_listed_and_written_and_nothing_else() {
        let raw: Arc<dyn Store> = Arc::new(MemStore::new());
        let cache = cache();
        let store = FeedingStore { inner: raw.clone(), cache: cache.clone() };
        raw.put("/registry/limitranges/a/old", range("old", "a"), None).await.unwrap();
        // Not ready: the caller reads the store.
        assert_eq!(cache.list("/registry/limitranges/a/"), None);
        assert_eq!(cache.get("/registry/limitranges/a/old"), None);
        super::super::follow::follow(&cache, &raw, "/registry/limitranges/".into(), "test").await.unwrap();
        assert_eq!(names(&cache.list("/registry/limitranges/a/").unwrap()), ["old"]);

        // A write through the server is there at once, with its resourceVersion.
        let written = store.put("/registry/limitranges/a/new", range("new", "a"), None).await.unwrap();
        let listed = cache.list("/registry/limitranges/a/").unwrap();
        assert_eq!(names(&listed), ["new", "old"]);
        assert_eq!(listed[0]["metadata"]["resourceVersion"], written.mod_revision.to_string());
        store.put("/registry/limitranges/b/other", range("other", "b"), None).await.unwrap();
        assert_eq!(names(&cache.list("/registry/limitranges/a/").unwrap()), ["new", "old"]);
        assert_eq!(names(&cache.list("/registry/limitranges/").unwrap()), ["new", "old", "other"]);

        // A delete through the server, then the watch's older put of the same
        // key: the delete stands.
        store.delete("/registry/limitranges/a/new", None).await.unwrap();
        assert_eq!(cache.get("/registry/limitranges/a/new"), Some(None));
        let stale = KeyValue { mod_revision: written.mod_revision, ..written.clone() };
        cache.apply("/registry/limitranges/", &Event { kind: EventKind::Put, kv: stale, prev_kv: None });
        assert_eq!(cache.get("/registry/limitranges/a/new"), Some(None));

        // Writes made elsewhere arrive by the watch.
        raw.delete("/registry/limitranges/a/old", None).await.unwrap();
        for _ in 0..100 {
            if cache.get("/registry/limitranges/a/old") == Some(None) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(cache.get("/registry/limitranges/a/old"), Some(None));

        // Kinds it does not hold, and kinds not followed yet, are the store's.
        assert_eq!(cache.get("/registry/pods/a/p"), None);
        assert_eq!(cache.list("/registry/priorityclasses/"), None);
    }

    #[tokio::test]
    async fn a_new_list_replaces_what_the_cache_held() {
        let raw = MemStore::new();
        let a = raw.put("/registry/limitranges/a/a", range("a", "a"), None).await.unwrap();
        let b = raw.put("/registry/limitranges/a/b", range("b", "a"), None).await.unwrap();
        let cache = cache();
        cache.reset("/registry/limitranges/", vec![a.clone(), b]);
        assert_eq!(names(&cache.list("/registry/limitranges/").unwrap()), ["a", "b"]);
        // Listed again after a watch broke: `b` was deleted meanwhile.
        cache.reset("/registry/limitranges/", vec![a]);
        assert_eq!(names(&cache.list("/registry/limitranges/").unwrap()), ["a"]);
        assert_eq!(cache.get("/registry/limitranges/a/b"), Some(None));
    }

    #[tokio::test]
    async fn an_object_that_does_not_decode_sends_reads_to_the_store() {
        let raw: Arc<dyn Store> = Arc::new(MemStore::new());
        let cache = cache();
        super::super::follow::follow(&cache, &raw, "/registry/limitranges/".into(), "test").await.unwrap();
        assert_eq!(cache.list("/registry/limitranges/"), Some(vec![]));
        let store = FeedingStore { inner: raw, cache: cache.clone() };
        store.put("/registry/limitranges/a/bad", Bytes::from_static(b"not json"), None).await.unwrap();
        assert_eq!(cache.list("/registry/limitranges/"), None);
    }
}
