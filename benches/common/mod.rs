//! What the runtime micro-benches share: one loop body timed on each ring-rt backend and on
//! tokio current_thread, inside a running `block_on`.

use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::BenchmarkGroup;
use ring_bench::crit;

/// Benches `ring_iter` on both ring-rt backends and `tokio_iter` on tokio current_thread;
/// each is called with the iteration number and awaited once per iteration.
pub fn on_each_runtime(
    group: &mut BenchmarkGroup<'_, WallTime>,
    ring_iter: impl AsyncFn(u64),
    tokio_iter: impl AsyncFn(u64),
) {
    for (kind, label) in crit::BACKENDS {
        let rt = crit::runtime(kind).expect("ring-rt runtime");
        group.bench_function(label, |b| {
            b.iter_custom(|iters| rt.block_on(timed(iters, &ring_iter)))
        });
    }
    let rt = crit::tokio_current_thread().expect("tokio runtime");
    group.bench_function("tokio/current_thread", |b| {
        b.iter_custom(|iters| rt.block_on(timed(iters, &tokio_iter)))
    });
}

async fn timed(iters: u64, body: &impl AsyncFn(u64)) -> Duration {
    let start = Instant::now();
    for i in 0..iters {
        body(i).await;
    }
    start.elapsed()
}
