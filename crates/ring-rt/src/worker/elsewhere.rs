//! An op polled while its runtime is not running on this thread (inside another runtime's
//! `block_on`, or outside any): nobody turns its ring, so it would wait for ever.
//!
//! Its memory belongs to the kernel until its final completion, so it cannot just fail:
//! it is cancelled, and its own ring is turned from here without waiting until that
//! completion is in. The op then ends with what the kernel said (a result that beat the
//! cancel is kept: a read's bytes are not lost), a cancelled one as "belongs to a runtime
//! that is not running here". An op with nothing in flight (waiting for readiness) tries
//! its syscall once and fails if that would wait.

use std::io;
use std::task::{Poll, Waker};

use ring_core::cqe::Cqe;
use ring_core::driver::Wait;
use ring_core::user_data::OpId;

use super::{elsewhere, shut_down, Core};
use crate::backend::{Mechanism, Operation, ReadyWait, Token};

impl Core {
    /// The refusal of an op polled after this core shut down, if it is one to refuse now:
    /// an op waiting for readiness (nothing of it in flight but a poll that owns no
    /// memory). Its wait is let go and nothing else runs: no syscall (bytes a late
    /// readiness announced stay in the fd, review DB) and no wait armed on a ring nobody
    /// turns (it stayed pending for ever). An op in flight goes on to its final CQE.
    pub(super) fn refuse_after_shutdown(&self, token: &mut Token) -> Option<io::Error> {
        match token {
            Token::Ready { .. } => {
                let_wait_go(self, token);
                Some(shut_down())
            }
            Token::InFlight(_) => None,
        }
    }

    /// The error of an op refused for being polled where its runtime is not running: that
    /// the runtime shuts down, if it does (an op polled by a destructor of one of its
    /// tasks, which the shutdown drops, review DB), else that it runs elsewhere.
    pub(super) fn refused_elsewhere(&self) -> io::Error {
        if self.executor.shared.is_stopping() {
            shut_down()
        } else {
            elsewhere()
        }
    }

    /// Whether an op of this core polled now is polled elsewhere: this core's loop is not
    /// running on this thread (cores are per thread and `block_on` does not nest, so that
    /// is "another runtime, or none, is running here"), and it was not dropped.
    pub(super) fn is_elsewhere(&self) -> bool {
        !self.is_running.get() && !self.is_shut_down.get()
    }

    /// [`Core::poll_id`] for an op table entry (a multishot op, a chain's op) polled
    /// elsewhere: as [`poll_elsewhere`](Self::poll_elsewhere), its completions are taken
    /// in by turning this core's ring without waiting, and it is cancelled (once) while it
    /// has nothing to give; the completion of that cancel says so (not a bare
    /// `ECANCELED`).
    pub(super) fn poll_id_elsewhere(&self, id: OpId, waker: &Waker) -> Poll<io::Result<Cqe>> {
        let _ = self.with_backend(|b| b.turn(Wait::No));
        self.run_deferred();
        let polled = match self.with_backend(|b| b.poll_id(id, waker)) {
            Ok(polled) => polled,
            Err(_) => Poll::Pending,
        };
        match polled {
            Poll::Ready(Ok(cqe)) if !cqe.is_more() => {
                let refused = self.refusal_of(Some(id), cqe);
                self.cancelled_elsewhere.borrow_mut().retain(|&c| c != id);
                Poll::Ready(refused)
            }
            Poll::Ready(other) => Poll::Ready(other),
            Poll::Pending => {
                self.cancel_elsewhere(id);
                waker.wake_by_ref();
                Poll::Pending
            }
        }
    }

    /// Cancels op `id` once for being polled elsewhere, and submits the cancel now.
    ///
    /// The list of such ops forgets the ones that have ended since: an op dropped after
    /// it was polled elsewhere, or ending inside with a result that beat the cancel, is
    /// never looked up again (ids are not reused), and a program that keeps doing either
    /// would otherwise grow the list without bound.
    fn cancel_elsewhere(&self, id: OpId) {
        if self.cancelled_elsewhere.borrow().contains(&id) {
            return;
        }
        let _ = self.with_backend(|b| {
            let mut cancelled = self.cancelled_elsewhere.borrow_mut();
            cancelled.retain(|&c| b.is_live(c));
            cancelled.push(id);
            drop(cancelled);
            b.cancel(id);
            b.submit()
        });
    }

    /// [`Core::poll`] for an op whose runtime is not running here (see the module header).
    pub(super) fn poll_elsewhere(
        &self,
        token: &mut Token,
        op: &mut dyn Operation,
        waker: &Waker,
    ) -> Poll<io::Result<Cqe>> {
        let id = match token {
            Token::Ready { .. } => {
                // Nothing of the op is in flight (its readiness poll owns no memory): it
                // waits for readiness no more. Then one try of its syscall, which does not
                // block (receives and sends pass MSG_DONTWAIT; an accept relies on the
                // listener's O_NONBLOCK, which its owner can clear: see the listeners'
                // `from_std`), else it fails. No try while the runtime stops (polled by a
                // destructor of a task the shutdown drops: refused as after it, review DC)
                // nor for an op that a future loops over (`Operation::tries_elsewhere`).
                let_wait_go(self, token);
                if self.executor.shared.is_stopping() || !op.tries_elsewhere() {
                    return Poll::Ready(Err(self.refused_elsewhere()));
                }
                let cqe = op.try_syscall();
                if cqe.res == -libc::EAGAIN || cqe.res == -libc::EINTR {
                    return Poll::Ready(Err(self.refused_elsewhere()));
                }
                return Poll::Ready(Ok(cqe));
            }
            Token::InFlight(id) => *id,
        };
        // The completion may be in the CQ (or the pool's results) already: take it in.
        let _ = self.with_backend(|b| b.turn(Wait::No));
        self.run_deferred();
        let polled = match self.with_backend(|b| b.poll(token, op, waker)) {
            Ok(polled) => polled,
            Err(_) => Poll::Pending,
        };
        match polled {
            Poll::Ready(Ok(cqe)) if !cqe.is_more() => {
                let refused = self.refusal_of(Some(id), cqe);
                self.cancelled_elsewhere.borrow_mut().retain(|&c| c != id);
                Poll::Ready(refused)
            }
            Poll::Ready(other) => Poll::Ready(other),
            Poll::Pending => {
                self.cancel_elsewhere(id);
                // Nothing of this runtime will wake us: come back after the running
                // runtime's next turn, until the cancel's completion is in.
                waker.wake_by_ref();
                Poll::Pending
            }
        }
    }
}

/// Lets a readiness op's wait go for good ([`Core::let_readiness_wait_go`]), leaving its
/// token idle, so a later drop of the op lets nothing go twice.
fn let_wait_go(core: &Core, token: &mut Token) {
    core.let_readiness_wait_go(token);
    if let Token::Ready { wait, .. } = token {
        *wait = ReadyWait::Idle;
    }
}
