//! `POST pods/<name>/eviction`: deletes a pod unless a PodDisruptionBudget
//! forbids it (429), as upstream's eviction subresource does. The budget
//! arithmetic lives in [`crate::api::pdb`].

use axum::http::HeaderMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{StatusCause, StatusDetails};
use serde_json::{Value, json};

use super::body;
use super::list::list_items;
use super::objects::{self, Target, load, store_error};
use super::route::Query;
use super::state::State;
use crate::api::meta::{meta_str, metadata_mut, now_rfc3339};
use crate::api::pdb::{self, Verdict};
use crate::api::{ApiError, ErrorTarget};

const TOO_MANY: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

/// The 429 upstream answers, with a `DisruptionBudget` cause.
fn too_many_requests(cause: String) -> ApiError {
    let mut error = ApiError::too_many_requests(TOO_MANY);
    error.details = Some(Box::new(StatusDetails {
        causes: Some(vec![StatusCause { reason: Some("DisruptionBudget".into()), message: Some(cause), field: None }]),
        ..Default::default()
    }));
    error
}

fn pdb_target(name: &str) -> ErrorTarget {
    ErrorTarget {
        group: "policy".into(),
        resource: "poddisruptionbudget".into(),
        kind: "PodDisruptionBudget".into(),
        name: name.into(),
    }
}

/// Handles an Eviction (policy/v1, or the policy/v1beta1 body).
pub(crate) async fn evict(
    state: &State,
    target: &Target,
    name: &str,
    query: &Query,
    headers: &HeaderMap,
    bytes: &[u8],
) -> Result<Value, ApiError> {
    let eviction = body::decode_object(bytes, headers)?;
    match eviction.get("apiVersion").and_then(Value::as_str) {
        None | Some("policy/v1" | "policy/v1beta1") => {}
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "unsupported Eviction version {other:?}: expected policy/v1 or policy/v1beta1"
            )));
        }
    }
    if let Some(kind) = eviction.get("kind").and_then(Value::as_str)
        && kind != "Eviction"
    {
        return Err(ApiError::bad_request(format!("not a Eviction object: {kind}")));
    }
    if meta_str(&eviction, "name").is_some_and(|n| n != name) {
        return Err(ApiError::bad_request("name in URL does not match name in Eviction object"));
    }
    let mut options = eviction.get("deleteOptions").filter(|o| o.is_object()).cloned().unwrap_or_else(|| json!({}));
    // Upstream decodes DeleteOptions as a typed object: preconditions that
    // are not an object (or null) are a bad request.
    match options.get("preconditions") {
        None | Some(Value::Null | Value::Object(_)) => {}
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "invalid DeleteOptions: preconditions must be an object, not {other}"
            )));
        }
    }
    let dry_run = query.dry_run || options["dryRun"].as_array().is_some_and(|d| d.iter().any(|v| v == "All"));
    let (pod, revision) = load(state, target, name).await?;
    let charged = if pdb::can_ignore_budget(&pod) { None } else { guard(state, target, &pod, dry_run).await? };
    // Like upstream: when a budget was charged for the pod as it was read,
    // the delete is pinned to that version, and a conflict is a 429 the
    // client retries.
    let user_pinned = options.pointer("/preconditions/resourceVersion").is_some();
    let pinned = charged.is_some() && !user_pinned;
    let still_processing = || {
        too_many_requests(format!(
            "The disruption budget {} is still being processed by the server.",
            charged.clone().unwrap_or_default()
        ))
    };
    let mut pin_to = pinned.then_some(revision);
    if !dry_run {
        match mark_disruption_target(state, target, name, &options, pin_to).await {
            Ok(new_revision) => {
                if pinned || user_pinned {
                    pin_to = Some(new_revision);
                }
            }
            Err(e) if e.code == 409 && pinned => return Err(still_processing()),
            Err(e) => return Err(e),
        }
    }
    if let Some(pin) = pin_to {
        if !options["preconditions"].is_object() {
            options["preconditions"] = json!({});
        }
        options["preconditions"]["resourceVersion"] = pin.to_string().into();
    }
    let options_bytes = serde_json::to_vec(&options).expect("JSON values serialize");
    match objects::delete(state, target, name, query, &options_bytes).await {
        Err(e) if e.code == 409 && pinned => Err(still_processing()),
        Err(e) => Err(e),
        Ok(_) => Ok(json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})),
    }
}

/// Checks the delete preconditions and adds upstream's `DisruptionTarget`
/// condition (`EvictionByEvictionAPI`) to the pod before it is deleted;
/// returns the pod's new revision. `pinned`: the revision the pod must
/// still be at.
async fn mark_disruption_target(
    state: &State,
    target: &Target,
    name: &str,
    options: &Value,
    pinned: Option<i64>,
) -> Result<i64, ApiError> {
    let (mut pod, revision) = load(state, target, name).await?;
    let error_target = target.error_target(name);
    let uid = meta_str(&pod, "uid").unwrap_or_default().to_owned();
    if let Some(wanted) = options.pointer("/preconditions/uid").and_then(Value::as_str)
        && !wanted.is_empty()
        && wanted != uid
    {
        return Err(ApiError::conflict_because(
            &error_target,
            format!(
                "the UID in the precondition ({wanted}) does not match the UID in record ({uid}). The object might have been deleted and then recreated"
            ),
        ));
    }
    if let Some(wanted) = options.pointer("/preconditions/resourceVersion").and_then(Value::as_str)
        && !wanted.is_empty()
        && wanted != revision.to_string()
    {
        return Err(ApiError::conflict_because(
            &error_target,
            format!(
                "the ResourceVersion in the precondition ({wanted}) does not match the ResourceVersion in record ({revision}). The object might have been modified"
            ),
        ));
    }
    if pinned.is_some_and(|p| p != revision) {
        return Err(ApiError::conflict(&error_target));
    }
    let now = now_rfc3339();
    let mut conditions: Vec<Value> =
        pod.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
    let existing = conditions.iter().position(|c| c["type"] == "DisruptionTarget");
    let since = existing
        .map(|i| &conditions[i])
        .filter(|c| c["status"] == "True")
        .and_then(|c| c.get("lastTransitionTime").cloned())
        .unwrap_or_else(|| now.clone().into());
    let condition = json!({
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "EvictionByEvictionAPI",
        "message": "Eviction API: evicting",
        "lastTransitionTime": since,
    });
    match existing {
        Some(i) => conditions[i] = condition,
        None => conditions.push(condition),
    }
    if !pod["status"].is_object() {
        pod["status"] = json!({});
    }
    pod["status"]["conditions"] = conditions.into();
    metadata_mut(&mut pod).remove("resourceVersion");
    let key = target.resource.storage_key(target.namespace.as_deref(), name);
    let bytes = serde_json::to_vec(&pod).expect("JSON values serialize");
    let kv = target
        .store(state)
        .update(&key, bytes.into(), revision, None)
        .await
        .map_err(|e| store_error(e, &error_target))?;
    Ok(kv.mod_revision)
}

/// Checks (and charges) the budget that selects `pod`; returns its name if
/// one applied.
async fn guard(state: &State, pods_target: &Target, pod: &Value, dry_run: bool) -> Result<Option<String>, ApiError> {
    let registry = state.registry();
    let Some(budgets) = registry.get("policy", "v1", "poddisruptionbudgets") else {
        return Ok(None);
    };
    let budgets_target = Target {
        resource: budgets,
        namespace: pods_target.namespace.clone(),
        user: pods_target.user.clone(),
        fenced: pods_target.fenced.clone(),
    };
    let all = Query::default();
    let matching: Vec<Value> =
        list_items(state, &budgets_target, &all).await?.items.into_iter().filter(|b| pdb::selects(b, pod)).collect();
    let budget = match matching.as_slice() {
        [] => return Ok(None),
        [one] => one,
        _ => {
            return Err(ApiError::internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
    };
    let budget_name = meta_str(budget, "name").unwrap_or_default().to_owned();
    let pods = list_items(state, pods_target, &all).await?.items;
    match pdb::verdict(budget, pod, &pods) {
        Verdict::Blocked(message) => Err(too_many_requests(message)),
        Verdict::Forbidden(message) => {
            Err(ApiError::forbidden(format!("poddisruptionbudget.policy {budget_name:?} is forbidden: {message}")))
        }
        Verdict::Allowed { record: false } => Ok(Some(budget_name)),
        Verdict::Allowed { record: true } => {
            if !dry_run {
                let pod_name = meta_str(pod, "name").unwrap_or_default();
                let mut updated = pdb::record_disruption(budget, pod_name, &now_rfc3339());
                let revision = meta_str(budget, "resourceVersion").and_then(|rv| rv.parse().ok()).unwrap_or(0);
                metadata_mut(&mut updated).remove("resourceVersion");
                let key = budgets_target.resource.storage_key(budgets_target.namespace.as_deref(), &budget_name);
                let bytes = serde_json::to_vec(&updated).expect("JSON values serialize");
                budgets_target.store(state).update(&key, bytes.into(), revision, None).await.map_err(|e| match e {
                    orchestra_store::Error::Conflict { .. } => too_many_requests(format!(
                        "The disruption budget {budget_name} is still being processed by the server."
                    )),
                    other => store_error(other, &pdb_target(&budget_name)),
                })?;
            }
            Ok(Some(budget_name))
        }
    }
}
