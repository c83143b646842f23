//! Server-side apply and `metadata.managedFields`.
//!
//! Every write records who set which fields: an `Apply` entry per applier
//! (the fields of its last applied configuration) and an `Update` entry per
//! other writer (the fields it changed). An apply merges its configuration
//! into the live object, fails with a 409 naming the other managers of the
//! fields it would change (unless forced, which takes them over), and
//! removes the fields its manager applied before but left out this time and
//! nobody else owns. Pure functions over JSON values and the kind's schema.
//!
//! The module's parts: [`FieldSet`] and paths (`fieldset`), the
//! `managedFields` entries (`managed`), recording non-apply writes
//! (`update`), the merge of an applied configuration (`merge`), conflicts
//! and errors (`error`), and the takeover from client-side apply
//! (`last_applied`); [`apply`] ties them together.

mod error;
mod fieldset;
mod last_applied;
mod managed;
mod merge;
mod update;

use serde_json::{Map, Value};

pub use error::{ApplyError, Conflict, conflict_error};
pub use fieldset::{FieldSet, Path, PathElement, item_key, path_string, remove_at, value_at};
pub use last_applied::LAST_APPLIED;
pub use managed::{ANCIENT_CHANGES, MAX_UPDATE_MANAGERS, ManagedEntry, is_noop, managed_fields, set_managed_fields};
pub use merge::merge_applied;
pub use update::record_update;

use self::error::gvk_string;
use self::last_applied::{KUBECTL, last_applied_fields, update_last_applied};
use self::merge::check_list_keys;
use super::meta;
use super::patch::{FieldMeta, Shape};

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

/// The stand-in manager of the fields of an untracked object.
const BEFORE_FIRST_APPLY: &str = "before-first-apply";

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

#[cfg(test)]
mod tests;
