//! `Runtime`: a runtime's workers, run from the calling thread (worker 0); what a user
//! holds, and drops to shut them all down. Built by `builder.rs` (which imports this, not
//! the other way round).

use std::fmt;
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use ring_core::metrics::Metrics;
use ring_core::probe::Features;

use crate::backend::{BackendChoice, BackendKind, SHUTDOWN_WAIT};
use crate::executor::task::JoinHandle;
use crate::worker::{Core, Workers};

/// An async runtime: one worker on the calling thread (plus `threads - 1` more, each with
/// its own ring, when built with [`Builder::threads`](crate::Builder::threads)).
///
/// Dropping the runtime drops every task it still holds (cancelling their I/O) and waits
/// until the kernel has finished with their buffers.
///
/// # Examples
///
/// ```
/// let rt = ring_rt::Runtime::new().unwrap();
/// let answer = rt.block_on(async {
///     let task = ring_rt::spawn(async { 6 * 7 });
///     task.await.unwrap()
/// });
/// assert_eq!(answer, 42);
/// ```
pub struct Runtime {
    pub(crate) core: Rc<Core>,
    pub(crate) workers: Option<Arc<Workers>>,
}

impl Runtime {
    /// Runs `future` to completion on this thread, driving every task and all I/O.
    ///
    /// # Panics
    /// If called from inside a ring-rt runtime on the same thread (it would block the loop
    /// that drives the outer runtime).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let rt = ring_rt::Runtime::new()?;
    /// let out = rt.block_on(async {
    ///     ring_rt::time::sleep(Duration::from_millis(1)).await;
    ///     "done"
    /// });
    /// assert_eq!(out, "done");
    /// # std::io::Result::Ok(())
    /// ```
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.core.block_on(future)
    }

    /// Spawns a task on this runtime's calling-thread worker; it runs when `block_on` runs.
    /// The future need not be `Send`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::rc::Rc;
    ///
    /// let rt = ring_rt::Runtime::new()?;
    /// let shared = Rc::new(5); // !Send is fine: the task stays on this thread
    /// let task = rt.spawn({
    ///     let shared = shared.clone();
    ///     async move { *shared * 2 }
    /// });
    /// assert_eq!(rt.block_on(task).unwrap(), 10);
    /// # std::io::Result::Ok(())
    /// ```
    pub fn spawn<F: Future + 'static>(&self, future: F) -> JoinHandle<F::Output> {
        self.core.spawn(future)
    }

    /// Spawns `make(worker_index)` on every worker: the calling thread's (index 0, runs
    /// during `block_on`) and each extra worker's. The future is created on its worker, so
    /// it may be `!Send`; only the factory crosses threads.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    ///
    /// let rt = ring_rt::Runtime::builder().threads(2).build()?;
    /// let started = Arc::new(AtomicUsize::new(0));
    /// let counter = started.clone();
    /// rt.spawn_on_all(move |_worker| {
    ///     let counter = counter.clone();
    ///     async move {
    ///         counter.fetch_add(1, Ordering::SeqCst);
    ///     }
    /// });
    /// rt.block_on(async {
    ///     while started.load(Ordering::SeqCst) < 2 {
    ///         ring_rt::time::sleep(Duration::from_millis(1)).await;
    ///     }
    /// });
    /// # std::io::Result::Ok(())
    /// ```
    pub fn spawn_on_all<F, Fut>(&self, make: F)
    where
        F: Fn(usize) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        let make = Arc::new(make);
        if let Some(workers) = &self.workers {
            for index in 1..=workers.len() {
                let make = make.clone();
                let job = Box::new(move || {
                    drop(spawn(make(index)));
                });
                if let Err(err) = workers.run_on(index, job) {
                    tracing::error!(target: "ring_rt", error = %err, "spawn_on_all: worker unreachable");
                }
            }
        }
        drop(self.core.spawn(make(0)));
    }

    /// Which backend runs, and why it was chosen (see [`BackendChoice`]).
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = ring_rt::Runtime::new()?;
    /// let choice = rt.backend();
    /// println!("{} because {}", choice.kind, choice.reason);
    /// # std::io::Result::Ok(())
    /// ```
    pub fn backend(&self) -> &BackendChoice {
        &self.core.choice.report
    }

    /// The io_uring features this runtime may use (after any mask); `None` on epoll.
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_rt::{BackendKind, Feature};
    ///
    /// let rt = ring_rt::Runtime::new()?;
    /// match rt.features() {
    ///     Some(features) => {
    ///         println!("multishot accept: {}", features.has(Feature::MultishotAccept))
    ///     }
    ///     None => assert_eq!(rt.backend().kind, BackendKind::Epoll),
    /// }
    /// # std::io::Result::Ok(())
    /// ```
    pub fn features(&self) -> Option<Features> {
        self.core.features()
    }

    /// Counters of the calling-thread worker's backend (see [`RuntimeMetrics`]).
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = ring_rt::Runtime::new()?;
    /// rt.block_on(async { ring_rt::spawn(async {}).await.unwrap() });
    /// let m = rt.metrics();
    /// assert_eq!(m.tasks_spawned, 1);
    /// assert_eq!(m.tasks_alive, 0);
    /// # std::io::Result::Ok(())
    /// ```
    pub fn metrics(&self) -> RuntimeMetrics {
        let core = &self.core;
        let (io, recv_buffers_in_use) = core.metrics_snapshot();
        let recv_buffers_in_use = recv_buffers_in_use as u64;
        RuntimeMetrics {
            backend: core.choice.kind,
            io,
            tasks_spawned: core
                .executor
                .shared
                .tasks_spawned
                .load(std::sync::atomic::Ordering::Relaxed),
            tasks_alive: core.executor.alive() as u64,
            timers: core.timers.borrow().len() as u64,
            recv_buffers_in_use,
            spin_turns: core.spin_turns.get(),
        }
    }

    /// Number of workers (the calling thread counts as worker 0).
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = ring_rt::Runtime::builder().threads(2).build()?;
    /// assert_eq!(rt.threads(), 2);
    /// # std::io::Result::Ok(())
    /// ```
    pub fn threads(&self) -> usize {
        self.workers.as_ref().map_or(1, |w| w.len() + 1)
    }

    /// The live counters, shareable with another thread.
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = ring_rt::Runtime::new()?;
    /// let counters = rt.metrics_handle();
    /// let reader = std::thread::spawn(move || counters.snapshot().enters);
    /// rt.block_on(ring_rt::time::sleep(std::time::Duration::from_millis(2)));
    /// let _enters_seen = reader.join().unwrap();
    /// assert!(rt.metrics_handle().snapshot().enters >= 1); // the sleep waited in the kernel
    /// # std::io::Result::Ok(())
    /// ```
    pub fn metrics_handle(&self) -> Arc<Metrics> {
        self.core.metrics()
    }

    /// Shuts the runtime down, waiting at most `timeout` for the kernel to finish with
    /// the ops it cancels (dropping the runtime waits up to 5 s). Every task is dropped,
    /// every op cancelled; memory of an op the kernel has not finished with by then is
    /// leaked rather than freed, and a blocking thread stuck in a syscall is left to end on
    /// its own. I/O objects that outlive the runtime fail with `NotConnected` afterwards,
    /// except a future whose op was abandoned that way: it never completes (completing
    /// would hand back a buffer the kernel may still write), and dropping it leaks the
    /// buffer.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    ///
    /// let rt = ring_rt::Runtime::new()?;
    /// rt.spawn(std::future::pending::<()>()); // never finishes
    /// let start = Instant::now();
    /// rt.shutdown_timeout(Duration::from_millis(100));
    /// assert!(start.elapsed() < Duration::from_secs(5));
    /// # std::io::Result::Ok(())
    /// ```
    pub fn shutdown_timeout(mut self, timeout: Duration) {
        self.shut_down(timeout);
    }

    fn shut_down(&mut self, timeout: Duration) {
        let deadline = Instant::now().checked_add(timeout);
        let deadline = deadline.unwrap_or_else(|| Instant::now() + SHUTDOWN_WAIT);
        if let Some(workers) = self.workers.take() {
            workers.shutdown(deadline);
        }
        self.core.shutdown(deadline);
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.shut_down(SHUTDOWN_WAIT);
    }
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("backend", &self.core.choice.kind)
            .field("threads", &self.threads())
            .finish()
    }
}

/// A snapshot of a runtime's counters, from [`Runtime::metrics`].
///
/// # Examples
///
/// ```
/// let rt = ring_rt::Runtime::new()?;
/// let before = rt.metrics();
/// rt.block_on(async {
///     let (a, b) = ring_rt::net::UnixStream::pair()?;
///     a.write_all(&b"hi"[..]).await.0?;
///     let (n, _buf) = b.read(Vec::with_capacity(8)).await;
///     assert_eq!(n?, 2);
///     std::io::Result::Ok(())
/// })?;
/// let after = rt.metrics();
/// let io = after.io.since(&before.io);
/// // e.g. "uring: enters=.. sqes_submitted=.. cqes_reaped=.. ...". On epoll, ops that
/// // complete at once never reach the kernel's wait, so fewer counters move.
/// println!("{}: {io}", after.backend);
/// assert_eq!(after.tasks_spawned, before.tasks_spawned); // block_on spawns nothing
/// assert_eq!((after.tasks_alive, after.timers, after.recv_buffers_in_use), (0, 0, 0));
/// # std::io::Result::Ok(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct RuntimeMetrics {
    /// The backend these counters come from.
    pub backend: BackendKind,
    /// Ring (or epoll) counters: enters, SQEs, CQEs, overflows, ENOBUFS, cancels, orphans.
    pub io: ring_core::metrics::Snapshot,
    /// Tasks spawned since the runtime started.
    pub tasks_spawned: u64,
    /// Tasks not yet finished.
    pub tasks_alive: u64,
    /// Pending timers.
    pub timers: u64,
    /// Buffers of the worker's receive pool currently out (leased or in flight).
    pub recv_buffers_in_use: u64,
    /// Loop turns that did not wait because the loop was spinning before it parked
    /// ([`Builder::spin_before_park`](crate::Builder::spin_before_park)); 0 when spinning is off.
    pub spin_turns: u64,
}

/// Spawns a task on the current thread's runtime. The future need not be `Send`; awaiting
/// the [`JoinHandle`] gives its output.
///
/// # Panics
/// Outside a ring-rt runtime.
///
/// # Examples
///
/// ```
/// let rt = ring_rt::Runtime::new()?;
/// let sum = rt.block_on(async {
///     let tasks: Vec<_> = (1..=3).map(|i| ring_rt::spawn(async move { i * 10 })).collect();
///     let mut sum = 0;
///     for task in tasks {
///         sum += task.await.unwrap();
///     }
///     sum
/// });
/// assert_eq!(sum, 60);
/// # std::io::Result::Ok(())
/// ```
pub fn spawn<F: Future + 'static>(future: F) -> JoinHandle<F::Output> {
    Core::current()
        .expect("ring_rt::spawn called outside a ring-rt runtime")
        .spawn(future)
}

/// Yields to other tasks once.
///
/// # Examples
///
/// ```
/// use std::cell::Cell;
/// use std::rc::Rc;
///
/// let rt = ring_rt::Runtime::new()?;
/// rt.block_on(async {
///     let ran = Rc::new(Cell::new(false));
///     let flag = ran.clone();
///     let task = ring_rt::spawn(async move { flag.set(true) });
///     ring_rt::yield_now().await; // the spawned task runs here
///     assert!(ran.get());
///     task.await.unwrap();
/// });
/// # std::io::Result::Ok(())
/// ```
pub async fn yield_now() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            return Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await
}
