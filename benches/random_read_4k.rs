//! `cargo bench -p ring-bench --bench random_read_4k`: random 4 KiB reads of a 256 MiB file
//! (`O_DIRECT` when the filesystem takes it; the mode used is printed) at queue depth 1, 8
//! and 32, on both ring-rt backends. Depth N is N tasks each keeping one read in flight.
//! Throughput is in reads; `scripts/fio-randread.sh` compares depth 32 with fio.

use std::rc::Rc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ring_bench::crit::{self, Stop, BLOCK_BYTES};

/// Large enough that the reads spread over the disk rather than one cached region.
pub const FILE_BYTES: u64 = 256 << 20;
const DEPTHS: [usize; 3] = [1, 8, 32];

fn random_read_4k(c: &mut Criterion) {
    let path = crit::bench_files_dir().join("randread-256m.bin");
    crit::ensure_file(&path, FILE_BYTES).expect("bench file");
    let blocks = FILE_BYTES / BLOCK_BYTES as u64;
    let mut group = c.benchmark_group("random_read_4k");
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(2));
    group.throughput(Throughput::Elements(1));
    for (kind, label) in crit::BACKENDS {
        let rt = crit::runtime(kind).expect("ring-rt runtime");
        let (file, mode) = rt
            .block_on(crit::open_for_random_reads(&path))
            .expect("open bench file");
        eprintln!(
            "random_read_4k: {label} reads {} ({})",
            path.display(),
            mode.name()
        );
        let file = Rc::new(file);
        for depth in DEPTHS {
            let id = BenchmarkId::new(format!("{label}/{}", mode.name()), format!("qd{depth}"));
            group.bench_function(id, |b| {
                b.iter_custom(|iters| {
                    rt.block_on(async {
                        let start = Instant::now();
                        let stop = Stop::Count(iters);
                        let done = crit::random_reads(file.clone(), blocks, depth, stop).await;
                        assert_eq!(done.expect("random reads"), iters);
                        start.elapsed()
                    })
                })
            });
        }
        drop(file);
    }
    group.finish();
}

criterion_group!(benches, random_read_4k);
criterion_main!(benches);
