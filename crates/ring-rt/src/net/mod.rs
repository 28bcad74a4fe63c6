//! Networking: TCP, UDP and Unix-domain sockets on the current worker's backend.

mod socket;
pub mod tcp;
pub mod udp;
pub mod unix;

pub use socket::RecvStream;
pub use tcp::{Incoming, TcpListener, TcpStream};
pub use udp::UdpSocket;
pub use unix::{UnixListener, UnixStream};
