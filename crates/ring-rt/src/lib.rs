//! ring-rt: an async runtime for Linux, io_uring first, with an epoll fallback chosen at
//! run time.
//!
//! ```no_run
//! use ring_rt::net::TcpListener;
//!
//! fn main() -> std::io::Result<()> {
//!     let rt = ring_rt::Runtime::new()?;
//!     rt.block_on(async {
//!         let listener = TcpListener::bind("127.0.0.1:7000")?;
//!         let mut incoming = listener.incoming();
//!         while let Some(stream) = incoming.next().await {
//!             let stream = stream?;
//!             ring_rt::spawn(async move {
//!                 let mut rx = stream.recv_stream();
//!                 while let Some(Ok(buf)) = rx.next().await {
//!                     if stream.write_all(buf).await.0.is_err() {
//!                         break;
//!                     }
//!                 }
//!             });
//!         }
//!         Ok(())
//!     })
//! }
//! ```
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
//! # What dropping a future does
//! An op is submitted on its first poll. Dropping it before that does nothing. Dropping it
//! in flight cancels it (`IORING_OP_ASYNC_CANCEL`) and hands its memory to the runtime,
//! which keeps it until the kernel's final completion; that completion is then released:
//! an accepted or opened fd nobody will see is closed, a provided buffer goes back to its
//! pool. Nothing the kernel may still write is ever freed, and no fd leaks. Dropping the
//! [`Runtime`] drops every task this way and waits for the kernel to finish.
//!
//! # Two backends, chosen at run time
//! The runtime uses io_uring unless ring setup fails (ENOSYS: no io_uring or a seccomp
//! profile such as Podman's; EPERM: Docker's default profile or
//! `kernel.io_uring_disabled`; ENOMEM: a low memlock limit before 5.12) or the kernel lacks
//! an opcode it needs (the 5.6 set); then it uses epoll, with a bounded thread pool for
//! files. [`Runtime::backend`] says which one runs and why, including how to enable
//! io_uring. `RING_RT_BACKEND=uring|epoll` or [`Builder::backend`] forces one; forcing
//! io_uring where it is unavailable is an error, never a silent fallback. Both backends
//! run the same op code: the epoll backend produces the completions the kernel would.
//!
//! # Minimum kernels
//! | feature | io_uring needs | without it |
//! | --- | --- | --- |
//! | the io_uring backend at all | 5.6 (accept, cancel, read/write/send/recv, openat, statx) | epoll |
//! | wait with timeout in one syscall (`EXT_ARG`) | 5.11 | a timeout SQE per wait |
//! | unlinkat / renameat, mkdirat, ftruncate | 5.11, 5.15, 6.9 | the syscall on the loop thread |
//! | provided buffers (pooled receives) | 5.7 (`PROVIDE_BUFFERS`), 5.19 (buffer rings) | buffer taken after a readiness poll |
//! | multishot accept | 5.19 | one accept per connection |
//! | multishot recv | 6.0 | one recv per chunk |
//! | zero-copy send (`send_zc`) | 6.0 | plain send |
//! | `COOP_TASKRUN`, `SINGLE_ISSUER`, `DEFER_TASKRUN` | 5.19, 6.0, 6.1 | set up without them |
//!
//! `RING_FEATURES=5.11` (or [`Builder::feature_mask`]) makes the runtime behave as on an
//! older kernel, so those paths can be tested on a new one.

#![deny(missing_docs)]

pub mod backend;
pub mod buf;
mod builder;
#[cfg(any(feature = "tokio-io", feature = "futures-io"))]
pub mod compat;
mod executor;
pub mod fs;
pub mod net;
pub mod op;
pub mod pool;
mod runtime;
mod select;
pub mod signal;
mod sys;
pub mod time;
mod unpark;
mod worker;

pub use backend::BackendKind;
pub use executor::task::{JoinError, JoinHandle};
pub use runtime::{spawn, yield_now, Builder, Runtime, RuntimeMetrics};
pub use select::BackendChoice;

/// ring-core's feature mask and features, for [`Builder::feature_mask`] and reports.
pub use ring_core::probe::{Feature, FeatureMask, Features};
