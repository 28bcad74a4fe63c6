//! A task's budget of ops per poll, so a task whose ops never wait cannot hold its worker.
//!
//! An op that completes at once (epoll's read of bytes already queued, a page-cache read,
//! a send the socket takes, a sleep already due) returns `Ready` inside the task's poll,
//! and a loop of them never returned `Pending`: one task read 100,000 queued bytes in one
//! poll while the worker's other tasks, its timers and its I/O waited (review BY). Each
//! poll of a task (and of `block_on`'s future) now gets [`OPS_PER_POLL`] ops; an op polled
//! with none left returns `Pending` without doing anything, and its task runs again after
//! the next loop turn (as tokio's coop budget does). Outside a task's poll (a future polled
//! by hand, a thread of the blocking pool) the budget is unlimited.

use std::cell::Cell;

/// Ops a task's poll may complete before its next op waits for a loop turn (below
/// [`UNLIMITED`]). tokio's
/// budget is the same: enough that a busy task pays for the yield rarely, few enough that
/// the others wait at most a few hundred syscalls.
pub(crate) const OPS_PER_POLL: u8 = 128;

/// What the thread-local holds outside every task's poll: no budget to spend.
const UNLIMITED: u8 = u8::MAX;

thread_local! {
    /// Ops left to the poll on the stack, or [`UNLIMITED`]. One byte, not an `Option`:
    /// this is read and written on every op's completion.
    static BUDGET: Cell<u8> = const { Cell::new(UNLIMITED) };
}

/// Runs `poll` (one poll of a task or of `block_on`'s future) with a fresh budget; the
/// budget before it comes back afterwards, on unwinding too.
#[inline]
pub(crate) fn budgeted<R>(poll: impl FnOnce() -> R) -> R {
    with_budget(OPS_PER_POLL, poll)
}

/// Runs `f` with an unlimited budget (see [`budgeted`]): an adapter's write it reports
/// accepted must start now; a timeout's deadline must fire whatever its future spent.
#[inline]
pub(crate) fn unlimited<R>(f: impl FnOnce() -> R) -> R {
    with_budget(UNLIMITED, f)
}

/// For a run of task polls, each after a [`refill`]: the budget before the run comes back
/// when the guard drops, on unwinding too (one store per poll, not a save and a restore).
#[inline]
pub(crate) fn polling_tasks() -> impl Drop {
    Restore(BUDGET.with(Cell::get))
}

/// A fresh budget, for the task poll about to run (inside [`polling_tasks`]).
#[inline]
pub(crate) fn refill() {
    BUDGET.with(|b| b.set(OPS_PER_POLL));
}

#[inline]
fn with_budget<R>(budget: u8, f: impl FnOnce() -> R) -> R {
    let before = BUDGET.with(|b| b.replace(budget));
    let _restore = Restore(before);
    f()
}

/// Whether an op may go on: false once this poll's budget is spent.
#[inline]
pub(crate) fn has_room() -> bool {
    BUDGET.with(|b| b.get() != 0)
}

/// Ready while the budget lasts; once it is spent, `Pending`, and the task goes to the back
/// of its worker's run queue (behind the tasks ready now, not after the loop turn, which
/// only the worker above this layer can wait for: `worker::poll_budget` does).
#[inline]
pub(crate) fn poll_budget_requeued(cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
    if has_room() {
        return std::task::Poll::Ready(());
    }
    cx.waker().wake_by_ref();
    std::task::Poll::Pending
}

/// `polled`, after spending one if it is `Ready`: the end of every budgeted poll.
#[inline]
pub(crate) fn spending<T>(polled: std::task::Poll<T>) -> std::task::Poll<T> {
    if polled.is_ready() {
        spend();
    }
    polled
}

/// An op completed: one less for the rest of this poll.
#[inline]
pub(crate) fn spend() {
    BUDGET.with(|b| {
        let left = b.get();
        if left != UNLIMITED {
            b.set(left.saturating_sub(1));
        }
    });
}

pin_project_lite::pin_project! {
    /// A future polled outside the op budget: see [`unconstrained`].
    #[must_use = "futures do nothing unless awaited"]
    pub struct Unconstrained<F> {
        #[pin]
        future: F,
    }
}

/// Wraps `future` so that its polls are not held to the task's op budget (as tokio's
/// `task::unconstrained`).
///
/// Each poll of a task may complete 128 ops; past that an op returns `Pending` and the task
/// runs again after the worker's next loop turn, so a task whose ops never wait (bytes
/// already queued, sleeps already due) cannot hold its worker. Inside `unconstrained` every
/// op that is ready completes, however many: for a poll that has to finish what is ready,
/// by a caller who accepts that it keeps the worker's other tasks, timers and I/O waiting
/// as long as its ops are ready. The budget around it (what is left of the task's poll) is
/// as before once the poll returns, on unwinding too.
///
/// It lifts the budget only. An op that waits for the worker's loop still waits for it:
/// on io_uring every socket and file op completes on a loop turn, so a nested executor
/// that blocks the worker's thread (`futures::executor::block_on` inside a task) never
/// sees one complete, inside `unconstrained` or not; only what completes without the loop
/// does (sleeps already due, channels, epoll's reads of bytes already queued).
///
/// # Examples
///
/// ```
/// use std::future::Future;
/// use std::pin::pin;
/// use std::task::Poll;
/// use std::time::Duration;
///
/// let rt = ring_rt::Runtime::new()?;
/// let ready = rt.block_on(ring_rt::unconstrained(std::future::poll_fn(|cx| {
///     // 1,000 sleeps already due, all in one poll: past 128 the budget would say wait.
///     let ready = (0..1_000)
///         .filter(|_| pin!(ring_rt::time::sleep(Duration::ZERO)).poll(cx).is_ready())
///         .count();
///     Poll::Ready(ready)
/// })));
/// assert_eq!(ready, 1_000);
/// # std::io::Result::Ok(())
/// ```
pub fn unconstrained<F: std::future::Future>(future: F) -> Unconstrained<F> {
    Unconstrained { future }
}

impl<F: std::future::Future> std::future::Future for Unconstrained<F> {
    type Output = F::Output;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let future = self.project().future;
        unlimited(|| future.poll(cx))
    }
}

struct Restore(u8);

impl Drop for Restore {
    fn drop(&mut self) {
        BUDGET.with(|b| b.set(self.0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poll_spends_its_budget_and_the_one_around_it_comes_back() {
        assert!(has_room(), "unlimited outside a poll");
        budgeted(|| {
            for _ in 0..OPS_PER_POLL - 1 {
                spend();
            }
            assert!(has_room());
            unlimited(|| {
                spend();
                assert!(has_room(), "unlimited inside");
            });
            spend();
            assert!(!has_room(), "spent");
            budgeted(|| assert!(has_room(), "a nested poll has its own"));
            assert!(!has_room(), "the outer budget comes back");
        });
        assert!(has_room(), "unlimited again");
        let _ = std::panic::catch_unwind(|| {
            budgeted(|| {
                (0..OPS_PER_POLL).for_each(|_| spend());
                panic!("unwinds");
            })
        });
        assert!(has_room(), "restored on unwinding");
        {
            let _run = polling_tasks();
            refill();
            (0..OPS_PER_POLL).for_each(|_| spend());
            assert!(!has_room(), "spent");
            refill();
            assert!(has_room(), "refilled");
        }
        assert!(has_room(), "unlimited after the run");
    }
}
