//! The backends under one interface: io_uring, or epoll plus a blocking pool.
//!
//! This is the ground floor: it imports nothing of ring-rt above it, and it is the one
//! place that knows which backend runs. An op reaches it as an [`Operation`] (how to run it
//! either way) and comes back as a `Token` to poll, or done; both backends complete ops
//! through ring-core's op table with the same `Cqe` values, so futures, cancellation and
//! orphan release above are one code path. `select` decides which backend a worker gets.

pub(crate) mod blocking;
pub(crate) mod direct;
pub(crate) mod epoll;
mod linked_fds;
pub(crate) mod select;
pub(crate) mod uring;

use std::fmt;
use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::Instant;

use io_uring::squeue;
use ring_core::buf_pool::BufGroup;
use ring_core::cqe::Cqe;
use ring_core::direct::{DirectCloser, OwnedSlot};
use ring_core::driver::Wait;
use ring_core::lifecycle::{Deferred, Orphan};
use ring_core::metrics::Metrics;
use ring_core::probe::Features;
use ring_core::register_buf::{FixedBuf as FixedChunk, RegisteredBufs};
use ring_core::user_data::OpId;

pub use blocking::BlockingJob;
pub use select::BackendChoice;

// How long shutdown waits for the kernel (or the blocking pool), from ring-core: both
// backends drain alike, with `ring_core::driver::drain_until`.
pub(crate) use ring_core::driver::SHUTDOWN_WAIT;

/// What a backend needs of an op to run it either way: its io_uring SQE, and how the
/// epoll backend performs it without io_uring. Implemented by ring-rt's op structs.
///
/// # Safety
/// The SQE from [`sqe`](Self::sqe), and the addresses a [`BlockingJob`] from
/// [`emulate`](Self::emulate) holds, must point only at memory this value owns and that
/// does not move when the value moves (heap or `'static`), and at fds the op may use until
/// it completes. The runtime keeps the value (through its future, and after that through
/// its orphan) until the op's final completion, and never frees that memory earlier.
#[doc(hidden)]
pub unsafe trait Operation {
    /// The io_uring SQE.
    fn sqe(&mut self) -> squeue::Entry;

    /// How the epoll backend runs this op (and io_uring, for an op whose opcode the kernel
    /// lacks, or a readiness-only op).
    fn emulate(&mut self) -> Emulation;

    /// For [`Emulation::Readiness`] ops: the syscall, attempted once without blocking; the
    /// result as the kernel would post it (`res`, and `flags` such as a buffer id). Ops
    /// emulated as `Blocking` never have this called.
    fn try_syscall(&mut self) -> Cqe {
        Cqe::new(0, -libc::EOPNOTSUPP, 0)
    }

    /// For [`Emulation::Readiness`] ops: whether this successful result shows the fd has
    /// nothing more in the op's direction for now (a stream read or write shorter than
    /// asked), so the next op there waits for readiness instead of trying a syscall that
    /// would fail with EAGAIN. Never for datagrams or end of file.
    fn leaves_unready(&self, _cqe: &Cqe) -> bool {
        false
    }

    /// For [`Emulation::Readiness`] ops: whether the op moves no bytes (an empty read or
    /// write), so its syscall is tried even on an fd taken as drained or full: it cannot
    /// wait for data or room (review CE: it waited for the next event). Asked only then.
    fn moves_nothing(&self) -> bool {
        false
    }

    /// For [`Emulation::Blocking`] ops on epoll: an attempt that cannot block, made on the
    /// loop thread before the op goes to the blocking pool (a read of cached file data with
    /// `RWF_NOWAIT`). `None` sends the op to the pool, as does the default.
    fn try_inline(&mut self) -> Option<Cqe> {
        None
    }

    /// The opcode the SQE uses, where a kernel may lack it (those newer than the 5.6 set
    /// the runtime requires): without it io_uring runs the emulation inline instead.
    fn opcode(&self) -> Option<u8> {
        None
    }

    /// For [`Emulation::Readiness`] ops on epoll that wait to read: whether a socket shut
    /// down for reading ends the op with 0, as a receive ends at the end of the stream
    /// (the default). The non-blocking syscall keeps answering `EAGAIN` there after the one
    /// edge epoll reported, where io_uring's blocking one returns. An accept says no: its 0
    /// would be fd 0, handed to safe code to own and close (review CK).
    fn ends_at_read_shutdown(&self) -> bool {
        true
    }

    /// For [`Emulation::Blocking`] ops: whether a successful result is a new fd (an open),
    /// which the blocking pool closes itself if the runtime stopped waiting for the job.
    fn returns_fd(&self) -> bool {
        false
    }

    /// Whether this final result breaks a linked chain, as the kernel decides: an error,
    /// and for a file read or write (plain or vectored) a transfer shorter than asked.
    /// Chains run one op after another (epoll, or an op io_uring runs another way) follow
    /// it so both ways cancel the same rest of the chain.
    fn breaks_link(&self, cqe: &Cqe) -> bool {
        cqe.res < 0
    }

    /// An op with no SQE of its own, run by readiness on io_uring too (the syscall, and on
    /// `EAGAIN` a `POLL_ADD` and the syscall again): a receive into a buffer group selected
    /// in user space (before 5.7), a signalfd's read, a stream read or write of a file.
    fn is_readiness_only(&self) -> bool {
        false
    }

    /// For a readiness-only op: the readiness is the whole op (a wait for room, with no
    /// syscall after it), so io_uring completes it with the `POLL_ADD`'s own completion
    /// instead of trying [`try_syscall`](Self::try_syscall) too.
    fn is_wait_only(&self) -> bool {
        false
    }

    /// Whether this readiness op, polled outside its runtime, makes one try of its syscall
    /// (see `worker/elsewhere.rs`): a socket op does, so a read whose data came gets it.
    /// A file stream's read or write does not: `fs::read` and `fs::write` loop over
    /// them, so a try that moved bytes was followed by the next op's refusal, which lost
    /// them (review DD); a signalfd's read leaves its signal pending.
    fn tries_elsewhere(&self) -> bool {
        true
    }

    /// The fd the op names, if any: a kernel-linked chain keeps the numbers its later links
    /// name taken until they are issued (see `UringBackend::start_chain`).
    fn fd(&self) -> Option<RawFd> {
        None
    }

    /// Whether io_uring submits this op as soon as it starts (an `io_uring_enter` of its
    /// own) rather than with the loop's next turn: reads and writes of an `O_DIRECT` file,
    /// each of which goes to the device. Batched, the reads a turn submits together reach
    /// a virtio disk together, complete together and leave it idle until the next batch
    /// (measured: 0.75x of fio's IOPS at depth 32); submitted one by one, as fio does,
    /// they keep its queue full (1.0x). And a task that starts a read and then computes
    /// before it yields (`join(read, work)`) overlaps the two: deferring the submission to
    /// its yield saved one enter per read at depth 1 but made such a block cost read + work
    /// (measured: 370 against 320 µs with 300 µs of work). Sockets and cached reads stay
    /// batched.
    fn submits_at_once(&self) -> bool {
        false
    }
}

/// How the epoll backend performs an op without io_uring.
#[doc(hidden)]
pub enum Emulation {
    /// A socket op: [`Operation::try_syscall`] runs the non-blocking syscall on the loop
    /// thread; on `-EAGAIN` the op waits until `fd` is ready for `events` (`POLLIN`/
    /// `POLLOUT`) and tries again. Nothing is in flight between tries.
    Readiness {
        /// The fd to wait on.
        fd: RawFd,
        /// `POLLIN` and/or `POLLOUT`.
        events: u32,
    },
    /// An op that may block (files, fsync, open): the job runs on the blocking pool and
    /// returns the CQE result (`>= 0` or `-errno`).
    Blocking(BlockingJob),
}

/// An op a backend started: what its future holds and polls.
#[derive(Debug)]
pub(crate) enum Token {
    /// In the op table until its final CQE: an SQE in the ring, or a job on the pool.
    InFlight(OpId),
    /// Retried whenever `fd` is ready for `events`. Nothing of the op is in flight; `wait`
    /// is how it waits for the readiness.
    Ready {
        fd: RawFd,
        events: u32,
        wait: ReadyWait,
    },
}

/// How an op of [`Token::Ready`] waits for its fd's readiness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadyWait {
    /// Not waiting (not polled yet, or the readiness came).
    Idle,
    /// io_uring: the `POLL_ADD` waiting for the readiness (it owns no memory).
    Poll(OpId),
    /// io_uring: a `POLL_ADD` armed again after the one before it failed: how many failed
    /// quickly in a row, and when this one was armed (see `UringBackend::poll_readiness`).
    PollAgain(OpId, u8, PollTick),
    /// epoll: its waker is parked with the fd's waiters under this key, which it keeps for
    /// the op's life: polled again it replaces its waker, dropped it takes it out.
    Parked(ParkKey),
}

/// A time, in 64 µs ticks of a clock that wraps every 4.2 s: small enough to keep a
/// [`Token`] at 20 bytes, fine enough to tell a failure at once from one after a wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PollTick(pub(crate) u16);

impl PollTick {
    /// Now.
    pub(crate) fn now() -> PollTick {
        static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        let since = EPOCH.get_or_init(std::time::Instant::now).elapsed();
        PollTick((since.as_micros() / 64) as u16)
    }

    /// The ticks from `self` to `later` (modulo the wrap).
    pub(crate) fn until(self, later: PollTick) -> u16 {
        later.0.wrapping_sub(self.0)
    }
}

/// An epoll readiness wait's key with its fd's waiters: a `u64` never reused by a backend,
/// kept as two halves so that a [`Token`] stays 4-byte aligned (it is in every op).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ParkKey([u32; 2]);

impl ParkKey {
    pub(crate) fn new(key: u64) -> ParkKey {
        ParkKey([key as u32, (key >> 32) as u32])
    }

    pub(crate) fn get(self) -> u64 {
        u64::from(self.0[0]) | (u64::from(self.0[1]) << 32)
    }
}

impl Token {
    /// The op table entry to orphan if the op's future is dropped now, and whether the op's
    /// own memory is in it (else it is only a readiness poll, which owns nothing).
    pub(crate) fn in_flight(&self) -> Option<(OpId, bool)> {
        match *self {
            Token::InFlight(id) => Some((id, true)),
            Token::Ready {
                wait: ReadyWait::Poll(id) | ReadyWait::PollAgain(id, ..),
                ..
            } => Some((id, false)),
            Token::Ready { .. } => None,
        }
    }
}

/// What starting an op gave.
pub(crate) enum Start {
    /// Running: poll this.
    Token(Token),
    /// Running, and the starter's waker already waits for its first completion: poll it
    /// once woken (io_uring, which saves the poll that would only register the waker; a
    /// job on epoll's blocking pool, whose waker is cloned before the job is handed over).
    Waiting(Token),
    /// Done already (a read of cached data on epoll, an op run inline): its CQE.
    Done(Cqe),
}

/// Provided-buffer sizing for a worker's shared receive group.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RecvBuffers {
    pub(crate) count: u16,
    pub(crate) len: u32,
}

/// A worker's shared receive group: created on first use (a worker that never receives
/// into the pool allocates none), then handed out to every receive.
pub(crate) struct RecvPool {
    sizes: RecvBuffers,
    group: Option<BufGroup>,
}

impl RecvPool {
    pub(crate) fn new(sizes: RecvBuffers) -> RecvPool {
        RecvPool { sizes, group: None }
    }

    /// Buffers of the group that are out (0 before it is created).
    fn in_use(&self) -> usize {
        self.group.as_ref().map_or(0, |g| g.in_use())
    }

    /// The group, made by `create(count, len)` on first use.
    fn get_or_create(
        &mut self,
        create: impl FnOnce(u16, u32) -> io::Result<BufGroup>,
    ) -> io::Result<BufGroup> {
        if let Some(group) = &self.group {
            return Ok(group.clone());
        }
        let group = create(self.sizes.count, self.sizes.len)?;
        self.group = Some(group.clone());
        Ok(group)
    }
}

/// Registered-buffer sizing for a worker's fixed pool (`Builder::fixed_buffers`); a count
/// of 0 is none.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FixedBuffers {
    pub(crate) count: u16,
    pub(crate) len: usize,
}

/// A worker's fixed buffers: made on first use (a worker that never takes one allocates
/// and pins nothing), and whether its ring knows them.
pub(crate) struct FixedPool {
    sizes: FixedBuffers,
    pool: Option<(RegisteredBufs, bool)>,
}

impl FixedPool {
    pub(crate) fn new(sizes: FixedBuffers) -> FixedPool {
        FixedPool { sizes, pool: None }
    }

    /// The pool and whether it is registered, made by `create(count, len)` on first use.
    fn get_or_create(
        &mut self,
        create: impl FnOnce(u16, usize) -> io::Result<(RegisteredBufs, bool)>,
    ) -> io::Result<(RegisteredBufs, bool)> {
        if let Some((pool, registered)) = &self.pool {
            return Ok((pool.clone(), *registered));
        }
        let FixedBuffers { count, len } = self.sizes;
        if count == 0 {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "this runtime has no fixed buffers: size them with Builder::fixed_buffers",
            ));
        }
        let made = create(count, len)?;
        self.pool = Some(made.clone());
        Ok(made)
    }

    /// `buf`'s index in the ring, if it is a chunk of this worker's registered pool.
    fn index_of(&self, buf: &FixedChunk) -> Option<u16> {
        match &self.pool {
            Some((pool, true)) if pool.owns(buf) => Some(buf.buf_index()),
            _ => None,
        }
    }
}

/// Which mechanism a runtime uses.
///
/// # Examples
///
/// Force the epoll backend (the same as `RING_RT_BACKEND=epoll`):
///
/// ```
/// use ring_rt::{BackendKind, Runtime};
///
/// let rt = Runtime::builder().backend(BackendKind::Epoll).build()?;
/// assert_eq!(rt.backend().kind, BackendKind::Epoll);
/// assert_eq!(rt.backend().kind.to_string(), "epoll");
/// # std::io::Result::Ok(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// io_uring completions.
    Uring,
    /// epoll readiness for sockets, a blocking thread pool for files.
    Epoll,
}

impl BackendKind {
    /// "uring" or "epoll".
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_rt::BackendKind;
    ///
    /// assert_eq!(BackendKind::Uring.name(), "uring");
    /// assert_eq!(BackendKind::Epoll.name(), "epoll");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Uring => "uring",
            BackendKind::Epoll => "epoll",
        }
    }

    /// Parses "uring"/"io_uring" or "epoll" (case and surrounding spaces ignored), as
    /// `RING_RT_BACKEND` is read.
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_rt::BackendKind;
    ///
    /// assert_eq!(BackendKind::parse("io_uring"), Some(BackendKind::Uring));
    /// assert_eq!(BackendKind::parse(" EPOLL "), Some(BackendKind::Epoll));
    /// assert_eq!(BackendKind::parse("kqueue"), None);
    /// ```
    pub fn parse(s: &str) -> Option<BackendKind> {
        match s.trim().to_ascii_lowercase().as_str() {
            "uring" | "io_uring" | "io-uring" => Some(BackendKind::Uring),
            "epoll" => Some(BackendKind::Epoll),
            _ => None,
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// [`BackendKind::parse`], for `str::parse` and argument parsers.
///
/// # Examples
///
/// ```
/// use ring_rt::BackendKind;
///
/// assert_eq!("epoll".parse::<BackendKind>()?, BackendKind::Epoll);
/// assert!("kqueue".parse::<BackendKind>().is_err());
/// # std::io::Result::Ok(())
/// ```
impl std::str::FromStr for BackendKind {
    type Err = io::Error;

    fn from_str(s: &str) -> io::Result<BackendKind> {
        BackendKind::parse(s).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{s:?} is no backend: expected \"uring\" or \"epoll\""),
            )
        })
    }
}

/// What an op may ask of a backend beyond the set every backend runs: the answer decides
/// which way the op goes (a multishot op or a loop of one-shot ones, a zero-copy send or a
/// plain one), so nothing above this module asks which backend it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Capability {
    /// One accept SQE posting a CQE per connection (io_uring 5.19+).
    MultishotAccept,
    /// One receive SQE posting a CQE per chunk into the buffer group (io_uring 6.0+).
    MultishotRecv,
    /// A send that does not copy the buffer (io_uring 6.0+; epoll sends the same bytes
    /// with a plain `send`).
    SendZc,
    /// Sends go to the kernel in batches, several per syscall (io_uring: with the loop's
    /// next enter). Small borrowed bytes are then cheaper copied into an op than sent with
    /// a syscall of their own; epoll makes one syscall per send whichever way. (Asked by
    /// the compat adapter only.)
    #[cfg_attr(
        not(any(feature = "tokio-io", feature = "futures-io")),
        allow(dead_code)
    )]
    BatchedSends,
}

/// The one interface both backends implement, each in its own file with the same method
/// names (as `polling` does per OS mechanism): io_uring ([`uring::UringBackend`]) and
/// epoll plus a blocking pool ([`epoll::EpollBackend`]). Where a backend has nothing to
/// do for a call, its implementation says why; none answers "not on this backend" except
/// through [`supports`](Self::supports) and [`start_chain`](Self::start_chain), which any
/// io_uring kernel may answer the same way.
pub(crate) trait Mechanism {
    /// Which backend this is (for reports and metrics only: no op branches on it).
    fn kind(&self) -> BackendKind;

    /// The io_uring features in use; `None` where the backend uses none (epoll).
    fn features(&self) -> Option<&Features>;

    /// Whether ops may take the way `cap` names on this backend and kernel.
    fn supports(&self, cap: Capability) -> bool;

    /// The counters of this backend's op table and loop.
    fn metrics(&self) -> &Arc<Metrics>;

    /// SQ and CQ sizes; (0, 0) where there is no ring.
    fn ring_sizes(&self) -> (u32, u32);

    /// Starts `op` for a future that will wait on `waker` (io_uring: pushes its SQE; epoll:
    /// tries it inline, waits for readiness or queues its job).
    fn start(&mut self, op: &mut dyn Operation, waker: &Waker) -> io::Result<Start>;

    /// Starts `ops` as one linked chain, each op running only if the one before succeeded,
    /// where the kernel can link them all; `None` where it cannot (epoll, or an op io_uring
    /// runs another way): the caller then runs them one after another.
    fn start_chain(&mut self, ops: &mut [&mut dyn Operation]) -> Option<io::Result<Vec<OpId>>>;

    /// Starts a multishot op whose unpolled CQEs are bounded by `queue_max` (0: unbounded).
    /// Only for the kinds [`supports`](Self::supports) allows; others are `Unsupported`.
    fn start_multishot(&mut self, op: &mut dyn Operation, queue_max: u16) -> io::Result<OpId>;

    /// Polls an op started by [`start`](Self::start) for its next CQE.
    fn poll(
        &mut self,
        token: &mut Token,
        op: &mut dyn Operation,
        waker: &Waker,
    ) -> Poll<io::Result<Cqe>>;

    /// Polls an op table entry (a multishot op, a chain's op) for its next CQE.
    fn poll_id(&mut self, id: OpId, waker: &Waker) -> Poll<io::Result<Cqe>>;

    /// The future of op `id` was dropped: `orphan` keeps its memory until the final CQE,
    /// and the op is cancelled if it is still running. The caller must own `id` (an op
    /// future, a stream, a chain or the worker's parked drops giving up its op).
    fn orphan(&mut self, id: OpId, orphan: Box<dyn Orphan>);

    /// Cancels op `id`, whose future stays to receive its (usually `ECANCELED`) final CQE.
    fn cancel(&mut self, id: OpId);

    /// One loop turn: submit, wait as asked, complete.
    fn turn(&mut self, wait: Wait) -> io::Result<()>;

    /// Hands what is staged to the kernel now, without waiting (for work staged while no
    /// loop turn is coming).
    fn submit(&mut self) -> io::Result<()>;

    /// Moves the wakers to wake and the finished orphans to drop that the backend produced
    /// into `out`, to be run once the backend is no longer borrowed.
    fn take_deferred(&mut self, out: &mut Deferred);

    /// Shutdown: cancels every op and waits until `deadline` for the kernel (or the pool)
    /// to finish with them; what is not done by then keeps its memory for ever. Returns
    /// the ops that were still in flight when it began: what it cancelled.
    fn drain(&mut self, deadline: Instant) -> Vec<OpId>;

    /// Puts a socket adopted by the runtime in the blocking mode this backend wants.
    fn adopt_socket(&self, fd: RawFd) -> io::Result<()>;

    /// Whether file reads of `fd` first try the page cache on the loop thread before
    /// going anywhere slower (asked once, when a `File` is made).
    fn reads_inline(&self, fd: RawFd) -> bool;

    /// Closes `fd`, which the caller hands over, so that no op still queued for it can
    /// find its number reused.
    fn close(&mut self, fd: RawFd);

    /// Forgets `fd` before its owner takes it out of the runtime (`into_owned_fd`). False
    /// when an op not yet issued still names the number (a kernel-linked op): the fd must
    /// not leave, and the caller hands out a duplicate and closes it instead.
    fn forget_fd(&mut self, fd: RawFd) -> bool;

    /// Forgets what is known drained on `fd` (epoll), so the next op there tries its
    /// syscall: after a local `shutdown(2)` an op may end at once (`EPIPE`, end of file)
    /// though nothing new arrived, and an op at its deadline tries once more for what came
    /// since the last loop turn.
    fn forget_drained(&mut self, fd: RawFd);

    /// An op waiting for `fd` to be ready for `events` with nothing in flight (epoll's
    /// readiness wait, parked under `key`) was dropped or is done: its waker is let go, so
    /// that ops dropped while `fd` stays unready (a read under a timeout, tried again and
    /// again by new tasks) do not pile up their tasks' wakers until it is ready.
    fn readiness_dropped(&mut self, fd: RawFd, events: u32, key: ParkKey);

    /// A one-shot receive of `fd` holding the socket's receive turn must come back: bytes
    /// were put back in front of what it waits for. `id`, its op in the kernel if known, is
    /// cancelled (io_uring); the readiness waits of `fd`'s readers are woken (epoll), to
    /// find the bytes when polled.
    fn recall_receive(&mut self, fd: RawFd, id: Option<OpId>);

    /// Whether op `id` is still in the op table (its final completion not yet taken).
    fn is_live(&self, id: OpId) -> bool;

    /// Whether an op not yet issued (a kernel-linked op) still names `fd`, so that closing
    /// it now could let that op reach whatever reuses the number.
    fn links_name(&mut self, fd: RawFd) -> bool;

    /// `fd`, which such ops still name, given away when no duplicate could be made (the
    /// fd table is full): another number for its file, with `fd` kept by the backend and
    /// closed after those ops; `None` if there is none.
    fn hand_out_linked(&mut self, fd: RawFd) -> Option<std::os::fd::OwnedFd>;

    /// The worker's shared receive buffer group, created on first use.
    fn recv_group(&mut self) -> io::Result<BufGroup>;

    /// Buffers of the receive pool that are out (0 before the pool is first used).
    fn recv_buffers_in_use(&self) -> usize;

    /// The worker's fixed buffers, made on first use, and whether the ring has them
    /// registered (never on epoll).
    fn fixed_buffers(&mut self) -> io::Result<(RegisteredBufs, bool)>;

    /// The index a fixed op names `buf` by, if it is a chunk of this worker's registered
    /// pool (else it is plain memory here).
    fn fixed_index(&self, buf: &FixedChunk) -> Option<u16>;

    /// An fd other workers wake this one's loop through with
    /// [`send_wake`](Self::send_wake); `None` where the backend cannot be woken that way (epoll,
    /// io_uring before 5.18): those are woken by their eventfd.
    fn wake_target(&self) -> Option<std::os::fd::OwnedFd>;

    /// Queues a wake-up of the worker whose [`wake_target`](Self::wake_target) `target`
    /// is, sent with this backend's next submission, keeping `target` open until the
    /// kernel took the SQE; false if this backend cannot (the caller writes that worker's
    /// eventfd instead).
    fn send_wake(&mut self, target: &Arc<std::os::fd::OwnedFd>) -> bool;

    /// The close queue of this worker's direct-descriptor table, where it has one (io_uring
    /// 6.8+, asked for with `Builder::direct_descriptors`): accepts here then take
    /// direct descriptors. `None` elsewhere (epoll has no ring).
    fn direct_closer(&self) -> Option<DirectCloser>;

    /// A regular fd for direct descriptor `slot`, which the caller owns; the slot stays
    /// open. `Unsupported` where there are none.
    fn install_direct(&mut self, slot: u32) -> io::Result<std::os::fd::OwnedFd>;

    /// `shutdown(2)` of direct descriptor `slot`, which the caller owns, behind the ops
    /// queued for it. `Unsupported` where there are none.
    fn shutdown_direct(&mut self, slot: u32, how: std::net::Shutdown) -> io::Result<()>;

    /// The direct descriptor another worker sent here under `seq`.
    fn poll_arrival(&mut self, seq: u32, waker: &Waker) -> Poll<io::Result<OwnedSlot>>;

    /// The receiver of `seq` gives up: what arrived, or arrives later, is closed.
    fn forget_arrival(&mut self, seq: u32);
}

/// The backend a worker runs: the one place that knows which. Every call goes to the
/// chosen half through [`Mechanism`], statically dispatched.
// One per worker, so the size difference costs nothing; boxing would add a pointer chase
// to every op.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Backend {
    Uring(uring::UringBackend),
    Epoll(epoll::EpollBackend),
}

/// Runs `$body` with `$b` bound to whichever backend `$self` holds.
macro_rules! each {
    ($self:expr, $b:ident => $body:expr) => {
        match $self {
            Backend::Uring($b) => $body,
            Backend::Epoll($b) => $body,
        }
    };
}

impl Mechanism for Backend {
    fn kind(&self) -> BackendKind {
        each!(self, b => b.kind())
    }
    fn features(&self) -> Option<&Features> {
        each!(self, b => b.features())
    }
    fn supports(&self, cap: Capability) -> bool {
        each!(self, b => b.supports(cap))
    }
    fn metrics(&self) -> &Arc<Metrics> {
        each!(self, b => b.metrics())
    }
    fn ring_sizes(&self) -> (u32, u32) {
        each!(self, b => b.ring_sizes())
    }
    fn start(&mut self, op: &mut dyn Operation, waker: &Waker) -> io::Result<Start> {
        each!(self, b => b.start(op, waker))
    }
    fn start_chain(&mut self, ops: &mut [&mut dyn Operation]) -> Option<io::Result<Vec<OpId>>> {
        each!(self, b => b.start_chain(ops))
    }
    fn start_multishot(&mut self, op: &mut dyn Operation, queue_max: u16) -> io::Result<OpId> {
        each!(self, b => b.start_multishot(op, queue_max))
    }
    fn poll(
        &mut self,
        token: &mut Token,
        op: &mut dyn Operation,
        waker: &Waker,
    ) -> Poll<io::Result<Cqe>> {
        each!(self, b => b.poll(token, op, waker))
    }
    fn poll_id(&mut self, id: OpId, waker: &Waker) -> Poll<io::Result<Cqe>> {
        each!(self, b => b.poll_id(id, waker))
    }
    fn orphan(&mut self, id: OpId, orphan: Box<dyn Orphan>) {
        each!(self, b => b.orphan(id, orphan))
    }
    fn cancel(&mut self, id: OpId) {
        each!(self, b => b.cancel(id))
    }
    fn turn(&mut self, wait: Wait) -> io::Result<()> {
        each!(self, b => b.turn(wait))
    }
    fn submit(&mut self) -> io::Result<()> {
        each!(self, b => b.submit())
    }
    fn take_deferred(&mut self, out: &mut Deferred) {
        each!(self, b => b.take_deferred(out))
    }
    fn drain(&mut self, deadline: Instant) -> Vec<OpId> {
        each!(self, b => b.drain(deadline))
    }
    fn adopt_socket(&self, fd: RawFd) -> io::Result<()> {
        each!(self, b => b.adopt_socket(fd))
    }
    fn reads_inline(&self, fd: RawFd) -> bool {
        each!(self, b => b.reads_inline(fd))
    }
    fn close(&mut self, fd: RawFd) {
        each!(self, b => b.close(fd))
    }
    fn forget_fd(&mut self, fd: RawFd) -> bool {
        each!(self, b => b.forget_fd(fd))
    }
    fn links_name(&mut self, fd: RawFd) -> bool {
        each!(self, b => b.links_name(fd))
    }
    fn hand_out_linked(&mut self, fd: RawFd) -> Option<std::os::fd::OwnedFd> {
        each!(self, b => b.hand_out_linked(fd))
    }
    fn forget_drained(&mut self, fd: RawFd) {
        each!(self, b => b.forget_drained(fd))
    }
    fn readiness_dropped(&mut self, fd: RawFd, events: u32, key: ParkKey) {
        each!(self, b => b.readiness_dropped(fd, events, key))
    }
    fn recall_receive(&mut self, fd: RawFd, id: Option<OpId>) {
        each!(self, b => b.recall_receive(fd, id))
    }
    fn is_live(&self, id: OpId) -> bool {
        each!(self, b => b.is_live(id))
    }
    fn recv_group(&mut self) -> io::Result<BufGroup> {
        each!(self, b => b.recv_group())
    }
    fn recv_buffers_in_use(&self) -> usize {
        each!(self, b => b.recv_buffers_in_use())
    }
    fn fixed_buffers(&mut self) -> io::Result<(RegisteredBufs, bool)> {
        each!(self, b => b.fixed_buffers())
    }
    fn fixed_index(&self, buf: &FixedChunk) -> Option<u16> {
        each!(self, b => b.fixed_index(buf))
    }
    fn wake_target(&self) -> Option<std::os::fd::OwnedFd> {
        each!(self, b => b.wake_target())
    }
    fn send_wake(&mut self, target: &Arc<std::os::fd::OwnedFd>) -> bool {
        each!(self, b => b.send_wake(target))
    }
    fn direct_closer(&self) -> Option<DirectCloser> {
        each!(self, b => b.direct_closer())
    }
    fn install_direct(&mut self, slot: u32) -> io::Result<std::os::fd::OwnedFd> {
        each!(self, b => b.install_direct(slot))
    }
    fn shutdown_direct(&mut self, slot: u32, how: std::net::Shutdown) -> io::Result<()> {
        each!(self, b => b.shutdown_direct(slot, how))
    }
    fn poll_arrival(&mut self, seq: u32, waker: &Waker) -> Poll<io::Result<OwnedSlot>> {
        each!(self, b => b.poll_arrival(seq, waker))
    }
    fn forget_arrival(&mut self, seq: u32) {
        each!(self, b => b.forget_arrival(seq))
    }
}

/// The error of a direct-descriptor call on a backend without them.
pub(crate) fn no_direct() -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        "no direct descriptors on this worker: they need io_uring on Linux 6.8+ and \
         Builder::direct_descriptors",
    )
}

/// Sets or clears `O_NONBLOCK`.
pub(crate) fn set_nonblocking(fd: RawFd, on: bool) -> io::Result<()> {
    // SAFETY: fcntl on an fd with integer arguments only.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    let flags = if on {
        flags | libc::O_NONBLOCK
    } else {
        flags & !libc::O_NONBLOCK
    };
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every op holds a `Token`: the retry count of a failed poll fits in the padding
    /// beside the variant's tag, and the token stays as small as before it.
    #[test]
    fn a_readiness_wait_is_twelve_bytes_and_a_token_twenty() {
        assert_eq!(std::mem::size_of::<ReadyWait>(), 12);
        assert_eq!(std::mem::size_of::<Token>(), 20);
        assert_eq!(std::mem::align_of::<Token>(), 4);
    }
}
