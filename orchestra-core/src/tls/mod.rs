//! HTTPS for Orchestra's servers and their clients: the listener
//! ([`serve`]), the cluster's certificates ([`pki`]), the rustls
//! configurations built from them, and the socket adapters that let HTTP/2
//! send in fewer writes ([`CopiedWrites`], [`CoalescedWrites`]). The API server uses all of it; a node
//! agent uses it for its own endpoint (logs, exec) without compiling the
//! API server (feature `tls` alone).

mod coalesce;
pub mod csr;
mod listener;
pub mod pki;

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

pub use coalesce::{CoalescedWrites, CopiedWrites};
pub use listener::{ListenOptions, PeerCertificates, serve};
use pki::{Credential, PkiError};

/// Whether a server asks clients for a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// Requested and verified against the CA when presented, but optional
    /// (the API server: bearer tokens and anonymous requests are the
    /// authenticators' business).
    Optional,
    /// Required: a client without a certificate signed by the CA cannot
    /// connect (a node agent's endpoint).
    Required,
}

/// The identity a certificate's subject names: upstream's x509
/// authenticator reads the user from the common name and the groups from
/// the organizations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateSubject {
    /// Subject CN.
    pub common_name: String,
    /// Subject O values.
    pub organizations: Vec<String>,
}

/// Reads the subject of a DER certificate.
pub fn certificate_subject(certificate: &CertificateDer<'_>) -> Result<CertificateSubject, PkiError> {
    let (_, cert) = x509_parser::parse_x509_certificate(certificate)
        .map_err(|e| PkiError::Certificate(format!("unparseable client certificate: {e}")))?;
    let subject = cert.subject();
    let common_name = subject
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .filter(|cn| !cn.is_empty())
        .ok_or_else(|| PkiError::Certificate("client certificate has no common name".into()))?;
    let organizations = subject.iter_organization().filter_map(|o| o.as_str().ok()).map(str::to_owned).collect();
    Ok(CertificateSubject { common_name: common_name.to_owned(), organizations })
}

/// The end of a DER certificate's validity (`notAfter`), in seconds since
/// the Unix epoch.
pub fn certificate_not_after(certificate: &CertificateDer<'_>) -> Result<i64, PkiError> {
    let (_, cert) = x509_parser::parse_x509_certificate(certificate)
        .map_err(|e| PkiError::Certificate(format!("unparseable certificate: {e}")))?;
    Ok(cert.validity().not_after.timestamp())
}

/// Every certificate of a PEM bundle.
pub fn parse_certificates(pem: &str) -> Result<Vec<CertificateDer<'static>>, PkiError> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PkiError::Certificate(e.to_string()))?;
    if certs.is_empty() {
        return Err(PkiError::Certificate("no certificate in PEM data".into()));
    }
    Ok(certs)
}

fn roots(ca_pem: &str) -> Result<rustls::RootCertStore, PkiError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in parse_certificates(ca_pem)? {
        roots.add(cert)?;
    }
    Ok(roots)
}

fn private_key(credential: &Credential) -> Result<PrivateKeyDer<'static>, PkiError> {
    PrivateKeyDer::from_pem_slice(credential.key_pem.as_bytes()).map_err(|e| PkiError::Certificate(e.to_string()))
}

/// A server configuration presenting `serving`, verifying client
/// certificates against `client_ca_pem` as `client_auth` says, with HTTP/2
/// and HTTP/1.1 offered by ALPN.
pub fn server_config(
    serving: &Credential,
    client_ca_pem: &str,
    client_auth: ClientAuth,
) -> Result<Arc<rustls::ServerConfig>, PkiError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots(client_ca_pem)?), provider.clone());
    let verifier = match client_auth {
        ClientAuth::Optional => verifier.allow_unauthenticated(),
        ClientAuth::Required => verifier,
    };
    let verifier = verifier.build().map_err(|e| PkiError::Certificate(e.to_string()))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(parse_certificates(&serving.cert_pem)?, private_key(serving)?)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A client configuration that verifies the server against `ca_pem` and
/// presents `identity` when given. HTTP/1.1 only (ALPN), which is what the
/// streaming proxies speak.
pub fn client_config(ca_pem: &str, identity: Option<&Credential>) -> Result<Arc<rustls::ClientConfig>, PkiError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots(ca_pem)?);
    let mut config = match identity {
        Some(identity) => {
            builder.with_client_auth_cert(parse_certificates(&identity.cert_pem)?, private_key(identity)?)?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A node-style endpoint: client certificates required. A client with
    /// a certificate of the cluster CA gets through and is named by it; a
    /// client without one cannot even complete the handshake.
    #[tokio::test]
    async fn required_client_certificates_are_enforced_and_identify_the_client() {
        let dir = tempfile::tempdir().unwrap();
        let pki = pki::Pki::load_or_create(dir.path(), &[]).unwrap();
        let serving = pki.issue_serving("node-1", &["127.0.0.1".to_owned()]).unwrap();
        let server = server_config(&serving, pki.ca_pem(), ClientAuth::Required).unwrap();
        let router = axum::Router::new().route(
            "/whoami",
            axum::routing::get(|request: axum::extract::Request| async move {
                let chain = request.extensions().get::<PeerCertificates>().expect("verified chain");
                certificate_subject(&chain.0[0]).unwrap().common_name
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let options = ListenOptions::default().with_tls(server).with_drain_timeout(Duration::from_secs(1));
        let serving_task = tokio::spawn(serve(listener, router, options, async move {
            let _ = stopped.await;
        }));

        let get = |config: Arc<rustls::ClientConfig>| async move {
            let stream = tokio::net::TcpStream::connect(address).await?;
            let connector = tokio_rustls::TlsConnector::from(config);
            let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
            let mut stream = connector.connect(name, stream).await?;
            use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
            stream.write_all(b"GET /whoami HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await?;
            let mut response = String::new();
            stream.read_to_string(&mut response).await?;
            Ok::<_, std::io::Error>(response)
        };
        let kubelet_client = pki.issue_client("kube-apiserver-kubelet-client", Some("system:masters")).unwrap();
        let response = get(client_config(pki.ca_pem(), Some(&kubelet_client)).unwrap()).await.unwrap();
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(response.ends_with("kube-apiserver-kubelet-client"), "{response}");
        assert!(get(client_config(pki.ca_pem(), None).unwrap()).await.is_err(), "no certificate, no connection");

        stop.send(()).unwrap();
        serving_task.await.unwrap().unwrap();
    }
}
