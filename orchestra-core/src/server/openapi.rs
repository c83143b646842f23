//! `GET /openapi/v3`, `GET /openapi/v3/<api/v1 | apis/<group>/<version>>`
//! and `GET /openapi/v2`.
//!
//! The documents are built once per registry (the server swaps its registry
//! `Arc` when kinds change) and served with their content hash as ETag.
//!
//! `/openapi/v2` is one Swagger 2.0 document holding every schema of the v3
//! documents as `definitions` (and no `paths`), in gnostic's protobuf
//! encoding when the `Accept` header asks for it (as kubectl does), as JSON
//! when it asks for that or for anything, and 406 otherwise. kubectl validates on the client what the server cannot validate for
//! it, a `kind: List` above all, against these definitions
//! ([`crate::api::openapi_v2`]).

use std::sync::{Arc, Mutex, OnceLock, Weak};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;

use super::body;
use super::discovery::KUBERNETES_VERSION;
use crate::api::openapi::{OpenApi, content_hash};
use crate::api::openapi_v2::{self, Encoding};
use crate::api::{ApiError, Registry};

/// One registry's documents.
struct Entry {
    /// The registry they were built from (held weakly: while the entry lives
    /// its allocation cannot be reused, so pointer equality identifies it).
    built_from: Weak<Registry>,
    openapi: Arc<OpenApi>,
    /// The `/openapi/v2` document, built on first request.
    v2: Arc<OnceLock<SwaggerDocument>>,
}

/// The `/openapi/v2` document in its two encodings, each with its hash.
struct SwaggerDocument {
    json: Bytes,
    json_hash: String,
    protobuf: Bytes,
    protobuf_hash: String,
}

impl SwaggerDocument {
    fn build(openapi: &OpenApi) -> SwaggerDocument {
        let document = openapi_v2::document(openapi);
        let json = serde_json::to_vec(&document).expect("JSON values serialize");
        let protobuf = openapi_v2::protobuf::encode(&document);
        SwaggerDocument {
            json_hash: content_hash(&json),
            json: Bytes::from(json),
            protobuf_hash: content_hash(&protobuf),
            protobuf: Bytes::from(protobuf),
        }
    }
}

/// The documents of the current registry, rebuilt when the registry changes.
#[derive(Default)]
pub(crate) struct OpenApiCache {
    slot: Mutex<Option<Entry>>,
}

impl OpenApiCache {
    fn entry(&self, registry: &Arc<Registry>) -> (Arc<OpenApi>, Arc<OnceLock<SwaggerDocument>>) {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = slot.as_ref()
            && std::ptr::eq(entry.built_from.as_ptr(), Arc::as_ptr(registry))
        {
            return (entry.openapi.clone(), entry.v2.clone());
        }
        let (major, minor) = KUBERNETES_VERSION;
        let openapi = Arc::new(OpenApi::build(registry, &format!("v{major}.{minor}.0")));
        let v2 = Arc::new(OnceLock::new());
        *slot = Some(Entry { built_from: Arc::downgrade(registry), openapi: openapi.clone(), v2: v2.clone() });
        (openapi, v2)
    }

    /// The documents of `registry`, built on first use.
    pub(crate) fn get(&self, registry: &Arc<Registry>) -> Arc<OpenApi> {
        self.entry(registry).0
    }
}

fn respond_json(bytes: Bytes, etag: Option<&str>, headers: &HeaderMap) -> Response {
    respond(bytes, "application/json", etag, headers)
}

fn respond(bytes: Bytes, content_type: &'static str, etag: Option<&str>, headers: &HeaderMap) -> Response {
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
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
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

/// Serves `/openapi/v2`: protobuf if the `Accept` header asks for it, else
/// JSON. The two encodings have different ETags, and responses vary by
/// `Accept`.
pub(crate) fn serve_v2(cache: &OpenApiCache, registry: &Arc<Registry>, headers: &HeaderMap) -> Response {
    let (openapi, v2) = cache.entry(registry);
    let document = v2.get_or_init(|| SwaggerDocument::build(&openapi));
    let accept = headers.get_all(header::ACCEPT).iter().filter_map(|v| v.to_str().ok()).collect::<Vec<_>>().join(",");
    let mut response = match openapi_v2::negotiate(&accept) {
        Some(Encoding::Protobuf) => respond(
            document.protobuf.clone(),
            openapi_v2::PROTOBUF_CONTENT_TYPE,
            Some(&document.protobuf_hash),
            headers,
        ),
        Some(Encoding::Json) => respond(document.json.clone(), "application/json", Some(&document.json_hash), headers),
        None => body::error(&ApiError::not_acceptable(&format!(
            "application/json, {}, {}",
            openapi_v2::PROTOBUF_CONTENT_TYPE_AT,
            openapi_v2::PROTOBUF_CONTENT_TYPE
        ))),
    };
    response.headers_mut().insert(header::VARY, HeaderValue::from_static("Accept"));
    response
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

    #[test]
    fn swagger_document_negotiates_and_carries_an_etag() {
        use prost::Message;
        let cache = OpenApiCache::default();
        let registry = Arc::new(Registry::builtin());
        let accept = |value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::ACCEPT, HeaderValue::from_static(value));
            headers
        };
        let cases = [
            (HeaderMap::new(), "application/json"),
            (accept("application/json"), "application/json"),
            (accept("*/*"), "application/json"),
            (accept(openapi_v2::PROTOBUF_CONTENT_TYPE), openapi_v2::PROTOBUF_CONTENT_TYPE),
            (accept(openapi_v2::PROTOBUF_CONTENT_TYPE_AT), openapi_v2::PROTOBUF_CONTENT_TYPE),
        ];
        let mut etags = Vec::new();
        for (headers, content_type) in cases {
            let response = serve_v2(&cache, &registry, &headers);
            assert_eq!(response.status(), StatusCode::OK);
            assert_eq!(response.headers()[header::CONTENT_TYPE], content_type);
            assert_eq!(response.headers()[header::VARY], "Accept");
            let etag = response.headers()[header::ETAG].clone();
            let mut conditional = headers.clone();
            conditional.insert(header::IF_NONE_MATCH, etag.clone());
            assert_eq!(serve_v2(&cache, &registry, &conditional).status(), StatusCode::NOT_MODIFIED);
            etags.push((content_type, etag));
        }
        // One ETag per encoding.
        etags.dedup();
        let refused = serve_v2(&cache, &registry, &accept("text/html"));
        assert_eq!(refused.status(), StatusCode::NOT_ACCEPTABLE);
        assert_eq!(refused.headers()[header::CONTENT_TYPE], "application/json");
        assert_eq!(etags.len(), 2, "{etags:?}");
        let document = cache.entry(&registry).1;
        let document = document.get().unwrap();
        let decoded = openapi_v2::protobuf::Document::decode(document.protobuf.as_ref()).unwrap();
        assert_eq!(decoded.swagger, "2.0");
        let json: serde_json::Value = serde_json::from_slice(&document.json).unwrap();
        assert_eq!(json["swagger"], "2.0");
        assert!(json["definitions"]["io.k8s.api.core.v1.Secret"].is_object());
    }
}
