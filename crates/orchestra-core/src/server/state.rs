//! What every request handler shares.

use std::sync::{Arc, RwLock};

use orchestra_store::Store;

use super::ServerOptions;
use crate::api::Registry;

/// The server's shared state.
pub(crate) struct State {
    pub store: Arc<dyn Store>,
    registry: RwLock<Arc<Registry>>,
    pub options: ServerOptions,
}

impl State {
    pub(crate) fn new(store: Arc<dyn Store>, registry: Registry, options: ServerOptions) -> State {
        State { store, registry: RwLock::new(Arc::new(registry)), options }
    }

    /// A snapshot of the registry (cheap: one `Arc` clone).
    pub(crate) fn registry(&self) -> Arc<Registry> {
        self.registry.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
