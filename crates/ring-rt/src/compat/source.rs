//! What the adapter needs from an I/O object: an owned-buffer read and write-all that keep
//! the object alive themselves (through an `Rc`), so the adapter can hold them in flight.

use std::future::Future;
use std::io::{self, IoSlice};
use std::net::Shutdown;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use crate::buf::{IoBuf, Slice};
use crate::fs::File;
use crate::net::{TcpStream, UnixStream, WriteAll};
use crate::op::fs::{ReadAt, WriteAt};
use crate::op::net::Recv;
use crate::op::pollable::WaitReady;
use crate::op::Op;

/// A stream's read in flight, with the stream kept open beside it: not boxed, as a
/// stream's adapter starts a read (and a write) per request of a protocol like HTTP,
/// where a box each was two of the ten allocations per request (hyper, BENCHMARKS.md).
/// This and [`StreamWrite`] are two types, not one generic over its op: the op types are
/// crate-private, and an associated type of the public `CompatIo` may not name them
/// (E0446), where a field may.
#[doc(hidden)]
pub struct StreamRead<S> {
    /// Declared first, so dropped first: the op names the stream's fd, and `_io` keeps
    /// the stream (and so the fd) open for as long as the op exists.
    op: Op<Recv<Vec<u8>>>,
    _io: Rc<S>,
}

impl<S> Future for StreamRead<S> {
    type Output = (io::Result<usize>, Vec<u8>);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.op).poll(cx)
    }
}

/// A stream's write-all in flight, with the stream kept open beside it (see
/// [`StreamRead`]).
#[doc(hidden)]
pub struct StreamWrite<S> {
    /// Declared first, so dropped first (see [`StreamRead`]).
    op: WriteAll<'static, Vec<u8>>,
    _io: Rc<S>,
}

impl<S> Future for StreamWrite<S> {
    type Output = (io::Result<()>, Vec<u8>);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.op).poll(cx)
    }
}

/// A file's read in flight at a position, with the file kept open beside it: the count
/// (0 at end of file) and the buffer, filled from its start. A plain op, not an `async`
/// block: polled again after a poll that panicked (a waker whose clone panics), it goes
/// on where an `async` block panics with "resumed after panicking".
#[doc(hidden)]
pub struct FileRead {
    /// Declared first, so dropped first (see [`StreamRead`]).
    op: Op<ReadAt<Vec<u8>>>,
    _file: Rc<File>,
}

impl Future for FileRead {
    type Output = (io::Result<usize>, Vec<u8>);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.op).poll(cx)
    }
}

/// A file's write-all in flight from a position, with the file kept open beside it: one
/// write of the unwritten tail at a time, as [`WriteAll`] sends on a stream (the slice in
/// flight carries the progress). Hand-written for the reason [`FileRead`] is.
#[doc(hidden)]
pub struct FileWrite {
    /// Declared first, so dropped first (see [`StreamRead`]). `None` for an empty buffer,
    /// which goes straight back (a write of nothing would end as `WriteZero`).
    op: Option<Op<WriteAt<Slice<Vec<u8>>>>>,
    empty: Option<Vec<u8>>,
    /// Where the buffer's first byte goes.
    at: u64,
    file: Rc<File>,
}

impl Future for FileWrite {
    type Output = (io::Result<()>, Vec<u8>);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let FileWrite {
            op,
            empty,
            at,
            file,
            ..
        } = self.get_mut();
        let Some(op) = op else {
            let buf = empty.take().expect("write_all polled after it completed");
            return Poll::Ready((Ok(()), buf));
        };
        op.poll_write_all(cx, |_, rest, done| {
            file.write_at_unbound(rest, at.saturating_add(done as u64))
        })
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A ring-rt I/O object that [`Compat`](super::Compat) can adapt: [`TcpStream`],
/// [`UnixStream`] and [`File`]. Sealed: the adapter relies on how each of them behaves.
///
/// # Examples
///
/// Code generic over what it adapts:
///
/// ```
/// use ring_rt::compat::{Compat, CompatIo};
///
/// fn adapt<S: CompatIo>(io: S) -> Compat<S> {
///     Compat::new(io).with_capacity(16 * 1024, 16 * 1024)
/// }
///
/// # ring_rt::Runtime::new()?.block_on(async {
/// let (a, _b) = ring_rt::net::UnixStream::pair()?;
/// let io = adapt(a);
/// assert_eq!(io.position(), 0); // streams have no cursor
/// # std::io::Result::Ok(()) })?;
/// # std::io::Result::Ok(())
/// ```
pub trait CompatIo: sealed::Sealed + 'static {
    /// Files have positions: the adapter keeps a cursor and orders its reads after its
    /// writes. Streams ignore positions, and their reads and writes run independently.
    #[doc(hidden)]
    const IS_POSITIONED: bool;

    /// A read in flight: the count (0 at end of stream) and the buffer, filled from its
    /// start.
    #[doc(hidden)]
    type ReadOp: Future<Output = (io::Result<usize>, Vec<u8>)> + Unpin;

    /// A write-all in flight: the result and the buffer.
    #[doc(hidden)]
    type WriteOp: Future<Output = (io::Result<()>, Vec<u8>)> + Unpin;

    /// Reads into `buf`'s capacity (from its start) at `pos` (ignored by streams).
    #[doc(hidden)]
    fn read_owned(self: Rc<Self>, buf: Vec<u8>, pos: u64) -> Self::ReadOp;

    /// Writes all of `buf` at `pos` (ignored by streams).
    #[doc(hidden)]
    fn write_all_owned(self: Rc<Self>, buf: Vec<u8>, pos: u64) -> Self::WriteOp;

    /// Ends the write direction (a socket's `shutdown(SHUT_WR)`; nothing for a file).
    #[doc(hidden)]
    fn shutdown_write(&self) -> io::Result<()>;

    /// Takes back bytes the adapter read ahead and is dropped with: a stream's next
    /// receive returns them first; a file keeps them where they are anyway.
    #[doc(hidden)]
    fn unread(&self, bytes: Vec<u8>);

    /// Writes what it can of `bufs` at once, from the caller's memory, where that is
    /// cheaper than copying them into a write op: `None` to take the op's way. Streams
    /// send with a plain nonblocking `sendmsg` (`WouldBlock` when the socket's buffer is
    /// full); files always take the op's way.
    #[doc(hidden)]
    fn write_now(&self, bufs: &[IoSlice<'_>]) -> Option<io::Result<usize>>;

    /// After a [`write_now`](Self::write_now) that met a full buffer: a wait until the
    /// object takes data, so the adapter sends the caller's bytes again then instead of
    /// copying them into a write op; `None` to take the op's way.
    #[doc(hidden)]
    fn wait_for_room(&self) -> Option<RoomWait>;
}

/// A wait until a stream takes data (see [`CompatIo::wait_for_room`]): `Ok` once it does,
/// or has an error its next send reports. It owns no memory and names the stream's fd,
/// which the adapter holding it keeps open.
#[doc(hidden)]
pub struct RoomWait(Op<WaitReady>);

impl Future for RoomWait {
    type Output = io::Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

/// From how many bytes a stream's adapter sends borrowed bytes with a syscall of their
/// own on a backend that batches sends (io_uring): below it the copy into a batched op
/// costs less than the syscall; above it the copy costs more (a `memcpy` of the whole
/// body, on top of the kernel's own copy). Measured with hyper on io_uring (BENCHMARKS.md,
/// goal 5): 16 KiB responses took 19% more CPU sent directly, 64 KiB ones about the same,
/// 16 MiB ones 20% less. epoll sends every write directly: it would make the same syscall
/// from the op's copy.
const DIRECT_SEND_MIN: usize = 64 * 1024;

/// A stream socket: reads and writes at its current position, shutdown ends its writes.
macro_rules! stream_compat_io {
    ($($stream:ty),+) => {$(
        impl sealed::Sealed for $stream {}

        impl CompatIo for $stream {
            const IS_POSITIONED: bool = false;
            type ReadOp = StreamRead<$stream>;
            type WriteOp = StreamWrite<$stream>;

            fn read_owned(self: Rc<Self>, buf: Vec<u8>, _pos: u64) -> StreamRead<$stream> {
                StreamRead {
                    op: self.read_unbound(buf),
                    _io: self,
                }
            }

            fn write_all_owned(self: Rc<Self>, buf: Vec<u8>, _pos: u64) -> StreamWrite<$stream> {
                StreamWrite {
                    op: self.write_all_unbound(buf),
                    _io: self,
                }
            }

            fn shutdown_write(&self) -> io::Result<()> {
                self.shutdown(Shutdown::Write)
            }

            fn unread(&self, bytes: Vec<u8>) {
                <$stream>::unread(self, bytes);
            }

            fn write_now(&self, bufs: &[IoSlice<'_>]) -> Option<io::Result<usize>> {
                let len: usize = bufs.iter().map(|b| b.len()).sum();
                if len < DIRECT_SEND_MIN && self.batches_sends() {
                    return None;
                }
                Some(self.send_now(bufs))
            }

            fn wait_for_room(&self) -> Option<RoomWait> {
                self.writable_unbound().map(RoomWait)
            }
        }
    )+};
}

stream_compat_io!(TcpStream, UnixStream);

impl sealed::Sealed for File {}

impl CompatIo for File {
    const IS_POSITIONED: bool = true;
    type ReadOp = FileRead;
    type WriteOp = FileWrite;

    fn read_owned(self: Rc<Self>, buf: Vec<u8>, pos: u64) -> FileRead {
        FileRead {
            op: self.read_at_unbound(buf, pos),
            _file: self,
        }
    }

    fn write_all_owned(self: Rc<Self>, buf: Vec<u8>, pos: u64) -> FileWrite {
        let total = buf.bytes_init();
        let (op, empty) = match total {
            0 => (None, Some(buf)),
            _ => (Some(self.write_at_unbound(buf.slice(..total), pos)), None),
        };
        FileWrite {
            op,
            empty,
            at: pos,
            file: self,
        }
    }

    /// A file has no write direction to end; durability is `sync_all`'s business.
    fn shutdown_write(&self) -> io::Result<()> {
        Ok(())
    }

    fn unread(&self, _bytes: Vec<u8>) {}

    /// A file write takes the op's way: a buffered write may block (ext4 refuses
    /// `RWF_NOWAIT` for buffered writes), and it must stay ordered with the adapter's reads.
    fn write_now(&self, _bufs: &[IoSlice<'_>]) -> Option<io::Result<usize>> {
        None
    }

    /// Never asked: a file never sends from the caller's memory.
    fn wait_for_room(&self) -> Option<RoomWait> {
        None
    }
}
