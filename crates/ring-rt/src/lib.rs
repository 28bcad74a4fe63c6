//! ring-rt: an async runtime for Linux, io_uring first, with an epoll fallback chosen at
//! run time.
//!
//! Each worker is one thread with its own ring (or epoll instance), its own tasks and
//! timers; tasks need not be `Send`, and a [`Handle`] reaches every worker from any
//! thread. The pieces: [`Runtime`] and [`Builder`], [`spawn`] and [`Handle`], sockets in
//! [`net`], files in [`fs`], timers in [`time`], signals in [`signal`], owned buffers in
//! [`buf`] and [`pool`], linked ops and op timeouts in [`op::link`], adapters to tokio's
//! and futures-io's I/O traits (and hyper's timer) in `compat`, and the
//! `#[ring_rt::main]` and `#[ring_rt::test]` attributes ([`main`](macro@main),
//! [`test`](macro@test)) (features below). Coming from tokio: [`from_tokio`] maps
//! tokio's API to ring-rt's.
//!
//! An echo server (not run as a test: it serves forever; the examples on each item run,
//! on `127.0.0.1:0`):
//!
//! ```no_run
//! use ring_rt::net::TcpListener;
//!
//! #[ring_rt::main]
//! async fn main() -> std::io::Result<()> {
//!     let listener = TcpListener::bind("127.0.0.1:7000")?;
//!     let mut incoming = listener.incoming();
//!     while let Some(stream) = incoming.next().await {
//!         let stream = stream?;
//!         ring_rt::spawn(async move {
//!             let mut rx = stream.recv_stream();
//!             while let Some(Ok(buf)) = rx.next().await {
//!                 if stream.write_all(buf).await.0.is_err() {
//!                     break;
//!                 }
//!             }
//!         });
//!     }
//!     Ok(())
//! }
//! ```
//!
//! `#[ring_rt::main]` builds a [`Runtime`] (one worker per CPU; the calling thread is
//! worker 0, and this loop runs there) and runs the body with [`Runtime::block_on`];
//! without the attribute, `ring_rt::Runtime::new()?.block_on(async { ... })` does the same.
//!
//! # Buffers belong to the operation
//! A completion-based op hands the kernel a pointer and gets the result later, so the
//! memory must stay put until the kernel is done. ring-rt ops therefore take their buffers
//! by value ([`buf::IoBuf`], [`buf::IoBufMut`]: `Vec<u8>`, `Box<[u8]>`, `&'static [u8]`,
//! `bytes::BytesMut` with the `bytes` feature, and [`buf::Slice`]s of them) and give them
//! back with the result, on success and on error: `let (res, buf) = stream.read(buf).await;`.
//! Receives can also use the worker's shared pool ([`net::TcpStream::recv_pooled`],
//! [`net::TcpStream::recv_stream`]): the kernel picks a buffer only when data arrives, so
//! an idle connection holds none.
//!
//! ```
//! # fn main() -> std::io::Result<()> {
//! ring_rt::Runtime::new()?.block_on(async {
//!     let (a, b) = ring_rt::net::UnixStream::pair()?;
//!     let (res, buf) = a.write_all(b"owned".to_vec()).await; // the Vec moves in...
//!     res?;
//!     let (n, buf) = b.read(buf).await; // ...comes back, and is reused for a read
//!     assert_eq!(&buf[..n?], b"owned");
//!
//!     a.shutdown(std::net::Shutdown::Write)?;
//!     let (res, buf) = a.write_all(buf).await; // fails (EPIPE): the buffer still comes back
//!     assert!(res.is_err() && buf == b"owned");
//!     Ok(())
//! })
//! # }
//! ```
//!
//! # What dropping a future does
//! An op is submitted on its first poll. Dropping it before that does nothing. Dropping it
//! in flight cancels it (`IORING_OP_ASYNC_CANCEL`) and hands its memory to the runtime,
//! which keeps it until the kernel's final completion; that completion is then released:
//! an accepted or opened fd nobody will see is closed, a provided buffer goes back to its
//! pool. Nothing the kernel may still write is ever freed, and no fd leaks. Dropping the
//! [`Runtime`] drops every task this way and waits for the kernel to finish.
//!
//! Futures are dropped by [`time::timeout`], by [`JoinHandle::abort`], or by any
//! `select`-style code; [`op::link::Pending::timeout`] instead bounds one op in the kernel
//! and hands its buffer back.
//!
//! Every receive is cancel-safe: a read, `recv_pooled`, `recv_from`, an accept, or a
//! [`net::RecvStream`] or [`net::Incoming`] dropped after the kernel completed it (with
//! completion I/O the data is already in the op's buffer) hands what it got to its
//! socket, and the next receive on that socket returns it first, in order: bytes on a
//! stream, the datagram with its sender on UDP, the connection on a listener. So
//! `timeout(d, stream.read(buf))` in a loop, or a `select` that lost, never loses data.
//!
//! A write or `write_all` dropped in flight may already have sent part of its buffer
//! (`write_all` sends it in pieces when the socket takes less): how much reached the peer
//! is then unknown, so a stream protocol should treat the connection as broken.
//!
//! ```
//! use std::time::Duration;
//!
//! # fn main() -> std::io::Result<()> {
//! ring_rt::Runtime::new()?.block_on(async {
//!     let (a, b) = ring_rt::net::UnixStream::pair()?;
//!     // Nothing to read: the read is in the kernel when the timeout drops it. Its buffer
//!     // stays with the runtime until the cancellation completes.
//!     let read = ring_rt::time::timeout(Duration::from_millis(5), b.read(vec![0; 64]));
//!     assert!(read.await.is_err());
//!     // The stream is still usable.
//!     a.write_all(&b"later"[..]).await.0?;
//!     let (n, _) = b.read(vec![0; 64]).await;
//!     assert_eq!(n?, 5);
//!     Ok(())
//! })
//! # }
//! ```
//!
//! # Workers, and what may cross threads
//! A runtime has one worker per CPU by default ([`Builder::threads`] sets another count);
//! the thread that builds it is worker 0 and runs inside [`Runtime::block_on`], the others
//! are threads of their own. Each worker has its own ring (or epoll instance), tasks and
//! timers, and takes no lock on the I/O path: a socket, a file, a timer and the futures that
//! use them belong to the worker that made them (`!Send`), and [`spawn`] puts a future,
//! which need not be `Send`, on the worker it is called on.
//!
//! Work crosses workers through a [`Handle`] (`Send + Sync + Clone`: [`Handle::current`],
//! [`Runtime::handle`]), usable from any thread, inside or outside the runtime:
//! [`Handle::spawn`] a `Send` future onto the least loaded worker (or [`Handle::spawn_on`] a
//! chosen one), [`Handle::spawn_local`] a `Send` closure that builds a `!Send` future on
//! its worker, [`Handle::spawn_blocking`] (or [`spawn_blocking`]) a blocking closure onto
//! the runtime's thread pool, on either backend. Every [`JoinHandle`] is `Send` when its
//! output is, and can be awaited on any worker or thread. [`Handle::serve_balanced`]
//! serves each connection of one listener on the least loaded worker; one
//! `SO_REUSEPORT` listener per worker ([`net::tcp::ListenOptions`] with
//! [`Runtime::spawn_on_all`]) lets the kernel spread them by a hash instead.
//!
//! Between io_uring workers a wake-up (a task woken from another worker, a spawn sent
//! there) is an `IORING_OP_MSG_RING` CQE posted into the sleeping worker's ring (5.18+),
//! sent with the waking worker's next submission; threads outside the runtime, the epoll
//! backend and older kernels write the worker's eventfd.
//!
//! Code that wants `Send` futures (axum's handlers, for one) runs its ring-rt I/O as a
//! task of its own worker and awaits that task's handle, which is `Send`:
//!
//! ```
//! // A handler-shaped function whose future must be Send.
//! fn handler(path: std::path::PathBuf) -> impl std::future::Future<Output = std::io::Result<Vec<u8>>> + Send {
//!     async move {
//!         // The read future is !Send (it belongs to this worker): it runs as a task here.
//!         let read = ring_rt::spawn(async move { ring_rt::fs::read(path).await });
//!         read.await?
//!     }
//! }
//! # let path = std::env::temp_dir().join(format!("ring-rt-doc-send-{}", std::process::id()));
//! # std::fs::write(&path, "bridged")?;
//! let rt = ring_rt::Runtime::new()?;
//! assert_eq!(rt.block_on(handler(path.clone()))?, b"bridged");
//! # std::fs::remove_file(&path)?;
//! # std::io::Result::Ok(())
//! ```
//!
//! examples/axum.rs serves an axum `Router` this way on every worker. A tokio timer or
//! tokio socket inside ring-rt panics ("there is no reactor running"): use ring-rt's.
//!
//! # Two backends, chosen at run time
//! The runtime uses io_uring unless ring setup fails (ENOSYS: no io_uring or a seccomp
//! profile such as Podman's; EPERM: Docker's default profile or
//! `kernel.io_uring_disabled`; ENOMEM: a low memlock limit before 5.12) or the kernel lacks
//! an opcode it needs (the 5.6 set); then it uses epoll, with a bounded thread pool for
//! files ([`Builder::blocking_threads`] sizes it, and caps io_uring's own io-wq workers
//! alike). [`Runtime::backend`] says which one runs and why, including how to enable
//! io_uring. `RING_RT_BACKEND=uring|epoll` or [`Builder::backend`] forces one (the builder
//! wins over the variable); forcing io_uring where it is unavailable is an error, never a
//! silent fallback. Both backends run the same op code: the epoll backend produces the
//! completions the kernel would, so programs behave the same on both (the examples in these
//! docs pass on both: `RING_RT_BACKEND=epoll cargo test --doc`).
//!
//! ```
//! use ring_rt::{BackendKind, Runtime};
//!
//! let rt = Runtime::new()?;
//! println!("{}", rt.backend()); // e.g. "uring (io_uring available)"
//! if rt.backend().is_fallback() {
//!     eprintln!("io_uring not usable: {}", rt.backend().reason);
//! }
//! let forced = Runtime::builder().backend(BackendKind::Epoll).build()?;
//! assert_eq!(forced.backend().kind, BackendKind::Epoll);
//! # std::io::Result::Ok(())
//! ```
//!
//! # Minimum kernels
//! The epoll backend runs on any kernel Rust supports (3.2+). What io_uring needs, by
//! mainline kernel (ring-core probes each feature instead of trusting the version, so
//! backports count):
//!
//! | feature | io_uring needs | without it |
//! | --- | --- | --- |
//! | io_uring itself (ring-core's driver and probe) | 5.1 | epoll |
//! | ring-rt's io_uring backend: sockets, files, timeouts, cancel, linked ops (the 5.6 opcodes) | 5.6 | epoll |
//! | the opcode probe (`IORING_REGISTER_PROBE`) | 5.6 | opcodes inferred from the kernel version |
//! | sockets waiting by internal poll (`FAST_POLL`) | 5.7 | a waiting socket op holds a kernel worker thread |
//! | wait with timeout in one syscall (`EXT_ARG`) | 5.11 | a timeout SQE per wait |
//! | unlinkat / renameat, mkdirat, ftruncate | 5.11, 5.15, 6.9 | the syscall on the loop thread |
//! | [`Builder::sqpoll`] without privileges | 5.11 | no SQ thread |
//! | ring memory not charged to `RLIMIT_MEMLOCK` | 5.12 | setup may fail with ENOMEM: epoll |
//! | `SUBMIT_ALL` (a failing SQE does not stop the batch) | 5.18 | set up without it |
//! | provided buffers (pooled receives) | 5.7 (`PROVIDE_BUFFERS`), 5.19 (buffer rings) | buffer taken after a readiness poll |
//! | multishot accept ([`net::TcpListener::incoming`]) | 5.19 | one accept per connection |
//! | multishot recv ([`net::TcpStream::recv_stream`]) | 6.0 | one recv per chunk |
//! | zero-copy send ([`net::TcpStream::send_zc`]) | 6.0 | plain send |
//! | `COOP_TASKRUN` + `TASKRUN_FLAG`, `SINGLE_ISSUER`, `DEFER_TASKRUN` | 5.19, 6.0, 6.1 | set up without them |
//! | `O_DIRECT` alignment in statx ([`fs::Metadata::direct_io_align`]) | 6.1 | `None` |
//! | batched waits ([`Builder::batch_wait`], `MIN_TIMEOUT`) | 6.12 | one completion wakes the loop |
//! | spinning before a sleep ([`Builder::spin_before_park`]) without a syscall per spin (`TASKRUN_FLAG`) | 5.19 | an `io_uring_enter` per spinning turn |
//!
//! `cargo xtask probe` prints what this kernel has, and which of it ring-rt uses.
//!
//! `RING_FEATURES=5.11` (or [`Builder::feature_mask`]) makes the runtime behave as on an
//! older kernel, so those paths can be tested on a new one.
//!
//! ```
//! use ring_rt::{Feature, FeatureMask, Runtime};
//!
//! let rt = Runtime::builder().feature_mask(FeatureMask::parse("5.11").unwrap()).build()?;
//! if let Some(features) = rt.features() {
//!     assert!(!features.has(Feature::MultishotAccept)); // 5.19: hidden by the mask
//! }
//! # std::io::Result::Ok(())
//! ```
//!
//! # Cargo features
//! - `macros` (on by default): the `#[ring_rt::main]` and `#[ring_rt::test]` attributes,
//!   from the ring-rt-macros crate.
//! - `tokio-io`: `compat::Compat` implements tokio's `AsyncRead`, `AsyncBufRead` and
//!   `AsyncWrite` (for hyper, tokio-util codecs, ...).
//! - `futures-io`: the same for the `futures-io` traits.
//! - `hyper`: `compat::HyperTimer`, hyper's `Timer` over ring-rt's timers (for hyper's
//!   timeouts, such as the header-read timeout); it turns on `tokio-io` too.
//! - `bytes`: `bytes::Bytes` and `BytesMut` are owned buffers ([`buf::IoBuf`],
//!   [`buf::IoBufMut`]).
//!
//! Only `macros` is on by default. With `bytes`:
//!
//! ```
//! # #[cfg(feature = "bytes")]
//! # fn main() -> std::io::Result<()> {
//! use bytes::BytesMut;
//!
//! ring_rt::Runtime::new()?.block_on(async {
//!     let (a, b) = ring_rt::net::UnixStream::pair()?;
//!     a.write_all(bytes::Bytes::from_static(b"frame")).await.0?;
//!     let (n, buf) = b.read(BytesMut::with_capacity(64)).await;
//!     assert_eq!(n?, 5);
//!     assert_eq!(&buf[..], b"frame");
//!     Ok(())
//! })
//! # }
//! # #[cfg(not(feature = "bytes"))]
//! # fn main() {}
//! ```

#![deny(missing_docs)]

pub mod backend;
pub mod buf;
mod builder;
#[cfg(any(feature = "tokio-io", feature = "futures-io"))]
pub mod compat;
mod completion;
mod executor;
pub mod fs;
// The page is docs/FROM_TOKIO.md (this file is a link to it, so that the published crate
// has it); its examples run as this crate's doc tests.
#[doc = include_str!("../FROM_TOKIO.md")]
pub mod from_tokio {}
pub mod net;
pub mod op;
pub mod pool;
mod runtime;
pub mod signal;
mod sys;
pub mod time;
mod unpark;
mod waiters;
mod worker;

pub use backend::{BackendChoice, BackendKind};
pub use builder::Builder;
pub use executor::coop::{unconstrained, Unconstrained};
pub use executor::task::{JoinError, JoinHandle};
#[cfg(feature = "macros")]
pub use ring_rt_macros::{main, test};
pub use runtime::{
    spawn, spawn_blocking, yield_now, Handle, Runtime, RuntimeMetrics, WorkerMetrics,
};

/// ring-core's feature mask and features, for [`Builder::feature_mask`] and reports.
pub use ring_core::probe::{Feature, FeatureMask, Features};
