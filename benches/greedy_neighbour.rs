//! `cargo bench -p ring-bench --bench greedy_neighbour`: how long a task that is ready
//! waits to run while another task of its worker reads a socket that always has data:
//! 16-byte reads of up to 192 KiB queued on a Unix socket, each of which completes at
//! once on epoll (on io_uring a read's completion comes a loop turn later). Without a
//! budget of ops per poll the reader held the worker until the data ran out; ring-rt
//! (both backends) vs tokio current_thread, whose coop budget does the same.

use std::cell::Cell;
use std::io::Write;
use std::rc::Rc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use ring_bench::crit;

/// Bytes queued for the reader (less if the socket takes less).
const QUEUED: usize = 192 * 1024;
/// Bytes per read.
const READ: usize = 16;

/// A Unix socket pair with up to `QUEUED` bytes waiting on the first; the second end
/// stays open (no end of stream) until dropped.
fn queued_pair() -> (
    std::os::unix::net::UnixStream,
    std::os::unix::net::UnixStream,
) {
    let (reader, writer) = std::os::unix::net::UnixStream::pair().expect("socketpair");
    writer.set_nonblocking(true).expect("nonblocking");
    let mut queued = 0;
    while queued < QUEUED {
        match (&writer).write(&[7; 4096]) {
            Ok(n) => queued += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("fill: {e}"),
        }
    }
    (reader, writer)
}

/// One round on ring-rt: the greedy reader spawned, then the neighbour; how long the
/// neighbour waited from its spawn to its run.
async fn ring_round() -> Duration {
    let (reader, writer) = queued_pair();
    let reader = ring_rt::net::UnixStream::from_std(reader).expect("adopt");
    let stop = Rc::new(Cell::new(false));
    let stopped = stop.clone();
    let greedy = ring_rt::spawn(async move {
        while !stopped.get() {
            let (res, _) = reader.read(Vec::with_capacity(READ)).await;
            if res.expect("read") == 0 {
                break;
            }
        }
    });
    let start = Instant::now();
    let waited = ring_rt::spawn(async move { start.elapsed() })
        .await
        .expect("neighbour ran");
    stop.set(true);
    // The reader may wait for data now: the writer's drop ends its stream.
    drop(writer);
    greedy.await.expect("reader ran");
    waited
}

async fn tokio_round() -> Duration {
    use tokio::io::AsyncReadExt;
    let (reader, writer) = queued_pair();
    reader.set_nonblocking(true).expect("nonblocking");
    let mut reader = tokio::net::UnixStream::from_std(reader).expect("adopt");
    let stop = Rc::new(Cell::new(false));
    let stopped = stop.clone();
    let local = tokio::task::LocalSet::new();
    local
        .run_until(async move {
            let greedy = tokio::task::spawn_local(async move {
                let mut buf = [0u8; READ];
                while !stopped.get() {
                    if reader.read(&mut buf).await.expect("read") == 0 {
                        break;
                    }
                }
            });
            let start = Instant::now();
            let waited = tokio::task::spawn_local(async move { start.elapsed() })
                .await
                .expect("neighbour ran");
            stop.set(true);
            drop(writer);
            greedy.await.expect("reader ran");
            waited
        })
        .await
}

fn greedy_neighbour(c: &mut Criterion) {
    let mut group = c.benchmark_group("greedy_neighbour");
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));
    for (kind, label) in crit::BACKENDS {
        let rt = crit::runtime(kind).expect("ring-rt runtime");
        group.bench_function(label, |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut waited = Duration::ZERO;
                    for _ in 0..iters {
                        waited += ring_round().await;
                    }
                    waited
                })
            })
        });
    }
    let rt = crit::tokio_current_thread().expect("tokio runtime");
    group.bench_function("tokio/current_thread", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut waited = Duration::ZERO;
                for _ in 0..iters {
                    waited += tokio_round().await;
                }
                waited
            })
        })
    });
    group.finish();
}

criterion_group!(benches, greedy_neighbour);
criterion_main!(benches);
