//! The tokio echo server the benchmark compares against: idiomatic tokio, one task per
//! connection, each keeping its own 4 KiB buffer for the connection's whole life.
//!
//! tokio-echo --addr 127.0.0.1:7000 [--flavor current_thread|multi_thread]

use std::io;
use std::net::SocketAddr;
use std::process::ExitCode;

use ring_bench::flavor::Flavor;
use ring_demo::flags::Flags;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{signal, SignalKind};

const USAGE: &str = "usage: tokio-echo --addr IP:PORT [--flavor current_thread|multi_thread]";

struct Args {
    addr: SocketAddr,
    flavor: Flavor,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        addr: "127.0.0.1:7000".parse().expect("literal"),
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

/// The design the issue contrasts with: the buffer lives as long as the connection, idle
/// or not.
async fn echo(mut stream: TcpStream) {
    let mut buf = vec![0u8; 4096];
    loop {
        let n = match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if stream.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

async fn serve(listener: TcpListener) {
    let mut accept_errors = 0u64;
    loop {
        match listener.accept().await {
            Ok((stream, _)) => drop(tokio::spawn(echo(stream))),
            Err(e) => {
                accept_errors += 1;
                if accept_errors.is_power_of_two() {
                    eprintln!("tokio-echo: accept: {e} ({accept_errors} so far)");
                }
                // Out of fds: give connections a moment to close instead of spinning.
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    }
}

fn run(args: Args) -> io::Result<()> {
    // Room for 10,000 idle connections in the memory test.
    if let Err(e) = rlimit::increase_nofile_limit(u64::MAX) {
        eprintln!("tokio-echo: RLIMIT_NOFILE: {e}");
    }
    let rt = args.flavor.runtime()?;
    rt.block_on(async {
        let listener = TcpListener::bind(args.addr).await?;
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        println!(
            "echo listening on {} backend=tokio-{} threads={}",
            args.addr,
            args.flavor,
            rt.metrics().num_workers()
        );
        tokio::select! {
            _ = serve(listener) => {}
            _ = term.recv() => eprintln!("tokio-echo: SIGTERM, shutting down"),
            _ = int.recv() => eprintln!("tokio-echo: SIGINT, shutting down"),
        }
        Ok(())
    })
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("tokio-echo: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tokio-echo: {e}");
            ExitCode::FAILURE
        }
    }
}
