//! `Metadata`: what `statx(2)` reports about a file (`IORING_OP_STATX`, 5.6+).

use std::fmt;
use std::fs::Permissions;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, SystemTime};

/// The fields asked of statx: the classic `stat` set, birth time, and (6.1+) `O_DIRECT`
/// alignment. A kernel or filesystem lacking one leaves its bit out of `stx_mask`.
pub(crate) const STATX_MASK: u32 =
    libc::STATX_BASIC_STATS | libc::STATX_BTIME | libc::STATX_DIOALIGN;

/// Metadata of a file, from `statx`: from [`File::metadata`](super::File::metadata),
/// [`metadata`](super::metadata) or [`symlink_metadata`](super::symlink_metadata).
///
/// # Examples
///
/// Every accessor:
///
/// ```
/// use std::os::unix::fs::PermissionsExt;
///
/// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
/// # ring_rt::Runtime::new()?.block_on(async {
/// std::fs::write(&path, "twelve bytes")?;
/// let meta = ring_rt::fs::metadata(&path).await?;
/// assert_eq!(meta.len(), 12);
/// assert!(!meta.is_empty() && meta.is_file() && !meta.is_dir() && !meta.is_symlink());
/// assert_eq!(meta.mode() & 0o777, meta.permissions().mode() & 0o777);
/// assert!(meta.modified()? <= std::time::SystemTime::now());
/// let _ = (meta.accessed()?, meta.changed()?);
/// match meta.created() {
///     Ok(birth) => assert!(birth <= meta.modified()?),
///     Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::Unsupported), // no birth time here
/// }
/// let std_meta = std::fs::metadata(&path)?;
/// use std::os::unix::fs::MetadataExt;
/// assert_eq!((meta.ino(), meta.dev(), meta.nlink()), (std_meta.ino(), std_meta.dev(), 1));
/// assert_eq!((meta.uid(), meta.gid()), (std_meta.uid(), std_meta.gid()));
/// assert!(meta.blksize() > 0);
/// println!("{} blocks of 512 bytes allocated", meta.blocks());
/// if let Some((mem_align, offset_align)) = meta.direct_io_align() {
///     println!("O_DIRECT: buffers aligned to {mem_align}, offsets to {offset_align}");
/// }
/// # std::fs::remove_file(&path)?;
/// # std::io::Result::Ok(()) })?;
/// # std::io::Result::Ok(())
/// ```
#[derive(Clone, Copy)]
pub struct Metadata {
    stx: libc::statx,
}

impl Metadata {
    pub(crate) fn from_statx(stx: libc::statx) -> Metadata {
        Metadata { stx }
    }

    fn file_type(&self) -> u32 {
        u32::from(self.stx.stx_mode) & libc::S_IFMT
    }

    /// Size in bytes.
    pub fn len(&self) -> u64 {
        self.stx.stx_size
    }

    /// True when the size is 0.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A regular file.
    pub fn is_file(&self) -> bool {
        self.file_type() == libc::S_IFREG
    }

    /// A directory.
    pub fn is_dir(&self) -> bool {
        self.file_type() == libc::S_IFDIR
    }

    /// A symbolic link (only from [`symlink_metadata`](super::symlink_metadata)).
    pub fn is_symlink(&self) -> bool {
        self.file_type() == libc::S_IFLNK
    }

    /// `st_mode`: file type and permission bits.
    pub fn mode(&self) -> u32 {
        u32::from(self.stx.stx_mode)
    }

    /// The permissions, as std represents them.
    pub fn permissions(&self) -> Permissions {
        Permissions::from_mode(self.mode())
    }

    /// Last modification.
    pub fn modified(&self) -> io::Result<SystemTime> {
        self.time(libc::STATX_MTIME, self.stx.stx_mtime, "modification")
    }

    /// Last access.
    pub fn accessed(&self) -> io::Result<SystemTime> {
        self.time(libc::STATX_ATIME, self.stx.stx_atime, "access")
    }

    /// Creation (birth); `Unsupported` where the filesystem does not record it.
    pub fn created(&self) -> io::Result<SystemTime> {
        self.time(libc::STATX_BTIME, self.stx.stx_btime, "creation")
    }

    /// Last status change.
    pub fn changed(&self) -> io::Result<SystemTime> {
        self.time(libc::STATX_CTIME, self.stx.stx_ctime, "status change")
    }

    fn time(&self, bit: u32, ts: libc::statx_timestamp, what: &str) -> io::Result<SystemTime> {
        if self.stx.stx_mask & bit == 0 {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("the {what} time is not available on this filesystem"),
            ));
        }
        system_time(ts.tv_sec, ts.tv_nsec)
    }

    /// Inode number.
    pub fn ino(&self) -> u64 {
        self.stx.stx_ino
    }

    /// Hard links.
    pub fn nlink(&self) -> u64 {
        u64::from(self.stx.stx_nlink)
    }

    /// Owner's user id.
    pub fn uid(&self) -> u32 {
        self.stx.stx_uid
    }

    /// Owner's group id.
    pub fn gid(&self) -> u32 {
        self.stx.stx_gid
    }

    /// Preferred I/O block size.
    pub fn blksize(&self) -> u64 {
        u64::from(self.stx.stx_blksize)
    }

    /// 512-byte blocks allocated.
    pub fn blocks(&self) -> u64 {
        self.stx.stx_blocks
    }

    /// The device holding the file, as `st_dev`.
    pub fn dev(&self) -> u64 {
        libc::makedev(self.stx.stx_dev_major, self.stx.stx_dev_minor)
    }

    /// `O_DIRECT` alignment as `(memory, offset)` in bytes, when the kernel (6.1+) and
    /// filesystem report it; `None` otherwise, or when this file does not support `O_DIRECT`.
    pub fn direct_io_align(&self) -> Option<(u32, u32)> {
        let (mem, off) = (self.stx.stx_dio_mem_align, self.stx.stx_dio_offset_align);
        (self.stx.stx_mask & libc::STATX_DIOALIGN != 0 && mem != 0).then_some((mem, off))
    }
}

impl fmt::Debug for Metadata {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metadata")
            .field("len", &self.len())
            .field("mode", &format_args!("{:o}", self.mode()))
            .field("ino", &self.ino())
            .field("nlink", &self.nlink())
            .field("uid", &self.uid())
            .field("gid", &self.gid())
            .field("modified", &self.modified().ok())
            .finish_non_exhaustive()
    }
}

/// A statx timestamp (seconds may be negative: before 1970) as `SystemTime`.
fn system_time(sec: i64, nsec: u32) -> io::Result<SystemTime> {
    let out_of_range = || io::Error::new(io::ErrorKind::InvalidData, "timestamp out of range");
    if nsec >= 1_000_000_000 {
        return Err(out_of_range());
    }
    let whole = Duration::from_secs(sec.unsigned_abs());
    let base = if sec >= 0 {
        SystemTime::UNIX_EPOCH.checked_add(whole)
    } else {
        SystemTime::UNIX_EPOCH.checked_sub(whole)
    };
    base.and_then(|t| t.checked_add(Duration::from_nanos(u64::from(nsec))))
        .ok_or_else(out_of_range)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn statx_with(mask: u32, mode: u16) -> Metadata {
        // SAFETY: statx is plain integers; all-zero is a valid value.
        let mut stx: libc::statx = unsafe { std::mem::zeroed() };
        stx.stx_mask = mask;
        stx.stx_mode = mode;
        stx.stx_mtime.tv_sec = -1;
        stx.stx_mtime.tv_nsec = 500_000_000;
        Metadata::from_statx(stx)
    }

    #[test]
    fn timestamps_before_the_epoch_convert() {
        let t = system_time(-1, 500_000_000).unwrap();
        assert_eq!(
            SystemTime::UNIX_EPOCH.duration_since(t).unwrap(),
            Duration::from_millis(500)
        );
        assert_eq!(
            system_time(2, 1).unwrap(),
            SystemTime::UNIX_EPOCH + Duration::new(2, 1)
        );
        assert!(system_time(0, 1_000_000_000).is_err());
    }

    #[test]
    fn missing_mask_bit_is_unsupported() {
        let m = statx_with(libc::STATX_BASIC_STATS, libc::S_IFREG as u16 | 0o644);
        assert!(m.modified().is_ok());
        assert_eq!(m.created().unwrap_err().kind(), io::ErrorKind::Unsupported);
        assert_eq!(m.direct_io_align(), None);
    }

    #[test]
    fn file_type_from_mode() {
        let m = statx_with(libc::STATX_BASIC_STATS, libc::S_IFDIR as u16 | 0o755);
        assert!(m.is_dir() && !m.is_file() && !m.is_symlink());
        assert_eq!(m.permissions().mode() & 0o777, 0o755);
    }
}
