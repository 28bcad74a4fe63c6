//! Reads and writes of a file without a position (a FIFO, a pipe, a terminal) as a stream,
//! for `fs::read` and `fs::write` through `fs::stream::Stream`, which makes the fd
//! non-blocking first (its open file description is theirs: they opened it). On both
//! backends: `read(2)` or `write(2)`, and on `EAGAIN` readiness (io_uring's `POLL_ADD`,
//! epoll) and the call again, in the poll that returns. The call comes first: a FIFO no
//! writer has opened yet reads empty but reports no readiness (review CV). Neither call
//! blocks on a FIFO, a pipe or a terminal; a file that ignores `O_NONBLOCK`, such as a FUSE
//! file opened as a stream, still can (review CV).
//!
//! Not the blocking pool: its `read(2)` went on after the future was dropped, took bytes
//! meant for the next reader, and held its thread until data came (review CT). Not
//! io_uring's `READ` either, nor a `poll(2)` and a blocking `read(2)`: a terminal says it is
//! readable, then a blocking read waits for `VMIN` bytes (and a write for room), with the
//! worker inside it (review CU: 3 s past a 200 ms timeout, on both backends).

use std::os::fd::RawFd;

use io_uring::{opcode, squeue, types};
use ring_core::cqe::Cqe;

use super::len_u32;
use crate::buf::{read_output, IoBuf, IoBufMut};
use crate::op::{Emulation, OpDef, Operation};
use crate::sys;

/// A read of what comes next on a non-blocking file without a position.
pub(crate) struct ReadStream<B> {
    pub(crate) fd: RawFd,
    pub(crate) buf: B,
}

// SAFETY: the syscall points only at the buffer this op owns (on the heap) and at its own
// fd, and runs on the worker in the poll that returns its result: a dropped op has read
// nothing. The SQE is never submitted (readiness only).
unsafe impl<B: IoBufMut> Operation for ReadStream<B> {
    fn fd(&self) -> Option<RawFd> {
        Some(self.fd)
    }

    fn emulate(&mut self) -> Emulation {
        Emulation::Readiness {
            fd: self.fd,
            events: libc::POLLIN as u32,
        }
    }

    fn try_syscall(&mut self) -> Cqe {
        let len = len_u32(self.buf.bytes_total()) as usize;
        // SAFETY: the buffer is writable for `len` bytes and owned by the op; the fd is
        // non-blocking (see the module docs).
        let n = unsafe { libc::read(self.fd, self.buf.stable_mut_ptr().cast(), len) };
        Cqe::new(0, sys::res(n), 0)
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
}

impl<B: IoBufMut> OpDef for ReadStream<B> {
    type Output = (std::io::Result<usize>, B);

    fn complete(self, cqe: Cqe) -> Self::Output {
        // SAFETY: `cqe` is this op's final completion, a read into the start of `buf`.
        unsafe { read_output(&cqe, self.buf) }
    }
}

/// A write after what was written before to a non-blocking file without a position.
pub(crate) struct WriteStream<B> {
    pub(crate) fd: RawFd,
    pub(crate) buf: B,
}

// SAFETY: as for `ReadStream`: the syscall reads only the buffer this op owns, on the
// worker, in the poll that returns its result; a dropped op has written nothing.
unsafe impl<B: IoBuf> Operation for WriteStream<B> {
    fn fd(&self) -> Option<RawFd> {
        Some(self.fd)
    }

    fn emulate(&mut self) -> Emulation {
        Emulation::Readiness {
            fd: self.fd,
            events: libc::POLLOUT as u32,
        }
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

    fn moves_nothing(&self) -> bool {
        self.buf.bytes_init() == 0
    }
}

impl<B: IoBuf> OpDef for WriteStream<B> {
    type Output = (std::io::Result<usize>, B);

    fn complete(self, cqe: Cqe) -> Self::Output {
        (
            crate::completion::result(&cqe).map(|n| n as usize),
            self.buf,
        )
    }
}
