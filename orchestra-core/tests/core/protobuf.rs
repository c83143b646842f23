//! kubectl commands that send protobuf request bodies (`create namespace`,
//! `create deployment|configmap|secret|service|job`, `auth can-i`, `auth
//! whoami`), and the review resources they and other clients use.

use async_trait::async_trait;
use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use orchestra::testing::TestCluster;
use orchestra_core::auth::{AllowAll, Attributes, Authorizer, AuthorizerChain, Decision, TokenFile};
use orchestra_core::server::pki::ADMIN_USER;
use serde_json::{Value, json};
use tower::ServiceExt;

fn json_of(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_generators_send_protobuf() {
    let cluster = TestCluster::start().await;
    let kubectl = cluster.kubectl().await.clone();
    tokio::task::spawn_blocking(move || {
        let run = |args: &[&str]| {
            let (ok, out, err) = kubectl.run(args).into_parts();
            assert!(ok, "kubectl {args:?} failed: {err}");
            out
        };

        assert!(run(&["create", "namespace", "x"]).contains("namespace/x created"));
        let ns = json_of(&run(&["get", "namespace", "x", "-o", "json"]));
        assert_eq!(ns["metadata"]["name"], "x");
        assert_eq!(ns["kind"], "Namespace");

        assert!(
            run(&["create", "deployment", "web", "--image=nginx", "--port=80", "--replicas=2"])
                .contains("deployment.apps/web created")
        );
        let deploy = json_of(&run(&["get", "deployment", "web", "-o", "json"]));
        assert_eq!(deploy["spec"]["replicas"], 2);
        assert_eq!(deploy["spec"]["selector"]["matchLabels"]["app"], "web");
        assert_eq!(deploy["spec"]["template"]["metadata"]["labels"]["app"], "web");
        let container = &deploy["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["name"], "nginx");
        assert_eq!(container["image"], "nginx");
        assert_eq!(container["ports"][0]["containerPort"], 80);
        assert!(deploy["metadata"]["creationTimestamp"].is_string(), "the server stamps it: {deploy}");

        run(&["create", "configmap", "cfg", "--from-literal=a=b", "-n", "x"]);
        let cm = json_of(&run(&["get", "configmap", "cfg", "-n", "x", "-o", "json"]));
        assert_eq!(cm["data"], json!({"a": "b"}));

        run(&["create", "secret", "generic", "s", "--from-literal=k=v"]);
        let secret = json_of(&run(&["get", "secret", "s", "-o", "json"]));
        assert_eq!(secret["data"]["k"], "dg==", "bytes are base64 in JSON");

        run(&["create", "service", "clusterip", "svc", "--tcp=80:8080"]);
        let svc = json_of(&run(&["get", "service", "svc", "-o", "json"]));
        assert_eq!(svc["spec"]["ports"][0]["port"], 80);
        assert_eq!(svc["spec"]["ports"][0]["targetPort"], 8080, "IntOrString");

        run(&["create", "job", "once", "--image=busybox", "--", "echo", "hi"]);
        let job = json_of(&run(&["get", "job", "once", "-o", "json"]));
        assert_eq!(job["spec"]["template"]["spec"]["containers"][0]["command"], json!(["echo", "hi"]));

        run(&["create", "serviceaccount", "robot"]);
        run(&["create", "role", "reader", "--verb=get,list", "--resource=pods,configmaps"]);
        let role = json_of(&run(&["get", "role", "reader", "-o", "json"]));
        assert_eq!(role["rules"][0]["verbs"], json!(["get", "list"]));
        assert_eq!(role["rules"][0]["resources"], json!(["pods", "configmaps"]));
        run(&["create", "rolebinding", "read", "--role=reader", "--serviceaccount=default:robot"]);
        let binding = json_of(&run(&["get", "rolebinding", "read", "-o", "json"]));
        assert_eq!(binding["roleRef"]["name"], "reader");
        assert_eq!(binding["subjects"][0]["kind"], "ServiceAccount");
        run(&["create", "clusterrole", "nodes", "--verb=get", "--resource=nodes"]);
        run(&["create", "cronjob", "tick", "--image=busybox", "--schedule=*/5 * * * *"]);
        let cron = json_of(&run(&["get", "cronjob", "tick", "-o", "json"]));
        assert_eq!(cron["spec"]["schedule"], "*/5 * * * *");
        run(&["create", "poddisruptionbudget", "pdb", "--selector=app=web", "--min-available=50%"]);
        let pdb = json_of(&run(&["get", "pdb", "pdb", "-o", "json"]));
        assert_eq!(pdb["spec"]["minAvailable"], "50%", "IntOrString as a string");
        assert_eq!(pdb["spec"]["selector"]["matchLabels"]["app"], "web");
        run(&["create", "priorityclass", "high", "--value=1000", "--description=important"]);
        let pc = json_of(&run(&["get", "priorityclass", "high", "-o", "json"]));
        assert_eq!(pc["value"], 1000);
        run(&["create", "quota", "q", "--hard=cpu=1,pods=2"]);
        let quota = json_of(&run(&["get", "quota", "q", "-o", "json"]));
        assert_eq!(quota["spec"]["hard"], json!({"cpu": "1", "pods": "2"}), "Quantity");

        // Server-side dry run over protobuf: the would-be object, nothing stored.
        let dry = json_of(&run(&["create", "deployment", "dry", "--image=nginx", "--dry-run=server", "-o", "json"]));
        assert_eq!(dry["metadata"]["name"], "dry");
        let (ok, _, err) = kubectl.run(&["get", "deployment", "dry"]).into_parts();
        assert!(!ok && err.contains("NotFound"), "{err}");

        // The JSON path is unchanged: a second namespace of the same name is a 409.
        let (ok, _, err) = kubectl.run(&["create", "namespace", "x"]).into_parts();
        assert!(!ok);
        assert!(err.contains("AlreadyExists"), "{err}");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_auth_can_i_and_whoami() {
    // An authorizer that can list its rules (`can-i --list`): AllowAll.
    let cluster =
        TestCluster::start_with(TestCluster::builder().authorizer_chain(AuthorizerChain::new().with(AllowAll))).await;
    let kubectl = cluster.kubectl().await.clone();
    tokio::task::spawn_blocking(move || {
        let (ok, out, err) = kubectl.run(&["auth", "can-i", "create", "pods"]).into_parts();
        assert!(ok, "{err}");
        assert_eq!(out.trim(), "yes");

        let (ok, out, err) = kubectl.run(&["auth", "can-i", "get", "/healthz"]).into_parts();
        assert!(ok, "{err}");
        assert_eq!(out.trim(), "yes", "non-resource attributes");
        let (ok, out, err) =
            kubectl.run(&["auth", "can-i", "update", "deployments.apps/scale", "-n", "kube-system"]).into_parts();
        assert!(ok, "{err}");
        assert_eq!(out.trim(), "yes");

        let (ok, out, err) = kubectl.run(&["auth", "can-i", "--list"]).into_parts();
        assert!(ok, "{err}");
        assert!(out.contains("*.*"), "{out}");
        assert!(out.contains("[*]"), "{out}");

        let (ok, out, err) = kubectl.run(&["auth", "whoami"]).into_parts();
        assert!(ok, "{err}");
        assert!(out.contains(ADMIN_USER), "{out}");
        let (ok, out, err) = kubectl.run(&["auth", "whoami", "-o", "json"]).into_parts();
        assert!(ok, "{err}");
        let review = json_of(&out);
        assert_eq!(review["kind"], "SelfSubjectReview");
        assert_eq!(review["status"]["userInfo"]["username"], ADMIN_USER);

        // Discovery lists the reviews with the verb create only.
        let (ok, out, err) =
            kubectl.run(&["api-resources", "--api-group=authorization.k8s.io", "-o", "wide"]).into_parts();
        assert!(ok, "{err}");
        assert!(out.contains("selfsubjectaccessreviews"), "{out}");
        assert!(out.contains(" create "), "{out}");
        assert!(!out.contains("list"), "{out}");
    })
    .await
    .unwrap();
}

/// Admins (`system:masters`) may do anything; others may read, and ask
/// about themselves, but not touch secrets.
struct Viewers;

#[async_trait]
impl Authorizer for Viewers {
    async fn authorize(&self, attributes: &Attributes) -> Decision {
        if attributes.user.groups.iter().any(|g| g == "system:masters") {
            return Decision::Allow;
        }
        if attributes.resource == "secrets" {
            return Decision::Deny("secrets are for admins".into());
        }
        let review = attributes.resource.starts_with("selfsubject") && attributes.verb == "create";
        if review || matches!(attributes.verb.as_str(), "get" | "list" | "watch") {
            Decision::Allow
        } else {
            Decision::no_opinion()
        }
    }
}

/// Static tokens for an administrator and a viewer, and [`Viewers`] as the
/// only authorizer.
async fn token_cluster() -> TestCluster {
    let tokens = TokenFile::parse("admin-token,admin,1,system:masters\nviewer-token,viewer,2,team\n").unwrap();
    TestCluster::start_with(
        TestCluster::builder().authenticator(tokens).authorizer_chain(AuthorizerChain::new().with(Viewers)),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_auth_with_a_restrictive_authorizer() {
    let cluster = token_cluster().await;
    // Over HTTPS kubectl sends the viewer's bearer token.
    let kubectl = cluster.kubectl_with_token("viewer-token").await;
    tokio::task::spawn_blocking(move || {
        let (ok, out, err) = kubectl.run(&["auth", "can-i", "list", "pods"]).into_parts();
        assert!(ok, "{out} {err}");
        assert_eq!(out.trim(), "yes");
        let (ok, out, _) = kubectl.run(&["auth", "can-i", "create", "pods"]).into_parts();
        assert!(!ok, "kubectl exits 1 on no");
        assert_eq!(out.trim(), "no");
        let (ok, out, _) = kubectl.run(&["auth", "can-i", "get", "secrets"]).into_parts();
        assert!(!ok);
        assert!(out.contains("no - secrets are for admins"), "{out}");
        let (ok, out, err) = kubectl.run(&["auth", "can-i", "--list"]).into_parts();
        assert!(ok, "{err}");
        assert!(!out.contains("*.*"), "{out}");
        let (ok, out, err) = kubectl.run(&["auth", "whoami", "-o", "json"]).into_parts();
        assert!(ok, "{err}");
        let user = &json_of(&out)["status"]["userInfo"];
        assert_eq!(user["username"], "viewer");
        assert_eq!(user["groups"], json!(["team", "system:authenticated"]));
    })
    .await
    .unwrap();
}

async fn post(cluster: &TestCluster, uri: &str, token: &str, body: Value) -> (u16, Value) {
    let request = Request::post(uri)
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {token}"))
        .body(Body::from(body.to_string()))
        .unwrap();
    let response = cluster.handle().router().oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

#[tokio::test]
async fn token_and_subject_access_reviews() {
    let cluster = token_cluster().await;
    let tokens = "/apis/authentication.k8s.io/v1/tokenreviews";
    let review = |token: &str| json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}});
    let (status, body) = post(&cluster, tokens, "admin-token", review("viewer-token")).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["status"]["authenticated"], true);
    assert_eq!(body["status"]["user"]["username"], "viewer");
    assert_eq!(body["status"]["user"]["groups"], json!(["team", "system:authenticated"]));
    let (status, body) = post(&cluster, tokens, "admin-token", review("nope")).await;
    assert_eq!(status, 201);
    assert_eq!(body["status"]["authenticated"], false);
    assert!(body["status"]["error"].is_string());
    let (status, _) = post(&cluster, tokens, "viewer-token", review("admin-token")).await;
    assert_eq!(status, 403, "viewers may not create token reviews");

    let sar = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
    let ask = |user: &str, groups: &[&str], verb: &str, resource: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
               "spec": {"user": user, "groups": groups,
                        "resourceAttributes": {"namespace": "default", "verb": verb, "resource": resource}}})
    };
    let (status, body) = post(&cluster, sar, "admin-token", ask("viewer", &[], "list", "pods")).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["status"], json!({"allowed": true}));
    let (_, body) = post(&cluster, sar, "admin-token", ask("viewer", &[], "delete", "pods")).await;
    assert_eq!(body["status"], json!({"allowed": false}), "no opinion: not denied");
    let (_, body) = post(&cluster, sar, "admin-token", ask("viewer", &[], "get", "secrets")).await;
    assert_eq!(body["status"], json!({"allowed": false, "denied": true, "reason": "secrets are for admins"}));
    let (_, body) = post(&cluster, sar, "admin-token", ask("x", &["system:masters"], "get", "secrets")).await;
    assert_eq!(body["status"]["allowed"], true);
    let (status, body) = post(
        &cluster,
        sar,
        "admin-token",
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {"user": "x"}}),
    )
    .await;
    assert_eq!(status, 422, "{body}");

    // Create only: other verbs are 405, and nothing is stored.
    let request = Request::get(sar).header("authorization", "Bearer admin-token").body(Body::empty()).unwrap();
    let response = cluster.handle().router().oneshot(request).await.unwrap();
    assert_eq!(response.status().as_u16(), 405);
}

#[tokio::test]
async fn malformed_protobuf_is_a_bad_request() {
    let cluster = TestCluster::start().await;
    for body in [&b"not protobuf"[..], &b"k8s\0\x0a\xff\xff"[..]] {
        let request = Request::post("/api/v1/namespaces")
            .header("content-type", "application/vnd.kubernetes.protobuf")
            .body(Body::from(body.to_vec()))
            .unwrap();
        let response = cluster.admin_router().oneshot(request).await.unwrap();
        assert_eq!(response.status().as_u16(), 400);
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let status: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["reason"], "BadRequest");
    }
}
