//! The driver's direct-descriptor table: registering it, closing slots in order, installing
//! an fd for one, and sending one to another ring (see [`crate::direct`]).

use std::collections::HashMap;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use io_uring::{opcode, squeue, types};

use super::Driver;
use crate::cqe::Cqe;
use crate::direct::{DirectCloser, OwnedSlot};
use crate::metrics::Metrics;
use crate::probe::Feature;
use crate::register::FIXED_FILES_MAX;
use crate::user_data::{self, Reserved, UserData};

/// How long the driver waits for its own op's completion ([`Driver::install_direct`],
/// [`Driver::shutdown_direct`]), which the kernel posts while it submits or soon after.
const INSTALL_WAIT: Duration = Duration::from_secs(1);

/// The ops the driver waits for itself: the last number handed out, and the waits that
/// gave up before their CQE came.
#[derive(Default)]
pub(super) struct OwnOps {
    next: u32,
    given_up: HashMap<u32, OwnKind>,
}

/// What a given-up own op's late CQE holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OwnKind {
    /// A `FIXED_FD_INSTALL`: a new fd, closed.
    Install,
    /// Nothing to release.
    Other,
}

/// A ring's direct-descriptor table (registered sparse, its slots allocated by the kernel).
pub(super) struct DirectTable {
    closer: DirectCloser,
    /// Direct descriptors sent here by other rings, by the sender's sequence number, until
    /// their receiver claims them ([`Driver::poll_arrival`]).
    arrivals: HashMap<u32, Arrival>,
}

enum Arrival {
    /// Its CQE came: the slot (or the error) waits for the receiver.
    Came(i32),
    /// The receiver waits for the CQE.
    Awaited(Waker),
    /// The receiver gave up: the slot is closed when its CQE comes.
    Abandoned,
}

impl Driver {
    /// Registers a sparse file table of `slots` entries for direct descriptors (5.19+),
    /// whose slots the kernel allocates (`IORING_FILE_INDEX_ALLOC`); returns its close
    /// queue. A ring has one file table: a second registration is the kernel's `EBUSY`.
    pub fn register_direct(&mut self, slots: u32) -> io::Result<DirectCloser> {
        if slots == 0 || slots > FIXED_FILES_MAX {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a direct-descriptor table has 1..={FIXED_FILES_MAX} slots, not {slots}"),
            ));
        }
        self.ring.submitter().register_files_sparse(slots)?;
        let closer = DirectCloser::new(self.metrics.clone());
        self.direct = Some(DirectTable {
            closer: closer.clone(),
            arrivals: HashMap::new(),
        });
        Ok(closer)
    }

    /// The close queue of the direct-descriptor table, if one is registered.
    pub fn direct_closer(&self) -> Option<DirectCloser> {
        self.direct.as_ref().map(|d| d.closer.clone())
    }

    /// Closes direct descriptor `slot`: a `CLOSE` SQE behind every SQE pushed so far, so an
    /// op queued for the slot still finds its own file (see [`crate::direct`]).
    ///
    /// # Safety
    /// `slot` is a direct descriptor of this ring that the caller owns (as it would own an
    /// fd it closes), and nothing pushes an SQE naming it afterwards.
    pub unsafe fn close_direct(&mut self, slot: u32) {
        let mut sqe = opcode::Close::new(types::Fixed(slot))
            .build()
            .user_data(Reserved::Ignore.to_user_data());
        if self.features.has(Feature::CqeSkip) {
            sqe = sqe.flags(squeue::Flags::SKIP_SUCCESS);
        }
        // SAFETY: a CLOSE points at no memory; the slot is the caller's to close.
        unsafe { self.push(sqe) };
        if let Some(table) = &self.direct {
            table.closer.count_close();
        }
    }

    /// Pushes the closes of slots whose [`OwnedSlot`]s were dropped.
    pub(super) fn push_queued_closes(&mut self) {
        let Some(table) = &self.direct else { return };
        for slot in table.closer.take_queued() {
            // SAFETY: each queued slot was an `OwnedSlot`'s, dropped: nobody owns it or
            // pushes an SQE naming it any more.
            unsafe { self.close_direct(slot) };
        }
    }

    /// An fd for direct descriptor `slot` (`FIXED_FD_INSTALL`, 6.8+), close-on-exec; the
    /// slot stays open too. Waits here for the install's own CQE, which the kernel posts
    /// while it submits; CQEs that come meanwhile are kept for the next turn, undispatched,
    /// so no waker runs inside this call.
    ///
    /// # Safety
    /// `slot` is a direct descriptor of this ring that the caller owns (the fd reaches its
    /// file as the slot does).
    pub unsafe fn install_direct(&mut self, slot: u32) -> io::Result<OwnedFd> {
        let sqe = opcode::FixedFdInstall::new(types::Fixed(slot), 0).build();
        // SAFETY: an install points at no memory; the slot is the caller's.
        let fd = unsafe { self.wait_own(sqe, OwnKind::Install) }?;
        Metrics::bump(&self.metrics.direct_installs);
        // SAFETY: a successful install's result is a new fd nobody else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
    }

    /// `shutdown(2)` of direct descriptor `slot` (`IORING_OP_SHUTDOWN`, 5.11+), behind every
    /// SQE pushed so far; `how` is `SHUT_RD`, `SHUT_WR` or `SHUT_RDWR`. Waits here for its
    /// CQE, as [`install_direct`](Self::install_direct) does.
    ///
    /// # Safety
    /// `slot` is a direct descriptor of this ring that the caller owns.
    pub unsafe fn shutdown_direct(&mut self, slot: u32, how: i32) -> io::Result<()> {
        let sqe = opcode::Shutdown::new(types::Fixed(slot), how).build();
        // SAFETY: a shutdown points at no memory; the slot is the caller's.
        unsafe { self.wait_own(sqe, OwnKind::Other) }.map(drop)
    }

    /// Pushes `sqe` behind everything pushed, under a number of its own, and waits for its
    /// CQE (at most [`INSTALL_WAIT`]): its result, or its error. Other CQEs that come
    /// meanwhile are kept for the next turn, undispatched, so no waker runs inside this
    /// call.
    ///
    /// # Safety
    /// As for [`push`](Self::push): `sqe` points at no memory (its CQE may come after this
    /// call gave up), and names only what the caller owns.
    unsafe fn wait_own(&mut self, sqe: squeue::Entry, kind: OwnKind) -> io::Result<u32> {
        self.own_ops.next = self.own_ops.next.wrapping_add(1) & user_data::OWN_SEQ_MAX;
        let seq = self.own_ops.next;
        let own = user_data::own_user_data(seq);
        // SAFETY: the caller's contract.
        unsafe { self.push(sqe.user_data(own)) };
        let deadline = Instant::now() + INSTALL_WAIT;
        loop {
            self.flush_backlog();
            let entered = self.enter_for_own_cqe(deadline);
            self.copy_cqes();
            if let Some(cqe) = self.take_own(own) {
                return crate::errno::cvt(cqe.res);
            }
            if entered.is_err() || Instant::now() >= deadline {
                // Its CQE, if it comes, is dispatched as a given-up wait's (an install's
                // fd closed), never taken for a later wait's: that one has another number.
                self.own_ops.given_up.insert(seq, kind);
                entered?;
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the ring posted no completion for the driver's own op within a second",
                ));
            }
        }
    }

    /// One enter that submits what is pushed and waits (until `deadline`, at most) for a
    /// completion.
    fn enter_for_own_cqe(&mut self, deadline: Instant) -> io::Result<()> {
        let wait = deadline.saturating_duration_since(Instant::now());
        let timeout = self.has_ext_arg().then_some(wait);
        // Our SQE still in the backlog (a full SQ): submit what is in the SQ without
        // waiting, to make room for it. Otherwise wait for one completion: without EXT_ARG
        // no timeout can be given, but the own op's CQE is posted during this very submit.
        let min_complete = u32::from(self.backlog.is_empty());
        match self.enter_counted(min_complete, timeout, None) {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME | libc::EINTR | libc::EBUSY | libc::EAGAIN)
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Takes the CQE whose `user_data` is `own` out of the copied CQEs, if there.
    fn take_own(&mut self, own: u64) -> Option<Cqe> {
        let at = self.scratch.iter().position(|c| c.user_data == own)?;
        self.scratch.remove(at)
    }

    /// The direct descriptor another ring sent here with `seq` (an `IORING_OP_MSG_RING`
    /// with `IORING_MSG_SEND_FD`, 6.0+, whose `user_data` for this ring is
    /// [`arrival_user_data`](crate::user_data::arrival_user_data)`(seq)` and whose
    /// destination is a slot this ring's kernel allocates): `Ready` once its CQE came
    /// (or with the error it brought), else `Pending`, `waker` woken when it comes.
    /// `NotFound` without a table (nothing can arrive).
    pub fn poll_arrival(&mut self, seq: u32, waker: &Waker) -> Poll<io::Result<OwnedSlot>> {
        let Some(table) = &mut self.direct else {
            return Poll::Ready(Err(no_table()));
        };
        match table.arrivals.remove(&seq) {
            Some(Arrival::Came(res)) => Poll::Ready(match crate::errno::cvt(res) {
                // SAFETY: the kernel put the sent file in this slot of our table, for
                // the receiver of `seq` alone, who takes it now (counted when it came).
                Ok(slot) => Ok(unsafe { table.closer.own(slot) }),
                Err(e) => Err(e),
            }),
            Some(Arrival::Abandoned) => {
                table.arrivals.insert(seq, Arrival::Abandoned);
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "this arrival was given up",
                )))
            }
            Some(Arrival::Awaited(_)) | None => {
                table.arrivals.insert(seq, Arrival::Awaited(waker.clone()));
                Poll::Pending
            }
        }
    }

    /// The receiver of `seq` gives up: a descriptor that came is closed now, one that is
    /// still on its way when it comes.
    pub fn forget_arrival(&mut self, seq: u32) {
        let Some(table) = &mut self.direct else {
            return;
        };
        match table.arrivals.remove(&seq) {
            Some(Arrival::Came(res)) if res >= 0 => {
                // SAFETY: the kernel put the sent file in this slot for `seq`'s receiver,
                // who gives it up: ours to close (queued, pushed at the next turn).
                drop(unsafe { table.closer.own(res as u32) });
            }
            Some(Arrival::Came(_)) => {}
            Some(Arrival::Awaited(waker)) => {
                table.arrivals.insert(seq, Arrival::Abandoned);
                self.ops.defer_waker_drop(waker);
            }
            Some(Arrival::Abandoned) | None => {
                table.arrivals.insert(seq, Arrival::Abandoned);
            }
        }
    }

    /// Routes a CQE of the driver's direct-descriptor work (one the op table did not
    /// know); false if it is not one.
    #[cold]
    pub(super) fn dispatch_direct(&mut self, cqe: &Cqe) -> bool {
        match user_data::decode(cqe.user_data) {
            UserData::Arrival(seq) => self.arrived(seq, cqe.res),
            UserData::Own(seq) => {
                let given_up = self.own_ops.given_up.remove(&seq);
                // An install whose wait gave up: its fd is nobody's.
                if given_up == Some(OwnKind::Install) && cqe.res >= 0 {
                    // SAFETY: a successful install's fd, which nobody took (its waiter gave
                    // up, and numbers are not reused while a wait is given up on).
                    drop(unsafe { OwnedFd::from_raw_fd(cqe.res) });
                }
            }
            _ => return false,
        }
        true
    }

    fn arrived(&mut self, seq: u32, res: i32) {
        let Some(table) = &mut self.direct else {
            return;
        };
        if res >= 0 {
            table.closer.count_open();
        }
        match table.arrivals.remove(&seq) {
            Some(Arrival::Abandoned) => {
                if res >= 0 {
                    // SAFETY: the sent file's slot, whose receiver gave up: ours to close.
                    drop(unsafe { table.closer.own(res as u32) });
                }
            }
            Some(Arrival::Awaited(waker)) => {
                table.arrivals.insert(seq, Arrival::Came(res));
                self.ops.defer_wake(waker);
            }
            Some(Arrival::Came(earlier)) => {
                // A sequence number sent twice (it wraps after 2^31 sends): the earlier
                // descriptor nobody claimed yet is closed rather than lost in the table.
                if earlier >= 0 {
                    // SAFETY: that slot was sent here for `seq`'s receiver, who never took it.
                    drop(unsafe { table.closer.own(earlier as u32) });
                }
                table.arrivals.insert(seq, Arrival::Came(res));
            }
            None => {
                table.arrivals.insert(seq, Arrival::Came(res));
            }
        }
    }
}

fn no_table() -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        "this ring has no direct-descriptor table",
    )
}
