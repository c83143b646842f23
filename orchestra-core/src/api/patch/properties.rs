//! Property tests of the merge patches: neither patch panics on any
//! document and patch; JSON merge patch (RFC 7386) turns a document into
//! any target through the patch a diff makes, and applying a patch twice
//! changes nothing more; a strategic merge patch without lists or
//! directives is a JSON merge patch; lists merged by key (a pod's
//! containers by name) keep one item per name, in upstream's order.

use k8s_openapi::api::core::v1::Pod;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::*;
use crate::api::ResourceInfo;
use crate::properties::config;

/// Any JSON document, a few levels deep; `nulls` allows `null` values.
fn document(nulls: bool) -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        any::<bool>().prop_map(Value::from),
        (-5i64..5).prop_map(Value::from),
        "[a-c]{0,2}".prop_map(Value::from),
        Just(if nulls { Value::Null } else { Value::from(0) }),
    ];
    leaf.prop_recursive(4, 32, 4, move |inner| {
        prop_oneof![proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::from), object(inner),]
    })
}

fn object(values: impl Strategy<Value = Value>) -> impl Strategy<Value = Value> {
    proptest::collection::btree_map("[a-d]", values, 0..4).prop_map(|m| Value::Object(m.into_iter().collect()))
}

/// A document with the keys a strategic merge patch reads as directives
/// now and then.
fn patch_with_directives() -> impl Strategy<Value = Value> {
    let key = proptest::sample::select(vec![
        "a",
        "b",
        "$patch",
        "$retainKeys",
        "$setElementOrder/a",
        "$deleteFromPrimitiveList/a",
        "containers",
        "spec",
        "name",
    ]);
    let leaf = prop_oneof![
        Just(Value::Null),
        proptest::sample::select(vec!["replace", "delete", "merge", "x", "c"]).prop_map(Value::from),
        (-2i64..2).prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 4, move |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
            proptest::collection::btree_map(key.clone(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        ]
    })
}

/// The JSON merge patch that turns `source` into `target` (whose objects
/// hold no `null`, which a merge patch cannot write).
fn diff(source: &Value, target: &Value) -> Value {
    match (source, target) {
        (Value::Object(source), Value::Object(target)) => {
            let mut patch = Map::new();
            for key in source.keys().filter(|k| !target.contains_key(*k)) {
                patch.insert(key.clone(), Value::Null);
            }
            for (key, value) in target {
                match source.get(key) {
                    Some(old) if old == value => {}
                    Some(old) => {
                        patch.insert(key.clone(), diff(old, value));
                    }
                    None => {
                        patch.insert(key.clone(), diff(&Value::Null, value));
                    }
                }
            }
            Value::Object(patch)
        }
        // A new object is written from an empty one, so that it is an
        // object patch too.
        (_, Value::Object(_)) => diff(&json!({}), target),
        (_, target) => target.clone(),
    }
}

fn merge(document: &Value, patch: &Value) -> Value {
    let mut merged = document.clone();
    json_patch::merge(&mut merged, patch);
    merged
}

fn pod_shape() -> std::sync::Arc<Schemas> {
    Schemas::of(ResourceInfo::of::<Pod>().schema.as_ref().unwrap())
}

/// A container: a name from a small set, and an image.
fn container() -> impl Strategy<Value = (String, String)> {
    (proptest::sample::select(vec!["a", "b", "c", "d", "e"]), "[xyz][0-9]").prop_map(|(n, i)| (n.to_owned(), i))
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn strategic_merge_never_panics(document in document(true), patch in patch_with_directives(), other in document(true)) {
        let schemas = pod_shape();
        for shape in [Shape::unknown(), schemas.root()] {
            for patch in [&patch, &other] {
                let pod = json!({"spec": {"containers": [{"name": "a"}], "tolerations": [{"key": "k"}]}, "x": document});
                for original in [&document, &pod] {
                    if let Ok(merged) = strategic_merge(original, patch, shape) {
                        prop_assert!(merged.is_object());
                    }
                }
            }
        }
    }

    #[test]
    fn merge_patches_from_a_diff_reach_the_target(source in document(true), target in document(false)) {
        let patch = diff(&source, &target);
        prop_assert_eq!(merge(&source, &patch), target.clone(), "patch {}", patch);
        // An object patch is an object: the strategic merge of one without
        // lists reads it the same way.
        if source.is_object() && patch.is_object() && !contains_array(&patch) {
            let strategic = strategic_merge(&source, &patch, Shape::unknown()).unwrap();
            prop_assert_eq!(strategic, target, "patch {}", patch);
        }
    }

    #[test]
    fn merge_patches_are_idempotent(document in document(true), patch in document(true)) {
        let once = merge(&document, &patch);
        prop_assert_eq!(merge(&once, &patch), once.clone());
        if document.is_object() && patch.is_object() && !contains_array(&patch) {
            let strategic = strategic_merge(&document, &patch, Shape::unknown()).unwrap();
            prop_assert_eq!(&strategic, &once);
            prop_assert_eq!(strategic_merge(&strategic, &patch, Shape::unknown()).unwrap(), once);
        }
    }

    #[test]
    fn containers_merge_by_name(
        original in proptest::collection::btree_map(proptest::sample::select(vec!["a", "b", "c"]), "[xyz][0-9]", 0..4),
        order in any::<u64>(),
        patch in proptest::collection::vec((container(), any::<bool>()), 0..5),
    ) {
        // The original's containers in an order of their own.
        let mut live: Vec<(String, String)> = original.into_iter().map(|(n, i)| (n.to_owned(), i)).collect();
        if !live.is_empty() {
            let len = live.len();
            live.rotate_left((order as usize) % len);
        }
        let document = json!({"spec": {"containers": live.iter().map(|(n, i)| json!({"name": n, "image": i, "tty": true})).collect::<Vec<_>>()}});
        let items: Vec<Value> = patch
            .iter()
            .map(|((name, image), delete)| {
                if *delete { json!({"name": name, "$patch": "delete"}) } else { json!({"name": name, "image": image}) }
            })
            .collect();
        let merged = strategic_merge(&document, &json!({"spec": {"containers": items}}), pod_shape().root()).unwrap();

        // The reference: each patch item in turn updates the item of its
        // name, appends a new one, or deletes every item of its name.
        let mut expected: Vec<(String, String, bool)> = live.iter().map(|(n, i)| (n.clone(), i.clone(), true)).collect();
        for ((name, image), delete) in &patch {
            if *delete {
                expected.retain(|(n, _, _)| n != name);
            } else if let Some(item) = expected.iter_mut().find(|(n, _, _)| n == name) {
                item.1 = image.clone();
            } else {
                expected.push((name.clone(), image.clone(), false));
            }
        }
        let got: Vec<(String, String, bool)> = merged["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let field = |f: &str| c[f].as_str().unwrap().to_owned();
                (field("name"), field("image"), c["tty"] == true)
            })
            .collect();
        prop_assert_eq!(got, expected);
    }
}

fn contains_array(value: &Value) -> bool {
    match value {
        Value::Array(_) => true,
        Value::Object(map) => map.values().any(contains_array),
        _ => false,
    }
}
