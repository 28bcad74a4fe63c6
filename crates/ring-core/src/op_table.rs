//! The in-flight op table: a slab of [`Lifecycle`]s keyed by `user_data` (index + generation).
//!
//! Pure bookkeeping shared by both backends: the io_uring driver and the epoll backend feed
//! it the same [`Cqe`] values. A slot is freed only by its op's final CQE; a CQE whose
//! generation does not match its slot is stale and reported, never delivered.

use std::io;
use std::task::{Poll, Waker};

use slab::Slab;

use crate::cqe::Cqe;
use crate::lifecycle::{Lifecycle, OnCqe, OnDrop, Orphan};
use crate::user_data::{self, OpId, Reserved, UserData};

struct Slot {
    generation: u32,
    state: Lifecycle,
}

/// Every op between submission and its final CQE.
pub struct OpTable {
    slots: Slab<Slot>,
    /// Stamped on the next insert; wraps, skipping nothing: a stale CQE would need 2^32
    /// inserts between its op's completion and its arrival to be misdelivered.
    next_generation: u32,
}

/// What [`OpTable::complete`] did with one CQE.
#[derive(Debug, PartialEq, Eq)]
pub enum Dispatch {
    /// Queued for the op's future (which was woken if waiting).
    Delivered,
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
}

impl Default for OpTable {
    fn default() -> OpTable {
        OpTable::new()
    }
}

impl OpTable {
    /// An empty table.
    pub fn new() -> OpTable {
        OpTable {
            slots: Slab::new(),
            next_generation: 1,
        }
    }

    /// An empty table with room for `capacity` ops before it reallocates.
    pub fn with_capacity(capacity: usize) -> OpTable {
        OpTable {
            slots: Slab::with_capacity(capacity),
            next_generation: 1,
        }
    }

    /// Registers a new op in the `Submitted` state; its id goes into the SQE's `user_data`.
    pub fn insert(&mut self) -> io::Result<OpId> {
        if self.slots.len() > user_data::INDEX_MAX as usize {
            return Err(io::Error::other(
                "op table is full (2^32 - 1 ops in flight)",
            ));
        }
        let generation = self.next_generation;
        self.next_generation = generation.wrapping_add(1);
        let index = self.slots.insert(Slot {
            generation,
            state: Lifecycle::Submitted,
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

    /// Routes one CQE to its op.
    pub fn complete(&mut self, cqe: Cqe) -> Dispatch {
        let id = match user_data::decode(cqe.user_data) {
            UserData::Op(id) => id,
            UserData::Reserved(reserved) => return Dispatch::Reserved(reserved),
            UserData::Unknown(_) => return Dispatch::Unknown,
        };
        let Some(slot) = self.slot_mut(id) else {
            return Dispatch::Stale;
        };
        match slot.state.on_cqe(cqe) {
            OnCqe::Queued => Dispatch::Delivered,
            OnCqe::Reaped => Dispatch::Reaped { freed: false },
            OnCqe::ReapedFinal => {
                self.slots.remove(id.index as usize);
                Dispatch::Reaped { freed: true }
            }
        }
    }

    /// Polls op `id` for its next CQE. Returning the final CQE frees the slot. An id that
    /// is no longer in the table is an error (the future was polled after completing).
    pub fn poll(&mut self, id: OpId, waker: &Waker) -> Poll<io::Result<Cqe>> {
        let Some(slot) = self.slot_mut(id) else {
            return Poll::Ready(Err(stale_error(id)));
        };
        let cqe = match slot.state.poll_next(waker) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(cqe) => cqe,
        };
        if !cqe.is_more() {
            self.slots.remove(id.index as usize);
        }
        Poll::Ready(Ok(cqe))
    }

    /// The future for `id` was dropped: `orphan` takes over the op's memory.
    pub fn orphan(&mut self, id: OpId, orphan: Box<dyn Orphan>) -> io::Result<Orphaned> {
        let slot = self.slot_mut(id).ok_or_else(|| stale_error(id))?;
        match slot.state.on_drop(orphan) {
            OnDrop::NeedsCancel => Ok(Orphaned::NeedsCancel),
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

    fn slot_mut(&mut self, id: OpId) -> Option<&mut Slot> {
        self.slots
            .get_mut(id.index as usize)
            .filter(|slot| slot.generation == id.generation)
    }
}

fn stale_error(id: OpId) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("op {id:?} is not in flight (already completed or never submitted)"),
    )
}

#[cfg(test)]
#[path = "op_table_tests.rs"]
mod tests;
