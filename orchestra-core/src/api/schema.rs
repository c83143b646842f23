//! A resolved view of OpenAPI v3 schemas, and the unknown field walker
//! behind `fieldValidation` (repeated fields: [`super::strict`]).
//!
//! A [`SchemaView`] is one node of a schema together with the definitions
//! (`components.schemas`) its `$ref`s point into. It follows `$ref` and the
//! `allOf: [{$ref}]` wrapping that OpenAPI 3.0 uses to carry a description
//! beside a reference, so callers see the referenced schema directly.
//! Strategic merge patch, server-side apply and CRD validation can walk
//! objects with it the same way field validation does.
//!
//! ```
//! use orchestra_core::api::schema::SchemaView;
//! use serde_json::json;
//!
//! let defs = json!({
//!     "Pod": {"type": "object", "properties": {"spec": {"$ref": "#/components/schemas/Spec"}}},
//!     "Spec": {"type": "object", "properties": {"nodeName": {"type": "string"}}},
//! });
//! let defs = defs.as_object().unwrap();
//! let pod = SchemaView::reference(defs, "Pod").unwrap();
//! let object = json!({"spec": {"nodeName": "n1", "foo": 1}});
//! assert_eq!(pod.unknown_fields(&object), ["spec.foo"]);
//! ```

use serde_json::{Map, Value};

/// Where `$ref`s point: `#/components/schemas/<name>`.
pub const REF_PREFIX: &str = "#/components/schemas/";

/// The schema name of `ObjectMeta`.
pub const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// One schema node, resolved through `$ref`s, with the definitions it can
/// refer to.
#[derive(Debug, Clone, Copy)]
pub struct SchemaView<'a> {
    definitions: &'a Map<String, Value>,
    /// The node as written (may be a `$ref` or an `allOf` wrapper).
    outer: &'a Value,
    /// The node after following references.
    node: &'a Value,
}

/// Follows `$ref` and single-element `allOf` wrappers (bounded, so a
/// reference cycle cannot loop).
fn resolve<'a>(definitions: &'a Map<String, Value>, mut node: &'a Value) -> &'a Value {
    for _ in 0..32 {
        if let Some(reference) = node.get("$ref").and_then(Value::as_str) {
            match reference.strip_prefix(REF_PREFIX).and_then(|name| definitions.get(name)) {
                Some(target) => node = target,
                None => return node,
            }
            continue;
        }
        match node.get("allOf").and_then(Value::as_array) {
            Some(all) if all.len() == 1 && node.get("properties").is_none() => node = &all[0],
            _ => return node,
        }
    }
    node
}

impl<'a> SchemaView<'a> {
    /// A view of `node`, whose `$ref`s point into `definitions`.
    pub fn new(definitions: &'a Map<String, Value>, node: &'a Value) -> SchemaView<'a> {
        SchemaView { definitions, outer: node, node: resolve(definitions, node) }
    }

    /// The view of the definition called `name`, if there is one.
    pub fn reference(definitions: &'a Map<String, Value>, name: &str) -> Option<SchemaView<'a>> {
        definitions.get(name).map(|node| SchemaView::new(definitions, node))
    }

    /// The resolved schema node.
    pub fn schema(&self) -> &'a Value {
        self.node
    }

    /// The node as written, before references were followed.
    pub fn written(&self) -> &'a Value {
        self.outer
    }

    /// The definitions references resolve against.
    pub fn definitions(&self) -> &'a Map<String, Value> {
        self.definitions
    }

    /// `type`, if the schema states one.
    pub fn type_name(&self) -> Option<&'a str> {
        self.node.get("type").and_then(Value::as_str)
    }

    /// The description: the one written beside a reference wins over the
    /// referenced schema's own.
    pub fn description(&self) -> Option<&'a str> {
        self.outer.get("description").or_else(|| self.node.get("description")).and_then(Value::as_str)
    }

    /// A vendor extension or other keyword of the resolved schema, e.g.
    /// `x-kubernetes-patch-merge-key` or `x-kubernetes-list-type`. The
    /// written node is consulted first (extensions may sit beside a `$ref`).
    pub fn extension(&self, name: &str) -> Option<&'a Value> {
        self.outer.get(name).or_else(|| self.node.get(name))
    }

    /// The schema of property `name` of an object schema.
    pub fn field(&self, name: &str) -> Option<SchemaView<'a>> {
        self.node.get("properties")?.get(name).map(|node| SchemaView::new(self.definitions, node))
    }

    /// The declared properties of an object schema.
    pub fn properties(&self) -> impl Iterator<Item = (&'a str, SchemaView<'a>)> + 'a {
        let definitions = self.definitions;
        self.node
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(move |(name, node)| (name.as_str(), SchemaView::new(definitions, node)))
    }

    /// True if the object schema declares properties.
    pub fn has_properties(&self) -> bool {
        self.node.get("properties").and_then(Value::as_object).is_some_and(|p| !p.is_empty())
    }

    /// `required` property names.
    pub fn required(&self) -> impl Iterator<Item = &'a str> + 'a {
        self.node.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str)
    }

    /// The schema of the elements of an array schema.
    pub fn items(&self) -> Option<SchemaView<'a>> {
        self.node.get("items").filter(|items| items.is_object()).map(|node| SchemaView::new(self.definitions, node))
    }

    /// The schema of the values of a map (`additionalProperties` given as a
    /// schema; `true` is an empty, anything-goes schema).
    pub fn additional_properties(&self) -> Option<SchemaView<'a>> {
        static ANY: Value = Value::Null;
        match self.node.get("additionalProperties")? {
            Value::Bool(false) => None,
            Value::Bool(true) => Some(SchemaView::new(self.definitions, &ANY)),
            node => Some(SchemaView::new(self.definitions, node)),
        }
    }

    /// True for a map: an object whose values share one schema.
    pub fn is_map(&self) -> bool {
        self.additional_properties().is_some()
    }

    /// True if the schema keeps fields it does not declare
    /// (`x-kubernetes-preserve-unknown-fields`).
    pub fn preserves_unknown_fields(&self) -> bool {
        self.extension("x-kubernetes-preserve-unknown-fields").and_then(Value::as_bool).unwrap_or(false)
    }

    /// True for `x-kubernetes-int-or-string` (an int or a string; a scalar).
    pub fn is_int_or_string(&self) -> bool {
        self.extension("x-kubernetes-int-or-string").and_then(Value::as_bool).unwrap_or(false)
    }

    /// True if fields not declared here are unknown: an object schema with
    /// properties, neither a map nor preserving unknown fields. A schema with
    /// no properties at all (`RawExtension`, `FieldsV1`, free-form) takes
    /// anything.
    pub fn is_closed_object(&self) -> bool {
        self.has_properties() && !self.is_map() && !self.preserves_unknown_fields()
    }

    /// The paths of the fields of `value` that the schema does not know, in
    /// `value`'s map order: `spec.foo`, `spec.containers[0].bar`.
    pub fn unknown_fields(&self, value: &Value) -> Vec<String> {
        let mut found = Vec::new();
        walk_value(Some(*self), value, &mut String::new(), &mut found, false);
        found
    }

    /// Removes the fields of `value` that the schema does not know (what the
    /// server stores when `fieldValidation` is `Warn` or `Ignore`); returns
    /// their paths.
    pub fn prune_unknown_fields(&self, value: &mut Value) -> Vec<String> {
        let mut found = Vec::new();
        prune_value(*self, value, &mut String::new(), &mut found, false);
        found
    }

    /// Like [`unknown_fields`](Self::unknown_fields) for a merge patch or a
    /// strategic merge patch: `$`-directives (`$patch`,
    /// `$setElementOrder/...`, `$retainKeys`) and deletions (`null`) are not
    /// fields.
    pub fn unknown_patch_fields(&self, patch: &Value) -> Vec<String> {
        let mut found = Vec::new();
        walk_value(Some(*self), patch, &mut String::new(), &mut found, true);
        found
    }

    /// Like [`prune_unknown_fields`](Self::prune_unknown_fields) for a merge
    /// patch or a strategic merge patch.
    pub fn prune_unknown_patch_fields(&self, patch: &mut Value) -> Vec<String> {
        let mut found = Vec::new();
        prune_value(*self, patch, &mut String::new(), &mut found, true);
        found
    }

    /// The schema at a JSON pointer below this one (`/spec/containers/0`)
    /// and the field path it names (`spec.containers[0]`); `Ok((None, _))`
    /// where the schema says nothing (free-form), [`UnknownField`] if a
    /// segment is not a known field.
    pub fn at_pointer(&self, pointer: &str) -> Result<(Option<SchemaView<'a>>, String), UnknownField> {
        let mut current = Some(*self);
        let mut path = String::new();
        for raw in pointer.split('/').skip(1) {
            let segment = raw.replace("~1", "/").replace("~0", "~");
            let array = current.and_then(|s| s.items());
            if (array.is_some() || segment.parse::<usize>().is_ok() || segment == "-")
                && (array.is_some() || current.is_none_or(|s| !s.has_properties()))
            {
                path.push_str(&format!("[{segment}]"));
                current = array;
                continue;
            }
            path = child_path(&path, &segment);
            current = match entry_schema(current, &segment) {
                Ok(sub) => sub,
                Err(()) => return Err(UnknownField { path }),
            };
        }
        Ok((current, path))
    }
}

/// A JSON pointer segment the schema does not know, with the field path up
/// to and including it (`spec.nope`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown field {path:?}")]
pub struct UnknownField {
    /// The field path, as field validation reports it.
    pub path: String,
}

fn child_path(path: &str, name: &str) -> String {
    if path.is_empty() { name.to_owned() } else { format!("{path}.{name}") }
}

/// What the schema says about the entry `key` of an object: its schema, or
/// `Err(())` if the key is unknown. `Ok(None)` means "anything goes".
fn entry_schema<'a>(schema: Option<SchemaView<'a>>, key: &str) -> Result<Option<SchemaView<'a>>, ()> {
    let Some(schema) = schema else {
        return Ok(None);
    };
    // An embedded object (`x-kubernetes-embedded-resource`) has the
    // metadata of an object, whatever its schema says.
    if schema.extension("x-kubernetes-embedded-resource").and_then(Value::as_bool) == Some(true) {
        match key {
            "metadata" => {
                if let Some(meta) = SchemaView::reference(schema.definitions, OBJECT_META) {
                    return Ok(Some(meta));
                }
            }
            "apiVersion" | "kind" => return Ok(None),
            _ => {}
        }
    }
    if let Some(field) = schema.field(key) {
        return Ok(Some(field));
    }
    if let Some(values) = schema.additional_properties() {
        return Ok(Some(values));
    }
    if schema.is_closed_object() { Err(()) } else { Ok(None) }
}

fn walk_value(schema: Option<SchemaView<'_>>, value: &Value, path: &mut String, found: &mut Vec<String>, patch: bool) {
    let Some(schema) = schema else { return };
    if schema.is_int_or_string() {
        return;
    }
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                if patch && (key.starts_with('$') || child.is_null()) {
                    continue;
                }
                let child_path = child_path(path, key);
                match entry_schema(Some(schema), key) {
                    Err(()) => found.push(child_path),
                    Ok(sub) => {
                        let mut p = child_path;
                        walk_value(sub, child, &mut p, found, patch);
                    }
                }
            }
        }
        Value::Array(items) => {
            let Some(item_schema) = schema.items() else {
                return;
            };
            for (i, item) in items.iter().enumerate() {
                let mut p = format!("{path}[{i}]");
                walk_value(Some(item_schema), item, &mut p, found, patch);
            }
        }
        _ => {}
    }
}

fn prune_value(schema: SchemaView<'_>, value: &mut Value, path: &mut String, found: &mut Vec<String>, patch: bool) {
    if schema.is_int_or_string() {
        return;
    }
    match value {
        Value::Object(map) => {
            let mut unknown = Vec::new();
            for (key, child) in map.iter_mut() {
                if patch && (key.starts_with('$') || child.is_null()) {
                    continue;
                }
                let child_path = child_path(path, key);
                match entry_schema(Some(schema), key) {
                    Err(()) => {
                        unknown.push(key.clone());
                        found.push(child_path);
                    }
                    Ok(Some(sub)) => {
                        let mut p = child_path;
                        prune_value(sub, child, &mut p, found, patch);
                    }
                    Ok(None) => {}
                }
            }
            for key in unknown {
                map.remove(&key);
            }
        }
        Value::Array(items) => {
            let Some(item_schema) = schema.items() else {
                return;
            };
            for (i, item) in items.iter_mut().enumerate() {
                let mut p = format!("{path}[{i}]");
                prune_value(item_schema, item, &mut p, found, patch);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn definitions() -> Map<String, Value> {
        json!({
            "Kind": {
                "type": "object",
                "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "metadata": {"allOf": [{"$ref": "#/components/schemas/Meta"}], "description": "meta"},
                    "spec": {"$ref": "#/components/schemas/Spec"},
                },
            },
            "Meta": {
                "type": "object",
                "description": "object meta",
                "properties": {
                    "name": {"type": "string"},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                },
            },
            "Spec": {
                "type": "object",
                "properties": {
                    "containers": {"type": "array", "items": {"$ref": "#/components/schemas/Container"}},
                    "ports": {"type": "object", "additionalProperties": {"$ref": "#/components/schemas/Port"}},
                    "port": {"x-kubernetes-int-or-string": true},
                    "raw": {"type": "object"},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {"a": {"type": "string"}}},
                    "matrix": {"type": "array", "items": {"type": "array", "items": {"$ref": "#/components/schemas/Port"}}},
                },
            },
            "Container": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "image": {"type": "string"}},
            },
            "Port": {
                "type": "object",
                "properties": {"number": {"type": "integer"}},
            },
        })
        .as_object()
        .unwrap()
        .clone()
    }

    #[test]
    fn views_resolve_references() {
        let defs = definitions();
        let kind = SchemaView::reference(&defs, "Kind").unwrap();
        let meta = kind.field("metadata").unwrap();
        assert_eq!(meta.description(), Some("meta"));
        assert!(meta.field("name").is_some());
        assert!(meta.field("labels").unwrap().is_map());
        let containers = kind.field("spec").unwrap().field("containers").unwrap();
        assert_eq!(containers.type_name(), Some("array"));
        let container = containers.items().unwrap();
        assert!(container.is_closed_object());
        assert_eq!(container.properties().map(|(n, _)| n).collect::<Vec<_>>(), ["image", "name"]);
        assert!(kind.field("nope").is_none());
        let spec = kind.field("spec").unwrap();
        assert!(spec.field("port").unwrap().is_int_or_string());
        assert!(spec.field("free").unwrap().preserves_unknown_fields());
        assert!(!spec.field("raw").unwrap().is_closed_object());
    }

    #[test]
    fn unknown_fields_table() {
        let defs = definitions();
        let kind = SchemaView::reference(&defs, "Kind").unwrap();
        let cases: Vec<(Value, Vec<&str>)> = vec![
            (json!({"apiVersion": "v1", "kind": "K", "metadata": {"name": "x"}}), vec![]),
            (json!({"foo": 1}), vec!["foo"]),
            (json!({"metadata": {"name": "x", "bogus": 1, "labels": {"a": "b"}}}), vec!["metadata.bogus"]),
            (
                json!({"spec": {"containers": [{"name": "a"}, {"name": "b", "imag": "x"}]}}),
                vec!["spec.containers[1].imag"],
            ),
            (json!({"spec": {"ports": {"http": {"number": 80, "nmber": 1}}}}), vec!["spec.ports.http.nmber"]),
            (json!({"spec": {"port": "http"}}), vec![]),
            (json!({"spec": {"port": 80}}), vec![]),
            (json!({"spec": {"raw": {"anything": {"goes": [1]}}}}), vec![]),
            (json!({"spec": {"free": {"a": "x", "b": {"c": 1}}}}), vec![]),
            (json!({"spec": {"matrix": [[{"number": 1}], [{"numbr": 2}]]}}), vec!["spec.matrix[1][0].numbr"]),
            // type mismatches are the decoder's business, not this walker's
            (json!({"spec": {"containers": "nope"}}), vec![]),
            (json!({"spec": {"b": 1, "a": 2}}), vec!["spec.a", "spec.b"]),
        ];
        for (object, expected) in cases {
            assert_eq!(kind.unknown_fields(&object), expected, "{object}");
        }
    }

    #[test]
    fn pruning_drops_what_is_unknown() {
        let defs = definitions();
        let kind = SchemaView::reference(&defs, "Kind").unwrap();
        let mut object = json!({"metadata": {"name": "x", "zz": 1}, "spec": {"containers": [{"name": "a", "q": 1}], "free": {"b": 1}}});
        let pruned = kind.prune_unknown_fields(&mut object);
        assert_eq!(pruned, ["metadata.zz", "spec.containers[0].q"]);
        assert_eq!(
            object,
            json!({"metadata": {"name": "x"}, "spec": {"containers": [{"name": "a"}], "free": {"b": 1}}})
        );
    }

    #[test]
    fn pointers_resolve_to_fields() {
        let defs = definitions();
        let kind = SchemaView::reference(&defs, "Kind").unwrap();
        let (container, path) = kind.at_pointer("/spec/containers/0").unwrap();
        assert_eq!(path, "spec.containers[0]");
        assert!(container.unwrap().field("image").is_some());
        assert_eq!(kind.at_pointer("/spec/containers/-").unwrap().1, "spec.containers[-]");
        assert_eq!(kind.at_pointer("/spec/nope/x").err().map(|e| e.path), Some("spec.nope".to_owned()));
        assert_eq!(kind.at_pointer("/metadata/labels/a~1b").unwrap().1, "metadata.labels.a/b");
        assert!(kind.at_pointer("/spec/raw/x/y").unwrap().0.is_none());
    }

    #[test]
    fn patches_skip_directives_and_deletions() {
        let defs = definitions();
        let kind = SchemaView::reference(&defs, "Kind").unwrap();
        let patch = json!({
            "metadata": {"gone": null, "labels": {"a": null}},
            "spec": {"$setElementOrder/containers": [{"name": "c"}], "containers": [{"name": "c", "$patch": "delete", "imagee": "x"}]},
        });
        assert_eq!(kind.unknown_patch_fields(&patch), ["spec.containers[0].imagee"]);
        assert_eq!(
            kind.unknown_fields(&patch),
            [
                "metadata.gone",
                "spec.$setElementOrder/containers",
                "spec.containers[0].$patch",
                "spec.containers[0].imagee"
            ]
        );
        let mut pruned = patch.clone();
        assert_eq!(kind.prune_unknown_patch_fields(&mut pruned), ["spec.containers[0].imagee"]);
        assert!(pruned.pointer("/spec/containers/0/imagee").is_none());
        assert!(pruned.pointer("/spec/$setElementOrder~1containers").is_some());
    }
}
