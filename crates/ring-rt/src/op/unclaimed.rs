//! What a dropped receive got stays with its socket, for the next receive: the bytes of a
//! stream read, a datagram and its sender, a connection a dropped accept took.
//!
//! With completion I/O a receive can finish in the kernel after its future was dropped (a
//! `timeout` or a `select` lost the race): the data is then in the op's buffer, and without
//! this it would go with the buffer. Instead the op's orphan moves what it got here, and
//! the socket's next receive takes it first. While a dropped receive has not yet finished
//! (its cancel is in flight), a new receive waits for it, so what the dropped one brings
//! still comes first: nothing is lost, and nothing is reordered.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use ring_core::lifecycle::Deferred;

use socket2::SockAddr;

use crate::pool::PooledBuf;

/// One thing a dropped receive got.
pub(crate) enum Item {
    /// Stream bytes, in a pooled buffer or a copy; read out from the front.
    Bytes(PooledBuf),
    /// A datagram, with its sender where the receive asked for one.
    Datagram(Vec<u8>, Option<SockAddr>),
    /// An accepted connection.
    Conn(OwnedFd),
}

/// A socket's unclaimed receives, shared by the socket and the orphans of its receives.
#[derive(Default)]
pub(crate) struct Unclaimed {
    items: RefCell<VecDeque<Item>>,
    /// Dropped receives whose final completion has not arrived.
    pending: Cell<u32>,
    /// Receives waiting for those to finish.
    waiters: RefCell<Vec<Waker>>,
}

impl Unclaimed {
    pub(crate) fn new() -> Rc<Unclaimed> {
        Rc::new(Unclaimed::default())
    }

    /// A receive was dropped in flight: what it still gets comes here, and new receives
    /// wait for its final completion ([`orphan_done`](Self::orphan_done)).
    pub(crate) fn orphan_started(&self) {
        self.pending.set(self.pending.get() + 1);
    }

    /// A dropped receive's final completion arrived. The receives that waited for it are
    /// woken through `deferred`: this runs inside the op table (an orphan's release step).
    pub(crate) fn orphan_done(&self, deferred: &mut Deferred) {
        self.pending.set(self.pending.get().saturating_sub(1));
        if self.pending.get() == 0 {
            for waker in self.waiters.borrow_mut().drain(..) {
                deferred.wake(waker);
            }
        }
    }

    /// Keeps what a dropped receive got.
    pub(crate) fn push(&self, item: Item) {
        self.items.borrow_mut().push_back(item);
    }

    /// Ready once no dropped receive is still finishing; then the next receive may start
    /// (after taking what is here).
    pub(crate) fn poll_settled(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.pending.get() == 0 {
            return Poll::Ready(());
        }
        let mut waiters = self.waiters.borrow_mut();
        if !waiters.iter().any(|w| w.will_wake(cx.waker())) {
            waiters.push(cx.waker().clone());
        }
        Poll::Pending
    }

    /// True when a receive has something to do before it starts (take what is here, or
    /// wait for a dropped one to finish).
    pub(crate) fn is_busy(&self) -> bool {
        self.pending.get() > 0 || !self.items.borrow().is_empty()
    }

    /// Copies up to `len` stream bytes to `dst`; how many (0: none here).
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len` bytes.
    pub(crate) unsafe fn take_bytes(&self, dst: *mut u8, len: usize) -> usize {
        let mut items = self.items.borrow_mut();
        let Some(Item::Bytes(buf)) = items.front_mut() else {
            return 0;
        };
        let n = buf.len().min(len);
        // SAFETY: `buf` holds `buf.len() >= n` initialised bytes; `dst` is writable for
        // `len >= n` bytes by the caller's contract; they cannot overlap (`dst` is the
        // caller's own buffer, `buf` ours).
        unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), dst, n) };
        if n == buf.len() {
            items.pop_front();
        } else {
            buf.consume(n);
        }
        n
    }

    /// The first unclaimed chunk of stream bytes, at most `max` bytes of it (pooled
    /// receives promise chunks no longer than the pool's buffers).
    pub(crate) fn take_chunk(&self, max: usize) -> Option<PooledBuf> {
        let mut items = self.items.borrow_mut();
        let Some(Item::Bytes(buf)) = items.front_mut() else {
            return None;
        };
        if buf.len() > max {
            let piece = PooledBuf::owned(buf[..max].to_vec());
            buf.consume(max);
            return Some(piece);
        }
        match items.pop_front() {
            Some(Item::Bytes(buf)) => Some(buf),
            _ => unreachable!("just matched a chunk"),
        }
    }

    /// The first unclaimed datagram.
    pub(crate) fn take_datagram(&self) -> Option<(Vec<u8>, Option<SockAddr>)> {
        let mut items = self.items.borrow_mut();
        match items.front() {
            Some(Item::Datagram(..)) => match items.pop_front() {
                Some(Item::Datagram(data, from)) => Some((data, from)),
                _ => unreachable!("just matched a datagram"),
            },
            _ => None,
        }
    }

    /// The first unclaimed connection.
    pub(crate) fn take_conn(&self) -> Option<OwnedFd> {
        let mut items = self.items.borrow_mut();
        match items.front() {
            Some(Item::Conn(_)) => match items.pop_front() {
                Some(Item::Conn(fd)) => Some(fd),
                _ => unreachable!("just matched a connection"),
            },
            _ => None,
        }
    }
}
