//! PATCH bodies by content type, server-side apply, and the managedFields
//! bookkeeping of every write. The logic lives in `api::patch` and
//! `api::apply`; this module ties it to requests.

use std::sync::Arc;

use axum::http::{HeaderMap, header};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{StatusCause, StatusDetails};
use serde_json::Value;

use super::objects::Target;
use super::route::Query;
use crate::api::apply::{self, Context};
use crate::api::patch::{self, PatchErrorKind, Schemas, Shape};
use crate::api::{ApiError, KindSchema};

const JSON_PATCH: &str = "application/json-patch+json";
const MERGE_PATCH: &str = "application/merge-patch+json";
const STRATEGIC_MERGE_PATCH: &str = "application/strategic-merge-patch+json";
const APPLY_PATCH: &str = "application/apply-patch+yaml";

/// A decoded PATCH body.
pub(crate) enum PatchBody {
    /// RFC 7386 JSON merge patch.
    Merge(Value),
    /// RFC 6902 JSON patch.
    Json(json_patch::Patch),
    /// Strategic merge patch.
    Strategic(Value),
    /// Server-side apply: the applied configuration.
    Apply(Value),
}

/// The 415 upstream answers a patch type the resource does not take.
fn unsupported(strategic: bool) -> ApiError {
    let types = if strategic {
        [JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, APPLY_PATCH].join(", ")
    } else {
        [JSON_PATCH, MERGE_PATCH, APPLY_PATCH].join(", ")
    };
    ApiError {
        code: 415,
        reason: "UnsupportedMediaType",
        message: format!("the body of the request was in an unknown format - accepted media types include: {types}"),
        details: None,
    }
}

/// True if strategic merge patch is served for the resource: built-in kinds
/// only (upstream refuses it for custom resources).
fn strategic_supported(target: &Target) -> bool {
    matches!(target.resource.schema, Some(KindSchema::Typed(_)))
}

fn decode_error(e: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!("the body of the request could not be decoded: {e}"))
}

/// The 422 upstream answers invalid `PatchOptions` (query parameters).
fn invalid_options(field: &str, reason: &str, message: &str) -> ApiError {
    ApiError {
        code: 422,
        reason: "Invalid",
        message: format!("PatchOptions.meta.k8s.io \"\" is invalid: {field}: {message}"),
        details: Some(Box::new(StatusDetails {
            group: Some("meta.k8s.io".into()),
            kind: Some("PatchOptions".into()),
            causes: Some(vec![StatusCause {
                reason: Some(reason.into()),
                message: Some(message.into()),
                field: Some(field.into()),
            }]),
            ..Default::default()
        })),
    }
}

/// Decodes a PATCH body according to its content type.
pub(crate) fn decode(media: &str, bytes: &[u8], target: &Target, query: &Query) -> Result<PatchBody, ApiError> {
    let json = || serde_json::from_slice::<Value>(bytes).map_err(decode_error);
    if query.force && media != APPLY_PATCH {
        return Err(invalid_options(
            "force",
            "FieldValueForbidden",
            "Forbidden: may not be specified for non-apply patch",
        ));
    }
    match media {
        MERGE_PATCH => Ok(PatchBody::Merge(json()?)),
        JSON_PATCH => serde_json::from_value(json()?)
            .map(PatchBody::Json)
            .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}"))),
        STRATEGIC_MERGE_PATCH if strategic_supported(target) => Ok(PatchBody::Strategic(json()?)),
        APPLY_PATCH => {
            if query.field_manager.as_deref().unwrap_or("").is_empty() {
                return Err(invalid_options(
                    "fieldManager",
                    "FieldValueRequired",
                    "Required value: is required for apply patch",
                ));
            }
            let config: Value = serde_yaml::from_slice(bytes).map_err(decode_error)?;
            if !config.is_object() {
                return Err(ApiError::bad_request("the body of the request must be a JSON or YAML object"));
            }
            Ok(PatchBody::Apply(config))
        }
        _ => Err(unsupported(strategic_supported(target))),
    }
}

/// The manager of a non-apply write: `fieldManager`, or else the user
/// agent's product (`kubectl/v1.33.0 (...)` → `kubectl`), like upstream.
pub(crate) fn field_manager(query: &Query, headers: &HeaderMap) -> String {
    if let Some(manager) = query.field_manager.as_deref().filter(|m| !m.is_empty()) {
        return manager.to_owned();
    }
    let agent = headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or("");
    let product = agent.split('/').next().unwrap_or("");
    product.chars().take(128).collect()
}

fn schemas(target: &Target) -> Option<Arc<Schemas>> {
    target.resource.schema.as_ref().map(Schemas::of)
}

fn context<'a>(
    target: &'a Target,
    manager: &'a str,
    api_version: &'a str,
    subresource: Option<&'a str>,
    schemas: Option<&'a Schemas>,
) -> Context<'a> {
    Context {
        manager,
        api_version,
        kind: &target.resource.kind,
        subresource,
        has_status: target.resource.has_subresource("status"),
        shape: match schemas {
            Some(schemas) => schemas.root(),
            None => Shape::unknown(),
        },
    }
}

/// Records a create, update or non-apply patch in `managedFields`.
pub(crate) fn track_update(
    target: &Target,
    old: Option<&Value>,
    new: &mut Value,
    query: &Query,
    headers: &HeaderMap,
    subresource: Option<&str>,
) {
    let manager = field_manager(query, headers);
    let api_version = target.resource.api_version();
    let schemas = schemas(target);
    let ctx = context(target, &manager, &api_version, subresource, schemas.as_deref());
    apply::record_update(old, new, &ctx);
}

/// Puts the `managedFields` an apply computed on the object to store (which
/// a status write otherwise takes from the stored object).
pub(crate) fn keep_managed_fields(object: &mut Value, managed: Option<Value>) {
    let metadata = crate::api::meta::metadata_mut(object);
    match managed {
        Some(managed) => metadata.insert("managedFields".into(), managed),
        None => metadata.remove("managedFields"),
    };
}

impl PatchBody {
    /// True for server-side apply, which creates missing objects.
    pub(crate) fn is_apply(&self) -> bool {
        matches!(self, PatchBody::Apply(_))
    }

    /// The `metadata.resourceVersion` the patch pins, if any.
    pub(crate) fn pinned(&self) -> Option<&str> {
        match self {
            PatchBody::Merge(v) | PatchBody::Strategic(v) | PatchBody::Apply(v) => {
                crate::api::meta::meta_str(v, "resourceVersion")
            }
            PatchBody::Json(_) => None,
        }
    }

    /// The patched object. An apply also updates `managedFields` (or fails
    /// with a 409 listing the conflicts); the others are recorded by
    /// [`track_update`] once merged.
    pub(crate) fn apply_to(
        &self,
        old: Option<&Value>,
        target: &Target,
        query: &Query,
        subresource: Option<&str>,
    ) -> Result<Value, ApiError> {
        let empty = Value::Object(Default::default());
        let current = old.unwrap_or(&empty);
        let patched = self.apply(current, old, target, query, subresource)?;
        // A merge or JSON patch may replace the whole document; what is not
        // an object cannot be decoded as one (upstream: 422 on `patch`).
        if !patched.is_object() {
            return Err(ApiError::invalid(
                &crate::api::ErrorTarget::default(),
                vec![crate::api::FieldError::invalid(
                    "patch",
                    &patched.to_string(),
                    "the patched object is not a JSON object",
                )],
            ));
        }
        Ok(patched)
    }

    fn apply(
        &self,
        current: &Value,
        old: Option<&Value>,
        target: &Target,
        query: &Query,
        subresource: Option<&str>,
    ) -> Result<Value, ApiError> {
        match self {
            PatchBody::Merge(patch) => {
                let mut new = current.clone();
                json_patch::merge(&mut new, patch);
                Ok(new)
            }
            PatchBody::Json(operations) => {
                let mut new = current.clone();
                json_patch::patch(&mut new, operations).map_err(|e| ApiError {
                    code: 422,
                    reason: "Invalid",
                    message: format!("the JSON patch could not be applied: {e}"),
                    details: None,
                })?;
                Ok(new)
            }
            PatchBody::Strategic(patch) => {
                let schemas = schemas(target).ok_or_else(|| unsupported(false))?;
                patch::strategic_merge(current, patch, schemas.root()).map_err(|e| match e.kind {
                    PatchErrorKind::BadRequest => ApiError::bad_request(e.message),
                    PatchErrorKind::Unknown => ApiError { code: 500, reason: "", message: e.message, details: None },
                })
            }
            PatchBody::Apply(config) => {
                let manager = query.field_manager.clone().unwrap_or_default();
                let api_version = target.resource.api_version();
                let schemas = schemas(target);
                let ctx = context(target, &manager, &api_version, subresource, schemas.as_deref());
                apply::apply(old, config, &ctx, query.force).map_err(|e| e.to_api_error())
            }
        }
    }
}
