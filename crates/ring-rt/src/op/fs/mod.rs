//! File ops: openat, read/write at an offset (plain and vectored), fsync, fallocate,
//! ftruncate, close; path ops are in `path`. io_uring 5.6+ (6.9 for ftruncate); every op's
//! epoll emulation is a blocking job running the equivalent syscall, except that a read
//! first takes what the page cache holds on the loop thread (as io_uring does inline).

mod path;

pub(crate) use path::{MkDirAt, RenameAt, Statx, UnlinkAt};

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::task::{Context, Poll};

use io_uring::{opcode, squeue, types};
use ring_core::cqe::Cqe;
use ring_core::lifecycle::{Deferred, Orphan};
use ring_core::release::{Both, CloseFd, Keep};

use super::{Emulation, OpDef, Operation};
use crate::buf::{read_output, IoBuf, IoBufMut};
use crate::sys;

/// Most iovecs one readv/writev takes (`UIO_MAXIOV`); more are left for a short transfer.
const IOV_MAX: usize = libc::UIO_MAXIOV as usize;

/// Lengths the kernel takes as u32: a larger buffer is used up to u32::MAX bytes (a short
/// transfer, which every caller handles). The kernel itself stops at `MAX_RW_COUNT`.
pub(super) fn len_u32(len: usize) -> u32 {
    len.min(u32::MAX as usize) as u32
}

/// A CQE result as a byte count.
fn count(cqe: &Cqe) -> io::Result<usize> {
    crate::completion::result(cqe).map(|n| n as usize)
}

/// The CQE result of a libc call returning `c_int`.
fn res_int(ret: libc::c_int) -> i32 {
    sys::res(ret as isize)
}

/// Iovecs covering each buffer's writable capacity (reads) or its data (writes).
fn iovecs(ptrs: impl Iterator<Item = (*mut u8, usize)>) -> Box<[libc::iovec]> {
    ptrs.take(IOV_MAX)
        .map(|(base, len)| libc::iovec {
            iov_base: base.cast(),
            iov_len: len,
        })
        .collect()
}

/// A blocking job on its own duplicate of `fd`, closed when the job is done (or dropped
/// unrun). A file's drop closes its fd without waiting for orphaned ops, so a job using the
/// raw number could meet it reused by another open; the duplicate holds the file as firmly
/// as io_uring's own file reference taken at submission. A failed dup is the job's result.
fn on_dup(fd: RawFd, job: impl FnOnce(RawFd) -> i32 + Send + 'static) -> Emulation {
    // SAFETY: F_DUPFD_CLOEXEC takes and returns only integers.
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        let res = res_int(dup);
        return Emulation::Blocking(Box::new(move || res));
    }
    // SAFETY: the fcntl above returned a new fd that nothing else owns.
    let own = unsafe { OwnedFd::from_raw_fd(dup) };
    Emulation::Blocking(Box::new(move || job(own.as_raw_fd())))
}

/// `openat(AT_FDCWD, path, flags, mode)`: a new fd.
pub(crate) struct OpenAt {
    /// The path the SQE points at (a CString's bytes live on the heap, so moving the op
    /// does not move them).
    pub(crate) path: CString,
    pub(crate) flags: i32,
    pub(crate) mode: u32,
}

// SAFETY: the SQE and any blocking job point only at memory this op owns on the heap
// (its buffer, boxed addresses and headers, a CString) and at its own fd.
unsafe impl Operation for OpenAt {
    fn sqe(&mut self) -> squeue::Entry {
        opcode::OpenAt::new(types::Fd(libc::AT_FDCWD), self.path.as_ptr())
            .flags(self.flags)
            .mode(self.mode)
            .build()
    }

    fn returns_fd(&self) -> bool {
        true
    }

    fn emulate(&mut self) -> Emulation {
        let (path, flags, mode) = (self.path.as_ptr() as usize, self.flags, self.mode);
        Emulation::Blocking(Box::new(move || {
            // SAFETY: `path` is the op's NUL-terminated CString, alive until completion.
            unsafe { openat_as_io_uring_does(path as *const libc::c_char, flags, mode) }
        }))
    }
}

/// `openat(2)` as io_uring's OPENAT runs it, so a FIFO opens alike on both backends. An
/// open that neither creates nor truncates (io_uring sends those to a worker thread, which
/// opens blocking) nor asks for `O_PATH` is tried with `O_NONBLOCK`: a FIFO then opens for reading without
/// waiting for a writer, and fails with `ENXIO` for writing with no reader, where a
/// blocking open would wait, holding a pool thread nothing can interrupt. `EAGAIN` from
/// that try (a lease being broken) is retried blocking, as io_uring retries it in a
/// worker; an `O_NONBLOCK` the caller did not ask for is cleared from the fd afterwards.
///
/// Returns a CQE result: the new fd, or `-errno`.
///
/// # Safety
/// `path` points at a NUL-terminated string that lives through the call.
unsafe fn openat_as_io_uring_does(path: *const libc::c_char, flags: i32, mode: u32) -> i32 {
    let open = |flags: i32| {
        // SAFETY: `path` is NUL-terminated and alive, per this function's contract.
        res_int(unsafe { libc::openat(libc::AT_FDCWD, path, flags, mode) })
    };
    // `O_TMPFILE` includes `O_DIRECTORY`: only its own bit says "temporary file". An
    // `O_PATH` fd opens no file (a FIFO's other end is never waited for) and refuses
    // `F_SETFL`.
    let tmpfile = libc::O_TMPFILE & !libc::O_DIRECTORY;
    let as_is = libc::O_CREAT | libc::O_TRUNC | tmpfile | libc::O_NONBLOCK | libc::O_PATH;
    if flags & as_is != 0 {
        return open(flags);
    }
    let fd = match open(flags | libc::O_NONBLOCK) {
        res if res == -libc::EAGAIN => return open(flags),
        res if res < 0 => return res,
        fd => fd,
    };
    // SAFETY: F_GETFL/F_SETFL on the fd just opened, which nobody else has seen yet.
    let set = unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl < 0 || fl & libc::O_NONBLOCK == 0 {
            fl
        } else {
            libc::fcntl(fd, libc::F_SETFL, fl & !libc::O_NONBLOCK)
        }
    };
    if set >= 0 {
        return fd;
    }
    let err = res_int(set);
    // SAFETY: the fd is ours and goes to nobody on this error path.
    unsafe { libc::close(fd) };
    err
}

impl OpDef for OpenAt {
    type Output = io::Result<OwnedFd>;

    fn complete(self, cqe: Cqe) -> Self::Output {
        let fd = crate::completion::result(&cqe)? as RawFd;
        // SAFETY: a successful openat's result is a new fd nobody else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    fn into_orphan(self) -> Box<dyn Orphan> {
        // An open that completes after its future was dropped returns an fd nobody owns.
        // SAFETY: an OPENAT's successful CQE is a new fd; the orphan sees only this op's.
        Box::new(Both(Keep(self), unsafe { CloseFd::new() }))
    }
}

/// `pread`: read into an owned buffer's capacity at `pos`.
pub(crate) struct ReadAt<B> {
    pub(crate) fd: RawFd,
    pub(crate) buf: B,
    pub(crate) pos: u64,
    /// epoll: try `RWF_NOWAIT` on the loop thread first (the file is not `O_DIRECT`).
    pub(crate) nowait: bool,
    /// The file has no position (see [`no_position`]).
    pub(crate) unpositioned: bool,
    /// The file is `O_DIRECT`: submitted as soon as it starts.
    pub(crate) at_once: bool,
    /// The registered buffer index of `buf` in this worker's ring: a `READ_FIXED`.
    pub(crate) fixed: Option<u16>,
}

// SAFETY: the SQE and any blocking job point only at memory this op owns on the heap
// (its buffer, boxed addresses and headers, a CString) and at its own fd. A `READ_FIXED`
// names the registered chunk that `buf` is (or lies in), which `buf` owns; the kernel
// checks that the address range lies inside that chunk.
unsafe impl<B: IoBufMut> Operation for ReadAt<B> {
    fn fd(&self) -> Option<RawFd> {
        Some(self.fd)
    }

    fn submits_at_once(&self) -> bool {
        self.at_once
    }

    fn breaks_link(&self, cqe: &Cqe) -> bool {
        short_or_failed(cqe, len_u32(self.buf.bytes_total()) as usize)
    }

    fn sqe(&mut self) -> squeue::Entry {
        let len = len_u32(self.buf.bytes_total());
        let (fd, ptr) = (types::Fd(self.fd), self.buf.stable_mut_ptr());
        match self.fixed {
            Some(index) => opcode::ReadFixed::new(fd, ptr, len, index)
                .offset(self.pos)
                .build(),
            None => opcode::Read::new(fd, ptr, len).offset(self.pos).build(),
        }
    }

    fn emulate(&mut self) -> Emulation {
        let pos = self.pos as libc::off_t;
        let len = len_u32(self.buf.bytes_total()) as usize;
        let ptr = self.buf.stable_mut_ptr() as usize;
        on_dup(self.fd, move |fd| {
            // SAFETY: the op owns the buffer, writable for `len` bytes until completion.
            sys::res(unsafe { libc::pread(fd, ptr as *mut _, len, pos) })
        })
    }

    fn try_inline(&mut self) -> Option<Cqe> {
        if !self.nowait {
            return None;
        }
        let iov = libc::iovec {
            iov_base: self.buf.stable_mut_ptr().cast(),
            iov_len: len_u32(self.buf.bytes_total()) as usize,
        };
        read_nowait(self.fd, &[iov], self.pos)
    }
}

impl<B: IoBufMut> OpDef for ReadAt<B> {
    type Output = (io::Result<usize>, B);

    fn poll_prepare(&mut self, _cx: &mut Context<'_>) -> Poll<Option<Cqe>> {
        Poll::Ready(self.unpositioned.then(no_position))
    }

    fn needs_prepare(&self) -> bool {
        self.unpositioned
    }

    fn complete(self, cqe: Cqe) -> Self::Output {
        // SAFETY: `cqe` is this op's final completion, a read into the start of `buf`.
        unsafe { read_output(&cqe, self.buf) }
    }
}

/// A read that only takes what the page cache already holds (`preadv2` with `RWF_NOWAIT`,
/// 4.14+), so the loop thread never waits for a disk. It finishes the op only with what a
/// blocking read would give: everything asked for, or all there is up to end of file (a
/// short read is continued, and counts once the continuation finds end of file). `EAGAIN`
/// (not cached) and any error (`EOPNOTSUPP` on a filesystem without `RWF_NOWAIT`) leave the
/// op to the blocking pool, which reads the whole range again and reports the definitive
/// result. Never on `O_DIRECT` files: a direct read waits for the device even with
/// `RWF_NOWAIT`.
fn read_nowait(fd: RawFd, iov: &[libc::iovec], pos: u64) -> Option<Cqe> {
    // One blocking read transfers at most MAX_RW_COUNT bytes; so does this one.
    let want = iov
        .iter()
        .map(|v| v.iov_len)
        .sum::<usize>()
        .min(RW_COUNT_MAX);
    let mut rest = std::borrow::Cow::Borrowed(iov);
    let mut done = 0;
    // At least one call, even for nothing: a 0-byte read still checks the fd (EBADF on a
    // write-only file), as the blocking read would.
    loop {
        // SAFETY: each iovec points at memory the calling op owns and may write, for its
        // length (`skip` only trims them); there are at most IOV_MAX.
        let n = unsafe {
            libc::preadv2(
                fd,
                rest.as_ptr(),
                rest.len() as libc::c_int,
                (pos + done as u64) as libc::off_t,
                libc::RWF_NOWAIT,
            )
        };
        match n {
            0 => break,
            n if n > 0 => done += n as usize,
            _ => return None,
        }
        if done >= want {
            break;
        }
        rest = std::borrow::Cow::Owned(skip(iov, done));
    }
    Some(Cqe::new(0, done.min(RW_COUNT_MAX) as i32, 0))
}

/// The kernel's `MAX_RW_COUNT` (`INT_MAX & PAGE_MASK`): the most one read or write moves.
const RW_COUNT_MAX: usize = 0x7fff_f000;

/// `iov` without its first `n` bytes.
fn skip(iov: &[libc::iovec], mut n: usize) -> Vec<libc::iovec> {
    let mut rest = Vec::with_capacity(iov.len());
    for v in iov {
        if n >= v.iov_len {
            n -= v.iov_len;
            continue;
        }
        rest.push(libc::iovec {
            // SAFETY: `n` < `iov_len`, so the pointer stays inside this iovec's memory.
            iov_base: unsafe { v.iov_base.cast::<u8>().add(n) }.cast(),
            iov_len: v.iov_len - n,
        });
        n = 0;
    }
    rest
}

/// `pwrite`: write an owned buffer's data at `pos`.
pub(crate) struct WriteAt<B> {
    pub(crate) fd: RawFd,
    pub(crate) buf: B,
    pub(crate) pos: u64,
    /// The file has no position (see [`no_position`]).
    pub(crate) unpositioned: bool,
    /// The file is `O_DIRECT`: submitted as soon as it starts.
    pub(crate) at_once: bool,
    /// The registered buffer index of `buf` in this worker's ring: a `WRITE_FIXED`.
    pub(crate) fixed: Option<u16>,
}

// SAFETY: the SQE and any blocking job point only at memory this op owns on the heap
// (its buffer, boxed addresses and headers, a CString) and at its own fd. A `WRITE_FIXED`
// names the registered chunk that `buf` is (or lies in), which `buf` owns; the kernel
// checks that the address range lies inside that chunk.
unsafe impl<B: IoBuf> Operation for WriteAt<B> {
    fn fd(&self) -> Option<RawFd> {
        Some(self.fd)
    }

    fn submits_at_once(&self) -> bool {
        self.at_once
    }

    fn breaks_link(&self, cqe: &Cqe) -> bool {
        short_or_failed(cqe, len_u32(self.buf.bytes_init()) as usize)
    }

    fn sqe(&mut self) -> squeue::Entry {
        let len = len_u32(self.buf.bytes_init());
        let (fd, ptr) = (types::Fd(self.fd), self.buf.stable_ptr());
        match self.fixed {
            Some(index) => opcode::WriteFixed::new(fd, ptr, len, index)
                .offset(self.pos)
                .build(),
            None => opcode::Write::new(fd, ptr, len).offset(self.pos).build(),
        }
    }

    fn emulate(&mut self) -> Emulation {
        let pos = self.pos as libc::off_t;
        let len = len_u32(self.buf.bytes_init()) as usize;
        let ptr = self.buf.stable_ptr() as usize;
        on_dup(self.fd, move |fd| {
            // SAFETY: the op owns the buffer, readable for `len` bytes until completion.
            sys::res(unsafe { libc::pwrite(fd, ptr as *const _, len, pos) })
        })
    }
}

impl<B: IoBuf> OpDef for WriteAt<B> {
    type Output = (io::Result<usize>, B);

    fn poll_prepare(&mut self, _cx: &mut Context<'_>) -> Poll<Option<Cqe>> {
        Poll::Ready(self.unpositioned.then(no_position))
    }

    fn needs_prepare(&self) -> bool {
        self.unpositioned
    }

    fn complete(self, cqe: Cqe) -> Self::Output {
        (count(&cqe), self.buf)
    }
}

/// `preadv`: read into several owned buffers at `pos`, filling each in turn.
pub(crate) struct ReadvAt<B> {
    pub(crate) fd: RawFd,
    pub(crate) bufs: Vec<B>,
    /// Point into `bufs`' heap memory; boxed because the SQE points at them.
    iovecs: Box<[libc::iovec]>,
    pub(crate) pos: u64,
    /// epoll: try `RWF_NOWAIT` on the loop thread first (the file is not `O_DIRECT`).
    nowait: bool,
}

impl<B: IoBufMut> ReadvAt<B> {
    pub(crate) fn new(fd: RawFd, mut bufs: Vec<B>, pos: u64, nowait: bool) -> ReadvAt<B> {
        let iovecs = iovecs(
            bufs.iter_mut()
                .map(|b| (b.stable_mut_ptr(), b.bytes_total())),
        );
        ReadvAt {
            fd,
            bufs,
            iovecs,
            pos,
            nowait,
        }
    }
}

// SAFETY: the SQE and any blocking job point only at memory this op owns on the heap
// (its buffer, boxed addresses and headers, a CString) and at its own fd.
unsafe impl<B: IoBufMut> Operation for ReadvAt<B> {
    fn fd(&self) -> Option<RawFd> {
        Some(self.fd)
    }

    fn opcode(&self) -> Option<u8> {
        Some(opcode::Readv::CODE)
    }

    fn breaks_link(&self, cqe: &Cqe) -> bool {
        short_or_failed(cqe, self.iovecs.iter().map(|v| v.iov_len).sum())
    }

    fn sqe(&mut self) -> squeue::Entry {
        let len = self.iovecs.len() as u32;
        opcode::Readv::new(types::Fd(self.fd), self.iovecs.as_ptr(), len)
            .offset(self.pos)
            .build()
    }

    fn emulate(&mut self) -> Emulation {
        let pos = self.pos as libc::off_t;
        let (iov, cnt) = (self.iovecs.as_ptr() as usize, self.iovecs.len() as i32);
        on_dup(self.fd, move |fd| {
            // SAFETY: the iovecs and the buffers they point at are owned by the op until
            // completion; cnt is their number (at most UIO_MAXIOV).
            sys::res(unsafe { libc::preadv(fd, iov as *const libc::iovec, cnt, pos) })
        })
    }

    fn try_inline(&mut self) -> Option<Cqe> {
        if !self.nowait {
            return None;
        }
        read_nowait(self.fd, &self.iovecs, self.pos)
    }
}

impl<B: IoBufMut> OpDef for ReadvAt<B> {
    type Output = (io::Result<usize>, Vec<B>);

    fn complete(mut self, cqe: Cqe) -> Self::Output {
        let res = count(&cqe);
        if let Ok(mut left) = res {
            for buf in &mut self.bufs {
                let filled = left.min(buf.bytes_total());
                // SAFETY: preadv fills the iovecs in order; this buffer got `filled` bytes.
                unsafe { buf.set_init(filled) };
                left -= filled;
            }
        }
        (res, self.bufs)
    }
}

/// `pwritev`: write several owned buffers' data at `pos`.
pub(crate) struct WritevAt<B> {
    pub(crate) fd: RawFd,
    pub(crate) bufs: Vec<B>,
    /// Point into `bufs`' heap memory; boxed because the SQE points at them.
    iovecs: Box<[libc::iovec]>,
    pub(crate) pos: u64,
}

impl<B: IoBuf> WritevAt<B> {
    pub(crate) fn new(fd: RawFd, bufs: Vec<B>, pos: u64) -> WritevAt<B> {
        // The kernel only reads through these pointers; iovec just has no const flavour.
        let iovecs = iovecs(
            bufs.iter()
                .map(|b| (b.stable_ptr().cast_mut(), b.bytes_init())),
        );
        WritevAt {
            fd,
            bufs,
            iovecs,
            pos,
        }
    }
}

// SAFETY: the SQE and any blocking job point only at memory this op owns on the heap
// (its buffer, boxed addresses and headers, a CString) and at its own fd.
unsafe impl<B: IoBuf> Operation for WritevAt<B> {
    fn fd(&self) -> Option<RawFd> {
        Some(self.fd)
    }

    fn opcode(&self) -> Option<u8> {
        Some(opcode::Writev::CODE)
    }

    fn breaks_link(&self, cqe: &Cqe) -> bool {
        short_or_failed(cqe, self.iovecs.iter().map(|v| v.iov_len).sum())
    }

    fn sqe(&mut self) -> squeue::Entry {
        let len = self.iovecs.len() as u32;
        opcode::Writev::new(types::Fd(self.fd), self.iovecs.as_ptr(), len)
            .offset(self.pos)
            .build()
    }

    fn emulate(&mut self) -> Emulation {
        let pos = self.pos as libc::off_t;
        let (iov, cnt) = (self.iovecs.as_ptr() as usize, self.iovecs.len() as i32);
        on_dup(self.fd, move |fd| {
            // SAFETY: the iovecs and the buffers they point at are owned by the op until
            // completion; cnt is their number (at most UIO_MAXIOV).
            sys::res(unsafe { libc::pwritev(fd, iov as *const libc::iovec, cnt, pos) })
        })
    }
}

impl<B: IoBuf> OpDef for WritevAt<B> {
    type Output = (io::Result<usize>, Vec<B>);

    fn complete(self, cqe: Cqe) -> Self::Output {
        (count(&cqe), self.bufs)
    }
}

/// `fsync`, or `fdatasync` when `datasync`.
pub(crate) struct Fsync {
    pub(crate) fd: RawFd,
    pub(crate) datasync: bool,
}

// SAFETY: the SQE and any blocking job point only at memory this op owns on the heap
// (its buffer, boxed addresses and headers, a CString) and at its own fd.
unsafe impl Operation for Fsync {
    fn fd(&self) -> Option<RawFd> {
        Some(self.fd)
    }

    fn sqe(&mut self) -> squeue::Entry {
        let flags = if self.datasync {
            types::FsyncFlags::DATASYNC
        } else {
            types::FsyncFlags::empty()
        };
        opcode::Fsync::new(types::Fd(self.fd)).flags(flags).build()
    }

    fn emulate(&mut self) -> Emulation {
        let datasync = self.datasync;
        on_dup(self.fd, move |fd| {
            // SAFETY: fsync/fdatasync take only an fd.
            res_int(unsafe {
                if datasync {
                    libc::fdatasync(fd)
                } else {
                    libc::fsync(fd)
                }
            })
        })
    }
}

impl OpDef for Fsync {
    type Output = io::Result<()>;

    fn complete(self, cqe: Cqe) -> io::Result<()> {
        crate::completion::result(&cqe).map(drop)
    }
}

/// `fallocate(fd, mode, offset, len)`.
pub(crate) struct Fallocate {
    pub(crate) fd: RawFd,
    pub(crate) mode: i32,
    pub(crate) offset: u64,
    pub(crate) len: u64,
}

// SAFETY: the SQE and any blocking job point only at memory this op owns on the heap
// (its buffer, boxed addresses and headers, a CString) and at its own fd.
unsafe impl Operation for Fallocate {
    fn fd(&self) -> Option<RawFd> {
        Some(self.fd)
    }

    fn opcode(&self) -> Option<u8> {
        Some(opcode::Fallocate::CODE)
    }

    fn sqe(&mut self) -> squeue::Entry {
        opcode::Fallocate::new(types::Fd(self.fd), self.len)
            .offset(self.offset)
            .mode(self.mode)
            .build()
    }

    fn emulate(&mut self) -> Emulation {
        let mode = self.mode;
        // Values above i64::MAX turn negative, which the kernel rejects with EINVAL, as it
        // does for the SQE's u64 fields.
        let (offset, len) = (self.offset as libc::off_t, self.len as libc::off_t);
        on_dup(self.fd, move |fd| {
            // SAFETY: fallocate takes only integers.
            res_int(unsafe { libc::fallocate(fd, mode, offset, len) })
        })
    }
}

impl OpDef for Fallocate {
    type Output = io::Result<()>;

    fn complete(self, cqe: Cqe) -> io::Result<()> {
        crate::completion::result(&cqe).map(drop)
    }
}

/// `ftruncate(fd, len)` (io_uring 6.9+).
pub(crate) struct Ftruncate {
    pub(crate) fd: RawFd,
    pub(crate) len: u64,
}

// SAFETY: the SQE and any blocking job point only at memory this op owns on the heap
// (its buffer, boxed addresses and headers, a CString) and at its own fd.
unsafe impl Operation for Ftruncate {
    fn fd(&self) -> Option<RawFd> {
        Some(self.fd)
    }

    fn opcode(&self) -> Option<u8> {
        Some(opcode::Ftruncate::CODE)
    }

    fn sqe(&mut self) -> squeue::Entry {
        opcode::Ftruncate::new(types::Fd(self.fd), self.len).build()
    }

    fn emulate(&mut self) -> Emulation {
        let len = self.len as libc::off_t;
        on_dup(self.fd, move |fd| {
            // SAFETY: ftruncate takes only integers.
            res_int(unsafe { libc::ftruncate(fd, len) })
        })
    }
}

impl OpDef for Ftruncate {
    type Output = io::Result<()>;

    fn complete(self, cqe: Cqe) -> io::Result<()> {
        crate::completion::result(&cqe).map(drop)
    }
}

/// `close(fd)`, reporting its result (a file's drop closes without waiting instead).
pub(crate) struct Close {
    /// Owned until the close has run: a close that never ran (cancelled while its job was
    /// queued on epoll's blocking pool, or its SQE cancelled) must still close the fd.
    fd: Option<OwnedFd>,
}

impl Close {
    pub(crate) fn new(fd: OwnedFd) -> Close {
        Close { fd: Some(fd) }
    }

    fn raw(&self) -> RawFd {
        self.fd.as_ref().map_or(-1, AsRawFd::as_raw_fd)
    }

    /// The close's final CQE: it ran (whatever it reported, the fd is gone, as close(2)
    /// releases it even on error), unless it was cancelled before running or refused by
    /// the runtime (polled outside it, or after its drop: a refusal always means the op
    /// did not run); then the fd is still open, and dropping it here closes it.
    fn settle(&mut self, cqe: &Cqe) {
        if cqe.res != -libc::ECANCELED && !crate::completion::is_refusal(cqe) {
            // The close ran and released the number: do not close it again.
            self.fd.take().map(IntoRawFd::into_raw_fd);
        }
    }
}

// SAFETY: the SQE points at no memory, only at the fd the op owns.
unsafe impl Operation for Close {
    fn opcode(&self) -> Option<u8> {
        Some(opcode::Close::CODE)
    }

    fn sqe(&mut self) -> squeue::Entry {
        opcode::Close::new(types::Fd(self.raw())).build()
    }

    fn emulate(&mut self) -> Emulation {
        let fd = self.raw();
        Emulation::Blocking(Box::new(move || {
            // SAFETY: the op owns the fd; the job closes it, and the op, seeing the job's
            // result, no longer does (`settle`).
            res_int(unsafe { libc::close(fd) })
        }))
    }
}

impl OpDef for Close {
    type Output = io::Result<()>;

    fn complete(mut self, cqe: Cqe) -> io::Result<()> {
        self.settle(&cqe);
        // Cancelled before it ran: `self.fd` closes the fd as it drops.
        crate::completion::result(&cqe).map(drop)
    }

    fn into_orphan(self) -> Box<dyn Orphan> {
        Box::new(CloseOrphan(self))
    }
}

/// A dropped `close()`: its final CQE says whether the close ran; if not, the fd is
/// closed when the orphan drops.
struct CloseOrphan(Close);

impl Orphan for CloseOrphan {
    fn reap(&mut self, cqe: &Cqe, _deferred: &mut Deferred) {
        self.0.settle(cqe);
    }
}

/// The kernel's rule for a linked file read or write: an error or a short transfer fails
/// the link (the rest of the chain is cancelled).
fn short_or_failed(cqe: &Cqe, asked: usize) -> bool {
    cqe.res < 0 || cqe.res as usize != asked
}

/// The result of positional I/O on a file without a position (a FIFO, a pipe, a terminal):
/// `ESPIPE`, as `pread(2)` and std's `FileExt::read_at` give. io_uring's READ and WRITE
/// would ignore the offset there and run as plain reads and writes, so the op fails before
/// reaching either backend: both give the same answer.
pub(crate) fn no_position() -> Cqe {
    Cqe::new(0, -libc::ESPIPE, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_above_u32_are_clamped() {
        assert_eq!(len_u32(7), 7);
        assert_eq!(len_u32(u32::MAX as usize + 10), u32::MAX);
    }

    #[test]
    fn iovecs_stop_at_uio_maxiov() {
        let mut bufs = vec![vec![0u8; 1]; IOV_MAX + 5];
        let iov = iovecs(bufs.iter_mut().map(|b| (b.as_mut_ptr(), b.len())));
        assert_eq!(iov.len(), IOV_MAX);
    }

    #[test]
    fn readv_complete_fills_buffers_in_order() {
        let bufs = vec![
            Vec::with_capacity(4),
            Vec::with_capacity(4),
            Vec::with_capacity(4),
        ];
        let op = ReadvAt::new(-1, bufs, 0, false);
        let (res, bufs) = op.complete(Cqe::new(0, 6, 0));
        assert_eq!(res.unwrap(), 6);
        let lens: Vec<usize> = bufs.iter().map(Vec::len).collect();
        assert_eq!(lens, [4, 2, 0]);
    }

    #[test]
    fn a_registered_buffer_goes_as_a_fixed_op() {
        let read = |fixed| ReadAt {
            fd: 3,
            buf: Vec::<u8>::with_capacity(8),
            pos: 0,
            nowait: false,
            unpositioned: false,
            at_once: false,
            fixed,
        };
        assert_eq!(read(None).sqe().get_opcode(), u32::from(opcode::Read::CODE));
        assert_eq!(
            read(Some(2)).sqe().get_opcode(),
            u32::from(opcode::ReadFixed::CODE)
        );
        let write = |fixed| WriteAt {
            fd: 3,
            buf: vec![1u8; 8],
            pos: 0,
            unpositioned: false,
            at_once: false,
            fixed,
        };
        assert_eq!(
            write(None).sqe().get_opcode(),
            u32::from(opcode::Write::CODE)
        );
        assert_eq!(
            write(Some(2)).sqe().get_opcode(),
            u32::from(opcode::WriteFixed::CODE)
        );
    }

    #[test]
    fn failed_read_returns_the_buffer_untouched() {
        let op = ReadAt {
            fd: -1,
            buf: Vec::<u8>::with_capacity(8),
            pos: 0,
            nowait: false,
            unpositioned: false,
            at_once: false,
            fixed: None,
        };
        let (res, buf) = op.complete(Cqe::new(0, -libc::EBADF, 0));
        assert_eq!(res.unwrap_err().raw_os_error(), Some(libc::EBADF));
        assert_eq!((buf.len(), buf.capacity()), (0, 8));
    }
}
