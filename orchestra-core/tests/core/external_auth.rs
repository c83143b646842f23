//! Authentication and authorization by other servers, with kubectl: an
//! OpenID Connect issuer's ID tokens, a TokenReview webhook and a
//! SubjectAccessReview webhook, each served on loopback over HTTPS; and
//! ABAC's policy file.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use orchestra::testing::{Kubectl, KubectlOutput, TestCluster};
use orchestra_core::auth::{
    ABAC_API_VERSION, AbacAuthorizer, AuthorizationMode, OidcAuthenticator, OidcOptions, TokenFile, WebhookAuthorizer,
    WebhookConfig, WebhookTokenAuthenticator,
};
use orchestra_core::server::ApiServer;
use orchestra_core::server::pki::Pki;
use orchestra_core::tls::{ClientAuth, ListenOptions, server_config};
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};
use serde_json::{Value, json};

/// Serves `router` on a loopback port over HTTPS with a certificate of a CA
/// of its own (client certificates of that CA required when `clients`);
/// returns the base URL, the CA and the certificates' directory.
async fn serve_https(router: axum::Router, clients: ClientAuth) -> (String, Pki, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::load_or_create(dir.path(), &[]).unwrap();
    let serving = pki.issue_serving("service", &["127.0.0.1".to_owned()]).unwrap();
    let tls = server_config(&serving, pki.ca_pem(), clients).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    tokio::spawn(orchestra_core::server::serve(
        listener,
        router,
        ListenOptions::default().with_tls(tls),
        std::future::pending(),
    ));
    (url, pki, dir)
}

/// An OIDC issuer with one ES256 key: discovery, keys, and tokens it mints.
struct Issuer {
    url: String,
    ca_pem: String,
    key: EcdsaKeyPair,
    _dir: tempfile::TempDir,
}

impl Issuer {
    async fn start() -> Issuer {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap();
        let point = key.public_key().as_ref().to_vec();
        let jwk = json!({"kty": "EC", "crv": "P-256", "use": "sig", "kid": "k1",
            "x": B64.encode(&point[1..33]), "y": B64.encode(&point[33..])});
        // The discovery document names the issuer's own URL, known once bound.
        let url_cell = Arc::new(std::sync::OnceLock::<String>::new());
        let cell = url_cell.clone();
        let router = axum::Router::new()
            .route(
                "/.well-known/openid-configuration",
                axum::routing::get(move || {
                    let url = cell.get().cloned().unwrap_or_default();
                    async move { Json(json!({"issuer": url, "jwks_uri": format!("{url}/keys")})) }
                }),
            )
            .route("/keys", axum::routing::get(move || async move { Json(json!({"keys": [jwk]})) }));
        let (url, pki, dir) = serve_https(router, ClientAuth::Optional).await;
        url_cell.set(url.clone()).unwrap();
        Issuer { url, ca_pem: pki.ca_pem().to_owned(), key, _dir: dir }
    }

    /// An ID token of `sub` for `aud`, valid for an hour.
    fn token(&self, sub: &str, aud: &str, groups: &[&str]) -> String {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        let claims = json!({"iss": self.url, "aud": aud, "sub": sub, "groups": groups, "iat": now, "exp": now + 3600});
        let header = json!({"alg": "ES256", "kid": "k1", "typ": "JWT"});
        let input = format!("{}.{}", B64.encode(header.to_string()), B64.encode(claims.to_string()));
        let signature = self.key.sign(&SystemRandom::new(), input.as_bytes()).unwrap();
        format!("{input}.{}", B64.encode(signature.as_ref()))
    }
}

/// Runs `args` until its success is `expected` (authorizers see a new
/// binding once their watch delivers it); returns the last output.
fn eventually(kubectl: &Kubectl, args: &[&str], expected: bool) -> KubectlOutput {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let output = kubectl.run(args);
        if output.success == expected || std::time::Instant::now() > deadline {
            return output;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn oidc_users_are_prefixed_and_authorized_by_rbac() {
    let issuer = Issuer::start().await;
    let mut options = OidcOptions::new(&issuer.url, "kubernetes");
    options.ca_pem = Some(issuer.ca_pem.clone());
    options.signing_algs = vec!["ES256".into()];
    options.groups_claim = Some("groups".into());
    options.groups_prefix = "oidc:".into();
    let oidc = OidcAuthenticator::new(options).unwrap();
    let cluster = TestCluster::start_with(TestCluster::builder().authenticator(oidc)).await;
    let admin = cluster.kubectl().await;
    let user = format!("{}#alice", issuer.url);

    // A valid token: authenticated, but RBAC grants nothing yet.
    let alice = cluster.kubectl_with_token(&issuer.token("alice", "kubernetes", &["dev"])).await;
    let denied = alice.run(&["get", "pods", "-n", "default"]);
    assert!(!denied.success);
    let expected = format!(
        "pods is forbidden: User \"{user}\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
    );
    assert!(denied.stderr.contains(&expected), "{}", denied.stderr);
    let whoami = alice.run(&["auth", "whoami", "-o", "json"]);
    assert!(whoami.success, "{}", whoami.stderr);
    let review: Value = serde_json::from_str(&whoami.stdout).unwrap();
    assert_eq!(review["status"]["userInfo"]["username"], user.as_str());
    assert_eq!(review["status"]["userInfo"]["groups"], json!(["oidc:dev", "system:authenticated"]));

    // Bound to view (by its prefixed group): allowed.
    let bound =
        admin.run(&["create", "rolebinding", "dev-view", "--clusterrole=view", "--group=oidc:dev", "-n", "default"]);
    assert!(bound.success, "{}", bound.stderr);
    let listed = eventually(&alice, &["get", "pods", "-n", "default"], true);
    assert!(listed.success, "{}", listed.stderr);

    // A token for another client is refused outright.
    let stranger = cluster.kubectl_with_token(&issuer.token("alice", "other-client", &["dev"])).await;
    let refused = stranger.run(&["get", "pods", "-n", "default"]);
    assert!(refused.stderr.contains("You must be logged in to the server"), "{}", refused.stderr);
}

/// A webhook service answering TokenReviews (`/authenticate`: token
/// `bob-token` is bob in group `webhook-users`) and SubjectAccessReviews
/// (`/authorize`: bob may list configmaps, and is denied secrets).
async fn webhooks() -> (WebhookConfig, WebhookConfig, tempfile::TempDir) {
    let router = axum::Router::new()
        .route(
            "/authenticate",
            axum::routing::post(|Json(review): Json<Value>| async move {
                let status = if review["spec"]["token"] == "bob-token" {
                    json!({"authenticated": true, "user": {"username": "bob", "uid": "7", "groups": ["webhook-users"]}})
                } else {
                    json!({"authenticated": false})
                };
                Json(json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "status": status}))
            }),
        )
        .route(
            "/authorize",
            axum::routing::post(|Json(review): Json<Value>| async move {
                let spec = &review["spec"];
                let resource = &spec["resourceAttributes"];
                let status = match (spec["user"].as_str(), resource["resource"].as_str(), resource["verb"].as_str()) {
                    (Some("bob"), Some("configmaps"), Some("list")) => json!({"allowed": true}),
                    (Some("bob"), Some("secrets"), _) => {
                        json!({"allowed": false, "denied": true, "reason": "secrets are off limits"})
                    }
                    _ => json!({"allowed": false}),
                };
                Json(json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "status": status}))
            }),
        );
    let (url, pki, dir) = serve_https(router, ClientAuth::Required).await;
    let client = pki.issue_client("kube-apiserver", None).unwrap();
    let config = |path: &str| WebhookConfig {
        server: format!("{url}{path}"),
        ca_pem: Some(pki.ca_pem().to_owned()),
        client_certificate: Some(client.clone()),
        token: None,
    };
    (config("/authenticate"), config("/authorize"), dir)
}

#[tokio::test(flavor = "multi_thread")]
async fn webhooks_authenticate_and_authorize() {
    let (authn, authz, _dir) = webhooks().await;
    let modes = AuthorizationMode::parse_list("Node,Webhook,RBAC").unwrap();
    let builder = TestCluster::builder()
        .authenticator(WebhookTokenAuthenticator::new(authn).unwrap())
        .webhook_authorizer(WebhookAuthorizer::new(authz).unwrap())
        .authorization_modes(&modes);
    let cluster = TestCluster::start_with(builder).await;
    let admin = cluster.kubectl().await;
    assert!(admin.run(&["create", "configmap", "c", "-n", "default"]).success, "RBAC still serves the admin");

    let bob = cluster.kubectl_with_token("bob-token").await;
    let listed = bob.run(&["get", "configmaps", "-n", "default"]);
    assert!(listed.success, "{}", listed.stderr);
    assert!(listed.stdout.contains("c "), "{}", listed.stdout);
    let denied = bob.run(&["get", "secrets", "-n", "default"]);
    assert!(
        denied.stderr.contains("User \"bob\" cannot list resource \"secrets\" in API group \"\" in the namespace \"default\": secrets are off limits"),
        "{}",
        denied.stderr
    );
    // No opinion from the webhook: RBAC decides, and grants bob nothing.
    let silent = bob.run(&["get", "pods", "-n", "default"]);
    assert!(silent.stderr.contains("User \"bob\" cannot list resource \"pods\""), "{}", silent.stderr);
    let unknown = cluster.kubectl_with_token("eve-token").await.run(&["get", "pods"]);
    assert!(unknown.stderr.contains("You must be logged in to the server"), "{}", unknown.stderr);

    // Webhook named without its configuration: the cluster does not start.
    let unconfigured = TestCluster::builder().authorization_modes(&modes).start().await;
    let Err(error) = unconfigured.map(|_| ()) else { panic!("Webhook without a configuration is refused") };
    let error = error.to_string();
    assert!(error.contains("authorization mode Webhook needs its configuration"), "{error}");
    let store = Arc::new(orchestra_store::MemStore::new());
    let Err(error) = ApiServer::builder(store).authorization_modes(&modes).build().await.map(|_| ()) else {
        panic!("an API server with Webhook and no configuration is refused")
    };
    assert_eq!(error.code, 400, "{error}");
}

#[tokio::test(flavor = "multi_thread")]
async fn abac_policies_allow_before_rbac() {
    let policies = [
        json!({"user": "dana", "namespace": "default", "resource": "configmaps", "apiGroup": "", "readonly": true}),
        json!({"group": "system:authenticated", "readonly": true, "nonResourcePath": "*"}),
    ]
    .iter()
    .map(|spec| json!({"apiVersion": ABAC_API_VERSION, "kind": "Policy", "spec": spec}).to_string())
    .collect::<Vec<_>>()
    .join("\n");
    let modes = AuthorizationMode::parse_list("ABAC,RBAC").unwrap();
    let builder = TestCluster::builder()
        .authenticator(TokenFile::parse("dana-token,dana,3\n").unwrap())
        .abac_authorizer(AbacAuthorizer::parse(&policies).unwrap())
        .authorization_modes(&modes);
    let cluster = TestCluster::start_with(builder).await;
    let admin = cluster.kubectl().await;
    assert!(admin.run(&["create", "configmap", "c", "-n", "default"]).success, "RBAC still serves the admin");

    let dana = cluster.kubectl_with_token("dana-token").await;
    let listed = dana.run(&["get", "configmaps", "-n", "default"]);
    assert!(listed.success, "{}", listed.stderr);
    let created = dana.run(&["create", "configmap", "d", "-n", "default"]);
    assert!(created.stderr.contains("User \"dana\" cannot create resource \"configmaps\""), "{}", created.stderr);
    let elsewhere = dana.run(&["get", "configmaps", "-n", "kube-system"]);
    assert!(!elsewhere.success, "{}", elsewhere.stdout);
}
