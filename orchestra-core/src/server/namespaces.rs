//! The namespaces [`NamespaceLifecycle`](crate::auth::admission::NamespaceLifecycle) checks every namespaced create
//! against, kept from a watch of the store (upstream's plugin reads an
//! informer the same way) so that a create does not read its namespace from
//! the store.
//!
//! Only an active namespace is taken from the cache. Any other answer — a
//! namespace the cache does not hold (one created a moment ago, or any
//! while the watch is being re-established), one terminating or deleted —
//! sends the caller to the store. A namespace stops being active only
//! through a delete, and this server records its own deletes at once, so
//! the cache can be stale only about deletes made through another server,
//! by the watch's delivery delay, as upstream's informer is.

use std::collections::HashMap;
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use orchestra_store::{EventKind, KeyRange, KeyValue, Revision, Store, WatchRequest};

use super::objects::store_error;
use super::state::State;
use crate::api::ApiError;
use crate::auth::admission::{NamespaceLister, NamespacePhase as Phase, namespace_target};

/// The namespaces of one server as [`NamespaceLifecycle`](crate::auth::admission::NamespaceLifecycle) reads them: an
/// active namespace from the cache, any other answer from the store.
pub(crate) struct ServerNamespaces {
    pub cache: Arc<NamespaceCache>,
    pub store: Arc<dyn Store>,
}

#[async_trait]
impl NamespaceLister for ServerNamespaces {
    async fn phase(&self, name: &str) -> Result<Option<Phase>, ApiError> {
        if self.cache.phase(name) == Some(Phase::Active) {
            return Ok(Some(Phase::Active));
        }
        let key = format!("/registry/namespaces/{name}");
        let stored = self.store.get(&key).await.map_err(|e| store_error(e, &namespace_target(name)))?;
        match stored.as_ref().map(phase_of) {
            None => Ok(None),
            Some(Some(phase)) => Ok(Some(phase)),
            Some(None) => Err(ApiError::internal("stored namespace is corrupt")),
        }
    }
}

/// Namespace name → phase (`None`: deleted) and the revision it was read
/// at, for namespaces the watch has seen.
#[derive(Default)]
pub(crate) struct NamespaceCache {
    phases: RwLock<HashMap<String, (Option<Phase>, Revision)>>,
}

impl NamespaceCache {
    /// The phase of `name`, if the cache holds it.
    pub(crate) fn phase(&self, name: &str) -> Option<Phase> {
        self.phases.read().unwrap_or_else(|e| e.into_inner()).get(name).and_then(|(phase, _)| *phase)
    }

    /// Records a namespace this server just wrote, ahead of the watch.
    pub(crate) fn observe(&self, kv: &KeyValue) {
        self.apply(kv, false);
    }

    /// Records that this server just deleted the namespace whose last
    /// version was `prev`, ahead of the watch.
    pub(crate) fn observe_delete(&self, prev: &KeyValue) {
        let mut gone = prev.clone();
        gone.mod_revision += 1;
        self.apply(&gone, true);
    }

    /// Records a put (or, with `deleted`, a delete) of a namespace key. A
    /// put older than what the cache holds (the watch catching up with an
    /// [`observe`](Self::observe)) changes nothing.
    fn apply(&self, kv: &KeyValue, deleted: bool) {
        let Some(name) = kv.key.rsplit('/').next() else { return };
        let mut phases = self.phases.write().unwrap_or_else(|e| e.into_inner());
        if phases.get(name).is_some_and(|(_, seen)| *seen > kv.mod_revision) {
            return;
        }
        let phase = if deleted { None } else { phase_of(kv) };
        phases.insert(name.to_owned(), (phase, kv.mod_revision));
    }

    fn clear(&self) {
        self.phases.write().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

/// The phase a stored namespace is in, or `None` if it does not decode.
pub(crate) fn phase_of(kv: &KeyValue) -> Option<Phase> {
    #[derive(serde::Deserialize)]
    struct Object {
        #[serde(default)]
        metadata: Metadata,
    }
    #[derive(serde::Deserialize, Default)]
    struct Metadata {
        #[serde(rename = "deletionTimestamp")]
        deletion_timestamp: Option<serde::de::IgnoredAny>,
    }
    let object: Object = serde_json::from_slice(&kv.value).ok()?;
    Some(match object.metadata.deletion_timestamp {
        Some(_) => Phase::Terminating,
        None => Phase::Active,
    })
}

/// The store prefix of namespaces, if the registry serves them.
fn prefix(state: &State) -> Option<String> {
    state.registry().get("", "v1", "namespaces").map(|info| info.storage_prefix())
}

/// Fills the cache from a list and returns the revision listed at.
async fn load(state: &State, prefix: &str) -> Result<Revision, orchestra_store::Error> {
    state.namespaces.clear();
    super::list::list_prefix(&*state.store, prefix, |kv| state.namespaces.apply(kv, false)).await
}

/// Starts the task that keeps `state.namespaces` up to date; it ends when
/// the server's state is dropped.
pub(crate) fn spawn(state: &Arc<State>) {
    let Some(prefix) = prefix(state) else { return };
    let weak: Weak<State> = Arc::downgrade(state);
    tokio::spawn(async move {
        loop {
            let Some(state) = weak.upgrade() else { return };
            let from = match load(&state, &prefix).await {
                Ok(revision) => revision,
                Err(error) => {
                    tracing::warn!(%error, "namespace list failed; retrying");
                    drop(state);
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            let request = WatchRequest::new(KeyRange::prefix(prefix.clone())).from_revision(from + 1);
            let stream = state.store.watch(request).await;
            drop(state);
            if let Ok(mut stream) = stream {
                while let Some(Ok(response)) = stream.next().await {
                    let Some(state) = weak.upgrade() else { return };
                    for event in &response.events {
                        state.namespaces.apply(&event.kv, event.kind == EventKind::Delete);
                    }
                }
            }
            // The watch ended or broke: forget everything (lookups go to the
            // store) until the relist.
            if let Some(state) = weak.upgrade() {
                state.namespaces.clear();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, value: &str) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: value.as_bytes().to_vec().into(),
            create_revision: 1,
            mod_revision: 1,
            version: 1,
            expires_at_ms: None,
        }
    }

    #[test]
    fn phases_follow_the_deletion_timestamp_and_deletes() {
        let cache = NamespaceCache::default();
        cache.apply(&kv("/registry/namespaces/a", r#"{"metadata":{"name":"a"}}"#), false);
        assert_eq!(cache.phase("a"), Some(Phase::Active));
        let terminating = r#"{"metadata":{"name":"a","deletionTimestamp":"2026-01-01T00:00:00Z"}}"#;
        cache.apply(&kv("/registry/namespaces/a", terminating), false);
        assert_eq!(cache.phase("a"), Some(Phase::Terminating));
        // A late event from before what the cache holds changes nothing.
        let mut stale = kv("/registry/namespaces/a", r#"{"metadata":{"name":"a"}}"#);
        stale.mod_revision = 0;
        cache.apply(&stale, false);
        assert_eq!(cache.phase("a"), Some(Phase::Terminating));
        cache.observe_delete(&kv("/registry/namespaces/a", terminating));
        assert_eq!(cache.phase("a"), None);
        // The watch's late events of the deleted namespace change nothing;
        // a namespace made again under the name does.
        cache.apply(&kv("/registry/namespaces/a", r#"{"metadata":{"name":"a"}}"#), false);
        assert_eq!(cache.phase("a"), None);
        let mut again = kv("/registry/namespaces/a", r#"{"metadata":{"name":"a"}}"#);
        again.mod_revision = 5;
        cache.apply(&again, false);
        assert_eq!(cache.phase("a"), Some(Phase::Active));
        // What does not decode is not guessed at.
        cache.apply(&kv("/registry/namespaces/b", "not json"), false);
        assert_eq!(cache.phase("b"), None);
    }
}
