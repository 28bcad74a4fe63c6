//! Buffer groups in User (epoll) and Legacy (`PROVIDE_BUFFERS`) mode against a model of where
//! each bid is: take, kernel pick, lease, drop, recycle, bogus returns, provide runs,
//! failed provides (see `crates/ring-core/tests/model/buf_index.rs`).

#![no_main]

#[path = "../../crates/ring-core/tests/model/mod.rs"]
mod model;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    model::buf_index::run_group(rest, mode & 1 == 1);
});
