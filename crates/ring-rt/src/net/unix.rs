//! Unix-domain stream sockets.

use std::io;
use std::net::Shutdown;
use std::path::Path;

use socket2::{Domain, SockAddr, Type};

use super::socket::{socket_traits, stream_methods, RecvStream, Socket};
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

/// A Unix-domain stream connection.
pub struct UnixStream {
    socket: Socket,
}

impl UnixStream {
    stream_methods!();

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
}

socket_traits!(UnixStream, UnixListener);
