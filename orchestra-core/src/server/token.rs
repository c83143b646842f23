//! `POST serviceaccounts/<name>/token` (TokenRequest, `kubectl create
//! token`): a signed token for the service account, for the audiences
//! asked (the API server's own by default), bound to a Pod or Secret if
//! asked, valid for `expirationSeconds` (default one hour, at least ten
//! minutes).

use axum::http::HeaderMap;
use serde_json::{Value, json};

use super::body;
use super::objects::{Target, load};
use super::state::State;
use crate::api::meta::meta_str;
use crate::api::{ApiError, FieldError};
use crate::auth::admission::Operation;
use crate::auth::service_account::BoundObject;

/// Shortest token lifetime a client may ask for (upstream's).
const MIN_EXPIRATION_SECONDS: i64 = 600;
/// Lifetime when none is asked for.
const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
/// Longest lifetime granted (upstream's `--service-account-max-token-expiration` default: none; 48 h here).
const MAX_EXPIRATION_SECONDS: i64 = 48 * 3600;

pub(crate) async fn create(
    state: &State,
    target: &Target,
    name: &str,
    headers: &HeaderMap,
    bytes: &[u8],
) -> Result<Value, ApiError> {
    let Some(signer) = state.token_signer.clone() else {
        return Err(ApiError::no_route(&format!(
            "serviceaccounts/{name}/token (no service account signing key is configured)"
        )));
    };
    let request = body::decode_object(bytes, headers)?;
    // Admission sees the TokenRequest as a create of the subresource
    // (NodeRestriction checks what a node binds its tokens to).
    let create =
        super::objects::admit(state, target, Operation::Create, name, Some("token"), Some(request), None, false);
    let request = create.await?.unwrap_or_default();
    let spec = request.get("spec").cloned().unwrap_or_else(|| json!({}));
    let error_target = target.error_target(name);
    let expiration = spec.get("expirationSeconds").and_then(Value::as_i64).unwrap_or(DEFAULT_EXPIRATION_SECONDS);
    if expiration < MIN_EXPIRATION_SECONDS {
        return Err(ApiError::invalid(
            &error_target,
            vec![FieldError::invalid(
                "spec.expirationSeconds",
                &expiration.to_string(),
                "may not specify a duration less than 10 minutes",
            )],
        ));
    }
    let expiration = expiration.min(MAX_EXPIRATION_SECONDS);
    let audiences: Vec<String> = spec
        .get("audiences")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
        .filter(|a: &Vec<String>| !a.is_empty())
        .unwrap_or_else(|| vec![signer.issuer().to_owned()]);
    let (account, _) = load(state, target, name).await?;
    let namespace = target.namespace.clone().unwrap_or_default();
    let uid = meta_str(&account, "uid").unwrap_or_default().to_owned();
    let bound = match spec.get("boundObjectRef").filter(|b| !b.is_null()) {
        None => None,
        Some(reference) => Some(bound_object(state, target, &namespace, reference).await?),
    };
    let claims = signer.claims(&namespace, name, &uid, audiences.clone(), expiration, bound.as_ref());
    let token = signer.sign(&claims);
    let expires = k8s_openapi::jiff::Timestamp::from_second(claims.exp)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default();
    let mut out_spec = json!({"audiences": audiences, "expirationSeconds": expiration});
    if let Some(reference) = spec.get("boundObjectRef").filter(|b| !b.is_null()) {
        out_spec["boundObjectRef"] = reference.clone();
    }
    Ok(json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": null},
        "spec": out_spec,
        "status": {"token": token, "expirationTimestamp": expires},
    }))
}

/// The Pod or Secret a token is to be bound to, checked to exist with the
/// UID given.
async fn bound_object(
    state: &State,
    target: &Target,
    namespace: &str,
    reference: &Value,
) -> Result<BoundObject, ApiError> {
    let kind = reference.get("kind").and_then(Value::as_str).unwrap_or_default();
    let plural = match kind {
        "Pod" => "pods",
        "Secret" => "secrets",
        other => {
            return Err(ApiError::bad_request(format!(
                "cannot bind token to object of type {other:?}: only Pod and Secret are supported"
            )));
        }
    };
    let name = reference.get("name").and_then(Value::as_str).unwrap_or_default();
    let registry = state.registry();
    let resource = registry.get("", "v1", plural).expect("pods and secrets are built in");
    let object_target =
        Target { resource, namespace: Some(namespace.to_owned()), user: target.user.clone(), fenced: None };
    let (object, _) = load(state, &object_target, name).await?;
    let uid = meta_str(&object, "uid").unwrap_or_default().to_owned();
    if let Some(asked) = reference.get("uid").and_then(Value::as_str).filter(|u| !u.is_empty())
        && asked != uid
    {
        return Err(ApiError::conflict_because(
            &object_target.error_target(name),
            format!("the UID in the bound object reference ({asked}) does not match the UID in record ({uid})"),
        ));
    }
    Ok(BoundObject { kind: kind.to_owned(), name: name.to_owned(), uid })
}
