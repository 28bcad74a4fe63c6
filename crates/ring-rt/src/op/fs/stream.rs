//! Reads and writes of a file without a position (a FIFO, a pipe, a terminal) as a stream,
//! for `fs::read` and `fs::write`. On io_uring, `READ` and `WRITE` at the file's own
//! position (offset -1), which the kernel waits for and cancels as a socket's. On epoll,
//! readiness, then a syscall that never blocks. Never the blocking pool: its `read(2)` went
//! on after the future was dropped, took bytes meant for the next reader, and held its
//! thread until data came (review CT).

use std::os::fd::RawFd;
use std::task::{Context, Poll};

use io_uring::{opcode, squeue, types};
use ring_core::cqe::Cqe;

use super::{len_u32, no_position};
use crate::buf::{read_output, IoBuf, IoBufMut};
use crate::op::{Emulation, OpDef, Operation};
use crate::sys;

/// What io_uring reads as "the file's own position", as `read(2)` and `write(2)` use.
const OWN_POSITION: u64 = u64::MAX;

/// A read of what comes next on a file without a position.
pub(crate) struct ReadStream<B> {
    pub(crate) fd: RawFd,
    pub(crate) buf: B,
    /// The file has a position: `ESPIPE`, as a positional op on a stream is (nothing here
    /// reads or moves a position a positional API would not see).
    pub(crate) refused: bool,
}

// SAFETY: the SQE and the syscalls point only at the buffer this op owns (on the heap) and
// at its own fd; nothing runs on another thread.
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
        let (ptr, len) = (self.buf.stable_mut_ptr(), len_u32(self.buf.bytes_total()));
        let iov = libc::iovec {
            iov_base: ptr.cast(),
            iov_len: len as usize,
        };
        // SAFETY: one iovec over the buffer the op owns, writable for `len` bytes.
        let n = unsafe { libc::preadv2(self.fd, &iov, 1, -1, libc::RWF_NOWAIT) };
        // SAFETY: as above, for `read(2)`.
        never_blocking(n, self.fd, libc::POLLIN, || unsafe {
            libc::read(self.fd, ptr.cast(), len as usize)
        })
    }

    fn sqe(&mut self) -> squeue::Entry {
        let len = len_u32(self.buf.bytes_total());
        opcode::Read::new(types::Fd(self.fd), self.buf.stable_mut_ptr(), len)
            .offset(OWN_POSITION)
            .build()
    }
}

impl<B: IoBufMut> OpDef for ReadStream<B> {
    type Output = (std::io::Result<usize>, B);

    fn poll_prepare(&mut self, _cx: &mut Context<'_>) -> Poll<Option<Cqe>> {
        Poll::Ready(self.refused.then(no_position))
    }

    fn needs_prepare(&self) -> bool {
        self.refused
    }

    fn complete(self, cqe: Cqe) -> Self::Output {
        // SAFETY: `cqe` is this op's final completion, a read into the start of `buf`.
        unsafe { read_output(&cqe, self.buf) }
    }
}

/// A write after what was written before to a file without a position.
pub(crate) struct WriteStream<B> {
    pub(crate) fd: RawFd,
    pub(crate) buf: B,
    /// As for [`ReadStream::refused`].
    pub(crate) refused: bool,
}

// SAFETY: the SQE and the syscalls point only at the buffer this op owns (on the heap) and
// at its own fd; nothing runs on another thread.
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
        let (ptr, len) = (self.buf.stable_ptr(), len_u32(self.buf.bytes_init()));
        let iov = libc::iovec {
            iov_base: ptr.cast_mut().cast(),
            iov_len: len as usize,
        };
        // SAFETY: one iovec over the buffer the op owns, readable for `len` bytes.
        let n = unsafe { libc::pwritev2(self.fd, &iov, 1, -1, libc::RWF_NOWAIT) };
        // Without RWF_NOWAIT, at most PIPE_BUF bytes: a pipe that has room (POLLOUT) takes
        // that many at once, where a larger blocking write waits until it all went in.
        let atomic = (len as usize).min(libc::PIPE_BUF);
        // SAFETY: as above, for `write(2)` of the first `atomic` bytes.
        never_blocking(n, self.fd, libc::POLLOUT, || unsafe {
            libc::write(self.fd, ptr.cast(), atomic)
        })
    }

    fn sqe(&mut self) -> squeue::Entry {
        let len = len_u32(self.buf.bytes_init());
        opcode::Write::new(types::Fd(self.fd), self.buf.stable_ptr(), len)
            .offset(OWN_POSITION)
            .build()
    }
}

impl<B: IoBuf> OpDef for WriteStream<B> {
    type Output = (std::io::Result<usize>, B);

    fn poll_prepare(&mut self, _cx: &mut Context<'_>) -> Poll<Option<Cqe>> {
        Poll::Ready(self.refused.then(no_position))
    }

    fn needs_prepare(&self) -> bool {
        self.refused
    }

    fn complete(self, cqe: Cqe) -> Self::Output {
        (
            crate::completion::result(&cqe).map(|n| n as usize),
            self.buf,
        )
    }
}

/// The result of a `RWF_NOWAIT` transfer (`n`), or where the file refuses that flag (a
/// terminal; a pipe before Linux 5.9) of `plain`, made only if a `poll(2)` that never blocks
/// finds `fd` ready for `events` now: else `EAGAIN`, and the op waits for readiness again.
fn never_blocking(n: isize, fd: RawFd, events: i16, plain: impl FnOnce() -> isize) -> Cqe {
    let res = sys::res(n);
    if res != -libc::EOPNOTSUPP {
        return Cqe::new(0, res, 0);
    }
    let res = match sys::poll_now(fd, events) {
        Ok(revents) if revents != 0 => sys::res(plain()),
        Ok(_) => -libc::EAGAIN,
        Err(err) => err,
    };
    Cqe::new(0, res, 0)
}
