//! Subresources with their own shapes: `binding`, `scale`, namespace `finalize`.

use axum::http::{HeaderMap, Method};
use orchestra_store::Error as StoreError;
use serde_json::{Value, json};

use super::body;
use super::codec::{decode_served, encode};
use super::objects::{Target, load, store_error};
use super::route::Query;
use super::state::State;
use crate::api::meta::{meta_str, metadata_mut};
use crate::api::{ApiError, FieldError};

/// Writes an object back, guarded by the revision it was read at.
async fn save(state: &State, target: &Target, name: &str, object: &Value, revision: i64) -> Result<Value, ApiError> {
    let key = target.resource.storage_key(target.namespace.as_deref(), name);
    let kv = target
        .store(state)
        .update(&key, encode(&target.resource, object), revision, target.resource.ttl)
        .await
        .map_err(|e| store_error(e, &target.error_target(name)))?;
    decode_served(&target.resource, &kv)
}

/// `POST pods/<name>/binding`: assigns the pod to a node, once.
pub(crate) async fn bind(
    state: &State,
    target: &Target,
    name: &str,
    headers: &HeaderMap,
    bytes: &[u8],
) -> Result<Value, ApiError> {
    let binding = body::decode_object(bytes, headers)?;
    let node = binding.pointer("/target/name").and_then(Value::as_str).filter(|n| !n.is_empty());
    let Some(node) = node else {
        return Err(ApiError::invalid(&target.error_target(name), vec![FieldError::required("target.name")]));
    };
    // Like upstream's GuaranteedUpdate: a write that lost a race with
    // another (a status update, say) is redone on the newer pod.
    for _ in 0..BIND_ATTEMPTS {
        if let Some(done) = bind_once(state, target, name, node, &binding).await? {
            return Ok(done);
        }
    }
    Err(ApiError::conflict(&target.error_target(name)))
}

/// Sets the condition `PodScheduled=True`, as upstream's binding does (the
/// scheduler's earlier `False` with its reason goes).
fn mark_scheduled(pod: &mut Value) {
    if !pod.get("status").is_some_and(Value::is_object) {
        pod["status"] = json!({});
    }
    let status = &mut pod["status"];
    if !status.get("conditions").is_some_and(Value::is_array) {
        status["conditions"] = json!([]);
    }
    let conditions = status["conditions"].as_array_mut().expect("made an array");
    let scheduled =
        json!({"type": "PodScheduled", "status": "True", "lastTransitionTime": crate::api::meta::now_rfc3339()});
    match conditions.iter_mut().find(|c| c["type"] == "PodScheduled") {
        Some(c) if c["status"] == "True" => {}
        Some(c) => *c = scheduled,
        None => conditions.push(scheduled),
    }
}

/// How often [`bind`] redoes a write that lost a race.
const BIND_ATTEMPTS: usize = 5;

/// One attempt at [`bind`]: `Ok(None)` if the pod changed between its read
/// and the write (the attempt is to be redone).
async fn bind_once(
    state: &State,
    target: &Target,
    name: &str,
    node: &str,
    binding: &Value,
) -> Result<Option<Value>, ApiError> {
    let (mut pod, revision) = load(state, target, name).await?;
    if let Some(uid) = binding.pointer("/metadata/uid").and_then(Value::as_str).filter(|u| !u.is_empty())
        && pod.pointer("/metadata/uid").and_then(Value::as_str) != Some(uid)
    {
        return Err(ApiError::conflict_because(
            &target.error_target(name),
            format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                pod.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("")
            ),
        ));
    }
    if pod.pointer("/metadata/deletionTimestamp").is_some() {
        return Err(ApiError::conflict_because(
            &target.error_target(name),
            "pod is being deleted, cannot be assigned to a host",
        ));
    }
    if let Some(bound) = pod.pointer("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty()) {
        return Err(ApiError::conflict_because(
            &target.error_target(name),
            format!("pod {name} is already assigned to node {bound:?}"),
        ));
    }
    pod["spec"]["nodeName"] = node.into();
    mark_scheduled(&mut pod);
    if let Some(annotations) = binding.pointer("/metadata/annotations").and_then(Value::as_object) {
        let metadata = metadata_mut(&mut pod);
        let existing = metadata.entry("annotations").or_insert_with(|| json!({}));
        for (k, v) in annotations {
            existing[k] = v.clone();
        }
    }
    let key = target.resource.storage_key(target.namespace.as_deref(), name);
    match target.store(state).update(&key, encode(&target.resource, &pod), revision, target.resource.ttl).await {
        Ok(_) => {
            Ok(Some(json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})))
        }
        Err(StoreError::Conflict { .. }) => Ok(None),
        Err(e) => Err(store_error(e, &target.error_target(name))),
    }
}

/// The label selector of a workload as a string (`app=web,tier=front`).
fn selector_string(object: &Value) -> String {
    let Some(labels) = object.pointer("/spec/selector/matchLabels").and_then(Value::as_object) else {
        // ReplicationControllers: a plain map.
        return object
            .pointer("/spec/selector")
            .and_then(Value::as_object)
            .map(|m| m.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))).collect::<Vec<_>>().join(","))
            .unwrap_or_default();
    };
    labels.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))).collect::<Vec<_>>().join(",")
}

fn scale_of(target: &Target, object: &Value) -> Value {
    if let Some(paths) = super::crd::scale_paths(&target.resource) {
        return super::crd::scale_of(paths, object);
    }
    let metadata = object.get("metadata").cloned().unwrap_or_default();
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": metadata.get("name"),
            "namespace": metadata.get("namespace"),
            "uid": metadata.get("uid"),
            "resourceVersion": metadata.get("resourceVersion"),
            "creationTimestamp": metadata.get("creationTimestamp"),
        },
        "spec": {"replicas": object.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1)},
        "status": {
            "replicas": object.pointer("/status/replicas").and_then(Value::as_i64).unwrap_or(0),
            "selector": selector_string(object),
        },
    })
}

/// `GET <workload>/<name>/scale`.
pub(crate) async fn get_scale(state: &State, target: &Target, name: &str) -> Result<Value, ApiError> {
    let (object, _) = load(state, target, name).await?;
    Ok(scale_of(target, &object))
}

/// `PUT` or `PATCH <workload>/<name>/scale`: sets `spec.replicas`.
pub(crate) async fn update_scale(
    state: &State,
    target: &Target,
    name: &str,
    method: &Method,
    query: &Query,
    headers: &HeaderMap,
    bytes: &[u8],
) -> Result<Value, ApiError> {
    let (mut object, revision) = load(state, target, name).await?;
    let old = object.clone();
    let mut scale = scale_of(target, &object);
    let input: Value = if *method == Method::PUT {
        // A Scale PUT is an object like any other: JSON, YAML or protobuf.
        body::decode_object(bytes, headers)?
    } else {
        serde_json::from_slice(bytes)
            .map_err(|e| ApiError::bad_request(format!("the body of the request could not be decoded: {e}")))?
    };
    if *method == Method::PUT {
        scale = input;
    } else {
        match body::content_type(headers).as_str() {
            "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
                json_patch::merge(&mut scale, &input)
            }
            "application/json-patch+json" => {
                let patch: json_patch::Patch = serde_json::from_value(input)
                    .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
                json_patch::patch(&mut scale, &patch).map_err(|e| ApiError::bad_request(e.to_string()))?;
            }
            other => return Err(ApiError::unsupported_media_type(other)),
        }
    }
    // A resourceVersion sent (in a PUT, or patched in, as `kubectl scale
    // --resource-version` does) is a precondition.
    if let Some(rv) = meta_str(&scale, "resourceVersion").filter(|rv| !rv.is_empty())
        && rv != revision.to_string()
    {
        return Err(ApiError::conflict(&target.error_target(name)));
    }
    let Some(replicas) = scale.pointer("/spec/replicas").and_then(Value::as_i64).filter(|r| *r >= 0) else {
        return Err(ApiError::invalid(
            &ErrorTargetExt::scale(target, name),
            vec![FieldError::invalid(
                "spec.replicas",
                &scale.pointer("/spec/replicas").map(Value::to_string).unwrap_or_default(),
                "must be greater than or equal to 0",
            )],
        ));
    };
    let pointer = super::crd::scale_paths(&target.resource)
        .map_or_else(|| "/spec/replicas".to_owned(), |p| crate::api::crd::json_path_pointer(&p.spec_replicas));
    if object.pointer(&pointer).and_then(Value::as_i64) != Some(replicas) {
        super::crd::set_at(&mut object, &pointer, replicas.into());
        let generation = object.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(1);
        metadata_mut(&mut object).insert("generation".into(), (generation + 1).into());
        super::crd::validate_scaled(target, name, &mut object)?;
        // Like upstream, the writer owns `spec.replicas` through `scale`.
        super::patching::track_update(target, Some(&old), &mut object, query, headers, Some("scale"));
        if !query.dry_run {
            object = save(state, target, name, &object, revision).await?;
        }
    }
    Ok(scale_of(target, &object))
}

/// Errors about a Scale name the Scale kind.
struct ErrorTargetExt;

impl ErrorTargetExt {
    fn scale(target: &Target, name: &str) -> crate::api::ErrorTarget {
        let mut t = target.error_target(name);
        t.kind = "Scale".into();
        t
    }
}

/// `PUT namespaces/<name>/finalize`: replaces `spec.finalizers`; a namespace
/// being deleted goes away with its last finalizer.
pub(crate) async fn finalize(
    state: &State,
    target: &Target,
    name: &str,
    headers: &HeaderMap,
    bytes: &[u8],
) -> Result<Value, ApiError> {
    let input = body::decode_object(bytes, headers)?;
    let (mut namespace, revision) = load(state, target, name).await?;
    let finalizers = input.pointer("/spec/finalizers").cloned().unwrap_or_else(|| json!([]));
    namespace["spec"]["finalizers"] = finalizers.clone();
    let done = finalizers.as_array().is_none_or(Vec::is_empty)
        && namespace.pointer("/metadata/deletionTimestamp").is_some()
        && namespace.pointer("/metadata/finalizers").and_then(Value::as_array).is_none_or(Vec::is_empty);
    if done {
        let key = target.resource.storage_key(None, name);
        target
            .store(state)
            .delete(&key, Some(revision))
            .await
            .map_err(|e| store_error(e, &target.error_target(name)))?;
        return Ok(namespace);
    }
    save(state, target, name, &namespace, revision).await
}
