//! Serving a router on a socket: HTTPS with HTTP/2 and HTTP/1.1 (ALPN), or
//! plain HTTP for tests on loopback; graceful shutdown.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tower::ServiceExt as _;

use super::{CoalescedWrites, CopiedWrites};

use rustls::pki_types::CertificateDer;

/// The certificate chain a client presented during the TLS handshake, already
/// verified against the configured CA by the listener; carried as a request
/// extension of every request of the connection.
#[derive(Debug, Clone)]
pub struct PeerCertificates(pub Arc<Vec<CertificateDer<'static>>>);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long a TLS handshake may take before the connection is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How a [`serve`] call listens.
///
/// Built from [`Default`] (plain HTTP, five seconds to drain) and the
/// `with_*` setters, so that a new setting is not a breaking change:
///
/// ```
/// use std::time::Duration;
/// use orchestra_core::tls::ListenOptions;
///
/// # fn demo(tls: std::sync::Arc<rustls::ServerConfig>) {
/// let options = ListenOptions::default().with_tls(tls).with_drain_timeout(Duration::from_secs(1));
/// assert!(options.tls.is_some());
/// # }
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct ListenOptions {
    /// `Some` for HTTPS, `None` for plain HTTP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// How long open connections (watches above all) may take to finish
    /// once shutdown starts; the rest are then closed.
    pub drain_timeout: Duration,
}

impl Default for ListenOptions {
    fn default() -> Self {
        ListenOptions { tls: None, drain_timeout: Duration::from_secs(5) }
    }
}

impl ListenOptions {
    /// Sets [`tls`](Self::tls): `Some` serves HTTPS, `None` plain HTTP.
    pub fn with_tls(mut self, tls: impl Into<Option<Arc<rustls::ServerConfig>>>) -> Self {
        self.tls = tls.into();
        self
    }

    /// Sets [`drain_timeout`](Self::drain_timeout).
    pub fn with_drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = timeout;
        self
    }
}

/// Serves `router` on `listener` until `shutdown` completes, then stops
/// accepting, lets open requests finish for up to `drain_timeout`, and
/// closes the connections still open. Over TLS, a verified client
/// certificate chain is attached to every request of the connection as a
/// [`PeerCertificates`] extension.
pub async fn serve(
    listener: TcpListener,
    router: axum::Router,
    options: ListenOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    let acceptor = options.tls.clone().map(tokio_rustls::TlsAcceptor::from);
    // `true` once the connections are to wind down.
    let (closing, closing_seen) = watch::channel(false);
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: back off rather than spin.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        while connections.try_join_next().is_some() {}
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let acceptor = acceptor.clone();
        let mut closing = closing_seen.clone();
        connections.spawn(async move {
            let closed = async move {
                let _ = closing.wait_for(|closing| *closing).await;
            };
            // The client's address, for the audit log's source IPs.
            let router = router.map_request(move |mut request: http::Request<Incoming>| {
                request.extensions_mut().insert(axum::extract::ConnectInfo(peer));
                request
            });
            let result = match acceptor {
                None => serve_connection(TokioIo::new(CopiedWrites(stream)), router, closed).await,
                Some(acceptor) => {
                    let Some(mut stream) = handshake(&acceptor, stream).await else { return };
                    // Many streams share an HTTP/2 connection: their answers
                    // leave together (see `CoalescedWrites`).
                    let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
                    stream.get_mut().0.coalesce(h2);
                    let chain = stream.get_ref().1.peer_certificates().map(|chain| {
                        PeerCertificates(Arc::new(chain.iter().map(|c| c.clone().into_owned()).collect()))
                    });
                    let router = router.map_request(move |mut request: http::Request<Incoming>| {
                        if let Some(chain) = &chain {
                            request.extensions_mut().insert(chain.clone());
                        }
                        request
                    });
                    serve_connection(TokioIo::new(CopiedWrites(stream)), router, closed).await
                }
            };
            if let Err(error) = result {
                tracing::debug!(%error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    let _ = closing.send(true);
    let drained =
        tokio::time::timeout(options.drain_timeout, async { while connections.join_next().await.is_some() {} });
    if drained.await.is_err() {
        tracing::info!(open = connections.len(), "drain timeout: closing the remaining connections");
        connections.shutdown().await;
    }
    Ok(())
}

async fn handshake(
    acceptor: &tokio_rustls::TlsAcceptor,
    stream: TcpStream,
) -> Option<tokio_rustls::server::TlsStream<CoalescedWrites<TcpStream>>> {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(CoalescedWrites::new(stream))).await {
        Ok(Ok(stream)) => Some(stream),
        Ok(Err(error)) => {
            tracing::debug!(%error, "TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::debug!("TLS handshake timed out");
            None
        }
    }
}

/// One HTTP/1.1 or HTTP/2 connection (auto-detected), upgrades allowed,
/// until the client closes it; once `closed` completes it is shut down
/// gracefully (HTTP/2: GOAWAY, open streams answered; HTTP/1.1: closed
/// after the request in progress).
async fn serve_connection<I, S>(io: I, service: S, closed: impl Future<Output = ()>) -> Result<(), BoxError>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: tower::Service<http::Request<Incoming>, Response = axum::response::Response, Error = std::convert::Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let builder = auto::Builder::new(TokioExecutor::new());
    let connection = builder.serve_connection_with_upgrades(io, TowerToHyperService::new(service));
    tokio::pin!(connection, closed);
    tokio::select! {
        result = &mut connection => return result,
        () = &mut closed => connection.as_mut().graceful_shutdown(),
    }
    connection.await
}
