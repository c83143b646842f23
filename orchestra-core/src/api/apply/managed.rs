//! `metadata.managedFields` entries: reading them from an object, writing
//! them back in upstream's order, and capping the number of `Update`
//! entries.

use serde_json::{Map, Value, json};

use super::{APPLY, Context, FieldSet, UPDATE};
use crate::api::meta;

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
    pub(super) fn same_manager(&self, ctx: &Context<'_>, operation: &str) -> bool {
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
pub(super) fn entry_json(
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

/// Most `Update` entries kept, like upstream; older ones merge into
/// [`ANCIENT_CHANGES`].
pub const MAX_UPDATE_MANAGERS: usize = 10;

/// The manager older update entries merge into.
pub const ANCIENT_CHANGES: &str = "ancient-changes";

pub(super) fn cap_update_managers(entries: &mut Vec<ManagedEntry>) {
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
