//! Write coalescing for HTTP/2 connections.
//!
//! An HTTP/2 connection multiplexes many requests, and its task writes and
//! flushes whatever frames are queued each time it runs. Under load the
//! handlers of concurrent streams finish one by one, so without help every
//! response becomes its own TLS record and its own `writev` (two thirds of
//! a loopback write's cost is the kernel's, whatever its size). [`Coalesce`]
//! holds written bytes back until a flush, and before passing a flush on
//! lets every task that is ready run once (as [`tokio::task::yield_now`]
//! does): responses that finish meanwhile join the same write. A lone
//! request waits one pass of the scheduler, which is idle then; a busy
//! connection writes a few large records instead of many small ones.

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use hyper::rt::{Read, ReadBufCursor, Write};

/// Most bytes held back; a write beyond this goes through first.
const LIMIT: usize = 64 * 1024;

/// Wraps a connection's transport so that flushes coalesce (see the module).
pub(crate) struct Coalesce<T> {
    inner: T,
    buffer: Vec<u8>,
    /// Bytes of `buffer` already written to `inner`.
    written: usize,
    /// Set while a flush waits for the other ready tasks to run.
    pause: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
}

impl<T> Coalesce<T> {
    /// Wraps `inner`.
    pub(crate) fn new(inner: T) -> Coalesce<T> {
        Coalesce { inner, buffer: Vec::new(), written: 0, pause: None }
    }
}

impl<T: Write + Unpin> Coalesce<T> {
    /// Writes the held bytes to the transport.
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
}

impl<T: Read + Unpin> Read for Coalesce<T> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: ReadBufCursor<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<T: Write + Unpin> Write for Coalesce<T> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.buffer.len() >= LIMIT {
            ready!(this.poll_drain(cx))?;
        }
        let room = LIMIT.saturating_sub(this.buffer.len()).max(1);
        let mut taken = 0;
        for buf in bufs {
            let part = &buf[..buf.len().min(room - taken)];
            this.buffer.extend_from_slice(part);
            taken += part.len();
            if taken == room {
                break;
            }
        }
        Poll::Ready(Ok(taken))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.buffer.len() > this.written {
            let pause = this.pause.get_or_insert_with(|| Box::pin(tokio::task::yield_now()));
            ready!(pause.as_mut().poll(cx));
            ready!(this.poll_drain(cx))?;
        }
        this.pause = None;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper_util::rt::TokioIo;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// Bytes reach the peer only on flush, in order, whatever their size.
    #[tokio::test]
    async fn holds_writes_until_flushed() {
        let (near, mut far) = tokio::io::duplex(1 << 20);
        let mut writer = TokioIo::new(Coalesce::new(TokioIo::new(near)));
        let big = vec![7u8; LIMIT * 2 + 5];
        writer.write_all(b"head").await.unwrap();
        let mut probe = [0u8; 4];
        let early = tokio::time::timeout(std::time::Duration::from_millis(50), far.read(&mut probe)).await;
        assert!(early.is_err(), "nothing is written before a flush or the limit");
        writer.write_all(&big).await.unwrap();
        writer.write_all(b"tail").await.unwrap();
        writer.flush().await.unwrap();
        let mut received = vec![0u8; 4 + big.len() + 4];
        far.read_exact(&mut received).await.unwrap();
        assert_eq!(&received[..4], b"head");
        assert_eq!(&received[4..4 + big.len()], &big[..]);
        assert_eq!(&received[4 + big.len()..], b"tail");
        writer.shutdown().await.unwrap();
        assert_eq!(far.read(&mut probe).await.unwrap(), 0, "shutdown closes after the data");
    }
}
