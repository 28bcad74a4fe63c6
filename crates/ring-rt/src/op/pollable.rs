//! Ops on a pollable fd that is not a socket's, run by readiness on both backends: a
//! FIFO's, a pipe's or a terminal's stream reads and writes (for `fs::read` and
//! `fs::write`, through `fs::stream::Stream`), a signalfd's reads (`signal::wait`), and
//! [`WaitReady`], a wait that moves nothing (a socket's too). The fd is non-blocking (its
//! owner makes it so). Each op tries `read(2)` or `write(2)`, and on `EAGAIN` waits for
//! readiness (io_uring's `POLL_ADD`, epoll) and tries again, in the poll that returns: a
//! dropped op has moved nothing. The call comes first: a FIFO no writer has opened yet
//! reads empty but reports no readiness (review CV). Neither call blocks on a FIFO, a pipe
//! or a terminal; a file that ignores `O_NONBLOCK`, such as a FUSE file opened as a
//! stream, still can (review CV).
//!
//! Not the blocking pool: its `read(2)` went on after the future was dropped, took bytes
//! meant for the next reader, and held its thread until data came (review CT). Not
//! io_uring's `READ` either: a dropped future whose read the kernel had completed would take
//! what it read (a signal, a FIFO's bytes) with it; nor a `poll(2)` and a blocking
//! `read(2)`: a terminal says it is readable, then a blocking read waits for `VMIN` bytes
//! (and a write for room), with the worker inside it (review CU: 3 s past a 200 ms
//! timeout, on both backends).

use std::io;
use std::os::fd::RawFd;
use std::task::{Context, Poll};

use io_uring::{opcode, squeue, types};
use ring_core::cqe::Cqe;

use super::fs::len_u32;
use super::net::{readable, writable};
use super::{Emulation, OpDef, Operation};
use crate::backend::direct::sqe_on;
use crate::buf::{read_output, IoBuf, IoBufMut};
use crate::sys;

/// A read of what comes next on a non-blocking file without a position.
pub(crate) struct ReadPollable<B> {
    pub(crate) fd: RawFd,
    pub(crate) buf: B,
    /// Waits for data on `EAGAIN`; else `EAGAIN` is the op's result (for a caller that
    /// bounds its wait for readability itself: a terminal whose reads end at a silence).
    pub(crate) waits: bool,
}

impl<B: IoBufMut> ReadPollable<B> {
    fn read_now(&mut self) -> Cqe {
        let len = len_u32(self.buf.bytes_total()) as usize;
        // SAFETY: the buffer is writable for `len` bytes and owned by the op; the fd is
        // non-blocking (see the module docs).
        let n = unsafe { libc::read(self.fd, self.buf.stable_mut_ptr().cast(), len) };
        Cqe::new(0, sys::res(n), 0)
    }
}

// SAFETY: the syscall points only at the buffer this op owns (on the heap) and at its own
// fd, and runs on the worker in the poll that returns its result: a dropped op has read
// nothing. The SQE is never submitted (readiness only).
unsafe impl<B: IoBufMut> Operation for ReadPollable<B> {
    fn fd(&self) -> Option<RawFd> {
        Some(self.fd)
    }

    fn emulate(&mut self) -> Emulation {
        readable(self.fd)
    }

    fn try_syscall(&mut self) -> Cqe {
        self.read_now()
    }

    fn sqe(&mut self) -> squeue::Entry {
        // Unused (readiness only).
        let len = len_u32(self.buf.bytes_total());
        opcode::Read::new(types::Fd(self.fd), self.buf.stable_mut_ptr(), len)
            .offset(u64::MAX)
            .build()
    }

    fn is_readiness_only(&self) -> bool {
        true
    }

    fn tries_elsewhere(&self) -> bool {
        false
    }
}

impl<B: IoBufMut> OpDef for ReadPollable<B> {
    type Output = (io::Result<usize>, B);

    /// A read that does not wait is done here, before any backend sees it.
    fn poll_prepare(&mut self, _cx: &mut Context<'_>) -> Poll<Option<Cqe>> {
        if self.waits {
            return Poll::Ready(None);
        }
        loop {
            let cqe = self.read_now();
            if cqe.res != -libc::EINTR {
                return Poll::Ready(Some(cqe));
            }
        }
    }

    fn needs_prepare(&self) -> bool {
        !self.waits
    }

    fn complete(self, cqe: Cqe) -> Self::Output {
        // SAFETY: `cqe` is this op's final completion, a read into the start of `buf`.
        unsafe { read_output(&cqe, self.buf) }
    }
}

/// A write after what was written before to a non-blocking file without a position.
pub(crate) struct WritePollable<B> {
    pub(crate) fd: RawFd,
    pub(crate) buf: B,
}

// SAFETY: as for `ReadPollable`: the syscall reads only the buffer this op owns, on the
// worker, in the poll that returns its result; a dropped op has written nothing.
unsafe impl<B: IoBuf> Operation for WritePollable<B> {
    fn fd(&self) -> Option<RawFd> {
        Some(self.fd)
    }

    fn emulate(&mut self) -> Emulation {
        writable(self.fd)
    }

    fn try_syscall(&mut self) -> Cqe {
        let len = len_u32(self.buf.bytes_init()) as usize;
        // SAFETY: the buffer is readable for `len` bytes and owned by the op; the fd is
        // non-blocking (see the module docs).
        let n = unsafe { libc::write(self.fd, self.buf.stable_ptr().cast(), len) };
        Cqe::new(0, sys::res(n), 0)
    }

    fn sqe(&mut self) -> squeue::Entry {
        // Unused (readiness only).
        let len = len_u32(self.buf.bytes_init());
        opcode::Write::new(types::Fd(self.fd), self.buf.stable_ptr(), len)
            .offset(u64::MAX)
            .build()
    }

    fn is_readiness_only(&self) -> bool {
        true
    }

    fn tries_elsewhere(&self) -> bool {
        false
    }

    fn moves_nothing(&self) -> bool {
        self.buf.bytes_init() == 0
    }
}

impl<B: IoBuf> OpDef for WritePollable<B> {
    type Output = (io::Result<usize>, B);

    fn complete(self, cqe: Cqe) -> Self::Output {
        (
            crate::completion::result(&cqe).map(|n| n as usize),
            self.buf,
        )
    }
}

/// Waits until an fd is ready for `events` (`POLLIN` or `POLLOUT`), moving nothing: for a
/// caller that then reads or sends itself. The adapter's direct send, which met a full
/// buffer, sends borrowed bytes and so need not copy them into a send op; `fs::read` of a
/// terminal whose reads end after `VTIME` of silence bounds this wait, which drops cleanly
/// where a read would take its buffer with it. Readiness only on both backends; on
/// io_uring the `POLL_ADD`'s completion is the op's (see [`Operation::is_wait_only`]).
pub(crate) struct WaitReady {
    pub(crate) fd: RawFd,
    pub(crate) events: i16,
}

// SAFETY: the SQE (a `POLL_ADD`, unused: the op is readiness-only) points at no memory;
// `try_syscall`'s `poll(2)` (`sys::poll_now`) reads and writes one `pollfd` on that
// function's own stack.
unsafe impl Operation for WaitReady {
    fn fd(&self) -> Option<RawFd> {
        Some(self.fd)
    }

    fn emulate(&mut self) -> Emulation {
        Emulation::Readiness {
            fd: self.fd,
            events: self.events as u32,
        }
    }

    /// epoll: whether the fd is ready now (`EAGAIN` if not), by a `poll(2)` that never
    /// blocks.
    fn try_syscall(&mut self) -> Cqe {
        match sys::poll_now(self.fd, self.events) {
            Ok(0) => Cqe::new(0, -libc::EAGAIN, 0),
            Ok(revents) => Cqe::new(0, i32::from(revents), 0),
            Err(res) => Cqe::new(0, res, 0),
        }
    }

    fn sqe(&mut self) -> squeue::Entry {
        sqe_on!(self.fd, |t| opcode::PollAdd::new(t, self.events as u32)
            .build())
    }

    fn is_readiness_only(&self) -> bool {
        true
    }

    fn is_wait_only(&self) -> bool {
        true
    }
}

impl OpDef for WaitReady {
    /// `Ok` once the fd is ready, or has an error or hang-up that its next read or write
    /// reports.
    type Output = io::Result<()>;

    fn complete(self, cqe: Cqe) -> io::Result<()> {
        match cqe.res {
            res if res < 0 => Err(io::Error::from_raw_os_error(-res)),
            _ => Ok(()),
        }
    }
}
