//! CustomResourceDefinitions and the custom resources they define.
//!
//! Pure functions over `serde_json::Value`s:
//!
//! * [`definition`] — CRD defaulting, validation, structural-schema rules;
//! * [`schema`] — pruning, defaulting and validation of custom resources
//!   against a version's `openAPIV3Schema`;
//! * here — turning a CRD into the [`ResourceInfo`]s it serves, the naming
//!   checks (`NamesAccepted`) and the CRD status the server maintains.
//!
//! Multiple versions are served with `conversion.strategy: None` semantics:
//! every version shares the storage key space and only `apiVersion` differs
//! (a `Webhook` strategy is accepted but served the same way).

pub mod definition;
mod format;
pub mod schema;

use std::sync::Arc;

use serde_json::{Value, json};

use super::resource::{KindSchema, ResourceInfo};
use super::{ApiError, FieldError};

/// Group of the CustomResourceDefinition kind.
pub const GROUP: &str = "apiextensions.k8s.io";
/// Plural of the CustomResourceDefinition kind.
pub const PLURAL: &str = "customresourcedefinitions";
/// The finalizer a CRD carries while its instances are being deleted.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// What a custom resource's [`ResourceInfo`] carries from its CRD.
#[derive(Debug, Clone)]
pub struct CustomResource {
    /// Name of the CRD (`<plural>.<group>`).
    pub definition: String,
    /// The version objects are stored as.
    pub storage_version: String,
    /// The served version's `openAPIV3Schema`.
    pub schema: Option<Arc<Value>>,
    /// True if the version has the `status` subresource.
    pub status_enabled: bool,
    /// The `scale` subresource's paths, if enabled.
    pub scale: Option<ScalePaths>,
    /// True while the CRD is being deleted: instances can be read, updated
    /// and deleted but not created.
    pub terminating: bool,
}

/// Where a custom resource keeps what the `scale` subresource shows
/// (JSON paths like `.spec.replicas`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalePaths {
    /// `specReplicasPath`.
    pub spec_replicas: String,
    /// `statusReplicasPath`.
    pub status_replicas: String,
    /// `labelSelectorPath` (a string field holding a serialized selector).
    pub label_selector: Option<String>,
}

/// Converts a simple JSON path (`.spec.replicas`) to a JSON pointer
/// (`/spec/replicas`).
pub fn json_path_pointer(path: &str) -> String {
    path.trim_start_matches('.').split('.').map(|s| format!("/{}", s.replace('~', "~0").replace('/', "~1"))).collect()
}

/// True if `info` is the CustomResourceDefinition kind.
pub fn is_definition(info: &ResourceInfo) -> bool {
    info.group == GROUP && info.plural == PLURAL
}

/// Prepares a CRD or a custom resource for storage, as upstream's strategies
/// do, and validates it: CRDs are defaulted and validated (`old` is the
/// stored object on updates); custom resources are pruned, defaulted and
/// validated against their version's schema, and a create drops `status`
/// when the status subresource is enabled. Other kinds are left alone.
///
/// Creating a custom resource whose CRD is being deleted is refused (405,
/// upstream's `create not allowed while custom resource definition is
/// terminating`).
pub fn prepare(info: &ResourceInfo, object: &mut Value, old: Option<&Value>) -> Result<Vec<FieldError>, ApiError> {
    if is_definition(info) {
        definition::default_definition(object);
        return Ok(match old {
            Some(old) => definition::validate_definition_update(object, old),
            None => definition::validate_definition(object),
        });
    }
    let Some(custom) = &info.custom else {
        return Ok(Vec::new());
    };
    if old.is_none() && custom.terminating {
        return Err(ApiError::method_not_allowed("create not allowed while custom resource definition is terminating"));
    }
    if old.is_none()
        && custom.status_enabled
        && let Some(map) = object.as_object_mut()
    {
        map.remove("status");
    }
    let Some(schema) = &custom.schema else {
        return Ok(Vec::new());
    };
    schema::prune(schema, object);
    schema::apply_defaults(schema, object);
    Ok(schema::validate(schema, object))
}

/// Prunes and defaults a custom resource as upstream's decoding does (no
/// validation); other kinds are left alone.
pub fn normalize(info: &ResourceInfo, object: &mut Value) {
    if let Some(schema) = info.custom.as_ref().and_then(|c| c.schema.as_ref()) {
        schema::prune(schema, object);
        schema::apply_defaults(schema, object);
    }
}

/// True for custom resources without the status subresource: their
/// `status` is ordinary content, and changing it bumps `generation`.
pub fn status_is_spec(info: &ResourceInfo) -> bool {
    info.custom.as_ref().is_some_and(|c| !c.status_enabled)
}

/// The names a CRD asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Names {
    /// `spec.names.plural`.
    pub plural: String,
    /// `spec.names.singular`.
    pub singular: String,
    /// `spec.names.kind`.
    pub kind: String,
    /// `spec.names.listKind`.
    pub list_kind: String,
    /// `spec.names.shortNames`.
    pub short_names: Vec<String>,
    /// `spec.names.categories`.
    pub categories: Vec<String>,
}

fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default()
}

impl Names {
    /// `spec.names` (or `status.acceptedNames`, given that object).
    pub fn from_value(names: &Value) -> Names {
        let s = |k: &str| names.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        Names {
            plural: s("plural"),
            singular: s("singular"),
            kind: s("kind"),
            list_kind: s("listKind"),
            short_names: strings(names.get("shortNames")),
            categories: strings(names.get("categories")),
        }
    }

    /// The names as JSON (`acceptedNames`).
    pub fn to_value(&self) -> Value {
        let mut value = json!({
            "plural": self.plural,
            "singular": self.singular,
            "kind": self.kind,
            "listKind": self.list_kind,
        });
        if !self.short_names.is_empty() {
            value["shortNames"] = json!(self.short_names);
        }
        if !self.categories.is_empty() {
            value["categories"] = json!(self.categories);
        }
        value
    }
}

/// The `NamesAccepted=False` reason and message if `requested` collides
/// with a resource already served in the same group by something else
/// (a built-in kind or another CRD), like upstream's naming controller:
/// `PluralConflict`, `SingularConflict`, `ShortNamesConflict`,
/// `KindConflict`, `ListKindConflict`, each `"<name>" is already in use`.
pub fn names_conflict<'a>(
    requested: &Names,
    others: impl IntoIterator<Item = &'a ResourceInfo>,
) -> Option<(&'static str, String)> {
    let mut plurals = Vec::new();
    let mut kinds = Vec::new();
    for other in others {
        plurals.push(other.plural.as_str());
        plurals.push(other.singular.as_str());
        plurals.extend(other.short_names.iter().map(String::as_str));
        kinds.push(other.kind.as_str());
        kinds.push(other.list_kind.as_str());
    }
    let used = |name: &str, pool: &[&str]| !name.is_empty() && pool.contains(&name);
    let in_use = |name: &str| format!("{name:?} is already in use");
    // Checked in upstream's order; like upstream, the last conflict found
    // names the condition.
    let mut conflict = None;
    if used(&requested.plural, &plurals) {
        conflict = Some(("PluralConflict", in_use(&requested.plural)));
    }
    if used(&requested.singular, &plurals) {
        conflict = Some(("SingularConflict", in_use(&requested.singular)));
    }
    let shorts: Vec<String> = requested.short_names.iter().filter(|s| used(s, &plurals)).map(|s| in_use(s)).collect();
    if !shorts.is_empty() {
        let message = if shorts.len() == 1 { shorts[0].clone() } else { format!("[{}]", shorts.join(", ")) };
        conflict = Some(("ShortNamesConflict", message));
    }
    if used(&requested.kind, &kinds) {
        conflict = Some(("KindConflict", in_use(&requested.kind)));
    }
    if used(&requested.list_kind, &kinds) {
        conflict = Some(("ListKindConflict", in_use(&requested.list_kind)));
    }
    conflict
}

/// The resources a CRD serves: one per served version, named by `names`
/// (the accepted names).
pub fn resources_of(crd: &Value, names: &Names) -> Vec<ResourceInfo> {
    let group = crd.pointer("/spec/group").and_then(Value::as_str).unwrap_or("");
    let definition = crd.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    let namespaced = crd.pointer("/spec/scope").and_then(Value::as_str) != Some("Cluster");
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array).cloned().unwrap_or_default();
    let storage_version = versions
        .iter()
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .and_then(|v| v.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let mut resources = Vec::new();
    for version in versions.iter().filter(|v| v.get("served").and_then(Value::as_bool) == Some(true)) {
        let name = version.get("name").and_then(Value::as_str).unwrap_or("");
        let mut info = ResourceInfo::new(group, name, &names.kind, &names.plural, namespaced);
        info.list_kind = names.list_kind.clone();
        info.singular = names.singular.clone();
        info.short_names = names.short_names.clone();
        info.categories = names.categories.clone();
        let status_enabled = version.pointer("/subresources/status").is_some();
        if status_enabled {
            info = info.with_status();
        }
        let scale = version.pointer("/subresources/scale").map(|s| ScalePaths {
            spec_replicas: s["specReplicasPath"].as_str().unwrap_or(".spec.replicas").to_owned(),
            status_replicas: s["statusReplicasPath"].as_str().unwrap_or(".status.replicas").to_owned(),
            label_selector: s["labelSelectorPath"].as_str().map(str::to_owned),
        });
        if scale.is_some() {
            info = info.with_scale();
        }
        let schema = version.pointer("/schema/openAPIV3Schema").cloned().map(Arc::new);
        if let Some(schema) = &schema {
            info = info.with_schema(KindSchema::Json(schema.clone()));
        }
        info.printer =
            Some(crate::api::table::Printer::new(crate::api::table::TableColumns::from_crd_version(version)));
        info.custom = Some(Arc::new(CustomResource {
            definition: definition.to_owned(),
            storage_version: storage_version.clone(),
            schema,
            status_enabled,
            scale,
            terminating: crd.pointer("/metadata/deletionTimestamp").is_some(),
        }));
        resources.push(info);
    }
    resources
}

fn condition(type_: &str, status: bool, reason: &str, message: &str, now: &str) -> Value {
    json!({
        "type": type_,
        "status": if status { "True" } else { "False" },
        "lastTransitionTime": now,
        "reason": reason,
        "message": message,
    })
}

/// The status the server maintains for a CRD: `acceptedNames`, the
/// `NamesAccepted` and `Established` conditions (plus `Terminating` when
/// `terminating` is set) and `storedVersions`. `conflict` is what
/// [`names_conflict`] found. Conditions keep their `lastTransitionTime`
/// while their status does not change, so reconciling is idempotent.
pub fn status(
    crd: &Value,
    conflict: Option<&(&'static str, String)>,
    terminating: Option<(&str, &str)>,
    now: &str,
) -> Value {
    let old = crd.get("status").cloned().unwrap_or_else(|| json!({}));
    let requested = Names::from_value(crd.pointer("/spec/names").unwrap_or(&Value::Null));
    let previously = old.get("acceptedNames").map(Names::from_value).filter(|n| !n.plural.is_empty());
    let accepted = match (conflict, previously) {
        (None, _) => Some(requested),
        (Some(_), previous) => previous,
    };
    let mut conditions = vec![match conflict {
        None => condition("NamesAccepted", true, "NoConflicts", "no conflicts found", now),
        Some((reason, message)) => condition("NamesAccepted", false, reason, message, now),
    }];
    conditions.push(if accepted.is_some() {
        condition("Established", true, "InitialNamesAccepted", "the initial names have been accepted", now)
    } else {
        condition("Established", false, "NotAccepted", "not all names are accepted", now)
    });
    if let Some((reason, message)) = terminating {
        conditions.push(condition("Terminating", true, reason, message, now));
    }
    let old_conditions = old.get("conditions").and_then(Value::as_array).cloned().unwrap_or_default();
    for c in &mut conditions {
        if let Some(previous) = old_conditions.iter().find(|o| o["type"] == c["type"])
            && previous["status"] == c["status"]
            && previous.get("lastTransitionTime").is_some()
        {
            c["lastTransitionTime"] = previous["lastTransitionTime"].clone();
        }
    }
    let mut stored = strings(old.get("storedVersions"));
    if let Some(storage) = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .and_then(|vs| vs.iter().find(|v| v["storage"] == true))
        .and_then(|v| v["name"].as_str())
        && !stored.iter().any(|s| s == storage)
    {
        stored.push(storage.to_owned());
    }
    let mut status = json!({
        "acceptedNames": accepted.map(|n| n.to_value()).unwrap_or_else(|| json!({"plural": "", "kind": ""})),
        "conditions": conditions,
        "storedVersions": stored,
    });
    if accepted_is_empty(&status) {
        status["acceptedNames"] = json!({"plural": "", "kind": ""});
    }
    status
}

fn accepted_is_empty(status: &Value) -> bool {
    status.pointer("/acceptedNames/plural").and_then(Value::as_str).is_none_or(str::is_empty)
}

/// True if the CRD's status says it is established (its kinds are served).
pub fn is_established(crd: &Value) -> bool {
    crd.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| c.iter().any(|c| c["type"] == "Established" && c["status"] == "True"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd() -> Value {
        let mut crd = json!({
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"], "categories": ["all"]},
                "versions": [
                    {"name": "v1", "served": true, "storage": true,
                     "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": {"replicas": {"type": "integer", "default": 1}}}}}},
                     "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas", "labelSelectorPath": ".status.selector"}},
                     "additionalPrinterColumns": [{"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"}]},
                    {"name": "v1beta1", "served": true, "storage": false, "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
                    {"name": "v1alpha1", "served": false, "storage": false, "schema": {"openAPIV3Schema": {"type": "object"}}},
                ],
            }
        });
        definition::default_definition(&mut crd);
        crd
    }

    #[test]
    fn served_versions_become_resources() {
        let crd = crd();
        let names = Names::from_value(&crd["spec"]["names"]);
        let resources = resources_of(&crd, &names);
        assert_eq!(resources.len(), 2);
        let v1 = &resources[0];
        assert_eq!((v1.version.as_str(), v1.list_kind.as_str(), v1.singular.as_str()), ("v1", "WidgetList", "widget"));
        assert!(v1.namespaced && v1.has_subresource("status") && v1.has_subresource("scale"));
        assert_eq!(v1.short_names, ["wd"]);
        let printer = v1.printer.as_ref().unwrap();
        use crate::api::table::TablePrinter as _;
        assert!(printer.columns().iter().any(|c| c.name == "Replicas"), "{:?}", printer.columns());
        let custom = v1.custom.as_ref().unwrap();
        assert_eq!(custom.scale.as_ref().unwrap().label_selector.as_deref(), Some(".status.selector"));
        assert_eq!(resources[1].custom.as_ref().unwrap().storage_version, "v1");
        assert!(!resources[1].has_subresource("status"));
    }

    #[test]
    fn prepare_prunes_defaults_validates() {
        let crd = crd();
        let info = &resources_of(&crd, &Names::from_value(&crd["spec"]["names"]))[0];
        let mut object = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"junk": 1}, "status": {"replicas": 3}});
        assert!(prepare(info, &mut object, None).unwrap().is_empty());
        assert_eq!(object["spec"], json!({"replicas": 1}));
        assert!(object.get("status").is_none(), "create drops status with the status subresource");
        let mut bad = json!({"spec": {"replicas": "x"}});
        assert_eq!(prepare(info, &mut bad, Some(&json!({}))).unwrap()[0].field, "spec.replicas");
    }

    #[test]
    fn naming_conflicts() {
        let names = Names::from_value(&crd()["spec"]["names"]);
        let mut other = ResourceInfo::new("example.com", "v1", "Gadget", "gadgets", true);
        assert_eq!(names_conflict(&names, [&other]), None);
        other.short_names = vec!["wd".into()];
        assert_eq!(names_conflict(&names, [&other]), Some(("ShortNamesConflict", "\"wd\" is already in use".into())));
        let mut taken = ResourceInfo::new("example.com", "v1", "Widget", "things", true);
        taken.singular = "thing".into();
        taken.list_kind = "ThingList".into();
        assert_eq!(names_conflict(&names, [&taken]).unwrap().0, "KindConflict");
        taken.list_kind = "WidgetList".into();
        assert_eq!(
            names_conflict(&names, [&taken]),
            Some(("ListKindConflict", "\"WidgetList\" is already in use".into()))
        );
    }

    #[test]
    fn status_is_idempotent() {
        let mut crd = crd();
        let first = status(&crd, None, None, "2024-01-01T00:00:00Z");
        assert_eq!(first["acceptedNames"]["listKind"], "WidgetList");
        assert_eq!(first["storedVersions"], json!(["v1"]));
        crd["status"] = first.clone();
        assert!(is_established(&crd));
        assert_eq!(status(&crd, None, None, "2025-01-01T00:00:00Z"), first);
        let conflict = ("PluralConflict", "\"widgets\" is already in use".to_owned());
        let refused = status(&json!({"spec": crd["spec"].clone()}), Some(&conflict), None, "t");
        assert_eq!(refused["conditions"][0]["status"], "False");
        assert_eq!(refused["conditions"][1]["reason"], "NotAccepted");
    }
}
