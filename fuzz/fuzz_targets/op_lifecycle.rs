//! The op table and every lifecycle transition against a model: random orders of submit,
//! poll, drop, CQE arrival, multishot CQEs, late CQEs after a drop, stale and reserved
//! `user_data` (see `crates/ring-core/tests/model/op_lifecycle.rs` for the invariants).

#![no_main]

#[path = "../../crates/ring-core/tests/model/mod.rs"]
mod model;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    model::op_lifecycle::run(data);
});
