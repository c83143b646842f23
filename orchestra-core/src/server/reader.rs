//! The [`ObjectReader`] a server gives its admission plugins: objects as
//! the API serves them, from the server's [read cache](super::read_cache)
//! for the kinds it holds, else from its store.

use std::sync::{Arc, OnceLock, Weak};

use async_trait::async_trait;
use serde_json::Value;

use super::codec::decode_served;
use super::objects::store_error;
use super::state::State;
use crate::api::{ApiError, ErrorTarget, ResourceInfo};
use crate::auth::admission::{ObjectReader, ResourceRef};

/// Reads a server's objects. It is made by the builder, before the server
/// exists; the server fills `state` when it is built.
#[derive(Clone, Default)]
pub(crate) struct ServerObjects {
    pub state: Arc<OnceLock<Weak<State>>>,
}

impl ServerObjects {
    pub(crate) fn state(&self) -> Result<Arc<State>, ApiError> {
        self.state.get().and_then(Weak::upgrade).ok_or_else(|| ApiError::unavailable("the API server is not running"))
    }

    fn resource(state: &State, resource: ResourceRef<'_>) -> Result<Arc<ResourceInfo>, ApiError> {
        state.registry().get(resource.group, resource.version, resource.resource).ok_or_else(|| {
            ApiError::internal(format!(
                "admission reads {}/{} {}, which this server does not serve",
                resource.group, resource.version, resource.resource
            ))
        })
    }
}

#[async_trait]
impl ObjectReader for ServerObjects {
    async fn get(
        &self,
        resource: ResourceRef<'_>,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Arc<Value>>, ApiError> {
        let state = self.state()?;
        let info = Self::resource(&state, resource)?;
        let key = info.storage_key(namespace, name);
        if let Some(cached) = state.read_cache.get(&key) {
            return Ok(cached);
        }
        let target = error_target(&info, name);
        let stored = state.store.get(&key).await.map_err(|e| store_error(e, &target))?;
        stored.map(|kv| decode_served(&info, &kv).map(Arc::new)).transpose()
    }

    async fn list(&self, resource: ResourceRef<'_>, namespace: Option<&str>) -> Result<Vec<Arc<Value>>, ApiError> {
        let state = self.state()?;
        let info = Self::resource(&state, resource)?;
        let prefix = info.storage_collection(namespace);
        if let Some(cached) = state.read_cache.list(&prefix) {
            return Ok(cached);
        }
        let mut objects = Vec::new();
        let mut failed = None;
        super::list::list_prefix(&*state.store, &prefix, |kv| match decode_served(&info, kv) {
            Ok(object) => objects.push(Arc::new(object)),
            Err(error) => failed = Some(error),
        })
        .await
        .map_err(|e| store_error(e, &error_target(&info, "")))?;
        match failed {
            Some(error) => Err(error),
            None => Ok(objects),
        }
    }
}

fn error_target(info: &ResourceInfo, name: &str) -> ErrorTarget {
    ErrorTarget {
        group: info.group.clone(),
        resource: info.plural.clone(),
        kind: info.kind.clone(),
        name: name.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use orchestra_store::MemStore;

    use super::*;
    use crate::server::ApiServer;

    const NAMESPACES: ResourceRef<'static> = ResourceRef::new("", "v1", "namespaces");

    #[tokio::test]
    async fn reads_the_built_servers_objects() {
        let builder = ApiServer::builder(Arc::new(MemStore::new()));
        let reader = builder.object_reader();
        assert_eq!(reader.list(NAMESPACES, None).await.unwrap_err().code, 503);
        let _server = builder.build().await.unwrap();
        let listed = reader.list(NAMESPACES, None).await.unwrap();
        let names: Vec<_> = listed.iter().filter_map(|ns| ns["metadata"]["name"].as_str()).collect();
        assert!(names.contains(&"kube-system"), "{names:?}");
        assert!(listed.iter().all(|ns| ns["metadata"]["resourceVersion"].is_string()));
        let system = reader.get(NAMESPACES, None, "kube-system").await.unwrap().unwrap();
        assert_eq!(system["kind"], "Namespace");
        assert!(reader.get(NAMESPACES, None, "missing").await.unwrap().is_none());
        let unknown = ResourceRef::new("example.com", "v1", "widgets");
        assert_eq!(reader.list(unknown, None).await.unwrap_err().code, 500);
    }
}
