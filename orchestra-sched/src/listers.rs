//! Listers: the API objects besides nodes and pods that plugins read
//! (PersistentVolumeClaims, PersistentVolumes, StorageClasses,
//! PodDisruptionBudgets, namespace labels), kept up to date by the
//! scheduler's watches and shared with plugins through the
//! [`Handle`](crate::framework::Handle).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use parking_lot::RwLock;

/// Objects of one kind by key (`namespace/name`, or `name` when
/// cluster-scoped), as the last watch event left them.
pub struct ObjectStore<K> {
    objects: RwLock<HashMap<String, Arc<K>>>,
}

impl<K> Default for ObjectStore<K> {
    fn default() -> Self {
        ObjectStore { objects: RwLock::new(HashMap::new()) }
    }
}

impl<K> std::fmt::Debug for ObjectStore<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectStore").field("len", &self.objects.read().len()).finish()
    }
}

/// The key of an object: `namespace/name`, or `name` when it has no namespace.
pub fn object_key<K: kube::Resource>(obj: &K) -> String {
    let meta = obj.meta();
    let name = meta.name.as_deref().unwrap_or("");
    match meta.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_owned(),
    }
}

impl<K: kube::Resource> ObjectStore<K> {
    /// An empty store.
    pub fn new() -> Self {
        ObjectStore::default()
    }
    /// Adds or replaces `obj`; returns the previous version.
    pub fn insert(&self, obj: K) -> Option<Arc<K>> {
        let key = object_key(&obj);
        self.objects.write().insert(key, Arc::new(obj))
    }
    /// Removes the object under `key`; returns it.
    pub fn remove(&self, key: &str) -> Option<Arc<K>> {
        self.objects.write().remove(key)
    }
    /// The object under `key` (`namespace/name` or `name`).
    pub fn get(&self, key: &str) -> Option<Arc<K>> {
        self.objects.read().get(key).cloned()
    }
    /// The object `name` in `namespace`.
    pub fn get_namespaced(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        self.get(&format!("{namespace}/{name}"))
    }
    /// Every object.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.objects.read().values().cloned().collect()
    }
    /// Every object in `namespace`.
    pub fn list_namespaced(&self, namespace: &str) -> Vec<Arc<K>> {
        self.objects.read().values().filter(|o| o.meta().namespace.as_deref() == Some(namespace)).cloned().collect()
    }
    /// Every key.
    pub fn keys(&self) -> Vec<String> {
        self.objects.read().keys().cloned().collect()
    }
    /// Number of objects.
    pub fn len(&self) -> usize {
        self.objects.read().len()
    }
    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.objects.read().is_empty()
    }
}

/// The labels of every namespace, by namespace name: what namespace
/// selectors (in pod affinity terms) are matched against.
pub type NamespaceLabels = Arc<RwLock<HashMap<String, BTreeMap<String, String>>>>;

/// Every lister the built-in plugins read.
#[derive(Debug, Default)]
pub struct Listers {
    /// PersistentVolumeClaims (`namespace/name`).
    pub pvcs: ObjectStore<PersistentVolumeClaim>,
    /// PersistentVolumes (`name`).
    pub pvs: ObjectStore<PersistentVolume>,
    /// StorageClasses (`name`).
    pub storage_classes: ObjectStore<StorageClass>,
    /// PodDisruptionBudgets (`namespace/name`).
    pub pdbs: ObjectStore<PodDisruptionBudget>,
}

impl Listers {
    /// Empty listers.
    pub fn new() -> Listers {
        Listers::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn keys_by_scope() {
        let l = Listers::new();
        let claim = |ns: &str, name: &str| PersistentVolumeClaim {
            metadata: ObjectMeta { name: Some(name.into()), namespace: Some(ns.into()), ..Default::default() },
            ..Default::default()
        };
        assert!(l.pvcs.insert(claim("a", "c")).is_none());
        assert!(l.pvcs.insert(claim("a", "c")).is_some());
        l.pvcs.insert(claim("b", "c"));
        l.pvs.insert(PersistentVolume {
            metadata: ObjectMeta { name: Some("pv".into()), ..Default::default() },
            ..Default::default()
        });
        for (key, want) in [("a/c", true), ("b/c", true), ("c", false)] {
            assert_eq!(l.pvcs.get(key).is_some(), want, "{key}");
        }
        assert!(l.pvs.get("pv").is_some());
        assert_eq!(l.pvcs.list_namespaced("a").len(), 1);
        assert!(l.pvcs.remove("a/c").is_some());
        assert_eq!(l.pvcs.len(), 1);
    }
}
