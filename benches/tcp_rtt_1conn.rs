//! `cargo bench -p ring-bench --bench tcp_rtt_1conn`: one 64-byte request and its 64-byte
//! echo over one loopback TCP connection (`TCP_NODELAY`), the echo server being a task on
//! the same one-thread runtime: ring-rt (both backends) vs tokio current_thread.

use std::io;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use ring_bench::crit;
use ring_rt::net::{TcpListener, TcpStream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const MSG_BYTES: usize = 64;

/// Reads exactly `MSG_BYTES` into `buf` (ring-rt streams read from the buffer's start, so
/// a short read continues into a slice of the rest).
async fn ring_read_msg(stream: &TcpStream, mut buf: Vec<u8>) -> (io::Result<()>, Vec<u8>) {
    let mut done = 0;
    while done < MSG_BYTES {
        let (res, slice) = stream
            .read(ring_rt::buf::IoBuf::slice(buf, done..MSG_BYTES))
            .await;
        buf = slice.into_inner();
        match res {
            Ok(0) => return (Err(io::ErrorKind::UnexpectedEof.into()), buf),
            Ok(n) => done += n,
            Err(e) => return (Err(e), buf),
        }
    }
    (Ok(()), buf)
}

/// Echoes 64-byte messages until the client closes.
async fn ring_echo(listener: TcpListener) {
    let (stream, _) = listener.accept().await.expect("accept");
    stream.set_nodelay(true).expect("TCP_NODELAY");
    let mut buf = vec![0u8; MSG_BYTES];
    loop {
        let (res, back) = ring_read_msg(&stream, buf).await;
        if res.is_err() {
            return;
        }
        let (res, back) = stream.write_all(back).await;
        if res.is_err() {
            return;
        }
        buf = back;
    }
}

/// `iters` round trips on `client`, timed.
async fn ring_round_trips(client: &TcpStream, iters: u64) -> Duration {
    let mut msg = vec![7u8; MSG_BYTES];
    let mut reply = vec![0u8; MSG_BYTES];
    let start = Instant::now();
    for _ in 0..iters {
        let (res, back) = client.write_all(msg).await;
        res.expect("send");
        msg = back;
        let (res, back) = ring_read_msg(client, reply).await;
        res.expect("echo");
        reply = back;
    }
    start.elapsed()
}

fn ring_rt_benches(group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>) {
    for (kind, label) in crit::BACKENDS {
        let rt = crit::runtime(kind).expect("ring-rt runtime");
        let client = rt.block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0")?;
            let addr = listener.local_addr()?;
            ring_rt::spawn(ring_echo(listener));
            let client = TcpStream::connect(addr).await?;
            client.set_nodelay(true)?;
            io::Result::Ok(client)
        });
        let client = client.expect("loopback connection");
        group.bench_function(label, |b| {
            b.iter_custom(|iters| rt.block_on(ring_round_trips(&client, iters)))
        });
        drop(client);
    }
}

async fn tokio_echo(listener: tokio::net::TcpListener) {
    let (mut stream, _) = listener.accept().await.expect("accept");
    stream.set_nodelay(true).expect("TCP_NODELAY");
    let mut buf = [0u8; MSG_BYTES];
    while stream.read_exact(&mut buf).await.is_ok() {
        if stream.write_all(&buf).await.is_err() {
            return;
        }
    }
}

async fn tokio_round_trips(client: &mut tokio::net::TcpStream, iters: u64) -> Duration {
    let msg = [7u8; MSG_BYTES];
    let mut reply = [0u8; MSG_BYTES];
    let start = Instant::now();
    for _ in 0..iters {
        client.write_all(&msg).await.expect("send");
        client.read_exact(&mut reply).await.expect("echo");
    }
    start.elapsed()
}

fn tokio_bench(group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>) {
    let rt = crit::tokio_current_thread().expect("tokio runtime");
    let client = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(tokio_echo(listener));
        let client = tokio::net::TcpStream::connect(addr).await?;
        client.set_nodelay(true)?;
        io::Result::Ok(client)
    });
    let mut client = client.expect("loopback connection");
    group.bench_function("tokio/current_thread", |b| {
        b.iter_custom(|iters| rt.block_on(tokio_round_trips(&mut client, iters)))
    });
}

fn tcp_rtt_1conn(c: &mut Criterion) {
    let mut group = c.benchmark_group("tcp_rtt_1conn");
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(2));
    ring_rt_benches(&mut group);
    tokio_bench(&mut group);
    group.finish();
}

criterion_group!(benches, tcp_rtt_1conn);
criterion_main!(benches);
