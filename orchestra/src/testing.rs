//! [`TestCluster`]: an in-process control plane for tests, in one line, and
//! [`Kubectl`] to drive it with the real `kubectl`.
//!
//! ```no_run
//! use orchestra::prelude::*;
//!
//! #[tokio::test]
//! async fn creates_a_namespace() {
//!     let cluster = TestCluster::start().await;
//!     let kubectl = cluster.kubectl().await;
//!     assert!(kubectl.run(&["create", "namespace", "team-a"]).success);
//!     let namespaces: Api<Namespace> = Api::all(cluster.client());
//!     assert!(namespaces.get_opt("team-a").await.unwrap().is_some());
//! }
//! ```
//!
//! The crates' own fakes and suites are re-exported here too:
//! [`store`](orchestra_store::testing) (the `Store` conformance suite),
//! and, with their features, `ctrl` (`FakeCluster`), `node` (the
//! `RuntimeBackend` conformance suite) and `sched` (pod and node builders).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use orchestra_core::auth::{ClientCertAuthenticator, IdentityLayer};
use orchestra_core::server::pki::Pki;
use orchestra_core::server::{ApiServer, ListenOptions, ServerOptions};
use tokio::sync::OnceCell;

#[cfg(feature = "ctrl")]
pub use orchestra_ctrl::testing as ctrl;
#[cfg(feature = "node")]
pub use orchestra_node::testing as node;
#[cfg(feature = "sched")]
pub use orchestra_sched::testing as sched;
pub use orchestra_store::testing as store;

use crate::control_plane::{ControlPlaneBuilder, ControlPlaneHandle};

/// An in-process control plane for a test: a MemStore, the API server
/// with short bookmark intervals, and whatever else the builder added.
/// Everything stops when it is dropped.
#[derive(Debug)]
pub struct TestCluster {
    handle: ControlPlaneHandle,
    https: OnceCell<Https>,
    kubectl: OnceCell<Kubectl>,
}

/// The API server served over HTTPS on loopback, with a CA of its own.
#[derive(Debug)]
struct Https {
    pki: Pki,
    address: SocketAddr,
    /// Holds the PKI; removed when the cluster is dropped.
    _dir: tempfile::TempDir,
}

impl TestCluster {
    /// The API server alone (no scheduler, no controllers, no nodes), as
    /// envtest starts it.
    ///
    /// # Panics
    /// When the cluster cannot start.
    pub async fn start() -> TestCluster {
        TestCluster::start_with(TestCluster::builder()).await
    }

    /// A builder with the test defaults ([`start`](Self::start)'s), to add
    /// the scheduler, controllers or nodes to, or to change the store, the
    /// authenticators, authorizers and admission plugins, or the API
    /// server's own settings ([`ControlPlaneBuilder::configure_api_server`]).
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use orchestra::prelude::*;
    ///
    /// # async fn demo() {
    /// let store = Arc::new(MemStore::new());
    /// let cluster = TestCluster::start_with(TestCluster::builder().store(store.clone())).await;
    /// // ... and later a second API server on the same store.
    /// let restarted = TestCluster::start_with(TestCluster::builder().store(store)).await;
    /// # }
    /// ```
    pub fn builder() -> ControlPlaneBuilder {
        let builder = crate::control_plane::ControlPlane::builder()
            .server_options(ServerOptions::default().with_bookmark_interval(Duration::from_millis(200)));
        #[cfg(feature = "sched")]
        let builder = builder.without_scheduler();
        #[cfg(feature = "ctrl")]
        let builder = builder.without_controllers();
        builder
    }

    /// Starts what `builder` describes.
    ///
    /// # Panics
    /// When the cluster cannot start.
    pub async fn start_with(builder: ControlPlaneBuilder) -> TestCluster {
        // kubectl reaches the cluster over HTTPS on loopback with a client
        // certificate of the administrator's (kubectl sends no credentials
        // over plain HTTP).
        let handle = builder.authenticator(ClientCertAuthenticator).start().await.expect("the test cluster starts");
        TestCluster { handle, https: OnceCell::new(), kubectl: OnceCell::new() }
    }

    /// A client acting as the administrator.
    pub fn client(&self) -> kube::Client {
        self.handle.client()
    }

    /// A client acting as `user` in `groups`.
    pub fn client_as(&self, user: &str, groups: &[&str]) -> kube::Client {
        self.handle.client_as(user, groups)
    }

    /// The API server's tower service with every request acting as the
    /// administrator, as [`client`](Self::client) does: for tests that send
    /// raw HTTP requests (`tower::ServiceExt::oneshot`). The handle's
    /// [`router`](ControlPlaneHandle::router) is the same service without an
    /// identity: its requests are authenticated like a remote client's.
    pub fn admin_router(&self) -> axum::Router {
        self.handle.router().layer(IdentityLayer(crate::control_plane::admin()))
    }

    /// The API server.
    pub fn server(&self) -> &ApiServer {
        self.handle.api_server()
    }

    /// The control plane behind it.
    pub fn handle(&self) -> &ControlPlaneHandle {
        &self.handle
    }

    /// Serves the API server over HTTPS on loopback (once), with a CA and
    /// an administrator's certificate of its own, and returns a kubectl set
    /// up for it.
    pub async fn kubectl(&self) -> &Kubectl {
        self.kubectl
            .get_or_init(|| async {
                let https = self.https().await;
                let dir = tempfile::tempdir().expect("a temporary directory");
                let kubeconfig = dir.path().join("kubeconfig");
                https
                    .pki
                    .write_admin_kubeconfig(&kubeconfig, &format!("https://{}", https.address))
                    .expect("the kubeconfig is written");
                Kubectl { dir: Arc::new(dir), kubeconfig, address: Some(https.address) }
            })
            .await
    }

    /// A kubectl that authenticates with the bearer `token` only (no client
    /// certificate), over the same HTTPS listener as [`kubectl`](Self::kubectl):
    /// for a cluster built with a token authenticator.
    pub async fn kubectl_with_token(&self, token: &str) -> Kubectl {
        let https = self.https().await;
        let dir = tempfile::tempdir().expect("a temporary directory");
        let kubeconfig = dir.path().join("kubeconfig");
        let ca = https.pki.dir().join("ca.crt");
        let config = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "test", "cluster": {
                "server": format!("https://{}", https.address),
                "certificate-authority": ca,
            }}],
            "users": [{"name": "token", "user": {"token": token}}],
            "contexts": [{"name": "token", "context": {"cluster": "test", "user": "token"}}],
            "current-context": "token",
        });
        std::fs::write(&kubeconfig, config.to_string()).expect("the kubeconfig is written");
        Kubectl { dir: Arc::new(dir), kubeconfig, address: Some(https.address) }
    }

    /// A kube-rs client that authenticates with the bearer `token` only,
    /// over the same HTTPS listener as [`kubectl`](Self::kubectl), as a
    /// client across the network would.
    ///
    /// # Panics
    /// When the client cannot be built.
    pub async fn client_with_token(&self, token: &str) -> kube::Client {
        let kubectl = self.kubectl_with_token(token).await;
        orchestra_core::client::from_kubeconfig(kubectl.kubeconfig()).await.expect("a client from the kubeconfig")
    }

    async fn https(&self) -> &Https {
        self.https
            .get_or_init(|| async {
                let dir = tempfile::tempdir().expect("a temporary directory");
                let pki = Pki::load_or_create(&dir.path().join("pki"), &["127.0.0.1".into()]).expect("certificates");
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
                let address = listener.local_addr().expect("an address");
                let options = ListenOptions::default().with_tls(pki.server_tls_config().expect("a TLS configuration"));
                let router = self.handle.router();
                tokio::spawn(orchestra_core::server::serve(listener, router, options, std::future::pending()));
                Https { pki, address, _dir: dir }
            })
            .await
    }
}

/// The installed `kubectl` with a kubeconfig and a cache of its own, in a
/// temporary directory removed when the last clone is dropped.
///
/// From a [`TestCluster`] ([`kubectl`](TestCluster::kubectl)), or for a
/// cluster started some other way, from its kubeconfig:
///
/// ```no_run
/// use orchestra::testing::Kubectl;
///
/// let kubectl = Kubectl::with_kubeconfig("/tmp/my-cluster/admin.kubeconfig");
/// let nodes = kubectl.run(&["get", "nodes", "-o", "name"]);
/// assert!(nodes.success, "{}", nodes.stderr);
/// ```
#[derive(Debug, Clone)]
pub struct Kubectl {
    dir: Arc<tempfile::TempDir>,
    kubeconfig: PathBuf,
    address: Option<SocketAddr>,
}

/// What one kubectl run did.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct KubectlOutput {
    /// Whether it exited with 0.
    pub success: bool,
    /// Its exit code (-1 when killed by a signal).
    pub code: i32,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

impl KubectlOutput {
    /// `(success, stdout, stderr)`, to destructure.
    pub fn into_parts(self) -> (bool, String, String) {
        (self.success, self.stdout, self.stderr)
    }
}

impl Kubectl {
    /// kubectl with the kubeconfig at `path` (not copied: it is read at
    /// every run) and a cache in a new temporary directory.
    ///
    /// # Panics
    /// When no temporary directory can be created.
    pub fn with_kubeconfig(path: impl Into<PathBuf>) -> Kubectl {
        let dir = tempfile::tempdir().expect("a temporary directory");
        Kubectl { dir: Arc::new(dir), kubeconfig: path.into(), address: None }
    }

    /// The temporary directory holding the cache (and, from a
    /// [`TestCluster`], the kubeconfig).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The kubeconfig's path.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The discovery and HTTP cache's directory (`--cache-dir`).
    pub fn cache_dir(&self) -> PathBuf {
        self.dir.path().join("cache")
    }

    /// The API server's address, for a [`TestCluster`]'s kubectl.
    pub fn address(&self) -> Option<SocketAddr> {
        self.address
    }

    /// A kubectl command with this kubeconfig and cache; output captured,
    /// stdin closed.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("kubectl");
        command
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .arg(format!("--cache-dir={}", self.cache_dir().display()))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }

    /// Runs kubectl with `args`.
    pub fn run(&self, args: &[&str]) -> KubectlOutput {
        self.run_with_input(args, None)
    }

    /// Runs kubectl with `args` and `input` on its standard input (`apply -f -`).
    pub fn run_with_input(&self, args: &[&str], input: Option<&str>) -> KubectlOutput {
        use std::io::Write as _;
        let mut command = self.command(args);
        if input.is_some() {
            command.stdin(Stdio::piped());
        }
        let mut child = command.spawn().expect("kubectl is installed");
        if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
            stdin.write_all(input.as_bytes()).expect("kubectl reads its input");
        }
        let output = child.wait_with_output().expect("kubectl runs");
        KubectlOutput {
            success: output.status.success(),
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}
