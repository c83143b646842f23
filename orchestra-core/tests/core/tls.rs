//! The HTTPS listener: certificates created in a data directory, HTTP/2 by
//! ALPN, client-certificate and token authentication, the admin kubeconfig
//! used by kubectl and kube-rs, health and metrics endpoints, and graceful
//! shutdown.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, PostParams};
use orchestra::testing::Kubectl;
use orchestra_core::auth::{
    AllowAuthenticated, AuthenticatorChain, AuthorizerChain, ClientCertAuthenticator, PublicInfoViewer, TokenFile,
    UserInfo,
};
use orchestra_core::server::pki::{ADMIN_GROUP, ADMIN_USER, Pki};
use orchestra_core::server::{ApiServer, ListenOptions};
use orchestra_store::MemStore;
use tokio::sync::oneshot;

struct Cluster {
    address: SocketAddr,
    pki: Pki,
    stop: Option<oneshot::Sender<()>>,
    served: tokio::task::JoinHandle<std::io::Result<()>>,
    server: ApiServer,
}

/// An API server on HTTPS with the assembly's pipeline: client certificates
/// and a token, anonymous users limited to health and version.
async fn cluster(dir: &Path) -> Cluster {
    let pki = Pki::load_or_create(&dir.join("pki"), &[]).unwrap();
    let mut tokens = TokenFile::default();
    tokens.insert("s3cret", UserInfo::new("token-user", &["team"]));
    let server = ApiServer::builder(Arc::new(MemStore::new()))
        .authenticator(AuthenticatorChain::new().with(ClientCertAuthenticator).with(tokens).allow_anonymous(true))
        .authorizer(AuthorizerChain::new().with(PublicInfoViewer).with(AllowAuthenticated))
        .build()
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let options =
        ListenOptions::default().with_tls(pki.server_tls_config().unwrap()).with_drain_timeout(Duration::from_secs(2));
    let served = tokio::spawn(orchestra_core::server::serve(listener, server.router(), options, async {
        let _ = stopped.await;
    }));
    Cluster { address, pki, stop: Some(stop), served, server }
}

impl Cluster {
    fn url(&self) -> String {
        format!("https://{}", self.address)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_and_kube_rs_over_https_with_client_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = cluster(dir.path()).await;
    let admin = dir.path().join("admin.kubeconfig");
    cluster.pki.write_admin_kubeconfig(&admin, &cluster.url()).unwrap();
    let admin_kubectl = Kubectl::with_kubeconfig(&admin);

    // kubectl (Go's HTTP/2 client) with the admin certificate.
    let (ok, out, err) = admin_kubectl.run(&["create", "configmap", "settings", "--from-literal=a=b"]).into_parts();
    assert!(ok, "{out}{err}");
    let (ok, out, err) = admin_kubectl.run(&["get", "configmaps", "settings", "-o", "jsonpath={.data.a}"]).into_parts();
    assert!(ok && out == "b", "{out}{err}");
    let (ok, out, err) = admin_kubectl
        .run(&["auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}"])
        .into_parts();
    assert!(ok, "{out}{err}");
    assert!(out.starts_with(ADMIN_USER) && out.contains(ADMIN_GROUP), "{out}");

    // kube-rs from the same kubeconfig.
    let client = orchestra_core::client::from_kubeconfig(&admin).await.unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let names: Vec<_> = namespaces
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert!(names.contains(&"kube-system".to_owned()), "{names:?}");
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut map = ConfigMap::default();
    map.metadata.name = Some("from-kube-rs".into());
    maps.create(&PostParams::default(), &map).await.unwrap();

    // A certificate for another user, issued by the same CA.
    let alice = cluster.pki.issue_client("alice", Some("dev")).unwrap();
    let alice_config = dir.path().join("alice.kubeconfig");
    std::fs::write(&alice_config, cluster.pki.kubeconfig(&cluster.url(), "alice", &alice)).unwrap();
    let (ok, out, err) = Kubectl::with_kubeconfig(&alice_config)
        .run(&["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"])
        .into_parts();
    assert!(ok && out == "alice", "{out}{err}");

    // A bearer token, and no credential at all.
    // With kubectl, a user without credentials gets a password prompt; kube-rs
    // goes in as system:anonymous.
    use rustls::pki_types::pem::PemObject as _;
    let ca = rustls::pki_types::CertificateDer::from_pem_slice(cluster.pki.ca_pem().as_bytes()).unwrap();
    let mut config = kube::Config::new(cluster.url().parse().unwrap());
    config.root_cert = Some(vec![ca.to_vec()]);
    let anonymous = kube::Client::try_from(config.clone()).unwrap();
    let denied =
        Api::<ConfigMap>::namespaced(anonymous.clone(), "default").list(&ListParams::default()).await.unwrap_err();
    match denied {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 403);
            assert!(
                status.message.contains("User \"system:anonymous\" cannot list resource \"configmaps\""),
                "{}",
                status.message
            );
        }
        other => panic!("{other}"),
    }
    let request = |path: &str| http::Request::get(path).body(Vec::new()).unwrap();
    let ready = anonymous.request_text(request("/readyz?verbose")).await.unwrap();
    assert!(ready.contains("[+]etcd ok") && ready.contains("readyz check passed"), "{ready}");
    let ca_file = dir.path().join("ca.crt");
    std::fs::write(&ca_file, cluster.pki.ca_pem()).unwrap();
    let token_config = dir.path().join("token.kubeconfig");
    std::fs::write(
        &token_config,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"{}\", certificate-authority: \"{}\"}}}}]\nusers: [{{name: t, user: {{token: s3cret}}}}]\ncontexts: [{{name: x, context: {{cluster: c, user: t}}}}]\ncurrent-context: x\n",
            cluster.url(),
            ca_file.display()
        ),
    )
    .unwrap();
    let (ok, out, err) = Kubectl::with_kubeconfig(&token_config)
        .run(&["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"])
        .into_parts();
    assert!(ok && out == "token-user", "{out}{err}");
    config.auth_info.token = Some("wrong".to_owned().into());
    let invalid = kube::Client::try_from(config).unwrap().request_text(request("/readyz")).await.unwrap_err();
    assert!(
        matches!(&invalid, kube::Error::Api(s) if s.code == 401),
        "an invalid credential is never anonymous: {invalid}"
    );

    // Metrics saw the requests above, by verb and resource.
    let (ok, metrics, err) = admin_kubectl.run(&["get", "--raw", "/metrics"]).into_parts();
    assert!(ok, "{err}");
    assert!(
        metrics.lines().any(|l| l
            .starts_with("apiserver_request_total{verb=\"POST\",group=\"\",version=\"v1\",resource=\"configmaps\"")
            && l.contains("code=\"201\"")),
        "{metrics}"
    );
    assert!(metrics.contains("apiserver_request_duration_seconds_bucket"), "{metrics}");
    drop(cluster.server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negotiates_http2_and_shuts_down_gracefully() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = cluster(dir.path()).await;

    // ALPN: h2 is chosen when offered, http/1.1 otherwise.
    for (offered, expected) in [
        (vec![b"h2".to_vec(), b"http/1.1".to_vec()], b"h2".to_vec()),
        (vec![b"http/1.1".to_vec()], b"http/1.1".to_vec()),
    ] {
        let mut roots = rustls::RootCertStore::empty();
        use rustls::pki_types::pem::PemObject as _;
        roots.add(rustls::pki_types::CertificateDer::from_pem_slice(cluster.pki.ca_pem().as_bytes()).unwrap()).unwrap();
        let mut config =
            rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
        config.alpn_protocols = offered;
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let tcp = tokio::net::TcpStream::connect(cluster.address).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let tls = connector.connect(name, tcp).await.expect("the serving certificate covers localhost");
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(expected.as_slice()));
    }

    // A watch is open when shutdown starts: serve() still returns within the
    // drain timeout.
    let admin = dir.path().join("admin.kubeconfig");
    cluster.pki.write_admin_kubeconfig(&admin, &cluster.url()).unwrap();
    let client = orchestra_core::client::from_kubeconfig(&admin).await.unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    let watch = maps.watch(&kube::api::WatchParams::default(), "0").await.unwrap();
    let started = std::time::Instant::now();
    cluster.stop.take().unwrap().send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), &mut cluster.served).await.expect("stops").unwrap().unwrap();
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    // The connections still open past the drain timeout are closed: the watch ends.
    let mut watch = Box::pin(watch);
    let ended = tokio::time::timeout(Duration::from_secs(5), async { while let Some(Ok(_)) = watch.next().await {} });
    assert!(ended.await.is_ok(), "the watch's connection is closed");
    assert!(tokio::net::TcpStream::connect(cluster.address).await.is_err(), "no longer listening");
}
