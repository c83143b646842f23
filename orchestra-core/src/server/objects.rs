//! get, create, update, patch and delete of stored objects (lists are
//! [`super::list`]'s).

use std::sync::Arc;

use axum::http::HeaderMap;
use axum::response::Response;
use orchestra_store::{Error as StoreError, KeyValue, Revision};
use serde_json::{Map, Value, json};

use super::body;
use super::codec::{decode_served, encode, encode_with_splice, raw};
use super::patching;
use super::route::Query;
use super::services;
use super::state::State;
use crate::api::meta::{self, meta_str, metadata_mut};
use crate::api::{ApiError, ErrorTarget, FieldError, ResourceInfo};
use crate::auth::admission::{AdmissionRequest, Operation};

/// Everything a handler needs to know about the addressed resource.
pub(crate) struct Target {
    pub resource: Arc<ResourceInfo>,
    pub namespace: Option<String>,
    /// Who is asking (for admission).
    pub user: crate::auth::UserInfo,
    /// The store fenced by the writer's leadership term, when its request
    /// named one ([`super::fence`]).
    pub fenced: Option<Arc<dyn orchestra_store::Store>>,
}

impl Target {
    /// The store this request reads and writes: fenced, or the server's.
    pub(crate) fn store<'a>(&'a self, state: &'a State) -> &'a dyn orchestra_store::Store {
        self.fenced.as_deref().unwrap_or(state.store.as_ref())
    }

    pub(crate) fn error_target(&self, name: &str) -> ErrorTarget {
        ErrorTarget {
            group: self.resource.group.clone(),
            resource: self.resource.plural.clone(),
            kind: self.resource.kind.clone(),
            name: name.to_owned(),
        }
    }

    fn key(&self, name: &str) -> String {
        self.resource.storage_key(self.namespace.as_deref(), name)
    }
}

/// Maps a store failure to the API error clients expect.
pub(crate) fn store_error(error: StoreError, target: &ErrorTarget) -> ApiError {
    match error {
        StoreError::AlreadyExists { .. } => ApiError::already_exists(target),
        StoreError::NotFound { .. } => ApiError::not_found(target),
        StoreError::Conflict { .. } => ApiError::conflict(target),
        StoreError::Compacted { requested, compacted } => {
            ApiError::expired(format!("too old resource version: {requested} ({compacted})"))
        }
        StoreError::ValueTooLarge { .. } => ApiError::too_large(orchestra_store::limits::MAX_VALUE_BYTES),
        StoreError::Fenced { reason, .. } => ApiError::conflict_because(target, reason),
        StoreError::InvalidKey { reason, .. } => ApiError::bad_request(format!("invalid object key: {reason}")),
        StoreError::Unavailable(message) => ApiError::unavailable(message),
        other => ApiError::internal(other),
    }
}

/// Parses a `resourceVersion` a client sent.
pub(crate) fn parse_revision(value: &str) -> Result<Revision, ApiError> {
    value.parse::<Revision>().ok().filter(|r| *r >= 0).ok_or_else(|| {
        ApiError::bad_request(format!("invalid resource version {value:?}: must be a non-negative integer"))
    })
}

/// Reads one object with the store revision it was read at; 404 if absent.
pub(crate) async fn load(state: &State, target: &Target, name: &str) -> Result<(Value, Revision), ApiError> {
    let kv = load_stored(state, target, name).await?;
    let object = decode_served(&target.resource, &kv)?;
    Ok((object, kv.mod_revision))
}

/// Reads the stored form of the addressed object (404 if absent).
async fn load_stored(state: &State, target: &Target, name: &str) -> Result<KeyValue, ApiError> {
    target
        .store(state)
        .get(&target.key(name))
        .await
        .map_err(|e| store_error(e, &target.error_target(name)))?
        .ok_or_else(|| ApiError::not_found(&target.error_target(name)))
}

/// GET of one object.
pub(crate) async fn get(state: &State, target: &Target, name: &str) -> Result<Value, ApiError> {
    load(state, target, name).await.map(|(object, _)| object)
}

/// GET of one object as JSON: its stored bytes with the resource version
/// spliced in ([`raw`]) where the kind allows, the bytes [`get`]'s value
/// serializes to.
pub(crate) async fn get_json(state: &State, target: &Target, name: &str) -> Result<Vec<u8>, ApiError> {
    if !raw::is_servable(&target.resource) {
        let object = get(state, target, name).await?;
        return Ok(serde_json::to_vec(&object).expect("JSON values serialize"));
    }
    raw::stamped(&load_stored(state, target, name).await?)
}

/// Runs the admission chain on a write; returns the (possibly mutated) object.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn admit(
    state: &State,
    target: &Target,
    operation: Operation,
    name: &str,
    subresource: Option<&str>,
    object: Option<Value>,
    old_object: Option<&Value>,
    dry_run: bool,
) -> Result<Option<Value>, ApiError> {
    if !state.admission.handles(operation) {
        return Ok(object);
    }
    let mut request = AdmissionRequest {
        operation,
        resource: &target.resource,
        subresource,
        namespace: target.namespace.as_deref(),
        name,
        object,
        old_object,
        user: &target.user,
        dry_run,
    };
    state.admission.admit(&mut request).await?;
    Ok(request.object)
}

/// Characters of generated name suffixes (upstream's: no vowels, no lookalikes).
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// `prefix` and five random characters, as upstream's `generateName`.
pub(crate) fn generated_name(prefix: &str) -> String {
    let random = uuid::Uuid::new_v4();
    let suffix: String =
        random.as_bytes()[..5].iter().map(|b| NAME_ALPHABET[*b as usize % NAME_ALPHABET.len()] as char).collect();
    format!("{prefix}{suffix}")
}

/// Checks kind, apiVersion, names, labels, the type and the kind's own rules.
fn validate(target: &Target, object: &mut Value, name: &str, old: Option<&Value>) -> Result<(), ApiError> {
    let resource = &target.resource;
    // Null maps decode as absent, as upstream's typed decoding does.
    let metadata = metadata_mut(object);
    for field in ["labels", "annotations"] {
        if metadata.get(field).is_some_and(Value::is_null) {
            metadata.remove(field);
        }
    }
    let api_version = resource.api_version();
    match object.get("apiVersion").and_then(Value::as_str) {
        None | Some("") => object["apiVersion"] = api_version.clone().into(),
        Some(v) if v == api_version => {}
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version ({api_version})"
            )));
        }
    }
    match object.get("kind").and_then(Value::as_str) {
        None | Some("") => object["kind"] = resource.kind.clone().into(),
        Some(k) if k == resource.kind => {}
        Some(k) => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                resource.kind
            )));
        }
    }
    // CRDs and custom resources: defaulted, pruned and validated first, so a
    // missing field is a 422 with causes rather than a decoding error.
    let custom_errors = crate::api::crd::prepare(resource, object, old)?;
    if let Some(check) = resource.decode_check.filter(|_| custom_errors.is_empty()) {
        // managedFields are the server's own rendering by now (from the
        // field sets it parsed), so only what the client sent is checked.
        let managed = metadata_mut(object).remove("managedFields");
        let checked = check(object);
        if let Some(managed) = managed {
            metadata_mut(object).insert("managedFields".into(), managed);
        }
        checked.map_err(|e| ApiError::bad_request(format!("{} in body is invalid: {e}", resource.kind)))?;
    }
    if resource.group.is_empty() && resource.plural == "secrets" {
        merge_string_data(object);
    }
    let mut errors = meta::validate_name(&resource.group, &resource.plural, "metadata.name", name);
    errors.extend(meta::validate_labels(object));
    errors.extend(custom_errors);
    if let Some(validate) = resource.validate {
        errors.extend(validate(object));
    }
    if !errors.is_empty() {
        return Err(ApiError::invalid(&target.error_target(name), errors));
    }
    Ok(())
}

/// A Secret's `stringData` is write-only: each entry is stored in `data`,
/// base64-encoded, over an entry of the same key there, as upstream's
/// conversion does.
fn merge_string_data(secret: &mut Value) {
    use base64::Engine as _;
    let Some(Value::Object(strings)) = secret.as_object_mut().and_then(|s| s.remove("stringData")) else { return };
    if !secret["data"].is_object() {
        secret["data"] = Value::Object(Default::default());
    }
    let data = secret["data"].as_object_mut().expect("made an object");
    for (key, value) in strings {
        let text = value.as_str().unwrap_or_default();
        data.insert(key, base64::engine::general_purpose::STANDARD.encode(text).into());
    }
}

/// Fills server-set fields of a new object.
fn prepare_create(target: &Target, object: &mut Value, name: &str) {
    let resource = target.resource.clone();
    let metadata = metadata_mut(object);
    metadata.insert("name".into(), name.into());
    if resource.namespaced {
        metadata.insert("namespace".into(), target.namespace.clone().unwrap_or_default().into());
    } else {
        metadata.remove("namespace");
    }
    let mut uid = uuid::Uuid::encode_buffer();
    let uid = uuid::Uuid::new_v4().hyphenated().encode_lower(&mut uid);
    metadata.insert("uid".into(), Value::String(uid.to_owned()));
    metadata.insert("creationTimestamp".into(), meta::now_rfc3339().into());
    metadata.insert("generation".into(), 1.into());
    for field in ["resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"] {
        metadata.remove(field);
    }
    if resource.group.is_empty() && resource.plural == "namespaces" {
        object["status"] = json!({"phase": "Active"});
        if object.pointer("/spec/finalizers").is_none() {
            object["spec"] = json!({"finalizers": ["kubernetes"]});
        }
    }
    if crate::api::certificates::is_csr(&resource.group, &resource.plural) {
        let user = &target.user;
        crate::api::certificates::stamp_requestor(object, &user.name, &user.uid, &user.groups, &user.extra);
    }
    if resource.group.is_empty() && resource.plural == "pods" && object.pointer("/status/phase").is_none() {
        object["status"] = json!({"phase": "Pending"});
    }
}

/// A created object, with what the store holds for it (none on a dry run).
pub(crate) struct Created {
    /// The object as served; `None` where the caller answers with its JSON
    /// alone ([`Answer::Json`]) and the stored bytes serve it.
    object: Option<Value>,
    stored: Option<KeyValue>,
    /// Where the resource version goes in the stored bytes ([`encode_with_splice`]).
    splice: Option<usize>,
}

impl Created {
    /// The object as JSON: where the kind serves what it stores, the stored
    /// bytes with the resource version spliced in; otherwise the bytes the
    /// object serializes to.
    pub(crate) fn json(&self, resource: &ResourceInfo) -> Vec<u8> {
        match (&self.stored, self.splice, &self.object) {
            (Some(kv), Some(at), _) if raw::is_servable(resource) => raw::spliced(kv, at),
            (_, _, Some(object)) => serde_json::to_vec(object).expect("JSON values serialize"),
            _ => unreachable!("the object is kept unless the stored bytes serve it"),
        }
    }

    /// The object as served.
    pub(crate) fn into_object(self, resource: &ResourceInfo) -> Value {
        match self.object {
            Some(object) => object,
            None => serde_json::from_slice(&self.json(resource)).expect("the server's own JSON decodes"),
        }
    }
}

/// What the caller of a create makes of the created object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Answers with its JSON alone ([`Created::json`]): where the stored
    /// bytes serve it, the object is dropped before the store's write, so
    /// that its memory is freed on the thread that allocated it rather than
    /// on whichever thread the task resumes on after the commit.
    Json,
    /// Needs the object itself ([`Created::into_object`]), e.g. for a Table.
    Object,
}

/// Who records a create in `metadata.managedFields`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ManagedFields {
    /// The create itself, as an `Update` entry of its field manager.
    Track,
    /// Nobody: a server-side apply that creates has recorded itself already.
    Recorded,
}

/// POST to a collection.
pub(crate) async fn create(
    state: &State,
    target: &Target,
    query: &Query,
    headers: &HeaderMap,
    object: Value,
    answer: Answer,
) -> Result<Created, ApiError> {
    create_stored(state, target, query, headers, object, ManagedFields::Track, answer).await
}

/// Creates the object a server-side apply made of a missing one.
async fn create_applied(
    state: &State,
    target: &Target,
    query: &Query,
    headers: &HeaderMap,
    object: Value,
) -> Result<Value, ApiError> {
    let created = create_stored(state, target, query, headers, object, ManagedFields::Recorded, Answer::Object).await?;
    Ok(created.into_object(&target.resource))
}

/// Creates `object`, returning what the store holds for it.
async fn create_stored(
    state: &State,
    target: &Target,
    query: &Query,
    headers: &HeaderMap,
    mut object: Value,
    managed_fields: ManagedFields,
    answer: Answer,
) -> Result<Created, ApiError> {
    if let (Some(url_ns), Some(body_ns)) = (&target.namespace, meta_str(&object, "namespace"))
        && !body_ns.is_empty()
        && body_ns != url_ns
    {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    let name = match (meta_str(&object, "name").filter(|n| !n.is_empty()), meta_str(&object, "generateName")) {
        (Some(name), _) => name.to_owned(),
        (None, Some(prefix)) if !prefix.is_empty() => generated_name(prefix),
        _ => {
            return Err(ApiError::invalid(
                &target.error_target(""),
                vec![FieldError::required("metadata.name").with_message("name or generateName is required")],
            ));
        }
    };
    prepare_create(target, &mut object, &name);
    if managed_fields == ManagedFields::Track {
        patching::track_update(target, None, &mut object, query, headers, None);
    }
    let mut object = admit(state, target, Operation::Create, &name, None, Some(object), None, query.dry_run)
        .await?
        .expect("admission keeps the object of a create");
    validate(target, &mut object, &name, None)?;
    let claims = if is_service(target) {
        let ranges = &state.options.service_ranges;
        let error_target = target.error_target(&name);
        Some(services::allocate(ranges, target.store(state), &error_target, &mut object, None, query.dry_run).await?)
    } else {
        None
    };
    if query.dry_run {
        return Ok(Created { object: Some(object), stored: None, splice: None });
    }
    let (bytes, splice) = encode_with_splice(&target.resource, &object);
    // Where the stored bytes are the answer, the object is dropped here, on
    // the thread that built it (see `Answer::Json`).
    let served_from_store = answer == Answer::Json && splice.is_some() && raw::is_servable(&target.resource);
    let mut object = (!served_from_store).then_some(object);
    let created = target.store(state).create(&target.key(&name), bytes, target.resource.ttl).await;
    if let Some(claims) = claims {
        claims.settle(target.store(state), created.is_ok()).await;
    }
    let kv = created.map_err(|e| store_error(e, &target.error_target(&name)))?;
    if let Some(object) = &mut object {
        metadata_mut(object).insert("resourceVersion".into(), kv.mod_revision.to_string().into());
    }
    Ok(Created { object, stored: Some(kv), splice })
}

/// The object without `metadata` and `status`: what `generation` tracks.
fn spec_of(object: &Value) -> Map<String, Value> {
    let mut map = object.as_object().cloned().unwrap_or_default();
    for field in ["metadata", "status", "apiVersion", "kind"] {
        map.remove(field);
    }
    map
}

/// Merges an update into the stored object: immutable metadata is kept,
/// `status` changes only through the status subresource and everything else
/// only through the main resource; `generation` follows spec changes.
fn merge_update(target: &Target, old: &Value, mut new: Value, subresource: Option<&str>) -> Value {
    let resource = &target.resource;
    // Custom resources are compared as upstream decodes them: pruned and defaulted.
    crate::api::crd::normalize(resource, &mut new);
    if crate::api::certificates::is_csr(&resource.group, &resource.plural) {
        new = crate::api::certificates::prepare_update(old, &new, subresource);
        if subresource.is_some() {
            return new;
        }
    }
    if subresource == Some("status") {
        let mut merged = old.clone();
        merged["status"] = new.get("status").cloned().unwrap_or(Value::Null);
        if merged["status"].is_null() {
            merged.as_object_mut().expect("objects are maps").remove("status");
        }
        return merged;
    }
    if resource.has_subresource("status") {
        match old.get("status") {
            Some(status) => new["status"] = status.clone(),
            None => {
                new.as_object_mut().expect("objects are maps").remove("status");
            }
        }
    }
    let old_meta = old.get("metadata").cloned().unwrap_or_default();
    let generation = old_meta.get("generation").and_then(Value::as_i64).unwrap_or(1);
    let spec_changed = spec_of(old) != spec_of(&new)
        || (crate::api::crd::status_is_spec(resource) && old.get("status") != new.get("status"));
    let metadata = metadata_mut(&mut new);
    for field in ["uid", "creationTimestamp", "namespace", "name", "deletionTimestamp", "deletionGracePeriodSeconds"] {
        match old_meta.get(field) {
            Some(value) => metadata.insert(field.into(), value.clone()),
            None => metadata.remove(field),
        };
    }
    metadata.insert("generation".into(), (if spec_changed { generation + 1 } else { generation }).into());
    new
}

/// Whether `target` is core/v1 namespaces.
fn is_namespace(target: &Target) -> bool {
    target.resource.group.is_empty() && target.resource.plural == "namespaces"
}

/// Whether `target` is core/v1 services, whose writes allocate ClusterIPs
/// and NodePorts.
fn is_service(target: &Target) -> bool {
    target.resource.group.is_empty() && target.resource.plural == "services"
}

/// Writes `new` over the stored `old` (at `old_revision`), finishing the
/// deletion of an object whose last finalizer went away.
async fn store_update(
    state: &State,
    target: &Target,
    name: &str,
    subresource: Option<&str>,
    (old, new): (&Value, Value),
    old_revision: Revision,
    dry_run: bool,
) -> Result<Value, ApiError> {
    let error_target = target.error_target(name);
    let service = is_service(target) && subresource.is_none();
    let mut new = new;
    if service {
        services::keep_allocated(old, &mut new);
    }
    let mut new = admit(state, target, Operation::Update, name, subresource, Some(new), Some(old), dry_run)
        .await?
        .expect("admission keeps the object of an update");
    validate(target, &mut new, name, Some(old))?;
    if crate::api::certificates::is_csr(&target.resource.group, &target.resource.plural) {
        let errors = crate::api::certificates::validate_update(old, &new);
        if !errors.is_empty() {
            return Err(ApiError::invalid(&error_target, errors));
        }
    }
    let finalized = meta::meta_value(&new, "deletionTimestamp").is_some()
        && meta::meta_value(&new, "finalizers")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
        // A namespace also waits for its `spec.finalizers` (upstream's
        // `ShouldDeleteNamespaceDuringUpdate`): only `finalize` clears them.
        && !(is_namespace(target)
            && new
                .pointer("/spec/finalizers")
                .and_then(Value::as_array)
                .is_some_and(|f| !f.is_empty()));
    let key = target.key(name);
    // An update that changes nothing is not written, unless the store
    // would now store the object differently (a rotated encryption key):
    // then writing it is how it moves to the new key.
    if !finalized
        && crate::api::apply::is_noop(old, &new)
        && !target.store(state).stale(&key, old_revision).await.map_err(|e| store_error(e, &error_target))?
    {
        return Ok(old.clone());
    }
    let store = target.store(state);
    if finalized {
        if !dry_run {
            store.delete(&key, Some(old_revision)).await.map_err(|e| store_error(e, &error_target))?;
            if is_service(target) {
                services::release_all(store, old).await;
            }
        }
        return Ok(new);
    }
    let claims = if service {
        let ranges = &state.options.service_ranges;
        Some(services::allocate(ranges, store, &error_target, &mut new, Some(old), dry_run).await?)
    } else {
        None
    };
    if dry_run {
        return Ok(new);
    }
    let updated = store.update(&key, encode(&target.resource, &new), old_revision, target.resource.ttl).await;
    if let Some(claims) = claims {
        claims.settle(store, updated.is_ok()).await;
    }
    decode_served(&target.resource, &updated.map_err(|e| store_error(e, &error_target))?)
}

/// PUT of an object or its status.
pub(crate) async fn update(
    state: &State,
    target: &Target,
    name: &str,
    subresource: Option<&str>,
    query: &Query,
    headers: &HeaderMap,
    new: Value,
) -> Result<Value, ApiError> {
    if let Some(body_name) = meta_str(&new, "name").filter(|n| !n.is_empty())
        && body_name != name
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    let (old, revision) = load(state, target, name).await?;
    if let Some(rv) = meta_str(&new, "resourceVersion").filter(|rv| !rv.is_empty())
        && parse_revision(rv)? != revision
    {
        return Err(ApiError::conflict(&target.error_target(name)));
    }
    let mut merged = merge_update(target, &old, new, subresource);
    patching::track_update(target, Some(&old), &mut merged, query, headers, subresource);
    store_update(state, target, name, subresource, (&old, merged), revision, query.dry_run).await
}

/// PATCH of an object or its status: JSON patch, JSON merge patch,
/// strategic merge patch or server-side apply (which creates a missing
/// object: then the flag is true).
pub(crate) async fn patch(
    state: &State,
    target: &Target,
    name: &str,
    subresource: Option<&str>,
    query: &Query,
    headers: &HeaderMap,
    bytes: &[u8],
) -> Result<(Value, Written), ApiError> {
    let media = body::content_type(headers);
    let patch = patching::decode(&media, bytes, target, query)?;
    let error_target = target.error_target(name);
    let pinned = patch.pinned().map(parse_revision).transpose()?;
    // Retried on conflicts with concurrent writers, like upstream, unless the
    // patch itself pins a resource version.
    for _ in 0..16 {
        let (old, revision) = match load(state, target, name).await {
            Err(e) if e.code == 404 && patch.is_apply() && subresource.is_none() => {
                let mut object = patch.apply_to(None, target, query, subresource)?;
                match meta_str(&object, "name").filter(|n| !n.is_empty()) {
                    Some(body_name) if body_name != name => {
                        return Err(ApiError::bad_request(format!(
                            "the name of the object ({body_name}) does not match the name on the URL ({name})"
                        )));
                    }
                    _ => {
                        metadata_mut(&mut object).insert("name".into(), name.into());
                    }
                }
                match create_applied(state, target, query, headers, object).await {
                    Err(e) if e.reason == "AlreadyExists" => continue,
                    other => return other.map(|object| (object, Written::Created)),
                }
            }
            other => other?,
        };
        let new = patch.apply_to(Some(&old), target, query, subresource)?;
        if pinned.is_some_and(|rv| rv != revision) {
            return Err(ApiError::conflict(&error_target));
        }
        let applied = patch.is_apply().then(|| meta::meta_value(&new, "managedFields").cloned());
        let mut merged = merge_update(target, &old, new, subresource);
        match applied {
            Some(managed) => patching::keep_managed_fields(&mut merged, managed),
            None => patching::track_update(target, Some(&old), &mut merged, query, headers, subresource),
        }
        match store_update(state, target, name, subresource, (&old, merged), revision, query.dry_run).await {
            Err(e) if e.reason == "Conflict" && pinned.is_none() => continue,
            other => return other.map(|object| (object, Written::Changed)),
        }
    }
    Err(ApiError::conflict(&error_target))
}

/// What a DELETE body may say.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeleteOptions {
    grace_period_seconds: Option<i64>,
    propagation_policy: Option<String>,
    preconditions: Option<Preconditions>,
    #[serde(default)]
    dry_run: Vec<String>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Preconditions {
    uid: Option<String>,
    resource_version: Option<String>,
}

/// DELETE of one object. Objects with finalizers (and pods bound to a node,
/// given a grace period) get a deletion timestamp and stay until finalized.
pub(crate) async fn delete(
    state: &State,
    target: &Target,
    name: &str,
    query: &Query,
    bytes: &[u8],
) -> Result<Value, ApiError> {
    let options: DeleteOptions = if bytes.iter().all(u8::is_ascii_whitespace) {
        DeleteOptions::default()
    } else if bytes.starts_with(super::protobuf::MAGIC) {
        serde_json::from_value(super::protobuf::decode(bytes)?)
            .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?
    } else {
        serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?
    };
    let dry_run = query.dry_run || options.dry_run.iter().any(|d| d == "All");
    // Like upstream's GuaranteedUpdate: a write that lost a race with another
    // (a status update, say) is redone on the newer object; preconditions are
    // checked again on each.
    for _ in 0..DELETE_ATTEMPTS {
        if let Some(done) = delete_once(state, target, name, &options, dry_run).await? {
            return Ok(done);
        }
    }
    Err(ApiError::conflict(&target.error_target(name)))
}

/// How often [`delete`] redoes a write that lost a race.
const DELETE_ATTEMPTS: usize = 5;

/// One attempt at [`delete`]: `Ok(None)` if the object changed between its
/// read and the write.
async fn delete_once(
    state: &State,
    target: &Target,
    name: &str,
    options: &DeleteOptions,
    dry_run: bool,
) -> Result<Option<Value>, ApiError> {
    let error_target = target.error_target(name);
    let key = target.key(name);
    let kv = target.store(state).get(&key).await.map_err(|e| store_error(e, &error_target))?;
    let kv = kv.ok_or_else(|| ApiError::not_found(&error_target))?;
    let mut object = decode_served(&target.resource, &kv)?;
    if let Some(pre) = &options.preconditions {
        if let Some(uid) = &pre.uid
            && meta_str(&object, "uid") != Some(uid.as_str())
        {
            return Err(ApiError::conflict_because(
                &error_target,
                format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(&object, "uid").unwrap_or("")
                ),
            ));
        }
        if let Some(rv) = &pre.resource_version
            && parse_revision(rv)? != kv.mod_revision
        {
            return Err(ApiError::conflict_because(
                &error_target,
                format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    kv.mod_revision
                ),
            ));
        }
    }
    admit(state, target, Operation::Delete, name, None, None, Some(&object), dry_run).await?;
    let mut finalizers: Vec<Value> =
        meta::meta_value(&object, "finalizers").and_then(Value::as_array).cloned().unwrap_or_default();
    match options.propagation_policy.as_deref() {
        Some("Foreground") => finalizers.push("foregroundDeletion".into()),
        Some("Orphan") => finalizers.push("orphan".into()),
        _ => {}
    }
    if crate::api::crd::is_definition(&target.resource)
        && !finalizers.contains(&crate::api::crd::CLEANUP_FINALIZER.into())
    {
        finalizers.push(crate::api::crd::CLEANUP_FINALIZER.into());
    }
    finalizers.dedup();
    let is_namespace = is_namespace(target);
    let graceful_pod = target.resource.group.is_empty()
        && target.resource.plural == "pods"
        && object.pointer("/spec/nodeName").and_then(Value::as_str).is_some_and(|n| !n.is_empty())
        && options
            .grace_period_seconds
            .or_else(|| object.pointer("/spec/terminationGracePeriodSeconds").and_then(Value::as_i64))
            .unwrap_or(30)
            > 0;
    let namespace_pending =
        is_namespace && object.pointer("/spec/finalizers").and_then(Value::as_array).is_some_and(|f| !f.is_empty());
    if finalizers.is_empty() && !graceful_pod && !namespace_pending {
        if !dry_run {
            let prev = match target.store(state).delete(&key, Some(kv.mod_revision)).await {
                Err(orchestra_store::Error::Conflict { .. }) => return Ok(None),
                other => other.map_err(|e| store_error(e, &error_target))?,
            };
            if is_namespace {
                state.namespaces.observe_delete(&prev);
            }
            if is_service(target) {
                services::release_all(target.store(state), &object).await;
            }
        }
        return Ok(Some(object));
    }
    if meta::meta_value(&object, "deletionTimestamp").is_some() {
        return Ok(Some(object));
    }
    let grace = if graceful_pod {
        options
            .grace_period_seconds
            .or_else(|| object.pointer("/spec/terminationGracePeriodSeconds").and_then(Value::as_i64))
            .unwrap_or(30)
    } else {
        0
    };
    let metadata = metadata_mut(&mut object);
    metadata.insert("deletionTimestamp".into(), meta::now_rfc3339().into());
    metadata.insert("deletionGracePeriodSeconds".into(), grace.into());
    if !finalizers.is_empty() {
        metadata.insert("finalizers".into(), finalizers.into());
    }
    if is_namespace {
        object["status"] = json!({"phase": "Terminating"});
    }
    if dry_run {
        return Ok(Some(object));
    }
    let kv = match target
        .store(state)
        .update(&key, encode(&target.resource, &object), kv.mod_revision, target.resource.ttl)
        .await
    {
        Err(orchestra_store::Error::Conflict { .. }) => return Ok(None),
        other => other.map_err(|e| store_error(e, &error_target))?,
    };
    if is_namespace {
        // Creates in it are refused from now on, not once the watch tells.
        state.namespaces.observe(&kv);
    }
    decode_served(&target.resource, &kv).map(Some)
}

/// DELETE of a collection: every object matching the selectors.
pub(crate) async fn delete_collection(
    state: &State,
    target: &Target,
    query: &Query,
    bytes: &[u8],
) -> Result<Value, ApiError> {
    let mut list_query = query.clone();
    list_query.limit = None;
    list_query.continue_token = None;
    let listed = super::list::list_items(state, target, &list_query).await?;
    let mut deleted = Vec::new();
    for item in listed.items {
        let name = meta_str(&item, "name").unwrap_or_default().to_owned();
        let namespaced = Target {
            resource: target.resource.clone(),
            namespace: meta_str(&item, "namespace").map(str::to_owned),
            user: target.user.clone(),
            fenced: target.fenced.clone(),
        };
        match delete(state, &namespaced, &name, query, bytes).await {
            Ok(object) => deleted.push(object),
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(json!({
        "apiVersion": target.resource.api_version(),
        "kind": target.resource.list_kind,
        "metadata": {"resourceVersion": listed.revision.to_string()},
        "items": deleted,
    }))
}

/// What a successful write did, which its answer's status tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Written {
    /// Changed or deleted an object, or made nothing new: 200 OK.
    Changed,
    /// Made a new object: 201 Created.
    Created,
}

impl Written {
    /// The HTTP status of the answer.
    pub(crate) fn status(self) -> u16 {
        match self {
            Written::Changed => 200,
            Written::Created => 201,
        }
    }
}

/// The response of a write: the object with the status of what it did, or
/// the error.
pub(crate) fn respond(result: Result<Value, ApiError>, written: Written) -> Response {
    match result {
        Ok(object) => body::json(written.status(), &object),
        Err(error) => body::error(&error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secrets_string_data_is_stored_in_data() {
        // (written, stored)
        let cases = [
            (json!({"stringData": {"password": "hunter2"}}), json!({"data": {"password": "aHVudGVyMg=="}})),
            (
                json!({"data": {"a": "YQ==", "b": "Yg=="}, "stringData": {"b": "B", "c": ""}}),
                json!({"data": {"a": "YQ==", "b": "Qg==", "c": ""}}),
            ),
            (json!({"data": {"a": "YQ=="}}), json!({"data": {"a": "YQ=="}})),
            (json!({"stringData": {}}), json!({"data": {}})),
        ];
        for (i, (mut written, stored)) in cases.into_iter().enumerate() {
            merge_string_data(&mut written);
            assert_eq!(written, stored, "case {i}");
        }
    }

    /// A create that dropped its object before the write ([`Answer::Json`])
    /// answers the same JSON, and the same object, as one that kept it.
    #[test]
    fn a_created_object_dropped_early_is_served_from_its_stored_bytes() {
        let resource = ResourceInfo::new("", "v1", "Thing", "things", true);
        let object =
            json!({"apiVersion": "v1", "kind": "Thing", "metadata": {"name": "x", "uid": "u"}, "data": {"k": "v"}});
        let (bytes, splice) = encode_with_splice(&resource, &object);
        let kv = KeyValue {
            key: "k".into(),
            value: bytes,
            create_revision: 7,
            mod_revision: 7,
            version: 1,
            expires_at_ms: None,
        };
        let mut kept = object.clone();
        metadata_mut(&mut kept).insert("resourceVersion".into(), "7".into());
        let with = Created { object: Some(kept.clone()), stored: Some(kv.clone()), splice };
        let without = Created { object: None, stored: Some(kv), splice };
        assert_eq!(without.json(&resource), with.json(&resource));
        assert_eq!(without.json(&resource), serde_json::to_vec(&kept).unwrap());
        assert_eq!(without.into_object(&resource), kept);
        assert_eq!(with.into_object(&resource), kept);
    }
}
