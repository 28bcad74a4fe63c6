//! `OpenOptions`: std's builder for how to open a file, plus `O_DIRECT`; opening is one
//! `IORING_OP_OPENAT` (5.6+).

use std::io;
use std::path::Path;

use super::{cstring, File};
use crate::op::fs::OpenAt;
use crate::op::Op;
use crate::worker::Core;

/// Options for opening a file, as [`std::fs::OpenOptions`], with [`direct`](Self::direct)
/// for `O_DIRECT`. Each setter takes and returns `&mut Self`, so calls chain and one
/// value can open many files.
///
/// # Examples
///
/// ```
/// use ring_rt::fs::OpenOptions;
///
/// # fn main() -> std::io::Result<()> {
/// let path = std::env::temp_dir().join(format!("ring-rt-doc-{}.log", std::process::id()));
/// ring_rt::Runtime::new()?.block_on(async {
///     let mut options = OpenOptions::new();
///     options.append(true).create(true).mode(0o600);
///     for line in ["one\n", "two\n"] {
///         let log = options.open(&path).await?;
///         log.write_all_at(line, 0).await.0?; // O_APPEND: always at the end
///     }
///     std::io::Result::Ok(())
/// })?;
/// assert_eq!(std::fs::read_to_string(&path)?, "one\ntwo\n");
/// std::fs::remove_file(&path)
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct OpenOptions {
    read: bool,
    write: bool,
    append: bool,
    truncate: bool,
    create: bool,
    create_new: bool,
    direct: bool,
    custom_flags: i32,
    mode: u32,
}

impl Default for OpenOptions {
    fn default() -> OpenOptions {
        OpenOptions::new()
    }
}

impl OpenOptions {
    /// Every option off, mode `0o666` (before the umask). Set at least one of read, write
    /// or append before opening.
    ///
    /// # Examples
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// # std::fs::write(&path, "")?;
    /// use ring_rt::fs::OpenOptions;
    ///
    /// let err = OpenOptions::new().open(&path).await.unwrap_err(); // no access mode
    /// assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    /// let file = OpenOptions::new().read(true).open(&path).await?;
    /// # drop(file);
    /// # std::fs::remove_file(&path)?;
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn new() -> OpenOptions {
        OpenOptions {
            read: false,
            write: false,
            append: false,
            truncate: false,
            create: false,
            create_new: false,
            direct: false,
            custom_flags: 0,
            mode: 0o666,
        }
    }

    /// Open for reading.
    ///
    /// # Examples
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// # std::fs::write(&path, "rw")?;
    /// let file = ring_rt::fs::OpenOptions::new().read(true).write(true).open(&path).await?;
    /// file.write_all_at(&b"RW"[..], 0).await.0?;
    /// let (n, buf) = file.read_at(Vec::with_capacity(2), 0).await;
    /// assert_eq!((n?, &buf[..]), (2, &b"RW"[..]));
    /// # std::fs::remove_file(&path)?;
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn read(&mut self, read: bool) -> &mut OpenOptions {
        self.read = read;
        self
    }

    /// Open for writing (see [`read`](Self::read) for an example).
    pub fn write(&mut self, write: bool) -> &mut OpenOptions {
        self.write = write;
        self
    }

    /// Every write goes to the end of the file (`O_APPEND`; the position given to
    /// `write_at` is ignored, as Linux does for `pwrite`). Implies write access. See the
    /// [type's example](OpenOptions).
    pub fn append(&mut self, append: bool) -> &mut OpenOptions {
        self.append = append;
        self
    }

    /// Cut an existing file to length 0 (`O_TRUNC`); needs write access.
    ///
    /// # Examples
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// std::fs::write(&path, "old contents")?;
    /// let file = ring_rt::fs::OpenOptions::new().write(true).truncate(true).open(&path).await?;
    /// assert_eq!(file.metadata().await?.len(), 0);
    /// # std::fs::remove_file(&path)?;
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn truncate(&mut self, truncate: bool) -> &mut OpenOptions {
        self.truncate = truncate;
        self
    }

    /// Create the file if it does not exist (`O_CREAT`); needs write access. See the
    /// [type's example](OpenOptions).
    pub fn create(&mut self, create: bool) -> &mut OpenOptions {
        self.create = create;
        self
    }

    /// Create the file, failing with `AlreadyExists` if it exists (`O_CREAT | O_EXCL`).
    ///
    /// # Examples
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let mut options = ring_rt::fs::OpenOptions::new();
    /// options.write(true).create_new(true);
    /// let first = options.open(&path).await?;
    /// let second = options.open(&path).await;
    /// assert_eq!(second.unwrap_err().kind(), std::io::ErrorKind::AlreadyExists);
    /// # drop(first);
    /// # std::fs::remove_file(&path)?;
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn create_new(&mut self, create_new: bool) -> &mut OpenOptions {
        self.create_new = create_new;
        self
    }

    /// Bypass the page cache (`O_DIRECT`): buffers, offsets and lengths must then be aligned
    /// as the filesystem requires (see [`AlignedBuf`](super::AlignedBuf) and
    /// [`Metadata::direct_io_align`](super::Metadata::direct_io_align)).
    ///
    /// # Examples
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// use ring_rt::fs::{AlignedBuf, OpenOptions};
    ///
    /// let mut options = OpenOptions::new();
    /// options.read(true).write(true).create(true).direct(true);
    /// let file = match options.open(&path).await {
    ///     // Some filesystems (tmpfs before 6.6, for one) refuse O_DIRECT.
    ///     Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
    /// #       std::fs::remove_file(&path).ok();
    ///         return Ok(());
    ///     }
    ///     other => other?,
    /// };
    /// let mut buf = AlignedBuf::new(4096)?;
    /// buf.extend_from_slice(&[7; 4096])?;
    /// file.write_all_at(buf, 0).await.0?; // aligned address, offset and length
    /// let (res, buf) = file.read_exact_at(AlignedBuf::new(4096)?, 0).await;
    /// res?;
    /// assert_eq!(buf[4095], 7);
    /// # std::fs::remove_file(&path)?;
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn direct(&mut self, direct: bool) -> &mut OpenOptions {
        self.direct = direct;
        self
    }

    /// Extra `open(2)` flags; the access mode bits (`O_ACCMODE`) are ignored, as in std.
    ///
    /// # Examples
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// # std::fs::write(&path, "")?;
    /// let file = ring_rt::fs::OpenOptions::new()
    ///     .read(true)
    ///     .custom_flags(libc::O_NOATIME | libc::O_NOFOLLOW)
    ///     .open(&path)
    ///     .await?;
    /// # drop(file);
    /// # std::fs::remove_file(&path)?;
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn custom_flags(&mut self, flags: i32) -> &mut OpenOptions {
        self.custom_flags = flags;
        self
    }

    /// Permission bits for a newly created file (before the umask).
    ///
    /// # Examples
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let mut options = ring_rt::fs::OpenOptions::new();
    /// let file = options.write(true).create(true).mode(0o600).open(&path).await?;
    /// assert_eq!(file.metadata().await?.mode() & 0o077, 0); // private to the owner
    /// # std::fs::remove_file(&path)?;
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn mode(&mut self, mode: u32) -> &mut OpenOptions {
        self.mode = mode;
        self
    }

    /// Opens `path` with these options on the current runtime.
    ///
    /// Errors carry the OS code: `NotFound`, `AlreadyExists` (`create_new`), `EISDIR` for a
    /// directory opened for writing, `InvalidInput` for contradictory options or a path
    /// with a NUL byte.
    ///
    /// A FIFO opens without waiting for its other end, as io_uring's `OPENAT` opens it
    /// (and as tokio's `net::unix::pipe` does): for reading at once (a read before any
    /// writer came says end of file), for writing with no reader `ENXIO`. Unlike
    /// `std::fs::File::open`, which waits for the other end. The epoll backend opens the
    /// same way. Two exceptions follow io_uring, whose kernel then opens in a worker thread
    /// that waits: an open that creates or truncates, and on io_uring an open whose path
    /// the kernel must first read from disk (not in its cache).
    ///
    /// # Examples
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// # std::fs::write(&path, "")?;
    /// use ring_rt::fs::OpenOptions;
    ///
    /// let file = OpenOptions::new().read(true).open(&path).await?;
    /// let missing = OpenOptions::new().read(true).open("/no/such/file").await;
    /// assert_eq!(missing.unwrap_err().kind(), std::io::ErrorKind::NotFound);
    /// let nul = OpenOptions::new().read(true).open("bad\0path").await;
    /// assert_eq!(nul.unwrap_err().kind(), std::io::ErrorKind::InvalidInput);
    /// # drop(file);
    /// # std::fs::remove_file(&path)?;
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub async fn open(&self, path: impl AsRef<Path>) -> io::Result<File> {
        let flags = self.flags()?;
        let core = Core::current_io()?;
        // An open interrupted by a signal or a stop of the process (`EINTR`; one waiting
        // in a kernel worker, as a FIFO's does) is made again, as std's `open` does.
        loop {
            let op = OpenAt {
                path: cstring(path.as_ref())?,
                flags,
                mode: self.mode,
            };
            match Op::new(core.clone(), op).await {
                Ok(fd) => return Ok(File::from_owned(core, fd)),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// The `open(2)` flags, checked as std checks them.
    pub(crate) fn flags(&self) -> io::Result<i32> {
        let mut flags = libc::O_CLOEXEC | self.access_mode()? | self.creation_mode()?;
        if self.direct {
            flags |= libc::O_DIRECT;
        }
        Ok(flags | (self.custom_flags & !libc::O_ACCMODE))
    }

    fn access_mode(&self) -> io::Result<i32> {
        match (self.read, self.write, self.append) {
            (true, false, false) => Ok(libc::O_RDONLY),
            (false, true, false) => Ok(libc::O_WRONLY),
            (true, true, false) => Ok(libc::O_RDWR),
            (false, _, true) => Ok(libc::O_WRONLY | libc::O_APPEND),
            (true, _, true) => Ok(libc::O_RDWR | libc::O_APPEND),
            (false, false, false) => Err(invalid("no access mode: set read, write or append")),
        }
    }

    fn creation_mode(&self) -> io::Result<i32> {
        let writable = self.write || self.append;
        if !writable && (self.truncate || self.create || self.create_new) {
            return Err(invalid("create and truncate need write or append access"));
        }
        if self.append && self.truncate && !self.create_new {
            return Err(invalid("append and truncate contradict each other"));
        }
        Ok(match (self.create, self.truncate, self.create_new) {
            (_, _, true) => libc::O_CREAT | libc::O_EXCL,
            (true, true, false) => libc::O_CREAT | libc::O_TRUNC,
            (true, false, false) => libc::O_CREAT,
            (false, true, false) => libc::O_TRUNC,
            (false, false, false) => 0,
        })
    }
}

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(f: impl FnOnce(&mut OpenOptions) -> &mut OpenOptions) -> io::Result<i32> {
        f(&mut OpenOptions::new()).flags()
    }

    #[test]
    fn read_only_is_rdonly_cloexec() {
        assert_eq!(
            flags(|o| o.read(true)).unwrap(),
            libc::O_RDONLY | libc::O_CLOEXEC
        );
    }

    #[test]
    fn create_truncate_write() {
        let f = flags(|o| o.write(true).create(true).truncate(true)).unwrap();
        assert_eq!(f & libc::O_ACCMODE, libc::O_WRONLY);
        assert_eq!(
            f & (libc::O_CREAT | libc::O_TRUNC),
            libc::O_CREAT | libc::O_TRUNC
        );
    }

    #[test]
    fn create_new_is_excl_and_wins_over_truncate() {
        let f = flags(|o| o.write(true).create_new(true).truncate(true)).unwrap();
        assert_eq!(
            f & (libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC),
            libc::O_CREAT | libc::O_EXCL
        );
    }

    #[test]
    fn append_implies_write_access() {
        let f = flags(|o| o.append(true)).unwrap();
        assert_eq!(f & libc::O_ACCMODE, libc::O_WRONLY);
        assert_ne!(f & libc::O_APPEND, 0);
        let f = flags(|o| o.read(true).append(true)).unwrap();
        assert_eq!(f & libc::O_ACCMODE, libc::O_RDWR);
    }

    #[test]
    fn direct_and_custom_flags_without_accmode() {
        let f = flags(|o| {
            o.read(true)
                .direct(true)
                .custom_flags(libc::O_NOATIME | libc::O_RDWR)
        })
        .unwrap();
        assert_eq!(f & libc::O_ACCMODE, libc::O_RDONLY);
        assert_ne!(f & libc::O_DIRECT, 0);
        assert_ne!(f & libc::O_NOATIME, 0);
    }

    #[test]
    fn contradictions_are_invalid_input() {
        let cases: [fn(&mut OpenOptions) -> &mut OpenOptions; 4] = [
            |o| o,
            |o| o.read(true).create(true),
            |o| o.read(true).truncate(true),
            |o| o.append(true).truncate(true),
        ];
        for case in cases {
            let err = flags(case).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        }
    }
}
