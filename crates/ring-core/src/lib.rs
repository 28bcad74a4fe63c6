//! ring-core: the io_uring completion driver under ring-rt.
//!
//! Mechanism only: probing what the kernel offers ([`probe`]), building a ring from it
//! ([`setup`]), batching submissions and draining completions ([`driver`]), tracking every
//! op in flight by `user_data` ([`op_table`], [`lifecycle`], [`user_data`]), provided buffers
//! ([`buf_ring`], [`buf_pool`]), registered files and buffers ([`register`]), direct descriptors ([`direct`]) and counters
//! ([`metrics`]). Policy (executor, futures, sockets, backend choice) lives in ring-rt.

#![deny(missing_docs)]

pub mod buf_pool;
pub mod buf_ring;
pub mod cqe;
pub mod direct;
pub mod driver;
pub mod errno;
pub mod lifecycle;
pub mod metrics;
pub mod op_table;
pub mod probe;
pub mod register;
pub mod register_buf;
pub mod release;
pub mod setup;
pub mod user_data;
