//! What every request handler shares.

use std::sync::{Arc, RwLock};

use orchestra_store::Store;

use super::ServerOptions;
use crate::api::Registry;
use crate::auth::admission::AdmissionChain;
use crate::auth::{AuthenticatorChain, AuthorizerChain};

/// The server's shared state.
pub(crate) struct State {
    pub store: Arc<dyn Store>,
    registry: RwLock<Arc<Registry>>,
    pub options: ServerOptions,
    pub authenticator: AuthenticatorChain,
    pub authorizer: AuthorizerChain,
    pub admission: AdmissionChain,
    pub metrics: super::metrics::Metrics,
    /// API Priority and Fairness, or the max-in-flight limits.
    pub flow_control: super::flowcontrol::FlowController,
    /// The OpenAPI documents of the current registry.
    pub openapi: super::openapi::OpenApiCache,
    /// How `pods/log` and `pods/exec` reach node agents.
    pub kubelet_client: Option<super::node_proxy::KubeletClient>,
    /// Signs service account tokens (`serviceaccounts/<name>/token`).
    pub token_signer: Option<Arc<crate::auth::service_account::TokenSigner>>,
    /// The namespaces creates check, kept from a watch; shared with the
    /// builder's [`NamespaceLifecycle`](crate::auth::admission::NamespaceLifecycle).
    pub namespaces: Arc<super::namespaces::NamespaceCache>,
    /// Recent watch event objects, decoded and encoded once for all watchers.
    pub watch_objects: super::watch_objects::WatchObjects,
    /// Records every request, when auditing is on.
    pub audit: Option<crate::audit::Auditor>,
    /// The objects admission plugins read on every write.
    pub read_cache: Arc<super::read_cache::ReadCache>,
}

impl State {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        registry: Registry,
        options: ServerOptions,
        (authenticator, authorizer, admission): (AuthenticatorChain, AuthorizerChain, AdmissionChain),
    ) -> State {
        let metrics = super::metrics::Metrics::new();
        let flow_control = super::flowcontrol::FlowController::new(&options.flow_control, &metrics);
        State {
            store,
            registry: RwLock::new(Arc::new(registry)),
            options,
            authenticator,
            authorizer,
            admission,
            metrics,
            flow_control,
            openapi: Default::default(),
            kubelet_client: None,
            token_signer: None,
            namespaces: Default::default(),
            watch_objects: Default::default(),
            read_cache: Default::default(),
            audit: None,
        }
    }

    /// A snapshot of the registry (cheap: one `Arc` clone).
    pub(crate) fn registry(&self) -> Arc<Registry> {
        self.registry.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Changes the served kinds: `change` edits a copy, which then replaces
    /// the registry (requests in flight keep their snapshot).
    pub(crate) fn update_registry(&self, change: impl FnOnce(&mut Registry)) {
        let mut guard = self.registry.write().unwrap_or_else(|e| e.into_inner());
        let mut next = Registry::clone(&guard);
        change(&mut next);
        *guard = Arc::new(next);
    }
}
