//! Listers: the API objects besides nodes and pods that plugins read
//! (PersistentVolumeClaims, PersistentVolumes, StorageClasses,
//! PodDisruptionBudgets, namespace labels), shared with plugins through the
//! [`Handle`](crate::framework::Handle). The scheduler's listers read the
//! caches of its shared informers; standalone ones (tests, the algorithm
//! alone) are filled with [`ObjectStore::insert`].

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use orchestra_ctrl::informer::{Informer, Kind, ObjectKey, SharedInformerFactory};
use parking_lot::RwLock;

/// Objects of one kind by key (`namespace/name`, or `name` when
/// cluster-scoped): a view of an informer's cache.
pub struct ObjectStore<K> {
    informer: Arc<Informer<K>>,
}

impl<K: Kind> Default for ObjectStore<K> {
    fn default() -> Self {
        ObjectStore { informer: Informer::new() }
    }
}

impl<K: Kind> std::fmt::Debug for ObjectStore<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectStore").field("len", &self.informer.len()).finish()
    }
}

impl<K> From<Arc<Informer<K>>> for ObjectStore<K> {
    fn from(informer: Arc<Informer<K>>) -> Self {
        ObjectStore { informer }
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

/// The informer's key of `key` (`namespace/name` or `name`).
fn informer_key(key: &str) -> ObjectKey {
    match key.split_once('/') {
        Some((namespace, name)) => ObjectKey::new(namespace, name),
        None => ObjectKey::cluster(key),
    }
}

impl<K: Kind> ObjectStore<K> {
    /// An empty store over an informer of its own.
    pub fn new() -> Self {
        ObjectStore::default()
    }
    /// The informer whose cache this store reads.
    pub fn informer(&self) -> &Arc<Informer<K>> {
        &self.informer
    }
    /// Adds or replaces `obj`; returns the previous version.
    pub fn insert(&self, obj: K) -> Option<Arc<K>> {
        let old = self.informer.get(&ObjectKey::of(&obj));
        self.informer.apply(obj);
        old
    }
    /// Removes the object under `key`; returns it.
    pub fn remove(&self, key: &str) -> Option<Arc<K>> {
        let old = self.get(key)?;
        self.informer.delete(K::clone(&old));
        Some(old)
    }
    /// The object under `key` (`namespace/name` or `name`).
    pub fn get(&self, key: &str) -> Option<Arc<K>> {
        self.informer.get(&informer_key(key))
    }
    /// The object `name` in `namespace`.
    pub fn get_namespaced(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        self.informer.get(&ObjectKey::new(namespace, name))
    }
    /// Every object.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.informer.list()
    }
    /// Every object in `namespace`.
    pub fn list_namespaced(&self, namespace: &str) -> Vec<Arc<K>> {
        self.informer.by_namespace(namespace)
    }
    /// Every key.
    pub fn keys(&self) -> Vec<String> {
        self.informer.list().iter().map(|o| object_key(o.as_ref())).collect()
    }
    /// Number of objects.
    pub fn len(&self) -> usize {
        self.informer.len()
    }
    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.informer.is_empty()
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
    /// Empty listers, each over an informer of its own.
    pub fn new() -> Listers {
        Listers::default()
    }

    /// Listers reading the caches of `factory`'s informers (started here if
    /// they are not running yet).
    pub fn from_factory(factory: &SharedInformerFactory) -> Listers {
        Listers {
            pvcs: factory.informer().into(),
            pvs: factory.informer().into(),
            storage_classes: factory.informer().into(),
            pdbs: factory.informer().into(),
        }
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
