//! `cargo bench -p ring-bench --bench spawn_join`: spawn a trivial task and await its
//! `JoinHandle` from inside `block_on`, ring-rt (both backends) vs tokio current_thread.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use ring_bench::crit;

fn spawn_join(c: &mut Criterion) {
    let mut group = c.benchmark_group("spawn_join");
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(2));
    for (kind, label) in crit::BACKENDS {
        let rt = crit::runtime(kind).expect("ring-rt runtime");
        group.bench_function(label, |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let start = Instant::now();
                    for i in 0..iters {
                        let task = ring_rt::spawn(async move { black_box(i) });
                        black_box(task.await.expect("task ran"));
                    }
                    start.elapsed()
                })
            })
        });
    }
    let rt = crit::tokio_current_thread().expect("tokio runtime");
    group.bench_function("tokio/current_thread", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for i in 0..iters {
                    let task = tokio::spawn(async move { black_box(i) });
                    black_box(task.await.expect("task ran"));
                }
                start.elapsed()
            })
        })
    });
    group.finish();
}

criterion_group!(benches, spawn_join);
criterion_main!(benches);
