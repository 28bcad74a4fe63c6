//! Multishot ops (accept 5.19+, recv 6.0+): one SQE, one CQE per result (each with
//! `F_MORE`) until a final CQE ends it. The same lifecycle and the same orphan path as a
//! single-shot [`Op`](super::Op): armed on first poll, dropped armed it is orphaned
//! through the worker, and its late CQEs are released by the def's orphan.

use std::io;
use std::rc::Rc;
use std::task::{Context, Poll};

use ring_core::cqe::Cqe;
use ring_core::lifecycle::Orphan;
use ring_core::user_data::OpId;

use super::Operation;
use crate::worker::Core;

/// One kind of multishot op.
pub(crate) trait MultishotDef: Operation + 'static {
    /// The most CQEs it may queue unpolled before it is cancelled (0: unbounded); it is
    /// re-armed by the next poll once its final CQE was taken.
    fn queue_max(&self) -> u16 {
        0
    }

    /// What releases the CQEs that arrive after the consumer is gone (closes accepted fds,
    /// keeps or returns received buffers). Multishot ops own no memory of their own.
    fn orphan(&self) -> Box<dyn Orphan>;
}

/// A multishot op on its worker: a stream of CQEs.
pub(crate) struct Multishot<T: MultishotDef> {
    core: Rc<Core>,
    def: T,
    /// The armed op, between its first poll and its final CQE.
    armed: Option<OpId>,
}

impl<T: MultishotDef> Multishot<T> {
    pub(crate) fn new(core: Rc<Core>, def: T) -> Multishot<T> {
        Multishot {
            core,
            def,
            armed: None,
        }
    }

    /// True while armed (between its first poll and its final CQE).
    pub(crate) fn is_armed(&self) -> bool {
        self.armed.is_some()
    }

    /// What the op is: its fd and what its orphan needs.
    pub(crate) fn def(&self) -> &T {
        &self.def
    }

    /// The armed op's id.
    pub(crate) fn armed_id(&self) -> Option<OpId> {
        self.armed
    }

    /// Forgets the armed op without orphaning it: its owner's owner orphaned it already.
    pub(crate) fn disown(&mut self) {
        self.armed = None;
    }

    /// The next CQE, arming the op first if it is not armed. A CQE without `F_MORE` is the
    /// last of this arming; the poll after it arms again.
    ///
    /// Within the op budget of the task's poll (see `executor::coop`), as every op.
    #[inline]
    pub(crate) fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Cqe>> {
        std::task::ready!(crate::worker::poll_budget(cx));
        crate::executor::coop::spending(self.poll_armed(cx))
    }

    #[inline]
    fn poll_armed(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Cqe>> {
        let id = match self.armed {
            Some(id) => id,
            None => {
                let max = self.def.queue_max();
                match self.core.start_multishot(&mut self.def, max) {
                    Ok(Ok(id)) => *self.armed.insert(id),
                    Ok(Err(err)) => return Poll::Ready(Err(err)),
                    Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                        // Polled from inside a loop turn: try again from the task.
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                    Err(err) => return Poll::Ready(Err(err)),
                }
            }
        };
        let polled = match self.core.poll_id(id, cx.waker()) {
            Ok(polled) => polled,
            Err(_) => {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
        };
        let polled = std::task::ready!(polled);
        // An error here (a refusal, or the op no longer in the table) means the op is
        // over: what stayed armed would name a freed slot, and a stream polled again
        // could then never re-arm.
        if polled.as_ref().map_or(true, |cqe| !cqe.is_more()) {
            self.armed = None;
        }
        Poll::Ready(polled)
    }
}

impl<T: MultishotDef> Drop for Multishot<T> {
    /// The one orphan path: an armed op is cancelled, and its late CQEs released.
    fn drop(&mut self) {
        if let Some(id) = self.armed.take() {
            self.core.orphan(id, self.def.orphan());
        }
    }
}
