//! Taking over from client-side apply: `kubectl`'s server-side applies may
//! change the fields its `last-applied-configuration` annotation set, and
//! keep that annotation in step.

use serde_json::Value;

use super::{Context, FieldSet, PathElement, fields_of, value_at};
use crate::api::meta;

/// The manager whose applies take over from client-side apply.
pub(super) const KUBECTL: &str = "kubectl";

/// The annotation client-side apply keeps the applied configuration in.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The fields of the object's last-applied configuration that still have
/// the applied values (`None` without the annotation).
pub(super) fn last_applied_fields(live: &Value, ctx: &Context<'_>) -> Option<FieldSet> {
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
pub(super) fn update_last_applied(object: &mut Value, config: &Value) {
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
