//! An HTTP/1.1 server: hyper 1.x on ring-rt through `ring_rt::compat::Compat` (tokio's I/O
//! traits) and hyper-util's `TokioIo`. One task per connection, keep-alive on, no tokio
//! runtime; clean shutdown on SIGINT/SIGTERM. hyper's timers run on ring-rt's through
//! `ring_rt::compat::HyperTimer`: a client that takes longer than `--header-timeout-ms`
//! (default 30000) to send a request's headers is disconnected.
//!
//! cargo run --release --example hyper -- --addr 127.0.0.1:8080
//!     [--threads N] [--backend uring|epoll] [--header-timeout-ms N]
//!
//! Routes: `GET /` says hello; `POST /echo` streams the request body back; `GET
//! /big?n=BYTES` streams BYTES bytes (byte `i` is `i % 251`) in 64 KiB chunks.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::process::ExitCode;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use ring_rt::compat::{Compat, HyperTimer};
use ring_rt::net::tcp::ListenOptions;
use ring_rt::net::{TcpListener, TcpStream};
use ring_rt::{BackendKind, Runtime};

/// Size of each frame of a `/big` body.
pub const BIG_CHUNK: usize = 64 * 1024;

/// The period of the `/big` pattern: prime, so consecutive chunks differ.
pub const BIG_PERIOD: usize = 251;

/// Byte `i` of a `/big` body.
pub fn big_byte(i: u64) -> u8 {
    (i % BIG_PERIOD as u64) as u8
}

type ResBody = BoxBody<Bytes, hyper::Error>;

/// A `/big` body: `left` more bytes, each frame a zero-copy slice of one pattern buffer.
struct Big {
    left: u64,
    sent: u64,
    pattern: Bytes,
}

impl Big {
    fn new(len: u64) -> Big {
        let first = len.min(BIG_CHUNK as u64) as usize;
        let pattern = (0..(first + BIG_PERIOD) as u64)
            .map(big_byte)
            .collect::<Vec<_>>();
        Big {
            left: len,
            sent: 0,
            pattern: pattern.into(),
        }
    }
}

impl Body for Big {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        if this.left == 0 {
            return Poll::Ready(None);
        }
        let n = this.left.min(BIG_CHUNK as u64) as usize;
        let start = (this.sent % BIG_PERIOD as u64) as usize;
        this.left -= n as u64;
        this.sent += n as u64;
        Poll::Ready(Some(Ok(Frame::data(this.pattern.slice(start..start + n)))))
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.left)
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<ResBody> {
    let body = Full::new(Bytes::from_static(body.as_bytes()))
        .map_err(|never| match never {})
        .boxed();
    let mut res = Response::new(body);
    *res.status_mut() = status;
    res.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    res
}

fn octets(body: ResBody) -> Response<ResBody> {
    let mut res = Response::new(body);
    res.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    res
}

/// `n` from `/big?n=BYTES`.
fn big_len(query: Option<&str>) -> Option<u64> {
    query?
        .split('&')
        .find_map(|kv| kv.strip_prefix("n="))
        .and_then(|n| n.parse().ok())
}

/// The router: one response per request; errors are responses, never failures.
pub async fn route(req: Request<Incoming>) -> Result<Response<ResBody>, Infallible> {
    let res = match (req.method(), req.uri().path()) {
        (&Method::GET, "/") => text(StatusCode::OK, "hello from ring-rt\n"),
        // The body streams through: each frame is written back as it arrives.
        (&Method::POST, "/echo") => octets(req.into_body().boxed()),
        (&Method::GET, "/big") => match big_len(req.uri().query()) {
            Some(n) => octets(Big::new(n).boxed()),
            None => text(StatusCode::BAD_REQUEST, "usage: /big?n=BYTES\n"),
        },
        (_, "/" | "/echo" | "/big") => text(StatusCode::METHOD_NOT_ALLOWED, "wrong method\n"),
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    };
    Ok(res)
}

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
        .serve_connection(io, hyper::service::service_fn(route));
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
            "--header-timeout-ms" => {
                let ms = value
                    .parse()
                    .map_err(|e| format!("--header-timeout-ms {value}: {e}"))?;
                args.header_timeout = Duration::from_millis(ms);
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(args)
}

fn run(args: Args) -> io::Result<()> {
    // Blocked before the workers start, so every thread inherits the mask.
    ring_rt::signal::block(&[libc::SIGINT, libc::SIGTERM])?;
    let mut builder = Runtime::builder().threads(args.threads);
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
    let (addr, reuse_port, header_timeout) = (args.addr, args.threads > 1, args.header_timeout);
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
