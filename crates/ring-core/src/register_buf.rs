//! Registered (fixed) buffers: one page-aligned allocation cut into equal chunks, registered
//! as one iovec per chunk (IORING_REGISTER_BUFFERS, Linux 5.1) and lent out as [`FixedBuf`]s
//! for READ_FIXED / WRITE_FIXED, which skip the per-op page pinning of plain READ / WRITE.
//!
//! Ownership: a [`FixedBuf`] owns its chunk exclusively (the chunk allocator never hands an
//! index out twice) and dropping it returns the chunk. While a `FixedBuf` is used by an op in
//! flight, the op owns it: ring-rt moves it into the op and hands it back with the result, so
//! nothing can read or drop the chunk while the kernel writes it. The memory is freed only
//! when [`RegisteredBufs`] and every `FixedBuf` are gone. The kernel keeps the pages pinned
//! and may write into any of them (a fixed op names a chunk by index) until the buffers are
//! unregistered or the ring is torn down, so a pool must outlive its registration:
//! [`Driver::register_buffers`](crate::driver::Driver::register_buffers) keeps a handle for
//! exactly that long; [`RegisteredBufs::register`] leaves it to its (unsafe) caller.
//! Handles are `Rc`s: a pool is `!Send`, like the ring it belongs to.
//!
//! The memory is zero-filled at allocation and only ever written with initialised bytes (by
//! the kernel or through `&mut [u8]`), so every byte of a chunk is always initialised.

use std::alloc::Layout;
use std::cell::RefCell;
use std::fmt;
use std::io;
use std::ptr::NonNull;
use std::rc::Rc;

use io_uring::Submitter;

use crate::register::SlotAlloc;

/// The kernel's `IORING_MAX_REG_BUFFERS`: more iovecs in one registration is EINVAL.
pub const REG_BUFFERS_MAX: u16 = 1 << 14;
/// The kernel refuses a registered buffer longer than 1 GiB (`SZ_1G`).
pub const REG_BUFFER_LEN_MAX: usize = 1 << 30;

/// A registered pool of `count` equal, page-aligned chunks. Cloning shares the pool.
#[derive(Clone)]
pub struct RegisteredBufs(Rc<Pool>);

impl RegisteredBufs {
    /// Allocates `count` chunks of `chunk_len` bytes (rounded up to whole pages, see
    /// [`chunk_len`](Self::chunk_len)) and registers them as buffer indices `0..count`.
    ///
    /// A ring holds one buffer table: registering twice gives the kernel's EBUSY. Pinned
    /// pages count against RLIMIT_MEMLOCK for users without CAP_IPC_LOCK; going over it is
    /// an `OutOfMemory` error that says so. Prefer
    /// [`Driver::register_buffers`](crate::driver::Driver::register_buffers), which keeps
    /// the pool alive for as long as it must.
    ///
    /// # Safety
    /// Keep a handle to the returned pool (a clone or a `FixedBuf`) until the buffers are
    /// unregistered from `submitter`'s ring or that ring is dropped, and until every fixed op
    /// on them has completed: the kernel may write into any registered chunk until then.
    pub unsafe fn register(
        submitter: &Submitter<'_>,
        count: u16,
        chunk_len: usize,
    ) -> io::Result<RegisteredBufs> {
        let pool = Pool::new(count, chunk_len)?;
        let iovecs = pool.iovecs();
        // SAFETY: each iovec covers one chunk of `pool.mem`, which is freed only when the
        // last handle to the pool drops; the caller keeps one until the registration ends
        // and every fixed op on it has completed.
        unsafe { submitter.register_buffers(&iovecs) }
            .map_err(|e| explain_register_error(e, pool.mem.layout.size()))?;
        Ok(RegisteredBufs(Rc::new(pool)))
    }

    /// The same pool without the kernel: page-aligned chunks lent out as [`FixedBuf`]s
    /// that no ring knows (where no ring can register them: the epoll backend, a ring
    /// whose registration failed). Plain READ / WRITE and syscalls use them as any memory.
    pub fn unregistered(count: u16, chunk_len: usize) -> io::Result<RegisteredBufs> {
        Pool::new(count, chunk_len).map(|pool| RegisteredBufs(Rc::new(pool)))
    }

    /// Whether `buf` is a chunk of this pool (so its `buf_index` names it in the ring this
    /// pool is registered with).
    pub fn owns(&self, buf: &FixedBuf) -> bool {
        Rc::ptr_eq(&self.0, &buf.pool)
    }

    /// Takes a free chunk, or `None` when all are lent out.
    pub fn alloc(&self) -> Option<FixedBuf> {
        let index = self.0.free.borrow_mut().alloc()?;
        Some(FixedBuf {
            pool: Rc::clone(&self.0),
            index: u16::try_from(index).ok()?,
            len: 0,
        })
    }

    /// How many chunks are free.
    pub fn available(&self) -> usize {
        let free = self.0.free.borrow();
        (free.capacity() - free.in_use()) as usize
    }

    /// How many chunks the pool has (buffer indices `0..count`).
    pub fn count(&self) -> u16 {
        self.0.count
    }

    /// Bytes per chunk: the requested length rounded up to a multiple of the page size, so
    /// every chunk starts on a page boundary (no page is pinned for two chunks).
    pub fn chunk_len(&self) -> usize {
        self.0.chunk_len
    }

    /// Unregisters the ring's buffer table. Live `FixedBuf`s keep the memory, but their
    /// `buf_index` no longer names anything: new fixed ops on them fail.
    pub fn unregister(&self, submitter: &Submitter<'_>) -> io::Result<()> {
        submitter.unregister_buffers()
    }
}

impl fmt::Debug for RegisteredBufs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegisteredBufs")
            .field("count", &self.count())
            .field("chunk_len", &self.chunk_len())
            .field("available", &self.available())
            .finish()
    }
}

/// One chunk of a [`RegisteredBufs`] pool, owned exclusively; dropping it returns the chunk.
///
/// `len` counts the bytes that hold data (what `as_slice` shows and a write should send);
/// `capacity` is the whole chunk (what a read may fill).
pub struct FixedBuf {
    /// Keeps the memory alive; also how the chunk goes back on drop.
    pool: Rc<Pool>,
    /// The chunk's registered buffer index, below `pool.count`.
    index: u16,
    /// Bytes of data from the start of the chunk; never above `capacity()`.
    len: usize,
}

impl FixedBuf {
    /// The registered buffer index to pass as READ_FIXED / WRITE_FIXED's `buf_index`.
    pub fn buf_index(&self) -> u16 {
        self.index
    }

    /// Start of the chunk.
    pub fn as_ptr(&self) -> *const u8 {
        self.pool.chunk_ptr(self.index)
    }

    /// The chunk start, for a READ_FIXED to fill up to `capacity()` bytes.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.pool.chunk_ptr(self.index)
    }

    /// Size of the chunk.
    pub fn capacity(&self) -> usize {
        self.pool.chunk_len
    }

    /// Bytes that hold data.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no bytes hold data.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sets how many bytes hold data, e.g. the `res` of a completed READ_FIXED. A `len`
    /// above `capacity()` is clamped to it.
    ///
    /// # Safety
    ///
    /// The first `len` bytes must be initialised. The pool zero-fills its memory, so that
    /// holds today for any `len`; the contract stays so the pool may stop zero-filling.
    /// Passing more than the op wrote exposes stale bytes of the chunk's previous user.
    pub unsafe fn set_len(&mut self, len: usize) {
        self.len = len.min(self.capacity());
    }

    /// The data: the first `len()` bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the chunk is `capacity()` bytes inside the pool's allocation, kept alive by
        // `self.pool`; `len <= capacity()`; the bytes are initialised (module header); only
        // this FixedBuf hands out references to its chunk, and `&self` excludes `&mut` ones.
        unsafe { std::slice::from_raw_parts(self.as_ptr(), self.len) }
    }

    /// The data, mutably: the first `len()` bytes. Grow `len` with `copy_from` or `set_len`.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let len = self.len;
        // SAFETY: as in `as_slice`, and `&mut self` makes this the only reference to the chunk.
        unsafe { std::slice::from_raw_parts_mut(self.as_mut_ptr(), len) }
    }

    /// Copies `data` to the start of the chunk, truncated to `capacity()`, and sets `len` to
    /// the bytes copied, which it returns.
    pub fn copy_from(&mut self, data: &[u8]) -> usize {
        let n = data.len().min(self.capacity());
        // SAFETY: the destination is this FixedBuf's chunk (exclusively owned, `capacity()`
        // bytes, alive via `self.pool`), `n` fits both sides, and `data` cannot overlap it:
        // no `&[u8]` into this chunk can coexist with `&mut self`.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.as_mut_ptr(), n) };
        self.len = n;
        n
    }
}

impl Drop for FixedBuf {
    fn drop(&mut self) {
        self.pool.free.borrow_mut().release(u32::from(self.index));
    }
}

impl fmt::Debug for FixedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FixedBuf")
            .field("buf_index", &self.index)
            .field("len", &self.len)
            .field("capacity", &self.capacity())
            .finish()
    }
}

/// The shared state behind every handle: the memory and which chunks are lent out.
struct Pool {
    /// The chunks, back to back; freed when the last handle drops the pool.
    mem: PoolMem,
    /// Bytes per chunk, a multiple of the page size.
    chunk_len: usize,
    /// Number of chunks.
    count: u16,
    /// Which chunk indices are lent out; `alloc` takes and `FixedBuf::drop` gives back.
    free: RefCell<SlotAlloc>,
}

impl Pool {
    fn new(count: u16, chunk_len: usize) -> io::Result<Pool> {
        check_shape(count, chunk_len)?;
        let page = page_size();
        let chunk_len = chunk_len.next_multiple_of(page);
        let total = chunk_len.checked_mul(usize::from(count)).ok_or_else(|| {
            invalid(format!(
                "{count} chunks of {chunk_len} bytes overflow usize"
            ))
        })?;
        let layout = Layout::from_size_align(total, page).map_err(|e| invalid(e.to_string()))?;
        Ok(Pool {
            mem: PoolMem::zeroed(layout)?,
            chunk_len,
            count,
            free: RefCell::new(SlotAlloc::new(u32::from(count))),
        })
    }

    /// The start of chunk `index`; `index < count` is every caller's invariant.
    fn chunk_ptr(&self, index: u16) -> *mut u8 {
        debug_assert!(index < self.count, "chunk {index} of {}", self.count);
        // SAFETY: `index < count`, so the offset `index * chunk_len` is inside the
        // `count * chunk_len`-byte allocation (that product did not overflow in `new`).
        unsafe {
            self.mem
                .ptr
                .as_ptr()
                .add(usize::from(index) * self.chunk_len)
        }
    }

    fn iovecs(&self) -> Vec<libc::iovec> {
        (0..self.count)
            .map(|index| libc::iovec {
                iov_base: self.chunk_ptr(index).cast(),
                iov_len: self.chunk_len,
            })
            .collect()
    }
}

/// One zero-filled allocation, freed on drop: an anonymous mapping, whose pages become
/// resident only when touched. A registration pins (and so touches) them all; a pool the
/// kernel never registers (epoll, a refused registration) costs only the buffers used.
/// `alloc_zeroed` with page alignment wrote every page at once: 1 GiB resident, and over
/// a second, for the first buffer taken of a pool nothing registered (review AB).
/// Under Miri, which has no `mmap`, the heap.
struct PoolMem {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl PoolMem {
    /// `layout` has a non-zero size (`check_shape` rejects zero counts and lengths) and an
    /// alignment of at most a page.
    fn zeroed(layout: Layout) -> io::Result<PoolMem> {
        let ptr = NonNull::new(map_zeroed(layout)).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("allocating {} bytes of fixed buffers failed", layout.size()),
            )
        })?;
        debug_assert_eq!(ptr.as_ptr() as usize % layout.align(), 0);
        Ok(PoolMem { ptr, layout })
    }
}

/// `layout.size()` zeroed bytes, page-aligned, or null.
#[cfg(not(miri))]
fn map_zeroed(layout: Layout) -> *mut u8 {
    let len = layout.size();
    let (prot, flags) = (
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
    );
    // SAFETY: a new anonymous private mapping: no fd, no address hint, nothing of ours
    // is touched; the result is checked against MAP_FAILED.
    let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, -1, 0) };
    if ptr == libc::MAP_FAILED {
        return std::ptr::null_mut();
    }
    ptr.cast()
}

#[cfg(miri)]
fn map_zeroed(layout: Layout) -> *mut u8 {
    // SAFETY: the size is non-zero (`check_shape`); a null result is the caller's to handle.
    unsafe { std::alloc::alloc_zeroed(layout) }
}

impl Drop for PoolMem {
    fn drop(&mut self) {
        #[cfg(not(miri))]
        // SAFETY: `ptr` is the start of a mapping of `layout.size()` bytes made by
        // `map_zeroed`, unmapped only here, once; nothing refers to it any more (every
        // handle to the pool is gone).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.layout.size());
        }
        #[cfg(miri)]
        // SAFETY: `ptr` came from `alloc_zeroed(self.layout)` and is freed only here, once.
        unsafe {
            std::alloc::dealloc(self.ptr.as_ptr(), self.layout)
        };
    }
}

fn check_shape(count: u16, chunk_len: usize) -> io::Result<()> {
    if count == 0 || count > REG_BUFFERS_MAX {
        return Err(invalid(format!(
            "registered buffer count {count} must be in 1..={REG_BUFFERS_MAX}"
        )));
    }
    if chunk_len == 0 || chunk_len > REG_BUFFER_LEN_MAX {
        return Err(invalid(format!(
            "registered buffer chunk_len {chunk_len} must be in 1..={REG_BUFFER_LEN_MAX}"
        )));
    }
    Ok(())
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

fn page_size() -> usize {
    // SAFETY: sysconf only reads a system constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page)
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096)
}

/// ENOMEM from IORING_REGISTER_BUFFERS almost always means the pinned pages would exceed
/// RLIMIT_MEMLOCK; say so, with the limit, since the bare errno reads like an OOM.
fn explain_register_error(e: io::Error, total_len: usize) -> io::Error {
    if e.raw_os_error() != Some(libc::ENOMEM) {
        return e;
    }
    io::Error::new(
        io::ErrorKind::OutOfMemory,
        format!(
            "registering {total_len} bytes of fixed buffers exceeds the locked-memory limit \
             (RLIMIT_MEMLOCK soft limit {}; raise it with `ulimit -l` or setrlimit, or \
             register fewer/smaller chunks): {e}",
            memlock_limit()
        ),
    )
}

fn memlock_limit() -> String {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` into the valid, exclusively borrowed `lim`.
    match unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } {
        0 if lim.rlim_cur == libc::RLIM_INFINITY => "unlimited".to_owned(),
        0 => format!("{} bytes", lim.rlim_cur),
        _ => "unknown".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn pool(count: u16, chunk_len: usize) -> RegisteredBufs {
        RegisteredBufs::unregistered(count, chunk_len).unwrap()
    }

    #[test]
    fn alloc_lends_each_chunk_once_until_none() {
        let bufs = pool(3, 100);
        let held: Vec<FixedBuf> = (0..3).map(|_| bufs.alloc().unwrap()).collect();
        assert!(bufs.alloc().is_none());
        assert_eq!(bufs.available(), 0);
        let indices: HashSet<u16> = held.iter().map(FixedBuf::buf_index).collect();
        assert_eq!(indices, HashSet::from([0, 1, 2]));
    }

    #[test]
    fn drop_returns_the_chunk() {
        let bufs = pool(2, 64);
        let a = bufs.alloc().unwrap();
        let _b = bufs.alloc().unwrap();
        let index = a.buf_index();
        drop(a);
        assert_eq!(bufs.available(), 1);
        assert_eq!(bufs.alloc().unwrap().buf_index(), index);
    }

    #[test]
    fn chunks_are_page_aligned_and_disjoint() {
        let bufs = pool(4, 5000);
        let page = page_size();
        assert_eq!(bufs.chunk_len(), 5000usize.next_multiple_of(page));
        let mut held: Vec<FixedBuf> = (0..4).map(|_| bufs.alloc().unwrap()).collect();
        for buf in &mut held {
            assert_eq!(buf.as_ptr() as usize % page, 0);
            let fill = [buf.buf_index() as u8; 5000];
            assert_eq!(buf.copy_from(&fill), 5000);
        }
        for buf in &held {
            assert!(buf.as_slice().iter().all(|&b| b == buf.buf_index() as u8));
        }
    }

    #[test]
    fn copy_from_truncates_to_capacity_and_sets_len() {
        let bufs = pool(1, 1);
        let mut buf = bufs.alloc().unwrap();
        let cap = buf.capacity();
        assert!(buf.is_empty());
        assert_eq!(buf.copy_from(b"abc"), 3);
        assert_eq!(buf.as_slice(), b"abc");
        let big = vec![7u8; cap + 10];
        assert_eq!(buf.copy_from(&big), cap);
        assert_eq!(buf.len(), cap);
        assert_eq!(buf.copy_from(&[]), 0);
        assert!(buf.is_empty());
    }

    #[test]
    fn set_len_clamps_to_capacity_and_mut_slice_follows_len() {
        let bufs = pool(1, 16);
        let mut buf = bufs.alloc().unwrap();
        let cap = buf.capacity();
        // SAFETY: the pool is zero-filled, so every byte of the chunk is initialised.
        unsafe { buf.set_len(cap + 1) };
        assert_eq!(buf.len(), cap);
        assert!(buf.as_slice().iter().all(|&b| b == 0));
        // SAFETY: as above.
        unsafe { buf.set_len(2) };
        buf.as_mut_slice().copy_from_slice(b"hi");
        assert_eq!(buf.as_slice(), b"hi");
    }

    #[test]
    fn memory_outlives_the_pool_handle() {
        let bufs = pool(2, 32);
        let mut buf = bufs.alloc().unwrap();
        drop(bufs);
        buf.copy_from(b"still here");
        assert_eq!(buf.as_slice(), b"still here");
    }

    #[test]
    fn bad_shapes_are_invalid_input() {
        let cases = [
            (0, 4096),
            (REG_BUFFERS_MAX + 1, 4096),
            (1, 0),
            (1, REG_BUFFER_LEN_MAX + 1),
        ];
        for (count, chunk_len) in cases {
            let err = RegisteredBufs::unregistered(count, chunk_len).unwrap_err();
            assert_eq!(
                err.kind(),
                io::ErrorKind::InvalidInput,
                "{count} x {chunk_len}"
            );
        }
    }

    #[test]
    #[cfg_attr(miri, ignore)] // getrlimit is a syscall Miri does not model
    fn enomem_names_the_memlock_limit() {
        let err = explain_register_error(io::Error::from_raw_os_error(libc::ENOMEM), 1 << 20);
        assert_eq!(err.kind(), io::ErrorKind::OutOfMemory);
        assert!(err.to_string().contains("RLIMIT_MEMLOCK"), "{err}");
        let ebusy = explain_register_error(io::Error::from_raw_os_error(libc::EBUSY), 1);
        assert_eq!(ebusy.raw_os_error(), Some(libc::EBUSY));
    }
}
