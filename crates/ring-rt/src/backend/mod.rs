//! The backends under one interface: io_uring, or epoll plus a blocking pool.
//!
//! This is the ground floor: it imports nothing of ring-rt above it, and it is the one
//! place that knows which backend runs. An op reaches it as an [`Operation`] (how to run it
//! either way) and comes back as a `Token` to poll, or done; both backends complete ops
//! through ring-core's op table with the same `Cqe` values, so futures, cancellation and
//! orphan release above are one code path. `select` decides which backend a worker gets.

pub(crate) mod blocking;
pub(crate) mod epoll;
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
use ring_core::driver::Wait;
use ring_core::lifecycle::{Deferred, Orphan};
use ring_core::metrics::Metrics;
use ring_core::probe::Features;
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

    /// An op with no SQE of its own, run by readiness on io_uring too (`POLL_ADD`, then
    /// the syscall): a receive into a buffer group selected in user space (before 5.7).
    fn is_readiness_only(&self) -> bool {
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
    /// Retried whenever `fd` is ready for `events`. Nothing of the op is in flight; on
    /// io_uring, `poll` is the `POLL_ADD` waiting for the readiness (no memory).
    Ready {
        fd: RawFd,
        events: u32,
        poll: Option<OpId>,
    },
}

impl Token {
    /// The op table entry to orphan if the op's future is dropped now, and whether the op's
    /// own memory is in it (else it is only a readiness poll, which owns nothing).
    pub(crate) fn in_flight(&self) -> Option<(OpId, bool)> {
        match *self {
            Token::InFlight(id) => Some((id, true)),
            Token::Ready { poll: Some(id), .. } => Some((id, false)),
            Token::Ready { poll: None, .. } => None,
        }
    }
}

/// What starting an op gave.
pub(crate) enum Start {
    /// Running: poll this.
    Token(Token),
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

    /// The group, if it was created.
    pub(crate) fn get(&self) -> Option<&BufGroup> {
        self.group.as_ref()
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

/// The backend a worker runs: the one place that knows which.
// One per worker, so the size difference costs nothing; boxing would add a pointer chase
// to every op.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Backend {
    Uring(uring::UringBackend),
    Epoll(epoll::EpollBackend),
}

impl Backend {
    pub(crate) fn kind(&self) -> BackendKind {
        match self {
            Backend::Uring(_) => BackendKind::Uring,
            Backend::Epoll(_) => BackendKind::Epoll,
        }
    }

    /// The io_uring features in use; `None` on epoll.
    pub(crate) fn features(&self) -> Option<&Features> {
        match self {
            Backend::Uring(b) => Some(b.driver.features()),
            Backend::Epoll(_) => None,
        }
    }

    pub(crate) fn metrics(&self) -> &Arc<Metrics> {
        match self {
            Backend::Uring(b) => b.driver.metrics(),
            Backend::Epoll(b) => &b.metrics,
        }
    }

    /// Starts `op` (io_uring: pushes its SQE; epoll: tries it inline, waits for readiness
    /// or queues its job).
    pub(crate) fn start(&mut self, op: &mut dyn Operation) -> io::Result<Start> {
        match self {
            Backend::Uring(b) => b.start(op),
            Backend::Epoll(b) => b.start(op),
        }
    }

    /// Starts `ops` as one linked chain, each op running only if the one before succeeded,
    /// where the kernel can link them all; `None` where it cannot (epoll, or an op io_uring
    /// runs another way): the caller then runs them one after another.
    pub(crate) fn start_chain(
        &mut self,
        ops: &mut [&mut dyn Operation],
    ) -> Option<io::Result<Vec<OpId>>> {
        match self {
            Backend::Uring(b) => b.start_chain(ops),
            Backend::Epoll(_) => None,
        }
    }

    /// Starts a multishot op whose unpolled CQEs are bounded by `queue_max` (io_uring only:
    /// callers check [`features`](Self::features) for the multishot kind first).
    pub(crate) fn start_multishot(
        &mut self,
        op: &mut dyn Operation,
        queue_max: u16,
    ) -> io::Result<OpId> {
        match self {
            Backend::Uring(b) => b.start_multishot(op, queue_max),
            Backend::Epoll(_) => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "multishot ops need io_uring (5.19+ for accept, 6.0+ for recv)",
            )),
        }
    }

    /// Polls an op started by [`start`](Self::start) for its next CQE.
    pub(crate) fn poll(
        &mut self,
        token: &mut Token,
        op: &mut dyn Operation,
        waker: &Waker,
    ) -> Poll<io::Result<Cqe>> {
        match self {
            Backend::Uring(b) => b.poll(token, op, waker),
            Backend::Epoll(b) => b.poll(token, op, waker),
        }
    }

    /// Polls an op table entry (a multishot op, a chain's op) for its next CQE.
    pub(crate) fn poll_id(&mut self, id: OpId, waker: &Waker) -> Poll<io::Result<Cqe>> {
        match self {
            Backend::Uring(b) => b.driver.poll_op(id, waker),
            Backend::Epoll(b) => b.poll_id(id, waker),
        }
    }

    /// The future of op `id` was dropped: `orphan` keeps its memory until the final CQE,
    /// and the op is cancelled if it is still running.
    pub(crate) fn orphan(&mut self, id: OpId, orphan: Box<dyn Orphan>) {
        match self {
            // SAFETY: crate-private; every caller is the owner of `id` (an op future, a
            // stream, a chain or the worker's parked drops) giving up the op with the orphan
            // that owns its memory.
            Backend::Uring(b) => unsafe { b.driver.orphan(id, orphan) },
            Backend::Epoll(b) => b.orphan(id, orphan),
        }
    }

    /// Cancels op `id`, whose future stays to receive its (usually `ECANCELED`) final CQE.
    pub(crate) fn cancel(&mut self, id: OpId) {
        match self {
            Backend::Uring(b) => b.driver.cancel(id),
            Backend::Epoll(b) => b.cancel(id),
        }
    }

    /// One loop turn: submit, wait as asked, complete.
    pub(crate) fn turn(&mut self, wait: Wait) -> io::Result<()> {
        match self {
            Backend::Uring(b) => b.turn(wait),
            Backend::Epoll(b) => b.turn(wait),
        }
    }

    /// Submits what is queued without waiting (io_uring); nothing to do on epoll.
    pub(crate) fn submit(&mut self) -> io::Result<()> {
        match self {
            Backend::Uring(b) => b.driver.submit(),
            Backend::Epoll(_) => Ok(()),
        }
    }

    /// Moves the wakers to wake and the finished orphans to drop that the backend produced
    /// into `out`, to be run once the backend is no longer borrowed.
    pub(crate) fn take_deferred(&mut self, out: &mut Deferred) {
        match self {
            Backend::Uring(b) => b.take_deferred(out),
            Backend::Epoll(b) => b.take_deferred(out),
        }
    }

    /// Shutdown: cancels every op and waits until `deadline` for the kernel (or the pool)
    /// to finish with them; what is not done by then keeps its memory for ever.
    pub(crate) fn drain(&mut self, deadline: Instant) {
        match self {
            Backend::Uring(b) => b.drain(deadline),
            Backend::Epoll(b) => b.drain(deadline),
        }
    }

    /// SQ and CQ sizes (io_uring), or (0, 0) on epoll.
    pub(crate) fn ring_sizes(&self) -> (u32, u32) {
        match self {
            Backend::Uring(b) => b.driver.ring_sizes(),
            Backend::Epoll(_) => (0, 0),
        }
    }

    /// Puts a socket adopted by the runtime in the blocking mode this backend wants:
    /// blocking on io_uring (the kernel waits for readiness itself), non-blocking on epoll.
    pub(crate) fn adopt_socket(&self, fd: RawFd) -> io::Result<()> {
        set_nonblocking(fd, matches!(self, Backend::Epoll(_)))
    }

    /// Whether file reads of `fd` first try the page cache on the loop thread (epoll:
    /// `RWF_NOWAIT` where the file takes it; io_uring does that inline by itself).
    pub(crate) fn reads_inline(&self, fd: RawFd) -> bool {
        match self {
            Backend::Uring(_) => false,
            Backend::Epoll(b) => b.reads_inline(fd),
        }
    }

    /// Closes `fd`: on io_uring a `CLOSE` queued behind any op already pushed for it (so no
    /// queued op can find the number reused); on epoll a deregistration and `close`.
    pub(crate) fn close(&mut self, fd: RawFd) {
        match self {
            Backend::Uring(b) => b.close(fd),
            Backend::Epoll(b) => {
                b.forget_fd(fd);
                // SAFETY: the caller hands over its fd to be closed; epoll forgot it above.
                unsafe { ring_core::release::close_quietly(fd) };
            }
        }
    }

    /// Forgets `fd` before its owner takes it away (epoll deregisters it).
    pub(crate) fn forget_fd(&mut self, fd: RawFd) {
        if let Backend::Epoll(b) = self {
            b.forget_fd(fd);
        }
    }

    /// After a local `shutdown(2)` of `fd`: what was known drained may now give `EPIPE` or
    /// end of file at once (epoll).
    pub(crate) fn clear_unready(&mut self, fd: RawFd) {
        if let Backend::Epoll(b) = self {
            b.clear_unready(fd);
        }
    }

    /// The worker's shared receive buffer group, created on first use.
    pub(crate) fn recv_group(&mut self) -> io::Result<BufGroup> {
        match self {
            Backend::Uring(b) => b
                .recv_pool
                .get_or_create(|count, len| uring::recv_group(&mut b.driver, count, len)),
            // User-space buffer selection: a buffer is taken only once a socket is readable.
            Backend::Epoll(b) => b
                .recv_pool
                .get_or_create(|count, len| BufGroup::new_user(0, count, len)),
        }
    }

    /// Buffers of the receive pool that are out (0 before the pool is first used).
    pub(crate) fn recv_buffers_in_use(&self) -> usize {
        let group = match self {
            Backend::Uring(b) => b.recv_pool.get(),
            Backend::Epoll(b) => b.recv_pool.get(),
        };
        group.map_or(0, |g| g.in_use())
    }
}

/// Sets or clears `O_NONBLOCK`.
fn set_nonblocking(fd: RawFd, on: bool) -> io::Result<()> {
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
