//! Unit tests of the op lifecycle; pure, so they also run under Miri.

use super::*;
use crate::cqe::F_MORE;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Wake;

struct CountWaker(AtomicUsize);

impl Wake for CountWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counting_waker() -> (Arc<CountWaker>, Waker) {
    let count = Arc::new(CountWaker(AtomicUsize::new(0)));
    (count.clone(), Waker::from(count))
}

/// Records every CQE it reaps, like an orphan that closes fds would.
struct Recorder(Rc<RefCell<Vec<i32>>>);

impl Orphan for Recorder {
    fn reap(&mut self, cqe: &Cqe, _deferred: &mut Deferred) {
        self.0.borrow_mut().push(cqe.res);
    }
}

fn cqe(res: i32, flags: u32) -> Cqe {
    Cqe::new(0, res, flags)
}

/// Applies `cqe` and runs what it deferred, as the table's owner would after letting go.
fn apply(op: &mut Lifecycle, cqe: Cqe) -> OnCqe {
    let mut deferred = Deferred::default();
    // SAFETY: the tests' orphans only record what they reap; no fd or bid is real.
    let out = unsafe { op.on_cqe(cqe, &mut deferred) };
    deferred.run();
    out
}

/// Drops the future of `op`, running what that deferred.
/// Polls `op`, running what the poll deferred (a replaced waker to drop) at once.
fn poll(op: &mut Lifecycle, waker: &Waker) -> Poll<Cqe> {
    let mut deferred = Deferred::default();
    let out = op.poll_next(waker, &mut deferred);
    deferred.run();
    out
}

/// A waker whose destructor panics: dropping it inside the table would unwind from there.
struct DropPanics;

impl Wake for DropPanics {
    fn wake(self: Arc<Self>) {}
}

impl Drop for DropPanics {
    fn drop(&mut self) {
        panic!("a waker's destructor panicked");
    }
}

/// A dropped future's waker, and a waker replaced by a newer poll, are dropped by the
/// owner, not inside the table: a panicking destructor there once unwound out of `on_drop`
/// and freed the orphan (the op's memory) with the op still in the kernel.
#[test]
fn wakers_are_dropped_by_the_owner_not_the_table() {
    let mut op = Lifecycle::Submitted;
    let mut deferred = Deferred::default();
    let first = Waker::from(Arc::new(DropPanics));
    assert_eq!(op.poll_next(&first, &mut deferred), Poll::Pending);
    drop(first); // the slot holds the last clone
    let (_, second) = counting_waker();
    assert_eq!(op.poll_next(&second, &mut deferred), Poll::Pending);
    assert!(
        !deferred.is_empty(),
        "the replaced waker was dropped in the table"
    );
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| deferred.run()));
    assert!(ran.is_err());

    let mut op = Lifecycle::Submitted;
    let waker = Waker::from(Arc::new(DropPanics));
    assert_eq!(op.poll_next(&waker, &mut deferred), Poll::Pending);
    drop(waker);
    let kept = Rc::new(Cell::new(false));
    struct Kept(Rc<Cell<bool>>);
    impl Orphan for Kept {
        fn reap(&mut self, _cqe: &Cqe, _deferred: &mut Deferred) {}
    }
    impl Drop for Kept {
        fn drop(&mut self) {
            self.0.set(true);
        }
    }
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        op.on_drop(Box::new(Kept(kept.clone())), &mut deferred)
    }));
    // `deferred` holds the panicking waker now.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(deferred)));
    std::panic::set_hook(previous);
    assert_eq!(dropped.ok(), Some(OnDrop::NeedsCancel));
    assert!(
        !kept.get(),
        "the op's memory was freed with the op in the kernel"
    );
    assert!(matches!(op, Lifecycle::Orphaned(_)));
}

fn drop_future(op: &mut Lifecycle, orphan: Box<dyn Orphan>) -> OnDrop {
    let mut deferred = Deferred::default();
    let out = op.on_drop(orphan, &mut deferred);
    deferred.run();
    out
}

#[test]
fn single_shot_wakes_once_and_delivers() {
    let (count, waker) = counting_waker();
    let mut op = Lifecycle::Submitted;
    assert_eq!(poll(&mut op, &waker), Poll::Pending);
    assert_eq!(apply(&mut op, cqe(5, 0)), OnCqe::Queued);
    assert_eq!(count.0.load(Ordering::SeqCst), 1);
    assert_eq!(poll(&mut op, &waker), Poll::Ready(cqe(5, 0)));
}

#[test]
fn completion_before_first_poll_is_kept() {
    let (_, waker) = counting_waker();
    let mut op = Lifecycle::Submitted;
    apply(&mut op, cqe(3, 0));
    assert_eq!(poll(&mut op, &waker), Poll::Ready(cqe(3, 0)));
}

#[test]
fn slots_stay_small() {
    // The op table holds one of these per op in flight: an idle connection's recv included.
    assert!(
        std::mem::size_of::<Lifecycle>() <= 24,
        "{}",
        std::mem::size_of::<Lifecycle>()
    );
}

#[test]
fn multishot_queues_until_final() {
    let (count, waker) = counting_waker();
    let mut op = Lifecycle::Submitted;
    apply(&mut op, cqe(1, F_MORE));
    apply(&mut op, cqe(2, F_MORE));
    apply(&mut op, cqe(3, 0));
    assert!(matches!(op, Lifecycle::Multishot(_)));
    assert_eq!(poll(&mut op, &waker), Poll::Ready(cqe(1, F_MORE)));
    assert_eq!(poll(&mut op, &waker), Poll::Ready(cqe(2, F_MORE)));
    assert_eq!(poll(&mut op, &waker), Poll::Ready(cqe(3, 0)));
    assert_eq!(count.0.load(Ordering::SeqCst), 0);
}

#[test]
fn multishot_consumer_is_woken_per_cqe() {
    let (count, waker) = counting_waker();
    let mut op = Lifecycle::Submitted;
    apply(&mut op, cqe(1, F_MORE));
    assert_eq!(poll(&mut op, &waker), Poll::Ready(cqe(1, F_MORE)));
    assert_eq!(poll(&mut op, &waker), Poll::Pending);
    apply(&mut op, cqe(2, F_MORE));
    assert_eq!(count.0.load(Ordering::SeqCst), 1);
}

#[test]
fn drop_in_flight_orphans_and_reaps_late_cqes() {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let mut op = Lifecycle::Submitted;
    assert_eq!(
        drop_future(&mut op, Box::new(Recorder(seen.clone()))),
        OnDrop::NeedsCancel
    );
    assert!(op.is_orphaned());
    assert_eq!(apply(&mut op, cqe(9, F_MORE)), OnCqe::Reaped);
    assert_eq!(apply(&mut op, cqe(-libc::ECANCELED, 0)), OnCqe::ReapedFinal);
    assert_eq!(*seen.borrow(), vec![9, -libc::ECANCELED]);
}

#[test]
fn drop_after_completion_reaps_immediately() {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let mut op = Lifecycle::Submitted;
    apply(&mut op, cqe(7, 0));
    assert_eq!(
        drop_future(&mut op, Box::new(Recorder(seen.clone()))),
        OnDrop::Finished
    );
    assert_eq!(*seen.borrow(), vec![7]);
}

#[test]
fn drop_with_queued_multishot_cqes_reaps_them_and_waits_for_final() {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let mut op = Lifecycle::Submitted;
    apply(&mut op, cqe(1, F_MORE));
    apply(&mut op, cqe(2, F_MORE));
    assert_eq!(
        drop_future(&mut op, Box::new(Recorder(seen.clone()))),
        OnDrop::NeedsCancel
    );
    assert_eq!(apply(&mut op, cqe(3, 0)), OnCqe::ReapedFinal);
    assert_eq!(*seen.borrow(), vec![1, 2, 3]);
}

#[test]
fn same_waker_is_not_cloned_again() {
    let (_, waker) = counting_waker();
    let mut op = Lifecycle::Submitted;
    assert_eq!(poll(&mut op, &waker), Poll::Pending);
    assert_eq!(poll(&mut op, &waker), Poll::Pending);
    assert!(matches!(op, Lifecycle::Waiting(_)));
}

#[test]
fn wakes_and_finished_orphans_are_deferred_to_the_owner() {
    let (count, waker) = counting_waker();
    let mut op = Lifecycle::Submitted;
    assert_eq!(poll(&mut op, &waker), Poll::Pending);
    let mut deferred = Deferred::default();
    // SAFETY: no orphan is attached; nothing acts on the CQE.
    let out = unsafe { op.on_cqe(cqe(5, 0), &mut deferred) };
    assert_eq!(out, OnCqe::Queued);
    assert_eq!(count.0.load(Ordering::SeqCst), 0, "woken inside the table");
    deferred.run();
    assert_eq!(count.0.load(Ordering::SeqCst), 1);

    struct DropFlag(Rc<Cell<bool>>);
    impl Orphan for DropFlag {
        fn reap(&mut self, _cqe: &Cqe, _deferred: &mut Deferred) {}
    }
    impl Drop for DropFlag {
        fn drop(&mut self) {
            self.0.set(true);
        }
    }
    let dropped = Rc::new(Cell::new(false));
    let mut op = Lifecycle::Submitted;
    assert_eq!(
        op.on_drop(Box::new(DropFlag(dropped.clone())), &mut deferred),
        OnDrop::NeedsCancel
    );
    // SAFETY: the orphan releases nothing real.
    let out = unsafe { op.on_cqe(cqe(-libc::ECANCELED, 0), &mut deferred) };
    assert_eq!(out, OnCqe::ReapedFinal);
    assert!(
        !dropped.get(),
        "the orphan's memory was freed inside the table"
    );
    deferred.run();
    assert!(dropped.get());
}

/// A panicking `reap` (a bug in that orphan) leaves the slot as if it had returned: more
/// CQEs keep it orphaned, the final one finishes it; the panic comes out of `run`, after
/// the wakes and drops queued with it.
#[test]
fn a_panicking_reap_is_caught_and_raised_by_run() {
    struct PanicOnReap(Rc<Cell<u32>>);
    impl Orphan for PanicOnReap {
        fn reap(&mut self, _cqe: &Cqe, _deferred: &mut Deferred) {
            self.0.set(self.0.get() + 1);
            panic!("reap panicked");
        }
    }
    let reaps = Rc::new(Cell::new(0));
    let mut deferred = Deferred::default();
    let mut op = Lifecycle::Submitted;
    assert_eq!(
        op.on_drop(Box::new(PanicOnReap(reaps.clone())), &mut deferred),
        OnDrop::NeedsCancel
    );
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    // SAFETY: the orphan releases nothing real.
    let more = unsafe { op.on_cqe(cqe(1, F_MORE), &mut deferred) };
    // SAFETY: as above.
    let last = unsafe { op.on_cqe(cqe(-libc::ECANCELED, 0), &mut deferred) };
    let (count, waker) = counting_waker();
    deferred.wake(waker);
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| deferred.run()));
    std::panic::set_hook(previous);
    assert_eq!((more, last), (OnCqe::Reaped, OnCqe::ReapedFinal));
    assert_eq!(reaps.get(), 2, "every CQE reaches reap despite the panics");
    assert!(ran.is_err(), "the panic was swallowed");
    assert_eq!(count.0.load(Ordering::SeqCst), 1, "a wake was lost");
    assert!(deferred.is_empty(), "the panic is raised once");
}

#[test]
fn a_second_orphan_keeps_both_memories_and_reaps_once() {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let second = Rc::new(RefCell::new(Vec::new()));
    let mut op = Lifecycle::Submitted;
    assert_eq!(
        drop_future(&mut op, Box::new(Recorder(seen.clone()))),
        OnDrop::NeedsCancel
    );
    assert_eq!(
        drop_future(&mut op, Box::new(Recorder(second.clone()))),
        OnDrop::AlreadyOrphaned
    );
    assert!(op.is_orphaned());
    assert_eq!(apply(&mut op, cqe(4, 0)), OnCqe::ReapedFinal);
    assert_eq!((seen.borrow().len(), second.borrow().len()), (1, 0));
}

#[test]
fn queued_counts_unpolled_cqes() {
    let (_, waker) = counting_waker();
    let mut op = Lifecycle::Submitted;
    assert_eq!(op.queued(), 0);
    apply(&mut op, cqe(1, F_MORE));
    apply(&mut op, cqe(2, F_MORE));
    assert_eq!(op.queued(), 2);
    assert!(poll(&mut op, &waker).is_ready());
    assert_eq!(op.queued(), 1);
}

/// A panic payload whose drop panics again.
struct PanicsAgain;

impl Drop for PanicsAgain {
    fn drop(&mut self) {
        panic!("the payload panicked as it was dropped");
    }
}

/// An orphan whose `reap` panics with a [`PanicsAgain`].
struct PanicOnReap;

impl Orphan for PanicOnReap {
    fn reap(&mut self, _cqe: &Cqe, _deferred: &mut Deferred) {
        std::panic::panic_any(PanicsAgain);
    }
}

/// Two panicking `reap`s whose payloads panic again as they drop: the first is kept for
/// `run`, the second's payload is dropped in a catch of its own (and so is the string its
/// drop panics with), so neither unwinds out of `on_cqe`, where the table is mid-dispatch
/// (review M). Nothing leaks: it runs under Miri and LeakSanitizer.
#[test]
fn a_second_reap_panic_whose_payload_panics_stays_inside() {
    let mut deferred = Deferred::default();
    let mut op = Lifecycle::Submitted;
    assert_eq!(
        op.on_drop(Box::new(PanicOnReap), &mut deferred),
        OnDrop::NeedsCancel
    );
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let cqes = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: the orphan releases nothing real.
        let more = unsafe { op.on_cqe(cqe(1, F_MORE), &mut deferred) };
        // SAFETY: as above.
        let last = unsafe { op.on_cqe(cqe(-libc::ECANCELED, 0), &mut deferred) };
        (more, last)
    }));
    // The first payload comes out of `run`; it panics as it drops, with a string.
    let raised_panics_again = run_raises_a_payload_that_panics_again(&mut deferred);
    std::panic::set_hook(previous);
    assert!(
        raised_panics_again,
        "the first payload was not the one that panics"
    );
    assert_eq!(
        cqes.ok(),
        Some((OnCqe::Reaped, OnCqe::ReapedFinal)),
        "a reap's panic unwound out of on_cqe"
    );
}

/// Review BG: two queues each holding a reap's panic, one appended to the other (the
/// runtime appends what a backend call deferred to its worker's queue, under that queue's
/// borrow). Only the first is kept; the second's payload, which panics as it drops, was
/// dropped by `Option::get_or_insert`, its panic unwinding out of `append`.
#[test]
fn appending_a_second_reap_panic_drops_its_payload_inside() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let (mut first, mut second) = (Deferred::default(), Deferred::default());
    first.reap(&mut PanicOnReap, &cqe(0, 0));
    second.reap(&mut PanicOnReap, &cqe(0, 0));
    let appended = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        first.append(&mut second);
    }));
    let raised_panics_again = run_raises_a_payload_that_panics_again(&mut first);
    std::panic::set_hook(previous);
    assert!(
        appended.is_ok(),
        "the second payload's panic unwound out of append"
    );
    assert!(
        raised_panics_again,
        "the kept payload was not the one that panics"
    );
}

/// Runs `deferred`, which must raise the panic a reap left (the first one kept); true if
/// that payload panics in turn as it drops (a [`PanicsAgain`]).
fn run_raises_a_payload_that_panics_again(deferred: &mut Deferred) -> bool {
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| deferred.run()));
    let raised = ran.expect_err("the first panic was swallowed");
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(raised))).is_err()
}
