//! `write_all` on a stream socket as a hand-written future: one send in flight over the
//! unwritten tail of the buffer, re-issued after each short write.
//!
//! Not an `async fn` loop: rustc keeps an async fn's arguments (the buffer, the closure,
//! the counters) in slots beside the future it awaits, which made the state 160 bytes for
//! a `Vec`. Here the slice in flight carries the progress (`begin` is what was written,
//! `end` the total), so the state is the send op and the socket reference; every
//! connection task that writes holds it.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use super::socket::Socket;
use crate::buf::{advance, write_zero, IoBuf, Slice};
use crate::op::net::Send;
use crate::op::Op;

/// The future of [`Socket::write_all`].
pub(crate) enum WriteAll<'a, B: IoBuf> {
    /// A send of `buf[begin..end]` in flight (or about to start).
    Sending(&'a Socket, Op<Send<Slice<B>>>),
    /// Nothing to write: the buffer goes straight back.
    Empty(Option<B>),
}

impl<'a, B: IoBuf> WriteAll<'a, B> {
    pub(crate) fn new(socket: &'a Socket, buf: B) -> WriteAll<'a, B> {
        let total = buf.bytes_init();
        if total == 0 {
            return WriteAll::Empty(Some(buf));
        }
        WriteAll::Sending(socket, send(socket, buf.slice(..total)))
    }
}

fn send<B: IoBuf>(socket: &Socket, slice: Slice<B>) -> Op<Send<Slice<B>>> {
    let op = Send {
        fd: socket.fd(),
        buf: slice,
        flags: 0,
        all: true,
    };
    Op::new(socket.core.clone(), op)
}

impl<B: IoBuf> Future for WriteAll<'_, B> {
    type Output = (io::Result<()>, B);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // Unpin: an Op is Unpin and the buffer is only moved, never pinned.
        let (socket, op) = match self.get_mut() {
            WriteAll::Sending(socket, op) => (*socket, op),
            WriteAll::Empty(buf) => {
                let buf = buf.take().expect("write_all polled after it completed");
                return Poll::Ready((Ok(()), buf));
            }
        };
        loop {
            let (res, slice) = ready!(Pin::new(&mut *op).poll(cx));
            let (done, total) = (slice.begin(), slice.end());
            let buf = slice.into_inner();
            let done = match advance(res, done, total, write_zero) {
                Ok(moved) => moved,
                Err(e) => return Poll::Ready((Err(e), buf)),
            };
            if done >= total {
                return Poll::Ready((Ok(()), buf));
            }
            *op = send(socket, buf.slice(done..total));
        }
    }
}
