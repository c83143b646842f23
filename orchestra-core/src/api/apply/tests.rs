use super::merge::interleave;
use super::update::record_with_field_sets;
use super::*;
use crate::api::ResourceInfo;
use crate::api::patch::Schemas;
use k8s_openapi::api::apps::v1::Deployment;
use serde_json::json;

fn schemas() -> std::sync::Arc<Schemas> {
    Schemas::of(ResourceInfo::of::<Deployment>().schema.as_ref().unwrap())
}

fn ctx<'a>(manager: &'a str, schemas: &'a Schemas) -> Context<'a> {
    Context {
        manager,
        api_version: "apps/v1",
        kind: "Deployment",
        subresource: None,
        has_status: true,
        shape: schemas.root(),
    }
}

fn config(replicas: i64, image: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": image}]}
            }
        }
    })
}

fn managers(object: &Value) -> Vec<(String, String)> {
    managed_fields(object).into_iter().map(|e| (e.manager, e.operation)).collect()
}

fn owns(object: &Value, manager: &str, path: &str) -> bool {
    managed_fields(object)
        .iter()
        .filter(|e| e.manager == manager)
        .any(|e| e.fields.paths().any(|p| path_string(p) == path))
}

#[test]
fn apply_creates_and_records_ownership() {
    let schemas = schemas();
    let object = apply(None, &config(1, "nginx:1", json!({"app": "web"})), &ctx("a", &schemas), false).unwrap();
    assert_eq!(object["spec"]["replicas"], 1);
    assert_eq!(managers(&object), [("a".to_owned(), "Apply".to_owned())]);
    let entry = &object["metadata"]["managedFields"][0];
    assert_eq!(entry["apiVersion"], "apps/v1");
    assert_eq!(entry["fieldsType"], "FieldsV1");
    assert!(entry["time"].is_string());
    assert_eq!(
        entry["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"c\"}"],
        json!({".": {}, "f:image": {}, "f:name": {}})
    );
    assert_eq!(entry["fieldsV1"]["f:metadata"], json!({"f:labels": {"f:app": {}}}));
    assert!(entry["fieldsV1"].get("f:apiVersion").is_none());
}

#[test]
fn apply_scenarios() {
    let schemas = schemas();
    let first =
        apply(None, &config(1, "nginx:1", json!({"app": "web", "tier": "front"})), &ctx("a", &schemas), false).unwrap();

    // Dropped fields go away; changed ones are taken.
    let second = apply(Some(&first), &config(1, "nginx:2", json!({"app": "web"})), &ctx("a", &schemas), false).unwrap();
    assert_eq!(second["metadata"]["labels"], json!({"app": "web"}));
    assert_eq!(second["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:2");

    // Another manager changing a field: conflict naming the owner and field.
    let conflicts =
        apply(Some(&second), &config(3, "nginx:2", json!({"app": "web"})), &ctx("b", &schemas), false).unwrap_err();
    let ApplyError::Conflicts(conflicts) = conflicts else { panic!("{conflicts:?}") };
    assert_eq!(conflicts, [Conflict { manager: "\"a\"".into(), field: ".spec.replicas".into() }]);
    let error = conflict_error(&conflicts);
    assert_eq!(error.code, 409);
    assert_eq!(error.message, "Apply failed with 1 conflict: conflict with \"a\": .spec.replicas");
    let json = error.to_json();
    assert_eq!(json["details"]["causes"][0]["reason"], "FieldManagerConflict");
    assert_eq!(json["details"]["causes"][0]["message"], "conflict with \"a\"");
    assert_eq!(json["details"]["causes"][0]["field"], ".spec.replicas");

    // Equal values are shared without conflict.
    let shared = apply(
        Some(&second),
        &json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"}, "spec": {"replicas": 1}}),
        &ctx("b", &schemas),
        false,
    )
    .unwrap();
    assert!(owns(&shared, "a", ".spec.replicas") && owns(&shared, "b", ".spec.replicas"));
    // ... and a field one manager drops stays while the other still owns it.
    let mut without_replicas = config(1, "nginx:2", json!({"app": "web"}));
    without_replicas["spec"].as_object_mut().unwrap().remove("replicas");
    let dropped = apply(Some(&shared), &without_replicas, &ctx("a", &schemas), false).unwrap();
    assert_eq!(dropped["spec"]["replicas"], 1);
    assert!(!owns(&dropped, "a", ".spec.replicas") && owns(&dropped, "b", ".spec.replicas"));

    // Force takes the field over.
    let forced = apply(Some(&second), &config(3, "nginx:2", json!({"app": "web"})), &ctx("b", &schemas), true).unwrap();
    assert_eq!(forced["spec"]["replicas"], 3);
    assert!(owns(&forced, "b", ".spec.replicas") && !owns(&forced, "a", ".spec.replicas"));
    assert!(owns(&forced, "a", ".spec.template.spec.containers[name=\"c\"].image"));

    // Several conflicts are listed per manager.
    let many =
        apply(Some(&second), &config(4, "nginx:9", json!({"app": "web"})), &ctx("b", &schemas), false).unwrap_err();
    assert_eq!(
        many.to_api_error().message,
        "Apply failed with 2 conflicts: conflicts with \"a\":\n- .spec.replicas\n- .spec.template.spec.containers[name=\"c\"].image"
    );
}

#[test]
fn updates_are_recorded_and_conflict_with_appliers() {
    let schemas = schemas();
    let mut created = config(1, "nginx:1", json!({"app": "web"}));
    record_update(None, &mut created, &ctx("kubectl-create", &schemas));
    assert_eq!(managers(&created), [("kubectl-create".to_owned(), "Update".to_owned())]);
    assert!(owns(&created, "kubectl-create", ".spec.replicas"));
    assert_eq!(
        created["metadata"]["managedFields"][0]["fieldsV1"]["f:metadata"],
        json!({"f:labels": {".": {}, "f:app": {}}})
    );
    let mut unlabeled = created.clone();
    unlabeled["metadata"].as_object_mut().unwrap().remove("labels");
    record_update(Some(&created), &mut unlabeled, &ctx("kubectl-edit", &schemas));
    assert!(!owns(&unlabeled, "kubectl-create", ".metadata.labels"));
    assert!(!owns(&unlabeled, "kubectl-create", ".metadata.labels.app"));

    let mut edited = created.clone();
    edited["spec"]["replicas"] = 5.into();
    record_update(Some(&created), &mut edited, &ctx("kubectl-edit", &schemas));
    assert!(owns(&edited, "kubectl-edit", ".spec.replicas"));
    assert!(!owns(&edited, "kubectl-create", ".spec.replicas"));
    assert!(owns(&edited, "kubectl-create", ".spec.template.spec.containers[name=\"c\"].image"));

    let conflicts =
        apply(Some(&edited), &config(2, "nginx:1", json!({"app": "web"})), &ctx("kubectl", &schemas), false)
            .unwrap_err();
    let ApplyError::Conflicts(conflicts) = conflicts else { panic!("{conflicts:?}") };
    assert_eq!(
        conflicts,
        [Conflict { manager: "\"kubectl-edit\" using apps/v1".into(), field: ".spec.replicas".into() }]
    );

    // An update that changes nothing leaves the entries alone.
    let mut same = edited.clone();
    record_update(Some(&edited), &mut same, &ctx("other", &schemas));
    assert_eq!(same["metadata"]["managedFields"], edited["metadata"]["managedFields"]);

    // Status belongs to the status subresource.
    let mut with_status = edited.clone();
    with_status["status"] = json!({"replicas": 5});
    record_update(Some(&edited), &mut with_status, &ctx("x", &schemas));
    assert!(managers(&with_status).iter().all(|(m, _)| m != "x"));
}

#[test]
fn kubectl_takes_over_from_client_side_apply() {
    let schemas = schemas();
    let applied = config(1, "nginx:1", json!({"app": "web"}));
    let mut created = applied.clone();
    created["metadata"]["annotations"] = json!({LAST_APPLIED: applied.to_string()});
    record_update(None, &mut created, &ctx("kubectl-client-side-apply", &schemas));

    let changed = config(2, "nginx:2", json!({"app": "web"}));
    // Other managers conflict with the client-side-apply fields ...
    let conflicts = apply(Some(&created), &changed, &ctx("someone", &schemas), false).unwrap_err();
    let ApplyError::Conflicts(conflicts) = conflicts else { panic!("{conflicts:?}") };
    assert_eq!(conflicts.len(), 2);
    // ... kubectl takes them over, and keeps the annotation current.
    let taken = apply(Some(&created), &changed, &ctx("kubectl", &schemas), false).unwrap();
    assert_eq!(taken["spec"]["replicas"], 2);
    assert!(owns(&taken, "kubectl", ".spec.replicas"));
    assert!(!owns(&taken, "kubectl-client-side-apply", ".spec.replicas"));
    let annotation: Value =
        serde_json::from_str(taken["metadata"]["annotations"][LAST_APPLIED].as_str().unwrap()).unwrap();
    assert_eq!(annotation["spec"]["replicas"], 2);

    // Fields changed since the last client-side apply still conflict.
    let mut edited = created.clone();
    edited["spec"]["replicas"] = 7.into();
    record_update(Some(&created), &mut edited, &ctx("kubectl-edit", &schemas));
    let conflicts = apply(Some(&edited), &changed, &ctx("kubectl", &schemas), false).unwrap_err();
    let ApplyError::Conflicts(conflicts) = conflicts else { panic!("{conflicts:?}") };
    assert_eq!(
        conflicts,
        [Conflict { manager: "\"kubectl-edit\" using apps/v1".into(), field: ".spec.replicas".into() }]
    );
}

#[test]
fn reapplying_is_a_noop() {
    let schemas = schemas();
    let mut first = apply(None, &config(1, "nginx:1", json!({"app": "web"})), &ctx("a", &schemas), false).unwrap();
    first["metadata"]["resourceVersion"] = "5".into();
    let mut again =
        apply(Some(&first), &config(1, "nginx:1", json!({"app": "web"})), &ctx("a", &schemas), false).unwrap();
    again["metadata"]["managedFields"][0]["time"] = "2000-01-01T00:00:00Z".into();
    assert!(is_noop(&first, &again));
    let changed =
        apply(Some(&first), &config(2, "nginx:1", json!({"app": "web"})), &ctx("a", &schemas), false).unwrap();
    assert!(!is_noop(&first, &changed));
}

#[test]
fn invalid_configurations_and_untracked_objects() {
    let schemas = schemas();
    let mut nameless = config(1, "nginx:1", json!({"app": "web"}));
    nameless["spec"]["template"]["spec"]["containers"] = json!([{"image": "x"}]);
    assert_eq!(
        apply(None, &nameless, &ctx("a", &schemas), false).unwrap_err(),
        ApplyError::Invalid("failed to create typed patch object (apps/v1, Kind=Deployment): .spec.template.spec.containers: element 0: associative list with keys has an element that omits key field \"name\" (and doesn't have default value)".into())
    );
    let mut twice = config(1, "nginx:1", json!({"app": "web"}));
    twice["spec"]["template"]["spec"]["containers"] = json!([{"name": "c"}, {"name": "c"}]);
    let ApplyError::Invalid(message) = apply(None, &twice, &ctx("a", &schemas), false).unwrap_err() else { panic!() };
    assert!(message.ends_with(".spec.template.spec.containers: duplicate entries for key [name=\"c\"]"), "{message}");

    let untracked = config(1, "nginx:1", json!({"app": "web"}));
    let error =
        apply(Some(&untracked), &config(2, "nginx:1", json!({"app": "web"})), &ctx("a", &schemas), false).unwrap_err();
    assert_eq!(
        error.to_api_error().message,
        "Apply failed with 1 conflict: conflict with \"before-first-apply\" using apps/v1: .spec.replicas"
    );
}

#[test]
fn update_managers_are_capped() {
    let schemas = schemas();
    let mut object = config(1, "nginx:1", json!({"app": "web"}));
    record_update(None, &mut object, &ctx("creator", &schemas));
    for i in 0..12 {
        let mut next = object.clone();
        next["metadata"]["labels"][format!("l{i}")] = "x".into();
        let manager = format!("m{i}");
        record_update(Some(&object), &mut next, &ctx(&manager, &schemas));
        object = next;
    }
    let entries = managed_fields(&object);
    assert_eq!(entries.len(), MAX_UPDATE_MANAGERS);
    assert!(owns(&object, ANCIENT_CHANGES, ".spec.replicas"));
    assert!(owns(&object, "m11", ".metadata.labels.l11"));
}

#[test]
fn list_order_like_upstream() {
    let key = |v: &Value| PathElement::Value(v.to_string());
    let merge = |_: &Value, new: &Value| new.clone();
    let cases = [
        (json!(["a", "b"]), json!(["b", "a"]), json!(["b", "a"])),
        (json!(["a", "b", "c"]), json!(["c", "a"]), json!(["b", "c", "a"])),
        (json!(["a", "b"]), json!(["a", "x", "b"]), json!(["a", "x", "b"])),
        (json!(["a", "b"]), json!(["x"]), json!(["a", "b", "x"])),
        (json!([]), json!(["x", "y"]), json!(["x", "y"])),
    ];
    for (live, applied, expected) in cases {
        let out = interleave(live.as_array().unwrap(), applied.as_array().unwrap(), key, merge);
        assert_eq!(Value::Array(out), expected, "{live} + {applied}");
    }
}

#[test]
fn custom_resources_use_their_schema_extensions() {
    use crate::api::KindSchema;
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "items": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["id"],
                  "items": {"type": "object", "properties": {"id": {"type": "string"}, "v": {"type": "integer"}}}}
    }}}});
    let schemas = Schemas::of(&KindSchema::Json(std::sync::Arc::new(schema)));
    let ctx = |manager| Context {
        manager,
        api_version: "example.com/v1",
        kind: "Widget",
        subresource: None,
        has_status: false,
        shape: schemas.root(),
    };
    let widget = |items: Value| {
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w"}, "spec": {"items": items}})
    };
    let first = apply(None, &widget(json!([{"id": "a", "v": 1}])), &ctx("one"), false).unwrap();
    let both = apply(Some(&first), &widget(json!([{"id": "b", "v": 2}])), &ctx("two"), false).unwrap();
    assert_eq!(both["spec"]["items"], json!([{"id": "a", "v": 1}, {"id": "b", "v": 2}]));
    assert!(owns(&both, "two", ".spec.items[id=\"b\"].v"));
    let error = apply(Some(&both), &widget(json!([{"id": "a", "v": 5}])), &ctx("two"), false).unwrap_err();
    assert_eq!(
        error.to_api_error().message,
        "Apply failed with 1 conflict: conflict with \"one\": .spec.items[id=\"a\"].v"
    );
}

/// A create's `managedFields`, rendered straight from the object, are what
/// the field-set computation gives, for built-in and custom kinds, the main
/// resource and `status`.
#[test]
fn created_fields_match_the_field_set_computation() {
    use crate::api::KindSchema;
    use k8s_openapi::api::core::v1::{ConfigMap, Pod};
    let without_time = |mut object: Value| {
        if let Some(entries) = object.pointer_mut("/metadata/managedFields").and_then(Value::as_array_mut) {
            for entry in entries {
                entry.as_object_mut().unwrap().remove("time");
            }
        }
        object.pointer("/metadata/managedFields").cloned()
    };
    let pod = ResourceInfo::of::<Pod>();
    let config_map = ResourceInfo::of::<ConfigMap>();
    let crd = KindSchema::Json(std::sync::Arc::new(json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "items": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["id"],
                      "items": {"type": "object", "properties": {"id": {"type": "string"}}}},
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "opts": {"type": "object", "additionalProperties": {"type": "string"}},
            "blob": {"type": "object", "x-kubernetes-map-type": "atomic"}}}}})));
    let kinds = [
        (Schemas::of(pod.schema.as_ref().unwrap()), "v1", "Pod", true),
        (Schemas::of(config_map.schema.as_ref().unwrap()), "v1", "ConfigMap", false),
        (schemas(), "apps/v1", "Deployment", true),
        (Schemas::of(&crd), "example.com/v1", "Widget", false),
    ];
    let objects = [
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "d", "uid": "u", "generation": 1,
                         "labels": {"app": "web", "tier": "f"}, "annotations": {}, "finalizers": ["a", "b"],
                         "ownerReferences": [{"uid": "o", "name": "rs", "kind": "ReplicaSet", "apiVersion": "apps/v1"}]},
            "spec": {"nodeName": null, "containers": [
                {"name": "c", "image": "nginx", "ports": [{"containerPort": 80}, {"containerPort": 53, "protocol": "UDP"}],
                 "env": [{"name": "A", "value": "1"}], "resources": {"limits": {"cpu": "1"}}, "args": ["x", "y"]},
                {"name": "d", "image": "busybox"}],
                "volumes": [], "nodeSelector": {"disk": "ssd"}, "tolerations": [{"key": "k", "operator": "Exists"}]},
            "status": {"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}]}}),
        json!({"metadata": {"name": "only-server-metadata", "creationTimestamp": "t"}}),
        json!({"metadata": {"name": "c", "labels": {"a": "b"}}, "data": {"k": "v", "e": ""}, "binaryData": {}}),
        json!({"spec": {"items": [{"id": "a"}, {"id": "b", "extra": {"x": 1}}, {}], "tags": ["t", "u"],
                        "opts": {"o": "1"}, "blob": {"any": {"thing": 1}}, "other": [1, [2]]}}),
        json!({"spec": {"items": [{"id": "a"}, {"id": "a", "x": 1}]}}),
        json!({"spec": "not an object", "metadata": 7}),
        json!({}),
    ];
    for (schemas, api_version, kind, has_status) in &kinds {
        for subresource in [None, Some("status")] {
            let ctx = Context {
                manager: "m",
                api_version,
                kind,
                subresource,
                has_status: *has_status,
                shape: schemas.root(),
            };
            for object in &objects {
                let mut fast = object.clone();
                record_update(None, &mut fast, &ctx);
                let mut general = object.clone();
                record_with_field_sets(None, &mut general, &ctx);
                assert_eq!(without_time(fast), without_time(general), "{kind} {subresource:?} {object}");
            }
        }
    }
}
