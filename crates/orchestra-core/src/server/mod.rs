//! The API server: a `tower::Service` (an axum `Router`) over a [`Store`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use orchestra_core::server::ApiServer;
//! use orchestra_store::MemStore;
//!
//! let server = ApiServer::new(Arc::new(MemStore::new())).await?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! axum::serve(listener, server.router()).await?;
//! # Ok(()) }
//! ```

mod body;
mod discovery;
mod objects;
mod route;
mod state;
mod subresources;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::Method;
use axum::response::Response;
use orchestra_store::{Error as StoreError, Store};
use serde_json::json;

pub use discovery::KUBERNETES_VERSION;

use self::objects::{Target, respond};
use self::route::{Query, Route};
use self::state::State;
use crate::api::{ApiError, Registry, ResourceInfo};

/// Tunables of the API server.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// How often a watch that asked for bookmarks gets one when nothing
    /// changes (upstream: about a minute).
    pub bookmark_interval: Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions { bookmark_interval: Duration::from_secs(60) }
    }
}

/// Namespaces every cluster has.
pub const SYSTEM_NAMESPACES: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];

/// A Kubernetes-compatible API server over a store.
#[derive(Clone)]
pub struct ApiServer {
    state: Arc<State>,
}

/// Builds an [`ApiServer`]: the store, the kinds served, the options.
pub struct ApiServerBuilder {
    store: Arc<dyn Store>,
    registry: Registry,
    options: ServerOptions,
}

impl ApiServerBuilder {
    /// Serves an additional kind (or replaces a built-in one).
    pub fn register(mut self, resource: ResourceInfo) -> ApiServerBuilder {
        self.registry.register(resource);
        self
    }

    /// Sets the options.
    pub fn options(mut self, options: ServerOptions) -> ApiServerBuilder {
        self.options = options;
        self
    }

    /// Builds the server and makes sure the system namespaces exist.
    pub async fn build(self) -> Result<ApiServer, ApiError> {
        let server = ApiServer { state: Arc::new(State::new(self.store, self.registry, self.options)) };
        server.bootstrap().await?;
        Ok(server)
    }
}

impl ApiServer {
    /// A server with the built-in kinds and default options.
    pub async fn new(store: Arc<dyn Store>) -> Result<ApiServer, ApiError> {
        ApiServer::builder(store).build().await
    }

    /// Starts building a server.
    pub fn builder(store: Arc<dyn Store>) -> ApiServerBuilder {
        ApiServerBuilder { store, registry: Registry::builtin(), options: ServerOptions::default() }
    }

    /// The store behind the server.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.state.store
    }

    /// The server as a tower `Service` (an axum `Router`).
    pub fn router(&self) -> axum::Router {
        let state = self.state.clone();
        axum::Router::new().fallback(move |request: Request| {
            let state = state.clone();
            async move { handle(state, request).await }
        })
    }

    async fn bootstrap(&self) -> Result<(), ApiError> {
        let registry = self.state.registry();
        let Some(namespaces) = registry.get("", "v1", "namespaces") else { return Ok(()) };
        for name in SYSTEM_NAMESPACES {
            let key = namespaces.storage_key(None, name);
            let object = json!({
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": name, "uid": uuid::Uuid::new_v4().to_string(), "creationTimestamp": crate::api::meta::now_rfc3339(), "labels": {"kubernetes.io/metadata.name": name}},
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            });
            match self.state.store.create(&key, serde_json::to_vec(&object).expect("serializes").into(), None).await {
                Ok(_) | Err(StoreError::AlreadyExists { .. }) => {}
                Err(e) => return Err(ApiError::internal(e)),
            }
        }
        Ok(())
    }
}

async fn handle(state: Arc<State>, request: Request) -> Response {
    let (parts, body_stream) = request.into_parts();
    let registry = state.registry();
    let route = match Route::parse(parts.uri.path(), &registry) {
        Ok(route) => route,
        Err(error) => return body::error(&error),
    };
    let query = match Query::parse(parts.uri.query()) {
        Ok(query) => query,
        Err(error) => return body::error(&error),
    };
    let method = parts.method.clone();
    let headers = &parts.headers;
    let read = |body_stream| async move { body::read_body(body_stream, headers).await };
    match route {
        Route::Version if method == Method::GET => discovery::version(),
        Route::Health if method == Method::GET => body::text(200, "ok"),
        Route::CoreVersions if method == Method::GET => discovery::core_versions(&registry, headers),
        Route::Groups if method == Method::GET => discovery::groups(&registry, headers),
        Route::GroupVersion { group, version } if method == Method::GET => {
            discovery::group_version(&registry, &group, &version)
        }
        Route::Collection { resource, namespace } => {
            let target = Target { resource, namespace };
            match method {
                Method::GET if query.watch => watch::watch(state.clone(), target, query).await,
                Method::GET => respond(objects::list(&state, &target, &query).await, false),
                Method::POST => match read(body_stream).await {
                    Ok(bytes) => respond(objects::create(&state, &target, &query, headers, &bytes).await, true),
                    Err(e) => body::error(&e),
                },
                Method::DELETE => match read(body_stream).await {
                    Ok(bytes) => respond(objects::delete_collection(&state, &target, &query, &bytes).await, false),
                    Err(e) => body::error(&e),
                },
                _ => body::error(&ApiError::method_not_allowed(format!("{method} is not supported on a collection"))),
            }
        }
        Route::Object { resource, namespace, name, subresource } => {
            let target = Target { resource, namespace };
            let sub = subresource.as_deref();
            if let Some(sub) = sub
                && !target.resource.has_subresource(sub)
            {
                return body::error(&ApiError::no_route(parts.uri.path()));
            }
            let bytes = match method {
                Method::GET => bytes::Bytes::new(),
                _ => match read(body_stream).await {
                    Ok(bytes) => bytes,
                    Err(e) => return body::error(&e),
                },
            };
            match (sub, &method) {
                (None | Some("status"), &Method::GET) => respond(objects::get(&state, &target, &name).await, false),
                (None | Some("status"), &Method::PUT) => {
                    respond(objects::update(&state, &target, &name, sub, &query, headers, &bytes).await, false)
                }
                (None | Some("status"), &Method::PATCH) => {
                    respond(objects::patch(&state, &target, &name, sub, &query, headers, &bytes).await, false)
                }
                (None, &Method::DELETE) => respond(objects::delete(&state, &target, &name, &query, &bytes).await, false),
                (Some("finalize"), &Method::PUT) => {
                    respond(subresources::finalize(&state, &target, &name, headers, &bytes).await, false)
                }
                (Some("binding"), &Method::POST) => {
                    respond(subresources::bind(&state, &target, &name, headers, &bytes).await, true)
                }
                (Some("scale"), &Method::GET) => respond(subresources::get_scale(&state, &target, &name).await, false),
                (Some("scale"), &Method::PUT | &Method::PATCH) => respond(
                    subresources::update_scale(&state, &target, &name, &method, headers, &bytes).await,
                    false,
                ),
                _ => body::error(&ApiError::method_not_allowed(format!(
                    "{method} is not supported on {}{}",
                    target.resource.plural,
                    sub.map(|s| format!("/{s}")).unwrap_or_default()
                ))),
            }
        }
        _ => body::error(&ApiError::method_not_allowed(format!("{method} is not supported on {}", parts.uri.path()))),
    }
}
