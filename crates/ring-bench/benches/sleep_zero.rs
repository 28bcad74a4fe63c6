//! `cargo bench -p ring-bench --bench sleep_zero`: `sleep(Duration::ZERO).await` inside a
//! running `block_on`, ring-rt (both backends) vs tokio current_thread. ring-rt's `Sleep`
//! returns at its first poll when the deadline has passed, so this is its fast path.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use ring_bench::crit;

fn sleep_zero(c: &mut Criterion) {
    let mut group = c.benchmark_group("sleep_zero");
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(2));
    for (kind, label) in crit::BACKENDS {
        let rt = crit::runtime(kind).expect("ring-rt runtime");
        group.bench_function(label, |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        ring_rt::time::sleep(black_box(Duration::ZERO)).await;
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
                for _ in 0..iters {
                    tokio::time::sleep(black_box(Duration::ZERO)).await;
                }
                start.elapsed()
            })
        })
    });
    group.finish();
}

criterion_group!(benches, sleep_zero);
criterion_main!(benches);
