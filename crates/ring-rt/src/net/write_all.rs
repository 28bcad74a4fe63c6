//! `write_all` on a stream socket as a hand-written future: one send in flight over the
//! unwritten tail of the buffer, re-issued after each short write.
//!
//! Not an `async fn` loop: rustc keeps an async fn's arguments (the buffer, the closure,
//! the counters) in slots beside the future it awaits, which made the state 160 bytes for
//! a `Vec`. Here the slice in flight carries the progress (`begin` is what was written,
//! `end` the total), so the state is the send op alone (its worker and fd make the next
//! one); every connection task that writes holds it.

use std::future::Future;
use std::io;
use std::marker::PhantomData;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use super::socket::Socket;
use crate::buf::{IoBuf, Slice};
use crate::op::net::Send;
use crate::op::Op;
use crate::worker::Core;

/// The future of [`Socket::write_all`].
pub(crate) enum WriteAll<'a, B: IoBuf> {
    /// A send of `buf[begin..end]` in flight (or about to start).
    Sending(Op<Send<Slice<B>>>),
    /// Nothing to write: the buffer goes straight back. (The borrow keeps the socket, and
    /// so the fd the send names, alive and unmoved for as long as the future.)
    Empty(Option<B>, PhantomData<&'a Socket>),
}

impl<'a, B: IoBuf> WriteAll<'a, B> {
    pub(crate) fn new(socket: &'a Socket, buf: B) -> WriteAll<'a, B> {
        WriteAll::over(socket, buf)
    }

    /// The future over `socket`'s fd, for as long as the caller says (see `unbound`).
    fn over(socket: &Socket, buf: B) -> WriteAll<'a, B> {
        let total = buf.bytes_init();
        if total == 0 {
            return WriteAll::Empty(Some(buf), PhantomData);
        }
        WriteAll::Sending(send(socket.core.clone(), socket.fd(), buf.slice(..total)))
    }
}

impl<B: IoBuf> WriteAll<'static, B> {
    /// A write-all that borrows nothing, for a caller that keeps `socket` open beside it
    /// for as long as the future exists (an adapter holding the stream's `Rc` next to
    /// it): the sends it makes name the socket's fd, whose number a closed socket would
    /// let something else take.
    #[cfg(any(feature = "tokio-io", feature = "futures-io"))]
    pub(crate) fn unbound(socket: &Socket, buf: B) -> WriteAll<'static, B> {
        WriteAll::over(socket, buf)
    }
}

fn send<B: IoBuf>(core: Rc<Core>, fd: RawFd, slice: Slice<B>) -> Op<Send<Slice<B>>> {
    let op = Send {
        fd,
        buf: slice,
        flags: 0,
        all: true,
    };
    Op::new(core, op)
}

impl<B: IoBuf> Future for WriteAll<'_, B> {
    type Output = (io::Result<()>, B);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // Unpin: an Op is Unpin and the buffer is only moved, never pinned.
        let op = match self.get_mut() {
            WriteAll::Sending(op) => op,
            WriteAll::Empty(buf, _) => {
                let buf = buf.take().expect("write_all polled after it completed");
                return Poll::Ready((Ok(()), buf));
            }
        };
        // The socket's fd, for a send of the rest: the completion takes the send. Only an
        // op that completed has none, and polling it panics.
        let Some(fd) = op.def().map(|send| send.fd) else {
            panic!("write_all polled after it completed")
        };
        op.poll_write_all(cx, |core, rest, _| send(core.clone(), fd, rest))
    }
}
