//! `HyperTimer`: hyper's `Timer` (its sleeps must be `Send + Sync`) over ring-rt's
//! per-worker, `!Send` timers (feature `hyper`).
//!
//! A hyper sleep is a shared state (`Arc<Mutex<State>>`: deadline, fired flag, two waker
//! slots). On its first poll on a worker it spawns a small task there that waits on a
//! ring-rt timer and then marks the sleep fired and wakes hyper's task. The sleep and its
//! task signal each other through the state: dropping the sleep wakes the task, which exits;
//! moving the deadline (`Timer::reset`) keeps the task: a sooner deadline wakes it to re-arm
//! its timer, a later one is found when the old timer fires. hyper 1.x resets a header-read
//! sleep only while it still has one: it drops the sleep once a request's head is parsed and
//! makes a new one for the next, so a request whose head is not in the buffer yet when
//! hyper first looks costs one such task (measured: 0.54 spawns per request with 50
//! connections on one worker, 0.99 with 200; BENCHMARKS.md, twelfth session).
//! A sleep polled where no ring-rt worker runs is armed on one process-wide helper thread
//! instead (a heap of deadlines under a condvar).

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::worker::Core;

/// ring-rt's timers for hyper: pass it to hyper's `Builder::timer` to enable timeouts such
/// as `http1::Builder::header_read_timeout`.
///
/// **What it costs**: each sleep is one allocation (its shared state) plus hyper's box.
/// A sleep that is polled and not yet due holds one small task (about 150 bytes plus the
/// ring-rt timer it awaits) on the worker that polled it; the task exits when the sleep
/// fires or is dropped. A server holds at most one such task per connection; hyper 1.x
/// makes a new header-read sleep for each request (and [`Timer::reset`](hyper::rt::Timer::reset),
/// done in place here, only for a sleep it kept), so under load that can be a task spawned
/// per request. A sleep polled outside any ring-rt worker is served by one process-wide
/// helper thread instead.
///
/// # Examples
///
/// A header-read timeout for hyper's HTTP/1 server (the connection is closed if a
/// request's headers take longer than this), and the timer used directly:
///
/// ```
/// # #[cfg(feature = "hyper")]
/// # fn main() -> std::io::Result<()> {
/// use std::future::Future;
/// use std::time::{Duration, Instant};
/// use hyper::rt::Timer;
/// use ring_rt::compat::HyperTimer;
///
/// let mut http1 = hyper::server::conn::http1::Builder::new();
/// http1.timer(HyperTimer::new()).header_read_timeout(Duration::from_secs(10));
///
/// let rt = ring_rt::Runtime::new()?;
/// rt.block_on(async {
///     let timer = HyperTimer::new();
///     let start = Instant::now();
///     timer.sleep(Duration::from_millis(5)).await;
///     assert!(start.elapsed() >= Duration::from_millis(5));
///
///     // A dropped sleep ends its task at the worker's next turn.
///     let mut pending = timer.sleep(Duration::from_secs(60));
///     let waker = std::task::Waker::noop();
///     assert!(pending.as_mut().poll(&mut std::task::Context::from_waker(waker)).is_pending());
///     drop(pending);
///     ring_rt::yield_now().await;
/// });
/// assert_eq!(rt.metrics().tasks_alive, 0);
/// # Ok(())
/// # }
/// # #[cfg(not(feature = "hyper"))]
/// # fn main() {}
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct HyperTimer {
    _private: (),
}

impl HyperTimer {
    /// A timer; it holds no state, so copies are interchangeable (see the
    /// [type's example](HyperTimer)).
    pub fn new() -> HyperTimer {
        HyperTimer { _private: () }
    }
}

impl hyper::rt::Timer for HyperTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.sleep_until(crate::worker::deadline_after(duration))
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(HyperSleep::new(deadline))
    }

    /// Moves a `HyperSleep` in place, so its task (if any) is kept and re-armed.
    fn reset(&self, sleep: &mut Pin<Box<dyn hyper::rt::Sleep>>, new_deadline: Instant) {
        match sleep.as_mut().downcast_mut_pin::<HyperSleep>() {
            Some(ours) => ours.get_mut().reset(new_deadline),
            None => *sleep = self.sleep_until(new_deadline),
        }
    }
}

/// Who will fire a sleep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Armed {
    /// Nobody yet: the next poll arms it.
    No,
    /// A timer task on the worker that first polled it.
    Task,
    /// The helper thread, through a heap entry of the current generation.
    Thread,
}

/// What a sleep and whoever fires it share.
struct State {
    deadline: Instant,
    is_fired: bool,
    /// The `HyperSleep` was dropped: its timer task exits.
    is_dropped: bool,
    armed: Armed,
    /// Bumped by each reset, so the helper thread ignores entries for an old deadline.
    generation: u64,
    /// The task that polled the sleep (hyper's connection), woken when it fires.
    waker: Option<Waker>,
    /// The timer task, woken when the deadline moves sooner or the sleep is dropped.
    timer_waker: Option<Waker>,
    /// The deadline the timer task's ring-rt timer is set for (meaningful while `armed` is
    /// `Task`). A later deadline needs no wake: the task re-arms when that timer fires.
    task_deadline: Instant,
}

type Shared = Mutex<State>;

/// Locks the state. A panic under this lock can leave no half-updated invariant (each
/// critical section only stores fields), so a poisoned lock is used as is.
fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Wakes `waker`, if any (called after the lock is released).
fn wake(waker: Option<Waker>) {
    if let Some(waker) = waker {
        waker.wake();
    }
}

/// Marks the sleep fired if its deadline has passed, and returns hyper's waker to wake.
fn fire_if_due(state: &mut State, now: Instant) -> Option<Option<Waker>> {
    if now < state.deadline {
        return None;
    }
    if state.is_fired {
        return Some(None);
    }
    state.is_fired = true;
    Some(state.waker.take())
}

/// The `hyper::rt::Sleep` of [`HyperTimer`]: `Send + Sync`, unlike ring-rt's own timers.
pub(crate) struct HyperSleep {
    shared: Arc<Shared>,
}

impl HyperSleep {
    fn new(deadline: Instant) -> HyperSleep {
        let state = State {
            deadline,
            is_fired: false,
            is_dropped: false,
            armed: Armed::No,
            generation: 0,
            waker: None,
            timer_waker: None,
            task_deadline: deadline,
        };
        HyperSleep {
            shared: Arc::new(Mutex::new(state)),
        }
    }

    fn reset(&mut self, deadline: Instant) {
        let mut state = lock(&self.shared);
        state.deadline = deadline;
        state.is_fired = false;
        state.generation += 1;
        if state.armed == Armed::Task {
            // The task keeps serving this sleep. hyper moves its header timeout later on
            // each request: the task then finds the new deadline when its timer fires and
            // re-arms, without a wake per request. A sooner deadline must wake it now.
            if deadline < state.task_deadline {
                let timer = state.timer_waker.take();
                drop(state);
                wake(timer);
            }
        } else {
            state.armed = Armed::No;
        }
    }

    /// Hands the sleep to the current worker (a timer task) or, outside ring-rt, to the
    /// helper thread. Called with the lock held and `armed == No`.
    fn arm(&self, mut state: MutexGuard<'_, State>) {
        let deadline = state.deadline;
        match Core::current() {
            Some(core) => {
                state.armed = Armed::Task;
                drop(state);
                let task = TimerTask {
                    shared: self.shared.clone(),
                    sleep: crate::time::sleep_until(deadline),
                    is_done: false,
                };
                // Detached: the task ends itself when the sleep fires or is dropped.
                drop(core.spawn(task));
            }
            None => {
                state.armed = Armed::Thread;
                let generation = state.generation;
                drop(state);
                helper::register(deadline, generation, Arc::downgrade(&self.shared));
            }
        }
    }
}

impl Future for HyperSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = lock(&self.shared);
        if state.is_fired || fire_if_due(&mut state, Instant::now()).is_some() {
            return Poll::Ready(());
        }
        match &mut state.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            slot => *slot = Some(cx.waker().clone()),
        }
        if state.armed == Armed::No {
            self.arm(state);
        }
        Poll::Pending
    }
}

impl hyper::rt::Sleep for HyperSleep {}

impl Drop for HyperSleep {
    fn drop(&mut self) {
        let mut state = lock(&self.shared);
        state.is_dropped = true;
        let timer = state.timer_waker.take();
        drop(state);
        // The timer task wakes, sees the sleep gone and exits (a helper-thread entry just
        // fails to upgrade when its deadline comes).
        wake(timer);
    }
}

/// The task that fires one sleep from a ring-rt timer on its worker.
struct TimerTask {
    shared: Arc<Shared>,
    sleep: crate::time::Sleep,
    /// It returned `Ready` and gave up the sleep, which a newer task may now hold.
    is_done: bool,
}

impl Future for TimerTask {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        loop {
            let mut state = lock(&this.shared);
            if state.is_dropped {
                state.armed = Armed::No;
                this.is_done = true;
                return Poll::Ready(());
            }
            if let Some(waker) = fire_if_due(&mut state, Instant::now()) {
                state.armed = Armed::No;
                this.is_done = true;
                drop(state);
                wake(waker);
                return Poll::Ready(());
            }
            match &mut state.timer_waker {
                Some(w) if w.will_wake(cx.waker()) => {}
                slot => *slot = Some(cx.waker().clone()),
            }
            let deadline = state.deadline;
            state.task_deadline = deadline;
            drop(state);
            if this.sleep.deadline() != deadline {
                this.sleep.reset(deadline);
            }
            // Ready means the deadline read above has passed: the next turn fires it.
            if Pin::new(&mut this.sleep).poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
    }
}

impl Drop for TimerTask {
    /// Dropped unfinished (the runtime shut down): the sleep is re-armed at its next poll,
    /// which is woken now so a waiter does not hang on a task that no longer exists.
    fn drop(&mut self) {
        if self.is_done {
            return;
        }
        let mut state = lock(&self.shared);
        if state.armed != Armed::Task {
            return;
        }
        state.armed = Armed::No;
        let waker = state.waker.take();
        drop(state);
        wake(waker);
    }
}

/// The fallback for sleeps polled outside any ring-rt worker: one process-wide thread that
/// sleeps on a condvar until the earliest deadline in a heap.
mod helper {
    use super::*;

    /// One armed sleep. The heap holds a `Weak`, so a dropped sleep's state is freed at
    /// once; its entry (a few words) stays until its deadline.
    struct Entry {
        deadline: Instant,
        generation: u64,
        shared: Weak<Shared>,
    }

    impl Entry {
        fn key(&self) -> (Instant, u64) {
            (self.deadline, self.generation)
        }

        fn fire(self) {
            let Some(shared) = self.shared.upgrade() else {
                return;
            };
            let mut state = lock(&shared);
            if state.generation != self.generation || state.armed != Armed::Thread {
                return; // reset since: a newer entry (or the next poll) covers it
            }
            state.armed = Armed::No;
            // Due: this generation's deadline is the entry's, which has passed.
            let waker = fire_if_due(&mut state, Instant::now()).flatten();
            drop(state);
            wake(waker);
        }
    }

    impl PartialEq for Entry {
        fn eq(&self, other: &Entry) -> bool {
            self.key() == other.key()
        }
    }

    impl Eq for Entry {}

    impl PartialOrd for Entry {
        fn partial_cmp(&self, other: &Entry) -> Option<Ordering> {
            Some(self.cmp(other))
        }
    }

    impl Ord for Entry {
        /// Reversed, so `BinaryHeap` (a max-heap) pops the earliest deadline first.
        fn cmp(&self, other: &Entry) -> Ordering {
            other.key().cmp(&self.key())
        }
    }

    struct Queue {
        heap: BinaryHeap<Entry>,
        is_running: bool,
    }

    static QUEUE: Mutex<Queue> = Mutex::new(Queue {
        heap: BinaryHeap::new(),
        is_running: false,
    });
    static CHANGED: Condvar = Condvar::new();

    fn queue() -> MutexGuard<'static, Queue> {
        QUEUE.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Fires `shared` at `deadline` unless it was reset (new generation) or dropped.
    pub(super) fn register(deadline: Instant, generation: u64, shared: Weak<Shared>) {
        let mut q = queue();
        let is_earliest = q.heap.peek().is_none_or(|top| deadline < top.deadline);
        q.heap.push(Entry {
            deadline,
            generation,
            shared,
        });
        if !q.is_running {
            let spawned = std::thread::Builder::new()
                .name("ring-rt-hyper-timer".into())
                .spawn(run);
            match spawned {
                Ok(_) => q.is_running = true,
                // The entry stays queued; the next registration tries to start it again.
                Err(err) => tracing::error!(target: "ring_rt", error = %err,
                    "HyperTimer: cannot start the helper thread for sleeps outside ring-rt"),
            }
        } else if is_earliest {
            CHANGED.notify_one();
        }
    }

    /// The helper thread: fires due entries, then waits for the next deadline or a new
    /// earlier one. It runs for the rest of the process, idle on the condvar when empty.
    fn run() {
        let mut q = queue();
        loop {
            let now = Instant::now();
            let mut due = Vec::new();
            while q.heap.peek().is_some_and(|top| top.deadline <= now) {
                due.extend(q.heap.pop());
            }
            if !due.is_empty() {
                // Fired without the queue lock: waking may run arbitrary waker code.
                drop(q);
                due.into_iter().for_each(Entry::fire);
                q = queue();
                continue;
            }
            q = match q.heap.peek().map(|top| top.deadline - now) {
                None => CHANGED.wait(q).unwrap_or_else(PoisonError::into_inner),
                Some(wait) => match CHANGED.wait_timeout(q, wait) {
                    Ok((q, _)) => q,
                    Err(poisoned) => poisoned.into_inner().0,
                },
            };
        }
    }
}
