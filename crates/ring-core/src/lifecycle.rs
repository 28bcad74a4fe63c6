//! The life of one op, as a pure state machine: no kernel, no allocation on the single-shot path.
//!
//! ```text
//!  Submitted --poll--> Waiting(waker) --CQE--> Completed(cqe) --poll--> freed (final CQE)
//!      |                    |                        |
//!      |                    +--CQE with F_MORE--> Multishot(queue) --poll--> ... final CQE --> freed
//!      +--future dropped--> Orphaned(memory) --late CQEs: reap each--> final CQE --> freed
//! ```
//! A slot is freed only by its final CQE (one without `F_MORE`): until then the kernel may
//! still write into the op's memory, so an orphan keeps that memory alive.

use std::collections::VecDeque;
use std::fmt;
use std::task::{Poll, Waker};

use crate::cqe::Cqe;

/// What a dropped op leaves behind: its memory, and what to undo for each late CQE.
///
/// `reap` runs once per CQE that arrives after the future was dropped (several for
/// multishot ops). It releases what the kernel produced: closes an accepted or opened fd,
/// returns a provided buffer id. Dropping the box afterwards frees the op's buffers, which
/// is safe because the final CQE has arrived.
pub trait Orphan {
    /// Releases what one late CQE produced.
    fn reap(&mut self, cqe: &Cqe);
}

/// The state of one op-table slot.
pub enum Lifecycle {
    /// Pushed to the SQ (or emulated), nobody has polled yet.
    Submitted,
    /// A future is waiting; wake it on the next CQE.
    Waiting(Waker),
    /// One CQE arrived and is waiting to be polled (the common, allocation-free case).
    Completed(Cqe),
    /// More than one CQE was queued at once (multishot ops, zero-copy send notifications).
    /// Boxed, so every other slot of the op table stays small: an idle connection's recv
    /// slot is 32 bytes, not 56. An op enters this state at most once.
    Multishot(Box<CqeQueue>),
    /// The future was dropped while the kernel still owns the op.
    Orphaned(Box<dyn Orphan>),
}

/// A multishot op's CQEs not yet polled, and its consumer.
#[derive(Default)]
pub struct CqeQueue {
    /// CQEs not yet polled, oldest first.
    pub cqes: VecDeque<Cqe>,
    /// The consumer's waker, if it is waiting.
    pub waker: Option<Waker>,
}

/// What a CQE did to a slot.
#[derive(Debug, PartialEq, Eq)]
pub enum OnCqe {
    /// The CQE is queued for the op's future.
    Queued,
    /// An orphan reaped the CQE; more are coming.
    Reaped,
    /// An orphan reaped the final CQE: free the slot.
    ReapedFinal,
}

/// What dropping the future did to a slot.
#[derive(Debug, PartialEq, Eq)]
pub enum OnDrop {
    /// The op is still in the kernel: send `ASYNC_CANCEL`; the slot stays until its final CQE.
    NeedsCancel,
    /// Every CQE had arrived and was reaped: free the slot now.
    Finished,
}

impl Lifecycle {
    /// Applies one CQE. Wakes the waiting future, if any.
    pub fn on_cqe(&mut self, cqe: Cqe) -> OnCqe {
        match self {
            Lifecycle::Orphaned(orphan) => {
                orphan.reap(&cqe);
                return if cqe.is_more() {
                    OnCqe::Reaped
                } else {
                    OnCqe::ReapedFinal
                };
            }
            Lifecycle::Multishot(queue) => {
                queue.cqes.push_back(cqe);
                wake(queue.waker.take());
                return OnCqe::Queued;
            }
            _ => {}
        }
        let previous = std::mem::replace(self, Lifecycle::Completed(cqe));
        match previous {
            Lifecycle::Waiting(waker) => waker.wake(),
            Lifecycle::Completed(first) => {
                *self = Lifecycle::Multishot(Box::new(CqeQueue {
                    cqes: VecDeque::from([first, cqe]),
                    waker: None,
                }));
            }
            _ => {}
        }
        OnCqe::Queued
    }

    /// Takes the next CQE for the future, or stores its waker. A returned CQE without
    /// `F_MORE` is the last one: the caller frees the slot.
    pub fn poll_next(&mut self, waker: &Waker) -> Poll<Cqe> {
        match self {
            Lifecycle::Completed(cqe) => {
                let cqe = *cqe;
                *self = Lifecycle::Submitted;
                Poll::Ready(cqe)
            }
            Lifecycle::Multishot(queue) => match queue.cqes.pop_front() {
                Some(cqe) => Poll::Ready(cqe),
                None => {
                    store_waker(&mut queue.waker, waker);
                    Poll::Pending
                }
            },
            Lifecycle::Waiting(current) if current.will_wake(waker) => Poll::Pending,
            Lifecycle::Submitted | Lifecycle::Waiting(_) => {
                *self = Lifecycle::Waiting(waker.clone());
                Poll::Pending
            }
            Lifecycle::Orphaned(_) => unreachable!("an orphaned op has no future left to poll it"),
        }
    }

    /// The future was dropped: hand `orphan` the op's memory. CQEs that already arrived are
    /// reaped now; if the final one is among them the slot can be freed at once.
    pub fn on_drop(&mut self, mut orphan: Box<dyn Orphan>) -> OnDrop {
        let queued: Vec<Cqe> = match std::mem::replace(self, Lifecycle::Submitted) {
            Lifecycle::Completed(cqe) => vec![cqe],
            Lifecycle::Multishot(queue) => queue.cqes.into(),
            Lifecycle::Submitted | Lifecycle::Waiting(_) => Vec::new(),
            Lifecycle::Orphaned(_) => unreachable!("an op is orphaned once, by its only future"),
        };
        for cqe in &queued {
            orphan.reap(cqe);
        }
        if queued.last().is_some_and(|cqe| !cqe.is_more()) {
            return OnDrop::Finished;
        }
        *self = Lifecycle::Orphaned(orphan);
        OnDrop::NeedsCancel
    }

    /// True while the kernel may still post a CQE for this op (its final one has not
    /// arrived): such a slot's memory must not be freed.
    pub fn awaits_kernel(&self) -> bool {
        match self {
            Lifecycle::Submitted | Lifecycle::Waiting(_) | Lifecycle::Orphaned(_) => true,
            Lifecycle::Completed(cqe) => cqe.is_more(),
            Lifecycle::Multishot(queue) => queue.cqes.back().is_none_or(Cqe::is_more),
        }
    }

    /// True once the future is gone and only the kernel's late CQEs are awaited.
    pub fn is_orphaned(&self) -> bool {
        matches!(self, Lifecycle::Orphaned(_))
    }
}

fn wake(waker: Option<Waker>) {
    if let Some(waker) = waker {
        waker.wake();
    }
}

fn store_waker(slot: &mut Option<Waker>, waker: &Waker) {
    match slot {
        Some(current) if current.will_wake(waker) => {}
        _ => *slot = Some(waker.clone()),
    }
}

impl fmt::Debug for Lifecycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lifecycle::Submitted => f.write_str("Submitted"),
            Lifecycle::Waiting(_) => f.write_str("Waiting"),
            Lifecycle::Completed(cqe) => f.debug_tuple("Completed").field(cqe).finish(),
            Lifecycle::Multishot(queue) => f
                .debug_struct("Multishot")
                .field("queued", &queue.cqes.len())
                .field("waiting", &queue.waker.is_some())
                .finish(),
            Lifecycle::Orphaned(_) => f.write_str("Orphaned"),
        }
    }
}

#[cfg(test)]
#[path = "lifecycle_tests.rs"]
mod tests;
