//! An axum `Router` served by ring-rt on every worker, whose handlers read a file, sleep
//! and call another TCP service through ring-rt.
//!
//! cargo run --release --example axum -- --addr 127.0.0.1:8080
//!     [--threads N] [--backend uring|epoll] [--file PATH] [--upstream IP:PORT]
//!
//! Routes: `GET /` says hello; `GET /file` returns the file (`--file`, default a small file
//! this program writes); `GET /sleep/{ms}` sleeps that long; `GET /upstream` sends `ping`
//! to the upstream service (`--upstream`, default an echo service this program runs) and
//! returns its answer; `GET /worker` names the worker thread that served the request.
//! `--threads 0` (the default) is one worker per CPU, each with its own `SO_REUSEPORT`
//! listener.
//!
//! axum wants handlers whose futures are `Send`, and ring-rt's files, timers and sockets
//! belong to the worker that made them (`!Send`). The bridge: a handler runs its ring-rt
//! I/O as a task on its own worker (`ring_rt::spawn`) and awaits the task's `JoinHandle`,
//! which is `Send`. No tokio runtime runs: hyper serves each connection through
//! `ring_rt::compat::Compat` (tokio's I/O traits), and hyper's timers run on ring-rt
//! (`HyperTimer`).

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use ring_demo::flags::Flags;
use ring_rt::compat::{Compat, HyperTimer};
use ring_rt::net::tcp::ListenOptions;
use ring_rt::net::{TcpListener, TcpStream};
use ring_rt::{BackendKind, Runtime};

/// What the handlers need.
#[derive(Clone, Debug)]
pub struct AppState {
    /// The file `GET /file` returns.
    pub file: PathBuf,
    /// The TCP service `GET /upstream` calls.
    pub upstream: SocketAddr,
}

/// The routes, with their state.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/", get(|| async { "hello from axum on ring-rt\n" }))
        .route("/file", get(read_file))
        .route("/sleep/{ms}", get(sleep_ms))
        .route("/upstream", get(call_upstream))
        .route("/worker", get(|| async { worker_name() }))
        .with_state(state)
}

fn worker_name() -> String {
    std::thread::current().name().unwrap_or("?").to_string()
}

type HandlerError = (StatusCode, String);

fn internal(e: impl std::fmt::Display) -> HandlerError {
    (StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

/// Reads the file through ring-rt. The read future is this worker's, so it runs as a task
/// here; the handler awaits the task's `Send` handle.
async fn read_file(State(state): State<AppState>) -> Result<Vec<u8>, HandlerError> {
    let path = state.file.clone();
    let read = ring_rt::spawn(async move { ring_rt::fs::read(path).await });
    read.await.map_err(internal)?.map_err(internal)
}

/// Sleeps on ring-rt's timer (capped at 10 s).
async fn sleep_ms(Path(ms): Path<u64>) -> Result<String, HandlerError> {
    let ms = ms.min(10_000);
    let nap = ring_rt::spawn(ring_rt::time::sleep(Duration::from_millis(ms)));
    nap.await.map_err(internal)?;
    Ok(format!("slept {ms} ms\n"))
}

/// Sends `ping` to the upstream service through a ring-rt socket and returns its answer.
async fn call_upstream(State(state): State<AppState>) -> Result<String, HandlerError> {
    let upstream = state.upstream;
    let call = ring_rt::spawn(async move {
        let stream = TcpStream::connect(upstream).await?;
        stream.write_all(b"ping\n".to_vec()).await.0?;
        let (n, buf) = stream.read(Vec::with_capacity(64)).await;
        io::Result::Ok(String::from_utf8_lossy(&buf[..n?]).into_owned())
    });
    let answer = call.await.map_err(internal)?.map_err(internal)?;
    Ok(format!("upstream said: {answer}"))
}

/// Serves one connection with `router` until the client closes it.
pub async fn connection(stream: TcpStream, router: Router) {
    let _ = stream.set_nodelay(true);
    let io = TokioIo::new(Compat::new(stream));
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(HyperTimer::new())
        .header_read_timeout(Duration::from_secs(30))
        .serve_connection(io, TowerToHyperService::new(router));
    // A client that goes away mid-request is an error here, and nothing to act on.
    let _ = conn.await;
}

/// Accepts forever on `listener`, one task per connection on this worker.
pub async fn serve(listener: TcpListener, router: Router) {
    let mut incoming = listener.incoming();
    while let Some(conn) = incoming.next().await {
        if let Ok(stream) = conn {
            drop(ring_rt::spawn(connection(stream, router.clone())));
        }
    }
}

/// The default upstream: answers each connection's data with itself.
pub async fn upstream_echo(listener: TcpListener) {
    let mut incoming = listener.incoming();
    while let Some(Ok(stream)) = incoming.next().await {
        drop(ring_rt::spawn(async move {
            let mut chunks = stream.recv_stream();
            while let Some(Ok(buf)) = chunks.next().await {
                if stream.write_all(buf).await.0.is_err() {
                    break;
                }
            }
        }));
    }
}

/// Binds `addr` with `SO_REUSEPORT`, so each worker has a listener of its own.
pub fn bind_shared(addr: SocketAddr) -> io::Result<TcpListener> {
    let opts = ListenOptions {
        reuse_port: true,
        ..ListenOptions::default()
    };
    TcpListener::bind_with(addr, opts)
}

struct Args {
    addr: SocketAddr,
    threads: usize,
    backend: Option<BackendKind>,
    file: Option<PathBuf>,
    upstream: Option<SocketAddr>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
        threads: 0,
        backend: None,
        file: None,
        upstream: None,
    };
    let mut flags = Flags::from_env();
    while let Some(flag) = flags.next_flag()? {
        match flag.as_str() {
            "--addr" => args.addr = flags.value()?,
            "--threads" => args.threads = flags.value()?,
            "--backend" => args.backend = Some(flags.value()?),
            "--file" => args.file = Some(flags.value()?),
            "--upstream" => args.upstream = Some(flags.value()?),
            _ => return Err(flags.unknown()),
        }
    }
    Ok(args)
}

fn run(args: Args) -> io::Result<()> {
    ring_rt::signal::block(&[libc::SIGINT, libc::SIGTERM])?;
    let mut builder = Runtime::builder();
    if args.threads > 0 {
        builder = builder.threads(args.threads);
    }
    if let Some(kind) = args.backend {
        builder = builder.backend(kind);
    }
    let rt = builder.build()?;
    let file = match args.file {
        Some(file) => file,
        None => {
            let file = std::env::temp_dir().join(format!("ring-rt-axum-{}", std::process::id()));
            std::fs::write(&file, "a file read through ring-rt\n")?;
            file
        }
    };
    let upstream = match args.upstream {
        Some(addr) => addr,
        None => {
            let listener = rt.block_on(async { TcpListener::bind("127.0.0.1:0") })?;
            let addr = listener.local_addr()?;
            drop(rt.spawn(upstream_echo(listener)));
            addr
        }
    };
    let app = router(AppState { file, upstream });
    let addr = args.addr;
    rt.spawn_on_all(move |_| {
        let app = app.clone();
        async move {
            match bind_shared(addr) {
                Ok(listener) => serve(listener, app).await,
                Err(e) => {
                    eprintln!("axum: bind {addr}: {e}");
                    std::process::exit(1);
                }
            }
        }
    });
    println!(
        "axum listening on http://{addr} backend={} threads={}",
        rt.backend().kind,
        rt.threads()
    );
    let signo = rt.block_on(ring_rt::signal::wait(&[libc::SIGINT, libc::SIGTERM]))?;
    eprintln!("axum: signal {signo}, shutting down");
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!(
                "axum: {e}\nusage: axum --addr IP:PORT [--threads N] [--backend uring|epoll] \
                 [--file PATH] [--upstream IP:PORT]"
            );
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("axum: {e}");
            ExitCode::FAILURE
        }
    }
}
