//! NamespaceLifecycle: no new content in a namespace that does not exist or
//! is being deleted.

use std::sync::Arc;

use async_trait::async_trait;

use super::{AdmissionPlugin, AdmissionRequest, Operation};
use crate::api::{ApiError, ErrorTarget};

/// Where a namespace is in its life, as [`NamespaceLifecycle`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamespacePhase {
    /// Accepts new content.
    Active,
    /// Has a deletion timestamp: refuses new content.
    Terminating,
}

/// Where [`NamespaceLifecycle`] reads namespaces from.
///
/// An [`ApiServer`](crate::server::ApiServer) provides one over its own
/// store (see [`ApiServerBuilder::namespace_lifecycle`]): a cache kept from
/// a watch, which sends every namespace it does not know to be active to
/// the store. Other implementations serve embedders and tests.
///
/// [`ApiServerBuilder::namespace_lifecycle`]: crate::server::ApiServerBuilder::namespace_lifecycle
///
/// ```
/// use async_trait::async_trait;
/// use orchestra_core::api::ApiError;
/// use orchestra_core::auth::admission::{NamespaceLister, NamespacePhase};
///
/// /// Every namespace exists and is active.
/// struct AllActive;
///
/// #[async_trait]
/// impl NamespaceLister for AllActive {
///     async fn phase(&self, _name: &str) -> Result<Option<NamespacePhase>, ApiError> {
///         Ok(Some(NamespacePhase::Active))
///     }
/// }
/// ```
#[async_trait]
pub trait NamespaceLister: Send + Sync {
    /// The phase of namespace `name`, `Ok(None)` if there is no such
    /// namespace, or the error that fails the write when the namespace
    /// cannot be read.
    async fn phase(&self, name: &str) -> Result<Option<NamespacePhase>, ApiError>;
}

/// The admission plugin that refuses to create namespaced objects in a
/// namespace that does not exist (404 NotFound, about the namespace) or is
/// terminating (403 Forbidden), like upstream's plugin of the same name.
///
/// It acts in the mutating phase, as upstream's does, so that placed first
/// in a chain it refuses such a write before any other plugin sees it. It
/// handles creates only: updates and deletes pass it untouched.
///
/// [`ApiServer::builder`](crate::server::ApiServer::builder) puts the
/// server's own instance first in the default admission chain; a chain set
/// with [`ApiServerBuilder::admission`](crate::server::ApiServerBuilder::admission)
/// replaces it, and keeps it by including
/// [`ApiServerBuilder::namespace_lifecycle`](crate::server::ApiServerBuilder::namespace_lifecycle).
///
/// ```
/// # use async_trait::async_trait;
/// # use orchestra_core::api::ApiError;
/// # use orchestra_core::auth::admission::{NamespaceLister, NamespacePhase};
/// use orchestra_core::auth::admission::{AdmissionChain, NamespaceLifecycle};
/// # struct AllActive;
/// # #[async_trait]
/// # impl NamespaceLister for AllActive {
/// #     async fn phase(&self, _name: &str) -> Result<Option<NamespacePhase>, ApiError> {
/// #         Ok(Some(NamespacePhase::Active))
/// #     }
/// # }
///
/// let chain = AdmissionChain::new().with(NamespaceLifecycle::new(AllActive));
/// assert_eq!(chain.names().collect::<Vec<_>>(), [NamespaceLifecycle::NAME]);
/// ```
#[derive(Clone)]
pub struct NamespaceLifecycle {
    namespaces: Arc<dyn NamespaceLister>,
}

impl NamespaceLifecycle {
    /// The plugin's name.
    pub const NAME: &'static str = "NamespaceLifecycle";

    /// The plugin, reading namespaces from `namespaces`.
    pub fn new(namespaces: impl NamespaceLister + 'static) -> NamespaceLifecycle {
        NamespaceLifecycle { namespaces: Arc::new(namespaces) }
    }
}

#[async_trait]
impl AdmissionPlugin for NamespaceLifecycle {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn handles(&self, operation: Operation) -> bool {
        operation == Operation::Create
    }

    async fn mutate(&self, request: &mut AdmissionRequest<'_>) -> Result<(), ApiError> {
        let Some(namespace) = request.namespace.filter(|_| request.resource.namespaced) else {
            return Ok(());
        };
        match self.namespaces.phase(namespace).await? {
            Some(NamespacePhase::Active) => Ok(()),
            Some(NamespacePhase::Terminating) => Err(ApiError::forbidden(format!(
                "unable to create new content in namespace {namespace} because it is being terminated"
            ))),
            None => Err(ApiError::not_found(&namespace_target(namespace))),
        }
    }
}

/// What errors about namespace `name` are about.
pub(crate) fn namespace_target(name: &str) -> ErrorTarget {
    ErrorTarget { resource: "namespaces".into(), kind: "Namespace".into(), name: name.into(), ..Default::default() }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use serde_json::json;

    use super::*;
    use crate::api::ResourceInfo;
    use crate::auth::UserInfo;

    /// Namespaces held in a map; `broken` fails every read.
    struct Fixed(HashMap<&'static str, NamespacePhase>);

    #[async_trait]
    impl NamespaceLister for Fixed {
        async fn phase(&self, name: &str) -> Result<Option<NamespacePhase>, ApiError> {
            match name {
                "broken" => Err(ApiError::internal("stored namespace is corrupt")),
                _ => Ok(self.0.get(name).copied()),
            }
        }
    }

    /// What admission of one write answers: `Ok`, or the error's code and message.
    type Outcome = Result<(), (u16, &'static str)>;

    #[test]
    fn creates_need_an_active_namespace() {
        let plugin = NamespaceLifecycle::new(Fixed(HashMap::from([
            ("live", NamespacePhase::Active),
            ("leaving", NamespacePhase::Terminating),
        ])));
        let chain = super::super::AdmissionChain::new().with(plugin);
        let pods = ResourceInfo::new("", "v1", "Pod", "pods", true);
        let nodes = ResourceInfo::new("", "v1", "Node", "nodes", false);
        let user = UserInfo::anonymous();
        let old = json!({"metadata": {"name": "x"}});
        let terminating = "unable to create new content in namespace leaving because it is being terminated";
        #[rustfmt::skip]
        let cases: [(Operation, &ResourceInfo, Option<&str>, Outcome); 11] = [
            (Operation::Create, &pods, Some("live"), Ok(())),
            (Operation::Create, &pods, Some("leaving"), Err((403, terminating))),
            (Operation::Create, &pods, Some("gone"), Err((404, r#"namespaces "gone" not found"#))),
            (Operation::Create, &pods, Some("broken"), Err((500, "Internal error occurred: stored namespace is corrupt"))),
            // Cluster-scoped kinds ignore a namespace in the path.
            (Operation::Create, &nodes, Some("gone"), Ok(())),
            (Operation::Create, &nodes, None, Ok(())),
            (Operation::Create, &pods, None, Ok(())),
            // Only creates are checked.
            (Operation::Update, &pods, Some("leaving"), Ok(())),
            (Operation::Update, &pods, Some("gone"), Ok(())),
            (Operation::Delete, &pods, Some("leaving"), Ok(())),
            (Operation::Delete, &pods, Some("gone"), Ok(())),
        ];
        for (operation, resource, namespace, expected) in cases {
            let mut request = AdmissionRequest {
                operation,
                resource,
                subresource: None,
                namespace,
                name: "x",
                object: (operation != Operation::Delete).then(|| old.clone()),
                old_object: (operation != Operation::Create).then_some(&old),
                user: &user,
                dry_run: false,
            };
            let outcome = futures::executor::block_on(chain.admit(&mut request));
            let outcome = outcome.as_ref().map(|_| ()).map_err(|e| (e.code, e.message.as_str()));
            assert_eq!(outcome, expected, "{operation:?} of {} in {namespace:?}", resource.plural);
            assert_eq!(chain.handles(operation), operation == Operation::Create);
        }
    }

    #[test]
    fn a_missing_namespace_is_a_not_found_about_the_namespace() {
        let plugin = NamespaceLifecycle::new(Fixed(HashMap::new()));
        let pods = ResourceInfo::new("", "v1", "Pod", "pods", true);
        let user = UserInfo::anonymous();
        let mut request = AdmissionRequest {
            operation: Operation::Create,
            resource: &pods,
            subresource: None,
            namespace: Some("gone"),
            name: "x",
            object: Some(json!({})),
            old_object: None,
            user: &user,
            dry_run: false,
        };
        let error = futures::executor::block_on(plugin.mutate(&mut request)).unwrap_err();
        assert_eq!(error, ApiError::not_found(&namespace_target("gone")));
    }
}
