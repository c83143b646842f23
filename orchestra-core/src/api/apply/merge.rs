//! Merging an applied configuration into the live object, along the
//! kind's schema: maps by field, associative lists by key, sets as unions.

use serde_json::Value;

use super::{Path, PathElement, item_key, path_string};
use crate::api::patch::{FieldMeta, ListType, Shape};

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
pub(super) fn interleave(
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

/// Checks that list-map items carry their keys, once each.
pub(super) fn check_list_keys(
    value: &Value,
    shape: Shape<'_>,
    meta: &FieldMeta,
    path: &mut Path,
) -> Result<(), String> {
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
                    if item.get(key).is_none_or(Value::is_null) && crate::api::patch::meta::key_default(key).is_none() {
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
