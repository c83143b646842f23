//! API errors in the Kubernetes `Status` shape.
//!
//! Every failure a client can see is an [`ApiError`]: an HTTP code, a
//! machine-readable reason (`NotFound`, `AlreadyExists`, `Conflict`, `Invalid`,
//! ...), a message worded like the upstream API server's (kubectl prints it
//! verbatim), and details naming the object.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Status, StatusCause, StatusDetails};

/// A failed API request, rendered as a `Status` object.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{reason} ({code}): {message}")]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `Status.reason`, e.g. `NotFound`.
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
    /// `Status.details`: the object concerned and, for `Invalid`, the causes.
    /// Boxed: most errors have none, and every `Result<_, ApiError>` on the
    /// request path is as large as its error.
    pub details: Option<Box<StatusDetails>>,
}

/// The object an error is about: resource (plural) and group, name, kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorTarget {
    /// API group ("" for core).
    pub group: String,
    /// Plural resource name, e.g. `pods`.
    pub resource: String,
    /// Kind, e.g. `Pod` (used by `Invalid`).
    pub kind: String,
    /// Object name.
    pub name: String,
}

impl ErrorTarget {
    /// `pods` or `deployments.apps`, as upstream messages spell a resource.
    pub fn qualified_resource(&self) -> String {
        if self.group.is_empty() { self.resource.clone() } else { format!("{}.{}", self.resource, self.group) }
    }

    fn details(&self, kind: &str) -> StatusDetails {
        StatusDetails {
            name: Some(self.name.clone()).filter(|n| !n.is_empty()),
            group: Some(self.group.clone()).filter(|g| !g.is_empty()),
            kind: Some(kind.to_owned()).filter(|k| !k.is_empty()),
            ..Default::default()
        }
    }
}

/// One reason an object is invalid (`Status.details.causes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// `FieldValueRequired`, `FieldValueInvalid`, `FieldValueNotSupported`, ...
    pub reason: &'static str,
    /// The field path, e.g. `metadata.name`.
    pub field: String,
    /// What is wrong, e.g. `Required value`.
    pub message: String,
}

impl FieldError {
    /// A required field is missing.
    pub fn required(field: impl Into<String>) -> FieldError {
        FieldError { reason: "FieldValueRequired", field: field.into(), message: "Required value".into() }
    }

    /// A field holds an invalid value; `detail` says why.
    pub fn invalid(field: impl Into<String>, value: &str, detail: impl AsRef<str>) -> FieldError {
        FieldError {
            reason: "FieldValueInvalid",
            field: field.into(),
            message: format!("Invalid value: {value:?}: {}", detail.as_ref()),
        }
    }

    /// Replaces the message.
    pub fn with_message(mut self, message: impl Into<String>) -> FieldError {
        self.message = message.into();
        self
    }

    /// A field may not be changed.
    pub fn immutable(field: impl Into<String>) -> FieldError {
        FieldError {
            reason: "FieldValueInvalid",
            field: field.into(),
            message: "Invalid value: field is immutable".into(),
        }
    }
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { code, reason, message: message.into(), details: None }
    }

    fn with_details(mut self, details: StatusDetails) -> ApiError {
        self.details = Some(Box::new(details));
        self
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "BadRequest", message)
    }

    /// 401 Unauthorized.
    pub fn unauthorized() -> ApiError {
        ApiError::new(401, "Unauthorized", "Unauthorized")
    }

    /// 403 Forbidden.
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(403, "Forbidden", message)
    }

    /// 403 Forbidden about an object or a collection, as upstream's
    /// `NewForbidden` words it: `pods "web" is forbidden: <reason>`
    /// (`pods is forbidden: ...` without a name), with details naming it.
    ///
    /// ```
    /// use orchestra_core::api::{ApiError, ErrorTarget};
    ///
    /// let target = ErrorTarget { group: "apps".into(), resource: "deployments".into(), name: "web".into(), ..Default::default() };
    /// let error = ApiError::forbidden_object(&target, "not today");
    /// assert_eq!(error.message, r#"deployments.apps "web" is forbidden: not today"#);
    /// ```
    pub fn forbidden_object(target: &ErrorTarget, reason: impl std::fmt::Display) -> ApiError {
        let resource = target.qualified_resource();
        let message = match target.name.as_str() {
            "" => format!("{resource} is forbidden: {reason}"),
            name => format!("{resource} {name:?} is forbidden: {reason}"),
        };
        ApiError::forbidden(message).with_details(target.details(&target.resource))
    }

    /// 406 NotAcceptable: no media type of the `Accept` header is served;
    /// `served` lists those that are, as upstream's message does.
    pub fn not_acceptable(served: &str) -> ApiError {
        ApiError::new(406, "NotAcceptable", format!("only the following media types are accepted: {served}"))
    }

    /// 404 NotFound for an object.
    pub fn not_found(target: &ErrorTarget) -> ApiError {
        ApiError::new(404, "NotFound", format!("{} {:?} not found", target.qualified_resource(), target.name))
            .with_details(target.details(&target.resource))
    }

    /// 404 NotFound for a path that serves nothing.
    pub fn no_route(path: &str) -> ApiError {
        ApiError::new(404, "NotFound", format!("the server could not find the requested resource ({path})"))
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(message: impl Into<String>) -> ApiError {
        ApiError::new(405, "MethodNotAllowed", message)
    }

    /// 409 AlreadyExists.
    pub fn already_exists(target: &ErrorTarget) -> ApiError {
        ApiError::new(409, "AlreadyExists", format!("{} {:?} already exists", target.qualified_resource(), target.name))
            .with_details(target.details(&target.resource))
    }

    /// 409 Conflict: the object changed since the client read it.
    pub fn conflict(target: &ErrorTarget) -> ApiError {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} {:?}: the object has been modified; please apply your changes to the latest version and try again",
                target.qualified_resource(),
                target.name
            ),
        )
        .with_details(target.details(&target.resource))
    }

    /// 409 Conflict with a custom explanation (e.g. a failed precondition).
    pub fn conflict_because(target: &ErrorTarget, why: impl AsRef<str>) -> ApiError {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} {:?}: {}",
                target.qualified_resource(),
                target.name,
                why.as_ref()
            ),
        )
        .with_details(target.details(&target.resource))
    }

    /// 410 Expired: a resource version or continue token is too old.
    pub fn expired(message: impl Into<String>) -> ApiError {
        ApiError::new(410, "Expired", message)
    }

    /// 413 RequestEntityTooLarge.
    pub fn too_large(limit: usize) -> ApiError {
        ApiError::new(413, "RequestEntityTooLarge", format!("Request entity too large: limit is {limit}"))
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(content_type: &str) -> ApiError {
        ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf (got {content_type:?})"
            ),
        )
    }

    /// 422 Invalid, with one cause per field error.
    pub fn invalid(target: &ErrorTarget, errors: Vec<FieldError>) -> ApiError {
        let summary = errors.iter().map(|e| format!("{}: {}", e.field, e.message)).collect::<Vec<_>>();
        let summary = if summary.len() == 1 { summary[0].clone() } else { format!("[{}]", summary.join(", ")) };
        let mut details = target.details(&target.kind);
        details.causes = Some(
            errors
                .into_iter()
                .map(|e| StatusCause { reason: Some(e.reason.into()), message: Some(e.message), field: Some(e.field) })
                .collect(),
        );
        ApiError::new(422, "Invalid", format!("{} {:?} is invalid: {summary}", target.kind, target.name))
            .with_details(details)
    }

    /// 429 TooManyRequests.
    pub fn too_many_requests(message: impl Into<String>) -> ApiError {
        ApiError::new(429, "TooManyRequests", message)
    }

    /// Adds `details.retryAfterSeconds`, as upstream's `NewTooManyRequests`
    /// and `NewTimeoutError` do; the server also sends it as `Retry-After`.
    pub fn with_retry_after(mut self, seconds: u32) -> ApiError {
        let mut details = self.details.map(|d| *d).unwrap_or_default();
        details.retry_after_seconds = Some(seconds.try_into().unwrap_or(i32::MAX));
        self.details = Some(Box::new(details));
        self
    }

    /// 504 Timeout: the server did not answer in time (`Timeout: <message>`).
    pub fn timeout(message: impl std::fmt::Display) -> ApiError {
        ApiError::new(504, "Timeout", format!("Timeout: {message}"))
    }

    /// 500 InternalError.
    pub fn internal(message: impl std::fmt::Display) -> ApiError {
        ApiError::new(500, "InternalError", format!("Internal error occurred: {message}"))
    }

    /// 503 ServiceUnavailable.
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(503, "ServiceUnavailable", message)
    }

    /// The `Status` object sent to the client.
    pub fn status(&self) -> Status {
        Status {
            status: Some("Failure".into()),
            message: Some(self.message.clone()),
            reason: Some(self.reason.into()),
            details: self.details.as_deref().cloned(),
            code: Some(self.code.into()),
            ..Default::default()
        }
    }

    /// The `Status` as JSON, with `kind` and `apiVersion`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut value = serde_json::to_value(self.status()).expect("Status serializes");
        value["kind"] = "Status".into();
        value["apiVersion"] = "v1".into();
        value["metadata"] = serde_json::json!({});
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str) -> ErrorTarget {
        ErrorTarget { group: String::new(), resource: "pods".into(), kind: "Pod".into(), name: name.into() }
    }

    #[test]
    fn messages_match_upstream() {
        assert_eq!(ApiError::not_found(&pod("nope")).message, "pods \"nope\" not found");
        let deploy = ErrorTarget {
            group: "apps".into(),
            resource: "deployments".into(),
            kind: "Deployment".into(),
            name: "x".into(),
        };
        assert_eq!(ApiError::already_exists(&deploy).message, "deployments.apps \"x\" already exists");
        let invalid = ApiError::invalid(&pod("x"), vec![FieldError::required("spec.containers[0].image")]);
        assert_eq!(invalid.code, 422);
        assert_eq!(invalid.message, "Pod \"x\" is invalid: spec.containers[0].image: Required value");
        let json = invalid.to_json();
        assert_eq!(json["kind"], "Status");
        assert_eq!(json["details"]["causes"][0]["reason"], "FieldValueRequired");
        assert_eq!(json["details"]["kind"], "Pod");
    }
}
