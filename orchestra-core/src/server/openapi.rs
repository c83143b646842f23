//! `GET /openapi/v3` and `GET /openapi/v3/<api/v1 | apis/<group>/<version>>`.
//!
//! The documents are built once per registry (the server swaps its registry
//! `Arc` when kinds change) and served with their content hash as ETag.
//! `/openapi/v2` is not served: kubectl tolerates its 404.

use std::sync::{Arc, Mutex, Weak};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;

use super::body;
use super::discovery::KUBERNETES_VERSION;
use crate::api::openapi::OpenApi;
use crate::api::{ApiError, Registry};

/// The documents of the current registry, rebuilt when the registry changes.
#[derive(Default)]
pub(crate) struct OpenApiCache {
    /// The registry the documents were built from (held weakly: while the
    /// entry lives its allocation cannot be reused, so pointer equality
    /// identifies it) and the documents.
    slot: Mutex<Option<(Weak<Registry>, Arc<OpenApi>)>>,
}

impl OpenApiCache {
    /// The documents of `registry`, built on first use.
    pub(crate) fn get(&self, registry: &Arc<Registry>) -> Arc<OpenApi> {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((built_from, openapi)) = slot.as_ref()
            && std::ptr::eq(built_from.as_ptr(), Arc::as_ptr(registry))
        {
            return openapi.clone();
        }
        let (major, minor) = KUBERNETES_VERSION;
        let openapi = Arc::new(OpenApi::build(registry, &format!("v{major}.{minor}.0")));
        *slot = Some((Arc::downgrade(registry), openapi.clone()));
        openapi
    }
}

fn respond_json(bytes: Bytes, etag: Option<&str>, headers: &HeaderMap) -> Response {
    let etag = etag.map(|hash| format!("\"{hash}\""));
    let not_modified = etag.as_deref().is_some_and(|etag| {
        headers
            .get(header::IF_NONE_MATCH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.split(',').any(|candidate| candidate.trim() == etag))
    });
    let mut response = if not_modified {
        let mut response = Response::new(Body::empty());
        *response.status_mut() = StatusCode::NOT_MODIFIED;
        response
    } else {
        let mut response = Response::new(Body::from(bytes));
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response
    };
    if let Some(etag) = etag.and_then(|e| HeaderValue::from_str(&e).ok()) {
        response.headers_mut().insert(header::ETAG, etag);
    }
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
    response
}

/// Serves the index (`path` empty) or one group/version's document.
pub(crate) fn serve(cache: &OpenApiCache, registry: &Arc<Registry>, path: &str, headers: &HeaderMap) -> Response {
    let openapi = cache.get(registry);
    if path.is_empty() {
        return respond_json(openapi.index().clone(), None, headers);
    }
    match openapi.document(path) {
        Some(document) => respond_json(document.json.clone(), Some(&document.hash), headers),
        None => body::error(&ApiError::no_route(&format!("/openapi/v3/{path}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_rebuilds_only_for_a_new_registry() {
        let cache = OpenApiCache::default();
        let registry = Arc::new(Registry::builtin());
        let first = cache.get(&registry);
        assert!(Arc::ptr_eq(&first, &cache.get(&registry.clone())));
        let other = Arc::new(Registry::builtin());
        assert!(!Arc::ptr_eq(&first, &cache.get(&other)));
    }

    #[test]
    fn documents_carry_an_etag() {
        let cache = OpenApiCache::default();
        let registry = Arc::new(Registry::builtin());
        let response = serve(&cache, &registry, "api/v1", &HeaderMap::new());
        assert_eq!(response.status(), StatusCode::OK);
        let etag = response.headers()[header::ETAG].clone();
        let mut headers = HeaderMap::new();
        headers.insert(header::IF_NONE_MATCH, etag);
        let response = serve(&cache, &registry, "api/v1", &headers);
        assert_eq!(response.status(), StatusCode::NOT_MODIFIED);
        let response = serve(&cache, &registry, "apis/nope/v1", &HeaderMap::new());
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
    }
}
