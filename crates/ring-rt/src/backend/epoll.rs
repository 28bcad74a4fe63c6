//! The epoll backend: sockets by readiness, everything else on the blocking pool.
//!
//! Ops try their syscall first and wait for readiness only on EAGAIN (see `op::Op`); one
//! `epoll_wait` per loop turn handles every ready event. Blocking ops complete through
//! ring-core's op table with the same `Cqe` values the kernel would post, so futures,
//! cancellation and orphans are the same code as on io_uring.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use ring_core::cqe::Cqe;
use ring_core::driver::Wait;
use ring_core::lifecycle::Orphan;
use ring_core::metrics::Metrics;
use ring_core::op_table::{Dispatch, OpTable, Orphaned};
use ring_core::user_data::OpId;

use super::blocking::BlockingPool;
use super::{RecvBuffers, RecvPool};
use crate::op::BlockingJob;

/// epoll `data` values that are not fds.
const TOKEN_WAKE: u64 = u64::MAX;
const TOKEN_POOL: u64 = u64::MAX - 1;
/// Events collected per `epoll_wait`.
const EVENTS_MAX: usize = 1024;
/// How long dropping the backend waits for blocking jobs to finish.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

/// Tasks waiting for one fd to become readable or writable.
#[derive(Default)]
struct Registration {
    registered: bool,
    readers: Vec<Waker>,
    writers: Vec<Waker>,
    /// Directions (`POLLIN`/`POLLOUT`) a syscall showed drained (a short stream read or
    /// write) and no event has refilled since: the next op there waits for readiness
    /// instead of trying a syscall bound to fail with EAGAIN.
    unready: u32,
    /// Directions epoll reported closed (peer shutdown, hang-up, error). Sticky: edge
    /// triggering reports them once, and a drained queue whose peer has shut down gives
    /// end of file at once rather than EAGAIN, so these are never marked unready.
    closed: u32,
}

pub(crate) struct EpollBackend {
    epfd: OwnedFd,
    /// Indexed by fd: fds are small integers, so a Vec beats a map.
    regs: Vec<Registration>,
    pub(crate) ops: OpTable,
    pub(crate) metrics: Arc<Metrics>,
    pool: BlockingPool,
    events: Vec<libc::epoll_event>,
    on_wake: Box<dyn Fn()>,
    /// The worker's shared receive group (see `Backend::recv_group`).
    pub(crate) recv_pool: RecvPool,
}

impl EpollBackend {
    pub(crate) fn new(
        wake_fd: RawFd,
        on_wake: Box<dyn Fn()>,
        recv_buffers: RecvBuffers,
        blocking_threads: usize,
    ) -> io::Result<EpollBackend> {
        // SAFETY: no pointers; the result is checked.
        let epfd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if epfd < 0 {
            return Err(io::Error::last_os_error());
        }
        let backend = EpollBackend {
            // SAFETY: a fresh epoll fd nobody else owns.
            epfd: unsafe { OwnedFd::from_raw_fd(epfd) },
            regs: Vec::new(),
            ops: OpTable::new(),
            metrics: Arc::new(Metrics::default()),
            pool: BlockingPool::new(blocking_threads)?,
            events: vec![libc::epoll_event { events: 0, u64: 0 }; EVENTS_MAX],
            on_wake,
            recv_pool: RecvPool::new(recv_buffers),
        };
        backend.ctl(
            libc::EPOLL_CTL_ADD,
            wake_fd,
            libc::EPOLLIN as u32,
            TOKEN_WAKE,
        )?;
        let pool_fd = backend.pool.notify_fd();
        backend.ctl(
            libc::EPOLL_CTL_ADD,
            pool_fd,
            libc::EPOLLIN as u32,
            TOKEN_POOL,
        )?;
        Ok(backend)
    }

    fn ctl(&self, op: i32, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: valid epoll fd, and `ev` is a live epoll_event.
        if unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), op, fd, &mut ev) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Parks `waker` until `fd` is ready for `events` (POLLIN and/or POLLOUT). The fd is
    /// registered edge-triggered once, for both directions, on first use.
    pub(crate) fn wait_ready(&mut self, fd: RawFd, events: u32, waker: &Waker) -> io::Result<()> {
        let index = usize::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
        if self.regs.len() <= index {
            self.regs.resize_with(index + 1, Registration::default);
        }
        if !self.regs[index].registered {
            let interest = libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET;
            self.ctl(libc::EPOLL_CTL_ADD, fd, interest as u32, index as u64)?;
            self.regs[index].registered = true;
        }
        let reg = &mut self.regs[index];
        if events & libc::POLLIN as u32 != 0 {
            push_waker(&mut reg.readers, waker);
        }
        if events & libc::POLLOUT as u32 != 0 {
            push_waker(&mut reg.writers, waker);
        }
        Ok(())
    }

    /// Records that `fd` has nothing more for `events` until epoll says otherwise (see
    /// [`Registration::unready`]). Edge-triggered epoll reports any data or room that
    /// arrives after this, and registering an fd reports its current state, so no wake-up
    /// is lost.
    pub(crate) fn mark_unready(&mut self, fd: RawFd, events: u32) {
        let Ok(index) = usize::try_from(fd) else {
            return;
        };
        if self.regs.len() <= index {
            self.regs.resize_with(index + 1, Registration::default);
        }
        let reg = &mut self.regs[index];
        reg.unready |= events & !reg.closed;
    }

    /// Forgets what is known drained on `fd`: after a local `shutdown`, a syscall gives
    /// `EPIPE` or end of file at once, though epoll need not report anything new.
    pub(crate) fn clear_unready(&mut self, fd: RawFd) {
        if let Some(reg) = usize::try_from(fd).ok().and_then(|i| self.regs.get_mut(i)) {
            reg.unready = 0;
        }
    }

    /// Whether `fd` is known to be drained for all of `events`.
    pub(crate) fn is_unready(&self, fd: RawFd, events: u32) -> bool {
        usize::try_from(fd)
            .ok()
            .and_then(|i| self.regs.get(i))
            .is_some_and(|reg| reg.unready & events == events)
    }

    /// Forgets `fd` (before it is closed), waking anyone still waiting on it.
    pub(crate) fn deregister(&mut self, fd: RawFd) {
        let Some(reg) = usize::try_from(fd).ok().and_then(|i| self.regs.get_mut(i)) else {
            return;
        };
        let reg = std::mem::take(reg);
        if reg.registered {
            let _ = self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0);
        }
        reg.readers
            .into_iter()
            .chain(reg.writers)
            .for_each(Waker::wake);
    }

    /// Runs `job` on the blocking pool as op `id` of the op table.
    pub(crate) fn submit_blocking(&mut self, job: BlockingJob) -> io::Result<OpId> {
        let id = self.ops.insert()?;
        if let Err(err) = self.pool.submit(id, job) {
            // No thread could start: complete the op with the error instead.
            let res = -err.raw_os_error().unwrap_or(libc::EAGAIN);
            self.ops.complete(Cqe::new(id.to_user_data(), res, 0));
        }
        self.note_in_flight();
        Ok(id)
    }

    pub(crate) fn poll(&mut self, id: OpId, waker: &Waker) -> Poll<io::Result<Cqe>> {
        let polled = self.ops.poll(id, waker);
        if polled.is_ready() {
            self.note_in_flight();
        }
        polled
    }

    /// A dropped blocking op: a job still queued is removed (completing as cancelled); one
    /// already running keeps its memory in the orphan until the thread finishes.
    pub(crate) fn orphan(&mut self, id: OpId, orphan: Box<dyn Orphan>) {
        match self.ops.orphan(id, orphan) {
            Ok(Orphaned::NeedsCancel) => {
                Metrics::bump(&self.metrics.cancels_sent);
                if self.pool.cancel(id) {
                    self.dispatch(Cqe::new(id.to_user_data(), -libc::ECANCELED, 0));
                }
            }
            Ok(Orphaned::Freed) => Metrics::bump(&self.metrics.orphans_reaped),
            Err(_) => Metrics::bump(&self.metrics.stale_cqes),
        }
        self.note_in_flight();
    }

    /// One loop turn: one `epoll_wait`, then wake every ready fd's waiters and complete
    /// every finished blocking job.
    pub(crate) fn turn(&mut self, wait: Wait) -> io::Result<()> {
        let timeout_ms = if self.pool.has_done() {
            0
        } else {
            timeout_ms(wait)
        };
        // SAFETY: `events` has EVENTS_MAX initialised entries the kernel may overwrite.
        let n = unsafe {
            libc::epoll_wait(
                self.epfd.as_raw_fd(),
                self.events.as_mut_ptr(),
                EVENTS_MAX as i32,
                timeout_ms,
            )
        };
        Metrics::bump(&self.metrics.enters);
        if n < 0 {
            let err = io::Error::last_os_error();
            // A signal interrupted the wait: the loop comes round again.
            return if err.kind() == io::ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(err)
            };
        }
        for i in 0..n as usize {
            let ev = self.events[i];
            self.on_event(ev.u64, ev.events);
        }
        for (id, res) in self.pool.take_done() {
            self.dispatch(Cqe::new(id.to_user_data(), res, 0));
        }
        Ok(())
    }

    fn on_event(&mut self, token: u64, events: u32) {
        match token {
            TOKEN_WAKE => (self.on_wake)(),
            TOKEN_POOL => {}
            fd => {
                let Some(reg) = self.regs.get_mut(fd as usize) else {
                    return;
                };
                let err = (libc::EPOLLERR | libc::EPOLLHUP) as u32;
                if events & (libc::EPOLLRDHUP as u32 | err) != 0 {
                    reg.closed |= libc::POLLIN as u32;
                }
                if events & err != 0 {
                    reg.closed |= libc::POLLOUT as u32;
                }
                if events & (libc::EPOLLIN | libc::EPOLLRDHUP) as u32 != 0 || events & err != 0 {
                    reg.unready &= !(libc::POLLIN as u32);
                    reg.readers.drain(..).for_each(Waker::wake);
                }
                if events & libc::EPOLLOUT as u32 != 0 || events & err != 0 {
                    reg.unready &= !(libc::POLLOUT as u32);
                    reg.writers.drain(..).for_each(Waker::wake);
                }
            }
        }
    }

    fn dispatch(&mut self, cqe: Cqe) {
        Metrics::bump(&self.metrics.cqes_reaped);
        match self.ops.complete(cqe) {
            Dispatch::Reaped { .. } => Metrics::bump(&self.metrics.orphans_reaped),
            Dispatch::Stale | Dispatch::Unknown => Metrics::bump(&self.metrics.stale_cqes),
            Dispatch::Delivered | Dispatch::Reserved(_) => {}
        }
        self.note_in_flight();
    }

    fn note_in_flight(&self) {
        Metrics::set(&self.metrics.ops_in_flight, self.ops.len() as u64);
    }
}

impl Drop for EpollBackend {
    /// Waits for running blocking jobs: they write into memory their orphans keep.
    fn drop(&mut self) {
        let deadline = Instant::now() + SHUTDOWN_WAIT;
        while self.ops.awaiting_kernel() > 0 && Instant::now() < deadline {
            if self.turn(Wait::For(Duration::from_millis(50))).is_err() {
                break;
            }
        }
        if self.ops.awaiting_kernel() > 0 {
            std::mem::forget(std::mem::take(&mut self.ops));
        }
    }
}

fn push_waker(list: &mut Vec<Waker>, waker: &Waker) {
    if !list.iter().any(|w| w.will_wake(waker)) {
        list.push(waker.clone());
    }
}

fn timeout_ms(wait: Wait) -> i32 {
    match wait {
        Wait::No => 0,
        Wait::Forever => -1,
        // Round up: waking before a timer's deadline would just cost another turn.
        Wait::For(d) => d.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32,
    }
}
