//! Buffer-ring index arithmetic: push/commit against a simulated kernel consuming from the
//! head, rings of 1..=1024 entries, across u16 wrap-around (see
//! `crates/ring-core/tests/model/buf_index.rs`).

#![no_main]

#[path = "../../crates/ring-core/tests/model/mod.rs"]
mod model;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    model::buf_index::run_ring(data, 10);
});
