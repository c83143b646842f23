//! Admission: plugins that mutate, then validate, every write, the chain
//! that runs them, and the built-in plugins, one per file.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use super::UserInfo;
use crate::api::{ApiError, ResourceInfo};

mod namespace_lifecycle;
mod node_restriction;
mod objects;
mod resource_quota;

pub(crate) use namespace_lifecycle::namespace_target;
pub use namespace_lifecycle::{NamespaceLifecycle, NamespaceLister, NamespacePhase};
pub use node_restriction::NodeRestriction;
pub use objects::{ObjectReader, ResourceRef, StaticObjects};
pub use resource_quota::{MemoryQuotas, QuotaAccessor, QuotaUpdateError, ResourceQuota};

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
///
/// The request borrows what the server already holds (the resource, the
/// names, the user, the stored object); only the object being written is
/// owned, so that mutating plugins can change it.
#[derive(Debug, Clone)]
pub struct AdmissionRequest<'a> {
    /// The operation.
    pub operation: Operation,
    /// The resource written.
    pub resource: &'a ResourceInfo,
    /// The subresource, if any.
    pub subresource: Option<&'a str>,
    /// Namespace, if any.
    pub namespace: Option<&'a str>,
    /// Object name.
    pub name: &'a str,
    /// The object after the write (`None` for deletes). Mutating plugins change it.
    pub object: Option<Value>,
    /// The object before the write (`None` for creates).
    pub old_object: Option<&'a Value>,
    /// Who writes.
    pub user: &'a UserInfo,
    /// True for `dryRun=All`: plugins must have no side effects.
    pub dry_run: bool,
}

/// A plugin of the admission chain: it sees every write it
/// [handles](AdmissionPlugin::handles), first in the mutating phase, where
/// it may change the object, then in the validating phase, where it may
/// only accept or refuse. Both phases default to accepting; a refusal is
/// the [`ApiError`] the client receives.
///
/// ```
/// use async_trait::async_trait;
/// use orchestra_core::api::ApiError;
/// use orchestra_core::auth::admission::{AdmissionChain, AdmissionPlugin, AdmissionRequest, Operation};
///
/// /// Labels every new object with its creator's name.
/// struct LabelCreator;
///
/// #[async_trait]
/// impl AdmissionPlugin for LabelCreator {
///     fn name(&self) -> &str {
///         "LabelCreator"
///     }
///
///     fn handles(&self, operation: Operation) -> bool {
///         operation == Operation::Create
///     }
///
///     async fn mutate(&self, request: &mut AdmissionRequest<'_>) -> Result<(), ApiError> {
///         if let Some(object) = request.object.as_mut() {
///             object["metadata"]["labels"]["created-by"] = request.user.name.clone().into();
///         }
///         Ok(())
///     }
///
///     async fn validate(&self, request: &AdmissionRequest<'_>) -> Result<(), ApiError> {
///         match request.name.starts_with("tmp-") {
///             true => Err(ApiError::forbidden("LabelCreator refuses temporary objects")),
///             false => Ok(()),
///         }
///     }
/// }
///
/// let chain = AdmissionChain::new().with(LabelCreator);
/// assert!(chain.handles(Operation::Create));
/// assert!(!chain.handles(Operation::Delete));
/// ```
#[async_trait]
pub trait AdmissionPlugin: Send + Sync {
    /// The plugin's name, e.g. `NamespaceLifecycle`.
    fn name(&self) -> &str;

    /// Whether the plugin sees writes of kind `operation` at all (upstream's
    /// `Handles`); all of them by default. Writes no plugin of a chain
    /// handles skip admission entirely.
    fn handles(&self, operation: Operation) -> bool {
        let _ = operation;
        true
    }

    /// Mutating phase: may change `request.object`.
    async fn mutate(&self, request: &mut AdmissionRequest<'_>) -> Result<(), ApiError> {
        let _ = request;
        Ok(())
    }

    /// Validating phase: may only accept or refuse.
    async fn validate(&self, request: &AdmissionRequest<'_>) -> Result<(), ApiError> {
        let _ = request;
        Ok(())
    }
}

/// Runs every plugin's mutating phase in order, then every validating phase.
///
/// The chain an [`ApiServer`](crate::server::ApiServer) runs is set with
/// [`ApiServerBuilder::admission`](crate::server::ApiServerBuilder::admission);
/// the default one holds the server's
/// [`NamespaceLifecycle`].
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

    /// Adds every plugin of `other` at the end, in its order.
    pub fn then(mut self, other: AdmissionChain) -> AdmissionChain {
        self.plugins.extend(other.plugins);
        self
    }

    /// Admits (possibly mutating) or refuses a write: the mutating phase
    /// of every plugin that handles its operation, in order, then their
    /// validating phase.
    pub async fn admit(&self, request: &mut AdmissionRequest<'_>) -> Result<(), ApiError> {
        let operation = request.operation;
        for plugin in self.plugins.iter().filter(|p| p.handles(operation)) {
            plugin.mutate(request).await?;
        }
        for plugin in self.plugins.iter().filter(|p| p.handles(operation)) {
            plugin.validate(request).await?;
        }
        Ok(())
    }

    /// True if some plugin handles writes of kind `operation`: otherwise
    /// [`admit`](Self::admit) has nothing to do for them.
    pub fn handles(&self, operation: Operation) -> bool {
        self.plugins.iter().any(|p| p.handles(operation))
    }

    /// The names of the plugins, in the order they run.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.plugins.iter().map(|p| p.name())
    }

    /// True if no plugin is configured.
    pub fn is_empty(&self) -> bool {
        self.plugins.is_empty()
    }
}
