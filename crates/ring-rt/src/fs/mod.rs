//! Files and paths: [`File`], [`OpenOptions`], [`AlignedBuf`] for `O_DIRECT`, and the path
//! operations (`remove_file`, `rename`, `create_dir`, `metadata`, ...). io_uring 5.6+ for
//! files; unlinkat/renameat need 5.11 and mkdirat 5.15, and on older kernels those run as
//! direct syscalls on the loop thread. On epoll every op runs on the blocking pool.
//!
//! ```
//! use ring_rt::fs;
//!
//! # fn main() -> std::io::Result<()> {
//! let dir = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
//! ring_rt::Runtime::new()?.block_on(async {
//!     fs::create_dir(&dir).await?;
//!     fs::write(dir.join("a.txt"), &b"contents"[..]).await?;
//!     fs::rename(dir.join("a.txt"), dir.join("b.txt")).await?;
//!     assert_eq!(fs::read(dir.join("b.txt")).await?, b"contents");
//!     fs::remove_file(dir.join("b.txt")).await?;
//!     fs::remove_dir(&dir).await
//! })
//! # }
//! ```

mod aligned;
mod file;
mod fixed;
mod metadata;
mod open_options;
mod stream;

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

pub use aligned::{AlignedBuf, DEFAULT_ALIGN};
pub use file::File;
pub use metadata::Metadata;
pub use open_options::OpenOptions;

use crate::buf::{transfer_all, write_zero, IoBuf};
use crate::op::fs::{MkDirAt, RenameAt, Statx, UnlinkAt};
use crate::op::Op;
use crate::worker::Core;
use stream::Stream;

/// A path as the NUL-terminated string the kernel reads; `InvalidInput` for a path with an
/// interior NUL byte (the kernel would silently stop there).
pub(crate) fn cstring(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("path {path:?} contains a NUL byte"),
        )
    })
}

/// Removes a file (or symlink); `NotFound` if absent, `EISDIR` for a directory.
///
/// # Examples
///
/// ```
/// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
/// # ring_rt::Runtime::new()?.block_on(async {
/// std::fs::write(&path, "")?;
/// ring_rt::fs::remove_file(&path).await?;
/// let again = ring_rt::fs::remove_file(&path).await;
/// assert_eq!(again.unwrap_err().kind(), std::io::ErrorKind::NotFound);
/// # std::io::Result::Ok(()) })?;
/// # std::io::Result::Ok(())
/// ```
pub async fn remove_file(path: impl AsRef<Path>) -> io::Result<()> {
    unlink(path.as_ref(), 0).await
}

/// Removes an empty directory; `ENOTEMPTY` if it has entries.
///
/// # Examples
///
/// ```
/// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
/// # ring_rt::Runtime::new()?.block_on(async {
/// std::fs::create_dir(&path)?;
/// std::fs::write(path.join("entry"), "")?;
/// let busy = ring_rt::fs::remove_dir(&path).await;
/// assert_eq!(busy.unwrap_err().raw_os_error(), Some(libc::ENOTEMPTY));
/// ring_rt::fs::remove_file(path.join("entry")).await?;
/// ring_rt::fs::remove_dir(&path).await?;
/// # std::io::Result::Ok(()) })?;
/// # std::io::Result::Ok(())
/// ```
pub async fn remove_dir(path: impl AsRef<Path>) -> io::Result<()> {
    unlink(path.as_ref(), libc::AT_REMOVEDIR).await
}

async fn unlink(path: &Path, flags: i32) -> io::Result<()> {
    let op = UnlinkAt {
        path: cstring(path)?,
        flags,
    };
    Op::new(Core::current_io()?, op).await
}

/// Renames `from` to `to`, replacing `to` if it exists (as `rename(2)`).
///
/// # Examples
///
/// ```
/// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
/// # ring_rt::Runtime::new()?.block_on(async {
/// let tmp = path.with_extension("tmp");
/// // Replace a file atomically: write a temporary, then rename it over the target.
/// std::fs::write(&path, "old")?;
/// ring_rt::fs::write(&tmp, &b"new"[..]).await?;
/// ring_rt::fs::rename(&tmp, &path).await?;
/// assert_eq!(std::fs::read(&path)?, b"new");
/// # std::fs::remove_file(&path)?;
/// # std::io::Result::Ok(()) })?;
/// # std::io::Result::Ok(())
/// ```
pub async fn rename(from: impl AsRef<Path>, to: impl AsRef<Path>) -> io::Result<()> {
    let op = RenameAt {
        from: cstring(from.as_ref())?,
        to: cstring(to.as_ref())?,
    };
    Op::new(Core::current_io()?, op).await
}

/// Creates a directory (mode `0o777` before the umask); `AlreadyExists` if present.
///
/// # Examples
///
/// ```
/// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
/// # ring_rt::Runtime::new()?.block_on(async {
/// ring_rt::fs::create_dir(&path).await?;
/// assert!(ring_rt::fs::metadata(&path).await?.is_dir());
/// let again = ring_rt::fs::create_dir(&path).await;
/// assert_eq!(again.unwrap_err().kind(), std::io::ErrorKind::AlreadyExists);
/// # std::fs::remove_dir(&path)?;
/// # std::io::Result::Ok(()) })?;
/// # std::io::Result::Ok(())
/// ```
pub async fn create_dir(path: impl AsRef<Path>) -> io::Result<()> {
    let op = MkDirAt {
        path: cstring(path.as_ref())?,
        mode: 0o777,
    };
    Op::new(Core::current_io()?, op).await
}

/// Metadata of `path`, following symlinks.
///
/// # Examples
///
/// ```
/// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
/// # ring_rt::Runtime::new()?.block_on(async {
/// std::fs::write(&path, "12345")?;
/// let meta = ring_rt::fs::metadata(&path).await?;
/// assert!(meta.is_file());
/// assert_eq!(meta.len(), 5);
/// # std::fs::remove_file(&path)?;
/// # std::io::Result::Ok(()) })?;
/// # std::io::Result::Ok(())
/// ```
pub async fn metadata(path: impl AsRef<Path>) -> io::Result<Metadata> {
    stat(path.as_ref(), 0).await
}

/// Metadata of `path` itself, not following a final symlink.
///
/// # Examples
///
/// ```
/// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
/// # ring_rt::Runtime::new()?.block_on(async {
/// std::os::unix::fs::symlink("/", &path)?;
/// assert!(ring_rt::fs::symlink_metadata(&path).await?.is_symlink());
/// assert!(ring_rt::fs::metadata(&path).await?.is_dir()); // followed to "/"
/// # std::fs::remove_file(&path)?;
/// # std::io::Result::Ok(()) })?;
/// # std::io::Result::Ok(())
/// ```
pub async fn symlink_metadata(path: impl AsRef<Path>) -> io::Result<Metadata> {
    stat(path.as_ref(), libc::AT_SYMLINK_NOFOLLOW).await
}

async fn stat(path: &Path, flags: i32) -> io::Result<Metadata> {
    let op = Statx::new(libc::AT_FDCWD, cstring(path)?, flags, metadata::STATX_MASK);
    let stx = Op::new(Core::current_io()?, op).await?;
    Ok(Metadata::from_statx(stx))
}

/// Reads a whole file.
///
/// A file without a position (a FIFO, a pipe such as `/dev/stdin`, a terminal) is read as
/// a stream to its end, as std's `read` does. Opening a FIFO does not wait for a writer
/// (see [`OpenOptions::open`]): with none there, its stream is empty.
///
/// # Examples
///
/// ```
/// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
/// # ring_rt::Runtime::new()?.block_on(async {
/// std::fs::write(&path, "whole file")?;
/// let data: Vec<u8> = ring_rt::fs::read(&path).await?;
/// assert_eq!(data, b"whole file");
/// # std::fs::remove_file(&path)?;
/// # std::io::Result::Ok(()) })?;
/// # std::io::Result::Ok(())
/// ```
pub async fn read(path: impl AsRef<Path>) -> io::Result<Vec<u8>> {
    let file = File::open(path).await?;
    let stream = Stream::of(&file)?;
    // The size is a hint: the file may grow or shrink while it is read. Memory is asked
    // for with `try_reserve`: a file larger than memory is an `OutOfMemory` error, as in
    // std, not an abort.
    let hint = file.metadata().await.map_or(0, |m| m.len());
    let mut out = Vec::new();
    reserve(
        &mut out,
        usize::try_from(hint)
            .unwrap_or(usize::MAX)
            .saturating_add(1),
    )?;
    loop {
        if out.len() == out.capacity() {
            let more = out.capacity().max(8192);
            reserve(&mut out, more)?;
        }
        let start = out.len();
        let (res, slice) = match &stream {
            // A FIFO, a pipe, a terminal: read as it comes, as std's `read` does.
            Some(stream) => match stream.silence_ends_read() {
                None => stream.read(out.slice(start..)).await,
                Some(silence) => {
                    if !comes_within(stream, silence).await? {
                        return Ok(out);
                    }
                    // Not a waiting read: another reader may have taken what came, and
                    // then the silence is timed again (review CW).
                    stream.read_now(out.slice(start..)).await
                }
            },
            None => file.read_at(out.slice(start..), start as u64).await,
        };
        out = slice.into_inner();
        match res {
            Ok(0) => return Ok(out),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                ) => {}
            Err(e) => return Err(e),
        }
    }
}

/// Whether something comes to read on `stream` within `silence`: a raw terminal with
/// `VMIN` 0 ends a read there with 0 bytes (see `Stream::silence_ends_read`). The wait reads
/// nothing, so its timeout loses no bytes.
async fn comes_within(stream: &Stream<'_>, silence: std::time::Duration) -> io::Result<bool> {
    match crate::time::timeout(silence, stream.readable()).await {
        Ok(ready) => ready.map(|()| true),
        Err(_) => Ok(false),
    }
}

/// Grows `out` by `additional` bytes of room, or says that memory ran out.
fn reserve(out: &mut Vec<u8>, additional: usize) -> io::Result<()> {
    out.try_reserve_exact(additional).map_err(|e| {
        io::Error::new(
            io::ErrorKind::OutOfMemory,
            format!("reading a file: no memory for {additional} more bytes ({e})"),
        )
    })
}

/// Writes `data` (any [`IoBuf`]) as the whole content of `path`, creating or truncating
/// it.
///
/// A file without a position (a FIFO, a pipe such as `/dev/stdout`, a terminal) is
/// written as a stream, as std's `write` does. Its open creates or truncates, so a FIFO's
/// waits for a reader, as std's does (see [`OpenOptions::open`]).
///
/// # Examples
///
/// ```
/// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
/// # ring_rt::Runtime::new()?.block_on(async {
/// ring_rt::fs::write(&path, b"bytes".to_vec()).await?;
/// ring_rt::fs::write(&path, "replaced").await?; // a &'static str is an IoBuf too
/// assert_eq!(std::fs::read(&path)?, b"replaced");
/// # std::fs::remove_file(&path)?;
/// # std::io::Result::Ok(()) })?;
/// # std::io::Result::Ok(())
/// ```
pub async fn write<B: IoBuf>(path: impl AsRef<Path>, data: B) -> io::Result<()> {
    let file = File::create(path).await?;
    if let Some(stream) = Stream::of(&file)? {
        // A FIFO, a pipe, a terminal: written as a stream, as std's `write` does.
        let total = data.bytes_init();
        let written = transfer_all(data, total, write_zero, |slice, _| stream.write(slice));
        return written.await.0;
    }
    let (res, _) = file.write_all_at(data, 0).await;
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interior_nul_is_invalid_input() {
        let err = cstring(Path::new("a\0b")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(cstring(Path::new("/tmp/x")).unwrap().as_bytes(), b"/tmp/x");
    }
}
