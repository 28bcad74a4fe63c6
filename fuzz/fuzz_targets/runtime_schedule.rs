//! The runtime on real sockets and files: a fuzzed program of recv, pooled recv, multishot
//! recv stream, read, write, accept, incoming, connect, file ops and sleeps, each dropped by
//! a fuzzed policy (timeout, link timeout, abort, after k polls), on io_uring or epoll (first
//! byte), with injected faults (panicking destructors and wakers, the process out of fds).
//! Invariants: no panic, no hang, every op not dropped completes, buffers handed back,
//! fds and ops in flight back to baseline, every orphan reaped, no pooled buffer out (see
//! `crates/ring-rt/tests/reliability_program/mod.rs`).

#![no_main]

#[path = "../../crates/ring-rt/tests/reliability_program/mod.rs"]
mod reliability_program;

use ring_rt::BackendKind;

static HOOK: std::sync::Once = std::sync::Once::new();

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    // After libFuzzer's own hook (set before the first input), which aborts on any panic:
    // the panics a program injects on purpose (destructors, wakers) are caught and checked
    // by the program itself.
    HOOK.call_once(reliability_program::silence_injected_panics);
    let Some((&backend, program)) = data.split_first() else {
        return;
    };
    let kind = if backend & 1 == 0 {
        BackendKind::Uring
    } else {
        BackendKind::Epoll
    };
    if let Err(violation) = reliability_program::run(kind, program) {
        panic!("{kind}: {violation}");
    }
});
