//! Strategic merge patch (`application/strategic-merge-patch+json`).
//!
//! Maps merge recursively and `null` deletes a key. Lists the schema marks
//! as merged by key (`containers` by `name`, ...) merge item by item; sets of
//! scalars (`finalizers`) merge as unions; every other list is replaced.
//! Directives: `$patch: replace|delete|merge` on maps and list items,
//! `$retainKeys`, `$setElementOrder/<field>` and
//! `$deleteFromPrimitiveList/<field>`.

use serde_json::{Map, Value};

use super::shape::{FieldMeta, ListType, Shape};

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";
const RETAIN_KEYS_FORMAT: &str = "invalid patch format of retainKeys";

/// Why a strategic merge patch could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct PatchError {
    /// What is wrong, worded like upstream.
    pub message: String,
    /// How upstream answers it.
    pub kind: PatchErrorKind,
}

/// The HTTP answer upstream gives a failed strategic merge patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchErrorKind {
    /// 400 BadRequest: a malformed directive or document.
    BadRequest,
    /// 500 with no reason: upstream's untyped merge errors (a missing merge
    /// key, an unknown `$patch`), which kubectl prints as
    /// `Error from server: <message>`.
    Unknown,
}

fn bad(message: impl Into<String>) -> PatchError {
    PatchError { message: message.into(), kind: PatchErrorKind::BadRequest }
}

fn unknown(message: impl Into<String>) -> PatchError {
    PatchError { message: message.into(), kind: PatchErrorKind::Unknown }
}

/// A value as Go's `%v` prints the decoded JSON (`map[a:1 b:[x y]]`).
fn go_format(value: &Value) -> String {
    match value {
        Value::Null => "<nil>".into(),
        Value::String(s) => s.clone(),
        Value::Array(items) => format!("[{}]", items.iter().map(go_format).collect::<Vec<_>>().join(" ")),
        Value::Object(map) => {
            let mut pairs: Vec<(&String, &Value)> = map.iter().collect();
            pairs.sort_by(|a, b| a.0.cmp(b.0));
            let pairs: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}:{}", go_format(v))).collect();
            format!("map[{}]", pairs.join(" "))
        }
        other => other.to_string(),
    }
}

fn bad_patch_type(directive: &Value, map: &Map<String, Value>) -> PatchError {
    unknown(format!("unknown patch type: {} in map: {}", go_format(directive), go_format(&Value::Object(map.clone()))))
}

/// Applies a strategic merge patch to `original` (both JSON objects), using
/// the schema shape of the object for list merge keys.
pub fn strategic_merge(original: &Value, patch: &Value, shape: Shape<'_>) -> Result<Value, PatchError> {
    let (Some(original), Some(patch)) = (original.as_object(), patch.as_object()) else {
        return Err(bad("invalid JSON document"));
    };
    merge_map(original.clone(), patch, shape).map(Value::Object)
}

fn is_directive(key: &str) -> bool {
    key == DIRECTIVE
        || key == RETAIN_KEYS
        || key.starts_with(SET_ELEMENT_ORDER)
        || key.starts_with(DELETE_FROM_PRIMITIVE_LIST)
}

fn merge_map(
    mut original: Map<String, Value>,
    patch: &Map<String, Value>,
    shape: Shape<'_>,
) -> Result<Map<String, Value>, PatchError> {
    if let Some(directive) = patch.get(DIRECTIVE) {
        match directive.as_str() {
            Some("replace") => {
                let mut replaced = patch.clone();
                replaced.remove(DIRECTIVE);
                return merge_map(Map::new(), &replaced, shape);
            }
            Some("delete") => return Ok(Map::new()),
            _ => return Err(bad_patch_type(directive, patch)),
        }
    }
    // The live order of lists the patch orders, before merging.
    let server_orders: Vec<(String, Vec<Value>)> = patch
        .keys()
        .filter_map(|key| key.strip_prefix(SET_ELEMENT_ORDER))
        .map(|field| {
            let live = original.get(field).and_then(Value::as_array).cloned();
            (field.to_owned(), live.unwrap_or_default())
        })
        .collect();
    if let Some(retain) = patch.get(RETAIN_KEYS) {
        let retain: Vec<&str> = retain
            .as_array()
            .and_then(|keys| keys.iter().map(Value::as_str).collect())
            .ok_or_else(|| bad(RETAIN_KEYS_FORMAT))?;
        if patch.iter().any(|(k, v)| !is_directive(k) && !v.is_null() && !retain.contains(&k.as_str())) {
            return Err(bad(RETAIN_KEYS_FORMAT));
        }
        original.retain(|k, _| retain.contains(&k.as_str()));
    }
    for (key, values) in patch {
        let Some(field) = key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) else {
            continue;
        };
        let values = values.as_array().ok_or_else(|| bad("invalid patch format of primitive list"))?;
        if let Some(list) = original.get_mut(field).and_then(Value::as_array_mut) {
            // Upstream leaves the rest deduplicated and sorted as text.
            list.retain(|item| !values.contains(item));
            list.sort_by_key(go_format);
            list.dedup();
        }
    }
    for (key, value) in patch {
        if is_directive(key) {
            continue;
        }
        if value.is_null() {
            original.remove(key);
            continue;
        }
        let (child, meta) = shape.field(key);
        let merged = match (original.remove(key), value) {
            (Some(Value::Object(old)), Value::Object(patch)) => Value::Object(merge_map(old, patch, child)?),
            (Some(Value::Array(old)), Value::Array(patch)) => Value::Array(merge_list(old, patch, child, &meta)?),
            (_, Value::Object(patch)) => Value::Object(merge_map(Map::new(), patch, child)?),
            (_, Value::Array(patch)) => Value::Array(merge_list(Vec::new(), patch, child, &meta)?),
            (_, scalar) => scalar.clone(),
        };
        original.insert(key.clone(), merged);
    }
    for (key, order) in patch {
        let Some(field) = key.strip_prefix(SET_ELEMENT_ORDER) else {
            continue;
        };
        let order = order.as_array().ok_or_else(|| bad("invalid patch format of setElementOrder list"))?;
        let (_, meta) = shape.field(field);
        if let Some(Value::Array(list)) = original.get_mut(field) {
            let identity = |item: &Value| match merge_key(&meta) {
                Some(merge_key) => item.get(merge_key).cloned().unwrap_or(Value::Null),
                None => item.clone(),
            };
            let order: Vec<Value> = order.iter().map(identity).collect();
            let server: Vec<Value> = server_orders
                .iter()
                .find(|(f, _)| f == field)
                .map(|(_, live)| live.iter().map(identity).collect())
                .unwrap_or_default();
            reorder(list, &order, &server, identity);
        }
    }
    Ok(original)
}

/// The strategic merge key of a list, if it merges by key.
fn merge_key(meta: &FieldMeta) -> Option<&str> {
    match &meta.list {
        ListType::Map(keys) if meta.strategic_merge => keys.first().map(String::as_str),
        _ => None,
    }
}

fn merge_list(
    original: Vec<Value>,
    patch: &[Value],
    items: Shape<'_>,
    meta: &FieldMeta,
) -> Result<Vec<Value>, PatchError> {
    let directive_of = |item: &Value| item.get(DIRECTIVE).and_then(Value::as_str).map(str::to_owned);
    if let Some(key) = merge_key(meta) {
        let replace = patch.iter().any(|item| directive_of(item).as_deref() == Some("replace"));
        let mut merged = if replace { Vec::new() } else { original };
        for item in patch {
            let Some(map) = item.as_object() else {
                return Err(unknown(format!(
                    "list element types are not identical: {}",
                    go_format(&Value::Array(patch.to_vec()))
                )));
            };
            match (directive_of(item).as_deref(), map.get(DIRECTIVE)) {
                (Some("replace"), _) => continue,
                (Some("delete"), _) => {
                    let id = map.get(key).ok_or_else(|| unknown("delete patch type with no merge key defined"))?;
                    merged.retain(|old| old.get(key) != Some(id));
                    continue;
                }
                (Some("merge"), _) => {
                    return Err(unknown("merging lists cannot yet be specified in the patch"));
                }
                (_, Some(directive)) => return Err(bad_patch_type(directive, map)),
                (_, None) => {}
            }
            let id = map.get(key).ok_or_else(|| missing_key(item, key))?;
            match merged.iter_mut().find(|old| old.get(key) == Some(id)) {
                Some(Value::Object(old)) => {
                    *old = merge_map(std::mem::take(old), map, items)?;
                }
                Some(old) => *old = Value::Object(merge_map(Map::new(), map, items)?),
                None => merged.push(Value::Object(merge_map(Map::new(), map, items)?)),
            }
        }
        return Ok(merged);
    }
    if meta.list == ListType::Set && meta.strategic_merge {
        let mut merged = original;
        for item in patch {
            if !merged.contains(item) {
                merged.push(item.clone());
            }
        }
        return Ok(merged);
    }
    // Replaced: nested maps still lose their directives.
    patch
        .iter()
        .filter(|item| directive_of(item).as_deref() != Some("delete"))
        .map(|item| match item.as_object() {
            Some(map) => merge_map(Map::new(), map, items).map(Value::Object),
            None => Ok(item.clone()),
        })
        .collect()
}

fn missing_key(item: &Value, key: &str) -> PatchError {
    unknown(format!("map: {} does not contain declared merge key: {key}", go_format(item)))
}

/// Orders a merged list like upstream: the items the patch orders
/// (`$setElementOrder`) come in that order; the other (server-only) items
/// keep their live order and are interleaved where the live order puts them
/// before an ordered item.
fn reorder(list: &mut Vec<Value>, order: &[Value], server: &[Value], identity: impl Fn(&Value) -> Value) {
    let position = |list: &[Value], id: &Value| list.iter().position(|o| o == id);
    let (mut ordered, server_only): (Vec<Value>, Vec<Value>) =
        list.drain(..).partition(|item| position(order, &identity(item)).is_some());
    ordered.sort_by_key(|item| position(order, &identity(item)));
    let mut server_only = server_only.into_iter().peekable();
    let mut ordered = ordered.into_iter().peekable();
    loop {
        let take_server = match (server_only.peek(), ordered.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(left), Some(right)) => {
                match (position(server, &identity(left)), position(server, &identity(right))) {
                    (Some(l), Some(r)) => l < r,
                    _ => false,
                }
            }
        };
        let next = if take_server { server_only.next() } else { ordered.next() };
        list.extend(next);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ResourceInfo;
    use crate::api::patch::Schemas;
    use k8s_openapi::api::{apps::v1::Deployment, core::v1::Pod};
    use serde_json::json;

    fn pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"app": "web", "tier": "front"}, "finalizers": ["a"]},
            "spec": {
                "containers": [
                    {"name": "c", "image": "nginx:1", "ports": [{"containerPort": 80}],
                     "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
                    {"name": "d", "image": "busybox", "args": ["x", "y"]}
                ],
                "tolerations": [{"key": "k", "operator": "Exists"}],
                "volumes": [{"name": "v", "emptyDir": {}}]
            }
        })
    }

    #[test]
    fn patches_like_upstream() {
        let schemas = Schemas::of(ResourceInfo::of::<Pod>().schema.as_ref().unwrap());
        type Check = Box<dyn Fn(&Value)>;
        let cases: Vec<(&str, Value, Check)> = vec![
            (
                "containers merge by name",
                json!({"spec": {"containers": [{"name": "c", "image": "nginx:2"}, {"name": "e", "image": "e"}]}}),
                Box::new(|v: &Value| {
                    let containers = v["spec"]["containers"].as_array().unwrap();
                    assert_eq!(containers.len(), 3);
                    assert_eq!(containers[0]["image"], "nginx:2");
                    assert_eq!(containers[0]["ports"][0]["containerPort"], 80);
                    assert_eq!(containers[1]["name"], "d");
                    assert_eq!(containers[2]["name"], "e");
                }),
            ),
            (
                "null deletes",
                json!({"metadata": {"labels": {"tier": null}}, "spec": {"volumes": null}}),
                Box::new(|v: &Value| {
                    assert_eq!(v["metadata"]["labels"], json!({"app": "web"}));
                    assert!(v["spec"].get("volumes").is_none());
                }),
            ),
            (
                "$patch delete on a list item",
                json!({"spec": {"containers": [{"name": "d", "$patch": "delete"}]}}),
                Box::new(|v: &Value| {
                    assert_eq!(v["spec"]["containers"].as_array().unwrap().len(), 1);
                    assert_eq!(v["spec"]["containers"][0]["name"], "c");
                }),
            ),
            (
                "$patch replace on a list",
                json!({"spec": {"containers": [{"$patch": "replace"}, {"name": "z", "image": "z"}]}}),
                Box::new(|v: &Value| {
                    assert_eq!(v["spec"]["containers"], json!([{"name": "z", "image": "z"}]));
                }),
            ),
            (
                "$patch replace on a map",
                json!({"metadata": {"labels": {"$patch": "replace", "only": "me"}}}),
                Box::new(|v: &Value| assert_eq!(v["metadata"]["labels"], json!({"only": "me"}))),
            ),
            (
                "$patch delete on a map",
                json!({"metadata": {"labels": {"$patch": "delete"}}}),
                Box::new(|v: &Value| assert_eq!(v["metadata"]["labels"], json!({}))),
            ),
            (
                "atomic lists are replaced",
                json!({"spec": {"tolerations": [{"key": "j", "operator": "Exists"}],
                                 "containers": [{"name": "d", "args": ["z"]}]}}),
                Box::new(|v: &Value| {
                    assert_eq!(v["spec"]["tolerations"], json!([{"key": "j", "operator": "Exists"}]));
                    assert_eq!(v["spec"]["containers"][1]["args"], json!(["z"]));
                }),
            ),
            (
                "nested merge keys (env by name)",
                json!({"spec": {"containers": [{"name": "c", "env": [{"name": "B", "value": "3"}, {"name": "A", "$patch": "delete"}]}]}}),
                Box::new(|v: &Value| {
                    assert_eq!(v["spec"]["containers"][0]["env"], json!([{"name": "B", "value": "3"}]));
                }),
            ),
            (
                "$setElementOrder",
                json!({"spec": {"$setElementOrder/containers": [{"name": "d"}, {"name": "c"}],
                                 "containers": [{"name": "c", "image": "nginx:3"}]}}),
                Box::new(|v: &Value| {
                    let names: Vec<&str> = v["spec"]["containers"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|c| c["name"].as_str().unwrap())
                        .collect();
                    assert_eq!(names, ["d", "c"]);
                    assert_eq!(v["spec"]["containers"][1]["image"], "nginx:3");
                }),
            ),
            (
                "$setElementOrder keeps server-only items in place",
                json!({"spec": {"$setElementOrder/containers": [{"name": "e"}, {"name": "c"}],
                                 "containers": [{"name": "e", "image": "e"}]}}),
                Box::new(|v: &Value| {
                    let names: Vec<&str> = v["spec"]["containers"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|c| c["name"].as_str().unwrap())
                        .collect();
                    assert_eq!(names, ["e", "c", "d"]);
                }),
            ),
            (
                "primitive sets merge",
                json!({"metadata": {"finalizers": ["b", "a"]}}),
                Box::new(|v: &Value| assert_eq!(v["metadata"]["finalizers"], json!(["a", "b"]))),
            ),
            (
                "$deleteFromPrimitiveList",
                json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
                Box::new(|v: &Value| assert_eq!(v["metadata"]["finalizers"], json!([]))),
            ),
            (
                "$setElementOrder on a primitive list",
                json!({"metadata": {"finalizers": ["b"], "$setElementOrder/finalizers": ["b", "a"]}}),
                Box::new(|v: &Value| assert_eq!(v["metadata"]["finalizers"], json!(["b", "a"]))),
            ),
            (
                "$retainKeys drops the other keys",
                json!({"spec": {"volumes": [{"name": "v", "$retainKeys": ["name", "hostPath"], "hostPath": {"path": "/x"}}]}}),
                Box::new(|v: &Value| {
                    assert_eq!(v["spec"]["volumes"], json!([{"name": "v", "hostPath": {"path": "/x"}}]));
                }),
            ),
            (
                "directives in new values are stripped",
                json!({"spec": {"affinity": {"$patch": "replace", "nodeAffinity": {}}}}),
                Box::new(|v: &Value| assert_eq!(v["spec"]["affinity"], json!({"nodeAffinity": {}}))),
            ),
        ];
        for (name, patch, check) in cases {
            let patched = strategic_merge(&pod(), &patch, schemas.root()).unwrap_or_else(|e| panic!("{name}: {e}"));
            println!("{name}");
            check(&patched);
        }
    }

    #[test]
    fn refuses_bad_patches() {
        let schemas = Schemas::of(ResourceInfo::of::<Pod>().schema.as_ref().unwrap());
        let missing_key = json!({"spec": {"containers": [{"image": "x"}]}});
        let error = strategic_merge(&pod(), &missing_key, schemas.root()).unwrap_err();
        assert_eq!(error.message, "map: map[image:x] does not contain declared merge key: name");
        assert_eq!(error.kind, PatchErrorKind::Unknown);
        let retain = json!({"spec": {"volumes": [{"name": "v", "$retainKeys": ["name"], "hostPath": {"path": "/x"}}]}});
        assert_eq!(
            strategic_merge(&pod(), &retain, schemas.root()).unwrap_err(),
            bad("invalid patch format of retainKeys")
        );
        let unknown = json!({"metadata": {"$patch": "nope"}});
        assert_eq!(
            strategic_merge(&pod(), &unknown, schemas.root()).unwrap_err().message,
            "unknown patch type: nope in map: map[$patch:nope]"
        );
    }

    #[test]
    fn services_and_deployment_strategies() {
        use k8s_openapi::api::core::v1::Service;
        let schemas = Schemas::of(ResourceInfo::of::<Service>().schema.as_ref().unwrap());
        let service = json!({"spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443}]}});
        let patch = json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}]}});
        let patched = strategic_merge(&service, &patch, schemas.root()).unwrap();
        assert_eq!(patched["spec"]["ports"], json!([{"port": 80, "targetPort": 9090}, {"port": 443}]));

        let schemas = Schemas::of(ResourceInfo::of::<Deployment>().schema.as_ref().unwrap());
        let deployment = json!({"spec": {"strategy": {"type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 1}}}});
        let patch = json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}});
        let patched = strategic_merge(&deployment, &patch, schemas.root()).unwrap();
        assert_eq!(patched["spec"]["strategy"], json!({"type": "Recreate"}));
    }

    #[test]
    fn deployment_image_patch() {
        let schemas = Schemas::of(ResourceInfo::of::<Deployment>().schema.as_ref().unwrap());
        let deployment = json!({"spec": {"replicas": 1, "template": {"spec": {"containers": [
            {"name": "web", "image": "nginx:1"}, {"name": "side", "image": "s"}]}}}});
        let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:2"}]}}}});
        let patched = strategic_merge(&deployment, &patch, schemas.root()).unwrap();
        assert_eq!(
            patched["spec"]["template"]["spec"]["containers"],
            json!([{"name": "web", "image": "nginx:2"}, {"name": "side", "image": "s"}])
        );
    }
}
