//! The objects of recent watch events, decoded and encoded once for every
//! watcher. Each watch reads its own store watch, but an event reaches
//! every watcher of its resource at about the same time: the first decodes
//! the stored bytes and the first JSON watcher encodes the object, the
//! others reuse both (upstream's watch cache shares events the same way,
//! as `cachingObject`s).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use bytes::Bytes;
use orchestra_store::{KeyValue, Revision};
use serde_json::Value;

use super::codec::decode_served;
use crate::api::ResourceInfo;
use crate::api::meta::metadata_mut;

/// How many event objects are kept (the oldest go first). Watchers of one
/// event read it within moments of each other, so a short window shares
/// nearly every decode; one that lags further decodes for itself. (8192
/// decoded pods cost about 100 MB.)
const CAPACITY: usize = 1024;

/// An object as a watch event shows it: decoded, converted to the served
/// version, stamped with the event's resource version.
#[derive(Debug)]
pub(crate) struct WatchObject {
    /// The object.
    pub value: Value,
    json: OnceLock<Bytes>,
}

impl WatchObject {
    fn new(value: Value) -> WatchObject {
        WatchObject { value, json: OnceLock::new() }
    }

    /// The object as JSON (encoded by the first watcher that asks).
    pub fn json(&self) -> &Bytes {
        self.json.get_or_init(|| Bytes::from(serde_json::to_vec(&self.value).expect("JSON values serialize")))
    }
}

/// Which object: the served resource (group/version/plural), the store key
/// and the revision the object is shown at.
type ObjectKey = (Arc<str>, String, Revision);

/// The recent watch event objects of every resource.
#[derive(Default)]
pub(crate) struct WatchObjects {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    objects: HashMap<ObjectKey, Arc<WatchObject>>,
    order: VecDeque<ObjectKey>,
}

impl WatchObjects {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The identity of `resource` in the keys of this cache.
    pub fn resource_id(resource: &ResourceInfo) -> Arc<str> {
        Arc::from(format!("{}/{}/{}", resource.group, resource.version, resource.plural))
    }

    /// The object stored in `stored` as of `revision` (the revision of the
    /// write for a put, of the delete for a delete), decoded once.
    pub fn get(
        &self,
        resource_id: &Arc<str>,
        resource: &ResourceInfo,
        stored: &KeyValue,
        revision: Revision,
    ) -> Option<Arc<WatchObject>> {
        let key = (resource_id.clone(), stored.key.clone(), revision);
        if let Some(found) = self.lock().objects.get(&key) {
            return Some(found.clone());
        }
        let mut value = decode_served(resource, stored).ok()?;
        if revision != stored.mod_revision {
            metadata_mut(&mut value).insert("resourceVersion".into(), revision.to_string().into());
        }
        let object = Arc::new(WatchObject::new(value));
        let mut inner = self.lock();
        // Another watcher may have decoded it meanwhile: keep one.
        if let Some(found) = inner.objects.get(&key) {
            return Some(found.clone());
        }
        if inner.order.len() >= CAPACITY
            && let Some(oldest) = inner.order.pop_front()
        {
            inner.objects.remove(&oldest);
        }
        inner.order.push_back(key.clone());
        inner.objects.insert(key, object.clone());
        Some(object)
    }

    /// Number of objects kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().objects.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(name: &str, revision: Revision, body: &str) -> KeyValue {
        KeyValue {
            key: format!("/registry/configmaps/default/{name}"),
            value: Bytes::from(body.to_owned()),
            create_revision: 1,
            mod_revision: revision,
            version: 1,
            expires_at_ms: None,
        }
    }

    #[test]
    fn decodes_and_encodes_each_event_object_once() {
        let registry = crate::api::Registry::builtin();
        let resource = registry.get("", "v1", "configmaps").expect("configmaps").clone();
        let id = WatchObjects::resource_id(&resource);
        let cache = WatchObjects::default();
        let stored = kv("a", 5, r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"k":"v"}}"#);
        let first = cache.get(&id, &resource, &stored, 5).unwrap();
        let second = cache.get(&id, &resource, &stored, 5).unwrap();
        assert!(Arc::ptr_eq(&first, &second));
        assert_eq!(first.value["metadata"]["resourceVersion"], "5");
        assert!(std::ptr::eq(first.json(), second.json()));
        let json: Value = serde_json::from_slice(second.json()).unwrap();
        assert_eq!(json, first.value);
        // A delete at revision 7 shows the last version stamped with 7.
        let deleted = cache.get(&id, &resource, &stored, 7).unwrap();
        assert_eq!(deleted.value["metadata"]["resourceVersion"], "7");
        assert!(!Arc::ptr_eq(&first, &deleted));
        // Corrupt bytes decode to nothing and are not kept.
        assert!(cache.get(&id, &resource, &kv("b", 8, "{"), 8).is_none());
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn keeps_a_bounded_number_of_objects() {
        let registry = crate::api::Registry::builtin();
        let resource = registry.get("", "v1", "configmaps").expect("configmaps").clone();
        let id = WatchObjects::resource_id(&resource);
        let cache = WatchObjects::default();
        for i in 0..CAPACITY as i64 + 10 {
            let stored =
                kv(&format!("c{i}"), i + 1, r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}}"#);
            cache.get(&id, &resource, &stored, i + 1).unwrap();
        }
        assert_eq!(cache.len(), CAPACITY);
    }
}
