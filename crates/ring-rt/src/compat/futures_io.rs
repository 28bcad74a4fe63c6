//! futures-io's `AsyncRead`, `AsyncBufRead` and `AsyncWrite` for [`Compat`] (feature
//! `futures-io`).

use std::io::{IoSlice, Result};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use ::futures_io::{AsyncBufRead, AsyncRead, AsyncWrite};

use super::{Compat, CompatIo};

impl<S: CompatIo> AsyncRead for Compat<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        dst: &mut [u8],
    ) -> Poll<Result<usize>> {
        let this = self.get_mut();
        if dst.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let data = ready!(this.poll_fill(cx))?;
        let n = data.len().min(dst.len());
        dst[..n].copy_from_slice(&data[..n]);
        this.consume(n);
        Poll::Ready(Ok(n))
    }
}

impl<S: CompatIo> AsyncBufRead for Compat<S> {
    fn poll_fill_buf(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<&[u8]>> {
        self.get_mut().poll_fill(cx)
    }

    fn consume(self: Pin<&mut Self>, amt: usize) {
        self.get_mut().consume(amt)
    }
}

impl<S: CompatIo> AsyncWrite for Compat<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, src: &[u8]) -> Poll<Result<usize>> {
        self.get_mut().poll_write_bufs(cx, &[IoSlice::new(src)])
    }

    /// Vectored writes are gathered into one copy and one op.
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<Result<usize>> {
        self.get_mut().poll_write_bufs(cx, bufs)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.get_mut().poll_flush_write(cx)
    }

    /// Flushes, then shuts down a socket's write direction.
    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.get_mut().poll_shutdown_write(cx)
    }
}
