//! Every worker of a runtime, reachable from any thread: what a `Handle` holds. Spawns
//! sent to a worker travel as jobs on its inject queue (`executor::Shared`); the least
//! loaded running worker takes a spawn that names none.

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

use super::blocking::BlockingTasks;
use super::Core;
use crate::executor::task::{drop_quietly, JoinError, JoinHandle, JoinInner};
use crate::executor::Shared;

/// A runtime's workers (index 0: the thread that built the runtime) and its blocking pool.
pub(crate) struct WorkerSet {
    shareds: Vec<Arc<Shared>>,
    /// Where the search for the least loaded worker starts, so ties take turns.
    next: AtomicUsize,
    blocking: BlockingTasks,
}

impl std::fmt::Debug for WorkerSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerSet")
            .field("workers", &self.shareds.len())
            .finish()
    }
}

impl WorkerSet {
    pub(crate) fn new(shareds: Vec<Arc<Shared>>, blocking: BlockingTasks) -> WorkerSet {
        WorkerSet {
            shareds,
            next: AtomicUsize::new(0),
            blocking,
        }
    }

    /// Number of workers.
    pub(crate) fn len(&self) -> usize {
        self.shareds.len()
    }

    /// Worker `index`'s shared part.
    pub(crate) fn shared(&self, index: usize) -> Option<&Arc<Shared>> {
        self.shareds.get(index)
    }

    /// The worker a spawn that names none goes to: the least loaded (tasks alive plus
    /// spawns on their way) of workers 1.., ties taking turns. Worker 0 runs only inside
    /// `block_on`, so a task put there from inside one would stall once it returns: it
    /// takes such spawns only when it is the only worker (they run at its next
    /// `block_on`, as `ring_rt::spawn`'s do).
    pub(crate) fn least_loaded(&self) -> usize {
        let n = self.shareds.len();
        if n == 1 {
            return 0;
        }
        self.least_loaded_of(1..n).unwrap_or(1)
    }

    /// [`least_loaded`](Self::least_loaded), but worker 0 counts while its `block_on`
    /// runs: for work that belongs to that `block_on` (`serve_balanced`'s connections,
    /// served while its accept loop is).
    pub(crate) fn least_loaded_running(&self) -> usize {
        self.least_loaded_of(0..self.shareds.len()).unwrap_or(0)
    }

    /// The least loaded running worker among `range`.
    fn least_loaded_of(&self, range: std::ops::Range<usize>) -> Option<usize> {
        let (first, len) = (range.start, range.len());
        if len == 0 {
            return None;
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed) % len;
        let mut best: Option<(usize, usize)> = None;
        for i in (0..len).map(|k| first + (start + k) % len) {
            let shared = &self.shareds[i];
            if !shared.is_running.load(Ordering::Relaxed) {
                continue;
            }
            let load = shared.load();
            if best.is_none_or(|(_, l)| load < l) {
                best = Some((i, load));
            }
        }
        best.map(|(i, _)| i)
    }

    /// Spawns the future `make` builds, on worker `index`: built there, so it need not be
    /// `Send`; only `make` and the output cross threads.
    pub(crate) fn spawn_with<F, Fut>(
        &self,
        index: usize,
        make: F,
    ) -> io::Result<JoinHandle<Fut::Output>>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future + 'static,
        Fut::Output: Send + 'static,
    {
        let shared = self.shared(index).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("no worker {index}: the runtime has {}", self.len()),
            )
        })?;
        let state = JoinInner::new();
        let handle = JoinHandle::new(state.clone());
        // A stopping worker still gets the job, which says Cancelled when it runs there
        // (or is dropped): a handle cancelled at once would make a task that spawns and
        // awaits in a loop spin without ever yielding, and its worker never stop.
        if shared.is_here() {
            // Already on that worker: no trip through its inject queue.
            if let Some(core) = Core::current() {
                spawn_made(&core, make, state);
                return Ok(handle);
            }
        }
        shared.spawns_pending.fetch_add(1, Ordering::Relaxed);
        let job = SpawnJob {
            make: Some(make),
            state,
            shared: shared.clone(),
        };
        shared.push_job(Box::new(move || job.run()));
        Ok(handle)
    }

    /// Runs `f` on the blocking pool; its handle gives the result.
    pub(crate) fn spawn_blocking<F, R>(self: &Arc<Self>, f: F) -> JoinHandle<R>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        let state = JoinInner::new();
        let handle = JoinHandle::new(state.clone());
        let job = BlockingJob { f: Some(f), state };
        // Weak: a job queued in this set's own pool must not keep the set alive.
        let set = Arc::downgrade(self);
        let run = move || {
            let _inside = BlockingGuard::enter(set);
            job.run();
        };
        if let Err(refused) = self.blocking.push(Box::new(run)) {
            // Dropped unrun: the handle says Cancelled (the pool is closed, or no thread
            // could start and none runs).
            drop(refused);
        }
        handle
    }

    /// Closes the blocking pool (queued tasks cancelled), waiting for running ones until
    /// `deadline`.
    pub(crate) fn close_blocking(&self, deadline: Instant) {
        self.blocking.close(deadline);
    }
}

thread_local! {
    /// The runtime whose `spawn_blocking` closure runs on this thread, so that
    /// `Handle::current` works there as it does in tokio.
    static BLOCKING_OF: RefCell<Option<Weak<WorkerSet>>> = const { RefCell::new(None) };
}

/// The runtime whose blocking closure this thread runs now, if it is still there.
pub(crate) fn blocking_context() -> Option<Arc<WorkerSet>> {
    BLOCKING_OF
        .try_with(|b| b.borrow().as_ref().and_then(Weak::upgrade))
        .ok()
        .flatten()
}

/// Marks this thread as running a blocking closure of `set` until dropped.
struct BlockingGuard(Option<Option<Weak<WorkerSet>>>);

impl BlockingGuard {
    fn enter(set: Weak<WorkerSet>) -> BlockingGuard {
        BlockingGuard(BLOCKING_OF.try_with(|b| b.borrow_mut().replace(set)).ok())
    }
}

impl Drop for BlockingGuard {
    fn drop(&mut self) {
        if let Some(previous) = self.0.take() {
            let _ = BLOCKING_OF.try_with(|b| *b.borrow_mut() = previous);
        }
    }
}

/// Spawns what `make` builds on `core`, on the calling thread (`core`'s); a panicking
/// `make` is the task's panic, which its handle gives.
pub(crate) fn spawn_here<F, Fut>(core: &Core, make: F) -> JoinHandle<Fut::Output>
where
    F: FnOnce() -> Fut,
    Fut: Future + 'static,
{
    let state = JoinInner::new();
    let handle = JoinHandle::new(state.clone());
    spawn_made(core, make, state);
    handle
}

/// Spawns what `make` builds on `core`; a panicking `make` is the task's panic.
fn spawn_made<F, Fut>(core: &Core, make: F, state: Arc<JoinInner<Fut::Output>>)
where
    F: FnOnce() -> Fut,
    Fut: Future + 'static,
{
    match catch_unwind(AssertUnwindSafe(make)) {
        Ok(future) => core.executor.spawn_into(future, state),
        Err(payload) => state.finish(Err(JoinError::Panic(payload))),
    }
}

/// A spawn on its way to a worker. Dropped unrun (the worker is gone), its handle says
/// `Cancelled` instead of waiting for ever.
struct SpawnJob<F, Fut: Future> {
    make: Option<F>,
    state: Arc<JoinInner<Fut::Output>>,
    shared: Arc<Shared>,
}

impl<F: FnOnce() -> Fut, Fut: Future + 'static> SpawnJob<F, Fut> {
    fn run(mut self) {
        // Aborted on its way, or the runtime is shutting the worker down, or (never: jobs
        // run inside the worker's loop) no core here: the future is never built, as a
        // blocking job is never started. `drop` then lets the factory go quietly and
        // cancels (review BI: the factory's panic came out of `block_on`).
        if self.state.is_abort_requested() || self.shared.is_stopping() {
            return;
        }
        let Some(core) = Core::current() else {
            return;
        };
        let Some(make) = self.make.take() else {
            return;
        };
        self.shared.spawns_pending.fetch_sub(1, Ordering::Relaxed);
        spawn_made(&core, make, self.state.clone());
    }
}

impl<F, Fut: Future> Drop for SpawnJob<F, Fut> {
    /// The factory is dropped quietly, then the spawn cancelled: it holds what the future
    /// would have, code that is not ours, and its panic skipped the cancel, leaving the
    /// handle pending for ever (review BH). Dropped first, as a task's future is before its
    /// handle hears the outcome; and the cancel's wake (code that is not ours either) can no
    /// longer unwind with the factory still to drop.
    fn drop(&mut self) {
        if let Some(make) = self.make.take() {
            // No longer pending before the factory's captures drop: one that spawns sees
            // the worker's load without this job (as `run` counted it before 93fe779).
            self.shared.spawns_pending.fetch_sub(1, Ordering::Relaxed);
            drop_quietly(make);
            self.state.cancel_unrun();
        }
    }
}

/// A `spawn_blocking` closure on its way to a pool thread; dropped unrun, or aborted
/// before it starts, its handle says `Cancelled`.
struct BlockingJob<F, R> {
    f: Option<F>,
    state: Arc<JoinInner<R>>,
}

impl<F: FnOnce() -> R, R> BlockingJob<F, R> {
    fn run(mut self) {
        if self.state.is_abort_requested() {
            // Never started: `drop` lets the closure go quietly and cancels (review BI).
            return;
        }
        let Some(f) = self.f.take() else {
            return;
        };
        let result = catch_unwind(AssertUnwindSafe(f)).map_err(JoinError::Panic);
        self.state.finish(result);
    }
}

impl<F, R> Drop for BlockingJob<F, R> {
    fn drop(&mut self) {
        if let Some(f) = self.f.take() {
            // Never started (a pool that is gone refused it): its handle yields once, as
            // a refused task spawn's does. The closure goes first, quietly, as `SpawnJob`'s
            // factory (it panicked in `spawn_blocking`'s caller, review BH).
            drop_quietly(f);
            self.state.cancel_unrun();
        }
    }
}
