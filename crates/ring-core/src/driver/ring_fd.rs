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
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use io_uring::IoUring;

/// `IORING_REGISTER_RING_FDS` and `IORING_UNREGISTER_RING_FDS` (5.18).
const IORING_REGISTER_RING_FDS: libc::c_uint = 20;
const IORING_UNREGISTER_RING_FDS: libc::c_uint = 21;
/// `IORING_ENTER_REGISTERED_RING` (5.18): the fd argument is a registered index.
const IORING_ENTER_REGISTERED_RING: u32 = 1 << 4;
/// The offset that asks the kernel to pick a free index.
const ANY_INDEX: u32 = u32::MAX;

/// A page the kernel zeroes in every child that gets a copy of this address space
/// (`MADV_WIPEONFORK`, 4.14): `fork`, glibc's `_Fork`, a raw `clone`/`clone3` without
/// `CLONE_VM`, whether `pthread_atfork` handlers run or not. It holds this address space's
/// generation, nonzero once read. The child's thread has none of its parent thread's
/// registrations, so an index registered under another generation names nothing there,
/// or a ring the child registered since: such a driver enters by fd, as it did before
/// registering, and its drop leaves the index alone (a runtime is not meant to be used
/// across a fork, but it must not then enter or unregister the wrong ring). Children that
/// share the address space (`vfork`, `CLONE_VM`) share the page too and are not told
/// apart; such a child may only exec or exit.
static GENERATION_PAGE: AtomicPtr<AtomicU64> = AtomicPtr::new(ptr::null_mut());
/// Generations handed out in this address space. A child copies it, so what a child hands
/// out is above every generation its parent had.
static LAST_GENERATION: AtomicU64 = AtomicU64::new(0);

/// The generation page, mapped on first use; `None` where it cannot be (the kernel
/// refuses `MADV_WIPEONFORK`): forks could not be seen, so nothing is registered.
fn generation_page() -> Option<&'static AtomicU64> {
    let page = GENERATION_PAGE.load(Ordering::Acquire);
    if !page.is_null() {
        // SAFETY: a pointer stored below: a mapped page, never unmapped, aligned for and
        // holding an `AtomicU64` (zero or a generation).
        return Some(unsafe { &*page });
    }
    // SAFETY: sysconf only reads a constant of the system.
    let len = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let (prot, flags) = (
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
    );
    // SAFETY: a new anonymous mapping at an address the kernel picks touches no memory of
    // ours.
    let map = unsafe { libc::mmap(ptr::null_mut(), len, prot, flags, -1, 0) };
    if map == libc::MAP_FAILED {
        return None;
    }
    // SAFETY: `map` is the mapping just made, `len` long; it is ours alone until stored.
    let wiped = unsafe { libc::madvise(map, len, libc::MADV_WIPEONFORK) } == 0;
    let ours: *mut AtomicU64 = map.cast();
    let won = wiped
        && GENERATION_PAGE
            .compare_exchange(ptr::null_mut(), ours, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
    if !won {
        // SAFETY: the mapping made above, never shared (not stored): nothing refers to it.
        unsafe { libc::munmap(map, len) };
        if !wiped {
            return None;
        }
    }
    let page = GENERATION_PAGE.load(Ordering::Acquire);
    // SAFETY: as at the top: a stored pointer to a mapped page that is never unmapped
    // (zero-filled: a valid `AtomicU64` of 0 until a generation is written).
    Some(unsafe { &*page })
}

/// This address space's generation, handing out a new one if the page reads 0 (the first
/// call, or the first in a child since its fork); `None` without a page.
fn generation() -> Option<u64> {
    let page = generation_page()?;
    let current = page.load(Ordering::Relaxed);
    if current != 0 {
        return Some(current);
    }
    let new = LAST_GENERATION.fetch_add(1, Ordering::Relaxed) + 1;
    Some(
        match page.compare_exchange(0, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => new,
            Err(other) => other,
        },
    )
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
    /// address space's generation it was registered under (see [`GENERATION_PAGE`]).
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
        let registration = wanted
            .then(generation)
            .flatten()
            .and_then(|generation| Some((register(raw).ok()?, generation)));
        RingFd {
            raw,
            registration,
            _this_thread: PhantomData,
        }
    }

    /// The registered index, if this address space is the one that registered it (a
    /// forked child's page reads 0 or a generation of its own).
    fn index(&self) -> Option<u32> {
        let (index, generation) = self.registration?;
        let page = generation_page()?;
        (page.load(Ordering::Relaxed) == generation).then_some(index)
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
                fd as libc::c_long,
                to_submit as libc::c_long,
                min_complete as libc::c_long,
                flags as libc::c_long,
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
        // A failure (EINVAL, EFAULT, ENXIO; EEXIST from a thread the ring refuses, which
        // this one is not) would leave the ring referenced until the thread exits, nothing
        // worse; unregistering an empty slot succeeds.
        // SAFETY: `update` is one valid `io_uring_rsrc_update`, exclusively borrowed for
        // the call; the index is this thread's own registration of this ring.
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
        raw as libc::c_long,
        opcode as libc::c_long,
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
