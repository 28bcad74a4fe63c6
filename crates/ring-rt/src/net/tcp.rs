//! TCP: `TcpListener` (multishot accept where the kernel has it) and `TcpStream`.

use std::future::Future;
use std::io;
use std::net::{Shutdown, SocketAddr, ToSocketAddrs};
use std::os::fd::{OwnedFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use socket2::{Domain, SockAddr, Type};

use super::into_fd::IntoFdError;
use super::recv_stream::RecvStream;
use super::socket::{socket_traits, stream_methods, Socket, TCP_LISTENER, TCP_STREAM};
use ring_core::direct::DirectCloser;

use crate::backend::Capability;
use crate::buf::{IoBuf, IoBufMut};
use crate::op::link::Pending;
use crate::op::multishot::Multishot;
use crate::op::net::{Accept, AcceptMulti, Conn};
use crate::op::Op;
use crate::op::OpDef;
use crate::pool::PooledBuf;
use crate::time::Sleep;
use crate::worker::Core;

pub use crate::op::net::ACCEPT_QUEUE_MAX;

/// Listen backlog used by [`TcpListener::bind`].
const BACKLOG: i32 = 1024;

fn resolve(addr: impl ToSocketAddrs) -> io::Result<SocketAddr> {
    addr.to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "address resolved to nothing"))
}

fn to_inet(addr: SockAddr) -> io::Result<SocketAddr> {
    addr.as_socket()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not an inet address"))
}

/// Options for [`TcpListener::bind_with`].
///
/// # Examples
///
/// ```
/// use ring_rt::net::tcp::ListenOptions;
///
/// let opts = ListenOptions { reuse_port: true, backlog: 128, ..ListenOptions::default() };
/// assert!(opts.reuse_addr);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct ListenOptions {
    /// `SO_REUSEADDR` (default on).
    pub reuse_addr: bool,
    /// `SO_REUSEPORT`: one listener per worker on the same port, the kernel spreading
    /// connections (default off).
    pub reuse_port: bool,
    /// The accept backlog (default 1024).
    pub backlog: i32,
}

impl Default for ListenOptions {
    fn default() -> ListenOptions {
        ListenOptions {
            reuse_addr: true,
            reuse_port: false,
            backlog: BACKLOG,
        }
    }
}

/// A TCP listening socket.
///
/// # Examples
///
/// An echo round trip on an ephemeral port, both ends in one runtime:
///
/// ```
/// use ring_rt::net::{TcpListener, TcpStream};
///
/// # fn main() -> std::io::Result<()> {
/// ring_rt::Runtime::new()?.block_on(async {
///     let listener = TcpListener::bind("127.0.0.1:0")?;
///     let addr = listener.local_addr()?;
///     let server = ring_rt::spawn(async move {
///         let (stream, _peer) = listener.accept().await?;
///         let (n, buf) = stream.read(Vec::with_capacity(64)).await; // len becomes n
///         let n = n?;
///         stream.write_all(buf).await.0?;
///         std::io::Result::Ok(n)
///     });
///     let client = TcpStream::connect(addr).await?;
///     client.write_all(&b"ping"[..]).await.0?;
///     let (n, buf) = client.read(vec![0; 64]).await;
///     assert_eq!(&buf[..n?], b"ping");
///     assert_eq!(server.await.unwrap()?, 4);
///     Ok(())
/// })
/// # }
/// ```
pub struct TcpListener {
    socket: Socket,
}

impl TcpListener {
    /// Binds with `SO_REUSEADDR` and a backlog of 1024, and listens. Port 0 picks a free
    /// port (read it back with [`local_addr`](Self::local_addr)).
    ///
    /// # Examples
    ///
    /// ```
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let listener = ring_rt::net::TcpListener::bind("127.0.0.1:0")?;
    /// assert_ne!(listener.local_addr()?.port(), 0);
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn bind(addr: impl ToSocketAddrs) -> io::Result<TcpListener> {
        TcpListener::bind_with(addr, ListenOptions::default())
    }

    /// Binds with explicit options (e.g. `reuse_port` for one listener per worker).
    ///
    /// # Examples
    ///
    /// Two listeners on one port, as one per worker would be:
    ///
    /// ```
    /// use ring_rt::net::tcp::{ListenOptions, TcpListener};
    ///
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let opts = ListenOptions { reuse_port: true, ..ListenOptions::default() };
    /// let first = TcpListener::bind_with("127.0.0.1:0", opts)?;
    /// let second = TcpListener::bind_with(first.local_addr()?, opts)?;
    /// assert_eq!(first.local_addr()?, second.local_addr()?);
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn bind_with(addr: impl ToSocketAddrs, opts: ListenOptions) -> io::Result<TcpListener> {
        let addr = resolve(addr)?;
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM)?;
        socket.with_socket2(|s| {
            s.set_reuse_address(opts.reuse_addr)?;
            s.set_reuse_port(opts.reuse_port)?;
            s.bind(&addr.into())?;
            s.listen(opts.backlog)
        })?;
        Ok(TcpListener { socket })
    }

    /// Adopts a listening std listener on the current worker (it is switched to the
    /// blocking mode the backend wants). The listener must already listen, as std's
    /// `TcpListener::bind` leaves it. An fd that is not a listening `SOCK_STREAM` socket of
    /// `AF_INET` or `AF_INET6` (`listen(2)` called) is refused (`InvalidInput`): a Unix
    /// listener's peers have no `SocketAddr`, and `accept` fails on a socket that does not
    /// listen.
    ///
    /// The blocking mode is the socket's, shared by every dup of its fd (`try_clone`): a dup
    /// kept elsewhere sees the switch, and a dup adopted by a runtime of the other backend
    /// (or made blocking by its owner) switches it back, after which an epoll runtime's
    /// accept can block its loop thread: `accept4` has no flag to refuse to wait. Adopt one
    /// listener in one runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    /// let listener = ring_rt::net::TcpListener::from_std(std_listener)?;
    /// let client = ring_rt::net::TcpStream::connect(listener.local_addr()?).await?;
    /// let (_server, peer) = listener.accept().await?;
    /// assert_eq!(peer, client.local_addr()?);
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn from_std(listener: std::net::TcpListener) -> io::Result<TcpListener> {
        Ok(TcpListener {
            socket: Socket::from_std(listener.into(), &TCP_LISTENER)?,
        })
    }

    /// Whether the socket is a TCP socket in the listening state (one shut down, never
    /// listened on, or not TCP at all never accepts again).
    pub(crate) fn is_listening(&self) -> bool {
        accept_backlog(self.socket.fd()).is_some()
    }

    /// The bound address.
    ///
    /// # Examples
    ///
    /// ```
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let listener = ring_rt::net::TcpListener::bind("127.0.0.1:0")?;
    /// assert!(listener.local_addr()?.ip().is_loopback());
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        to_inet(self.socket.local_addr()?)
    }

    /// Accepts one connection, with the peer's address. Dropping the future in flight
    /// cancels the accept; a connection the kernel accepted anyway stays with the listener,
    /// for the next `accept` or `incoming`.
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_rt::net::{TcpListener, TcpStream};
    ///
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let listener = TcpListener::bind("127.0.0.1:0")?;
    /// let client = TcpStream::connect(listener.local_addr()?).await?;
    /// let (server, peer) = listener.accept().await?;
    /// assert_eq!(peer, client.local_addr()?);
    /// assert_eq!(server.peer_addr()?, peer);
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub async fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        loop {
            let (conn, peer) = accept_one(&self.socket, None).await?;
            let stream = TcpStream::from_accepted(&self.socket.core, conn)?;
            // Only a direct descriptor a dropped `incoming` took comes without its peer:
            // asked now (which installs its fd), and passed over if the peer is gone.
            let peer = match peer {
                Some(peer) => peer,
                None => match stream.socket.peer_addr() {
                    Ok(peer) => peer,
                    Err(_) => continue,
                },
            };
            return Ok((stream, to_inet(peer)?));
        }
    }

    /// Connections as they arrive, via one multishot accept where the kernel has it (5.19+).
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_rt::net::{TcpListener, TcpStream};
    ///
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let listener = TcpListener::bind("127.0.0.1:0")?;
    /// let addr = listener.local_addr()?;
    /// let clients = [TcpStream::connect(addr).await?, TcpStream::connect(addr).await?];
    /// let mut incoming = listener.incoming();
    /// for _ in &clients {
    ///     let stream = incoming.next().await.expect("never None")?;
    ///     assert_eq!(stream.local_addr()?, addr);
    /// }
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn incoming(&self) -> Incoming<'_> {
        Incoming {
            socket: &self.socket,
            multishot: None,
            single: None,
            backoff: None,
            backoff_ms: 0,
        }
    }
}

/// One accept: a new connection and its peer. A connection an earlier, dropped accept took
/// comes first. Dropped in flight, the accept is cancelled, and a connection it got anyway
/// stays with the listener for the next accept.
///
/// `direct`: into the worker's direct-descriptor table (see `Builder::direct_descriptors`).
pub(crate) fn accept_one(socket: &Socket, direct: Option<DirectCloser>) -> Op<Accept> {
    let accept = Accept::new(socket.fd(), socket.unclaimed(), direct);
    Op::new(socket.core.clone(), accept)
}

/// Stream of accepted connections from [`TcpListener::incoming`].
///
/// On `EMFILE`/`ENFILE` (out of fds) it yields the error and then backs off (10 ms,
/// doubling to 1 s) before accepting again, so a server at its fd limit keeps serving the
/// connections it has and resumes accepting once fds free up, without spinning.
///
/// Connections are accepted only as fast as `next` takes them. Where the kernel has
/// multishot accept (5.19+), one SQE accepts connection after connection; at most
/// [`ACCEPT_QUEUE_MAX`] accepted connections then wait here for `next` (the accept is
/// cancelled at that bound and re-armed when they are taken), and the accept is armed only
/// while the listen backlog holds fewer than that many (a multishot accept takes the whole
/// backlog at once), one accept per call being used otherwise. A server that stops calling
/// `next` therefore holds at most about [`ACCEPT_QUEUE_MAX`] connections it has not taken;
/// the rest wait in the kernel's backlog.
///
/// `next` is cancel-safe: a dropped `next` (a `select!` or a `timeout` that lost) loses no
/// connection. Its accept is cancelled then (nobody awaits the stream), and what it still
/// accepts stays with the listener, where `accept` or the stream's next `next` takes it
/// first. Dropping the stream does the same; connections nobody took are closed with the
/// listener.
///
/// # Examples
///
/// A server loop that ends after two connections:
///
/// ```
/// use ring_rt::net::{TcpListener, TcpStream};
///
/// # ring_rt::Runtime::new()?.block_on(async {
/// let listener = TcpListener::bind("127.0.0.1:0")?;
/// let addr = listener.local_addr()?;
/// let server = ring_rt::spawn(async move {
///     let mut incoming = listener.incoming();
///     for _ in 0..2 {
///         let stream = incoming.next().await.unwrap()?;
///         stream.write_all(&b"hello"[..]).await.0?;
///     }
///     std::io::Result::Ok(())
/// });
/// for _ in 0..2 {
///     let client = TcpStream::connect(addr).await?;
///     let (n, buf) = client.read(vec![0; 8]).await;
///     assert_eq!(&buf[..n?], b"hello");
/// }
/// server.await.unwrap()?;
/// # std::io::Result::Ok(()) })?;
/// # std::io::Result::Ok(())
/// ```
pub struct Incoming<'a> {
    socket: &'a Socket,
    /// The multishot accept, while the stream is keeping up with its backlog.
    multishot: Option<Multishot<AcceptMulti>>,
    /// A one-shot accept in flight (no multishot here, or a long backlog).
    single: Option<Op<Accept>>,
    backoff: Option<Sleep>,
    backoff_ms: u64,
}

impl<'a> Incoming<'a> {
    /// The next connection (or accept error). Never `None` while the listener lives.
    /// Cancel-safe (see the [type's docs](Incoming)).
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_rt::net::{TcpListener, TcpStream};
    ///
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let listener = TcpListener::bind("127.0.0.1:0")?;
    /// let _client = TcpStream::connect(listener.local_addr()?).await?;
    /// let mut incoming = listener.incoming();
    /// if let Some(stream) = incoming.next().await {
    ///     stream?.set_nodelay(true)?;
    /// }
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    // An async stream's `next` (like `StreamExt::next`), not `Iterator::next`.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> IncomingNext<'_, 'a> {
        IncomingNext {
            incoming: self,
            pending: false,
        }
    }

    /// Polls for the next connection (what [`next`](Self::next) awaits), for hand-written
    /// futures and `Stream` impls.
    ///
    /// Unlike a dropped [`IncomingNext`], a caller that stops polling after `Pending`
    /// cannot be seen: the stream's accept stays armed and takes connections that only
    /// this stream hands out, while `accept` on the listener waits (io_uring). Drop the
    /// stream (or poll it through `next`) when you stop accepting from it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::future::poll_fn;
    /// use ring_rt::net::{TcpListener, TcpStream};
    ///
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let listener = TcpListener::bind("127.0.0.1:0")?;
    /// let _client = TcpStream::connect(listener.local_addr()?).await?;
    /// let mut incoming = listener.incoming();
    /// let stream = poll_fn(|cx| incoming.poll_next(cx)).await.expect("never None")?;
    /// assert_eq!(stream.local_addr()?, listener.local_addr()?);
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<TcpStream>>> {
        if let Some(sleep) = &mut self.backoff {
            ready!(Pin::new(sleep).poll(cx));
            self.backoff = None;
        }
        let result = ready!(self.poll_accept(cx));
        match &result {
            Err(e) if is_fd_exhaustion(e) => {
                self.backoff_ms = (self.backoff_ms * 2).clamp(10, 1000);
                self.backoff = Some(crate::time::sleep(Duration::from_millis(self.backoff_ms)));
            }
            Ok(_) => self.backoff_ms = 0,
            Err(_) => {}
        }
        let core = &self.socket.core;
        Poll::Ready(Some(
            result.and_then(|conn| TcpStream::from_accepted(core, conn)),
        ))
    }

    fn poll_accept(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Conn>> {
        loop {
            if let Some(op) = &mut self.single {
                let accepted = ready!(Pin::new(op).poll(cx));
                self.single = None;
                return Poll::Ready(accepted.map(|(conn, _)| conn));
            }
            if self.multishot.as_ref().is_some_and(Multishot::is_armed) || self.may_arm() {
                let socket = self.socket;
                let multishot = self.multishot.get_or_insert_with(|| {
                    let def = AcceptMulti {
                        fd: socket.fd(),
                        unclaimed: socket.unclaimed(),
                        direct: socket.core.direct_closer(),
                    };
                    Multishot::new(socket.core.clone(), def)
                });
                let cqe = ready!(multishot.poll_next(cx))?;
                match crate::completion::result(&cqe) {
                    // Cancelled at its bound (or at shutdown): accept again, one way or
                    // the other.
                    Err(e) if !cqe.is_more() && e.raw_os_error() == Some(libc::ECANCELED) => {
                        continue
                    }
                    Err(e) => return Poll::Ready(Err(e)),
                    Ok(res) => {
                        return Poll::Ready(Ok(multishot.def().accepted(res)));
                    }
                }
            }
            let direct = self.socket.core.direct_closer();
            self.single = Some(accept_one(self.socket, direct));
        }
    }

    /// Whether to arm the multishot accept now: the kernel has it, nothing a dropped
    /// accept took waits, and the listen backlog is short (armed on a long one it would
    /// take all of it at once, past [`ACCEPT_QUEUE_MAX`]).
    fn may_arm(&self) -> bool {
        let has_multishot = self.socket.core.supports(Capability::MultishotAccept);
        has_multishot
            && !self.socket.unclaimed().is_busy()
            && accept_backlog(self.socket.fd()).is_some_and(|n| n < u32::from(ACCEPT_QUEUE_MAX))
    }
}

/// The future [`Incoming::next`] returns. It holds only a borrow of the stream, where the
/// accept in flight lives: dropping it loses no connection.
#[must_use = "futures do nothing unless awaited"]
pub struct IncomingNext<'s, 'a> {
    incoming: &'s mut Incoming<'a>,
    /// Its last poll was pending: an accept is armed for it.
    pending: bool,
}

impl Future for IncomingNext<'_, '_> {
    type Output = Option<io::Result<TcpStream>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let polled = self.incoming.poll_next(cx);
        self.pending = polled.is_pending();
        polled
    }
}

impl Drop for IncomingNext<'_, '_> {
    /// Dropped while waiting (a timeout or a `select!` lost the race): nobody awaits the
    /// stream any more, so its accept stops taking connections for it. Left armed, a
    /// multishot accept went on taking up to [`ACCEPT_QUEUE_MAX`] connections that only
    /// this idle stream could hand out, while `accept()` on the same listener waited. Its
    /// orphan queues what it still takes on the listener, where the next accept (or this
    /// stream's next `next`) finds it first.
    fn drop(&mut self) {
        if self.pending {
            self.incoming.multishot = None;
            self.incoming.single = None;
        }
    }
}

/// Connections waiting in a TCP listener's accept queue (`TCP_INFO` reports them for a
/// listening socket in `tcpi_unacked`); `None` if the kernel does not say.
fn accept_backlog(fd: RawFd) -> Option<u32> {
    // SAFETY: tcp_info is plain integers; all-zero is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: TCP_INFO writes at most `len` bytes into `info`, whose size `len` is.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    // TCP_LISTEN of the kernel's `tcp_states.h` (libc does not export the TCP states).
    const TCP_LISTEN: u8 = 10;
    let is_listening = info.tcpi_state == TCP_LISTEN;
    (rc == 0 && is_listening).then_some(info.tcpi_unacked)
}

fn is_fd_exhaustion(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// A TCP connection.
///
/// Reads and writes take owned buffers and give them back with the result. The stream
/// belongs to the worker that made it (it is `!Send`); dropping it closes the socket.
/// `read`, `write`, `write_all`, `recv_pooled`, `recv_stream` and `shutdown` are shared
/// with [`UnixStream`](crate::net::UnixStream) and shown on a Unix pair in their own docs.
///
/// # Examples
///
/// ```
/// use std::net::Shutdown;
/// use ring_rt::net::{TcpListener, TcpStream};
///
/// # fn main() -> std::io::Result<()> {
/// ring_rt::Runtime::new()?.block_on(async {
///     let listener = TcpListener::bind("127.0.0.1:0")?;
///     let client = TcpStream::connect(listener.local_addr()?).await?;
///     let (server, _) = listener.accept().await?;
///
///     let (n, _buf) = client.write(&b"request"[..]).await;
///     assert_eq!(n?, 7);
///     client.shutdown(Shutdown::Write)?;
///
///     // Pooled receives: the worker's pool lends a buffer only once data has arrived.
///     let mut received = Vec::new();
///     let mut rx = server.recv_stream();
///     while let Some(chunk) = rx.next().await {
///         received.extend_from_slice(&chunk?);
///     }
///     assert_eq!(received, b"request");
///     Ok(())
/// })
/// # }
/// ```
pub struct TcpStream {
    socket: Socket,
}

impl TcpStream {
    stream_methods!();

    /// A stream on a direct descriptor of `core`'s ring (one another worker sent).
    pub(crate) fn from_direct(core: &Rc<Core>, slot: ring_core::direct::OwnedSlot) -> TcpStream {
        TcpStream {
            socket: Socket::from_direct(core.clone(), slot),
        }
    }

    /// The socket under the stream.
    pub(crate) fn socket(&self) -> &Socket {
        &self.socket
    }

    fn from_accepted(core: &Rc<Core>, conn: Conn) -> io::Result<TcpStream> {
        let socket = match conn {
            Conn::Fd(fd) => Socket::from_owned(core.clone(), fd)?,
            Conn::Direct(slot) => Socket::from_direct(core.clone(), slot),
        };
        Ok(TcpStream { socket })
    }

    /// Whether the stream is a direct descriptor: a socket in its worker's ring with no fd
    /// of its own until something asks for one (see
    /// [`Builder::direct_descriptors`](crate::Builder::direct_descriptors)).
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_rt::net::{TcpListener, TcpStream};
    ///
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let listener = TcpListener::bind("127.0.0.1:0")?;
    /// let client = TcpStream::connect(listener.local_addr()?).await?;
    /// assert!(!client.is_direct()); // connected, not accepted: an fd
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn is_direct(&self) -> bool {
        self.socket.is_direct()
    }

    /// Connects to `addr` (the first address it resolves to).
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_rt::net::{TcpListener, TcpStream};
    ///
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let listener = TcpListener::bind("127.0.0.1:0")?;
    /// let stream = TcpStream::connect(listener.local_addr()?).await?;
    /// assert_eq!(stream.peer_addr()?, listener.local_addr()?);
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub async fn connect(addr: impl ToSocketAddrs) -> io::Result<TcpStream> {
        let addr = resolve(addr)?;
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM)?;
        socket.connect(addr.into()).await?;
        Ok(TcpStream { socket })
    }

    /// Connects to `addr`, giving up with `TimedOut` after `timeout` (the connect is
    /// cancelled and the socket closed).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ring_rt::net::{TcpListener, TcpStream};
    ///
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let listener = TcpListener::bind("127.0.0.1:0")?;
    /// let addr = listener.local_addr()?;
    /// let stream = TcpStream::connect_timeout(addr, Duration::from_secs(5)).await?;
    /// # drop(stream);
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub async fn connect_timeout(
        addr: impl ToSocketAddrs,
        timeout: Duration,
    ) -> io::Result<TcpStream> {
        crate::time::timeout(timeout, TcpStream::connect(addr)).await?
    }

    /// Zero-copy send (6.0+; a plain send elsewhere): the buffer comes back once the
    /// kernel no longer needs it. Worth it for large buffers (tens of KiB and more).
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_rt::net::{TcpListener, TcpStream};
    ///
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let listener = TcpListener::bind("127.0.0.1:0")?;
    /// let client = TcpStream::connect(listener.local_addr()?).await?;
    /// let (server, _) = listener.accept().await?;
    /// let (sent, buf) = client.send_zc(vec![1u8; 64 * 1024]).await;
    /// let sent = sent?;
    /// assert!(sent > 0 && buf.len() == 64 * 1024); // the buffer is back, unchanged
    /// let (n, _) = server.read(Vec::with_capacity(1024)).await;
    /// assert!(n? > 0);
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub async fn send_zc<B: IoBuf>(&self, buf: B) -> (io::Result<usize>, B) {
        self.socket.send_zc(buf).await
    }

    /// The local address. ([`peer_addr`](Self::peer_addr) is shown with
    /// [`connect`](Self::connect).)
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_rt::net::{TcpListener, TcpStream};
    ///
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let listener = TcpListener::bind("127.0.0.1:0")?;
    /// let client = TcpStream::connect(listener.local_addr()?).await?;
    /// let (server, _) = listener.accept().await?;
    /// assert_eq!(client.local_addr()?, server.peer_addr()?);
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        to_inet(self.socket.local_addr()?)
    }

    /// The peer's address (see [`connect`](Self::connect) for an example).
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        to_inet(self.socket.peer_addr()?)
    }

    /// Sets `TCP_NODELAY` (no Nagle delay for small writes).
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_rt::net::{TcpListener, TcpStream};
    ///
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let listener = TcpListener::bind("127.0.0.1:0")?;
    /// let stream = TcpStream::connect(listener.local_addr()?).await?;
    /// stream.set_nodelay(true)?;
    /// assert!(stream.nodelay()?);
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        self.socket.with_socket2(|s| s.set_tcp_nodelay(nodelay))
    }

    /// Reads `TCP_NODELAY` (see [`set_nodelay`](Self::set_nodelay) for an example).
    pub fn nodelay(&self) -> io::Result<bool> {
        self.socket.with_socket2(|s| s.tcp_nodelay())
    }

    /// Adopts a connected std stream on the current worker (it is switched to the blocking
    /// mode the backend wants). An fd that is not a `SOCK_STREAM` socket of `AF_INET` or
    /// `AF_INET6`, or is a listening one, is refused (`InvalidInput`).
    ///
    /// The blocking mode is the socket's, shared by every dup of its fd (`try_clone`): a dup
    /// kept elsewhere sees the switch. Receives and sends never block the runtime's thread,
    /// whatever the mode (epoll asks each call not to).
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_rt::net::TcpStream;
    ///
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    /// let std_stream = std::net::TcpStream::connect(listener.local_addr()?)?;
    /// let stream = TcpStream::from_std(std_stream)?;
    /// stream.write_all(&b"adopted"[..]).await.0?;
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn from_std(stream: std::net::TcpStream) -> io::Result<TcpStream> {
        Ok(TcpStream {
            socket: Socket::from_std(stream.into(), &TCP_STREAM)?,
        })
    }

    /// Gives up the fd (left in the current blocking mode). Fails, handing the stream back,
    /// while that would lose received data: bytes a dropped read got are queued on the
    /// stream (the next `read` returns them), or a dropped read is still finishing in the
    /// kernel (its cancel completes within a turn or two of the runtime).
    ///
    /// The fd is the stream's own number, except in two cases where ops the kernel has not
    /// looked at yet still name that number: called from code the runtime runs inside its
    /// own bookkeeping (a waker's `clone`), or while an op of a dropped linked chain waits
    /// to be issued. Then it is a duplicate, and the runtime closes the original number
    /// after those ops.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::os::fd::{AsRawFd, OwnedFd};
    /// use ring_rt::net::{TcpListener, TcpStream};
    ///
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let listener = TcpListener::bind("127.0.0.1:0")?;
    /// let stream = TcpStream::connect(listener.local_addr()?).await?;
    /// let raw = stream.as_raw_fd();
    /// let fd: OwnedFd = stream.into_owned_fd()?;
    /// assert_eq!(fd.as_raw_fd(), raw);
    /// let std_stream = std::net::TcpStream::from(fd);
    /// assert_eq!(std_stream.peer_addr()?, listener.local_addr()?);
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn into_owned_fd(self) -> Result<OwnedFd, IntoFdError<TcpStream>> {
        self.socket
            .into_owned()
            .map_err(|(socket, error)| IntoFdError::new(TcpStream { socket }, error))
    }
}

socket_traits!(TcpStream, TcpListener);
