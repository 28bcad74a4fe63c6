//! ring-rt
