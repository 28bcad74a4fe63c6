//! Timers: `sleep`, `sleep_until`, `timeout`, `interval`.
//!
//! One ordered map of deadlines per worker; its earliest deadline becomes the wait timeout
//! of the loop's next `io_uring_enter` (or `epoll_wait`). No timer thread, no SQE per timer.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::runtime::Core;

/// A worker's pending timers, earliest first. The u64 breaks ties between equal deadlines.
#[derive(Default)]
pub(crate) struct Timers {
    map: BTreeMap<(Instant, u64), Waker>,
    next_id: u64,
}

type TimerKey = (Instant, u64);

impl Timers {
    fn insert(&mut self, deadline: Instant, waker: Waker) -> TimerKey {
        let key = (deadline, self.next_id);
        self.next_id += 1;
        self.map.insert(key, waker);
        key
    }

    fn update(&mut self, key: TimerKey, waker: &Waker) {
        if let Some(current) = self.map.get_mut(&key) {
            if !current.will_wake(waker) {
                *current = waker.clone();
            }
        }
    }

    fn remove(&mut self, key: TimerKey) {
        self.map.remove(&key);
    }

    /// The earliest deadline, if any timer is pending.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.map.first_key_value().map(|(key, _)| key.0)
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

/// Completes at a deadline. Created by [`sleep`] and [`sleep_until`].
pub struct Sleep {
    /// The worker whose timers hold this sleep: bound on first poll, so a sleep may be
    /// created before entering the runtime (e.g. `rt.block_on(sleep(d))`).
    core: Option<Rc<Core>>,
    deadline: Instant,
    key: Option<TimerKey>,
}

/// Waits for `duration`.
pub fn sleep(duration: Duration) -> Sleep {
    sleep_until(Instant::now() + duration)
}

/// Waits until `deadline`.
///
/// Polling it outside a ring-rt runtime panics (there is no loop to drive the timer).
pub fn sleep_until(deadline: Instant) -> Sleep {
    Sleep {
        core: None,
        deadline,
        key: None,
    }
}

impl Sleep {
    /// The instant this sleep completes.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Moves the deadline (re-arms a completed sleep too).
    pub fn reset(&mut self, deadline: Instant) {
        self.cancel();
        self.deadline = deadline;
    }

    fn cancel(&mut self) {
        if let (Some(key), Some(core)) = (self.key.take(), &self.core) {
            core.timers.borrow_mut().remove(key);
        }
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.deadline {
            self.cancel();
            return Poll::Ready(());
        }
        let deadline = self.deadline;
        let this = &mut *self;
        let core = this.core.get_or_insert_with(|| {
            Core::current().expect("ring_rt::time::Sleep polled outside a ring-rt runtime")
        });
        let mut timers = core.timers.borrow_mut();
        match this.key {
            Some(key) => timers.update(key, cx.waker()),
            None => this.key = Some(timers.insert(deadline, cx.waker().clone())),
        }
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        self.cancel();
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sleep")
            .field("deadline", &self.deadline)
            .finish()
    }
}

/// The error of [`timeout`]: the deadline passed first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Elapsed;

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("deadline has elapsed")
    }
}

impl std::error::Error for Elapsed {}

impl From<Elapsed> for io::Error {
    fn from(_: Elapsed) -> io::Error {
        io::Error::new(io::ErrorKind::TimedOut, Elapsed)
    }
}

/// Runs `future` for at most `duration`; on expiry the future is dropped (cancelling any
/// I/O it had in flight) and `Err(Elapsed)` returned.
pub async fn timeout<F: Future>(duration: Duration, future: F) -> Result<F::Output, Elapsed> {
    let sleep = sleep(duration);
    let mut future = std::pin::pin!(future);
    let mut sleep = std::pin::pin!(sleep);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = future.as_mut().poll(cx) {
            return Poll::Ready(Ok(out));
        }
        sleep.as_mut().poll(cx).map(|()| Err(Elapsed))
    })
    .await
}

/// Ticks every `period`. If the loop falls behind, the next tick is one period after the
/// late one (no burst of catch-up ticks).
pub struct Interval {
    sleep: Sleep,
    period: Duration,
}

/// An interval whose first tick completes immediately.
///
/// # Panics
/// If `period` is zero.
pub fn interval(period: Duration) -> Interval {
    assert!(period > Duration::ZERO, "interval period must be non-zero");
    Interval {
        sleep: sleep_until(Instant::now()),
        period,
    }
}

impl Interval {
    /// Waits for the next tick and returns its scheduled instant.
    pub async fn tick(&mut self) -> Instant {
        (&mut self.sleep).await;
        let scheduled = self.sleep.deadline();
        let next = (scheduled + self.period).max(Instant::now());
        self.sleep.reset(next);
        scheduled
    }

    /// The period.
    pub fn period(&self) -> Duration {
        self.period
    }
}
