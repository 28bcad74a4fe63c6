//! Networking: TCP, UDP and Unix-domain sockets on the current worker's backend.

mod into_fd;
mod recv_stream;
mod socket;
pub mod tcp;
pub mod udp;
pub mod unix;
mod write_all;

pub use into_fd::IntoFdError;
pub use recv_stream::{RecvNext, RecvStream};
pub use tcp::{Incoming, IncomingNext, TcpListener, TcpStream};
pub use udp::UdpSocket;
pub use unix::{UnixListener, UnixStream};
