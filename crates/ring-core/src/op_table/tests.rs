//! Unit and property tests of the op table; pure, so they also run under Miri.

use super::*;

use crate::cqe::F_MORE;
use crate::release::Keep;
use proptest::prelude::*;
use std::cell::Cell;
use std::rc::Rc;
use std::task::Waker;

fn cqe_for(id: OpId, res: i32, flags: u32) -> Cqe {
    Cqe::new(id.to_user_data(), res, flags)
}

/// Delivers `cqe` and runs what it deferred, as the table's owner does after a turn.
fn complete(table: &mut OpTable, cqe: Cqe) -> Dispatch {
    // SAFETY: the tests' orphans only count what they reap; no fd or bid is real.
    let out = unsafe { table.complete(cqe) };
    let mut deferred = Deferred::default();
    table.take_deferred(&mut deferred);
    deferred.run();
    out
}

#[test]
fn bounded_multishot_asks_for_a_cancel_once_at_its_bound() {
    let mut table = OpTable::new();
    let id = table.insert().unwrap();
    table.bound_queue(id, 3);
    assert_eq!(
        complete(&mut table, cqe_for(id, 1, F_MORE)),
        Dispatch::Delivered
    );
    assert_eq!(
        complete(&mut table, cqe_for(id, 2, F_MORE)),
        Dispatch::Delivered
    );
    assert_eq!(
        complete(&mut table, cqe_for(id, 3, F_MORE)),
        Dispatch::QueueFull
    );
    // CQEs that beat the cancel are still queued, and the cancel is not asked for again.
    assert_eq!(
        complete(&mut table, cqe_for(id, 4, F_MORE)),
        Dispatch::Delivered
    );
    assert_eq!(
        complete(&mut table, cqe_for(id, -libc::ECANCELED, 0)),
        Dispatch::Delivered
    );
    let mut got = Vec::new();
    while let Poll::Ready(cqe) = table.poll(id, Waker::noop()) {
        got.push(cqe.unwrap().res);
        if !table.contains(id) {
            break;
        }
    }
    assert_eq!(got, [1, 2, 3, 4, -libc::ECANCELED]);
    assert!(table.is_empty());
}

#[test]
fn polling_an_orphaned_op_is_an_error_not_a_panic() {
    let mut table = OpTable::new();
    let id = table.insert().unwrap();
    orphan(&mut table, id, Box::new(Keep(()))).unwrap();
    let polled = table.poll(id, Waker::noop());
    assert!(matches!(polled, Poll::Ready(Err(_))));
    assert!(
        table.contains(id),
        "the orphan still waits for its final CQE"
    );
}

#[test]
fn an_orphan_that_is_done_is_dropped_by_the_owner_not_the_table() {
    struct DropFlag(Rc<Cell<bool>>);
    impl Orphan for DropFlag {
        fn reap(&mut self, _cqe: &Cqe, _deferred: &mut Deferred) {}
    }
    impl Drop for DropFlag {
        fn drop(&mut self) {
            self.0.set(true);
        }
    }
    let mut table = OpTable::new();
    let id = table.insert().unwrap();
    complete(&mut table, cqe_for(id, 4, 0));
    let dropped = Rc::new(Cell::new(false));
    let out = orphan(&mut table, id, Box::new(DropFlag(dropped.clone()))).unwrap();
    assert_eq!(out, Orphaned::Freed);
    assert!(!dropped.get() && table.has_deferred());
    let mut deferred = Deferred::default();
    table.take_deferred(&mut deferred);
    deferred.run();
    assert!(dropped.get());
}

#[test]
fn stale_user_data_is_detected_after_slot_reuse() {
    let mut table = OpTable::new();
    let old = table.insert().unwrap();
    complete(&mut table, cqe_for(old, 1, 0));
    assert!(table.poll(old, Waker::noop()).is_ready());
    let new = table.insert().unwrap();
    assert_eq!(new.index, old.index, "slab reuses the freed slot");
    assert_ne!(new.generation, old.generation);
    assert_eq!(complete(&mut table, cqe_for(old, 2, 0)), Dispatch::Stale);
    assert!(
        table.poll(new, Waker::noop()).is_pending(),
        "new op untouched"
    );
    assert!(
        table.poll(old, Waker::noop()).is_ready(),
        "old id is an error"
    );
}

#[test]
fn reserved_and_unknown_user_data_are_not_ops() {
    let mut table = OpTable::new();
    let cancel = Cqe::new(Reserved::Cancel.to_user_data(), 0, 0);
    assert_eq!(
        complete(&mut table, cancel),
        Dispatch::Reserved(Reserved::Cancel)
    );
    let unknown = Cqe::new((77u64 << 32) | u64::from(u32::MAX), 0, 0);
    assert_eq!(complete(&mut table, unknown), Dispatch::Unknown);
    assert_eq!(
        complete(&mut table, Cqe::new(12345, 0, 0)),
        Dispatch::Stale,
        "never inserted"
    );
}

#[test]
fn multishot_slot_is_freed_only_by_final_cqe() {
    let mut table = OpTable::new();
    let id = table.insert().unwrap();
    for i in 0..5 {
        complete(&mut table, cqe_for(id, i, F_MORE));
    }
    for _ in 0..5 {
        assert!(table.poll(id, Waker::noop()).is_ready());
        assert!(table.contains(id));
    }
    complete(&mut table, cqe_for(id, 99, 0));
    assert!(table.contains(id));
    assert!(table.poll(id, Waker::noop()).is_ready());
    assert!(!table.contains(id));
    assert!(table.is_empty());
}

struct CountReaps(Rc<Cell<usize>>);

impl Orphan for CountReaps {
    fn reap(&mut self, _cqe: &Cqe, _deferred: &mut Deferred) {
        self.0.set(self.0.get() + 1);
    }
}

#[test]
fn orphan_is_reaped_by_late_cqe_then_freed() {
    let mut table = OpTable::new();
    let id = table.insert().unwrap();
    let reaps = Rc::new(Cell::new(0));
    let outcome = orphan(&mut table, id, Box::new(CountReaps(reaps.clone())));
    assert_eq!(outcome.unwrap(), Orphaned::NeedsCancel);
    assert_eq!(table.orphans(), 1);
    assert_eq!(
        complete(&mut table, cqe_for(id, 4, 0)),
        Dispatch::Reaped { freed: true }
    );
    assert_eq!(reaps.get(), 1);
    assert!(table.is_empty());
}

#[test]
fn orphan_of_completed_op_frees_at_once() {
    let mut table = OpTable::new();
    let id = table.insert().unwrap();
    complete(&mut table, cqe_for(id, 4, 0));
    let outcome = orphan(&mut table, id, Box::new(Keep(()))).unwrap();
    assert_eq!(outcome, Orphaned::Freed);
    assert!(table.is_empty());
}

/// One step of a random schedule against the table.
#[derive(Clone, Debug)]
enum Step {
    Insert { multishot: bool },
    Poll(usize),
    Drop(usize),
    Cqe { op: usize, more: bool },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        any::<bool>().prop_map(|multishot| Step::Insert { multishot }),
        any::<usize>().prop_map(Step::Poll),
        any::<usize>().prop_map(Step::Drop),
        (any::<usize>(), any::<bool>()).prop_map(|(op, more)| Step::Cqe { op, more }),
    ]
}

/// The model: what the kernel and the future each still hold for one op.
struct ModelOp {
    id: OpId,
    multishot: bool,
    kernel_done: bool,
    future_alive: bool,
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: if cfg!(miri) { 4 } else { 256 },
        // No regression files: they need the filesystem, which Miri's isolation forbids.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    /// Random orders of submit, poll, drop and CQE arrival: every orphan is reaped, a slot
    /// lives exactly until its final CQE was consumed, and nothing is delivered twice.
    #[test]
    fn random_schedules_keep_table_consistent(steps in prop::collection::vec(step(), 1..64)) {
        let mut table = OpTable::new();
        let mut ops: Vec<ModelOp> = Vec::new();
        let reaps = Rc::new(Cell::new(0usize));
        let mut late_cqes = 0usize;
        for s in steps {
            apply(&mut table, &mut ops, &reaps, &mut late_cqes, s);
            let live = ops.iter().filter(|op| table.contains(op.id)).count();
            prop_assert_eq!(live, table.len());
        }
        for op in ops.iter_mut().filter(|op| !op.kernel_done) {
            if !op.future_alive {
                late_cqes += 1;
            }
            complete(&mut table, cqe_for(op.id, -libc::ECANCELED, 0));
            op.kernel_done = true;
        }
        for op in ops.iter().filter(|op| op.future_alive) {
            while table.contains(op.id) {
                prop_assert!(table.poll(op.id, Waker::noop()).is_ready());
            }
        }
        prop_assert!(table.is_empty());
        prop_assert_eq!(reaps.get(), late_cqes);
    }
}

fn apply(
    table: &mut OpTable,
    ops: &mut Vec<ModelOp>,
    reaps: &Rc<Cell<usize>>,
    late_cqes: &mut usize,
    step: Step,
) {
    let n = ops.len();
    match step {
        Step::Insert { multishot } => ops.push(ModelOp {
            id: table.insert().unwrap(),
            multishot,
            kernel_done: false,
            future_alive: true,
        }),
        Step::Poll(i) if n > 0 => {
            let op = &ops[i % n];
            if op.future_alive && table.contains(op.id) {
                let _ = table.poll(op.id, Waker::noop());
            }
        }
        Step::Drop(i) if n > 0 => {
            let op = &mut ops[i % n];
            if op.future_alive && table.contains(op.id) {
                let queued_before = reaps.get();
                orphan(table, op.id, Box::new(CountReaps(reaps.clone()))).unwrap();
                *late_cqes += reaps.get() - queued_before;
                op.future_alive = false;
            } else {
                op.future_alive = false;
            }
        }
        Step::Cqe { op: i, more } if n > 0 => {
            let op = &mut ops[i % n];
            if op.kernel_done {
                return;
            }
            let more = more && op.multishot;
            let dispatch = complete(table, cqe_for(op.id, 1, if more { F_MORE } else { 0 }));
            if !op.future_alive {
                *late_cqes += 1;
                assert!(matches!(dispatch, Dispatch::Reaped { .. }));
            }
            op.kernel_done = !more;
        }
        _ => {}
    }
}

/// Orphans `id` in a test table.
fn orphan(table: &mut OpTable, id: OpId, o: Box<dyn Orphan>) -> std::io::Result<Orphaned> {
    // SAFETY: these tables hold no SQE in a kernel: no memory is at stake.
    unsafe { table.orphan(id, o) }
}

#[test]
fn awaits_kernel_for_follows_the_final_cqe_not_the_poll() {
    let mut table = OpTable::new();
    let id = table.insert().unwrap();
    assert!(table.awaits_kernel_for(id));
    complete(&mut table, cqe_for(id, 1, F_MORE));
    assert!(table.awaits_kernel_for(id), "more CQEs are coming");
    complete(&mut table, cqe_for(id, 2, 0));
    assert!(table.contains(id) && !table.awaits_kernel_for(id));
    assert!(table.poll(id, Waker::noop()).is_ready());
    assert!(table.poll(id, Waker::noop()).is_ready());
    assert!(!table.contains(id) && !table.awaits_kernel_for(id));
}
