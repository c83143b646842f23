//! Caches the server keeps of a store prefix (RBAC's roles and bindings,
//! the Node authorizer's graph), filled from a list and kept current from a
//! watch, as an informer keeps its cache.

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::StreamExt;
use orchestra_store::{Error as StoreError, Event, EventFilter, KeyRange, KeyValue, Revision, Store, WatchRequest};

/// What a followed prefix feeds: a full list, then each change.
pub(crate) trait Follower: Send + Sync + 'static {
    /// Replaces what the follower holds of `prefix` with `listed`.
    fn reset(&self, prefix: &str, listed: Vec<KeyValue>);

    /// One change under `prefix`, in revision order.
    fn apply(&self, prefix: &str, event: &Event);

    /// The changes under `prefix` the follower has no use for, left out of
    /// its watch where the store can ([`WatchRequest::with_filter`]); by
    /// default none. [`Follower::apply`] must still be right for the
    /// changes the filter rejects, which a store may deliver anyway.
    fn filter(&self, _prefix: &str) -> Option<EventFilter> {
        None
    }
}

/// Lists `prefix` into `follower`, then starts the task that keeps it
/// current: it watches from the listed revision and, when the watch ends
/// (the store compacted past it, a connection dropped), lists again,
/// keeping what the follower holds meanwhile. The task ends when the
/// follower is dropped. Fails only if the first list fails.
pub(crate) async fn follow<F: Follower>(
    follower: &Arc<F>,
    store: &Arc<dyn Store>,
    prefix: String,
    what: &'static str,
) -> Result<(), StoreError> {
    let from = load(&**follower, &**store, &prefix).await?;
    let filter = follower.filter(&prefix);
    let weak = Arc::downgrade(follower);
    tokio::spawn(watch(weak, store.clone(), prefix, filter, from, what));
    Ok(())
}

async fn load<F: Follower>(follower: &F, store: &dyn Store, prefix: &str) -> Result<Revision, StoreError> {
    let mut listed = Vec::new();
    let revision = super::list_prefix(store, prefix, |kv| listed.push(kv.clone())).await?;
    follower.reset(prefix, listed);
    Ok(revision)
}

async fn watch<F: Follower>(
    follower: Weak<F>,
    store: Arc<dyn Store>,
    prefix: String,
    filter: Option<EventFilter>,
    mut from: Revision,
    what: &'static str,
) {
    loop {
        let mut request = WatchRequest::new(KeyRange::prefix(prefix.clone())).from_revision(from + 1);
        request.filter = filter.clone();
        if let Ok(mut stream) = store.watch(request).await {
            while let Some(Ok(response)) = stream.next().await {
                let Some(follower) = follower.upgrade() else { return };
                for event in &response.events {
                    follower.apply(&prefix, event);
                }
            }
        }
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let Some(follower) = follower.upgrade() else { return };
            match load(&*follower, &*store, &prefix).await {
                Ok(revision) => {
                    from = revision;
                    break;
                }
                Err(error) => tracing::warn!(%error, what, %prefix, "list failed; retrying"),
            }
        }
    }
}
