//! The one op interface every backend runs: an op is a plain struct that builds its SQE and
//! turns its CQE into an output; `Op` is the future that submits it on first poll, and on
//! drop hands the op's memory to the op table as an orphan.

pub(crate) mod fs;
pub mod link;
pub(crate) mod net;

use std::future::Future;
use std::io;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use io_uring::squeue;
use ring_core::cqe::Cqe;
use ring_core::lifecycle::Orphan;
use ring_core::release::Keep;
use ring_core::user_data::OpId;

use crate::backend::BackendKind;
use crate::runtime::Core;

/// How the epoll backend performs an op without io_uring.
#[doc(hidden)]
pub enum Emulation {
    /// A socket op: [`OpDef::try_syscall`] runs the non-blocking syscall on the loop thread;
    /// on `-EAGAIN` the future waits until `fd` is ready for `events` (`POLLIN`/`POLLOUT`)
    /// and tries again. Nothing is in flight between tries, so dropping costs nothing.
    Readiness { fd: RawFd, events: u32 },
    /// An op that may block (files, fsync, open): the job runs on the blocking pool and
    /// returns the CQE result (`>= 0` or `-errno`). It holds raw addresses of memory the op
    /// keeps alive until the completion arrives (an orphan keeps it if the future is dropped).
    Blocking(BlockingJob),
}

/// A syscall to run on the blocking pool (epoll backend): it returns what the kernel would
/// post as the CQE's result, `>= 0` or `-errno`. Only ring-rt's own ops make these.
///
/// # Examples
///
/// ```
/// use ring_rt::op::BlockingJob;
///
/// let job: BlockingJob = Box::new(|| -libc::EOPNOTSUPP);
/// assert_eq!(job(), -libc::EOPNOTSUPP);
/// ```
pub type BlockingJob = Box<dyn FnOnce() -> i32 + Send + 'static>;

/// One kind of operation (implemented by ring-rt's own op types only).
#[doc(hidden)]
pub trait OpDef: Unpin + 'static {
    /// What awaiting the op gives.
    type Output;

    /// The io_uring SQE. Pointers in it must point into memory `self` owns on the heap.
    fn sqe(&mut self) -> squeue::Entry;

    /// The final CQE's result, turned into the output (handing owned buffers back).
    fn complete(self, cqe: Cqe) -> Self::Output;

    /// How the epoll backend runs this op.
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

    /// For [`Emulation::Blocking`] ops: an attempt that cannot block, made on the loop
    /// thread before the op goes to the blocking pool (a read of cached file data with
    /// `RWF_NOWAIT`). `None` sends the op to the pool, as does the default.
    fn try_inline(&mut self) -> Option<Cqe> {
        None
    }

    /// A CQE with `F_MORE` before the final one (e.g. a zero-copy send's result, whose
    /// buffer the kernel holds until the notification CQE).
    fn on_more(&mut self, _cqe: Cqe) {}

    /// What to keep and release if the future is dropped in flight. The default keeps the
    /// op's memory until the final CQE and releases nothing.
    fn into_orphan(self) -> Box<dyn Orphan>
    where
        Self: Sized,
    {
        Box::new(Keep(self))
    }
}

enum State<T> {
    Unsubmitted(T),
    /// In the op table: an io_uring SQE, or a job on the epoll backend's blocking pool.
    Submitted(OpId, T),
    /// epoll backend: retrying the syscall whenever `fd` becomes ready.
    Readiness(T, RawFd, u32),
    Done,
}

/// One I/O operation on the current worker, submitted on its first poll. It owns its buffers
/// until it completes; dropping it in flight cancels it, and the runtime keeps its memory
/// until the kernel is done.
pub(crate) struct Op<T: OpDef> {
    core: Rc<Core>,
    state: State<T>,
}

impl<T: OpDef> Op<T> {
    pub(crate) fn new(core: Rc<Core>, op: T) -> Op<T> {
        Op {
            core,
            state: State::Unsubmitted(op),
        }
    }

    /// The op's definition, before it was ever polled.
    ///
    /// # Panics
    /// If the op was already polled (then it is in flight and can no longer join a chain).
    pub(crate) fn into_def(mut self) -> T {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Unsubmitted(op) => op,
            _ => panic!("an op can be linked or given a timeout only before it is first polled"),
        }
    }

    /// The op's definition if nothing of it is in flight (not yet started, or waiting for
    /// readiness on epoll).
    pub(crate) fn take_waiting(&mut self) -> Option<T> {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Unsubmitted(op) | State::Readiness(op, ..) => Some(op),
            other => {
                self.state = other;
                None
            }
        }
    }
}

/// A CQE standing for an error that happened before the kernel saw the op.
pub(crate) fn error_cqe(err: &io::Error) -> Cqe {
    Cqe::new(0, -err.raw_os_error().unwrap_or(libc::EIO), 0)
}

impl<T: OpDef> Op<T> {
    /// Starts the op on this worker's backend; `Err` carries the output of an op that
    /// already finished: a failed start, or (epoll) a read served inline.
    fn start(&mut self, mut op: T) -> Result<(), T::Output> {
        let mut backend = self.core.backend.borrow_mut();
        let started = match backend.kind() {
            BackendKind::Uring => backend.submit(op.sqe()),
            BackendKind::Epoll => {
                if let Some(cqe) = op.try_inline() {
                    // Done without a thread hand-off; "failed to start" returns it at once.
                    drop(backend);
                    return Err(op.complete(cqe));
                }
                match op.emulate() {
                    Emulation::Readiness { fd, events } => {
                        self.state = State::Readiness(op, fd, events);
                        return Ok(());
                    }
                    Emulation::Blocking(job) => backend.submit_blocking(job),
                }
            }
        };
        drop(backend);
        match started {
            Ok(id) => {
                self.state = State::Submitted(id, op);
                Ok(())
            }
            Err(err) => Err(op.complete(error_cqe(&err))),
        }
    }

    /// Polls the op table for the op's CQEs (both backends).
    fn poll_submitted(&mut self, cx: &mut Context<'_>) -> Poll<T::Output> {
        let State::Submitted(id, op) = &mut self.state else {
            unreachable!("poll_submitted is only called in Submitted")
        };
        loop {
            let polled = self.core.backend.borrow_mut().poll(*id, cx.waker());
            let cqe = match polled {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(cqe)) => cqe,
                Poll::Ready(Err(err)) => error_cqe(&err),
            };
            if cqe.is_more() {
                op.on_more(cqe);
                continue;
            }
            let State::Submitted(_, op) = std::mem::replace(&mut self.state, State::Done) else {
                unreachable!("matched Submitted above")
            };
            return Poll::Ready(op.complete(cqe));
        }
    }

    /// epoll: tries the syscall (unless the fd is known drained); on EAGAIN waits for
    /// readiness and tries again when woken.
    fn poll_readiness(&mut self, cx: &mut Context<'_>) -> Poll<T::Output> {
        let State::Readiness(op, fd, events) = &mut self.state else {
            unreachable!("poll_readiness is only called in Readiness")
        };
        let (fd, events) = (*fd, *events);
        let cqe = loop {
            let mut backend = self.core.backend.borrow_mut();
            if !backend.is_unready(fd, events) {
                drop(backend);
                let cqe = op.try_syscall();
                if cqe.res == -libc::EINTR {
                    continue;
                }
                if cqe.res != -libc::EAGAIN {
                    if op.leaves_unready(&cqe) {
                        self.core.backend.borrow_mut().mark_unready(fd, events);
                    }
                    break cqe;
                }
                backend = self.core.backend.borrow_mut();
            }
            match backend.wait_ready(fd, events, cx.waker()) {
                Ok(()) => return Poll::Pending,
                Err(err) => break error_cqe(&err),
            }
        };
        let State::Readiness(op, ..) = std::mem::replace(&mut self.state, State::Done) else {
            unreachable!("matched Readiness above")
        };
        Poll::Ready(op.complete(cqe))
    }
}

impl<T: OpDef> Future for Op<T> {
    type Output = T::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T::Output> {
        let this = &mut *self;
        if let State::Unsubmitted(_) = this.state {
            let State::Unsubmitted(op) = std::mem::replace(&mut this.state, State::Done) else {
                unreachable!("checked just above")
            };
            if let Err(output) = this.start(op) {
                return Poll::Ready(output);
            }
        }
        match this.state {
            State::Submitted(..) => this.poll_submitted(cx),
            State::Readiness(..) => this.poll_readiness(cx),
            State::Unsubmitted(_) | State::Done => panic!("ring-rt op polled after it completed"),
        }
    }
}

impl<T: OpDef> Drop for Op<T> {
    fn drop(&mut self) {
        if let State::Submitted(id, op) = std::mem::replace(&mut self.state, State::Done) {
            if let Ok(mut backend) = self.core.backend.try_borrow_mut() {
                backend.orphan(id, op.into_orphan());
            } else {
                // Dropped while the backend is busy (a waker dropping a task mid-turn):
                // keep the memory forever rather than free it under the kernel.
                std::mem::forget(op);
            }
        }
    }
}
