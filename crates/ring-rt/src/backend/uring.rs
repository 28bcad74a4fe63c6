//! The io_uring backend: a ring-core driver plus the worker's wake-up poll and buffer group.
//!
//! An op becomes an SQE. Two kinds go another way: an op whose opcode this kernel (or the
//! feature profile) lacks runs its epoll emulation inline on the loop thread (only
//! metadata-sized file ops can: the runtime refuses io_uring without the 5.6 read, write
//! and open set), and a readiness-only op (a receive into a group selected in user space,
//! before 5.7; a signalfd's read; a FIFO's, pipe's or terminal's read or write) tries its
//! syscall and on `EAGAIN` waits with `POLL_ADD`, as on epoll.

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use io_uring::{opcode, squeue, types};
use ring_core::buf_pool::BufGroup;
use ring_core::cqe::Cqe;
use ring_core::direct::{DirectCloser, OwnedSlot};
use ring_core::driver::{Batch, Driver, DriverConfig, Wait};
use ring_core::lifecycle::{Deferred, Orphan};
use ring_core::metrics::Metrics;
use ring_core::probe::{Feature, Features};
use ring_core::register_buf::{FixedBuf as FixedChunk, RegisteredBufs};
use ring_core::release::Keep;
use ring_core::setup::SetupError;
use ring_core::user_data::{OpId, Reserved};

use super::direct::{slot_of, sqe_on};
use super::linked_fds::LinkedFds;
use super::{
    BackendKind, Capability, Emulation, FixedBuffers, FixedPool, Mechanism, Operation, ParkKey,
    PollTick, ReadyWait, RecvBuffers, RecvPool, Start, Token,
};

pub(crate) struct UringBackend {
    driver: Driver,
    /// The eventfd other threads write to wake this worker.
    wake_fd: RawFd,
    /// The armed poll on `wake_fd`, if any.
    wake_op: Option<OpId>,
    /// The worker's shared receive group (see `Backend::recv_group`).
    recv_pool: RecvPool,
    /// The worker's registered buffers (see `Mechanism::fixed_buffers`).
    fixed_pool: FixedPool,
    /// Called when the eventfd fired, to reset it.
    on_wake: Box<dyn Fn()>,
    /// The longest a blocking wait may linger to gather a batch; zero for never.
    batch_wait: Duration,
    /// Op CQEs the last turn dispatched: the batch the next wait asks for.
    last_batch: usize,
    /// The rings this worker's pushed MSG_RING wakes name, kept open until the kernel
    /// took those SQEs (see `send_wake`).
    wake_targets: Vec<Arc<std::os::fd::OwnedFd>>,
    /// Fds that kernel-linked ops name, and closes waiting for those ops.
    linked_fds: LinkedFds,
}

/// How long `forget_fd` waits for the kernel to take the SQEs pushed before an fd leaves.
const FORGET_WAIT: Duration = Duration::from_secs(1);

/// The most CQEs one batched wait asks for: past this, a batch saves no more enters worth
/// the latency.
pub(crate) const BATCH_MAX: usize = 64;

/// How many `POLL_ADD`s in a row may fail at once (within [`POLL_QUICK`] of being armed)
/// before a readiness op takes the failure as its result (see
/// `UringBackend::poll_readiness`): a fd io_uring cannot poll at all fails after this many
/// round trips, microseconds, instead of spinning; a terminal fails one poll per settings
/// change, and only this many changes in a row each less than `POLL_QUICK` apart, with
/// nothing to read between, would fail its read.
const POLL_RETRIES: u8 = 32;

/// How many events a readiness op's multishot poll may queue unpolled before the driver
/// cancels it (see `UringBackend::poll_readiness`).
const POLL_QUEUE_MAX: u16 = 16;

/// A poll that fails sooner than this after being armed failed "at once" (16 ticks of
/// 64 µs: 1 ms); one that fails later was woken by something that happened to its fd.
const POLL_QUICK: u16 = 16;

/// For a poll that just failed, having been armed as `wait`: how many failed at once in a
/// row, this one included if it did.
fn quick_failures(wait: ReadyWait) -> u8 {
    match wait {
        ReadyWait::PollAgain(_, quick, armed) if armed.until(PollTick::now()) < POLL_QUICK => {
            quick + 1
        }
        // The first failure (its first arm is not timed), or one after a wait.
        _ => 1,
    }
}

impl UringBackend {
    pub(crate) fn new(
        config: &DriverConfig,
        wake_fd: RawFd,
        on_wake: Box<dyn Fn()>,
        recv_buffers: RecvBuffers,
        fixed_buffers: FixedBuffers,
    ) -> Result<UringBackend, SetupError> {
        Ok(UringBackend {
            driver: Driver::new(config)?,
            wake_fd,
            wake_op: None,
            recv_pool: RecvPool::new(recv_buffers),
            fixed_pool: FixedPool::new(fixed_buffers),
            on_wake,
            batch_wait: Duration::ZERO,
            last_batch: 0,
            wake_targets: Vec::new(),
            linked_fds: LinkedFds::new(),
        })
    }

    /// Gives the ring a table of up to `slots` direct descriptors, which accepts then fill
    /// (see `Builder::direct_descriptors`). Only where every direct-descriptor path works:
    /// multishot accept into the table (5.19), `FIXED_FD_INSTALL` for an fd on demand
    /// (6.8), `IORING_OP_SHUTDOWN` (5.11); elsewhere, or if the kernel refuses the table,
    /// accepts keep returning fds, and the reason is logged. The table is cut to the
    /// process's open-file limit, which the kernel applies to it.
    pub(crate) fn with_direct_descriptors(mut self, slots: u32) -> UringBackend {
        if slots == 0 {
            return self;
        }
        let features = self.driver.features();
        let missing = if !features.has(Feature::MultishotAccept) {
            Some("multishot accept (Linux 5.19+)")
        } else if !features.has_opcode(opcode::FixedFdInstall::CODE) {
            Some("IORING_OP_FIXED_FD_INSTALL (Linux 6.8+)")
        } else if !features.has_opcode(opcode::Shutdown::CODE) {
            Some("IORING_OP_SHUTDOWN (Linux 5.11+)")
        } else {
            None
        };
        if let Some(missing) = missing {
            tracing::info!(target: "ring_rt", slots, missing, "direct descriptors not used: the kernel (or feature profile) lacks what they need");
            return self;
        }
        let slots = slots.min(crate::sys::open_file_limit());
        match self.driver.register_direct(slots) {
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(target: "ring_rt", slots, error = %err, "direct descriptors not used: the ring refused a file table")
            }
        }
        self
    }

    /// Turns batched waits on (see `Builder::batch_wait`); a no-op before 6.12.
    pub(crate) fn with_batch_wait(mut self, wait: Duration) -> UringBackend {
        // `set_batch(None)` changes nothing; it says whether the kernel can batch.
        if self.driver.set_batch(None) {
            self.batch_wait = wait;
        }
        self
    }

    /// Caps the kernel's bounded io-wq workers for this worker's ring at `threads`: the
    /// threads that run file ops which cannot complete inline (fsync, reads that miss the
    /// cache). io-wq belongs to the thread, so the cap covers every ring this worker thread
    /// creates. Before 5.15 the kernel has no such knob and keeps its own default,
    /// min(SQ entries, 4 x CPUs); a cap the user asked for then logs a warning.
    pub(crate) fn with_blocking_threads(self, threads: usize, is_explicit: bool) -> UringBackend {
        let bounded = u32::try_from(threads.max(1)).unwrap_or(u32::MAX);
        // [bounded, unbounded]; 0 leaves the unbounded (socket, pipe) count as it is.
        let mut counts = [bounded, 0];
        match self.driver.register_iowq_max_workers(&mut counts) {
            Ok(()) => {}
            Err(err) if is_explicit => {
                tracing::warn!(target: "ring_rt", threads, error = %err, "io-wq worker cap not set (needs Linux 5.15+); the kernel's default applies")
            }
            Err(err) => {
                tracing::debug!(target: "ring_rt", threads, error = %err, "io-wq worker cap not set (needs Linux 5.15+)")
            }
        }
        self
    }

    /// A readiness-only op: tries the syscall, and on EAGAIN waits for `fd` with a
    /// one-shot `POLL_ADD` and tries again. Trying first, as epoll does, is not only one
    /// poll fewer on a ready fd: a FIFO no writer has opened yet reads empty (EOF) but
    /// reports neither POLLIN nor POLLHUP, so a poll first would wait for a writer. A
    /// wait-only op has no syscall: its `POLL_ADD` is the op.
    ///
    /// A one-shot `POLL_ADD` can fail where the fd is fine and epoll would go on waiting:
    /// woken with nothing ready, the kernel issues the poll again on the same request,
    /// which finds the second wait entry of a file polled on two queues (a terminal: its
    /// read and write queues) still there and fails with EINVAL, or, racing another
    /// wake-up, marks it cancelled (ECANCELED). A terminal's settings change is such a
    /// wake-up, every time (reviews CW, CX, CY). So a failed poll lets the syscall answer
    /// (a closed or hung-up fd answers there) and is armed again as a multishot poll where
    /// the kernel has one (5.13): it stays armed through such wake-ups, posting only
    /// readiness, and the op waits on it until its syscall is done (then it is orphaned,
    /// which cancels it). Without one, a one-shot poll is armed again.
    ///
    /// Only [`POLL_RETRIES`] failures in a row that each came at once are the op's result,
    /// so a fd io_uring cannot poll at all fails rather than spins. An ECANCELED is the
    /// kernel's (or the driver's, for a multishot poll whose events queued unpolled past
    /// its bound) and counts like any failure: the runtime never cancels a readiness poll
    /// it will poll again (a dropped, timed-out or recalled op, or one polled outside its
    /// runtime, orphans its poll; one polled after its runtime shut down is refused by
    /// `Core::poll` before it gets here, review DB).
    fn poll_readiness(
        &mut self,
        op: &mut dyn Operation,
        fd: RawFd,
        events: u32,
        wait: &mut ReadyWait,
        waker: &Waker,
    ) -> Poll<io::Result<Cqe>> {
        loop {
            let mut failed = None;
            if let ReadyWait::Poll(id) | ReadyWait::PollAgain(id, ..) = *wait {
                let cqe = std::task::ready!(self.driver.poll_op(id, waker))?;
                if cqe.is_more() {
                    // A multishot poll's event: it stays armed, and a failure of it later
                    // starts the count again.
                    *wait = ReadyWait::PollAgain(id, 0, PollTick::now());
                    if op.is_wait_only() {
                        self.end_poll(wait);
                        return Poll::Ready(Ok(Cqe::new(cqe.user_data, cqe.res, 0)));
                    }
                } else {
                    let before = std::mem::replace(wait, ReadyWait::Idle);
                    if cqe.res < 0 {
                        let quick = quick_failures(before);
                        if quick >= POLL_RETRIES {
                            return Poll::Ready(Ok(cqe));
                        }
                        failed = Some(quick);
                    } else if op.is_wait_only() {
                        return Poll::Ready(Ok(cqe));
                    }
                }
            }
            if !op.is_wait_only() {
                let cqe = op.try_syscall();
                if cqe.res != -libc::EAGAIN && cqe.res != -libc::EINTR {
                    self.end_poll(wait);
                    return Poll::Ready(Ok(cqe));
                }
            }
            if *wait != ReadyWait::Idle {
                // The multishot poll waits on: its next event, or the waker parked with it.
                continue;
            }
            let multishot = failed.is_some() && self.driver.features().has(Feature::MultishotPoll);
            let sqe = sqe_on!(fd, |t| opcode::PollAdd::new(t, events)
                .multi(multishot)
                .build());
            // SAFETY: a POLL_ADD points at no memory.
            let id = unsafe { self.driver.submit_op(sqe)? };
            if multishot {
                // Events queued unpolled past this many cancel it (it is armed again when
                // the op next fails to make progress): a busy terminal cannot grow the
                // queue of a task that is not polled.
                self.driver.bound_queue(id, POLL_QUEUE_MAX);
            }
            *wait = match failed {
                None => ReadyWait::Poll(id),
                Some(quick) => ReadyWait::PollAgain(id, quick, PollTick::now()),
            };
        }
    }

    /// Lets a readiness op's poll go once the op is done: a multishot poll still armed
    /// is orphaned, which cancels it. A one-shot poll has ended by then (`wait` is idle).
    fn end_poll(&mut self, wait: &mut ReadyWait) {
        if let ReadyWait::Poll(id) | ReadyWait::PollAgain(id, ..) =
            std::mem::replace(wait, ReadyWait::Idle)
        {
            // SAFETY: a POLL_ADD points at no memory; `wait` was its only owner and names
            // it no more.
            unsafe { self.driver.orphan(id, Box::new(Keep(()))) };
        }
    }

    /// A busy ring waits for as many CQEs as its last turn brought, so steady load costs
    /// one enter per batch rather than one per CQE; one CQE per turn waits as usual.
    fn set_batch(&mut self, wait: Wait) {
        if self.batch_wait.is_zero() || wait == Wait::No {
            return;
        }
        let want = self.last_batch.min(BATCH_MAX) as u32;
        let batch = (want > 1).then_some(Batch {
            want,
            min_wait: self.batch_wait,
        });
        self.driver.set_batch(batch);
    }

    /// Lets go of the MSG_RING targets once the kernel has taken every pushed SQE (each
    /// MSG_RING then holds its own reference to its target's file).
    fn release_wake_targets(&mut self) {
        if !self.wake_targets.is_empty() && self.driver.pending_sqes() == 0 {
            self.wake_targets.clear();
        }
    }

    /// Closes the fds whose links have all ended.
    fn close_unlinked(&mut self) {
        for fd in self.linked_fds.take_closable(self.driver.ops()) {
            self.close(fd);
        }
    }

    /// Submits what was pushed; whether nothing is left waiting. With nothing pushed, no
    /// syscall.
    fn submitted_all(&mut self) -> bool {
        self.driver.submit().is_ok() && self.driver.pending_sqes() == 0
    }
}

impl Mechanism for UringBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Uring
    }

    fn features(&self) -> Option<&Features> {
        Some(self.driver.features())
    }

    fn supports(&self, cap: Capability) -> bool {
        let feature = match cap {
            Capability::MultishotAccept => Feature::MultishotAccept,
            Capability::MultishotRecv => Feature::MultishotRecv,
            Capability::SendZc => Feature::SendZc,
            Capability::BatchedSends => return true,
        };
        self.driver.features().has(feature)
    }

    fn metrics(&self) -> &Arc<Metrics> {
        self.driver.metrics()
    }

    fn ring_sizes(&self) -> (u32, u32) {
        self.driver.ring_sizes()
    }

    fn poll_id(&mut self, id: OpId, waker: &Waker) -> Poll<io::Result<Cqe>> {
        self.driver.poll_op(id, waker)
    }

    fn orphan(&mut self, id: OpId, orphan: Box<dyn Orphan>) {
        // SAFETY: `Mechanism::orphan`'s contract: every caller is the owner of `id` (an op
        // future, a stream, a chain or the worker's parked drops) giving up the op with the
        // orphan that owns its memory.
        unsafe { self.driver.orphan(id, orphan) }
    }

    fn cancel(&mut self, id: OpId) {
        self.driver.cancel(id);
    }

    fn submit(&mut self) -> io::Result<()> {
        let out = self.driver.submit();
        self.release_wake_targets();
        out
    }

    /// Blocking: the kernel waits for readiness itself. (A readiness-only op's syscall
    /// passes `MSG_DONTWAIT`, so it never blocks the loop on such a socket.)
    fn adopt_socket(&self, fd: RawFd) -> io::Result<()> {
        super::set_nonblocking(fd, false)
    }

    /// Never: a READ SQE tries the page cache inline by itself before punting.
    fn reads_inline(&self, _fd: RawFd) -> bool {
        false
    }

    /// The ring keeps no per-fd state (each op names its fd), but an SQE still waiting to
    /// be submitted may name `fd`, and the kernel looks the number up only when it takes the
    /// SQE: by then the number may belong to whatever the fd's new owner closed it for (a
    /// dropped write went out on an unrelated socket). So what is pushed is submitted now;
    /// with SQPOLL, or an enter the kernel refuses for a moment, this waits (bounded) until
    /// the kernel has taken it all. A kernel-linked op naming `fd` and not yet issued
    /// cannot be hurried: false, and the caller hands out a duplicate and closes `fd`.
    fn forget_fd(&mut self, fd: RawFd) -> bool {
        if self.linked_fds.names(fd, self.driver.ops()) {
            return false;
        }
        let deadline = Instant::now() + FORGET_WAIT;
        while !self.submitted_all() {
            if Instant::now() >= deadline {
                tracing::error!(
                    target: "ring_rt",
                    fd,
                    "an fd left the runtime while the kernel had not taken SQEs pushed \
                     before: one of them may reach whatever reuses the fd number"
                );
                return true;
            }
            std::thread::yield_now();
        }
        true
    }

    /// Nothing to do: an op in the kernel sees the shutdown and new data itself; nothing
    /// is cached.
    fn forget_drained(&mut self, _fd: RawFd) {}

    /// Nothing parked here: a readiness wait is a `POLL_ADD` in the op table, whose
    /// waker goes with it when it is orphaned.
    fn readiness_dropped(&mut self, _fd: RawFd, _events: u32, _key: ParkKey) {}

    /// The receive's op is cancelled; it completes with `ECANCELED` (or with what it got
    /// first) and finds the bytes then. Without an id there is nothing in the kernel to
    /// call back.
    fn recall_receive(&mut self, _fd: RawFd, id: Option<OpId>) {
        if let Some(id) = id {
            self.driver.cancel(id);
        }
    }

    fn is_live(&self, id: OpId) -> bool {
        self.driver.ops().contains(id)
    }

    fn links_name(&mut self, fd: RawFd) -> bool {
        self.linked_fds.names(fd, self.driver.ops())
    }

    fn hand_out_linked(&mut self, fd: RawFd) -> Option<std::os::fd::OwnedFd> {
        self.linked_fds.hand_out_as_placeholder(fd)
    }

    fn recv_group(&mut self) -> io::Result<BufGroup> {
        let driver = &mut self.driver;
        self.recv_pool
            .get_or_create(|count, len| recv_group(driver, count, len))
    }

    fn recv_buffers_in_use(&self) -> usize {
        self.recv_pool.in_use()
    }

    /// Registered with the ring (`IORING_REGISTER_BUFFERS`); where the kernel refuses (the
    /// pinned pages over `RLIMIT_MEMLOCK`, a seccomp filter), the same pool unregistered,
    /// with the reason logged: reads and writes of it then pin as plain ones do.
    fn fixed_buffers(&mut self) -> io::Result<(RegisteredBufs, bool)> {
        let driver = &mut self.driver;
        self.fixed_pool
            .get_or_create(|count, len| match driver.register_buffers(count, len) {
                Ok(pool) => Ok((pool, true)),
                Err(e) if e.kind() == io::ErrorKind::InvalidInput => Err(e),
                Err(e) => {
                    tracing::warn!(target: "ring_rt", count, len, error = %e, "fixed buffers not registered with the ring; they work as plain memory");
                    Ok((RegisteredBufs::unregistered(count, len)?, false))
                }
            })
    }

    fn fixed_index(&self, buf: &FixedChunk) -> Option<u16> {
        self.fixed_pool.index_of(buf)
    }

    /// A duplicate of the ring fd, for MSG_RING (5.18+).
    fn wake_target(&self) -> Option<std::os::fd::OwnedFd> {
        self.driver.msg_ring_target().ok()
    }

    /// Pushed, and submitted with this ring's next enter, which the loop makes right after
    /// the task that woke the other worker (so a wake costs no syscall of its own). Submitting
    /// at once measured as fast as the eventfd on a ping-pong but cost 2.3x the CPU per
    /// message in a stream (BENCHMARKS.md, cross_worker).
    fn send_wake(&mut self, target: &Arc<std::os::fd::OwnedFd>) -> bool {
        // The kernel took every SQE pushed so far (a full SQ inside a long task submits
        // without a turn): the rings named by earlier wakes may close. Else a task that
        // never yields kept one `Arc` per wake it sent (review AD).
        if self.driver.pending_sqes() == 0 {
            self.wake_targets.clear();
        }
        let sent = self
            .driver
            .msg_ring_wake(std::os::fd::AsFd::as_fd(&**target));
        if sent {
            // The kernel looks the number up when it takes the SQE: kept open till then.
            self.wake_targets.push(target.clone());
        }
        sent
    }

    fn direct_closer(&self) -> Option<DirectCloser> {
        self.driver.direct_closer()
    }

    fn install_direct(&mut self, slot: u32) -> io::Result<std::os::fd::OwnedFd> {
        self.driver.direct_closer().ok_or_else(super::no_direct)?;
        // SAFETY: `Mechanism::install_direct`'s contract: the caller owns the slot.
        unsafe { self.driver.install_direct(slot) }
    }

    fn shutdown_direct(&mut self, slot: u32, how: std::net::Shutdown) -> io::Result<()> {
        self.driver.direct_closer().ok_or_else(super::no_direct)?;
        let how = match how {
            std::net::Shutdown::Read => libc::SHUT_RD,
            std::net::Shutdown::Write => libc::SHUT_WR,
            std::net::Shutdown::Both => libc::SHUT_RDWR,
        };
        // SAFETY: `Mechanism::shutdown_direct`'s contract: the caller owns the slot.
        unsafe { self.driver.shutdown_direct(slot, how) }
    }

    fn poll_arrival(&mut self, seq: u32, waker: &Waker) -> Poll<io::Result<OwnedSlot>> {
        self.driver.poll_arrival(seq, waker)
    }

    fn forget_arrival(&mut self, seq: u32) {
        self.driver.forget_arrival(seq);
    }

    /// Starts `op`: its SQE is pushed (submitted by the next turn), its slot already
    /// waiting with `waker` (no CQE can come before the SQE is submitted).
    fn start(&mut self, op: &mut dyn Operation, waker: &Waker) -> io::Result<Start> {
        if op.is_readiness_only() {
            let Emulation::Readiness { fd, events } = op.emulate() else {
                unreachable!("a readiness-only op is emulated by readiness")
            };
            return Ok(Start::Token(Token::Ready {
                fd,
                events,
                wait: ReadyWait::Idle,
            }));
        }
        if let Some(code) = op.opcode() {
            if !self.driver.features().has_opcode(code) {
                return Ok(Start::Done(run_inline(op)));
            }
        }
        let sqe = op.sqe();
        // SAFETY: `Operation`'s contract: the SQE points only at memory the op owns (on the
        // heap or 'static) and at its fd; the op's future keeps the op until the final CQE,
        // and its orphan (`into_orphan`) after that.
        let id = unsafe { self.driver.submit_op_waiting(sqe, waker)? };
        if op.submits_at_once() {
            // Already pushed: a failed enter leaves it for the next turn to submit.
            let _ = self.driver.submit();
        }
        Ok(Start::Waiting(Token::InFlight(id)))
    }

    /// Pushes a chain of ops as one linked group, if every op can be linked in the kernel.
    fn start_chain(&mut self, ops: &mut [&mut dyn Operation]) -> Option<io::Result<Vec<OpId>>> {
        // A chain must go into the SQ in one piece: one longer than the SQ runs op by op
        // (as on epoll), with the same results.
        let fits = ops.len() <= self.driver.ring_sizes().0 as usize;
        let features = self.driver.features();
        // A direct descriptor is closed behind the SQEs pushed before its close, which a
        // link not yet issued would outrun (see `ring_core::direct`): such a chain runs op
        // by op.
        let linkable = ops.iter().all(|op| {
            !op.is_readiness_only()
                && op.opcode().is_none_or(|code| features.has_opcode(code))
                && op.fd().and_then(slot_of).is_none()
        });
        if !fits || !linkable {
            return None;
        }
        let at_once = ops.iter().any(|op| op.submits_at_once());
        let sqes: Vec<squeue::Entry> = ops.iter_mut().map(|op| op.sqe()).collect();
        // SAFETY: as in `start`, for every op of the chain; the chain's future keeps them.
        let pushed = unsafe { self.driver.submit_chain(sqes) };
        if let Ok(ids) = &pushed {
            // The links after the head find their fds when issued: keep those numbers.
            let links = ops.iter().zip(ids).skip(1);
            let named = links.filter_map(|(op, &id)| op.fd().map(|fd| (fd, id)));
            self.linked_fds.note(named, self.driver.ops());
        }
        if at_once && pushed.is_ok() {
            let _ = self.driver.submit();
        }
        Some(pushed)
    }

    /// Pushes a multishot op whose unpolled CQEs are bounded by `queue_max` (0: unbounded).
    fn start_multishot(&mut self, op: &mut dyn Operation, queue_max: u16) -> io::Result<OpId> {
        let sqe = op.sqe();
        // SAFETY: as in `start`.
        let id = unsafe { self.driver.submit_op(sqe)? };
        self.driver.bound_queue(id, queue_max);
        Ok(id)
    }

    /// Polls an op started by [`start`](Self::start).
    fn poll(
        &mut self,
        token: &mut Token,
        op: &mut dyn Operation,
        waker: &Waker,
    ) -> Poll<io::Result<Cqe>> {
        match token {
            Token::InFlight(id) => self.driver.poll_op(*id, waker),
            Token::Ready { fd, events, wait } => self.poll_readiness(op, *fd, *events, wait, waker),
        }
    }

    fn turn(&mut self, wait: Wait) -> io::Result<()> {
        if self.wake_op.is_none() {
            let poll = opcode::PollAdd::new(types::Fd(self.wake_fd), libc::POLLIN as u32);
            // SAFETY: a POLL_ADD points at no memory; the eventfd lives as long as the
            // worker, which drops this backend first.
            self.wake_op = Some(unsafe { self.driver.submit_op(poll.build())? });
        }
        self.set_batch(wait);
        let turned = self.driver.turn(wait);
        self.release_wake_targets();
        self.close_unlinked();
        self.last_batch = turned?;
        if let Some(id) = self.wake_op {
            if self.driver.poll_op(id, Waker::noop()).is_ready() {
                self.wake_op = None;
                (self.on_wake)();
            }
        }
        Ok(())
    }

    /// Closes `fd` now, as epoll's backend does: a `CLOSE` SQE ran whenever the kernel got
    /// to it, unordered against other ops, so a write to a socket's just-dropped peer still
    /// succeeded on io_uring (EPIPE on epoll). Only once no pushed SQE waits to be
    /// submitted (one may name `fd`, and the kernel looks the number up at submission):
    /// otherwise, and with SQPOLL (whose thread takes SQEs when it likes), a `CLOSE` SQE
    /// queued behind them, so no queued op can find the number reused.
    ///
    /// A kernel-linked op naming `fd` and not yet issued keeps the number taken until it
    /// ends, by a placeholder that releases the file now (see `LinkedFds`).
    fn close(&mut self, fd: RawFd) {
        if let Some(slot) = slot_of(fd) {
            // SAFETY: the caller hands over its direct descriptor to be closed; its close
            // goes behind every SQE pushed, and nothing names the slot after it.
            unsafe { self.driver.close_direct(slot) };
            return;
        }
        if self.linked_fds.names(fd, self.driver.ops()) {
            self.linked_fds.close_later(fd);
            return;
        }
        let sqpoll = self.driver.setup_flags().sqpoll;
        if !sqpoll && self.submitted_all() {
            // SAFETY: the caller hands its fd over to be closed; no unsubmitted SQE names
            // it, and submitted ops hold their own reference to the file.
            unsafe { ring_core::release::close_quietly(fd) };
            return;
        }
        let sqe = opcode::Close::new(types::Fd(fd))
            .build()
            .user_data(Reserved::Ignore.to_user_data());
        // SAFETY: a CLOSE points at no memory; the fd is the caller's to close.
        unsafe { self.driver.push(sqe) };
    }

    /// Moves the wakers and finished orphans the driver deferred into `out`.
    fn take_deferred(&mut self, out: &mut Deferred) {
        self.driver.take_deferred(out);
    }

    /// Shutdown: cancels every op and waits until `deadline` for their final CQEs.
    fn drain(&mut self, deadline: Instant) -> Vec<OpId> {
        if let Some(id) = self.wake_op.take() {
            // SAFETY: the wake poll is this backend's own op; it points at no memory.
            unsafe { self.driver.orphan(id, Box::new(Keep(()))) };
        }
        let ops = self.driver.ops();
        let in_flight = ops
            .ids()
            .into_iter()
            .filter(|&id| ops.awaits_kernel_for(id));
        let in_flight = in_flight.collect();
        self.driver.drain(deadline);
        self.close_unlinked();
        let left = self.linked_fds.take_all_closes();
        if !left.is_empty() {
            // A link still in the kernel past the deadline may yet be issued: its fd
            // stays open (leaked) rather than its number reaching someone else.
            tracing::warn!(target: "ring_rt", fds = ?left, "fds left open at shutdown: kernel-linked ops naming them never ended");
        }
        in_flight
    }
}

/// Runs `op`'s epoll emulation here on the loop thread: for an op whose opcode this
/// kernel lacks.
fn run_inline(op: &mut dyn Operation) -> Cqe {
    match op.emulate() {
        Emulation::Blocking(job) => Cqe::new(0, job(), 0),
        Emulation::Readiness { .. } => op.try_syscall(),
    }
}

/// Registers a worker's receive group on its ring: a buffer ring (5.19+) or legacy provided
/// buffers (5.7+); before 5.7 the kernel cannot select buffers, so they are selected in user
/// space after a readiness poll, as on epoll (still no buffer per idle socket).
pub(crate) fn recv_group(driver: &mut Driver, count: u16, len: u32) -> io::Result<BufGroup> {
    match driver.register_buf_group(count, len) {
        Err(e) if e.kind() == io::ErrorKind::Unsupported => BufGroup::new_user(0, count, len),
        other => other,
    }
}

impl Drop for UringBackend {
    fn drop(&mut self) {
        // The wake poll has no future: orphan it so the driver's shutdown can reap it.
        if let Some(id) = self.wake_op.take() {
            // SAFETY: the wake poll is this backend's own op; it points at no memory.
            unsafe { self.driver.orphan(id, Box::new(Keep(()))) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Review CY: a poll failing once per wake-up of its fd, however often, is armed again;
    /// only failures that come at once after their arm, `POLL_RETRIES` in a row, end it.
    #[test]
    fn only_polls_failing_at_once_count_toward_giving_up() {
        let id = OpId {
            index: 1,
            generation: 1,
        };
        assert_eq!(quick_failures(ReadyWait::Poll(id)), 1);
        let now = PollTick::now();
        assert_eq!(quick_failures(ReadyWait::PollAgain(id, 5, now)), 6);
        let long_ago = PollTick(now.0.wrapping_sub(POLL_QUICK * 4));
        assert_eq!(quick_failures(ReadyWait::PollAgain(id, 31, long_ago)), 1);
        assert_eq!(PollTick(u16::MAX).until(PollTick(3)), 4);
    }
}
