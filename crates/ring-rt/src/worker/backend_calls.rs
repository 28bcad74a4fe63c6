//! What sockets, files and ops ask of the worker's backend, beyond starting and polling
//! ops: the calls go through the core, which keeps its rule that a backend call made
//! while the backend is busy (from a waker or a destructor inside a turn) is parked for the
//! next safe point or answered conservatively, never lost and never a panic.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::task::{Poll, Waker};

use ring_core::buf_pool::BufGroup;
use ring_core::cqe::Cqe;
use ring_core::metrics::{Metrics, Snapshot};
use ring_core::probe::Features;
use ring_core::register_buf::RegisteredBufs;
use ring_core::user_data::OpId;

use super::{Core, Parked};
use crate::backend::{Capability, Mechanism, Operation};

impl Core {
    /// Whether ops here may take the way `cap` names (no when the backend is busy: the
    /// other way always works).
    pub(crate) fn supports(&self, cap: Capability) -> bool {
        self.backend_ref(|b| b.supports(cap)).unwrap_or(false)
    }

    /// The io_uring features in use; `None` on epoll.
    pub(crate) fn features(&self) -> Option<Features> {
        self.backend_ref(|b| b.features().cloned()).ok().flatten()
    }

    /// The backend's counters (shared: readable from any thread).
    pub(crate) fn metrics(&self) -> Arc<Metrics> {
        self.backend_ref(|b| b.metrics().clone())
            .unwrap_or_default()
    }

    /// The backend's counters now, and the pooled receive buffers that are out.
    pub(crate) fn metrics_snapshot(&self) -> (Snapshot, usize) {
        self.backend_ref(|b| (b.metrics().snapshot(), b.recv_buffers_in_use()))
            .unwrap_or_default()
    }

    /// An fd other io_uring workers wake this one through (MSG_RING), if it has one.
    pub(crate) fn wake_target(&self) -> Option<std::os::fd::OwnedFd> {
        self.backend_ref(|b| b.wake_target()).ok().flatten()
    }

    /// Counts one ENOBUFS in the worker's metrics.
    pub(crate) fn count_enobufs(&self) {
        let _ = self.backend_ref(|b| Metrics::bump(&b.metrics().enobufs));
    }

    /// Puts a socket the runtime adopts in the blocking mode the backend wants.
    pub(crate) fn adopt_socket(&self, fd: std::os::fd::RawFd) -> io::Result<()> {
        self.backend_ref(|b| b.adopt_socket(fd))?
    }

    /// Whether file reads of `fd` try the page cache on the loop thread first.
    pub(crate) fn reads_inline(&self, fd: std::os::fd::RawFd) -> bool {
        self.backend_ref(|b| b.reads_inline(fd)).unwrap_or(false)
    }

    /// Gives `fd` away (its owner hands it to code that closes it without the runtime):
    /// the backend forgets it first, and on io_uring submits every SQE pushed before,
    /// since the kernel looks an SQE's fd number up only when it takes the SQE. When that
    /// cannot happen now, because the backend is busy (this runs inside a backend call,
    /// from a waker's `clone`) or because a kernel-linked op naming `fd` waits for the ops
    /// before it, handing `fd` out would let such an op reach whatever reuses the number
    /// once the new owner closes it: the caller hands out a duplicate instead, and `fd`,
    /// now the runtime's, is closed through the ordinary close path, after those ops. With
    /// no fd left for the duplicate, a linked `fd` goes out on the backend's placeholder
    /// number; otherwise `fd` itself goes (its forget parked), logged.
    pub(crate) fn give_away_fd(&self, fd: BorrowedFd<'_>) -> GivenAway {
        let raw = fd.as_raw_fd();
        let forgotten = self.with_backend(|b| b.forget_fd(raw));
        if forgotten.as_ref().is_ok_and(|&done| done) {
            return GivenAway::Original;
        }
        match fd.try_clone_to_owned() {
            Ok(dup) => {
                // The ordinary close orders itself after those ops (parked if busy).
                self.close(raw);
                GivenAway::Duplicate(dup)
            }
            Err(err) if forgotten.is_ok() => {
                if let Ok(Some(other)) = self.with_backend(|b| b.hand_out_linked(raw)) {
                    return GivenAway::Duplicate(other);
                }
                tracing::error!(target: "ring_rt", fd = raw, error = %err, "fd given away while a kernel-linked op not yet issued names it, and not duplicated: that op may reach whatever reuses the number");
                GivenAway::Original
            }
            Err(err) => {
                tracing::warn!(target: "ring_rt", fd = raw, error = %err, "fd given away from inside a backend call (a waker's clone) and not duplicated: ops queued for it may reach a reused number");
                self.parked.borrow_mut().push(Parked::Forget(raw));
                GivenAway::Original
            }
        }
    }

    /// Whether a kernel-linked op not yet issued may name `fd`: true when the backend is
    /// busy and cannot say, so a caller that would close `fd` itself goes through
    /// [`close`](Core::close) instead, which orders the close after such ops.
    pub(crate) fn links_name(&self, fd: RawFd) -> bool {
        self.with_backend(|b| b.links_name(fd)).unwrap_or(true)
    }

    /// Forgets what is known drained on `fd` (see [`Mechanism::forget_drained`]); parked
    /// if the backend is busy.
    pub(crate) fn forget_drained(&self, fd: std::os::fd::RawFd) {
        if self.with_backend(|b| b.forget_drained(fd)).is_err() {
            self.parked.borrow_mut().push(Parked::ForgetDrained(fd));
        }
    }

    /// An op whose token is `token` is dropped (or disowned) with nothing in flight: an
    /// epoll readiness wait it parked is let go (see [`readiness_dropped`](Self::readiness_dropped)).
    /// An op given up (dropped, timed out, recalled) with nothing of its own in the kernel,
    /// only waiting for its fd's readiness: that wait goes. io_uring's `POLL_ADD` (it owns no
    /// memory) is orphaned; an epoll wait takes its waker out of the fd's waiters, which
    /// would keep it until the fd was next ready (`time_out` skipped this: a timed-out epoll
    /// read left its task's waker there).
    pub(crate) fn let_readiness_wait_go(&self, token: &crate::backend::Token) {
        match token.in_flight() {
            Some((poll, false)) => self.orphan(poll, Box::new(ring_core::release::Keep(()))),
            None => self.parked_wait_dropped(token),
            // The op itself is in the kernel: its caller orphans or cancels it.
            Some((_, true)) => {}
        }
    }

    pub(crate) fn parked_wait_dropped(&self, token: &crate::backend::Token) {
        if let crate::backend::Token::Ready {
            fd,
            events,
            wait: crate::backend::ReadyWait::Parked(key),
        } = *token
        {
            self.readiness_dropped(fd, events, key);
        }
    }

    /// Recalls the one-shot receive of `fd` holding its socket's turn (see
    /// [`Mechanism::recall_receive`]); parked if the backend is busy (a waker's clone
    /// dropped an adapter), as a recall lost would leave the receive waiting for ever.
    pub(crate) fn recall_receive(&self, fd: std::os::fd::RawFd, id: Option<OpId>) {
        if self.with_backend(|b| b.recall_receive(fd, id)).is_err() {
            self.parked.borrow_mut().push(Parked::Recall(fd, id));
        }
    }

    /// An op waiting for readiness with nothing in flight was dropped (see
    /// [`Mechanism::readiness_dropped`]); parked if the backend is busy.
    pub(crate) fn readiness_dropped(
        &self,
        fd: std::os::fd::RawFd,
        events: u32,
        key: crate::backend::ParkKey,
    ) {
        if self
            .with_backend(|b| b.readiness_dropped(fd, events, key))
            .is_err()
        {
            self.parked
                .borrow_mut()
                .push(Parked::ReadinessDropped(fd, events, key));
        }
    }

    /// The worker's shared receive group, created on first use.
    pub(crate) fn recv_group(&self) -> io::Result<BufGroup> {
        self.with_backend(|b| b.recv_group())?
    }

    /// The worker's fixed buffers, created on first use, and whether its ring has them.
    pub(crate) fn fixed_buffers(&self) -> io::Result<(RegisteredBufs, bool)> {
        self.with_backend(|b| b.fixed_buffers())?
    }

    /// The index a fixed op names `buf` by on this worker, if the ring has it registered
    /// (`None`: plain memory here, or the backend is busy, where a plain op is as right).
    pub(crate) fn fixed_index(&self, buf: &crate::buf::FixedBuf) -> Option<u16> {
        let backend = self.backend.try_borrow().ok()?;
        backend.fixed_index(buf.chunk())
    }

    /// Polls op table entry `id` (a multishot op, a chain's op); `Err` if the backend is
    /// busy (the caller wakes itself and tries again from its task). A cancel the runtime
    /// sent (shutdown, a poll outside it) ends the op with that refusal, as in
    /// [`Core::poll`], not with a bare `ECANCELED`.
    pub(crate) fn poll_id(&self, id: OpId, waker: &Waker) -> io::Result<Poll<io::Result<Cqe>>> {
        if self.is_elsewhere() {
            return Ok(self.poll_id_elsewhere(id, waker));
        }
        let polled = self.with_backend(|b| b.poll_id(id, waker))?;
        Ok(match polled {
            Poll::Ready(Ok(cqe)) if super::is_final_cancel(&cqe) => {
                Poll::Ready(self.refusal_of(Some(id), cqe))
            }
            polled => polled,
        })
    }

    /// Cancels op `id`, whose owner stays to take its final CQE.
    pub(crate) fn cancel(&self, id: OpId) -> io::Result<()> {
        self.with_backend(|b| b.cancel(id))
    }

    /// Starts `ops` as one kernel-linked chain where the backend can (see
    /// [`Mechanism::start_chain`]); `Err` if the backend is busy.
    pub(crate) fn start_chain(
        &self,
        ops: &mut [&mut dyn Operation],
    ) -> io::Result<Option<io::Result<Vec<OpId>>>> {
        self.with_backend(|b| b.start_chain(ops))
    }
}

/// Direct descriptors (see `Builder::direct_descriptors`): what sockets and the balanced
/// listener ask of the worker's ring.
impl Core {
    /// The close queue of the worker's direct-descriptor table: `Some` where accepts take
    /// direct descriptors (never while the backend is busy: an fd is as right then).
    pub(crate) fn direct_closer(&self) -> Option<ring_core::direct::DirectCloser> {
        self.backend_ref(|b| b.direct_closer()).ok().flatten()
    }

    /// A regular fd for direct descriptor `slot`, which the caller owns (see
    /// [`Mechanism::install_direct`]); `Err` if the backend is busy.
    pub(crate) fn install_direct(&self, slot: u32) -> io::Result<OwnedFd> {
        self.with_backend(|b| b.install_direct(slot))?
    }

    /// `shutdown(2)` of direct descriptor `slot`, which the caller owns.
    pub(crate) fn shutdown_direct(&self, slot: u32, how: std::net::Shutdown) -> io::Result<()> {
        self.with_backend(|b| b.shutdown_direct(slot, how))?
    }

    /// The direct descriptor sent here under `seq`; `Err` if the backend is busy.
    pub(crate) fn poll_arrival(
        &self,
        seq: u32,
        waker: &Waker,
    ) -> io::Result<Poll<io::Result<ring_core::direct::OwnedSlot>>> {
        self.with_backend(|b| b.poll_arrival(seq, waker))
    }

    /// The receiver of `seq` gives up; parked if the backend is busy (a forget lost would
    /// keep the descriptor open in the table for the ring's life).
    pub(crate) fn forget_arrival(&self, seq: u32) {
        if self.with_backend(|b| b.forget_arrival(seq)).is_err() {
            self.parked.borrow_mut().push(Parked::ForgetArrival(seq));
        }
    }
}

/// What [`Core::give_away_fd`] says to hand out.
#[must_use]
pub(crate) enum GivenAway {
    /// The fd itself: the backend forgot it.
    Original,
    /// This duplicate: the original stays the runtime's, to be closed after its queued ops.
    Duplicate(OwnedFd),
}

/// A worker sends MSG_RING wake-ups to other workers through its own ring, with its next
/// submission; a busy backend (a wake from inside a backend call) answers false, and the
/// caller writes the eventfd instead.
impl crate::unpark::WakeSender for Core {
    fn send_wake(&self, target: &std::sync::Arc<std::os::fd::OwnedFd>) -> bool {
        self.with_backend(|b| b.send_wake(target)).unwrap_or(false)
    }
}
