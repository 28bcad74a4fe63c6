//! Timers: `sleep`, `sleep_until`, `timeout`, `interval`.
//!
//! One ordered map of deadlines per worker; its earliest deadline becomes the wait timeout
//! of the loop's next `io_uring_enter` (or `epoll_wait`). No timer thread, no SQE per timer.
//! A duration too large to add to now (`Duration::MAX`, the usual "no timeout") means
//! "never": its deadline is decades away, and nothing overflows.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::worker::{deadline_after, TimerEntry};

/// Completes at a deadline. Created by [`sleep`] and [`sleep_until`].
///
/// A timer costs no SQE: the worker's earliest deadline becomes the timeout of its next
/// wait in the kernel. Dropping a `Sleep` removes its timer.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, Instant};
///
/// # ring_rt::Runtime::new()?.block_on(async {
/// let start = Instant::now();
/// let mut sleep = ring_rt::time::sleep(Duration::from_secs(60));
/// sleep.reset(start + Duration::from_millis(5)); // sooner after all
/// assert_eq!(sleep.deadline(), start + Duration::from_millis(5));
/// sleep.await;
/// assert!(start.elapsed() >= Duration::from_millis(5));
/// # });
/// # std::io::Result::Ok(())
/// ```
pub struct Sleep {
    /// The timer in a worker's map: bound to the current worker on first poll, so a sleep
    /// may be created before entering the runtime (e.g. `rt.block_on(sleep(d))`).
    timer: TimerEntry,
    deadline: Instant,
}

/// Waits for `duration`. The deadline is fixed when `sleep` is called, not when the
/// future is first polled. Huge durations (`Duration::MAX`) mean "never".
///
/// # Panics
/// Polling it outside a ring-rt runtime panics (there is no loop to drive the timer). A
/// sleep first polled in one runtime and then in another moves to the one polling it.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, Instant};
///
/// let rt = ring_rt::Runtime::new()?;
/// let start = Instant::now();
/// rt.block_on(ring_rt::time::sleep(Duration::from_millis(10)));
/// assert!(start.elapsed() >= Duration::from_millis(10));
/// # std::io::Result::Ok(())
/// ```
pub fn sleep(duration: Duration) -> Sleep {
    sleep_until(deadline_after(duration))
}

/// Waits until `deadline`.
///
/// # Panics
/// Polling it outside a ring-rt runtime panics (there is no loop to drive the timer).
///
/// # Examples
///
/// ```
/// use std::time::{Duration, Instant};
///
/// # ring_rt::Runtime::new()?.block_on(async {
/// let deadline = Instant::now() + Duration::from_millis(5);
/// ring_rt::time::sleep_until(deadline).await;
/// assert!(Instant::now() >= deadline);
/// # });
/// # std::io::Result::Ok(())
/// ```
pub fn sleep_until(deadline: Instant) -> Sleep {
    Sleep {
        timer: TimerEntry::default(),
        deadline,
    }
}

impl Sleep {
    /// The instant this sleep completes (see the [type's example](Sleep)).
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Moves the deadline (re-arms a completed sleep too).
    ///
    /// # Examples
    ///
    /// A sleep reused as a repeating timer:
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    ///
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let mut sleep = ring_rt::time::sleep(Duration::from_millis(1));
    /// for _ in 0..3 {
    ///     (&mut sleep).await;
    ///     sleep.reset(Instant::now() + Duration::from_millis(1));
    /// }
    /// # });
    /// # std::io::Result::Ok(())
    /// ```
    pub fn reset(&mut self, deadline: Instant) {
        self.timer.cancel();
        self.deadline = deadline;
    }
}

impl Future for Sleep {
    type Output = ();

    /// Within the op budget of the task's poll (see `executor::coop`): a loop of sleeps
    /// already due (a zero duration) completes each at once, and held the worker.
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        std::task::ready!(crate::worker::poll_budget(cx));
        let this = &mut *self;
        crate::executor::coop::spending(this.timer.poll(this.deadline, cx))
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sleep")
            .field("deadline", &self.deadline)
            .finish()
    }
}

/// The error of [`timeout`]: the deadline passed first. Converts into an `io::Error` of
/// kind `TimedOut`, so `?` works in functions returning `io::Result`.
///
/// # Examples
///
/// ```
/// use ring_rt::time::Elapsed;
///
/// let err = std::io::Error::from(Elapsed);
/// assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
/// assert_eq!(Elapsed.to_string(), "deadline has elapsed");
/// ```
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
/// I/O it had in flight) and `Err(Elapsed)` returned. `future` is anything awaitable: a
/// future, or an op not yet started (`stream.read(buf)`).
///
/// Every ring-rt receive is cancel-safe under it: a read, `recv_from`, accept or
/// `RecvStream::next` that the timeout drops after the kernel completed it keeps what it
/// got for the next receive on the same socket. A dropped write may have sent part of its
/// buffer (how much is unknown: treat the connection as broken).
///
/// A deadline already past is no way to try an op once: on io_uring an op's first poll
/// only queues it for the kernel, so `timeout(Duration::ZERO, stream.read(buf))` elapses
/// even with bytes queued in the socket (the cancelled read keeps them for the next
/// receive). Bound the op itself, `stream.read(buf).timeout(Duration::ZERO)`, which the
/// kernel tries before its linked timeout fires (and epoll tries once).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ring_rt::time::{sleep, timeout, Elapsed};
///
/// # ring_rt::Runtime::new()?.block_on(async {
/// let fast = timeout(Duration::from_secs(5), async { 7 }).await;
/// assert_eq!(fast, Ok(7));
///
/// let slow = timeout(Duration::from_millis(5), sleep(Duration::from_secs(60))).await;
/// assert_eq!(slow, Err(Elapsed));
///
/// // A read with nothing to read: the recv is cancelled when the timeout fires.
/// let (_a, b) = ring_rt::net::UnixStream::pair()?;
/// let read = timeout(Duration::from_millis(5), b.read(vec![0; 16])).await;
/// assert!(read.is_err());
/// # std::io::Result::Ok(()) })?;
/// # std::io::Result::Ok(())
/// ```
pub async fn timeout<F: IntoFuture>(duration: Duration, future: F) -> Result<F::Output, Elapsed> {
    let sleep = sleep(duration);
    let mut future = std::pin::pin!(future.into_future());
    let mut sleep = std::pin::pin!(sleep);
    std::future::poll_fn(|cx| {
        // With the task's op budget spent (see `executor::coop`) neither is polled: the
        // future is tried first, with room, before the deadline can win (review CB: a read
        // with its bytes queued timed out untried). The sleep is polled outside the budget,
        // so a future that spends all of it cannot keep its deadline from firing.
        std::task::ready!(crate::worker::poll_budget(cx));
        if let Poll::Ready(out) = future.as_mut().poll(cx) {
            return Poll::Ready(Ok(out));
        }
        // Its firing still spends one, as the sleep it is (review CG: an elapsed timeout
        // cost nothing, and a loop of `timeout(ZERO, ..)` never yielded).
        let fired = crate::executor::coop::unlimited(|| sleep.as_mut().poll(cx));
        crate::executor::coop::spending(fired).map(|()| Err(Elapsed))
    })
    .await
}

/// Ticks every `period`. If the loop falls behind, the next tick is one period after the
/// late one (no burst of catch-up ticks).
///
/// # Examples
///
/// ```
/// use std::time::{Duration, Instant};
///
/// # ring_rt::Runtime::new()?.block_on(async {
/// let mut every = ring_rt::time::interval(Duration::from_millis(2));
/// assert_eq!(every.period(), Duration::from_millis(2));
/// let first = every.tick().await; // at once
/// let second = every.tick().await;
/// assert!(second >= first + Duration::from_millis(2));
/// assert!(Instant::now() >= second);
/// # });
/// # std::io::Result::Ok(())
/// ```
pub struct Interval {
    sleep: Sleep,
    period: Duration,
}

/// An interval whose first tick completes immediately.
///
/// # Panics
/// If `period` is zero.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, Instant};
///
/// # ring_rt::Runtime::new()?.block_on(async {
/// let start = Instant::now();
/// let mut ticks = ring_rt::time::interval(Duration::from_millis(1));
/// for _ in 0..3 {
///     ticks.tick().await;
/// }
/// assert!(start.elapsed() >= Duration::from_millis(2)); // 0, 1 and 2 ms
/// # });
/// # std::io::Result::Ok(())
/// ```
pub fn interval(period: Duration) -> Interval {
    assert!(period > Duration::ZERO, "interval period must be non-zero");
    Interval {
        sleep: sleep_until(Instant::now()),
        period,
    }
}

impl Interval {
    /// Waits for the next tick and returns its scheduled instant (see the
    /// [type's example](Interval)).
    pub async fn tick(&mut self) -> Instant {
        (&mut self.sleep).await;
        let scheduled = self.sleep.deadline();
        // A huge period means the next tick never comes (no overflow past `Instant`).
        let next = scheduled
            .checked_add(self.period)
            .unwrap_or_else(|| deadline_after(self.period))
            .max(Instant::now());
        self.sleep.reset(next);
        scheduled
    }

    /// The period (see the [type's example](Interval)).
    pub fn period(&self) -> Duration {
        self.period
    }
}
