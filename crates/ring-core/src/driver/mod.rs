//! The completion driver: one ring, its op table, its buffer groups and its counters.
//!
//! Pushing an SQE never makes a syscall. [`Driver::turn`] is one loop turn: publish returned
//! buffers, flush SQEs parked while the SQ was full, then one `io_uring_enter` that submits
//! everything pending and (optionally) waits, then drain every CQE before returning. No SQE
//! is ever dropped: a full SQ is submitted and the push retried, and what still does not fit
//! waits in a backlog that the next turn submits first, in order.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::Duration;

use io_uring::{opcode, squeue, types, IoUring};

use crate::cqe::Cqe;
use crate::lifecycle::{Deferred, Orphan};
use crate::metrics::Metrics;
use crate::op_table::{Dispatch, OpTable, Orphaned};
use crate::probe::{Feature, Features};
use crate::register_buf::RegisteredBufs;
use crate::setup::{self, RingConfig, SetupError, SetupFlags};
use crate::user_data::{OpId, Reserved};

mod direct;
mod enter;
mod groups;
mod ring_fd;

pub use enter::{drain_until, SHUTDOWN_WAIT};

/// Everything a driver is built from.
#[derive(Clone, Debug)]
pub struct DriverConfig {
    /// Ring sizes and setup flags wanted.
    pub ring: RingConfig,
    /// What the driver may use: the probed features, possibly masked to an older profile.
    pub features: Features,
}

/// One io_uring instance and the ops in flight on it. Not `Send`: one driver per thread
/// (its enters name the ring by an index registered for the thread that built it).
///
/// ```compile_fail,E0277
/// fn is_send<T: Send>() {}
/// is_send::<ring_core::driver::Driver>();
/// ```
///
/// # Examples
///
/// One op's whole life: [`new`](Driver::new), [`submit_op`](Driver::submit_op) (no
/// syscall), [`turn`](Driver::turn) (one `io_uring_enter`), [`poll_op`](Driver::poll_op):
///
/// ```
/// use std::task::{Poll, Waker};
/// use io_uring::opcode;
/// use ring_core::driver::{Driver, DriverConfig, Wait};
/// use ring_core::probe::Features;
/// use ring_core::setup::RingConfig;
///
/// # fn main() -> std::io::Result<()> {
/// let features = match Features::probe() {
///     Ok(features) => features.clone(),
///     Err(err) => {
///         eprintln!("no io_uring here: {err} ({})", err.fix());
///         return Ok(());
///     }
/// };
/// let mut driver = Driver::new(&DriverConfig { ring: RingConfig::default(), features })?;
/// // SAFETY: a NOP points at no memory.
/// let id = unsafe { driver.submit_op(opcode::Nop::new().build())? };
/// assert_eq!(driver.in_flight(), 1);
/// driver.turn(Wait::Forever)?; // submits the NOP and waits for its CQE
/// match driver.poll_op(id, Waker::noop()) {
///     Poll::Ready(cqe) => assert_eq!(cqe?.res, 0),
///     Poll::Pending => unreachable!("the turn waited for the CQE"),
/// }
/// assert_eq!(driver.in_flight(), 0); // the final CQE freed the slot
/// assert_eq!(driver.metrics().snapshot().sqes_submitted, 1);
/// # Ok(())
/// # }
/// ```
pub struct Driver {
    ring: IoUring,
    flags: SetupFlags,
    features: Features,
    ops: OpTable,
    metrics: Arc<Metrics>,
    /// SQE groups (a single SQE or a whole link chain) that found the SQ full; submitted
    /// first, in order, by the next turn.
    backlog: VecDeque<Vec<squeue::Entry>>,
    /// CQEs copied out of the ring before dispatch, so dispatch never holds the CQ. Taken
    /// from the front one at a time: a panic in the middle (an orphan's release) leaves the
    /// rest for the next turn, never dispatching one twice.
    scratch: VecDeque<Cqe>,
    /// Buffer groups registered on this ring; kept alive until the ring is gone.
    groups: groups::Groups,
    /// The wait timeout for kernels without `EXT_ARG`; the kernel copies it at submission.
    wait_ts: Box<types::Timespec>,
    /// The kernel's count of dropped CQEs when we last looked (pre-NODROP kernels).
    overflow_seen: u64,
    /// How blocking waits gather several CQEs per enter; `None` waits for the first.
    batch: Option<Batch>,
    /// The registered buffer table's pool, kept alive while the kernel may use it: until
    /// `unregister_buffers` or the ring is gone (after shutdown has reaped every op).
    registered_bufs: Option<RegisteredBufs>,
    /// Set once a [`drain`](Driver::drain) gave up on ops the kernel had not finished:
    /// dropping the driver then leaks them without waiting again.
    abandoned: bool,
    /// How enters name the ring: its registered index where it has one.
    ring_fd: ring_fd::RingFd,
    /// The direct-descriptor table, once registered ([`register_direct`](Self::register_direct)).
    direct: Option<direct::DirectTable>,
    /// The ops the driver waits for itself (installs, shutdowns of direct descriptors).
    own_ops: direct::OwnOps,
}

impl Driver {
    /// Builds the ring that `config` asks for, with the best flags the features allow.
    /// See the [type's example](Driver).
    pub fn new(config: &DriverConfig) -> Result<Driver, SetupError> {
        let built = setup::build_ring(&config.features, &config.ring)?;
        let cq_entries = built.ring.params().cq_entries() as usize;
        let wants_index = config.features.has(Feature::RegisteredRing);
        let ring_fd = ring_fd::RingFd::new(&built.ring, wants_index);
        Ok(Driver {
            ring: built.ring,
            flags: built.flags,
            features: config.features.clone(),
            ops: OpTable::with_capacity(cq_entries),
            metrics: Arc::new(Metrics::default()),
            backlog: VecDeque::new(),
            scratch: VecDeque::with_capacity(cq_entries),
            groups: groups::Groups::default(),
            wait_ts: Box::new(types::Timespec::new()),
            overflow_seen: 0,
            batch: None,
            registered_bufs: None,
            abandoned: false,
            ring_fd,
            direct: None,
            own_ops: direct::OwnOps::default(),
        })
    }

    /// Whether enters name the ring by a registered index (`IORING_REGISTER_RING_FDS`,
    /// 5.18) rather than by its fd, which the kernel would look up on each.
    pub fn is_ring_fd_registered(&self) -> bool {
        self.ring_fd.is_registered()
    }

    /// What this driver may use.
    pub fn features(&self) -> &Features {
        &self.features
    }

    /// The setup flags the ring was actually built with.
    pub fn setup_flags(&self) -> SetupFlags {
        self.flags
    }

    /// SQ and CQ sizes the kernel gave us.
    pub fn ring_sizes(&self) -> (u32, u32) {
        let params = self.ring.params();
        (params.sq_entries(), params.cq_entries())
    }

    /// The counters, shareable with other threads.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The op table, for backends that complete ops themselves.
    pub fn ops(&self) -> &OpTable {
        &self.ops
    }

    /// Caps io_uring's io-wq workers (`IORING_REGISTER_IOWQ_MAX_WORKERS`, 5.15+):
    /// `counts` is [bounded, unbounded], 0 leaving one as it is; the old values come back
    /// in it.
    pub fn register_iowq_max_workers(&self, counts: &mut [u32; 2]) -> io::Result<()> {
        self.ring.submitter().register_iowq_max_workers(counts)
    }

    /// The ring's registration interface (files, buffers, buffer rings).
    ///
    /// # Safety
    /// The io-uring crate's `Submitter` has safe methods that undo what the driver's owners
    /// rely on: `register_files_update` with -1 and `unregister_files` close direct
    /// descriptors that other owners hold (as closing their raw fds would), and
    /// `unregister_buf_ring` takes a buffer group from ops that select from it. The caller
    /// changes only registrations it made itself and that nobody else uses.
    ///
    /// ```compile_fail,E0133
    /// # fn f(driver: &ring_core::driver::Driver) {
    /// let _ = driver.submitter(); // needs `unsafe`
    /// # }
    /// ```
    pub unsafe fn submitter(&self) -> io_uring::Submitter<'_> {
        self.ring.submitter()
    }

    /// Inserts an op and pushes its SQE; the returned id is what the future polls. See the
    /// [type's example](Driver).
    ///
    /// # Safety
    /// Every pointer in `sqe` (buffers, iovecs, addresses, paths, timespecs) must stay valid
    /// for the kernel to read or write until the op's final CQE: while its future lives,
    /// and after that through the orphan given to [`orphan`](Self::orphan). Its fd (or
    /// fixed-file slot, or registered buffer index) must be one the caller may use until
    /// then. This is the io-uring crate's contract for pushing an SQE.
    ///
    /// Safe code cannot push an SQE (it could point the kernel at memory freed later):
    ///
    /// ```compile_fail,E0133
    /// # fn f(driver: &mut ring_core::driver::Driver) -> std::io::Result<()> {
    /// let mut buf = vec![0u8; 64];
    /// let read = io_uring::opcode::Read::new(io_uring::types::Fd(0), buf.as_mut_ptr(), 64);
    /// driver.submit_op(read.build())?; // needs `unsafe`, and its contract
    /// # Ok(()) }
    /// ```
    pub unsafe fn submit_op(&mut self, sqe: squeue::Entry) -> io::Result<OpId> {
        self.provide_queued();
        let id = self.ops.insert()?;
        // SAFETY: the caller's contract for `sqe`.
        unsafe { self.push_op(id, sqe) };
        Ok(id)
    }

    /// [`submit_op`](Self::submit_op) for a future that waits on `waker` right after: the
    /// op's first CQE wakes it, with no [`poll_op`](Self::poll_op) in between (one op-table
    /// lookup less per op).
    ///
    /// # Safety
    /// As for [`submit_op`](Self::submit_op).
    #[inline]
    pub unsafe fn submit_op_waiting(
        &mut self,
        sqe: squeue::Entry,
        waker: &Waker,
    ) -> io::Result<OpId> {
        self.provide_queued();
        let id = self.ops.insert_waiting(waker)?;
        // SAFETY: the caller's contract for `sqe`.
        unsafe { self.push_op(id, sqe) };
        Ok(id)
    }

    /// Pushes the SQE of op `id`, just inserted.
    ///
    /// # Safety
    /// As for [`submit_op`](Self::submit_op).
    unsafe fn push_op(&mut self, id: OpId, sqe: squeue::Entry) {
        // SAFETY: the caller's contract for `sqe`; the user_data is the driver's own.
        unsafe { self.push(sqe.user_data(id.to_user_data())) };
        self.note_in_flight();
    }

    /// Inserts one op per SQE and pushes them as one `IO_LINK` chain, contiguously in the
    /// same submission (a chain split across submissions would be cut short by the kernel).
    ///
    /// # Safety
    /// As for [`submit_op`](Self::submit_op), for every SQE of the chain.
    pub unsafe fn submit_chain(&mut self, sqes: Vec<squeue::Entry>) -> io::Result<Vec<OpId>> {
        if sqes.len() > self.ring.params().sq_entries() as usize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a linked chain longer than the submission queue cannot be submitted at once",
            ));
        }
        let last = sqes.len().saturating_sub(1);
        let mut ids = Vec::with_capacity(sqes.len());
        let mut chain = Vec::with_capacity(sqes.len());
        for (i, sqe) in sqes.into_iter().enumerate() {
            let id = self.ops.insert()?;
            let sqe = sqe.user_data(id.to_user_data());
            chain.push(if i < last { link(sqe) } else { sqe });
            ids.push(id);
        }
        self.push_group(&chain);
        self.note_in_flight();
        Ok(ids)
    }

    /// Pushes one SQE whose `user_data` is already set (an op's, or a [`Reserved`] value).
    ///
    /// # Safety
    /// As for [`submit_op`](Self::submit_op): what the SQE points at stays valid until the
    /// kernel is done with it. An SQE tagged with a reserved value has no op to keep its
    /// memory, so it must point at none (a `CLOSE`, a `NOP`, a cancel) or at memory that
    /// outlives the ring.
    pub unsafe fn push(&mut self, sqe: squeue::Entry) {
        self.push_group(std::slice::from_ref(&sqe));
    }

    /// Bounds how many CQEs multishot op `id` may queue unpolled before the driver cancels
    /// it (see [`OpTable::bound_queue`]); its owner re-arms it once drained.
    pub fn bound_queue(&mut self, id: OpId, max: u16) {
        self.ops.bound_queue(id, max);
    }

    /// Moves the wakers to wake and the finished orphans to drop that dispatch and orphaning
    /// produced into `out`. Run it once the driver is no longer borrowed: a waker, or the
    /// destructor of a buffer an orphan kept, may call back into the driver's owner.
    #[inline]
    pub fn take_deferred(&mut self, out: &mut Deferred) {
        self.ops.take_deferred(out);
    }

    /// True when wakers or orphans wait in the deferred queue.
    pub fn has_deferred(&self) -> bool {
        self.ops.has_deferred()
    }

    /// Registers `count` chunks of `chunk_len` bytes as the ring's fixed buffers (see
    /// [`RegisteredBufs`]) and keeps the pool alive for as long as the kernel may use it:
    /// until [`unregister_buffers`](Self::unregister_buffers) or until the ring is gone.
    /// A ring holds one buffer table: a second registration is the kernel's EBUSY.
    pub fn register_buffers(&mut self, count: u16, chunk_len: usize) -> io::Result<RegisteredBufs> {
        // SAFETY: the pool is stored in `registered_bufs` below, which is dropped only by
        // `unregister_buffers` (after the kernel unregistered the table) or with the driver,
        // after its ring (declared first, so dropped first) and after shutdown reaped every
        // op; an op in flight on a chunk holds that chunk's `FixedBuf`, and the pool with it.
        let bufs = unsafe { RegisteredBufs::register(&self.ring.submitter(), count, chunk_len)? };
        self.registered_bufs = Some(bufs.clone());
        Ok(bufs)
    }

    /// Unregisters the fixed buffers. Live `FixedBuf`s keep their memory, but new fixed ops
    /// on them fail. Nothing registered is an error (the kernel's ENXIO).
    pub fn unregister_buffers(&mut self) -> io::Result<()> {
        self.ring.submitter().unregister_buffers()?;
        self.registered_bufs = None;
        Ok(())
    }

    /// Polls op `id` for its next CQE (see [`OpTable::poll`], and the
    /// [type's example](Driver)).
    #[inline]
    pub fn poll_op(&mut self, id: OpId, waker: &Waker) -> Poll<io::Result<Cqe>> {
        let polled = self.ops.poll(id, waker);
        if polled.is_ready() {
            self.note_in_flight();
        }
        polled
    }

    /// The future of op `id` was dropped: `orphan` keeps its memory until the final CQE,
    /// and a cancel is pushed if the op is still in the kernel. An orphan that is already
    /// done is deferred (see [`take_deferred`](Self::take_deferred)), not dropped here.
    ///
    /// # Safety
    /// `id` must be an op the caller submitted and whose future it is dropping: nobody
    /// polls `id` afterwards, and `orphan` owns (or keeps alive) everything the op's SQE
    /// points at. Orphaning someone else's op (ids are plain numbers) would tell its owner
    /// the op is gone while the kernel still writes into the owner's memory.
    ///
    /// ```compile_fail,E0133
    /// # fn f(driver: &mut ring_core::driver::Driver, id: ring_core::user_data::OpId) {
    /// driver.orphan(id, Box::new(ring_core::release::Keep(()))); // needs `unsafe`
    /// # }
    /// ```
    pub unsafe fn orphan(&mut self, id: OpId, orphan: Box<dyn Orphan>) {
        // SAFETY: the caller's contract.
        match unsafe { self.ops.orphan(id, orphan) } {
            Ok(Orphaned::NeedsCancel) => self.cancel(id),
            Ok(Orphaned::Freed) => Metrics::bump(&self.metrics.orphans_reaped),
            Ok(Orphaned::AlreadyOrphaned) => {}
            Err(_) => Metrics::bump(&self.metrics.stale_cqes),
        }
        self.note_in_flight();
    }

    /// A duplicate of this ring's fd, for other threads to
    /// [`msg_ring_wake`](Self::msg_ring_wake) this ring with. Owning it keeps the ring (its memory, in the
    /// kernel) alive, so a wake sent after this driver is gone lands in a ring nobody reads
    /// instead of on whatever reused the number. `Unsupported` before 5.18.
    pub fn msg_ring_target(&self) -> io::Result<std::os::fd::OwnedFd> {
        if !self.features.has(Feature::MsgRing) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "IORING_OP_MSG_RING needs Linux 5.18+",
            ));
        }
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.ring);
        // SAFETY: borrows this driver's own ring fd for the duration of the dup.
        let ring = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        ring.try_clone_to_owned()
    }

    /// Pushes an `IORING_OP_MSG_RING` that posts a [`Reserved::Wake`] CQE (res 0) into the
    /// ring `target` is an fd of (one from [`msg_ring_target`](Self::msg_ring_target)),
    /// waking its owner if it waits; submitted with this ring's next enter. Its own CQE is
    /// skipped on success where the kernel can (`CQE_SKIP`, 5.17+) and ignored otherwise.
    /// The kernel looks `target` up when it takes the SQE (at the next enter, or when an
    /// SQPOLL thread gets to it): the caller keeps `target` open until
    /// [`pending_sqes`](Self::pending_sqes) is 0, so its number cannot be reused under the
    /// SQE (ring-rt does). Returns false, pushing nothing, before 5.18.
    pub fn msg_ring_wake(&mut self, target: std::os::fd::BorrowedFd<'_>) -> bool {
        if !self.features.has(Feature::MsgRing) {
            return false;
        }
        let fd = types::Fd(std::os::fd::AsRawFd::as_raw_fd(&target));
        let mut sqe = opcode::MsgRingData::new(fd, 0, Reserved::Wake.to_user_data(), None)
            .build()
            .user_data(Reserved::Ignore.to_user_data());
        if self.features.has(Feature::CqeSkip) {
            sqe = sqe.flags(squeue::Flags::SKIP_SUCCESS);
        }
        // SAFETY: a MSG_RING carries no pointer: only the target's fd and two integers.
        unsafe { self.push(sqe) };
        Metrics::bump(&self.metrics.msg_rings_sent);
        true
    }

    /// Pushes `ASYNC_CANCEL` for op `id`. Its own CQE is ignored; the op's CQE (usually
    /// `-ECANCELED`, or its real result if it won the race) still arrives and is dispatched.
    pub fn cancel(&mut self, id: OpId) {
        let sqe = opcode::AsyncCancel::new(id.to_user_data())
            .build()
            .user_data(Reserved::Cancel.to_user_data());
        // SAFETY: a cancel carries no pointer, only the target's user_data.
        unsafe { self.push(sqe) };
        Metrics::bump(&self.metrics.cancels_sent);
    }

    /// SQEs pushed but not yet submitted, backlog included.
    pub fn pending_sqes(&mut self) -> usize {
        let parked: usize = self.backlog.iter().map(Vec::len).sum();
        self.ring.submission().len() + parked
    }

    /// Makes blocking waits gather up to `batch.want` CQEs, for at most `batch.min_wait`
    /// beyond the first, so a busy ring does one enter per batch instead of one per CQE.
    /// `None` (the default) returns as soon as one CQE is ready. Needs
    /// `IORING_FEAT_MIN_TIMEOUT` (6.12+): returns false, and changes nothing, without it.
    pub fn set_batch(&mut self, batch: Option<Batch>) -> bool {
        if !self.features.has(Feature::MinTimeout) {
            return false;
        }
        self.batch = batch.filter(|b| b.want > 1 && !b.min_wait.is_zero());
        true
    }

    /// Ops in flight (orphans included).
    pub fn in_flight(&self) -> usize {
        self.ops.len()
    }

    #[inline]
    fn push_group(&mut self, group: &[squeue::Entry]) {
        // Closes of direct descriptors let go since the last push go first: an SQE pushed
        // now (an accept into the table) then finds their slots free (review AR: an accept
        // pushed between a drop and the next turn failed with ENFILE on a table that was
        // full only of slots already given up).
        if self.direct.is_some() {
            self.push_queued_closes();
        }
        if self.backlog.is_empty() && self.try_push(group) {
            return;
        }
        Metrics::bump(&self.metrics.sq_full);
        if self.backlog.is_empty() && self.submit_now().is_ok() && self.try_push(group) {
            return;
        }
        // Copied only when parked: the common push allocates nothing (a `Vec` per SQE
        // was one malloc and free per op).
        self.backlog.push_back(group.to_vec());
    }

    /// Pushes the whole group or nothing.
    fn try_push(&mut self, group: &[squeue::Entry]) -> bool {
        let mut sq = self.ring.submission();
        if sq.capacity() - sq.len() < group.len() {
            return false;
        }
        for sqe in group {
            // SAFETY: every SQE reaching here came through `submit_op`, `submit_chain` or
            // `push`, whose callers promised that what it points at lives until its final
            // CQE, or is one of the driver's own (a cancel, a provide of a group the driver
            // keeps until its ring is gone, a wait timeout in `wait_ts`, which the driver
            // owns). Space was checked above, so the push cannot fail.
            let pushed = unsafe { sq.push(sqe) };
            debug_assert!(pushed.is_ok(), "space was checked");
        }
        true
    }

    /// Moves parked groups into the SQ, in order, as far as they fit.
    fn flush_backlog(&mut self) {
        while let Some(group) = self.backlog.pop_front() {
            if !self.try_push(&group) {
                self.backlog.push_front(group);
                return;
            }
        }
    }

    /// Routes every CQE in `scratch` and counts what happened. Returns how many were for
    /// ops (the driver's own, like wait timeouts, are not counted).
    fn dispatch_scratch(&mut self) -> usize {
        let mut for_ops = 0;
        while let Some(cqe) = self.scratch.pop_front() {
            Metrics::bump(&self.metrics.cqes_reaped);
            // SAFETY: every CQE in `scratch` was copied out of this ring's CQ, posted by the
            // kernel for the op its user_data names.
            match unsafe { self.ops.complete(cqe) } {
                Dispatch::Delivered => for_ops += 1,
                Dispatch::QueueFull => {
                    for_ops += 1;
                    if let crate::user_data::UserData::Op(id) =
                        crate::user_data::decode(cqe.user_data)
                    {
                        self.cancel(id);
                    }
                }
                Dispatch::Reaped { .. } => {
                    for_ops += 1;
                    Metrics::bump(&self.metrics.orphans_reaped);
                }
                // The driver's own work: a legacy provide (see `groups.rs`), an install or
                // shutdown whose wait gave up, a descriptor another ring sent (`direct.rs`).
                Dispatch::Reserved(_) | Dispatch::Unknown if self.dispatch_own(&cqe) => {}
                Dispatch::Reserved(_) => {}
                Dispatch::Stale | Dispatch::Unknown => Metrics::bump(&self.metrics.stale_cqes),
            }
        }
        self.note_in_flight();
        for_ops
    }

    /// Routes a CQE of the driver's own SQEs that the op table did not know; false if it is
    /// not one. Cold, and out of the CQE loop every op's completion goes through: with the
    /// provides' arm inline there, the loop stopped inlining its wakes (1% more
    /// instructions per echo request, on kernels where no provide ever runs).
    #[cold]
    fn dispatch_own(&mut self, cqe: &Cqe) -> bool {
        self.reap_provide(cqe) || self.dispatch_direct(cqe)
    }

    #[inline]
    fn note_in_flight(&self) {
        Metrics::set(&self.metrics.ops_in_flight, self.ops.len() as u64);
    }

    fn has_ext_arg(&self) -> bool {
        self.features.has(Feature::ExtArg)
    }
}

/// Marks an SQE as linked to the next one.
fn link(sqe: squeue::Entry) -> squeue::Entry {
    sqe.flags(squeue::Flags::IO_LINK)
}

/// A batched wait (see [`Driver::set_batch`]): block until `want` CQEs are ready, or, once
/// `min_wait` has passed, until at least one is. The kernel's `min_wait_usec` (6.12+).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batch {
    /// CQEs to wait for; 1 is an ordinary wait.
    pub want: u32,
    /// How long to wait for the rest once the first is late; whole microseconds.
    pub min_wait: Duration,
}

/// A wait for `turn`: how long to block for the first completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Do not block: submit, collect what is ready.
    No,
    /// Block until at least one CQE, or until the duration passes.
    For(Duration),
    /// Block until at least one CQE.
    Forever,
}

impl Drop for Driver {
    /// Cancels everything in flight and waits for every CQE: closing the ring does not prove
    /// the kernel is done with an op's memory, the final CQE does.
    fn drop(&mut self) {
        if !self.abandoned {
            self.drain(std::time::Instant::now() + SHUTDOWN_WAIT);
        }
        self.leak_abandoned();
        // Last: the drain entered by index. The driver is not `Send`, so this is the
        // thread that registered it.
        self.ring_fd.unregister();
    }
}
