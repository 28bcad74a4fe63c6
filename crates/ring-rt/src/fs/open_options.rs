//! `OpenOptions`: std's builder for how to open a file, plus `O_DIRECT`; opening is one
//! `IORING_OP_OPENAT` (5.6+).

use std::io;
use std::path::Path;

use io_uring::opcode;

use super::{cstring, File};
use crate::op::fs::{run, OpenAt};
use crate::runtime::Core;

/// Options for opening a file, as [`std::fs::OpenOptions`], with [`direct`](Self::direct)
/// for `O_DIRECT`.
///
/// ```no_run
/// # ring_rt::Runtime::new().unwrap().block_on(async {
/// use ring_rt::fs::OpenOptions;
/// let file = OpenOptions::new().append(true).create(true).open("log.txt").await?;
/// # std::io::Result::Ok(()) }).unwrap();
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
    /// Every option off, mode `0o666` (before the umask).
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
    pub fn read(&mut self, read: bool) -> &mut OpenOptions {
        self.read = read;
        self
    }

    /// Open for writing.
    pub fn write(&mut self, write: bool) -> &mut OpenOptions {
        self.write = write;
        self
    }

    /// Every write goes to the end of the file (`O_APPEND`; the position given to
    /// `write_at` is ignored, as Linux does for `pwrite`). Implies write access.
    pub fn append(&mut self, append: bool) -> &mut OpenOptions {
        self.append = append;
        self
    }

    /// Cut an existing file to length 0 (`O_TRUNC`); needs write access.
    pub fn truncate(&mut self, truncate: bool) -> &mut OpenOptions {
        self.truncate = truncate;
        self
    }

    /// Create the file if it does not exist (`O_CREAT`); needs write access.
    pub fn create(&mut self, create: bool) -> &mut OpenOptions {
        self.create = create;
        self
    }

    /// Create the file, failing with `AlreadyExists` if it exists (`O_CREAT | O_EXCL`).
    pub fn create_new(&mut self, create_new: bool) -> &mut OpenOptions {
        self.create_new = create_new;
        self
    }

    /// Bypass the page cache (`O_DIRECT`): buffers, offsets and lengths must then be aligned
    /// as the filesystem requires (see [`AlignedBuf`](super::AlignedBuf) and
    /// [`Metadata::direct_io_align`](super::Metadata::direct_io_align)).
    pub fn direct(&mut self, direct: bool) -> &mut OpenOptions {
        self.direct = direct;
        self
    }

    /// Extra `open(2)` flags; the access mode bits (`O_ACCMODE`) are ignored, as in std.
    pub fn custom_flags(&mut self, flags: i32) -> &mut OpenOptions {
        self.custom_flags = flags;
        self
    }

    /// Permission bits for a newly created file (before the umask).
    pub fn mode(&mut self, mode: u32) -> &mut OpenOptions {
        self.mode = mode;
        self
    }

    /// Opens `path` with these options on the current runtime.
    ///
    /// Errors carry the OS code: `NotFound`, `AlreadyExists` (`create_new`), `EISDIR` for a
    /// directory opened for writing, `InvalidInput` for contradictory options or a path
    /// with a NUL byte.
    pub async fn open(&self, path: impl AsRef<Path>) -> io::Result<File> {
        let flags = self.flags()?;
        let path = cstring(path.as_ref())?;
        let core = Core::current_io()?;
        let op = OpenAt {
            path,
            flags,
            mode: self.mode,
        };
        let fd = run(core.clone(), op, opcode::OpenAt::CODE).await?;
        Ok(File::from_owned(core, fd))
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
