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
use std::time::Duration;

use orchestra_core::auth::ClientCertAuthenticator;
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
    kubectl: OnceCell<Kubectl>,
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
    /// the scheduler, controllers or nodes to.
    pub fn builder() -> ControlPlaneBuilder {
        let builder = crate::ControlPlane::builder()
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
        TestCluster { handle, kubectl: OnceCell::new() }
    }

    /// A client acting as the administrator.
    pub fn client(&self) -> kube::Client {
        self.handle.client()
    }

    /// A client acting as `user` in `groups`.
    pub fn client_as(&self, user: &str, groups: &[&str]) -> kube::Client {
        self.handle.client_as(user, groups)
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
                let dir = tempfile::tempdir().expect("a temporary directory");
                let pki = Pki::load_or_create(&dir.path().join("pki"), &["127.0.0.1".into()]).expect("certificates");
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
                let address = listener.local_addr().expect("an address");
                let options = ListenOptions::default().with_tls(pki.server_tls_config().expect("a TLS configuration"));
                let router = self.handle.router();
                tokio::spawn(orchestra_core::server::serve(listener, router, options, std::future::pending()));
                pki.write_admin_kubeconfig(&dir.path().join("kubeconfig"), &format!("https://{address}"))
                    .expect("the kubeconfig is written");
                Kubectl { dir, address }
            })
            .await
    }
}

/// The installed `kubectl` with a kubeconfig and a cache of its own, in a
/// temporary directory removed when it is dropped.
#[derive(Debug)]
pub struct Kubectl {
    dir: tempfile::TempDir,
    address: SocketAddr,
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

impl Kubectl {
    /// The directory holding the kubeconfig and the cache.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The kubeconfig's path.
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    /// The API server's address.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// A kubectl command with this kubeconfig and cache; output captured,
    /// stdin closed.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("kubectl");
        command
            .arg(format!("--kubeconfig={}", self.kubeconfig().display()))
            .arg(format!("--cache-dir={}", self.dir.path().join("cache").display()))
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
