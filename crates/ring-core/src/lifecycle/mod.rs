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
//!
//! Nothing here runs code that is not ring-core's while a slot changes: a waker to wake and
//! an orphan to drop go into [`Deferred`], which the table's owner runs once it has let go
//! of the table.

use std::any::Any;
use std::collections::VecDeque;
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::task::{Poll, Waker};

use crate::cqe::Cqe;

/// What a dropped op leaves behind: its memory, and what to undo for each late CQE.
///
/// `reap` runs once per CQE that arrives after the future was dropped (several for
/// multishot ops). It releases what the kernel produced: closes an accepted or opened fd,
/// returns a provided buffer id. Dropping the box afterwards frees the op's buffers, which
/// is safe because the final CQE has arrived.
///
/// `reap` runs inside the op table, in the middle of a CQE's dispatch: it must not run code
/// that is not its own (a waker, a destructor of a value someone else may own). A wake it
/// causes (a receive waiting for the buffer it returns) goes into `deferred`, which the
/// table's owner runs once it has let go of the table.
pub trait Orphan {
    /// Releases what one late CQE produced.
    fn reap(&mut self, cqe: &Cqe, deferred: &mut Deferred);
}

/// What applying CQEs and drops leaves to run once the caller no longer holds the op
/// table: wakers to wake and finished orphans to drop. Both may run code that is not
/// ring-core's (a waker's `wake`, the destructor of a buffer an orphan kept), and that code
/// may reach back into whatever holds the table, so it must not run inside it. The owner
/// takes this out ([`OpTable::take_deferred`](crate::op_table::OpTable::take_deferred)),
/// lets go of the table, then calls [`run`](Deferred::run).
///
/// `run` takes one item at a time: if a waker or a destructor panics, the items after it
/// stay queued for the next `run`, so none is lost and none runs twice.
///
/// A panic inside an orphan's `reap` (a bug in that orphan) is caught where it happens,
/// so the table's state stays whole (the CQE was consumed, the slot moves on as if `reap`
/// had returned), and is kept here: `run` re-raises it after the rest of its work.
#[derive(Default)]
pub struct Deferred {
    /// Wakers of ops whose CQE arrived, oldest first.
    wakers: VecDeque<Waker>,
    /// Orphans whose final CQE arrived: their memory may be freed now.
    orphans: VecDeque<Box<dyn Orphan>>,
    /// Wakers replaced by a newer one or left by a dropped future: only dropped, as a
    /// waker's destructor is code that is not ring-core's too.
    stale: VecDeque<Waker>,
    /// The first panic of an orphan's `reap` since the last `run` (later ones are dropped).
    panic: Option<Box<dyn Any + Send>>,
}

impl Deferred {
    /// Queues a wake-up.
    #[inline]
    pub fn wake(&mut self, waker: Waker) {
        self.wakers.push_back(waker);
    }

    /// Queues an orphan whose final CQE arrived, to be dropped.
    pub fn drop_later(&mut self, orphan: Box<dyn Orphan>) {
        self.orphans.push_back(orphan);
    }

    /// Queues a waker nobody will wake, to be dropped.
    pub fn drop_waker_later(&mut self, waker: Waker) {
        self.stale.push_back(waker);
    }

    /// True when nothing is queued.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.wakers.is_empty()
            && self.orphans.is_empty()
            && self.stale.is_empty()
            && self.panic.is_none()
    }

    /// Moves everything queued in `other` to the end of this queue.
    #[inline]
    pub fn append(&mut self, other: &mut Deferred) {
        // Inline, and the check first: the runtime appends after every backend call, and
        // most queue nothing (callgrind: a third of the runtime's instructions per echo
        // request once went to moving empty queues, then 5 calls per request to find them
        // empty).
        if !other.is_empty() {
            self.append_queued(other);
        }
    }

    fn append_queued(&mut self, other: &mut Deferred) {
        if self.is_empty() {
            std::mem::swap(self, other);
            return;
        }
        self.wakers.append(&mut other.wakers);
        self.orphans.append(&mut other.orphans);
        self.stale.append(&mut other.stale);
        if let Some(payload) = other.panic.take() {
            match self.panic {
                None => self.panic = Some(payload),
                // Only the first is raised; a later one's payload goes as in `reap`.
                Some(_) => discard_payload(payload),
            }
        }
    }

    /// Wakes every queued waker, then drops every queued orphan and stale waker, one at a
    /// time; then re-raises a panic an orphan's `reap` left.
    pub fn run(&mut self) {
        while let Some(waker) = self.wakers.pop_front() {
            waker.wake();
        }
        while let Some(orphan) = self.orphans.pop_front() {
            drop(orphan);
        }
        while let Some(waker) = self.stale.pop_front() {
            drop(waker);
        }
        if let Some(payload) = self.panic.take() {
            std::panic::resume_unwind(payload);
        }
    }

    /// Runs `orphan.reap`, catching a panic (see the type's docs).
    fn reap(&mut self, orphan: &mut dyn Orphan, cqe: &Cqe) {
        let caught = std::panic::catch_unwind(AssertUnwindSafe(|| orphan.reap(cqe, self)));
        if let Err(payload) = caught {
            match self.panic {
                None => self.panic = Some(payload),
                // Only the first is raised. A later one's payload is dropped here, in a
                // catch of its own: its destructor is code that is not ours, and a panic
                // from it would unwind through the op table mid-dispatch.
                Some(_) => discard_payload(payload),
            }
        }
    }
}

/// Drops a caught panic's payload, whose own destructor is code that is not ours and may
/// panic in turn (with a payload of its own, dropped the same way), never letting that
/// unwind: out of the op table mid-dispatch, through an executor, or out of a destructor
/// during another unwind, which aborts. A chain longer than `PAYLOAD_DROPS` is leaked.
fn discard_payload(mut payload: Box<dyn Any + Send>) {
    for _ in 0..PAYLOAD_DROPS {
        match std::panic::catch_unwind(AssertUnwindSafe(move || drop(payload))) {
            Ok(()) => return,
            Err(next) => payload = next,
        }
    }
    std::mem::forget(payload);
}

/// How many payloads, each panicking as it drops, `discard_payload` follows before it
/// leaks the last (a panic's payload is almost always a string; two is already contrived).
const PAYLOAD_DROPS: usize = 8;

impl fmt::Debug for Deferred {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Deferred")
            .field("wakers", &self.wakers.len())
            .field("orphans", &self.orphans.len())
            .field("stale", &self.stale.len())
            .field("panicked", &self.panic.is_some())
            .finish()
    }
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
    /// The CQE is queued for the op's future (whose waker, if it waits, is in `Deferred`).
    Queued,
    /// An orphan reaped the CQE; more are coming.
    Reaped,
    /// An orphan reaped the final CQE (the orphan is in `Deferred`, to drop): free the slot.
    ReapedFinal,
}

/// What dropping the future did to a slot.
#[derive(Debug, PartialEq, Eq)]
pub enum OnDrop {
    /// The op is still in the kernel: send `ASYNC_CANCEL`; the slot stays until its final CQE.
    NeedsCancel,
    /// Every CQE had arrived and was reaped: free the slot now (the orphan is in `Deferred`).
    Finished,
    /// The op was already orphaned (its future was dropped twice over, e.g. by a second
    /// owner of its id): the second orphan's memory is kept too, until the final CQE, and
    /// only the first one reaps. No new cancel is needed.
    AlreadyOrphaned,
}

/// A second orphan attached to an op that already had one: both memories are kept until
/// the final CQE; only the first releases what the CQEs produced (an fd is closed once).
struct KeptAlso {
    first: Box<dyn Orphan>,
    _also: Box<dyn Orphan>,
}

impl Orphan for KeptAlso {
    fn reap(&mut self, cqe: &Cqe, deferred: &mut Deferred) {
        self.first.reap(cqe, deferred);
    }
}

impl Lifecycle {
    /// Applies one CQE. The waiting future's waker, or the orphan the final CQE finished,
    /// goes into `deferred`.
    ///
    /// # Safety
    /// `cqe` must be a completion the kernel (or a backend standing in for it) posted for
    /// this op: an orphan acts on it (closes the fd in `res`, returns the buffer id in
    /// `flags`), so a made-up CQE could close an fd or return a buffer someone else owns.
    #[inline]
    pub unsafe fn on_cqe(&mut self, cqe: Cqe, deferred: &mut Deferred) -> OnCqe {
        match self {
            Lifecycle::Orphaned(orphan) => {
                deferred.reap(orphan.as_mut(), &cqe);
                if cqe.is_more() {
                    return OnCqe::Reaped;
                }
                if let Lifecycle::Orphaned(orphan) = std::mem::replace(self, Lifecycle::Submitted) {
                    deferred.drop_later(orphan);
                }
                return OnCqe::ReapedFinal;
            }
            Lifecycle::Multishot(queue) => {
                queue.cqes.push_back(cqe);
                if let Some(waker) = queue.waker.take() {
                    deferred.wake(waker);
                }
                return OnCqe::Queued;
            }
            _ => {}
        }
        let previous = std::mem::replace(self, Lifecycle::Completed(cqe));
        match previous {
            Lifecycle::Waiting(waker) => deferred.wake(waker),
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
    ///
    /// # Panics
    /// On an orphaned op: its future is gone, so nothing may poll it (the op table answers
    /// such a poll with an error before it gets here).
    ///
    /// A waker it replaces goes into `deferred` to be dropped: a waker's destructor is not
    /// ring-core's code, and must not run (or unwind) inside the table.
    #[inline]
    pub fn poll_next(&mut self, waker: &Waker, deferred: &mut Deferred) -> Poll<Cqe> {
        match self {
            Lifecycle::Completed(cqe) => {
                let cqe = *cqe;
                self.leave_plain(Lifecycle::Submitted);
                Poll::Ready(cqe)
            }
            Lifecycle::Multishot(queue) => match queue.cqes.pop_front() {
                Some(cqe) => Poll::Ready(cqe),
                None => {
                    store_waker(&mut queue.waker, waker, deferred);
                    Poll::Pending
                }
            },
            Lifecycle::Waiting(current) => {
                if !current.will_wake(waker) {
                    let old = std::mem::replace(current, waker.clone());
                    deferred.drop_waker_later(old);
                }
                Poll::Pending
            }
            Lifecycle::Submitted => {
                self.leave_plain(Lifecycle::Waiting(waker.clone()));
                Poll::Pending
            }
            Lifecycle::Orphaned(_) => panic!("an orphaned op has no future left to poll it"),
        }
    }

    /// Moves a slot in a state that owns nothing (`Submitted`, or `Completed` with its
    /// plain CQE) to `next` without running the enum's destructor: `*self = next` calls it
    /// out of line for whatever variant was there (3 calls per echo request, about 14
    /// instructions each, callgrind). Another state's waker, queue or orphan would leak
    /// here, so only those two arms call it.
    #[inline]
    fn leave_plain(&mut self, next: Lifecycle) {
        debug_assert!(self.owns_nothing(), "{self:?} owns what it holds");
        std::mem::forget(std::mem::replace(self, next));
    }

    /// True in the states that own nothing a destructor must free.
    #[inline]
    pub(crate) fn owns_nothing(&self) -> bool {
        matches!(self, Lifecycle::Submitted | Lifecycle::Completed(_))
    }

    /// The future was dropped: hand `orphan` the op's memory. CQEs that already arrived are
    /// reaped now; if the final one is among them the slot can be freed at once, and the
    /// orphan goes into `deferred` to be dropped.
    pub fn on_drop(&mut self, mut orphan: Box<dyn Orphan>, deferred: &mut Deferred) -> OnDrop {
        // The future's waker is only dropped, later: its destructor is not ring-core's
        // code, and unwinding from here would drop `orphan`, the op's memory, with the op
        // still in the kernel.
        let queued: Vec<Cqe> = match std::mem::replace(self, Lifecycle::Submitted) {
            Lifecycle::Completed(cqe) => vec![cqe],
            Lifecycle::Multishot(mut queue) => {
                if let Some(waker) = queue.waker.take() {
                    deferred.drop_waker_later(waker);
                }
                std::mem::take(&mut queue.cqes).into()
            }
            Lifecycle::Submitted => Vec::new(),
            Lifecycle::Waiting(waker) => {
                deferred.drop_waker_later(waker);
                Vec::new()
            }
            Lifecycle::Orphaned(first) => {
                *self = Lifecycle::Orphaned(Box::new(KeptAlso {
                    first,
                    _also: orphan,
                }));
                return OnDrop::AlreadyOrphaned;
            }
        };
        for cqe in &queued {
            deferred.reap(orphan.as_mut(), cqe);
        }
        if queued.last().is_some_and(|cqe| !cqe.is_more()) {
            deferred.drop_later(orphan);
            return OnDrop::Finished;
        }
        *self = Lifecycle::Orphaned(orphan);
        OnDrop::NeedsCancel
    }

    /// CQEs queued for the future and not yet polled.
    pub fn queued(&self) -> usize {
        match self {
            Lifecycle::Completed(_) => 1,
            Lifecycle::Multishot(queue) => queue.cqes.len(),
            _ => 0,
        }
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

fn store_waker(slot: &mut Option<Waker>, waker: &Waker, deferred: &mut Deferred) {
    match slot {
        Some(current) if current.will_wake(waker) => {}
        _ => {
            if let Some(old) = slot.replace(waker.clone()) {
                deferred.drop_waker_later(old);
            }
        }
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
mod tests;
