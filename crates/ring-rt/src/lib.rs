//! ring-rt: an async runtime for Linux, io_uring first, with an epoll fallback chosen at run
//! time.
//!
//! Ops are submitted on first poll and own their buffers: a read takes a buffer and gives it
//! back with the result, on success and on error. Dropping a future in flight cancels the
//! op; the kernel's late completion is reaped by the runtime (a late accepted fd is closed, a
//! late provided buffer returned), and nothing the kernel may still touch is freed.

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
