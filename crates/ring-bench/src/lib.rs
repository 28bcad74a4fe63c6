//! ring-bench: the echo load generator and benchmark drivers comparing ring-rt with tokio.

pub mod cell;
pub mod count;
pub mod crit;
pub mod echo_bench;
pub mod fileio;
pub mod flavor;
pub mod idle;
pub mod json;
pub mod load;
pub mod plot;
pub mod report;
pub mod seed;
pub mod server;
pub mod stats;
pub mod strace;
pub mod sys;
