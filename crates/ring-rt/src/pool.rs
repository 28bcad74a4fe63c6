//! Pooled receive buffers: a provided buffer on loan from the worker's shared group.
//!
//! An idle connection holds no buffer: the kernel (or, on epoll, the readiness shim) takes
//! one from the group only when data arrives. When the group runs dry, receivers wait for
//! a buffer to come back instead of failing; every such wait is counted as ENOBUFS.

use std::fmt;
use std::io;
use std::ops::Deref;

use ring_core::buf_pool::{BufGroup, BufLease};
use ring_core::cqe::Cqe;

use crate::buf::IoBuf;
use crate::worker::Core;

/// Received bytes in a buffer borrowed from the worker's pool; dropping it returns the
/// buffer. (Bytes that a dropped plain `read` had received come back as a chunk too, then
/// as a copy with no pool buffer: see [`bid`](Self::bid).)
///
/// It derefs to `[u8]`, and it is an [`IoBuf`], so received data can be written out again
/// without a copy. Made by `recv_pooled` and `recv_stream` on
/// [`TcpStream`](crate::net::TcpStream) and [`UnixStream`](crate::net::UnixStream).
///
/// # Examples
///
/// ```
/// # ring_rt::Runtime::new()?.block_on(async {
/// let (a, b) = ring_rt::net::UnixStream::pair()?;
/// a.write_all(&b"lent"[..]).await.0?;
/// let buf = b.recv_pooled().await?.expect("data");
/// assert_eq!(buf.as_slice(), b"lent");
/// assert_eq!(buf.len(), 4); // via Deref<Target = [u8]>
/// println!("arrived in buffer {:?}", buf.bid());
/// b.write_all(buf).await.0?; // an IoBuf: echo it back, then it returns to the pool
/// # std::io::Result::Ok(()) })?;
/// # std::io::Result::Ok(())
/// ```
pub struct PooledBuf {
    data: Data,
    /// Bytes at the front already handed out (a read that took part of the chunk).
    start: usize,
}

/// Where a chunk's bytes are.
enum Data {
    /// In a buffer of the pool. Dropping it gives the bid back to the group, which wakes a
    /// receive waiting for one.
    Lease(BufLease),
    /// A copy: bytes a dropped plain `read` had received, kept for the next receive (a
    /// boxed slice, not a `Vec`: 8 bytes less in every pending write of a pooled chunk).
    Owned(Box<[u8]>),
}

impl PooledBuf {
    /// The received bytes (see the [type's example](PooledBuf)).
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        let all: &[u8] = match &self.data {
            Data::Lease(lease) => lease,
            Data::Owned(bytes) => bytes,
        };
        &all[self.start..]
    }

    /// The provided-buffer id this data arrived in; `None` for bytes kept from a dropped
    /// plain `read`, which are a copy (see the [type's example](PooledBuf)).
    pub fn bid(&self) -> Option<u16> {
        match &self.data {
            Data::Lease(lease) => Some(lease.bid()),
            Data::Owned(_) => None,
        }
    }

    /// Bytes a dropped read received, as a chunk.
    pub(crate) fn owned(bytes: Vec<u8>) -> PooledBuf {
        PooledBuf {
            data: Data::Owned(bytes.into_boxed_slice()),
            start: 0,
        }
    }

    /// Hands out the first `n` bytes (at most all of them): they are no longer in the
    /// chunk.
    pub(crate) fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.start + self.as_slice().len());
    }
}

impl Deref for PooledBuf {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl fmt::Debug for PooledBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PooledBuf")
            .field("len", &self.len())
            .field("bid", &self.bid())
            .finish()
    }
}

// The methods are inline, as the slice's own accessors are: out of line, these three were
// 3-4 calls of 10-14 instructions per echo request (callgrind).
//
// SAFETY: the bytes are a lease's buffer, which belongs to the group the lease keeps alive,
// or a Vec's heap buffer; neither moves with the value, and `as_slice` covers exactly the
// received bytes still in the chunk.
unsafe impl IoBuf for PooledBuf {
    #[inline]
    fn stable_ptr(&self) -> *const u8 {
        self.as_slice().as_ptr()
    }
    #[inline]
    fn bytes_init(&self) -> usize {
        self.len()
    }
    #[inline]
    fn bytes_total(&self) -> usize {
        self.len()
    }
}

/// Turns a buffer-select completion into a pooled buffer. `Ok(None)` is end of stream.
#[inline]
pub(crate) fn from_cqe(group: &BufGroup, cqe: Cqe) -> io::Result<Option<PooledBuf>> {
    let n = match crate::completion::result(&cqe) {
        Ok(n) => n as usize,
        Err(err) => {
            if let Some(bid) = cqe.bid() {
                // SAFETY: the bid comes from this op's CQE, selected from `group`.
                unsafe { group.recycle(bid) };
            }
            return Err(err);
        }
    };
    let Some(bid) = cqe.bid() else {
        return Ok(None);
    };
    // SAFETY: the bid comes from this op's own CQE, selected from `group`, and the kernel
    // wrote `n` bytes into it.
    let lease = unsafe { group.lease(bid, n)? };
    if n == 0 {
        return Ok(None);
    }
    Ok(Some(PooledBuf {
        data: Data::Lease(lease),
        start: 0,
    }))
}

/// Records an ENOBUFS (group count, worker metric, debug event). The receive then waits
/// until a bid comes back to the group, whoever returns it: a dropped `PooledBuf`, a failed
/// CQE's recycle, or an orphaned receive's late CQE.
pub(crate) fn record_enobufs(core: &Core, group: &BufGroup) {
    group.record_enobufs();
    core.count_enobufs();
    tracing::debug!(target: "ring_rt", bgid = group.bgid(), buffers = group.count(), "receive pool exhausted (ENOBUFS); waiting for a buffer");
}
