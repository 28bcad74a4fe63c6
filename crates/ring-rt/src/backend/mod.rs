//! The backends under the one op interface: io_uring, or epoll plus a blocking pool.
//!
//! Ops, futures, cancellation and orphan release are shared: both backends complete ops
//! through ring-core's op table with the same `Cqe` values, so nothing above this module
//! knows which one runs.

pub(crate) mod blocking;
pub(crate) mod epoll;
pub(crate) mod uring;

use std::fmt;
use std::io;
use std::sync::Arc;
use std::task::{Poll, Waker};

use io_uring::squeue;
use ring_core::buf_pool::BufGroup;
use ring_core::cqe::Cqe;
use ring_core::driver::Wait;
use ring_core::lifecycle::Orphan;
use ring_core::metrics::Metrics;
use ring_core::probe::Features;
use ring_core::user_data::OpId;

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

/// The backend a worker runs.
// One per worker, so the size difference costs nothing; boxing would add a pointer chase
// to every op.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Backend {
    Uring(uring::UringBackend),
    Epoll(epoll::EpollBackend),
}

fn no_sqes() -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        "the epoll backend takes no io_uring SQEs",
    )
}

impl Backend {
    pub(crate) fn kind(&self) -> BackendKind {
        match self {
            Backend::Uring(_) => BackendKind::Uring,
            Backend::Epoll(_) => BackendKind::Epoll,
        }
    }

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

    /// Submits one op.
    pub(crate) fn submit(&mut self, sqe: squeue::Entry) -> io::Result<OpId> {
        match self {
            Backend::Uring(b) => b.driver.submit_op(sqe),
            Backend::Epoll(_) => Err(no_sqes()),
        }
    }

    /// Submits ops as one linked chain (io_uring only; epoll runs chains op by op).
    pub(crate) fn submit_chain(&mut self, sqes: Vec<squeue::Entry>) -> io::Result<Vec<OpId>> {
        match self {
            Backend::Uring(b) => b.driver.submit_chain(sqes),
            Backend::Epoll(_) => Err(no_sqes()),
        }
    }

    pub(crate) fn poll(&mut self, id: OpId, waker: &Waker) -> Poll<io::Result<Cqe>> {
        match self {
            Backend::Uring(b) => b.driver.poll_op(id, waker),
            Backend::Epoll(b) => b.poll(id, waker),
        }
    }

    pub(crate) fn orphan(&mut self, id: OpId, orphan: Box<dyn Orphan>) {
        match self {
            Backend::Uring(b) => b.driver.orphan(id, orphan),
            Backend::Epoll(b) => b.orphan(id, orphan),
        }
    }

    /// One loop turn: submit, wait as asked, complete.
    pub(crate) fn turn(&mut self, wait: Wait) -> io::Result<()> {
        match self {
            Backend::Uring(b) => b.turn(wait),
            Backend::Epoll(b) => b.turn(wait),
        }
    }

    /// SQ and CQ sizes (io_uring), or (0, 0) on epoll.
    pub(crate) fn ring_sizes(&self) -> (u32, u32) {
        match self {
            Backend::Uring(b) => b.driver.ring_sizes(),
            Backend::Epoll(_) => (0, 0),
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

/// Closes `fd` through `core`'s backend: on io_uring a CLOSE SQE queued behind any op
/// already pushed for the fd (so no queued op can find the number reused), on epoll a
/// deregistration and `close`. Falls back to a plain `close` if the backend is busy.
pub(crate) fn close_fd(core: &crate::runtime::Core, fd: std::os::fd::RawFd) {
    match core.backend.try_borrow_mut() {
        Ok(mut backend) => backend.close(fd),
        Err(_) => ring_core::release::close_quietly(fd),
    }
}

impl Backend {
    pub(crate) fn close(&mut self, fd: std::os::fd::RawFd) {
        match self {
            Backend::Uring(b) => {
                let sqe = io_uring::opcode::Close::new(io_uring::types::Fd(fd))
                    .build()
                    .user_data(ring_core::user_data::Reserved::Ignore.to_user_data());
                b.driver.push(sqe);
            }
            Backend::Epoll(b) => {
                b.deregister(fd);
                ring_core::release::close_quietly(fd);
            }
        }
    }

    /// Runs an op's blocking job (epoll backend only).
    pub(crate) fn submit_blocking(&mut self, job: crate::op::BlockingJob) -> io::Result<OpId> {
        match self {
            Backend::Epoll(b) => b.submit_blocking(job),
            Backend::Uring(_) => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "io_uring runs ops as SQEs",
            )),
        }
    }

    /// epoll: records that `fd` is drained for `events` (see `EpollBackend::mark_unready`).
    pub(crate) fn mark_unready(&mut self, fd: std::os::fd::RawFd, events: u32) {
        if let Backend::Epoll(b) = self {
            b.mark_unready(fd, events);
        }
    }

    /// epoll: forgets what is known drained on `fd` (see `EpollBackend::clear_unready`).
    pub(crate) fn clear_unready(&mut self, fd: std::os::fd::RawFd) {
        if let Backend::Epoll(b) = self {
            b.clear_unready(fd);
        }
    }

    /// epoll: whether `fd` is known drained for `events` (never on io_uring).
    pub(crate) fn is_unready(&self, fd: std::os::fd::RawFd, events: u32) -> bool {
        match self {
            Backend::Epoll(b) => b.is_unready(fd, events),
            Backend::Uring(_) => false,
        }
    }

    /// Parks `waker` until `fd` is ready (epoll backend only).
    pub(crate) fn wait_ready(
        &mut self,
        fd: std::os::fd::RawFd,
        events: u32,
        waker: &Waker,
    ) -> io::Result<()> {
        match self {
            Backend::Epoll(b) => b.wait_ready(fd, events, waker),
            Backend::Uring(_) => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "io_uring waits in the kernel",
            )),
        }
    }
}
