//! The HTTPS client of the authenticators and authorizers that ask another
//! server: the OIDC issuer's discovery document and keys, the TokenReview and
//! SubjectAccessReview webhooks, the admission webhooks. JSON in, JSON out, HTTP/1.1, one
//! connection per request, bounded in time and size.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt as _, Full, Limited};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{PrivateKeyDer, ServerName, pem::PemObject as _};
use serde_json::Value;

use crate::tls::pki::Credential;

/// How long one request (connect, TLS, answer) may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read.
const MAX_BODY: usize = 4 << 20;

/// An HTTPS client trusting one set of CAs and presenting an optional
/// client certificate.
#[derive(Clone)]
pub(crate) struct HttpsClient {
    tls: Arc<rustls::ClientConfig>,
    timeout: Duration,
}

impl std::fmt::Debug for HttpsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpsClient").field("timeout", &self.timeout).finish_non_exhaustive()
    }
}

impl HttpsClient {
    /// Trusts the CAs of `ca_pem`, or the system's when `None`, and presents
    /// `identity` when given.
    pub(crate) fn new(ca_pem: Option<&str>, identity: Option<&Credential>) -> Result<HttpsClient, String> {
        let mut roots = rustls::RootCertStore::empty();
        match ca_pem {
            Some(pem) => {
                let certificates = crate::tls::parse_certificates(pem).map_err(|e| e.to_string())?;
                if certificates.is_empty() {
                    return Err("the CA bundle holds no certificate".into());
                }
                for certificate in certificates {
                    roots.add(certificate).map_err(|e| format!("bad CA certificate: {e}"))?;
                }
            }
            None => {
                let (added, _) = roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
                if added == 0 {
                    return Err("no CA given and the system has no trusted CAs".into());
                }
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots);
        let mut config = match identity {
            Some(identity) => {
                let chain = crate::tls::parse_certificates(&identity.cert_pem).map_err(|e| e.to_string())?;
                let key = PrivateKeyDer::from_pem_slice(identity.key_pem.as_bytes())
                    .map_err(|e| format!("bad client key: {e}"))?;
                builder.with_client_auth_cert(chain, key).map_err(|e| format!("bad client certificate: {e}"))?
            }
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(HttpsClient { tls: Arc::new(config), timeout: REQUEST_TIMEOUT })
    }

    /// The same client, giving up on a request after `timeout` instead of
    /// ten seconds (an admission webhook's `timeoutSeconds`).
    pub(crate) fn with_timeout(mut self, timeout: Duration) -> HttpsClient {
        self.timeout = timeout;
        self
    }

    /// `GET url`, expecting 200 and a JSON body.
    pub(crate) async fn get_json(&self, url: &str) -> Result<Value, String> {
        let (status, body) = self.send(http::Method::GET, url, None, None, None).await?;
        if status != http::StatusCode::OK {
            return Err(format!("GET {url}: {status}: {}", String::from_utf8_lossy(&body[..body.len().min(200)])));
        }
        serde_json::from_slice(&body).map_err(|e| format!("GET {url}: the answer is not JSON: {e}"))
    }

    /// `POST url` with a JSON body (and a bearer token when given); the
    /// status and the answer, JSON or `Null` when it is not.
    pub(crate) async fn post_json(
        &self,
        url: &str,
        body: &Value,
        bearer: Option<&str>,
    ) -> Result<(http::StatusCode, Value), String> {
        let body = serde_json::to_vec(body).map_err(|e| e.to_string())?;
        let (status, answer) = self.send(http::Method::POST, url, Some(body), bearer, None).await?;
        Ok((status, serde_json::from_slice(&answer).unwrap_or(Value::Null)))
    }

    /// [`post_json`](Self::post_json) to `url` through a connection to
    /// `address` (host, port) instead of the URL's: the certificate is
    /// still checked for the URL's host, as when a Service's name is
    /// reached at one of its endpoints.
    pub(crate) async fn post_json_via(
        &self,
        url: &str,
        address: (&str, u16),
        body: &Value,
        bearer: Option<&str>,
    ) -> Result<(http::StatusCode, Value), String> {
        let body = serde_json::to_vec(body).map_err(|e| e.to_string())?;
        let (status, answer) = self.send(http::Method::POST, url, Some(body), bearer, Some(address)).await?;
        Ok((status, serde_json::from_slice(&answer).unwrap_or(Value::Null)))
    }

    async fn send(
        &self,
        method: http::Method,
        url: &str,
        body: Option<Vec<u8>>,
        bearer: Option<&str>,
        address: Option<(&str, u16)>,
    ) -> Result<(http::StatusCode, bytes::Bytes), String> {
        let uri: http::Uri = url.parse().map_err(|e| format!("{url:?} is not a URL: {e}"))?;
        if uri.scheme_str() != Some("https") {
            return Err(format!("{url:?} is not an https URL"));
        }
        let host = uri.host().ok_or_else(|| format!("{url:?} has no host"))?.to_owned();
        let port = uri.port_u16().unwrap_or(443);
        let name_host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
        let authority = uri.authority().map(|a| a.as_str().to_owned()).unwrap_or_else(|| host.clone());
        let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/").to_owned();
        let mut request = http::Request::builder()
            .method(method.clone())
            .uri(path)
            .header(http::header::HOST, authority)
            .header(http::header::ACCEPT, "application/json");
        if body.is_some() {
            request = request.header(http::header::CONTENT_TYPE, "application/json");
        }
        if let Some(token) = bearer {
            request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request =
            request.body(Full::new(bytes::Bytes::from(body.unwrap_or_default()))).map_err(|e| e.to_string())?;
        let exchange = async {
            let (dial_host, dial_port) = address.unwrap_or((name_host.as_str(), port));
            let tcp = tokio::net::TcpStream::connect((dial_host, dial_port))
                .await
                .map_err(|e| format!("dial {dial_host}:{dial_port}: {e}"))?;
            let name = ServerName::try_from(name_host.clone()).map_err(|e| format!("server name {host}: {e}"))?;
            let stream = tokio_rustls::TlsConnector::from(self.tls.clone())
                .connect(name, tcp)
                .await
                .map_err(|e| format!("TLS handshake with {host}:{port}: {e}"))?;
            let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|e| format!("HTTP handshake with {host}:{port}: {e}"))?;
            tokio::spawn(async move {
                if let Err(error) = connection.await {
                    tracing::debug!(%error, "webhook connection ended");
                }
            });
            let response = sender.send_request(request).await.map_err(|e| format!("{method} {url}: {e}"))?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_BODY)
                .collect()
                .await
                .map_err(|e| format!("{method} {url}: reading the answer: {e}"))?
                .to_bytes();
            Ok((status, body))
        };
        tokio::time::timeout(self.timeout, exchange).await.map_err(|_| format!("{method} {url}: timed out"))?
    }
}
