//! Unit tests of the op lifecycle; pure, so they also run under Miri.

use super::*;
use crate::cqe::F_MORE;
use std::cell::RefCell;
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
    fn reap(&mut self, cqe: &Cqe) {
        self.0.borrow_mut().push(cqe.res);
    }
}

fn cqe(res: i32, flags: u32) -> Cqe {
    Cqe::new(0, res, flags)
}

#[test]
fn single_shot_wakes_once_and_delivers() {
    let (count, waker) = counting_waker();
    let mut op = Lifecycle::Submitted;
    assert_eq!(op.poll_next(&waker), Poll::Pending);
    assert_eq!(op.on_cqe(cqe(5, 0)), OnCqe::Queued);
    assert_eq!(count.0.load(Ordering::SeqCst), 1);
    assert_eq!(op.poll_next(&waker), Poll::Ready(cqe(5, 0)));
}

#[test]
fn completion_before_first_poll_is_kept() {
    let (_, waker) = counting_waker();
    let mut op = Lifecycle::Submitted;
    op.on_cqe(cqe(3, 0));
    assert_eq!(op.poll_next(&waker), Poll::Ready(cqe(3, 0)));
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
    op.on_cqe(cqe(1, F_MORE));
    op.on_cqe(cqe(2, F_MORE));
    op.on_cqe(cqe(3, 0));
    assert!(matches!(op, Lifecycle::Multishot(_)));
    assert_eq!(op.poll_next(&waker), Poll::Ready(cqe(1, F_MORE)));
    assert_eq!(op.poll_next(&waker), Poll::Ready(cqe(2, F_MORE)));
    assert_eq!(op.poll_next(&waker), Poll::Ready(cqe(3, 0)));
    assert_eq!(count.0.load(Ordering::SeqCst), 0);
}

#[test]
fn multishot_consumer_is_woken_per_cqe() {
    let (count, waker) = counting_waker();
    let mut op = Lifecycle::Submitted;
    op.on_cqe(cqe(1, F_MORE));
    assert_eq!(op.poll_next(&waker), Poll::Ready(cqe(1, F_MORE)));
    assert_eq!(op.poll_next(&waker), Poll::Pending);
    op.on_cqe(cqe(2, F_MORE));
    assert_eq!(count.0.load(Ordering::SeqCst), 1);
}

#[test]
fn drop_in_flight_orphans_and_reaps_late_cqes() {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let mut op = Lifecycle::Submitted;
    assert_eq!(
        op.on_drop(Box::new(Recorder(seen.clone()))),
        OnDrop::NeedsCancel
    );
    assert!(op.is_orphaned());
    assert_eq!(op.on_cqe(cqe(9, F_MORE)), OnCqe::Reaped);
    assert_eq!(op.on_cqe(cqe(-libc::ECANCELED, 0)), OnCqe::ReapedFinal);
    assert_eq!(*seen.borrow(), vec![9, -libc::ECANCELED]);
}

#[test]
fn drop_after_completion_reaps_immediately() {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let mut op = Lifecycle::Submitted;
    op.on_cqe(cqe(7, 0));
    assert_eq!(
        op.on_drop(Box::new(Recorder(seen.clone()))),
        OnDrop::Finished
    );
    assert_eq!(*seen.borrow(), vec![7]);
}

#[test]
fn drop_with_queued_multishot_cqes_reaps_them_and_waits_for_final() {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let mut op = Lifecycle::Submitted;
    op.on_cqe(cqe(1, F_MORE));
    op.on_cqe(cqe(2, F_MORE));
    assert_eq!(
        op.on_drop(Box::new(Recorder(seen.clone()))),
        OnDrop::NeedsCancel
    );
    assert_eq!(op.on_cqe(cqe(3, 0)), OnCqe::ReapedFinal);
    assert_eq!(*seen.borrow(), vec![1, 2, 3]);
}

#[test]
fn same_waker_is_not_cloned_again() {
    let (_, waker) = counting_waker();
    let mut op = Lifecycle::Submitted;
    assert_eq!(op.poll_next(&waker), Poll::Pending);
    assert_eq!(op.poll_next(&waker), Poll::Pending);
    assert!(matches!(op, Lifecycle::Waiting(_)));
}
