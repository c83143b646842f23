//! The CustomResourceDefinition controllers of the API server (upstream's
//! naming, establishing and finalizer controllers, folded into one loop).
//!
//! On start every stored CRD is reconciled before the server serves a
//! request, so a restart keeps custom resources served. Afterwards a task
//! watches the CRD key prefix and reconciles each CRD that changes:
//!
//! * a live CRD gets its names checked against the group's other resources,
//!   its served versions registered (before its status says `Established`,
//!   so discovery lists them as soon as a client sees the condition), and
//!   its status (`acceptedNames`, `NamesAccepted`, `Established`,
//!   `storedVersions`) written when it changed;
//! * a CRD being deleted (its delete added the
//!   `customresourcecleanup.apiextensions.k8s.io` finalizer) gets the
//!   `Terminating` condition; its kind stays served but refuses creates;
//!   its instances are deleted (those with finalizers get a deletion
//!   timestamp and are waited for, retried every half second); then the
//!   kind stops being served, the finalizer goes, and so does the CRD;
//! * a CRD gone from the store stops being served.

use std::collections::BTreeSet;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::StreamExt;
use orchestra_store::{EventKind, KeyRange, RangeRequest, Revision, WatchRequest};
use serde_json::Value;

use super::codec::decode_stored;
use super::state::State;
use crate::api::crd::{self, Names};
use crate::api::meta::{metadata_mut, now_rfc3339};
use crate::api::{ApiError, Registry, ResourceInfo};

/// The store prefix of CRDs.
fn prefix(state: &State) -> Option<String> {
    state.registry().get(crd::GROUP, "v1", crd::PLURAL).map(|info| info.storage_prefix())
}

/// What [`load_all`] found: the revision it read at and the CRDs to retry.
pub(crate) struct Loaded {
    revision: Revision,
    pending: BTreeSet<String>,
}

/// Reconciles every stored CRD.
pub(crate) async fn load_all(state: &State) -> Result<Loaded, ApiError> {
    let mut loaded = Loaded { revision: 0, pending: BTreeSet::new() };
    let Some(prefix) = prefix(state) else {
        return Ok(loaded);
    };
    let mut request = RangeRequest::new(KeyRange::prefix(prefix));
    loop {
        let response = state.store.range(request.clone()).await.map_err(ApiError::internal)?;
        loaded.revision = loaded.revision.max(response.revision);
        for kv in &response.kvs {
            if reconcile(state, &kv.key).await {
                loaded.pending.insert(kv.key.clone());
            }
        }
        match request.next_page(&response) {
            Some(next) => request = next,
            None => return Ok(loaded),
        }
    }
}

/// Starts the watch loop after what [`load_all`] read.
pub(crate) fn spawn(state: &Arc<State>, loaded: Loaded) {
    let Some(prefix) = prefix(state) else {
        return;
    };
    let weak: Weak<State> = Arc::downgrade(state);
    tokio::spawn(async move {
        let mut from = loaded.revision;
        // CRDs whose instances are still being deleted.
        let mut pending = loaded.pending;
        loop {
            let Some(state) = weak.upgrade() else { return };
            let request = WatchRequest::new(KeyRange::prefix(prefix.clone())).from_revision(from + 1);
            let stream = state.store.watch(request).await;
            drop(state);
            let mut stream = match stream {
                Ok(stream) => stream,
                Err(error) => {
                    tracing::warn!(%error, "CRD watch failed; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            let mut retry = tokio::time::interval(Duration::from_millis(500));
            loop {
                let next = tokio::select! {
                    next = stream.next() => next,
                    _ = retry.tick() => {
                        let Some(state) = weak.upgrade() else { return };
                        let keys = std::mem::take(&mut pending);
                        for key in keys {
                            if reconcile(&state, &key).await {
                                pending.insert(key);
                            }
                        }
                        continue;
                    }
                };
                let Some(response) = next else { break };
                let Some(state) = weak.upgrade() else { return };
                match response {
                    Ok(response) => {
                        for event in &response.events {
                            from = from.max(event.kv.mod_revision);
                            if event.kind == EventKind::Put || event.kind == EventKind::Delete {
                                let key = event.kv.key.clone();
                                if reconcile(&state, &key).await {
                                    pending.insert(key);
                                } else {
                                    pending.remove(&key);
                                }
                            }
                        }
                    }
                    Err(error) => {
                        tracing::warn!(%error, "CRD watch broke; relisting");
                        match load_all(&state).await {
                            Ok(reloaded) => {
                                from = reloaded.revision;
                                pending.extend(reloaded.pending);
                            }
                            Err(error) => tracing::warn!(%error, "CRD relist failed"),
                        }
                        break;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}

/// The resources of a CRD currently registered.
fn registered(registry: &Registry, group: &str, definition: &str) -> Vec<Arc<ResourceInfo>> {
    registry
        .versions(group)
        .iter()
        .flat_map(|v| registry.resources(group, v))
        .filter(|r| r.custom.as_ref().is_some_and(|c| c.definition == definition))
        .collect()
}

/// Stops serving every resource of `definition` in `group`.
fn unregister(state: &State, group: &str, definition: &str) {
    state.update_registry(|registry| {
        for info in registered(registry, group, definition) {
            registry.unregister(&info.group, &info.version, &info.plural);
        }
    });
}

/// Brings the server in line with the CRD stored at `key`.
/// Returns true if the CRD must be reconciled again soon (its instances are
/// being deleted).
async fn reconcile(state: &State, key: &str) -> bool {
    let name = key.rsplit('/').next().unwrap_or("").to_owned();
    let group = name.split_once('.').map(|(_, g)| g).unwrap_or("").to_owned();
    let kv = match state.store.get(key).await {
        Ok(kv) => kv,
        Err(error) => {
            tracing::warn!(%error, key, "reading a CRD failed");
            return true;
        }
    };
    let Some(kv) = kv else {
        unregister(state, &group, &name);
        return false;
    };
    let Ok(crd) = decode_stored(&kv) else {
        return false;
    };
    let group = crd.pointer("/spec/group").and_then(Value::as_str).unwrap_or(&group).to_owned();
    let result = if crd.pointer("/metadata/deletionTimestamp").is_some() {
        clean_up(state, key, &group, &name, crd, kv.mod_revision).await
    } else {
        establish(state, key, &group, &name, crd, kv.mod_revision).await.map(|()| false)
    };
    match result {
        Ok(requeue) => requeue,
        // A conflict means a newer version is on its way through the watch.
        Err(error) if error.code == 409 => false,
        Err(error) => {
            tracing::warn!(%error, crd = name, "reconciling a CRD failed");
            true
        }
    }
}

/// Registers a live CRD's served versions and writes its status.
async fn establish(
    state: &State,
    key: &str,
    group: &str,
    name: &str,
    mut crd: Value,
    revision: Revision,
) -> Result<(), ApiError> {
    let requested = Names::from_value(crd.pointer("/spec/names").unwrap_or(&Value::Null));
    let registry = state.registry();
    let others: Vec<Arc<ResourceInfo>> = registry
        .versions(group)
        .iter()
        .flat_map(|v| registry.resources(group, v))
        .filter(|r| r.custom.as_ref().is_none_or(|c| c.definition != name))
        .collect();
    let conflict = crd::names_conflict(&requested, others.iter().map(|r| r.as_ref()));
    let status = crd::status(&crd, conflict.as_ref(), None, &now_rfc3339());
    let accepted = Names::from_value(&status["acceptedNames"]);
    let resources = if accepted.plural.is_empty() { Vec::new() } else { crd::resources_of(&crd, &accepted) };
    state.update_registry(|registry| {
        for info in registered(registry, group, name) {
            registry.unregister(&info.group, &info.version, &info.plural);
        }
        for info in resources {
            registry.register(info);
        }
    });
    if crd.get("status") == Some(&status) {
        return Ok(());
    }
    crd["status"] = status;
    write(state, key, &crd, revision).await
}

/// Deletes a terminating CRD's instances, then the CRD, like upstream's
/// finalizer controller: the kind stays served (creates refused) while
/// instances with finalizers wait for them; the CRD carries the
/// `Terminating` condition; once no instance is left the kind stops being
/// served and the cleanup finalizer goes. Returns true while instances remain.
async fn clean_up(
    state: &State,
    key: &str,
    group: &str,
    name: &str,
    mut crd: Value,
    revision: Revision,
) -> Result<bool, ApiError> {
    let accepted = Names::from_value(crd.pointer("/status/acceptedNames").unwrap_or(&Value::Null));
    if !accepted.plural.is_empty() {
        let resources = crd::resources_of(&crd, &accepted);
        state.update_registry(|registry| {
            for info in registered(registry, group, name) {
                registry.unregister(&info.group, &info.version, &info.plural);
            }
            for info in resources {
                registry.register(info);
            }
        });
    }
    let terminating = crd
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| c.iter().any(|c| c["type"] == "Terminating"));
    if !terminating {
        let conditions = crd["status"]["conditions"].as_array().cloned().unwrap_or_default();
        let mut conditions = conditions;
        conditions.push(serde_json::json!({
            "type": "Terminating",
            "status": "True",
            "lastTransitionTime": now_rfc3339(),
            "reason": "InstanceDeletionInProgress",
            "message": "CustomResource deletion is in progress",
        }));
        if !crd["status"].is_object() {
            crd["status"] = serde_json::json!({});
        }
        crd["status"]["conditions"] = conditions.into();
        write(state, key, &crd, revision).await?;
        // The write comes back through the watch and continues the cleanup.
        return Ok(false);
    }
    let plural = if accepted.plural.is_empty() {
        crd.pointer("/spec/names/plural").and_then(Value::as_str).unwrap_or("").to_owned()
    } else {
        accepted.plural.clone()
    };
    if !plural.is_empty() && delete_instances(state, group, &plural).await? {
        return Ok(true);
    }
    unregister(state, group, name);
    let metadata = metadata_mut(&mut crd);
    let finalizers: Vec<Value> = metadata
        .get("finalizers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|f| f != crd::CLEANUP_FINALIZER)
        .collect();
    if finalizers.is_empty() {
        return match state.store.delete(key, Some(revision)).await {
            Ok(_) | Err(orchestra_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(ApiError::internal(e)),
        };
    }
    if metadata.get("finalizers").and_then(Value::as_array).map(Vec::len) == Some(finalizers.len()) {
        // Only others' finalizers are left: wait for them.
        return Ok(false);
    }
    metadata.insert("finalizers".into(), finalizers.into());
    write(state, key, &crd, revision).await.map(|()| false)
}

/// Deletes the instances of a kind: at once without finalizers, else by
/// setting their deletion timestamp. Returns true if any is left.
async fn delete_instances(state: &State, group: &str, plural: &str) -> Result<bool, ApiError> {
    let prefix = ResourceInfo::new(group, "", "", plural, true).storage_prefix();
    let response = state.store.range(RangeRequest::new(KeyRange::prefix(prefix))).await.map_err(ApiError::internal)?;
    let mut left = false;
    for kv in &response.kvs {
        let mut object = decode_stored(kv)?;
        let has_finalizers =
            object.pointer("/metadata/finalizers").and_then(Value::as_array).is_some_and(|f| !f.is_empty());
        if !has_finalizers {
            match state.store.delete(&kv.key, Some(kv.mod_revision)).await {
                Ok(_) | Err(orchestra_store::Error::NotFound { .. }) => {}
                Err(orchestra_store::Error::Conflict { .. }) => left = true,
                Err(e) => return Err(ApiError::internal(e)),
            }
            continue;
        }
        left = true;
        if object.pointer("/metadata/deletionTimestamp").is_none() {
            let metadata = metadata_mut(&mut object);
            metadata.insert("deletionTimestamp".into(), now_rfc3339().into());
            metadata.insert("deletionGracePeriodSeconds".into(), 0.into());
            match write(state, &kv.key, &object, kv.mod_revision).await {
                Ok(()) => {}
                Err(e) if e.code == 409 => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(left)
}

async fn write(state: &State, key: &str, object: &Value, revision: Revision) -> Result<(), ApiError> {
    let mut object = object.clone();
    metadata_mut(&mut object).remove("resourceVersion");
    let bytes = serde_json::to_vec(&object).expect("JSON values serialize");
    match state.store.update(key, bytes.into(), revision, None).await {
        Ok(_) => Ok(()),
        Err(orchestra_store::Error::Conflict { .. } | orchestra_store::Error::NotFound { .. }) => {
            Err(ApiError::conflict(&Default::default()))
        }
        Err(e) => Err(ApiError::internal(e)),
    }
}

/// Shows a stored custom resource as the served version (`conversion:
/// None`: only `apiVersion` changes) with the version's defaults applied,
/// as upstream defaults on read. Other kinds are left alone.
pub(crate) fn served(resource: &ResourceInfo, object: &mut Value) {
    let Some(custom) = &resource.custom else {
        return;
    };
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".into(), resource.api_version().into());
    }
    if let Some(schema) = &custom.schema {
        crd::schema::apply_defaults(schema, object);
    }
}

/// The scale paths of a custom resource with the `scale` subresource.
pub(crate) fn scale_paths(resource: &ResourceInfo) -> Option<&crd::ScalePaths> {
    resource.custom.as_ref().and_then(|c| c.scale.as_ref())
}

/// Validates a custom resource after a scale update against its schema
/// (422 about the resource, like upstream); other kinds pass.
pub(crate) fn validate_scaled(target: &super::objects::Target, name: &str, object: &mut Value) -> Result<(), ApiError> {
    if target.resource.custom.is_none() {
        return Ok(());
    }
    let errors = crd::prepare(&target.resource, object, Some(&Value::Null))?;
    if errors.is_empty() { Ok(()) } else { Err(ApiError::invalid(&target.error_target(name), errors)) }
}

/// A custom resource's autoscaling/v1 `Scale`, read through its scale paths
/// (absent replicas read as 0, like upstream).
pub(crate) fn scale_of(paths: &crd::ScalePaths, object: &Value) -> Value {
    let at = |path: &str| object.pointer(&crd::json_path_pointer(path)).cloned();
    let metadata = object.get("metadata").cloned().unwrap_or_default();
    let mut status = serde_json::json!({
        "replicas": at(&paths.status_replicas).and_then(|v| v.as_i64()).unwrap_or(0),
    });
    if let Some(selector) = paths.label_selector.as_deref().and_then(at).and_then(|v| v.as_str().map(str::to_owned)) {
        status["selector"] = selector.into();
    }
    serde_json::json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": metadata.get("name"),
            "namespace": metadata.get("namespace"),
            "uid": metadata.get("uid"),
            "resourceVersion": metadata.get("resourceVersion"),
            "creationTimestamp": metadata.get("creationTimestamp"),
        },
        "spec": {"replicas": at(&paths.spec_replicas).and_then(|v| v.as_i64()).unwrap_or(0)},
        "status": status,
    })
}

/// Sets the value at a JSON pointer, creating missing parent objects.
pub(crate) fn set_at(object: &mut Value, pointer: &str, value: Value) {
    let mut node = object;
    let segments: Vec<&str> = pointer.split('/').skip(1).collect();
    for (i, segment) in segments.iter().enumerate() {
        let key = segment.replace("~1", "/").replace("~0", "~");
        if !node.is_object() {
            *node = Value::Object(Default::default());
        }
        let map = node.as_object_mut().expect("made an object");
        if i + 1 == segments.len() {
            map.insert(key, value);
            return;
        }
        node = map.entry(key).or_insert_with(|| Value::Object(Default::default()));
    }
}
