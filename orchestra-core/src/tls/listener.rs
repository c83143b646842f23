//! Serving a router on a socket: HTTPS with HTTP/2 and HTTP/1.1 (ALPN), or
//! plain HTTP for tests on loopback; graceful shutdown.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
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

/// How a [`serve`] call listens, and what it tolerates of its clients.
///
/// Built from [`Default`] (plain HTTP, five seconds to drain, kube-apiserver's
/// limits) and the `with_*` setters, so that a new setting is not a
/// breaking change:
///
/// ```
/// use std::time::Duration;
/// use orchestra_core::tls::ListenOptions;
///
/// # fn demo(tls: std::sync::Arc<rustls::ServerConfig>) {
/// let options = ListenOptions::default()
///     .with_tls(tls)
///     .with_drain_timeout(Duration::from_secs(1))
///     .with_header_read_timeout(Duration::from_secs(10))
///     .with_max_connections(1000);
/// assert!(options.tls.is_some());
/// assert_eq!(options.http2_max_concurrent_streams, 250);
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
    /// How long a client may take to send a request's headers (upstream's
    /// `ReadHeaderTimeout`, 32 seconds): a slow client (slowloris) is cut
    /// off. It also bounds the wait for a connection's first request (HTTP/2
    /// included) and, over HTTP/1.1, for the next request on a kept-alive
    /// connection. `None`: no limit.
    pub header_read_timeout: Option<Duration>,
    /// How long a connection may stay without any request in progress
    /// before it is closed gracefully (upstream's `IdleTimeout`, 90 seconds;
    /// HTTP/2 gets a GOAWAY). `None`: no limit.
    pub idle_timeout: Option<Duration>,
    /// The most connections open at once; further clients wait in the
    /// listen backlog until one closes. Upstream has no such cap; the
    /// default is 10000. `None`: no cap.
    pub max_connections: Option<usize>,
    /// The most concurrent HTTP/2 streams a client may open on one
    /// connection (kube-apiserver's `--http2-max-streams-per-connection`
    /// default, 250).
    pub http2_max_concurrent_streams: u32,
    /// The most bytes of request headers (upstream's `MaxHeaderBytes`,
    /// 1 MiB); larger ones are refused with 431. HTTP/1.1 never allows less
    /// than 8 KiB.
    pub max_header_bytes: usize,
}

impl Default for ListenOptions {
    fn default() -> Self {
        ListenOptions {
            tls: None,
            drain_timeout: Duration::from_secs(5),
            header_read_timeout: Some(Duration::from_secs(32)),
            idle_timeout: Some(Duration::from_secs(90)),
            max_connections: Some(10_000),
            http2_max_concurrent_streams: 250,
            max_header_bytes: 1 << 20,
        }
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

    /// Sets [`header_read_timeout`](Self::header_read_timeout).
    pub fn with_header_read_timeout(mut self, timeout: impl Into<Option<Duration>>) -> Self {
        self.header_read_timeout = timeout.into();
        self
    }

    /// Sets [`idle_timeout`](Self::idle_timeout).
    pub fn with_idle_timeout(mut self, timeout: impl Into<Option<Duration>>) -> Self {
        self.idle_timeout = timeout.into();
        self
    }

    /// Sets [`max_connections`](Self::max_connections).
    pub fn with_max_connections(mut self, max: impl Into<Option<usize>>) -> Self {
        self.max_connections = max.into();
        self
    }

    /// Sets [`http2_max_concurrent_streams`](Self::http2_max_concurrent_streams).
    pub fn with_http2_max_concurrent_streams(mut self, max: u32) -> Self {
        self.http2_max_concurrent_streams = max;
        self
    }

    /// Sets [`max_header_bytes`](Self::max_header_bytes).
    pub fn with_max_header_bytes(mut self, max: usize) -> Self {
        self.max_header_bytes = max;
        self
    }

    fn limits(&self) -> Limits {
        Limits {
            header_read_timeout: self.header_read_timeout,
            idle_timeout: self.idle_timeout,
            http2_max_concurrent_streams: self.http2_max_concurrent_streams,
            max_header_bytes: self.max_header_bytes,
        }
    }
}

/// What each connection enforces (from [`ListenOptions`]).
#[derive(Debug, Clone, Copy)]
struct Limits {
    header_read_timeout: Option<Duration>,
    idle_timeout: Option<Duration>,
    http2_max_concurrent_streams: u32,
    max_header_bytes: usize,
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
    let limits = options.limits();
    let slots = options.max_connections.map(|max| Arc::new(tokio::sync::Semaphore::new(max)));
    // `true` once the connections are to wind down.
    let (closing, closing_seen) = watch::channel(false);
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        // At the cap, nothing is accepted until a connection closes.
        let slot = match &slots {
            None => None,
            Some(slots) => tokio::select! {
                slot = slots.clone().acquire_owned() => slot.ok(),
                () = &mut shutdown => break,
            },
        };
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
            let _slot = slot;
            let closed = async move {
                let _ = closing.wait_for(|closing| *closing).await;
            };
            // The client's address, for the audit log's source IPs.
            let router = router.map_request(move |mut request: http::Request<Incoming>| {
                request.extensions_mut().insert(axum::extract::ConnectInfo(peer));
                request
            });
            let result = match acceptor {
                None => serve_connection(TokioIo::new(CopiedWrites(stream)), router, closed, limits).await,
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
                    serve_connection(TokioIo::new(CopiedWrites(stream)), router, closed, limits).await
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
/// until the client closes it; once `closed` completes, or the connection
/// has been idle too long, it is shut down gracefully (HTTP/2: GOAWAY, open
/// streams answered; HTTP/1.1: closed after the request in progress). A
/// connection whose first request does not arrive within the header read
/// timeout is dropped.
async fn serve_connection<I, S>(
    io: I,
    service: S,
    closed: impl Future<Output = ()>,
    limits: Limits,
) -> Result<(), BoxError>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: tower::Service<http::Request<Incoming>, Response = axum::response::Response, Error = std::convert::Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_header_bytes.max(MIN_HTTP1_BUFFER));
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.http2_max_concurrent_streams)
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX));
    let activity = Arc::new(Activity::new());
    let tracked = activity.clone();
    // Each request counts as activity until its response body is done.
    let service = service.map_future(move |response| {
        let guard = Activity::start(&tracked);
        async move {
            let response = response.await?;
            Ok::<_, std::convert::Infallible>(response.map(|body| {
                use http_body_util::BodyExt as _;
                axum::body::Body::new(body.map_frame(move |frame| {
                    let _active_until_the_body_ends = &guard;
                    frame
                }))
            }))
        }
    });
    let connection = builder.serve_connection_with_upgrades(io, TowerToHyperService::new(service));
    let watchdog = activity.watch(limits);
    tokio::pin!(connection, closed, watchdog);
    tokio::select! {
        result = &mut connection => return result,
        () = &mut closed => connection.as_mut().graceful_shutdown(),
        verdict = &mut watchdog => match verdict {
            Verdict::Idle => connection.as_mut().graceful_shutdown(),
            Verdict::Stalled => {
                tracing::debug!("no request within the header read timeout: connection dropped");
                return Ok(());
            }
        },
    }
    connection.await
}

/// hyper's smallest allowed HTTP/1.1 buffer.
const MIN_HTTP1_BUFFER: usize = 8192;

/// What a connection's requests are doing, for its idle and first-request
/// deadlines.
struct Activity {
    opened: Instant,
    /// Requests whose responses are not done.
    active: AtomicUsize,
    /// Requests seen so far.
    requests: AtomicU64,
    /// When the last request ended, in milliseconds after `opened`.
    last_ended_ms: AtomicU64,
}

/// Why a connection's watchdog fired.
enum Verdict {
    /// No request for the idle timeout: close gracefully.
    Idle,
    /// No first request within the header read timeout: drop.
    Stalled,
}

/// One request in progress on a connection.
struct ActiveRequest(Arc<Activity>);

impl Drop for ActiveRequest {
    fn drop(&mut self) {
        let activity = &self.0;
        activity.last_ended_ms.store(activity.elapsed_ms(), Ordering::Release);
        activity.active.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Activity {
    fn new() -> Activity {
        Activity {
            opened: Instant::now(),
            active: AtomicUsize::new(0),
            requests: AtomicU64::new(0),
            last_ended_ms: AtomicU64::new(0),
        }
    }

    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn start(this: &Arc<Activity>) -> ActiveRequest {
        this.active.fetch_add(1, Ordering::AcqRel);
        this.requests.fetch_add(1, Ordering::AcqRel);
        ActiveRequest(this.clone())
    }

    /// Completes when the connection has had no first request within the
    /// header read timeout, or no request in progress for the idle timeout.
    async fn watch(self: Arc<Self>, limits: Limits) -> Verdict {
        if let Some(first) = limits.header_read_timeout {
            tokio::time::sleep(first).await;
            if self.requests.load(Ordering::Acquire) == 0 {
                return Verdict::Stalled;
            }
        }
        let Some(idle) = limits.idle_timeout else { return std::future::pending().await };
        loop {
            if self.active.load(Ordering::Acquire) > 0 {
                tokio::time::sleep(idle).await;
                continue;
            }
            let since = Duration::from_millis(self.last_ended_ms.load(Ordering::Acquire));
            let deadline = self.opened + since + idle;
            if Instant::now() >= deadline {
                // Nothing started since: idle (a request starting now finds
                // the connection closing gracefully, and is still answered).
                if self.active.load(Ordering::Acquire) == 0 {
                    return Verdict::Idle;
                }
                continue;
            }
            tokio::time::sleep_until(deadline.into()).await;
        }
    }
}
