//! Connections balanced over the workers by load: one listener, each accepted connection
//! served on the least loaded worker (a connection keeps its worker for its whole life).

use std::future::Future;
use std::io;
use std::net::TcpStream as StdTcpStream;
use std::sync::Arc;

use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;

use super::Handle;
use crate::completion::Refused;
use crate::executor::Shared;
use crate::net::direct;
use crate::net::{TcpListener, TcpStream};

impl Handle {
    /// Accepts connections on `listener` (on the worker that awaits this) and serves each
    /// with `serve` on the worker with the fewest tasks alive at that moment: the
    /// accepting worker keeps it, or it moves to another worker (the stream is made anew
    /// there; nothing was read from it yet). A direct descriptor (see
    /// [`Builder::direct_descriptors`](crate::Builder::direct_descriptors)) moves from ring
    /// to ring by `IORING_MSG_SEND_FD` and stays one, no fd made; one the other ring will not
    /// take (its table full), and any other stream, moves by its fd. Unlike one `SO_REUSEPORT` listener
    /// per worker, whose kernel hash of the 4-tuple ignores load, bursts of connections
    /// (or a few long-lived busy ones) spread evenly. Worker 0 takes connections only when
    /// this accept loop runs on it (its `block_on` then runs as long as the loop does); a
    /// loop on another worker never hands any to worker 0, whose tasks run only inside a
    /// `block_on`.
    ///
    /// Per-connection errors (a client gone before it was accepted, the fd limit with its
    /// back-off) are skipped, the loop yielding to the worker's other tasks after each and,
    /// after a run of them, pausing (1 ms doubling to 1 s) so that an error that never
    /// clears costs no CPU. It returns the error that ends it when the listener fails for
    /// good (`EBADF`, `ENOTSOCK`, `EFAULT`, or any error once the socket is not a listening
    /// TCP socket: shut down, never listened on, not TCP) or the runtime refuses it
    /// (dropped, or polled outside it). A panic of `serve` (the call, or the future it
    /// returns) is that connection's task's, wherever it runs: the loop goes on.
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
    pub async fn serve_balanced<F, Fut>(&self, listener: &TcpListener, serve: F) -> io::Error
    where
        F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        let serve = Arc::new(serve);
        let mut incoming = listener.incoming();
        let mut failures = 0u32;
        loop {
            match incoming.next().await {
                Some(Ok(stream)) => {
                    failures = 0;
                    self.hand_over(stream, &serve);
                }
                Some(Err(err)) if ends_accepting(&err, listener) => return err,
                Some(Err(err)) => {
                    tracing::debug!(target: "ring_rt", error = %err, "serve_balanced: accept failed; going on");
                    failures = failures.saturating_add(1);
                    pause_after(failures).await;
                }
                None => return io::Error::other("the listener's accept stream ended"),
            }
        }
    }

    /// Serves `stream` on the least loaded worker.
    fn hand_over<F, Fut>(&self, stream: TcpStream, serve: &Arc<F>)
    where
        F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        // Worker 0 runs tasks only inside a `block_on`: it may take connections while this
        // loop runs in its `block_on`, not while some other `block_on` happens to run.
        let on_worker_0 = self.set.shared(0).is_some_and(|s| s.is_here());
        let worker = if on_worker_0 {
            self.set.least_loaded_running()
        } else {
            self.set.least_loaded()
        };
        let is_here = self.set.shared(worker).is_some_and(|s| s.is_here());
        if is_here {
            // `serve` is called inside the task, as on another worker: its panic is the
            // connection's, not the accept loop's.
            let serve = serve.clone();
            drop(crate::spawn(async move { serve(stream).await }));
            return;
        }
        if stream.is_direct() {
            if let Some(to) = self.set.shared(worker) {
                if let Some(target) = to.unparker.ring() {
                    let from = crate::worker::Core::current().map(|c| c.executor.shared.clone());
                    let moving = from.map(|from| Moving::new(from, to.clone()));
                    let (handle, serve) = (self.clone(), serve.clone());
                    drop(crate::spawn(async move {
                        handle.move_direct(stream, target, worker, serve).await;
                        drop(moving);
                    }));
                    return;
                }
            }
        }
        self.move_by_fd(stream, worker, serve);
    }

    /// Moves direct-descriptor `stream` to `worker`'s ring (`IORING_MSG_SEND_FD`, no fd
    /// made), where the task that serves it claims it; by its fd where that ring will not
    /// take it (no direct table there, or a full one).
    async fn move_direct<F, Fut>(
        self,
        stream: TcpStream,
        target: Arc<OwnedFd>,
        worker: usize,
        serve: Arc<F>,
    ) where
        F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        let seq = match direct::send(stream, target).await {
            Ok(seq) => seq,
            Err((stream, err)) => {
                tracing::debug!(target: "ring_rt", error = %err, "serve_balanced: the other worker did not take a direct descriptor; moving it by fd");
                self.move_by_fd(stream, worker, &serve);
                return;
            }
        };
        let moved = self.spawn_local_on(worker, move || async move {
            let claimed = match direct::claim(seq) {
                Ok(claim) => claim.await,
                Err(err) => Err(err),
            };
            match claimed {
                Ok(stream) => serve(stream).await,
                Err(err) => {
                    tracing::debug!(target: "ring_rt", error = %err, "serve_balanced: claiming a moved connection failed");
                }
            }
        });
        if let Err(err) = moved {
            // The connection sits in that worker's table until its ring closes.
            tracing::debug!(target: "ring_rt", error = %err, "serve_balanced: no worker for a moved connection");
        }
    }

    /// Moves `stream` to `worker` by its fd (a direct descriptor's installed for it).
    fn move_by_fd<F, Fut>(&self, stream: TcpStream, worker: usize, serve: &Arc<F>)
    where
        F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        // A fresh stream has no queued data, so this only fails for a socket a dropped
        // read used, or a direct descriptor no fd could be installed for: keep such a one
        // here.
        let fd = match stream.into_owned_fd() {
            Ok(fd) => fd,
            Err(kept) => {
                let (serve, stream) = (serve.clone(), kept.into_inner());
                drop(crate::spawn(async move { serve(stream).await }));
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

/// A connection on its way to another worker, carried by a short task here: counted in
/// that worker's load from the moment it was chosen (so a burst does not pile onto it
/// unseen), and not in this one's, until the task has handed it over.
struct Moving {
    from: Arc<Shared>,
    to: Arc<Shared>,
}

impl Moving {
    fn new(from: Arc<Shared>, to: Arc<Shared>) -> Moving {
        from.moving_out.fetch_add(1, Ordering::Relaxed);
        to.spawns_pending.fetch_add(1, Ordering::Relaxed);
        Moving { from, to }
    }
}

impl Drop for Moving {
    fn drop(&mut self) {
        self.from.moving_out.fetch_sub(1, Ordering::Relaxed);
        self.to.spawns_pending.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Whether an accept error means the listener will never accept again: it is not (or no
/// longer) a listening TCP socket, or the runtime refuses its ops. Everything else (a
/// client gone, out of fds or memory, a network error passed on by the kernel) may pass.
fn ends_accepting(err: &io::Error, listener: &TcpListener) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EBADF | libc::ENOTSOCK | libc::EFAULT)
    ) || matches!(
        Refused::of(err),
        Some(Refused::Elsewhere | Refused::ShutDown)
    ) || !listener.is_listening()
}

/// After the `failures`-th accept error in a row: a yield for the first few (the worker's
/// other tasks run between: an error can come at once, time after time), then a pause of
/// 1 ms doubling to 1 s, so that an error that never clears costs no CPU.
async fn pause_after(failures: u32) {
    const YIELDS: u32 = 4;
    if failures <= YIELDS {
        crate::yield_now().await;
        return;
    }
    let ms = 1u64 << (failures - YIELDS - 1).min(10);
    crate::time::sleep(std::time::Duration::from_millis(ms)).await;
}
