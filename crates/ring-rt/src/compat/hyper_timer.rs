//! `HyperTimer`: hyper's `Timer` (its sleeps must be `Send + Sync`) over ring-rt's
//! per-worker, `!Send` timers (feature `hyper`).
//!
//! A hyper sleep is a shared state (`Arc<Shared>`: deadline, fired flag, hyper's waker, and
//! who will fire it). Polled on a worker, it puts an entry straight into that worker's
//! timers whose waker is the shared state itself: when the entry fires, the state marks the
//! sleep fired and wakes hyper's task. No task is spawned: hyper 1.x makes a new
//! header-read sleep for each request and drops it once the head is parsed, and a task per
//! sleep cost a spawn per request (0.99 per request with 200 connections, BENCHMARKS.md,
//! twelfth session). A drop on the worker's thread removes its entry at once.
//!
//! The state is `Send`, the timers are not: only a worker's own thread touches its timers,
//! and the state names the worker by its `Core::id` and the entry by its key. A sleep
//! dropped, moved or re-armed on another thread leaves its entry where it was, to fire
//! stale at its deadline; the state keeps a record of it (at most one entry per worker),
//! so the entry goes as soon as the sleep is armed or dropped on that worker's thread
//! again. A firing entry is judged by the state alone (fire if due, else ignore or re-arm),
//! so none fires a sleep early. A sleep polled where no ring-rt worker runs (or while its
//! runtime shuts down) is armed on one process-wide helper thread instead (an ordered map
//! of deadlines under a condvar, from which a dropped or moved sleep's entry is removed).
//! One limit, shared with ring-rt's own timers: a sleep armed on a runtime that is then
//! dropped wakes nobody until it is polled again (its entry goes with the worker).

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
/// worker's thread (hyper drops it in the connection's task) it removes the entry at once.
/// A sleep dropped on another thread, or moved to a worker of another thread, leaves its
/// entry (holding the small shared state) until its deadline, when it fires into nothing:
/// at most one per worker the sleep was armed on, and one that comes back to a worker
/// takes its old entry there out.
/// [`Timer::reset`](hyper::rt::Timer::reset) moves a sleep in place. A sleep polled
/// outside any ring-rt worker (or while its runtime shuts down) is served by one
/// process-wide helper thread instead.
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
    /// comes to [`Shared::on_timer`] on that worker's thread (as a rule with that worker
    /// current; see there for when not).
    Worker { worker: u64, key: TimerKey },
    /// The entry `key` in the helper thread's queue, set for the sleep's deadline.
    Thread { key: helper::Key },
}

/// What a sleep and whoever fires it share.
struct State {
    deadline: Instant,
    is_fired: bool,
    armed: Armed,
    /// Entries left in the timers of workers the sleep was armed on before it moved on: at
    /// most one per worker (arming on a worker takes that worker's old entry out), each
    /// taken out when the sleep is armed, disarmed or dropped on that worker's thread
    /// again, or when it fires there with its worker current; a record (24 B) of a worker
    /// that is gone stays until the sleep goes. A sleep moves between workers only when a
    /// program moves it (hyper's stay on their connection's worker).
    left: Vec<(u64, TimerKey)>,
    /// The task that polled the sleep (hyper's connection), woken when it fires.
    waker: Option<Waker>,
}

/// The state behind a lock, and the waker of the sleep's timer entries (see
/// [`on_timer`](Shared::on_timer)).
struct Shared {
    state: Mutex<State>,
}

/// Locks the state. No code that is not ours runs under this lock (wakers are cloned,
/// woken and dropped outside it; the one exception is a `tracing` event if the helper
/// thread cannot start), so nothing can block the helper thread on it or leave a
/// half-updated state behind, and a poisoned lock is used as is.
fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    shared.state.lock().unwrap_or_else(PoisonError::into_inner)
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

/// This thread's worker, if one runs here and is not being shut down (a timer set on a
/// worker whose shutdown began might never fire).
fn this_worker() -> Option<Rc<Core>> {
    Core::current().filter(|core| !core.is_stopping())
}

/// Takes entry `key` out of `core`'s timers (we are on its thread). Its waker is this
/// sleep's own state, and the caller holds another reference to it: dropping it only
/// counts down, so it is dropped here, under the lock. Timers already borrowed (never so
/// for our callers, which run outside any borrow of them) leave the entry to fire stale.
fn remove_entry(core: &Core, key: TimerKey) {
    if let Ok(mut timers) = core.timers.try_borrow_mut() {
        drop(timers.remove(key));
    }
}

thread_local! {
    /// The workers living on this thread that sleeps were armed on here: a sleep dropped or
    /// moved on this thread while another (or no) worker is current can still take its
    /// entry out of their timers.
    static WORKERS_HERE: std::cell::RefCell<Vec<std::rc::Weak<Core>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Remembers that `core` (the current worker, so one living on this thread) holds entries.
fn note_worker(core: &Rc<Core>) {
    let _ = WORKERS_HERE.try_with(|workers| {
        let Ok(mut workers) = workers.try_borrow_mut() else {
            return;
        };
        if workers
            .iter()
            .any(|w| std::ptr::eq(w.as_ptr(), Rc::as_ptr(core)))
        {
            return;
        }
        workers.retain(|w| w.strong_count() > 0);
        workers.push(Rc::downgrade(core));
    });
}

/// Worker `id`, if it lives on this thread: `current` when it is that one, else one
/// [`note_worker`] remembered and still alive.
fn worker_here(current: Option<&Rc<Core>>, id: u64) -> Option<Rc<Core>> {
    if let Some(core) = current.filter(|core| core.id == id) {
        return Some(core.clone());
    }
    WORKERS_HERE
        .try_with(|workers| {
            let workers = workers.try_borrow().ok()?;
            workers
                .iter()
                .filter_map(|w| w.upgrade())
                .find(|c| c.id == id)
        })
        .ok()
        .flatten()
}

/// Every worker living on this thread that is known here: `current` and those
/// [`note_worker`] remembered and still alive.
fn workers_here(current: Option<&Rc<Core>>) -> Vec<Rc<Core>> {
    let mut here: Vec<Rc<Core>> = current.into_iter().cloned().collect();
    let _ = WORKERS_HERE.try_with(|workers| {
        if let Ok(workers) = workers.try_borrow() {
            here.extend(workers.iter().filter_map(|w| w.upgrade()));
        }
    });
    here
}

impl Shared {
    /// Takes the sleep's armed entry away: out of its worker's timers when that worker lives
    /// on this thread (`core`, or one it is not the current one of: outside its `block_on`,
    /// or inside another runtime's), out of the helper's queue, or (on another thread's
    /// worker, whose timers only that thread may touch) into `left`. Left entries of
    /// workers on this thread go too.
    fn disarm(state: &mut State, core: Option<&Rc<Core>>) {
        match std::mem::replace(&mut state.armed, Armed::No) {
            Armed::No => {}
            Armed::Worker { worker, key } => match worker_here(core, worker) {
                Some(here) => remove_entry(&here, key),
                None => state.left.push((worker, key)),
            },
            Armed::Thread { key } => helper::remove(key),
        }
        if state.left.is_empty() {
            return; // the rule: a sleep that never moved
        }
        // The thread's workers looked up once, not per record (a sleep that visited many
        // runtimes since dropped keeps a record of each).
        let here = workers_here(core);
        state.left.retain(|&(worker, key)| {
            let Some(core) = here.iter().find(|core| core.id == worker) else {
                return true;
            };
            remove_entry(core, key);
            false
        });
    }

    /// Arms the sleep for its deadline on `core` (this thread's worker) or, without one, on
    /// the helper thread, replacing what armed it before.
    fn arm(self: &Arc<Self>, state: &mut State, core: Option<&Rc<Core>>) {
        Shared::disarm(state, core);
        let deadline = state.deadline;
        let inserted = core.and_then(|core| {
            let mut timers = core.timers.try_borrow_mut().ok()?;
            let key = timers.insert(deadline, Waker::from(self.clone()));
            note_worker(core);
            Some((core.id, key))
        });
        state.armed = match inserted {
            Some((worker, key)) => Armed::Worker { worker, key },
            None => Armed::Thread {
                key: helper::insert(deadline, Arc::downgrade(self)),
            },
        };
    }

    /// Whether the sleep is armed, where `core` runs, for no later than its deadline.
    fn is_armed_for(state: &State, core: Option<&Rc<Core>>) -> bool {
        match (state.armed, core) {
            (Armed::Worker { worker, key }, Some(core)) => {
                core.id == worker && key.0 <= state.deadline
            }
            (Armed::Thread { .. }, None) => true,
            _ => false,
        }
    }

    /// An entry of this sleep fired. It may be a left one, or the armed one: only the armed
    /// entry's deadline having come counts, and then the sleep fires if due or is armed
    /// again for a deadline moved later. The wake normally runs on the entry's worker with
    /// that worker current; it can also run where none is (a wake a panic left queued, run
    /// by a poll outside the runtime's `block_on`), and is then judged by the state alone.
    fn on_timer(self: &Arc<Self>) {
        let core = this_worker();
        let now = Instant::now();
        let mut state = lock(self);
        // A left entry of this worker that was due has fired (or will, in this same turn).
        if let Some(core) = &core {
            let due_here = |&(w, key): &(u64, TimerKey)| w == core.id && key.0 <= now;
            if let Some(i) = state.left.iter().position(due_here) {
                remove_entry(core, state.left.swap_remove(i).1);
            }
        }
        let worker = match state.armed {
            Armed::Worker { worker, key } if key.0 <= now => worker,
            _ => return, // fired, dropped, armed elsewhere, or its entry still to come
        };
        // The armed entry's deadline has come: it fired, or fires in this same turn (and
        // then finds the sleep disarmed), or waits in the timers of a worker that has not
        // turned since, recorded in `left` until that worker takes it out.
        Shared::disarm(&mut state, core.as_ref());
        let here = core.filter(|core| core.id == worker);
        let to_wake = match fire_if_due(&mut state, now) {
            Some(waker) => waker,
            // Reset later since it was armed: armed again for the new deadline on its
            // worker; elsewhere its task is woken, and its next poll arms it where it runs.
            None => match here {
                Some(core) => {
                    self.arm(&mut state, Some(&core));
                    None
                }
                None => state.waker.take(),
            },
        };
        drop(state);
        if let Some(waker) = to_wake {
            waker.wake();
        }
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
            left: Vec::new(),
            waker: None,
        };
        HyperSleep {
            shared: Arc::new(Shared {
                state: Mutex::new(state),
            }),
        }
    }

    /// Moves the deadline. A later deadline keeps a worker's entry where it is (it fires
    /// early and re-arms, one wake per deadline, not per reset: hyper moves its timeout
    /// later on each request). A sooner one moves the entry at once on its own worker's
    /// thread; from elsewhere it wakes the sleep's task, whose next poll moves it (the old
    /// entry, still armed, fires the sleep at the old deadline if no poll comes). The
    /// helper thread's entry is moved in its queue.
    fn reset(&mut self, deadline: Instant) {
        let core = this_worker();
        let mut state = lock(&self.shared);
        let is_away_sooner = match state.armed {
            Armed::Worker { worker, key } => {
                deadline < key.0 && core.as_ref().is_none_or(|c| c.id != worker)
            }
            _ => false,
        };
        // Woken by reference outside the lock, then put back (see `lock`).
        let to_wake = if is_away_sooner {
            state.waker.take()
        } else {
            None
        };
        state.deadline = deadline;
        state.is_fired = false;
        match state.armed {
            Armed::Worker { key, .. } if key.0 <= deadline || is_away_sooner => {}
            Armed::Worker { .. } => self.shared.arm(&mut state, core.as_ref()),
            // Stays with the helper: its poller runs where no worker does.
            Armed::Thread { .. } => self.shared.arm(&mut state, None),
            Armed::No => {}
        }
        drop(state);
        if let Some(waker) = to_wake {
            waker.wake_by_ref();
            // Kept for the old entry, which fires the sleep at the old deadline if no poll
            // comes; unless a poll since brought a newer waker, or the sleep fired.
            let mut state = lock(&self.shared);
            let unneeded = if state.waker.is_none() && !state.is_fired {
                state.waker = Some(waker);
                None
            } else {
                Some(waker)
            };
            drop(state);
            drop(unneeded);
        }
    }
}

impl Future for HyperSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let core = this_worker();
        // A new waker is cloned outside the lock (see `lock`): the first pass finds out
        // whether one is needed, the second stores it.
        let mut fresh = None;
        loop {
            let mut state = lock(&self.shared);
            if state.is_fired {
                return Poll::Ready(());
            }
            // Its own poll sees it ready: no wake (the waker of an earlier poll is let go,
            // as only the owner of the `&mut` polls a sleep).
            if let Some(waker) = fire_if_due(&mut state, Instant::now()) {
                Shared::disarm(&mut state, core.as_ref());
                drop(state);
                drop(waker);
                return Poll::Ready(());
            }
            let is_same = state
                .waker
                .as_ref()
                .is_some_and(|w| w.will_wake(cx.waker()));
            let replaced = match (is_same, fresh.take()) {
                (true, unused) => unused,
                (false, Some(waker)) => state.waker.replace(waker),
                (false, None) => {
                    drop(state);
                    fresh = Some(cx.waker().clone());
                    continue;
                }
            };
            if !Shared::is_armed_for(&state, core.as_ref()) {
                self.shared.arm(&mut state, core.as_ref());
            }
            drop(state);
            // Armed already: a panic in this drop loses no wake.
            drop(replaced);
            return Poll::Pending;
        }
    }
}

impl hyper::rt::Sleep for HyperSleep {}

impl Drop for HyperSleep {
    /// On the thread of the worker that armed it, its entry goes now (and the helper
    /// thread's, from any thread); entries on other threads' workers stay until their
    /// deadline and then find the sleep disarmed.
    fn drop(&mut self) {
        let core = this_worker();
        let mut state = lock(&self.shared);
        Shared::disarm(&mut state, core.as_ref());
        let waker = state.waker.take();
        drop(state);
        drop(waker);
    }
}

/// The fallback for sleeps polled outside any ring-rt worker: one process-wide thread that
/// sleeps on a condvar until the earliest deadline in an ordered map. A sleep's entry is
/// removed when the sleep is dropped, moved or armed elsewhere, so the map holds at most
/// one entry per sleep armed there.
mod helper {
    use super::*;
    use std::collections::BTreeMap;

    /// An entry: its deadline, and a number that breaks ties between equal ones.
    pub(super) type Key = (Instant, u64);

    struct Queue {
        entries: BTreeMap<Key, Weak<Shared>>,
        next_id: u64,
        is_running: bool,
    }

    static QUEUE: Mutex<Queue> = Mutex::new(Queue {
        entries: BTreeMap::new(),
        next_id: 0,
        is_running: false,
    });
    static CHANGED: Condvar = Condvar::new();

    /// The queue, locked. Only our code runs under this lock (no waker, no sleep's lock),
    /// so a poisoned one is used as is.
    fn queue() -> MutexGuard<'static, Queue> {
        QUEUE.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `shared` to fire at `deadline`. Called under the sleep's lock (the order is
    /// always sleep, then queue; the thread takes a sleep's lock only without the queue's).
    pub(super) fn insert(deadline: Instant, shared: Weak<Shared>) -> Key {
        let mut q = queue();
        let key = (deadline, q.next_id);
        q.next_id += 1;
        let is_earliest = q.entries.first_key_value().is_none_or(|(k, _)| key < *k);
        q.entries.insert(key, shared);
        if !q.is_running {
            let spawned = std::thread::Builder::new()
                .name("ring-rt-hyper-timer".into())
                .spawn(run);
            match spawned {
                Ok(_) => q.is_running = true,
                // The entry stays queued; the next one tries to start the thread again.
                Err(err) => tracing::error!(target: "ring_rt", error = %err,
                    "HyperTimer: cannot start the helper thread for sleeps outside ring-rt"),
            }
        } else if is_earliest {
            CHANGED.notify_one();
        }
        key
    }

    /// Takes entry `key` out (a no-op once it fired).
    pub(super) fn remove(key: Key) {
        drop(queue().entries.remove(&key));
    }

    /// Fires the sleep of entry `key`, unless it was dropped or armed anew since.
    fn fire(key: Key, shared: &Weak<Shared>) {
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let mut state = lock(&shared);
        if state.armed != (Armed::Thread { key }) {
            return;
        }
        state.armed = Armed::No;
        // Due: the armed entry's deadline is the sleep's, and it has passed.
        let waker = fire_if_due(&mut state, Instant::now()).flatten();
        drop(state);
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// The helper thread: fires due entries, then waits for the next deadline or a new
    /// earlier one. It runs for the rest of the process, idle on the condvar when empty.
    fn run() {
        let mut q = queue();
        loop {
            let now = Instant::now();
            let mut due = Vec::new();
            while let Some(entry) = q.entries.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                let key = *entry.key();
                due.push((key, entry.remove()));
            }
            if !due.is_empty() {
                // Fired without the queue lock: waking runs code that is not ours, and a
                // panic in it must not end the thread every sleep outside ring-rt needs.
                drop(q);
                for (key, shared) in due {
                    let fired = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        fire(key, &shared);
                        drop(shared);
                    }));
                    if let Err(payload) = fired {
                        tracing::error!(target: "ring_rt",
                            "HyperTimer: a sleep's waker panicked on the helper thread");
                        // Its payload may panic as it drops, too.
                        crate::executor::task::discard_payload(payload);
                    }
                }
                q = queue();
                continue;
            }
            q = match q.entries.first_key_value().map(|(k, _)| k.0 - now) {
                None => CHANGED.wait(q).unwrap_or_else(PoisonError::into_inner),
                Some(wait) => match CHANGED.wait_timeout(q, wait) {
                    Ok((q, _)) => q,
                    Err(poisoned) => poisoned.into_inner().0,
                },
            };
        }
    }
}
