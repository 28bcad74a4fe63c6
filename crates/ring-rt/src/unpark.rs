//! Waking a parked worker from another thread: an eventfd the backend watches, or, from
//! an io_uring worker to an io_uring worker, an `IORING_OP_MSG_RING` that posts a CQE
//! straight into the sleeping worker's ring (5.18+: no eventfd write on the sending side,
//! no eventfd read and re-arm on the receiving side).

use std::cell::RefCell;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::sync::{Arc, Mutex};

/// What can send a MSG_RING wake-up from this thread: the io_uring worker running here.
pub(crate) trait WakeSender {
    /// Sends a wake-up to the ring `target` is an fd of, keeping `target` open until the
    /// kernel has taken the SQE (the number must not be reused under it); false if it
    /// cannot now (the caller then writes the eventfd).
    fn send_wake(&self, target: &Arc<OwnedFd>) -> bool;
}

thread_local! {
    /// The wake sender of the io_uring worker running on this thread, if any.
    static SENDER: RefCell<Option<Rc<dyn WakeSender>>> = const { RefCell::new(None) };
}

/// Installs `sender` as this thread's for its lifetime (a worker's `block_on`).
pub(crate) struct SenderGuard(Option<Option<Rc<dyn WakeSender>>>);

impl SenderGuard {
    pub(crate) fn install(sender: Rc<dyn WakeSender>) -> SenderGuard {
        SenderGuard(SENDER.try_with(|s| s.borrow_mut().replace(sender)).ok())
    }
}

impl Drop for SenderGuard {
    fn drop(&mut self) {
        if let Some(previous) = self.0.take() {
            let _ = SENDER.try_with(|s| *s.borrow_mut() = previous);
        }
    }
}

/// How a wake left: written to the eventfd, or queued as a MSG_RING in this thread's ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unparked {
    Now,
    Queued,
}

/// Write end of a worker's wake-up eventfd, and its ring's MSG_RING target where it has
/// one. `Send + Sync`: any thread may unpark.
#[derive(Debug)]
pub(crate) struct Unparker {
    fd: OwnedFd,
    /// A duplicate of the worker's ring fd (io_uring 5.18+), set once its ring exists and
    /// taken away when the worker shuts down: a `Handle`, `JoinHandle` or waker that
    /// outlives the runtime then keeps only the eventfd open, not the ring. Senders hold a
    /// clone until their SQE is in the kernel.
    ring: Mutex<Option<Arc<OwnedFd>>>,
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
        Ok(Unparker {
            fd,
            ring: Mutex::new(None),
        })
    }

    /// Lets io_uring workers wake this one through its ring (`target`: a duplicate of its
    /// ring fd).
    pub(crate) fn set_ring(&self, target: OwnedFd) {
        *self.ring_slot() = Some(Arc::new(target));
    }

    /// The worker's ring fd (a duplicate), while it has one: what `MSG_RING` ops name.
    pub(crate) fn ring(&self) -> Option<Arc<OwnedFd>> {
        self.ring_slot().clone()
    }

    /// The worker is shutting down: wakes go to its eventfd from now on, and its ring
    /// closes once no sender holds it (not when the last `Handle` goes).
    pub(crate) fn clear_ring(&self) {
        let ring = self.ring_slot().take();
        drop(ring);
    }

    fn ring_slot(&self) -> std::sync::MutexGuard<'_, Option<Arc<OwnedFd>>> {
        self.ring.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wakes the worker: by MSG_RING when this thread runs an io_uring worker and the
    /// target is one (its CQE goes out with the sender's next enter, which `block_on`
    /// makes before it returns or unwinds: `Queued`), else by the eventfd (`Now`).
    pub(crate) fn unpark(&self) -> Unparked {
        let ring = self.ring_slot().clone();
        if let Some(ring) = ring {
            let sent = SENDER
                .try_with(|s| {
                    s.borrow()
                        .as_ref()
                        .is_some_and(|sender| sender.send_wake(&ring))
                })
                .unwrap_or(false);
            if sent {
                return Unparked::Queued;
            }
        }
        self.write_eventfd();
        Unparked::Now
    }

    /// Wakes the worker by its eventfd, now: for a caller that cannot count on its own
    /// thread's next enter (it is about to block, or another wake may sit queued there).
    pub(crate) fn unpark_now(&self) {
        self.write_eventfd();
    }

    fn write_eventfd(&self) {
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
