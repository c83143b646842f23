//! Requests the API server forwards to a node agent's endpoint:
//! `GET pods/<name>/log` (`kubectl logs`) and `pods/<name>/exec` — a
//! WebSocket upgrade (`kubectl exec`, spliced through to the node) or a
//! plain `POST` (the command run to completion). The node is found from the
//! pod's `spec.nodeName`, reached at its InternalIP and
//! `status.daemonEndpoints.kubeletEndpoint.Port` over HTTPS, with the API
//! server's own client certificate, as upstream's `--kubelet-client-*`
//! flags configure.

use std::sync::Arc;

use axum::body::Body;
use axum::response::Response;
use http_body_util::BodyExt as _;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use serde_json::Value;

use super::objects::{Target, get as get_object};
use super::state::State;
use crate::api::ApiError;
use crate::tls::pki::{Credential, PkiError};

/// How long connecting (TCP + TLS) to a node may take.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How the API server reaches node agents.
#[derive(Clone)]
pub struct KubeletClient {
    tls: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for KubeletClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeletClient").finish_non_exhaustive()
    }
}

impl KubeletClient {
    /// Presents `identity` (a client certificate node agents trust) and
    /// verifies node serving certificates against `ca_pem`.
    pub fn new(identity: &Credential, ca_pem: &str) -> Result<Self, PkiError> {
        Ok(Self { tls: crate::tls::client_config(ca_pem, Some(identity))? })
    }

    /// Presents `identity` and accepts any node serving certificate — what
    /// upstream does without `--kubelet-certificate-authority`, for nodes
    /// that sign their own serving certificate.
    pub fn without_server_verification(identity: &Credential) -> Result<Self, PkiError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = <rustls::pki_types::PrivateKeyDer<'static> as rustls::pki_types::pem::PemObject>::from_pem_slice(
            identity.key_pem.as_bytes(),
        )
        .map_err(|e| PkiError::Certificate(e.to_string()))?;
        let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyServer(provider)))
            .with_client_auth_cert(crate::tls::parse_certificates(&identity.cert_pem)?, key)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self { tls: Arc::new(config) })
    }

    /// Sends `request` to `host:port` and returns the node's answer, its
    /// body streamed. The connection allows upgrades: the answer to an
    /// upgrade request can be taken over with `hyper::upgrade::on`.
    async fn send(
        &self,
        host: &str,
        port: u16,
        request: http::Request<Body>,
    ) -> Result<http::Response<hyper::body::Incoming>, ApiError> {
        let unavailable = |what: &str, e: &dyn std::fmt::Display| {
            ApiError::unavailable(format!("error trying to reach node {host}:{port}: {what}: {e}"))
        };
        let connect = async {
            let tcp = tokio::net::TcpStream::connect((host, port)).await.map_err(|e| unavailable("dial", &e))?;
            let name = ServerName::try_from(host.to_owned()).map_err(|e| unavailable("server name", &e))?;
            tokio_rustls::TlsConnector::from(self.tls.clone())
                .connect(name, tcp)
                .await
                .map_err(|e| unavailable("TLS handshake", &e))
        };
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, connect)
            .await
            .map_err(|_| ApiError::unavailable(format!("error trying to reach node {host}:{port}: timed out")))??;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| unavailable("HTTP handshake", &e))?;
        tokio::spawn(async move {
            if let Err(error) = connection.with_upgrades().await {
                tracing::debug!(%error, "node connection ended");
            }
        });
        sender.send_request(request).await.map_err(|e| unavailable("request", &e))
    }

    /// [`KubeletClient::send`], the answer's body streamed to the client.
    async fn forward(&self, host: &str, port: u16, request: http::Request<Body>) -> Result<Response, ApiError> {
        let (parts, incoming) = self.send(host, port, request).await?.into_parts();
        Ok(Response::from_parts(parts, Body::new(incoming.map_err(axum::Error::new))))
    }
}

/// Accepts any server certificate (signatures of the handshake are still
/// checked): see [`KubeletClient::without_server_verification`].
#[derive(Debug)]
struct AnyServer(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The query parameters `pods/<name>/log` forwards to the node.
const LOG_PARAMETERS: [&str; 7] =
    ["follow", "previous", "timestamps", "tailLines", "sinceSeconds", "sinceTime", "limitBytes"];

/// Every `(key, value)` of a raw query, still percent-encoded.
fn raw_pairs(raw: Option<&str>) -> impl Iterator<Item = (&str, &str)> {
    raw.unwrap_or_default().split('&').filter(|p| !p.is_empty()).map(|p| p.split_once('=').unwrap_or((p, "")))
}

fn names_of(pod: &Value, field: &str) -> Vec<String> {
    pod.pointer(&format!("/spec/{field}"))
        .and_then(Value::as_array)
        .map(|list| list.iter().filter_map(|c| c["name"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

/// Which container a log or exec request is for: the one named, the only
/// one, or the `kubectl.kubernetes.io/default-container`; else upstream's
/// error listing the choices.
fn container_of(pod: &Value, name: &str, asked: Option<String>) -> Result<String, ApiError> {
    let containers = names_of(pod, "containers");
    let init = names_of(pod, "initContainers");
    let ephemeral = names_of(pod, "ephemeralContainers");
    match asked.filter(|c| !c.is_empty()) {
        Some(container) => {
            if containers.contains(&container) || init.contains(&container) || ephemeral.contains(&container) {
                Ok(container)
            } else {
                Err(ApiError::bad_request(format!("container {container} is not valid for pod {name}")))
            }
        }
        None => {
            let default = pod
                .pointer("/metadata/annotations/kubectl.kubernetes.io~1default-container")
                .and_then(Value::as_str)
                .filter(|c| containers.iter().any(|n| n == c));
            if let Some(default) = default {
                return Ok(default.to_owned());
            }
            if containers.len() == 1 {
                return Ok(containers[0].clone());
            }
            let mut message =
                format!("a container name must be specified for pod {name}, choose one of: [{}]", containers.join(" "));
            if !init.is_empty() {
                message.push_str(&format!(" or one of the init containers: [{}]", init.join(" ")));
            }
            Err(ApiError::bad_request(message))
        }
    }
}

/// Where the pod's node agent listens: (InternalIP or first address, port).
async fn node_endpoint(state: &State, pod: &Value, name: &str) -> Result<(String, u16), ApiError> {
    let node_name = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ApiError::bad_request(format!("pod {name} does not have a host assigned")))?;
    let registry = state.registry();
    let nodes = registry.get("", "v1", "nodes").expect("nodes are built in");
    let target = Target { resource: nodes, namespace: None, user: Default::default(), fenced: None };
    let node = get_object(state, &target, node_name).await?;
    let addresses = node.pointer("/status/addresses").and_then(Value::as_array).cloned().unwrap_or_default();
    let address = addresses
        .iter()
        .find(|a| a["type"] == "InternalIP")
        .or_else(|| addresses.first())
        .and_then(|a| a["address"].as_str())
        .ok_or_else(|| ApiError::unavailable(format!("node {node_name} has no address")))?;
    let port = node
        .pointer("/status/daemonEndpoints/kubeletEndpoint/Port")
        .and_then(Value::as_u64)
        .filter(|p| (1..=65535).contains(p))
        .ok_or_else(|| ApiError::unavailable(format!("node {node_name} does not serve an endpoint")))?;
    Ok((address.to_owned(), port as u16))
}

fn path_segment(text: &str) -> String {
    crate::api::escape::percent_encode(text, b"")
}

/// `GET /api/v1/namespaces/<ns>/pods/<name>/log`.
pub(crate) async fn pod_log(
    state: &State,
    target: &Target,
    name: &str,
    raw_query: Option<&str>,
) -> Result<Response, ApiError> {
    let Some(client) = state.kubelet_client.clone() else {
        return Err(ApiError::unavailable("this API server has no client for node agents configured"));
    };
    let pod = get_object(state, target, name).await?;
    let asked = raw_pairs(raw_query).find(|(k, _)| *k == "container").map(|(_, v)| super::route::percent_decode(v));
    let container = container_of(&pod, name, asked)?;
    let previous = raw_pairs(raw_query).any(|(k, v)| k == "previous" && (v.is_empty() || v == "true"));
    let waiting = ["containerStatuses", "initContainerStatuses"].iter().find_map(|list| {
        pod.pointer(&format!("/status/{list}"))
            .and_then(Value::as_array)
            .and_then(|statuses| statuses.iter().find(|s| s["name"] == container.as_str()))
            .filter(|s| s.pointer("/state/waiting").is_some() && s.pointer("/lastState/terminated").is_none())
            .map(|s| {
                s.pointer("/state/waiting/reason").and_then(Value::as_str).unwrap_or("ContainerCreating").to_owned()
            })
    });
    if let Some(reason) = waiting.filter(|_| !previous) {
        return Err(ApiError::bad_request(format!(
            "container {container:?} in pod {name:?} is waiting to start: {reason}"
        )));
    }
    let (host, port) = node_endpoint(state, &pod, name).await?;
    let query: Vec<String> =
        raw_pairs(raw_query).filter(|(k, _)| LOG_PARAMETERS.contains(k)).map(|(k, v)| format!("{k}={v}")).collect();
    let namespace = target.namespace.as_deref().unwrap_or_default();
    let uri = format!(
        "/containerLogs/{}/{}/{}?{}",
        path_segment(namespace),
        path_segment(name),
        path_segment(&container),
        query.join("&")
    );
    let request = http::Request::get(uri)
        .header(http::header::HOST, format!("{host}:{port}"))
        .body(Body::empty())
        .expect("a valid request");
    client.forward(&host, port, request).await
}

/// The headers of a WebSocket handshake passed between the client and the
/// node, both ways.
const HANDSHAKE_HEADERS: [http::HeaderName; 6] = [
    http::header::CONNECTION,
    http::header::UPGRADE,
    http::header::SEC_WEBSOCKET_KEY,
    http::header::SEC_WEBSOCKET_VERSION,
    http::header::SEC_WEBSOCKET_PROTOCOL,
    http::header::SEC_WEBSOCKET_ACCEPT,
];

/// The query parameters of `pods/<name>/exec` the node is given.
const EXEC_PARAMETERS: [&str; 5] = ["command", "stdin", "stdout", "stderr", "tty"];

/// `pods/<name>/exec`. A WebSocket upgrade (`kubectl exec`) is passed to
/// the node and, once the node has switched protocols, the two connections
/// are spliced, as upstream's upgrade-aware proxy does; `upgrade` is the
/// client connection's pending upgrade (HTTP/1.1 only). A plain `POST`
/// runs the command to completion on the node and answers its exit code
/// and output as JSON.
pub(crate) async fn pod_exec(
    state: &State,
    target: &Target,
    name: &str,
    raw_query: Option<&str>,
    headers: &http::HeaderMap,
    upgrade: Option<hyper::upgrade::OnUpgrade>,
) -> Result<Response, ApiError> {
    let Some(client) = state.kubelet_client.clone() else {
        return Err(ApiError::unavailable("this API server has no client for node agents configured"));
    };
    let upgrading = headers.contains_key(http::header::UPGRADE);
    let websocket = headers
        .get(http::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if upgrading && !websocket {
        return Err(ApiError::bad_request(
            "exec streams over WebSocket (v5.channel.k8s.io, v4.channel.k8s.io); SPDY is not served",
        ));
    }
    let pod = get_object(state, target, name).await?;
    let asked = raw_pairs(raw_query).find(|(k, _)| *k == "container").map(|(_, v)| super::route::percent_decode(v));
    let container = container_of(&pod, name, asked)?;
    let (host, port) = node_endpoint(state, &pod, name).await?;
    let query: Vec<String> =
        raw_pairs(raw_query).filter(|(k, _)| EXEC_PARAMETERS.contains(k)).map(|(k, v)| format!("{k}={v}")).collect();
    let namespace = target.namespace.as_deref().unwrap_or_default();
    let uri = format!(
        "/exec/{}/{}/{}?{}",
        path_segment(namespace),
        path_segment(name),
        path_segment(&container),
        query.join("&")
    );
    let mut request = http::Request::builder()
        .method(if websocket { http::Method::GET } else { http::Method::POST })
        .uri(uri)
        .header(http::header::HOST, format!("{host}:{port}"));
    if !websocket {
        let request = request.body(Body::empty()).expect("a valid request");
        return client.forward(&host, port, request).await;
    }
    let Some(upgrade) = upgrade else {
        return Err(ApiError::bad_request("a WebSocket upgrade needs an HTTP/1.1 connection"));
    };
    for header in &HANDSHAKE_HEADERS {
        for value in headers.get_all(header) {
            request = request.header(header, value);
        }
    }
    let mut answer = client.send(&host, port, request.body(Body::empty()).expect("a valid request")).await?;
    if answer.status() != http::StatusCode::SWITCHING_PROTOCOLS {
        let (parts, incoming) = answer.into_parts();
        return Ok(Response::from_parts(parts, Body::new(incoming.map_err(axum::Error::new))));
    }
    let mut response = Response::new(Body::empty());
    *response.status_mut() = http::StatusCode::SWITCHING_PROTOCOLS;
    for header in &HANDSHAKE_HEADERS {
        for value in answer.headers().get_all(header) {
            response.headers_mut().append(header, value.clone());
        }
    }
    let node_side = hyper::upgrade::on(&mut answer);
    tokio::spawn(async move {
        match tokio::try_join!(upgrade, node_side) {
            Ok((client, node)) => {
                let (mut client, mut node) = (TokioIo::new(client), TokioIo::new(node));
                if let Err(error) = tokio::io::copy_bidirectional(&mut client, &mut node).await {
                    tracing::debug!(%error, "exec stream ended");
                }
            }
            Err(error) => tracing::debug!(%error, "exec upgrade failed"),
        }
    });
    Ok(response)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_container_is_chosen_as_upstream_does() {
        let one = json!({"spec": {"containers": [{"name": "app"}]}});
        assert_eq!(container_of(&one, "p", None).unwrap(), "app");
        let two = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}], "initContainers": [{"name": "i"}]}});
        let error = container_of(&two, "p", None).unwrap_err().to_json();
        assert_eq!(
            error["message"],
            "a container name must be specified for pod p, choose one of: [a b] or one of the init containers: [i]"
        );
        assert_eq!(error["code"], 400);
        assert_eq!(container_of(&two, "p", Some("i".into())).unwrap(), "i");
        assert_eq!(
            container_of(&two, "p", Some("z".into())).unwrap_err().to_json()["message"],
            "container z is not valid for pod p"
        );
        let defaulted = json!({"metadata": {"annotations": {"kubectl.kubernetes.io/default-container": "b"}}, "spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        assert_eq!(container_of(&defaulted, "p", None).unwrap(), "b");
    }

    #[test]
    fn path_segments_are_escaped() {
        assert_eq!(path_segment("a b/c"), "a%20b%2Fc");
        assert_eq!(path_segment("web-7d4b9.x_y"), "web-7d4b9.x_y");
    }
}
