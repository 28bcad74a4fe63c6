//! tokio's `AsyncRead`, `AsyncBufRead` and `AsyncWrite` for [`Compat`] (feature `tokio-io`).

use std::io::{IoSlice, Result};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use ::tokio::io::{AsyncBufRead, AsyncRead, AsyncWrite, ReadBuf};

use super::{Compat, CompatIo};

impl<S: CompatIo> AsyncRead for Compat<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        dst: &mut ReadBuf<'_>,
    ) -> Poll<Result<()>> {
        let this = self.get_mut();
        if dst.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        let data = ready!(this.poll_fill(cx))?;
        let n = data.len().min(dst.remaining());
        // put_slice writes into the unfilled part without zeroing it first.
        dst.put_slice(&data[..n]);
        this.consume(n);
        Poll::Ready(Ok(()))
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

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<Result<usize>> {
        self.get_mut().poll_write_bufs(cx, bufs)
    }

    /// Vectored writes are gathered into one copy and one op.
    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.get_mut().poll_flush_write(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.get_mut().poll_shutdown_write(cx)
    }
}
