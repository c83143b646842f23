//! Admission: plugins that mutate, then validate, every write.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use super::UserInfo;
use crate::api::{ApiError, ResourceInfo};

/// The kind of write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// POST.
    Create,
    /// PUT or PATCH.
    Update,
    /// DELETE.
    Delete,
}

/// One write as admission plugins see it.
#[derive(Debug, Clone)]
pub struct AdmissionRequest {
    /// The operation.
    pub operation: Operation,
    /// The resource written.
    pub resource: Arc<ResourceInfo>,
    /// The subresource, if any.
    pub subresource: Option<String>,
    /// Namespace, if any.
    pub namespace: Option<String>,
    /// Object name.
    pub name: String,
    /// The object after the write (`None` for deletes). Mutating plugins change it.
    pub object: Option<Value>,
    /// The object before the write (`None` for creates).
    pub old_object: Option<Value>,
    /// Who writes.
    pub user: UserInfo,
    /// True for `dryRun=All`: plugins must have no side effects.
    pub dry_run: bool,
}

/// A plugin of the admission chain. Both phases default to accepting.
#[async_trait]
pub trait AdmissionPlugin: Send + Sync {
    /// The plugin's name, e.g. `NamespaceLifecycle`.
    fn name(&self) -> &str;

    /// Mutating phase: may change `request.object`.
    async fn mutate(&self, request: &mut AdmissionRequest) -> Result<(), ApiError> {
        let _ = request;
        Ok(())
    }

    /// Validating phase: may only accept or refuse.
    async fn validate(&self, request: &AdmissionRequest) -> Result<(), ApiError> {
        let _ = request;
        Ok(())
    }
}

/// Runs every plugin's mutating phase in order, then every validating phase.
#[derive(Clone, Default)]
pub struct AdmissionChain {
    plugins: Vec<Arc<dyn AdmissionPlugin>>,
}

impl AdmissionChain {
    /// An empty chain (admits everything).
    pub fn new() -> AdmissionChain {
        AdmissionChain::default()
    }

    /// Adds a plugin at the end.
    pub fn with(mut self, plugin: impl AdmissionPlugin + 'static) -> AdmissionChain {
        self.plugins.push(Arc::new(plugin));
        self
    }

    /// Admits (possibly mutating) or refuses a write.
    pub async fn admit(&self, request: &mut AdmissionRequest) -> Result<(), ApiError> {
        for plugin in &self.plugins {
            plugin.mutate(request).await?;
        }
        for plugin in &self.plugins {
            plugin.validate(request).await?;
        }
        Ok(())
    }

    /// True if no plugin is configured.
    pub fn is_empty(&self) -> bool {
        self.plugins.is_empty()
    }
}
