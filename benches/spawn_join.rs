//! `cargo bench -p ring-bench --bench spawn_join`: spawn a trivial task and await its
//! `JoinHandle` from inside `block_on`, ring-rt (both backends) vs tokio current_thread.

mod common;

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};

fn spawn_join(c: &mut Criterion) {
    let mut group = c.benchmark_group("spawn_join");
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(2));
    common::on_each_runtime(
        &mut group,
        async |i| {
            let task = ring_rt::spawn(async move { black_box(i) });
            black_box(task.await.expect("task ran"));
        },
        async |i| {
            let task = tokio::spawn(async move { black_box(i) });
            black_box(task.await.expect("task ran"));
        },
    );
    group.finish();
}

criterion_group!(benches, spawn_join);
criterion_main!(benches);
