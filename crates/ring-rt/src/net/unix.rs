//! Unix-domain stream sockets.

use std::io;
use std::net::Shutdown;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;

use socket2::{Domain, SockAddr, Type};

use super::socket::{RecvStream, Socket};
use super::tcp::accept_one;
use crate::buf::{IoBuf, IoBufMut};
use crate::op::link::Pending;
use crate::op::OpDef;
use crate::pool::PooledBuf;
use crate::runtime::Core;

/// A Unix-domain listening socket.
pub struct UnixListener {
    socket: Socket,
}

impl UnixListener {
    /// Binds to the filesystem path `path` and listens.
    pub fn bind(path: impl AsRef<Path>) -> io::Result<UnixListener> {
        let socket = Socket::new(Domain::UNIX, Type::STREAM)?;
        let addr = SockAddr::unix(path)?;
        socket.with_socket2(|s| {
            s.bind(&addr)?;
            s.listen(1024)
        })?;
        Ok(UnixListener { socket })
    }

    /// Accepts one connection.
    pub async fn accept(&self) -> io::Result<UnixStream> {
        let (fd, _) = accept_one(&self.socket).await?;
        Ok(UnixStream {
            socket: Socket::from_owned(self.socket.core.clone(), fd)?,
        })
    }
}

impl AsRawFd for UnixListener {
    fn as_raw_fd(&self) -> RawFd {
        self.socket.fd()
    }
}

/// A Unix-domain stream connection.
pub struct UnixStream {
    socket: Socket,
}

impl UnixStream {
    /// Connects to the socket at `path`.
    pub async fn connect(path: impl AsRef<Path>) -> io::Result<UnixStream> {
        let socket = Socket::new(Domain::UNIX, Type::STREAM)?;
        socket.connect(SockAddr::unix(path)?).await?;
        Ok(UnixStream { socket })
    }

    /// A connected pair.
    pub fn pair() -> io::Result<(UnixStream, UnixStream)> {
        let core = Core::current_io()?;
        let (a, b) = socket2::Socket::pair(Domain::UNIX, Type::STREAM.cloexec(), None)?;
        let a = Socket::from_owned(core.clone(), a.into())?;
        let b = Socket::from_owned(core, b.into())?;
        Ok((UnixStream { socket: a }, UnixStream { socket: b }))
    }

    /// Reads into `buf`; returns the count and the buffer.
    ///
    /// The op can be bounded first: `stream.read(buf).timeout(d).await`.
    pub fn read<B: IoBufMut>(
        &self,
        buf: B,
    ) -> Pending<'_, impl OpDef<Output = (io::Result<usize>, B)>> {
        self.socket.read(buf)
    }

    /// Writes `buf` once (possibly partially).
    pub fn write<B: IoBuf>(
        &self,
        buf: B,
    ) -> Pending<'_, impl OpDef<Output = (io::Result<usize>, B)>> {
        self.socket.write(buf)
    }

    /// Writes all of `buf`.
    pub async fn write_all<B: IoBuf>(&self, buf: B) -> (io::Result<()>, B) {
        self.socket.write_all(buf).await
    }

    /// Receives into a pooled buffer; `Ok(None)` at end of stream.
    pub async fn recv_pooled(&self) -> io::Result<Option<PooledBuf>> {
        self.socket.recv_pooled().await
    }

    /// Received data as a stream of pooled buffers.
    pub fn recv_stream(&self) -> RecvStream<'_> {
        RecvStream::new(&self.socket)
    }

    /// Shuts down one or both halves.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.socket.shutdown(how)
    }
}

impl AsRawFd for UnixStream {
    fn as_raw_fd(&self) -> RawFd {
        self.socket.fd()
    }
}

impl std::fmt::Debug for UnixListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnixListener")
            .field("fd", &self.socket.fd())
            .finish()
    }
}

impl std::fmt::Debug for UnixStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnixStream")
            .field("fd", &self.socket.fd())
            .finish()
    }
}
