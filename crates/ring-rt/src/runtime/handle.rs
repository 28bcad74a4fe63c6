//! `Handle`: a runtime's workers, reachable from any thread.

use std::fmt;
use std::future::Future;
use std::io;
use std::sync::Arc;

use crate::executor::task::JoinHandle;
use crate::worker::set::WorkerSet;
use crate::worker::Core;

/// A handle to a runtime's workers: `Send + Sync + Clone`, usable from any thread, inside
/// the runtime ([`Handle::current`]) or outside it ([`Runtime::handle`](crate::Runtime::handle)).
///
/// Each worker is one thread with its own ring and its own tasks; a task stays on the
/// worker that runs it (its future need not be `Send`). A handle puts work on a worker:
///
/// | call | runs | the future |
/// |---|---|---|
/// | [`spawn`](Handle::spawn) | on the least loaded worker | must be `Send` |
/// | [`spawn_on`](Handle::spawn_on) | on the worker you name | must be `Send` |
/// | [`spawn_local`](Handle::spawn_local) | built by a `Send` closure on the least loaded worker | may be `!Send` (sockets, files, timers) |
/// | [`spawn_local_on`](Handle::spawn_local_on) | the same, on the worker you name | may be `!Send` |
/// | [`spawn_blocking`](Handle::spawn_blocking) | a closure on the blocking pool | a blocking closure |
///
/// The least loaded worker is the one with the fewest tasks alive (spawns on their way
/// included) among workers 1 and up. Worker 0, the thread that built the runtime, runs
/// only inside `block_on`: a task put there from inside a `block_on` would stall once it
/// returns, so it takes spawns that name no worker only when it is the only one (they
/// run at its next `block_on`), and otherwise only [`spawn_on`](Handle::spawn_on)`(0, ..)`.
///
/// A spawn or wake for another worker is sent with this worker's next `io_uring_enter`
/// (a MSG_RING rides along with the loop's own submission): a task that computes for
/// long without awaiting delays it, as it delays everything else on its worker, and a task
/// that blocks its thread waiting for the other worker's answer waits for ever (on epoll,
/// or with `FeatureMask::parse("-msg_ring")`, where the wake is an eventfd write made at
/// once, both work, at the cost measured in BENCHMARKS.md). Put such work on
/// [`spawn_blocking`](Handle::spawn_blocking), or await [`yield_now`](crate::yield_now) in
/// its loop. Such a delayed wake holds back only what this worker sends: a spawn or wake
/// for the same worker from any other thread goes out at once (by eventfd when it finds
/// one queued and not yet sent).
///
/// Every [`JoinHandle`] returned here is `Send` when the output is, and can be awaited on
/// any worker or thread. After the runtime is dropped, spawns give a handle that says
/// `Cancelled`.
///
/// # Examples
///
/// ```
/// let rt = ring_rt::Runtime::builder().threads(2).build()?;
/// let handle = rt.handle();
/// // From a thread outside the runtime:
/// let task = std::thread::spawn(move || handle.spawn(async { 6 * 7 }))
///     .join()
///     .unwrap();
/// assert_eq!(rt.block_on(task).unwrap(), 42);
/// # std::io::Result::Ok(())
/// ```
#[derive(Clone)]
pub struct Handle {
    pub(super) set: Arc<WorkerSet>,
}

impl Handle {
    pub(crate) fn new(set: Arc<WorkerSet>) -> Handle {
        Handle { set }
    }

    /// The handle of the runtime running on this thread.
    ///
    /// # Panics
    /// Outside a ring-rt runtime (see [`try_current`](Handle::try_current)).
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = ring_rt::Runtime::new()?;
    /// let workers = rt.block_on(async { ring_rt::Handle::current().workers() });
    /// assert_eq!(workers, rt.threads());
    /// # std::io::Result::Ok(())
    /// ```
    pub fn current() -> Handle {
        match Handle::try_current() {
            Ok(handle) => handle,
            Err(err) => panic!("{err}"),
        }
    }

    /// The handle of the runtime running on this thread (inside its `block_on`, a task,
    /// or one of its [`spawn_blocking`](Handle::spawn_blocking) closures, as in tokio), or
    /// an error outside one.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(ring_rt::Handle::try_current().is_err()); // no runtime here
    ///
    /// let rt = ring_rt::Runtime::builder().threads(2).build()?;
    /// let blocking = rt.handle().spawn_blocking(|| ring_rt::Handle::try_current().map(|h| h.workers()));
    /// assert_eq!(rt.block_on(blocking).unwrap()?, 2);
    /// # std::io::Result::Ok(())
    /// ```
    pub fn try_current() -> io::Result<Handle> {
        let core = match Core::current_io() {
            Ok(core) => core,
            // A `spawn_blocking` closure's thread belongs to its runtime, as in tokio.
            Err(err) => {
                return crate::worker::set::blocking_context()
                    .map(Handle::new)
                    .ok_or(err)
            }
        };
        let set = core.set.get().cloned().ok_or_else(|| {
            io::Error::other("the ring-rt runtime on this thread is still starting")
        })?;
        Ok(Handle::new(set))
    }

    /// Number of workers.
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = ring_rt::Runtime::builder().threads(3).build()?;
    /// assert_eq!(rt.handle().workers(), 3);
    /// # std::io::Result::Ok(())
    /// ```
    pub fn workers(&self) -> usize {
        self.set.len()
    }

    /// Spawns a `Send` future on the least loaded worker.
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = ring_rt::Runtime::builder().threads(2).build()?;
    /// let handle = rt.handle();
    /// let tasks: Vec<_> = (0..4).map(|i| handle.spawn(async move { i * 2 })).collect();
    /// let sum = rt.block_on(async {
    ///     let mut sum = 0;
    ///     for task in tasks {
    ///         sum += task.await.unwrap();
    ///     }
    ///     sum
    /// });
    /// assert_eq!(sum, 12);
    /// # std::io::Result::Ok(())
    /// ```
    pub fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let worker = self.set.least_loaded();
        self.spawn_local_on(worker, move || future)
            .expect("least_loaded names an existing worker")
    }

    /// Spawns a `Send` future on worker `worker` (0 to [`workers`](Handle::workers) - 1).
    ///
    /// # Errors
    /// `InvalidInput` for a worker the runtime does not have.
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = ring_rt::Runtime::builder().threads(2).build()?;
    /// let task = rt.handle().spawn_on(1, async { std::thread::current().name().map(String::from) })?;
    /// assert_eq!(rt.block_on(task).unwrap().as_deref(), Some("ring-rt-worker-1"));
    /// assert!(rt.handle().spawn_on(2, async {}).is_err());
    /// # std::io::Result::Ok(())
    /// ```
    pub fn spawn_on<F>(&self, worker: usize, future: F) -> io::Result<JoinHandle<F::Output>>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.spawn_local_on(worker, move || future)
    }

    /// Spawns the future `make` builds, on the least loaded worker: it is built there, so
    /// it may hold sockets, files and timers (`!Send`); only `make` and the output cross
    /// threads.
    ///
    /// # Examples
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("ring-rt-doc-sl-{}", std::process::id()));
    /// # std::fs::write(&path, "contents")?;
    /// let rt = ring_rt::Runtime::builder().threads(2).build()?;
    /// let p = path.clone();
    /// let task = rt.handle().spawn_local(move || async move { ring_rt::fs::read(p).await });
    /// assert_eq!(rt.block_on(task).unwrap()?, b"contents");
    /// # std::fs::remove_file(&path)?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn spawn_local<F, Fut>(&self, make: F) -> JoinHandle<Fut::Output>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future + 'static,
        Fut::Output: Send + 'static,
    {
        let worker = self.set.least_loaded();
        self.spawn_local_on(worker, make)
            .expect("least_loaded names an existing worker")
    }

    /// [`spawn_local`](Handle::spawn_local) on worker `worker`.
    ///
    /// # Errors
    /// `InvalidInput` for a worker the runtime does not have.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let rt = ring_rt::Runtime::builder().threads(2).build()?;
    /// let task = rt.handle().spawn_local_on(1, || async {
    ///     ring_rt::time::sleep(Duration::from_millis(1)).await;
    ///     "slept on worker 1"
    /// })?;
    /// assert_eq!(rt.block_on(task).unwrap(), "slept on worker 1");
    /// # std::io::Result::Ok(())
    /// ```
    pub fn spawn_local_on<F, Fut>(
        &self,
        worker: usize,
        make: F,
    ) -> io::Result<JoinHandle<Fut::Output>>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future + 'static,
        Fut::Output: Send + 'static,
    {
        self.set.spawn_with(worker, make)
    }

    /// Runs `f` on the runtime's blocking pool (threads started on demand, up to
    /// [`Builder::max_blocking_threads`](crate::Builder::max_blocking_threads)), on either
    /// backend. For blocking code (a library without async I/O, heavy computation) that
    /// would otherwise stall a worker. Aborting the handle before `f` starts keeps it from
    /// running; once running it runs to the end.
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = ring_rt::Runtime::new()?;
    /// let task = rt.handle().spawn_blocking(|| std::thread::current().name().map(String::from));
    /// assert_eq!(rt.block_on(task).unwrap().as_deref(), Some("ring-rt-blocking"));
    /// # std::io::Result::Ok(())
    /// ```
    pub fn spawn_blocking<F, R>(&self, f: F) -> JoinHandle<R>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        self.set.spawn_blocking(f)
    }
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("workers", &self.set.len())
            .finish()
    }
}

/// Runs `f` on the blocking pool of the runtime running on this thread (see
/// [`Handle::spawn_blocking`]); a `spawn_blocking` closure counts as running on it.
///
/// # Panics
/// Outside a ring-rt runtime.
///
/// # Examples
///
/// ```
/// let rt = ring_rt::Runtime::new()?;
/// let sum = rt.block_on(async { ring_rt::spawn_blocking(|| (1..=10).sum::<u32>()).await });
/// assert_eq!(sum.unwrap(), 55);
/// # std::io::Result::Ok(())
/// ```
pub fn spawn_blocking<F, R>(f: F) -> JoinHandle<R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    Handle::current().spawn_blocking(f)
}
