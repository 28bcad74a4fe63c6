//! `Compat`: tokio's and futures-io's poll-based `AsyncRead`/`AsyncBufRead`/`AsyncWrite`
//! over ring-rt's completion-based streams and files (features `tokio-io`, `futures-io`).
//!
//! A poll-based read lends the callee a buffer for one call, but a completion-based read
//! needs a buffer the kernel may keep writing after that call returns. So the adapter owns
//! one buffer per direction and copies through it:
//!
//! - **read**: one read op into the adapter's buffer (up to `read_cap` bytes, 64 KiB by
//!   default) is in flight at a time; its bytes are handed out on later polls.
//! - **write**: on a stream with no write in flight, `poll_write` first sends what the
//!   socket's buffer takes at once straight from the caller's bytes with a nonblocking
//!   `sendmsg`, as a poll-based runtime does: no copy, no op, and no bound but the
//!   socket's. On io_uring only writes of 64 KiB and more go this way (smaller ones cost
//!   less copied into an op that joins the loop's next batched submission than sent with a
//!   syscall of their own: measured with hyper, 16 KiB responses took 19% more CPU sent
//!   directly). A send that meets a full socket buffer waits until the socket takes data
//!   and sends from the caller's bytes again (the write is pending meanwhile), as a
//!   poll-based runtime does. Otherwise (a file, a small write on io_uring, a buffer full
//!   again at once after its room came) it
//!   copies up to `write_cap` bytes (64 KiB by default) into the adapter's buffer, starts
//!   a write-all of it and returns at once. While that write is in flight, `poll_write`
//!   copies up to `write_cap` more bytes into a second buffer and returns at once, and
//!   those go out together in the next op, started by the adapter's first poll (a write or
//!   a flush) after the first ends: the 8 KiB writes of `tokio::io::copy` take one op per
//!   64 KiB, not one per 8 KiB each waiting for the one before. Beyond that it waits;
//!   `poll_flush` waits until both are written (as with a `BufWriter`, bytes accepted
//!   behind a write need a flush to be sure to go out). A failed
//!   write's error is returned by the next `poll_write`/`poll_flush`/`poll_shutdown`, and
//!   the bytes accepted behind it are dropped.
//!
//! **What it costs**: one `memcpy` through the internal buffer for reads and for the
//! writes that take an op (the ops themselves are held inline, not boxed), at most one op
//! in flight per direction, and up to two write buffers. Over
//! loopback TCP
//! (`examples/compat-bench.rs`, numbers in its header), with buffers as large as the
//! transfers (64 KiB to 1 MiB) the adapter moved 5-20% fewer MB/s than ring-rt's own
//! owned-buffer `read`/`write_all`, and the copy cost about 20-40 µs of CPU per MiB on
//! each side. With the default 64 KiB buffers, transfers of 256 KiB and more ran 35-55%
//! slower (four to sixteen ops where one would do): raise [`Compat::with_capacity`] for
//! bulk data. Code that can hand ring-rt its buffers should do so.
//!
//! **Dropping** the adapter with an op in flight is safe: the op is orphaned and the
//! runtime keeps its buffer until the kernel is done. Bytes a stream's adapter read ahead
//! but never handed out go back to the stream (its next receive returns them first, and
//! so do the bytes of a read still in flight). Bytes accepted by `poll_write` but not yet
//! written are lost, as with a `BufWriter`: flush (or shut down) first.
//!
//! Files: the adapter keeps a cursor ([`Compat::position`]), reads and writes at it, and
//! orders a read after the write before it. Under `O_APPEND` the kernel writes at the end
//! whatever the cursor says.
//!
//! # Serving HTTP with hyper
//!
//! hyper 1.x runs on ring-rt, with no tokio runtime, from four pieces: [`Compat`] (tokio's
//! I/O traits over a ring-rt stream), hyper-util's `TokioIo` (tokio's traits as hyper's
//! `rt::Read` and `rt::Write`), [`HyperTimer`] (hyper's timers, such as the header-read
//! timeout, on ring-rt's), and hyper's `serve_connection`, one task per connection. The
//! program needs ring-rt's `hyper` feature (it turns on `tokio-io`),
//! `hyper = { version = "1", features = ["http1", "server"] }` and
//! `hyper-util = { version = "0.1", default-features = false, features = ["tokio"] }`.
//!
//! ```
//! # #[cfg(feature = "hyper")]
//! # fn main() -> std::io::Result<()> {
//! use std::convert::Infallible;
//! use std::time::Duration;
//!
//! use hyper::body::Incoming;
//! use hyper::{Request, Response};
//! use hyper_util::rt::TokioIo;
//! use ring_rt::compat::{Compat, HyperTimer};
//! use ring_rt::net::{TcpListener, TcpStream};
//!
//! async fn hello(_req: Request<Incoming>) -> Result<Response<String>, Infallible> {
//!     Ok(Response::new("hello from ring-rt\n".to_string()))
//! }
//!
//! /// Serves one connection (keep-alive: many requests) until the client closes it.
//! async fn serve(stream: TcpStream) -> hyper::Result<()> {
//!     stream.set_nodelay(true).ok(); // hyper writes whole responses
//!     let io = TokioIo::new(Compat::new(stream));
//!     hyper::server::conn::http1::Builder::new()
//!         .timer(HyperTimer::new())
//!         .header_read_timeout(Duration::from_secs(30))
//!         .serve_connection(io, hyper::service::service_fn(hello))
//!         .await
//! }
//!
//! ring_rt::Runtime::new()?.block_on(async {
//!     let listener = TcpListener::bind("127.0.0.1:0")?;
//!     let addr = listener.local_addr()?;
//!     // A server loops over `listener.incoming()`, spawning `serve` for each connection;
//!     // this one serves a single connection and ends.
//!     let server = ring_rt::spawn(async move {
//!         let (stream, _peer) = listener.accept().await?;
//!         serve(stream).await.map_err(std::io::Error::other)
//!     });
//!
//!     // One request by hand; `connection: close` makes hyper end the connection after it.
//!     let client = TcpStream::connect(addr).await?;
//!     let request = &b"GET / HTTP/1.1\r\nhost: ring-rt\r\nconnection: close\r\n\r\n"[..];
//!     client.write_all(request).await.0?;
//!     let mut response = Vec::new();
//!     loop {
//!         let (n, buf) = client.read(Vec::with_capacity(4096)).await;
//!         if n? == 0 {
//!             break;
//!         }
//!         response.extend_from_slice(&buf);
//!     }
//!     let response = String::from_utf8_lossy(&response);
//!     assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
//!     assert!(response.ends_with("hello from ring-rt\n"), "{response}");
//!     server.await.expect("the server task")?;
//!     Ok(())
//! })
//! # }
//! # #[cfg(not(feature = "hyper"))]
//! # fn main() {}
//! ```
//!
//! `examples/hyper.rs` is this server in full: every worker with its own `SO_REUSEPORT`
//! listener, shutdown on SIGINT/SIGTERM (`cargo run --release --example hyper`).
//!
//! **axum** runs the same way: wrap the `Router` in hyper-util's `TowerToHyperService`
//! and pass it to `serve_connection`. axum wants handlers whose futures are `Send`, and
//! ring-rt's sockets, files and timers stay on their worker, so a handler runs its ring-rt
//! I/O as a task on its own worker (`ring_rt::spawn`) and awaits that task's `Send`
//! [`JoinHandle`](crate::JoinHandle) (the crate docs show it). `examples/axum.rs` serves a
//! `Router` whose handlers read a file, sleep and call a TCP service this way
//! (`cargo run --release --example axum`).

#[cfg(feature = "futures-io")]
mod futures_io;
#[cfg(feature = "hyper")]
mod hyper_timer;
mod source;
#[cfg(feature = "tokio-io")]
mod tokio_io;

use std::fmt;
use std::future::Future;
use std::io::{Error, ErrorKind, IoSlice, Result};
use std::mem;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{ready, Context, Poll};

#[cfg(feature = "hyper")]
pub use self::hyper_timer::HyperTimer;
pub use self::source::CompatIo;
use self::source::RoomWait;
use crate::executor::coop;

/// Default size of each direction's internal buffer.
///
/// # Examples
///
/// ```
/// assert_eq!(ring_rt::compat::DEFAULT_BUF_LEN, 64 * 1024);
/// ```
pub const DEFAULT_BUF_LEN: usize = 64 * 1024;

/// The read direction.
enum ReadState<S: CompatIo> {
    /// No read in flight. `buf[at..]` was read but not yet handed out; for a file it starts
    /// at the cursor.
    Idle { buf: Vec<u8>, at: usize },
    /// A read into the adapter's buffer; the op owns the buffer (and an `Rc` of the object).
    InFlight(S::ReadOp),
}

/// The write direction.
enum WriteState<S: CompatIo> {
    /// No write in flight; the buffer is kept for reuse.
    Idle(Vec<u8>),
    /// A write-all of bytes `poll_write` already reported as written.
    InFlight(S::WriteOp),
    /// No write in flight: the last direct send met a full buffer, and the next one waits
    /// until the stream takes data (the buffer is kept for reuse).
    AwaitingRoom(RoomWait, Vec<u8>),
}

/// A ring-rt [`TcpStream`](crate::net::TcpStream), [`UnixStream`](crate::net::UnixStream)
/// or [`File`](crate::fs::File) as tokio's / futures-io's `AsyncRead`, `AsyncBufRead` and
/// `AsyncWrite`. See the [module docs](self) for what it costs.
///
/// The object is held in an `Rc` so each op in flight holds its own reference: the adapter
/// is not self-referential, and it is `Unpin`. Like the object, it stays on its worker.
///
/// # Examples
///
/// With tokio's traits (feature `tokio-io`), against a plain ring-rt echo server:
///
/// ```
/// use ring_rt::compat::Compat;
/// use ring_rt::net::{TcpListener, TcpStream};
/// use tokio::io::{AsyncReadExt, AsyncWriteExt};
///
/// # #[cfg(feature = "tokio-io")]
/// # fn main() -> std::io::Result<()> {
/// ring_rt::Runtime::new()?.block_on(async {
///     let listener = TcpListener::bind("127.0.0.1:0")?;
///     let stream = TcpStream::connect(listener.local_addr()?).await?;
///     let (server, _) = listener.accept().await?;
///     ring_rt::spawn(async move {
///         let (n, buf) = server.read(Vec::with_capacity(64)).await;
///         if n.is_ok() {
///             let _ = server.write_all(buf).await;
///         }
///     });
///
///     let mut io = Compat::new(stream);
///     io.write_all(b"ping").await?;
///     io.flush().await?;
///     let mut reply = [0u8; 4];
///     io.read_exact(&mut reply).await?;
///     assert_eq!(&reply, b"ping");
///     Ok(())
/// })
/// # }
/// # #[cfg(not(feature = "tokio-io"))]
/// # fn main() {}
/// ```
pub struct Compat<S: CompatIo> {
    read: ReadState<S>,
    write: WriteState<S>,
    io: Rc<S>,
    /// Files: the cursor, where the caller has read or written up to. Streams: unused.
    pos: u64,
    read_cap: usize,
    write_cap: usize,
    /// The write direction was shut down; later writes fail with `BrokenPipe`.
    is_shut: bool,
    /// Bytes `poll_write` accepted while a write was in flight (at most `write_cap`):
    /// they go out together in the next op.
    pending: Vec<u8>,
    /// Files: the read in flight started at a cursor `with_position` has since moved
    /// from; its bytes are dropped when it ends.
    read_is_stale: bool,
    /// Files: where `pending` goes (the cursor when its first byte was accepted; the
    /// cursor may move since, by `with_position`).
    pending_at: u64,
}

impl<S: CompatIo> Drop for Compat<S> {
    fn drop(&mut self) {
        if let ReadState::Idle { buf, at } = &mut self.read {
            if *at < buf.len() {
                self.io.unread(buf.split_off(*at));
            }
        }
    }
}

impl<S: CompatIo> Compat<S> {
    /// Adapts `io`, with 64 KiB buffers allocated on first use.
    ///
    /// # Examples
    ///
    /// With futures-io's traits (feature `futures-io`):
    ///
    /// ```
    /// # #[cfg(feature = "futures-io")]
    /// # fn main() -> std::io::Result<()> {
    /// use futures_util::io::{AsyncReadExt, AsyncWriteExt};
    /// use ring_rt::compat::Compat;
    ///
    /// ring_rt::Runtime::new()?.block_on(async {
    ///     let (a, b) = ring_rt::net::UnixStream::pair()?;
    ///     let (mut a, mut b) = (Compat::new(a), Compat::new(b));
    ///     a.write_all(b"futures-io").await?;
    ///     a.close().await?; // flush, then shut down the write half
    ///     let mut text = String::new();
    ///     b.read_to_string(&mut text).await?;
    ///     assert_eq!(text, "futures-io");
    ///     Ok(())
    /// })
    /// # }
    /// # #[cfg(not(feature = "futures-io"))]
    /// # fn main() {}
    /// ```
    pub fn new(io: S) -> Compat<S> {
        Compat::from_rc(Rc::new(io))
    }

    /// Adapts an object shared with other owners (e.g. one adapter per direction).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::rc::Rc;
    /// use ring_rt::compat::Compat;
    /// use tokio::io::{AsyncReadExt, AsyncWriteExt};
    ///
    /// # #[cfg(feature = "tokio-io")]
    /// # fn main() -> std::io::Result<()> {
    /// ring_rt::Runtime::new()?.block_on(async {
    ///     let (a, b) = ring_rt::net::UnixStream::pair()?;
    ///     let b = Rc::new(b);
    ///     // A reader and a writer over the same stream, e.g. for two tasks.
    ///     let mut reader = Compat::from_rc(b.clone());
    ///     let mut writer = Compat::from_rc(b);
    ///     assert!(Rc::ptr_eq(reader.get_rc(), writer.get_rc()));
    ///
    ///     a.write_all(&b"question"[..]).await.0?;
    ///     let mut buf = [0u8; 8];
    ///     reader.read_exact(&mut buf).await?;
    ///     writer.write_all(b"answer").await?;
    ///     writer.flush().await?;
    ///     let (n, reply) = a.read(Vec::with_capacity(16)).await;
    ///     assert_eq!((n?, &reply[..]), (6, &b"answer"[..]));
    ///     Ok(())
    /// })
    /// # }
    /// # #[cfg(not(feature = "tokio-io"))]
    /// # fn main() {}
    /// ```
    pub fn from_rc(io: Rc<S>) -> Compat<S> {
        Compat {
            read: ReadState::Idle {
                buf: Vec::new(),
                at: 0,
            },
            write: WriteState::Idle(Vec::new()),
            io,
            pos: 0,
            read_cap: DEFAULT_BUF_LEN,
            write_cap: DEFAULT_BUF_LEN,
            is_shut: false,
            pending: Vec::new(),
            pending_at: 0,
            read_is_stale: false,
        }
    }

    /// Sets the largest read and write the adapter issues through its buffers (at least 1
    /// byte each): the sizes of its two internal buffers. Larger buffers mean fewer ops for
    /// bulk data. A write a stream sends straight from the caller's bytes (see the [module
    /// docs](self)) uses no buffer and takes what the socket takes.
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_rt::compat::Compat;
    ///
    /// # #[cfg(feature = "tokio-io")]
    /// # fn main() -> std::io::Result<()> {
    /// ring_rt::Runtime::new()?.block_on(async {
    ///     let (a, b) = ring_rt::net::UnixStream::pair()?;
    ///     let mut tx = Compat::new(a).with_capacity(4096, 1 << 20);
    ///     let mut rx = Compat::new(b).with_capacity(1 << 20, 4096);
    ///     let sender = ring_rt::spawn(async move {
    ///         use tokio::io::AsyncWriteExt;
    ///         tx.write_all(&vec![9u8; 4 << 20]).await?;
    ///         tx.shutdown().await
    ///     });
    ///     let mut sink = tokio::io::sink();
    ///     let copied = tokio::io::copy(&mut rx, &mut sink).await?;
    ///     assert_eq!(copied, 4 << 20);
    ///     sender.await??;
    ///     Ok(())
    /// })
    /// # }
    /// # #[cfg(not(feature = "tokio-io"))]
    /// # fn main() {}
    /// ```
    pub fn with_capacity(mut self, read_cap: usize, write_cap: usize) -> Compat<S> {
        self.read_cap = read_cap.max(1);
        self.write_cap = write_cap.max(1);
        self
    }

    /// Files: moves the cursor to `pos` (0 to start with), at the start or between calls:
    /// what was read ahead from the old cursor is dropped, and bytes already accepted for
    /// writing keep the offsets they were accepted at. Streams: no effect.
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_rt::compat::Compat;
    /// use tokio::io::AsyncReadExt;
    ///
    /// # #[cfg(feature = "tokio-io")]
    /// # fn main() -> std::io::Result<()> {
    /// let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
    /// std::fs::write(&path, "skip:read this")?;
    /// ring_rt::Runtime::new()?.block_on(async {
    ///     let file = ring_rt::fs::File::open(&path).await?;
    ///     let mut io = Compat::new(file).with_position(5);
    ///     let mut text = String::new();
    ///     io.read_to_string(&mut text).await?;
    ///     assert_eq!(text, "read this");
    ///     assert_eq!(io.position(), 14);
    ///     std::io::Result::Ok(())
    /// })?;
    /// std::fs::remove_file(&path)
    /// # }
    /// # #[cfg(not(feature = "tokio-io"))]
    /// # fn main() {}
    /// ```
    pub fn with_position(mut self, pos: u64) -> Compat<S> {
        if S::IS_POSITIONED && pos != self.pos {
            // What was read ahead from the old cursor is not what a read here wants.
            match &mut self.read {
                ReadState::Idle { buf, at } => {
                    buf.clear();
                    *at = 0;
                }
                ReadState::InFlight(_) => self.read_is_stale = true,
            }
        }
        self.pos = pos;
        self
    }

    /// Files: the cursor (bytes read out or accepted for writing move it). Streams: 0. See
    /// [`with_position`](Self::with_position) for an example.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// The adapted object.
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_rt::compat::Compat;
    /// use ring_rt::net::{TcpListener, TcpStream};
    ///
    /// # #[cfg(feature = "tokio-io")]
    /// # fn main() -> std::io::Result<()> {
    /// ring_rt::Runtime::new()?.block_on(async {
    ///     let listener = TcpListener::bind("127.0.0.1:0")?;
    ///     let io = Compat::new(TcpStream::connect(listener.local_addr()?).await?);
    ///     io.get_ref().set_nodelay(true)?; // options stay reachable
    ///     assert_eq!(io.get_ref().peer_addr()?, listener.local_addr()?);
    ///     std::io::Result::Ok(())
    /// })
    /// # }
    /// # #[cfg(not(feature = "tokio-io"))]
    /// # fn main() {}
    /// ```
    pub fn get_ref(&self) -> &S {
        &self.io
    }

    /// The shared handle to the adapted object (see [`from_rc`](Self::from_rc) for an
    /// example).
    pub fn get_rc(&self) -> &Rc<S> {
        &self.io
    }

    /// Bytes read from the kernel but not yet handed out, starting a read if there are
    /// none; empty at end of stream.
    ///
    /// Within the op budget of the task's poll (see `executor::coop`): bytes handed out
    /// from the buffer spend one, as a read would (review CB: 1-byte reads of buffered
    /// bytes never yielded, 4 MiB of a cached file in one poll on epoll).
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<Result<&[u8]>> {
        ready!(crate::worker::poll_budget(cx));
        if matches!(&self.read, ReadState::Idle { buf, at } if *at < buf.len()) {
            coop::spend();
        }
        if S::IS_POSITIONED {
            // A file read must see the bytes this adapter wrote before it.
            ready!(self.poll_write_idle(cx))?;
        }
        loop {
            match &mut self.read {
                ReadState::Idle { buf, at } if *at < buf.len() => break,
                ReadState::Idle { .. } => {
                    if let Err(e) = self.start_read() {
                        return Poll::Ready(Err(e));
                    }
                }
                ReadState::InFlight(op) => {
                    let (res, mut buf) = ready!(Pin::new(op).poll(cx));
                    if mem::take(&mut self.read_is_stale) {
                        // Read at the old cursor: dropped, with its error, and read again.
                        buf.clear();
                        self.read = ReadState::Idle { buf, at: 0 };
                        continue;
                    }
                    self.read = ReadState::Idle { buf, at: 0 };
                    match res {
                        Ok(0) => return Poll::Ready(Ok(&[])),
                        Ok(_) => {}
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(e) => return Poll::Ready(Err(e)),
                    }
                }
            }
        }
        match &self.read {
            ReadState::Idle { buf, at } => Poll::Ready(Ok(&buf[*at..])),
            ReadState::InFlight(_) => unreachable!("the loop only breaks on an idle read"),
        }
    }

    /// Starts a read of up to `read_cap` bytes; `OutOfMemory` if that much cannot be
    /// allocated (a huge `with_capacity`), as `fs::read` and std do.
    fn start_read(&mut self) -> Result<()> {
        let idle = ReadState::Idle {
            buf: Vec::new(),
            at: 0,
        };
        let ReadState::Idle { mut buf, .. } = mem::replace(&mut self.read, idle) else {
            unreachable!("a read starts only when none is in flight")
        };
        // The op fills the buffer from its start, up to its capacity.
        buf.clear();
        if buf.try_reserve_exact(self.read_cap).is_err() {
            return Err(Error::new(
                ErrorKind::OutOfMemory,
                format!(
                    "cannot allocate a {}-byte read buffer (Compat::with_capacity)",
                    self.read_cap
                ),
            ));
        }
        self.read = ReadState::InFlight(self.io.clone().read_owned(buf, self.pos));
        Ok(())
    }

    /// Marks `n` buffered bytes as handed out (more than are buffered is clamped).
    fn consume(&mut self, n: usize) {
        if let ReadState::Idle { buf, at } = &mut self.read {
            let n = n.min(buf.len() - *at);
            *at += n;
            if S::IS_POSITIONED {
                self.pos += n as u64;
            }
        }
    }

    /// Waits until every accepted byte is written: the write in flight, then the bytes
    /// accepted behind it. The first error is returned (the bytes after it are dropped).
    fn poll_write_idle(&mut self, cx: &mut Context<'_>) -> Poll<Result<()>> {
        loop {
            ready!(self.poll_in_flight(cx))?;
            if self.pending.is_empty() {
                return Poll::Ready(Ok(()));
            }
            ready!(self.start_pending(cx))?;
        }
    }

    /// Waits for the write in flight, if any, and returns its result.
    ///
    /// Polled outside the op budget (see `executor::coop`): it only collects the end of a
    /// write already reported accepted, and the bytes accepted behind it start right after
    /// (review CB: held back for the budget, the write ahead of them looked unfinished, the
    /// next `poll_write` queued its bytes behind it too, and nothing sent them until a
    /// flush: a caller awaiting the reply waited for ever).
    fn poll_in_flight(&mut self, cx: &mut Context<'_>) -> Poll<Result<()>> {
        if let WriteState::InFlight(op) = &mut self.write {
            let (res, buf) = ready!(coop::unlimited(|| Pin::new(op).poll(cx)));
            self.write = WriteState::Idle(buf);
            if res.is_err() {
                // What was accepted behind a failed write is not written either.
                self.pending.clear();
            }
            return Poll::Ready(res);
        }
        Poll::Ready(Ok(()))
    }

    /// Starts writing the bytes accepted behind the last write (none is in flight).
    fn start_pending(&mut self, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let spare = match mem::replace(&mut self.write, WriteState::Idle(Vec::new())) {
            WriteState::Idle(buf) | WriteState::AwaitingRoom(_, buf) => buf,
            WriteState::InFlight(_) => {
                unreachable!("pending bytes start only when no write is in flight")
            }
        };
        let buf = mem::replace(&mut self.pending, spare);
        self.pending.clear();
        self.start_write_at(cx, buf, self.pending_at, true)
    }

    /// With a write in flight: takes up to `write_cap` bytes behind it, for the next op;
    /// pending (woken when the write in flight ends) once that much is waiting.
    fn queue_behind(&mut self, bufs: &[IoSlice<'_>]) -> Poll<Result<usize>> {
        if self.is_shut {
            return Poll::Ready(Err(shut_error()));
        }
        if bufs.iter().all(|b| b.is_empty()) {
            return Poll::Ready(Ok(0));
        }
        let room = self.write_cap.saturating_sub(self.pending.len());
        if room == 0 {
            return Poll::Pending;
        }
        let before = self.pending.len();
        if before == 0 {
            self.pending_at = self.pos;
        } else if S::IS_POSITIONED && self.pending_at + before as u64 != self.pos {
            // The cursor moved (`with_position`) since the waiting bytes were accepted:
            // these go elsewhere, so they wait until those have started.
            return Poll::Pending;
        }
        for b in bufs {
            let left = room - (self.pending.len() - before);
            self.pending.extend_from_slice(&b[..left.min(b.len())]);
        }
        let n = self.pending.len() - before;
        if S::IS_POSITIONED {
            self.pos += n as u64;
        }
        Poll::Ready(Ok(n))
    }

    /// Files: waits out a read the caller abandoned and drops the read-ahead, which a write
    /// at the cursor may overwrite (the cursor itself is where the caller stopped reading).
    fn poll_read_settled(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if let ReadState::InFlight(op) = &mut self.read {
            // Nobody waits for this read any more: its bytes and its error are dropped.
            let (_, buf) = ready!(Pin::new(op).poll(cx));
            self.read = ReadState::Idle { buf, at: 0 };
            self.read_is_stale = false;
        }
        if let ReadState::Idle { buf, at } = &mut self.read {
            buf.clear();
            *at = 0;
        }
        Poll::Ready(())
    }

    /// Copies up to `write_cap` bytes of `bufs` and starts writing them; waits first for
    /// the previous write, whose error (if any) is returned instead.
    fn poll_write_bufs(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<Result<usize>> {
        // A write in flight: these bytes wait behind it, so small writes (8 KiB from
        // `tokio::io::copy`) share ops instead of each waiting for the one before.
        loop {
            if self.poll_in_flight(cx)?.is_pending() {
                return self.queue_behind(bufs);
            }
            if self.pending.is_empty() {
                break;
            }
            ready!(self.start_pending(cx))?;
        }
        if self.is_shut {
            return Poll::Ready(Err(shut_error()));
        }
        if bufs.iter().all(|b| b.is_empty()) {
            return Poll::Ready(Ok(0));
        }
        if S::IS_POSITIONED {
            ready!(self.poll_read_settled(cx));
        }
        if let Some(n) = ready!(self.poll_send_now(cx, bufs)) {
            return Poll::Ready(n);
        }
        let mut buf = match mem::replace(&mut self.write, WriteState::Idle(Vec::new())) {
            WriteState::Idle(buf) | WriteState::AwaitingRoom(_, buf) => buf,
            WriteState::InFlight(_) => unreachable!("poll_write_idle left no write in flight"),
        };
        buf.clear();
        for b in bufs {
            let room = self.write_cap - buf.len();
            buf.extend_from_slice(&b[..room.min(b.len())]);
        }
        let n = buf.len();
        ready!(self.start_write_at(cx, buf, self.pos, false))?;
        if S::IS_POSITIONED {
            self.pos += n as u64;
        }
        Poll::Ready(Ok(n))
    }

    /// With nothing in flight: sends what the socket takes now straight from the caller's
    /// bytes, with no copy and no op, as a poll-based runtime writes (`Some` with the
    /// result). A full buffer waits for room and sends again, as a poll-based runtime
    /// does: copied into an op instead, a large body was copied whole on io_uring, where
    /// the op's completion comes a loop turn later (9% of the CPU of 16 MiB responses).
    /// `None` takes the op's way: an object that sends no borrowed bytes (a file, small
    /// writes on io_uring), and a full buffer again right after its room came (the op
    /// waits in the kernel, where polling for room again could spin).
    fn poll_send_now(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<Option<Result<usize>>> {
        // Within the op budget of the task's poll (see `executor::coop`), as an op: a
        // socket that takes every write at once held the worker for a writing loop.
        ready!(crate::worker::poll_budget(cx));
        let mut waited = false;
        loop {
            if let WriteState::AwaitingRoom(room, _) = &mut self.write {
                // Its error is ignored: a socket's error the send below reports; a
                // refusal (polled outside the runtime) leads to the op's way, which
                // reports it.
                let _ = ready!(Pin::new(room).poll(cx));
                self.write = match mem::replace(&mut self.write, WriteState::Idle(Vec::new())) {
                    WriteState::AwaitingRoom(_, buf) => WriteState::Idle(buf),
                    other => other,
                };
                waited = true;
            }
            match self.io.write_now(&capped(bufs)) {
                Some(Ok(n)) => {
                    coop::spend();
                    return Poll::Ready(Some(Ok(n)));
                }
                Some(Err(e)) if e.kind() == ErrorKind::WouldBlock && !waited => {
                    let Some(room) = self.io.wait_for_room() else {
                        return Poll::Ready(None);
                    };
                    self.write = match mem::replace(&mut self.write, WriteState::Idle(Vec::new())) {
                        WriteState::Idle(buf) => WriteState::AwaitingRoom(room, buf),
                        other => other,
                    };
                }
                Some(Err(e))
                    if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted =>
                {
                    return Poll::Ready(None)
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => return Poll::Ready(None),
            }
        }
    }

    /// Starts the write-all of `buf` at `at` (files) and polls it once, so it is submitted
    /// now and this task is woken when it completes. That poll is outside the op budget
    /// (see `executor::coop`): the write is reported accepted, so it must start here (held
    /// back for the budget, nothing sent it until the adapter's next write or flush, and a
    /// caller that wrote a request and then awaited the reply waited for ever).
    ///
    /// A waker whose clone panics in that poll unwinds out of it, nearly always with
    /// nothing of the op submitted yet: io_uring and epoll's blocking pool clone it first.
    /// (On epoll a stream's send is tried before its waker is parked; it meets the full
    /// buffer the direct send met just before, unless the peer read in between.) Bytes
    /// `poll_write` already `accepted` (they waited behind a write) must still be written:
    /// the op is the adapter's before the poll, and the next flush goes on with it (a local
    /// op went with the unwind, and those bytes with it: review BS). Bytes of the
    /// `poll_write` that panicked were never reported written, so they go with the unwind:
    /// kept, they were written after the caller had written others, or the same again
    /// (review BT).
    fn start_write_at(
        &mut self,
        cx: &mut Context<'_>,
        buf: Vec<u8>,
        at: u64,
        accepted: bool,
    ) -> Poll<Result<()>> {
        let mut op = self.io.clone().write_all_owned(buf, at);
        if accepted {
            self.write = WriteState::InFlight(op);
            return match self.poll_in_flight(cx) {
                Poll::Ready(res) => Poll::Ready(res),
                Poll::Pending => Poll::Ready(Ok(())),
            };
        }
        let res = match coop::unlimited(|| Pin::new(&mut op).poll(cx)) {
            Poll::Ready((res, buf)) => {
                self.write = WriteState::Idle(buf);
                res
            }
            Poll::Pending => {
                self.write = WriteState::InFlight(op);
                Ok(())
            }
        };
        Poll::Ready(res)
    }

    fn poll_flush_write(&mut self, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.poll_write_idle(cx)
    }

    /// Flushes, then ends the write direction once (a socket's `shutdown(SHUT_WR)`).
    fn poll_shutdown_write(&mut self, cx: &mut Context<'_>) -> Poll<Result<()>> {
        ready!(self.poll_write_idle(cx))?;
        if !self.is_shut {
            self.io.shutdown_write()?;
            self.is_shut = true;
        }
        Poll::Ready(Ok(()))
    }
}

fn shut_error() -> Error {
    Error::new(ErrorKind::BrokenPipe, "write after poll_shutdown")
}

/// `bufs` in at most `UIO_MAXIOV` (1,024) non-empty slices, what one `sendmsg` takes (more
/// is `EMSGSIZE`); all of them, borrowed as they are, when there are few enough. std's
/// `write_vectored` caps what it passes on the same way.
fn capped<'a>(bufs: &'a [IoSlice<'a>]) -> std::borrow::Cow<'a, [IoSlice<'a>]> {
    let max = libc::UIO_MAXIOV as usize;
    if bufs.len() <= max {
        return std::borrow::Cow::Borrowed(bufs);
    }
    let out = bufs.iter().filter(|b| !b.is_empty()).take(max);
    std::borrow::Cow::Owned(out.map(|b| IoSlice::new(b)).collect())
}

impl<S: CompatIo + fmt::Debug> fmt::Debug for Compat<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let buffered = match &self.read {
            ReadState::Idle { buf, at } => Some(buf.len() - at),
            ReadState::InFlight(_) => None,
        };
        f.debug_struct("Compat")
            .field("io", &self.io)
            .field("read_buffered", &buffered)
            .field(
                "write_in_flight",
                &matches!(self.write, WriteState::InFlight(_)),
            )
            .field("write_pending", &self.pending.len())
            .field("pos", &self.pos)
            .finish()
    }
}
