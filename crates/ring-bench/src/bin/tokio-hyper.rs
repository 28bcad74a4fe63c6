//! The tokio HTTP/1.1 server that examples/hyper.rs is compared against with wrk: the same
//! hyper 1.x service and routes (`ring_demo::service`) on tokio through hyper-util's
//! `TokioIo`, one task per connection, keep-alive on; clean shutdown on SIGINT/SIGTERM.
//!
//! tokio-hyper --addr 127.0.0.1:8080 [--flavor current_thread|multi_thread]

use std::io;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use ring_bench::flavor::Flavor;
use ring_demo::flags::Flags;
use ring_demo::service::route;
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{signal, SignalKind};

const USAGE: &str = "usage: tokio-hyper --addr IP:PORT [--flavor current_thread|multi_thread]";

/// The `GET /` body: the same length as ring-rt's "hello from ring-rt\n", so both servers
/// send byte-for-byte equally long responses and wrk's transfer rates compare directly.
const HELLO: &str = "hello from tokio!!\n";

/// Serves one connection until the client closes it (keep-alive: many requests).
async fn connection(stream: TcpStream) {
    // Responses are written whole by hyper; waiting for more data would only add latency.
    let _ = stream.set_nodelay(true);
    // The same 30 s header-read timeout as the ring-rt example's default, so both servers
    // keep one timer per connection.
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .timer(TokioTimer::new())
        .header_read_timeout(std::time::Duration::from_secs(30))
        .serve_connection(
            TokioIo::new(stream),
            hyper::service::service_fn(|req| route(HELLO, req)),
        );
    // A client that goes away mid-request is an error here, and nothing to act on.
    let _ = conn.await;
}

/// Accepts connections forever, one task each.
async fn serve(listener: TcpListener) {
    let mut accept_errors = 0u64;
    loop {
        match listener.accept().await {
            Ok((stream, _)) => drop(tokio::spawn(connection(stream))),
            Err(e) => {
                accept_errors += 1;
                if accept_errors.is_power_of_two() {
                    eprintln!("tokio-hyper: accept: {e} ({accept_errors} so far)");
                }
                // Out of fds: give connections a moment to close instead of spinning.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

struct Args {
    addr: SocketAddr,
    flavor: Flavor,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
        flavor: Flavor::CurrentThread,
    };
    let mut flags = Flags::from_env();
    while let Some(flag) = flags.next_flag()? {
        match flag.as_str() {
            "--addr" => args.addr = flags.value()?,
            "--flavor" => args.flavor = flags.value()?,
            _ => return Err(flags.unknown()),
        }
    }
    Ok(args)
}

fn run(args: Args) -> io::Result<()> {
    let rt = args.flavor.runtime()?;
    rt.block_on(async {
        let listener = TcpListener::bind(args.addr).await?;
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        println!(
            "hyper listening on http://{} backend=tokio-{} threads={}",
            args.addr,
            args.flavor,
            rt.metrics().num_workers()
        );
        tokio::select! {
            _ = serve(listener) => {}
            _ = term.recv() => eprintln!("tokio-hyper: signal {}, shutting down", libc::SIGTERM),
            _ = int.recv() => eprintln!("tokio-hyper: signal {}, shutting down", libc::SIGINT),
        }
        Ok(())
    })
    // Dropping the runtime here drops every connection task.
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("tokio-hyper: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tokio-hyper: {e}");
            ExitCode::FAILURE
        }
    }
}
