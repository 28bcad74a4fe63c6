//! The tokio HTTP/1.1 server that examples/hyper.rs is compared against with wrk: the same
//! hyper 1.x service and routes on tokio through hyper-util's `TokioIo`, one task per
//! connection, keep-alive on; clean shutdown on SIGINT/SIGTERM.
//!
//! tokio-hyper --addr 127.0.0.1:8080 [--flavor current_thread|multi_thread]
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
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::{Builder, Runtime};
use tokio::signal::unix::{signal, SignalKind};

const USAGE: &str = "usage: tokio-hyper --addr IP:PORT [--flavor current_thread|multi_thread]";

/// Size of each frame of a `/big` body (as in examples/hyper.rs).
const BIG_CHUNK: usize = 64 * 1024;

/// The period of the `/big` pattern: prime, so consecutive chunks differ.
const BIG_PERIOD: usize = 251;

/// The `GET /` body: the same length as ring-rt's "hello from ring-rt\n", so both servers
/// send byte-for-byte equally long responses and wrk's transfer rates compare directly.
const HELLO: &str = "hello from tokio!!\n";

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
            .map(|i| (i % BIG_PERIOD as u64) as u8)
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
async fn route(req: Request<Incoming>) -> Result<Response<ResBody>, Infallible> {
    let res = match (req.method(), req.uri().path()) {
        (&Method::GET, "/") => text(StatusCode::OK, HELLO),
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
        .serve_connection(TokioIo::new(stream), hyper::service::service_fn(route));
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
    multi_thread: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
        multi_thread: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--addr" => args.addr = value.parse().map_err(|e| format!("--addr {value}: {e}"))?,
            "--flavor" => {
                args.multi_thread = match value.as_str() {
                    "current_thread" => false,
                    "multi_thread" => true,
                    _ => return Err(format!("--flavor {value}: current_thread or multi_thread")),
                }
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(args)
}

fn runtime(multi_thread: bool) -> io::Result<Runtime> {
    let mut builder = if multi_thread {
        Builder::new_multi_thread()
    } else {
        Builder::new_current_thread()
    };
    builder.enable_all().build()
}

fn run(args: Args) -> io::Result<()> {
    let rt = runtime(args.multi_thread)?;
    let flavor = if args.multi_thread {
        "multi_thread"
    } else {
        "current_thread"
    };
    rt.block_on(async {
        let listener = TcpListener::bind(args.addr).await?;
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        println!(
            "hyper listening on http://{} backend=tokio-{flavor} threads={}",
            args.addr,
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
