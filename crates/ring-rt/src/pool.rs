//! Pooled receive buffers: a provided buffer on loan from the worker's shared group.
//!
//! An idle connection holds no buffer: the kernel (or, on epoll, the readiness shim) takes
//! one from the group only when data arrives. When the group runs dry, receivers wait for
//! a buffer to come back instead of failing; every such wait is counted as ENOBUFS.

use std::fmt;
use std::future::poll_fn;
use std::future::Future;
use std::io;
use std::ops::Deref;
use std::rc::Rc;
use std::task::Poll;

use ring_core::buf_pool::{BufGroup, BufLease, BufMode};
use ring_core::cqe::Cqe;
use ring_core::metrics::Metrics;

use crate::buf::IoBuf;
use crate::runtime::Core;

/// Received bytes in a buffer borrowed from the worker's pool; dropping it returns the buffer.
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
    lease: Option<BufLease>,
    core: Rc<Core>,
}

impl PooledBuf {
    /// The received bytes (see the [type's example](PooledBuf)).
    pub fn as_slice(&self) -> &[u8] {
        self.lease.as_deref().unwrap_or(&[])
    }

    /// The provided-buffer id this data arrived in (see the [type's example](PooledBuf)).
    pub fn bid(&self) -> Option<u16> {
        self.lease.as_ref().map(BufLease::bid)
    }
}

impl Deref for PooledBuf {
    type Target = [u8];

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

impl Drop for PooledBuf {
    fn drop(&mut self) {
        drop(self.lease.take());
        note_return(&self.core);
    }
}

/// Records a buffer's return and wakes every receive waiting for one.
fn note_return(core: &Core) {
    core.buf_returns.set(core.buf_returns.get().wrapping_add(1));
    let waiters = std::mem::take(&mut *core.buf_waiters.borrow_mut());
    for waker in waiters {
        waker.wake();
    }
}

/// The return count to pass to [`wait_for_buffer`]: read it before submitting a receive.
pub(crate) fn return_epoch(core: &Core) -> u64 {
    core.buf_returns.get()
}

// SAFETY: the lease's memory belongs to the group, which lives at least as long as the
// lease; it does not move, and `len` bytes of it hold received data.
unsafe impl IoBuf for PooledBuf {
    fn stable_ptr(&self) -> *const u8 {
        self.as_slice().as_ptr()
    }
    fn bytes_init(&self) -> usize {
        self.len()
    }
    fn bytes_total(&self) -> usize {
        self.len()
    }
}

/// Turns a buffer-select completion into a pooled buffer. `Ok(None)` is end of stream.
pub(crate) fn from_cqe(
    core: &Rc<Core>,
    group: &BufGroup,
    cqe: Cqe,
) -> io::Result<Option<PooledBuf>> {
    let n = match cqe.result() {
        Ok(n) => n as usize,
        Err(err) => {
            if let Some(bid) = cqe.bid() {
                // SAFETY: the bid comes from this op's CQE, selected from `group`.
                unsafe { group.recycle(bid) };
                note_return(core);
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
        lease: Some(lease),
        core: core.clone(),
    }))
}

/// How long a receive waits after ENOBUFS before it checks again anyway: a buffer returned
/// by an orphan's late CQE wakes nobody.
const RECHECK: std::time::Duration = std::time::Duration::from_millis(50);

/// Records an ENOBUFS and waits until a buffer came back since `epoch` (read before the
/// receive was submitted). A free count is not enough with kernel-selected buffers: bids
/// the kernel filled for CQEs still queued in another stream's slot count as free here
/// while the kernel's ring is empty, and retrying on them would spin.
pub(crate) async fn wait_for_buffer(core: &Rc<Core>, group: &BufGroup, epoch: u64) {
    group.record_enobufs();
    Metrics::bump(&core.backend.borrow().metrics().enobufs);
    tracing::debug!(target: "ring_rt", bgid = group.bgid(), buffers = group.count(), "receive pool exhausted (ENOBUFS); waiting for a buffer");
    let mut recheck = crate::time::sleep(RECHECK);
    poll_fn(|cx| {
        // User-space groups know exactly what is free.
        let exact = group.mode() == BufMode::User && group.available() > 0;
        if exact || core.buf_returns.get() != epoch {
            return Poll::Ready(());
        }
        if std::pin::Pin::new(&mut recheck).poll(cx).is_ready() {
            return Poll::Ready(());
        }
        core.buf_waiters.borrow_mut().push(cx.waker().clone());
        Poll::Pending
    })
    .await
}
