//! Owned buffers for completion I/O: `IoBuf` (the kernel reads it) and `IoBufMut` (the
//! kernel writes it).
//!
//! An op takes its buffer by value and hands it back with the result, so the memory stays
//! put while the kernel uses it, even if the future is moved or dropped (a dropped op's
//! buffer is kept by the runtime until the kernel's final completion).

use std::ops::{Bound, RangeBounds};

/// A buffer the kernel may read from while an op owns it.
///
/// Implemented for `Vec<u8>`, `Box<[u8]>`, `&'static [u8]`, `&'static str`, [`Slice`]s of
/// these, [`PooledBuf`](crate::pool::PooledBuf), [`AlignedBuf`](crate::fs::AlignedBuf),
/// and `bytes::Bytes`/`BytesMut` with the `bytes` feature.
///
/// # Examples
///
/// A write takes the buffer and gives it back with the result:
///
/// ```
/// use ring_rt::buf::IoBuf;
///
/// let v = b"abc".to_vec();
/// assert_eq!((v.bytes_init(), v.stable_ptr()), (3, v.as_ptr()));
/// assert!(v.bytes_total() >= 3); // the capacity
///
/// # ring_rt::Runtime::new()?.block_on(async {
/// let (a, b) = ring_rt::net::UnixStream::pair()?;
/// let (res, v) = a.write_all(v).await;
/// res?;
/// assert_eq!(v, b"abc"); // ours again
/// a.write_all("a &'static str works too").await.0?;
/// # let _ = b;
/// # std::io::Result::Ok(()) })?;
/// # std::io::Result::Ok(())
/// ```
///
/// # Safety
/// `stable_ptr` must stay valid for reads of `bytes_init` bytes, and must not change, for as
/// long as the value exists even if it is moved: the memory lives on the heap (or is
/// `'static`), not inline in the value.
pub unsafe trait IoBuf: Unpin + 'static {
    /// Start of the buffer (see the [trait's example](IoBuf)).
    fn stable_ptr(&self) -> *const u8;
    /// Bytes that hold data (what a write sends; see the [trait's example](IoBuf)).
    fn bytes_init(&self) -> usize;
    /// Bytes available in all (what a read may fill; see the [trait's example](IoBuf)).
    fn bytes_total(&self) -> usize;

    /// The registered chunk this buffer is, or lies in: file reads and writes of it on
    /// the worker that lent it out go to the kernel as READ_FIXED / WRITE_FIXED (see
    /// [`FixedBuf`]). Only ring-rt's own buffers answer; leave it to the default.
    #[doc(hidden)]
    fn fixed_buf(&self) -> Option<&FixedBuf> {
        None
    }

    /// A view of `range` of this buffer that is itself an owned buffer. The range is
    /// clamped to [`bytes_total`](Self::bytes_total); a read into a slice fills it from
    /// its start, a write sends its initialised part.
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_rt::buf::IoBuf;
    ///
    /// let slice = b"hello world".to_vec().slice(6..);
    /// assert_eq!((slice.begin(), slice.end(), slice.bytes_init()), (6, 11, 5));
    /// let whole: Vec<u8> = slice.into_inner();
    /// assert_eq!(whole, b"hello world");
    /// ```
    fn slice(self, range: impl RangeBounds<usize>) -> Slice<Self>
    where
        Self: Sized,
    {
        let total = self.bytes_total();
        // Saturating: `..=usize::MAX` means "to the end", clamped like any long range.
        let begin = match range.start_bound() {
            Bound::Included(&n) => n,
            Bound::Excluded(&n) => n.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&n) => n.saturating_add(1),
            Bound::Excluded(&n) => n,
            Bound::Unbounded => total,
        };
        let end = end.min(total);
        Slice {
            buf: self,
            begin: begin.min(end),
            end,
        }
    }
}

/// A buffer the kernel may write into while an op owns it. A read fills it from its start
/// up to [`bytes_total`](IoBuf::bytes_total), and marks the bytes read as initialised.
///
/// # Examples
///
/// ```
/// # ring_rt::Runtime::new()?.block_on(async {
/// let (a, b) = ring_rt::net::UnixStream::pair()?;
/// a.write_all(&b"xyz"[..]).await.0?;
/// let (n, buf) = b.read(Vec::with_capacity(16)).await; // an empty Vec with room
/// assert_eq!(n?, 3);
/// assert_eq!(buf, b"xyz"); // its length now covers the bytes read
/// # std::io::Result::Ok(()) })?;
/// # std::io::Result::Ok(())
/// ```
///
/// What an op does with one, by hand:
///
/// ```
/// use ring_rt::buf::{IoBuf, IoBufMut};
///
/// let mut v: Vec<u8> = Vec::with_capacity(8);
/// let dst = v.stable_mut_ptr();
/// // SAFETY: the Vec has capacity 8, so 2 bytes at its start are writable.
/// unsafe { dst.copy_from_nonoverlapping(b"hi".as_ptr(), 2) };
/// // SAFETY: the first 2 bytes were just written.
/// unsafe { v.set_init(2) };
/// assert_eq!(v, b"hi");
/// ```
///
/// # Safety
/// As [`IoBuf`], and `stable_mut_ptr` must be valid for writes of `bytes_total` bytes.
pub unsafe trait IoBufMut: IoBuf {
    /// Start of the writable buffer (see the [trait's example](IoBufMut)).
    fn stable_mut_ptr(&mut self) -> *mut u8;

    /// Records that the first `pos` bytes now hold data; never shrinks what is already
    /// initialised (see the [trait's example](IoBufMut)).
    ///
    /// # Safety
    /// The first `pos` bytes must have been initialised (by the kernel's completed read).
    unsafe fn set_init(&mut self, pos: usize);
}

// SAFETY: a Vec's heap buffer does not move when the Vec does; len bytes are initialised
// and capacity bytes are allocated.
unsafe impl IoBuf for Vec<u8> {
    fn stable_ptr(&self) -> *const u8 {
        self.as_ptr()
    }
    fn bytes_init(&self) -> usize {
        self.len()
    }
    fn bytes_total(&self) -> usize {
        self.capacity()
    }
}

// SAFETY: as for IoBuf; the allocation is writable up to capacity.
unsafe impl IoBufMut for Vec<u8> {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.as_mut_ptr()
    }
    unsafe fn set_init(&mut self, pos: usize) {
        if pos > self.len() {
            // SAFETY: the caller guarantees the first `pos` bytes are initialised, and pos
            // never exceeds capacity (the kernel wrote at most bytes_total).
            unsafe { self.set_len(pos) };
        }
    }
}

// SAFETY: a boxed slice's heap memory does not move with the box; all of it is initialised.
unsafe impl IoBuf for Box<[u8]> {
    fn stable_ptr(&self) -> *const u8 {
        self.as_ptr()
    }
    fn bytes_init(&self) -> usize {
        self.len()
    }
    fn bytes_total(&self) -> usize {
        self.len()
    }
}

// SAFETY: as for IoBuf; the whole slice is writable and already initialised.
unsafe impl IoBufMut for Box<[u8]> {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.as_mut_ptr()
    }
    unsafe fn set_init(&mut self, _pos: usize) {}
}

// SAFETY: 'static data never moves or goes away.
unsafe impl IoBuf for &'static [u8] {
    fn stable_ptr(&self) -> *const u8 {
        self.as_ptr()
    }
    fn bytes_init(&self) -> usize {
        self.len()
    }
    fn bytes_total(&self) -> usize {
        self.len()
    }
}

// SAFETY: 'static data never moves or goes away.
unsafe impl IoBuf for &'static str {
    fn stable_ptr(&self) -> *const u8 {
        self.as_ptr()
    }
    fn bytes_init(&self) -> usize {
        self.len()
    }
    fn bytes_total(&self) -> usize {
        self.len()
    }
}

#[cfg(feature = "bytes")]
// SAFETY: BytesMut's storage is on the heap and does not move with the handle.
unsafe impl IoBuf for bytes::BytesMut {
    fn stable_ptr(&self) -> *const u8 {
        self.as_ptr()
    }
    fn bytes_init(&self) -> usize {
        self.len()
    }
    fn bytes_total(&self) -> usize {
        self.capacity()
    }
}

#[cfg(feature = "bytes")]
// SAFETY: as for IoBuf; writable up to capacity.
unsafe impl IoBufMut for bytes::BytesMut {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.as_mut_ptr()
    }
    unsafe fn set_init(&mut self, pos: usize) {
        if pos > self.len() {
            // SAFETY: the caller guarantees the first `pos` bytes are initialised.
            unsafe { self.set_len(pos) };
        }
    }
}

#[cfg(feature = "bytes")]
// SAFETY: Bytes' storage is immutable heap (or static) memory that does not move.
unsafe impl IoBuf for bytes::Bytes {
    fn stable_ptr(&self) -> *const u8 {
        self.as_ptr()
    }
    fn bytes_init(&self) -> usize {
        self.len()
    }
    fn bytes_total(&self) -> usize {
        self.len()
    }
}

/// A range of an owned buffer; `into_inner` gives the whole buffer back. Made by
/// [`IoBuf::slice`].
///
/// # Examples
///
/// Read into the free tail of a buffer, keeping what it holds:
///
/// ```
/// use ring_rt::buf::IoBuf;
///
/// # ring_rt::Runtime::new()?.block_on(async {
/// let (a, b) = ring_rt::net::UnixStream::pair()?;
/// a.write_all(&b"world"[..]).await.0?;
/// let mut buf = Vec::with_capacity(16);
/// buf.extend_from_slice(b"hello ");
/// let tail = buf.slice(6..);
/// assert_eq!((tail.begin(), tail.end()), (6, 16));
/// assert_eq!(tail.get_ref().len(), 6);
/// let (n, tail) = b.read(tail).await;
/// assert_eq!(n?, 5);
/// let buf = tail.into_inner();
/// assert_eq!(buf, b"hello world");
/// # std::io::Result::Ok(()) })?;
/// # std::io::Result::Ok(())
/// ```
#[derive(Debug)]
pub struct Slice<T> {
    buf: T,
    begin: usize,
    end: usize,
}

impl<T> Slice<T> {
    /// Offset of the slice in the buffer (see the [type's example](Slice)).
    pub fn begin(&self) -> usize {
        self.begin
    }
    /// End offset of the slice in the buffer (see the [type's example](Slice)).
    pub fn end(&self) -> usize {
        self.end
    }
    /// The whole buffer (see the [type's example](Slice)).
    pub fn into_inner(self) -> T {
        self.buf
    }
    /// The whole buffer, by reference (see the [type's example](Slice)).
    pub fn get_ref(&self) -> &T {
        &self.buf
    }
}

// SAFETY: the slice's pointer is the inner buffer's stable pointer plus an in-bounds offset
// (begin <= end <= bytes_total).
unsafe impl<T: IoBuf> IoBuf for Slice<T> {
    fn stable_ptr(&self) -> *const u8 {
        self.buf.stable_ptr().wrapping_add(self.begin)
    }
    fn bytes_init(&self) -> usize {
        self.buf.bytes_init().clamp(self.begin, self.end) - self.begin
    }
    fn bytes_total(&self) -> usize {
        self.end - self.begin
    }
    fn fixed_buf(&self) -> Option<&FixedBuf> {
        // A slice of a chunk lies inside it: a fixed op may name the chunk for it.
        self.buf.fixed_buf()
    }
}

// SAFETY: as for IoBuf; the inner buffer is writable up to its bytes_total >= end.
unsafe impl<T: IoBufMut> IoBufMut for Slice<T> {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.buf.stable_mut_ptr().wrapping_add(self.begin)
    }
    unsafe fn set_init(&mut self, pos: usize) {
        if self.buf.bytes_init() >= self.begin {
            // SAFETY: bytes begin..begin+pos were initialised per the caller; bytes before
            // `begin` are only claimed initialised because the inner buffer already had them.
            unsafe { self.buf.set_init(self.begin + pos) };
        }
    }
}

/// The output of a read-like op: the byte count, with those bytes marked initialised in
/// `buf`, and the buffer itself (on error too).
///
/// # Safety
/// `cqe` must be the final completion of an op that read into the start of `buf`, so a
/// non-negative result is the number of bytes the kernel wrote there.
pub(crate) unsafe fn read_output<B: IoBufMut>(
    cqe: &ring_core::cqe::Cqe,
    mut buf: B,
) -> (std::io::Result<usize>, B) {
    let res = crate::completion::result(cqe).map(|n| n as usize);
    if let Ok(n) = res {
        // SAFETY: per this function's contract, the kernel wrote `n` bytes at the start.
        unsafe { buf.set_init(n) };
    }
    (res, buf)
}

/// Runs `step` on `buf[done..total]` until `total` bytes moved, looping over short
/// transfers and `EINTR`. A step that moves nothing ends it with `on_zero(done, total)`
/// (`WriteZero` for writes, `UnexpectedEof` for reads). The buffer always comes back.
pub(crate) async fn transfer_all<B, F, Fut>(
    mut buf: B,
    total: usize,
    on_zero: fn(usize, usize) -> std::io::Error,
    mut step: F,
) -> (std::io::Result<()>, B)
where
    B: IoBuf,
    F: FnMut(Slice<B>, usize) -> Fut,
    Fut: std::future::IntoFuture<Output = (std::io::Result<usize>, Slice<B>)>,
{
    let mut done = 0;
    while done < total {
        let (res, slice) = step(buf.slice(done..total), done).await;
        buf = slice.into_inner();
        match advance(res, done, total, on_zero) {
            Ok(moved) => done = moved,
            Err(e) => return (Err(e), buf),
        }
    }
    (Ok(()), buf)
}

/// One step of a transfer-all loop ([`transfer_all`], stream `write_all`): the bytes moved
/// so far after a step that started at `done` and gave `res`, or the error that ends the
/// loop. `EINTR` moves nothing and goes on; a step that moved nothing ends it with
/// `on_zero(done, total)`.
#[inline]
pub(crate) fn advance(
    res: std::io::Result<usize>,
    done: usize,
    total: usize,
    on_zero: fn(usize, usize) -> std::io::Error,
) -> std::io::Result<usize> {
    match res {
        Ok(0) => Err(on_zero(done, total)),
        Ok(n) => Ok(done + n),
        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(done),
        Err(e) => Err(e),
    }
}

/// The `on_zero` of writes: the kernel accepted nothing.
pub(crate) fn write_zero(_done: usize, _total: usize) -> std::io::Error {
    std::io::ErrorKind::WriteZero.into()
}

/// A buffer of its worker's registered pool: file reads and writes of it go to the kernel
/// as `READ_FIXED` / `WRITE_FIXED`, which skip pinning the buffer's pages for every op (an
/// `O_DIRECT` read or write otherwise pins them each time). Sized and counted by
/// [`Builder::fixed_buffers`](crate::Builder::fixed_buffers), taken with
/// [`FixedBuf::take`], page-aligned (so fit for `O_DIRECT`), and back in the pool when
/// dropped.
///
/// It is an owned buffer like any other ([`IoBuf`], [`IoBufMut`], and a `[u8]` through
/// `Deref`): the same calls take it on both backends. Where the kernel cannot use it as a
/// registered buffer (the epoll backend, a ring whose registration failed, another
/// worker's or another runtime's buffer, a socket op), it is plain memory, read and
/// written as a `Vec` would be. [`is_registered`](Self::is_registered) says which.
///
/// It stays on the thread of the worker that lent it out (`!Send`): a registered buffer's
/// index means something only to that worker's ring.
///
/// # Examples
///
/// ```
/// use ring_rt::buf::FixedBuf;
/// use ring_rt::fs::OpenOptions;
///
/// # let dir = std::env::temp_dir().join(format!("ring-rt-doc-fixed-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir)?;
/// # let path = dir.join("f");
/// let rt = ring_rt::Runtime::builder().fixed_buffers(4, 4096).build()?;
/// rt.block_on(async {
///     let file = OpenOptions::new().read(true).write(true).create(true).open(&path).await?;
///     let mut buf = FixedBuf::take()?;
///     buf.extend_from_slice(b"fixed");
///     let (n, buf) = file.write_at(buf, 0).await;
///     assert_eq!(n?, 5);
///     drop(buf); // back in the pool
///
///     let (n, buf) = file.read_at(FixedBuf::take()?, 0).await;
///     assert_eq!(&buf[..n?], b"fixed");
///     std::io::Result::Ok(())
/// })?;
/// # std::fs::remove_dir_all(&dir)?;
/// # std::io::Result::Ok(())
/// ```
pub struct FixedBuf {
    chunk: ring_core::register_buf::FixedBuf,
    /// The chunk's index in its worker's ring, if the pool is registered there.
    registered: bool,
}

impl FixedBuf {
    pub(crate) fn new(chunk: ring_core::register_buf::FixedBuf, registered: bool) -> FixedBuf {
        FixedBuf { chunk, registered }
    }

    /// The chunk, for its worker to tell whether it is one of its own.
    pub(crate) fn chunk(&self) -> &ring_core::register_buf::FixedBuf {
        &self.chunk
    }

    /// Whether reads and writes of this buffer on its worker go to the kernel as
    /// registered-buffer ops (false on epoll, or where the ring refused the registration).
    pub fn is_registered(&self) -> bool {
        self.registered
    }

    /// Bytes the buffer can hold: the pool's buffer length, rounded up to whole pages.
    pub fn capacity(&self) -> usize {
        self.chunk.capacity()
    }

    /// Appends as much of `data` as fits; how many bytes that was.
    pub fn extend_from_slice(&mut self, data: &[u8]) -> usize {
        let len = self.chunk.len();
        let n = data.len().min(self.capacity() - len);
        // SAFETY: `len + n <= capacity()`; the bytes written are `data`'s, after the `len`
        // initialised ones, and `as_mut_ptr` is this buffer's own chunk.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.chunk.as_mut_ptr().add(len), n);
            self.chunk.set_len(len + n);
        }
        n
    }

    /// Empties the buffer (its capacity stays).
    pub fn clear(&mut self) {
        // SAFETY: zero bytes are always initialised.
        unsafe { self.chunk.set_len(0) };
    }
}

impl std::ops::Deref for FixedBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.chunk.as_slice()
    }
}

impl std::ops::DerefMut for FixedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.chunk.as_mut_slice()
    }
}

impl std::fmt::Debug for FixedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FixedBuf")
            .field("len", &self.chunk.len())
            .field("capacity", &self.capacity())
            .field("registered", &self.registered)
            .finish()
    }
}

// SAFETY: the chunk is part of its pool's heap allocation, which the chunk's handle keeps
// alive and never moves; `len` bytes hold data and `capacity` bytes are allocated.
unsafe impl IoBuf for FixedBuf {
    fn stable_ptr(&self) -> *const u8 {
        self.chunk.as_ptr()
    }
    fn bytes_init(&self) -> usize {
        self.chunk.len()
    }
    fn bytes_total(&self) -> usize {
        self.chunk.capacity()
    }
    fn fixed_buf(&self) -> Option<&FixedBuf> {
        Some(self)
    }
}

// SAFETY: as for IoBuf; the whole chunk (`capacity` bytes) is writable and owned by this
// buffer alone.
unsafe impl IoBufMut for FixedBuf {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.chunk.as_mut_ptr()
    }
    unsafe fn set_init(&mut self, pos: usize) {
        if pos > self.chunk.len() {
            // SAFETY: the caller says the first `pos` bytes were initialised.
            unsafe { self.chunk.set_len(pos) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slice_bounds_are_clamped() {
        let v = vec![1u8, 2, 3, 4];
        let s = v.slice(1..10);
        assert_eq!(
            (s.begin(), s.end(), s.bytes_init(), s.bytes_total()),
            (1, 4, 3, 3)
        );
        let s = vec![0u8; 2].slice(5..);
        assert_eq!(s.bytes_total(), 0);
    }

    #[test]
    fn slice_bounds_at_usize_max_do_not_overflow() {
        let s = vec![1u8, 2, 3].slice(..=usize::MAX);
        assert_eq!((s.begin(), s.end()), (0, 3));
        let s = vec![1u8, 2, 3].slice((
            std::ops::Bound::Excluded(usize::MAX),
            std::ops::Bound::Unbounded,
        ));
        assert_eq!((s.begin(), s.end(), s.bytes_total()), (3, 3, 0));
        let s = vec![1u8, 2, 3].slice(usize::MAX..);
        assert_eq!(s.bytes_total(), 0);
    }

    #[test]
    fn vec_set_init_grows_len_only() {
        let mut v = Vec::with_capacity(8);
        v.push(1u8);
        // SAFETY: test: pretend 0 bytes were written, which never shrinks.
        unsafe { v.set_init(0) };
        assert_eq!(v.len(), 1);
    }
}
