//! The built-in admission plugins in an API server, driven by kube-rs and
//! raw requests: LimitRanger, Priority, DefaultTolerationSeconds,
//! DefaultStorageClass and PodSecurity.

use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::{LimitRange, Namespace, PersistentVolumeClaim, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Api;
use kube::api::{ListParams, PostParams};
use orchestra_core::auth::admission::{
    AdmissionChain, DefaultStorageClass, DefaultTolerationSeconds, LimitRanger, PodSecurity, PodSecurityConfig,
    Priority,
};
use orchestra_core::server::ApiServer;
use orchestra_store::MemStore;
use serde_json::{Value, json};
use tower::ServiceExt;

async fn server() -> ApiServer {
    let builder = ApiServer::builder(Arc::new(MemStore::new()));
    let objects = builder.object_reader();
    let admission = AdmissionChain::new()
        .with(builder.namespace_lifecycle())
        .with(LimitRanger::new(objects.clone()))
        .with(Priority::new(objects.clone()))
        .with(DefaultTolerationSeconds::new())
        .with(DefaultStorageClass::new(objects.clone()))
        .with(PodSecurity::new(objects, PodSecurityConfig::default()));
    builder.admission(admission).build().await.unwrap()
}

fn of<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap()
}

async fn create<T>(api: &Api<T>, value: Value) -> Result<T, kube::Error>
where
    T: kube::Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    api.create(&PostParams::default(), &of(value)).await
}

/// The code and message of a refused write.
fn refusal<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> (u16, String) {
    match result {
        Err(kube::Error::Api(status)) => (status.code, status.message),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn pod(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
}

async fn namespace(client: &kube::Client, name: &str, labels: Value) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    create(&namespaces, json!({"metadata": {"name": name, "labels": labels}})).await.unwrap();
}

#[tokio::test]
async fn limit_ranges_default_and_bound_pods() {
    let server = server().await;
    let client = orchestra_core::client::in_process(&server, "default");
    namespace(&client, "team", json!({})).await;
    let ranges: Api<LimitRange> = Api::namespaced(client.clone(), "team");
    let limits = json!([{
        "type": "Container",
        "default": {"cpu": "500m", "memory": "128Mi"},
        "defaultRequest": {"cpu": "100m"},
        "max": {"cpu": "1"},
    }]);
    create(&ranges, json!({"metadata": {"name": "limits"}, "spec": {"limits": limits}})).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "team");

    let created =
        create(&pods, pod("plain", json!({"containers": [{"name": "c", "image": "busybox"}]}))).await.unwrap();
    let created = serde_json::to_value(created).unwrap();
    assert_eq!(
        created["spec"]["containers"][0]["resources"],
        json!({"limits": {"cpu": "500m", "memory": "128Mi"}, "requests": {"cpu": "100m", "memory": "128Mi"}})
    );
    assert_eq!(
        created["metadata"]["annotations"]["kubernetes.io/limit-ranger"],
        "LimitRanger plugin set: cpu, memory request for container c; cpu, memory limit for container c"
    );
    // The other mutating plugins ran too.
    assert_eq!(created["spec"]["priority"], 0);
    let tolerations = created["spec"]["tolerations"].as_array().unwrap();
    let keys: Vec<_> =
        tolerations.iter().map(|t| (t["key"].as_str().unwrap(), t["tolerationSeconds"].clone())).collect();
    assert_eq!(keys, [("node.kubernetes.io/not-ready", json!(300)), ("node.kubernetes.io/unreachable", json!(300))]);

    let big =
        pod("big", json!({"containers": [{"name": "c", "image": "busybox", "resources": {"limits": {"cpu": "2"}}}]}));
    let (code, message) = refusal(create(&pods, big).await);
    assert_eq!(
        (code, message.as_str()),
        (403, r#"pods "big" is forbidden: maximum cpu usage per Container is 1, but limit is 2"#)
    );
    let names: Vec<_> =
        pods.list(&ListParams::default()).await.unwrap().items.into_iter().map(|p| p.metadata.name).collect();
    assert_eq!(names, [Some("plain".to_owned())], "the refused pod was not stored");
}

#[tokio::test]
async fn priority_classes_resolve() {
    let server = server().await;
    let client = orchestra_core::client::in_process(&server, "default");
    let classes: Api<PriorityClass> = Api::all(client.clone());
    let names: Vec<_> = classes
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|c| (c.metadata.name.unwrap(), c.value))
        .collect();
    assert_eq!(
        names,
        [("system-cluster-critical".to_owned(), 2_000_000_000), ("system-node-critical".to_owned(), 2_000_001_000)],
        "the server creates the built-in classes"
    );
    create(&classes, json!({"metadata": {"name": "high"}, "value": 1000})).await.unwrap();
    let (code, message) = refusal(create(&classes, json!({"metadata": {"name": "system-mine"}, "value": 1000})).await);
    assert_eq!(code, 422, "{message}");

    let container = json!([{"name": "c", "image": "busybox"}]);
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let high = create(&pods, pod("high", json!({"priorityClassName": "high", "containers": container}))).await.unwrap();
    assert_eq!(high.spec.unwrap().priority, Some(1000));
    let (code, message) =
        refusal(create(&pods, pod("lost", json!({"priorityClassName": "nope", "containers": container}))).await);
    assert_eq!(
        (code, message.as_str()),
        (403, r#"pods "lost" is forbidden: no PriorityClass with name nope was found"#)
    );
    let critical = pod("critical", json!({"priorityClassName": "system-node-critical", "containers": container}));
    let (code, message) = refusal(create(&pods, critical.clone()).await);
    assert_eq!(
        (code, message.as_str()),
        (
            403,
            r#"pods "critical" is forbidden: pods with system-node-critical priorityClass is not permitted in default namespace"#
        )
    );
    let system: Api<Pod> = Api::namespaced(client, "kube-system");
    assert_eq!(create(&system, critical).await.unwrap().spec.unwrap().priority, Some(2_000_001_000));
}

#[tokio::test]
async fn claims_get_the_default_storage_class() {
    let server = server().await;
    let client = orchestra_core::client::in_process(&server, "default");
    let classes: Api<StorageClass> = Api::all(client.clone());
    let default = json!({"metadata": {"name": "local", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}}, "provisioner": "orchestra.dev/local"});
    create(&classes, default).await.unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client, "default");
    let spec = json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}});
    let claim = create(&claims, json!({"metadata": {"name": "data"}, "spec": spec})).await.unwrap();
    assert_eq!(claim.spec.unwrap().storage_class_name.as_deref(), Some("local"));
}

/// POSTs a pod; the status, the body and the `Warning` headers.
async fn post_pod(server: &ApiServer, namespace: &str, pod: Value) -> (u16, Value, Vec<String>) {
    let request = Request::post(format!("/api/v1/namespaces/{namespace}/pods"))
        .header("content-type", "application/json")
        // As the server's loopback client: the default chain lets no one in
        // anonymously.
        .extension(orchestra_core::auth::Identity(orchestra_core::client::loopback_user()))
        .body(Body::from(pod.to_string()))
        .unwrap();
    let response = server.router().oneshot(request).await.unwrap();
    let warnings = response.headers().get_all("warning").iter().map(|v| v.to_str().unwrap().to_owned()).collect();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap(), warnings)
}

#[tokio::test]
async fn pod_security_refuses_and_warns_by_namespace_labels() {
    let server = server().await;
    let client = orchestra_core::client::in_process(&server, "default");
    namespace(&client, "secure", json!({"pod-security.kubernetes.io/enforce": "restricted"})).await;
    namespace(&client, "watched", json!({"pod-security.kubernetes.io/warn": "baseline"})).await;
    let privileged = pod(
        "priv",
        json!({"containers": [{"name": "c", "image": "busybox", "securityContext": {"privileged": true}}]}),
    );

    let (status, body, warnings) = post_pod(&server, "secure", privileged.clone()).await;
    assert_eq!((status, body["reason"].as_str()), (403, Some("Forbidden")));
    assert_eq!(
        body["message"],
        "pods \"priv\" is forbidden: violates PodSecurity \"restricted:latest\": \
         privileged (container \"c\" must not set securityContext.privileged=true), \
         allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false), \
         unrestricted capabilities (container \"c\" must set securityContext.capabilities.drop=[\"ALL\"]), \
         runAsNonRoot != true (pod or container \"c\" must set securityContext.runAsNonRoot=true), \
         seccompProfile (pod or container \"c\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
    );
    assert!(warnings.is_empty(), "{warnings:?}");

    let (status, _, warnings) = post_pod(&server, "watched", privileged).await;
    assert_eq!(status, 201);
    assert_eq!(
        warnings,
        [
            r#"299 - "would violate PodSecurity \"baseline:latest\": privileged (container \"c\" must not set securityContext.privileged=true)""#
        ]
    );

    // A pod the restricted level admits.
    let hardened = pod(
        "hardened",
        json!({
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "c", "image": "busybox", "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}],
        }),
    );
    let (status, body, warnings) = post_pod(&server, "secure", hardened).await;
    assert_eq!(status, 201, "{body}");
    assert!(warnings.is_empty(), "{warnings:?}");
}
