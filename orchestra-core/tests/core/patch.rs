//! Strategic merge patch and server-side apply: kube-rs in process, raw HTTP
//! for the error shapes, and the installed kubectl over loopback.

use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams, PostParams};
use orchestra::testing::TestCluster;
use orchestra_core::api::ResourceInfo;
use serde_json::{Value, json};
use tower::ServiceExt;

fn deployment(name: &str, replicas: i64, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [
                    {"name": "web", "image": image},
                    {"name": "sidecar", "image": "busybox"}
                ]}
            }
        }
    })
}

fn managers(object: &Deployment) -> Vec<(String, String)> {
    object
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|e| (e.manager.clone().unwrap_or_default(), e.operation.clone().unwrap_or_default()))
        .collect()
}

fn images(object: &Deployment) -> Vec<String> {
    object
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers
        .iter()
        .map(|c| format!("{}={}", c.name, c.image.clone().unwrap_or_default()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_strategic_merge_and_apply() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let deployments: Api<Deployment> = Api::default_namespaced(client);

    let created = deployments
        .create(
            &PostParams { field_manager: Some("creator".into()), ..Default::default() },
            &serde_json::from_value(deployment("smp", 1, "nginx:1")).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(managers(&created), [("creator".into(), "Update".into())]);

    // Strategic merge: the container list merges by name.
    let patched = deployments
        .patch(
            "smp",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [
                {"name": "web", "image": "nginx:2"}
            ]}}}})),
        )
        .await
        .unwrap();
    assert_eq!(images(&patched), ["web=nginx:2", "sidecar=busybox"]);
    // `$patch: delete` removes one container.
    let patched = deployments
        .patch(
            "smp",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [
                {"name": "sidecar", "$patch": "delete"}
            ]}}}})),
        )
        .await
        .unwrap();
    assert_eq!(images(&patched), ["web=nginx:2"]);

    // Server-side apply creates, then updates.
    let applied = deployments
        .patch("ssa", &PatchParams::apply("mgr-a"), &Patch::Apply(deployment("ssa", 1, "nginx:1")))
        .await
        .unwrap();
    assert_eq!(managers(&applied), [("mgr-a".into(), "Apply".into())]);
    assert!(applied.metadata.uid.is_some());
    let mut second = deployment("ssa", 2, "nginx:1");
    second["metadata"]["labels"]["extra"] = "yes".into();
    let applied = deployments.patch("ssa", &PatchParams::apply("mgr-a"), &Patch::Apply(&second)).await.unwrap();
    assert_eq!(applied.spec.as_ref().unwrap().replicas, Some(2));
    assert_eq!(applied.metadata.labels.as_ref().unwrap()["extra"], "yes");
    // Applying the same configuration again changes nothing.
    let again = deployments.patch("ssa", &PatchParams::apply("mgr-a"), &Patch::Apply(&second)).await.unwrap();
    assert_eq!(again.metadata.resource_version, applied.metadata.resource_version);
    // Dropping a field the manager alone owns removes it.
    let applied = deployments
        .patch("ssa", &PatchParams::apply("mgr-a"), &Patch::Apply(deployment("ssa", 2, "nginx:1")))
        .await
        .unwrap();
    assert!(!applied.metadata.labels.as_ref().unwrap().contains_key("extra"));

    // Another manager changing an owned field: 409 with causes.
    let other = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "ssa"}, "spec": {"replicas": 5}});
    let error = deployments.patch("ssa", &PatchParams::apply("mgr-b"), &Patch::Apply(&other)).await.unwrap_err();
    let kube::Error::Api(status) = error else { panic!("{error:?}") };
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert_eq!(status.message, "Apply failed with 1 conflict: conflict with \"mgr-a\": .spec.replicas");
    let cause = &status.details.as_ref().unwrap().causes[0];
    assert_eq!(
        (cause.reason.as_str(), cause.message.as_str(), cause.field.as_str()),
        ("FieldManagerConflict", "conflict with \"mgr-a\"", ".spec.replicas")
    );
    // Forced, the other manager takes the field over.
    let forced = deployments.patch("ssa", &PatchParams::apply("mgr-b").force(), &Patch::Apply(&other)).await.unwrap();
    assert_eq!(forced.spec.as_ref().unwrap().replicas, Some(5));
    let mut owners = managers(&forced);
    owners.sort();
    assert_eq!(owners, [("mgr-a".into(), "Apply".into()), ("mgr-b".into(), "Apply".into())]);
    // Status is applied through its subresource, with its own entry.
    let status = deployments
        .patch_status(
            "ssa",
            &PatchParams::apply("status-writer"),
            &Patch::Apply(json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "ssa"}, "status": {"observedGeneration": 7}})),
        )
        .await
        .unwrap();
    assert_eq!(status.status.as_ref().unwrap().observed_generation, Some(7));
    let entry = status
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .find(|e| e.manager.as_deref() == Some("status-writer"))
        .expect("the status applier is recorded");
    assert_eq!(entry.subresource.as_deref(), Some("status"));
    assert_eq!(entry.fields_v1.as_ref().unwrap().0, json!({"f:status": {"f:observedGeneration": {}}}));
    // An update by a third writer is recorded, and a later apply conflicts with it.
    let patched = deployments
        .patch(
            "ssa",
            &PatchParams { field_manager: Some("editor".into()), ..Default::default() },
            &Patch::Merge(json!({"spec": {"minReadySeconds": 3}})),
        )
        .await
        .unwrap();
    assert!(managers(&patched).contains(&("editor".into(), "Update".into())));
    let error = deployments
        .patch(
            "ssa",
            &PatchParams::apply("mgr-a"),
            &Patch::Apply(json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "ssa"}, "spec": {"minReadySeconds": 9}})),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(status) = error else { panic!("{error:?}") };
    assert_eq!(status.details.unwrap().causes[0].message, "conflict with \"editor\" using apps/v1");
}

async fn call(cluster: &TestCluster, request: Request<Body>) -> (u16, Value) {
    let response = cluster.admin_router().oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn patch_request(uri: &str, content_type: &str, body: &str) -> Request<Body> {
    Request::patch(uri).header("content-type", content_type).body(Body::from(body.to_owned())).unwrap()
}

#[tokio::test]
async fn patch_errors_and_yaml_apply() {
    let cluster =
        TestCluster::start_with(TestCluster::builder().configure_api_server(|api| {
            api.register(ResourceInfo::new("example.com", "v1", "Widget", "widgets", true))
        }))
        .await;
    let uri = "/apis/apps/v1/namespaces/default/deployments/y";
    let yaml = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: y\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {app: y}\n  template:\n    metadata:\n      labels: {app: y}\n    spec:\n      containers:\n      - name: c\n        image: nginx\n";

    let (code, body) = call(&cluster, patch_request(uri, "application/apply-patch+yaml", yaml)).await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["reason"], "Invalid");
    assert_eq!(
        body["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
    );

    let apply_uri = format!("{uri}?fieldManager=yaml&force=false");
    let (code, body) = call(&cluster, patch_request(&apply_uri, "application/apply-patch+yaml", yaml)).await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["metadata"]["managedFields"][0]["manager"], "yaml");
    let (code, body) = call(&cluster, patch_request(&apply_uri, "application/apply-patch+yaml", yaml)).await;
    assert_eq!(code, 200, "{body}");

    let (code, body) = call(
        &cluster,
        patch_request(
            uri,
            "application/strategic-merge-patch+json",
            r#"{"spec":{"template":{"spec":{"containers":[{"image":"x"}]}}}}"#,
        ),
    )
    .await;
    assert_eq!(code, 500, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("map: map[image:x] does not contain declared merge key: name"),
        "{body}"
    );

    let (code, body) =
        call(&cluster, patch_request(&format!("{uri}?force=true"), "application/merge-patch+json", "{}")).await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch"
    );

    let (code, body) = call(&cluster, patch_request(uri, "text/plain", "{}")).await;
    assert_eq!(code, 415, "{body}");

    // Custom resources take no strategic merge patch, like upstream.
    let widget = "/apis/example.com/v1/namespaces/default/widgets";
    let request = Request::post(widget)
        .header("content-type", "application/json")
        .body(Body::from(r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"a":1}}"#))
        .unwrap();
    let (code, body) = call(&cluster, request).await;
    assert_eq!(code, 201, "{body}");
    let (code, body) = call(
        &cluster,
        patch_request(&format!("{widget}/w"), "application/strategic-merge-patch+json", r#"{"spec":{"a":2}}"#),
    )
    .await;
    assert_eq!(code, 415, "{body}");
    assert_eq!(
        body["message"],
        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    );
    // ... but server-side apply works on them.
    let (code, body) = call(
        &cluster,
        patch_request(
            &format!("{widget}/w?fieldManager=m"),
            "application/apply-patch+yaml",
            "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\nspec:\n  b: 2\n",
        ),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["spec"], json!({"a": 1, "b": 2}));
}

fn yaml(value: &Value) -> String {
    serde_yaml::to_string(value).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_patch_and_apply() {
    let cluster = TestCluster::start().await;
    let kubectl = cluster.kubectl().await.clone();
    tokio::task::spawn_blocking(move || {
        let run = |args: &[&str], stdin: Option<&str>| kubectl.run_with_input(args, stdin).into_parts();
        let get = |name: &str| -> Value {
            let (ok, out, err) = run(&["get", "deployment", name, "-o", "json", "--show-managed-fields"], None);
            assert!(ok, "{err}");
            serde_json::from_str(&out).unwrap()
        };
        let container_images = |object: &Value| -> Vec<String> {
            object["spec"]["template"]["spec"]["containers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| format!("{}={}", c["name"].as_str().unwrap(), c["image"].as_str().unwrap()))
                .collect()
        };

        // Client-side apply: create, then a strategic merge patch carrying
        // the last-applied configuration.
        let (ok, out, err) =
            run(&["apply", "--validate=false", "-f", "-"], Some(&yaml(&deployment("csa", 1, "nginx:1"))));
        assert!(ok, "{err}");
        assert!(out.contains("deployment.apps/csa created"), "{out}");
        let mut changed = deployment("csa", 2, "nginx:2");
        changed["spec"]["template"]["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "third", "image": "redis"}));
        let (ok, out, err) = run(&["apply", "--validate=false", "-f", "-"], Some(&yaml(&changed)));
        assert!(ok, "{err}");
        assert!(out.contains("deployment.apps/csa configured"), "{out}");
        let object = get("csa");
        assert_eq!(object["spec"]["replicas"], 2);
        assert_eq!(container_images(&object), ["web=nginx:2", "sidecar=busybox", "third=redis"]);
        let managers: Vec<&str> = object["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["manager"].as_str().unwrap())
            .collect();
        assert!(managers.contains(&"kubectl-client-side-apply"), "{managers:?}");
        // Dropping a container from the applied file removes it.
        let (ok, _, err) =
            run(&["apply", "--validate=false", "-f", "-"], Some(&yaml(&deployment("csa", 2, "nginx:2"))));
        assert!(ok, "{err}");
        assert_eq!(container_images(&get("csa")), ["web=nginx:2", "sidecar=busybox"]);

        // kubectl patch defaults to a strategic merge patch.
        let (ok, out, err) = run(
            &[
                "patch",
                "deployment",
                "csa",
                "-p",
                r#"{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"nginx:3"}]}}}}"#,
            ],
            None,
        );
        assert!(ok, "{err}");
        assert!(out.contains("deployment.apps/csa patched"), "{out}");
        assert_eq!(container_images(&get("csa")), ["web=nginx:3", "sidecar=busybox"]);

        // Merge errors read like upstream's.
        let (ok, _, err) = run(
            &["patch", "deployment", "csa", "-p", r#"{"spec":{"template":{"spec":{"containers":[{"image":"x"}]}}}}"#],
            None,
        );
        assert!(!ok);
        assert!(
            err.contains("Error from server: map: map[image:x] does not contain declared merge key: name"),
            "{err}"
        );

        // Server-side apply twice, with a change.
        let (ok, out, err) = run(
            &["apply", "--server-side", "--validate=false", "-f", "-"],
            Some(&yaml(&deployment("ssa", 1, "nginx:1"))),
        );
        assert!(ok, "{err}");
        assert!(out.contains("deployment.apps/ssa serverside-applied"), "{out}");
        let (ok, _, err) = run(
            &["apply", "--server-side", "--validate=false", "-f", "-"],
            Some(&yaml(&deployment("ssa", 2, "nginx:2"))),
        );
        assert!(ok, "{err}");
        let object = get("ssa");
        assert_eq!(object["spec"]["replicas"], 2);
        assert_eq!(container_images(&object), ["web=nginx:2", "sidecar=busybox"]);
        assert_eq!(object["metadata"]["managedFields"][0]["manager"], "kubectl");
        assert_eq!(object["metadata"]["managedFields"][0]["operation"], "Apply");

        // Another manager changing replicas conflicts ...
        let other = yaml(&deployment("ssa", 3, "nginx:2"));
        let args = ["apply", "--server-side", "--validate=false", "--field-manager=other", "-f", "-"];
        let (ok, _, err) = run(&args, Some(&other));
        assert!(!ok);
        assert!(err.contains("Apply failed with 1 conflict: conflict with \"kubectl\": .spec.replicas"), "{err}");
        assert!(err.contains("--force-conflicts"), "{err}");
        // ... unless forced.
        let mut forced = args.to_vec();
        forced.insert(1, "--force-conflicts");
        let (ok, out, err) = run(&forced, Some(&other));
        assert!(ok, "{err}");
        assert!(out.contains("serverside-applied"), "{out}");
        let object = get("ssa");
        assert_eq!(object["spec"]["replicas"], 3);

        // Client-side then server-side apply: kubectl moves the
        // client-side-apply ownership to its apply manager first.
        let (ok, _, err) =
            run(&["apply", "--validate=false", "-f", "-"], Some(&yaml(&deployment("mig", 1, "nginx:1"))));
        assert!(ok, "{err}");
        let (ok, out, err) = run(
            &["apply", "--server-side", "--validate=false", "-f", "-"],
            Some(&yaml(&deployment("mig", 4, "nginx:4"))),
        );
        assert!(ok, "{err}");
        assert!(out.contains("serverside-applied"), "{out}");
        let object = get("mig");
        assert_eq!(object["spec"]["replicas"], 4);
        assert_eq!(container_images(&object), ["web=nginx:4", "sidecar=busybox"]);
        let managers: Vec<String> = object["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| format!("{}/{}", e["manager"].as_str().unwrap(), e["operation"].as_str().unwrap()))
            .collect();
        assert!(managers.contains(&"kubectl/Apply".to_owned()), "{managers:?}");
        assert!(!managers.contains(&"kubectl-client-side-apply/Update".to_owned()), "{managers:?}");
    })
    .await
    .unwrap();
}
