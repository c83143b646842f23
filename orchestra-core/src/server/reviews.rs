//! The review resources (see [`crate::api::review`]): `POST` only, answered
//! from the server's authenticator and authorizer chains, never stored.
//!
//! * `selfsubjectaccessreviews` / `subjectaccessreviews`: the authorizer
//!   chain's decision on the spec's resource or non-resource attributes, for
//!   the requesting user or the spec's user.
//! * `selfsubjectrulesreviews`: the union of the authorizers' rules
//!   ([`crate::auth::Authorizer::rules_for`]), `incomplete` when one of them
//!   cannot list its rules.
//! * `tokenreviews`: the authenticator chain run on `Authorization: Bearer
//!   <spec.token>`.
//! * `selfsubjectreviews`: the requesting user.

use std::collections::BTreeMap;

use axum::http::{HeaderMap, Method};
use serde_json::{Map, Value, json};

use super::body;
use super::state::State;
use crate::api::review::ReviewKind;
use crate::api::{ApiError, ErrorTarget, FieldError, ResourceInfo};
use crate::auth::{Attributes, Decision, UserInfo};

#[allow(clippy::too_many_arguments)]
/// Answers a request to a review resource: `POST` on the collection creates
/// (201), anything else is 405.
pub(crate) async fn serve(
    state: &State,
    resource: &ResourceInfo,
    review: ReviewKind,
    method: &Method,
    is_collection: bool,
    user: &UserInfo,
    headers: &HeaderMap,
    bytes: &[u8],
) -> Result<Value, ApiError> {
    if *method != Method::POST || !is_collection {
        return Err(ApiError::method_not_allowed(format!(
            "{method} is not supported on {}.{}: it only supports create",
            resource.plural, resource.group
        )));
    }
    let mut object = body::decode_object(bytes, headers)?;
    if let Some(check) = resource.decode_check {
        check(&object).map_err(|e| {
            ApiError::bad_request(format!("the body of the request is not a valid {}: {e}", resource.kind))
        })?;
    }
    let invalid = |errors: Vec<FieldError>| {
        ApiError::invalid(
            &ErrorTarget {
                group: resource.group.clone(),
                resource: resource.plural.clone(),
                kind: resource.kind.clone(),
                name: String::new(),
            },
            errors,
        )
    };
    let spec = object.get("spec").cloned().unwrap_or_else(|| json!({}));
    let status = match review {
        ReviewKind::SelfSubjectAccess => {
            let attributes = access_attributes(&spec, user.clone()).map_err(invalid)?;
            access_status(state, &attributes).await
        }
        ReviewKind::SubjectAccess => {
            let subject = subject(&spec);
            if subject.name.is_empty() && subject.groups.is_empty() {
                return Err(invalid(vec![
                    FieldError::required("spec.user")
                        .with_message("Invalid value: \"\": at least one of user or group must be specified"),
                ]));
            }
            let attributes = access_attributes(&spec, subject).map_err(invalid)?;
            access_status(state, &attributes).await
        }
        ReviewKind::SelfSubjectRules => {
            let namespace = spec.get("namespace").and_then(Value::as_str).unwrap_or("");
            let (rules, incomplete) = state.authorizer.rules_for(user, namespace).await;
            let mut status = json!({
                "resourceRules": rules.resource_rules,
                "nonResourceRules": rules.non_resource_rules,
                "incomplete": incomplete,
            });
            if incomplete {
                status["evaluationError"] = "an authorizer of this server cannot list the rules it applies".into();
            }
            status
        }
        ReviewKind::Token => {
            let token = spec.get("token").and_then(Value::as_str).unwrap_or("");
            let audiences = spec.get("audiences").cloned();
            token_status(state, token, audiences).await
        }
        ReviewKind::SelfSubject => json!({"userInfo": user_json(user)}),
    };
    let fields = object.as_object_mut().expect("decode_object returns objects");
    fields.insert("apiVersion".into(), resource.api_version().into());
    fields.insert("kind".into(), resource.kind.clone().into());
    let metadata = fields.entry("metadata").or_insert_with(|| Value::Object(Map::new()));
    if let Some(metadata) = metadata.as_object_mut() {
        metadata.entry("creationTimestamp").or_insert(Value::Null);
    }
    fields.insert("status".into(), status);
    Ok(object)
}

/// The user a `SubjectAccessReview` asks about.
fn subject(spec: &Value) -> UserInfo {
    let strings = |value: Option<&Value>| -> Vec<String> {
        value.and_then(Value::as_array).into_iter().flatten().filter_map(|v| v.as_str().map(str::to_owned)).collect()
    };
    let text = |key: &str| spec.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
    let extra: BTreeMap<String, Vec<String>> = spec
        .get("extra")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), strings(Some(v))))
        .collect();
    UserInfo { name: text("user"), uid: text("uid"), groups: strings(spec.get("groups")), extra }
}

/// The authorizer's question from a review spec: exactly one of
/// `resourceAttributes` and `nonResourceAttributes`.
fn access_attributes(spec: &Value, user: UserInfo) -> Result<Attributes, Vec<FieldError>> {
    let text = |object: &Value, key: &str| object.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
    match (
        spec.get("resourceAttributes").filter(|v| v.is_object()),
        spec.get("nonResourceAttributes").filter(|v| v.is_object()),
    ) {
        (Some(resource), None) => {
            let namespace = text(resource, "namespace");
            let name = text(resource, "name");
            let path = resource_path(resource, &namespace, &name);
            Ok(Attributes {
                user,
                verb: text(resource, "verb"),
                resource_request: true,
                api_group: text(resource, "group"),
                resource: text(resource, "resource"),
                subresource: text(resource, "subresource"),
                namespace,
                name,
                path,
            })
        }
        (None, Some(non_resource)) => Ok(Attributes {
            user,
            verb: text(non_resource, "verb"),
            resource_request: false,
            path: text(non_resource, "path"),
            ..Default::default()
        }),
        (Some(_), Some(_)) => Err(vec![FieldError::invalid(
            "spec.nonResourceAttributes",
            "",
            "cannot be specified in combination with resourceAttributes",
        )]),
        (None, None) => Err(vec![FieldError::required("spec.resourceAttributes").with_message(
            "Required value: exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )]),
    }
}

/// The request path the resource attributes describe (for authorizers that
/// look at paths).
fn resource_path(resource: &Value, namespace: &str, name: &str) -> String {
    let get = |key: &str| resource.get(key).and_then(Value::as_str).unwrap_or("");
    let (group, version) = (get("group"), get("version"));
    let version = if version.is_empty() { "v1" } else { version };
    let mut path = if group.is_empty() { format!("/api/{version}") } else { format!("/apis/{group}/{version}") };
    if !namespace.is_empty() {
        path.push_str(&format!("/namespaces/{namespace}"));
    }
    for part in [get("resource"), name, get("subresource")] {
        if !part.is_empty() {
            path.push('/');
            path.push_str(part);
        }
    }
    path
}

async fn access_status(state: &State, attributes: &Attributes) -> Value {
    match state.authorizer.decide(attributes).await {
        Decision::Allow => json!({"allowed": true}),
        Decision::Deny(reason) => json!({"allowed": false, "denied": true, "reason": reason}),
        Decision::NoOpinion(reason) if reason.is_empty() => json!({"allowed": false}),
        Decision::NoOpinion(reason) => json!({"allowed": false, "reason": reason}),
    }
}

async fn token_status(state: &State, token: &str, audiences: Option<Value>) -> Value {
    if token.is_empty() {
        return json!({"authenticated": false, "error": "the token is empty"});
    }
    let request = http::Request::post("/apis/authentication.k8s.io/v1/tokenreviews")
        .header(http::header::AUTHORIZATION, format!("Bearer {token}"))
        .body(());
    let Ok(request) = request else {
        return json!({"authenticated": false, "error": "the token is not a valid header value"});
    };
    let (parts, ()) = request.into_parts();
    match state.authenticator.authenticate(&parts).await {
        Ok(user) if user == UserInfo::anonymous() => {
            json!({"authenticated": false, "error": "no authenticator recognised the token"})
        }
        Ok(user) => {
            let mut status = json!({"authenticated": true, "user": user_json(&user)});
            if let Some(audiences) = audiences.filter(|a| a.as_array().is_some_and(|a| !a.is_empty())) {
                status["audiences"] = audiences;
            }
            status
        }
        Err(error) => json!({"authenticated": false, "error": error.to_string()}),
    }
}

/// `authentication.k8s.io/v1` `UserInfo`.
fn user_json(user: &UserInfo) -> Value {
    let mut info = json!({"username": user.name, "groups": user.groups});
    if !user.uid.is_empty() {
        info["uid"] = user.uid.clone().into();
    }
    if !user.extra.is_empty() {
        info["extra"] = json!(user.extra);
    }
    info
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_from_specs() {
        let user = UserInfo::new("alice", &["dev"]);
        let spec = json!({"resourceAttributes": {"namespace": "default", "verb": "create", "resource": "deployments", "group": "apps", "version": "v1"}});
        let attributes = access_attributes(&spec, user.clone()).unwrap();
        assert!(attributes.resource_request);
        assert_eq!(
            (attributes.verb.as_str(), attributes.api_group.as_str(), attributes.resource.as_str()),
            ("create", "apps", "deployments")
        );
        assert_eq!(attributes.path, "/apis/apps/v1/namespaces/default/deployments");
        let spec = json!({"nonResourceAttributes": {"path": "/healthz", "verb": "get"}});
        let attributes = access_attributes(&spec, user.clone()).unwrap();
        assert!(!attributes.resource_request);
        assert_eq!(attributes.path, "/healthz");
        assert!(access_attributes(&json!({}), user.clone()).is_err());
        assert!(access_attributes(&json!({"resourceAttributes": {}, "nonResourceAttributes": {}}), user).is_err());
        let subject = subject(&json!({"user": "bob", "groups": ["g"], "extra": {"scopes": ["a"]}}));
        assert_eq!(subject.name, "bob");
        assert_eq!(subject.groups, ["g"]);
        assert_eq!(subject.extra["scopes"], ["a"]);
    }
}
