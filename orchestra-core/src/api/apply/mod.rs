//! Server-side apply and `metadata.managedFields`.
//!
//! Every write records who set which fields: an `Apply` entry per applier
//! (the fields of its last applied configuration) and an `Update` entry per
//! other writer (the fields it changed). An apply merges its configuration
//! into the live object, fails with a 409 naming the other managers of the
//! fields it would change (unless forced, which takes them over), and
//! removes the fields its manager applied before but left out this time and
//! nobody else owns. Pure functions over JSON values and the kind's schema.

mod fieldset;

use serde_json::{Map, Value, json};

pub use fieldset::{FieldSet, Path, PathElement, item_key, path_string, remove_at, value_at};

use super::patch::{FieldMeta, ListType, Shape};
use super::{ApiError, meta};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{StatusCause, StatusDetails};

/// `operation` of an apply entry.
pub const APPLY: &str = "Apply";
/// `operation` of an update entry.
pub const UPDATE: &str = "Update";

/// Metadata fields the server owns: never part of a field set.
const SERVER_METADATA: [&str; 10] = [
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// What a write is and who makes it.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The field manager, e.g. `kubectl`.
    pub manager: &'a str,
    /// The object's `apiVersion`, e.g. `apps/v1`.
    pub api_version: &'a str,
    /// The object's kind, e.g. `Deployment`.
    pub kind: &'a str,
    /// The subresource written, e.g. `status`.
    pub subresource: Option<&'a str>,
    /// True if the kind has a status subresource: then writes to the main
    /// resource leave `status` alone, and writes to `status` only it.
    pub has_status: bool,
    /// The schema shape of the object.
    pub shape: Shape<'a>,
}

/// One `metadata.managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct ManagedEntry {
    /// Who manages the fields.
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// The API version the fields were set through.
    pub api_version: String,
    /// When the entry last changed (RFC 3339).
    pub time: Option<String>,
    /// The subresource written, if any.
    pub subresource: Option<String>,
    /// The fields managed.
    pub fields: FieldSet,
}

impl ManagedEntry {
    fn same_manager(&self, ctx: &Context<'_>, operation: &str) -> bool {
        self.manager == ctx.manager
            && self.operation == operation
            && self.subresource.as_deref() == ctx.subresource
            && (operation == APPLY || self.api_version == ctx.api_version)
    }

    /// The manager as upstream's conflict messages print it:
    /// `"kubectl"` for appliers, `"kubectl-edit" using apps/v1` for updaters.
    pub fn describe(&self) -> String {
        let mut text = Value::from(self.manager.as_str()).to_string();
        if let Some(sub) = &self.subresource {
            text = format!("{text} with subresource {}", Value::from(sub.as_str()));
        }
        if self.operation == UPDATE {
            text = format!("{text} using {}", self.api_version);
        }
        text
    }

    fn to_json(&self) -> Value {
        entry_json(
            &self.manager,
            &self.operation,
            &self.api_version,
            self.time.as_deref(),
            self.subresource.as_deref(),
            self.fields.to_fields_v1(),
        )
    }

    fn from_json(value: &Value) -> Option<ManagedEntry> {
        let text = |key: &str| value.get(key).and_then(Value::as_str).map(str::to_owned);
        Some(ManagedEntry {
            manager: text("manager").unwrap_or_default(),
            operation: text("operation")?,
            api_version: text("apiVersion").unwrap_or_default(),
            time: text("time"),
            subresource: text("subresource").filter(|s| !s.is_empty()),
            fields: FieldSet::from_fields_v1(value.get("fieldsV1").unwrap_or(&json!({}))).ok()?,
        })
    }
}

/// One `managedFields` entry as JSON.
fn entry_json(
    manager: &str,
    operation: &str,
    api_version: &str,
    time: Option<&str>,
    subresource: Option<&str>,
    fields_v1: Value,
) -> Value {
    let mut entry = Map::new();
    entry.insert("manager".into(), manager.into());
    entry.insert("operation".into(), operation.into());
    entry.insert("apiVersion".into(), api_version.into());
    if let Some(time) = time {
        entry.insert("time".into(), time.into());
    }
    entry.insert("fieldsType".into(), "FieldsV1".into());
    entry.insert("fieldsV1".into(), fields_v1);
    if let Some(sub) = subresource {
        entry.insert("subresource".into(), sub.into());
    }
    Value::Object(entry)
}

/// The `managedFields` entries of an object (unreadable entries are dropped).
pub fn managed_fields(object: &Value) -> Vec<ManagedEntry> {
    meta::meta_value(object, "managedFields")
        .and_then(Value::as_array)
        .map(|entries| entries.iter().filter_map(ManagedEntry::from_json).collect())
        .unwrap_or_default()
}

/// Writes `entries` as the object's `managedFields`, in upstream's order
/// (operation, time, manager, apiVersion, subresource), without empty ones.
pub fn set_managed_fields(object: &mut Value, mut entries: Vec<ManagedEntry>) {
    entries.retain(|e| !e.fields.is_empty());
    entries.sort_by(|p, q| {
        (&p.operation, &p.time, &p.manager, &p.api_version, &p.subresource).cmp(&(
            &q.operation,
            &q.time,
            &q.manager,
            &q.api_version,
            &q.subresource,
        ))
    });
    let metadata = meta::metadata_mut(object);
    if entries.is_empty() {
        metadata.remove("managedFields");
    } else {
        metadata.insert("managedFields".into(), Value::Array(entries.iter().map(ManagedEntry::to_json).collect()));
    }
}

/// The part of an object field sets cover: no `apiVersion`, `kind`, server
/// metadata, nor what the written (sub)resource does not own.
fn owned_part(object: &Value, ctx: &Context<'_>) -> Value {
    let mut part = object.clone();
    let Some(map) = part.as_object_mut() else {
        return part;
    };
    if ctx.subresource == Some("status") {
        map.retain(|k, _| k == "status");
        return part;
    }
    map.remove("apiVersion");
    map.remove("kind");
    if ctx.has_status {
        map.remove("status");
    }
    if let Some(Value::Object(metadata)) = map.get_mut("metadata") {
        for field in SERVER_METADATA {
            metadata.remove(field);
        }
        if metadata.is_empty() {
            map.remove("metadata");
        }
    }
    part
}

/// The fields of `object` a write through `ctx` can own.
pub fn fields_of(object: &Value, ctx: &Context<'_>) -> FieldSet {
    FieldSet::of_value(&owned_part(object, ctx), ctx.shape)
}

/// The paths of `set` whose value differs between `old` and `new`: leaves
/// whose value changed, and list items that are new.
fn changed(old: Option<&Value>, new: &Value, set: &FieldSet) -> FieldSet {
    let mut out = FieldSet::new();
    for path in set.paths() {
        let before = old.and_then(|old| value_at(old, path));
        let is_item = matches!(path.last(), Some(PathElement::Key(_) | PathElement::Value(_)));
        let differs = if is_item { before.is_none() } else { before != value_at(new, path) };
        if differs {
            out.insert(path.clone());
        }
    }
    out
}

/// The non-empty maps (`additionalProperties`, not structs) of `new` that
/// `old` lacks.
fn added_maps(
    old: Option<&Value>,
    new: &Value,
    shape: Shape<'_>,
    meta: &FieldMeta,
    path: &mut Path,
    out: &mut FieldSet,
) {
    match new {
        Value::Object(map) if !meta.atomic_map && !map.is_empty() => {
            if shape.is_map() && !path.is_empty() && old.and_then(|o| value_at(o, path)).is_none() {
                out.insert(path.clone());
            }
            for (key, child) in map {
                let (child_shape, child_meta) = shape.field(key);
                path.push(PathElement::Field(key.clone()));
                added_maps(old, child, child_shape, &child_meta, path, out);
                path.pop();
            }
        }
        Value::Array(items) => {
            if let ListType::Map(keys) = &meta.list {
                for item in items {
                    path.push(item_key(item, keys));
                    added_maps(old, item, shape.items(), &FieldMeta::default(), path, out);
                    path.pop();
                }
            }
        }
        _ => {}
    }
}

/// Records a non-apply write (create, update, patch) of `new` over `old` by
/// `ctx.manager`: the manager's `Update` entry gains the fields it changed,
/// which other managers lose. Managed fields the writer sent explicitly
/// (different from the stored ones) replace the stored ones first.
pub fn record_update(old: Option<&Value>, new: &mut Value, ctx: &Context<'_>) {
    if old.is_none()
        && meta::meta_value(new, "managedFields").is_none()
        && let Some(fields) = created_fields_v1(new, ctx)
    {
        let metadata = meta::metadata_mut(new);
        if fields.as_object().is_some_and(Map::is_empty) {
            metadata.remove("managedFields");
        } else {
            let time = meta::now_rfc3339();
            let entry = entry_json(ctx.manager, UPDATE, ctx.api_version, Some(&time), ctx.subresource, fields);
            metadata.insert("managedFields".into(), Value::Array(vec![entry]));
        }
        return;
    }
    record_with_field_sets(old, new, ctx);
}

/// [`record_update`] in general: with the field sets of both objects.
fn record_with_field_sets(old: Option<&Value>, new: &mut Value, ctx: &Context<'_>) {
    let sent = meta::meta_value(new, "managedFields").cloned();
    let stored = old.and_then(|o| meta::meta_value(o, "managedFields")).cloned();
    let mut entries = match (&sent, old) {
        (Some(sent), _) if Some(sent) != stored.as_ref() => managed_fields(new),
        (_, Some(old)) => managed_fields(old),
        (_, None) => Vec::new(),
    };
    let new_part = owned_part(new, ctx);
    let new_set = FieldSet::of_value(&new_part, ctx.shape);
    let old_set = old.map(|o| fields_of(o, ctx)).unwrap_or_default();
    let mut modified = match old {
        // Everything a create sets is new.
        None => new_set.clone(),
        Some(_) => changed(old, new, &new_set),
    };
    if !modified.is_empty() {
        // Like upstream, an updater that adds a map owns the map itself too
        // (`f:labels: {".": {}, ...}`).
        let mut maps = FieldSet::new();
        added_maps(old, &new_part, ctx.shape, &FieldMeta::default(), &mut Vec::new(), &mut maps);
        modified = modified.union(&maps);
    }
    let removed = old_set.difference(&new_set);
    let taken = modified.union(&removed);
    for entry in &mut entries {
        entry.fields = entry.fields.difference(&taken);
        entry.fields.retain(|path| value_at(new, path).is_some());
    }
    if !modified.is_empty() {
        let now = meta::now_rfc3339();
        match entries.iter_mut().find(|e| e.same_manager(ctx, UPDATE)) {
            Some(entry) => {
                entry.fields = entry.fields.union(&modified);
                entry.time = Some(now);
            }
            None => entries.push(ManagedEntry {
                manager: ctx.manager.to_owned(),
                operation: UPDATE.into(),
                api_version: ctx.api_version.to_owned(),
                time: Some(now),
                subresource: ctx.subresource.map(str::to_owned),
                fields: modified,
            }),
        }
    }
    cap_update_managers(&mut entries);
    set_managed_fields(new, entries);
}

/// The `fieldsV1` a create of `object` through `ctx` records, rendered
/// straight from the object: what [`record_update`] computes with field
/// sets when there is no old object (every owned field, plus each added
/// map itself), without building them. `None` when a list holds two items
/// with the same key, which only the field-set path merges.
fn created_fields_v1(object: &Value, ctx: &Context<'_>) -> Option<Value> {
    let Value::Object(top) = object else {
        return Some(Value::Object(Map::new()));
    };
    let mut root = Map::new();
    for (key, child) in top {
        let owned = if ctx.subresource == Some("status") {
            key == "status"
        } else {
            !matches!(key.as_str(), "apiVersion" | "kind") && (!ctx.has_status || key != "status")
        };
        if !owned {
            continue;
        }
        let (shape, field_meta) = ctx.shape.field(key);
        let rendered = if key == "metadata" {
            let Value::Object(metadata) = child else {
                root.insert(field_node_key(key), Value::Object(Map::new()));
                continue;
            };
            // Only what the writer owns: no server-set metadata.
            let mut node = rendered_members(metadata, shape, |field| !SERVER_METADATA.contains(&field))?;
            if node.is_empty() {
                continue;
            }
            if shape.is_map() {
                node.insert(".".into(), Value::Object(Map::new()));
            }
            Value::Object(node)
        } else {
            rendered_fields(child, shape, &field_meta)?
        };
        root.insert(field_node_key(key), rendered);
    }
    Some(Value::Object(root))
}

/// The `fieldsV1` key of field `name`: `f:<name>`.
fn field_node_key(name: &str) -> String {
    let mut key = String::with_capacity(name.len() + 2);
    key.push_str("f:");
    key.push_str(name);
    key
}

/// The `fieldsV1` nodes (`f:<field>`) of the fields of `map` that `keep` accepts.
fn rendered_members(
    map: &Map<String, Value>,
    shape: Shape<'_>,
    keep: impl Fn(&str) -> bool,
) -> Option<Map<String, Value>> {
    let mut node = Map::new();
    for (key, child) in map.iter().filter(|(key, _)| keep(key)) {
        let (child_shape, child_meta) = shape.field(key);
        node.insert(field_node_key(key), rendered_fields(child, child_shape, &child_meta)?);
    }
    Some(node)
}

/// The `fieldsV1` node of a field's `value` (see [`created_fields_v1`]).
fn rendered_fields(value: &Value, shape: Shape<'_>, field_meta: &FieldMeta) -> Option<Value> {
    let mut node = Map::new();
    match value {
        Value::Object(map) if field_meta.atomic_map || map.is_empty() => {}
        Value::Object(map) => {
            // An added map is owned itself too (`".": {}`), a struct is not.
            node = rendered_members(map, shape, |_| true)?;
            if shape.is_map() {
                node.insert(".".into(), Value::Object(Map::new()));
            }
        }
        Value::Array(items) => match &field_meta.list {
            ListType::Atomic => {}
            ListType::Set => {
                for item in items {
                    node.insert(format!("v:{item}"), Value::Object(Map::new()));
                }
            }
            ListType::Map(keys) => {
                let item_shape = shape.items();
                for item in items {
                    let mut rendered = match item {
                        Value::Object(fields) => rendered_members(fields, item_shape, |_| true)?,
                        _ => Map::new(),
                    };
                    if !rendered.is_empty() {
                        rendered.insert(".".into(), Value::Object(Map::new()));
                    }
                    let key = item_key(item, keys).encode();
                    if node.insert(key, Value::Object(rendered)).is_some() {
                        return None;
                    }
                }
            }
        },
        _ => {}
    }
    Some(Value::Object(node))
}

/// Most `Update` entries kept, like upstream; older ones merge into
/// [`ANCIENT_CHANGES`].
pub const MAX_UPDATE_MANAGERS: usize = 10;

/// The manager older update entries merge into.
pub const ANCIENT_CHANGES: &str = "ancient-changes";

fn cap_update_managers(entries: &mut Vec<ManagedEntry>) {
    let updates = entries.iter().filter(|e| e.operation == UPDATE).count();
    if updates <= MAX_UPDATE_MANAGERS {
        return;
    }
    let mut oldest: Vec<usize> = (0..entries.len())
        .filter(|&i| entries[i].operation == UPDATE && entries[i].manager != ANCIENT_CHANGES)
        .collect();
    oldest.sort_by(|&a, &b| entries[a].time.cmp(&entries[b].time));
    // The bucket itself counts as one of the kept entries.
    let bucket_exists = entries.iter().any(|e| e.manager == ANCIENT_CHANGES);
    let merge = updates - MAX_UPDATE_MANAGERS + usize::from(!bucket_exists);
    let merged: Vec<usize> = oldest.into_iter().take(merge).collect();
    let mut fields = FieldSet::new();
    let mut time = None;
    let mut api_version = String::new();
    for &i in &merged {
        fields = fields.union(&entries[i].fields);
        time = time.max(entries[i].time.clone());
        api_version = entries[i].api_version.clone();
    }
    let mut index = 0;
    entries.retain(|_| {
        index += 1;
        !merged.contains(&(index - 1))
    });
    match entries.iter_mut().find(|e| e.manager == ANCIENT_CHANGES) {
        Some(bucket) => {
            bucket.fields = bucket.fields.union(&fields);
            bucket.time = bucket.time.clone().max(time);
        }
        None => entries.push(ManagedEntry {
            manager: ANCIENT_CHANGES.into(),
            operation: UPDATE.into(),
            api_version,
            time,
            subresource: None,
            fields,
        }),
    }
}

/// True if a write of `new` over `old` changes nothing but `managedFields`
/// timestamps (and the resource version): then, like upstream, the write is
/// a no-op and the resource version stays.
pub fn is_noop(old: &Value, new: &Value) -> bool {
    fn normalized(object: &Value) -> Value {
        let mut object = object.clone();
        let metadata = meta::metadata_mut(&mut object);
        metadata.remove("resourceVersion");
        if let Some(Value::Array(entries)) = metadata.get_mut("managedFields") {
            for entry in entries.iter_mut().filter_map(Value::as_object_mut) {
                entry.remove("time");
            }
        }
        object
    }
    normalized(old) == normalized(new)
}

/// A field another manager owns with a different value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The other manager, described like upstream (see [`ManagedEntry::describe`]).
    pub manager: String,
    /// The field, e.g. `.spec.replicas`.
    pub field: String,
}

/// The 409 Conflict upstream answers an apply with conflicts.
pub fn conflict_error(conflicts: &[Conflict]) -> ApiError {
    let message = match conflicts {
        [one] => format!("Apply failed with 1 conflict: conflict with {}: {}", one.manager, one.field),
        _ => {
            let mut managers: Vec<&str> = conflicts.iter().map(|c| c.manager.as_str()).collect();
            managers.sort();
            managers.dedup();
            let mut lines = Vec::new();
            for manager in managers {
                lines.push(format!("conflicts with {manager}:"));
                for conflict in conflicts.iter().filter(|c| c.manager == manager) {
                    lines.push(format!("- {}", conflict.field));
                }
            }
            format!("Apply failed with {} conflicts: {}", conflicts.len(), lines.join("\n"))
        }
    };
    ApiError {
        code: 409,
        reason: "Conflict",
        message,
        details: Some(Box::new(StatusDetails {
            causes: Some(
                conflicts
                    .iter()
                    .map(|c| StatusCause {
                        reason: Some("FieldManagerConflict".into()),
                        message: Some(format!("conflict with {}", c.manager)),
                        field: Some(c.field.clone()),
                    })
                    .collect(),
            ),
            ..Default::default()
        })),
    }
}

/// Merges an applied configuration into a live value: maps by field (atomic
/// ones replaced), list-maps by key, sets as unions, other lists replaced.
pub fn merge_applied(live: &Value, config: &Value, shape: Shape<'_>, meta: &FieldMeta) -> Value {
    match (live, config) {
        (Value::Object(live), Value::Object(config)) if !meta.atomic_map => {
            let mut merged = live.clone();
            for (key, value) in config {
                if value.is_null() {
                    merged.remove(key);
                    continue;
                }
                let (child, child_meta) = shape.field(key);
                let value = match live.get(key) {
                    Some(current) => merge_applied(current, value, child, &child_meta),
                    None => value.clone(),
                };
                merged.insert(key.clone(), value);
            }
            Value::Object(merged)
        }
        (Value::Array(live), Value::Array(config)) => match &meta.list {
            ListType::Map(keys) => {
                let items = shape.items();
                Value::Array(interleave(
                    live,
                    config,
                    |item| item_key(item, keys),
                    |old, new| merge_applied(old, new, items, &FieldMeta::default()),
                ))
            }
            ListType::Set => Value::Array(interleave(
                live,
                config,
                |item| PathElement::Value(item.to_string()),
                |_, new| new.clone(),
            )),
            ListType::Atomic => Value::Array(config.clone()),
        },
        _ => config.clone(),
    }
}

/// Merges the items of a live associative list with an applied one in
/// upstream's order: shared items in the applied order, live-only items where
/// they were, applied-only items where the applied list puts them.
fn interleave(
    live: &[Value],
    applied: &[Value],
    key: impl Fn(&Value) -> PathElement,
    merge: impl Fn(&Value, &Value) -> Value,
) -> Vec<Value> {
    let live_keys: Vec<PathElement> = live.iter().map(&key).collect();
    let applied_keys: Vec<PathElement> = applied.iter().map(&key).collect();
    let live_index = |k: &PathElement| live_keys.iter().position(|l| l == k);
    let applied_index = |k: &PathElement| applied_keys.iter().position(|a| a == k);
    let mut shared = applied_keys.iter().filter(|k| live_index(k).is_some()).peekable();
    let mut out = Vec::with_capacity(live.len().max(applied.len()));
    let (mut l, mut r) = (0, 0);
    while l < live.len() || r < applied.len() {
        if l < live.len() && r < applied.len() {
            if live_keys[l] == applied_keys[r] {
                out.push(merge(&live[l], &applied[r]));
                l += 1;
                r += 1;
                shared.next();
                continue;
            }
            if applied_index(&live_keys[l]).is_some() && shared.peek().is_some_and(|next| **next != live_keys[l]) {
                // A shared item the applied list wants later.
                l += 1;
                continue;
            }
        }
        if l < live.len() && applied_index(&live_keys[l]).is_none() {
            out.push(live[l].clone());
            l += 1;
            continue;
        }
        if r < applied.len() {
            let item = match live_index(&applied_keys[r]) {
                Some(i) => merge(&live[i], &applied[r]),
                None => applied[r].clone(),
            };
            out.push(item);
            if shared.peek().is_some_and(|next| **next == applied_keys[r]) {
                shared.next();
            }
            r += 1;
            continue;
        }
        // Only shared live items already merged remain.
        l += 1;
    }
    out
}

/// Why an apply failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplyError {
    /// Other managers own fields the apply would change (409).
    Conflicts(Vec<Conflict>),
    /// The configuration does not fit the schema, e.g. a list-map item
    /// without its key (upstream: an untyped 500 kubectl prints as
    /// `Error from server: failed to create typed patch object ...`).
    Invalid(String),
}

impl ApplyError {
    /// The API error upstream answers.
    pub fn to_api_error(&self) -> ApiError {
        match self {
            ApplyError::Conflicts(conflicts) => conflict_error(conflicts),
            ApplyError::Invalid(message) => ApiError { code: 500, reason: "", message: message.clone(), details: None },
        }
    }
}

/// The upstream name of a group-version-kind, e.g. `apps/v1, Kind=Deployment`.
fn gvk_string(ctx: &Context<'_>) -> String {
    let group_version =
        if ctx.api_version.contains('/') { ctx.api_version.to_owned() } else { format!("/{}", ctx.api_version) };
    format!("{group_version}, Kind={}", ctx.kind)
}

/// Checks that list-map items carry their keys, once each.
fn check_list_keys(value: &Value, shape: Shape<'_>, meta: &FieldMeta, path: &mut Path) -> Result<(), String> {
    match value {
        Value::Object(map) if !meta.atomic_map => {
            for (key, child) in map {
                let (child_shape, child_meta) = shape.field(key);
                path.push(PathElement::Field(key.clone()));
                check_list_keys(child, child_shape, &child_meta, path)?;
                path.pop();
            }
            Ok(())
        }
        Value::Array(items) => {
            let ListType::Map(keys) = &meta.list else {
                return Ok(());
            };
            let mut seen = Vec::new();
            for (i, item) in items.iter().enumerate() {
                for key in keys {
                    if item.get(key).is_none_or(Value::is_null) && super::patch::meta::key_default(key).is_none() {
                        return Err(format!(
                            "{}: element {i}: associative list with keys has an element that omits key field {:?} (and doesn't have default value)",
                            path_string(path),
                            key
                        ));
                    }
                }
                let element = item_key(item, keys);
                if seen.contains(&element) {
                    return Err(format!("{}: duplicate entries for key {element}", path_string(path)));
                }
                path.push(element.clone());
                check_list_keys(item, shape.items(), &FieldMeta::default(), path)?;
                path.pop();
                seen.push(element);
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Server-side apply of `config` by `ctx.manager` to `live` (`None` if the
/// object does not exist yet). Returns the new object with its
/// `managedFields`, or the conflicts with other managers unless `force`.
pub fn apply(live: Option<&Value>, config: &Value, ctx: &Context<'_>, force: bool) -> Result<Value, ApplyError> {
    let mut config = config.clone();
    if let Some(metadata) = config.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
    }
    check_list_keys(&config, ctx.shape, &FieldMeta::default(), &mut Vec::new())
        .map_err(|e| ApplyError::Invalid(format!("failed to create typed patch object ({}): {e}", gvk_string(ctx))))?;
    let mut entries = live.map(managed_fields).unwrap_or_default();
    if let Some(live) = live
        && meta::meta_value(live, "managedFields").is_none()
    {
        // Fields of objects nobody tracked yet belong to a stand-in
        // manager, so that the first applier conflicts with them.
        entries.push(ManagedEntry {
            manager: BEFORE_FIRST_APPLY.into(),
            operation: UPDATE.into(),
            api_version: ctx.api_version.to_owned(),
            time: None,
            subresource: None,
            fields: fields_of(live, ctx),
        });
    }
    let applied = fields_of(&config, ctx);
    let empty = Value::Object(Map::new());
    let base = live.unwrap_or(&empty);
    let mut merged = merge_applied(base, &config, ctx.shape, &FieldMeta::default());
    let modified = changed(live, &merged, &applied);

    let mine = entries.iter().position(|e| e.same_manager(ctx, APPLY));
    let contested = |entries: &[ManagedEntry]| -> Vec<(usize, Path)> {
        entries
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != mine)
            .flat_map(|(i, e)| {
                let paths: Vec<Path> = e.fields.intersection(&modified).paths().cloned().collect();
                paths.into_iter().map(move |p| (i, p))
            })
            .collect()
    };
    let mut conflicts = contested(&entries);
    if !force && !conflicts.is_empty() && ctx.manager == KUBECTL {
        // Like upstream, `kubectl` taking over from client-side apply may
        // change the fields its last-applied configuration set.
        if let Some(allowed) = live.and_then(|live| last_applied_fields(live, ctx)) {
            conflicts.retain(|(_, path)| !allowed.contains(path));
            if conflicts.is_empty() {
                return apply(live, &config, ctx, true);
            }
        }
    }
    if !force && !conflicts.is_empty() {
        return Err(ApplyError::Conflicts(
            conflicts
                .iter()
                .map(|(i, path)| Conflict { manager: entries[*i].describe(), field: path_string(path) })
                .collect(),
        ));
    }
    for (i, path) in conflicts {
        let mut taken = FieldSet::new();
        taken.insert(path);
        entries[i].fields = entries[i].fields.difference(&taken);
    }

    // Fields this manager applied before, left out now and owned by nobody
    // else go away.
    let previous = mine.map(|i| entries[i].fields.clone()).unwrap_or_default();
    let others = entries
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != mine)
        .fold(FieldSet::new(), |all, (_, e)| all.union(&e.fields));
    let dropped = previous.difference(&applied).difference(&others);
    let mut dropped: Vec<&Path> =
        dropped.paths().filter(|path| !others.contains_prefix(path) && !applied.contains_prefix(path)).collect();
    dropped.sort_by_key(|path| std::cmp::Reverse(path.len()));
    for path in dropped {
        remove_at(&mut merged, path);
    }

    let entry = ManagedEntry {
        manager: ctx.manager.to_owned(),
        operation: APPLY.into(),
        api_version: ctx.api_version.to_owned(),
        time: Some(meta::now_rfc3339()),
        subresource: ctx.subresource.map(str::to_owned),
        fields: applied,
    };
    match mine {
        Some(i) => entries[i] = entry,
        None => entries.push(entry),
    }
    set_managed_fields(&mut merged, entries);
    if ctx.manager == KUBECTL {
        update_last_applied(&mut merged, &config);
    }
    Ok(merged)
}

/// The stand-in manager of the fields of an untracked object.
const BEFORE_FIRST_APPLY: &str = "before-first-apply";

/// The manager whose applies take over from client-side apply.
const KUBECTL: &str = "kubectl";

/// The annotation client-side apply keeps the applied configuration in.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The fields of the object's last-applied configuration that still have
/// the applied values (`None` without the annotation).
fn last_applied_fields(live: &Value, ctx: &Context<'_>) -> Option<FieldSet> {
    let text = meta::meta_value(live, "annotations")?.get(LAST_APPLIED)?.as_str()?;
    let last_applied: Value = serde_json::from_str(text).ok()?;
    let mut allowed = FieldSet::new();
    for path in fields_of(&last_applied, ctx).paths() {
        let is_item = matches!(path.last(), Some(PathElement::Key(_) | PathElement::Value(_)));
        let live_value = value_at(live, path);
        if live_value.is_some() && (is_item || live_value == value_at(&last_applied, path)) {
            allowed.insert(path.clone());
        }
    }
    Some(allowed)
}

/// Keeps an existing last-applied annotation in step with what `kubectl`
/// applies server-side, like upstream.
fn update_last_applied(object: &mut Value, config: &Value) {
    let has_annotation = meta::meta_value(object, "annotations").and_then(|a| a.get(LAST_APPLIED)).is_some();
    if !has_annotation {
        return;
    }
    let mut applied = config.clone();
    if let Some(metadata) = applied.get_mut("metadata").and_then(Value::as_object_mut)
        && let Some(annotations) = metadata.get_mut("annotations").and_then(Value::as_object_mut)
    {
        annotations.remove(LAST_APPLIED);
        if annotations.is_empty() {
            metadata.remove("annotations");
        }
    }
    if let Some(annotations) = object.pointer_mut("/metadata/annotations").and_then(Value::as_object_mut) {
        annotations.insert(LAST_APPLIED.into(), applied.to_string().into());
    }
}

#[cfg(test)]
mod tests;
