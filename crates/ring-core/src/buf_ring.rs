//! The raw provided-buffer ring (`IORING_REGISTER_PBUF_RING`, Linux 5.19+): page-aligned
//! memory shared with the kernel, and its index arithmetic.
//!
//! The ring is an array of `entries` `struct io_uring_buf` (16 bytes each). The application
//! owns the tail: it writes entries at `tail & mask`, then publishes them with one Release
//! store of the new tail, which lives in entry 0's `resv` field (offset 14). The kernel owns
//! the head and keeps it to itself; it consumes one entry each time an op selects a buffer.
//! Both indexes are `u16` and wrap freely; only `tail & mask` addresses memory.
//!
//! Nothing here calls the kernel, so all of it runs under Miri. Registering the ring, and
//! keeping it from ever holding more than `entries` unconsumed buffers, is
//! [`crate::buf_pool`]'s job: it pushes a bid only when that bid comes back, so the ring never
//! holds more buffers than the group has.

use std::alloc::{self, Layout};
use std::fmt;
use std::io;
use std::mem;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU16, Ordering};

/// Most entries a ring may have: the kernel caps `ring_entries` at 2^15.
pub const ENTRIES_MAX: u16 = 1 << 15;

/// One `struct io_uring_buf`, laid out as the kernel reads it.
#[repr(C)]
struct RawBuf {
    addr: u64,
    len: u32,
    bid: u16,
    /// Unused by the kernel, except that entry 0's is the ring's tail.
    resv: u16,
}

const _: () = assert!(mem::size_of::<RawBuf>() == 16);
const _: () = assert!(mem::size_of::<RawBuf>() == mem::size_of::<io_uring::types::BufRingEntry>());
const _: () = assert!(mem::offset_of!(RawBuf, resv) == 14);

/// One ring entry as read back by [`BufRing::entry`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufEntry {
    /// Buffer address.
    pub addr: u64,
    /// Buffer length.
    pub len: u32,
    /// Buffer id.
    pub bid: u16,
}

/// A buffer ring's memory and the application's side of its indexes.
pub struct BufRing {
    /// Page-aligned, zeroed at birth, `layout.size()` bytes. Only this struct writes it (the
    /// entries and the tail); once registered, the kernel reads it concurrently.
    base: NonNull<RawBuf>,
    layout: Layout,
    /// Power of two, 1..=ENTRIES_MAX.
    entries: u16,
    /// Where the next push lands, before masking. Ours alone; the kernel never sees it.
    tail: u16,
    /// The last tail stored into shared memory: what the kernel may consume up to.
    published: u16,
}

impl BufRing {
    /// Allocates a zeroed ring of `entries` slots (a power of two, 1..=32768).
    pub fn new(entries: u16) -> io::Result<BufRing> {
        if !entries.is_power_of_two() || entries > ENTRIES_MAX {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("buffer ring entries must be a power of two in 1..=32768, got {entries}"),
            ));
        }
        // The kernel pins whole pages, so the ring gets pages of its own.
        let size = usize::from(entries) * mem::size_of::<RawBuf>();
        let layout = Layout::from_size_align(size, page_size())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?
            .pad_to_align();
        // SAFETY: `layout` has a non-zero size (entries >= 1).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let base = NonNull::new(raw.cast::<RawBuf>()).ok_or_else(|| {
            io::Error::new(io::ErrorKind::OutOfMemory, "buffer ring allocation failed")
        })?;
        Ok(BufRing {
            base,
            layout,
            entries,
            tail: 0,
            published: 0,
        })
    }

    /// Stages a buffer at the local tail. The kernel does not see it until [`commit`](Self::commit).
    ///
    /// The caller keeps staged plus unconsumed entries at or below `entries()`; more would
    /// overwrite a slot the kernel has yet to consume.
    pub fn push(&mut self, addr: u64, len: u32, bid: u16) {
        let slot = self.slot_ptr(self.tail & self.mask());
        // SAFETY: `slot` is inside the allocation (index masked below `entries`) and aligned.
        // The slot lies past the published tail, so the kernel does not read it now. Only
        // addr/len/bid are written; never `resv`, which in slot 0 is the tail the kernel reads.
        unsafe {
            ptr::addr_of_mut!((*slot).addr).write(addr);
            ptr::addr_of_mut!((*slot).len).write(len);
            ptr::addr_of_mut!((*slot).bid).write(bid);
        }
        self.tail = self.tail.wrapping_add(1);
    }

    /// Publishes every staged entry with one Release store of the tail, so the kernel, which
    /// reads the tail with Acquire, sees the entries' contents before it sees the new tail.
    pub fn commit(&mut self) {
        self.tail_atomic().store(self.tail, Ordering::Release);
        self.published = self.tail;
    }

    /// Entries pushed but not yet committed.
    pub fn staged(&self) -> u16 {
        self.tail.wrapping_sub(self.published)
    }

    /// The ring's address, for `IORING_REGISTER_PBUF_RING`.
    pub fn addr(&self) -> u64 {
        self.base.as_ptr() as u64
    }

    /// Ring entries (a power of two).
    pub fn entries(&self) -> u16 {
        self.entries
    }

    /// `entries - 1`: the index mask.
    pub fn mask(&self) -> u16 {
        self.entries - 1
    }

    /// Reads back slot `slot` (`None` if out of range). For tests and debugging.
    pub fn entry(&self, slot: u16) -> Option<BufEntry> {
        if slot >= self.entries {
            return None;
        }
        let p = self.slot_ptr(slot);
        // SAFETY: `p` is an in-bounds, aligned slot; the fields read are written only by
        // `push` (through `&mut self`, so not now) and the kernel never writes them.
        unsafe {
            Some(BufEntry {
                addr: ptr::addr_of!((*p).addr).read(),
                len: ptr::addr_of!((*p).len).read(),
                bid: ptr::addr_of!((*p).bid).read(),
            })
        }
    }

    /// The tail as stored in shared memory: what the kernel sees.
    pub fn published_tail(&self) -> u16 {
        self.tail_atomic().load(Ordering::Acquire)
    }

    fn slot_ptr(&self, slot: u16) -> *mut RawBuf {
        debug_assert!(slot < self.entries);
        // SAFETY: `slot < entries`, so the offset stays inside the allocation.
        unsafe { self.base.as_ptr().add(usize::from(slot)) }
    }

    fn tail_atomic(&self) -> &AtomicU16 {
        let first = self.slot_ptr(0);
        // SAFETY: entry 0's `resv` is inside the allocation, which lives as long as `self`,
        // and 2-aligned (page-aligned base, offset 14). It is only ever accessed through this
        // atomic (by us, and by the kernel's smp_load_acquire); the zeroing at allocation
        // happened before any of those.
        unsafe { AtomicU16::from_ptr(ptr::addr_of_mut!((*first).resv)) }
    }

    /// Moves both tails to `tail`, to exercise u16 wrap-around without 65536 pushes.
    #[cfg(test)]
    fn start_at(&mut self, tail: u16) {
        self.tail = tail;
        self.commit();
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: `base` came from `alloc_zeroed(self.layout)` and is freed only here. The
        // owner (a buffer group) is dropped only after the kernel stops reading the ring: it
        // is unregistered, or its io_uring is gone (see `BufGroup::new_ring`'s contract).
        unsafe { alloc::dealloc(self.base.as_ptr().cast(), self.layout) }
    }
}

impl fmt::Debug for BufRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufRing")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("entries", &self.entries)
            .field("tail", &self.tail)
            .field("published", &self.published)
            .finish()
    }
}

/// The page size, which ring and buffer memory are aligned to (4096 if sysconf fails).
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf reads a constant; it has no memory-safety preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size)
        .ok()
        .filter(|s| s.is_power_of_two())
        .unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_rejects_non_power_of_two_and_oversize() {
        for bad in [0u16, 3, 6, 1000, 40000, u16::MAX] {
            let err = BufRing::new(bad).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "entries {bad}");
        }
        for good in [1u16, 2, 8, 4096] {
            assert_eq!(BufRing::new(good).unwrap().entries(), good);
        }
    }

    #[test]
    fn ring_memory_is_page_aligned() {
        let ring = BufRing::new(4).unwrap();
        assert_eq!(ring.addr() % page_size() as u64, 0);
        assert_eq!(ring.published_tail(), 0);
    }

    #[test]
    fn push_lands_at_tail_slot_with_addr_len_bid() {
        let mut ring = BufRing::new(4).unwrap();
        for i in 0..3u16 {
            ring.push(0x1000 * u64::from(i + 1), 100 + u32::from(i), 7 + i);
        }
        for i in 0..3u16 {
            let want = BufEntry {
                addr: 0x1000 * u64::from(i + 1),
                len: 100 + u32::from(i),
                bid: 7 + i,
            };
            assert_eq!(ring.entry(i), Some(want));
        }
        assert_eq!(ring.entry(4), None);
    }

    #[test]
    fn push_does_not_touch_the_tail_in_entry_zero() {
        let mut ring = BufRing::new(2).unwrap();
        ring.push(u64::MAX, u32::MAX, u16::MAX);
        assert_eq!(
            ring.published_tail(),
            0,
            "entry 0's fields must not spill into resv"
        );
        ring.commit();
        ring.push(1, 1, 1);
        ring.push(2, 2, 2); // slot 0 again
        assert_eq!(ring.published_tail(), 1);
        assert_eq!(
            ring.entry(0),
            Some(BufEntry {
                addr: 2,
                len: 2,
                bid: 2
            })
        );
    }

    #[test]
    fn commit_publishes_exactly_staged_entries() {
        let mut ring = BufRing::new(8).unwrap();
        ring.push(1, 1, 0);
        ring.push(2, 2, 1);
        assert_eq!(ring.staged(), 2);
        assert_eq!(ring.published_tail(), 0, "push alone must not publish");
        ring.commit();
        assert_eq!((ring.staged(), ring.published_tail()), (0, 2));
        ring.commit();
        assert_eq!(ring.published_tail(), 2, "an empty commit changes nothing");
        ring.push(3, 3, 2);
        assert_eq!((ring.staged(), ring.published_tail()), (1, 2));
    }

    #[test]
    fn push_wraps_at_mask() {
        let mut ring = BufRing::new(4).unwrap();
        for bid in 0..6u16 {
            ring.push(u64::from(bid), 1, bid);
            if bid % 2 == 1 {
                ring.commit();
            }
        }
        // bids 4 and 5 overwrote slots 0 and 1.
        let bids: Vec<u16> = (0..4).map(|s| ring.entry(s).unwrap().bid).collect();
        assert_eq!(bids, [4, 5, 2, 3]);
        assert_eq!(ring.published_tail(), 6);
    }

    #[test]
    fn tail_wraps_at_u16() {
        let mut ring = BufRing::new(8).unwrap();
        ring.start_at(u16::MAX - 1);
        for bid in 0..4u16 {
            ring.push(0x10 + u64::from(bid), 64, bid);
        }
        assert_eq!(ring.staged(), 4);
        ring.commit();
        assert_eq!(ring.published_tail(), 2);
        assert_eq!(ring.staged(), 0);
        // 65534 & 7 = 6: slots 6, 7, 0, 1.
        let bids: Vec<u16> = [6, 7, 0, 1]
            .iter()
            .map(|&s| ring.entry(s).unwrap().bid)
            .collect();
        assert_eq!(bids, [0, 1, 2, 3]);
    }
}
