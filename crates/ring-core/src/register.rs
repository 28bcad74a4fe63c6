//! Registered (fixed) files: a slot table the kernel resolves without an fd lookup per op
//! (IORING_REGISTER_FILES 5.1, sparse tables 5.19 with a 5.5 fallback, direct descriptors 5.15).
//!
//! The table is registered once, sparse, at a fixed capacity; [`FixedFiles`] decides which
//! slot each file goes into. Two ways fill a slot:
//! - [`FixedFiles::insert`] installs an existing fd (`IORING_REGISTER_FILES_UPDATE`). The kernel
//!   takes its own reference, so the caller may close its fd right after.
//! - [`FixedFiles::alloc_slot`] reserves a slot for a *direct descriptor*: an ACCEPT, OPENAT or
//!   SOCKET whose `file_index` is `DestinationSlot::try_from_slot_target(slot)` installs its
//!   file there and never creates an fd. If that op fails, [`FixedFiles::release_slot`] hands
//!   the still-empty slot back; once it succeeded, [`FixedFiles::remove`] clears it.
//!
//! This table is the only slot allocator: do not mix it with `DestinationSlot::auto_target()`
//! (the kernel's own allocator would pick slots this table believes are free).
//! Registered buffers live in [`crate::register_buf`].

use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};

use io_uring::types::Fixed;
use io_uring::Submitter;

/// The kernel's `IORING_MAX_FIXED_FILES` since 5.15 (older kernels stop at 1 << 15 with EINVAL).
/// Checked here so a huge capacity fails clearly instead of allocating a dense fallback table.
pub const FIXED_FILES_MAX: u32 = 1 << 20;

/// A registered file table and the record of which of its slots are in use.
pub struct FixedFiles {
    /// Slot bookkeeping; only this struct touches it. The kernel's table mirrors it: a slot
    /// is in use here from `insert`/`alloc_slot` until `remove`/`release_slot`.
    slots: SlotAlloc,
}

impl FixedFiles {
    /// Registers a sparse table of `capacity` empty slots.
    ///
    /// Uses `IORING_REGISTER_FILES2` with the sparse flag (5.19); on older kernels, which
    /// answer EINVAL, it registers `capacity` entries of -1 instead (5.5). A ring holds one
    /// file table: registering twice gives the kernel's EBUSY.
    pub fn register(submitter: &Submitter<'_>, capacity: u32) -> io::Result<FixedFiles> {
        check_capacity(capacity)?;
        let registered = match submitter.register_files_sparse(capacity) {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                submitter.register_files(&vec![-1; capacity as usize])
            }
            other => other,
        };
        registered.map_err(|e| explain_register_error(e, capacity))?;
        Ok(FixedFiles::unregistered(capacity))
    }

    /// The bookkeeping half alone; `register` pairs it with the kernel's table.
    fn unregistered(capacity: u32) -> FixedFiles {
        FixedFiles {
            slots: SlotAlloc::new(capacity),
        }
    }

    /// How many slots the table has.
    pub fn capacity(&self) -> u32 {
        self.slots.capacity()
    }

    /// How many slots hold a file or are reserved for a direct descriptor.
    pub fn in_use(&self) -> u32 {
        self.slots.in_use()
    }

    /// Whether `slot` is handed out (by `insert` or `alloc_slot`).
    pub fn is_in_use(&self, slot: u32) -> bool {
        self.slots.is_in_use(slot)
    }

    /// Installs `fd` into a free slot and returns it for use as an op's target.
    ///
    /// The kernel holds its own reference to the file, so the caller may close `fd`. An fd
    /// the kernel refuses (an `O_PATH` one) gives its EBADF and leaves the table unchanged.
    pub fn insert(&mut self, submitter: &Submitter<'_>, fd: BorrowedFd<'_>) -> io::Result<Fixed> {
        let fd = fd.as_raw_fd();
        // -1 would clear the slot and -2 (IORING_REGISTER_FILES_SKIP) skip it, both
        // reported by the kernel as success: a BorrowedFd made unsafely from one is refused.
        if fd < 0 {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        let slot = self.alloc_slot()?;
        match update_slot(submitter, slot, fd) {
            Ok(()) => Ok(Fixed(slot)),
            Err(e) => {
                self.slots.release(slot);
                Err(e)
            }
        }
    }

    /// Reserves a free slot for a direct descriptor (ACCEPT/OPENAT/SOCKET with `file_index`).
    ///
    /// A full table is an error (the kernel's own allocator would say ENFILE).
    pub fn alloc_slot(&mut self) -> io::Result<u32> {
        self.slots.alloc().ok_or_else(|| {
            io::Error::other(format!(
                "fixed-file table full: all {} slots in use (like ENFILE); \
                 remove a slot or register a larger table",
                self.capacity()
            ))
        })
    }

    /// Clears `slot` in the kernel's table (an update to -1) and frees it for reuse.
    ///
    /// A slot that is not in use is `InvalidInput`. If the kernel refuses the update, the
    /// slot stays in use so it is never handed out while the kernel may still hold a file.
    ///
    /// # Safety
    /// The file in `slot` is the caller's to close: it came from the caller's own `insert`
    /// or direct-descriptor op, and no other owner (a socket or file object built on the
    /// slot) uses it afterwards. A slot number is plain data; removing another owner's
    /// slot closes its file under it, as closing a raw fd would (I/O safety).
    ///
    /// ```compile_fail,E0133
    /// # fn f(files: &mut ring_core::register::FixedFiles, s: &io_uring::Submitter<'_>) {
    /// files.remove(s, io_uring::types::Fixed(0)); // needs `unsafe`
    /// # }
    /// ```
    pub unsafe fn remove(&mut self, submitter: &Submitter<'_>, slot: Fixed) -> io::Result<()> {
        if !self.slots.is_in_use(slot.0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "fixed-file slot {} is not in use (table of {} slots)",
                    slot.0,
                    self.capacity()
                ),
            ));
        }
        update_slot(submitter, slot.0, -1)?;
        self.slots.release(slot.0);
        Ok(())
    }

    /// Frees a slot without touching the kernel: for an `alloc_slot` slot whose op failed
    /// before installing a file, or one already emptied by a fixed-file CLOSE.
    ///
    /// Returns whether the slot was in use; a free or out-of-range slot is left alone.
    ///
    /// # Safety
    /// The kernel's slot must be empty (its op failed, or a CLOSE emptied it): the next
    /// `insert` or direct descriptor overwrites a slot handed out again, and the kernel
    /// then drops whatever file was still there, under its owner.
    pub unsafe fn release_slot(&mut self, slot: u32) -> bool {
        self.slots.release(slot)
    }
}

impl fmt::Debug for FixedFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FixedFiles")
            .field("capacity", &self.capacity())
            .field("in_use", &self.in_use())
            .finish()
    }
}

fn check_capacity(capacity: u32) -> io::Result<()> {
    if capacity == 0 || capacity > FIXED_FILES_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("fixed-file table capacity {capacity} must be in 1..={FIXED_FILES_MAX}"),
        ));
    }
    Ok(())
}

/// The kernel refuses a table larger than RLIMIT_NOFILE with EMFILE; say so.
fn explain_register_error(e: io::Error, capacity: u32) -> io::Error {
    if e.raw_os_error() != Some(libc::EMFILE) {
        return e;
    }
    io::Error::other(format!(
        "registering {capacity} fixed-file slots exceeds RLIMIT_NOFILE \
         (raise it with `ulimit -n` or setrlimit, or register fewer): {e}"
    ))
}

/// Points one slot at `fd` (-1 clears it). The kernel answers with how many slots it
/// updated, so anything but 1 means this one did not change.
fn update_slot(submitter: &Submitter<'_>, slot: u32, fd: RawFd) -> io::Result<()> {
    match submitter.register_files_update(slot, &[fd])? {
        1 => Ok(()),
        n => Err(io::Error::other(format!(
            "IORING_REGISTER_FILES_UPDATE of slot {slot} updated {n} slots, expected 1"
        ))),
    }
}

/// Hands out indices `0..capacity`, each at most once until released. Pure: no kernel.
///
/// Never-used indices come from a watermark and released ones from a stack, so a large,
/// mostly idle table costs only its in-use bitmap. Reusing the latest released index first
/// keeps the working set of slots small.
#[derive(Debug)]
pub(crate) struct SlotAlloc {
    /// Number of indices.
    capacity: u32,
    /// Every index at or above this has never been handed out.
    next_fresh: u32,
    /// Released indices, reused before fresh ones; each is below `next_fresh` and not in use.
    released: Vec<u32>,
    /// Bit `i` set: index `i` is handed out. The authority for `is_in_use` and `release`.
    in_use_bits: Vec<u64>,
    /// Number of set bits in `in_use_bits`.
    in_use: u32,
}

impl SlotAlloc {
    pub(crate) fn new(capacity: u32) -> SlotAlloc {
        SlotAlloc {
            capacity,
            next_fresh: 0,
            released: Vec::new(),
            in_use_bits: vec![0; capacity.div_ceil(64) as usize],
            in_use: 0,
        }
    }

    pub(crate) fn capacity(&self) -> u32 {
        self.capacity
    }

    pub(crate) fn in_use(&self) -> u32 {
        self.in_use
    }

    pub(crate) fn is_in_use(&self, index: u32) -> bool {
        index < self.capacity && self.in_use_bits[word(index)] & bit(index) != 0
    }

    /// The next free index, or `None` when all are handed out.
    pub(crate) fn alloc(&mut self) -> Option<u32> {
        let index = match self.released.pop() {
            Some(index) => index,
            None if self.next_fresh < self.capacity => {
                self.next_fresh += 1;
                self.next_fresh - 1
            }
            None => return None,
        };
        self.in_use_bits[word(index)] |= bit(index);
        self.in_use += 1;
        Some(index)
    }

    /// Returns `index` for reuse; false (and no change) if it was not handed out.
    pub(crate) fn release(&mut self, index: u32) -> bool {
        if !self.is_in_use(index) {
            return false;
        }
        self.in_use_bits[word(index)] &= !bit(index);
        self.in_use -= 1;
        self.released.push(index);
        true
    }
}

fn word(index: u32) -> usize {
    (index / 64) as usize
}

fn bit(index: u32) -> u64 {
    1 << (index % 64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    #[test]
    fn alloc_hands_out_every_index_once_then_none() {
        let mut slots = SlotAlloc::new(70);
        let got: HashSet<u32> = (0..70).map(|_| slots.alloc().unwrap()).collect();
        assert_eq!(got, (0..70).collect());
        assert_eq!(slots.alloc(), None);
        assert_eq!(slots.in_use(), 70);
    }

    #[test]
    fn released_index_is_reused() {
        let mut slots = SlotAlloc::new(3);
        let [a, b, c] = [(); 3].map(|_| slots.alloc().unwrap());
        assert!(slots.release(b));
        assert_eq!(slots.alloc(), Some(b));
        assert!(slots.release(a) && slots.release(c));
        assert_eq!(slots.in_use(), 1);
    }

    #[test]
    fn release_of_free_or_out_of_range_index_changes_nothing() {
        let mut slots = SlotAlloc::new(4);
        let a = slots.alloc().unwrap();
        assert!(!slots.release(3), "never handed out");
        assert!(!slots.release(4), "out of range");
        assert!(!slots.release(u32::MAX), "out of range");
        assert!(slots.release(a));
        assert!(!slots.release(a), "double release");
        assert_eq!(slots.in_use(), 0);
        let got: HashSet<u32> = (0..4).map(|_| slots.alloc().unwrap()).collect();
        assert_eq!(got.len(), 4, "a double release must not duplicate an index");
    }

    #[test]
    fn full_table_alloc_slot_is_a_clear_error() {
        let mut files = FixedFiles::unregistered(2);
        assert_eq!(files.alloc_slot().unwrap(), 0);
        assert_eq!(files.alloc_slot().unwrap(), 1);
        let err = files.alloc_slot().unwrap_err();
        assert!(err.to_string().contains("table full"), "{err}");
        // SAFETY: an unregistered table: no kernel slot holds a file.
        assert!(unsafe { files.release_slot(0) });
        // SAFETY: as above.
        assert!(!unsafe { files.release_slot(0) });
        assert_eq!(files.alloc_slot().unwrap(), 0);
        assert_eq!(files.in_use(), 2);
    }

    #[test]
    fn capacity_outside_kernel_limits_is_invalid_input() {
        for capacity in [0, FIXED_FILES_MAX + 1, u32::MAX] {
            let err = check_capacity(capacity).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        }
        assert!(check_capacity(FIXED_FILES_MAX).is_ok());
    }

    fn config() -> ProptestConfig {
        ProptestConfig {
            cases: if cfg!(miri) { 4 } else { 256 },
            failure_persistence: None,
            ..ProptestConfig::default()
        }
    }

    proptest! {
        #![proptest_config(config())]

        /// Random alloc (true) / release-by-pick (false) sequences against a set model.
        #[test]
        fn slot_alloc_matches_set_model(
            capacity in 1u32..130,
            ops in prop::collection::vec((any::<bool>(), any::<u32>()), 0..200),
        ) {
            let mut slots = SlotAlloc::new(capacity);
            let mut model: HashSet<u32> = HashSet::new();
            for (is_alloc, pick) in ops {
                if is_alloc {
                    match slots.alloc() {
                        Some(i) => prop_assert!(i < capacity && model.insert(i), "handed out {i} twice"),
                        None => prop_assert_eq!(model.len() as u32, capacity),
                    }
                } else {
                    let index = pick % (capacity + 1);
                    prop_assert_eq!(slots.release(index), model.remove(&index));
                }
                prop_assert_eq!(slots.in_use(), model.len() as u32);
            }
        }
    }
}
