//! The in-flight op table: a slab of [`Lifecycle`]s keyed by `user_data` (index + generation).
//!
//! Pure bookkeeping shared by both backends: the io_uring driver and the epoll backend feed
//! it the same [`Cqe`] values. A slot is freed only by its op's final CQE; a CQE whose
//! generation does not match its slot is stale and reported, never delivered.

use std::io;
use std::task::{Poll, Waker};

use slab::Slab;

use crate::cqe::Cqe;
use crate::lifecycle::{Deferred, Lifecycle, OnCqe, OnDrop, Orphan};
use crate::user_data::{self, OpId, Reserved, UserData};

struct Slot {
    generation: u32,
    /// The most CQEs a multishot op may queue unpolled before it is cancelled (0: no
    /// bound). Set by [`OpTable::bound_queue`]; the op is re-armed by its owner once drained.
    queue_max: u16,
    /// `queue_max` was reached and the caller was told to cancel (told once).
    is_capped: bool,
    state: Lifecycle,
}

/// Every op between submission and its final CQE.
pub struct OpTable {
    slots: Slab<Slot>,
    /// Stamped on the next insert; wraps, skipping nothing: a stale CQE would need 2^32
    /// inserts between its op's completion and its arrival to be misdelivered.
    next_generation: u32,
    /// Wakers and finished orphans the last calls produced, for the owner to run once it
    /// has let go of the table ([`take_deferred`](Self::take_deferred)).
    deferred: Deferred,
}

/// What [`OpTable::complete`] did with one CQE.
#[derive(Debug, PartialEq, Eq)]
pub enum Dispatch {
    /// Queued for the op's future (whose waker, if it waits, is now deferred).
    Delivered,
    /// Queued, and the op now holds as many unpolled CQEs as its bound allows
    /// ([`OpTable::bound_queue`]): the caller must cancel it (pushing `ASYNC_CANCEL`).
    QueueFull,
    /// Reaped by an orphan; `freed` when it was the final CQE.
    Reaped {
        /// The slot was freed.
        freed: bool,
    },
    /// For the driver's own SQEs (cancel, timeout, wake, provide).
    Reserved(Reserved),
    /// A slot that no longer exists or has another generation.
    Stale,
    /// A `user_data` ring-core never produced.
    Unknown,
}

/// What [`OpTable::orphan`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Orphaned {
    /// Still in the kernel: the caller must push `ASYNC_CANCEL` for this op.
    NeedsCancel,
    /// Already complete: released and freed.
    Freed,
    /// Already orphaned: both orphans keep their memory until the final CQE; no new cancel.
    AlreadyOrphaned,
}

impl Default for OpTable {
    fn default() -> OpTable {
        OpTable::new()
    }
}

impl OpTable {
    /// An empty table.
    pub fn new() -> OpTable {
        OpTable::with_capacity(0)
    }

    /// An empty table with room for `capacity` ops before it reallocates.
    pub fn with_capacity(capacity: usize) -> OpTable {
        OpTable {
            slots: Slab::with_capacity(capacity),
            next_generation: 1,
            deferred: Deferred::default(),
        }
    }

    /// Registers a new op in the `Submitted` state; its id goes into the SQE's `user_data`.
    pub fn insert(&mut self) -> io::Result<OpId> {
        self.insert_in(Lifecycle::Submitted)
    }

    /// Registers a new op whose future already waits on `waker` (as if polled once): its
    /// first CQE wakes it, and the future need not poll between starting the op and that.
    pub fn insert_waiting(&mut self, waker: &Waker) -> io::Result<OpId> {
        self.insert_in(Lifecycle::Waiting(waker.clone()))
    }

    #[inline]
    fn insert_in(&mut self, state: Lifecycle) -> io::Result<OpId> {
        if self.slots.len() > user_data::INDEX_MAX as usize {
            return Err(io::Error::other(
                "op table is full (2^32 - 1 ops in flight)",
            ));
        }
        let generation = self.next_generation;
        self.next_generation = generation.wrapping_add(1);
        let index = self.slots.insert(Slot {
            generation,
            queue_max: 0,
            is_capped: false,
            state,
        });
        Ok(OpId {
            index: index as u32,
            generation,
        })
    }

    /// Ops between insert and their final CQE, orphans included.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True when nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Orphans still waiting for their final CQE.
    pub fn orphans(&self) -> usize {
        self.slots
            .iter()
            .filter(|(_, slot)| slot.state.is_orphaned())
            .count()
    }

    /// Ops the kernel may still post a CQE for (see [`Lifecycle::awaits_kernel`]).
    pub fn awaiting_kernel(&self) -> usize {
        self.slots
            .iter()
            .filter(|(_, slot)| slot.state.awaits_kernel())
            .count()
    }

    /// Ids of every op in flight (for cancelling everything at shutdown).
    pub fn ids(&self) -> Vec<OpId> {
        self.slots
            .iter()
            .map(|(index, slot)| OpId {
                index: index as u32,
                generation: slot.generation,
            })
            .collect()
    }

    /// Routes one CQE to its op. A waker it wakes and an orphan it finishes are deferred
    /// ([`take_deferred`](Self::take_deferred)).
    ///
    /// # Safety
    /// `cqe` must be a completion the kernel (or a backend standing in for it) posted for
    /// the op its `user_data` names: an orphan acts on it (closes the fd in `res`, returns
    /// the buffer id in `flags`), so a made-up CQE could close an fd or return a buffer
    /// that someone else owns.
    ///
    /// ```compile_fail,E0133
    /// use ring_core::{cqe::Cqe, op_table::OpTable};
    ///
    /// let mut table = OpTable::new();
    /// let id = table.insert().unwrap();
    /// table.complete(Cqe::new(id.to_user_data(), 0, 0)); // needs `unsafe`
    /// ```
    #[inline]
    pub unsafe fn complete(&mut self, cqe: Cqe) -> Dispatch {
        let id = match user_data::decode(cqe.user_data) {
            UserData::Op(id) => id,
            UserData::Reserved(reserved) => return Dispatch::Reserved(reserved),
            // Arrivals (direct descriptors from other rings), the driver's own waits and its
            // provides have no op here: the driver routes them (see `Driver::dispatch_direct`
            // and `Driver::reap_provide`).
            UserData::Arrival(_)
            | UserData::Own(_)
            | UserData::Provide(_)
            | UserData::Unknown(_) => return Dispatch::Unknown,
        };
        let Some(slot) = self.slots.get_mut(id.index as usize) else {
            return Dispatch::Stale;
        };
        if slot.generation != id.generation {
            return Dispatch::Stale;
        }
        // SAFETY: the caller's contract: `cqe` is this op's own completion.
        match unsafe { slot.state.on_cqe(cqe, &mut self.deferred) } {
            OnCqe::Queued if slot.is_over_bound() => {
                slot.is_capped = true;
                Dispatch::QueueFull
            }
            OnCqe::Queued => Dispatch::Delivered,
            OnCqe::Reaped => Dispatch::Reaped { freed: false },
            OnCqe::ReapedFinal => {
                self.slots.remove(id.index as usize);
                Dispatch::Reaped { freed: true }
            }
        }
    }

    /// Bounds how many CQEs multishot op `id` may queue unpolled: once `max` are waiting,
    /// [`complete`](Self::complete) answers [`Dispatch::QueueFull`] (once) so the caller
    /// cancels the op; its owner re-arms it after draining. A multishot accept that nobody
    /// polls then stops accepting instead of filling the process with fds. `max` 0 removes
    /// the bound; an id not in the table is ignored.
    pub fn bound_queue(&mut self, id: OpId, max: u16) {
        if let Some(slot) = self.slot_mut(id) {
            slot.queue_max = max;
        }
    }

    /// Moves the wakers to wake and the finished orphans to drop that the calls since the
    /// last take produced into `out`. Run `out` once this table is no longer borrowed: a
    /// waker or a destructor may call back into its owner.
    #[inline]
    pub fn take_deferred(&mut self, out: &mut Deferred) {
        out.append(&mut self.deferred);
    }

    /// Queues a wake-up with the table's deferred work (for the driver's own waits).
    pub(crate) fn defer_wake(&mut self, waker: Waker) {
        self.deferred.wake(waker);
    }

    /// Queues a waker nobody will wake, to be dropped with the deferred work.
    pub(crate) fn defer_waker_drop(&mut self, waker: Waker) {
        self.deferred.drop_waker_later(waker);
    }

    /// True when calls left work in the table's deferred queue.
    pub fn has_deferred(&self) -> bool {
        !self.deferred.is_empty()
    }

    /// Polls op `id` for its next CQE. Returning the final CQE frees the slot. An id that
    /// is no longer in the table, or whose future was already dropped (orphaned), is an
    /// error.
    #[inline]
    pub fn poll(&mut self, id: OpId, waker: &Waker) -> Poll<io::Result<Cqe>> {
        let Some(slot) = self
            .slots
            .get_mut(id.index as usize)
            .filter(|slot| slot.generation == id.generation && !slot.state.is_orphaned())
        else {
            return Poll::Ready(Err(stale_error(id)));
        };
        let cqe = match slot.state.poll_next(waker, &mut self.deferred) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(cqe) => cqe,
        };
        if !cqe.is_more() {
            let slot = self.slots.remove(id.index as usize);
            // A single-shot op's slot is left `Submitted` by its last poll, which owns
            // nothing: skip the enum's out-of-line destructor (see `Lifecycle::leave_plain`).
            if slot.state.owns_nothing() {
                std::mem::forget(slot);
            }
        }
        Poll::Ready(Ok(cqe))
    }

    /// The future for `id` was dropped: `orphan` takes over the op's memory. An op that
    /// already finished has its orphan deferred, to be dropped by the owner.
    ///
    /// # Safety
    /// As for [`Driver::orphan`](crate::driver::Driver::orphan): `id` is the caller's own
    /// op, whose future it is dropping, and `orphan` keeps everything the op points at.
    pub unsafe fn orphan(&mut self, id: OpId, orphan: Box<dyn Orphan>) -> io::Result<Orphaned> {
        // A stale id's op already had its final CQE, so its memory is free: it goes with
        // the deferred work (its destructor must not run inside the table either).
        let Some(slot) = self.slots.get_mut(id.index as usize) else {
            self.deferred.drop_later(orphan);
            return Err(stale_error(id));
        };
        if slot.generation != id.generation {
            self.deferred.drop_later(orphan);
            return Err(stale_error(id));
        }
        match slot.state.on_drop(orphan, &mut self.deferred) {
            OnDrop::NeedsCancel => Ok(Orphaned::NeedsCancel),
            OnDrop::AlreadyOrphaned => Ok(Orphaned::AlreadyOrphaned),
            OnDrop::Finished => {
                self.slots.remove(id.index as usize);
                Ok(Orphaned::Freed)
            }
        }
    }

    /// True while `id`'s slot exists with `id`'s generation.
    pub fn contains(&self, id: OpId) -> bool {
        self.slots
            .get(id.index as usize)
            .is_some_and(|slot| slot.generation == id.generation)
    }

    /// True while the kernel may still post a CQE for `id` (its final one has not arrived).
    pub fn awaits_kernel_for(&self, id: OpId) -> bool {
        self.slots
            .get(id.index as usize)
            .is_some_and(|slot| slot.generation == id.generation && slot.state.awaits_kernel())
    }

    fn slot_mut(&mut self, id: OpId) -> Option<&mut Slot> {
        self.slots
            .get_mut(id.index as usize)
            .filter(|slot| slot.generation == id.generation)
    }
}

impl Slot {
    /// A bounded multishot op whose unpolled CQEs reached the bound (reported once).
    fn is_over_bound(&self) -> bool {
        self.queue_max > 0 && !self.is_capped && self.state.queued() >= usize::from(self.queue_max)
    }
}

fn stale_error(id: OpId) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("op {id:?} is not in flight (already completed or never submitted)"),
    )
}

#[cfg(test)]
mod tests;
