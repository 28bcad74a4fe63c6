//! `Runtime`, its `Builder`, and the per-worker `Core` that futures reach through a
//! thread-local.

use std::cell::RefCell;
use std::fmt;
use std::future::Future;
use std::io;
use std::pin::pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use ring_core::driver::Wait;
use ring_core::metrics::Metrics;
use ring_core::probe::Features;

use crate::backend::{Backend, BackendKind};
use crate::executor::task::{Header, JoinHandle};
use crate::executor::Executor;
use crate::select::{BackendChoice, Choice};
use crate::time::Timers;
use crate::worker::Workers;

pub use crate::builder::Builder;

/// Tasks polled per loop turn before the loop checks the kernel again, so a busy task set
/// cannot starve I/O completions.
const TASKS_PER_TURN: usize = 256;

/// One worker's state: its tasks, its backend, its timers. Lives on the worker's thread.
#[doc(hidden)]
pub struct Core {
    pub(crate) executor: Executor,
    pub(crate) backend: RefCell<Backend>,
    pub(crate) timers: RefCell<Timers>,
    pub(crate) choice: Choice,
    /// How long the loop spins through no-wait turns before it sleeps (`Builder::spin_before_park`).
    pub(crate) spin: std::time::Duration,
    /// No-wait turns made while spinning (`RuntimeMetrics::spin_turns`).
    pub(crate) spin_turns: std::cell::Cell<u64>,
}

thread_local! {
    static CURRENT: RefCell<Option<Rc<Core>>> = const { RefCell::new(None) };
}

impl Core {
    /// The core of the runtime running on this thread.
    pub(crate) fn current() -> Option<Rc<Core>> {
        CURRENT.with(|c| c.borrow().clone())
    }

    /// Like [`current`](Self::current), as an `io::Error` for I/O entry points.
    pub(crate) fn current_io() -> io::Result<Rc<Core>> {
        Core::current().ok_or_else(|| {
            io::Error::other("no ring-rt runtime on this thread: call this inside Runtime::block_on or a spawned task")
        })
    }

    /// Runs `future` to completion, driving tasks, timers and I/O.
    pub(crate) fn block_on<F: Future>(self: &Rc<Core>, future: F) -> F::Output {
        let _entered = self
            .executor
            .enter()
            .expect("Runtime::block_on called from inside a running ring-rt runtime");
        let _current = CurrentGuard::set(self.clone());
        let main_waker = Waker::from(Arc::new(Header::main(self.executor.shared.clone())));
        let mut cx = Context::from_waker(&main_waker);
        let mut future = pin!(future);
        // Poll the new future at once, whatever an earlier block_on left in the flag.
        let mut woken = true;
        loop {
            if std::mem::take(&mut woken) | self.executor.take_main_woken() {
                if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
                    return out;
                }
            }
            self.executor.run_ready(TASKS_PER_TURN);
            self.turn();
        }
    }

    /// One loop turn: wait for I/O (not at all if work is ready, and only after spinning
    /// if `Builder::spin_before_park` asks for it), then fire due timers.
    fn turn(&self) {
        let wait = self.next_wait();
        if wait == Wait::No || self.spin.is_zero() {
            self.backend_turn(wait);
        } else if !self.spin_finds_work() {
            // The spin took time: the next timer is that much closer.
            self.backend_turn(self.next_wait());
        }
        let due = self.timers.borrow_mut().take_expired(Instant::now());
        for waker in due {
            waker.wake();
        }
    }

    /// Before a turn that would sleep, turns the backend without waiting for up to the
    /// configured spin, so completions that arrive within it are run without the cost of
    /// sleeping and being woken (an IRQ, a context switch, a cold cache). On io_uring with
    /// TASKRUN_FLAG (5.19+) such a turn enters the kernel only when the ring's flags
    /// announce completions; on epoll each is an `epoll_wait(0)`. Returns true once a task
    /// is ready or a timer is due (the caller then skips its wait), false when the spin ran
    /// out and the loop should park.
    fn spin_finds_work(&self) -> bool {
        let start = Instant::now();
        loop {
            self.backend_turn(Wait::No);
            self.spin_turns.set(self.spin_turns.get() + 1);
            let now = Instant::now();
            let is_timer_due = self
                .timers
                .borrow()
                .next_deadline()
                .is_some_and(|deadline| deadline <= now);
            if self.executor.has_ready() || is_timer_due {
                return true;
            }
            if now.duration_since(start) >= self.spin {
                return false;
            }
            std::hint::spin_loop();
        }
    }

    /// How long the next turn may wait: not at all if work is ready, else until the next
    /// timer is due (or for I/O alone).
    fn next_wait(&self) -> Wait {
        if self.executor.has_ready() {
            return Wait::No;
        }
        match self.timers.borrow().next_deadline() {
            Some(deadline) => Wait::For(deadline.saturating_duration_since(Instant::now())),
            None => Wait::Forever,
        }
    }

    fn backend_turn(&self, wait: Wait) {
        if let Err(err) = self.backend.borrow_mut().turn(wait) {
            // The backend failing to enter the kernel is not something a task can handle;
            // report it and keep the loop alive so ops still in flight can complete.
            let backend = self.backend.borrow().kind();
            tracing::error!(target: "ring_rt", %backend, error = %err, "backend turn failed");
        }
    }

    pub(crate) fn spawn<F: Future + 'static>(&self, future: F) -> JoinHandle<F::Output> {
        self.executor.spawn(future)
    }

    /// Drops every task, then the backend waits for the kernel to finish with their ops.
    pub(crate) fn shutdown(self: &Rc<Core>) {
        let _current = CurrentGuard::set(self.clone());
        self.executor.shutdown();
    }
}

/// Installs a core as this thread's current one, restoring the previous on drop.
struct CurrentGuard(Option<Rc<Core>>);

impl CurrentGuard {
    fn set(core: Rc<Core>) -> CurrentGuard {
        CurrentGuard(CURRENT.with(|c| c.borrow_mut().replace(core)))
    }
}

impl Drop for CurrentGuard {
    fn drop(&mut self) {
        let previous = self.0.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

/// An async runtime: one worker on the calling thread (plus `threads - 1` more, each with
/// its own ring, when built with [`Builder::threads`]).
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
    /// A runtime with the default configuration (see [`Builder::new`]): io_uring unless it
    /// is unavailable, `RING_RT_BACKEND` and `RING_FEATURES` honoured.
    ///
    /// # Errors
    /// A bad `RING_RT_BACKEND`/`RING_FEATURES` value (`InvalidInput`), or
    /// `RING_RT_BACKEND=uring` where io_uring is unavailable (`Unsupported`).
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = ring_rt::Runtime::new()?;
    /// println!("running on {}", rt.backend().kind);
    /// # std::io::Result::Ok(())
    /// ```
    pub fn new() -> io::Result<Runtime> {
        Builder::new().build()
    }

    /// A builder for configuring a runtime, the same as [`Builder::new`].
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = ring_rt::Runtime::builder().entries(64).build()?;
    /// assert_eq!(rt.threads(), 1);
    /// # std::io::Result::Ok(())
    /// ```
    pub fn builder() -> Builder {
        Builder::new()
    }

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
        self.core.backend.borrow().features().cloned()
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
        RuntimeMetrics {
            backend: core.backend.borrow().kind(),
            io: core.backend.borrow().metrics().snapshot(),
            tasks_spawned: core
                .executor
                .shared
                .tasks_spawned
                .load(std::sync::atomic::Ordering::Relaxed),
            tasks_alive: core.executor.alive() as u64,
            timers: core.timers.borrow().len() as u64,
            recv_buffers_in_use: core.backend.borrow().recv_buffers_in_use() as u64,
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
        self.core.backend.borrow().metrics().clone()
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(workers) = self.workers.take() {
            workers.shutdown();
        }
        self.core.shutdown();
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
    /// ([`Builder::spin_before_park`]); 0 when spinning is off.
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
