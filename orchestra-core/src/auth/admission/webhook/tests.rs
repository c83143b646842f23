//! The webhook plugins' tests: matching tables, answer checks, and calls
//! to a webhook served on loopback over HTTPS.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};

use super::*;
use crate::auth::UserInfo;
use crate::auth::admission::{AdmissionPlugin, StaticObjects, collect_notes, collect_warnings};
use crate::tls::pki::Pki;

const MUTATING: ResourceRef<'static> = ResourceRef::new(GROUP, "v1", "mutatingwebhookconfigurations");
const VALIDATING: ResourceRef<'static> = ResourceRef::new(GROUP, "v1", "validatingwebhookconfigurations");

fn attributes<'a>(operation: Operation, gvr: (&'a str, &'a str, &'a str), sub: &'a str, ns: &'a str) -> Attributes<'a> {
    Attributes { operation, group: gvr.0, version: gvr.1, resource: gvr.2, subresource: sub, namespace: ns }
}

#[test]
fn rules_match_like_upstream() {
    let pods = ("", "v1", "pods");
    let namespaces = ("", "v1", "namespaces");
    let nodes = ("", "v1", "nodes");
    let deployments = ("apps", "v1", "deployments");
    let rule = |operations: &[&str], groups: &[&str], versions: &[&str], resources: &[&str], scope: &str| {
        Rule::parse(&json!({"operations": operations, "apiGroups": groups, "apiVersions": versions,
            "resources": resources, "scope": scope}))
    };
    let create_pods = rule(&["CREATE"], &[""], &["v1"], &["pods"], "*");
    let everything = rule(&["*"], &["*"], &["*"], &["*/*"], "*");
    let all_main = rule(&["*"], &["*"], &["*"], &["*"], "*");
    let pods_and_subs = rule(&["*"], &[""], &["v1"], &["pods/*"], "*");
    let pod_status = rule(&["UPDATE"], &[""], &["v1"], &["pods/status"], "*");
    let namespaced = rule(&["*"], &["*"], &["*"], &["*"], "Namespaced");
    let cluster = rule(&["*"], &["*"], &["*"], &["*"], "Cluster");
    let apps_v1beta1 = rule(&["*"], &["apps"], &["v1beta1"], &["deployments"], "*");
    // (rule, request, matches)
    let cases: Vec<(&str, &Rule, Attributes<'_>, bool)> = vec![
        ("create pods", &create_pods, attributes(Operation::Create, pods, "", "a"), true),
        ("update is not create", &create_pods, attributes(Operation::Update, pods, "", "a"), false),
        ("another resource", &create_pods, attributes(Operation::Create, nodes, "", ""), false),
        ("a subresource is not the resource", &create_pods, attributes(Operation::Create, pods, "binding", "a"), false),
        ("another group", &create_pods, attributes(Operation::Create, deployments, "", "a"), false),
        ("*/* matches subresources", &everything, attributes(Operation::Delete, pods, "status", "a"), true),
        ("* matches main resources", &all_main, attributes(Operation::Create, deployments, "", "a"), true),
        ("* does not match subresources", &all_main, attributes(Operation::Update, pods, "status", "a"), false),
        ("pods/* matches pods", &pods_and_subs, attributes(Operation::Create, pods, "", "a"), true),
        ("pods/* matches pods/binding", &pods_and_subs, attributes(Operation::Create, pods, "binding", "a"), true),
        ("pods/status", &pod_status, attributes(Operation::Update, pods, "status", "a"), true),
        ("pods/status is not pods", &pod_status, attributes(Operation::Update, pods, "", "a"), false),
        ("namespaced scope, namespaced kind", &namespaced, attributes(Operation::Create, pods, "", "a"), true),
        ("namespaced scope, cluster kind", &namespaced, attributes(Operation::Create, nodes, "", ""), false),
        ("namespaced scope, a namespace", &namespaced, attributes(Operation::Create, namespaces, "", "a"), false),
        ("cluster scope, cluster kind", &cluster, attributes(Operation::Create, nodes, "", ""), true),
        ("cluster scope, a namespace", &cluster, attributes(Operation::Update, namespaces, "", "a"), true),
        ("cluster scope, namespaced kind", &cluster, attributes(Operation::Create, pods, "", "a"), false),
        ("another version", &apps_v1beta1, attributes(Operation::Create, deployments, "", "a"), false),
    ];
    for (name, rule, request, expected) in cases {
        assert_eq!(rule.matches(&request), expected, "{name}");
    }
}

/// A configuration of `kind` named `name` with one webhook per entry,
/// each `{"name": ..., extra fields}` completed with defaults.
fn configuration(name: &str, webhooks: Vec<Value>) -> Value {
    let webhooks: Vec<Value> = webhooks
        .into_iter()
        .map(|mut webhook| {
            let defaults = json!({
                "clientConfig": {"url": "https://127.0.0.1:1/unused"},
                "rules": [{"operations": ["*"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
            });
            for (key, value) in defaults.as_object().unwrap() {
                if webhook.get(key).is_none() {
                    webhook[key] = value.clone();
                }
            }
            webhook
        })
        .collect();
    json!({"metadata": {"name": name}, "webhooks": webhooks})
}

/// A write as the plugins see it, owning what the request borrows.
struct Write {
    operation: Operation,
    resource: ResourceInfo,
    subresource: Option<&'static str>,
    namespace: Option<&'static str>,
    name: &'static str,
    object: Option<Value>,
    old_object: Option<Value>,
    user: UserInfo,
    dry_run: bool,
}

impl Write {
    fn new(operation: Operation, resource: ResourceInfo, namespace: Option<&'static str>, object: Value) -> Write {
        let (object, old_object) = match operation {
            Operation::Create => (Some(object), None),
            Operation::Update => (Some(object.clone()), Some(object)),
            Operation::Delete => (None, Some(object)),
        };
        Write {
            operation,
            resource,
            subresource: None,
            namespace,
            name: "w",
            object,
            old_object,
            user: UserInfo::new("alice", &["dev"]),
            dry_run: false,
        }
    }

    fn pod(labels: Value) -> Write {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w", "namespace": "team-a", "labels": labels}});
        Write::new(Operation::Create, ResourceInfo::new("", "v1", "Pod", "pods", true), Some("team-a"), pod)
    }

    fn request(&self) -> AdmissionRequest<'_> {
        AdmissionRequest {
            operation: self.operation,
            resource: &self.resource,
            subresource: self.subresource,
            namespace: self.namespace,
            name: self.name,
            object: self.object.clone(),
            old_object: self.old_object.as_ref(),
            user: &self.user,
            dry_run: self.dry_run,
        }
    }
}

fn objects_with(configurations: &[(ResourceRef<'static>, Value)]) -> Arc<StaticObjects> {
    let objects = Arc::new(StaticObjects::new());
    for (name, labels) in [("team-a", json!({"env": "prod"})), ("team-b", json!({"env": "dev"}))] {
        objects.insert(NAMESPACES, json!({"metadata": {"name": name, "labels": labels}}));
    }
    for (resource, configuration) in configurations {
        objects.insert(*resource, configuration.clone());
    }
    objects
}

#[test]
fn selectors_and_policies_choose_the_webhooks() {
    let core_events = ResourceInfo::new("", "v1", "Event", "events", true);
    let new_events =
        ResourceInfo::new("events.k8s.io", "v1", "Event", "events", true).stored_as(crate::api::conversion::EVENTS);
    let hooks = configuration(
        "a-hooks",
        vec![
            json!({"name": "all.pods.test"}),
            json!({"name": "prod.pods.test", "namespaceSelector": {"matchLabels": {"env": "prod"}}}),
            json!({"name": "labelled.pods.test", "objectSelector": {"matchExpressions": [{"key": "inject", "operator": "Exists"}]}}),
            json!({"name": "ns.test", "namespaceSelector": {"matchLabels": {"env": "prod"}},
                "rules": [{"operations": ["*"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["namespaces", "nodes"]}]}),
            json!({"name": "new-events.test", "rules": [{"operations": ["*"], "apiGroups": ["events.k8s.io"], "apiVersions": ["v1"], "resources": ["events"]}]}),
            json!({"name": "exact-events.test", "matchPolicy": "Exact", "rules": [{"operations": ["*"], "apiGroups": ["events.k8s.io"], "apiVersions": ["v1"], "resources": ["events"]}]}),
            json!({"name": "configs.test", "rules": [{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*/*"]}],
                "namespaceSelector": {"matchLabels": {"nothing": "matches"}}}),
        ],
    );
    let later = configuration("b-hooks", vec![json!({"name": "later.pods.test"})]);
    let objects = objects_with(&[(MUTATING, later), (MUTATING, hooks)]);
    let dispatcher = Dispatcher::reading(Kind::Mutating, objects);
    let namespace =
        |labels: Value| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "w", "labels": labels}});
    let namespaces = || ResourceInfo::new("", "v1", "Namespace", "namespaces", false);
    let in_team = |namespace: &'static str| {
        let mut write = Write::pod(json!({}));
        write.namespace = Some(namespace);
        write
    };
    let mut old_labelled = Write::pod(json!({}));
    old_labelled.operation = Operation::Update;
    old_labelled.old_object = Some(json!({"metadata": {"labels": {"inject": "yes"}}}));
    let configs = Write::new(
        Operation::Create,
        ResourceInfo::new(GROUP, "v1", "MutatingWebhookConfiguration", "mutatingwebhookconfigurations", false),
        None,
        json!({"metadata": {"name": "w"}}),
    );
    let all_and_later = ["all.pods.test", "later.pods.test"];
    let cases: Vec<(&str, Write, Vec<&str>)> = vec![
        ("a pod in a prod namespace", in_team("team-a"), vec!["all.pods.test", "prod.pods.test", "later.pods.test"]),
        ("a pod elsewhere", in_team("team-b"), all_and_later.to_vec()),
        (
            "a labelled pod",
            Write::pod(json!({"inject": "yes"})),
            vec!["all.pods.test", "prod.pods.test", "labelled.pods.test", "later.pods.test"],
        ),
        (
            "an old object labelled",
            old_labelled,
            vec!["all.pods.test", "prod.pods.test", "labelled.pods.test", "later.pods.test"],
        ),
        (
            "a namespace by its own labels",
            Write::new(Operation::Create, namespaces(), None, namespace(json!({"env": "prod"}))),
            vec!["ns.test"],
        ),
        (
            "another namespace",
            Write::new(Operation::Create, namespaces(), None, namespace(json!({"env": "dev"}))),
            vec![],
        ),
        (
            "a cluster-scoped kind ignores namespace selectors",
            Write::new(Operation::Create, ResourceInfo::new("", "v1", "Node", "nodes", false), None, json!({})),
            vec!["ns.test", "configs.test"],
        ),
        (
            "core events match an events.k8s.io rule by equivalence",
            Write::new(Operation::Create, core_events, Some("team-b"), json!({})),
            vec!["new-events.test"],
        ),
        (
            "events.k8s.io events match exactly",
            Write::new(Operation::Create, new_events, Some("team-b"), json!({})),
            vec!["new-events.test", "exact-events.test"],
        ),
        ("webhook configurations are exempt", configs, vec![]),
    ];
    for (name, write, expected) in cases {
        let request = write.request();
        let invocations = futures::executor::block_on(dispatcher.invocations(&request)).unwrap();
        let names: Vec<&str> = invocations.iter().map(|i| i.webhook.name.as_str()).collect();
        assert_eq!(names, expected, "{name}");
    }
    let missing = in_team("gone");
    let error = futures::executor::block_on(dispatcher.invocations(&missing.request())).unwrap_err();
    assert_eq!((error.code, error.message.as_str()), (404, "namespaces \"gone\" not found"));
}

#[test]
fn an_equivalent_match_sends_the_object_in_the_rules_version() {
    let core_events = ResourceInfo::new("", "v1", "Event", "events", true);
    let hooks = configuration(
        "events",
        vec![
            json!({"name": "events.hooks.test", "rules": [{"operations": ["CREATE"], "apiGroups": ["events.k8s.io"], "apiVersions": ["v1"], "resources": ["events"]}]}),
        ],
    );
    let dispatcher = Dispatcher::reading(Kind::Validating, objects_with(&[(VALIDATING, hooks)]));
    let event = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "w"}, "message": "hello"});
    let write = Write::new(Operation::Create, core_events, Some("team-b"), event);
    let request = write.request();
    let invocations = futures::executor::block_on(dispatcher.invocations(&request)).unwrap();
    let review = review("uid-1", &invocations[0], &request);
    let sent = &review["request"];
    assert_eq!(sent["kind"], json!({"group": "events.k8s.io", "version": "v1", "kind": "Event"}));
    assert_eq!(sent["requestKind"], json!({"group": "", "version": "v1", "kind": "Event"}));
    assert_eq!(sent["resource"]["group"], "events.k8s.io");
    assert_eq!(sent["requestResource"], json!({"group": "", "version": "v1", "resource": "events"}));
    assert_eq!(sent["object"]["apiVersion"], "events.k8s.io/v1");
    assert_eq!(sent["object"]["note"], "hello", "converted to the rule's version");
    assert_eq!(sent["namespace"], "team-b");
    assert_eq!(sent["userInfo"], json!({"username": "alice", "groups": ["dev"]}));
    assert_eq!(sent["options"], json!({"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}));
    assert_eq!(sent["oldObject"], Value::Null);
}

#[test]
fn answers_are_checked() {
    let patch = base64::engine::general_purpose::STANDARD.encode(br#"[{"op":"add","path":"/a","value":1}]"#);
    let answer =
        |response: Value| json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response});
    // (name, answer, mutating, Ok(allowed, has patch) or the error)
    type Case = (&'static str, Value, bool, Result<(bool, bool), &'static str>);
    let cases: Vec<Case> = vec![
        ("allowed", answer(json!({"uid": "u", "allowed": true})), false, Ok((true, false))),
        ("denied", answer(json!({"uid": "u", "allowed": false})), false, Ok((false, false))),
        (
            "patched",
            answer(json!({"uid": "u", "allowed": true, "patchType": "JSONPatch", "patch": patch})),
            true,
            Ok((true, true)),
        ),
        (
            "v1beta1",
            json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "response": {"uid": "u"}}),
            false,
            Err(
                "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got admission.k8s.io/v1beta1, Kind=AdmissionReview",
            ),
        ),
        (
            "no response",
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
            false,
            Err("webhook response was absent"),
        ),
        (
            "another uid",
            answer(json!({"uid": "v", "allowed": true})),
            false,
            Err("expected response.uid=\"u\", got \"v\""),
        ),
        (
            "patch without type",
            answer(json!({"uid": "u", "allowed": true, "patch": patch})),
            true,
            Err("webhook returned response.patch but not response.patchType"),
        ),
        (
            "merge patch",
            answer(json!({"uid": "u", "allowed": true, "patch": patch, "patchType": "Merge"})),
            true,
            Err("invalid response.patchType of \"Merge\""),
        ),
        (
            "validating patch",
            answer(json!({"uid": "u", "allowed": true, "patch": patch, "patchType": "JSONPatch"})),
            false,
            Err("may not return response.patch"),
        ),
    ];
    for (name, answer, mutating, expected) in cases {
        match (parse_reply(&answer, "u", mutating), expected) {
            (Ok(reply), Ok((allowed, patched))) => {
                assert_eq!((reply.allowed, reply.patch.is_some()), (allowed, patched), "{name}")
            }
            (Err(error), Err(message)) => assert!(error.contains(message), "{name}: {error}"),
            (got, expected) => panic!("{name}: expected {expected:?}, got {got:?}"),
        }
    }
}

#[test]
fn refusals_carry_the_webhooks_words() {
    // (status, code, reason, message)
    let cases = [
        (
            json!({"message": "no latest tags"}),
            400,
            "",
            "admission webhook \"w.test\" denied the request: no latest tags",
        ),
        (
            json!({"code": 403, "reason": "Forbidden", "message": "nope"}),
            403,
            "Forbidden",
            "admission webhook \"w.test\" denied the request: nope",
        ),
        (
            json!({"code": 200, "reason": "Unusual"}),
            400,
            "",
            "admission webhook \"w.test\" denied the request: Unusual",
        ),
        (json!(null), 400, "", "admission webhook \"w.test\" denied the request without explanation"),
        (
            json!({"code": 422, "reason": "Invalid", "message": "bad"}),
            422,
            "Invalid",
            "admission webhook \"w.test\" denied the request: bad",
        ),
    ];
    for (status, code, reason, message) in cases {
        let error = rejection("w.test", &status);
        assert_eq!((error.code, error.reason, error.message.as_str()), (code, reason, message), "{status}");
    }
}

/// A webhook service on loopback over HTTPS. `/slow` answers after two
/// seconds; every path answers with `answer(path, request)` as the
/// response (uid filled in).
pub(crate) struct TestService {
    pub(crate) base: String,
    pub(crate) ca_base64: String,
    pub(crate) calls: Arc<AtomicUsize>,
    /// A client certificate the service's CA signed, for `webhook-client`.
    client: crate::tls::pki::Credential,
    _dir: tempfile::TempDir,
}

impl TestService {
    pub(crate) async fn start(answer: impl Fn(&str, &Value) -> Value + Send + Sync + 'static) -> TestService {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::load_or_create(dir.path(), &[]).unwrap();
        let serving = pki.issue_serving("webhook", &["127.0.0.1".to_owned(), "hooks.webhooks.svc".to_owned()]).unwrap();
        let tls = crate::tls::server_config(&serving, pki.ca_pem(), crate::tls::ClientAuth::Optional).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("https://{}", listener.local_addr().unwrap());
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = calls.clone();
        let answer = Arc::new(answer);
        let router = axum::Router::new().route(
            "/{path}",
            axum::routing::post(
                move |axum::extract::Path(path): axum::extract::Path<String>,
                      peer: Option<axum::Extension<crate::auth::PeerCertificates>>,
                      headers: axum::http::HeaderMap,
                      axum::Json(review): axum::Json<Value>| {
                    let answer = answer.clone();
                    seen.fetch_add(1, Ordering::SeqCst);
                    async move {
                        if path == "slow" {
                            tokio::time::sleep(Duration::from_secs(2)).await;
                        }
                        // Who called, for `whoami`: the client certificate's
                        // user and the bearer token.
                        let certificate = peer
                            .and_then(|axum::Extension(peer)| peer.0.first().cloned())
                            .and_then(|leaf| crate::auth::certificate_user(&leaf).ok())
                            .map_or_else(|| "none".to_owned(), |user| user.name);
                        let token = headers
                            .get(http::header::AUTHORIZATION)
                            .and_then(|v| v.to_str().ok())
                            .and_then(|v| v.strip_prefix("Bearer "))
                            .unwrap_or("none");
                        let mut request = review["request"].clone();
                        request["caller"] = format!("certificate={certificate} token={token}").into();
                        let request = &request;
                        let mut response = answer(&path, request);
                        response["uid"] = request["uid"].clone();
                        axum::Json(json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}))
                    }
                },
            ),
        );
        tokio::spawn(crate::tls::serve(
            listener,
            router,
            crate::tls::ListenOptions::default().with_tls(tls),
            std::future::pending(),
        ));
        let ca_base64 = base64::engine::general_purpose::STANDARD.encode(pki.ca_pem());
        let client = pki.issue_client("webhook-client", None).unwrap();
        TestService { base, ca_base64, calls, client, _dir: dir }
    }

    /// A webhook named `name` calling `path` of this service, with `extra`
    /// fields.
    fn webhook(&self, name: &str, path: &str, extra: Value) -> Value {
        let mut webhook =
            json!({"name": name, "clientConfig": {"url": format!("{}/{path}", self.base), "caBundle": self.ca_base64}});
        for (key, value) in extra.as_object().unwrap() {
            webhook[key] = value.clone();
        }
        webhook
    }
}

/// A JSON patch answer adding `label` to the object's labels.
fn label_patch(label: &str, request: &Value) -> Value {
    let operation = match request.pointer("/object/metadata/labels") {
        Some(Value::Object(_)) => json!({"op": "add", "path": format!("/metadata/labels/{label}"), "value": "yes"}),
        _ => json!({"op": "add", "path": "/metadata/labels", "value": {label: "yes"}}),
    };
    let patch = base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(&json!([operation])).unwrap());
    json!({"allowed": true, "patchType": "JSONPatch", "patch": patch})
}

/// The service of the call tests: `label-*` patches a label in, `deny`
/// refuses, `warn` warns, `reinvoked` labels `seen-N` by its call count.
fn answer(path: &str, request: &Value) -> Value {
    match path {
        "deny" => {
            json!({"allowed": false, "status": {"code": 403, "reason": "Forbidden", "message": "pods are closed"}})
        }
        "warn" => json!({"allowed": true, "warnings": ["mind the gap"]}),
        "whoami" => json!({"allowed": true, "auditAnnotations": {"caller": request["caller"]}}),
        "annotate" => json!({"allowed": true, "auditAnnotations": {"checked": "yes", "not/a key": "dropped"}}),
        "annotate-deny" => json!({"allowed": false, "auditAnnotations": {"why": "closed"},
            "status": {"code": 403, "message": "pods are closed"}}),
        "rename" => {
            let patch = json!([{"op": "replace", "path": "/metadata/name", "value": "other"}]);
            json!({"allowed": true, "patchType": "JSONPatch",
                "patch": base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(&patch).unwrap())})
        }
        "garbage" => json!({"allowed": true, "patch": "!!"}),
        "slow" => json!({"allowed": true}),
        label if label.starts_with("label-") => label_patch(&label["label-".len()..], request),
        "last" => {
            // Labels `last` once `first` is there, to prove the order.
            match request.pointer("/object/metadata/labels/first") {
                Some(_) => label_patch("last", request),
                None => json!({"allowed": true}),
            }
        }
        _ => json!({"allowed": true}),
    }
}

type Outcome = (Result<Option<Value>, ApiError>, Vec<String>);

async fn run(plugin: &dyn AdmissionPlugin, write: &Write) -> Outcome {
    let mut request = write.request();
    collect_warnings(async move {
        plugin.mutate(&mut request).await?;
        plugin.validate(&request).await?;
        Ok(request.object)
    })
    .await
}

fn labels(outcome: &Outcome) -> Value {
    outcome.0.as_ref().unwrap().as_ref().unwrap()["metadata"]["labels"].clone()
}

#[tokio::test]
async fn mutating_webhooks_patch_in_order_and_refuse() {
    let service = TestService::start(answer).await;
    let down = "https://127.0.0.1:9/down";
    // (name, webhooks of one configuration, Ok(labels) or Err((code, message part)), warnings)
    type Case = (&'static str, Vec<Value>, Result<Value, (u16, &'static str)>, Vec<&'static str>);
    let cases: Vec<Case> = vec![
        (
            "one label",
            vec![service.webhook("a.hooks.test", "label-first", json!({}))],
            Ok(json!({"first": "yes"})),
            vec![],
        ),
        (
            "in order",
            vec![
                service.webhook("a.hooks.test", "label-first", json!({})),
                service.webhook("b.hooks.test", "last", json!({})),
            ],
            Ok(json!({"first": "yes", "last": "yes"})),
            vec![],
        ),
        (
            "denied",
            vec![
                service.webhook("a.hooks.test", "label-first", json!({})),
                service.webhook("deny.hooks.test", "deny", json!({})),
            ],
            Err((403, "admission webhook \"deny.hooks.test\" denied the request: pods are closed")),
            vec![],
        ),
        ("warned", vec![service.webhook("w.hooks.test", "warn", json!({}))], Ok(Value::Null), vec!["mind the gap"]),
        (
            "down, failing closed",
            vec![json!({"name": "down.hooks.test", "clientConfig": {"url": down}})],
            Err((500, "failed calling webhook \"down.hooks.test\": failed to call webhook")),
            vec![],
        ),
        (
            "down, failing open",
            vec![
                json!({"name": "down.hooks.test", "clientConfig": {"url": down}, "failurePolicy": "Ignore"}),
                service.webhook("a.hooks.test", "label-first", json!({})),
            ],
            Ok(json!({"first": "yes"})),
            vec![],
        ),
        (
            "a rename",
            vec![service.webhook("r.hooks.test", "rename", json!({"failurePolicy": "Ignore"}))],
            Err((500, "admission webhook \"r.hooks.test\" may not change metadata.name")),
            vec![],
        ),
        (
            "a garbage answer",
            vec![service.webhook("g.hooks.test", "garbage", json!({}))],
            Err((500, "received invalid webhook response")),
            vec![],
        ),
        (
            "timed out",
            vec![service.webhook("slow.hooks.test", "slow", json!({"timeoutSeconds": 1}))],
            Err((500, "timed out")),
            vec![],
        ),
        (
            "timed out, failing open",
            vec![service.webhook("slow.hooks.test", "slow", json!({"timeoutSeconds": 1, "failurePolicy": "Ignore"}))],
            Ok(Value::Null),
            vec![],
        ),
        (
            "a service reference",
            vec![json!({"name": "svc.hooks.test", "clientConfig": {"service": {"namespace": "n", "name": "s"}}})],
            Err((500, "failed to resolve service n/s: service \"s\" not found")),
            vec![],
        ),
        (
            "a service's endpoint",
            vec![json!({"name": "svc.hooks.test", "clientConfig": {"caBundle": service.ca_base64,
                "service": {"namespace": "webhooks", "name": "hooks", "path": "/label-first"}}})],
            Ok(json!({"first": "yes"})),
            vec![],
        ),
        (
            "a service without ready endpoints",
            vec![json!({"name": "svc.hooks.test", "clientConfig": {"caBundle": service.ca_base64,
                "service": {"namespace": "webhooks", "name": "idle", "path": "/label-first"}}})],
            Err((500, "no endpoints available for service \"idle\"")),
            vec![],
        ),
        (
            "a port the service does not have",
            vec![json!({"name": "svc.hooks.test", "clientConfig": {"caBundle": service.ca_base64,
                "service": {"namespace": "webhooks", "name": "hooks", "port": 8443}}})],
            Err((500, "no service port 8443 found for service \"hooks\"")),
            vec![],
        ),
        (
            "the wrong CA",
            vec![json!({"name": "ca.hooks.test", "clientConfig": {"url": format!("{}/label-first", service.base),
                "caBundle": base64::engine::general_purpose::STANDARD.encode(Pki::load_or_create(tempfile::tempdir().unwrap().path(), &[]).unwrap().ca_pem())}})],
            Err((500, "TLS handshake")),
            vec![],
        ),
    ];
    for (name, webhooks, expected, warnings) in cases {
        let objects = objects_with(&[(MUTATING, configuration("hooks", webhooks))]);
        // The Service `webhooks/hooks` and its endpoints, the test service.
        let port: u16 = service.base.rsplit(':').next().unwrap().parse().unwrap();
        let ports = json!([{"name": "https", "port": 443, "targetPort": port}]);
        for (name, addresses) in [("hooks", json!([{"ip": "127.0.0.1"}])), ("idle", json!([]))] {
            let meta = json!({"name": name, "namespace": "webhooks"});
            objects.insert(SERVICES, json!({"metadata": meta, "spec": {"ports": ports}}));
            let subsets = json!([{"addresses": addresses, "notReadyAddresses": [{"ip": "127.0.0.1"}],
                "ports": [{"name": "https", "port": port}]}]);
            objects.insert(ENDPOINTS, json!({"metadata": meta, "subsets": subsets}));
        }
        let plugin = MutatingAdmissionWebhook::new(objects);
        let outcome = run(&plugin, &Write::pod(Value::Null)).await;
        match (&outcome.0, expected) {
            (Ok(_), Ok(expected)) => assert_eq!(labels(&outcome), expected, "{name}"),
            (Err(error), Err((code, message))) => {
                assert_eq!(error.code, code, "{name}: {error}");
                assert!(error.message.contains(message), "{name}: {error}");
            }
            (got, expected) => panic!("{name}: expected {expected:?}, got {got:?}"),
        }
        assert_eq!(outcome.1, warnings, "{name}");
    }
}

#[tokio::test]
async fn dry_runs_need_webhooks_without_side_effects() {
    let service = TestService::start(answer).await;
    for (side_effects, allowed) in [("None", true), ("NoneOnDryRun", true), ("Some", false), ("Unknown", false)] {
        let webhook = service.webhook("d.hooks.test", "allow", json!({"sideEffects": side_effects}));
        for kind in [Kind::Mutating, Kind::Validating] {
            let resource = if kind == Kind::Mutating { MUTATING } else { VALIDATING };
            let objects = objects_with(&[(resource, configuration("hooks", vec![webhook.clone()]))]);
            let plugin: Box<dyn AdmissionPlugin> = match kind {
                Kind::Mutating => Box::new(MutatingAdmissionWebhook::new(objects)),
                Kind::Validating => Box::new(ValidatingAdmissionWebhook::new(objects)),
            };
            let mut write = Write::pod(Value::Null);
            write.dry_run = true;
            let before = service.calls.load(Ordering::SeqCst);
            let outcome = run(&*plugin, &write).await;
            match allowed {
                true => assert!(outcome.0.is_ok(), "{side_effects} {kind:?}: {:?}", outcome.0),
                false => {
                    let error = outcome.0.unwrap_err();
                    assert_eq!(error.code, 400);
                    assert_eq!(error.message, "admission webhook \"d.hooks.test\" does not support dry run");
                    assert_eq!(service.calls.load(Ordering::SeqCst), before, "not called");
                }
            }
        }
    }
}

#[tokio::test]
async fn if_needed_webhooks_see_later_changes() {
    let service = TestService::start(answer).await;
    let reinvoked = Arc::new(AtomicUsize::new(0));
    let counter = reinvoked.clone();
    // `again` counts its calls and patches nothing; `label-later` runs
    // after it and changes the object.
    let counting = TestService::start(move |_, _| {
        counter.fetch_add(1, Ordering::SeqCst);
        json!({"allowed": true})
    })
    .await;
    // (reinvocation policy of the first webhook, whether a later one changes the object, its calls)
    let cases = [("IfNeeded", true, 2), ("Never", true, 1), ("IfNeeded", false, 1)];
    for (policy, later_changes, calls) in cases {
        reinvoked.store(0, Ordering::SeqCst);
        let later = if later_changes { "label-later" } else { "warn" };
        let webhooks = vec![
            counting.webhook("again.hooks.test", "count", json!({"reinvocationPolicy": policy})),
            service.webhook("later.hooks.test", later, json!({})),
        ];
        let plugin = MutatingAdmissionWebhook::new(objects_with(&[(MUTATING, configuration("hooks", webhooks))]));
        let outcome = run(&plugin, &Write::pod(Value::Null)).await;
        assert!(outcome.0.is_ok(), "{policy} {later_changes}: {:?}", outcome.0);
        assert_eq!(reinvoked.load(Ordering::SeqCst), calls, "{policy} {later_changes}");
    }
}

#[tokio::test]
async fn validating_webhooks_run_together_and_the_first_refusal_wins() {
    let service = TestService::start(answer).await;
    let webhooks = vec![
        service.webhook("slow.hooks.test", "slow", json!({"timeoutSeconds": 5})),
        service.webhook("slow2.hooks.test", "slow", json!({"timeoutSeconds": 5})),
        service.webhook("warn.hooks.test", "warn", json!({})),
    ];
    let plugin = ValidatingAdmissionWebhook::new(objects_with(&[(VALIDATING, configuration("hooks", webhooks))]));
    let started = std::time::Instant::now();
    let outcome = run(&plugin, &Write::pod(Value::Null)).await;
    assert!(outcome.0.is_ok(), "{:?}", outcome.0);
    assert!(started.elapsed() < Duration::from_millis(3900), "two slow webhooks took {:?}", started.elapsed());
    assert_eq!(outcome.1, ["mind the gap"]);

    let webhooks = vec![
        service.webhook("a.hooks.test", "warn", json!({})),
        service.webhook("b.hooks.test", "deny", json!({})),
        json!({"name": "c.hooks.test", "clientConfig": {"url": "https://127.0.0.1:9/down"}}),
    ];
    let plugin = ValidatingAdmissionWebhook::new(objects_with(&[(VALIDATING, configuration("hooks", webhooks))]));
    let error = run(&plugin, &Write::pod(Value::Null)).await.0.unwrap_err();
    assert_eq!(error.message, "admission webhook \"b.hooks.test\" denied the request: pods are closed");
    let webhooks = vec![service.webhook("p.hooks.test", "label-x", json!({}))];
    let plugin = ValidatingAdmissionWebhook::new(objects_with(&[(VALIDATING, configuration("hooks", webhooks))]));
    let error = run(&plugin, &Write::pod(Value::Null)).await.0.unwrap_err();
    assert!(error.message.contains("may not return response.patch"), "{error}");
}

/// An answer's `auditAnnotations` go to the audit log as `<webhook>/<key>`,
/// from a refusal too; a key that does not make a qualified name is
/// dropped.
#[tokio::test]
async fn answers_annotate_the_audit_log() {
    let service = TestService::start(answer).await;
    for (kind, path, allowed, expected) in [
        (MUTATING, "annotate", true, ("m.hooks.test/checked", "yes")),
        (VALIDATING, "annotate", true, ("m.hooks.test/checked", "yes")),
        (VALIDATING, "annotate-deny", false, ("m.hooks.test/why", "closed")),
    ] {
        let webhooks = vec![service.webhook("m.hooks.test", path, json!({}))];
        let objects = objects_with(&[(kind, configuration("hooks", webhooks))]);
        let plugin: Box<dyn AdmissionPlugin> = match kind == MUTATING {
            true => Box::new(MutatingAdmissionWebhook::new(objects)),
            false => Box::new(ValidatingAdmissionWebhook::new(objects)),
        };
        let write = Write::pod(Value::Null);
        let mut request = write.request();
        let (outcome, notes) = collect_notes(async move {
            plugin.mutate(&mut request).await?;
            plugin.validate(&request).await
        })
        .await;
        assert_eq!(outcome.is_ok(), allowed, "{path}: {outcome:?}");
        assert_eq!(notes.audit_annotations, [(expected.0.to_owned(), expected.1.to_owned())], "{path}");
    }
}

/// The credentials of the webhooks' kubeconfig are presented to the hosts
/// they are for: a client certificate and a token to the service, nothing
/// to a host no user names.
#[tokio::test]
async fn webhooks_get_the_credentials_of_their_host() {
    let service = TestService::start(answer).await;
    let host = service.base.trim_start_matches("https://").to_owned();
    let encode = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
    let kubeconfig = format!(
        "users:\n- name: {host:?}\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n    token: hook-token\n\
         - name: other.example.com\n  user: {{token: elsewhere}}\n",
        encode(&service.client.cert_pem),
        encode(&service.client.key_pem),
    );
    let with_credentials = WebhookClientAuth::from_kubeconfig(&kubeconfig, None).unwrap();
    for (auth, expected) in [
        (with_credentials, "certificate=webhook-client token=hook-token"),
        (WebhookClientAuth::default(), "certificate=none token=none"),
    ] {
        let webhooks = vec![service.webhook("who.hooks.test", "whoami", json!({}))];
        let objects = objects_with(&[(VALIDATING, configuration("hooks", webhooks))]);
        let plugin =
            ValidatingAdmissionWebhook::with_dispatcher(Dispatcher::reading(Kind::Validating, objects).with_auth(auth));
        let write = Write::pod(Value::Null);
        let request = write.request();
        let (outcome, notes) = collect_notes(async move { plugin.validate(&request).await }).await;
        assert!(outcome.is_ok(), "{outcome:?}");
        assert_eq!(notes.audit_annotations, [("who.hooks.test/caller".to_owned(), expected.to_owned())]);
    }
}

#[test]
fn subresource_reviews_name_the_subresource_kind() {
    let deployments = ResourceInfo::new("apps", "v1", "Deployment", "deployments", true).with_scale();
    let hooks = configuration(
        "scale",
        vec![
            json!({"name": "scale.hooks.test", "rules": [{"operations": ["UPDATE"], "apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments/scale"]}]}),
        ],
    );
    let dispatcher = Dispatcher::reading(Kind::Validating, objects_with(&[(VALIDATING, hooks)]));
    let scale =
        json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "w"}, "spec": {"replicas": 3}});
    let mut write = Write::new(Operation::Update, deployments, Some("team-b"), scale);
    write.subresource = Some("scale");
    write.dry_run = true;
    let request = write.request();
    let invocations = futures::executor::block_on(dispatcher.invocations(&request)).unwrap();
    let sent = review("uid-2", &invocations[0], &request)["request"].clone();
    assert_eq!(sent["kind"], json!({"group": "autoscaling", "version": "v1", "kind": "Scale"}));
    assert_eq!(sent["resource"], json!({"group": "apps", "version": "v1", "resource": "deployments"}));
    assert_eq!((sent["subResource"].as_str(), sent["requestSubResource"].as_str()), (Some("scale"), Some("scale")));
    assert_eq!(sent["operation"], "UPDATE");
    assert_eq!(sent["options"], json!({"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions", "dryRun": ["All"]}));
    assert_eq!(sent["dryRun"], true);
    assert_eq!(sent["oldObject"]["spec"]["replicas"], 3);
    // Without the subresource the rule does not match.
    write.subresource = None;
    assert!(futures::executor::block_on(dispatcher.invocations(&write.request())).unwrap().is_empty());
}

#[tokio::test]
async fn a_delete_cannot_be_patched() {
    let service = TestService::start(answer).await;
    let webhooks = vec![service.webhook("del.hooks.test", "label-first", json!({}))];
    let plugin = MutatingAdmissionWebhook::new(objects_with(&[(MUTATING, configuration("hooks", webhooks))]));
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w", "namespace": "team-a"}});
    let write = Write::new(Operation::Delete, ResourceInfo::new("", "v1", "Pod", "pods", true), Some("team-a"), pod);
    let error = run(&plugin, &write).await.0.unwrap_err();
    assert_eq!(error.code, 500);
    assert!(
        error.message.contains("attempted to modify the object, which is not supported for this operation"),
        "{error}"
    );
    assert_eq!(service.calls.load(Ordering::SeqCst), 1, "the webhook saw the delete");
}
