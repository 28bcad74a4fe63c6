//! Networking: TCP, UDP and Unix-domain sockets on the current worker's backend.

pub(crate) mod direct;
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
#[cfg(any(feature = "tokio-io", feature = "futures-io"))]
pub(crate) use write_all::WriteAll;

/// What every idle connection holds, type by type (the idle-memory test counts the whole):
/// a field added to one of these is paid once per connection, so it should be a choice.
#[cfg(test)]
mod sizes {
    use std::mem::size_of;

    use crate::op::unclaimed::Unclaimed;
    use crate::pool::PooledBuf;

    #[test]
    fn what_an_idle_connection_holds_stays_small() {
        assert!(size_of::<super::RecvStream<'static>>() <= 104);
        assert!(size_of::<super::write_all::WriteAll<'static, PooledBuf>>() <= 96);
        assert!(size_of::<PooledBuf>() <= 32);
        assert!(size_of::<Unclaimed>() <= 96);
    }
}
