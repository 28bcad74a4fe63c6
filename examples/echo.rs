//! A TCP echo server: multishot accept, multishot recv into the shared buffer pool (no
//! buffer per idle connection), one task per connection, clean shutdown on SIGINT/SIGTERM.
//! SIGUSR1 (and shutdown) prints the runtime's counters to stderr as one line
//! `metrics {"enters":..,...}`, which the echo benchmark reads.
//!
//! cargo run --release --example echo -- --addr 127.0.0.1:7000 [--threads N] [--backend uring|epoll]
//!     [--batch-wait-us N]

use std::io;
use std::net::SocketAddr;
use std::process::ExitCode;

use ring_core::metrics::Snapshot;
use ring_demo::flags::Flags;
use ring_rt::net::tcp::ListenOptions;
use ring_rt::net::{TcpListener, TcpStream};
use ring_rt::{BackendKind, Runtime};

struct Args {
    addr: SocketAddr,
    threads: usize,
    backend: Option<BackendKind>,
    batch_wait_us: Option<u64>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        addr: "127.0.0.1:7000".parse().unwrap(),
        threads: 1,
        backend: None,
        batch_wait_us: None,
    };
    let mut flags = Flags::from_env();
    while let Some(flag) = flags.next_flag()? {
        match flag.as_str() {
            "--addr" => args.addr = flags.value()?,
            "--threads" => args.threads = flags.value()?,
            "--backend" => args.backend = Some(flags.value()?),
            "--batch-wait-us" => args.batch_wait_us = Some(flags.value()?),
            _ => return Err(flags.unknown()),
        }
    }
    Ok(args)
}

async fn echo(stream: TcpStream) {
    let mut incoming = stream.recv_stream();
    while let Some(Ok(buf)) = incoming.next().await {
        let (res, _buf) = stream.write_all(buf).await;
        if res.is_err() {
            break;
        }
    }
}

/// Accepts on `addr`; worker 0 prints `ready` once its listener is bound, so whoever waits
/// for that line can connect at once.
async fn serve(addr: SocketAddr, reuse_port: bool, ready: Option<String>) {
    let opts = ListenOptions {
        reuse_port,
        ..ListenOptions::default()
    };
    let listener = match TcpListener::bind_with(addr, opts) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("echo: bind {addr}: {e}");
            std::process::exit(1);
        }
    };
    if let Some(line) = ready {
        println!("{line}");
    }
    let mut incoming = listener.incoming();
    let mut accept_errors = 0u64;
    while let Some(conn) = incoming.next().await {
        match conn {
            Ok(stream) => drop(ring_rt::spawn(echo(stream))),
            // Out of fds and the like: the stream backs off by itself; report sparingly.
            Err(e) => {
                accept_errors += 1;
                if accept_errors.is_power_of_two() {
                    eprintln!("echo: accept: {e} ({accept_errors} so far)");
                }
            }
        }
    }
}

/// Counters as one flat JSON line on stderr: `metrics {"backend":"uring","enters":..}`.
fn print_metrics(backend: BackendKind, io: &Snapshot, extra: &[(&str, u64)]) {
    let mut line = format!("metrics {{\"backend\":\"{backend}\"");
    for (name, value) in io.fields().into_iter().chain(extra.iter().copied()) {
        line.push_str(&format!(",\"{name}\":{value}"));
    }
    eprintln!("{line}}}");
}

/// Waits for SIGINT or SIGTERM and returns its number, answering each SIGUSR1 on the way
/// with a metrics line. All three are blocked in every thread (see `run`), so a signal
/// that comes while no wait is pending stays pending for the next one.
async fn wait_for_stop(rt: &Runtime) -> io::Result<i32> {
    let (metrics, backend) = (rt.metrics_handle(), rt.backend().kind);
    loop {
        match ring_rt::signal::wait(&[libc::SIGINT, libc::SIGTERM, libc::SIGUSR1]).await? {
            libc::SIGUSR1 => print_metrics(backend, &metrics.snapshot(), &[]),
            signo => return Ok(signo),
        }
    }
}

fn run(args: Args) -> io::Result<()> {
    // The soft open-file limit up to the hard one, so one worker can hold 10,000 idle
    // connections (the benchmark's memory test).
    if let Err(e) = rlimit::increase_nofile_limit(u64::MAX) {
        eprintln!("echo: RLIMIT_NOFILE: {e}");
    }
    // Blocked before any thread starts, so every thread inherits the mask.
    ring_rt::signal::block(&[libc::SIGINT, libc::SIGTERM, libc::SIGUSR1])?;
    let mut builder = Runtime::builder().threads(args.threads);
    if let Some(kind) = args.backend {
        builder = builder.backend(kind);
    }
    if let Some(us) = args.batch_wait_us {
        builder = builder.batch_wait(std::time::Duration::from_micros(us));
    }
    let rt = builder.build()?;
    let features = rt.features().map_or("none (epoll)".to_string(), |f| {
        f.used_by_runtime().join(",")
    });
    let ready = format!(
        "echo listening on {} backend={} threads={} features={} ({})",
        args.addr,
        rt.backend().kind,
        rt.threads(),
        features,
        rt.backend().reason
    );
    let (addr, reuse_port) = (args.addr, args.threads > 1);
    rt.spawn_on_all(move |worker| serve(addr, reuse_port, (worker == 0).then(|| ready.clone())));
    let signo = rt.block_on(wait_for_stop(&rt))?;
    let m = rt.metrics();
    let tasks = [
        ("tasks_spawned", m.tasks_spawned),
        ("tasks_alive", m.tasks_alive),
    ];
    print_metrics(m.backend, &m.io, &tasks);
    eprintln!("echo: signal {signo}, shutting down");
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!(
                "echo: {e}\nusage: echo --addr IP:PORT [--threads N] [--backend uring|epoll] [--batch-wait-us N]"
            );
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("echo: {e}");
            ExitCode::FAILURE
        }
    }
}
