//! The [`QuotaAccessor`] a server gives its ResourceQuota admission plugin:
//! quotas read from its store, their status written back with a
//! compare-and-swap on the store revision.

use async_trait::async_trait;
use k8s_openapi::api::core::v1::ResourceQuota as Quota;
use orchestra_store::Error as StoreError;
use serde::Deserialize as _;

use super::codec::encode;
use super::objects::{parse_revision, store_error};
use super::reader::ServerObjects;
use crate::api::{ApiError, ErrorTarget};
use crate::auth::admission::{ObjectReader, QuotaAccessor, QuotaUpdateError, ResourceRef};

const RESOURCE_QUOTAS: ResourceRef<'static> = ResourceRef::new("", "v1", "resourcequotas");

/// A server's quotas, read and written through its store.
#[derive(Clone)]
pub(crate) struct ServerQuotas {
    pub objects: ServerObjects,
}

#[async_trait]
impl QuotaAccessor for ServerQuotas {
    async fn list(&self, namespace: &str) -> Result<Vec<Quota>, ApiError> {
        let listed = self.objects.list(RESOURCE_QUOTAS, Some(namespace)).await?;
        listed
            .into_iter()
            .map(|quota| {
                Quota::deserialize(&*quota).map_err(|e| ApiError::internal(format!("stored quota is corrupt: {e}")))
            })
            .collect()
    }

    async fn update_status(&self, quota: &Quota) -> Result<(), QuotaUpdateError> {
        let state = self.objects.state()?;
        let registry = state.registry();
        let Some(info) = registry.get(RESOURCE_QUOTAS.group, RESOURCE_QUOTAS.version, RESOURCE_QUOTAS.resource) else {
            return Err(ApiError::internal("this server does not serve resourcequotas").into());
        };
        let name = quota.metadata.name.as_deref().unwrap_or_default();
        let revision = parse_revision(quota.metadata.resource_version.as_deref().unwrap_or_default())?;
        let object = serde_json::to_value(quota).map_err(ApiError::internal)?;
        let key = info.storage_key(quota.metadata.namespace.as_deref(), name);
        match state.store.update(&key, encode(&info, &object), revision, info.ttl).await {
            Ok(_) => Ok(()),
            Err(StoreError::Conflict { .. } | StoreError::NotFound { .. }) => Err(QuotaUpdateError::Conflict),
            Err(error) => {
                let target = ErrorTarget {
                    resource: info.plural.clone(),
                    kind: info.kind.clone(),
                    name: name.to_owned(),
                    ..Default::default()
                };
                Err(store_error(error, &target).into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use orchestra_store::MemStore;
    use serde_json::json;

    use super::*;
    use crate::server::ApiServer;

    #[tokio::test]
    async fn writes_status_only_over_the_version_read() {
        let builder = ApiServer::builder(Arc::new(MemStore::new()));
        let quotas = ServerQuotas { objects: builder.objects.clone() };
        assert_eq!(quotas.list("default").await.unwrap_err().code, 503);
        let server = builder.build().await.unwrap();
        let info = server.state.registry().get("", "v1", "resourcequotas").unwrap();
        let stored = json!({"metadata": {"name": "q", "namespace": "default"}, "spec": {"hard": {"pods": "1"}}});
        server.store().create(&info.storage_key(Some("default"), "q"), encode(&info, &stored), None).await.unwrap();
        let mut quota = quotas.list("default").await.unwrap().remove(0);
        assert!(quotas.list("other").await.unwrap().is_empty());
        let stale = quota.clone();
        quota.status = Some(serde_json::from_value(json!({"hard": {"pods": "1"}, "used": {"pods": "1"}})).unwrap());
        quotas.update_status(&quota).await.unwrap();
        assert!(matches!(quotas.update_status(&stale).await, Err(QuotaUpdateError::Conflict)));
        let read = quotas.list("default").await.unwrap().remove(0);
        assert_eq!(read.status, quota.status);
        assert_ne!(read.metadata.resource_version, quota.metadata.resource_version);
        server.store().delete(&info.storage_key(Some("default"), "q"), None).await.unwrap();
        assert!(matches!(quotas.update_status(&read).await, Err(QuotaUpdateError::Conflict)));
    }
}
