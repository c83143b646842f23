//! Serving a router on a socket: HTTPS with HTTP/2 and HTTP/1.1 (ALPN), or
//! plain HTTP for tests on loopback; graceful shutdown.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tower::ServiceExt as _;

use super::{CoalescedWrites, CopiedWrites};

use rustls::pki_types::CertificateDer;

/// The certificate chain a client presented during the TLS handshake, already
/// verified against the configured CA by the listener; carried as a request
/// extension of every request of the connection.
#[derive(Debug, Clone)]
pub struct PeerCertificates(pub Arc<Vec<CertificateDer<'static>>>);

/// How long a TLS handshake may take before the connection is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How a [`serve`] call listens.
#[derive(Clone)]
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

/// Serves `router` on `listener` until `shutdown` completes, then stops
/// accepting, lets open requests finish for up to `drain_timeout`, and
/// returns. Over TLS, a verified client certificate chain is attached to
/// every request of the connection as a [`PeerCertificates`] extension.
pub async fn serve(
    listener: TcpListener,
    router: axum::Router,
    options: ListenOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    let acceptor = options.tls.clone().map(tokio_rustls::TlsAcceptor::from);
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(error) => {
                    // Out of file descriptors and the like: back off rather than spin.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let watcher = graceful.watcher();
        let router = router.clone();
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let result = match acceptor {
                None => watcher.watch(connection(TokioIo::new(CopiedWrites(stream)), router)).await,
                Some(acceptor) => {
                    let Some(mut stream) = handshake(&acceptor, stream).await else { return };
                    // Many streams share an HTTP/2 connection: their answers
                    // leave together (see `CoalescedWrites`).
                    let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
                    stream.get_mut().0.coalesce(h2);
                    let chain = stream
                        .get_ref()
                        .1
                        .peer_certificates()
                        .map(|chain| PeerCertificates(Arc::new(chain.iter().map(|c| c.clone().into_owned()).collect())));
                    let router = router.map_request(move |mut request: http::Request<Incoming>| {
                        if let Some(chain) = &chain {
                            request.extensions_mut().insert(chain.clone());
                        }
                        request
                    });
                    watcher.watch(connection(TokioIo::new(CopiedWrites(stream)), router)).await
                }
            };
            if let Err(error) = result {
                tracing::debug!(%error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(options.drain_timeout) => {
            tracing::info!("drain timeout: closing the remaining connections");
        }
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

/// One HTTP/1.1 or HTTP/2 connection (auto-detected), upgrades allowed.
fn connection<I, S>(io: I, service: S) -> impl hyper_util::server::graceful::GracefulConnection<Error = Box<dyn std::error::Error + Send + Sync>>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: tower::Service<http::Request<Incoming>, Response = axum::response::Response, Error = std::convert::Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    auto::Builder::new(TokioExecutor::new())
        .serve_connection_with_upgrades(io, TowerToHyperService::new(service))
        .into_owned()
}
