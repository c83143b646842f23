//! Overload and bad clients: API Priority and Fairness under a flood of
//! lists over HTTPS while a node keeps renewing its lease; slow, idle and
//! surplus clients of the HTTPS listener; the request timeout; a panicking
//! handler; bodies that used to panic the server.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use axum::body::Body;
use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use orchestra_core::api::ApiError;
use orchestra_core::auth::admission::{AdmissionChain, AdmissionPlugin, AdmissionRequest};
use orchestra_core::auth::{AllowAuthenticated, AuthenticatorChain, AuthorizerChain, ClientCertAuthenticator};
use orchestra_core::server::flowcontrol::{
    FLOW_SCHEMA_UID_HEADER, FlowControl, LimitResponse, PRIORITY_LEVEL_UID_HEADER, PriorityLevel, Queuing,
};
use orchestra_core::server::pki::Pki;
use orchestra_core::server::{ApiServer, ListenOptions, ServerOptions};
use orchestra_store::MemStore;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tower::ServiceExt as _;

/// An API server on HTTPS: client certificates, every authenticated user
/// allowed.
struct Https {
    address: SocketAddr,
    pki: Pki,
    server: ApiServer,
    stop: Option<oneshot::Sender<()>>,
    served: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn https(dir: &Path, options: ServerOptions, listen: ListenOptions) -> Https {
    let pki = Pki::load_or_create(&dir.join("pki"), &[]).unwrap();
    let server = ApiServer::builder(Arc::new(MemStore::new()))
        .authenticator(AuthenticatorChain::new().with(ClientCertAuthenticator))
        .authorizer(AuthorizerChain::new().with(AllowAuthenticated))
        .options(options)
        .build()
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let listen = listen.with_tls(pki.server_tls_config().unwrap()).with_drain_timeout(Duration::from_secs(1));
    let served = tokio::spawn(orchestra_core::server::serve(listener, server.router(), listen, async {
        let _ = stopped.await;
    }));
    Https { address, pki, server, stop: Some(stop), served }
}

impl Https {
    /// A TLS connection as `user` (in `group`), offering `alpn`.
    async fn tls(&self, user: &str, group: Option<&str>, alpn: &[u8]) -> tokio_rustls::client::TlsStream<TcpStream> {
        let credential = self.pki.issue_client(user, group).unwrap();
        let mut config = (*orchestra_core::tls::client_config(self.pki.ca_pem(), Some(&credential)).unwrap()).clone();
        config.alpn_protocols = vec![alpn.to_vec()];
        let tcp = TcpStream::connect(self.address).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.unwrap()
    }

    /// An HTTP/2 client connection as `user`; the task drives it until
    /// either side closes it.
    async fn h2(&self, user: &str, group: Option<&str>) -> (H2, tokio::task::JoinHandle<()>) {
        let tls = self.tls(user, group, b"h2").await;
        let (sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls)).await.unwrap();
        let driver = tokio::spawn(async move {
            let _ = connection.await;
        });
        (H2 { sender, base: format!("https://{}", self.address) }, driver)
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.served.await.unwrap().unwrap();
    }
}

#[derive(Clone)]
struct H2 {
    sender: hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    base: String,
}

/// A response: status, headers, body as JSON (`Null` if it is not).
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Value,
}

impl H2 {
    async fn send(&self, method: Method, path: &str, content_type: &str, body: Option<Value>) -> Answer {
        let mut sender = self.sender.clone();
        sender.ready().await.unwrap();
        let request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("content-type", content_type)
            .body(Full::new(body.map(|b| Bytes::from(b.to_string())).unwrap_or_default()))
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        let (parts, body) = response.into_parts();
        let bytes = body.collect().await.unwrap().to_bytes();
        Answer {
            status: parts.status,
            headers: parts.headers,
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        }
    }

    async fn get(&self, path: &str) -> Answer {
        self.send(Method::GET, path, "application/json", None).await
    }
}

/// A flow control where everyone without a more specific schema shares one
/// seat and one queue of one place; nodes keep their own level.
fn one_seat_for_workloads() -> FlowControl {
    FlowControl::default()
        .with_max_requests_inflight(4)
        .with_max_mutating_requests_inflight(2)
        .with_priority_level(PriorityLevel::limited("global-default", 20, LimitResponse::Queue(Queuing::new(1, 1, 1))))
}

/// A flood of list requests from an ordinary user gets 429s with
/// `Retry-After`, while a node renewing its Lease (and reading its pods)
/// is served every time; a watch holds no seat once it has started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_lists_is_throttled_while_node_leases_are_renewed() {
    let dir = tempfile::tempdir().unwrap();
    let options = ServerOptions::default().with_flow_control(one_seat_for_workloads());
    let cluster = https(dir.path(), options, ListenOptions::default()).await;
    let (flooder, _flooder_driver) = cluster.h2("flooder", Some("team")).await;
    let (node, _node_driver) = cluster.h2("system:node:n1", Some("system:nodes")).await;

    for i in 0..50 {
        let map = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("m{i}")}, "data": {"k": "v".repeat(200)}});
        let created =
            flooder.send(Method::POST, "/api/v1/namespaces/default/configmaps", "application/json", Some(map)).await;
        assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    }
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "n1"},
        "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40},
    });
    let leases = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
    let created = node.send(Method::POST, leases, "application/json", Some(lease)).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);

    // A watch of the flooder's: once started it holds no seat, so the
    // flooder's next requests still find the level's only one.
    let mut watcher = flooder.sender.clone();
    watcher.ready().await.unwrap();
    let watch = watcher
        .send_request(
            Request::get(format!("{}/api/v1/namespaces/default/configmaps?watch=true", flooder.base))
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(watch.status(), StatusCode::OK);
    for _ in 0..3 {
        assert_eq!(flooder.get("/api/v1/namespaces/default/configmaps?limit=1").await.status, StatusCode::OK);
    }

    let flooding = Arc::new(AtomicBool::new(true));
    let flood = tokio::spawn({
        let (flooder, flooding) = (flooder.clone(), flooding.clone());
        async move {
            let mut answers = Vec::new();
            // Rounds of 100 concurrent lists until the node is done, and at
            // least until one was refused (at most 100 rounds).
            for _ in 0..100 {
                let round = (0..100).map(|_| flooder.get("/api/v1/namespaces/default/configmaps"));
                answers.extend(futures::future::join_all(round).await);
                let refused = answers.iter().any(|a| a.status == StatusCode::TOO_MANY_REQUESTS);
                if refused && !flooding.load(Ordering::Acquire) {
                    break;
                }
            }
            answers
        }
    });
    let mut node_answers = Vec::new();
    for i in 0..30 {
        let renew = json!({"spec": {"renewTime": format!("2026-01-01T00:00:{i:02}.000000Z")}});
        let renewed =
            node.send(Method::PATCH, &format!("{leases}/n1"), "application/merge-patch+json", Some(renew)).await;
        node_answers.push(renewed.status);
        node_answers.push(node.get("/api/v1/pods?fieldSelector=spec.nodeName%3Dn1").await.status);
    }
    flooding.store(false, Ordering::Release);
    let answers = flood.await.unwrap();

    assert!(node_answers.iter().all(|s| *s == StatusCode::OK), "every node request succeeds: {node_answers:?}");
    let refused: Vec<&Answer> = answers.iter().filter(|a| a.status == StatusCode::TOO_MANY_REQUESTS).collect();
    assert!(!refused.is_empty(), "a flood from one user is throttled");
    assert!(answers.iter().all(|a| [StatusCode::OK, StatusCode::TOO_MANY_REQUESTS].contains(&a.status)));
    for answer in refused {
        assert_eq!(answer.headers["retry-after"], "1");
        assert_eq!(answer.body["reason"], "TooManyRequests", "{}", answer.body);
        assert_eq!(answer.body["code"], 429);
        assert_eq!(answer.body["details"]["retryAfterSeconds"], 1);
        assert!(answer.headers.contains_key(PRIORITY_LEVEL_UID_HEADER));
    }
    let served = answers.iter().find(|a| a.status == StatusCode::OK).expect("some lists are served");
    assert!(
        served.headers.contains_key(FLOW_SCHEMA_UID_HEADER) && served.headers.contains_key(PRIORITY_LEVEL_UID_HEADER)
    );
    assert_eq!(served.body["items"].as_array().map(Vec::len), Some(50));

    let metrics = cluster.server.metrics().render();
    let rejected = metrics
        .lines()
        .find(|l| {
            l.starts_with(r#"apiserver_flowcontrol_rejected_requests_total{priority_level="global-default",flow_schema="global-default",reason="queue-full"}"#)
        })
        .expect("the rejections are counted");
    assert!(!rejected.ends_with(" 0"), "{rejected}");
    assert!(
        metrics.contains(r#"apiserver_flowcontrol_current_executing_requests{priority_level="node-high",flow_schema="system-node-high"} 0"#),
        "{metrics}"
    );
    assert!(
        metrics.lines().any(|l| l.starts_with("apiserver_request_total{verb=\"LIST\"") && l.contains("code=\"429\"")),
        "{metrics}"
    );
    drop(watch);
    cluster.stop().await;
}

/// Writes `head`, then the bytes of `drip` one at a time, a tenth of a
/// second apart, over and over, until the server closes the connection;
/// returns what the server sent. Gives up (panics) after 30 seconds.
async fn dribble<S>(stream: S, head: &'static [u8], drip: &'static [u8]) -> Vec<u8>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    let (mut reader, mut writer) = tokio::io::split(stream);
    let writing = tokio::spawn(async move {
        writer.write_all(head).await?;
        for byte in drip.iter().cycle() {
            writer.write_all(&[*byte]).await?;
            writer.flush().await?;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok::<(), std::io::Error>(())
    });
    let mut received = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), async {
        let mut buffer = [0u8; 1024];
        loop {
            match reader.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received.extend_from_slice(&buffer[..n]),
            }
        }
    })
    .await;
    writing.abort();
    assert!(read.is_ok(), "the server never cut the slow client off");
    received
}

/// A client that dribbles its request headers (HTTP/1.1), or the HTTP/2
/// preface, is cut off at the header read timeout; an idle HTTP/2
/// connection is closed at the idle timeout; well-behaved clients are
/// served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_idle_clients_are_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let listen = ListenOptions::default()
        .with_header_read_timeout(Duration::from_secs(1))
        .with_idle_timeout(Duration::from_millis(500));
    let cluster = https(dir.path(), ServerOptions::default(), listen).await;

    // An endless header.
    let slow = cluster.tls("slow", None, b"http/1.1").await;
    let answer = dribble(slow, b"GET /version HTTP/1.1\r\nhost: x\r\nx-slow: ", b"a").await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(!answer.contains("200 OK"), "{answer}");

    // The HTTP/2 preface, never finished: no request ever starts.
    let slow_h2 = cluster.tls("slow", None, b"h2").await;
    assert!(dribble(slow_h2, b"", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r").await.is_empty());

    // An HTTP/2 client served once, then idle: the server closes the
    // connection and the client's connection task ends.
    let (client, driver) = cluster.h2("idle", None).await;
    assert_eq!(client.get("/version").await.status, StatusCode::OK);
    tokio::time::timeout(Duration::from_secs(30), driver).await.expect("the idle connection is closed").unwrap();

    // Others are served all along.
    let (client, _driver) = cluster.h2("prompt", None).await;
    assert_eq!(client.get("/version").await.status, StatusCode::OK);
    cluster.stop().await;
}

/// At the connection cap, a further client is not accepted until an open
/// connection closes; then it is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_cap_wait_for_a_free_one() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = https(dir.path(), ServerOptions::default(), ListenOptions::default().with_max_connections(1)).await;
    let (first, first_driver) = cluster.h2("first", None).await;
    assert_eq!(first.get("/version").await.status, StatusCode::OK);

    let second = tokio::spawn({
        let credential = cluster.pki.issue_client("second", None).unwrap();
        let mut config =
            (*orchestra_core::tls::client_config(cluster.pki.ca_pem(), Some(&credential)).unwrap()).clone();
        config.alpn_protocols = vec![b"h2".to_vec()];
        let address = cluster.address;
        async move {
            let tcp = TcpStream::connect(address).await.unwrap();
            let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
            tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!second.is_finished(), "the second connection waits while the first is open");
    drop(first);
    first_driver.abort();
    let tls = tokio::time::timeout(Duration::from_secs(30), second).await.expect("accepted once the first closed");
    let tls = tls.unwrap().expect("a TLS connection");
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls)).await.unwrap();
    tokio::spawn(connection);
    let client = H2 { sender, base: format!("https://{}", cluster.address) };
    assert_eq!(client.get("/version").await.status, StatusCode::OK);
    cluster.stop().await;
}

/// Panics on objects named `boom`; stalls on objects named `slow`.
struct Misbehaving;

#[async_trait]
impl AdmissionPlugin for Misbehaving {
    fn name(&self) -> &str {
        "Misbehaving"
    }

    async fn validate(&self, request: &AdmissionRequest<'_>) -> Result<(), ApiError> {
        match request.name {
            "boom" => panic!("a handler bug"),
            "slow" => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

async fn in_process(options: ServerOptions) -> ApiServer {
    let builder = ApiServer::builder(Arc::new(MemStore::new())).options(options);
    let admission = AdmissionChain::new().with(builder.namespace_lifecycle()).with(Misbehaving);
    builder.admission(admission).build().await.unwrap()
}

async fn call(server: &ApiServer, method: Method, path: &str, content_type: &str, body: Value) -> (StatusCode, Value) {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        // As the server's loopback client: the default chain lets no one in
        // anonymously.
        .extension(orchestra_core::auth::Identity(orchestra_core::client::loopback_user()))
        .body(Body::from(body.to_string()))
        .unwrap();
    let response = server.router().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn config_map(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})
}

const CONFIG_MAPS: &str = "/api/v1/namespaces/default/configmaps";

/// A panic while serving a request is a 500 `Status`; the server goes on.
#[tokio::test]
async fn a_handler_panic_is_a_500_and_the_next_request_is_served() {
    let server = in_process(ServerOptions::default()).await;
    let (status, body) = call(&server, Method::POST, CONFIG_MAPS, "application/json", config_map("boom")).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(body["kind"], "Status");
    assert_eq!(body["reason"], "InternalError", "{body}");
    assert!(body["message"].as_str().unwrap().contains("This request caused apiserver to panic"), "{body}");
    let (status, body) = call(&server, Method::POST, CONFIG_MAPS, "application/json", config_map("fine")).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert!(
        server
            .metrics()
            .render()
            .lines()
            .any(|l| l.starts_with("apiserver_request_total{verb=\"POST\"") && l.contains("code=\"500\""))
    );
}

/// A request running past the request timeout is a 504 `Timeout`.
#[tokio::test]
async fn a_request_past_the_request_timeout_is_a_504() {
    let server = in_process(ServerOptions::default().with_request_timeout(Duration::from_millis(100))).await;
    let (status, body) = call(&server, Method::POST, CONFIG_MAPS, "application/json", config_map("slow")).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{body}");
    assert_eq!(body["reason"], "Timeout");
    assert_eq!(body["message"], "Timeout: request did not complete within the allotted timeout");
    let (status, body) = call(&server, Method::POST, CONFIG_MAPS, "application/json", config_map("quick")).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    // The client's `timeout` shortens the server's one-minute default.
    let server = in_process(ServerOptions::default()).await;
    let slow = format!("{CONFIG_MAPS}?timeout=100ms");
    let (status, body) = call(&server, Method::POST, &slow, "application/json", config_map("slow")).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{body}");
    let bogus = format!("{CONFIG_MAPS}?timeout=soon");
    let (status, body) = call(&server, Method::POST, &bogus, "application/json", config_map("quick")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}

/// Bodies that once panicked the server are refused like upstream does.
#[tokio::test]
async fn malformed_bodies_are_client_errors() {
    let server = in_process(ServerOptions::default()).await;
    // A running, ready pod under a disruption budget: its eviction charges
    // the budget and pins the delete to the pod's version, in the
    // preconditions of the client's delete options.
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    });
    let (status, body) = call(&server, Method::POST, "/api/v1/namespaces/default/pods", "application/json", pod).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let running = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
    let pod_status = "/api/v1/namespaces/default/pods/p/status";
    let (status, body) = call(&server, Method::PATCH, pod_status, "application/merge-patch+json", running).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let budget = json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}},
    });
    let budgets = "/apis/policy/v1/namespaces/default/poddisruptionbudgets";
    let (status, body) = call(&server, Method::POST, budgets, "application/json", budget).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = call(&server, Method::POST, CONFIG_MAPS, "application/json", config_map("c")).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let eviction = |preconditions: Value| json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"}, "deleteOptions": {"preconditions": preconditions}});
    let evict = "/api/v1/namespaces/default/pods/p/eviction";
    for preconditions in [json!("x"), json!(5), json!(["uid"]), json!(true)] {
        let (status, body) =
            call(&server, Method::POST, evict, "application/json", eviction(preconditions.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{preconditions}: {body}");
        assert_eq!(body["reason"], "BadRequest");
    }
    let patches = [
        ("application/merge-patch+json", json!(42)),
        ("application/merge-patch+json", json!(["a"])),
        ("application/json-patch+json", json!([{"op": "replace", "path": "", "value": "text"}])),
    ];
    for (content_type, patch) in patches {
        let (status, body) =
            call(&server, Method::PATCH, &format!("{CONFIG_MAPS}/c"), content_type, patch.clone()).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{patch}: {body}");
    }
    // The objects are untouched, and the eviction still works.
    let (status, body) = call(&server, Method::POST, evict, "application/json", eviction(Value::Null)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}
