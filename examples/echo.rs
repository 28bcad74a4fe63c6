//! A TCP echo server: multishot accept, multishot recv into the shared buffer pool (no
//! buffer per idle connection), one task per connection, clean shutdown on SIGINT/SIGTERM.
//! SIGUSR1 (and shutdown) prints the runtime's counters to stderr as one line
//! `metrics {"enters":..,...}`, which the echo benchmark reads.
//!
//! cargo run --release --example echo -- --addr 127.0.0.1:7000 [--threads N] [--backend uring|epoll]
//!     [--batch-wait-us N] [--balance hash|load] [--direct SLOTS]
//!
//! `--threads 0` runs one worker per CPU (the runtime's default); 1 (the default here) one.
//! With several workers, `--balance hash` (the default) binds one `SO_REUSEPORT` listener per
//! worker (the kernel spreads connections by a hash of their addresses); `--balance load`
//! accepts on worker 0 and serves each connection on the least loaded worker
//! (`Handle::serve_balanced`). `--direct SLOTS` accepts into a table of that many direct
//! descriptors per io_uring worker (`Builder::direct_descriptors`, Linux 6.8+; plain fds
//! elsewhere), which `--balance load` moves between workers by `IORING_MSG_SEND_FD`.

use std::io;
use std::net::SocketAddr;
use std::process::ExitCode;

use ring_demo::flags::Flags;
use ring_rt::net::tcp::ListenOptions;
use ring_rt::net::TcpListener;
use ring_rt::{BackendKind, Runtime};

// The connection handler, in a file of its own: `tests/idle_memory.rs` counts the heap an
// idle connection holds with this very handler.
#[path = "echo_handler.rs"]
mod echo_handler;
use echo_handler::echo;

struct Args {
    addr: SocketAddr,
    threads: usize,
    backend: Option<BackendKind>,
    batch_wait_us: Option<u64>,
    /// Serve on the least loaded worker (`load`) instead of per-worker listeners (`hash`).
    balance_by_load: bool,
    /// Direct-descriptor slots per worker (0: accept fds).
    direct_slots: u32,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        addr: "127.0.0.1:7000".parse().unwrap(),
        threads: 1,
        backend: None,
        batch_wait_us: None,
        balance_by_load: false,
        direct_slots: 0,
    };
    let mut flags = Flags::from_env();
    while let Some(flag) = flags.next_flag()? {
        match flag.as_str() {
            "--addr" => args.addr = flags.value()?,
            "--threads" => args.threads = flags.value()?,
            "--backend" => args.backend = Some(flags.value()?),
            "--batch-wait-us" => args.batch_wait_us = Some(flags.value()?),
            "--direct" => args.direct_slots = flags.value()?,
            "--balance" => {
                args.balance_by_load = match flags.value::<String>()?.as_str() {
                    "hash" => false,
                    "load" => true,
                    other => return Err(format!("--balance {other}: hash or load")),
                }
            }
            _ => return Err(flags.unknown()),
        }
    }
    Ok(args)
}

/// Binds `addr`, exiting on failure; prints `ready` once bound (worker 0), so whoever
/// waits for that line can connect at once.
fn bind(addr: SocketAddr, reuse_port: bool, ready: Option<String>) -> TcpListener {
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
    listener
}

/// Accepts on `addr`, serving each connection on this worker.
async fn serve(addr: SocketAddr, reuse_port: bool, ready: Option<String>) {
    let listener = bind(addr, reuse_port, ready);
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

/// Counters of every worker, summed, as one flat JSON line on stderr:
/// `metrics {"backend":"uring","enters":..,"tasks_spawned":..,"w0_tasks_spawned":..}`, with
/// each worker's tasks spawned and alive (how connections spread over the workers).
fn print_metrics(rt: &Runtime) {
    let m = rt.metrics();
    let mut line = format!("metrics {{\"backend\":\"{}\"", m.backend);
    let mut fields: Vec<(String, u64)> =
        m.io.fields()
            .into_iter()
            .map(|(name, value)| (name.to_string(), value))
            .collect();
    fields.push(("tasks_spawned".into(), m.tasks_spawned));
    fields.push(("tasks_alive".into(), m.tasks_alive));
    for (i, w) in m.workers.iter().enumerate() {
        fields.push((format!("w{i}_tasks_spawned"), w.tasks_spawned));
        fields.push((format!("w{i}_tasks_alive"), w.tasks_alive));
    }
    for (name, value) in fields {
        line.push_str(&format!(",\"{name}\":{value}"));
    }
    eprintln!("{line}}}");
}

/// Waits for SIGINT or SIGTERM and returns its number, answering each SIGUSR1 on the way
/// with a metrics line. All three are blocked in every thread (see `run`), so a signal
/// that comes while no wait is pending stays pending for the next one.
async fn wait_for_stop(rt: &Runtime) -> io::Result<i32> {
    loop {
        match ring_rt::signal::wait(&[libc::SIGINT, libc::SIGTERM, libc::SIGUSR1]).await? {
            libc::SIGUSR1 => print_metrics(rt),
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
    let mut builder = Runtime::builder();
    if args.threads > 0 {
        builder = builder.threads(args.threads);
    }
    if let Some(kind) = args.backend {
        builder = builder.backend(kind);
    }
    if let Some(us) = args.batch_wait_us {
        builder = builder.batch_wait(std::time::Duration::from_micros(us));
    }
    let rt = builder.direct_descriptors(args.direct_slots).build()?;
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
    let (addr, reuse_port) = (args.addr, rt.threads() > 1);
    if args.balance_by_load {
        let handle = rt.handle();
        drop(rt.spawn(async move {
            let listener = bind(addr, false, Some(ready));
            let err = handle.serve_balanced(&listener, echo).await;
            eprintln!("echo: the listener stopped accepting: {err}");
        }));
    } else {
        rt.spawn_on_all(move |worker| {
            serve(addr, reuse_port, (worker == 0).then(|| ready.clone()))
        });
    }
    let signo = rt.block_on(wait_for_stop(&rt))?;
    print_metrics(&rt);
    eprintln!("echo: signal {signo}, shutting down");
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!(
                "echo: {e}\nusage: echo --addr IP:PORT [--threads N] [--backend uring|epoll] [--batch-wait-us N] [--balance hash|load] [--direct SLOTS]"
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
