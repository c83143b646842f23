//! Strict decoding: a JSON or YAML document decoded into a
//! [`serde_json::Value`] in one pass, together with the problems upstream's
//! strict decoder reports — fields the schema does not know and fields
//! given twice — in document order.
//!
//! `serde_json::Value` keeps the last of repeated keys and cannot show that
//! there were several, and the problems must come in the order the document
//! has them, so they are found while the document is read: the decoder
//! follows the schema down the document beside the parser. Unknown fields
//! are skipped, not kept (what the server stores in every `fieldValidation`
//! mode), so the value needs no pruning afterwards.
//!
//! The schema is first compiled ([`StrictSchema`]): each node's fields in a
//! hash map, references resolved, so that following it costs a lookup per
//! field rather than a walk of the OpenAPI document.
//!
//! ```
//! use orchestra_core::api::strict;
//! use orchestra_core::api::schema::SchemaView;
//! use serde_json::json;
//!
//! let defs = json!({"Pod": {"type": "object", "properties": {"name": {"type": "string"}}}});
//! let defs = defs.as_object().unwrap();
//! let pod = strict::StrictSchema::compile(SchemaView::reference(defs, "Pod").unwrap());
//! let decoded = strict::decode_json(Some(&pod), br#"{"name": "a", "foo": 1, "name": "b"}"#).unwrap();
//! assert_eq!(decoded.value, json!({"name": "b"}));
//! assert_eq!(decoded.problems, [r#"unknown field "foo""#, r#"duplicate field "name""#]);
//! ```

use std::collections::HashMap;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use super::schema::{OBJECT_META, SchemaView};

/// A decoded document and its strict decoding problems.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    /// The document, without the fields the schema does not know; of
    /// repeated keys the last is kept (as `serde_json` does).
    pub value: Value,
    /// `unknown field "spec.foo"` and `duplicate field "spec.x"`, worded as
    /// upstream words them, in document order. A field both unknown and
    /// repeated is reported once, as unknown.
    pub problems: Vec<String>,
    /// True if unknown fields were left out of [`value`](Self::value).
    pub pruned: bool,
}

/// Decodes a document against `schema`; with no schema only repeated
/// fields are problems and nothing is left out.
pub fn decode<'de, D: Deserializer<'de>>(schema: Option<&StrictSchema>, deserializer: D) -> Result<Decoded, D::Error> {
    let mut walk = Walk::default();
    let value = Strict { scope: schema.map_or(Scope::Free, |schema| schema.scope(ROOT)), walk: &mut walk }
        .deserialize(deserializer)?;
    Ok(Decoded { value, problems: walk.problems, pruned: walk.pruned })
}

/// [`decode`] for JSON.
pub fn decode_json(schema: Option<&StrictSchema>, bytes: &[u8]) -> Result<Decoded, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let decoded = decode(schema, &mut deserializer)?;
    deserializer.end()?;
    Ok(decoded)
}

/// [`decode`] for YAML (one document).
pub fn decode_yaml(schema: Option<&StrictSchema>, bytes: &[u8]) -> Result<Decoded, serde_yaml::Error> {
    decode(schema, serde_yaml::Deserializer::from_slice(bytes))
}

/// A schema compiled for strict decoding: for each node, what it says of an
/// object's fields and an array's items, with references resolved.
#[derive(Debug)]
pub struct StrictSchema {
    /// The nodes; the root is [`ROOT`].
    nodes: Vec<Node>,
}

/// The root node's index.
const ROOT: usize = 0;

/// One schema node.
#[derive(Debug, Default)]
struct Node {
    /// `x-kubernetes-int-or-string`: not judged below.
    int_or_string: bool,
    /// `x-kubernetes-embedded-resource`: `metadata` is an `ObjectMeta`,
    /// `apiVersion` and `kind` are free.
    embedded: Option<Embedded>,
    /// Declared properties.
    properties: foldhash::HashMap<String, usize>,
    /// The schema of undeclared fields (a map's values).
    additional: Option<usize>,
    /// Undeclared fields are unknown.
    closed: bool,
    /// The schema of an array's items.
    items: Option<usize>,
}

/// What an embedded object's `metadata` is.
#[derive(Debug, Clone, Copy)]
struct Embedded {
    /// The `ObjectMeta` node, if the definitions have it.
    metadata: Option<usize>,
}

/// Where a field leads.
enum Entry {
    /// A field the schema does not know.
    Unknown,
    /// No schema (anything goes).
    Free,
    /// The field's schema node.
    Node(usize),
}

impl StrictSchema {
    /// Compiles `schema` and everything it refers to.
    pub fn compile(schema: SchemaView<'_>) -> StrictSchema {
        let mut compiler = Compiler { nodes: Vec::new(), seen: HashMap::new(), object_meta: None };
        compiler.node(schema);
        StrictSchema { nodes: compiler.nodes }
    }

    fn scope(&self, node: usize) -> Scope<'_> {
        if self.nodes[node].int_or_string { Scope::Unchecked } else { Scope::Node(self, node) }
    }

    /// What node `node` says of the field `key` of an object: the rules of
    /// the schema walkers in [`super::schema`] (`entry_schema`), on the
    /// compiled node; a test keeps the two in agreement.
    fn entry(&self, node: usize, key: &str) -> Entry {
        let node = &self.nodes[node];
        if let Some(embedded) = node.embedded {
            match (key, embedded.metadata) {
                ("metadata", Some(meta)) => return Entry::Node(meta),
                ("apiVersion" | "kind", _) => return Entry::Free,
                _ => {}
            }
        }
        if let Some(&field) = node.properties.get(key) {
            return Entry::Node(field);
        }
        match node.additional {
            Some(values) => Entry::Node(values),
            None if node.closed => Entry::Unknown,
            None => Entry::Free,
        }
    }
}

/// Builds [`StrictSchema`] nodes, each schema node (as written and as
/// resolved) once, so recursive schemas end.
struct Compiler {
    nodes: Vec<Node>,
    seen: HashMap<(*const Value, *const Value), usize>,
    object_meta: Option<Option<usize>>,
}

impl Compiler {
    fn node(&mut self, schema: SchemaView<'_>) -> usize {
        let identity = (schema.written() as *const Value, schema.schema() as *const Value);
        if let Some(&index) = self.seen.get(&identity) {
            return index;
        }
        let index = self.nodes.len();
        self.nodes.push(Node::default());
        self.seen.insert(identity, index);
        let embedded = schema.extension("x-kubernetes-embedded-resource").and_then(Value::as_bool) == Some(true);
        let embedded = embedded.then(|| Embedded { metadata: self.object_meta(schema) });
        let properties = schema.properties().map(|(name, field)| (name.to_owned(), self.node(field))).collect();
        let additional = schema.additional_properties().map(|values| self.node(values));
        let items = schema.items().map(|items| self.node(items));
        self.nodes[index] = Node {
            int_or_string: schema.is_int_or_string(),
            embedded,
            properties,
            additional,
            closed: schema.is_closed_object(),
            items,
        };
        index
    }

    fn object_meta(&mut self, schema: SchemaView<'_>) -> Option<usize> {
        if let Some(meta) = self.object_meta {
            return meta;
        }
        let meta = SchemaView::reference(schema.definitions(), OBJECT_META).map(|meta| self.node(meta));
        self.object_meta = Some(meta);
        meta
    }
}

/// What is known at one place of the document.
#[derive(Clone, Copy)]
enum Scope<'s> {
    /// A schema node: fields it does not know are problems, and so are
    /// repeated ones.
    Node(&'s StrictSchema, usize),
    /// No schema (anything goes): repeated fields are still problems.
    Free,
    /// Not judged at all: an int-or-string, or an array whose schema says
    /// nothing of its items.
    Unchecked,
}

/// What one decode collects on its way through the document.
#[derive(Default)]
struct Walk {
    /// The path of the field being read (`spec.containers[0]`); grows in
    /// place and shrinks back after each entry.
    path: String,
    problems: Vec<String>,
    pruned: bool,
}

/// Decodes one value in a scope.
struct Strict<'w, 'a> {
    scope: Scope<'a>,
    walk: &'w mut Walk,
}

impl<'de> DeserializeSeed<'de> for Strict<'_, '_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        match self.scope {
            Scope::Unchecked => serde::Deserialize::deserialize(deserializer),
            _ => deserializer.deserialize_any(self),
        }
    }
}

impl<'de> Visitor<'de> for Strict<'_, '_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let scope = match self.scope {
            Scope::Node(schema, node) => match schema.nodes[node].items {
                Some(items) => schema.scope(items),
                // An array where the schema has none: not ours to judge.
                None => Scope::Unchecked,
            },
            other => other,
        };
        let walk = self.walk;
        let parent = walk.path.len();
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        loop {
            use fmt::Write as _;
            let _ = write!(walk.path, "[{}]", items.len());
            let item = seq.next_element_seed(Strict { scope, walk: &mut *walk })?;
            walk.path.truncate(parent);
            match item {
                Some(item) => items.push(item),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let schema = match self.scope {
            Scope::Node(schema, node) => Some((schema, node)),
            _ => None,
        };
        let walk = self.walk;
        let parent = walk.path.len();
        let mut object = Map::new();
        // Keys already reported in this object, so each is reported once.
        let mut reported: Vec<String> = Vec::new();
        while let Some(KeyString(key)) = map.next_key()? {
            if parent > 0 {
                walk.path.push('.');
            }
            walk.path.push_str(&key);
            let entry = schema.map_or(Entry::Free, |(schema, node)| schema.entry(node, &key));
            let scope = match entry {
                Entry::Unknown => None,
                Entry::Free => Some(Scope::Free),
                Entry::Node(node) => schema.map(|(schema, _)| schema.scope(node)),
            };
            match scope {
                None => {
                    map.next_value::<IgnoredAny>()?;
                    walk.pruned = true;
                    if !reported.contains(&key) {
                        walk.problems.push(format!("unknown field {:?}", walk.path));
                        reported.push(key);
                    }
                }
                Some(scope) => {
                    if object.contains_key(&key) && !reported.contains(&key) {
                        walk.problems.push(format!("duplicate field {:?}", walk.path));
                        reported.push(key.clone());
                    }
                    let value = map.next_value_seed(Strict { scope, walk: &mut *walk })?;
                    object.insert(key, value);
                }
            }
            walk.path.truncate(parent);
        }
        Ok(Value::Object(object))
    }
}

/// A map key; YAML keys may be numbers or booleans, kept as their text.
struct KeyString(String);

impl<'de> serde::Deserialize<'de> for KeyString {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<KeyString, D::Error> {
        struct Key;
        impl Visitor<'_> for Key {
            type Value = KeyString;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map key")
            }
            fn visit_str<E>(self, v: &str) -> Result<KeyString, E> {
                Ok(KeyString(v.to_owned()))
            }
            fn visit_string<E>(self, v: String) -> Result<KeyString, E> {
                Ok(KeyString(v))
            }
            fn visit_bool<E>(self, v: bool) -> Result<KeyString, E> {
                Ok(KeyString(v.to_string()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<KeyString, E> {
                Ok(KeyString(v.to_string()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<KeyString, E> {
                Ok(KeyString(v.to_string()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<KeyString, E> {
                Ok(KeyString(v.to_string()))
            }
            fn visit_unit<E>(self) -> Result<KeyString, E> {
                Ok(KeyString("null".into()))
            }
        }
        deserializer.deserialize_any(Key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::schema::tests::definitions;
    use serde_json::json;

    #[test]
    fn problems_in_document_order_and_unknown_fields_left_out() {
        let defs = definitions();
        let kind = StrictSchema::compile(SchemaView::reference(&defs, "Kind").unwrap());
        let kind = &kind;
        let body = br#"{"metadata": {"name": "a", "name": "b", "unknownMeta": 1},
            "spec": {"zzz": {"deep": [1]}, "dupe": 1, "dupe": 2,
                     "containers": [{"name": "c", "image": "x", "image": "y", "bad": 1}],
                     "port": {"a": 1, "a": 2}, "raw": {"r": 1, "r": 2}}}"#;
        let decoded = decode_json(Some(kind), body).unwrap();
        assert_eq!(
            decoded.problems,
            [
                r#"duplicate field "metadata.name""#,
                r#"unknown field "metadata.unknownMeta""#,
                r#"unknown field "spec.zzz""#,
                r#"unknown field "spec.dupe""#,
                r#"duplicate field "spec.containers[0].image""#,
                r#"unknown field "spec.containers[0].bad""#,
                // free-form: no unknown fields, but still no repeats
                r#"duplicate field "spec.raw.r""#,
            ]
        );
        assert!(decoded.pruned);
        assert_eq!(
            decoded.value,
            json!({"metadata": {"name": "b"}, "spec": {
                "containers": [{"name": "c", "image": "y"}],
                "port": {"a": 2}, "raw": {"r": 2}}})
        );
        let clean = decode_json(Some(kind), br#"{"spec": {"containers": [{"name": "c"}]}}"#).unwrap();
        assert!(clean.problems.is_empty() && !clean.pruned);
    }

    #[test]
    fn finds_the_unknown_fields_the_schema_walker_finds() {
        let defs = definitions();
        let view = SchemaView::reference(&defs, "Kind").unwrap();
        let kind = StrictSchema::compile(view);
        let objects = [
            json!({"apiVersion": "v1", "kind": "K", "metadata": {"name": "x", "bogus": 1, "labels": {"a": "b"}}}),
            json!({"foo": 1, "spec": {"containers": [{"name": "a"}, {"name": "b", "imag": "x"}]}}),
            json!({"spec": {"ports": {"http": {"number": 80, "nmber": 1}}, "port": {"x": 1}}}),
            json!({"spec": {"raw": {"anything": {"goes": [1]}}, "free": {"a": "x", "b": {"c": 1}}}}),
            json!({"spec": {"matrix": [[{"number": 1}], [{"numbr": 2}]], "containers": "nope"}}),
        ];
        for object in objects {
            let body = serde_json::to_vec(&object).unwrap();
            let decoded = decode_json(Some(&kind), &body).unwrap();
            let unknown: Vec<String> =
                view.unknown_fields(&object).iter().map(|p| format!("unknown field {p:?}")).collect();
            assert_eq!(decoded.problems, unknown, "{object}");
            let mut pruned = object.clone();
            view.prune_unknown_fields(&mut pruned);
            assert_eq!(decoded.value, pruned, "{object}");
        }
    }

    #[test]
    fn without_a_schema_only_repeats_are_problems() {
        let decoded = decode_json(None, br#"{"a": {"b": 1, "b": [{"c": 1, "c": 2}]}, "z": 1.5}"#).unwrap();
        assert_eq!(decoded.problems, [r#"duplicate field "a.b""#, r#"duplicate field "a.b[0].c""#]);
        assert_eq!(decoded.value, json!({"a": {"b": [{"c": 2}]}, "z": 1.5}));
        assert!(!decoded.pruned);
    }

    #[test]
    fn yaml_decodes_the_same_way() {
        let defs = definitions();
        let kind = StrictSchema::compile(SchemaView::reference(&defs, "Kind").unwrap());
        let kind = &kind;
        let yaml = b"spec:\n  foo: 1\n  containers:\n  - name: c\n    image: i\n    image: j\nmetadata:\n  labels:\n    1: true\n";
        let decoded = decode_yaml(Some(kind), yaml).unwrap();
        assert_eq!(decoded.problems, [r#"unknown field "spec.foo""#, r#"duplicate field "spec.containers[0].image""#]);
        assert_eq!(
            decoded.value,
            json!({"spec": {"containers": [{"name": "c", "image": "j"}]}, "metadata": {"labels": {"1": true}}})
        );
    }

    #[test]
    fn agrees_with_serde_json_on_what_it_keeps() {
        let body = br#"{"n": [1, -2, 3.5, 1e400, null, true, "s\u00e9"], "o": {"x": {}}, "e": []}"#;
        let expected: Result<Value, _> = serde_json::from_slice(body);
        match expected {
            Ok(expected) => assert_eq!(decode_json(None, body).unwrap().value, expected),
            // serde_json refuses numbers out of range; so must this.
            Err(_) => assert!(decode_json(None, body).is_err()),
        }
        let body = br#"{"n": [1, -2, 3.5, null, true, "s\u00e9"], "o": {"x": {}}, "e": []}"#;
        assert_eq!(decode_json(None, body).unwrap().value, serde_json::from_slice::<Value>(body).unwrap());
        for bad in [&b"{"[..], b"{\"a\": 1} x", b"[1,]", b""] {
            assert!(decode_json(None, bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
