//! `cargo bench -p ring-bench --bench many_readers`: N tasks each waiting in one
//! `recv_from` on the same UDP socket, then N datagrams sent to it and every task joined;
//! ring-rt (both backends) vs tokio current_thread, per datagram. A socket's receives
//! take turns (one in the kernel, the others in line), so what each turn change costs
//! with N waiting shows here: flat in N when only the next in line is woken. Also
//! `many_readers_dropped`: N receives lined up and dropped, per receive.

use std::rc::Rc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ring_bench::crit;

const PAYLOAD: &[u8] = b"0123456789abcdef";

/// One burst on ring-rt: `n` receivers lined up, `n` datagrams, all joined.
async fn ring_burst(rx: &Rc<ring_rt::net::UdpSocket>, tx: &std::net::UdpSocket, n: usize) {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let rx = rx.clone();
            ring_rt::spawn(async move {
                let (res, _) = rx.recv_from(Vec::with_capacity(64)).await;
                res.expect("recv_from");
            })
        })
        .collect();
    // Every receiver asks before the first datagram is sent.
    ring_rt::yield_now().await;
    for _ in 0..n {
        tx.send(PAYLOAD).expect("send");
    }
    for task in tasks {
        task.await.expect("receiver ran");
    }
}

async fn tokio_burst(
    rx: &std::sync::Arc<tokio::net::UdpSocket>,
    tx: &std::net::UdpSocket,
    n: usize,
) {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let rx = rx.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                rx.recv_from(&mut buf).await.expect("recv_from");
            })
        })
        .collect();
    tokio::task::yield_now().await;
    for _ in 0..n {
        tx.send(PAYLOAD).expect("send");
    }
    for task in tasks {
        task.await.expect("receiver ran");
    }
}

/// A sender connected to a fresh socket bound on loopback, with room for a burst.
fn pair() -> (std::net::UdpSocket, std::net::UdpSocket) {
    let rx = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    // Room for a whole burst: a datagram dropped would leave a receiver waiting for ever.
    let size: libc::c_int = 4 << 20;
    // SAFETY: `size` is a live c_int for the call, its length given; the fd is `rx`'s.
    let rc = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&rx),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_RCVBUF: {}", std::io::Error::last_os_error());
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    tx.connect(rx.local_addr().expect("addr")).expect("connect");
    (rx, tx)
}

fn many_readers(c: &mut Criterion) {
    let mut group = c.benchmark_group("many_readers");
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));
    for n in [1usize, 16, 256, 1024] {
        group.throughput(Throughput::Elements(n as u64));
        on_each_backend(&mut group, n, async |iters| {
            let (rx, tx) = pair();
            let rx = Rc::new(ring_rt::net::UdpSocket::from_std(rx).expect("adopt"));
            let start = Instant::now();
            for _ in 0..iters {
                ring_burst(&rx, &tx, n).await;
            }
            start.elapsed()
        });
        let rt = crit::tokio_current_thread().expect("tokio runtime");
        group.bench_function(BenchmarkId::new("tokio/current_thread", n), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let (rx, tx) = pair();
                    rx.set_nonblocking(true).expect("nonblocking");
                    let rx =
                        std::sync::Arc::new(tokio::net::UdpSocket::from_std(rx).expect("adopt"));
                    let start = Instant::now();
                    for _ in 0..iters {
                        tokio_burst(&rx, &tx, n).await;
                    }
                    start.elapsed()
                })
            })
        });
    }
    group.finish();
}

/// `n` receives of one socket polled once (one in the kernel, the rest in line), then all
/// dropped, first asked first: what leaving a long line costs, per receive.
fn dropped_in_line(c: &mut Criterion) {
    use std::future::{Future, IntoFuture};
    let mut group = c.benchmark_group("many_readers_dropped");
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));
    group.sample_size(10);
    for n in [1_000usize, 10_000] {
        group.throughput(Throughput::Elements(n as u64));
        on_each_backend(&mut group, n, async |iters| {
            let (rx, _tx) = pair();
            let rx = ring_rt::net::UdpSocket::from_std(rx).expect("adopt");
            let noop = &mut std::task::Context::from_waker(std::task::Waker::noop());
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                let mut reads: Vec<_> = (0..n)
                    .map(|_| Box::pin(rx.recv(Vec::with_capacity(64)).into_future()))
                    .collect();
                let start = Instant::now();
                for read in &mut reads {
                    assert!(read.as_mut().poll(noop).is_pending(), "nothing was sent");
                }
                drop(reads);
                spent += start.elapsed();
                // The dropped receive in the kernel finishes before the next round.
                ring_rt::yield_now().await;
            }
            spent
        });
    }
    group.finish();
}

/// Benches `iters` rounds of `run` on both ring-rt backends, under `n`.
fn on_each_backend(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    n: usize,
    run: impl AsyncFn(u64) -> Duration,
) {
    for (kind, label) in crit::BACKENDS {
        let rt = crit::runtime(kind).expect("ring-rt runtime");
        group.bench_function(BenchmarkId::new(label, n), |b| {
            b.iter_custom(|iters| rt.block_on(run(iters)))
        });
    }
}

criterion_group!(benches, many_readers, dropped_in_line);
criterion_main!(benches);
