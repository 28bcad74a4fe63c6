//! ring-bench
