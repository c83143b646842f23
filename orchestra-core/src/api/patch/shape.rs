//! Walking a kind's schema to learn how each field merges.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use k8s_openapi::schemars::SchemaGenerator;
use serde_json::Value;

use super::meta::{self, Strategy};
use crate::api::KindSchema;

/// A kind's schema with its named definitions, ready to walk.
#[derive(Debug, Clone)]
pub struct Schemas {
    root: Arc<Value>,
    definitions: foldhash::HashMap<String, Value>,
    /// True for schemas of built-in types (named definitions, the curated
    /// table applies); false for self-contained JSON schemas (CRDs), which
    /// carry their own `x-kubernetes-*` extensions.
    typed: bool,
}

fn cache() -> &'static Mutex<HashMap<usize, Arc<Schemas>>> {
    static CACHE: OnceLock<Mutex<HashMap<usize, Arc<Schemas>>>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

impl Schemas {
    /// The walkable form of a kind's schema. Typed schemas are generated once
    /// per type and cached.
    pub fn of(schema: &KindSchema) -> Arc<Schemas> {
        match schema {
            KindSchema::Typed(generate) => {
                let id = *generate as usize;
                if let Some(found) = cache().lock().expect("cache lock").get(&id) {
                    return found.clone();
                }
                let mut generator = SchemaGenerator::default();
                let root = generate(&mut generator).to_value();
                let definitions = generator.definitions().clone().into_iter().collect();
                let schemas = Arc::new(Schemas { root: Arc::new(root), definitions, typed: true });
                cache().lock().expect("cache lock").insert(id, schemas.clone());
                schemas
            }
            KindSchema::Json(value) => {
                Arc::new(Schemas { root: value.clone(), definitions: Default::default(), typed: false })
            }
        }
    }

    /// True if the schema comes from a built-in Rust type.
    pub fn is_typed(&self) -> bool {
        self.typed
    }

    /// The shape of the whole object.
    pub fn root(&self) -> Shape<'_> {
        Shape::resolve(Some(self), Some(&self.root))
    }

    /// A named definition, e.g. `io.k8s.api.core.v1.PodSpec`.
    pub fn definition(&self, name: &str) -> Option<&Value> {
        self.definitions.get(name)
    }
}

/// How a list merges, as the walker found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListType {
    /// Replaced and owned whole.
    Atomic,
    /// Distinct scalars.
    Set,
    /// Items identified by these keys.
    Map(Vec<String>),
}

/// The merge metadata of one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldMeta {
    /// How the field merges if it is a list.
    pub list: ListType,
    /// True if server-side apply owns the field whole if it is a map.
    pub atomic_map: bool,
    /// True if strategic merge patch merges the list (by the first list-map
    /// key, or as a set of scalars); false if it replaces it.
    pub strategic_merge: bool,
}

impl Default for FieldMeta {
    fn default() -> FieldMeta {
        FieldMeta { list: ListType::Atomic, atomic_map: false, strategic_merge: false }
    }
}

/// A position in a schema: the node there and its type name, if named.
/// A shape without a node (unknown field, no schema) merges by defaults.
#[derive(Debug, Clone, Copy)]
pub struct Shape<'a> {
    schemas: Option<&'a Schemas>,
    name: Option<&'a str>,
    node: Option<&'a Value>,
}

impl<'a> Shape<'a> {
    /// The shape of values about which nothing is known.
    pub fn unknown() -> Shape<'static> {
        Shape { schemas: None, name: None, node: None }
    }

    fn resolve(schemas: Option<&'a Schemas>, node: Option<&'a Value>) -> Shape<'a> {
        let mut shape = Shape { schemas, name: None, node };
        for _ in 0..8 {
            let Some(reference) = shape.node.and_then(reference_of) else {
                break;
            };
            let name = reference.rsplit_once('/').map(|(_, name)| name).unwrap_or(reference);
            shape.name = Some(name);
            shape.node = schemas.and_then(|s| s.definition(name));
        }
        shape
    }

    /// The schema type name here, e.g. `io.k8s.api.core.v1.PodSpec`.
    pub fn type_name(&self) -> Option<&'a str> {
        self.name
    }

    /// The shape of a field of this object (or of a map value, if the
    /// object is a map), with the field's merge metadata.
    pub fn field(&self, field: &str) -> (Shape<'a>, FieldMeta) {
        let Some(node) = self.node else {
            return (Shape::unknown(), FieldMeta::default());
        };
        let child = match node.get("properties").and_then(|p| p.get(field)) {
            Some(child) => Some(child),
            None => node.get("additionalProperties").filter(|a| a.is_object()),
        };
        let shape = Shape::resolve(self.schemas, child);
        let typed = self.schemas.is_some_and(Schemas::is_typed);
        let mut field_meta = FieldMeta::default();
        if typed {
            if let Some(strategy) = self.name.and_then(|name| meta::field_strategy(name, field)) {
                field_meta.strategic_merge = strategy.strategic_merge;
                match strategy.strategy {
                    Strategy::ListMap(keys) => {
                        field_meta.list = ListType::Map(keys.iter().map(|k| k.to_string()).collect())
                    }
                    Strategy::ListSet => field_meta.list = ListType::Set,
                    Strategy::AtomicList => {}
                    Strategy::AtomicMap => field_meta.atomic_map = true,
                }
            }
            if shape.name.is_some_and(meta::is_atomic_type) {
                field_meta.atomic_map = true;
            }
        } else if let Some(child) = child {
            field_meta = extension_meta(child);
        }
        (shape, field_meta)
    }

    /// The shape of the items of this list.
    pub fn items(&self) -> Shape<'a> {
        Shape::resolve(self.schemas, self.node.and_then(|n| n.get("items")))
    }

    /// True if the schema here is a map (`additionalProperties`), not a
    /// struct.
    pub fn is_map(&self) -> bool {
        self.node.is_some_and(|n| {
            n.get("properties").is_none() && n.get("additionalProperties").is_some_and(Value::is_object)
        })
    }

    /// The merge metadata of the items of this list, if they are lists or
    /// maps themselves (only CRD schemas can say anything about them).
    pub fn items_meta(&self) -> FieldMeta {
        match self.node.and_then(|n| n.get("items")) {
            Some(items) if !self.schemas.is_some_and(Schemas::is_typed) => extension_meta(items),
            _ => FieldMeta::default(),
        }
    }
}

fn reference_of(node: &Value) -> Option<&str> {
    if let Some(reference) = node.get("$ref").and_then(Value::as_str) {
        return Some(reference);
    }
    node.get("allOf")
        .and_then(Value::as_array)
        .filter(|all| all.len() == 1)
        .and_then(|all| all[0].get("$ref"))
        .and_then(Value::as_str)
}

/// Merge metadata from a structural schema's `x-kubernetes-*` extensions.
fn extension_meta(node: &Value) -> FieldMeta {
    let mut field_meta = FieldMeta::default();
    match node.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("set") => {
            field_meta.list = ListType::Set;
            field_meta.strategic_merge = true;
        }
        Some("map") => {
            let keys = node
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|keys| keys.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                .unwrap_or_default();
            field_meta.list = ListType::Map(keys);
            field_meta.strategic_merge = true;
        }
        _ => {}
    }
    if let Some(key) = node.get("x-kubernetes-patch-merge-key").and_then(Value::as_str)
        && field_meta.list == ListType::Atomic
    {
        field_meta.list = ListType::Map(vec![key.to_owned()]);
        field_meta.strategic_merge = true;
    }
    field_meta.atomic_map = matches!(node.get("x-kubernetes-map-type").and_then(Value::as_str), Some("atomic"));
    field_meta
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ResourceInfo;
    use k8s_openapi::api::apps::v1::Deployment;

    fn deployment() -> Arc<Schemas> {
        Schemas::of(ResourceInfo::of::<Deployment>().schema.as_ref().unwrap())
    }

    #[test]
    fn walks_typed_schemas_by_reference() {
        let schemas = deployment();
        let root = schemas.root();
        assert_eq!(root.type_name(), Some("io.k8s.api.apps.v1.Deployment"));
        let (spec, _) = root.field("spec");
        let (template, _) = spec.field("template");
        let (pod, _) = template.field("spec");
        assert_eq!(pod.type_name(), Some("io.k8s.api.core.v1.PodSpec"));
        let (containers, containers_meta) = pod.field("containers");
        assert_eq!(containers_meta.list, ListType::Map(vec!["name".into()]));
        assert!(containers_meta.strategic_merge);
        let (_, ports) = containers.items().field("ports");
        assert_eq!(ports.list, ListType::Map(vec!["containerPort".into(), "protocol".into()]));
        let (_, tolerations) = pod.field("tolerations");
        assert_eq!(tolerations.list, ListType::Atomic);
        let (_, selector) = spec.field("selector");
        assert!(selector.atomic_map);
        let (metadata, _) = root.field("metadata");
        let (_, finalizers) = metadata.field("finalizers");
        assert_eq!(finalizers.list, ListType::Set);
        let (labels, _) = metadata.field("labels");
        let (value, _) = labels.field("app");
        assert!(value.node.is_some(), "map values have the value schema");
    }

    #[test]
    fn reads_extensions_of_json_schemas() {
        let schema = serde_json::json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "items": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["id"],
                      "items": {"type": "object"}},
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "sel": {"type": "object", "x-kubernetes-map-type": "atomic"}
        }}}});
        let schemas = Schemas::of(&KindSchema::Json(Arc::new(schema)));
        let (spec, _) = schemas.root().field("spec");
        assert_eq!(spec.field("items").1.list, ListType::Map(vec!["id".into()]));
        assert_eq!(spec.field("tags").1.list, ListType::Set);
        assert!(spec.field("sel").1.atomic_map);
        assert_eq!(spec.field("nope").1, FieldMeta::default());
    }
}
