//! Direct descriptors: sockets that live in a ring's file table with no fd (accepted into
//! a sparse table with kernel-allocated slots, 5.19+; sent to another ring by `MSG_RING`'s
//! `SEND_FD`, 6.0+; given an fd on demand by `FIXED_FD_INSTALL`, 6.8+).
//!
//! The kernel hands a closed slot out again at once (to the next accept that allocates
//! one), and it looks a slot up only when it issues an SQE naming it. So a slot is closed
//! by a `CLOSE` SQE pushed behind every SQE already pushed: an op queued before the close
//! still finds the file it was meant for, and nothing pushed after the close names the slot
//! (its owner is gone). Kernel-linked ops, issued only when the ops before them end, would
//! break that order; ring-rt runs ops on a direct descriptor one after another instead.
//!
//! [`OwnedSlot`] is to a slot what `OwnedFd` is to an fd: dropping it queues the slot's
//! close on its ring's [`DirectCloser`], which the driver pushes with its next turn or
//! submit. A drop may happen anywhere (inside an orphan's reap, in a destructor long after
//! the driver was borrowed), so the queue needs nothing but itself.

use std::cell::Cell;
use std::fmt;
use std::rc::Rc;
use std::sync::Arc;

use crate::metrics::Metrics;

/// The close queue of one ring's direct descriptors (cheap to clone: one `Rc`). Made by
/// [`Driver::register_direct`](crate::driver::Driver::register_direct).
#[derive(Clone)]
pub struct DirectCloser(Rc<Queue>);

struct Queue {
    /// Slots whose owners let go, waiting for the driver to push their `CLOSE`. A `Cell`
    /// taken and put back, never borrowed across a call: a drop inside a drop cannot
    /// find it borrowed.
    slots: Cell<Vec<u32>>,
    metrics: Arc<Metrics>,
}

impl DirectCloser {
    pub(crate) fn new(metrics: Arc<Metrics>) -> DirectCloser {
        DirectCloser(Rc::new(Queue {
            slots: Cell::new(Vec::new()),
            metrics,
        }))
    }

    /// Takes ownership of `slot`, a direct descriptor the kernel just gave this ring (an
    /// accept's result, an arrival's).
    ///
    /// # Safety
    /// `slot` holds a file of this closer's ring that nobody else owns: dropping the
    /// returned value closes it, as `OwnedFd::from_raw_fd` closes an fd.
    pub unsafe fn adopt(&self, slot: u32) -> OwnedSlot {
        self.count_open();
        // SAFETY: the caller's contract.
        unsafe { self.own(slot) }
    }

    /// Counts one direct descriptor this ring took (an arrival is counted when its CQE
    /// comes, before anyone claims it, so `direct_opened - direct_closed` shows it).
    pub(crate) fn count_open(&self) {
        Metrics::bump(&self.0.metrics.direct_opened);
    }

    /// [`adopt`](Self::adopt) of a slot already counted as opened.
    ///
    /// # Safety
    /// As for [`adopt`](Self::adopt).
    pub(crate) unsafe fn own(&self, slot: u32) -> OwnedSlot {
        OwnedSlot {
            slot,
            closer: Some(self.clone()),
        }
    }

    /// Queues `slot`'s close (its owner let go of it).
    pub(crate) fn queue(&self, slot: u32) {
        let mut slots = self.0.slots.take();
        slots.push(slot);
        self.0.slots.set(slots);
    }

    /// The closes queued since the last call, oldest first.
    pub(crate) fn take_queued(&self) -> Vec<u32> {
        self.0.slots.take()
    }

    /// Counts one close pushed.
    pub(crate) fn count_close(&self) {
        Metrics::bump(&self.0.metrics.direct_closed);
    }
}

impl fmt::Debug for DirectCloser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirectCloser").finish_non_exhaustive()
    }
}

/// A direct descriptor this ring owns: closed (through its ring's [`DirectCloser`]) when
/// dropped.
pub struct OwnedSlot {
    slot: u32,
    /// Where its close goes; `None` once given up raw (`into_raw`), so the drop queues
    /// nothing and the closer's count goes down all the same (a `mem::forget` of the whole
    /// value leaked it).
    closer: Option<DirectCloser>,
}

impl OwnedSlot {
    /// The slot's index in the ring's file table, which SQEs name with `types::Fixed`.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// Gives up ownership without closing: the caller now closes the slot itself (with
    /// [`Driver::close_direct`](crate::driver::Driver::close_direct)).
    pub fn into_raw(mut self) -> u32 {
        self.closer = None;
        self.slot
    }
}

impl Drop for OwnedSlot {
    fn drop(&mut self) {
        if let Some(closer) = &self.closer {
            closer.queue(self.slot);
        }
    }
}

impl fmt::Debug for OwnedSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("OwnedSlot").field(&self.slot).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_slot_is_queued_once_and_counted_as_opened() {
        let metrics = Arc::new(Metrics::default());
        let closer = DirectCloser::new(metrics.clone());
        // SAFETY: no ring: the slot is a number this test made up and only queues.
        let (a, b) = unsafe { (closer.adopt(3), closer.adopt(7)) };
        assert_eq!(metrics.snapshot().direct_opened, 2);
        drop(b);
        drop(a);
        assert_eq!(closer.take_queued(), vec![7, 3]);
        assert!(closer.take_queued().is_empty());
    }

    #[test]
    fn a_slot_given_up_raw_is_not_closed_and_lets_its_closer_go() {
        let closer = DirectCloser::new(Arc::default());
        // SAFETY: as above.
        let slot = unsafe { closer.adopt(5) };
        assert_eq!(Rc::strong_count(&closer.0), 2);
        assert_eq!(slot.into_raw(), 5);
        assert!(closer.take_queued().is_empty());
        assert_eq!(Rc::strong_count(&closer.0), 1, "the slot kept its closer");
    }
}
