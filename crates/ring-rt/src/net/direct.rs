//! Moving a direct-descriptor stream to another worker: `IORING_MSG_SEND_FD` from this
//! worker's ring to the other's (6.0+; direct descriptors need 6.8+ anyway), then the other
//! worker claims what arrived under the sequence number both sides know.

use std::future::Future;
use std::io;
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use super::tcp::TcpStream;
use crate::executor::Shared;
use crate::op::net::{InTransit, SendDirect};
use crate::op::Op;
use crate::worker::Core;

/// The next arrival's sequence number, process-wide: a receiving ring tells arrivals
/// apart by it (it wraps after 2^31 sends; a ring never holds that many unclaimed).
static NEXT_SEQ: AtomicU32 = AtomicU32::new(0);

/// Sends `stream`, a direct descriptor, to worker `to`, whose ring `target` is an fd of:
/// once that ring has it (this worker's slot is closed then), what the receiver
/// [`claim`]s it by (dropped unclaimed, it has that worker close it); otherwise the stream back with the error (`ResourceBusy`: received bytes
/// are queued on it, which would be lost; `ENXIO`: that ring has no direct table;
/// `ENFILE`: its table is full).
pub(crate) async fn send(
    stream: TcpStream,
    target: Arc<OwnedFd>,
    to: Arc<Shared>,
) -> Result<InTransit, (TcpStream, io::Error)> {
    if let Err(e) = stream.socket().movable() {
        return Err((stream, e));
    }
    let seq = NEXT_SEQ.fetch_add(1, Ordering::Relaxed) & ring_core::user_data::ARRIVAL_SEQ_MAX;
    let socket = stream.socket();
    let op = SendDirect {
        fd: socket.fd(),
        target,
        to,
        seq,
    };
    match Op::new(socket.core.clone(), op).await {
        Ok(in_transit) => Ok(in_transit),
        Err(e) => Err((stream, e)),
    }
}

/// The stream another worker [`send`]s here as `in_transit`, once its ring has posted it.
/// Run on the receiving worker: from here on the claim gives the arrival up if dropped.
pub(crate) fn claim(in_transit: InTransit) -> io::Result<Claim> {
    let claim = Claim {
        core: Core::current_io()?,
        seq: in_transit.seq(),
        done: false,
    };
    in_transit.claimed();
    Ok(claim)
}

/// The future of [`claim`]. Dropped before it got the stream, it gives the arrival up:
/// the worker closes the descriptor when it comes (or now, if it came).
pub(crate) struct Claim {
    core: Rc<Core>,
    seq: u32,
    done: bool,
}

impl Future for Claim {
    type Output = io::Result<TcpStream>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let polled = match self.core.poll_arrival(self.seq, cx.waker()) {
            Ok(polled) => polled,
            Err(_) => {
                // The backend is busy (polled from inside its own call): again soon.
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
        };
        let slot = std::task::ready!(polled);
        self.done = true;
        Poll::Ready(slot.map(|slot| TcpStream::from_direct(&self.core, slot)))
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if !self.done {
            self.core.forget_arrival(self.seq);
        }
    }
}
