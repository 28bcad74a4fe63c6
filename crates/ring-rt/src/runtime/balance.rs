//! Connections balanced over the workers by load: one listener, each accepted connection
//! served on the least loaded worker (a connection keeps its worker for its whole life).

use std::future::Future;
use std::net::TcpStream as StdTcpStream;
use std::sync::Arc;

use super::Handle;
use crate::net::{TcpListener, TcpStream};

impl Handle {
    /// Accepts connections on `listener` (on the worker that awaits this) and serves each
    /// with `serve` on the worker with the fewest tasks alive at that moment: the
    /// accepting worker keeps it, or it moves to another worker by its fd (the stream is
    /// made anew there; nothing was read from it yet). Unlike one `SO_REUSEPORT` listener
    /// per worker, whose kernel hash of the 4-tuple ignores load, bursts of connections
    /// (or a few long-lived busy ones) spread evenly. Runs until the listener fails for
    /// good; per-connection errors (a client gone before it was accepted, the fd limit
    /// with its back-off) are skipped.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use ring_rt::net::TcpListener;
    ///
    /// let rt = ring_rt::Runtime::new()?; // one worker per CPU
    /// rt.block_on(async {
    ///     let listener = TcpListener::bind("127.0.0.1:7000")?;
    ///     ring_rt::Handle::current()
    ///         .serve_balanced(&listener, |stream| async move {
    ///             let mut chunks = stream.recv_stream();
    ///             while let Some(Ok(buf)) = chunks.next().await {
    ///                 if stream.write_all(buf).await.0.is_err() {
    ///                     break;
    ///                 }
    ///             }
    ///         })
    ///         .await;
    ///     std::io::Result::Ok(())
    /// })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub async fn serve_balanced<F, Fut>(&self, listener: &TcpListener, serve: F)
    where
        F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        let serve = Arc::new(serve);
        let mut incoming = listener.incoming();
        while let Some(conn) = incoming.next().await {
            match conn {
                Ok(stream) => self.hand_over(stream, &serve),
                Err(err) => {
                    tracing::debug!(target: "ring_rt", error = %err, "serve_balanced: accept failed; going on");
                }
            }
        }
    }

    /// Serves `stream` on the least loaded worker.
    fn hand_over<F, Fut>(&self, stream: TcpStream, serve: &Arc<F>)
    where
        F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        let worker = self.set.least_loaded_running();
        let is_here = self.set.shared(worker).is_some_and(|s| s.is_here());
        if is_here {
            drop(crate::spawn(serve(stream)));
            return;
        }
        // A fresh stream has no queued data, so this only fails for a socket a dropped
        // read used: keep such a one here.
        let fd = match stream.into_owned_fd() {
            Ok(fd) => fd,
            Err(kept) => {
                drop(crate::spawn(serve(kept.into_inner())));
                return;
            }
        };
        let serve = serve.clone();
        let moved = self.spawn_local_on(worker, move || async move {
            match TcpStream::from_std(StdTcpStream::from(fd)) {
                Ok(stream) => serve(stream).await,
                Err(err) => {
                    tracing::debug!(target: "ring_rt", error = %err, "serve_balanced: adopting a moved connection failed");
                }
            }
        });
        if let Err(err) = moved {
            tracing::debug!(target: "ring_rt", error = %err, "serve_balanced: no worker for a connection");
        }
    }
}
