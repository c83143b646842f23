//! Admission webhooks in an API server: MutatingWebhookConfigurations and
//! ValidatingWebhookConfigurations created through the API, calling a
//! webhook service the test serves on loopback over HTTPS with a CA of its
//! own; driven by kube-rs, and by kubectl against a whole cluster.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::core::v1::{ConfigMap, Endpoints, Namespace, Pod, Service as CoreService};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use orchestra::testing::TestCluster;
use orchestra_core::server::ApiServer;
use orchestra_core::server::pki::Pki;
use orchestra_core::tls::{ClientAuth, ListenOptions, server_config};
use orchestra_store::MemStore;
use serde_json::{Value, json};

/// The webhook service: each path answers as [`answer`] says; `/slow`
/// after two seconds. It counts the calls of every path.
struct Service {
    base: String,
    ca: String,
    calls: Arc<std::sync::Mutex<std::collections::BTreeMap<String, usize>>>,
    _dir: tempfile::TempDir,
}

impl Service {
    async fn start() -> Service {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::load_or_create(dir.path(), &[]).unwrap();
        // Reached at its URL, and as the Service `webhooks/hooks`.
        let serving =
            pki.issue_serving("webhooks", &["127.0.0.1".to_owned(), "hooks.webhooks.svc".to_owned()]).unwrap();
        let tls = server_config(&serving, pki.ca_pem(), ClientAuth::Optional).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("https://{}", listener.local_addr().unwrap());
        let calls = Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::new()));
        let counted = calls.clone();
        let router = axum::Router::new().route(
            "/{path}",
            axum::routing::post(
                move |axum::extract::Path(path): axum::extract::Path<String>, axum::Json(review): axum::Json<Value>| {
                    *counted.lock().unwrap().entry(path.clone()).or_insert(0) += 1;
                    async move {
                        if path == "slow" {
                            tokio::time::sleep(Duration::from_secs(2)).await;
                        }
                        let request = &review["request"];
                        let mut response = answer(&path, request);
                        response["uid"] = request["uid"].clone();
                        axum::Json(json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}))
                    }
                },
            ),
        );
        tokio::spawn(orchestra_core::server::serve(
            listener,
            router,
            ListenOptions::default().with_tls(tls),
            std::future::pending(),
        ));
        Service { base, ca: B64.encode(pki.ca_pem()), calls, _dir: dir }
    }

    fn calls(&self, path: &str) -> usize {
        self.calls.lock().unwrap().get(path).copied().unwrap_or(0)
    }

    /// A webhook on pod creates calling `path`, with `extra` fields.
    fn webhook(&self, name: &str, path: &str, extra: Value) -> Value {
        let mut webhook = json!({
            "name": name,
            "clientConfig": {"url": format!("{}/{path}", self.base), "caBundle": self.ca},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        });
        for (key, value) in extra.as_object().unwrap() {
            webhook[key] = value.clone();
        }
        webhook
    }

    /// The webhook every configuration of these tests holds: it answers
    /// for ConfigMaps labelled `probe`, so that [`loaded`] can tell when the
    /// server has read the configuration.
    fn probe(&self) -> Value {
        self.webhook(
            "probe.hooks.test",
            "probe",
            json!({
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
                "objectSelector": {"matchLabels": {"probe": "yes"}},
            }),
        )
    }
}

/// A JSON patch answer adding the label `key: yes`.
fn add_label(key: &str, request: &Value) -> Value {
    let operation = match request.pointer("/object/metadata/labels") {
        Some(Value::Object(_)) => json!({"op": "add", "path": format!("/metadata/labels/{key}"), "value": "yes"}),
        _ => json!({"op": "add", "path": "/metadata/labels", "value": {key: "yes"}}),
    };
    json!({"allowed": true, "patchType": "JSONPatch", "patch": B64.encode(serde_json::to_vec(&json!([operation])).unwrap())})
}

/// `inject` labels, `deny` refuses, `warn` warns, `count` only counts,
/// `slow` and every other path allow.
fn answer(path: &str, request: &Value) -> Value {
    match path {
        "inject" => add_label("injected", request),
        "deny" => json!({"allowed": false, "status": {"code": 403, "reason": "Forbidden", "message": "no pods today"}}),
        "warn" => json!({"allowed": true, "warnings": ["pods are watched"]}),
        _ => json!({"allowed": true}),
    }
}

async fn server() -> (ApiServer, kube::Client) {
    let server = ApiServer::new(Arc::new(MemStore::new())).await.unwrap();
    let client = orchestra_core::client::in_process(&server, "default");
    (server, client)
}

fn of<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap()
}

fn pod(name: &str, labels: Value) -> Pod {
    of(
        json!({"metadata": {"name": name, "labels": labels}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
    )
}

/// Creates a configuration of either kind holding `webhooks` and the
/// probe, and waits until the server calls it.
async fn configure(client: &kube::Client, service: &Service, mutating: bool, name: &str, mut webhooks: Vec<Value>) {
    webhooks.push(service.probe());
    let configuration = json!({"metadata": {"name": name}, "webhooks": webhooks});
    if mutating {
        let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
        api.create(&PostParams::default(), &of(configuration)).await.unwrap();
    } else {
        let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        api.create(&PostParams::default(), &of(configuration)).await.unwrap();
    }
    loaded(client, service).await;
}

/// Waits until a dry-run ConfigMap create reaches the probe webhook: the
/// server has read the configurations written so far.
async fn loaded(client: &kube::Client, service: &Service) {
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let before = service.calls("probe");
    let deadline = Instant::now() + Duration::from_secs(10);
    let dry_run = PostParams { dry_run: true, ..Default::default() };
    let probe: ConfigMap = of(json!({"metadata": {"name": "probe", "labels": {"probe": "yes"}}}));
    while service.calls("probe") == before {
        assert!(Instant::now() < deadline, "the server never called the new configuration");
        let _ = configmaps.create(&dry_run, &probe).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The code and message of a refused write.
fn refusal<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> (u16, String) {
    match result {
        Err(kube::Error::Api(status)) => (status.code, status.message),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn a_mutating_webhook_patches_what_is_stored() {
    let service = Service::start().await;
    let (_server, client) = server().await;
    configure(&client, &service, true, "inject", vec![service.webhook("inject.hooks.test", "inject", json!({}))]).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let created = pods.create(&PostParams::default(), &pod("web", json!({"app": "web"}))).await.unwrap();
    let labels = created.metadata.labels.unwrap();
    assert_eq!(labels.get("injected").map(String::as_str), Some("yes"));
    assert_eq!(labels.get("app").map(String::as_str), Some("web"));
    let stored = pods.get("web").await.unwrap();
    assert_eq!(stored.metadata.labels.unwrap().get("injected").map(String::as_str), Some("yes"));
    assert_eq!(service.calls("inject"), 1);
}

#[tokio::test]
async fn a_service_reference_reaches_the_services_endpoints() {
    let service = Service::start().await;
    let (_server, client) = server().await;
    let port: u16 = service.base.rsplit(':').next().unwrap().parse().unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces.create(&PostParams::default(), &of(json!({"metadata": {"name": "webhooks"}}))).await.unwrap();
    let services: Api<CoreService> = Api::namespaced(client.clone(), "webhooks");
    let spec = json!({"ports": [{"name": "https", "port": 443, "targetPort": port}]});
    services.create(&PostParams::default(), &of(json!({"metadata": {"name": "hooks"}, "spec": spec}))).await.unwrap();
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "webhooks");
    let subsets = json!([{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "https", "port": port}]}]);
    endpoints
        .create(&PostParams::default(), &of(json!({"metadata": {"name": "hooks"}, "subsets": subsets})))
        .await
        .unwrap();
    let mut webhook = service.webhook("svc.hooks.test", "unused", json!({}));
    webhook["clientConfig"] =
        json!({"caBundle": service.ca, "service": {"namespace": "webhooks", "name": "hooks", "path": "/inject"}});
    configure(&client, &service, true, "by-service", vec![webhook]).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let created = pods.create(&PostParams::default(), &pod("web", json!({}))).await.unwrap();
    assert_eq!(created.metadata.labels.unwrap().get("injected").map(String::as_str), Some("yes"));
    assert_eq!(service.calls("inject"), 1);
}

#[tokio::test]
async fn a_validating_webhook_refuses_with_its_message_and_nothing_is_stored() {
    let service = Service::start().await;
    let (server, client) = server().await;
    configure(
        &client,
        &service,
        false,
        "deny",
        vec![
            service.webhook("warn.hooks.test", "warn", json!({})),
            service.webhook("deny.hooks.test", "deny", json!({})),
        ],
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let (code, message) = refusal(pods.create(&PostParams::default(), &pod("web", json!({}))).await);
    assert_eq!(code, 403);
    assert_eq!(message, "admission webhook \"deny.hooks.test\" denied the request: no pods today");
    assert!(matches!(pods.get("web").await, Err(kube::Error::Api(status)) if status.code == 404));

    // The warning reaches the client as a header, with the refusal.
    use tower::ServiceExt as _;
    let body = serde_json::to_vec(&pod("raw", json!({}))).unwrap();
    let request = axum::http::Request::post("/api/v1/namespaces/default/pods")
        .header("content-type", "application/json")
        .extension(orchestra_core::auth::Identity(orchestra_core::auth::UserInfo::new("admin", &["system:masters"])))
        .body(axum::body::Body::from(body))
        .unwrap();
    let response = server.router().oneshot(request).await.unwrap();
    assert_eq!(response.status(), 403);
    let warnings: Vec<_> =
        response.headers().get_all("warning").iter().map(|v| v.to_str().unwrap().to_owned()).collect();
    assert_eq!(warnings, ["299 - \"pods are watched\""]);
}

#[tokio::test]
async fn failure_policy_decides_when_the_webhook_cannot_answer() {
    let service = Service::start().await;
    let (_server, client) = server().await;
    let down = "https://127.0.0.1:9/down";
    let unreachable = |name: &str, policy: &str, namespace: &str| {
        json!({
            "name": name,
            "clientConfig": {"url": down, "caBundle": service.ca},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "failurePolicy": policy,
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        })
    };
    let slow = service.webhook(
        "slow.hooks.test",
        "slow",
        json!({"timeoutSeconds": 1, "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-public"}}}),
    );
    let webhooks = vec![
        unreachable("closed.hooks.test", "Fail", "default"),
        unreachable("open.hooks.test", "Ignore", "kube-system"),
        slow,
    ];
    configure(&client, &service, false, "down", webhooks).await;
    let in_namespace = |namespace: &str| Api::<Pod>::namespaced(client.clone(), namespace);
    let (code, message) = refusal(in_namespace("default").create(&PostParams::default(), &pod("a", json!({}))).await);
    assert_eq!(code, 500);
    assert!(message.contains("failed calling webhook \"closed.hooks.test\": failed to call webhook"), "{message}");
    in_namespace("kube-system").create(&PostParams::default(), &pod("a", json!({}))).await.unwrap();
    // timeoutSeconds: 1 against a webhook that answers after two seconds.
    let started = Instant::now();
    let (code, message) =
        refusal(in_namespace("kube-public").create(&PostParams::default(), &pod("a", json!({}))).await);
    assert!(started.elapsed() < Duration::from_millis(1900), "took {:?}", started.elapsed());
    assert_eq!(code, 500);
    assert!(
        message.contains("failed calling webhook \"slow.hooks.test\"") && message.contains("timed out"),
        "{message}"
    );
}

#[tokio::test]
async fn selectors_choose_the_writes_sent() {
    let service = Service::start().await;
    let (_server, client) = server().await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for (name, env) in [("prod", "prod"), ("dev", "dev")] {
        namespaces
            .create(&PostParams::default(), &of(json!({"metadata": {"name": name, "labels": {"env": env}}})))
            .await
            .unwrap();
    }
    let webhooks = vec![
        service.webhook("prod.hooks.test", "deny", json!({"namespaceSelector": {"matchLabels": {"env": "prod"}}})),
        service.webhook(
            "canary.hooks.test",
            "deny",
            json!({"objectSelector": {"matchExpressions": [{"key": "track", "operator": "In", "values": ["canary"]}]}}),
        ),
    ];
    configure(&client, &service, false, "selectors", webhooks).await;
    let create = |namespace: &str, labels: Value| {
        let pods = Api::<Pod>::namespaced(client.clone(), namespace);
        async move { pods.create(&PostParams::default(), &pod("p", labels)).await }
    };
    let (_, message) = refusal(create("prod", json!({})).await);
    assert!(message.contains("\"prod.hooks.test\""), "{message}");
    create("dev", json!({"track": "stable"})).await.unwrap();
    let (_, message) = refusal(create("default", json!({"track": "canary"})).await);
    assert!(message.contains("\"canary.hooks.test\""), "{message}");
}

#[tokio::test]
async fn if_needed_webhooks_are_called_again_after_a_later_change() {
    let service = Service::start().await;
    let (_server, client) = server().await;
    let webhooks = vec![
        service.webhook("a-count.hooks.test", "count", json!({"reinvocationPolicy": "IfNeeded"})),
        service.webhook("b-never.hooks.test", "never", json!({})),
        service.webhook("c-inject.hooks.test", "inject", json!({})),
    ];
    configure(&client, &service, true, "reinvoke", webhooks).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let created = pods.create(&PostParams::default(), &pod("p", json!({}))).await.unwrap();
    assert!(created.metadata.labels.unwrap().contains_key("injected"));
    assert_eq!((service.calls("count"), service.calls("never"), service.calls("inject")), (2, 1, 1));
}

#[tokio::test]
async fn dry_runs_and_side_effects() {
    let service = Service::start().await;
    let (_server, client) = server().await;
    // v1 accepts only webhooks without side effects, or none on dry runs.
    let configurations: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let some = json!({"metadata": {"name": "some"}, "webhooks": [service.webhook("some.hooks.test", "deny", json!({"sideEffects": "Some"}))]});
    let (code, message) = refusal(configurations.create(&PostParams::default(), &of(some)).await);
    assert_eq!(code, 422);
    assert!(message.contains("webhooks[0].sideEffects: Unsupported value: \"Some\""), "{message}");

    configure(
        &client,
        &service,
        true,
        "dry",
        vec![service.webhook("dry.hooks.test", "inject", json!({"sideEffects": "NoneOnDryRun"}))],
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let dry_run = PostParams { dry_run: true, ..Default::default() };
    let answered = pods.create(&dry_run, &pod("p", json!({}))).await.unwrap();
    assert!(answered.metadata.labels.unwrap().contains_key("injected"), "the dry run is mutated");
    assert!(matches!(pods.get("p").await, Err(kube::Error::Api(status)) if status.code == 404), "and not stored");
}

#[tokio::test]
async fn configurations_are_validated_and_never_sent_to_webhooks() {
    let service = Service::start().await;
    let (_server, client) = server().await;
    let configurations: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let bad = json!({"metadata": {"name": "bad"}, "webhooks": [{
        "name": "bad", "clientConfig": {"url": "http://127.0.0.1/x"}, "sideEffects": "None", "admissionReviewVersions": ["v1beta1"],
        "timeoutSeconds": 60, "matchConditions": [{"name": "c", "expression": "true"}],
    }]});
    let (code, message) = refusal(configurations.create(&PostParams::default(), &of(bad)).await);
    assert_eq!(code, 422);
    for field in
        ["webhooks[0].name", "clientConfig.url", "admissionReviewVersions", "timeoutSeconds", "matchConditions"]
    {
        assert!(message.contains(field), "{field}: {message}");
    }
    // A webhook refusing everything, itself included, cannot refuse its removal.
    let everything = service.webhook(
        "everything.hooks.test",
        "deny",
        json!({"rules": [{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*/*"]}]}),
    );
    configure(&client, &service, false, "everything", vec![everything]).await;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let (code, _) = refusal(configmaps.create(&PostParams::default(), &of(json!({"metadata": {"name": "c"}}))).await);
    assert_eq!(code, 403);
    let calls = service.calls("deny");
    configurations.delete("everything", &DeleteParams::default()).await.unwrap();
    assert_eq!(service.calls("deny"), calls, "the configuration's own delete is not sent");
}

/// `kubectl create -f` of a configuration, then `kubectl run`, refused
/// with the webhook's words and warned.
#[tokio::test(flavor = "multi_thread")]
async fn kubectl_sees_the_webhooks_refusal_and_warnings() {
    let service = Service::start().await;
    let cluster = TestCluster::start().await;
    let kubectl = cluster.kubectl().await;
    let webhooks = vec![
        service.webhook("warn.hooks.test", "warn", json!({})),
        service.webhook("deny.hooks.test", "deny", json!({})),
        service.probe(),
    ];
    let configuration = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "no-pods"},
        "webhooks": webhooks,
    });
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("webhookconfig.yaml");
    // JSON is YAML, and keeps the label value `yes` a string for kubectl's YAML 1.1.
    std::fs::write(&file, serde_json::to_string_pretty(&configuration).unwrap()).unwrap();
    let created = kubectl.run(&["create", "-f", file.to_str().unwrap()]);
    assert!(created.success, "{}", created.stderr);
    loaded(&cluster.client(), &service).await;
    let refused = kubectl.run(&["run", "web", "--image=nginx", "-n", "default"]);
    assert!(!refused.success);
    assert!(
        refused.stderr.contains("admission webhook \"deny.hooks.test\" denied the request: no pods today"),
        "{}",
        refused.stderr
    );
    assert!(refused.stderr.contains("Warning: pods are watched"), "{}", refused.stderr);
    let listed = kubectl.run(&["get", "pods", "-n", "default", "-o", "name"]);
    assert!(listed.success && listed.stdout.trim().is_empty(), "{listed:?}");
    let deleted = kubectl.run(&["delete", "validatingwebhookconfiguration", "no-pods"]);
    assert!(deleted.success, "{}", deleted.stderr);
}
