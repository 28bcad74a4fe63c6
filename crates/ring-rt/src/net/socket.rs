//! The socket under every stream and datagram type: an fd on one worker, closed through
//! that worker's backend so the close is ordered after ops already queued on the fd.

use std::future::{poll_fn, Future};
use std::io;
use std::net::Shutdown;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::task::Context;

use ring_core::buf_pool::{BufGroup, BufMode};
use ring_core::probe::Feature;
use ring_core::release::RecycleBid;
use ring_core::user_data::OpId;
use socket2::{Domain, SockAddr, Type};

use crate::backend::{Backend, BackendKind};
use crate::buf::{transfer_all, write_zero, IoBuf, IoBufMut};
use crate::op::link::Pending;
use crate::op::net::{
    recv_into_group, recv_multi_sqe, Connect, PollIn, Recv, RecvSelect, Send, SendZc,
};
use crate::op::Op;
use crate::pool::{self, PooledBuf};
use crate::runtime::Core;

pub(crate) struct Socket {
    fd: RawFd,
    pub(crate) core: Rc<Core>,
}

impl Socket {
    /// Adopts `fd` on the current worker, in the blocking mode its backend wants
    /// (io_uring: blocking, the kernel waits for readiness itself; epoll: non-blocking).
    pub(crate) fn from_owned(core: Rc<Core>, fd: OwnedFd) -> io::Result<Socket> {
        let raw = fd.into_raw_fd();
        let socket = Socket { fd: raw, core };
        crate::sys::set_nonblocking(raw, socket.is_epoll())?;
        Ok(socket)
    }

    /// A new socket of `domain`/`ty` on the current worker.
    pub(crate) fn new(domain: Domain, ty: Type) -> io::Result<Socket> {
        let core = Core::current_io()?;
        let s = socket2::Socket::new(domain, ty.cloexec(), None)?;
        Socket::from_owned(core, s.into())
    }

    pub(crate) fn is_epoll(&self) -> bool {
        self.core.choice.kind == BackendKind::Epoll
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.fd
    }

    /// A socket2 view for options and addresses (never closes the fd).
    pub(crate) fn with_socket2<T>(&self, f: impl FnOnce(&socket2::Socket) -> T) -> T {
        // SAFETY: the fd is open for as long as `self`; ManuallyDrop keeps socket2 from
        // closing it.
        let s = std::mem::ManuallyDrop::new(unsafe { socket2::Socket::from_raw_fd(self.fd) });
        f(&s)
    }

    pub(crate) async fn connect(&self, addr: SockAddr) -> io::Result<()> {
        let op = Connect {
            fd: self.fd,
            addr: Box::new(addr),
            started: false,
        };
        Op::new(self.core.clone(), op).await
    }

    /// A read on a stream socket.
    pub(crate) fn read<B: IoBufMut>(&self, buf: B) -> Pending<'_, Recv<B>> {
        self.recv_op(buf, true)
    }

    /// One datagram.
    pub(crate) fn read_datagram<B: IoBufMut>(&self, buf: B) -> Pending<'_, Recv<B>> {
        self.recv_op(buf, false)
    }

    fn recv_op<B: IoBufMut>(&self, buf: B, is_stream: bool) -> Pending<'_, Recv<B>> {
        Pending::new(
            self.core.clone(),
            Recv {
                fd: self.fd,
                buf,
                flags: 0,
                is_stream,
            },
        )
    }

    pub(crate) fn write<B: IoBuf>(&self, buf: B) -> Pending<'_, Send<B>> {
        Pending::new(
            self.core.clone(),
            Send {
                fd: self.fd,
                buf,
                flags: 0,
            },
        )
    }

    /// Not an `async fn`: each async layer stores its arguments once more (rustc keeps an
    /// async fn's arguments beside the future it awaits), and every connection's task holds
    /// this future's state while it writes.
    pub(crate) fn write_all<B: IoBuf>(
        &self,
        buf: B,
    ) -> impl Future<Output = (io::Result<()>, B)> + '_ {
        let total = buf.bytes_init();
        transfer_all(buf, total, write_zero, move |slice, _| self.write(slice))
    }

    pub(crate) async fn send_zc<B: IoBuf>(&self, buf: B) -> (io::Result<usize>, B) {
        let supported = self
            .core
            .backend
            .borrow()
            .features()
            .is_none_or(|f| f.has(Feature::SendZc));
        if !supported {
            return self.write(buf).await;
        }
        Op::new(
            self.core.clone(),
            SendZc {
                fd: self.fd,
                buf,
                result: None,
            },
        )
        .await
    }

    pub(crate) async fn recv_pooled(&self) -> io::Result<Option<PooledBuf>> {
        let group = self.core.backend.borrow_mut().recv_group()?;
        loop {
            let epoch = group.returns();
            let cqe = self.recv_select(&group).await;
            match pool::from_cqe(&group, cqe) {
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    pool::wait_for_buffer(&self.core, &group, epoch).await
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => return other,
            }
        }
    }

    /// One buffer-select recv: the kernel picks the buffer, or, for a user-space group
    /// (epoll, or io_uring before 5.7), a buffer is taken once the socket is readable.
    async fn recv_select(&self, group: &BufGroup) -> ring_core::cqe::Cqe {
        if group.mode() != BufMode::User || self.is_epoll() {
            let op = RecvSelect {
                fd: self.fd,
                group: group.clone(),
            };
            return Op::new(self.core.clone(), op).await;
        }
        loop {
            if let Err(e) = Op::new(self.core.clone(), PollIn { fd: self.fd }).await {
                return crate::op::error_cqe(&e);
            }
            let cqe = recv_into_group(self.fd, group);
            if cqe.res != -libc::EAGAIN {
                return cqe;
            }
        }
    }

    pub(crate) fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.with_socket2(|s| s.shutdown(how))?;
        // Busy only if called from inside a backend turn; then the next op just waits for
        // an event before its syscall.
        if let Ok(mut backend) = self.core.backend.try_borrow_mut() {
            backend.clear_unready(self.fd);
        }
        Ok(())
    }

    pub(crate) fn local_addr(&self) -> io::Result<SockAddr> {
        self.with_socket2(|s| s.local_addr())
    }

    pub(crate) fn peer_addr(&self) -> io::Result<SockAddr> {
        self.with_socket2(|s| s.peer_addr())
    }

    pub(crate) fn into_owned(mut self) -> OwnedFd {
        // -1 tells Drop there is nothing left to close; the core handle drops normally.
        let fd = std::mem::replace(&mut self.fd, -1);
        // The epoll backend must forget the fd: its new owner will close it without us.
        if let Backend::Epoll(epoll) = &mut *self.core.backend.borrow_mut() {
            epoll.deregister(fd);
        }
        drop(self);
        // SAFETY: `self` owned the fd; its field now says -1, so its drop did not close it
        // and ownership moves here.
        unsafe { OwnedFd::from_raw_fd(fd) }
    }
}

impl AsRawFd for Socket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        if self.fd >= 0 {
            crate::backend::close_fd(&self.core, self.fd);
        }
    }
}

/// Received data as it arrives: multishot recv into the worker's pool where the kernel has
/// it (6.0+), else one buffer-select recv after another. `next` gives `None` at end of
/// stream. If the pool runs dry the stream waits for buffers and re-arms: no data is lost.
///
/// Made by `recv_stream` on [`TcpStream`](crate::net::TcpStream) and
/// [`UnixStream`](crate::net::UnixStream). Each chunk is a [`PooledBuf`]; hold few of them
/// at a time, as a chunk held is a pool buffer out. Dropping the stream cancels its
/// multishot recv and returns the buffers of any late completions to the pool.
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
    group: Option<BufGroup>,
    multishot: Option<OpId>,
    /// The pool's return count when the multishot recv was last armed.
    armed_epoch: u64,
    done: bool,
}

impl<'a> RecvStream<'a> {
    pub(crate) fn new(socket: &'a Socket) -> RecvStream<'a> {
        RecvStream {
            socket,
            group: None,
            multishot: None,
            armed_epoch: 0,
            done: false,
        }
    }

    /// The next chunk of data, `None` at end of stream (and after an error).
    ///
    /// # Examples
    ///
    /// ```
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let (a, b) = ring_rt::net::UnixStream::pair()?;
    /// a.write_all(&b"ping"[..]).await.0?;
    /// let mut rx = b.recv_stream();
    /// let chunk = rx.next().await.expect("not at end")?;
    /// assert_eq!(&chunk[..], b"ping");
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub async fn next(&mut self) -> Option<io::Result<PooledBuf>> {
        if self.done {
            return None;
        }
        let out = self.next_inner().await.transpose();
        if !matches!(out, Some(Ok(_))) {
            self.done = true;
        }
        out
    }

    async fn next_inner(&mut self) -> io::Result<Option<PooledBuf>> {
        let core = self.socket.core.clone();
        let group = match &self.group {
            Some(g) => g.clone(),
            None => {
                let g = core.backend.borrow_mut().recv_group()?;
                self.group = Some(g.clone());
                g
            }
        };
        if !self.is_multishot() {
            return self.socket.recv_pooled().await;
        }
        loop {
            let id = match self.multishot {
                Some(id) => id,
                None => {
                    self.armed_epoch = group.returns();
                    let id = core
                        .backend
                        .borrow_mut()
                        .submit(recv_multi_sqe(self.socket.fd, &group))?;
                    *self.multishot.insert(id)
                }
            };
            let cqe =
                poll_fn(|cx: &mut Context<'_>| core.backend.borrow_mut().poll(id, cx.waker()))
                    .await?;
            if !cqe.is_more() {
                self.multishot = None;
            }
            match pool::from_cqe(&group, cqe) {
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    pool::wait_for_buffer(&core, &group, self.armed_epoch).await;
                }
                other => return other,
            }
        }
    }

    fn is_multishot(&self) -> bool {
        let backend = self.socket.core.backend.borrow();
        backend
            .features()
            .is_some_and(|f| f.has(Feature::MultishotRecv))
    }
}

impl Drop for RecvStream<'_> {
    fn drop(&mut self) {
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

/// The I/O methods every stream type shares, forwarding to its `socket` field.
macro_rules! stream_methods {
    () => {
        /// Reads into `buf` (from its start, up to its capacity); returns the count and the
        /// buffer. The op can be bounded first: `stream.read(buf).timeout(d).await`. `Ok(0)`
        /// is end of stream (or a buffer with no capacity).
        ///
        /// # Examples
        ///
        /// Shown on a [`UnixStream`](crate::net::UnixStream) pair;
        /// [`TcpStream`](crate::net::TcpStream) has the same method.
        ///
        /// ```
        /// use std::time::Duration;
        ///
        /// # ring_rt::Runtime::new()?.block_on(async {
        /// let (a, b) = ring_rt::net::UnixStream::pair()?;
        /// a.write_all(&b"hello"[..]).await.0?;
        /// let (n, buf) = b.read(Vec::with_capacity(64)).await;
        /// assert_eq!(n?, 5);
        /// assert_eq!(buf, b"hello"); // the bytes read are the Vec's length
        ///
        /// // Nothing more arrives: bound the read by a timeout.
        /// let (res, _buf) = b.read(buf).timeout(Duration::from_millis(10)).await;
        /// assert_eq!(res.unwrap_err().kind(), std::io::ErrorKind::TimedOut);
        /// # std::io::Result::Ok(()) })?;
        /// # std::io::Result::Ok(())
        /// ```
        pub fn read<B: IoBufMut>(
            &self,
            buf: B,
        ) -> Pending<'_, impl OpDef<Output = (io::Result<usize>, B)>> {
            self.socket.read(buf)
        }

        /// Writes `buf`'s initialised bytes once (possibly partially); returns the count and
        /// the buffer. Use [`write_all`](Self::write_all) to send everything.
        ///
        /// # Examples
        ///
        /// Shown on a [`UnixStream`](crate::net::UnixStream) pair;
        /// [`TcpStream`](crate::net::TcpStream) has the same method.
        ///
        /// ```
        /// use ring_rt::buf::IoBuf;
        ///
        /// # ring_rt::Runtime::new()?.block_on(async {
        /// let (a, b) = ring_rt::net::UnixStream::pair()?;
        /// let data = b"header:body".to_vec();
        /// let (n, slice) = a.write(data.slice(..7)).await; // just "header:"
        /// assert_eq!(n?, 7);
        /// let data = slice.into_inner(); // the whole Vec back
        /// # let _ = (data, b);
        /// # std::io::Result::Ok(()) })?;
        /// # std::io::Result::Ok(())
        /// ```
        pub fn write<B: IoBuf>(
            &self,
            buf: B,
        ) -> Pending<'_, impl OpDef<Output = (io::Result<usize>, B)>> {
            self.socket.write(buf)
        }

        /// Writes all of `buf`'s initialised bytes, looping over short writes; `WriteZero` if
        /// the peer accepts nothing. The buffer comes back on success and on error.
        ///
        /// # Examples
        ///
        /// Shown on a [`UnixStream`](crate::net::UnixStream) pair;
        /// [`TcpStream`](crate::net::TcpStream) has the same method.
        ///
        /// ```
        /// # ring_rt::Runtime::new()?.block_on(async {
        /// let (a, b) = ring_rt::net::UnixStream::pair()?;
        /// let (res, buf) = a.write_all(vec![b'x'; 1000]).await;
        /// res?;
        /// assert_eq!(buf.len(), 1000); // reuse it for the next message
        /// let mut received = 0;
        /// while received < 1000 {
        ///     let (n, _) = b.read(Vec::with_capacity(1000)).await;
        ///     received += n?;
        /// }
        /// # std::io::Result::Ok(()) })?;
        /// # std::io::Result::Ok(())
        /// ```
        pub fn write_all<B: IoBuf>(
            &self,
            buf: B,
        ) -> impl std::future::Future<Output = (io::Result<()>, B)> + '_ {
            self.socket.write_all(buf)
        }

        /// Receives into a buffer from the worker's shared pool; `Ok(None)` at end of
        /// stream. While the connection is idle it holds no buffer. Dropping the
        /// [`PooledBuf`] returns the buffer to the pool.
        ///
        /// # Examples
        ///
        /// Shown on a [`UnixStream`](crate::net::UnixStream) pair;
        /// [`TcpStream`](crate::net::TcpStream) has the same method.
        ///
        /// ```
        /// # ring_rt::Runtime::new()?.block_on(async {
        /// let (a, b) = ring_rt::net::UnixStream::pair()?;
        /// a.write_all(&b"pooled"[..]).await.0?;
        /// let buf = b.recv_pooled().await?.expect("data, not end of stream");
        /// assert_eq!(&buf[..], b"pooled");
        /// drop(buf); // back to the pool
        /// drop(a);
        /// assert!(b.recv_pooled().await?.is_none()); // end of stream
        /// # std::io::Result::Ok(()) })?;
        /// # std::io::Result::Ok(())
        /// ```
        pub fn recv_pooled(
            &self,
        ) -> impl std::future::Future<Output = io::Result<Option<PooledBuf>>> + '_ {
            self.socket.recv_pooled()
        }

        /// Received data as a stream of pooled buffers (multishot recv where available):
        /// see [`RecvStream`].
        ///
        /// # Examples
        ///
        /// An echo loop, shown on a [`UnixStream`](crate::net::UnixStream) pair;
        /// [`TcpStream`](crate::net::TcpStream) has the same method.
        ///
        /// ```
        /// # ring_rt::Runtime::new()?.block_on(async {
        /// let (client, server) = ring_rt::net::UnixStream::pair()?;
        /// let echo = ring_rt::spawn(async move {
        ///     let mut rx = server.recv_stream();
        ///     while let Some(Ok(buf)) = rx.next().await {
        ///         // A pooled buffer is an IoBuf: send it straight back.
        ///         if server.write_all(buf).await.0.is_err() {
        ///             break;
        ///         }
        ///     }
        /// });
        /// client.write_all(&b"echo me"[..]).await.0?;
        /// let (n, buf) = client.read(vec![0; 16]).await;
        /// assert_eq!(&buf[..n?], b"echo me");
        /// drop(client);
        /// echo.await.unwrap();
        /// # std::io::Result::Ok(()) })?;
        /// # std::io::Result::Ok(())
        /// ```
        pub fn recv_stream(&self) -> RecvStream<'_> {
            RecvStream::new(&self.socket)
        }

        /// Shuts down the read, write or both halves (`shutdown(2)`); after
        /// `Shutdown::Write` the peer reads end of stream.
        ///
        /// # Examples
        ///
        /// Shown on a [`UnixStream`](crate::net::UnixStream) pair;
        /// [`TcpStream`](crate::net::TcpStream) has the same method.
        ///
        /// ```
        /// use std::net::Shutdown;
        ///
        /// # ring_rt::Runtime::new()?.block_on(async {
        /// let (a, b) = ring_rt::net::UnixStream::pair()?;
        /// a.shutdown(Shutdown::Write)?;
        /// let (n, _) = b.read(vec![0; 8]).await;
        /// assert_eq!(n?, 0);
        /// # std::io::Result::Ok(()) })?;
        /// # std::io::Result::Ok(())
        /// ```
        pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
            self.socket.shutdown(how)
        }
    };
}

/// `AsRawFd` and `Debug` for a type whose `socket` field owns the fd.
macro_rules! socket_traits {
    ($($ty:ident),+) => {$(
        impl std::os::fd::AsRawFd for $ty {
            fn as_raw_fd(&self) -> std::os::fd::RawFd {
                self.socket.fd()
            }
        }

        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($ty)).field("fd", &self.socket.fd()).finish()
            }
        }
    )+};
}

pub(crate) use {socket_traits, stream_methods};
