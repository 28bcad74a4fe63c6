//! The hyper demo service, one copy for both servers that wrk compares: examples/hyper.rs
//! (ring-rt) and ring-bench's tokio-hyper. Routes: `GET /` says hello; `POST /echo` streams
//! the request body back; `GET /big?n=BYTES` streams BYTES bytes (byte `i` is `i % 251`) in
//! 64 KiB chunks.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};

/// Size of each frame of a `/big` body.
pub const BIG_CHUNK: usize = 64 * 1024;

/// The period of the `/big` pattern: prime, so consecutive chunks differ.
pub const BIG_PERIOD: usize = 251;

/// Byte `i` of a `/big` body.
pub fn big_byte(i: u64) -> u8 {
    (i % BIG_PERIOD as u64) as u8
}

/// The body of every response.
pub type ResBody = BoxBody<Bytes, hyper::Error>;

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

/// The router: one response per request; errors are responses, never failures. `GET /`
/// answers `hello` (each server names itself; keep the texts equally long, so wrk's
/// transfer rates compare directly).
pub async fn route(
    hello: &'static str,
    req: Request<Incoming>,
) -> Result<Response<ResBody>, Infallible> {
    let res = match (req.method(), req.uri().path()) {
        (&Method::GET, "/") => text(StatusCode::OK, hello),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_body_is_the_pattern_in_chunks() {
        let len = 2 * BIG_CHUNK as u64 + 5;
        let mut body = Big::new(len);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut got = Vec::new();
        while let Poll::Ready(Some(frame)) = Pin::new(&mut body).poll_frame(&mut cx) {
            let data = frame.unwrap().into_data().unwrap();
            assert!(data.len() <= BIG_CHUNK);
            got.extend_from_slice(&data);
        }
        assert!(body.is_end_stream());
        assert_eq!(got, (0..len).map(big_byte).collect::<Vec<_>>());
    }

    #[test]
    fn big_len_reads_n_among_other_parameters() {
        assert_eq!(big_len(Some("a=1&n=42")), Some(42));
        assert_eq!(big_len(Some("n=x")), None);
        assert_eq!(big_len(None), None);
    }
}
