//! The webhook configurations an API server keeps from a watch of its store
//! (upstream's plugins read an informer the same way), parsed once per
//! change rather than at every write.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use orchestra_store::{Event, EventKind, KeyValue};
use serde_json::Value;

use super::{Kind, Webhook};
use crate::api::ApiError;

/// The webhooks of one configuration kind: by store key (so in name
/// order), and flattened for readers.
#[derive(Default)]
struct Held {
    by_key: BTreeMap<String, Vec<Arc<Webhook>>>,
    all: Arc<[Arc<Webhook>]>,
    synced: bool,
}

impl Held {
    fn flatten(&mut self) {
        self.all = self.by_key.values().flatten().cloned().collect();
    }
}

/// The parsed webhooks of both configuration kinds.
#[derive(Default)]
pub(crate) struct WebhookCache {
    mutating: RwLock<Held>,
    validating: RwLock<Held>,
    /// Set once the server follows the configurations.
    started: AtomicBool,
}

impl std::fmt::Debug for WebhookCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookCache").finish_non_exhaustive()
    }
}

impl WebhookCache {
    fn held(&self, kind: Kind) -> &RwLock<Held> {
        match kind {
            Kind::Mutating => &self.mutating,
            Kind::Validating => &self.validating,
        }
    }

    fn kind_of(prefix: &str) -> Option<Kind> {
        [Kind::Mutating, Kind::Validating]
            .into_iter()
            .find(|kind| prefix.trim_end_matches('/').ends_with(kind.plural()))
    }

    /// Marks the cache as followed by a running server.
    pub(crate) fn start(&self) {
        self.started.store(true, Ordering::SeqCst);
    }

    /// The webhooks of `kind`'s configurations; 503 until the server has
    /// listed them.
    pub(crate) fn webhooks(&self, kind: Kind) -> Result<Arc<[Arc<Webhook>]>, ApiError> {
        let held = self.held(kind).read().unwrap_or_else(|e| e.into_inner());
        match held.synced {
            true => Ok(held.all.clone()),
            false if !self.started.load(Ordering::SeqCst) => {
                Err(ApiError::unavailable("the API server is not running"))
            }
            false => Err(ApiError::unavailable("the webhook configurations are not loaded yet")),
        }
    }

    fn parse(kv: &KeyValue) -> Vec<Arc<Webhook>> {
        match serde_json::from_slice::<Value>(&kv.value) {
            Ok(configuration) => Webhook::of_configuration(&configuration),
            Err(error) => {
                tracing::warn!(key = %kv.key, %error, "a stored webhook configuration is corrupt; ignored");
                Vec::new()
            }
        }
    }
}

impl crate::server::Follower for WebhookCache {
    fn reset(&self, prefix: &str, listed: Vec<KeyValue>) {
        let Some(kind) = WebhookCache::kind_of(prefix) else { return };
        let mut held = self.held(kind).write().unwrap_or_else(|e| e.into_inner());
        held.by_key = listed.iter().map(|kv| (kv.key.clone(), WebhookCache::parse(kv))).collect();
        held.synced = true;
        held.flatten();
    }

    fn apply(&self, prefix: &str, event: &Event) {
        let Some(kind) = WebhookCache::kind_of(prefix) else { return };
        let mut held = self.held(kind).write().unwrap_or_else(|e| e.into_inner());
        match event.kind {
            EventKind::Delete => {
                held.by_key.remove(&event.kv.key);
            }
            _ => {
                held.by_key.insert(event.kv.key.clone(), WebhookCache::parse(&event.kv));
            }
        }
        held.flatten();
    }
}
