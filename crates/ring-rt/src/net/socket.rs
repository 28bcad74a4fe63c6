//! The socket under every stream and datagram type: an fd on one worker, closed through
//! that worker's backend so the close is ordered after ops already queued on the fd.

use std::cell::{Cell, OnceCell};
use std::future::{poll_fn, Future};
use std::io;
use std::net::Shutdown;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::rc::Rc;

use socket2::{Domain, SockAddr, Type};

use super::recv_stream::RecvStream;
use super::write_all::WriteAll;
use crate::backend::direct::{encode, slot_of};
use crate::backend::Capability;
use crate::buf::{IoBuf, IoBufMut};
use crate::op::link::Pending;
use crate::op::net::{Connect, Recv, Send, SendZc};
#[cfg(any(feature = "tokio-io", feature = "futures-io"))]
use crate::op::pollable::WaitReady;
use crate::op::unclaimed::{TurnSlot, Unclaimed};
use crate::op::Op;
use crate::pool::PooledBuf;
use crate::worker::{Core, GivenAway};

pub(crate) struct Socket {
    /// The fd ops name: the socket's own, or (a direct descriptor) its slot in the
    /// worker's ring, encoded as a number below -1 (see `backend::direct`).
    fd: RawFd,
    /// A direct descriptor's regular fd, once something needed one (-1 until then): plain
    /// syscalls use it; ops keep naming the slot.
    installed: Cell<RawFd>,
    pub(crate) core: Rc<Core>,
    /// What dropped receives got, for the next receive (made on the first receive).
    unclaimed: OnceCell<Rc<Unclaimed>>,
}

impl Socket {
    /// Adopts `fd` on the current worker, in the blocking mode its backend wants
    /// (io_uring: blocking, the kernel waits for readiness itself; epoll: non-blocking).
    pub(crate) fn from_owned(core: Rc<Core>, fd: OwnedFd) -> io::Result<Socket> {
        core.adopt_socket(fd.as_raw_fd())?;
        Ok(Socket {
            fd: fd.into_raw_fd(),
            installed: Cell::new(-1),
            core,
            unclaimed: OnceCell::new(),
        })
    }

    /// Adopts `fd`, a socket a caller handed over (`from_std`), on the current worker, if it
    /// is what `kind` (the ring-rt type taking it) adopts; else `InvalidInput` saying what
    /// is wrong (see [`Adopts`]).
    pub(crate) fn from_std(fd: OwnedFd, kind: &Adopts) -> io::Result<Socket> {
        kind.check(&socket2::SockRef::from(&fd))?;
        Socket::from_owned(Core::current_io()?, fd)
    }

    /// Adopts a direct descriptor of `core`'s ring (an accepted connection, or one another
    /// worker sent): the socket closes the slot when dropped. Accepted sockets are
    /// blocking, as io_uring wants them.
    pub(crate) fn from_direct(core: Rc<Core>, slot: ring_core::direct::OwnedSlot) -> Socket {
        Socket {
            fd: encode(slot.into_raw()),
            installed: Cell::new(-1),
            core,
            unclaimed: OnceCell::new(),
        }
    }

    /// Whether this is a direct descriptor (see `Builder::direct_descriptors`).
    pub(crate) fn is_direct(&self) -> bool {
        slot_of(self.fd).is_some()
    }

    /// The fd plain syscalls use: the socket's own, or a direct descriptor's installed one,
    /// installed now if it has none yet (an `io_uring_enter` of its own; `Err` when the
    /// backend is busy, inside a waker's `clone`, or the fd table is full).
    pub(crate) fn os_fd(&self) -> io::Result<RawFd> {
        let Some(slot) = slot_of(self.fd) else {
            return Ok(self.fd);
        };
        if self.installed.get() >= 0 {
            return Ok(self.installed.get());
        }
        let fd = self.core.install_direct(slot)?.into_raw_fd();
        self.installed.set(fd);
        Ok(fd)
    }

    /// Adds what identifies the socket to a `Debug` struct: its fd, or its direct slot.
    pub(crate) fn fmt_fields<'a, 'b>(
        &self,
        mut f: std::fmt::DebugStruct<'a, 'b>,
    ) -> std::fmt::DebugStruct<'a, 'b> {
        match slot_of(self.fd) {
            Some(slot) => {
                f.field("direct_slot", &slot);
                if let Some(fd) = self.os_fd_now() {
                    f.field("fd", &fd);
                }
            }
            None => {
                f.field("fd", &self.fd);
            }
        }
        f
    }

    /// The fd plain syscalls may use without installing one: `None` for a direct
    /// descriptor that has none yet.
    fn os_fd_now(&self) -> Option<RawFd> {
        match slot_of(self.fd) {
            None => Some(self.fd),
            Some(_) => Some(self.installed.get()).filter(|&fd| fd >= 0),
        }
    }

    /// The socket's unclaimed receives (see [`Unclaimed`]).
    pub(crate) fn unclaimed(&self) -> Rc<Unclaimed> {
        self.unclaimed.get_or_init(Unclaimed::new).clone()
    }

    /// A new socket of `domain`/`ty` on the current worker.
    pub(crate) fn new(domain: Domain, ty: Type) -> io::Result<Socket> {
        let core = Core::current_io()?;
        let s = socket2::Socket::new(domain, ty.cloexec(), None)?;
        Socket::from_owned(core, s.into())
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.fd
    }

    /// A socket2 view for options and addresses (never closes the fd); a direct
    /// descriptor gets its fd installed first.
    pub(crate) fn with_socket2<T>(
        &self,
        f: impl FnOnce(&socket2::Socket) -> io::Result<T>,
    ) -> io::Result<T> {
        with_fd(self.os_fd()?, f)
    }

    /// Sends what of `bufs` the socket's buffer takes now, straight from the caller's
    /// memory: a plain nonblocking `sendmsg`, which leaves nothing with the kernel once it
    /// returns. `WouldBlock` when the buffer is full.
    ///
    /// A direct descriptor with no fd yet answers `WouldBlock` without a syscall: installing
    /// an fd to save an op would cost more than the op.
    #[cfg(any(feature = "tokio-io", feature = "futures-io"))]
    pub(crate) fn send_now(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        if self.core.refuses_io() {
            // As an op would be refused: nothing moves once the runtime is going (review
            // DC: an adapter's write sent after the drop; review DF: one a task's
            // destructor made during the shutdown).
            return Err(crate::completion::Refused::ShutDown.error());
        }
        let Some(fd) = self.os_fd_now() else {
            return Err(io::ErrorKind::WouldBlock.into());
        };
        with_fd(fd, |s| {
            s.send_vectored_with_flags(bufs, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
        })
    }

    /// Whether a receive would end now: data, end of stream or an error waits (a peek
    /// that never blocks, whatever the fd's blocking mode). A direct descriptor with no fd
    /// cannot be asked without installing one: false, the answer that lets another
    /// receive go first (its only use).
    pub(crate) fn has_data_now(&self) -> bool {
        let Some(fd) = self.os_fd_now() else {
            return false;
        };
        let mut byte = [std::mem::MaybeUninit::<u8>::uninit()];
        let peeked = with_fd(fd, |s| {
            s.recv_with_flags(&mut byte, libc::MSG_PEEK | libc::MSG_DONTWAIT)
        });
        !matches!(peeked, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
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

    /// A read on a stream socket that borrows nothing, for a caller that keeps this
    /// socket open beside the op for as long as the op exists (an adapter holding the
    /// stream's `Rc` next to it): the op names the socket's fd, whose number a closed
    /// socket would let something else take.
    #[cfg(any(feature = "tokio-io", feature = "futures-io"))]
    pub(crate) fn read_unbound(&self, buf: Vec<u8>) -> Op<Recv<Vec<u8>>> {
        self.read(buf).into_op()
    }

    /// A write-all that borrows nothing, on the terms of [`read_unbound`](Self::read_unbound).
    #[cfg(any(feature = "tokio-io", feature = "futures-io"))]
    pub(crate) fn write_all_unbound(&self, buf: Vec<u8>) -> WriteAll<'static, Vec<u8>> {
        WriteAll::unbound(self, buf)
    }

    /// A wait until the socket takes data, on the terms of
    /// [`read_unbound`](Self::read_unbound), for a caller whose [`send_now`](Self::send_now)
    /// met a full buffer; `None` for a direct descriptor with no fd yet, whose `send_now`
    /// never tried.
    #[cfg(any(feature = "tokio-io", feature = "futures-io"))]
    pub(crate) fn writable_unbound(&self) -> Option<Op<WaitReady>> {
        self.os_fd_now()?;
        let wait = WaitReady {
            fd: self.fd,
            events: libc::POLLOUT,
        };
        Some(Op::new(self.core.clone(), wait))
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
                unclaimed: self.unclaimed(),
                turn: TurnSlot::default(),
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
                all: false,
            },
        )
    }

    /// A hand-written future ([`WriteAll`]), not an `async fn`: every connection's task holds
    /// this future's state while it writes.
    pub(crate) fn write_all<B: IoBuf>(&self, buf: B) -> WriteAll<'_, B> {
        WriteAll::new(self, buf)
    }

    pub(crate) async fn send_zc<B: IoBuf>(&self, buf: B) -> (io::Result<usize>, B) {
        if !self.core.supports(Capability::SendZc) {
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

    /// One chunk from the worker's pool: a receive stream that never goes multishot, so
    /// nothing stays armed once the chunk is in.
    pub(crate) fn recv_pooled(&self) -> impl Future<Output = io::Result<Option<PooledBuf>>> + '_ {
        let mut rx = RecvStream::single_shot(self);
        poll_fn(move |cx| rx.poll_chunk(cx))
    }

    /// `shutdown(2)`; a direct descriptor's goes through the ring, behind the ops queued
    /// for it (no fd needed).
    pub(crate) fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        match slot_of(self.fd) {
            Some(slot) => self.core.shutdown_direct(slot, how)?,
            None => self.with_socket2(|s| s.shutdown(how))?,
        }
        // A syscall now gives EPIPE or end of file at once, though epoll reports nothing.
        self.core.forget_drained(self.fd);
        Ok(())
    }

    pub(crate) fn local_addr(&self) -> io::Result<SockAddr> {
        self.with_socket2(|s| s.local_addr())
    }

    pub(crate) fn peer_addr(&self) -> io::Result<SockAddr> {
        self.with_socket2(|s| s.peer_addr())
    }

    /// Gives up the fd, or gives the socket back when that would lose received data (see
    /// [`Unclaimed::busy_reason`]).
    pub(crate) fn into_owned(self) -> Result<OwnedFd, (Socket, io::Error)> {
        if let Err(e) = self.movable() {
            return Err((self, e));
        }
        if !self.is_direct() {
            return Ok(self.into_owned_now());
        }
        match self.os_fd() {
            Ok(_) => Ok(self.into_installed()),
            Err(e) => Err((self, e)),
        }
    }

    /// Whether the socket may leave this worker without losing received data (see
    /// [`Unclaimed::busy_reason`]): `ResourceBusy` with why not.
    pub(crate) fn movable(&self) -> io::Result<()> {
        match self.unclaimed.get().and_then(|u| u.busy_reason()) {
            Some(why) => Err(io::Error::new(io::ErrorKind::ResourceBusy, why)),
            None => Ok(()),
        }
    }

    /// A direct descriptor's installed fd goes out; the slot is closed (behind the ops
    /// queued for it, which reach the same socket the fd does).
    fn into_installed(self) -> OwnedFd {
        let fd = self.installed.replace(-1);
        drop(self);
        // SAFETY: the installed fd was this socket's alone; its field now says -1, so the
        // drop above closed only the slot, and ownership moves here.
        unsafe { OwnedFd::from_raw_fd(fd) }
    }

    fn into_owned_now(mut self) -> OwnedFd {
        // The backend must forget the fd (epoll's registration, io_uring's queued SQEs):
        // its new owner will close it without us.
        let given = self.core.give_away_fd(std::os::fd::AsFd::as_fd(&self));
        // -1 tells Drop there is nothing left to close; the core handle drops normally.
        let fd = std::mem::replace(&mut self.fd, -1);
        drop(self);
        match given {
            GivenAway::Duplicate(dup) => dup,
            // SAFETY: `self` owned the fd; its field now says -1, so its drop did not
            // close it and ownership moves here.
            GivenAway::Original => unsafe { OwnedFd::from_raw_fd(fd) },
        }
    }
}

/// A direct descriptor gets its fd installed (see [`Socket::os_fd`]); -1 when that fails,
/// which any syscall refuses with `EBADF`.
impl AsRawFd for Socket {
    fn as_raw_fd(&self) -> RawFd {
        self.os_fd().unwrap_or(-1)
    }
}

/// A direct descriptor gets its fd installed (see [`Socket::os_fd`]), and panics when that
/// fails: a `BorrowedFd` must be an open fd.
impl std::os::fd::AsFd for Socket {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        let fd = match self.os_fd() {
            Ok(fd) => fd,
            Err(e) => panic!("as_fd: no fd could be installed for a direct descriptor: {e}"),
        };
        // SAFETY: the socket owns `fd` (its own, or its installed one) and closes it only
        // when dropped, which the borrow of `self` prevents for the BorrowedFd's lifetime.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        // What is queued on the socket goes first: a listener's connections that dropped
        // accepts took are closed with it, and those that are direct descriptors queue
        // their closes, which the close below submits (outside a loop turn, or after the
        // runtime, nothing else would: their clients hung, review AQ).
        drop(self.unclaimed.take());
        let installed = self.installed.get();
        if installed >= 0 {
            self.core.close(installed);
        }
        // -1: given away. Below: a direct descriptor, closed by its ring.
        if self.fd != -1 {
            self.core.close(self.fd);
        }
    }
}

/// A socket2 view of `fd` for the call (never closes it).
fn with_fd<T>(fd: RawFd, f: impl FnOnce(&socket2::Socket) -> io::Result<T>) -> io::Result<T> {
    // SAFETY: the caller's socket keeps `fd` open for the call; ManuallyDrop keeps socket2
    // from closing it.
    let s = std::mem::ManuallyDrop::new(unsafe { socket2::Socket::from_raw_fd(fd) });
    f(&s)
}

/// The I/O methods every stream type shares, forwarding to its `socket` field.
macro_rules! stream_methods {
    () => {
        /// Gives bytes read ahead but never handed out (by an adapter being dropped) back
        /// to the stream: its next receive returns them first.
        #[cfg(any(feature = "tokio-io", feature = "futures-io"))]
        pub(crate) fn unread(&self, bytes: Vec<u8>) {
            if let Some(op) = self.socket.unclaimed().unread(bytes) {
                // A read holding the turn waits for newer bytes: it comes back for these.
                self.socket.core.recall_receive(self.socket.fd(), op);
            }
        }

        /// A read that borrows nothing, for an adapter that keeps this stream (its `Rc`)
        /// beside the op for as long as the op exists: the op names the stream's fd.
        #[cfg(any(feature = "tokio-io", feature = "futures-io"))]
        pub(crate) fn read_unbound(
            &self,
            buf: Vec<u8>,
        ) -> crate::op::Op<crate::op::net::Recv<Vec<u8>>> {
            self.socket.read_unbound(buf)
        }

        /// A write-all that borrows nothing, on the terms of `read_unbound`.
        #[cfg(any(feature = "tokio-io", feature = "futures-io"))]
        pub(crate) fn write_all_unbound(
            &self,
            buf: Vec<u8>,
        ) -> crate::net::WriteAll<'static, Vec<u8>> {
            self.socket.write_all_unbound(buf)
        }

        /// Sends what of `bufs` the socket's buffer takes now, from the caller's memory
        /// (an adapter's write, which has the bytes only for the call); `WouldBlock` when
        /// the buffer is full.
        #[cfg(any(feature = "tokio-io", feature = "futures-io"))]
        pub(crate) fn send_now(&self, bufs: &[std::io::IoSlice<'_>]) -> io::Result<usize> {
            self.socket.send_now(bufs)
        }

        /// A wait until the stream takes data, for an adapter whose `send_now` met a full
        /// buffer (see `Socket::writable_unbound`).
        #[cfg(any(feature = "tokio-io", feature = "futures-io"))]
        pub(crate) fn writable_unbound(
            &self,
        ) -> Option<crate::op::Op<crate::op::pollable::WaitReady>> {
            self.socket.writable_unbound()
        }

        /// Whether this stream's sends go to the kernel in batches (see
        /// `Capability::BatchedSends`).
        #[cfg(any(feature = "tokio-io", feature = "futures-io"))]
        pub(crate) fn batches_sends(&self) -> bool {
            self.socket
                .core
                .supports(crate::backend::Capability::BatchedSends)
        }

        /// Reads into `buf` (from its start, up to its capacity); returns the count and the
        /// buffer. The op can be bounded first: `stream.read(buf).timeout(d).await`. `Ok(0)`
        /// is end of stream (or a buffer with no capacity).
        ///
        /// Cancel-safe: a read dropped after the kernel received into its buffer (a
        /// `timeout` or a `select` that lost the race) hands those bytes to the stream, and
        /// the next read (or `recv_pooled`/`recv_stream`) returns them first, in order.
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
        /// Not cancel-safe the way [`read`](Self::read) is: a write dropped once started
        /// (a `timeout` or `select` around it) may still send some or all of its bytes, and
        /// the count goes with the future (on io_uring the kernel finishes a send it has
        /// taken). To bound a write and learn what it sent, bound the op itself:
        /// `stream.write(buf).timeout(d)` gives the count, or `TimedOut` when nothing went.
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
        /// the peer accepts nothing. The buffer comes back on success and on error. Dropped
        /// before it finishes, it may have sent a part of `buf` (see [`write`](Self::write)).
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
        /// Cancel-safe like [`read`](Self::read): data a dropped `recv_pooled` received
        /// goes to the stream's next receive.
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

/// `AsFd`, `AsRawFd` and `Debug` for a type whose `socket` field owns the fd (as std's
/// and tokio's sockets have them: for options and syscalls the type does not wrap; the
/// blocking mode is the backend's and must not be changed: receives and sends never block
/// whatever it is, but an epoll accept on a listener made blocking waits on the loop thread).
macro_rules! socket_traits {
    ($($ty:ident),+) => {$(
        /// A direct descriptor (see
        /// [`Builder::direct_descriptors`](crate::Builder::direct_descriptors)) gets a
        /// regular fd installed on first use, kept until the stream is dropped; -1 when none
        /// can be (the fd table is full, or this is called from inside the runtime's own
        /// bookkeeping, a waker's `clone`), which every syscall refuses with `EBADF`.
        impl std::os::fd::AsRawFd for $ty {
            fn as_raw_fd(&self) -> std::os::fd::RawFd {
                std::os::fd::AsRawFd::as_raw_fd(&self.socket)
            }
        }

        /// A direct descriptor gets a regular fd installed on first use, as for
        /// `as_raw_fd`.
        ///
        /// # Panics
        /// On a direct descriptor for which no fd can be installed (the fd table is full,
        /// or this is called from inside the runtime's own bookkeeping): a `BorrowedFd`
        /// must be an open fd. `as_raw_fd` answers -1 instead.
        impl std::os::fd::AsFd for $ty {
            fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
                std::os::fd::AsFd::as_fd(&self.socket)
            }
        }


        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.socket.fmt_fields(f.debug_struct(stringify!($ty))).finish()
            }
        }
    )+};
}

pub(crate) use {socket_traits, stream_methods};

/// What a ring-rt socket type adopts in `from_std`. A stream type reads a `SOCK_SEQPACKET`
/// or datagram socket's records as stream bytes, and on epoll a short record marks it
/// drained with more queued (the next read then waits for ever); a UDP or TCP type given a
/// Unix socket cannot name a datagram's sender or a connection's peer (a `sockaddr_un` is
/// no `SocketAddr`), and a Unix type given an IP socket the other way round; and a
/// listener's `accept` fails on a socket that does not listen, as a stream's reads do on one
/// that does. The protocol is not looked at: an MPTCP socket is a TCP stream to its user,
/// and UDP-Lite, one-to-one SCTP and ICMP "ping" sockets read and write as their type does.
pub(crate) struct Adopts {
    /// The type taking it, for errors ("a TcpStream").
    what: &'static str,
    ty: Type,
    families: &'static [Domain],
    /// Whether it must listen (`listen(2)` called: `SO_ACCEPTCONN`), or must not.
    listens: bool,
}

const IP: &[Domain] = &[Domain::IPV4, Domain::IPV6];

pub(crate) const TCP_STREAM: Adopts = Adopts {
    what: "a TcpStream",
    ty: Type::STREAM,
    families: IP,
    listens: false,
};
pub(crate) const TCP_LISTENER: Adopts = Adopts {
    what: "a TcpListener",
    listens: true,
    ..TCP_STREAM
};
pub(crate) const UDP_SOCKET: Adopts = Adopts {
    what: "a UdpSocket",
    ty: Type::DGRAM,
    families: IP,
    listens: false,
};
pub(crate) const UNIX_STREAM: Adopts = Adopts {
    what: "a UnixStream",
    ty: Type::STREAM,
    families: &[Domain::UNIX],
    listens: false,
};
pub(crate) const UNIX_LISTENER: Adopts = Adopts {
    what: "a UnixListener",
    listens: true,
    ..UNIX_STREAM
};

impl Adopts {
    /// `Ok` if `sock` is what this type adopts; else `InvalidInput` naming what is wrong.
    fn check(&self, sock: &socket2::SockRef<'_>) -> io::Result<()> {
        let what = self.what;
        let refuse = |msg: String| Err(io::Error::new(io::ErrorKind::InvalidInput, msg));
        let got = match sock.r#type() {
            Ok(got) => got,
            // ENOTSOCK: a file, a pipe; EBADF: an `O_PATH` fd, which takes no getsockopt.
            Err(err) if matches!(err.raw_os_error(), Some(libc::ENOTSOCK | libc::EBADF)) => {
                return refuse(format!("{what} needs a socket; this fd is not one ({err})"));
            }
            Err(err) => return Err(err),
        };
        let family = sock.domain()?;
        if got != self.ty || !self.families.contains(&family) {
            let wanted: Vec<String> = self.families.iter().map(|&f| family_name(f)).collect();
            return refuse(format!(
                "{what} needs a {} socket of {}; this one is {} of {}",
                type_name(self.ty),
                wanted.join(" or "),
                type_name(got),
                family_name(family)
            ));
        }
        if self.ty == Type::STREAM && sock.is_listener()? != self.listens {
            return refuse(if self.listens {
                format!("{what} needs a listening socket; this one does not listen (SO_ACCEPTCONN is 0)")
            } else {
                format!("{what} needs a connection; this socket is a listener")
            });
        }
        Ok(())
    }
}

/// A socket family's name, for errors.
fn family_name(family: Domain) -> String {
    match family {
        Domain::IPV4 => "AF_INET".into(),
        Domain::IPV6 => "AF_INET6".into(),
        Domain::UNIX => "AF_UNIX".into(),
        other => format!("family {}", i32::from(other)),
    }
}

/// A socket type's name, for errors.
fn type_name(ty: Type) -> String {
    match ty {
        Type::STREAM => "SOCK_STREAM".into(),
        Type::DGRAM => "SOCK_DGRAM".into(),
        Type::SEQPACKET => "SOCK_SEQPACKET".into(),
        Type::RAW => "SOCK_RAW".into(),
        other => format!("type {}", i32::from(other)),
    }
}
