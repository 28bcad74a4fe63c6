//! Unix-domain stream sockets.

use std::io;
use std::net::Shutdown;
use std::path::Path;

use socket2::{Domain, SockAddr, Type};

use super::into_fd::IntoFdError;
use super::recv_stream::RecvStream;
use super::socket::{socket_traits, stream_methods, Socket, UNIX_LISTENER, UNIX_STREAM};
use super::tcp::accept_one;
use crate::buf::{IoBuf, IoBufMut};
use crate::op::link::Pending;
use crate::op::net::Conn;
use crate::op::OpDef;
use crate::pool::PooledBuf;
use crate::worker::Core;

/// A Unix-domain listening socket.
///
/// # Examples
///
/// ```
/// use ring_rt::net::{UnixListener, UnixStream};
///
/// # fn main() -> std::io::Result<()> {
/// let path = std::env::temp_dir().join(format!("ring-rt-doc-{}.sock", std::process::id()));
/// # let _ = std::fs::remove_file(&path);
/// ring_rt::Runtime::new()?.block_on(async {
///     let listener = UnixListener::bind(&path)?;
///     let client = UnixStream::connect(&path).await?;
///     let server = listener.accept().await?;
///     client.write_all(&b"over a path"[..]).await.0?;
///     let (n, buf) = server.read(vec![0; 32]).await;
///     assert_eq!(&buf[..n?], b"over a path");
///     std::io::Result::Ok(())
/// })?;
/// std::fs::remove_file(&path) // the socket file outlives the listener
/// # }
/// ```
pub struct UnixListener {
    socket: Socket,
}

impl UnixListener {
    /// Binds to the filesystem path `path` and listens (backlog 1024). The path must not
    /// exist (`AddrInUse`); the socket file stays after the listener is dropped. See the
    /// [type's example](UnixListener).
    pub fn bind(path: impl AsRef<Path>) -> io::Result<UnixListener> {
        let socket = Socket::new(Domain::UNIX, Type::STREAM)?;
        let addr = unix_addr(path.as_ref())?;
        socket.with_socket2(|s| {
            s.bind(&addr)?;
            s.listen(1024)
        })?;
        Ok(UnixListener { socket })
    }

    /// Adopts a listening std listener on the current worker (switched to the blocking mode
    /// the backend wants). An fd that is not a listening `AF_UNIX` `SOCK_STREAM` socket is
    /// refused (`InvalidInput`): a `SOCK_SEQPACKET` listener's connections are not streams,
    /// and `accept` fails on a socket that does not listen.
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
    /// # let path = std::env::temp_dir().join(format!("ring-rt-doc-ul-{}", std::process::id()));
    /// # let _ = std::fs::remove_file(&path);
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let std_listener = std::os::unix::net::UnixListener::bind(&path)?;
    /// let listener = ring_rt::net::UnixListener::from_std(std_listener)?;
    /// let client = ring_rt::net::UnixStream::connect(&path).await?;
    /// let server = listener.accept().await?;
    /// client.write_all(&b"hi"[..]).await.0?;
    /// let (n, _) = server.read(vec![0; 2]).await;
    /// assert_eq!(n?, 2);
    /// # std::io::Result::Ok(()) })?;
    /// # std::fs::remove_file(&path)?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn from_std(listener: std::os::unix::net::UnixListener) -> io::Result<UnixListener> {
        Ok(UnixListener {
            socket: Socket::from_std(listener.into(), &UNIX_LISTENER)?,
        })
    }

    /// Accepts one connection (see the [type's example](UnixListener)).
    pub async fn accept(&self) -> io::Result<UnixStream> {
        // Never direct: only TCP listeners accept direct descriptors.
        let (conn, _) = accept_one(&self.socket, None).await?;
        let socket = match conn {
            Conn::Fd(fd) => Socket::from_owned(self.socket.core.clone(), fd)?,
            Conn::Direct(slot) => Socket::from_direct(self.socket.core.clone(), slot),
        };
        Ok(UnixStream { socket })
    }
}

/// A Unix-domain stream connection.
///
/// Shares `read`, `write`, `write_all`, `recv_pooled`, `recv_stream` and `shutdown` with
/// [`TcpStream`](crate::net::TcpStream); each is shown in its own docs.
///
/// # Examples
///
/// ```
/// # ring_rt::Runtime::new()?.block_on(async {
/// let (a, b) = ring_rt::net::UnixStream::pair()?;
/// let (res, buf) = a.write_all(b"owned buffer".to_vec()).await;
/// res?;
/// let (n, buf) = b.read(buf).await; // reuse the same Vec for the reply
/// assert_eq!(&buf[..n?], b"owned buffer");
/// # std::io::Result::Ok(()) })?;
/// # std::io::Result::Ok(())
/// ```
pub struct UnixStream {
    socket: Socket,
}

impl UnixStream {
    stream_methods!();

    /// Connects to the socket at `path` (see [`UnixListener`] for an example).
    pub async fn connect(path: impl AsRef<Path>) -> io::Result<UnixStream> {
        let socket = Socket::new(Domain::UNIX, Type::STREAM)?;
        socket.connect(unix_addr(path.as_ref())?).await?;
        Ok(UnixStream { socket })
    }

    /// A connected pair, both on the current worker.
    ///
    /// # Examples
    ///
    /// ```
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let (a, b) = ring_rt::net::UnixStream::pair()?;
    /// b.write_all(&b"pong"[..]).await.0?;
    /// let (n, _) = a.read(vec![0; 4]).await;
    /// assert_eq!(n?, 4);
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn pair() -> io::Result<(UnixStream, UnixStream)> {
        let core = Core::current_io()?;
        let (a, b) = socket2::Socket::pair(Domain::UNIX, Type::STREAM.cloexec(), None)?;
        let a = Socket::from_owned(core.clone(), a.into())?;
        let b = Socket::from_owned(core, b.into())?;
        Ok((UnixStream { socket: a }, UnixStream { socket: b }))
    }

    /// Adopts a connected std stream on the current worker (switched to the blocking mode
    /// the backend wants). An fd that is not an `AF_UNIX` `SOCK_STREAM` socket (a
    /// `SOCK_SEQPACKET` one, say), or is a listening one, is refused (`InvalidInput`): its
    /// records would be read as stream bytes.
    ///
    /// The blocking mode is the socket's, shared by every dup of its fd (`try_clone`): a dup
    /// kept elsewhere sees the switch. Receives and sends never block the runtime's thread,
    /// whatever the mode (epoll asks each call not to).
    ///
    /// # Examples
    ///
    /// ```
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let (a, b) = std::os::unix::net::UnixStream::pair()?;
    /// let a = ring_rt::net::UnixStream::from_std(a)?;
    /// a.write_all(&b"adopted"[..]).await.0?;
    /// let mut got = [0u8; 7];
    /// std::io::Read::read_exact(&mut &b, &mut got)?;
    /// assert_eq!(&got, b"adopted");
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn from_std(stream: std::os::unix::net::UnixStream) -> io::Result<UnixStream> {
        Ok(UnixStream {
            socket: Socket::from_std(stream.into(), &UNIX_STREAM)?,
        })
    }

    /// Gives up the fd, as [`TcpStream::into_owned_fd`](crate::net::TcpStream::into_owned_fd)
    /// does (handing the stream back while that would lose received data).
    ///
    /// # Examples
    ///
    /// ```
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let (a, _b) = ring_rt::net::UnixStream::pair()?;
    /// let fd = a.into_owned_fd()?;
    /// let std_stream = std::os::unix::net::UnixStream::from(fd);
    /// assert!(std_stream.peer_addr().is_ok());
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn into_owned_fd(self) -> Result<std::os::fd::OwnedFd, IntoFdError<UnixStream>> {
        self.socket
            .into_owned()
            .map_err(|(socket, error)| IntoFdError::new(UnixStream { socket }, error))
    }
}

socket_traits!(UnixStream, UnixListener);

/// The address of the filesystem path `path`. A NUL byte is `InvalidInput`, as in std:
/// the kernel would stop the name at it (binding `"a\0b"` binds `"a"`), and a leading one
/// would name an abstract socket instead of a file.
fn unix_addr(path: &Path) -> io::Result<SockAddr> {
    use std::os::unix::ffi::OsStrExt;
    if path.as_os_str().as_bytes().contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a Unix socket path must not contain a NUL byte",
        ));
    }
    SockAddr::unix(path)
}
