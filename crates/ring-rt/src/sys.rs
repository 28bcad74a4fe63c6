//! Small helpers for the raw syscalls the epoll backend runs itself.

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

/// Sets or clears `O_NONBLOCK`.
pub(crate) fn set_nonblocking(fd: std::os::fd::RawFd, on: bool) -> std::io::Result<()> {
    // SAFETY: fcntl on an fd with integer arguments only.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let flags = if on {
        flags | libc::O_NONBLOCK
    } else {
        flags & !libc::O_NONBLOCK
    };
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
