//! `AlignedBuf`: a heap buffer whose address and capacity are multiples of an alignment, as
//! `O_DIRECT` I/O requires.

use std::alloc::{self, Layout};
use std::fmt;
use std::io;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use crate::buf::{IoBuf, IoBufMut};

/// The alignment [`AlignedBuf::new`] uses: a page, which satisfies `O_DIRECT` on every
/// common filesystem and device (logical blocks are 512 or 4096 bytes).
///
/// # Examples
///
/// ```
/// use ring_rt::fs::{AlignedBuf, DEFAULT_ALIGN};
///
/// assert_eq!(AlignedBuf::new(1)?.alignment(), DEFAULT_ALIGN);
/// # std::io::Result::Ok(())
/// ```
pub const DEFAULT_ALIGN: usize = 4096;

/// An owned, zero-initialised buffer aligned for `O_DIRECT`, usable wherever an
/// [`IoBuf`]/[`IoBufMut`] is: reads fill its capacity, writes send its `len` bytes.
/// It derefs to its data (`&buf[..]` is the first `len` bytes).
///
/// # Examples
///
/// ```
/// let mut buf = ring_rt::fs::AlignedBuf::new(8192).unwrap();
/// buf.extend_from_slice(b"hello").unwrap();
/// assert_eq!(&buf[..], b"hello");
/// assert_eq!(buf.as_ptr() as usize % 4096, 0);
/// ```
///
/// The length and capacity calls, and filling a block in place:
///
/// ```
/// use ring_rt::fs::AlignedBuf;
///
/// let mut buf = AlignedBuf::with_alignment(1000, 512)?;
/// assert_eq!((buf.capacity(), buf.alignment()), (1024, 512)); // rounded up
/// assert!(buf.is_empty());
///
/// buf.as_capacity_mut()[..512].fill(b'a'); // write the whole first block
/// buf.set_len_checked(512)?;               // and mark it as data
/// assert_eq!((buf.len(), buf[511]), (512, b'a'));
/// assert!(buf.set_len_checked(2048).is_err()); // past the capacity
///
/// buf.clear();
/// assert!(buf.is_empty() && buf.capacity() == 1024);
/// assert!(buf.extend_from_slice(&[0; 2000]).is_err()); // too long: nothing appended
/// # std::io::Result::Ok(())
/// ```
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    /// Bytes that hold data; `len <= layout.size()`.
    len: usize,
    /// Capacity (a multiple of the alignment, at least one alignment unit) and alignment.
    layout: Layout,
}

// SAFETY: the buffer owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only reads through `&self`, like a Vec<u8>.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A buffer of at least `capacity` bytes aligned to 4096 (capacity rounded up to a
    /// multiple of 4096, at least 4096).
    ///
    /// # Examples
    ///
    /// ```
    /// let buf = ring_rt::fs::AlignedBuf::new(5000)?;
    /// assert_eq!(buf.capacity(), 8192);
    /// # std::io::Result::Ok(())
    /// ```
    pub fn new(capacity: usize) -> io::Result<AlignedBuf> {
        AlignedBuf::with_alignment(capacity, DEFAULT_ALIGN)
    }

    /// A buffer of at least `capacity` bytes aligned to `align`, which must be a power of
    /// two; capacity is rounded up to a multiple of `align` (at least one). A bad alignment
    /// or a size that overflows is `InvalidInput`, a failed allocation `OutOfMemory`.
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_rt::fs::AlignedBuf;
    ///
    /// let buf = AlignedBuf::with_alignment(512, 512)?;
    /// assert_eq!(buf.as_ptr() as usize % 512, 0);
    /// let err = AlignedBuf::with_alignment(512, 3).unwrap_err();
    /// assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    /// # std::io::Result::Ok(())
    /// ```
    pub fn with_alignment(capacity: usize, align: usize) -> io::Result<AlignedBuf> {
        let layout = layout_for(capacity, align)?;
        // SAFETY: layout_for never returns a zero-sized layout.
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!(
                    "cannot allocate an aligned buffer of {} bytes",
                    layout.size()
                ),
            )
        })?;
        Ok(AlignedBuf {
            ptr,
            len: 0,
            layout,
        })
    }

    /// Bytes that hold data (see the [type's examples](AlignedBuf)).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no byte holds data (see the [type's examples](AlignedBuf)).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes allocated (a multiple of [`alignment`](Self::alignment)); see the
    /// [type's examples](AlignedBuf).
    pub fn capacity(&self) -> usize {
        self.layout.size()
    }

    /// The alignment of the start and of the capacity (see the
    /// [type's examples](AlignedBuf)).
    pub fn alignment(&self) -> usize {
        self.layout.align()
    }

    /// Empties the buffer (the memory stays allocated); see the
    /// [type's examples](AlignedBuf).
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Appends `data`; `InvalidInput` (and nothing appended) if it does not fit. See the
    /// [type's examples](AlignedBuf).
    pub fn extend_from_slice(&mut self, data: &[u8]) -> io::Result<()> {
        let end = self
            .len
            .checked_add(data.len())
            .filter(|&end| end <= self.capacity())
            .ok_or_else(|| too_long(self.len.saturating_add(data.len()), self.capacity()))?;
        // SAFETY: len..end lies inside the allocation, which `data` cannot overlap (we
        // hold `&mut self`).
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.ptr.as_ptr().add(self.len),
                data.len(),
            );
        }
        self.len = end;
        Ok(())
    }

    /// Sets the data length to `len` (bytes past the old length keep whatever they held:
    /// zeros, or earlier data). `InvalidInput` if `len` exceeds the capacity. See the
    /// [type's examples](AlignedBuf).
    pub fn set_len_checked(&mut self, len: usize) -> io::Result<()> {
        if len > self.capacity() {
            return Err(too_long(len, self.capacity()));
        }
        self.len = len;
        Ok(())
    }

    /// The whole allocation, data or not (it is always initialised: zeroed at creation).
    /// See the [type's examples](AlignedBuf).
    pub fn as_capacity_mut(&mut self) -> &mut [u8] {
        // SAFETY: the allocation is capacity bytes, zero-initialised, owned by self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.capacity()) }
    }
}

/// The allocation layout: `capacity` rounded up to a non-zero multiple of `align`.
fn layout_for(capacity: usize, align: usize) -> io::Result<Layout> {
    if !align.is_power_of_two() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("alignment {align} is not a power of two"),
        ));
    }
    let size = capacity
        .max(1)
        .checked_next_multiple_of(align)
        .ok_or_else(|| too_long(capacity, isize::MAX as usize))?;
    Layout::from_size_align(size, align).map_err(|_| too_long(size, isize::MAX as usize))
}

fn too_long(len: usize, max: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{len} bytes do not fit in an aligned buffer of {max}"),
    )
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in with_alignment with exactly this layout, freed once here.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the first len bytes are inside the (initialised) allocation.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for Deref, with exclusive access through &mut self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .field("capacity", &self.capacity())
            .field("alignment", &self.alignment())
            .finish()
    }
}

// SAFETY: the allocation is on the heap and does not move with the value; len bytes are
// initialised (all capacity bytes are, from alloc_zeroed).
unsafe impl IoBuf for AlignedBuf {
    fn stable_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }
    fn bytes_init(&self) -> usize {
        self.len
    }
    fn bytes_total(&self) -> usize {
        self.capacity()
    }
}

// SAFETY: as for IoBuf; the whole capacity is writable.
unsafe impl IoBufMut for AlignedBuf {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
    unsafe fn set_init(&mut self, pos: usize) {
        // As Vec: a read never shrinks the data, and never claims past the capacity.
        self.len = self.len.max(pos.min(self.capacity()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_rounds_up_to_alignment() {
        let b = AlignedBuf::with_alignment(1000, 512).unwrap();
        assert_eq!((b.capacity(), b.alignment(), b.len()), (1024, 512, 0));
        assert_eq!(b.as_ptr() as usize % 512, 0);
        assert_eq!(AlignedBuf::new(0).unwrap().capacity(), DEFAULT_ALIGN);
    }

    #[test]
    fn bad_alignment_and_overflow_are_invalid_input() {
        for (cap, align) in [(10, 3), (10, 0), (usize::MAX, 4096)] {
            let err = AlignedBuf::with_alignment(cap, align).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{cap} {align}");
        }
    }

    #[test]
    fn extend_and_set_len_stay_within_capacity() {
        let mut b = AlignedBuf::with_alignment(8, 8).unwrap();
        b.extend_from_slice(b"abcd").unwrap();
        assert!(b.extend_from_slice(b"efghi").is_err());
        assert_eq!(&b[..], b"abcd");
        b.set_len_checked(8).unwrap();
        assert_eq!(&b[..], b"abcd\0\0\0\0");
        assert!(b.set_len_checked(9).is_err());
        b.clear();
        assert!(b.is_empty());
    }

    #[test]
    fn set_init_never_shrinks_or_overruns() {
        let mut b = AlignedBuf::with_alignment(16, 16).unwrap();
        b.extend_from_slice(b"xyz").unwrap();
        // SAFETY: test: the buffer is zero-initialised throughout.
        unsafe { b.set_init(1) };
        assert_eq!(b.len(), 3);
        // SAFETY: as above.
        unsafe { b.set_init(100) };
        assert_eq!(b.len(), 16);
    }
}
