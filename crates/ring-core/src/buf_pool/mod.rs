//! Provided-buffer groups: one bgid's buffers, given to the kernel as a buffer ring (Linux
//! 5.19+) or with legacy `PROVIDE_BUFFERS` (5.7+), or kept in user space for the epoll backend;
//! and the leases through which a filled buffer is read and then returned.
//!
//! # Where a bid is
//! Every bid is in exactly one place at a time, recorded in a per-bid state array, so a double
//! hand-out is an `io::Error` and a double return is counted ([`BufGroup::bad_returns`]), never UB:
//! - `Kernel`: free. In Ring mode it is in the ring, in Legacy mode it has been provided, in
//!   User mode it is on the free list. The kernel picks bids without telling us, so in Ring and
//!   Legacy mode a bid picked by an op whose CQE is not yet reaped is still `Kernel` here.
//! - `Out`: User mode only: claimed by [`BufGroup::take`]; the epoll backend's recv is using it.
//! - `Leased`: a [`BufLease`] owns it.
//! - `Queued`: Legacy mode only: returned, waiting for [`BufGroup::take_provide_sqes`].
//!
//! A CQE's bid becomes `Leased` ([`BufGroup::lease`]) or goes straight back
//! ([`BufGroup::recycle`], for an orphaned op's late CQE). Going back means: Ring -> pushed and
//! committed at once; Legacy -> `Queued`; User -> free list.
//!
//! Ring mode publishes each returned bid at once instead of batching until the next enter: the
//! Release store is a plain store on x86 and cheap elsewhere, and a buffer returned between loop
//! turns is then already there for a retry the kernel runs on its own (poll wake-up, io-wq).
//!
//! # Memory
//! The buffers are one page-aligned allocation of `count * buf_len` bytes, zeroed so that a
//! lease never exposes uninitialized memory. Buffers and ring live as long as any handle (a
//! group clone or a lease) lives; the driver keeps one until its ring is gone, so the kernel
//! never writes into freed memory (see [`BufGroup::new_ring`]'s contract).

use std::alloc::{self, Layout};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::rc::Rc;
use std::slice;
use std::task::{Context, Poll, Waker};

use io_uring::{opcode, squeue, Submitter};

use crate::lifecycle::Deferred;

use crate::buf_ring::{page_size, BufRing, ENTRIES_MAX};

/// How a group's buffers reach whoever fills them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufMode {
    /// A registered buffer ring (`IORING_REGISTER_PBUF_RING`), Linux 5.19+.
    Ring,
    /// `IORING_OP_PROVIDE_BUFFERS`, Linux 5.7+.
    Legacy,
    /// No kernel involvement: the epoll backend picks bids itself.
    User,
}

/// Where one bid is; see the module header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BidState {
    Kernel = 0,
    Out = 1,
    Leased = 2,
    Queued = 3,
}

/// Contiguous bids that one `PROVIDE_BUFFERS` SQE hands to the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProvideRun {
    /// First buffer id of the run.
    pub bid: u16,
    /// Number of consecutive buffer ids.
    pub nbufs: u16,
}

/// A buffer group: a cheap handle, `!Send` like the ring it serves.
///
/// A group is a ring of provided buffers ([`new_ring`](Self::new_ring), 5.19+), a legacy
/// `PROVIDE_BUFFERS` group ([`new_legacy`](Self::new_legacy), 5.7+), or a user-space group
/// for the epoll backend ([`new_user`](Self::new_user)). Either way a receive's buffer id
/// becomes a [`BufLease`], and dropping the lease gives the buffer back.
///
/// # Examples
///
/// The user-space cycle (take a bid, receive into it, lease it, drop the lease); the kernel
/// modes differ only in who picks the bid:
///
/// ```
/// use ring_core::buf_pool::{BufGroup, BufMode};
///
/// let group = BufGroup::new_user(7, 4, 4096)?;
/// assert_eq!((group.bgid(), group.mode()), (7, BufMode::User));
/// assert_eq!((group.count(), group.buf_len()), (4, 4096));
///
/// let bid = group.take().expect("a free buffer");
/// let (ptr, len) = group.buf_ptr(bid).expect("bid in range");
/// // SAFETY: `bid` is taken, so this buffer is ours to write; 5 <= len.
/// unsafe { ptr.copy_from_nonoverlapping(b"bytes".as_ptr(), 5.min(len)) };
/// // SAFETY: user mode checks the bid against `take`.
/// let lease = unsafe { group.lease(bid, 5)? };
/// assert_eq!(lease.as_slice(), b"bytes");
/// assert_eq!((group.in_use(), group.available()), (1, 3));
/// drop(lease); // the buffer goes back
/// assert_eq!((group.in_use(), group.available()), (0, 4));
/// # std::io::Result::Ok(())
/// ```
#[derive(Clone)]
pub struct BufGroup(Rc<Group>);

struct Group {
    bgid: u16,
    mode: BufMode,
    count: u16,
    buf_len: u32,
    mem: BufMem,
    books: RefCell<Books>,
    enobufs: Cell<u64>,
    bad_returns: Cell<u64>,
    /// Bids given back so far (lease drops and recycles, orphans' included).
    returns: Cell<u64>,
    /// Receives waiting for a bid to come back ([`ReturnWait`]); each return wakes one.
    waiters: RefCell<Waiters>,
}

/// The queue of [`ReturnWait`]s, in the order they started waiting.
#[derive(Default)]
struct Waiters {
    /// Tickets waiting for a return, oldest first, with the waker to wake.
    queue: VecDeque<(u64, Waker)>,
    /// Tickets a return has woken whose owner has not yet seen it: a woken waiter dropped
    /// before it used its turn passes the turn on (see `ReturnWait`'s drop).
    woken: Vec<u64>,
    /// The next ticket to hand out.
    next_ticket: u64,
}

impl Waiters {
    /// Wakes the longest-waiting receive, if any, for one returned bid.
    fn wake_one(&mut self) -> Option<Waker> {
        let (ticket, waker) = self.queue.pop_front()?;
        self.woken.push(ticket);
        Some(waker)
    }
}

/// The mutable bookkeeping. Borrowed only inside this module's methods, which never call out,
/// so a borrow never overlaps another.
struct Books {
    state: Vec<BidState>,
    /// How many bids are in each state, indexed by `BidState as usize`.
    tally: [usize; 4],
    /// User mode: the `Kernel` bids, popped by `take` (LIFO: the warmest buffer goes first).
    /// Legacy mode: the `Queued` bids, in the order they were returned (entries whose bid
    /// is no longer `Queued` are skipped), so a re-provide looks at what came back and not
    /// at the whole group (a scan of 1,024 bids per returned buffer cost 8,400
    /// instructions per echo request on kernels without buffer rings, callgrind).
    free: Vec<u16>,
    /// Ring mode: the registered ring that returned bids are pushed into.
    ring: Option<BufRing>,
}

impl Books {
    fn new(count: u16, initial: BidState) -> Books {
        let mut tally = [0; 4];
        tally[initial as usize] = usize::from(count);
        let state = vec![initial; usize::from(count)];
        Books {
            state,
            tally,
            free: Vec::new(),
            ring: None,
        }
    }

    /// Moves `bid` from `from` to `to`. On failure returns where it was (`None`: no such bid).
    fn change(&mut self, bid: u16, from: BidState, to: BidState) -> Result<(), Option<BidState>> {
        let slot = self.state.get_mut(usize::from(bid)).ok_or(None)?;
        if *slot != from {
            return Err(Some(*slot));
        }
        *slot = to;
        self.tally[from as usize] -= 1;
        self.tally[to as usize] += 1;
        Ok(())
    }
}

impl BufGroup {
    /// Allocates `count` buffers of `buf_len` bytes and registers them as buffer ring `bgid`
    /// (Linux 5.19+; before that this is `ErrorKind::Unsupported`).
    ///
    /// # Safety
    /// The kernel reads the ring and writes the buffers from now on. Keep a handle to this
    /// group (a clone or a lease) alive until the kernel is done with them: until the ring
    /// `submitter` belongs to is dropped, or [`unregister`](Self::unregister) has succeeded, and
    /// in both cases every op that selected a buffer from `bgid` has completed.
    pub unsafe fn new_ring(
        submitter: &Submitter<'_>,
        bgid: u16,
        count: u16,
        buf_len: u32,
    ) -> io::Result<BufGroup> {
        let (group, addr, entries) = Self::new_ring_unregistered(bgid, count, buf_len)?;
        // SAFETY: the ring (`entries` slots at `addr`) is owned by the group and freed only
        // when the last handle drops, which the caller delays until the kernel is done with it.
        unsafe { submitter.register_buf_ring_with_flags(addr, entries, bgid, 0) }
            .map_err(register_error)?;
        Ok(group)
    }

    /// A Ring group with every bid pushed and committed, not yet registered, and its ring's
    /// address and entries.
    fn new_ring_unregistered(
        bgid: u16,
        count: u16,
        buf_len: u32,
    ) -> io::Result<(BufGroup, u64, u16)> {
        if count > ENTRIES_MAX {
            return Err(invalid_input(format!(
                "a buffer ring holds at most 32768 buffers, not {count}"
            )));
        }
        let group = Self::build(bgid, BufMode::Ring, count, buf_len, BidState::Kernel)?;
        let mut ring = BufRing::new(count.next_power_of_two())?;
        for bid in 0..count {
            ring.push(group.0.buf(bid) as u64, buf_len, bid);
        }
        ring.commit();
        let (addr, entries) = (ring.addr(), ring.entries());
        group.0.books.borrow_mut().ring = Some(ring);
        Ok((group, addr, entries))
    }

    /// A legacy `PROVIDE_BUFFERS` group: nothing reaches the kernel until the caller submits
    /// [`take_provide_sqes`](Self::take_provide_sqes).
    pub fn new_legacy(bgid: u16, count: u16, buf_len: u32) -> io::Result<BufGroup> {
        if i32::try_from(buf_len).is_err() {
            return Err(invalid_input(format!(
                "PROVIDE_BUFFERS lengths are i32; {buf_len} is too long"
            )));
        }
        let group = Self::build(bgid, BufMode::Legacy, count, buf_len, BidState::Queued)?;
        group.0.books.borrow_mut().free = (0..count).collect();
        Ok(group)
    }

    /// A user-space group for the epoll backend.
    pub fn new_user(bgid: u16, count: u16, buf_len: u32) -> io::Result<BufGroup> {
        let group = Self::build(bgid, BufMode::User, count, buf_len, BidState::Kernel)?;
        group.0.books.borrow_mut().free = (0..count).rev().collect();
        Ok(group)
    }

    fn build(
        bgid: u16,
        mode: BufMode,
        count: u16,
        buf_len: u32,
        initial: BidState,
    ) -> io::Result<BufGroup> {
        if count == 0 || buf_len == 0 {
            return Err(invalid_input(format!(
                "a buffer group needs count and buf_len >= 1, got {count} x {buf_len}"
            )));
        }
        let group = Group {
            bgid,
            mode,
            count,
            buf_len,
            mem: BufMem::new(count, buf_len)?,
            books: RefCell::new(Books::new(count, initial)),
            enobufs: Cell::new(0),
            bad_returns: Cell::new(0),
            returns: Cell::new(0),
            waiters: RefCell::new(Waiters::default()),
        };
        Ok(BufGroup(Rc::new(group)))
    }

    /// The buffer group id SQEs name to select from this group.
    pub fn bgid(&self) -> u16 {
        self.0.bgid
    }

    /// How buffers reach the kernel (ring, legacy provide, or user-space selection).
    pub fn mode(&self) -> BufMode {
        self.0.mode
    }

    /// Size of each buffer, in bytes.
    pub fn buf_len(&self) -> usize {
        self.0.buf_len as usize
    }

    /// Number of buffers in the group.
    pub fn count(&self) -> u16 {
        self.0.count
    }

    /// Bids handed out: taken (User mode) or leased. A bid the kernel picked for a CQE not yet
    /// reaped is invisible to us until `lease` or `recycle`, so it still counts as available.
    pub fn in_use(&self) -> usize {
        let tally = self.0.books.borrow().tally;
        tally[BidState::Out as usize] + tally[BidState::Leased as usize]
    }

    /// Bids free to be picked: in the ring, provided, or on the user free list.
    pub fn available(&self) -> usize {
        self.0.books.borrow().tally[BidState::Kernel as usize]
    }

    /// Legacy mode: returned bids waiting to be provided again.
    pub fn queued(&self) -> usize {
        self.0.books.borrow().tally[BidState::Queued as usize]
    }

    /// How many times ENOBUFS (no free buffer) was recorded.
    pub fn enobufs(&self) -> u64 {
        self.0.enobufs.get()
    }

    /// Counts one ENOBUFS: a CQE with `-ENOBUFS`, or `take` returning `None`.
    pub fn record_enobufs(&self) {
        self.0.enobufs.set(self.0.enobufs.get() + 1);
    }

    /// Returns that were refused because the bid was not out: a double return or a bogus bid.
    pub fn bad_returns(&self) -> u64 {
        self.0.bad_returns.get()
    }

    /// Bids given back so far: lease drops and recycles, including those of orphaned ops'
    /// late CQEs. Read it before submitting a receive, as the epoch for
    /// [`wait_return`](Self::wait_return).
    pub fn returns(&self) -> u64 {
        self.0.returns.get()
    }

    /// A wait for a bid to come back, for a receive that got ENOBUFS and was submitted when
    /// [`returns`](Self::returns) read `epoch`: see [`ReturnWait`].
    pub fn wait_return(&self, epoch: u64) -> ReturnWait {
        ReturnWait {
            group: self.clone(),
            epoch,
            ticket: None,
        }
    }

    /// Turns a completed buffer-select CQE's bid into a lease over the buffer's first `len`
    /// bytes. An out-of-range bid, a bid not out (handed out twice) or `len > buf_len` is an
    /// `InvalidData` error.
    ///
    /// # Safety
    /// In Ring and Legacy mode, `bid` comes from the CQE (`cqueue::buffer_select`) of an op
    /// that selected from this group, and each such CQE's bid is leased or recycled once. The
    /// state array catches a second lease but cannot tell a picked bid from one the kernel
    /// still holds, and the kernel could write into the latter while the lease is read. In
    /// User mode every bid is checked against `take`, so any value is safe.
    #[inline]
    pub unsafe fn lease(&self, bid: u16, len: usize) -> io::Result<BufLease> {
        if len > self.buf_len() {
            let msg = format!(
                "bgid {} bid {bid}: len {len} exceeds buf_len {}",
                self.0.bgid, self.0.buf_len
            );
            return Err(io::Error::new(io::ErrorKind::InvalidData, msg));
        }
        self.0.change(bid, self.0.picked(), BidState::Leased)?;
        Ok(BufLease {
            group: self.clone(),
            bid,
            // At most `buf_len`, a `u32`: checked above.
            len: len as u32,
        })
    }

    /// Returns a bid that will not become a lease (an orphaned op's late CQE), as a lease drop
    /// would. A bid that is not out is refused and counted in [`bad_returns`](Self::bad_returns).
    ///
    /// # Safety
    /// As for [`lease`](Self::lease): in Ring and Legacy mode `bid` comes from a CQE of this
    /// group and is returned once; otherwise the kernel could be given a bid it still holds and
    /// hand the same buffer to two ops.
    pub unsafe fn recycle(&self, bid: u16) {
        if let Some(waker) = self.0.give_back(bid, self.0.picked()) {
            waker.wake();
        }
    }

    /// [`recycle`](Self::recycle), with the wake of a receive waiting for the bid put in
    /// `deferred` instead of run here: for an orphan's release step, which runs inside the
    /// op table (see [`Orphan`](crate::lifecycle::Orphan)).
    ///
    /// # Safety
    /// As for [`recycle`](Self::recycle).
    pub unsafe fn recycle_into(&self, bid: u16, deferred: &mut Deferred) {
        if let Some(waker) = self.0.give_back(bid, self.0.picked()) {
            deferred.wake(waker);
        }
    }

    /// User mode: claims a free bid; `None` when all are out (the caller reports ENOBUFS and
    /// calls [`record_enobufs`](Self::record_enobufs)). Always `None` in Ring and Legacy mode,
    /// where the kernel picks bids.
    pub fn take(&self) -> Option<u16> {
        if self.0.mode != BufMode::User {
            return None;
        }
        let mut books = self.0.books.borrow_mut();
        let bid = books.free.pop()?;
        match books.change(bid, BidState::Kernel, BidState::Out) {
            Ok(()) => Some(bid),
            Err(state) => unreachable!("free list held bid {bid} in state {state:?}"),
        }
    }

    /// The memory of `bid` (`None` if out of range), for the epoll backend to recv into after
    /// `take`. Writing through it is sound only while the caller holds `bid` as taken.
    pub fn buf_ptr(&self, bid: u16) -> Option<(*mut u8, usize)> {
        (bid < self.0.count).then(|| (self.0.buf(bid), self.buf_len()))
    }

    /// Legacy mode: the runs of bids returned since the last call (at first, all of them),
    /// now counted as provided. Empty in other modes. Each run must be provided to the
    /// kernel, or reported with [`provide_failed`](Self::provide_failed): a run dropped
    /// instead is never handed out again (a leak of those buffers, nothing worse).
    #[must_use = "runs not provided to the kernel are lost to the group"]
    pub fn take_provide_runs(&self) -> Vec<ProvideRun> {
        let mut runs = Vec::new();
        self.take_provide_runs_into(&mut runs);
        runs
    }

    /// [`take_provide_runs`](Self::take_provide_runs) into `runs` (cleared first), whose
    /// memory the caller keeps from one call to the next.
    pub fn take_provide_runs_into(&self, runs: &mut Vec<ProvideRun>) {
        runs.clear();
        let mut books = self.0.books.borrow_mut();
        if self.0.mode != BufMode::Legacy || books.tally[BidState::Queued as usize] == 0 {
            return;
        }
        let mut queued = std::mem::take(&mut books.free);
        // In bid order, so neighbours go out as one run (one SQE), as a scan of the group
        // made them.
        queued.sort_unstable();
        for &bid in &queued {
            if books
                .change(bid, BidState::Queued, BidState::Kernel)
                .is_err()
            {
                // Not queued (any more): provided already, or never returned.
                continue;
            }
            match runs.last_mut() {
                Some(run) if run.bid + run.nbufs == bid => run.nbufs += 1,
                _ => runs.push(ProvideRun { bid, nbufs: 1 }),
            }
        }
        queued.clear();
        books.free = queued;
    }

    /// The `PROVIDE_BUFFERS` SQE for `run`. Pushing it has the contract of
    /// [`take_provide_sqes`](Self::take_provide_sqes)'s SQEs.
    pub fn provide_sqe(&self, run: ProvideRun) -> squeue::Entry {
        debug_assert!(
            u32::from(run.bid) + u32::from(run.nbufs) <= u32::from(self.0.count),
            "a run past the group's bids"
        );
        // new_legacy checked that buf_len fits an i32.
        let len = self.0.buf_len as i32;
        opcode::ProvideBuffers::new(self.0.buf(run.bid), len, run.nbufs, self.0.bgid, run.bid)
            .build()
    }

    /// Legacy mode: one `PROVIDE_BUFFERS` SQE per run from
    /// [`take_provide_runs`](Self::take_provide_runs), each tagged with `user_data`. Pushing
    /// them is unsafe: the group must outlive the ring, as for [`new_ring`](Self::new_ring).
    /// As for `take_provide_runs`, every run must be pushed or reported failed.
    #[must_use = "runs not provided to the kernel are lost to the group"]
    pub fn take_provide_sqes(&self) -> Vec<(squeue::Entry, ProvideRun)> {
        let runs = self.take_provide_runs();
        runs.into_iter()
            .map(|run| (self.provide_sqe(run), run))
            .collect()
    }

    /// Legacy mode: a `PROVIDE_BUFFERS` CQE for `nbufs` bids from `bid` failed; queue them to
    /// be provided again. Bids that were not provided are counted in `bad_returns`.
    ///
    /// # Safety
    /// The run must be one the kernel reported as not provided (a failed `PROVIDE_BUFFERS`
    /// CQE for exactly those bids). The books cannot tell a provided bid from a failed one:
    /// a bid the kernel holds, reported here, would be provided twice, and two receives
    /// would get the same buffer (the kernel writing into one a lease still reads).
    ///
    /// ```compile_fail,E0133
    /// # fn f(group: &ring_core::buf_pool::BufGroup) {
    /// group.provide_failed(0, 1); // needs `unsafe`
    /// # }
    /// ```
    pub unsafe fn provide_failed(&self, bid: u16, nbufs: u16) {
        let mut books = self.0.books.borrow_mut();
        for b in u32::from(bid)..u32::from(bid) + u32::from(nbufs) {
            let requeued = if self.0.mode == BufMode::Legacy {
                u16::try_from(b)
                    .ok()
                    .filter(|&b| books.change(b, BidState::Kernel, BidState::Queued).is_ok())
            } else {
                None
            };
            if let Some(b) = requeued {
                books.free.push(b);
            } else {
                self.0.bad_returns.set(self.0.bad_returns.get() + 1);
            }
        }
    }

    /// Ring mode: publishes staged entries. Returns already publish, so this matters only if
    /// that ever changes; the driver calls it once before each `io_uring_enter` regardless.
    pub fn commit(&self) {
        if let Some(ring) = self.0.books.borrow_mut().ring.as_mut() {
            if ring.staged() > 0 {
                ring.commit();
            }
        }
    }

    /// Ring mode: `IORING_UNREGISTER_PBUF_RING`. Other modes have nothing registered: `Ok`.
    pub fn unregister(&self, submitter: &Submitter<'_>) -> io::Result<()> {
        match self.0.mode {
            BufMode::Ring => submitter.unregister_buf_ring(self.0.bgid),
            BufMode::Legacy | BufMode::User => Ok(()),
        }
    }

    /// A woken receive will not use its return: the next waiter is woken in its place
    /// (outside the borrow, as a waker may run code that waits again).
    fn pass_turn(&self) {
        let next = self.0.waiters.borrow_mut().wake_one();
        if let Some(waker) = next {
            waker.wake();
        }
    }
}

impl Group {
    /// The state a bid is in once something picked it: `take` in User mode, the kernel otherwise.
    fn picked(&self) -> BidState {
        match self.mode {
            BufMode::User => BidState::Out,
            BufMode::Ring | BufMode::Legacy => BidState::Kernel,
        }
    }

    fn change(&self, bid: u16, from: BidState, to: BidState) -> io::Result<()> {
        self.books
            .borrow_mut()
            .change(bid, from, to)
            .map_err(|found| {
                let msg = match found {
                    None => format!(
                        "bgid {}: bid {bid} out of range (count {})",
                        self.bgid, self.count
                    ),
                    Some(s) => format!(
                        "bgid {}: bid {bid} is {s:?}, not {from:?} (handed out twice?)",
                        self.bgid
                    ),
                };
                io::Error::new(io::ErrorKind::InvalidData, msg)
            })
    }

    /// Returns `bid` from `from` to where free bids live in this mode; the waker of the
    /// receive whose turn this return is, for the caller to wake (now, or deferred).
    #[inline]
    fn give_back(&self, bid: u16, from: BidState) -> Option<Waker> {
        let to = match self.mode {
            BufMode::Legacy => BidState::Queued,
            BufMode::Ring | BufMode::User => BidState::Kernel,
        };
        let mut books = self.books.borrow_mut();
        if books.change(bid, from, to).is_err() {
            self.bad_returns.set(self.bad_returns.get() + 1);
            return None;
        }
        match self.mode {
            BufMode::Ring => {
                let ring = books
                    .ring
                    .as_mut()
                    .expect("a Ring group always has its ring");
                ring.push(self.buf(bid) as u64, self.buf_len, bid);
                ring.commit();
            }
            BufMode::User | BufMode::Legacy => books.free.push(bid),
        }
        drop(books);
        self.returns.set(self.returns.get() + 1);
        // One bid, one receive woken (by the caller, after every borrow here ended).
        self.waiters.borrow_mut().wake_one()
    }

    /// Start of `bid`'s buffer. Callers check `bid < count`; `wrapping_add` keeps the pointer
    /// arithmetic itself safe regardless.
    #[inline]
    fn buf(&self, bid: u16) -> *mut u8 {
        self.mem
            .base
            .as_ptr()
            .wrapping_add(usize::from(bid) * self.buf_len as usize)
    }
}

/// A receive's wait for a bid to come back after ENOBUFS, from [`BufGroup::wait_return`].
///
/// The free count cannot say when to retry: bids the kernel filled for CQEs not yet reaped
/// count as free while the kernel's ring is empty. So a starved receive waits for a return
/// instead, whoever makes it (a dropped lease, a failed CQE's recycle, an orphan's late
/// CQE). Waits queue in order and each returned bid wakes one of them: N starved receives
/// cost N wake-ups, not N per return. A wait dropped after it was woken but before it saw
/// it passes the wake to the next one, and so does a [`ReturnTurn`] dropped unused (the retry
/// ended without taking a buffer), so a returned bid is never left with nobody woken.
///
/// # Examples
///
/// ```
/// use std::task::{Context, Poll, Waker};
/// use ring_core::buf_pool::BufGroup;
///
/// let group = BufGroup::new_user(0, 1, 64)?;
/// let bid = group.take().expect("the one buffer");
/// let mut wait = group.wait_return(group.returns()); // a receive found none free
/// let mut cx = Context::from_waker(Waker::noop());
/// assert!(wait.poll(&mut cx).is_pending());
/// // SAFETY: a User group checks every bid.
/// unsafe { group.recycle(bid) };
/// // Retry the receive now, with the turn this return woke.
/// let Poll::Ready(Some(turn)) = wait.poll(&mut cx) else { panic!("woken") };
/// let retried = group.take(); // the retry's receive takes the returned buffer
/// assert!(retried.is_some());
/// turn.used();
/// # std::io::Result::Ok(())
/// ```
pub struct ReturnWait {
    group: BufGroup,
    /// `returns` when the receive was submitted: a return since then ends the wait at once.
    epoch: u64,
    /// The place in the group's queue, once this wait has queued.
    ticket: Option<u64>,
}

impl ReturnWait {
    /// Ready once a bid came back for this wait; otherwise `cx`'s waker is woken by the
    /// return that is this wait's turn. `Some(turn)` when a return's wake-up ended the wait:
    /// the caller holds that return's turn until its retry took a buffer (see [`ReturnTurn`]).
    /// `None` when a return had come before the wait queued: nobody was woken for it.
    pub fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Option<ReturnTurn>> {
        if let Some(done) = self.check(cx.waker()) {
            return done;
        }
        // Cloned outside the borrow: a waker's clone is code that is not ours, and may give
        // a buffer back (review AM: "already borrowed", an abort when the unwinding dropped
        // a lease). What it changes is checked again below.
        let waker = cx.waker().clone();
        let mut waiters = self.group.0.waiters.borrow_mut();
        let Some(ticket) = self.ticket else {
            if self.group.0.returns.get() != self.epoch {
                // A return came while the waker was cloned.
                drop(waiters);
                drop(waker);
                return Poll::Ready(None);
            }
            let ticket = waiters.next_ticket;
            waiters.next_ticket += 1;
            waiters.queue.push_back((ticket, waker));
            self.ticket = Some(ticket);
            return Poll::Pending;
        };
        let replaced = match waiters.queue.iter_mut().find(|(t, _)| *t == ticket) {
            Some((_, stored)) => std::mem::replace(stored, waker),
            None => waker,
        };
        // The old waker is dropped after the borrow ends: its drop is code that is not
        // ours, and may give a buffer back or drop another wait of this group.
        drop(waiters);
        drop(replaced);
        // Woken while the waker was cloned: the turn is this wait's now.
        self.check(cx.waker()).unwrap_or(Poll::Pending)
    }

    /// What `poll` can say without cloning `waker`: `Some` when the wait is over (a return
    /// came before it queued, or woke it) or its stored waker already wakes `waker`'s task.
    fn check(&mut self, waker: &Waker) -> Option<Poll<Option<ReturnTurn>>> {
        let mut waiters = self.group.0.waiters.borrow_mut();
        let Some(ticket) = self.ticket else {
            return (self.group.0.returns.get() != self.epoch).then_some(Poll::Ready(None));
        };
        if let Some(i) = waiters.woken.iter().position(|&t| t == ticket) {
            waiters.woken.swap_remove(i);
            self.ticket = None;
            self.epoch = self.group.0.returns.get();
            return Some(Poll::Ready(Some(ReturnTurn {
                group: self.group.clone(),
                used: false,
            })));
        }
        let parked = waiters
            .queue
            .iter()
            .any(|(t, stored)| *t == ticket && stored.will_wake(waker));
        parked.then_some(Poll::Pending)
    }
}

impl Drop for ReturnWait {
    fn drop(&mut self) {
        let Some(ticket) = self.ticket else {
            return;
        };
        let mut waiters = self.group.0.waiters.borrow_mut();
        if let Some(i) = waiters.queue.iter().position(|(t, _)| *t == ticket) {
            // Dropped after the borrow ends, as in `poll`.
            let removed = waiters.queue.remove(i);
            drop(waiters);
            drop(removed);
            return;
        }
        if let Some(i) = waiters.woken.iter().position(|&t| t == ticket) {
            // Woken for a bid it will not use: the next waiter gets the turn.
            waiters.woken.swap_remove(i);
            drop(waiters);
            self.group.pass_turn();
        }
    }
}

/// The turn of one returned bid, held by the receive a return woke ([`ReturnWait::poll`])
/// while it retries. The wake-up was meant for a receive that takes the bid; if the retry
/// ends without taking one (end of stream, an error, data queued earlier, the receive
/// dropped), dropping the turn unused wakes the next waiter, so the bid does not sit free
/// while other starved receives sleep. A retry that took a buffer, or found none left
/// (ENOBUFS again: another receive took it), calls [`used`](Self::used).
#[must_use = "dropping a turn unused wakes the next waiter"]
pub struct ReturnTurn {
    group: BufGroup,
    used: bool,
}

impl ReturnTurn {
    /// The retry took a buffer (or found the bid already gone): nobody else is woken.
    pub fn used(mut self) {
        self.used = true;
    }
}

impl Drop for ReturnTurn {
    fn drop(&mut self) {
        if !self.used {
            self.group.pass_turn();
        }
    }
}

impl fmt::Debug for ReturnTurn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReturnTurn")
            .field("bgid", &self.group.bgid())
            .field("used", &self.used)
            .finish()
    }
}

impl fmt::Debug for ReturnWait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReturnWait")
            .field("bgid", &self.group.bgid())
            .field("epoch", &self.epoch)
            .field("queued", &self.ticket.is_some())
            .finish()
    }
}

/// The group's buffers: one zeroed, page-aligned allocation.
struct BufMem {
    base: NonNull<u8>,
    layout: Layout,
}

impl BufMem {
    fn new(count: u16, buf_len: u32) -> io::Result<BufMem> {
        let size = usize::from(count)
            .checked_mul(buf_len as usize)
            .ok_or_else(|| invalid_input(format!("{count} x {buf_len} bytes overflows")))?;
        let layout =
            Layout::from_size_align(size, page_size()).map_err(|e| invalid_input(e.to_string()))?;
        // SAFETY: `size` is non-zero: `build` checked count and buf_len are >= 1.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let base = NonNull::new(raw).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("buffer group of {size} bytes"),
            )
        })?;
        Ok(BufMem { base, layout })
    }
}

impl Drop for BufMem {
    fn drop(&mut self) {
        // SAFETY: `base` came from `alloc_zeroed(self.layout)` and is freed only here, when the
        // last handle drops; by `new_ring`'s contract and the SQE push contract for legacy
        // buffers, the kernel no longer writes into it by then.
        unsafe { alloc::dealloc(self.base.as_ptr(), self.layout) }
    }
}

/// One filled buffer, owned until dropped; dropping returns the bid to its group.
pub struct BufLease {
    group: BufGroup,
    bid: u16,
    /// Bytes filled, at most the group's `buf_len` (a `u32`: every connection's pending
    /// write holds a lease, so its size counts).
    len: u32,
}

impl BufLease {
    /// The buffer id.
    pub fn bid(&self) -> u16 {
        self.bid
    }

    /// The group the buffer belongs to.
    pub fn bgid(&self) -> u16 {
        self.group.bgid()
    }

    /// Bytes received into the buffer.
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True when nothing was received.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The received bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the bid is Leased, so nobody else writes it (it is in no ring, not provided,
        // not on the free list); the lease holds the group, so the memory is alive; `len <=
        // buf_len` and `bid < count` were checked by `lease`, so the range is in bounds.
        unsafe { slice::from_raw_parts(self.group.0.buf(self.bid), self.len()) }
    }

    /// The received bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`; `&mut self` makes this the only view of the bytes.
        unsafe { slice::from_raw_parts_mut(self.group.0.buf(self.bid), self.len()) }
    }
}

impl Deref for BufLease {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl DerefMut for BufLease {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl BufLease {
    /// Gives the buffer back, putting the wake of a receive waiting for it in `deferred`
    /// (for code that runs inside the op table, as an orphan's release step does).
    pub fn release_into(self, deferred: &mut Deferred) {
        let this = std::mem::ManuallyDrop::new(self);
        if let Some(waker) = this.group.0.give_back(this.bid, BidState::Leased) {
            deferred.wake(waker);
        }
        // SAFETY: `this` is never used or dropped again; its group handle is moved out
        // exactly once, so the group's refcount stays right.
        drop(unsafe { std::ptr::read(&this.group) });
    }
}

impl Drop for BufLease {
    #[inline]
    fn drop(&mut self) {
        if let Some(waker) = self.group.0.give_back(self.bid, BidState::Leased) {
            waker.wake();
        }
    }
}

impl fmt::Debug for BufLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufLease")
            .field("bgid", &self.group.bgid())
            .field("bid", &self.bid)
            .field("len", &self.len)
            .finish()
    }
}

impl fmt::Debug for BufGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufGroup")
            .field("bgid", &self.0.bgid)
            .field("mode", &self.0.mode)
            .field("count", &self.0.count)
            .field("buf_len", &self.0.buf_len)
            .field("in_use", &self.in_use())
            .field("available", &self.available())
            .field("queued", &self.queued())
            .field("enobufs", &self.enobufs())
            .finish()
    }
}

fn invalid_input(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Kernels before 5.19 reject the unknown register opcode with EINVAL.
fn register_error(err: io::Error) -> io::Error {
    match err.raw_os_error() {
        Some(libc::EINVAL) => io::Error::new(
            io::ErrorKind::Unsupported,
            "IORING_REGISTER_PBUF_RING returned EINVAL: provided buffer rings need Linux 5.19+",
        ),
        _ => err,
    }
}

#[cfg(test)]
mod tests;
