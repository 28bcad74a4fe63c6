//! The one place a negative `res` becomes an `io::Error`.
//!
//! `ENOBUFS` (a provided-buffer group ran dry) is an ordinary OS error here; callers that
//! select buffers check for it with [`is_enobufs`] and count it, because it means "retry when
//! buffers return", not "the socket failed".

use std::io;

/// Converts a CQE result: non-negative is the value, negative is `-errno`.
pub fn cvt(res: i32) -> io::Result<u32> {
    if res < 0 {
        Err(io::Error::from_raw_os_error(-res))
    } else {
        Ok(res as u32)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enobufs_is_recognised() {
        assert!(is_enobufs(&cvt(-libc::ENOBUFS).unwrap_err()));
        assert!(!is_enobufs(&cvt(-libc::EAGAIN).unwrap_err()));
    }

    #[test]
    fn unsupported_names_the_kernel() {
        let err = unsupported("multishot accept", "5.19");
        assert_eq!(err.kind(), io::ErrorKind::Unsupported);
        assert!(err.to_string().contains("5.19"));
    }
}
