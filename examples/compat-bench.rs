//! What `ring_rt::compat::Compat` costs: one TCP stream over loopback, sender and receiver
//! each on its own single-worker runtime (own thread), moving `--total-mib` MiB in
//! transfers of 64 KiB, 256 KiB and 1 MiB, three ways:
//!
//! - `native`: ring-rt's owned-buffer `write_all(Vec)` / `read(Vec)`, no copy;
//! - `compat`: tokio's `write_all(&[u8])` / `read(&mut [u8])` through the adapter, with its
//!   buffers sized to the transfer (one copy each way);
//! - `compat-64k`: the same with the adapter's default 64 KiB buffers.
//!
//! cargo run --release --example compat-bench --features tokio-io -- [--total-mib 512]
//!     [--backend uring|epoll] [--reps 5]
//!
//! Prints, per case, the best and the median throughput of the reps (MB/s, 10^6 bytes), and
//! the median rep's CPU time of the sender and receiver threads per MiB moved (from
//! /proc/thread-self/schedstat).
//!
//! Measured on the 2-core development VM (Linux 6.18, release build, 512 MiB per rep,
//! median of 9 reps; the machine was shared with other jobs, so allow +-15%), MB/s:
//!
//! | transfer | backend | native | compat (buffers = transfer) | compat-64k |
//! |----------|---------|-------:|----------------------------:|-----------:|
//! | 64 KiB   | uring   |   2503 |                        2438 |       2275 |
//! | 256 KiB  | uring   |   3460 |                        3283 |       2216 |
//! | 1 MiB    | uring   |   3379 |                        2657 |       1670 |
//! | 64 KiB   | epoll   |   2044 |                        1719 |       1791 |
//! | 256 KiB  | epoll   |   2439 |                        2180 |       1790 |
//! | 1 MiB    | epoll   |   4342 |                        4034 |       1989 |
//!
//! CPU per MiB: native sender 70-360 us, receiver 100-280 us; the adapter's copy added
//! about 20-40 us on each side.

use std::io;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ring_demo::flags::Flags;
use ring_rt::compat::Compat;
use ring_rt::net::{TcpListener, TcpStream};
use ring_rt::{BackendKind, Runtime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Clone, Copy, Debug)]
enum Mode {
    Native,
    /// Through the adapter, with both of its buffers `cap` bytes.
    Compat {
        cap: usize,
    },
}

/// One run's result.
#[derive(Clone, Copy)]
struct Sample {
    elapsed: Duration,
    send_cpu_ns: u64,
    recv_cpu_ns: u64,
}

/// CPU time of the calling thread (the first field of schedstat, in ns).
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

async fn send_native(stream: TcpStream, size: usize, total: u64) -> io::Result<()> {
    let mut buf = vec![7u8; size];
    let mut sent = 0;
    while sent < total {
        let (res, back) = stream.write_all(buf).await;
        res?;
        buf = back;
        sent += size as u64;
    }
    Ok(())
}

async fn recv_native(stream: TcpStream, size: usize) -> io::Result<u64> {
    let mut buf = Vec::with_capacity(size);
    let mut got = 0;
    loop {
        let (res, back) = stream.read(buf).await;
        buf = back;
        match res? {
            0 => return Ok(got),
            n => got += n as u64,
        }
    }
}

async fn send_compat(stream: TcpStream, size: usize, total: u64, cap: usize) -> io::Result<()> {
    let mut io = Compat::new(stream).with_capacity(cap, cap);
    let buf = vec![7u8; size];
    let mut sent = 0;
    while sent < total {
        io.write_all(&buf).await?;
        sent += size as u64;
    }
    io.shutdown().await
}

async fn recv_compat(stream: TcpStream, size: usize, cap: usize) -> io::Result<u64> {
    let mut io = Compat::new(stream).with_capacity(cap, cap);
    let mut buf = vec![0u8; size];
    let mut got = 0;
    loop {
        match io.read(&mut buf).await? {
            0 => return Ok(got),
            n => got += n as u64,
        }
    }
}

fn runtime(kind: BackendKind) -> io::Result<Runtime> {
    Runtime::builder().backend(kind).build()
}

/// The receiving side: listens, reports its address, counts bytes until EOF.
fn receiver(
    kind: BackendKind,
    mode: Mode,
    size: usize,
    addr_tx: mpsc::Sender<SocketAddr>,
) -> io::Result<(Duration, u64, u64)> {
    runtime(kind)?.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let _ = addr_tx.send(listener.local_addr()?);
        let (stream, _) = listener.accept().await?;
        let (start, cpu) = (Instant::now(), thread_cpu_ns());
        let got = match mode {
            Mode::Native => recv_native(stream, size).await?,
            Mode::Compat { cap } => recv_compat(stream, size, cap).await?,
        };
        Ok((start.elapsed(), thread_cpu_ns() - cpu, got))
    })
}

fn sender(
    kind: BackendKind,
    mode: Mode,
    size: usize,
    total: u64,
    addr: SocketAddr,
) -> io::Result<u64> {
    runtime(kind)?.block_on(async {
        let stream = TcpStream::connect(addr).await?;
        let cpu = thread_cpu_ns();
        match mode {
            Mode::Native => send_native(stream, size, total).await?,
            Mode::Compat { cap } => send_compat(stream, size, total, cap).await?,
        }
        Ok(thread_cpu_ns() - cpu)
    })
}

fn run_once(kind: BackendKind, mode: Mode, size: usize, total: u64) -> io::Result<Sample> {
    let (addr_tx, addr_rx) = mpsc::channel();
    let recv = std::thread::spawn(move || receiver(kind, mode, size, addr_tx));
    let addr = addr_rx
        .recv()
        .map_err(|_| io::Error::other("receiver failed before listening"))?;
    let send = std::thread::spawn(move || sender(kind, mode, size, total, addr));
    let send_cpu_ns = send
        .join()
        .map_err(|_| io::Error::other("sender panicked"))??;
    let (elapsed, recv_cpu_ns, got) = recv
        .join()
        .map_err(|_| io::Error::other("receiver panicked"))??;
    if got != total {
        return Err(io::Error::other(format!("received {got} of {total} bytes")));
    }
    Ok(Sample {
        elapsed,
        send_cpu_ns,
        recv_cpu_ns,
    })
}

/// Throughput in MB/s (10^6 bytes per second).
fn mb_per_s(total: u64, elapsed: Duration) -> f64 {
    total as f64 / elapsed.as_secs_f64() / 1e6
}

/// One line: best and median throughput of the reps, and the median rep's CPU per MiB.
fn report(kind: BackendKind, label: &str, size: usize, total: u64, samples: &mut [Sample]) {
    samples.sort_by_key(|s| s.elapsed);
    let (best, median) = (samples[0], samples[samples.len() / 2]);
    let mib = total as f64 / (1 << 20) as f64;
    println!(
        "{kind:<6} {:>5} KiB  {label:<10} best {:>5.0} MB/s  median {:>5.0} MB/s   \
         cpu/MiB send {:>4.0} us  recv {:>4.0} us",
        size / 1024,
        mb_per_s(total, best.elapsed),
        mb_per_s(total, median.elapsed),
        median.send_cpu_ns as f64 / mib / 1e3,
        median.recv_cpu_ns as f64 / mib / 1e3,
    );
}

struct Args {
    total_mib: u64,
    reps: usize,
    backends: Vec<BackendKind>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        total_mib: 512,
        reps: 5,
        backends: vec![BackendKind::Uring, BackendKind::Epoll],
    };
    let mut flags = Flags::from_env();
    while let Some(flag) = flags.next_flag()? {
        match flag.as_str() {
            "--total-mib" => args.total_mib = flags.value()?,
            "--reps" => args.reps = flags.value::<usize>()?.max(1),
            "--backend" => args.backends = vec![flags.value()?],
            _ => return Err(flags.unknown()),
        }
    }
    Ok(args)
}

/// The modes are interleaved rep by rep, so load from elsewhere on the machine hits
/// them alike.
fn run_size(kind: BackendKind, size: usize, total: u64, reps: usize) -> io::Result<()> {
    let modes = [
        ("native", Mode::Native),
        ("compat", Mode::Compat { cap: size }),
        ("compat-64k", Mode::Compat { cap: 64 << 10 }),
    ];
    let mut samples = vec![Vec::new(); modes.len()];
    for _ in 0..reps {
        for (i, &(_, mode)) in modes.iter().enumerate() {
            samples[i].push(run_once(kind, mode, size, total)?);
        }
    }
    for ((label, _), samples) in modes.iter().zip(&mut samples) {
        report(kind, label, size, total, samples);
    }
    Ok(())
}

fn run(args: &Args) -> io::Result<()> {
    for &kind in &args.backends {
        for size in [64 << 10, 256 << 10, 1 << 20] {
            // Whole transfers only, so every mode moves exactly the same bytes.
            let total = (args.total_mib << 20) / size as u64 * size as u64;
            run_size(kind, size, total, args.reps)?;
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("compat-bench: {e}\nusage: compat-bench [--total-mib N] [--reps N] [--backend uring|epoll]");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("compat-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
