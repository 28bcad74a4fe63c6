//! The single-threaded executor each worker runs: a slab of local tasks and a run queue.
//!
//! Wakes on the worker's own thread push onto a thread-local queue (no lock, no syscall);
//! wakes from other threads go through [`Shared`]'s inject queue and an eventfd that the
//! backend watches, so a parked loop wakes up.

pub(crate) mod coop;
pub(crate) mod task;

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use slab::Slab;

use crate::unpark::{Unparked, Unparker};
use task::{new_task, Header, JoinHandle, JoinInner, RawTask, TaskKey};

/// The key the `block_on` future's waker carries.
pub(crate) const MAIN_KEY: TaskKey = TaskKey {
    index: u32::MAX,
    generation: 0,
};

/// A job sent to this worker from another thread: it runs on the worker (and may spawn).
pub(crate) type RemoteJob = Box<dyn FnOnce() + Send + 'static>;

/// Closures sent to a worker, and whether it still takes them.
#[derive(Default)]
struct Jobs {
    queue: Vec<RemoteJob>,
    /// The worker is gone: a job sent now is dropped at once (a spawn's handle then says
    /// `Cancelled`) instead of waiting for ever.
    is_closed: bool,
}

/// What other threads can reach of a worker.
pub(crate) struct Shared {
    /// Wakes from other threads, drained by the worker each turn.
    remote: Mutex<Vec<TaskKey>>,
    /// Closures to run on this worker (spawns sent by a `Handle`, `spawn_on_all`).
    jobs: Mutex<Jobs>,
    /// Raised when `remote` or `jobs` has entries; one unpark per edge (see [`Signal`]).
    has_remote: Signal,
    /// Raised when the `block_on` future was woken; one unpark per edge.
    main_woken: Signal,
    pub(crate) unparker: Unparker,
    pub(crate) tasks_spawned: AtomicU64,
    /// Tasks alive here, for choosing the least loaded worker and for metrics.
    pub(crate) tasks_alive: AtomicUsize,
    /// Spawns sent here that have not become tasks yet (counted as load).
    pub(crate) spawns_pending: AtomicUsize,
    /// Tasks alive here that only carry a connection to another worker (a direct
    /// descriptor on its way by `MSG_RING`): counted as that worker's load, not this one's.
    pub(crate) moving_out: AtomicUsize,
    /// The worker's loop runs (worker 0: inside `block_on`): a spawn sent here runs soon.
    pub(crate) is_running: AtomicBool,
    /// The runtime is shutting this worker down: spawns sent here say `Cancelled`, even
    /// while the worker still runs (left inside a task at the shutdown deadline).
    is_stopping: AtomicBool,
    /// Worker-local values, published once per loop turn for readers on other threads.
    pub(crate) gauges: Gauges,
}

/// A flag other threads raise to make a worker look at something (its remote queues, its
/// `block_on` future), unparking it once per edge: a burst of wakes costs one unpark.
///
/// An unpark from a thread that runs an io_uring worker may be a MSG_RING that leaves only
/// with that thread's next enter, which a long task on it delays. So the flag remembers
/// whether the wake that raised it may be such a queued one (`QUEUED`): a wake finding it
/// so writes the eventfd itself instead of counting on the queued one. Only a wake known
/// to have gone out (`SENT`) lets the next ones skip theirs.
///
/// The state sits in the low two bits; the rest counts the worker's `take`s, so that a
/// raiser marking its own wake sent (`QUEUED` to `SENT`) can never mark a later raise's
/// instead: after a `take` and a new raise by a busy worker, a late mark would have hidden
/// that raise's queued MSG_RING from every wake after it (review AC).
pub(crate) struct Signal(AtomicU64);

const LOWERED: u64 = 0;
const SENT: u64 = 1;
const QUEUED: u64 = 2;
const STATE: u64 = 3;
/// One `take`, in the bits above the state.
const EPOCH: u64 = 4;

impl Signal {
    fn new(raised: bool) -> Signal {
        Signal(AtomicU64::new(if raised { SENT } else { LOWERED }))
    }

    /// Raises the flag and makes sure a wake is on its way to the worker.
    fn raise(&self, unparker: &Unparker) {
        let mut seen = self.0.load(Ordering::Acquire);
        loop {
            let epoch = seen & !STATE;
            match seen & STATE {
                LOWERED => {
                    let queued = epoch | QUEUED;
                    match self
                        .0
                        .compare_exchange(seen, queued, Ordering::AcqRel, Ordering::Acquire)
                    {
                        Ok(_) => {
                            if unparker.unpark() == Unparked::Now {
                                self.mark_sent(queued);
                            }
                            return;
                        }
                        Err(now) => seen = now,
                    }
                }
                // The wake that raised it may wait in a busy thread's ring: this one goes
                // now.
                QUEUED => {
                    unparker.unpark_now();
                    self.mark_sent(seen);
                    return;
                }
                _ => return,
            }
        }
    }

    /// `QUEUED` to `SENT`, if the flag is still the raise `queued` (same epoch).
    fn mark_sent(&self, queued: u64) {
        let sent = (queued & !STATE) | SENT;
        let _ = self
            .0
            .compare_exchange(queued, sent, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Raises the flag from the worker's own thread, which needs no wake.
    fn raise_here(&self) {
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                (v & STATE == LOWERED).then_some(v | SENT)
            });
    }

    fn is_raised(&self) -> bool {
        self.0.load(Ordering::Acquire) & STATE != LOWERED
    }

    /// Lowers the flag, starting a new epoch; whether it was raised.
    fn take(&self) -> bool {
        // Lowered: nothing to take, and no raise to outdate (a raise makes it not lowered).
        if self.0.load(Ordering::Acquire) & STATE == LOWERED {
            return false;
        }
        let before = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                Some((v & !STATE).wrapping_add(EPOCH))
            });
        let before = before.unwrap_or_else(|v| v);
        before & STATE != LOWERED
    }
}

/// A worker's local values as other threads see them (`Runtime::metrics`), published by
/// the worker once per loop turn.
#[derive(Default)]
pub(crate) struct Gauges {
    pub(crate) timers: AtomicU64,
    pub(crate) recv_buffers_in_use: AtomicU64,
    pub(crate) spin_turns: AtomicU64,
    /// The worker's backend counters, once it has a backend.
    pub(crate) io: std::sync::OnceLock<Arc<ring_core::metrics::Metrics>>,
}

thread_local! {
    /// The run queue of the executor running on this thread, tagged with its `Shared`.
    static LOCAL: RefCell<LocalQueue> = const {
        RefCell::new(LocalQueue { owner: ptr::null(), queue: VecDeque::new() })
    };
}

struct LocalQueue {
    owner: *const Shared,
    queue: VecDeque<TaskKey>,
}

impl Shared {
    pub(crate) fn new(unparker: Unparker) -> Shared {
        Shared {
            remote: Mutex::new(Vec::new()),
            jobs: Mutex::new(Jobs::default()),
            has_remote: Signal::new(false),
            main_woken: Signal::new(true),
            unparker,
            tasks_spawned: AtomicU64::new(0),
            tasks_alive: AtomicUsize::new(0),
            spawns_pending: AtomicUsize::new(0),
            moving_out: AtomicUsize::new(0),
            is_running: AtomicBool::new(false),
            is_stopping: AtomicBool::new(false),
            gauges: Gauges::default(),
        }
    }

    /// Takes no more spawns: the runtime is shutting this worker down.
    pub(crate) fn stop_taking_spawns(&self) {
        self.is_stopping.store(true, Ordering::Release);
        self.is_running.store(false, Ordering::Relaxed);
    }

    /// Whether the runtime is shutting this worker down.
    pub(crate) fn is_stopping(&self) -> bool {
        self.is_stopping.load(Ordering::Acquire)
    }

    /// Whether the worker takes no more work: stopping, or its job queue closed (gone).
    pub(crate) fn is_closed(&self) -> bool {
        self.is_stopping()
            || self
                .jobs
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_closed
    }

    /// The load a spawn sent here would join: tasks alive plus spawns on their way (a
    /// connection moving here counts as one; the task moving one away does not).
    pub(crate) fn load(&self) -> usize {
        let alive = self.tasks_alive.load(Ordering::Relaxed);
        let carrying = self.moving_out.load(Ordering::Relaxed);
        alive.saturating_sub(carrying) + self.spawns_pending.load(Ordering::Relaxed)
    }

    /// Stops taking jobs and drops the queued ones (each spawn's handle says `Cancelled`):
    /// the worker is shutting down and will not run them.
    pub(crate) fn close(&self) {
        let queued = {
            let mut jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
            jobs.is_closed = true;
            std::mem::take(&mut jobs.queue)
        };
        self.is_running.store(false, Ordering::Relaxed);
        // Dropped outside the lock: a job's destructor wakes whoever awaits its handle.
        drop_jobs(queued);
    }

    /// Queues task `key` to be polled; called by its waker from any thread.
    pub(crate) fn schedule(&self, key: TaskKey) {
        if key == MAIN_KEY {
            if self.is_current() {
                self.main_woken.raise_here();
            } else {
                self.main_woken.raise(&self.unparker);
            }
            return;
        }
        let me: *const Shared = self;
        // While this thread's locals are being destroyed (a runtime in a `thread_local!`
        // dropped at thread exit) the local queue is gone: queue the wake as a remote one.
        let queued_locally = LOCAL
            .try_with(|local| {
                let mut local = local.borrow_mut();
                if local.owner == me {
                    local.queue.push_back(key);
                }
                local.owner == me
            })
            .unwrap_or(false);
        if !queued_locally {
            self.remote
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(key);
            self.signal_remote();
        }
    }

    /// Sends `job` to run on this worker; a worker that is gone drops it at once.
    pub(crate) fn push_job(&self, job: RemoteJob) {
        let refused = {
            let mut jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
            if jobs.is_closed {
                Some(job)
            } else {
                jobs.queue.push(job);
                None
            }
        };
        match refused {
            Some(job) => drop_jobs(vec![job]),
            None => self.signal_remote(),
        }
    }

    /// Whether this worker's executor runs on the calling thread.
    pub(crate) fn is_here(&self) -> bool {
        self.is_current()
    }

    fn signal_remote(&self) {
        self.has_remote.raise(&self.unparker);
    }

    /// Sends `job` and wakes the worker now, by its eventfd: for a caller that then blocks
    /// its thread waiting for the job (shutdown), where a wake queued in this thread's own
    /// ring would go out only after that wait.
    pub(crate) fn push_job_now(&self, job: RemoteJob) {
        self.push_job(job);
        self.unparker.unpark_now();
    }

    fn is_current(&self) -> bool {
        let me: *const Shared = self;
        LOCAL
            .try_with(|local| local.borrow().owner == me)
            .unwrap_or(false)
    }
}

/// A task in the slab: 24 bytes. Its waker is made from the header for each poll (a
/// reference count's increment) rather than kept beside it, and its generation is the
/// header's: every connection's task has a slot, and the slab grows by doubling.
struct Slot {
    header: Arc<Header>,
    /// Taken out while the task is being polled, so it can spawn or wake itself.
    task: Option<Pin<Box<dyn RawTask>>>,
}

/// One worker's tasks.
pub(crate) struct Executor {
    tasks: RefCell<Slab<Slot>>,
    next_generation: Cell<u32>,
    pub(crate) shared: Arc<Shared>,
    /// The run queue while this executor is not the one running on the thread.
    parked_queue: RefCell<VecDeque<TaskKey>>,
}

/// Installs an executor's run queue in the thread-local for the duration of `block_on`.
pub(crate) struct Entered<'a> {
    executor: &'a Executor,
}

impl Executor {
    pub(crate) fn new(shared: Arc<Shared>) -> Executor {
        Executor {
            tasks: RefCell::new(Slab::new()),
            next_generation: Cell::new(1),
            shared,
            parked_queue: RefCell::new(VecDeque::new()),
        }
    }

    /// Makes this executor the one whose wakes are local on this thread. Returns `None`
    /// if another executor is already running here (nested `block_on`).
    pub(crate) fn enter(&self) -> Option<Entered<'_>> {
        let me: *const Shared = &*self.shared;
        LOCAL.with(|local| {
            let mut local = local.borrow_mut();
            if !local.owner.is_null() {
                return None;
            }
            local.owner = me;
            local.queue = std::mem::take(&mut *self.parked_queue.borrow_mut());
            Some(Entered { executor: self })
        })
    }

    pub(crate) fn spawn<F: Future + 'static>(&self, future: F) -> JoinHandle<F::Output> {
        let state = JoinInner::new();
        self.spawn_into(future, state.clone());
        JoinHandle::new(state)
    }

    /// Spawns `future` here with its output going to `state`, whose `JoinHandle` exists
    /// already (a spawn sent from another thread).
    pub(crate) fn spawn_into<F: Future + 'static>(
        &self,
        future: F,
        state: Arc<JoinInner<F::Output>>,
    ) {
        let mut tasks = self.tasks.borrow_mut();
        let entry = tasks.vacant_entry();
        let generation = self.next_generation.get();
        self.next_generation.set(generation.wrapping_add(1));
        let key = TaskKey {
            index: entry.key() as u32,
            generation,
        };
        let header = Arc::new(Header {
            key,
            scheduled: AtomicBool::new(false),
            aborted: AtomicBool::new(false),
            shared: self.shared.clone(),
        });
        let task = new_task(future, &header, state);
        let waker = Waker::from(header.clone());
        entry.insert(Slot {
            header,
            task: Some(task),
        });
        self.shared
            .tasks_alive
            .store(tasks.len(), Ordering::Relaxed);
        drop(tasks);
        self.shared.tasks_spawned.fetch_add(1, Ordering::Relaxed);
        waker.wake();
    }

    /// Tasks alive (spawned and not finished).
    pub(crate) fn alive(&self) -> usize {
        self.tasks.borrow().len()
    }

    /// True if a task or the main future is ready to run.
    pub(crate) fn has_ready(&self) -> bool {
        self.shared.main_woken.is_raised()
            || self.shared.has_remote.is_raised()
            || LOCAL.with(|local| !local.borrow().queue.is_empty())
    }

    /// Takes the main future's wake flag.
    pub(crate) fn take_main_woken(&self) -> bool {
        self.shared.main_woken.take()
    }

    /// Polls up to `budget` queued tasks; returns how many ran.
    pub(crate) fn run_ready(&self, budget: usize) -> usize {
        self.drain_remote();
        let _budgets = coop::polling_tasks();
        let mut ran = 0;
        while ran < budget {
            let Some(key) = LOCAL.with(|local| local.borrow_mut().queue.pop_front()) else {
                break;
            };
            self.run_task(key);
            ran += 1;
        }
        ran
    }

    fn run_task(&self, key: TaskKey) {
        let taken = {
            let mut tasks = self.tasks.borrow_mut();
            match tasks.get_mut(key.index as usize) {
                Some(slot) if slot.header.key.generation == key.generation => {
                    slot.header.scheduled.store(false, Ordering::Release);
                    let aborted = slot.header.aborted.load(Ordering::Acquire);
                    let task = slot.task.take();
                    task.map(|t| ((t, Waker::from(slot.header.clone())), aborted))
                }
                _ => None,
            }
        };
        let Some(((mut task, waker), aborted)) = taken else {
            return;
        };
        let finished = if aborted {
            Poll::Ready(task.as_mut().cancel())
        } else {
            let mut cx = Context::from_waker(&waker);
            coop::refill();
            task.as_mut().poll_task(&mut cx)
        };
        let mut tasks = self.tasks.borrow_mut();
        let Poll::Ready(join_waker) = finished else {
            if let Some(slot) = tasks.get_mut(key.index as usize) {
                slot.task = Some(task);
            }
            return;
        };
        tasks.remove(key.index as usize);
        self.shared
            .tasks_alive
            .store(tasks.len(), Ordering::Relaxed);
        drop(tasks);
        drop_task(task);
        // Last: the awaiter's waker is code that is not ours. Its panic goes to the loop's
        // caller (like any waker's), with the task's slot already freed.
        if let Some(join_waker) = join_waker {
            join_waker.wake();
        }
    }

    fn drain_remote(&self) {
        if !self.shared.has_remote.take() {
            return;
        }
        let keys =
            std::mem::take(&mut *self.shared.remote.lock().unwrap_or_else(|e| e.into_inner()));
        LOCAL.with(|local| local.borrow_mut().queue.extend(keys));
        let jobs = std::mem::take(
            &mut self
                .shared
                .jobs
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .queue,
        );
        // Every job runs even if one panics (one is the worker's stop): the first panic is
        // raised once the rest have run.
        let mut panic = None;
        for job in jobs {
            if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)) {
                match panic {
                    None => panic = Some(payload),
                    // Later ones go unraised: their payloads may panic as they drop.
                    Some(_) => task::discard_payload(payload),
                }
            }
        }
        if let Some(payload) = panic {
            std::panic::resume_unwind(payload);
        }
    }

    /// Drops every task (their in-flight ops become orphans). Tasks are taken out of the
    /// slab before dropping, so a task's destructor may spawn or wake without reentrancy.
    pub(crate) fn shutdown(&self) {
        self.shared.close();
        loop {
            let slots: Vec<Slot> = self.tasks.borrow_mut().drain().collect();
            if slots.is_empty() {
                break;
            }
            for mut slot in slots {
                if let Some(mut task) = slot.task.take() {
                    let join_waker = task.as_mut().cancel();
                    drop_task(task);
                    wake_quietly(join_waker);
                }
            }
        }
        self.shared.tasks_alive.store(0, Ordering::Relaxed);
    }
}

/// Drops jobs nobody will run, catching their destructors' panics (code that is not ours
/// may run there: a waker of whoever awaits a spawn's handle).
fn drop_jobs(jobs: Vec<RemoteJob>) {
    jobs.into_iter().for_each(task::drop_quietly);
}

/// Wakes a JoinHandle's awaiter while the runtime shuts down, where a panic has nobody
/// to go to but the log.
fn wake_quietly(waker: Option<Waker>) {
    let Some(waker) = waker else {
        return;
    };
    if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| waker.wake())) {
        task::report_drop_panic(payload);
    }
}

/// Frees a finished task: its box, and with it the output slot if the JoinHandle is gone (an
/// output's destructor may panic: that stays here, logged).
fn drop_task(task: Pin<Box<dyn RawTask>>) {
    task::drop_quietly(task);
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        let _ = LOCAL.try_with(|local| {
            let mut local = local.borrow_mut();
            *self.executor.parked_queue.borrow_mut() = std::mem::take(&mut local.queue);
            local.owner = ptr::null();
        });
    }
}
