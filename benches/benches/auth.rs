//! Authentication and authorization benchmark: what the secured request
//! pipeline costs.
//!
//! `cargo bench -p orchestra-benches --bench auth [-- --quick]`
//!
//! Prints one line,
//! `auth rbac_bindings=N authz_ns_per_req=X authn_ns_per_req=Y api_create_ratio_with_rbac=R`,
//! with the spread of every figure over its runs:
//!
//! * **authz** — the RBAC authorizer's decision (`RbacAuthorizer::allows`)
//!   in an API server whose store holds N RoleBindings and
//!   ClusterRoleBindings (written through the API, so the authorizer reads
//!   them from its watch-fed cache, as a running server does) besides the
//!   default ones: 50 namespaces with two Roles each, bindings to those
//!   Roles and to the default `view`, `edit` and `admin` ClusterRoles,
//!   naming service accounts, users and groups (teams and namespaces'
//!   service account groups). Two requests alternate: a service account
//!   reading a ConfigMap, allowed by a RoleBinding in its namespace, and the
//!   same account deleting a Secret, which nothing allows, so every binding
//!   naming it or its groups is read.
//! * **authn** — `authn_ns_per_req` authenticates a verified client
//!   certificate (`ClientCertAuthenticator`, as every request of an HTTPS
//!   connection presenting one); `authn_sa_token_ns_per_req` a bound service
//!   account token (`ServiceAccountAuthenticator`: ES256 signature, claims,
//!   and the account read from the store).
//! * **api_create_ratio_with_rbac** — the CPU time (every thread of the
//!   process, from the scheduler's per-thread counters: clients, server,
//!   store) of M pod creates (C
//!   clients, HTTP/1.1 over TLS, one connection each, client certificate of
//!   a user that is not an admin) through an API server with authorization
//!   `Node,RBAC` (the user granted by a RoleBinding, among the N others) and
//!   the default admission chain, divided by the same creates' CPU time
//!   through an API server that allows everything (`AlwaysAllow`) with no
//!   admission plugin. Each server has its own durable `RocksStore`; the
//!   two run in the same process and take turns every `--chunk` creates
//!   (so that the machine's drift over a run falls on both alike), each run
//!   starting on settled stores.
//!   The target is a ratio under 1.10. `api_create_wall_ratio_with_rbac` is
//!   the same for wall time, printed beside it: with a synced WAL and 16
//!   clients it mostly measures the disk's flush latency and, on a shared
//!   virtual machine, the time other guests take (steal), which move it by
//!   more than the 10 % to be told apart.
//!
//! `--quick` runs a smaller shape and prints no ratio: its creates are too
//! few to tell 10 % apart. A run is invalid, and the bench exits non-zero,
//! when any create fails, a decision or authentication is not what it must
//! be, the secured server lets the user do what it was not granted, or
//! fewer than 3 runs were asked for.

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt as _;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use orchestra_benches::args::Args;
use orchestra_benches::harness;
use orchestra_benches::stats::median;
use orchestra_benches::sys;
use orchestra_core::auth::admission::AdmissionChain;
use orchestra_core::auth::rbac::RbacAuthorizer;
use orchestra_core::auth::service_account::{DEFAULT_ISSUER, ServiceAccountAuthenticator, TokenSigner};
use orchestra_core::auth::{
    Attributes, AuthenticatorChain, AuthorizationMode, ClientCertAuthenticator, ExtensionAuthenticator, Identity,
    PeerCertificates, UserInfo,
};
use orchestra_core::server::pki::Pki;
use orchestra_core::server::{ApiServer, ListenOptions, serve};
use orchestra_store::{RocksOptions, RocksStore, StoreOptions};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{Value, json};
use tower::ServiceExt as _;

const USAGE: &str = "\
usage: cargo bench -p orchestra-benches --bench auth [-- OPTIONS]

  --quick             smaller shape (200 bindings, fewer decisions and creates), no ratio printed
  --bindings N        RoleBindings and ClusterRoleBindings besides the default ones (default 1000, quick 200)
  --decisions N       authorizer decisions per run (default 400000, quick 40000)
  --tokens N          service account tokens authenticated per run (default 20000, quick 2000)
  --creates M         pod creates per run and server (default 8000, quick 200)
  --clients C         concurrent clients of the creates, one HTTPS connection each (default 16)
  --runs N            runs of every figure; medians printed with the spread (default 7, quick 3, at least 3)
  --chunk K           creates a server makes before the other takes its turn (default 500)
  --threads           also print each create phase's CPU time and CPU runs (wakeups) per create by thread name

Data goes to a scratch directory under $ORCHESTRA_BENCH_DIR (default /var/tmp), never tmpfs.";

/// The namespace the creates go to.
const NS: &str = "bench";
/// The user the creates are made as: not an admin.
const USER: &str = "bench-user";
/// The in-process identity that writes the setup.
const ADMIN: &str = "bench-admin";

#[derive(Debug, Clone)]
struct Config {
    quick: bool,
    bindings: usize,
    decisions: usize,
    tokens: usize,
    creates: usize,
    clients: usize,
    runs: usize,
    chunk: usize,
    threads: bool,
}

impl Config {
    fn from_args(args: &Args) -> Result<Config, String> {
        let quick = args.flag("quick");
        let pick = |full: usize, small: usize| if quick { small } else { full };
        let config = Config {
            quick,
            bindings: args.get("bindings", pick(1000, 200))?,
            decisions: args.get("decisions", pick(400_000, 40_000))?,
            tokens: args.get("tokens", pick(20_000, 2000))?,
            creates: args.get("creates", pick(8000, 200))?,
            clients: args.get("clients", 16)?,
            runs: args.get("runs", pick(7, 3))?,
            chunk: args.get("chunk", 500)?,
            threads: args.flag("threads"),
        };
        args.finish()?;
        if config.runs < 3 {
            return Err("--runs: at least 3 runs, for a median and a spread".into());
        }
        if config.bindings < 20 || config.decisions == 0 || config.tokens == 0 || config.clients == 0 {
            return Err("--bindings must be at least 20; decisions, tokens and clients positive".into());
        }
        if config.chunk < config.clients {
            return Err("--chunk must be at least --clients".into());
        }
        if config.creates < config.clients {
            return Err("--creates must be at least --clients".into());
        }
        Ok(config)
    }

    /// Namespaces the bindings spread over.
    fn namespaces(&self) -> usize {
        (self.bindings / 20).max(1)
    }
}

fn main() -> ExitCode {
    match harness::parse_config(&["quick", "threads", "help"], USAGE, Config::from_args) {
        Ok(config) => harness::run_in_scratch("auth", async |scratch| run(&config, scratch).await),
        Err(code) => code,
    }
}

/// One API server over HTTPS on a loopback port, with its own store.
struct Server {
    store: RocksStore,
    router: axum::Router,
    address: SocketAddr,
    /// The RBAC authorizer of its chain (the secured server's).
    rbac: Option<RbacAuthorizer>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Server {
    /// `secured`: `Node,RBAC` and the default admission chain; otherwise
    /// `AlwaysAllow` and no admission plugin. Both authenticate client
    /// certificates and in-process identities.
    async fn start(dir: &Path, pki: &Pki, secured: bool) -> Result<Server, String> {
        let store = RocksStore::open_with(RocksOptions::new(dir).store_options(StoreOptions::default()))
            .await
            .map_err(|e| format!("cannot open RocksStore in {}: {e}", dir.display()))?;
        let builder = ApiServer::builder(Arc::new(store.clone()))
            .authenticator(AuthenticatorChain::new().with(ExtensionAuthenticator).with(ClientCertAuthenticator));
        let (builder, rbac) = if secured {
            let rbac = builder.rbac_authorizer();
            let builder = builder.authorization_modes(&[AuthorizationMode::Node, AuthorizationMode::Rbac]);
            let admission = builder.default_admission(AdmissionChain::new());
            (builder.admission(admission), Some(rbac))
        } else {
            (builder.authorization_modes(&[AuthorizationMode::AlwaysAllow]).admission(AdmissionChain::new()), None)
        };
        let server = builder.build().await.map_err(|e| format!("API server: {e}"))?;
        let router = server.router();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| e.to_string())?;
        let address = listener.local_addr().map_err(|e| e.to_string())?;
        let tls = pki.server_tls_config().map_err(|e| format!("TLS config: {e}"))?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(serve(
            listener,
            router.clone(),
            ListenOptions::default().with_tls(tls).with_drain_timeout(Duration::from_secs(1)),
            async move {
                let _ = stopped.await;
            },
        ));
        Ok(Server { store, router, address, rbac, _stop: stop })
    }

    /// A request as the in-process admin; the answer must be `expect`.
    async fn admin(&self, method: Method, path: &str, body: Value, expect: StatusCode) -> Result<Value, String> {
        let body = if body.is_null() { axum::body::Body::empty() } else { axum::body::Body::from(body.to_string()) };
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .body(body)
            .map_err(|e| e.to_string())?;
        request.extensions_mut().insert(Identity(UserInfo::new(ADMIN, &["system:masters"])));
        let response = self.router.clone().oneshot(request).await.map_err(|e| e.to_string())?;
        let status = response.status();
        let bytes = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
        if status != expect {
            return Err(format!("{path}: {status}, expected {expect}: {}", String::from_utf8_lossy(&bytes)));
        }
        serde_json::from_slice(&bytes).map_err(|e| format!("{path}: {e}"))
    }

    async fn create(&self, path: &str, body: Value) -> Result<Value, String> {
        self.admin(Method::POST, path, body, StatusCode::CREATED).await
    }

    /// Flushes the store and waits for its background work, so that no run
    /// pays for the writes of the one before.
    async fn settle(&self) -> Result<(), String> {
        self.store.flush().await.map_err(|e| format!("flush: {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.store.background_busy().map_err(|e| e.to_string())? {
            if Instant::now() > deadline {
                return Err("the store is still busy a minute after a flush".into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }
}

/// Two Roles of every namespace: what applications commonly get.
fn roles(namespace: &str) -> [Value; 2] {
    let role = |name: &str, rules: Value| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": name, "namespace": namespace}, "rules": rules})
    };
    [
        role(
            "app-reader",
            json!([
                {"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["get", "list", "watch"],
                 "resourceNames": ["app-config", "app-credentials"]},
                {"apiGroups": [""], "resources": ["configmaps", "endpoints", "services"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]},
                {"apiGroups": ["apps"], "resources": ["deployments", "replicasets"], "verbs": ["get", "list", "watch"]},
            ]),
        ),
        role(
            "app-writer",
            json!([
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "update", "patch", "delete"]},
                {"apiGroups": ["apps"], "resources": ["deployments", "deployments/scale"], "verbs": ["*"]},
                {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "update"]},
            ]),
        ),
    ]
}

/// Binding `i` of `config.bindings`: one in ten a ClusterRoleBinding to a
/// default ClusterRole for a user and a team; the others RoleBindings in
/// namespace `i mod namespaces` to one of its Roles or to `view`, for a
/// service account, a user and a team or the namespace's service accounts.
fn binding(config: &Config, i: usize) -> (String, Value) {
    let team = format!("team-{}", i % 20);
    if i.is_multiple_of(10) {
        let role = ["view", "edit", "admin"][(i / 10) % 3];
        let body = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": format!("bench-crb-{i}")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [
                {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": format!("user-{i}")},
                {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": team},
            ],
        });
        return ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings".into(), body);
    }
    let namespace = format!("ns-{}", i % config.namespaces());
    let role_ref = match i % 3 {
        0 => json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}),
        1 => json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "app-reader"}),
        _ => json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "app-writer"}),
    };
    let group = if i.is_multiple_of(7) { format!("system:serviceaccounts:{namespace}") } else { team };
    let body = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": format!("bench-rb-{i}"), "namespace": namespace},
        "roleRef": role_ref,
        "subjects": [
            {"kind": "ServiceAccount", "name": format!("sa-{i}"), "namespace": namespace},
            {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": format!("user-{i}")},
            {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": group},
        ],
    });
    (format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings"), body)
}

/// The binding whose service account the authorizer is measured with: a
/// RoleBinding to `app-reader` in the eighth namespace (or the last).
fn measured_binding(config: &Config) -> usize {
    let target = 7 % config.namespaces();
    (0..config.bindings)
        .find(|i| !i.is_multiple_of(10) && i % 3 == 1 && i % config.namespaces() == target)
        .expect("some binding of the target namespace grants app-reader")
}

/// Writes the namespaces, roles and bindings through the API.
async fn load_bindings(server: &Server, config: &Config) -> Result<(), String> {
    let mut writes: Vec<(String, Value)> = Vec::new();
    for n in 0..config.namespaces() {
        let namespace = format!("ns-{n}");
        server.create("/api/v1/namespaces", json!({"metadata": {"name": namespace}})).await?;
        for role in roles(&namespace) {
            writes.push((format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles"), role));
        }
    }
    writes.extend((0..config.bindings).map(|i| binding(config, i)));
    let results: Vec<Result<Value, String>> = futures::stream::iter(writes)
        .map(|(path, body)| async move { server.create(&path, body).await })
        .buffer_unordered(32)
        .collect()
        .await;
    results.into_iter().collect::<Result<Vec<_>, _>>().map(|_| ())
}

/// Median and spread of per-run figures.
struct Figure {
    runs: Vec<f64>,
}

impl Figure {
    fn median(&self) -> f64 {
        median(&self.runs)
    }

    /// `min..max` of the runs, with `decimals` decimals.
    fn spread(&self, decimals: usize) -> String {
        let low = self.runs.iter().copied().fold(f64::INFINITY, f64::min);
        let high = self.runs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        format!("{low:.decimals$}..{high:.decimals$}")
    }
}

/// Nanoseconds per decision of `rbac` on `attributes`, which must be
/// `allowed` every time.
fn decisions(rbac: &RbacAuthorizer, attributes: &Attributes, n: usize, allowed: bool) -> Result<f64, String> {
    let start = Instant::now();
    let mut wrong = 0usize;
    for _ in 0..n {
        if std::hint::black_box(rbac.allows(std::hint::black_box(attributes))) != allowed {
            wrong += 1;
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / n as f64;
    if wrong > 0 {
        return Err(format!(
            "{wrong} of {n} decisions on {} {} were not {allowed}",
            attributes.verb, attributes.resource
        ));
    }
    Ok(ns)
}

/// Nanoseconds per authentication of `parts` by `authenticator`, which must
/// find `user` every time.
async fn authentications(
    authenticator: &dyn orchestra_core::auth::Authenticator,
    parts: &http::request::Parts,
    n: usize,
    user: &str,
) -> Result<f64, String> {
    let start = Instant::now();
    for _ in 0..n {
        match authenticator.authenticate(std::hint::black_box(parts)).await {
            Ok(Some(found)) if found.name == user => {}
            other => return Err(format!("authentication of {user} gave {other:?}")),
        }
    }
    Ok(start.elapsed().as_nanos() as f64 / n as f64)
}

/// An HTTPS client connection (HTTP/1.1) presenting `USER`'s certificate.
type Connection = tokio::sync::Mutex<hyper::client::conn::http1::SendRequest<Full<Bytes>>>;

fn client_tls(pki: &Pki, user: &orchestra_core::server::pki::Credential) -> Result<Arc<rustls::ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pki.ca_pem().as_bytes()) {
        roots.add(cert.map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    }
    let chain = CertificateDer::pem_slice_iter(user.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let key = PrivateKeyDer::from_pem_slice(user.key_pem.as_bytes()).map_err(|e| e.to_string())?;
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|e| e.to_string())?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

async fn connect(address: SocketAddr, tls: &Arc<rustls::ClientConfig>) -> Result<Connection, String> {
    let tcp = tokio::net::TcpStream::connect(address).await.map_err(|e| format!("connect: {e}"))?;
    tcp.set_nodelay(true).map_err(|e| e.to_string())?;
    let name = ServerName::try_from("127.0.0.1").expect("an IP address").to_owned();
    let stream = tokio_rustls::TlsConnector::from(tls.clone())
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS handshake: {e}"))?;
    let (send, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP/1.1 handshake: {e}"))?;
    tokio::spawn(connection);
    Ok(tokio::sync::Mutex::new(send))
}

async fn send(
    connection: &Connection,
    method: Method,
    path: &str,
    body: String,
) -> Result<(StatusCode, Bytes), String> {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "127.0.0.1")
        .header("accept", "application/json")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let mut send = connection.lock().await;
    send.ready().await.map_err(|e| e.to_string())?;
    let response = send.send_request(request).await.map_err(|e| e.to_string())?;
    let status = response.status();
    let body = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok((status, body))
}

fn pod(name: &str) -> String {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "bench"}},
        "spec": {"containers": [{
            "name": "app", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
        }]},
    })
    .to_string()
}

/// The wall time of `creates` pod creates named `<prefix>-<i>` over
/// `connections`, each a closed loop; every one must answer 201.
async fn creates(connections: &[Connection], creates: usize, prefix: &str) -> Result<Duration, String> {
    let next = AtomicUsize::new(0);
    let start = Instant::now();
    let loops = connections.iter().map(|connection| {
        let next = &next;
        async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= creates {
                    return Ok::<(), String>(());
                }
                let path = format!("/api/v1/namespaces/{NS}/pods");
                let (status, body) = send(connection, Method::POST, &path, pod(&format!("{prefix}-{i}"))).await?;
                if status != StatusCode::CREATED {
                    return Err(format!("create {prefix}-{i}: {status}: {}", String::from_utf8_lossy(&body)));
                }
            }
        }
    });
    futures::future::try_join_all(loops).await?;
    Ok(start.elapsed())
}

async fn run(config: &Config, scratch: &Path) -> Result<(), String> {
    let started = Instant::now();
    let machine = sys::CpuMeter::start();
    let pki = Pki::load_or_create(&scratch.join("pki"), &[]).map_err(|e| format!("pki: {e}"))?;
    let secured = Server::start(&scratch.join("secured"), &pki, true).await?;
    let open = Server::start(&scratch.join("open"), &pki, false).await?;
    let rbac = secured.rbac.clone().ok_or("the secured server has no RBAC authorizer")?;

    // The user of the creates: granted pod creates in NS by a RoleBinding.
    for server in [&secured, &open] {
        server.create("/api/v1/namespaces", json!({"metadata": {"name": NS}})).await?;
    }
    let rbac_path = |kind: &str| format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/{kind}");
    secured
        .create(
            &rbac_path("roles"),
            json!({"metadata": {"name": "pod-creator"},
                   "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "list"]}]}),
        )
        .await?;
    secured
        .create(
            &rbac_path("rolebindings"),
            json!({"metadata": {"name": "pod-creator"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-creator"},
                   "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": USER}]}),
        )
        .await?;
    let load = Instant::now();
    load_bindings(&secured, config).await?;
    eprintln!("  wrote {} bindings through the API in {:.1}s", config.bindings, load.elapsed().as_secs_f64());

    // The measured service account and its two requests.
    let measured = measured_binding(config);
    let namespace = format!("ns-{}", measured % config.namespaces());
    let account = format!("sa-{measured}");
    let account_user = format!("system:serviceaccount:{namespace}:{account}");
    let sa = secured
        .create(&format!("/api/v1/namespaces/{namespace}/serviceaccounts"), json!({"metadata": {"name": account}}))
        .await?;
    let uid = sa.pointer("/metadata/uid").and_then(Value::as_str).ok_or("the service account has no uid")?.to_owned();
    let namespace_group = format!("system:serviceaccounts:{namespace}");
    let sa_groups = ["system:serviceaccounts", namespace_group.as_str(), "system:authenticated"];
    let request = |verb: &str, resource: &str, name: &str| Attributes {
        user: UserInfo::new(&account_user, &sa_groups),
        verb: verb.into(),
        resource_request: true,
        resource: resource.into(),
        namespace: namespace.clone(),
        name: name.into(),
        path: format!("/api/v1/namespaces/{namespace}/{resource}/{name}"),
        ..Default::default()
    };
    let allowed = request("get", "configmaps", "settings");
    let denied = request("delete", "secrets", "app-credentials");
    // The authorizer reads the bindings from its watch: wait until every
    // binding's user holds its rules.
    let visible = |i: usize| {
        let scope = if i.is_multiple_of(10) { String::new() } else { format!("ns-{}", i % config.namespaces()) };
        !rbac.rules(&UserInfo::new(format!("user-{i}"), &[]), &scope).resource_rules.is_empty()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !rbac.allows(&allowed) || !(0..config.bindings).all(&visible) {
        if Instant::now() > deadline {
            return Err("the RBAC authorizer did not allow the measured request within a minute".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if rbac.allows(&denied) {
        return Err("RBAC allows a request nothing grants".into());
    }
    let granted = rbac.rules(&allowed.user, &namespace);

    // The credentials: the user's client certificate, a token of the account.
    let credential = pki.issue_client(USER, Some("bench-users")).map_err(|e| format!("client certificate: {e}"))?;
    let leaf = CertificateDer::pem_slice_iter(credential.cert_pem.as_bytes())
        .next()
        .ok_or("no certificate")?
        .map_err(|e| e.to_string())?;
    let mut with_cert = http::Request::get("/api").body(()).map_err(|e| e.to_string())?;
    with_cert.extensions_mut().insert(PeerCertificates(Arc::new(vec![leaf])));
    let (cert_parts, ()) = with_cert.into_parts();
    let signer = Arc::new(TokenSigner::generate(DEFAULT_ISSUER).map_err(|e| e.to_string())?);
    let token = signer.sign(&signer.claims(&namespace, &account, &uid, vec![DEFAULT_ISSUER.into()], 3600, None));
    let (token_parts, ()) = http::Request::get("/api")
        .header("authorization", format!("Bearer {token}"))
        .body(())
        .map_err(|e| e.to_string())?
        .into_parts();
    let token_authenticator =
        ServiceAccountAuthenticator::new(signer, Arc::new(secured.store.clone()), vec![DEFAULT_ISSUER.into()]);

    // The creates' connections, and what the user may not do.
    let tls = client_tls(&pki, &credential)?;
    let mut secured_connections = Vec::new();
    let mut open_connections = Vec::new();
    for _ in 0..config.clients {
        secured_connections.push(connect(secured.address, &tls).await?);
        open_connections.push(connect(open.address, &tls).await?);
    }
    let (status, _) = send(&secured_connections[0], Method::POST, "/api/v1/namespaces/default/pods", pod("x")).await?;
    if status != StatusCode::FORBIDDEN {
        return Err(format!("the secured server answered {status} to a create the user was not granted"));
    }
    let (status, _) =
        send(&secured_connections[0], Method::DELETE, &format!("/api/v1/namespaces/{NS}/pods/x"), String::new())
            .await?;
    if status != StatusCode::FORBIDDEN {
        return Err(format!("the secured server answered {status} to a delete the user was not granted"));
    }
    // Warm-up, unmeasured: a run's worth of creates on each server, so
    // that the first measured runs do not pay for connections, caches and
    // the stores' first memtables.
    let warmup = config.creates.max(config.clients * 4);
    creates(&secured_connections, warmup, "warmup").await?;
    creates(&open_connections, warmup, "warmup").await?;

    print_header(config, scratch, &granted);

    let mut authz = Figure { runs: Vec::new() };
    let mut authz_allowed = Figure { runs: Vec::new() };
    let mut authz_denied = Figure { runs: Vec::new() };
    let mut authn = Figure { runs: Vec::new() };
    let mut authn_token = Figure { runs: Vec::new() };
    let mut secured_ms = Figure { runs: Vec::new() };
    let mut open_ms = Figure { runs: Vec::new() };
    let mut ratios = Figure { runs: Vec::new() };
    let mut secured_cpu_us = Figure { runs: Vec::new() };
    let mut open_cpu_us = Figure { runs: Vec::new() };
    let mut cpu_ratios = Figure { runs: Vec::new() };
    for run in 0..config.runs {
        let half = (config.decisions / 2).max(1);
        let allow = decisions(&rbac, &allowed, half, true)?;
        let deny = decisions(&rbac, &denied, half, false)?;
        authz_allowed.runs.push(allow);
        authz_denied.runs.push(deny);
        authz.runs.push((allow + deny) / 2.0);
        let certificates = (config.decisions / 4).max(1);
        authn.runs.push(authentications(&ClientCertAuthenticator, &cert_parts, certificates, USER).await?);
        authn_token.runs.push(authentications(&token_authenticator, &token_parts, config.tokens, &account_user).await?);

        // The servers take turns a chunk at a time, in the order
        // secured, open, open, secured, ... so that a drift of the
        // machine's speed over the run (other guests, the stores'
        // background work) falls on both alike.
        for server in [&secured, &open] {
            server.settle().await?;
        }
        let mut walls = [Duration::ZERO; 2];
        let mut cpus = [0.0f64; 2];
        let mut threads = [ThreadTimes::new(), ThreadTimes::new()];
        let chunks = config.creates.div_ceil(config.chunk);
        for chunk in 0..chunks {
            let count = config.chunk.min(config.creates - chunk * config.chunk);
            let order: [usize; 2] = if chunk % 2 == run % 2 { [0, 1] } else { [1, 0] };
            for which in order {
                let connections = if which == 0 { &secured_connections } else { &open_connections };
                let cpu = sys::ThreadCpuMeter::start();
                walls[which] += creates(connections, count, &format!("run{run}-{chunk}")).await?;
                let window = cpu.read();
                cpus[which] += window.total_ns() as f64 / 1e9;
                for thread in &window.threads {
                    let entry = threads[which].entry(thread.name.clone()).or_default();
                    entry.0 += thread.cpu_ns;
                    entry.1 += thread.runs;
                }
            }
        }
        if config.threads {
            print_threads("secured", &threads[0], config.creates);
            print_threads("open", &threads[1], config.creates);
        }
        let per_create = |wall: Duration| wall.as_secs_f64() * 1e3 / config.creates as f64;
        secured_ms.runs.push(per_create(walls[0]));
        open_ms.runs.push(per_create(walls[1]));
        ratios.runs.push(walls[0].as_secs_f64() / walls[1].as_secs_f64());
        let cpu_per_create = |seconds: f64| seconds * 1e6 / config.creates as f64;
        secured_cpu_us.runs.push(cpu_per_create(cpus[0]));
        open_cpu_us.runs.push(cpu_per_create(cpus[1]));
        cpu_ratios.runs.push(cpus[0] / cpus[1].max(1e-9));
        eprintln!(
            "  run {}: authz {:.0}/{:.0} ns, authn cert {:.0} ns, token {:.0} ns; {} creates: secured {:.2}s \
             ({:.2} CPU s), open {:.2}s ({:.2} CPU s)",
            run + 1,
            allow,
            deny,
            authn.runs[run],
            authn_token.runs[run],
            config.creates,
            walls[0].as_secs_f64(),
            cpus[0],
            walls[1].as_secs_f64(),
            cpus[1],
        );
    }

    let mut line = format!(
        "auth rbac_bindings={} authz_ns_per_req={:.0} authz_spread={} authz_allowed_ns={:.0} authz_denied_ns={:.0} \
         authn_ns_per_req={:.0} authn_spread={} authn_sa_token_ns_per_req={:.0} authn_sa_token_spread={}",
        config.bindings,
        authz.median(),
        authz.spread(0),
        authz_allowed.median(),
        authz_denied.median(),
        authn.median(),
        authn.spread(0),
        authn_token.median(),
        authn_token.spread(0),
    );
    if !config.quick {
        line += &format!(
            " api_create_ratio_with_rbac={:.3} ratio_spread={} api_create_wall_ratio_with_rbac={:.3} \
             wall_ratio_spread={}",
            cpu_ratios.median(),
            cpu_ratios.spread(3),
            ratios.median(),
            ratios.spread(3)
        );
    }
    println!("{line}");
    println!(
        "# creates ({} per run, {} clients): secured {:.1} us CPU per create (runs {}), {:.3} ms wall (runs {}); \
         open {:.1} us CPU (runs {}), {:.3} ms wall (runs {})",
        config.creates,
        config.clients,
        secured_cpu_us.median(),
        secured_cpu_us.spread(1),
        secured_ms.median(),
        secured_ms.spread(3),
        open_cpu_us.median(),
        open_cpu_us.spread(1),
        open_ms.median(),
        open_ms.spread(3),
    );
    if config.quick {
        println!("# quick: no ratio (too few creates to tell 10 % apart)");
    } else {
        let ratio = cpu_ratios.median();
        let verdict = if ratio < 1.10 { "PASS" } else { "FAIL" };
        println!(
            "# target (a secured create costs under 10 % more CPU than an open one): ratio={ratio:.3} {verdict} \
             (runs {}); wall-time ratio {:.3} (runs {})",
            cpu_ratios.spread(3),
            ratios.median(),
            ratios.spread(3)
        );
    }
    let cpu = machine.read();
    println!(
        "# summary: total time {:.1}s; loadavg(end)={}; others' CPU {:.0}% of one CPU; steal {:.1}% of the \
         machine's CPU time over the run",
        started.elapsed().as_secs_f64(),
        sys::load_average(),
        cpu.others_pct,
        cpu.steal_pct,
    );
    Ok(())
}

fn print_header(config: &Config, scratch: &Path, granted: &orchestra_core::auth::Rules) {
    let mount = sys::mount_of(scratch);
    let mode = if config.quick { "quick" } else { "full" };
    println!("# auth benchmark ({mode}): RBAC decisions, authentication, and the secured create path");
    println!(
        "# host: nproc={} cpu=\"{}\" mem={:.1}GiB kernel={} clocksource={} loadavg(start)={}",
        sys::nproc(),
        sys::cpu_model(),
        sys::memory_gib(),
        sys::kernel(),
        sys::clocksource(),
        sys::load_average()
    );
    println!(
        "# build: debug assertions {}",
        if cfg!(debug_assertions) { "on (not a release build: figures are pessimistic)" } else { "off" }
    );
    println!(
        "# data: {} on {} ({}); durable writes (RocksDB synced WAL), one store per server",
        scratch.display(),
        mount.as_ref().map_or("?".into(), |m| m.mount_point.display().to_string()),
        mount.as_ref().map_or("?", |m| m.fs_type.as_str()),
    );
    println!(
        "# authz: {} bindings over {} namespaces plus the default ones; the measured service account holds {} \
         resource rules in its namespace; {} decisions per run, allowed and denied halves; {} runs (medians, \
         spread min..max)",
        config.bindings,
        config.namespaces(),
        granted.resource_rules.len(),
        config.decisions,
        config.runs
    );
    println!(
        "# authn: client certificate (as every request of a connection: the user remembered by certificate), \
         {} per run; service account token (ES256 verify, claims, account read from the store), {} per run",
        (config.decisions / 4).max(1),
        config.tokens
    );
    println!(
        "# creates: pods, HTTP/1.1 over TLS, {} connections as {USER} (client certificate); secured = Node,RBAC + \
         default admission, open = AlwaysAllow + no admission; ratio = secured CPU / open CPU of the same run \
         (the process's threads; the wall-time ratio beside it), servers taking turns every {} creates, each run \
         starting on settled stores",
        config.clients, config.chunk
    );
}

/// CPU nanoseconds and times put on a CPU, by thread name.
type ThreadTimes = std::collections::BTreeMap<String, (u64, u64)>;

/// A server's CPU time per create over a run, by thread name (the store's
/// committer, the runtime's workers, ...), and how often those threads were
/// woken per create, to tell where a difference goes.
fn print_threads(server: &str, threads: &ThreadTimes, creates: usize) {
    let per_create = |n: u64| n as f64 / creates as f64;
    let parts: Vec<String> = threads
        .iter()
        .filter(|(_, (ns, _))| *ns > 0)
        .map(|(name, (ns, runs))| format!("{name} {:.1} us/{:.2} runs", per_create(*ns) / 1e3, per_create(*runs)))
        .collect();
    let (ns, runs) = threads.values().fold((0, 0), |(ns, runs), (n, r)| (ns + n, runs + r));
    eprintln!(
        "    {server}: {:.1} us CPU and {:.2} runs on a CPU per create: {}",
        per_create(ns) / 1e3,
        per_create(runs),
        parts.join(", ")
    );
}
