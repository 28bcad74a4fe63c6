//! Small helpers for the raw syscalls ops run themselves (on epoll, or inline).

/// A libc return value as a CQE result: the value, or `-errno` on failure.
pub(crate) fn res(ret: isize) -> i32 {
    if ret < 0 {
        -std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    } else {
        ret.min(i32::MAX as isize) as i32
    }
}
