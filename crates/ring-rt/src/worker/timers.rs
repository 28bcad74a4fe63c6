//! A worker's timers: one ordered map of deadlines, whose earliest becomes the wait timeout
//! of the loop's next `io_uring_enter` (or `epoll_wait`). No timer thread, no SQE per timer.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use super::Core;

/// Identifies one timer: its deadline, and a number that breaks ties between equal ones.
pub(crate) type TimerKey = (Instant, u64);

/// A worker's pending timers, earliest first.
#[derive(Default)]
pub(crate) struct Timers {
    map: BTreeMap<TimerKey, Waker>,
    next_id: u64,
}

impl Timers {
    pub(crate) fn insert(&mut self, deadline: Instant, waker: Waker) -> TimerKey {
        let key = (deadline, self.next_id);
        self.next_id += 1;
        self.map.insert(key, waker);
        key
    }

    /// Whether timer `key` is gone (it fired) or already wakes `waker`'s task.
    fn wakes(&self, key: TimerKey, waker: &Waker) -> bool {
        self.map
            .get(&key)
            .is_none_or(|current| current.will_wake(waker))
    }

    /// Gives timer `key` a new waker; the one it replaces is returned, for the caller to
    /// drop once the timers are no longer borrowed.
    fn replace(&mut self, key: TimerKey, waker: Waker) -> Option<Waker> {
        self.map
            .get_mut(&key)
            .map(|current| std::mem::replace(current, waker))
    }

    /// Removes timer `key`; its waker is returned, as for `replace`.
    pub(crate) fn remove(&mut self, key: TimerKey) -> Option<Waker> {
        self.map.remove(&key)
    }

    /// The earliest deadline, if any timer is pending.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.map.first_key_value().map(|(key, _)| key.0)
    }

    /// [`take_expired`](Self::take_expired) at the present moment, reading the clock only
    /// if a timer is pending.
    pub(crate) fn take_expired_now(&mut self) -> Vec<Waker> {
        if self.map.is_empty() {
            return Vec::new();
        }
        self.take_expired(Instant::now())
    }

    /// Removes and returns the wakers of every timer due at `now`.
    pub(crate) fn take_expired(&mut self, now: Instant) -> Vec<Waker> {
        let mut due = Vec::new();
        while let Some(entry) = self.map.first_entry() {
            if entry.key().0 > now {
                break;
            }
            due.push(entry.remove());
        }
        due
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

/// The furthest a timer reaches: `Duration::MAX` (a common "no timeout") and other huge
/// waits mean "never", which 30 years out stands for. Far beyond any process's life, and
/// well inside what `Instant` can add on every platform, so no deadline overflows.
pub(crate) const FOREVER: Duration = Duration::from_secs(30 * 365 * 24 * 3600);

/// The deadline `d` from now, huge `d`s cut to [`FOREVER`].
pub(crate) fn deadline_after(d: Duration) -> Instant {
    Instant::now() + d.min(FOREVER)
}

/// One timer in a worker's map, registered when first polled before its deadline and
/// removed when dropped: what `Sleep` and an op's timeout wait on.
#[derive(Default)]
pub(crate) struct TimerEntry {
    /// The worker whose map holds the timer (the current one at first poll, unless set).
    core: Option<Rc<Core>>,
    key: Option<TimerKey>,
    /// Tied to `core` for good (an op's timeout fires on the op's worker); a free timer
    /// moves to whichever worker polls it.
    pinned: bool,
}

impl TimerEntry {
    /// A timer on `core`'s map (an op's timeout, which belongs to the op's worker).
    pub(crate) fn on(core: Rc<Core>) -> TimerEntry {
        TimerEntry {
            core: Some(core),
            key: None,
            pinned: true,
        }
    }

    /// Ready once `deadline` has passed; else registers (or updates) the timer so `cx` is
    /// woken then. A timer whose worker was shut down moves to the current one, and so
    /// does a free timer polled on another runtime's thread (its first runtime, not running
    /// while this one is, would never fire it).
    ///
    /// # Panics
    /// Outside a ring-rt runtime, for a timer not tied to a worker (nothing would wake it).
    pub(crate) fn poll(&mut self, deadline: Instant, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= deadline {
            self.cancel();
            return Poll::Ready(());
        }
        if self.core.as_ref().is_some_and(|core| self.must_move(core)) {
            self.cancel();
            self.core = None;
        }
        let core = self.core.get_or_insert_with(|| {
            Core::current().expect("a ring-rt timer polled outside a ring-rt runtime")
        });
        if let Some(key) = self.key {
            if core.timers.borrow().wakes(key, cx.waker()) {
                return Poll::Pending;
            }
        }
        // Wakers are cloned and dropped outside the borrow: both are code that is not ours
        // and may drop or poll another timer of this worker ("already borrowed" before).
        let waker = cx.waker().clone();
        let replaced = {
            let mut timers = core.timers.borrow_mut();
            match self.key {
                Some(key) => timers.replace(key, waker),
                None => {
                    self.key = Some(timers.insert(deadline, waker));
                    None
                }
            }
        };
        drop(replaced);
        Poll::Pending
    }

    /// Whether the timer must leave `core`: shut down, or (free timers) not the worker
    /// running now.
    fn must_move(&self, core: &Rc<Core>) -> bool {
        core.is_shut_down()
            || (!self.pinned && Core::current().is_some_and(|now| !Rc::ptr_eq(&now, core)))
    }

    /// Removes the timer (a later poll registers it again).
    pub(crate) fn cancel(&mut self) {
        if let (Some(key), Some(core)) = (self.key.take(), &self.core) {
            // Dropped after the borrow (see `poll`).
            let removed = core.timers.borrow_mut().remove(key);
            drop(removed);
        }
    }
}

impl Drop for TimerEntry {
    fn drop(&mut self) {
        self.cancel();
    }
}
