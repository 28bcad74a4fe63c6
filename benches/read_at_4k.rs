//! `cargo bench -p ring-bench --bench read_at_4k`: one 4 KiB positional read of a
//! page-cache-warm 1 MiB file, offsets 0, 4096, ... wrapping: ring-rt on io_uring, ring-rt
//! on epoll (its blocking pool), std `FileExt::read_at`, and `tokio::fs::File` (seek +
//! read on a current_thread runtime). Each reuses one buffer.

use std::hint::black_box;
use std::io::SeekFrom;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ring_bench::crit::{self, BLOCK_BYTES};
use ring_rt::fs::File;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

const FILE_BYTES: u64 = 1 << 20;
const BLOCKS: u64 = FILE_BYTES / BLOCK_BYTES as u64;

/// The offset of read `i`: the file's blocks in order, wrapping.
fn pos(i: u64) -> u64 {
    (i % BLOCKS) * BLOCK_BYTES as u64
}

/// Creates the file and reads it once so every bench starts from the page cache.
fn warm_file() -> std::path::PathBuf {
    let path = crit::bench_files_dir().join("read-at-1m.bin");
    crit::ensure_file(&path, FILE_BYTES).expect("bench file");
    let data = std::fs::read(&path).expect("warm the page cache");
    assert_eq!(data.len() as u64, FILE_BYTES, "bench file size");
    path
}

fn read_at_4k(c: &mut Criterion) {
    let path = warm_file();
    let mut group = c.benchmark_group("read_at_4k");
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(2));
    group.throughput(Throughput::Bytes(BLOCK_BYTES as u64));
    for (kind, label) in crit::BACKENDS {
        let rt = crit::runtime(kind).expect("ring-rt runtime");
        let file = rt.block_on(File::open(&path)).expect("open bench file");
        group.bench_function(label, |b| {
            b.iter_custom(|iters| rt.block_on(ring_reads(&file, iters)))
        });
        drop(file);
    }
    let std_file = std::fs::File::open(&path).expect("open bench file");
    let mut buf = vec![0u8; BLOCK_BYTES];
    let mut i = 0;
    group.bench_function("std/FileExt::read_at", |b| {
        b.iter(|| {
            let n = std_file.read_at(&mut buf, pos(i)).expect("pread");
            i += 1;
            black_box(n)
        })
    });
    let tokio_rt = crit::tokio_current_thread().expect("tokio runtime");
    group.bench_function("tokio::fs/seek+read", |b| {
        b.iter_custom(|iters| tokio_rt.block_on(tokio_reads(&path, iters)))
    });
    group.finish();
}

async fn ring_reads(file: &File, iters: u64) -> Duration {
    let mut buf = Vec::with_capacity(BLOCK_BYTES);
    let start = Instant::now();
    for i in 0..iters {
        let (res, back) = file.read_at(buf, pos(i)).await;
        black_box(res.expect("read_at"));
        buf = back;
    }
    start.elapsed()
}

/// The file is opened outside the timed loop; tokio's `File` moves each read to its
/// blocking pool, which is what this measures.
async fn tokio_reads(path: &Path, iters: u64) -> Duration {
    let mut file = tokio::fs::File::open(path).await.expect("open bench file");
    let mut buf = vec![0u8; BLOCK_BYTES];
    let start = Instant::now();
    for i in 0..iters {
        file.seek(SeekFrom::Start(pos(i))).await.expect("seek");
        black_box(file.read_exact(&mut buf).await.expect("read"));
    }
    start.elapsed()
}

criterion_group!(benches, read_at_4k);
criterion_main!(benches);
