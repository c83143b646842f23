//! TLS bootstrapping of a node (upstream's kubelet
//! `--bootstrap-kubeconfig`): with a bootstrap token, ask the cluster for
//! the node's client certificate through a CertificateSigningRequest, wait
//! for it to be issued, and write the node's own kubeconfig.
//!
//! The key never leaves the node: it is generated here and written with
//! mode 0600, like the kubeconfig holding it and its certificate. The
//! request is for `system:node:<name>` in `system:nodes`, of the
//! `kubernetes.io/kube-apiserver-client-kubelet` signer; the cluster's
//! `csrapproving` controller approves it when the token may (RBAC
//! `system:certificates.k8s.io:certificatesigningrequests:nodeclient`), its
//! `csrsigning` controller issues it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;

use crate::api::certificates::KUBE_APISERVER_CLIENT_KUBELET;
use crate::tls::csr::{NODE_USER_PREFIX, NODES_GROUP, create_request};
use crate::tls::pki::{Credential, PkiError, kubeconfig, write_private};

/// What went wrong while bootstrapping.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// A request to the API server failed.
    #[error("bootstrap request failed: {0}")]
    Kube(#[from] kube::Error),
    /// Making the key or request, or writing a file, failed.
    #[error(transparent)]
    Pki(#[from] PkiError),
    /// The request was denied or its signer failed it.
    #[error("certificate signing request {name} was {outcome}: {message}")]
    Refused {
        /// The request's name.
        name: String,
        /// `denied` or `failed`.
        outcome: &'static str,
        /// The condition's message.
        message: String,
    },
    /// No certificate came in time.
    #[error("certificate signing request {name} was not issued within {timeout:?} (is it approved?)")]
    Timeout {
        /// The request's name.
        name: String,
        /// How long it was waited for.
        timeout: Duration,
    },
}

/// How a node bootstraps its credential.
///
/// ```no_run
/// # async fn demo() -> Result<(), orchestra_core::client::bootstrap::BootstrapError> {
/// use orchestra_core::client::bootstrap::TlsBootstrap;
///
/// let ca = std::fs::read_to_string("/etc/orchestra/ca.crt").unwrap();
/// let bootstrap = TlsBootstrap::new("https://10.0.0.1:6443", ca, "abcdef.0123456789abcdef", "node-1");
/// let kubeconfig = bootstrap.write_kubeconfig("/var/lib/orchestra-node").await?;
/// let client = orchestra_core::client::from_kubeconfig(&kubeconfig).await?;
/// # let _ = client;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct TlsBootstrap {
    server: String,
    ca_pem: String,
    token: String,
    node_name: String,
    timeout: Duration,
}

impl std::fmt::Debug for TlsBootstrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsBootstrap")
            .field("server", &self.server)
            .field("node_name", &self.node_name)
            .field("token", &"<redacted>")
            .finish_non_exhaustive()
    }
}

/// The key file a bootstrapped node keeps, in its directory.
pub const KEY_FILE: &str = "kubelet-client.key";
/// The certificate file a bootstrapped node keeps, in its directory.
pub const CERT_FILE: &str = "kubelet-client.crt";
/// The kubeconfig a bootstrapped node writes, in its directory.
pub const KUBECONFIG_FILE: &str = "kubelet.kubeconfig";

impl TlsBootstrap {
    /// Bootstraps node `node_name` against `server` (an `https://` URL),
    /// trusting the CA `ca_pem`, authenticating with the bootstrap `token`;
    /// waits up to five minutes for the certificate.
    pub fn new(
        server: impl Into<String>,
        ca_pem: impl Into<String>,
        token: impl Into<String>,
        node_name: impl Into<String>,
    ) -> TlsBootstrap {
        TlsBootstrap {
            server: server.into(),
            ca_pem: ca_pem.into(),
            token: token.into(),
            node_name: node_name.into(),
            timeout: Duration::from_secs(300),
        }
    }

    /// How long to wait for the certificate.
    pub fn timeout(mut self, timeout: Duration) -> TlsBootstrap {
        self.timeout = timeout;
        self
    }

    /// A client authenticating with the bootstrap token.
    async fn bootstrap_client(&self) -> Result<kube::Client, BootstrapError> {
        use base64::Engine as _;
        let config = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "cluster", "cluster": {
                "server": self.server,
                "certificate-authority-data": base64::engine::general_purpose::STANDARD.encode(&self.ca_pem),
            }}],
            "users": [{"name": "bootstrap", "user": {"token": self.token}}],
            "contexts": [{"name": "bootstrap", "context": {"cluster": "cluster", "user": "bootstrap"}}],
            "current-context": "bootstrap",
        });
        // JSON is YAML.
        let kubeconfig =
            kube::config::Kubeconfig::from_yaml(&config.to_string()).map_err(kube::Error::InferKubeconfig)?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(kube::Error::InferKubeconfig)?;
        Ok(kube::Client::try_from(config)?)
    }

    /// Generates a key, writes it to `dir/`[`KEY_FILE`] (0600), asks for its
    /// certificate as the bootstrap token and waits for it; writes it to
    /// `dir/`[`CERT_FILE`] and returns both.
    pub async fn request_credential(&self, dir: &Path) -> Result<Credential, BootstrapError> {
        let user = format!("{NODE_USER_PREFIX}{}", self.node_name);
        let (request, key_pem) = create_request(&user, Some(NODES_GROUP), &[])?;
        write_private(&dir.join(KEY_FILE), &key_pem)?;
        let csr = CertificateSigningRequest {
            metadata: ObjectMeta { generate_name: Some("node-csr-".into()), ..Default::default() },
            spec: CertificateSigningRequestSpec {
                request: ByteString(request.into_bytes()),
                signer_name: KUBE_APISERVER_CLIENT_KUBELET.into(),
                // An ECDSA key: no key encipherment.
                usages: Some(vec!["digital signature".into(), "client auth".into()]),
                ..Default::default()
            },
            status: None,
        };
        let api: Api<CertificateSigningRequest> = Api::all(self.bootstrap_client().await?);
        let created = api.create(&PostParams::default(), &csr).await?;
        let name = created.metadata.name.unwrap_or_default();
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            let current = api.get(&name).await?;
            let status = current.status.unwrap_or_default();
            if let Some(certificate) = status.certificate.filter(|c| !c.0.is_empty()) {
                let cert_pem = String::from_utf8_lossy(&certificate.0).into_owned();
                write_private(&dir.join(CERT_FILE), &cert_pem)?;
                return Ok(Credential { cert_pem, key_pem });
            }
            for condition in status.conditions.unwrap_or_default() {
                let outcome = match condition.type_.as_str() {
                    "Denied" => "denied",
                    "Failed" => "failed",
                    _ => continue,
                };
                let message = condition.message.or(condition.reason).unwrap_or_default();
                return Err(BootstrapError::Refused { name, outcome, message });
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(BootstrapError::Timeout { name, timeout: self.timeout });
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// [`request_credential`](Self::request_credential) in `dir`, then the
    /// node's kubeconfig with the issued certificate and its key in
    /// `dir/`[`KUBECONFIG_FILE`] (0600); returns its path.
    pub async fn write_kubeconfig(&self, dir: impl AsRef<Path>) -> Result<PathBuf, BootstrapError> {
        let dir = dir.as_ref();
        crate::tls::pki::create_private_dir(dir).map_err(|source| PkiError::Io { path: dir.to_owned(), source })?;
        let credential = self.request_credential(dir).await?;
        let user = format!("{NODE_USER_PREFIX}{}", self.node_name);
        let path = dir.join(KUBECONFIG_FILE);
        write_private(&path, &kubeconfig(&self.server, &self.ca_pem, &user, &credential))?;
        Ok(path)
    }
}
