//! UDP sockets.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};

use socket2::{Domain, SockAddr, Type};

use super::socket::{Socket, UDP_SOCKET};
use crate::buf::{IoBuf, IoBufMut};
use crate::op::net::{MsgHdr, RecvMsg, SendMsg};
use crate::op::unclaimed::TurnSlot;
use crate::op::Op;

fn resolve(addr: impl ToSocketAddrs) -> io::Result<SocketAddr> {
    addr.to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "address resolved to nothing"))
}

/// A UDP socket.
///
/// Datagram ops take owned buffers and give them back with the result, like every op.
///
/// # Examples
///
/// ```
/// use ring_rt::net::UdpSocket;
///
/// # fn main() -> std::io::Result<()> {
/// ring_rt::Runtime::new()?.block_on(async {
///     let a = UdpSocket::bind("127.0.0.1:0")?;
///     let b = UdpSocket::bind("127.0.0.1:0")?;
///     let (sent, _) = a.send_to(&b"datagram"[..], b.local_addr()?).await;
///     assert_eq!(sent?, 8);
///     let (res, buf) = b.recv_from(Vec::with_capacity(1500)).await;
///     let (n, from) = res?;
///     assert_eq!((&buf[..n], from), (&b"datagram"[..], a.local_addr()?));
///     Ok(())
/// })
/// # }
/// ```
pub struct UdpSocket {
    socket: Socket,
}

impl UdpSocket {
    /// Binds to `addr`; port 0 picks a free port.
    ///
    /// # Examples
    ///
    /// ```
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let socket = ring_rt::net::UdpSocket::bind("127.0.0.1:0")?;
    /// assert_ne!(socket.local_addr()?.port(), 0);
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn bind(addr: impl ToSocketAddrs) -> io::Result<UdpSocket> {
        let addr = resolve(addr)?;
        let socket = Socket::new(Domain::for_address(addr), Type::DGRAM)?;
        socket.with_socket2(|s| s.bind(&addr.into()))?;
        Ok(UdpSocket { socket })
    }

    /// Adopts a bound std socket on the current worker (switched to the blocking mode the
    /// backend wants). An fd that is not a `SOCK_DGRAM` socket of `AF_INET` or `AF_INET6`
    /// is refused (`InvalidInput`): a Unix datagram socket's senders have no `SocketAddr`.
    ///
    /// The blocking mode is the socket's, shared by every dup of its fd (`try_clone`): a dup
    /// kept elsewhere sees the switch. Receives and sends never block the runtime's thread,
    /// whatever the mode (epoll asks each call not to).
    ///
    /// # Examples
    ///
    /// ```
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let std_socket = std::net::UdpSocket::bind("127.0.0.1:0")?;
    /// let addr = std_socket.local_addr()?;
    /// let socket = ring_rt::net::UdpSocket::from_std(std_socket)?;
    /// socket.send_to(&b"self"[..], addr).await.0?;
    /// let (got, _) = socket.recv_from(vec![0; 8]).await;
    /// assert_eq!(got?.0, 4);
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn from_std(socket: std::net::UdpSocket) -> io::Result<UdpSocket> {
        Ok(UdpSocket {
            socket: Socket::from_std(socket.into(), &UDP_SOCKET)?,
        })
    }

    /// Sets the default peer for `send`/`recv` (and filters what `recv` receives).
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_rt::net::UdpSocket;
    ///
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let a = UdpSocket::bind("127.0.0.1:0")?;
    /// let b = UdpSocket::bind("127.0.0.1:0")?;
    /// a.connect(b.local_addr()?)?;
    /// b.connect(a.local_addr()?)?;
    /// assert_eq!(a.peer_addr()?, b.local_addr()?);
    ///
    /// a.send(&b"to the peer"[..]).await.0?;
    /// let (n, buf) = b.recv(vec![0; 64]).await;
    /// assert_eq!(&buf[..n?], b"to the peer");
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn connect(&self, addr: impl ToSocketAddrs) -> io::Result<()> {
        let addr = resolve(addr)?;
        self.socket.with_socket2(|s| s.connect(&addr.into()))
    }

    /// Sends one datagram to `addr` (see the [type's example](UdpSocket)).
    pub async fn send_to<B: IoBuf>(
        &self,
        buf: B,
        addr: impl ToSocketAddrs,
    ) -> (io::Result<usize>, B) {
        let addr = match resolve(addr) {
            Ok(a) => SockAddr::from(a),
            Err(e) => return (Err(e), buf),
        };
        let hdr = MsgHdr::new(buf.stable_ptr() as *mut u8, buf.bytes_init(), Some(&addr));
        Op::new(
            self.socket.core.clone(),
            SendMsg {
                fd: self.socket.fd(),
                buf,
                hdr,
            },
        )
        .await
    }

    /// Receives one datagram and its sender, into `buf`'s capacity (a longer datagram is
    /// truncated). See the [type's example](UdpSocket).
    ///
    /// Cancel-safe: a receive dropped after the kernel gave it a datagram (a `timeout` or
    /// a `select` that lost) keeps that datagram, with its sender, for the socket's next
    /// `recv_from` or `recv`.
    pub async fn recv_from<B: IoBufMut>(&self, buf: B) -> (io::Result<(usize, SocketAddr)>, B) {
        let (res, buf) = self.recv_msg(buf).await;
        let res = res.and_then(|(n, addr)| {
            let addr = addr
                .as_socket()
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not an inet sender"))?;
            Ok((n, addr))
        });
        (res, buf)
    }

    /// One datagram and its sender, from the kernel's `recvmsg`, or from the socket's queue
    /// of datagrams dropped receives got (with their senders). A socket shut down for
    /// reading gives 0 with no sender.
    async fn recv_msg<B: IoBufMut>(&self, mut buf: B) -> (io::Result<(usize, SockAddr)>, B) {
        let hdr = MsgHdr::new(buf.stable_mut_ptr(), buf.bytes_total(), None);
        Op::new(
            self.socket.core.clone(),
            RecvMsg {
                fd: self.socket.fd(),
                buf,
                hdr,
                unclaimed: self.socket.unclaimed(),
                turn: TurnSlot::default(),
            },
        )
        .await
    }

    /// Sends one datagram to the connected peer (see [`connect`](Self::connect) for an
    /// example).
    pub async fn send<B: IoBuf>(&self, buf: B) -> (io::Result<usize>, B) {
        self.socket.write(buf).await
    }

    /// Receives one datagram from the connected peer (see [`connect`](Self::connect) for an
    /// example).
    ///
    /// Through `recvmsg`, as `recv_from`: a receive dropped after the kernel gave it a
    /// datagram keeps the datagram with its sender as the kernel named it, for a later
    /// `recv_from` (review DK: a plain receive could not name it on a socket that is not
    /// connected, and the next `recv_from` took the datagram and failed; review DL: on a
    /// connected one it was named by the peer of a later `connect`). An empty buffer moves
    /// nothing (a plain receive: `recvmsg` would take the next datagram).
    pub async fn recv<B: IoBufMut>(&self, buf: B) -> (io::Result<usize>, B) {
        if buf.bytes_total() == 0 {
            return self.socket.read_datagram(buf).await;
        }
        let (res, buf) = self.recv_msg(buf).await;
        (res.map(|(n, _)| n), buf)
    }

    /// The bound address (see [`bind`](Self::bind) for an example).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        inet(self.socket.local_addr()?)
    }

    /// The connected peer (see [`connect`](Self::connect) for an example).
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        inet(self.socket.peer_addr()?)
    }
}

fn inet(addr: SockAddr) -> io::Result<SocketAddr> {
    addr.as_socket()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not an inet address"))
}

super::socket::socket_traits!(UdpSocket);
