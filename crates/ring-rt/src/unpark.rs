//! Waking a parked worker from another thread: an eventfd the backend watches.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Write end of a worker's wake-up eventfd. `Send + Sync`: any thread may unpark.
#[derive(Debug)]
pub(crate) struct Unparker {
    fd: OwnedFd,
}

impl Unparker {
    pub(crate) fn new() -> io::Result<Unparker> {
        // SAFETY: eventfd has no pointer arguments; the result is checked before use.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh eventfd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Unparker { fd })
    }

    /// Makes the eventfd readable, waking the loop if it is waiting on it.
    pub(crate) fn unpark(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to an eventfd we own. EAGAIN (counter at
        // its maximum) still leaves the fd readable, which is all a wake needs.
        unsafe {
            libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8);
        }
    }

    /// Resets the counter after a wake was observed.
    pub(crate) fn reset(&self) {
        let mut value: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from a non-blocking eventfd we own;
        // EAGAIN just means nothing was pending.
        unsafe {
            libc::read(self.fd.as_raw_fd(), (&mut value as *mut u64).cast(), 8);
        }
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}
