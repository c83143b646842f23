//! CustomResourceDefinitions: kube-rs (typed CRD, derived and dynamic custom
//! resources), kubectl, deletion and restart.

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::core::{DynamicObject, GroupVersionKind};
use kube::discovery::ApiResource;
use kube::{CustomResource, CustomResourceExt};
use orchestra::testing::TestCluster;
use orchestra_store::MemStore;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// A custom resource derived with kube-rs.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
#[kube(
    group = "example.com",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus",
    shortname = "wd",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".spec.replicas")
)]
pub struct WidgetSpec {
    replicas: i32,
    size: String,
}

/// The status of a [`Widget`].
#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
pub struct WidgetStatus {
    replicas: i32,
    selector: Option<String>,
}

fn widget(name: &str, replicas: i32) -> Widget {
    Widget::new(name, WidgetSpec { replicas, size: "small".into() })
}

/// Waits until the CRD is Established.
async fn established(crds: &Api<CustomResourceDefinition>, name: &str) -> CustomResourceDefinition {
    for _ in 0..300 {
        let crd = crds.get(name).await.unwrap();
        let conditions = crd.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
        if conditions.iter().any(|c| c.type_ == "Established" && c.status == "True") {
            return crd;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("CRD {name} never became Established");
}

/// Waits until `get` answers 404.
async fn gone<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    for _ in 0..300 {
        match api.get(name).await {
            Err(kube::Error::Api(s)) if s.code == 404 => return,
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    panic!("{name} was never deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_drives_custom_resources() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds.create(&PostParams::default(), &Widget::crd()).await.unwrap();
    assert_eq!(crd.metadata.name.as_deref(), Some("widgets.example.com"));
    let crd = established(&crds, "widgets.example.com").await;
    let status = crd.status.unwrap();
    assert_eq!(status.accepted_names.as_ref().unwrap().kind, "Widget");
    assert_eq!(status.stored_versions, Some(vec!["v1".to_owned()]));
    assert!(
        status
            .conditions
            .unwrap()
            .iter()
            .any(|c| c.type_ == "NamesAccepted" && c.status == "True" && c.reason.as_deref() == Some("NoConflicts"))
    );

    // Discovery (aggregated, as kube-rs asks for it) lists the kind at once.
    let discovery = kube::Discovery::new(client.clone()).run().await.unwrap();
    let (found, caps) =
        discovery.resolve_gvk(&GroupVersionKind::gvk("example.com", "v1", "Widget")).expect("Widget is discovered");
    assert_eq!(found.plural, "widgets");
    assert!(caps.subresources.iter().any(|(s, _)| s.plural == "widgets/scale" || s.plural == "scale"), "{caps:?}");

    // Typed CRUD through the derived type.
    let widgets: Api<Widget> = Api::default_namespaced(client.clone());
    let mut with_status = widget("w1", 1);
    with_status.status = Some(WidgetStatus { replicas: 7, selector: None });
    let created = widgets.create(&PostParams::default(), &with_status).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert!(created.status.is_none(), "create ignores status with the status subresource");
    assert_eq!(widgets.get("w1").await.unwrap().spec.replicas, 1);
    widgets.create(&PostParams::default(), &widget("w2", 2)).await.unwrap();
    let names: Vec<String> = widgets
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|w| w.metadata.name.unwrap())
        .collect();
    assert_eq!(names, ["w1", "w2"]);

    // Dynamic access, pruning, merge and JSON patches, generation.
    let resource = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("example.com", "v1", "Widget"), "widgets");
    let dynamic: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource);
    let mut object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "d1"},
        "spec": {"replicas": 3, "size": "large", "unknown": "pruned"},
        "extra": true,
    }))
    .unwrap();
    let created = dynamic.create(&PostParams::default(), &object).await.unwrap();
    assert_eq!(created.data["spec"], json!({"replicas": 3, "size": "large"}));
    assert!(created.data.get("extra").is_none());
    let patched =
        dynamic.patch("d1", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 4}}))).await.unwrap();
    assert_eq!(patched.data["spec"]["replicas"], 4);
    assert_eq!(patched.metadata.generation, Some(2));
    let patch = serde_json::from_value(json!([{"op": "replace", "path": "/spec/size", "value": "small"}])).unwrap();
    let patched = dynamic.patch("d1", &PatchParams::default(), &Patch::<()>::Json(patch)).await.unwrap();
    assert_eq!(patched.data["spec"]["size"], "small");
    assert_eq!(patched.metadata.generation, Some(3));
    object.metadata = patched.metadata.clone();
    object.data["spec"] = json!({"replicas": 4, "size": "small"});
    object.data["metadata"] = json!(null);
    let replaced = dynamic.replace("d1", &PostParams::default(), &object).await.unwrap();
    assert_eq!(replaced.metadata.generation, Some(3), "no spec change, no new generation");

    // Invalid objects: 422 with causes in upstream's words.
    let bad: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "bad"},
        "spec": {"replicas": "three"},
    }))
    .unwrap();
    let err = dynamic.create(&PostParams::default(), &bad).await.unwrap_err();
    let kube::Error::Api(status) = &err else { panic!("{err:?}") };
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"), "{status:?}");
    assert!(
        status.message.contains(
            "spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""
        ) && status.message.contains("spec.size: Required value"),
        "{}",
        status.message
    );

    // Status subresource: the main endpoint ignores status, /status only changes status.
    let updated = widgets
        .patch_status(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 1, "selector": "app=w1"}, "spec": {"replicas": 9}})),
        )
        .await
        .unwrap();
    assert_eq!(updated.status.as_ref().unwrap().replicas, 1);
    assert_eq!(updated.spec.replicas, 1);
    assert_eq!(updated.metadata.generation, Some(1));
    let updated =
        widgets.patch("w1", &PatchParams::default(), &Patch::Merge(json!({"status": {"replicas": 5}}))).await.unwrap();
    assert_eq!(updated.status.unwrap().replicas, 1);

    // Scale subresource.
    let scale = widgets.get_scale("w1").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(1));
    let scale_status = scale.status.unwrap();
    assert_eq!((scale_status.replicas, scale_status.selector.as_deref()), (1, Some("app=w1")));
    widgets.patch_scale("w1", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 4}}))).await.unwrap();
    let scaled = widgets.get("w1").await.unwrap();
    assert_eq!(scaled.spec.replicas, 4);
    assert_eq!(scaled.metadata.generation, Some(2));

    // Watch.
    let version = widgets.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let mut events = widgets.watch(&WatchParams::default().timeout(5), &version).await.unwrap().boxed();
    widgets.create(&PostParams::default(), &widget("w3", 1)).await.unwrap();
    widgets.delete("w3", &DeleteParams::default()).await.unwrap();
    let mut seen = Vec::new();
    while let Some(event) = events.try_next().await.unwrap() {
        match event {
            WatchEvent::Added(w) => seen.push(format!("ADDED {}", w.metadata.name.unwrap())),
            WatchEvent::Deleted(w) => {
                seen.push(format!("DELETED {}", w.metadata.name.unwrap()));
                break;
            }
            _ => {}
        }
    }
    assert_eq!(seen, ["ADDED w3", "DELETED w3"]);

    // A second CRD asking for a taken name is not accepted.
    let mut clash = Widget::crd();
    clash.metadata.name = Some("gadgets.example.com".into());
    clash.spec.names.plural = "gadgets".into();
    clash.spec.names.singular = Some("gadget".into());
    clash.spec.names.short_names = None;
    crds.create(&PostParams::default(), &clash).await.unwrap();
    let mut accepted = None;
    for _ in 0..300 {
        let crd = crds.get("gadgets.example.com").await.unwrap();
        if let Some(c) =
            crd.status.and_then(|s| s.conditions).and_then(|c| c.into_iter().find(|c| c.type_ == "NamesAccepted"))
        {
            accepted = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let accepted = accepted.unwrap();
    // Kind and listKind are both taken; upstream reports the last conflict.
    assert_eq!((accepted.status.as_str(), accepted.reason.as_deref()), ("False", Some("ListKindConflict")));
    assert_eq!(accepted.message.as_deref(), Some("\"WidgetList\" is already in use"));
    crds.delete("gadgets.example.com", &DeleteParams::default()).await.unwrap();

    // Deleting the CRD deletes its instances and stops serving the kind;
    // instances with finalizers are waited for, and no new one is created.
    let mut kept = widget("kept", 1);
    kept.metadata.finalizers = Some(vec!["example.com/keep".into()]);
    widgets.create(&PostParams::default(), &kept).await.unwrap();
    crds.delete("widgets.example.com", &DeleteParams::default()).await.unwrap();
    let mut terminating = None;
    for _ in 0..300 {
        // The condition is written before instances are deleted: read the
        // instance first, so a deleted one implies a visible condition.
        let kept = widgets.get("kept").await.unwrap();
        let crd = crds.get("widgets.example.com").await.unwrap();
        if kept.metadata.deletion_timestamp.is_some() {
            terminating =
                crd.status.and_then(|s| s.conditions).and_then(|c| c.into_iter().find(|c| c.type_ == "Terminating"));
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let terminating = terminating.expect("the CRD is terminating");
    assert_eq!(terminating.reason.as_deref(), Some("InstanceDeletionInProgress"));
    assert!(widgets.get("w1").await.is_err(), "instances without finalizers are gone");
    let err = widgets.create(&PostParams::default(), &widget("late", 1)).await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 405 && s.message == "create not allowed while custom resource definition is terminating"),
        "{err:?}"
    );
    widgets
        .patch("kept", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await
        .unwrap();
    gone(&crds, "widgets.example.com").await;
    let err = widgets.list(&ListParams::default()).await.unwrap_err();
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 404), "{err:?}");
    let left = cluster
        .server()
        .store()
        .range(orchestra_store::RangeRequest::new(orchestra_store::KeyRange::prefix("/registry/example.com/widgets/")))
        .await
        .unwrap();
    assert!(left.kvs.is_empty(), "instances remain");
    // Re-created, the kind starts empty.
    crds.create(&PostParams::default(), &Widget::crd()).await.unwrap();
    established(&crds, "widgets.example.com").await;
    assert!(widgets.list(&ListParams::default()).await.unwrap().items.is_empty());
}

/// Invalid CRDs are refused with upstream's causes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_definitions_are_refused() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    let mut crd = Widget::crd();
    crd.metadata.name = Some("widgets.other.com".into());
    crd.spec.versions[0].storage = false;
    let err = crds.create(&PostParams::default(), &crd).await.unwrap_err();
    let kube::Error::Api(status) = &err else { panic!("{err:?}") };
    assert_eq!(status.code, 422);
    assert!(
        status.message.contains(
            "metadata.name: Invalid value: \"widgets.other.com\": must be spec.names.plural+\".\"+spec.group"
        ),
        "{}",
        status.message
    );
    assert!(status.message.contains("must have exactly one version marked as storage version"), "{}", status.message);

    // Missing fields are causes too, not decoding errors.
    let resource = ApiResource::erase::<CustomResourceDefinition>(&());
    let dynamic: Api<DynamicObject> = Api::all_with(crds.into_client(), &resource);
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.example.com"},
        "spec": {"group": "example.com", "names": {"plural": "things", "kind": "Thing"}, "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": {"size": {}}}}}}}]},
    }))
    .unwrap();
    let err = dynamic.create(&PostParams::default(), &object).await.unwrap_err();
    let kube::Error::Api(status) = &err else { panic!("{err:?}") };
    assert_eq!(status.code, 422, "{status:?}");
    let causes: Vec<String> =
        status.details.as_ref().unwrap().causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
    assert_eq!(
        causes,
        [
            "spec.scope: Required value",
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[size].type: Required value: must not be empty for specified object fields",
        ]
    );
}

const GIZMO_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gizmos.tools.example.org
spec:
  group: tools.example.org
  scope: Namespaced
  names: {plural: gizmos, singular: gizmo, kind: Gizmo, shortNames: [gz], categories: [all]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}
    additionalPrinterColumns:
    - {name: Color, type: string, jsonPath: .spec.color}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [color]
            properties:
              color: {type: string, enum: [red, blue]}
              replicas: {type: integer, minimum: 0, maximum: 10, default: 1}
              extra: {type: object, x-kubernetes-preserve-unknown-fields: true}
          status:
            type: object
            properties:
              replicas: {type: integer}
  - name: v1beta1
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#;

const GIZMO: &str = r#"
apiVersion: tools.example.org/v1
kind: Gizmo
metadata: {name: g1}
spec: {color: red, extra: {any: [1, 2]}}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_and_restart() {
    let store = Arc::new(MemStore::new());
    let cluster = TestCluster::start_with(TestCluster::builder().store(store.clone())).await;
    let kubectl = cluster.kubectl().await.clone();
    tokio::task::spawn_blocking(move || {
        let run = |args: &[&str]| kubectl.run(args).into_parts();
        let (ok, out, err) = kubectl.run_with_input(&["create", "--validate=false", "-f", "-"], Some(GIZMO_CRD)).into_parts();
        assert!(ok, "{err}");
        assert!(out.contains("customresourcedefinition.apiextensions.k8s.io/gizmos.tools.example.org created"), "{out}");
        let (ok, _, err) = run(&["wait", "--for=condition=Established", "crd/gizmos.tools.example.org", "--timeout=10s"]);
        assert!(ok, "{err}");
        let (ok, out, err) = run(&["api-resources", "--api-group=tools.example.org"]);
        assert!(ok, "{err}");
        assert!(out.contains("gizmos") && out.contains("gz") && out.contains("Gizmo"), "{out}");

        let (ok, out, err) = kubectl.run_with_input(&["create", "--validate=false", "-f", "-"], Some(GIZMO)).into_parts();
        assert!(ok, "{err}");
        assert!(out.contains("gizmo.tools.example.org/g1 created"), "{out}");
        let (ok, out, err) = run(&["get", "gizmos"]);
        assert!(ok, "{err}");
        assert!(out.contains("g1"), "{out}");
        let (ok, out, err) = run(&["get", "gz", "g1", "-o", "json"]);
        assert!(ok, "{err}");
        let g1: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(g1["spec"], json!({"color": "red", "replicas": 1, "extra": {"any": [1, 2]}}), "defaults applied, preserved fields kept");
        // Validation on: kubectl finds the kind in OpenAPI and sends Strict;
        // unknown fields are refused (nothing stored), else pruned.
        let bogus = GIZMO.replace("name: g1", "name: g2").replace("color: red,", "color: red, bogus: 1,");
        let (ok, _, err) = kubectl.run_with_input(&["create", "-f", "-"], Some(&bogus)).into_parts();
        assert!(!ok);
        assert!(
            err.contains("Error from server (BadRequest)") && err.contains(r#"unknown field "spec.bogus""#),
            "{err}"
        );
        assert!(!run(&["get", "gizmo", "g2"]).0, "a refused object is not stored");
        let (ok, _, err) = kubectl.run_with_input(&["create", "--validate=false", "-f", "-"], Some(&bogus)).into_parts();
        assert!(ok, "{err}");
        let (ok, out, _) = run(&["get", "gizmo", "g2", "-o", "jsonpath={.spec}"]);
        assert!(ok);
        assert!(!out.contains("bogus") && out.contains("red"), "{out}");
        // Client-side apply of a custom resource (merge patch), validated.
        let (ok, out, err) = kubectl.run_with_input(&["apply", "-f", "-"], Some(&bogus.replace("bogus: 1,", "").replace("red", "blue"))).into_parts();
        assert!(ok, "{err}");
        assert!(out.contains("gizmo.tools.example.org/g2 configured"), "{out}");
        let (ok, out, _) = run(&["get", "gizmo", "g2", "-o", "jsonpath={.spec.color}"]);
        assert!(ok);
        assert_eq!(out, "blue");
        let (ok, _, err) = kubectl.run_with_input(&["apply", "-f", "-"], Some(&bogus)).into_parts();
        assert!(!ok);
        assert!(err.contains(r#"unknown field "spec.bogus""#), "{err}");
        // In a List, kubectl validates each item itself against
        // /openapi/v2, which holds the custom kind's schema.
        let list = |gizmo: &str| {
            let item: String = gizmo.trim().lines().map(|line| format!("  {line}\n")).collect();
            format!("apiVersion: v1\nkind: List\nitems:\n-{}", &item[1..])
        };
        let listed = GIZMO.replace("name: g1", "name: g3").replace("any: [1, 2]", "any: [1, 2], free: {x: 1}");
        let (ok, out, err) = kubectl.run_with_input(&["apply", "-f", "-"], Some(&list(&listed))).into_parts();
        assert!(ok, "{err}");
        assert!(out.contains("gizmo.tools.example.org/g3 created"), "{out}");
        let (ok, _, err) = kubectl.run_with_input(&["apply", "-f", "-"], Some(&list(&bogus))).into_parts();
        assert!(!ok);
        assert!(
            err.contains(r#"ValidationError(Gizmo.spec): unknown field "bogus" in org.example.tools.v1.Gizmo.spec"#),
            "{err}"
        );

        // Another served version of the same objects.
        let (ok, out, err) = run(&["get", "gizmos.v1beta1.tools.example.org", "g1", "-o", "jsonpath={.apiVersion}"]);
        assert!(ok, "{err}");
        assert_eq!(out, "tools.example.org/v1beta1");

        let (ok, out, err) = run(&["scale", "gizmo/g1", "--replicas=3"]);
        assert!(ok, "{err}");
        assert!(out.contains("scaled"), "{out}");
        let (ok, out, _) = run(&["get", "gizmo", "g1", "-o", "jsonpath={.spec.replicas}"]);
        assert!(ok);
        assert_eq!(out, "3");
        // The resource's schema still applies through the scale subresource.
        let (ok, _, err) = run(&["scale", "gizmo/g1", "--replicas=11"]);
        assert!(!ok);
        assert!(
            err.contains("The Gizmo \"g1\" is invalid: spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10"),
            "{err}"
        );

        let (ok, _, err) = run(&["patch", "gizmo", "g1", "--type=merge", "-p", r#"{"spec":{"color":"green"}}"#]);
        assert!(!ok);
        assert!(
            err.contains("The Gizmo \"g1\" is invalid: spec.color: Unsupported value: \"green\": supported values: \"red\", \"blue\""),
            "{err}"
        );
    })
    .await
    .unwrap();

    // A new server on the same store still serves the kind.
    let restarted = TestCluster::start_with(TestCluster::builder().store(store.clone())).await;
    let client = restarted.client();
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("tools.example.org", "v1", "Gizmo"), "gizmos");
    let gizmos: Api<DynamicObject> = Api::default_namespaced_with(client.clone(), &resource);
    let g1 = gizmos.get("g1").await.unwrap();
    assert_eq!(g1.data["spec"]["replicas"], 3);
    // v1beta1 has no status subresource: status is content, and bumps generation.
    let beta =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("tools.example.org", "v1beta1", "Gizmo"), "gizmos");
    let beta: Api<DynamicObject> = Api::default_namespaced_with(client.clone(), &beta);
    let before = beta.get("g1").await.unwrap();
    assert_eq!(before.types.as_ref().unwrap().api_version, "tools.example.org/v1beta1");
    let after =
        beta.patch("g1", &PatchParams::default(), &Patch::Merge(json!({"status": {"note": "x"}}))).await.unwrap();
    assert_eq!(after.data["status"]["note"], "x");
    assert_eq!(after.metadata.generation.unwrap(), before.metadata.generation.unwrap() + 1);

    // Deleting the CRD through kubectl removes the kind from discovery.
    let kubectl = restarted.kubectl().await.clone();
    tokio::task::spawn_blocking(move || {
        let (ok, out, err) = kubectl.run(&["delete", "crd", "gizmos.tools.example.org"]).into_parts();
        assert!(ok, "{err}");
        assert!(out.contains("deleted"), "{out}");
        let (ok, _, err) = kubectl.run(&["get", "gizmos"]).into_parts();
        assert!(!ok);
        assert!(
            err.contains("the server doesn't have a resource type \"gizmos\"") || err.contains("NotFound"),
            "{err}"
        );
    })
    .await
    .unwrap();
    let err = gizmos.get("g1").await.unwrap_err();
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 404), "{err:?}");
}
