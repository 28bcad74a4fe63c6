//! Release steps for orphaned ops: what to undo when a late CQE arrives for a dropped future.
//!
//! An accept or open that completes after its future was dropped returns an fd nobody owns:
//! [`CloseFd`] closes it. A buffer-select recv that completes late took a provided buffer:
//! [`RecycleBid`] returns it to its group. [`Keep`] only holds memory until the final CQE.

use std::os::fd::RawFd;

use crate::buf_pool::BufGroup;
use crate::cqe::Cqe;
use crate::lifecycle::{Deferred, Orphan};

/// Closes the fd a late accept/open/socket CQE returned.
#[derive(Debug)]
pub struct CloseFd {
    /// Private, so only [`CloseFd::new`] (and its contract) makes one.
    _private: (),
}

impl CloseFd {
    /// A release step closing the fd each successful CQE returns.
    ///
    /// # Safety
    /// Attach it only to an op whose successful CQEs each return a new fd that nothing else
    /// owns (accept, open, socket, without a fixed-file slot), and feed it only that op's
    /// own CQEs: it closes the number in `res`, which for any other CQE could be an fd
    /// someone else owns.
    ///
    /// ```compile_fail,E0133
    /// let closer = ring_core::release::CloseFd::new(); // needs `unsafe`
    /// ```
    pub unsafe fn new() -> CloseFd {
        CloseFd { _private: () }
    }
}

impl Orphan for CloseFd {
    fn reap(&mut self, cqe: &Cqe, _deferred: &mut Deferred) {
        if cqe.res >= 0 && cqe.bid().is_none() {
            // SAFETY: `new`'s contract: this successful CQE of the op returned a new fd,
            // and its future (which alone could have taken it) is gone.
            unsafe { close_quietly(cqe.res) };
        }
    }
}

/// Returns the provided buffer a late buffer-select CQE consumed.
pub struct RecycleBid(BufGroup);

impl RecycleBid {
    /// A release step returning bids to `group`.
    ///
    /// # Safety
    /// Attach it only to an op that selects its buffer from `group` (its SQE carries
    /// `BUFFER_SELECT` with `group`'s bgid), so every bid in its CQEs is one the kernel took
    /// from `group` for that op.
    pub unsafe fn new(group: BufGroup) -> RecycleBid {
        RecycleBid(group)
    }
}

impl Orphan for RecycleBid {
    fn reap(&mut self, cqe: &Cqe, deferred: &mut Deferred) {
        if let Some(bid) = cqe.bid() {
            // SAFETY: `new`'s contract: the bid comes from this op's own CQE, taken from this
            // group by the kernel; the op being orphaned, nobody leased it.
            unsafe { self.0.recycle_into(bid, deferred) };
        }
    }
}

/// Keeps `T` (an op's buffers, paths, addresses) alive until the op's final CQE.
pub struct Keep<T>(pub T);

impl<T> Orphan for Keep<T> {
    fn reap(&mut self, _cqe: &Cqe, _deferred: &mut Deferred) {}
}

/// Runs two release steps on each CQE: e.g. keep a buffer and close an fd.
pub struct Both<A, B>(pub A, pub B);

impl<A: Orphan, B: Orphan> Orphan for Both<A, B> {
    fn reap(&mut self, cqe: &Cqe, deferred: &mut Deferred) {
        self.0.reap(cqe, deferred);
        self.1.reap(cqe, deferred);
    }
}

/// Closes an fd nobody else owns; the result is ignored because there is no one to report
/// it to and the fd is gone either way (Linux releases it even when close reports an error).
///
/// # Safety
/// The caller owns `fd`, and nothing will use or close that number again on the strength
/// of having owned it (I/O safety: closing an fd someone else owns lets their next use hit
/// whatever file reuses the number).
///
/// ```compile_fail,E0133
/// ring_core::release::close_quietly(0); // needs `unsafe`: fd 0 is not ours to close
/// ```
pub unsafe fn close_quietly(fd: RawFd) {
    // SAFETY: the caller's contract: the fd is ours alone to close.
    unsafe {
        libc::close(fd);
    }
}
