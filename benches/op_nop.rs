//! `cargo bench -p ring-bench --bench op_nop`: the cost of one op round trip through
//! ring-core's op table (`IORING_OP_NOP`: submit, enter, reap, poll), one per enter and 64
//! per enter; and ring-rt's cheapest public op, a 0-byte `read_at` (ring-rt exposes no NOP),
//! on both backends.

use std::hint::black_box;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use io_uring::{opcode, squeue};
use ring_bench::crit;
use ring_core::cqe::Cqe;
use ring_core::driver::{Driver, DriverConfig, Wait};
use ring_core::probe::Features;
use ring_core::setup::RingConfig;
use ring_core::user_data::OpId;
use ring_rt::fs::File;

/// NOPs per enter in the batched variant.
const BATCH: usize = 64;

fn nop() -> squeue::Entry {
    opcode::Nop::new().build()
}

fn driver() -> Driver {
    let features = Features::probe().expect("op_nop needs io_uring").clone();
    let config = DriverConfig {
        ring: RingConfig::default(),
        features,
    };
    Driver::new(&config).expect("ring setup")
}

/// Turns the driver until op `id` has its CQE.
fn reap(driver: &mut Driver, id: OpId) -> Cqe {
    loop {
        if let Poll::Ready(cqe) = driver.poll_op(id, Waker::noop()) {
            return cqe.expect("NOP completes");
        }
        driver.turn(Wait::Forever).expect("io_uring_enter");
    }
}

fn core_nops(c: &mut Criterion) {
    let mut group = c.benchmark_group("op_nop");
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(2));
    let mut ring = driver();
    group.throughput(Throughput::Elements(1));
    group.bench_function("ring-core/1_per_enter", |b| {
        b.iter(|| {
            // SAFETY: a NOP points at no memory.
            let id = unsafe { ring.submit_op(nop()) }.expect("op table slot");
            ring.turn(Wait::Forever).expect("io_uring_enter");
            black_box(reap(&mut ring, id))
        })
    });
    group.throughput(Throughput::Elements(BATCH as u64));
    let mut ids = Vec::with_capacity(BATCH);
    group.bench_function(BenchmarkId::new("ring-core/batch", BATCH), |b| {
        b.iter(|| {
            ids.clear();
            // SAFETY: NOPs point at no memory.
            ids.extend(
                (0..BATCH).map(|_| unsafe { ring.submit_op(nop()) }.expect("op table slot")),
            );
            ring.turn(Wait::Forever).expect("io_uring_enter");
            for &id in &ids {
                black_box(reap(&mut ring, id));
            }
        })
    });
    group.throughput(Throughput::Elements(1));
    // A regular file on ext4, whose reads io_uring completes inline (a device such as
    // /dev/null may be punted to an io-wq thread instead).
    let path = crit::bench_files_dir().join("op-nop-4k.bin");
    crit::ensure_file(&path, crit::BLOCK_BYTES as u64).expect("bench file");
    for (kind, label) in crit::BACKENDS {
        let rt = crit::runtime(kind).expect("ring-rt runtime");
        let file = rt.block_on(File::open(&path)).expect("open bench file");
        group.bench_function(format!("{label}/read_at_0B"), |b| {
            b.iter_custom(|iters| rt.block_on(zero_reads(&file, iters)))
        });
        drop(file);
    }
    group.finish();
}

/// `iters` 0-byte reads, one at a time, each handing its (empty) buffer to the next.
async fn zero_reads(file: &File, iters: u64) -> Duration {
    let mut buf = Vec::new();
    let start = Instant::now();
    for _ in 0..iters {
        let (res, back) = file.read_at(buf, 0).await;
        black_box(res.expect("0-byte read"));
        buf = back;
    }
    start.elapsed()
}

criterion_group!(benches, core_nops);
criterion_main!(benches);
