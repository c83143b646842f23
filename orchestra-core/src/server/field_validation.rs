//! `fieldValidation` on create, update and patch: unknown and duplicate
//! fields are refused (`Strict`: 400 on create and update, 422 on patch,
//! like upstream), reported in `Warning` headers (`Warn`,
//! the default like upstream since 1.27) or dropped silently (`Ignore`).
//! Unknown fields are dropped from what is stored in every mode.
//!
//! The checks run on the request body before the handler, against the
//! kind's schema from the OpenAPI documents: a create or update body is
//! decoded by the check itself ([`crate::api::strict`], on the kind's
//! compiled schema) and the handler takes that object; a patch is checked
//! with [`crate::api::schema::SchemaView`].

use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, Method};
use axum::response::Response;
use bytes::Bytes;
use serde_json::Value;

use super::body;
use super::openapi::OpenApiCache;
use super::route::Query;
use crate::api::schema::SchemaView;
use crate::api::strict::{self, Decoded, StrictSchema};
use crate::api::{ApiError, ErrorTarget, FieldError, Registry, ResourceInfo};

/// What the client asked for with `fieldValidation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Directive {
    /// Drop unknown fields silently.
    Ignore,
    /// Drop unknown fields, with a warning for each problem.
    Warn,
    /// Refuse the request if there is any problem.
    Strict,
}

impl Directive {
    /// Parses the query parameter; absent means `Warn`.
    pub(crate) fn of(query: &Query) -> Result<Directive, ApiError> {
        match query.field_validation.as_deref() {
            None | Some("") | Some("Warn") => Ok(Directive::Warn),
            Some("Ignore") => Ok(Directive::Ignore),
            Some("Strict") => Ok(Directive::Strict),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation must be one of \"Ignore\", \"Warn\" or \"Strict\", not {other:?}"
            ))),
        }
    }
}

/// The outcome of a check that let the request through: warnings for the
/// response, the body to use instead of the request's (unknown fields
/// dropped) if it changed, and the object the body holds if the check
/// decoded it.
#[derive(Debug, Default)]
pub(crate) struct Checked {
    warnings: Vec<String>,
    body: Option<Bytes>,
    object: Option<Value>,
}

impl Checked {
    /// The outcome with the body the handler should process (the request's,
    /// or the one with unknown fields dropped).
    pub(crate) fn with_body(mut self, original: Bytes) -> (Checked, Bytes) {
        let body = self.body.take().unwrap_or(original);
        (self, body)
    }

    /// The object of a create or update body, unknown fields dropped:
    /// decoded by the check if it could, else from `bytes`.
    pub(crate) fn object(&mut self, bytes: &[u8], headers: &HeaderMap) -> Result<Value, ApiError> {
        match self.object.take() {
            Some(object) => Ok(object),
            None => body::decode_object(bytes, headers),
        }
    }

    /// Adds the warnings to a response: `Warning: 299 - "<text>"` each.
    pub(crate) fn finish(&self, mut response: Response) -> Response {
        for warning in &self.warnings {
            let escaped = warning.replace('\\', "\\\\").replace('"', "\\\"");
            if let Ok(value) = HeaderValue::from_str(&format!("299 - \"{escaped}\"")) {
                response.headers_mut().append("warning", value);
            }
        }
        response
    }
}

/// Turns the problems found into the outcome the directive asks for;
/// `refuse` makes the error of `Strict` from `strict decoding error: ...`.
fn decide(
    directive: Directive,
    problems: Vec<String>,
    refuse: impl FnOnce(String) -> ApiError,
    body: Option<Bytes>,
) -> Result<Checked, ApiError> {
    match directive {
        Directive::Strict if !problems.is_empty() => {
            Err(refuse(format!("strict decoding error: {}", problems.join(", "))))
        }
        Directive::Warn => Ok(Checked { warnings: problems, body, ..Checked::default() }),
        _ => Ok(Checked { body, ..Checked::default() }),
    }
}

fn is_yaml(media: &str) -> bool {
    matches!(media, "application/yaml" | "application/x-yaml" | "text/yaml" | "application/apply-patch+yaml")
}

/// Decodes `bytes` in one pass (see [`strict`]); `None` if they do not
/// parse, which is the handler's to refuse.
fn decode(schema: Option<&StrictSchema>, bytes: &[u8], yaml: bool) -> Option<Decoded> {
    if yaml { strict::decode_yaml(schema, bytes).ok() } else { strict::decode_json(schema, bytes).ok() }
}

fn encode(value: &Value) -> Option<Bytes> {
    Some(Bytes::from(serde_json::to_vec(value).expect("JSON values serialize")))
}

/// Checks the body of a write: `POST` and `PUT` carry an object, `PATCH` a
/// patch. The schema is that of the resource's kind, or of the
/// subresource's (`Scale`, `Binding`, `Eviction`); kinds and subresources
/// with no known schema, and other methods, pass unchecked.
#[allow(clippy::too_many_arguments)]
pub(crate) fn check(
    cache: &OpenApiCache,
    registry: &Arc<Registry>,
    resource: &ResourceInfo,
    subresource: Option<&str>,
    method: &Method,
    query: &Query,
    headers: &HeaderMap,
    bytes: &[u8],
) -> Result<Checked, ApiError> {
    let patch = match *method {
        Method::POST | Method::PUT => false,
        Method::PATCH => true,
        _ => return Ok(Checked::default()),
    };
    let directive = Directive::of(query)?;
    let (group, version, kind) = match subresource {
        None => (&resource.group, &resource.version, &resource.kind),
        Some(name) => match resource.subresources.iter().find(|s| s.name == name) {
            Some(sub) => (&sub.group, &sub.version, &sub.kind),
            None => return Ok(Checked::default()),
        },
    };
    let openapi = cache.get(registry);
    if patch {
        let Some(schema) = openapi.kind_schema(group, version, kind) else {
            return Ok(Checked::default());
        };
        check_patch(schema, directive, headers, bytes)
    } else {
        let Some(schema) = openapi.strict_schema(group, version, kind) else {
            return Ok(Checked::default());
        };
        check_object(&schema, directive, (kind, version), headers, bytes)
    }
}

/// Checks a create or update body (the whole object) of kind
/// `expected.0` at version `expected.1`. The object decoded on the way is
/// handed on, so the handler does not decode the body again.
fn check_object(
    schema: &StrictSchema,
    directive: Directive,
    expected: (&str, &str),
    headers: &HeaderMap,
    bytes: &[u8],
) -> Result<Checked, ApiError> {
    // Media the handler does not decode as JSON or YAML (protobuf, or
    // unsupported and refused there) pass unchecked.
    let Some(format) = body::object_format(&body::content_type(headers)) else {
        return Ok(Checked::default());
    };
    let Some(decoded) = decode(Some(schema), bytes, format == body::Format::Yaml) else {
        return Ok(Checked::default());
    };
    let object = decoded.value;
    // Handlers of subresources decode the bytes themselves.
    let body = if decoded.pruned { encode(&object) } else { None };
    let mut checked = decide(directive, decoded.problems, |error| refuse_object(&object, expected, error), body)?;
    checked.object = Some(object).filter(Value::is_object);
    Ok(checked)
}

/// The error refusing `object`, a body expected to be of kind `expected.0`
/// at version `expected.1`.
fn refuse_object(object: &Value, expected: (&str, &str), error: String) -> ApiError {
    // Upstream names the kind and version the data claims to be.
    let kind = object.get("kind").and_then(Value::as_str).filter(|k| !k.is_empty()).unwrap_or(expected.0);
    let version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .map(|v| v.rsplit('/').next().unwrap_or(v))
        .filter(|v| !v.is_empty())
        .unwrap_or(expected.1);
    ApiError::bad_request(format!("{kind} in version {version:?} cannot be handled as a {}: {error}", expected.0))
}

/// Checks a patch body: duplicate fields in the patch itself, then the
/// fields the patch would set that the kind does not know.
fn check_patch(
    schema: SchemaView<'_>,
    directive: Directive,
    headers: &HeaderMap,
    bytes: &[u8],
) -> Result<Checked, ApiError> {
    let media = body::content_type(headers);
    let yaml = is_yaml(&media);
    let Some(Decoded { value: mut patch, mut problems, .. }) = decode(None, bytes, yaml) else {
        return Ok(Checked::default());
    };
    let mut unknown = Vec::new();
    if media == "application/json-patch+json" {
        problems = problems.into_iter().map(|p| format!("json patch {p}")).collect();
        unknown = prune_json_patch(schema, &mut patch);
    } else if patch.is_object() {
        unknown = schema.prune_unknown_patch_fields(&mut patch);
    }
    unknown.sort();
    let pruned = !unknown.is_empty();
    problems.extend(unknown.into_iter().map(|p| format!("unknown field {p:?}")));
    // Like upstream: an apply patch is a bad request, any other patch makes
    // an invalid object (422, the cause on the field `patch`).
    let apply = media == "application/apply-patch+yaml";
    let refuse = |error: String| {
        if apply {
            ApiError::bad_request(format!("error strict decoding patch: {error}"))
        } else {
            let patch = String::from_utf8_lossy(bytes);
            ApiError::invalid(&ErrorTarget::default(), vec![FieldError::invalid("patch", patch.trim(), error)])
        }
    };
    let body = if pruned { encode(&patch) } else { None };
    decide(directive, problems, refuse, body)
}

/// The unknown fields a JSON patch would set; drops them from the values
/// of its operations, and drops `add`/`replace` operations aimed at an
/// unknown field.
fn prune_json_patch(schema: SchemaView<'_>, patch: &mut Value) -> Vec<String> {
    let mut unknown = Vec::new();
    let Some(operations) = patch.as_array_mut() else {
        return unknown;
    };
    operations.retain_mut(|operation| {
        let op = operation.get("op").and_then(Value::as_str).unwrap_or("");
        if !matches!(op, "add" | "replace") {
            return true;
        }
        let Some(path) = operation.get("path").and_then(Value::as_str) else {
            return true;
        };
        match schema.at_pointer(path) {
            Err(crate::api::schema::UnknownField { path }) => {
                unknown.push(path);
                false
            }
            Ok((None, _)) => true,
            Ok((Some(target), prefix)) => {
                if let Some(value) = operation.get_mut("value") {
                    for field in target.prune_unknown_fields(value) {
                        unknown.push(if prefix.is_empty() {
                            field
                        } else if field.starts_with('[') {
                            format!("{prefix}{field}")
                        } else {
                            format!("{prefix}.{field}")
                        });
                    }
                }
                true
            }
        }
    });
    unknown
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::header;

    fn query(directive: &str) -> Query {
        Query { field_validation: Some(directive.to_owned()).filter(|d| !d.is_empty()), ..Default::default() }
    }

    fn headers(content_type: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_str(content_type).unwrap());
        headers
    }

    struct Fixture {
        cache: OpenApiCache,
        registry: Arc<Registry>,
    }

    impl Fixture {
        fn new() -> Fixture {
            Fixture { cache: OpenApiCache::default(), registry: Arc::new(Registry::builtin()) }
        }

        fn pods(&self) -> Arc<ResourceInfo> {
            self.registry.get("", "v1", "pods").unwrap()
        }

        fn object(&self, directive: &str, body: &str) -> Result<Checked, ApiError> {
            self.write(Method::POST, directive, "application/json", body)
        }

        fn patch(&self, directive: &str, media: &str, body: &str) -> Result<Checked, ApiError> {
            self.write(Method::PATCH, directive, media, body)
        }

        fn write(&self, method: Method, directive: &str, media: &str, body: &str) -> Result<Checked, ApiError> {
            check(
                &self.cache,
                &self.registry,
                &self.pods(),
                None,
                &method,
                &query(directive),
                &headers(media),
                body.as_bytes(),
            )
        }
    }

    const POD: &str = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"foo": 1, "containers": [{"name": "c", "image": "i", "image": "j"}]}}"#;

    #[test]
    fn strict_refuses_with_upstream_wording() {
        let f = Fixture::new();
        let error = f.object("Strict", POD).unwrap_err();
        assert_eq!(error.code, 400);
        assert_eq!(
            error.message,
            r#"Pod in version "v1" cannot be handled as a Pod: strict decoding error: unknown field "spec.foo", duplicate field "spec.containers[0].image""#
        );
        let yaml = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  foo: 1\n  containers: []\n";
        let error = f.write(Method::PUT, "Strict", "application/yaml", yaml).unwrap_err();
        assert!(error.message.ends_with(r#"strict decoding error: unknown field "spec.foo""#), "{}", error.message);
        let fine = f.object("Strict", r#"{"metadata": {"name": "p"}, "spec": {"containers": []}}"#).unwrap();
        assert!(fine.warnings.is_empty() && fine.body.is_none());
    }

    #[test]
    fn warn_is_the_default_and_drops_unknown_fields() {
        let f = Fixture::new();
        for directive in ["Warn", ""] {
            let checked = f.object(directive, POD).unwrap();
            assert_eq!(
                checked.warnings,
                [r#"unknown field "spec.foo""#, r#"duplicate field "spec.containers[0].image""#]
            );
            let stored: Value = serde_json::from_slice(&checked.body.clone().unwrap()).unwrap();
            assert!(stored.pointer("/spec/foo").is_none());
            let response = checked.finish(Response::new(axum::body::Body::empty()));
            let warnings: Vec<_> = response.headers().get_all("warning").iter().collect();
            assert_eq!(warnings[0], r#"299 - "unknown field \"spec.foo\"""#);
            assert_eq!(warnings.len(), 2);
        }
        let ignored = f.object("Ignore", POD).unwrap();
        assert!(ignored.warnings.is_empty());
        assert!(ignored.body.is_some(), "unknown fields are dropped");
        assert!(f.object("Bogus", POD).is_err());
    }

    #[test]
    fn patches_are_checked() {
        let f = Fixture::new();
        let merge = r#"{"spec": {"zeta": 1, "alpha": 2, "nodeName": "a", "nodeName": "b"}, "metadata": {"labels": {"x": null}}}"#;
        let error = f.patch("Strict", "application/merge-patch+json", merge).unwrap_err();
        assert_eq!((error.code, error.reason), (422, "Invalid"));
        assert!(error.message.starts_with(r#" "" is invalid: patch: Invalid value: "{"#), "{}", error.message);
        assert!(
            error.message.ends_with(r#": strict decoding error: duplicate field "spec.nodeName", unknown field "spec.alpha", unknown field "spec.zeta""#),
            "{}",
            error.message
        );
        let smp =
            r#"{"spec": {"$setElementOrder/containers": [{"name": "c"}], "containers": [{"name": "c", "imag": "x"}]}}"#;
        let checked = f.patch("Warn", "application/strategic-merge-patch+json", smp).unwrap();
        assert_eq!(checked.warnings, [r#"unknown field "spec.containers[0].imag""#]);
        let json = r#"[{"op": "add", "path": "/spec/bogus", "value": 1},
                       {"op": "replace", "path": "/spec/containers/0", "value": {"name": "c", "imag": "x"}},
                       {"op": "add", "path": "/metadata/labels/a", "value": "b"}]"#;
        let checked = f.patch("Warn", "application/json-patch+json", json).unwrap();
        assert_eq!(checked.warnings, [r#"unknown field "spec.bogus""#, r#"unknown field "spec.containers[0].imag""#]);
        let kept: Value = serde_json::from_slice(&checked.body.clone().unwrap()).unwrap();
        assert_eq!(kept.as_array().unwrap().len(), 2);
        let dup = r#"[{"op": "add", "path": "/spec/nodeName", "path": "/spec/nodeName", "value": "n"}]"#;
        let error = f.patch("Strict", "application/json-patch+json", dup).unwrap_err();
        assert!(
            error.message.ends_with(r#"strict decoding error: json patch duplicate field "[0].path""#),
            "{}",
            error.message
        );
        let apply = "spec:\n  foo: 1\n";
        let error = f.patch("Strict", "application/apply-patch+yaml", apply).unwrap_err();
        assert_eq!(error.code, 400);
        assert_eq!(error.message, r#"error strict decoding patch: strict decoding error: unknown field "spec.foo""#);
    }

    #[test]
    fn subresources_use_their_kind() {
        let f = Fixture::new();
        let deployments = f.registry.get("apps", "v1", "deployments").unwrap();
        let scale = |method: Method, media: &str, body: &str| {
            check(
                &f.cache,
                &f.registry,
                &deployments,
                Some("scale"),
                &method,
                &query("Strict"),
                &headers(media),
                body.as_bytes(),
            )
        };
        let fine = r#"{"spec": {"replicas": 3}}"#;
        assert!(scale(Method::PATCH, "application/merge-patch+json", fine).is_ok());
        let bad = r#"{"spec": {"replicas": 3, "paused": true}}"#;
        let error = scale(Method::PATCH, "application/merge-patch+json", bad).unwrap_err();
        assert!(error.message.ends_with(r#"unknown field "spec.paused""#), "{}", error.message);
        let error = scale(
            Method::PUT,
            "application/json",
            r#"{"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": {"name": "x"}, "spec": {"nope": 1}}"#,
        )
        .unwrap_err();
        assert_eq!(
            error.message,
            r#"Scale in version "v1" cannot be handled as a Scale: strict decoding error: unknown field "spec.nope""#
        );
        let binding = r#"{"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}}"#;
        let pods = f.pods();
        let checked = check(
            &f.cache,
            &f.registry,
            &pods,
            Some("binding"),
            &Method::POST,
            &query("Strict"),
            &headers("application/json"),
            binding.as_bytes(),
        );
        assert!(checked.is_ok());
        // Reads are not checked.
        assert!(
            check(&f.cache, &f.registry, &pods, None, &Method::GET, &query("Bogus"), &HeaderMap::new(), b"").is_ok()
        );
    }
}
