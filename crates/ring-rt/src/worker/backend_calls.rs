//! What sockets, files and ops ask of the worker's backend, beyond starting and polling
//! ops: the calls go through the core, which keeps its rule that a backend call made
//! while the backend is busy (from a waker or a destructor inside a turn) is parked for the
//! next safe point or answered conservatively, never lost and never a panic.

use std::io;
use std::sync::Arc;
use std::task::{Poll, Waker};

use ring_core::buf_pool::BufGroup;
use ring_core::cqe::Cqe;
use ring_core::metrics::{Metrics, Snapshot};
use ring_core::probe::Features;
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

    /// The backend forgets `fd`, which leaves the runtime; parked if the backend is busy
    /// (a late forget at worst wakes a waiter of a reused number, which re-registers).
    pub(crate) fn forget_fd(&self, fd: std::os::fd::RawFd) {
        if self.with_backend(|b| b.forget_fd(fd)).is_err() {
            self.parked.borrow_mut().push(Parked::Forget(fd));
        }
    }

    /// After a local `shutdown(2)` of `fd`; parked if the backend is busy.
    pub(crate) fn after_local_shutdown(&self, fd: std::os::fd::RawFd) {
        if self.with_backend(|b| b.after_local_shutdown(fd)).is_err() {
            self.parked.borrow_mut().push(Parked::Shutdown(fd));
        }
    }

    /// The worker's shared receive group, created on first use.
    pub(crate) fn recv_group(&self) -> io::Result<BufGroup> {
        self.with_backend(|b| b.recv_group())?
    }

    /// Polls op table entry `id` (a multishot op, a chain's op); `Err` if the backend is
    /// busy (the caller wakes itself and tries again from its task).
    pub(crate) fn poll_id(&self, id: OpId, waker: &Waker) -> io::Result<Poll<io::Result<Cqe>>> {
        if self.is_elsewhere() {
            return Ok(self.poll_id_elsewhere(id, waker));
        }
        self.with_backend(|b| b.poll_id(id, waker))
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

/// A worker sends MSG_RING wake-ups to other workers through its own ring, with its next
/// submission; a busy backend (a wake from inside a backend call) answers false, and the
/// caller writes the eventfd instead.
impl crate::unpark::WakeSender for Core {
    fn send_wake(&self, target: &std::sync::Arc<std::os::fd::OwnedFd>) -> bool {
        self.with_backend(|b| b.send_wake(target)).unwrap_or(false)
    }
}
