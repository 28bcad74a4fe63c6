//! The one place a negative `res` becomes an `io::Error`, and errno names for messages.
//!
//! `ENOBUFS` (a provided-buffer group ran dry) is an ordinary OS error here; callers that
//! select buffers check for it with [`is_enobufs`] and count it, because it means "retry when
//! buffers return", not "the socket failed".

use std::io;

/// Converts a CQE result: non-negative is the value, negative is `-errno`. The kernel's
/// internal "restart the syscall" codes come out as `EINTR`: an op a kernel worker ran (an
/// open waiting for a FIFO's reader) answers `-ERESTARTSYS` when a stop of the process
/// interrupts it, where a syscall would have been restarted unseen; io_uring's own reads
/// and writes make that `EINTR` too.
pub fn cvt(res: i32) -> io::Result<u32> {
    if res < 0 {
        Err(io::Error::from_raw_os_error(user_errno(-res)))
    } else {
        Ok(res as u32)
    }
}

/// `errno`, with the kernel's restart codes (never meant for user space) made `EINTR`.
fn user_errno(errno: i32) -> i32 {
    // ERESTARTSYS, ERESTARTNOINTR, ERESTARTNOHAND, ERESTART_RESTARTBLOCK (linux/errno.h;
    // 515 is ENOIOCTLCMD, not a restart).
    match errno {
        512..=514 | 516 => libc::EINTR,
        other => other,
    }
}

/// True when `err` is the kernel's "no provided buffer was available".
pub fn is_enobufs(err: &io::Error) -> bool {
    err.raw_os_error() == Some(libc::ENOBUFS)
}

/// An `Unsupported` error naming the feature and the first kernel that has it.
pub fn unsupported(what: &str, since: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!("{what} is not available on this kernel or feature profile (needs Linux {since}+)"),
    )
}

/// The symbolic name of `errno` (`EPERM`), for messages and the probe table.
pub fn errno_name(errno: i32) -> &'static str {
    const NAMES: &[(i32, &str)] = &[
        (libc::EPERM, "EPERM"),
        (libc::ENOENT, "ENOENT"),
        (libc::EINTR, "EINTR"),
        (libc::EIO, "EIO"),
        (libc::ENXIO, "ENXIO"),
        (libc::EBADF, "EBADF"),
        (libc::EAGAIN, "EAGAIN"),
        (libc::ENOMEM, "ENOMEM"),
        (libc::EACCES, "EACCES"),
        (libc::EFAULT, "EFAULT"),
        (libc::EBUSY, "EBUSY"),
        (libc::EEXIST, "EEXIST"),
        (libc::ENODEV, "ENODEV"),
        (libc::EINVAL, "EINVAL"),
        (libc::ENFILE, "ENFILE"),
        (libc::EMFILE, "EMFILE"),
        (libc::ENOSPC, "ENOSPC"),
        (libc::EPIPE, "EPIPE"),
        (libc::ENOSYS, "ENOSYS"),
        (libc::EOVERFLOW, "EOVERFLOW"),
        (libc::ETIME, "ETIME"),
        (libc::EOPNOTSUPP, "EOPNOTSUPP"),
        (libc::EAFNOSUPPORT, "EAFNOSUPPORT"),
        (libc::EADDRINUSE, "EADDRINUSE"),
        (libc::EADDRNOTAVAIL, "EADDRNOTAVAIL"),
        (libc::ENETUNREACH, "ENETUNREACH"),
        (libc::ECONNRESET, "ECONNRESET"),
        (libc::ENOBUFS, "ENOBUFS"),
        (libc::ETIMEDOUT, "ETIMEDOUT"),
        (libc::ECONNREFUSED, "ECONNREFUSED"),
        (libc::ECANCELED, "ECANCELED"),
    ];
    NAMES
        .iter()
        .find(|&&(code, _)| code == errno)
        .map_or("unknown errno", |&(_, name)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enobufs_is_recognised() {
        assert!(is_enobufs(&cvt(-libc::ENOBUFS).unwrap_err()));
        assert!(!is_enobufs(&cvt(-libc::EAGAIN).unwrap_err()));
    }

    #[test]
    fn restart_codes_come_out_as_eintr() {
        for restart in [512, 513, 514, 516] {
            let err = cvt(-restart).unwrap_err();
            assert_eq!(err.raw_os_error(), Some(libc::EINTR), "{restart}");
            assert_eq!(err.kind(), io::ErrorKind::Interrupted);
        }
        assert_eq!(cvt(-515).unwrap_err().raw_os_error(), Some(515));
        assert_eq!(
            cvt(-libc::EPERM).unwrap_err().raw_os_error(),
            Some(libc::EPERM)
        );
        assert_eq!(cvt(7).unwrap(), 7);
    }

    #[test]
    fn unsupported_names_the_kernel() {
        let err = unsupported("multishot accept", "5.19");
        assert_eq!(err.kind(), io::ErrorKind::Unsupported);
        assert!(err.to_string().contains("5.19"));
    }

    #[test]
    fn errno_names_are_symbolic() {
        assert_eq!(errno_name(libc::EPERM), "EPERM");
        assert_eq!(errno_name(libc::ENOBUFS), "ENOBUFS");
        assert_eq!(errno_name(-1), "unknown errno");
    }
}
