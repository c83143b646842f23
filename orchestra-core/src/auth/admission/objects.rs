//! How admission plugins read the objects they decide from (LimitRanges,
//! PriorityClasses, quotas, ...): upstream's plugins read informers; these
//! read an [`ObjectReader`].

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use serde_json::Value;

use crate::api::ApiError;

/// Which resource an [`ObjectReader`] reads: group, version and plural
/// name, as the API serves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceRef<'a> {
    /// API group (`""` for the core group).
    pub group: &'a str,
    /// Version, e.g. `v1`.
    pub version: &'a str,
    /// Plural resource name, e.g. `limitranges`.
    pub resource: &'a str,
}

impl<'a> ResourceRef<'a> {
    /// The resource `group`/`version`/`resource`.
    pub const fn new(group: &'a str, version: &'a str, resource: &'a str) -> ResourceRef<'a> {
        ResourceRef { group, version, resource }
    }
}

/// Reads objects as the API serves them, for admission plugins.
///
/// Objects come shared ([`Arc`]): a reader that keeps them in memory (the
/// server's read cache) hands out references, not copies, on every write
/// a plugin admits.
///
/// [`ApiServerBuilder::object_reader`](crate::server::ApiServerBuilder::object_reader)
/// gives one over the server's store; [`StaticObjects`] serves fixed
/// objects to a plugin's tests.
///
/// ```
/// use orchestra_core::auth::admission::{ObjectReader, ResourceRef, StaticObjects};
/// use serde_json::json;
///
/// const LIMIT_RANGES: ResourceRef<'static> = ResourceRef::new("", "v1", "limitranges");
///
/// # futures::executor::block_on(async {
/// let objects = StaticObjects::new();
/// objects.insert(LIMIT_RANGES, json!({"metadata": {"name": "defaults", "namespace": "team-a"}}));
/// let in_team_a = objects.list(LIMIT_RANGES, Some("team-a")).await.unwrap();
/// assert_eq!(in_team_a.len(), 1);
/// assert!(objects.get(LIMIT_RANGES, Some("team-b"), "defaults").await.unwrap().is_none());
/// # });
/// ```
#[async_trait]
pub trait ObjectReader: Send + Sync {
    /// The object `name` (in `namespace` for namespaced kinds), or `None`.
    async fn get(
        &self,
        resource: ResourceRef<'_>,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Arc<Value>>, ApiError>;

    /// The objects of `resource` in `namespace`, or in every namespace
    /// (and for cluster-scoped kinds) with `None`.
    async fn list(&self, resource: ResourceRef<'_>, namespace: Option<&str>) -> Result<Vec<Arc<Value>>, ApiError>;
}

/// (group, version, resource) → (namespace, name) → object.
type ObjectsByResource = BTreeMap<(String, String, String), BTreeMap<(String, String), Arc<Value>>>;

/// Objects held in memory: an [`ObjectReader`] for tests and for
/// embedders that keep the objects a plugin reads themselves.
#[derive(Debug, Default)]
pub struct StaticObjects {
    objects: RwLock<ObjectsByResource>,
}

impl StaticObjects {
    /// No objects.
    pub fn new() -> StaticObjects {
        StaticObjects::default()
    }

    /// Adds (or replaces) `object`, keyed by its `metadata.namespace` and
    /// `metadata.name`.
    pub fn insert(&self, resource: ResourceRef<'_>, object: Value) {
        let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default().to_owned();
        let name = object["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        let mut objects = self.objects.write().unwrap_or_else(|e| e.into_inner());
        objects.entry(key(resource)).or_default().insert((namespace, name), Arc::new(object));
    }

    /// Removes an object.
    pub fn remove(&self, resource: ResourceRef<'_>, namespace: Option<&str>, name: &str) {
        let mut objects = self.objects.write().unwrap_or_else(|e| e.into_inner());
        if let Some(of_resource) = objects.get_mut(&key(resource)) {
            of_resource.remove(&(namespace.unwrap_or_default().to_owned(), name.to_owned()));
        }
    }
}

fn key(resource: ResourceRef<'_>) -> (String, String, String) {
    (resource.group.to_owned(), resource.version.to_owned(), resource.resource.to_owned())
}

#[async_trait]
impl ObjectReader for StaticObjects {
    async fn get(
        &self,
        resource: ResourceRef<'_>,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Arc<Value>>, ApiError> {
        let objects = self.objects.read().unwrap_or_else(|e| e.into_inner());
        let wanted = (namespace.unwrap_or_default().to_owned(), name.to_owned());
        Ok(objects.get(&key(resource)).and_then(|of_resource| of_resource.get(&wanted)).cloned())
    }

    async fn list(&self, resource: ResourceRef<'_>, namespace: Option<&str>) -> Result<Vec<Arc<Value>>, ApiError> {
        let objects = self.objects.read().unwrap_or_else(|e| e.into_inner());
        let Some(of_resource) = objects.get(&key(resource)) else { return Ok(Vec::new()) };
        Ok(of_resource
            .iter()
            .filter(|((ns, _), _)| namespace.is_none_or(|wanted| wanted == ns))
            .map(|(_, object)| object.clone())
            .collect())
    }
}
