//! `Runtime`: a runtime's workers, run from the calling thread (worker 0); what a user
//! holds, and drops to shut them all down. Built by `builder.rs` (which imports this, not
//! the other way round).

mod balance;
mod handle;

pub use handle::{spawn_blocking, Handle};

use std::fmt;
use std::future::Future;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use ring_core::metrics::Metrics;
use ring_core::probe::Features;

use crate::backend::{BackendChoice, BackendKind, SHUTDOWN_WAIT};
use crate::executor::task::JoinHandle;
use crate::worker::set::WorkerSet;
use crate::worker::{Core, Workers};

/// An async runtime: one worker on the calling thread (plus `threads - 1` more, each with
/// its own ring, when built with [`Builder::threads`](crate::Builder::threads)).
///
/// Dropping the runtime drops every task it still holds (cancelling their I/O) and waits
/// until the kernel has finished with their buffers.
///
/// A runtime belongs to the process that built it, as tokio's does: after `fork(2)` a
/// child should build a runtime of its own and leave the inherited one alone. The child
/// has only the forking thread, and the inherited runtime's io_uring instances and epoll
/// set are shared with the parent: its ops there fail (on 6.0+ a ring refuses any thread
/// but the one it was built for, `EEXIST`) or race the parent's, and dropping it waits out
/// the shutdown drain (5 s) for completions the child cannot see, then leaks their memory. It never reaches a ring the child built (a registered ring index,
/// which is per thread, is not used across a fork).
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
    /// Every worker, for handles and metrics.
    pub(crate) set: Arc<WorkerSet>,
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
    #[track_caller]
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
    /// it may be `!Send`; only the factory crosses threads. Returns a handle per worker, in
    /// worker order (a server serving forever can drop them).
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = ring_rt::Runtime::builder().threads(2).build()?;
    /// let tasks = rt.spawn_on_all(|worker| async move { worker * 10 });
    /// let outputs = rt.block_on(async {
    ///     let mut outputs = Vec::new();
    ///     for task in tasks {
    ///         outputs.push(task.await.unwrap());
    ///     }
    ///     outputs
    /// });
    /// assert_eq!(outputs, [0, 10]);
    /// # std::io::Result::Ok(())
    /// ```
    pub fn spawn_on_all<F, Fut>(&self, make: F) -> Vec<JoinHandle<Fut::Output>>
    where
        F: Fn(usize) -> Fut + Send + Sync + 'static,
        Fut: Future + 'static,
        Fut::Output: Send + 'static,
    {
        let make = Arc::new(make);
        // A panic of `make(0)` is worker 0's task's, as `make(i)`'s is worker i's: it
        // escaped this call, which then spawned nothing on the other workers.
        let on_0 = make.clone();
        let mut handles = vec![crate::worker::set::spawn_here(&self.core, move || on_0(0))];
        for index in 1..self.set.len() {
            let make = make.clone();
            match self.set.spawn_with(index, move || make(index)) {
                Ok(handle) => handles.push(handle),
                Err(err) => unreachable!("worker {index} of {} exists: {err}", self.set.len()),
            }
        }
        handles
    }

    /// A handle to this runtime's workers, for spawning onto them from any thread (see
    /// [`Handle`]).
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = ring_rt::Runtime::builder().threads(2).build()?;
    /// let handle = rt.handle();
    /// let task = handle.spawn(async { "from any thread" });
    /// assert_eq!(rt.block_on(task).unwrap(), "from any thread");
    /// # std::io::Result::Ok(())
    /// ```
    pub fn handle(&self) -> Handle {
        Handle::new(self.set.clone())
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

    /// Counters of every worker, summed, with each worker's own in
    /// [`workers`](RuntimeMetrics::workers) (see [`RuntimeMetrics`]). Worker 0's are exact;
    /// another worker's local values (timers, pooled buffers out, spin turns) are as it
    /// published them at its last loop turn.
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = ring_rt::Runtime::builder().threads(2).build()?;
    /// rt.block_on(async { ring_rt::spawn(async {}).await.unwrap() });
    /// let m = rt.metrics();
    /// assert_eq!(m.workers.len(), 2);
    /// assert_eq!(m.tasks_spawned, 1);
    /// assert_eq!(m.workers[0].tasks_spawned, 1);
    /// assert_eq!(m.tasks_alive, 0);
    /// # std::io::Result::Ok(())
    /// ```
    pub fn metrics(&self) -> RuntimeMetrics {
        let core = &self.core;
        let (io, recv_buffers_in_use) = core.metrics_snapshot();
        let mut workers = vec![WorkerMetrics {
            io,
            tasks_spawned: core.executor.shared.tasks_spawned.load(Relaxed),
            tasks_alive: core.executor.alive() as u64,
            timers: core.timers.borrow().len() as u64,
            recv_buffers_in_use: recv_buffers_in_use as u64,
            spin_turns: core.spin_turns.get(),
        }];
        for index in 1..self.set.len() {
            if let Some(shared) = self.set.shared(index) {
                let gauges = &shared.gauges;
                workers.push(WorkerMetrics {
                    io: gauges.io.get().map(|m| m.snapshot()).unwrap_or_default(),
                    tasks_spawned: shared.tasks_spawned.load(Relaxed),
                    tasks_alive: shared.tasks_alive.load(Relaxed) as u64,
                    timers: gauges.timers.load(Relaxed),
                    recv_buffers_in_use: gauges.recv_buffers_in_use.load(Relaxed),
                    spin_turns: gauges.spin_turns.load(Relaxed),
                });
            }
        }
        let sum = |f: fn(&WorkerMetrics) -> u64| workers.iter().map(f).sum::<u64>();
        RuntimeMetrics {
            backend: core.choice.kind,
            io: workers.iter().fold(
                Default::default(),
                |acc: ring_core::metrics::Snapshot, w| acc.plus(&w.io),
            ),
            tasks_spawned: sum(|w| w.tasks_spawned),
            tasks_alive: sum(|w| w.tasks_alive),
            timers: sum(|w| w.timers),
            recv_buffers_in_use: sum(|w| w.recv_buffers_in_use),
            spin_turns: sum(|w| w.spin_turns),
            workers,
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
    /// leaked rather than freed, and a blocking thread stuck in a syscall, or a worker
    /// thread stuck inside a task, is left to end on its own (a worker then stops, drops
    /// its tasks and closes its ring when that task returns). A timeout past what an
    /// `Instant` holds (`Duration::MAX`) waits as long as it takes. I/O objects that
    /// outlive the runtime fail with `NotConnected` afterwards, and so do ops that a task's
    /// destructor starts or waits on while the shutdown drops the tasks (an op already in
    /// the kernel ends with what the kernel says), except two kinds. A socket read that
    /// bytes the runtime already holds for the socket can serve (what an adapter read
    /// ahead and gave back, or a dropped read received) is served from them, as it needs
    /// no kernel; so those bytes stay readable, and `into_owned_fd` succeeds once they are
    /// read. And a future whose op was abandoned that way never completes (completing
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
    /// assert!(start.elapsed() < Duration::from_secs(2));
    /// # std::io::Result::Ok(())
    /// ```
    pub fn shutdown_timeout(mut self, timeout: Duration) {
        self.shut_down(timeout);
    }

    fn shut_down(&mut self, timeout: Duration) {
        // Once: `shutdown_timeout` consumes the runtime, whose drop comes here again (and
        // must not wait a second, longer deadline for what the first gave up on).
        if self.core.is_shut_down() {
            return;
        }
        let deadline = deadline_after(timeout);
        if let Some(workers) = self.workers.take() {
            workers.shutdown(deadline);
        }
        self.core.shutdown(|| deadline);
        // After the workers: a task being dropped may still hand work to the pool.
        self.set.close_blocking(deadline);
    }
}

/// The deadline `timeout` from now; one past what an `Instant` holds (`Duration::MAX`)
/// is a century away, which is as long as it takes (it used to fall back to the 5 s of a
/// drop, returning early from a wait asked to have no end).
fn deadline_after(timeout: Duration) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    let now = Instant::now();
    now.checked_add(timeout)
        .or_else(|| now.checked_add(CENTURY))
        .unwrap_or(now + SHUTDOWN_WAIT)
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
#[derive(Clone, Debug)]
pub struct RuntimeMetrics {
    /// The backend these counters come from.
    pub backend: BackendKind,
    /// Ring (or epoll) counters of every worker, summed: enters, SQEs, CQEs, overflows,
    /// ENOBUFS, cancels, orphans.
    pub io: ring_core::metrics::Snapshot,
    /// Tasks spawned since the runtime started, on every worker.
    pub tasks_spawned: u64,
    /// Tasks not yet finished, on every worker.
    pub tasks_alive: u64,
    /// Pending timers, on every worker.
    pub timers: u64,
    /// Buffers of the workers' receive pools currently out (leased or in flight).
    pub recv_buffers_in_use: u64,
    /// Loop turns that did not wait because the loop was spinning before it parked
    /// ([`Builder::spin_before_park`](crate::Builder::spin_before_park)); 0 when spinning is off.
    pub spin_turns: u64,
    /// Each worker's own figures, worker 0 (the calling thread) first.
    pub workers: Vec<WorkerMetrics>,
}

/// One worker's figures in [`RuntimeMetrics::workers`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerMetrics {
    /// The worker's ring (or epoll) counters.
    pub io: ring_core::metrics::Snapshot,
    /// Tasks spawned on this worker since it started.
    pub tasks_spawned: u64,
    /// Tasks not yet finished on this worker.
    pub tasks_alive: u64,
    /// Pending timers of this worker.
    pub timers: u64,
    /// Buffers of this worker's receive pool currently out.
    pub recv_buffers_in_use: u64,
    /// Spin turns of this worker.
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
