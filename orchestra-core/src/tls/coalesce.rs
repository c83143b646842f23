//! Socket adapters that make HTTP/2 send in fewer writes:
//! [`CopiedWrites`] (small frames copied into one buffer) and
//! [`CoalescedWrites`] (what several tasks finish at about the same time
//! leaves in one write).
//!
//! An HTTP/2 connection carries many streams, each answered by its own task.
//! The connection's task writes whatever frames are ready each time it runs
//! and then flushes, and under TLS every flush is at least one record and one
//! `write` to the socket. When a batch of answers completes together (a
//! store commit group answers all its writers at once), the connection task
//! is woken by the first and flushes it alone, then again for the next few,
//! and so on: on loopback each of those `write`s also runs the receiver's TCP
//! stack and wakes it, and together they were the largest single cost of
//! the connection task.
//!
//! The adapter sits between the TLS stream and the socket. Writes go to a
//! buffer; a flush first yields to the scheduler (like
//! [`tokio::task::yield_now`]), which lets the tasks that are ready to run —
//! the other answers — queue their frames, and the connection task, run
//! again, encodes them and flushes once for all of them. While each yield
//! brings more bytes, the flush yields again, up to `MAX_FLUSH_YIELDS`
//! times: the answers of a commit group reach the connection over several
//! passes of the scheduler (they are spread over the runtime's workers). A
//! lone answer waits for one pass and no more.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Buffered bytes past which a write drains the buffer before taking more.
const MAX_BUFFERED: usize = 256 * 1024;

/// Most yields of one flush, while each brings more bytes.
///
/// Measured in the API server benchmark (creates over HTTP/2 at 64 clients,
/// three interleaved pairs of runs against one yield): `sendto` calls of the
/// server 0.31 → 0.14 per create and of the load generator 0.5 → 0.17,
/// creates 29.7k/26.9k/27.3k → 30.2k/29.8k/30.9k a second.
const MAX_FLUSH_YIELDS: u32 = 8;

/// A socket whose writes are buffered and whose flushes yield to the
/// scheduler before they write, again while more keeps coming (see the
/// module docs). Created passing
/// writes straight through; [`coalesce`](Self::coalesce) turns buffering on
/// (after a TLS handshake, for connections that multiplex, such as HTTP/2).
pub struct CoalescedWrites<T> {
    inner: T,
    coalesce: bool,
    buffer: Vec<u8>,
    /// How much of `buffer` has been written.
    written: usize,
    /// The pending yield of a flush, once started.
    yielding: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    /// How much was buffered when the current flush last yielded.
    buffered_at_yield: usize,
    /// How often the current flush has yielded.
    yields: u32,
}

impl<T> CoalescedWrites<T> {
    /// Wraps `inner`, passing writes straight through.
    pub fn new(inner: T) -> CoalescedWrites<T> {
        CoalescedWrites {
            inner,
            coalesce: false,
            buffer: Vec::new(),
            written: 0,
            yielding: None,
            buffered_at_yield: 0,
            yields: 0,
        }
    }

    /// Turns coalescing on or off. Turn it off only with nothing buffered
    /// (after a flush).
    pub fn coalesce(&mut self, on: bool) {
        self.coalesce = on;
    }
}

impl<T: AsyncWrite + Unpin> CoalescedWrites<T> {
    /// Writes out the whole buffer.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.buffer.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.buffer[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.buffer.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }

    /// Makes room for more: drains the buffer if it holds too much.
    fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.buffer.len() >= MAX_BUFFERED {
            ready!(self.poll_drain(cx))?;
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for CoalescedWrites<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for CoalescedWrites<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if !self.coalesce && self.buffer.is_empty() {
            return Pin::new(&mut self.inner).poll_write(cx, buf);
        }
        ready!(self.poll_room(cx))?;
        self.buffer.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if !self.coalesce && self.buffer.is_empty() {
            return Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        }
        ready!(self.poll_room(cx))?;
        let mut n = 0;
        for buf in bufs {
            self.buffer.extend_from_slice(buf);
            n += buf.len();
        }
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        // Buffered slices are copied either way; passed through, the
        // socket's own answer holds.
        self.coalesce || self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.coalesce && this.written == 0 && !this.buffer.is_empty() {
            loop {
                if let Some(yielding) = &mut this.yielding {
                    ready!(yielding.as_mut().poll(cx));
                    this.yielding = None;
                    if this.buffer.len() == this.buffered_at_yield || this.yields >= MAX_FLUSH_YIELDS {
                        break;
                    }
                }
                this.buffered_at_yield = this.buffer.len();
                this.yields += 1;
                this.yielding = Some(Box::pin(tokio::task::yield_now()));
            }
            this.yields = 0;
        }
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A socket (TLS or plain) presented as one without vectored writes, so
/// that hyper copies small HTTP/2 frames into its write buffer and sends the
/// frames ready at one time in one TLS record and one write.
///
/// HTTP/2 (the `h2` crate) copies a DATA frame's payload into its buffer only
/// below a threshold: 256 bytes when the socket takes vectored writes, 1 KiB
/// when it does not. A larger payload is kept aside, and the buffer must be
/// written out and flushed before the next frame is encoded. Over a vectored
/// socket, each typical answer (a created object is some 700 bytes) costs
/// its own TLS record and its own `writev`, however many streams have answers
/// ready; through this adapter they leave together. The API server serves
/// every connection through it; clients of small requests (the benchmark's
/// load generator) gain the same by wrapping their socket in it.
///
/// Measured in the API server benchmark (creates over HTTP/2 at 64 clients,
/// four interleaved pairs of runs): 22.8k/s against 21.7k/s, 51.8 µs of
/// server CPU per create against 54.8 µs, and 0.6 server writes per create
/// against 1.0. HTTP/1.1, where hyper then flattens head and body into one
/// buffer, did not change beyond the noise.
pub struct CopiedWrites<T>(pub T);

impl<T: AsyncRead + Unpin> AsyncRead for CopiedWrites<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for CopiedWrites<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// A socket recording each write it is given.
    #[derive(Clone, Default)]
    struct Recorder(Arc<Mutex<Vec<Vec<u8>>>>);

    impl AsyncWrite for Recorder {
        fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
            // At most 5 bytes a call: draining must loop.
            let n = buf.len().min(5);
            self.0.lock().unwrap().push(buf[..n].to_vec());
            Poll::Ready(Ok(n))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn writes(recorder: &Recorder) -> Vec<String> {
        recorder.0.lock().unwrap().iter().map(|w| String::from_utf8_lossy(w).into_owned()).collect()
    }

    #[tokio::test]
    async fn writes_wait_for_the_flush_and_leave_together() {
        let recorder = Recorder::default();
        let mut socket = CoalescedWrites::new(recorder.clone());
        socket.write_all(b"ab").await.unwrap();
        assert_eq!(writes(&recorder), ["ab"], "passed straight through before coalescing");
        socket.coalesce(true);
        socket.write_all(b"hello ").await.unwrap();
        socket.write_all(b"world").await.unwrap();
        assert_eq!(writes(&recorder).len(), 1, "nothing written before the flush");
        socket.flush().await.unwrap();
        assert_eq!(writes(&recorder)[1..], ["hello", " worl", "d"]);
        socket.shutdown().await.unwrap();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_flush_lets_the_tasks_ready_to_run_go_first() {
        let recorder = Recorder::default();
        let mut socket = CoalescedWrites::new(recorder.clone());
        socket.coalesce(true);
        socket.write_all(b"one").await.unwrap();
        // Ready to run when the flush starts (this runtime has one thread,
        // so only a yield lets it run).
        let other = tokio::spawn({
            let recorder = recorder.clone();
            async move { recorder.0.lock().unwrap().push(b"other".to_vec()) }
        });
        socket.flush().await.unwrap();
        assert_eq!(writes(&recorder), ["other", "one"]);
        other.await.unwrap();
    }

    /// Runs like an HTTP/2 connection task: each time it is polled, it
    /// writes what the other tasks queued, then flushes.
    async fn serve_queued(socket: &mut CoalescedWrites<Recorder>, queued: &Arc<Mutex<Vec<u8>>>) {
        std::future::poll_fn(|cx| {
            let bytes = std::mem::take(&mut *queued.lock().unwrap());
            if !bytes.is_empty() {
                assert!(Pin::new(&mut *socket).poll_write(cx, &bytes).is_ready(), "buffered");
            }
            Pin::new(&mut *socket).poll_flush(cx)
        })
        .await
        .unwrap();
    }

    /// A coalescing socket, its recorder, and a queue holding `first`.
    fn queued_connection(first: &[u8]) -> (Recorder, CoalescedWrites<Recorder>, Arc<Mutex<Vec<u8>>>) {
        let recorder = Recorder::default();
        let mut socket = CoalescedWrites::new(recorder.clone());
        socket.coalesce(true);
        (recorder, socket, Arc::new(Mutex::new(first.to_vec())))
    }

    fn push(queued: &Arc<Mutex<Vec<u8>>>, bytes: &[u8]) {
        queued.lock().unwrap().extend_from_slice(bytes);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_flush_waits_while_answers_keep_coming() {
        let (recorder, mut socket, queued) = queued_connection(b"a");
        // `b` comes during the flush's first yield, `c` during its second.
        let b = tokio::spawn({
            let queued = queued.clone();
            async move { push(&queued, b"b") }
        });
        let c = tokio::spawn({
            let queued = queued.clone();
            async move {
                tokio::task::yield_now().await;
                push(&queued, b"c");
            }
        });
        serve_queued(&mut socket, &queued).await;
        assert_eq!(writes(&recorder), ["abc"]);
        b.await.unwrap();
        c.await.unwrap();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_flush_yields_a_bounded_number_of_times() {
        let (recorder, mut socket, queued) = queued_connection(b"a");
        // Something to send at every pass of the scheduler, for ever.
        let endless = tokio::spawn({
            let queued = queued.clone();
            async move {
                loop {
                    push(&queued, b"p");
                    tokio::task::yield_now().await;
                }
            }
        });
        serve_queued(&mut socket, &queued).await;
        endless.abort();
        let written: String = writes(&recorder).concat();
        assert_eq!(written, format!("a{}", "p".repeat(MAX_FLUSH_YIELDS as usize)));
    }

    #[tokio::test]
    async fn copied_writes_pass_bytes_both_ways_and_refuse_vectored_writes() {
        let (near, far) = tokio::io::duplex(64);
        let (mut near, mut far) = (CopiedWrites(near), CopiedWrites(far));
        // What makes hyper's HTTP/2 copy small frames into its buffer.
        assert!(!near.is_write_vectored());
        let slices = [std::io::IoSlice::new(b"ab"), std::io::IoSlice::new(b"cd")];
        // Without vectored writes only the first slice is taken per call.
        assert_eq!(near.write_vectored(&slices).await.unwrap(), 2);
        near.write_all(b"ef").await.unwrap();
        near.shutdown().await.unwrap();
        let mut got = Vec::new();
        far.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"abef");
        far.write_all(b"back").await.unwrap();
        let mut back = [0; 4];
        near.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"back");
    }
}
