//! Memory per idle connection: open N connections, echo one byte on each (so the server has
//! accepted it and run its task at least once), leave them idle, and divide the server's
//! RSS growth by N.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::thread;
use std::time::Duration;

use crate::json::Object;
use crate::server::Server;

/// How long the server gets to settle before RSS is read.
const SETTLE: Duration = Duration::from_millis(500);

/// One idle-connection measurement.
#[derive(Clone, Debug)]
pub struct IdleReport {
    /// The server's name.
    pub server: String,
    /// Idle connections held open.
    pub conns: usize,
    /// Server RSS with one connection served and closed, KiB.
    pub rss_before_kib: u64,
    /// Server RSS with `conns` idle connections, KiB.
    pub rss_after_kib: u64,
}

impl IdleReport {
    /// RSS growth per idle connection, bytes.
    pub fn bytes_per_conn(&self) -> f64 {
        let grown = self.rss_after_kib.saturating_sub(self.rss_before_kib) as f64 * 1024.0;
        grown / self.conns.max(1) as f64
    }

    /// One JSON object.
    pub fn to_json(&self) -> String {
        Object::default()
            .str("server", &self.server)
            .num("idle_conns", self.conns as f64)
            .num("rss_before_kib", self.rss_before_kib as f64)
            .num("rss_after_kib", self.rss_after_kib as f64)
            .num("bytes_per_idle_conn", self.bytes_per_conn())
            .finish()
    }
}

/// Measures `server` (freshly started, listening on `addr`) with `conns` idle connections.
pub fn measure(server: &Server, addr: SocketAddr, conns: usize) -> io::Result<IdleReport> {
    // One connection first, so lazily built state (pools, the first task's slab page)
    // is in the baseline rather than charged to the idle connections.
    drop(echo_one(addr)?);
    thread::sleep(SETTLE);
    let rss_before_kib = server.rss_kib()?;
    let mut open = Vec::with_capacity(conns);
    for i in 0..conns {
        let conn = echo_one(addr).map_err(|e| {
            io::Error::new(e.kind(), format!("idle connection {i} of {conns}: {e}"))
        })?;
        open.push(conn);
    }
    thread::sleep(SETTLE);
    let rss_after_kib = server.rss_kib()?;
    for conn in &open {
        // Reset instead of FIN: 10,000 client sockets in TIME_WAIT would crowd the
        // ephemeral ports the next phases connect from.
        let _ = linger_zero(conn);
    }
    drop(open);
    Ok(IdleReport {
        server: server.name().to_string(),
        conns,
        rss_before_kib,
        rss_after_kib,
    })
}

/// `SO_LINGER` with a zero timeout: close sends RST and leaves no TIME_WAIT.
fn linger_zero(conn: &TcpStream) -> io::Result<()> {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a live socket fd, and a pointer to a linger of the length passed.
    let rc = unsafe {
        libc::setsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Connects and echoes one byte, leaving the connection open.
fn echo_one(addr: SocketAddr) -> io::Result<TcpStream> {
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    s.write_all(b"x")?;
    let mut byte = [0u8; 1];
    s.read_exact(&mut byte)?;
    if byte != *b"x" {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "echo mismatch"));
    }
    Ok(s)
}
