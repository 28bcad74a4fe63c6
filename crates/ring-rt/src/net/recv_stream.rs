//! A socket's received data as a stream of pooled buffers. Everything in flight lives in the
//! stream itself, not in the future `next` returns, so dropping that future (a `select!` or
//! a timeout losing the race) loses no data, and the future a connection's task holds while
//! idle is one pointer.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use ring_core::buf_pool::{BufGroup, BufMode};
use ring_core::cqe::Cqe;
use ring_core::probe::Feature;
use ring_core::release::RecycleBid;
use ring_core::user_data::OpId;

use super::socket::Socket;
use crate::op::net::{recv_into_group, recv_multi_sqe, PollIn, RecvSelect};
use crate::op::{error_cqe, Op};
use crate::pool::{self, PooledBuf};

/// Received data as it arrives: multishot recv into the worker's pool where the kernel has
/// it (6.0+), else one buffer-select recv after another. `next` gives `None` at end of
/// stream. If the pool runs dry the stream waits for buffers and re-arms: no data is lost.
///
/// Made by `recv_stream` on [`TcpStream`](crate::net::TcpStream) and
/// [`UnixStream`](crate::net::UnixStream). Each chunk is a [`PooledBuf`]; hold few of them
/// at a time, as a chunk held is a pool buffer out. Dropping the stream cancels its
/// receive and returns the buffers of any late completions to the pool.
///
/// `next` is cancel-safe: a receive in flight belongs to the stream, so a dropped
/// [`RecvNext`] loses nothing and the following `next` picks up where it stopped.
///
/// # Examples
///
/// ```
/// # ring_rt::Runtime::new()?.block_on(async {
/// let (a, b) = ring_rt::net::UnixStream::pair()?;
/// a.write_all(&b"first "[..]).await.0?;
/// a.write_all(&b"second"[..]).await.0?;
/// drop(a); // end of stream for `b`
///
/// let mut rx = b.recv_stream();
/// let mut text = Vec::new();
/// while let Some(chunk) = rx.next().await {
///     text.extend_from_slice(&chunk?);
/// }
/// assert_eq!(text, b"first second");
/// # std::io::Result::Ok(()) })?;
/// # std::io::Result::Ok(())
/// ```
pub struct RecvStream<'a> {
    socket: &'a Socket,
    /// The worker's receive group, fetched on first poll.
    group: Option<BufGroup>,
    /// Whether to arm a multishot recv (decided with the group).
    multishot_ok: bool,
    /// Never multishot: `recv_pooled`, which must leave nothing armed behind it.
    single_only: bool,
    /// The armed multishot recv.
    multishot: Option<OpId>,
    /// The one-shot receive in flight, where multishot is not used.
    single: Option<SingleRecv>,
    /// The pool's return count when the current receive was started: after an ENOBUFS,
    /// any return since then means a buffer may be free again.
    epoch: u64,
    /// Waiting for a buffer to come back after ENOBUFS.
    starved: bool,
    done: bool,
}

/// One receive into the pool, in flight.
enum SingleRecv {
    /// The kernel picks the buffer (buffer select), or the epoll shim does when readable.
    Select(Op<RecvSelect>),
    /// io_uring with a user-space group (before 5.7): wait until readable, then take a
    /// buffer and recv into it.
    Readable(Op<PollIn>),
}

impl<'a> RecvStream<'a> {
    pub(crate) fn new(socket: &'a Socket) -> RecvStream<'a> {
        RecvStream {
            socket,
            group: None,
            multishot_ok: false,
            single_only: false,
            multishot: None,
            single: None,
            epoch: 0,
            starved: false,
            done: false,
        }
    }

    pub(crate) fn single_shot(socket: &'a Socket) -> RecvStream<'a> {
        let mut rx = RecvStream::new(socket);
        rx.single_only = true;
        rx
    }

    /// The next chunk of data, `None` at end of stream (and after an error). Cancel-safe:
    /// dropping the future before it is ready loses no data.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let (a, b) = ring_rt::net::UnixStream::pair()?;
    /// let mut rx = b.recv_stream();
    /// // Nothing sent yet: the timeout wins and drops `next`'s future.
    /// let early = ring_rt::time::timeout(Duration::from_millis(10), rx.next()).await;
    /// assert!(early.is_err());
    ///
    /// a.write_all(&b"ping"[..]).await.0?;
    /// let chunk = rx.next().await.expect("not at end")?;
    /// assert_eq!(&chunk[..], b"ping");
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    // An async stream's `next` (like `StreamExt::next`), not `Iterator::next`.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> RecvNext<'_, 'a> {
        RecvNext { stream: self }
    }

    /// Polls for the next chunk (what [`next`](Self::next) awaits), for hand-written
    /// futures and `Stream` impls: `Ready(None)` at end of stream and after an error.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::future::poll_fn;
    ///
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let (a, b) = ring_rt::net::UnixStream::pair()?;
    /// a.write_all(&b"polled"[..]).await.0?;
    /// drop(a);
    /// let mut rx = b.recv_stream();
    /// let chunk = poll_fn(|cx| rx.poll_next(cx)).await.expect("data")?;
    /// assert_eq!(&chunk[..], b"polled");
    /// drop(chunk);
    /// assert!(poll_fn(|cx| rx.poll_next(cx)).await.is_none());
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<PooledBuf>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let out = ready!(self.poll_chunk(cx)).transpose();
        if !matches!(out, Some(Ok(_))) {
            self.done = true;
        }
        Poll::Ready(out)
    }

    /// One chunk, `Ok(None)` at end of stream; waits out ENOBUFS and retries EINTR.
    pub(crate) fn poll_chunk(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<Option<PooledBuf>>> {
        let group = self.group()?;
        loop {
            if self.starved {
                ready!(poll_buffer(&group, self.epoch, cx));
                self.starved = false;
            }
            let cqe = if self.multishot_ok {
                ready!(self.poll_multishot(&group, cx))?
            } else {
                ready!(self.poll_single(&group, cx))
            };
            match pool::from_cqe(&group, cqe) {
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    pool::record_enobufs(&self.socket.core, &group);
                    self.starved = true;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => return Poll::Ready(other),
            }
        }
    }

    fn group(&mut self) -> io::Result<BufGroup> {
        if let Some(g) = &self.group {
            return Ok(g.clone());
        }
        let mut backend = self.socket.core.backend.borrow_mut();
        let g = backend.recv_group()?;
        self.multishot_ok = !self.single_only
            && backend
                .features()
                .is_some_and(|f| f.has(Feature::MultishotRecv));
        self.group = Some(g.clone());
        Ok(g)
    }

    /// The armed multishot recv's next CQE, arming it first if it is not.
    fn poll_multishot(&mut self, group: &BufGroup, cx: &mut Context<'_>) -> Poll<io::Result<Cqe>> {
        let mut backend = self.socket.core.backend.borrow_mut();
        let id = match self.multishot {
            Some(id) => id,
            None => {
                self.epoch = group.returns();
                let id = backend.submit(recv_multi_sqe(self.socket.fd(), group))?;
                *self.multishot.insert(id)
            }
        };
        let cqe = ready!(backend.poll(id, cx.waker()))?;
        if !cqe.is_more() {
            self.multishot = None;
        }
        Poll::Ready(Ok(cqe))
    }

    /// The one-shot receive's CQE, starting it first if none is in flight. Kept in `self`
    /// while pending, so a dropped `RecvNext` does not cancel a receive that may hold data.
    fn poll_single(&mut self, group: &BufGroup, cx: &mut Context<'_>) -> Poll<Cqe> {
        loop {
            let mut op = match self.single.take() {
                Some(op) => op,
                None => {
                    self.epoch = group.returns();
                    self.start_single(group)
                }
            };
            let polled = match &mut op {
                SingleRecv::Select(recv) => Pin::new(recv).poll(cx),
                SingleRecv::Readable(readable) => match Pin::new(readable).poll(cx) {
                    Poll::Ready(Ok(())) => match recv_into_group(self.socket.fd(), group) {
                        // Another reader took the data first: wait again.
                        cqe if cqe.res == -libc::EAGAIN => continue,
                        cqe => Poll::Ready(cqe),
                    },
                    Poll::Ready(Err(e)) => Poll::Ready(error_cqe(&e)),
                    Poll::Pending => Poll::Pending,
                },
            };
            if polled.is_pending() {
                self.single = Some(op);
            }
            return polled;
        }
    }

    fn start_single(&self, group: &BufGroup) -> SingleRecv {
        let core = self.socket.core.clone();
        let fd = self.socket.fd();
        if group.mode() != BufMode::User || self.socket.is_epoll() {
            let group = group.clone();
            SingleRecv::Select(Op::new(core, RecvSelect { fd, group }))
        } else {
            SingleRecv::Readable(Op::new(core, PollIn { fd }))
        }
    }
}

/// Ready once a buffer may be free again after ENOBUFS: user-space groups know exactly
/// what is free; otherwise a bid must have come back since `epoch`.
fn poll_buffer(group: &BufGroup, epoch: u64, cx: &mut Context<'_>) -> Poll<()> {
    if group.mode() == BufMode::User && group.available() > 0 {
        return Poll::Ready(());
    }
    group.poll_return(epoch, cx)
}

impl Drop for RecvStream<'_> {
    fn drop(&mut self) {
        // A one-shot receive in flight is an `Op`: dropping it orphans it. The multishot
        // recv is a bare op id, orphaned here.
        if let (Some(id), Some(group)) = (self.multishot.take(), self.group.take()) {
            // SAFETY: the multishot recv selects from `group`.
            let orphan = Box::new(unsafe { RecycleBid::new(group) });
            match self.socket.core.backend.try_borrow_mut() {
                Ok(mut backend) => backend.orphan(id, orphan),
                // Dropped mid-turn: keep the bids' group forever rather than lose track.
                Err(_) => std::mem::forget(orphan),
            }
        }
    }
}

/// The future [`RecvStream::next`] returns. It holds only a borrow of the stream, where
/// the receive in flight lives: dropping it cancels nothing and loses no data.
#[must_use = "futures do nothing unless awaited"]
pub struct RecvNext<'s, 'a> {
    stream: &'s mut RecvStream<'a>,
}

impl Future for RecvNext<'_, '_> {
    type Output = Option<io::Result<PooledBuf>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.stream.poll_next(cx)
    }
}
