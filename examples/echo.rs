//! A TCP echo server: multishot accept, multishot recv into the shared buffer pool (no
//! buffer per idle connection), one task per connection, clean shutdown on SIGINT/SIGTERM.
//!
//! cargo run --release --example echo -- --addr 127.0.0.1:7000 [--threads N] [--backend uring|epoll]

use std::io;
use std::net::SocketAddr;
use std::process::ExitCode;

use ring_rt::net::tcp::ListenOptions;
use ring_rt::net::{TcpListener, TcpStream};
use ring_rt::{BackendKind, Runtime};

struct Args {
    addr: SocketAddr,
    threads: usize,
    backend: Option<BackendKind>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        addr: "127.0.0.1:7000".parse().unwrap(),
        threads: 1,
        backend: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--addr" => args.addr = value.parse().map_err(|e| format!("--addr {value}: {e}"))?,
            "--threads" => {
                args.threads = value
                    .parse()
                    .map_err(|e| format!("--threads {value}: {e}"))?
            }
            "--backend" => {
                args.backend = Some(
                    BackendKind::parse(&value)
                        .ok_or(format!("--backend {value}: uring or epoll"))?,
                )
            }
            _ => return Err(format!("unknown flag {flag}")),
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

async fn serve(addr: SocketAddr, reuse_port: bool) {
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

fn run(args: Args) -> io::Result<()> {
    ring_rt::signal::block(&[libc::SIGINT, libc::SIGTERM])?;
    let mut builder = Runtime::builder().threads(args.threads);
    if let Some(kind) = args.backend {
        builder = builder.backend(kind);
    }
    let rt = builder.build()?;
    let features = rt.features().map_or("none (epoll)".to_string(), |f| {
        f.used_by_runtime().join(",")
    });
    println!(
        "echo listening on {} backend={} threads={} features={} ({})",
        args.addr,
        rt.backend().kind,
        rt.threads(),
        features,
        rt.backend().reason
    );
    let (addr, reuse_port) = (args.addr, args.threads > 1);
    rt.spawn_on_all(move |_| serve(addr, reuse_port));
    let signo = rt.block_on(ring_rt::signal::wait(&[libc::SIGINT, libc::SIGTERM]))?;
    eprintln!("echo: signal {signo}, shutting down");
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!(
                "echo: {e}\nusage: echo --addr IP:PORT [--threads N] [--backend uring|epoll]"
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
