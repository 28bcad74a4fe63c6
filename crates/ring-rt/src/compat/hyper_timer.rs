//! `HyperTimer`: hyper's `Timer` (its sleeps must be `Send + Sync`) over ring-rt's
//! per-worker, `!Send` timers (feature `hyper`).
//!
//! A hyper sleep is a shared state (`Arc<Shared>`: deadline, fired flag, hyper's waker, and
//! who will fire it). Polled on a worker, it puts an entry straight into that worker's
//! timers whose waker is the shared state itself: when the entry fires, the state marks the
//! sleep fired and wakes hyper's task. No task is spawned: hyper 1.x makes a new
//! header-read sleep for each request and drops it once the head is parsed, and a task per
//! sleep cost a spawn per request (0.99 per request with 200 connections, BENCHMARKS.md,
//! twelfth session). A drop on the worker removes the entry at once.
//!
//! The state is `Send`, the timers are not: only the worker's own thread touches its
//! timers, and the state names that worker by its `Core::id` and the entry by its key.
//! An entry can outlive what it was armed for (the sleep dropped or re-armed on another
//! thread, or moved sooner from there): such a stale entry stays until its deadline and its
//! firing is judged by the state alone (fire if due, else ignore or re-arm), so it can
//! neither fire a sleep early nor leave one unarmed. A sleep polled where no ring-rt worker
//! runs is armed on one process-wide helper thread instead (a heap of deadlines under a
//! condvar).

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use crate::worker::{Core, TimerKey};

/// ring-rt's timers for hyper: pass it to hyper's `Builder::timer` to enable timeouts such
/// as `http1::Builder::header_read_timeout`.
///
/// **What it costs**: each sleep is one allocation (its shared state) plus hyper's box.
/// A sleep that is polled and not yet due is one entry in the timers of the worker that
/// polled it, as a ring-rt [`Sleep`](crate::time::Sleep) is; no task. Dropped on that
/// worker (hyper's case) it removes the entry at once; dropped on another thread, the
/// entry (and the small shared state it keeps) stays until its deadline and then fires
/// into nothing. [`Timer::reset`](hyper::rt::Timer::reset) moves a sleep in place. A sleep
/// polled outside any ring-rt worker is served by one process-wide helper thread instead.
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
///     // A pending sleep is a timer of this worker, gone with the sleep.
///     let mut pending = timer.sleep(Duration::from_secs(60));
///     let waker = std::task::Waker::noop();
///     assert!(pending.as_mut().poll(&mut std::task::Context::from_waker(waker)).is_pending());
///     assert_eq!(rt.metrics().timers, 1);
///     drop(pending);
///     assert_eq!(rt.metrics().timers, 0);
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

    /// Moves a `HyperSleep` in place, keeping its timer entry where it can.
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
    /// The entry `key` in the timers of the worker whose `Core::id` is `worker`, set for at
    /// most the sleep's deadline. It is in that map until it fires, and its firing then
    /// comes to [`Shared::on_timer`] on that worker's thread.
    Worker { worker: u64, key: TimerKey },
    /// The helper thread, through a heap entry of the current generation.
    Thread,
}

/// What a sleep and whoever fires it share.
struct State {
    deadline: Instant,
    is_fired: bool,
    armed: Armed,
    /// Bumped by each reset, so the helper thread ignores entries for an old deadline.
    generation: u64,
    /// The task that polled the sleep (hyper's connection), woken when it fires.
    waker: Option<Waker>,
}

/// The state behind a lock, and the waker of the sleep's timer entries (see
/// [`on_timer`](Shared::on_timer)).
struct Shared {
    state: Mutex<State>,
}

/// Locks the state. A panic under this lock can leave no half-updated invariant (each
/// critical section only stores fields and moves timer entries of its own thread's
/// worker, whose map a panic leaves whole), so a poisoned lock is used as is.
fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    shared.state.lock().unwrap_or_else(PoisonError::into_inner)
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

/// This thread's worker, if one runs here and can take a timer.
fn this_worker() -> Option<Rc<Core>> {
    Core::current().filter(|core| !core.is_shut_down())
}

/// What to do once the state is unlocked and the timers unborrowed: wakers to drop or
/// wake (code that is not ours runs under neither), and an entry for the helper thread
/// (whose queue lock is never taken under a sleep's).
#[derive(Default)]
#[must_use]
struct Later {
    /// An entry taken out of the timers (the sleep's own state: only counted down).
    removed: Option<Waker>,
    /// hyper's waker, replaced by a newer one or let go by a sleep that is done.
    dropped: Option<Waker>,
    wake: Option<Waker>,
    /// Queued after the state says `Armed::Thread`: an entry that fires before it is
    /// queued cannot exist, and one queued after a newer reset has an old generation.
    register: Option<(Instant, u64, Weak<Shared>)>,
}

impl Later {
    fn run(self) {
        drop(self.removed);
        drop(self.dropped);
        if let Some((deadline, generation, shared)) = self.register {
            helper::register(deadline, generation, shared);
        }
        wake(self.wake);
    }
}

impl Shared {
    /// If the sleep's entry is in `core`'s timers, takes it out (the sleep is no longer
    /// armed there). An entry on another worker stays, stale, until its deadline.
    fn disarm(state: &mut State, core: Option<&Core>) -> Option<Waker> {
        let armed = std::mem::replace(&mut state.armed, Armed::No);
        match (armed, core) {
            (Armed::Worker { worker, key }, Some(core)) if core.id == worker => {
                // Busy timers (never so in our callers, which run outside any borrow of
                // them): the entry stays and is stale.
                core.timers.try_borrow_mut().ok()?.remove(key)
            }
            _ => None,
        }
    }

    /// Arms the sleep for its deadline on `core` (this thread's worker) or, without one, on
    /// the helper thread. Any entry it had on this worker is replaced.
    fn arm(self: &Arc<Self>, state: &mut State, core: Option<&Core>, later: &mut Later) {
        later.removed = Shared::disarm(state, core);
        let deadline = state.deadline;
        let inserted = core.and_then(|core| {
            let mut timers = core.timers.try_borrow_mut().ok()?;
            Some((core.id, timers.insert(deadline, Waker::from(self.clone()))))
        });
        state.armed = match inserted {
            Some((worker, key)) => Armed::Worker { worker, key },
            None => {
                later.register = Some((deadline, state.generation, Arc::downgrade(self)));
                Armed::Thread
            }
        };
    }

    /// Whether the sleep is armed, where `core` runs, for no later than its deadline.
    fn is_armed_for(state: &State, core: Option<&Core>) -> bool {
        match (state.armed, core) {
            (Armed::Worker { worker, key }, Some(core)) => {
                core.id == worker && key.0 <= state.deadline
            }
            (Armed::Thread, None) => true,
            _ => false,
        }
    }

    /// An entry of this sleep fired on this thread's worker. It may be stale (see the
    /// module's docs): only the armed entry's deadline having come counts, and then the
    /// sleep fires if due or is armed again for a deadline moved later.
    fn on_timer(self: &Arc<Self>) {
        let core = this_worker();
        let mut state = lock(self);
        let (worker, key) = match state.armed {
            Armed::Worker { worker, key } => (worker, key),
            _ => return, // fired, dropped, reset or armed elsewhere since
        };
        let Some(core) = core.filter(|core| core.id == worker) else {
            return; // an entry of this sleep from a worker it has since left
        };
        let now = Instant::now();
        if now < key.0 {
            return; // stale: the armed entry is still to come, and will fire itself
        }
        let mut later = Later::default();
        match fire_if_due(&mut state, now) {
            Some(waker) => {
                later.removed = Shared::disarm(&mut state, Some(&core));
                later.wake = waker;
            }
            // Reset later since it was armed: arm again for the new deadline.
            None => self.arm(&mut state, Some(&core), &mut later),
        }
        drop(state);
        later.run();
    }
}

impl Wake for Shared {
    fn wake(self: Arc<Self>) {
        self.on_timer();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.on_timer();
    }
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
            armed: Armed::No,
            generation: 0,
            waker: None,
        };
        HyperSleep {
            shared: Arc::new(Shared {
                state: Mutex::new(state),
            }),
        }
    }

    /// Moves the deadline. A later deadline keeps the entry where it is (it fires early and
    /// re-arms, one wake per deadline, not per reset: hyper moves its timeout later on each
    /// request). A sooner one moves the entry at once on its own worker's thread; from
    /// elsewhere it wakes the sleep's task, whose next poll moves it (the old entry, still
    /// armed, fires the sleep at the old deadline if no poll comes). On the helper thread a
    /// new entry is queued.
    fn reset(&mut self, deadline: Instant) {
        let core = this_worker();
        let mut state = lock(&self.shared);
        state.deadline = deadline;
        state.is_fired = false;
        state.generation += 1;
        let mut later = Later::default();
        match state.armed {
            Armed::No => {}
            Armed::Worker { key, .. } if key.0 <= deadline => {}
            Armed::Worker { worker, .. } if core.as_ref().is_some_and(|c| c.id == worker) => {
                self.shared.arm(&mut state, core.as_deref(), &mut later);
            }
            Armed::Worker { .. } => later.wake = state.waker.clone(),
            Armed::Thread => {
                later.register = Some((deadline, state.generation, Arc::downgrade(&self.shared)));
            }
        }
        drop(state);
        later.run();
    }
}

impl Future for HyperSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let core = this_worker();
        let mut state = lock(&self.shared);
        if state.is_fired {
            return Poll::Ready(());
        }
        let mut later = Later::default();
        if let Some(waker) = fire_if_due(&mut state, Instant::now()) {
            // Due before its entry fired: the entry goes (here, or stale elsewhere).
            // Its own poll sees it ready: no wake (a waker of an earlier poller is let go,
            // as only the owner of the `&mut` polls a sleep).
            later.removed = Shared::disarm(&mut state, core.as_deref());
            later.dropped = waker;
            drop(state);
            later.run();
            return Poll::Ready(());
        }
        match &mut state.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            slot => later.dropped = slot.replace(cx.waker().clone()),
        }
        if !Shared::is_armed_for(&state, core.as_deref()) {
            self.shared.arm(&mut state, core.as_deref(), &mut later);
        }
        drop(state);
        later.run();
        Poll::Pending
    }
}

impl hyper::rt::Sleep for HyperSleep {}

impl Drop for HyperSleep {
    /// On the worker that armed it, its entry goes now; elsewhere the entry stays until its
    /// deadline and then finds the sleep disarmed (a helper-thread entry fails to upgrade).
    fn drop(&mut self) {
        let core = this_worker();
        let mut state = lock(&self.shared);
        let later = Later {
            removed: Shared::disarm(&mut state, core.as_deref()),
            dropped: state.waker.take(),
            ..Later::default()
        };
        drop(state);
        later.run();
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
