//! `File`: an open file on one worker, read and written at explicit offsets with owned
//! buffers; dropping it queues a close without waiting.

use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::rc::Rc;

use super::metadata::{Metadata, STATX_MASK};
use super::OpenOptions;
#[cfg(any(feature = "tokio-io", feature = "futures-io"))]
use crate::buf::Slice;
use crate::buf::{transfer_all, write_zero, IoBuf, IoBufMut};
use crate::op::fs::{
    Close, Fallocate, Fsync, Ftruncate, ReadAt, ReadvAt, Statx, WriteAt, WritevAt,
};
use crate::op::link::Pending;
use crate::op::{Op, OpDef};
use crate::worker::{Core, GivenAway};

/// An open file. Every op names its offset (`pread`/`pwrite` style); there is no cursor.
///
/// The file belongs to the worker that opened it (it is `!Send`). Dropping it closes the
/// fd without blocking: on io_uring a `CLOSE` is queued behind the ops already queued.
///
/// # Examples
///
/// ```
/// use ring_rt::fs::File;
///
/// # fn main() -> std::io::Result<()> {
/// let path = std::env::temp_dir().join(format!("ring-rt-doc-{}.bin", std::process::id()));
/// ring_rt::Runtime::new()?.block_on(async {
///     let file = File::create(&path).await?;
///     let (res, _buf) = file.write_all_at(b"hello".to_vec(), 0).await;
///     res?;
///     file.sync_all().await?;
///     file.close().await?;
///
///     let file = File::open(&path).await?;
///     let (res, buf) = file.read_at(Vec::with_capacity(16), 0).await;
///     assert_eq!(res?, 5);
///     assert_eq!(buf, b"hello");
///     std::io::Result::Ok(())
/// })?;
/// std::fs::remove_file(&path)
/// # }
/// ```
pub struct File {
    /// The fd, or -1 once handed away by `into_std`/`close` (then drop closes nothing).
    fd: RawFd,
    core: Rc<Core>,
    /// Reads first try the page cache on the loop thread (`RWF_NOWAIT`) and go to the
    /// blocking pool only when that would block (epoll, file not `O_DIRECT`).
    is_nowait_read: bool,
    /// The file has no position (a FIFO, a pipe, a terminal): positional I/O is `ESPIPE`
    /// on both backends (see `op::fs::no_position`).
    unpositioned: bool,
    /// Opened `O_DIRECT`: every read and write goes to the device, so each is submitted
    /// as soon as it starts (see `Operation::submits_at_once`).
    is_direct: bool,
}

/// The largest offset the kernel accepts: `loff_t` is signed, and io_uring reads
/// `u64::MAX` as "the current position", which a positional API must never mean.
const POS_MAX: u64 = i64::MAX as u64;

/// The offset to give the kernel: past `i64::MAX` an offset is negative to the kernel,
/// which fails it with `EINVAL` (both for io_uring and `pread`), except `u64::MAX`, which
/// io_uring reads as "the current position": so every out-of-range offset becomes 2^63.
fn kernel_pos(pos: u64) -> u64 {
    if pos > POS_MAX {
        1 << 63
    } else {
        pos
    }
}

/// Whether `fd` has no file position: positional I/O on it is `ESPIPE` for `pread(2)`.
/// Two syscalls when a `File` is made (three for an anonymous inode), so such I/O fails
/// the same way on both backends.
fn has_no_position(fd: &OwnedFd) -> bool {
    let raw = fd.as_raw_fd();
    let espipe = || io::Error::last_os_error().raw_os_error() == Some(libc::ESPIPE);
    // SAFETY: lseek on an fd this caller owns; SEEK_CUR with 0 moves nothing.
    if unsafe { libc::lseek(raw, 0, libc::SEEK_CUR) } < 0 {
        return espipe(); // FIFOs, pipes, sockets, terminals
    }
    // Some files seek but refuse pread: anonymous inodes (an eventfd, timerfd or
    // signalfd), which have no file type. A zero-length pread asks them, and only them:
    // a typed file whose pread is refused also refuses lseek (`nonseekable_open`,
    // `stream_open`), and a character device's read may wait even for 0 bytes.
    // SAFETY: `stat` is plain data, valid all zero.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes one stat into `st`; `raw` is open.
    if unsafe { libc::fstat(raw, &mut st) } != 0 || st.st_mode & libc::S_IFMT != 0 {
        return false;
    }
    // SAFETY: a zero-length read writes nothing; the kernel checks the fd's pread first.
    let n = unsafe { libc::pread(raw, std::ptr::null_mut(), 0, 0) };
    n < 0 && espipe()
}

/// Whether `fd` was opened `O_DIRECT`.
fn is_direct(fd: &OwnedFd) -> bool {
    // SAFETY: F_GETFL takes and returns integers only, on an fd this caller owns.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    flags >= 0 && flags & libc::O_DIRECT != 0
}

fn check_pos(pos: u64) -> io::Result<()> {
    if pos > POS_MAX {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    Ok(())
}

impl File {
    pub(crate) fn from_owned(core: Rc<Core>, fd: OwnedFd) -> File {
        let raw = fd.as_raw_fd();
        let is_nowait_read = core.reads_inline(raw);
        File {
            unpositioned: has_no_position(&fd),
            is_direct: is_direct(&fd),
            fd: fd.into_raw_fd(),
            core,
            is_nowait_read,
        }
    }

    /// A position this file can take: `EINVAL` past `i64::MAX`, `ESPIPE` on a file that
    /// has no position.
    fn check_pos(&self, pos: u64) -> io::Result<()> {
        if self.unpositioned {
            return Err(io::Error::from_raw_os_error(libc::ESPIPE));
        }
        check_pos(pos)
    }

    /// Opens `path` read-only (`NotFound` if it does not exist).
    ///
    /// # Examples
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// std::fs::write(&path, "some text")?;
    /// let file = ring_rt::fs::File::open(&path).await?;
    /// assert_eq!(file.metadata().await?.len(), 9);
    /// assert!(ring_rt::fs::File::open("/no/such/file").await.is_err());
    /// # std::fs::remove_file(&path)?;
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub async fn open(path: impl AsRef<Path>) -> io::Result<File> {
        OpenOptions::new().read(true).open(path).await
    }

    /// Opens `path` write-only, creating it or truncating it to 0 bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let file = ring_rt::fs::File::create(&path).await?;
    /// file.write_all_at(&b"fresh"[..], 0).await.0?;
    /// # drop(file);
    /// # std::fs::remove_file(&path)?;
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub async fn create(path: impl AsRef<Path>) -> io::Result<File> {
        let mut options = OpenOptions::new();
        options.write(true).create(true).truncate(true);
        options.open(path).await
    }

    /// Creates `path` read-write, failing with `AlreadyExists` if it exists.
    ///
    /// # Examples
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let file = ring_rt::fs::File::create_new(&path).await?;
    /// let again = ring_rt::fs::File::create_new(&path).await;
    /// assert_eq!(again.unwrap_err().kind(), std::io::ErrorKind::AlreadyExists);
    /// # drop(file);
    /// # std::fs::remove_file(&path)?;
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub async fn create_new(path: impl AsRef<Path>) -> io::Result<File> {
        let mut options = OpenOptions::new();
        options.read(true).write(true).create_new(true);
        options.open(path).await
    }

    /// A builder for other ways of opening, as [`OpenOptions::new`].
    ///
    /// # Examples
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let log = ring_rt::fs::File::options().append(true).create(true).open(&path).await?;
    /// log.write_all_at(&b"line\n"[..], 0).await.0?; // appended whatever the offset
    /// # drop(log);
    /// # std::fs::remove_file(&path)?;
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn options() -> OpenOptions {
        OpenOptions::new()
    }

    /// Adopts a std file on the current runtime's worker. [`into_std`](Self::into_std) gives
    /// it back.
    ///
    /// # Examples
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let std_file = std::fs::File::create(&path)?;
    /// let file = ring_rt::fs::File::from_std(std_file)?;
    /// file.write_all_at(&b"async"[..], 0).await.0?;
    /// let std_file: std::fs::File = file.into_std(); // no longer closed by ring-rt
    /// assert_eq!(std_file.metadata()?.len(), 5);
    /// # std::fs::remove_file(&path)?;
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn from_std(file: std::fs::File) -> io::Result<File> {
        Ok(File::from_owned(Core::current_io()?, file.into()))
    }

    /// The std file, no longer closed by this value (see [`from_std`](Self::from_std) for
    /// an example). Its fd is this file's own number, except in two cases where ops the
    /// kernel has not looked at yet still name that number: called from code the runtime
    /// runs inside its own bookkeeping (a waker's `clone`), or while an op of a dropped
    /// linked chain waits to be issued (behind an fsync, say). Then it is a duplicate, and
    /// the runtime closes the original number after those ops.
    pub fn into_std(mut self) -> std::fs::File {
        // Before the fd leaves: no op of this file still queued may find its number reused.
        let given = self.core.give_away_fd(self.as_fd());
        let fd = std::mem::replace(&mut self.fd, -1);
        match given {
            GivenAway::Duplicate(dup) => dup.into(),
            // SAFETY: `fd` was this File's open fd; -1 left behind means drop will not
            // close it, so the std file is its only owner.
            GivenAway::Original => unsafe { std::fs::File::from_raw_fd(fd) },
        }
    }

    /// Reads into `buf`'s capacity at `pos`; `Ok(0)` at end of file. The buffer comes back
    /// with the bytes read marked initialised, on success and on error. Lengths above
    /// `u32::MAX` give a short read; a `pos` above `i64::MAX` is `EINVAL`, and on a file
    /// without a position (a FIFO, a pipe) every positional call is `ESPIPE`, on both
    /// backends, as `pread(2)` says. The op can be
    /// linked or bounded before it is awaited (see [`Pending`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// std::fs::write(&path, "0123456789")?;
    /// let file = ring_rt::fs::File::open(&path).await?;
    /// let (n, buf) = file.read_at(Vec::with_capacity(4), 3).await;
    /// assert_eq!(n?, 4);
    /// assert_eq!(buf, b"3456");
    /// let (n, _) = file.read_at(Vec::with_capacity(4), 10).await;
    /// assert_eq!(n?, 0); // end of file
    /// # std::fs::remove_file(&path)?;
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn read_at<B: IoBufMut>(
        &self,
        buf: B,
        pos: u64,
    ) -> Pending<'_, impl OpDef<Output = (io::Result<usize>, B)>> {
        Pending::new(self.core.clone(), self.read_at_def(buf, pos))
    }

    /// [`read_at`](Self::read_at)'s op, not bound to `self`: for a caller that keeps the
    /// file open beside it (the adapter's read, `compat::FileRead`).
    #[cfg(any(feature = "tokio-io", feature = "futures-io"))]
    pub(crate) fn read_at_unbound(&self, buf: Vec<u8>, pos: u64) -> Op<ReadAt<Vec<u8>>> {
        Op::new(self.core.clone(), self.read_at_def(buf, pos))
    }

    fn read_at_def<B: IoBufMut>(&self, buf: B, pos: u64) -> ReadAt<B> {
        let fixed = self.fixed_index(&buf);
        ReadAt {
            fd: self.fd,
            buf,
            pos: kernel_pos(pos),
            nowait: self.is_nowait_read,
            unpositioned: self.unpositioned,
            at_once: self.is_direct,
            fixed,
        }
    }

    /// Writes `buf`'s data at `pos` (ignored under `append`); may write less. Linkable
    /// like [`read_at`](Self::read_at).
    ///
    /// # Examples
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let file = ring_rt::fs::File::create(&path).await?;
    /// let (n, buf) = file.write_at(b"abc".to_vec(), 100).await; // a hole before it
    /// assert_eq!(n?, 3);
    /// assert_eq!(buf, b"abc"); // the buffer is back
    /// assert_eq!(file.metadata().await?.len(), 103);
    /// # std::fs::remove_file(&path)?;
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn write_at<B: IoBuf>(
        &self,
        buf: B,
        pos: u64,
    ) -> Pending<'_, impl OpDef<Output = (io::Result<usize>, B)>> {
        Pending::new(self.core.clone(), self.write_at_def(buf, pos))
    }

    /// [`write_at`](Self::write_at)'s op, not bound to `self`: for a caller that keeps
    /// the file open beside it (the adapter's write-all, `compat::FileWrite`).
    #[cfg(any(feature = "tokio-io", feature = "futures-io"))]
    pub(crate) fn write_at_unbound(
        &self,
        buf: Slice<Vec<u8>>,
        pos: u64,
    ) -> Op<WriteAt<Slice<Vec<u8>>>> {
        Op::new(self.core.clone(), self.write_at_def(buf, pos))
    }

    fn write_at_def<B: IoBuf>(&self, buf: B, pos: u64) -> WriteAt<B> {
        let fixed = self.fixed_index(&buf);
        WriteAt {
            fd: self.fd,
            buf,
            pos: kernel_pos(pos),
            unpositioned: self.unpositioned,
            at_once: self.is_direct,
            fixed,
        }
    }

    /// Whether this file has no position (a FIFO, a pipe, a terminal): only whole-stream
    /// reads and writes (`fs::stream::Stream`) work on it.
    pub(super) fn is_stream(&self) -> bool {
        self.unpositioned
    }

    /// The runtime this file's ops go to.
    pub(super) fn core(&self) -> &Rc<Core> {
        &self.core
    }

    /// The registered index `buf` goes to the kernel by on this file's worker: a chunk of
    /// that worker's registered pool (see [`FixedBuf`](crate::buf::FixedBuf)), else none.
    fn fixed_index(&self, buf: &impl IoBuf) -> Option<u16> {
        buf.fixed_buf().and_then(|b| self.core.fixed_index(b))
    }

    /// Reads at `pos` into `bufs` in order (`preadv`), each up to its capacity. At most
    /// 1,024 buffers are used per call; more give a short read.
    ///
    /// # Examples
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// std::fs::write(&path, "headerbody")?;
    /// let file = ring_rt::fs::File::open(&path).await?;
    /// let bufs = vec![Vec::with_capacity(6), Vec::with_capacity(4)];
    /// let (n, bufs) = file.readv_at(bufs, 0).await;
    /// assert_eq!(n?, 10);
    /// assert_eq!((&bufs[0][..], &bufs[1][..]), (&b"header"[..], &b"body"[..]));
    /// # std::fs::remove_file(&path)?;
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub async fn readv_at<B: IoBufMut>(
        &self,
        bufs: Vec<B>,
        pos: u64,
    ) -> (io::Result<usize>, Vec<B>) {
        if let Err(err) = self.check_pos(pos) {
            return (Err(err), bufs);
        }
        let op = ReadvAt::new(self.fd, bufs, pos, self.is_nowait_read);
        Op::new(self.core.clone(), op).await
    }

    /// Writes `bufs`' data at `pos` in order (`pwritev`); may write less. At most 1,024
    /// buffers per call.
    ///
    /// # Examples
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let file = ring_rt::fs::File::create(&path).await?;
    /// let (n, _bufs) = file.writev_at(vec![&b"head"[..], &b"er"[..]], 0).await;
    /// assert_eq!(n?, 6);
    /// # drop(file);
    /// assert_eq!(std::fs::read(&path)?, b"header");
    /// # std::fs::remove_file(&path)?;
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub async fn writev_at<B: IoBuf>(&self, bufs: Vec<B>, pos: u64) -> (io::Result<usize>, Vec<B>) {
        if let Err(err) = self.check_pos(pos) {
            return (Err(err), bufs);
        }
        let op = WritevAt::new(self.fd, bufs, pos);
        Op::new(self.core.clone(), op).await
    }

    /// Fills `buf`'s whole capacity from `pos`, or fails with `UnexpectedEof` if the file
    /// ends first (the bytes that were read are kept in the buffer).
    ///
    /// # Examples
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// std::fs::write(&path, "exactly")?;
    /// let file = ring_rt::fs::File::open(&path).await?;
    /// let (res, buf) = file.read_exact_at(Vec::with_capacity(7), 0).await;
    /// res?;
    /// assert_eq!(buf, b"exactly");
    /// let (res, buf) = file.read_exact_at(Vec::with_capacity(7), 3).await;
    /// assert_eq!(res.unwrap_err().kind(), std::io::ErrorKind::UnexpectedEof);
    /// assert_eq!(buf, b"ctly"); // what there was
    /// # std::fs::remove_file(&path)?;
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub async fn read_exact_at<B: IoBufMut>(&self, buf: B, pos: u64) -> (io::Result<()>, B) {
        let total = buf.bytes_total();
        transfer_all(buf, total, eof, |slice, done| {
            self.read_at(slice, pos.saturating_add(done as u64))
        })
        .await
    }

    /// Writes all of `buf`'s data from `pos`, looping over short writes; `WriteZero` if
    /// the kernel accepts nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let file = ring_rt::fs::File::create(&path).await?;
    /// let (res, buf) = file.write_all_at(vec![b'z'; 1 << 20], 0).await;
    /// res?;
    /// assert_eq!(file.metadata().await?.len(), buf.len() as u64);
    /// # std::fs::remove_file(&path)?;
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub async fn write_all_at<B: IoBuf>(&self, buf: B, pos: u64) -> (io::Result<()>, B) {
        let total = buf.bytes_init();
        transfer_all(buf, total, write_zero, |slice, done| {
            self.write_at(slice, pos.saturating_add(done as u64))
        })
        .await
    }

    /// Flushes data and metadata to the device (`fsync`). Linkable after a write (see
    /// [`Pending::link`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let file = ring_rt::fs::File::create(&path).await?;
    /// file.write_all_at(&b"durable"[..], 0).await.0?;
    /// file.sync_all().await?;
    /// # std::fs::remove_file(&path)?;
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn sync_all(&self) -> Pending<'_, impl OpDef<Output = io::Result<()>>> {
        Pending::new(
            self.core.clone(),
            Fsync {
                fd: self.fd,
                datasync: false,
            },
        )
    }

    /// Flushes data, and only the metadata needed to read it back (`fdatasync`).
    ///
    /// # Examples
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let file = ring_rt::fs::File::create(&path).await?;
    /// // Write and flush as one linked chain: the fdatasync runs only if the write succeeded.
    /// let ((written, _buf), synced) = file.write_at(&b"data"[..], 0).link(file.sync_data()).await;
    /// assert_eq!(written?, 4);
    /// synced?;
    /// # std::fs::remove_file(&path)?;
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn sync_data(&self) -> Pending<'_, impl OpDef<Output = io::Result<()>>> {
        Pending::new(
            self.core.clone(),
            Fsync {
                fd: self.fd,
                datasync: true,
            },
        )
    }

    /// Truncates or extends (with zeros) the file to `len` bytes (`ftruncate`). Before
    /// Linux 6.9 io_uring has no ftruncate: it then runs as a direct syscall on the loop
    /// thread, which is short (no data is written).
    ///
    /// # Examples
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let file = ring_rt::fs::File::create(&path).await?;
    /// file.set_len(4096).await?;
    /// assert_eq!(file.metadata().await?.len(), 4096);
    /// file.set_len(0).await?;
    /// assert!(file.metadata().await?.is_empty());
    /// # std::fs::remove_file(&path)?;
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub async fn set_len(&self, len: u64) -> io::Result<()> {
        check_pos(len)?;
        let op = Ftruncate { fd: self.fd, len };
        Op::new(self.core.clone(), op).await
    }

    /// `fallocate(mode, offset, len)`: reserve (mode 0, or `FALLOC_FL_KEEP_SIZE`), punch
    /// holes, zero ranges. Unsupported modes fail with the filesystem's `EOPNOTSUPP`.
    ///
    /// # Examples
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let file = ring_rt::fs::File::create(&path).await?;
    /// match file.fallocate(0, 0, 1 << 20).await {
    ///     Ok(()) => assert_eq!(file.metadata().await?.len(), 1 << 20),
    ///     // Some filesystems cannot reserve space.
    ///     Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP)),
    /// }
    /// # std::fs::remove_file(&path)?;
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub async fn fallocate(&self, mode: i32, offset: u64, len: u64) -> io::Result<()> {
        check_pos(offset)?;
        check_pos(len)?;
        let op = Fallocate {
            fd: self.fd,
            mode,
            offset,
            len,
        };
        Op::new(self.core.clone(), op).await
    }

    /// The file's metadata (`statx` on the fd with `AT_EMPTY_PATH`).
    ///
    /// # Examples
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let file = ring_rt::fs::File::create(&path).await?;
    /// let meta = file.metadata().await?;
    /// assert!(meta.is_file() && meta.is_empty());
    /// # std::fs::remove_file(&path)?;
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub async fn metadata(&self) -> io::Result<Metadata> {
        let op = Statx::new(self.fd, Default::default(), libc::AT_EMPTY_PATH, STATX_MASK);
        let stx = Op::new(self.core.clone(), op).await?;
        Ok(Metadata::from_statx(stx))
    }

    /// Closes the file and reports the result (dropping it closes too, without waiting).
    /// While an op of a dropped linked chain still waits to be issued on this file (behind
    /// an fsync, say), and outside the runtime's `block_on` or after its shutdown, the file
    /// is closed as a drop closes it, and `Ok` is returned without the close's own result.
    ///
    /// # Examples
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let file = ring_rt::fs::File::create(&path).await?;
    /// file.write_all_at(&b"last words"[..], 0).await.0?;
    /// file.close().await?; // e.g. an NFS write-back error would show here
    /// # std::fs::remove_file(&path)?;
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub async fn close(mut self) -> io::Result<()> {
        if self.core.links_name(self.fd) || self.core.check_startable().is_err() {
            // A dropped chain's link not yet issued names the fd (it waits for an fsync,
            // say): a CLOSE now would free the number under it. Or no op can start here
            // (outside the runtime's `block_on`, after its shutdown): a refused CLOSE op
            // looked as if it had run, and the fd stayed open. The runtime closes it as a
            // drop does, after what still names it.
            let fd = std::mem::replace(&mut self.fd, -1);
            self.core.close(fd);
            return Ok(());
        }
        let fd = std::mem::replace(&mut self.fd, -1);
        // SAFETY: `fd` was this File's open fd; -1 left behind means drop will not close
        // it, so the op is its only owner.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Op::new(self.core.clone(), Close::new(fd)).await
    }
}

fn eof(done: usize, total: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("end of file after {done} of {total} bytes"),
    )
}

impl Drop for File {
    fn drop(&mut self) {
        if self.fd >= 0 {
            self.core.close(self.fd);
        }
    }
}

impl AsRawFd for File {
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

impl AsFd for File {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the fd stays open for as long as `self`, which the borrow cannot outlive.
        unsafe { BorrowedFd::borrow_raw(self.fd) }
    }
}

impl fmt::Debug for File {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("File").field("fd", &self.fd).finish()
    }
}
