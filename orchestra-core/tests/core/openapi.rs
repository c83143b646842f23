//! OpenAPI v3 and `fieldValidation`: kubectl `create`/`apply` with
//! validation on, `kubectl explain`, and the raw HTTP shapes of Strict and
//! Warn; OpenAPI v2 and kubectl's client-side validation of `kind: List`.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use orchestra::testing::TestCluster;
use serde_json::{Value, json};
use tower::ServiceExt;

const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: checked
spec:
  containers:
  - name: c
    image: nginx:1.27
"#;

const BAD_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: unchecked
spec:
  foo: bar
  containers:
  - name: c
    image: nginx:1.27
"#;

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: c
        image: nginx:1.27
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_validates_with_openapi_v3() {
    let cluster = TestCluster::start().await;
    let kubectl = cluster.kubectl().await.clone();
    tokio::task::spawn_blocking(move || {
        // Validation on (the default): kubectl reads OpenAPI v3, sees the
        // fieldValidation parameter and leaves validation to the server.
        let (ok, out, err) = kubectl.run_with_input(&["create", "-f", "-"], Some(POD)).into_parts();
        assert!(ok, "{err}");
        assert!(out.contains("pod/checked created"), "{out}");

        let (ok, _, err) = kubectl.run_with_input(&["create", "-f", "-"], Some(BAD_POD)).into_parts();
        assert!(!ok);
        assert!(
            err.contains("Error from server (BadRequest)")
                && err.contains(r#"strict decoding error: unknown field "spec.foo""#),
            "{err}"
        );
        let (ok, _, _) = kubectl.run(&["get", "pod", "unchecked"]).into_parts();
        assert!(!ok, "a refused object is not stored");

        // --validate=false sends Ignore: created, the unknown field dropped.
        let (ok, _, err) =
            kubectl.run_with_input(&["create", "--validate=false", "-f", "-"], Some(BAD_POD)).into_parts();
        assert!(ok, "{err}");
        let (ok, out, err) = kubectl.run(&["get", "pod", "unchecked", "-o", "json"]).into_parts();
        assert!(ok, "{err}");
        let pod: Value = serde_json::from_str(&out).unwrap();
        assert!(pod.pointer("/spec/foo").is_none(), "{out}");

        // replace (PUT) is validated the same way.
        let changed = POD.replace("nginx:1.27", "nginx:1.28");
        let (ok, _, err) = kubectl
            .run_with_input(&["replace", "-f", "-"], Some(&changed.replace("spec:\n", "spec:\n  bogus: 1\n")))
            .into_parts();
        assert!(!ok);
        assert!(err.contains(r#"strict decoding error: unknown field "spec.bogus""#), "{err}");
        let (ok, out, err) = kubectl.run_with_input(&["replace", "-f", "-"], Some(&changed)).into_parts();
        assert!(ok, "{err}");
        assert!(out.contains("pod/checked replaced"), "{out}");

        // Client-side apply creates on first use.
        let (ok, out, err) = kubectl.run_with_input(&["apply", "-f", "-"], Some(DEPLOYMENT)).into_parts();
        assert!(ok, "{err}");
        assert!(out.contains("deployment.apps/web created"), "{out}");
        let (ok, out, err) =
            kubectl.run(&["get", "deploy", "web", "-o", "jsonpath={.metadata.annotations}"]).into_parts();
        assert!(ok, "{err}");
        assert!(out.contains("kubectl.kubernetes.io/last-applied-configuration"), "{out}");

        // explain reads the schemas.
        let (ok, out, err) = kubectl.run(&["explain", "pods.spec"]).into_parts();
        assert!(ok, "{err}");
        assert!(out.contains("KIND:") && out.contains("Pod"), "{out}");
        assert!(out.contains("FIELD: spec <PodSpec>"), "{out}");
        assert!(out.contains("containers\t<[]Container> -required-"), "{out}");
        assert!(out.contains("nodeName"), "{out}");
        let (ok, out, err) = kubectl.run(&["explain", "deployments.spec.strategy"]).into_parts();
        assert!(ok, "{err}");
        assert!(out.contains("GROUP:") && out.contains("apps"), "{out}");
        assert!(out.contains("rollingUpdate"), "{out}");
        assert!(out.contains("DESCRIPTION:"), "{out}");
        let (ok, out, err) = kubectl.run(&["explain", "deployment.spec.strategy.rollingUpdate.maxSurge"]).into_parts();
        assert!(ok, "{err}");
        assert!(out.contains("<IntOrString>"), "{out}");
        let (ok, out, err) = kubectl.run(&["explain", "nodes", "--recursive"]).into_parts();
        assert!(ok, "{err}");
        assert!(out.contains("podCIDRs"), "{out}");
    })
    .await
    .unwrap();
}

async fn call(cluster: &TestCluster, request: Request<Body>) -> (StatusCode, Vec<String>, Value) {
    let response = cluster.admin_router().oneshot(request).await.unwrap();
    let status = response.status();
    let warnings = response.headers().get_all("warning").iter().map(|v| v.to_str().unwrap().to_owned()).collect();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, warnings, value)
}

fn request(method: &str, uri: &str, content_type: &str, body: String) -> Request<Body> {
    Request::builder().method(method).uri(uri).header("content-type", content_type).body(Body::from(body)).unwrap()
}

const LIST: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: listed
  data:
    a: b
- apiVersion: v1
  kind: Secret
  metadata:
    name: listed
  data:
    password: aHVudGVyMg==
  stringData:
    user: admin
"#;

/// A `kind: List` is validated by kubectl itself (the server's field
/// validation does not cover it), against `/openapi/v2`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_validates_lists_with_openapi_v2() {
    let cluster = TestCluster::start().await;
    let kubectl = cluster.kubectl().await.clone();
    tokio::task::spawn_blocking(move || {
        let (ok, out, err) = kubectl.run_with_input(&["apply", "-f", "-"], Some(LIST)).into_parts();
        assert!(ok, "{err}");
        assert!(out.contains("configmap/listed created") && out.contains("secret/listed created"), "{out}");
        let (ok, out, err) = kubectl.run(&["get", "secret", "listed", "-o", "jsonpath={.data.password}"]).into_parts();
        assert!(ok, "{err}");
        assert_eq!(out, "aHVudGVyMg==");
        // `stringData` is write-only: stored base64-encoded in `data`.
        let (ok, out, err) = kubectl.run(&["get", "secret", "listed", "-o", "json"]).into_parts();
        assert!(ok, "{err}");
        let secret: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(secret["data"]["user"], "YWRtaW4=", "{out}");
        assert!(secret.get("stringData").is_none(), "{out}");

        // A wrong type and an unknown field: refused before anything is sent.
        let wrong_type = LIST.replace("name: listed\n  data:\n    a: b", "name: wrong\n  data: 5");
        let (ok, out, err) = kubectl.run_with_input(&["apply", "-f", "-"], Some(&wrong_type)).into_parts();
        assert!(!ok, "{out}");
        assert!(
            err.contains(r#"error validating data: ValidationError(ConfigMap.data): invalid type for io.k8s.api.core.v1.ConfigMap.data: got "integer", expected "map""#)
                && err.contains("if you choose to ignore these errors, turn validation off with --validate=false"),
            "{err}"
        );
        let unknown = LIST.replace("    name: listed\n  data:\n    password", "    name: listed\n  colour: red\n  data:\n    password");
        let (ok, out, err) = kubectl.run_with_input(&["create", "-f", "-"], Some(&unknown)).into_parts();
        assert!(!ok, "{out}");
        assert!(
            err.contains(r#"ValidationError(Secret): unknown field "colour" in io.k8s.api.core.v1.Secret"#),
            "{err}"
        );
        let labels = LIST.replace("name: listed\n  data:", "name: labelled\n    labels: x\n  data:");
        let (ok, out, err) = kubectl.run_with_input(&["replace", "-f", "-"], Some(&labels)).into_parts();
        assert!(!ok, "{out}");
        assert!(
            err.contains(r#"ValidationError(ConfigMap.metadata.labels): invalid type for io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta.labels: got "string", expected "map""#),
            "{err}"
        );
        let (ok, _, _) = kubectl.run(&["get", "configmap", "wrong"]).into_parts();
        assert!(!ok, "a refused list is not applied");

        // The v3 readers still work.
        let (ok, out, err) = kubectl.run(&["explain", "pod.spec"]).into_parts();
        assert!(ok, "{err}");
        assert!(out.contains("FIELD: spec <PodSpec>"), "{out}");
        let (ok, out, err) = kubectl.run(&["api-resources"]).into_parts();
        assert!(ok, "{err}");
        assert!(out.contains("configmaps") && out.contains("deployments"), "{out}");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn openapi_documents_are_served() {
    let cluster = TestCluster::start().await;
    let (status, _, index) = call(&cluster, request("GET", "/openapi/v3", "", String::new())).await;
    assert_eq!(status, 200);
    let url = index["paths"]["api/v1"]["serverRelativeURL"].as_str().unwrap().to_owned();
    assert!(index["paths"]["apis/apps/v1"].is_object());
    let response = cluster.admin_router().oneshot(request("GET", &url, "", String::new())).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    let etag = response.headers()["etag"].to_str().unwrap().to_owned();
    assert!(url.ends_with(etag.trim_matches('"')), "{url} {etag}");
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let doc: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(doc["info"]["version"], "v1.33.0");
    assert!(doc["components"]["schemas"]["io.k8s.api.core.v1.Pod"].is_object());
    let (status, _, swagger) = call(&cluster, request("GET", "/openapi/v2", "", String::new())).await;
    assert_eq!(status, 200);
    assert_eq!(swagger["swagger"], "2.0");
    assert_eq!(
        swagger["definitions"]["io.k8s.api.core.v1.Pod"]["x-kubernetes-group-version-kind"],
        json!([{"group": "", "version": "v1", "kind": "Pod"}])
    );
    let response = cluster
        .admin_router()
        .oneshot(
            Request::builder()
                .uri("/openapi/v2")
                .header("accept", "application/com.github.proto-openapi.spec.v2@v1.0+protobuf")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/com.github.proto-openapi.spec.v2.v1.0+protobuf");
    let (status, _, _) = call(&cluster, request("GET", "/openapi/v3/apis/nope/v1", "", String::new())).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn field_validation_over_http() {
    let cluster = TestCluster::start().await;
    let pods = "/api/v1/namespaces/default/pods";
    let pod = |name: &str| {
        json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"foo": 1, "containers": [{"name": "c", "image": "i", "bar": 2}]},
        })
        .to_string()
    };

    // POST
    let (status, _, body) =
        call(&cluster, request("POST", &format!("{pods}?fieldValidation=Strict"), "application/json", pod("p"))).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["kind"], "Status");
    assert_eq!(body["reason"], "BadRequest");
    assert_eq!(
        body["message"],
        // json! sorts keys: `containers` comes first in the document.
        r#"Pod in version "v1" cannot be handled as a Pod: strict decoding error: unknown field "spec.containers[0].bar", unknown field "spec.foo""#
    );
    let (status, warnings, body) =
        call(&cluster, request("POST", &format!("{pods}?fieldValidation=Warn"), "application/json", pod("p"))).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        warnings,
        [r#"299 - "unknown field \"spec.containers[0].bar\"""#, r#"299 - "unknown field \"spec.foo\"""#,]
    );
    assert!(body.pointer("/spec/foo").is_none(), "dropped: {body}");
    // Absent means Warn, like upstream.
    let (status, warnings, _) = call(&cluster, request("POST", pods, "application/json", pod("q"))).await;
    assert_eq!(status, 201);
    assert_eq!(warnings.len(), 2);
    let (status, warnings, _) =
        call(&cluster, request("POST", &format!("{pods}?fieldValidation=Ignore"), "application/json", pod("r"))).await;
    assert_eq!(status, 201);
    assert!(warnings.is_empty());
    // Duplicates.
    let dup = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "d", "name": "d"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}"#;
    let (status, _, body) =
        call(&cluster, request("POST", &format!("{pods}?fieldValidation=Strict"), "application/json", dup.into()))
            .await;
    assert_eq!(status, 400);
    assert!(
        body["message"].as_str().unwrap().ends_with(r#"strict decoding error: duplicate field "metadata.name""#),
        "{body}"
    );

    // PUT
    let (_, _, current) = call(&cluster, request("GET", &format!("{pods}/p"), "", String::new())).await;
    let mut update = current.clone();
    update["spec"]["baz"] = json!(true);
    let (status, _, body) = call(
        &cluster,
        request("PUT", &format!("{pods}/p?fieldValidation=Strict"), "application/json", update.to_string()),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["message"].as_str().unwrap().ends_with(r#"strict decoding error: unknown field "spec.baz""#),
        "{body}"
    );
    let (status, warnings, body) = call(
        &cluster,
        request("PUT", &format!("{pods}/p?fieldValidation=Warn"), "application/json", update.to_string()),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(warnings, [r#"299 - "unknown field \"spec.baz\"""#]);

    // PATCH (merge)
    let patch = json!({"metadata": {"labels": {"a": "b"}}, "spec": {"qux": 1}}).to_string();
    let (status, _, body) = call(
        &cluster,
        request("PATCH", &format!("{pods}/p?fieldValidation=Strict"), "application/merge-patch+json", patch.clone()),
    )
    .await;
    // Upstream refuses a patch that makes an invalid object: 422, the
    // cause on the field `patch`.
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["reason"], "Invalid");
    let message = body["message"].as_str().unwrap();
    assert!(message.ends_with(r#"strict decoding error: unknown field "spec.qux""#), "{body}");
    assert_eq!(body["details"]["causes"][0]["field"], "patch");
    let (_, _, unchanged) = call(&cluster, request("GET", &format!("{pods}/p"), "", String::new())).await;
    assert!(unchanged.pointer("/metadata/labels/a").is_none(), "a refused patch is not applied");
    let (status, warnings, body) = call(
        &cluster,
        request("PATCH", &format!("{pods}/p?fieldValidation=Warn"), "application/merge-patch+json", patch),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(warnings, [r#"299 - "unknown field \"spec.qux\"""#]);
    assert_eq!(body["metadata"]["labels"]["a"], "b");
    assert!(body.pointer("/spec/qux").is_none());

    // Known fields pass quietly everywhere.
    let fine = json!({"metadata": {"labels": {"c": "d"}}}).to_string();
    let (status, warnings, _) = call(
        &cluster,
        request("PATCH", &format!("{pods}/p?fieldValidation=Strict"), "application/merge-patch+json", fine),
    )
    .await;
    assert_eq!(status, 200);
    assert!(warnings.is_empty());
}
