//! ring-bench: the echo load generator and benchmark drivers comparing ring-rt with tokio.

pub mod load;
pub mod stats;
