//! A file without a position (a FIFO, a pipe, a terminal) read and written as a stream,
//! for `fs::read` and `fs::write`, which opened it: [`Stream`] makes its open file
//! description non-blocking first, which the stream ops need (`op::pollable`), and which
//! is theirs to change (a path open makes a new description, `/dev/stdin`'s too).

use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

use super::File;
use crate::buf::{IoBuf, IoBufMut};
use crate::op::pollable::{ReadPollable, WaitReady, WritePollable};
use crate::op::Op;
use crate::sys;

/// A file without a position, made non-blocking: only this type reads and writes it as
/// a stream, so no stream op meets a blocking fd (a blocking `read(2)` on a terminal
/// waits for `VMIN` bytes with the worker inside it: review CU).
pub(crate) struct Stream<'a> {
    file: &'a File,
    is_terminal: bool,
}

impl<'a> Stream<'a> {
    /// `file` as a stream, if it has no position; `None` for a file with one.
    pub(crate) fn of(file: &'a File) -> io::Result<Option<Self>> {
        if !file.is_stream() {
            return Ok(None);
        }
        // The description is this file's own (see the module docs).
        crate::backend::set_nonblocking(file.as_raw_fd(), true)?;
        let is_terminal = sys::termios(file.as_raw_fd()).is_some();
        Ok(Some(Self { file, is_terminal }))
    }

    /// A read of what comes next, as `read(2)` does (it waits for data by readiness).
    pub(crate) fn read<B: IoBufMut>(&self, buf: B) -> Op<ReadPollable<B>> {
        self.read_op(buf, true)
    }

    /// A read of what is there now: `WouldBlock` if nothing is (see
    /// [`silence_ends_read`](Self::silence_ends_read)).
    pub(crate) fn read_now<B: IoBufMut>(&self, buf: B) -> Op<ReadPollable<B>> {
        self.read_op(buf, false)
    }

    fn read_op<B: IoBufMut>(&self, buf: B, waits: bool) -> Op<ReadPollable<B>> {
        let fd = self.file.as_raw_fd();
        Op::new(self.file.core().clone(), ReadPollable { fd, buf, waits })
    }

    /// A write after what was written before, as `write(2)` does.
    pub(crate) fn write<B: IoBuf>(&self, buf: B) -> Op<WritePollable<B>> {
        let fd = self.file.as_raw_fd();
        Op::new(self.file.core().clone(), WritePollable { fd, buf })
    }

    /// How long a silence ends a read, for a raw terminal with `VMIN` 0 and `VTIME` > 0:
    /// its blocking `read(2)` gives 0 bytes after `VTIME` tenths of a second with nothing
    /// to read, which ends std's `fs::read`, while a non-blocking one says `EAGAIN` and
    /// readiness never comes (review CV). Read before each read, as the kernel does. With
    /// `VTIME` 0 the non-blocking read itself gives 0 at once.
    pub(crate) fn silence_ends_read(&self) -> Option<Duration> {
        if !self.is_terminal {
            return None;
        }
        let t = sys::termios(self.file.as_raw_fd())?;
        let (vmin, vtime) = (t.c_cc[libc::VMIN], t.c_cc[libc::VTIME]);
        let raw = t.c_lflag & libc::ICANON == 0;
        (raw && vmin == 0 && vtime > 0).then(|| Duration::from_millis(100 * u64::from(vtime)))
    }

    /// A wait until there is something to read, which reads nothing: bounded by a
    /// timeout, it drops cleanly where a read would take its buffer with it.
    pub(crate) fn readable(&self) -> Op<WaitReady> {
        let fd = self.file.as_raw_fd();
        let wait = WaitReady {
            fd,
            events: libc::POLLIN,
        };
        Op::new(self.file.core().clone(), wait)
    }
}
