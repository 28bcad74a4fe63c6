//! Connections balanced over the workers by load: one listener, each accepted connection
//! served on the least loaded worker (a connection keeps its worker for its whole life).

use std::future::Future;
use std::io;
use std::net::TcpStream as StdTcpStream;
use std::sync::Arc;

use std::sync::atomic::Ordering;

use super::Handle;
use crate::completion::Refused;
use crate::executor::task::JoinHandle;
use crate::executor::Shared;
use crate::net::direct;
use crate::net::{IntoFdError, TcpListener, TcpStream};
use crate::op::net::InTransit;
use crate::worker::set::spawn_here;

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
            serve_here(stream, serve);
            return;
        }
        if stream.is_direct() {
            if let Some(to) = self.set.shared(worker) {
                // The move awaits the other ring's answer: a short task of its own carries
                // it, so the accept loop goes on.
                let from = crate::worker::Core::current().map(|c| c.executor.shared.clone());
                let moving = from.map(|from| Moving::new(from, to.clone()));
                let (handle, serve) = (self.clone(), serve.clone());
                drop(crate::spawn(async move {
                    let serve_here = serve.clone();
                    let moved = handle
                        .spawn_stream_on(worker, stream, move |s| serve(s))
                        .await;
                    drop(moving);
                    if let Err(kept) = moved {
                        serve_kept(kept, &serve_here);
                    }
                }));
                return;
            }
        }
        let serve_there = serve.clone();
        if let Err(kept) = self.spawn_by_fd(worker, stream, move |s| serve_there(s)) {
            serve_kept(kept, serve);
        }
    }

    /// Moves `stream`, a TCP stream of this worker, to worker `worker` and runs `serve`
    /// there with it; the future `serve` returns is built on that worker, so it need not
    /// be `Send`. A direct descriptor (see
    /// [`Builder::direct_descriptors`](crate::Builder::direct_descriptors)) moves from
    /// ring to ring by `IORING_MSG_SEND_FD` and stays one; any other stream, and a direct
    /// descriptor the other ring will not take (its table full), moves by its fd. A stream
    /// already on `worker` is served there. Awaits only the move (a loop turn for a direct
    /// descriptor, nothing for an fd); the handle awaits `serve`'s output, or the error
    /// that kept the stream from being made on `worker` (it shut down meanwhile). As every
    /// spawn on worker 0, one there runs only while a `block_on` of its runtime does.
    ///
    /// Nothing is lost to a drop: dropping this future, or aborting the handle before the
    /// task ran, closes the connection (on whichever worker holds it by then), as dropping
    /// the stream would.
    ///
    /// # Errors
    /// The stream back, with why: `InvalidInput` for a worker the runtime does not have;
    /// `ResourceBusy` for a stream with received bytes queued (from a read that was
    /// dropped), which would be lost; an fd that could not be installed for a direct
    /// descriptor (the fd table full); `Other` outside a runtime (an async call polled
    /// elsewhere).
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_rt::net::{TcpListener, TcpStream};
    ///
    /// let rt = ring_rt::Runtime::builder().threads(2).direct_descriptors(64).build()?;
    /// rt.block_on(async {
    ///     let listener = TcpListener::bind("127.0.0.1:0")?;
    ///     let client = TcpStream::connect(listener.local_addr()?).await?;
    ///     let stream = listener.incoming().next().await.expect("never None")?;
    ///     let served = ring_rt::Handle::current()
    ///         .spawn_stream_on(1, stream, |stream| async move {
    ///             let name = std::thread::current().name().map(String::from);
    ///             stream.write_all(&b"moved"[..]).await.0.map(|()| name)
    ///         })
    ///         .await
    ///         .map_err(|kept| kept.error().kind())
    ///         .expect("worker 1 exists");
    ///     let name = served.await.expect("not cancelled")??;
    ///     assert_eq!(name.as_deref(), Some("ring-rt-worker-1"));
    ///     let (n, buf) = client.read(vec![0; 5]).await;
    ///     assert_eq!(&buf[..n?], b"moved");
    ///     std::io::Result::Ok(())
    /// })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub async fn spawn_stream_on<F, Fut>(
        &self,
        worker: usize,
        stream: TcpStream,
        serve: F,
    ) -> Result<JoinHandle<io::Result<Fut::Output>>, IntoFdError<TcpStream>>
    where
        F: FnOnce(TcpStream) -> Fut + Send + 'static,
        Fut: Future + 'static,
        Fut::Output: Send + 'static,
    {
        let Some(to) = self.set.shared(worker) else {
            let err = io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("no worker {worker}: the runtime has {}", self.set.len()),
            );
            return Err(IntoFdError::new(stream, err));
        };
        // Already on `worker` (the stream's own, whichever thread polls this): served there,
        // unless that worker has stopped (its runtime dropped), where a task would never
        // run: that goes the way below, whose spawn the worker refuses (`Cancelled`, the
        // stream closed), review AS.
        let core = stream.socket().core.clone();
        if Arc::ptr_eq(&core.executor.shared, to) && !to.is_closed() {
            return Ok(spawn_here(
                &core,
                move || async move { Ok(serve(stream).await) },
            ));
        }
        let stream = match (stream.is_direct(), to.unparker.ring()) {
            (true, Some(target)) => match direct::send(stream, target, to.clone()).await {
                Ok(in_transit) => return Ok(self.spawn_claiming(worker, in_transit, serve)),
                Err((stream, err)) if err.kind() == io::ErrorKind::ResourceBusy => {
                    return Err(IntoFdError::new(stream, err));
                }
                Err((stream, err)) => {
                    tracing::debug!(target: "ring_rt", worker, error = %err, "the other worker did not take a direct descriptor; moving it by fd");
                    stream
                }
            },
            _ => stream,
        };
        self.spawn_by_fd(worker, stream, serve)
    }

    /// Spawns on `worker` the task that claims the direct descriptor sent there as
    /// `in_transit` and serves it. A task aborted, or dropped unrun, drops `in_transit`
    /// unclaimed, which has that worker close the descriptor.
    fn spawn_claiming<F, Fut>(
        &self,
        worker: usize,
        in_transit: InTransit,
        serve: F,
    ) -> JoinHandle<io::Result<Fut::Output>>
    where
        F: FnOnce(TcpStream) -> Fut + Send + 'static,
        Fut: Future + 'static,
        Fut::Output: Send + 'static,
    {
        let spawned = self.spawn_local_on(worker, move || async move {
            let stream = direct::claim(in_transit)?.await?;
            Ok(serve(stream).await)
        });
        // Only a worker the runtime does not have is refused, and `worker` was checked:
        // the descriptor sits in that ring's table until it closes, and the handle says so.
        spawned.unwrap_or_else(|err| crate::spawn(async move { Err(err) }))
    }

    /// Moves `stream` to `worker` by its fd (a direct descriptor's installed for it) and
    /// serves it there.
    fn spawn_by_fd<F, Fut>(
        &self,
        worker: usize,
        stream: TcpStream,
        serve: F,
    ) -> Result<JoinHandle<io::Result<Fut::Output>>, IntoFdError<TcpStream>>
    where
        F: FnOnce(TcpStream) -> Fut + Send + 'static,
        Fut: Future + 'static,
        Fut::Output: Send + 'static,
    {
        let fd = stream.into_owned_fd()?;
        let spawned = self.spawn_local_on(worker, move || async move {
            let stream = TcpStream::from_std(StdTcpStream::from(fd))?;
            Ok(serve(stream).await)
        });
        // As in `spawn_claiming`: `worker` was checked.
        Ok(spawned.unwrap_or_else(|err| crate::spawn(async move { Err(err) })))
    }
}

/// Serves, on this worker, a connection that could not move: a stream with bytes queued
/// from a dropped read, or a direct descriptor no fd could be installed for.
fn serve_kept<F, Fut>(kept: IntoFdError<TcpStream>, serve: &Arc<F>)
where
    F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + 'static,
{
    tracing::debug!(target: "ring_rt", error = %kept.error(), "serve_balanced: a connection stays on its worker");
    serve_here(kept.into_inner(), serve);
}

/// Serves `stream` on its own worker (this thread's), as a task holding the future `serve`
/// returns and nothing else: an `async` block calling `serve` inside the task would keep
/// the `Arc` and its own state beside that future for the connection's whole life (40 B
/// per idle connection, `tests/idle_memory.rs`). `serve` is called here with its panic
/// caught, which becomes the task's: the connection's, as on another worker, never the
/// accept loop's (the handle, dropped here, holds that panic's payload then, and drops it
/// quietly: see `JoinHandle`'s `Drop`).
fn serve_here<F, Fut>(stream: TcpStream, serve: &Arc<F>)
where
    F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + 'static,
{
    let core = stream.socket().core.clone();
    drop(spawn_here(&core, || serve(stream)));
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
