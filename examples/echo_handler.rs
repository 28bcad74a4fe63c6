//! The echo example's connection handler, shared with `crates/ring-rt/tests/idle_memory.rs`
//! (which counts what an idle connection holds with it) through a `#[path]` module.

use std::future::Future;

use ring_rt::net::TcpStream;

/// Echoes what arrives until end of stream or an error. Every idle connection's task holds
/// this future, so it is written to be small: a function returning an `async move` block,
/// not an `async fn` (rustc keeps an `async fn`'s argument in a slot of its own beside the
/// local it moves into: 24 B here), and the chunk taken out by a `match` in a `let`, not a
/// `while let` (whose scrutinee, the `Option<Result<PooledBuf>>`, stays across the write's
/// await: 32 B).
// Not an `async fn`, on purpose: see above.
#[allow(clippy::manual_async_fn)]
pub fn echo(stream: TcpStream) -> impl Future<Output = ()> {
    async move {
        let mut incoming = stream.recv_stream();
        loop {
            let buf = match incoming.next().await {
                Some(Ok(buf)) => buf,
                _ => break,
            };
            let (res, _buf) = stream.write_all(buf).await;
            if res.is_err() {
                break;
            }
        }
    }
}
