//! `cargo bench -p ring-bench --bench sleep_zero`: `sleep(Duration::ZERO).await` inside a
//! running `block_on`, ring-rt (both backends) vs tokio current_thread. ring-rt's `Sleep`
//! returns at its first poll when the deadline has passed, so this is its fast path.

mod common;

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};

fn sleep_zero(c: &mut Criterion) {
    let mut group = c.benchmark_group("sleep_zero");
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(2));
    common::on_each_runtime(
        &mut group,
        async |_| ring_rt::time::sleep(black_box(Duration::ZERO)).await,
        async |_| tokio::time::sleep(black_box(Duration::ZERO)).await,
    );
    group.finish();
}

criterion_group!(benches, sleep_zero);
criterion_main!(benches);
