//! The ring's own fd as `io_uring_enter` takes it: registered with the kernel
//! (`IORING_REGISTER_RING_FDS`, 5.18) where it can be, so an enter names the ring by its
//! index in the thread's table of registered rings and skips the fd lookup. In a process
//! with more than one thread that lookup takes a reference on the ring's file and drops it
//! again, two atomic operations per enter (perf puts `fget` and `fput` at 0.13 µs of an
//! `O_DIRECT` read at queue depth 8 here, most of it the enter's).
//!
//! The io-uring crate can register the fd, but keeps the index in a `Submitter`, which
//! `IoUring::submitter()` makes anew on every call; so registration and enter are made
//! here, by hand, with the syscalls the crate uses.
//!
//! A registration belongs to the thread that made it (the kernel keeps it in that task's
//! io_uring context, at most 16 per thread): an index means nothing on another thread, or
//! worse, another ring. A [`Driver`](super::Driver) is not `Send`, so the thread that built
//! it is the one that enters it and drops it, and the drop unregisters. A registration
//! that fails (an older kernel, a seccomp filter on `io_uring_register`, a thread that has
//! 16 already) leaves the driver entering by fd, as before. `RingFd` itself is neither
//! `Send` nor `Sync`, so the driver stays so whatever its other fields become.

use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Once;

use io_uring::IoUring;

/// `IORING_REGISTER_RING_FDS` and `IORING_UNREGISTER_RING_FDS` (5.18).
const IORING_REGISTER_RING_FDS: libc::c_uint = 20;
const IORING_UNREGISTER_RING_FDS: libc::c_uint = 21;
/// `IORING_ENTER_REGISTERED_RING` (5.18): the fd argument is a registered index.
const IORING_ENTER_REGISTERED_RING: u32 = 1 << 4;
/// The offset that asks the kernel to pick a free index.
const ANY_INDEX: u32 = u32::MAX;

/// Forks this process has gone through, as a child: counted by a `pthread_atfork` child
/// handler. The child's thread has none of its parent thread's registrations, so an index
/// registered before the fork names nothing there, or a ring the child registered since:
/// a driver whose count differs enters by fd, as it did before registering (a runtime is
/// not meant to be used across `fork`, but it must not then enter the wrong ring).
static FORKS: AtomicU64 = AtomicU64::new(0);
/// Whether the handler is installed: without it a fork cannot be seen, and nothing is
/// registered.
static FORKS_WATCHED: AtomicBool = AtomicBool::new(false);
static WATCH_FORKS: Once = Once::new();

extern "C" fn count_fork_in_child() {
    // Async-signal-safe, as a child handler in a multithreaded parent must be.
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// Installs the fork counter once per process; false if it could not be.
fn watch_forks() -> bool {
    WATCH_FORKS.call_once(|| {
        // SAFETY: registers a handler that only increments an atomic, which is all a child
        // of a multithreaded process may do before exec; nothing is passed by pointer.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(count_fork_in_child)) };
        FORKS_WATCHED.store(rc == 0, Ordering::Relaxed);
    });
    FORKS_WATCHED.load(Ordering::Relaxed)
}

/// `struct io_uring_rsrc_update`, as the ring fd registration takes it.
#[repr(C)]
struct RsrcUpdate {
    offset: u32,
    resv: u32,
    data: u64,
}

/// How this driver's enters name its ring.
#[derive(Debug)]
pub(super) struct RingFd {
    raw: RawFd,
    /// The index in this thread's table of registered rings, when registered, and the
    /// [`FORKS`] count it was registered under.
    registration: Option<(u32, u64)>,
    /// Neither `Send` nor `Sync`: the index means something only on the thread that
    /// registered it, so this (and the driver holding it) never leaves that thread.
    _this_thread: PhantomData<*const ()>,
}

impl RingFd {
    /// Registers `ring`'s fd if `wanted` (the feature is there and not masked off); an
    /// error leaves it unregistered.
    pub(super) fn new(ring: &IoUring, wanted: bool) -> RingFd {
        let raw = ring.as_raw_fd();
        let forks = FORKS.load(Ordering::Relaxed);
        let registration = (wanted && watch_forks())
            .then(|| register(raw).ok())
            .flatten()
            .map(|index| (index, forks));
        RingFd {
            raw,
            registration,
            _this_thread: PhantomData,
        }
    }

    /// The registered index, if this process is the one that registered it.
    fn index(&self) -> Option<u32> {
        let (index, forks) = self.registration?;
        (forks == FORKS.load(Ordering::Relaxed)).then_some(index)
    }

    /// Whether enters use the registered index.
    pub(super) fn is_registered(&self) -> bool {
        self.index().is_some()
    }

    /// `io_uring_enter(2)` on this ring.
    ///
    /// # Safety
    /// As for the io-uring crate's `Submitter::enter`: `arg` is null with `size` 0, or
    /// points at what `flags` says (a sigset, or an `io_uring_getevents_arg` with
    /// `EXT_ARG`) of `size` bytes, valid for the call; every SQE submitted points only at
    /// memory that stays valid until its final CQE.
    pub(super) unsafe fn enter(
        &self,
        to_submit: u32,
        min_complete: u32,
        flags: u32,
        arg: *const libc::c_void,
        size: usize,
    ) -> io::Result<usize> {
        let (fd, flags) = match self.index() {
            // The index is this thread's: the driver is not `Send` (see the module docs).
            Some(index) => (index as libc::c_int, flags | IORING_ENTER_REGISTERED_RING),
            None => (self.raw, flags),
        };
        // SAFETY: the caller's contract covers `arg`, `size` and the SQEs; `fd` names this
        // ring, by its registered index on the thread that registered it, or by its fd.
        // Every argument widened to `c_long`, as the io-uring crate passes them: the
        // variadic `syscall` reads each as a register-sized integer.
        let res = unsafe {
            libc::syscall(
                libc::SYS_io_uring_enter,
                libc::c_long::from(fd),
                libc::c_long::from(to_submit),
                libc::c_long::from(min_complete),
                libc::c_long::from(flags),
                arg,
                size as libc::c_long,
            )
        };
        if res < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(res as usize)
    }

    /// Gives the index back (the driver is being dropped, on the thread that registered
    /// it). The ring's file stays referenced by the registration until this runs.
    pub(super) fn unregister(&mut self) {
        let Some(index) = self.index() else {
            // Never registered, or registered by the parent of this forked process: not
            // this thread's to give back.
            return;
        };
        self.registration = None;
        let mut update = RsrcUpdate {
            offset: index,
            resv: 0,
            data: 0,
        };
        // SAFETY: `update` is one valid `io_uring_rsrc_update`, exclusively borrowed for
        // the call; the index is this thread's own registration of this ring.
        // It fails only for an index this thread has not registered, which `index` is not;
        // if it did, the ring would stay referenced until the thread exits, nothing worse.
        let _ = unsafe { register_call(self.raw, IORING_UNREGISTER_RING_FDS, &mut update) };
    }
}

/// Registers `raw` in this thread's table; returns its index.
fn register(raw: RawFd) -> io::Result<u32> {
    let mut update = RsrcUpdate {
        offset: ANY_INDEX,
        resv: 0,
        data: raw as u64,
    };
    // SAFETY: `update` is one valid `io_uring_rsrc_update`, exclusively borrowed for the
    // call; the kernel writes the index it chose into its `offset`.
    unsafe { register_call(raw, IORING_REGISTER_RING_FDS, &mut update)? };
    Ok(update.offset)
}

/// `io_uring_register(2)` with one `io_uring_rsrc_update`, which the kernel may write to
/// (a registration writes the index it chose into `offset`): hence `&mut`.
///
/// # Safety
/// `opcode` must be one that takes an array of `io_uring_rsrc_update` (the ring fd
/// registrations), and `raw` a ring's fd.
unsafe fn register_call(
    raw: RawFd,
    opcode: libc::c_uint,
    update: &mut RsrcUpdate,
) -> io::Result<()> {
    let ptr: *mut RsrcUpdate = update;
    // Widened to `c_long`, as for `io_uring_enter` above.
    let (raw, opcode, count) = (
        libc::c_long::from(raw),
        libc::c_long::from(opcode),
        1 as libc::c_long,
    );
    // SAFETY: the caller's contract for `opcode` and `raw`; `ptr` points at one valid,
    // exclusively borrowed update for the call, and the count says one.
    let res = unsafe { libc::syscall(libc::SYS_io_uring_register, raw, opcode, ptr, count) };
    if res < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
