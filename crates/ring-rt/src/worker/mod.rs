//! The per-worker core: its tasks, its backend, its timers, and the thread-local through
//! which futures on the worker's thread find it; the loop that drives them all.
//!
//! Everything above (ops, sockets, files, timers) reaches the backend through the core,
//! and the core keeps two rules there. Code that is not ring-rt's (a waker's `wake`, the
//! destructor of a buffer an orphan kept) never runs inside a backend call or between a
//! backend call and the op recording its result: wakers to wake and finished orphans to
//! drop are collected and run only at safe points, after a loop turn, between passes over
//! the ready tasks, at the end of `block_on` and at shutdown, where no op is half-way
//! through a state change. (Run inside an op's poll, a panicking waker once unwound between
//! the push of an SQE and the op recording it, and the op's buffer was freed with the SQE
//! in flight.) And work that finds the backend busy (a drop inside such code) is parked
//! and done at the next safe point, never forgotten: an orphan, a close.

mod backend_calls;
pub(crate) mod blocking;
mod config;
mod context;
mod elsewhere;
pub(crate) mod set;
mod threads;
mod timers;

pub(crate) use backend_calls::GivenAway;
pub(crate) use config::WorkerConfig;
use context::CurrentGuard;
use set::WorkerSet;
pub(crate) use threads::Workers;
#[cfg(feature = "hyper")]
pub(crate) use timers::TimerKey;
pub(crate) use timers::{deadline_after, TimerEntry, Timers, FOREVER};

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io;
use std::os::fd::RawFd;
use std::pin::pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use ring_core::cqe::Cqe;
use ring_core::driver::Wait;
use ring_core::lifecycle::{Deferred, Orphan};
use ring_core::user_data::OpId;

use std::sync::atomic::Ordering;
use std::sync::OnceLock;

use crate::backend::select::Choice;
use crate::backend::{Backend, Mechanism, Operation, Start, Token};
use crate::completion::Refused;
use crate::executor::task::Header;
use crate::executor::{coop, Executor};
use crate::unpark::SenderGuard;

/// Tasks polled per loop turn before the loop checks the kernel again, so a busy task set
/// cannot starve I/O completions.
const TASKS_PER_TURN: usize = 256;

/// One worker's state: its tasks, its backend, its timers. Lives on the worker's thread.
/// (`pub` only because the hidden `Chain` trait names it; the module is private.)
#[doc(hidden)]
pub struct Core {
    pub(crate) executor: Executor,
    /// Borrowed only inside this module, never across code that is not ring-rt's.
    backend: RefCell<Backend>,
    pub(crate) timers: RefCell<Timers>,
    pub(crate) choice: Choice,
    /// How long the loop spins through no-wait turns before it sleeps (`Builder::spin_before_park`).
    spin: Duration,
    /// No-wait turns made while spinning (`RuntimeMetrics::spin_turns`).
    pub(crate) spin_turns: Cell<u64>,
    /// Work from drops that found the backend borrowed, done once it is free again.
    parked: RefCell<Vec<Parked>>,
    /// Wakers and finished orphans the backend handed over, run outside its borrow.
    deferred: RefCell<Deferred>,
    /// The queue being run (swapped with `deferred`, so neither reallocates each turn).
    running: RefCell<Deferred>,
    /// Wakes of tasks whose poll spent its op budget (see `executor::coop`): woken after
    /// the next loop turn, so the turn's I/O and timers come first.
    after_turn: RefCell<Deferred>,
    /// `run_deferred` is on the stack: a nested call (from a waker or a destructor it
    /// runs) leaves the new work to that outer loop.
    is_running_deferred: Cell<bool>,
    /// `block_on` runs this core: a loop turn is coming that submits what is pushed.
    is_running: Cell<bool>,
    /// The runtime was dropped: no op starts, fds close at once (no turn will come).
    is_shut_down: Cell<bool>,
    /// Ops polled while this runtime did not run, and cancelled for that (see
    /// `elsewhere.rs`), until their final completion.
    cancelled_elsewhere: RefCell<Vec<OpId>>,
    /// The ops the shutdown's drain cancelled (in flight when it began): their
    /// `ECANCELED` is the shutdown's, reported as such.
    drained: RefCell<std::collections::HashSet<OpId>>,
    /// Every worker of the runtime (set once they all started): what `Handle::current`
    /// gives on this worker's thread.
    pub(crate) set: Arc<OnceLock<Arc<WorkerSet>>>,
    /// Unique in the process for its whole life (never reused, unlike the core's address):
    /// how state shared across threads (a hyper sleep) names the worker whose timers hold
    /// its entry.
    #[cfg_attr(not(feature = "hyper"), allow(dead_code))]
    pub(crate) id: u64,
}

/// A number no core had before (a `u64` counted up cannot wrap in a process's life).
fn next_core_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Work a drop could not do because the backend was busy.
enum Parked {
    Orphan(OpId, Box<dyn Orphan>),
    Close(RawFd),
    Forget(RawFd),
    ForgetDrained(RawFd),
    ReadinessDropped(RawFd, u32, crate::backend::ParkKey),
    Recall(RawFd, Option<OpId>),
    ForgetArrival(u32),
}

impl Core {
    pub(crate) fn new(
        executor: Executor,
        backend: Backend,
        choice: Choice,
        spin: Duration,
        set: Arc<OnceLock<Arc<WorkerSet>>>,
    ) -> Core {
        let metrics = backend.metrics().clone();
        let _ = executor.shared.gauges.io.set(metrics);
        Core {
            executor,
            backend: RefCell::new(backend),
            timers: RefCell::new(Timers::default()),
            choice,
            spin,
            spin_turns: Cell::new(0),
            parked: RefCell::new(Vec::new()),
            deferred: RefCell::new(Deferred::default()),
            running: RefCell::new(Deferred::default()),
            after_turn: RefCell::new(Deferred::default()),
            is_running_deferred: Cell::new(false),
            is_running: Cell::new(false),
            is_shut_down: Cell::new(false),
            cancelled_elsewhere: RefCell::new(Vec::new()),
            drained: RefCell::default(),
            set,
            id: next_core_id(),
        }
    }

    /// Publishes this worker's local values for other threads (`Runtime::metrics`).
    fn publish_gauges(&self) {
        let gauges = &self.executor.shared.gauges;
        let timers = self.timers.borrow().len() as u64;
        gauges.timers.store(timers, Ordering::Relaxed);
        gauges
            .spin_turns
            .store(self.spin_turns.get(), Ordering::Relaxed);
        if let Ok(n) = self.backend_ref(|b| b.recv_buffers_in_use()) {
            gauges
                .recv_buffers_in_use
                .store(n as u64, Ordering::Relaxed);
        }
    }

    /// Runs `f` on the backend; the wakes and drops it produced wait for the next safe
    /// point (see the module header). An error if the backend is busy: only code called
    /// from inside a backend call can meet that, and it gets an error rather than a panic.
    fn with_backend<R>(&self, f: impl FnOnce(&mut Backend) -> R) -> io::Result<R> {
        let mut backend = self.backend.try_borrow_mut().map_err(|_| busy())?;
        let out = f(&mut backend);
        backend.take_deferred(&mut self.deferred.borrow_mut());
        drop(backend);
        self.settle_if_shut_down();
        Ok(out)
    }

    /// After shutdown no loop turn comes to run parked work (a close or an orphan that a
    /// waker's `clone` made while the backend was borrowed) or deferred work (a waker a
    /// dropped op let go, an orphan done): the end of the backend call that parked or
    /// deferred it is the safe point. Deferred work left there was never run (review AK:
    /// an epoll read dropped after its runtime kept its task's waker for good).
    fn settle_if_shut_down(&self) {
        if self.is_shut_down.get() {
            self.run_deferred();
        }
    }

    /// Reads something of the backend (its kind, features, counters).
    fn backend_ref<R>(&self, f: impl FnOnce(&Backend) -> R) -> io::Result<R> {
        let backend = self.backend.try_borrow().map_err(|_| busy())?;
        Ok(f(&backend))
    }

    /// True once the runtime was dropped: nothing drives this core any more.
    pub(crate) fn is_shut_down(&self) -> bool {
        self.is_shut_down.get()
    }

    /// True from the start of its shutdown (the executor's flag that refuses spawns): no
    /// loop turn may come (a timer set now might never fire), though tasks and wakes still
    /// run while they are dropped.
    #[cfg_attr(not(feature = "hyper"), allow(dead_code))]
    pub(crate) fn is_stopping(&self) -> bool {
        self.executor.shared.is_stopping()
    }

    /// Starts `op` on this worker's backend. Refused once the runtime was dropped, and
    /// outside this runtime's `block_on` (from another runtime's, or none): nobody would
    /// drive the op there, so it would wait for ever.
    /// `startable` is the caller's [`check_startable`](Self::check_startable) of this
    /// same poll: an op's poll checks before it waits for anything, and checking again
    /// here cost every op a second thread-local lookup.
    pub(crate) fn start(
        &self,
        op: &mut dyn Operation,
        waker: &Waker,
        startable: Startable,
    ) -> io::Result<Start> {
        let Startable(()) = startable;
        self.with_backend(|b| b.start(op, waker))?
    }

    /// Arms multishot `op` (see [`start`](Self::start)); its CQEs are bounded to `max`
    /// unpolled (0: unbounded).
    pub(crate) fn start_multishot(
        &self,
        op: &mut dyn Operation,
        max: u16,
    ) -> io::Result<io::Result<OpId>> {
        self.check_startable()?;
        self.with_backend(|b| b.start_multishot(op, max))
    }

    /// Whether this core moves no more bytes: it shut down, or its shutdown is dropping the
    /// tasks (stopping, its loop not running; a stopping worker whose loop still runs
    /// goes on). Ops do not start then, and adapters' direct sends do not send.
    pub(crate) fn refuses_io(&self) -> bool {
        self.is_shut_down.get() || (!self.is_running.get() && self.executor.shared.is_stopping())
    }

    /// Whether an op may start here now: not after shutdown, not outside this runtime.
    pub(crate) fn check_startable(&self) -> io::Result<Startable> {
        // While the shutdown drops the tasks (this core current, its loop not running) no op
        // starts either: a receive a destructor started went to the kernel, was cancelled
        // as polled elsewhere, and its bytes ended on a socket nothing could read any more
        // (io_uring; review DE). A worker told to stop whose loop still runs starts ops.
        if self.refuses_io() {
            return Err(shut_down());
        }
        if !context::is_current(self) {
            return Err(self.refused_elsewhere());
        }
        Ok(Startable(()))
    }

    /// Polls an op this core started. After shutdown an op with nothing in flight (one
    /// waiting for readiness) fails at once: no loop turn will ever report the readiness.
    pub(crate) fn poll(
        &self,
        token: &mut Token,
        op: &mut dyn Operation,
        waker: &Waker,
    ) -> Poll<io::Result<Cqe>> {
        if self.is_shut_down.get() {
            if let Some(refused) = self.refuse_after_shutdown(token) {
                return Poll::Ready(Err(refused));
            }
        }
        if self.is_elsewhere() {
            return self.poll_elsewhere(token, op, waker);
        }
        match self.with_backend(|b| b.poll(token, op, waker)) {
            // The id after the poll: an op in flight keeps it. A readiness op's poll leaves
            // its token idle, and its `ECANCELED` is never a refusal here: the runtime never
            // cancels a readiness poll (it orphans it), and one polled after shutdown or
            // elsewhere was refused above. (Taking the id before every poll, for review DA,
            // cost 15 instructions per echo request.)
            Ok(Poll::Ready(Ok(cqe))) if is_final_cancel(&cqe) => {
                let id = token.in_flight().map(|(id, _)| id);
                Poll::Ready(self.refusal_of(id, cqe))
            }
            Ok(polled) => polled,
            Err(err) => Poll::Ready(Err(err)),
        }
    }

    /// The final completion `cqe` of op `id`, or the refusal it stands for: the `ECANCELED` of a cancel the runtime sent because
    /// the op was polled outside it (see `elsewhere.rs`) or because the runtime shut down
    /// is reported as that refusal, as an op refused before it started is. Any other
    /// cancel (the op's own, a timeout's) is the kernel's, as is any other result (the
    /// cancel came too late). Cold: the per-completion callers check [`is_final_cancel`]
    /// inline first (called for every completion it cost 38 instructions per echo
    /// request on epoll).
    #[cold]
    pub(crate) fn refusal_of(&self, id: Option<OpId>, cqe: Cqe) -> io::Result<Cqe> {
        // Checked here too: a completion with a result of its own (the cancel came too
        // late) is the op's, whoever calls.
        let (Some(id), true) = (id, is_final_cancel(&cqe)) else {
            return Ok(cqe);
        };
        if self.is_shut_down.get() && self.drained.borrow().contains(&id) {
            return Err(shut_down());
        }
        let mut cancelled = self.cancelled_elsewhere.borrow_mut();
        match cancelled.iter().position(|&c| c == id) {
            Some(at) => {
                cancelled.swap_remove(at);
                Err(self.refused_elsewhere())
            }
            None => Ok(cqe),
        }
    }

    /// The one orphan path: the future of op `id` is gone, `orphan` keeps its memory until
    /// the final CQE. If the backend is busy the orphaning is parked, never skipped.
    pub(crate) fn orphan(&self, id: OpId, orphan: Box<dyn Orphan>) {
        match self.backend.try_borrow_mut() {
            Ok(mut backend) => {
                backend.orphan(id, orphan);
                backend.take_deferred(&mut self.deferred.borrow_mut());
                drop(backend);
                self.settle_if_shut_down();
            }
            Err(_) => self.parked.borrow_mut().push(Parked::Orphan(id, orphan)),
        }
    }

    /// Queues wakes and drops for the next safe point.
    pub(crate) fn defer(&self, mut work: Deferred) {
        self.deferred.borrow_mut().append(&mut work);
    }

    /// Queues for the next safe point what `work` puts in the worker's own queue: pushes
    /// of wakes and wakers to drop, nothing that runs code that is not ours (so nothing
    /// that could reach this queue again while `work` holds it). A `Deferred` of the
    /// caller's own, appended here, was an allocation per call: one per echo request where
    /// a receive stream's hold ends and re-arms (review BF).
    pub(crate) fn defer_with(&self, work: impl FnOnce(&mut Deferred)) {
        work(&mut self.deferred.borrow_mut());
    }

    /// Closes `fd`, which the caller owned, through the backend (ordered after the ops
    /// already pushed for it). Parked if the backend is busy; done at once if no loop turn
    /// is coming (outside `block_on`: the peer sees the close now, not at the next call).
    pub(crate) fn close(&self, fd: RawFd) {
        if self.is_shut_down.get() {
            self.close_after_shutdown(fd);
            return;
        }
        let closed = self.with_backend(|b| {
            b.close(fd);
            if !self.is_running.get() {
                let _ = b.submit();
            }
        });
        if closed.is_err() {
            self.parked.borrow_mut().push(Parked::Close(fd));
        }
    }

    /// After shutdown, `fd` closes at once, unless a kernel-linked op left in the kernel
    /// (past the drain's deadline) still names it: the backend then keeps the number
    /// taken, by a placeholder, for good (no loop turn will see that op end).
    fn close_after_shutdown(&self, fd: RawFd) {
        if self.with_backend(|b| close_shut_down(b, fd)).is_err() {
            self.parked.borrow_mut().push(Parked::Close(fd));
        }
    }

    /// Wakes, drops or parked work wait for the next safe point.
    fn has_deferred(&self) -> bool {
        !self.deferred.borrow().is_empty() || !self.parked.borrow().is_empty()
    }

    /// At a safe point: runs the parked work and then the deferred wakes and drops, until
    /// both are empty. A panic in a waker or a destructor goes to the caller of `block_on`
    /// and leaves the rest queued for the next safe point.
    fn run_deferred(&self) {
        if self.is_running_deferred.replace(true) {
            return;
        }
        let _running = ClearOnDrop(&self.is_running_deferred);
        loop {
            if !self.parked.borrow().is_empty() {
                self.run_parked();
            }
            // Looked at before anything moves: most calls find nothing queued, and taking
            // the spare batch out and putting it back cost about 60 instructions per echo
            // request (callgrind).
            if self.deferred.borrow().is_empty() {
                return;
            }
            // The spare batch is borrowed across the wakes and drops it runs: only this
            // function touches it, and `is_running_deferred` keeps it from running twice at
            // once. Swapped in place, not taken out and put back: that made and dropped an
            // empty `Deferred` every turn (27 instructions per echo request, callgrind).
            let mut batch = self.running.borrow_mut();
            std::mem::swap(&mut *batch, &mut *self.deferred.borrow_mut());
            let guard = RequeueOnPanic {
                core: self,
                batch: &mut batch,
            };
            guard.batch.run();
            std::mem::forget(guard);
        }
    }

    fn run_parked(&self) {
        let Ok(mut backend) = self.backend.try_borrow_mut() else {
            return;
        };
        let parked = std::mem::take(&mut *self.parked.borrow_mut());
        for work in parked {
            match work {
                Parked::Orphan(id, orphan) => backend.orphan(id, orphan),
                Parked::Close(fd) if self.is_shut_down.get() => close_shut_down(&mut backend, fd),
                Parked::Close(fd) => backend.close(fd),
                Parked::Forget(fd) => {
                    let _ = backend.forget_fd(fd);
                }
                Parked::ForgetDrained(fd) => backend.forget_drained(fd),
                Parked::ReadinessDropped(fd, events, key) => {
                    backend.readiness_dropped(fd, events, key)
                }
                Parked::Recall(fd, id) => backend.recall_receive(fd, id),
                Parked::ForgetArrival(seq) => backend.forget_arrival(seq),
            }
        }
        backend.take_deferred(&mut self.deferred.borrow_mut());
    }

    /// Runs `future` to completion, driving tasks, timers and I/O; then submits what the
    /// last polls queued (a socket dropped at the end is closed now, not at some later
    /// call).
    // The nesting panic points at the caller's `block_on`, not at this line.
    #[track_caller]
    pub(crate) fn block_on<F: Future>(self: &Rc<Core>, future: F) -> F::Output {
        let _entered = self
            .executor
            .enter()
            .expect("Runtime::block_on called from inside a running ring-rt runtime");
        let _current = CurrentGuard::set(self.clone());
        let _sender = SenderGuard::install(self.clone());
        let _running = RunningGuard::set(self);
        // Dropped after the future (declared before it), before the sender goes: what the
        // future's last poll and its drop queued is submitted, a MSG_RING wake included.
        let _flush = FlushOnExit(self);
        let main_waker = Waker::from(Arc::new(Header::main(self.executor.shared.clone())));
        let mut cx = Context::from_waker(&main_waker);
        let mut future = pin!(future);
        // Poll the new future at once, whatever an earlier block_on left in the flag.
        let mut woken = true;
        loop {
            if std::mem::take(&mut woken) | self.executor.take_main_woken() {
                if let Poll::Ready(out) = coop::budgeted(|| future.as_mut().poll(&mut cx)) {
                    return out;
                }
            }
            self.run_tasks();
            self.turn();
        }
    }

    /// Runs up to [`TASKS_PER_TURN`] queued tasks, and between passes what waits for a
    /// safe point (no task is being polled there): parked backend work, deferred wakes and
    /// drops. So a task one of them wakes that way runs in this turn: a receive handing its
    /// socket's turn to the next in line wakes it so, and each hand-over used to cost a
    /// loop turn (an `epoll_wait`). Each pass costs the budget at least one, so a pass
    /// that polls nothing cannot repeat without end.
    fn run_tasks(&self) {
        let mut budget = TASKS_PER_TURN;
        loop {
            budget -= self.executor.run_ready(budget).clamp(1, budget);
            if budget == 0 || !self.has_deferred() {
                return;
            }
            self.run_deferred();
            if !self.executor.has_ready() {
                return;
            }
        }
    }

    /// Runs what waits for a safe point (`block_on`'s future has finished: no op is
    /// half-way through a state change), then submits what is queued, without waiting.
    fn flush(&self) {
        self.run_deferred();
        self.submit_queued();
    }

    /// Submits what is queued, without waiting: a MSG_RING wake pushed for another worker
    /// must not wait for a turn that may never come.
    fn submit_queued(&self) {
        if let Err(err) = self.with_backend(|b| b.submit()).and_then(|r| r) {
            tracing::error!(target: "ring_rt", error = %err, "submitting queued work failed");
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
        // Through the safe-point queue, like every wake: a panicking waker must leave the
        // other due timers' wakes queued, not unwind past them. No timer, no clock read:
        // most turns of a busy server have none, and a read of the clock is a vDSO call.
        let due = self.timers.borrow_mut().take_expired_now();
        // Looked at before anything moves: most turns have no task that spent its budget.
        let yielded = !self.after_turn.borrow().is_empty();
        if !due.is_empty() || yielded {
            let mut deferred = if yielded {
                self.after_turn.take()
            } else {
                Deferred::default()
            };
            due.into_iter().for_each(|waker| deferred.wake(waker));
            self.defer(deferred);
            self.run_deferred();
        }
    }

    /// Queues `waker` to be woken after this core's next loop turn (its task spent its
    /// op budget), or wakes it now if this core's loop is not on the stack.
    fn wake_after_turn(&self, waker: &Waker) {
        if !self.is_running.get() {
            waker.wake_by_ref();
            return;
        }
        // Cloned outside the borrow: a clone is code that is not ours, and may poll an op.
        let waker = waker.clone();
        self.after_turn.borrow_mut().wake(waker);
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

    /// How long the next turn may wait: not at all if work is ready (a task, or wakes and
    /// drops queued for the safe point right after the turn), else until the next timer is
    /// due (or for I/O alone).
    fn next_wait(&self) -> Wait {
        if self.executor.has_ready() || self.has_deferred() || !self.after_turn.borrow().is_empty()
        {
            return Wait::No;
        }
        match self.timers.borrow().next_deadline() {
            Some(deadline) => Wait::For(deadline.saturating_duration_since(Instant::now())),
            None => Wait::Forever,
        }
    }

    fn backend_turn(&self, wait: Wait) {
        self.publish_gauges();
        let turned = self.with_backend(|b| {
            let turned = b.turn(wait);
            (turned, b.kind())
        });
        if let Ok((Err(err), backend)) = turned {
            // The backend failing to enter the kernel is not something a task can handle;
            // report it and keep the loop alive so ops still in flight can complete.
            tracing::error!(target: "ring_rt", %backend, error = %err, "backend turn failed");
        }
        // A safe point: between loop turns, outside every task's poll.
        self.run_deferred();
    }

    pub(crate) fn spawn<F: Future + 'static>(&self, future: F) -> crate::JoinHandle<F::Output> {
        self.executor.spawn(future)
    }

    /// Shuts the worker down: drops every task (their ops become orphans, cancelled), then
    /// waits until `deadline` for the kernel to finish with every op. Afterwards no op
    /// starts (an error says the runtime is gone) and fds close at once; an op left in
    /// flight by a future outside any task has its cancelled completion to collect.
    ///
    /// `deadline` is asked for once the tasks are dropped: their destructors are user code
    /// and may block, and a drain given a deadline that passed meanwhile waits for nothing.
    pub(crate) fn shutdown(self: &Rc<Core>, deadline: impl FnOnce() -> Instant) {
        let _current = CurrentGuard::set(self.clone());
        // Worker 0's flag (the others' was raised by `Workers::shutdown`): what
        // `is_stopping` reads while this core's tasks are dropped.
        self.executor.shared.stop_taking_spawns();
        // Handles that outlive the runtime keep the eventfd, not this ring.
        self.executor.shared.unparker.clear_ring();
        self.executor.shutdown();
        let deadline = deadline();
        if let Ok(drained) = self.with_backend(|b| b.drain(deadline)) {
            *self.drained.borrow_mut() = drained.into_iter().collect();
        }
        self.is_shut_down.set(true);
        // Tasks that spent their budget wait for a turn that will not come: their wakes
        // (of tasks dropped above, or of `block_on`'s future) go with the drain's.
        let yielded = self.after_turn.take();
        self.defer(yielded);
        // The drain's wakes and releases run user code (wakers, buffer destructors). A
        // panic there is reported, not raised: shutdown runs in `Runtime`'s drop, maybe
        // while unwinding already, and the rest of it (the blocking pool's close, the
        // other wakes: a panicking batch requeues its rest) must still happen.
        while let Err(payload) =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.run_deferred()))
        {
            let what = threads::panic_message(&*payload);
            tracing::error!(target: "ring_rt", panic = %what, "a waker or destructor panicked while the worker shut down");
            crate::executor::task::discard_payload(payload);
        }
    }
}

/// Ready while the op budget of the poll on the stack lasts (see `executor::coop`); once
/// it is spent, `Pending`, and the task is woken after the running core's next loop turn
/// (at once outside `block_on`: no turn is coming). An op checks this before it does
/// anything, so one that waits here has done nothing yet.
#[inline]
pub(crate) fn poll_budget(cx: &mut Context<'_>) -> Poll<()> {
    if coop::has_room() {
        return Poll::Ready(());
    }
    budget_spent(cx.waker());
    Poll::Pending
}

#[cold]
#[inline(never)]
fn budget_spent(waker: &Waker) {
    match Core::current() {
        Some(core) => core.wake_after_turn(waker),
        None => waker.wake_by_ref(),
    }
}

/// Closes `fd` after shutdown ([`Core::close_after_shutdown`]) through the backend's
/// ordinary close: an SQE pushed before may still wait for SQPOLL's thread, which looks
/// its fd number up when it takes it (closing at once sent such a write to the socket that
/// reused the number), and a kernel-linked op may still name it (the backend keeps the
/// number taken for good then, as no loop turn will see that op end).
fn close_shut_down(backend: &mut Backend, fd: RawFd) {
    if backend.links_name(fd) {
        tracing::warn!(target: "ring_rt", fd, "an fd closed after shutdown stays taken: a kernel-linked op not yet issued names it");
    }
    backend.close(fd);
    // No turn comes after shutdown: a close that went into the SQ (a direct descriptor's
    // always does) is submitted now.
    let _ = backend.submit();
}

/// Puts a batch that a panicking waker or destructor interrupted back in front of the
/// queue, so the rest still runs (once, by the next `run_deferred`).
struct RequeueOnPanic<'a> {
    core: &'a Core,
    batch: &'a mut Deferred,
}

impl Drop for RequeueOnPanic<'_> {
    fn drop(&mut self) {
        let mut queued = self.core.deferred.borrow_mut();
        self.batch.append(&mut queued);
        std::mem::swap(&mut *queued, self.batch);
    }
}

/// Ends `block_on`: after the future is dropped, runs the safe-point work and submits
/// what is queued. While unwinding (the future or a waker panicked) only the submission
/// runs: it calls no code that is not ours, and without it a MSG_RING wake pushed for
/// another worker would wait for this worker's next enter, which may never come.
struct FlushOnExit<'a>(&'a Core);

impl Drop for FlushOnExit<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.submit_queued();
        } else {
            self.0.flush();
        }
    }
}

/// Clears a flag when dropped (on unwinding too).
struct ClearOnDrop<'a>(&'a Cell<bool>);

impl Drop for ClearOnDrop<'_> {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

/// Marks the core as driven by `block_on` while it lives.
struct RunningGuard<'a>(&'a Core, bool);

impl<'a> RunningGuard<'a> {
    fn set(core: &'a Core) -> RunningGuard<'a> {
        core.executor
            .shared
            .is_running
            .store(true, Ordering::Relaxed);
        RunningGuard(core, core.is_running.replace(true))
    }
}

impl Drop for RunningGuard<'_> {
    fn drop(&mut self) {
        self.0.is_running.set(self.1);
        let shared = &self.0.executor.shared;
        shared.is_running.store(self.1, Ordering::Relaxed);
        self.0.publish_gauges();
    }
}

/// Whether `cqe` is an op's final `ECANCELED`: the completions [`Core::refusal_of`] looks at.
#[inline]
pub(crate) fn is_final_cancel(cqe: &Cqe) -> bool {
    cqe.res == -libc::ECANCELED && !cqe.is_more()
}

/// What [`Core::check_startable`] gives when an op may start: [`Core::start`] asks for it,
/// so an op is never started unchecked. Nothing between the check and the start (within
/// one poll) can shut the runtime down or move the poll to another thread.
pub(crate) struct Startable(());

// The three refusals are cold: the hot op paths that can refuse keep only a call.
#[cold]
fn busy() -> io::Error {
    Refused::Busy.error()
}

#[cold]
fn elsewhere() -> io::Error {
    Refused::Elsewhere.error()
}

#[cold]
fn shut_down() -> io::Error {
    Refused::ShutDown.error()
}
