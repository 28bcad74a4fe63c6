//! An HTTP/1.1 server: hyper 1.x on ring-rt through `ring_rt::compat::Compat` (tokio's I/O
//! traits) and hyper-util's `TokioIo`. One task per connection, keep-alive on, no tokio
//! runtime; clean shutdown on SIGINT/SIGTERM. hyper's timers run on ring-rt's through
//! `ring_rt::compat::HyperTimer`: a client that takes longer than `--header-timeout-ms`
//! (default 30000) to send a request's headers is disconnected.
//!
//! cargo run --release --example hyper -- --addr 127.0.0.1:8080
//!     [--threads N] [--backend uring|epoll] [--header-timeout-ms N]
//!
//! `--threads 0` serves on one worker per CPU (one `SO_REUSEPORT` listener each); the
//! default is 1.
//!
//! Routes (`ring_demo::service`, the same service as ring-bench's tokio-hyper): `GET /` says
//! hello; `POST /echo` streams the request body back; `GET /big?n=BYTES` streams BYTES bytes
//! (byte `i` is `i % 251`) in 64 KiB chunks.

use std::io;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use ring_demo::flags::Flags;
use ring_demo::service::route;
use ring_rt::compat::{Compat, HyperTimer};
use ring_rt::net::tcp::ListenOptions;
use ring_rt::net::{TcpListener, TcpStream};
use ring_rt::{BackendKind, Runtime};

/// The `GET /` body; tokio-hyper's is as long (see `ring_demo::service::route`).
const HELLO: &str = "hello from ring-rt\n";

/// Serves one connection until the client closes it (keep-alive: many requests), or until
/// a request's headers take longer than `header_timeout` to arrive.
pub async fn connection(stream: TcpStream, header_timeout: Duration) {
    // Responses are written whole by hyper; waiting for more data would only add latency.
    let _ = stream.set_nodelay(true);
    let io = TokioIo::new(Compat::new(stream));
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .timer(HyperTimer::new())
        .header_read_timeout(header_timeout)
        .serve_connection(io, hyper::service::service_fn(|req| route(HELLO, req)));
    // A client that goes away mid-request is an error here, and nothing to act on.
    let _ = conn.await;
}

/// Accepts connections forever, one task each, with `header_timeout` for each request's
/// headers.
pub async fn serve(listener: TcpListener, header_timeout: Duration) {
    let mut incoming = listener.incoming();
    let mut accept_errors = 0u64;
    while let Some(conn) = incoming.next().await {
        match conn {
            Ok(stream) => drop(ring_rt::spawn(connection(stream, header_timeout))),
            // Out of fds and the like: the stream backs off by itself; report sparingly.
            Err(e) => {
                accept_errors += 1;
                if accept_errors.is_power_of_two() {
                    eprintln!("hyper: accept: {e} ({accept_errors} so far)");
                }
            }
        }
    }
}

struct Args {
    addr: SocketAddr,
    threads: usize,
    backend: Option<BackendKind>,
    header_timeout: Duration,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
        threads: 1,
        backend: None,
        header_timeout: Duration::from_secs(30),
    };
    let mut flags = Flags::from_env();
    while let Some(flag) = flags.next_flag()? {
        match flag.as_str() {
            "--addr" => args.addr = flags.value()?,
            "--threads" => args.threads = flags.value()?,
            "--backend" => args.backend = Some(flags.value()?),
            "--header-timeout-ms" => args.header_timeout = Duration::from_millis(flags.value()?),
            _ => return Err(flags.unknown()),
        }
    }
    Ok(args)
}

fn run(args: Args) -> io::Result<()> {
    // Blocked before the workers start, so every thread inherits the mask.
    ring_rt::signal::block(&[libc::SIGINT, libc::SIGTERM])?;
    // 0: one worker per CPU (the runtime's default).
    let mut builder = Runtime::builder();
    if args.threads > 0 {
        builder = builder.threads(args.threads);
    }
    if let Some(kind) = args.backend {
        builder = builder.backend(kind);
    }
    let rt = builder.build()?;
    println!(
        "hyper listening on http://{} backend={} threads={}",
        args.addr,
        rt.backend().kind,
        rt.threads()
    );
    let (addr, reuse_port, header_timeout) = (args.addr, rt.threads() > 1, args.header_timeout);
    rt.spawn_on_all(move |_| async move {
        let opts = ListenOptions {
            reuse_port,
            ..ListenOptions::default()
        };
        match TcpListener::bind_with(addr, opts) {
            Ok(listener) => serve(listener, header_timeout).await,
            Err(e) => {
                eprintln!("hyper: bind {addr}: {e}");
                std::process::exit(1);
            }
        }
    });
    let signo = rt.block_on(ring_rt::signal::wait(&[libc::SIGINT, libc::SIGTERM]))?;
    eprintln!("hyper: signal {signo}, shutting down");
    // Dropping the runtime drops every connection task and waits out their ops.
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!(
                "hyper: {e}\nusage: hyper --addr IP:PORT [--threads N] [--backend uring|epoll] \
                 [--header-timeout-ms N]"
            );
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hyper: {e}");
            ExitCode::FAILURE
        }
    }
}
