//! Recording a non-apply write (create, update, patch): the writer's
//! `Update` entry gains the fields it changed, which other managers lose.

use serde_json::{Map, Value};

use super::managed::{ManagedEntry, cap_update_managers, entry_json, managed_fields, set_managed_fields};
use super::{
    Context, FieldSet, Path, PathElement, SERVER_METADATA, UPDATE, changed, fields_of, item_key, owned_part, value_at,
};
use crate::api::meta;
use crate::api::patch::{FieldMeta, ListType, Shape};

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
pub(super) fn record_with_field_sets(old: Option<&Value>, new: &mut Value, ctx: &Context<'_>) {
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
