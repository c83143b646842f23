//! Field paths and sets of them, in upstream's `FieldsV1` encoding.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::{Map, Value};

use crate::api::patch::{FieldMeta, ListType, Shape, meta};

/// Why a `fieldsV1` tree or one of its path elements does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FieldSetError(String);

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathElement {
    /// A field of a map or struct (`f:name`).
    Field(String),
    /// A list-map item by its keys (`k:{"name":"c"}`), as compact JSON with
    /// the keys sorted.
    Key(String),
    /// A set item by its value (`v:"x"`), as compact JSON.
    Value(String),
    /// A list item by position (`i:0`).
    Index(usize),
}

/// A field path from the object root.
pub type Path = Vec<PathElement>;

impl PathElement {
    /// The `FieldsV1` key, e.g. `f:spec`.
    pub fn encode(&self) -> String {
        match self {
            PathElement::Field(name) => format!("f:{name}"),
            PathElement::Key(key) => format!("k:{key}"),
            PathElement::Value(value) => format!("v:{value}"),
            PathElement::Index(index) => format!("i:{index}"),
        }
    }

    /// Parses a `FieldsV1` key.
    pub fn decode(text: &str) -> Result<PathElement, FieldSetError> {
        let (kind, rest) =
            text.split_once(':').ok_or_else(|| FieldSetError(format!("invalid field path element {text:?}")))?;
        let json = || {
            serde_json::from_str::<Value>(rest)
                .map_err(|e| FieldSetError(format!("invalid field path element {text:?}: {e}")))
        };
        Ok(match kind {
            "f" => PathElement::Field(rest.to_owned()),
            "k" => match json()? {
                Value::Object(map) => PathElement::Key(canonical_key(map.iter())),
                _ => return Err(FieldSetError(format!("invalid key field path element {text:?}"))),
            },
            "v" => PathElement::Value(json()?.to_string()),
            "i" => PathElement::Index(
                rest.parse().map_err(|_| FieldSetError(format!("invalid index field path element {text:?}")))?,
            ),
            _ => return Err(FieldSetError(format!("invalid field path element {text:?}"))),
        })
    }
}

impl fmt::Display for PathElement {
    /// Upstream's path notation: `.name`, `[name="c"]`, `[="x"]`, `[0]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathElement::Field(name) => write!(f, ".{name}"),
            PathElement::Key(key) => {
                let map: Map<String, Value> = serde_json::from_str(key).unwrap_or_default();
                let mut pairs: Vec<(&String, &Value)> = map.iter().collect();
                pairs.sort_by(|a, b| a.0.cmp(b.0));
                let parts: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
                write!(f, "[{}]", parts.join(","))
            }
            PathElement::Value(value) => write!(f, "[={value}]"),
            PathElement::Index(index) => write!(f, "[{index}]"),
        }
    }
}

/// A path in upstream's notation, e.g. `.spec.containers[name="c"].image`.
pub fn path_string(path: &[PathElement]) -> String {
    path.iter().map(ToString::to_string).collect()
}

fn canonical_key<'a>(pairs: impl Iterator<Item = (&'a String, &'a Value)>) -> String {
    let sorted: BTreeMap<&String, &Value> = pairs.collect();
    let mut map = Map::new();
    for (k, v) in sorted {
        map.insert(k.clone(), v.clone());
    }
    Value::Object(map).to_string()
}

/// The path element of a list-map item: its key fields (defaulted where
/// upstream defaults them, e.g. `protocol: TCP`).
pub fn item_key(item: &Value, keys: &[String]) -> PathElement {
    let mut pairs = Map::new();
    for key in keys {
        match item.get(key) {
            Some(value) if !value.is_null() => {
                pairs.insert(key.clone(), value.clone());
            }
            _ => {
                if let Some(default) = meta::key_default(key) {
                    pairs.insert(key.clone(), default.into());
                }
            }
        }
    }
    PathElement::Key(canonical_key(pairs.iter()))
}

fn key_matches(item: &Value, key: &str) -> bool {
    let Ok(Value::Object(wanted)) = serde_json::from_str::<Value>(key) else {
        return false;
    };
    wanted.iter().all(|(k, v)| match item.get(k) {
        Some(found) if !found.is_null() => found == v,
        _ => meta::key_default(k).is_some_and(|d| v == d),
    })
}

/// The value at `path` in `value`, if there is one.
pub fn value_at<'a>(value: &'a Value, path: &[PathElement]) -> Option<&'a Value> {
    let mut current = value;
    for element in path {
        current = match element {
            PathElement::Field(name) => current.get(name)?,
            PathElement::Key(key) => current.as_array()?.iter().find(|item| key_matches(item, key))?,
            PathElement::Value(text) => current.as_array()?.iter().find(|item| item.to_string() == *text)?,
            PathElement::Index(index) => current.as_array()?.get(*index)?,
        };
    }
    Some(current)
}

/// Removes the value at `path` (a field, or a list item); false if absent.
pub fn remove_at(value: &mut Value, path: &[PathElement]) -> bool {
    let Some((last, parent)) = path.split_last() else {
        return false;
    };
    let mut current = value;
    for element in parent {
        let next = match element {
            PathElement::Field(name) => current.get_mut(name),
            PathElement::Key(key) => {
                current.as_array_mut().and_then(|items| items.iter_mut().find(|item| key_matches(item, key)))
            }
            PathElement::Value(text) => {
                current.as_array_mut().and_then(|items| items.iter_mut().find(|item| item.to_string() == *text))
            }
            PathElement::Index(index) => current.as_array_mut().and_then(|a| a.get_mut(*index)),
        };
        match next {
            Some(next) => current = next,
            None => return false,
        }
    }
    match (last, current) {
        (PathElement::Field(name), Value::Object(map)) => map.remove(name).is_some(),
        (PathElement::Key(key), Value::Array(items)) => {
            let before = items.len();
            items.retain(|item| !key_matches(item, key));
            items.len() != before
        }
        (PathElement::Value(text), Value::Array(items)) => {
            // `text` is the JSON of a set member; text that is not JSON names none.
            let Ok(member) = serde_json::from_str::<Value>(text) else { return false };
            let before = items.len();
            items.retain(|item| *item != member);
            items.len() != before
        }
        (PathElement::Index(index), Value::Array(items)) if *index < items.len() => {
            items.remove(*index);
            true
        }
        _ => false,
    }
}

/// A set of field paths: what one manager owns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet(BTreeSet<Path>);

impl FieldSet {
    /// The empty set.
    pub fn new() -> FieldSet {
        FieldSet::default()
    }

    /// Adds a path.
    pub fn insert(&mut self, path: Path) {
        self.0.insert(path);
    }

    /// True if the path itself is in the set.
    pub fn contains(&self, path: &[PathElement]) -> bool {
        self.0.contains(path)
    }

    /// True if the path or any path below it is in the set.
    pub fn contains_prefix(&self, prefix: &[PathElement]) -> bool {
        self.0.range(prefix.to_vec()..).next().is_some_and(|p| p.starts_with(prefix))
    }

    /// Keeps only the paths `keep` accepts.
    pub fn retain(&mut self, keep: impl FnMut(&Path) -> bool) {
        self.0.retain(keep);
    }

    /// True if the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The paths, in order.
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.0.iter()
    }

    /// The paths in `self` or `other`.
    pub fn union(&self, other: &FieldSet) -> FieldSet {
        FieldSet(self.0.union(&other.0).cloned().collect())
    }

    /// The paths in `self` but not in `other`.
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        FieldSet(self.0.difference(&other.0).cloned().collect())
    }

    /// The paths in both.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        FieldSet(self.0.intersection(&other.0).cloned().collect())
    }

    /// The `fieldsV1` JSON of the set.
    pub fn to_fields_v1(&self) -> Value {
        #[derive(Default)]
        struct Node {
            member: bool,
            children: BTreeMap<String, Node>,
        }
        fn render(node: &Node) -> Value {
            let mut map = Map::new();
            if node.member && !node.children.is_empty() {
                map.insert(".".into(), Value::Object(Map::new()));
            }
            for (key, child) in &node.children {
                map.insert(key.clone(), render(child));
            }
            Value::Object(map)
        }
        let mut root = Node::default();
        for path in &self.0 {
            let mut node = &mut root;
            for element in path {
                node = node.children.entry(element.encode()).or_default();
            }
            node.member = true;
        }
        render(&root)
    }

    /// Parses `fieldsV1` JSON.
    pub fn from_fields_v1(value: &Value) -> Result<FieldSet, FieldSetError> {
        fn walk(value: &Value, path: &mut Path, set: &mut FieldSet) -> Result<(), FieldSetError> {
            let map =
                value.as_object().ok_or_else(|| FieldSetError(format!("fieldsV1 must hold objects, found {value}")))?;
            for (key, child) in map {
                if key == "." {
                    if !path.is_empty() {
                        set.insert(path.clone());
                    }
                    continue;
                }
                path.push(PathElement::decode(key)?);
                if child.as_object().is_some_and(Map::is_empty) {
                    set.insert(path.clone());
                } else {
                    walk(child, path, set)?;
                }
                path.pop();
            }
            Ok(())
        }
        let mut set = FieldSet::new();
        walk(value, &mut Vec::new(), &mut set)?;
        Ok(set)
    }

    /// The leaf paths of a value as its schema describes it: scalars, atomic
    /// lists and maps, empty maps, set items and list-map items (with their
    /// fields). This is what an applier owns.
    pub fn of_value(value: &Value, shape: Shape<'_>) -> FieldSet {
        let mut set = FieldSet::new();
        walk_value(value, shape, &FieldMeta::default(), &mut Vec::new(), &mut set);
        set
    }
}

fn walk_value(value: &Value, shape: Shape<'_>, meta: &FieldMeta, path: &mut Path, set: &mut FieldSet) {
    match value {
        Value::Object(map) if meta.atomic_map || map.is_empty() => {
            if !path.is_empty() {
                set.insert(path.clone())
            }
        }
        Value::Object(map) => walk_fields(map, shape, path, set),
        Value::Array(items) => match &meta.list {
            ListType::Atomic => set.insert(path.clone()),
            _ if items.is_empty() => set.insert(path.clone()),
            ListType::Set => {
                for item in items {
                    path.push(PathElement::Value(item.to_string()));
                    set.insert(path.clone());
                    path.pop();
                }
            }
            ListType::Map(keys) => {
                let item_shape = shape.items();
                for item in items {
                    path.push(item_key(item, keys));
                    set.insert(path.clone());
                    if let Some(map) = item.as_object() {
                        walk_fields(map, item_shape, path, set);
                    }
                    path.pop();
                }
            }
        },
        _ => {
            if !path.is_empty() {
                set.insert(path.clone())
            }
        }
    }
}

fn walk_fields(map: &Map<String, Value>, shape: Shape<'_>, path: &mut Path, set: &mut FieldSet) {
    for (key, child) in map {
        let (child_shape, child_meta) = shape.field(key);
        path.push(PathElement::Field(key.clone()));
        walk_value(child, child_shape, &child_meta, path, set);
        path.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ResourceInfo;
    use crate::api::patch::Schemas;
    use k8s_openapi::api::apps::v1::Deployment;
    use serde_json::json;

    #[test]
    fn encodes_like_upstream() {
        let schemas = Schemas::of(ResourceInfo::of::<Deployment>().schema.as_ref().unwrap());
        let object = json!({
            "metadata": {"labels": {"app": "web"}, "finalizers": ["x"]},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"spec": {"containers": [
                    {"name": "c", "image": "nginx", "ports": [{"containerPort": 80}], "args": ["a"]}
                ]}}
            }
        });
        let set = FieldSet::of_value(&object, schemas.root());
        let encoded = set.to_fields_v1();
        assert_eq!(
            encoded,
            json!({
                "f:metadata": {"f:finalizers": {"v:\"x\"": {}}, "f:labels": {"f:app": {}}},
                "f:spec": {
                    "f:replicas": {},
                    "f:selector": {},
                    "f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {
                        ".": {}, "f:args": {}, "f:image": {}, "f:name": {},
                        "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}
                    }}}}
                }
            })
        );
        assert_eq!(FieldSet::from_fields_v1(&encoded).unwrap(), set);
        let image: Path = vec![
            PathElement::Field("spec".into()),
            PathElement::Field("template".into()),
            PathElement::Field("spec".into()),
            PathElement::Field("containers".into()),
            item_key(&json!({"name": "c"}), &["name".into()]),
            PathElement::Field("image".into()),
        ];
        assert!(set.contains(&image));
        assert_eq!(path_string(&image), ".spec.template.spec.containers[name=\"c\"].image");
        assert_eq!(value_at(&object, &image), Some(&json!("nginx")));
        let port = &object["spec"]["template"]["spec"]["containers"][0]["ports"][0];
        let mut port_path = image[..5].to_vec();
        port_path.push(PathElement::Field("ports".into()));
        port_path.push(item_key(port, &["containerPort".into(), "protocol".into()]));
        assert_eq!(value_at(&object, &port_path), Some(port));
        assert_eq!(path_string(&port_path[5..]), ".ports[containerPort=80,protocol=\"TCP\"]");
        let mut removed = object.clone();
        assert!(remove_at(&mut removed, &port_path));
        assert_eq!(removed["spec"]["template"]["spec"]["containers"][0]["ports"], json!([]));
    }
}
