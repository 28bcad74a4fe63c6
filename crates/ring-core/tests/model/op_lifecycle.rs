//! The op table (and so every [`Lifecycle`](ring_core::lifecycle::Lifecycle) transition)
//! against a model of what the kernel and each future still hold, for any order of submit,
//! poll, drop, CQE arrival, multishot CQEs, late CQEs after a drop, stale and reserved
//! `user_data`.
//!
//! Invariants checked after every step: the table holds exactly the ops whose final CQE has
//! not been consumed; `orphans()` and `awaiting_kernel()` match the model; a poll returns the
//! oldest unpolled CQE, unchanged; a CQE for a waiting future wakes the waker it registered
//! last, exactly once (no lost or doubled wake-up); a CQE for a dropped future is reaped by
//! its orphan; a stale or reserved CQE touches no op. At the end every CQE posted was either
//! delivered to its future or reaped by its orphan, exactly once, in order.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Poll, Wake, Waker};

use ring_core::cqe::{Cqe, F_MORE};
use ring_core::lifecycle::{Deferred, Orphan};
use ring_core::op_table::{Dispatch, OpTable, Orphaned};
use ring_core::user_data::{OpId, Reserved};

use super::Bytes;

/// Most ops one schedule inserts; later inserts are skipped.
const OPS_MAX: usize = 48;
/// Distinct wakers a future may poll with (a task moved between executors re-polls with
/// another waker).
const WAKERS: usize = 3;

/// A waker that counts how often it was woken.
#[derive(Default)]
struct Counter(AtomicUsize);

impl Wake for Counter {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// Hands `cqe` to the table as the driver does.
fn deliver(table: &mut OpTable, cqe: Cqe) -> Dispatch {
    // SAFETY: the model's orphans only record what they reap; no fd or bid is real.
    unsafe { table.complete(cqe) }
}

/// Runs what the table deferred, as its owner does once it lets go of it.
fn run_deferred(table: &mut OpTable) {
    let mut deferred = Deferred::default();
    table.take_deferred(&mut deferred);
    deferred.run();
}

/// Checks that delivering a CQE woke nobody inside the table (a waker may call back into
/// the table's owner), then runs what it deferred.
fn check_nothing_ran(
    table: &mut OpTable,
    wakers: &[(Arc<Counter>, Waker)],
    before: &[usize],
    step: usize,
) {
    assert_eq!(
        wake_counts(wakers),
        before,
        "step {step}: a waker ran inside the table"
    );
    run_deferred(table);
}

/// CQEs reaped by orphans: (model op index, CQE), in reap order.
type ReapLog = Rc<RefCell<Vec<(usize, Cqe)>>>;

/// The release step under test: records every CQE it reaps.
struct Recorder {
    op: usize,
    log: ReapLog,
}

impl Orphan for Recorder {
    fn reap(&mut self, cqe: &Cqe, _deferred: &mut Deferred) {
        self.log.borrow_mut().push((self.op, *cqe));
    }
}

/// What the model knows about one op.
struct ModelOp {
    id: OpId,
    multishot: bool,
    /// The final CQE (no `F_MORE`) was posted.
    kernel_done: bool,
    /// The future has not been dropped.
    future_alive: bool,
    /// The slot must exist: its final CQE has not been consumed by a poll or an orphan.
    live: bool,
    /// Posted CQEs the future has not polled yet, oldest first.
    queued: VecDeque<Cqe>,
    /// The waker the table must wake on the next CQE.
    waiting: Option<usize>,
    /// CQEs the orphan must reap, in order.
    reaps_due: Vec<Cqe>,
    posted: usize,
    delivered: usize,
}

/// The table under test and the model it is checked against.
pub struct Checker {
    table: OpTable,
    ops: Vec<ModelOp>,
    wakers: Vec<(Arc<Counter>, Waker)>,
    log: ReapLog,
    step: usize,
}

/// Runs the schedule `data` encodes, then completes and drains every op; panics on the
/// first broken invariant.
pub fn run(data: &[u8]) {
    let mut checker = Checker::new();
    let mut bytes = Bytes::new(data);
    while !bytes.is_empty() {
        checker.step(&mut bytes);
        checker.check_table();
    }
    checker.finish();
}

impl Checker {
    fn new() -> Checker {
        let wakers = (0..WAKERS)
            .map(|_| {
                let counter = Arc::new(Counter::default());
                (counter.clone(), Waker::from(counter))
            })
            .collect();
        Checker {
            table: OpTable::new(),
            ops: Vec::new(),
            wakers,
            log: Rc::default(),
            step: 0,
        }
    }

    fn step(&mut self, bytes: &mut Bytes) {
        self.step += 1;
        let code = bytes.u8() % 9;
        if code < 2 {
            let multishot = bytes.bool();
            return self.insert(multishot);
        }
        if self.ops.is_empty() {
            return;
        }
        let op = bytes.below(self.ops.len());
        match code {
            2 | 3 => {
                let waker = bytes.below(WAKERS);
                self.poll(op, waker);
            }
            4 => self.drop_future(op),
            5 | 6 => {
                let more = bytes.bool();
                let res = result(bytes.u8());
                self.cqe(op, more, res);
            }
            7 => self.stale(op),
            _ => self.reserved(bytes.u8()),
        }
    }

    fn insert(&mut self, multishot: bool) {
        if self.ops.len() >= OPS_MAX {
            return;
        }
        let id = self.table.insert().expect("insert into a small table");
        for old in &self.ops {
            assert!(
                !(old.live && old.id == id),
                "step {}: id {id:?} handed out while still live",
                self.step
            );
        }
        self.ops.push(ModelOp {
            id,
            multishot,
            kernel_done: false,
            future_alive: true,
            live: true,
            queued: VecDeque::new(),
            waiting: None,
            reaps_due: Vec::new(),
            posted: 0,
            delivered: 0,
        });
    }

    fn poll(&mut self, i: usize, w: usize) {
        let step = self.step;
        let op = &mut self.ops[i];
        if !op.future_alive {
            // A dropped future cannot poll; the table documents this as unreachable.
            return;
        }
        let polled = self.table.poll(op.id, &self.wakers[w].1);
        // A waker the poll replaced is dropped by the owner, as the runtime does.
        run_deferred(&mut self.table);
        if !op.live {
            match polled {
                Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::InvalidInput => return,
                other => panic!("step {step}: poll after the final CQE gave {other:?}"),
            }
        }
        let Some(want) = op.queued.pop_front() else {
            assert!(
                polled.is_pending(),
                "step {step}: op {i} ready with nothing posted: {polled:?}"
            );
            op.waiting = Some(w);
            return;
        };
        match polled {
            Poll::Ready(Ok(got)) => assert_eq!(got, want, "step {step}: op {i} got the wrong CQE"),
            other => panic!("step {step}: op {i} had {want:?} queued, poll gave {other:?}"),
        }
        op.delivered += 1;
        op.waiting = None;
        if !want.is_more() {
            op.live = false;
        }
    }

    fn drop_future(&mut self, i: usize) {
        let step = self.step;
        let orphan = Box::new(Recorder {
            op: i,
            log: self.log.clone(),
        });
        let op = &mut self.ops[i];
        if !op.future_alive {
            return;
        }
        op.future_alive = false;
        op.waiting = None;
        // SAFETY: the model's ops have no SQE in a kernel; the id is the model future's own.
        let outcome = unsafe { self.table.orphan(op.id, orphan) };
        run_deferred(&mut self.table);
        if !op.live {
            assert!(
                outcome.is_err(),
                "step {step}: orphaning a finished op gave {outcome:?}"
            );
            return;
        }
        // CQEs already queued are reaped at once; the final among them frees the slot.
        let finished = op.queued.back().is_some_and(|c| !c.is_more());
        op.reaps_due.extend(op.queued.drain(..));
        let want = if finished {
            op.live = false;
            Orphaned::Freed
        } else {
            Orphaned::NeedsCancel
        };
        assert_eq!(
            outcome.expect("live op"),
            want,
            "step {step}: op {i} orphan outcome"
        );
    }

    fn cqe(&mut self, i: usize, more: bool, res: i32) {
        let step = self.step;
        let op = &mut self.ops[i];
        if op.kernel_done {
            return;
        }
        let more = more && op.multishot;
        let cqe = Cqe::new(op.id.to_user_data(), res, if more { F_MORE } else { 0 });
        let wakes_before = wake_counts(&self.wakers);
        let dispatch = deliver(&mut self.table, cqe);
        check_nothing_ran(&mut self.table, &self.wakers, &wakes_before, self.step);
        let wakes = wake_counts(&self.wakers);
        op.kernel_done = !more;
        op.posted += 1;
        if op.future_alive {
            assert_eq!(dispatch, Dispatch::Delivered, "step {step}: op {i}");
            op.queued.push_back(cqe);
            let mut want = wakes_before;
            if let Some(w) = op.waiting.take() {
                want[w] += 1;
            }
            assert_eq!(
                wakes, want,
                "step {step}: op {i} wake-ups (waiting on {:?})",
                op.waiting
            );
        } else {
            assert_eq!(
                dispatch,
                Dispatch::Reaped { freed: !more },
                "step {step}: orphan {i}"
            );
            assert_eq!(
                wakes, wakes_before,
                "step {step}: an orphan's CQE woke a waker"
            );
            op.reaps_due.push(cqe);
            op.live = more;
        }
    }

    /// A CQE for an op whose slot was already freed: stale, and nothing else changes.
    fn stale(&mut self, i: usize) {
        let op = &self.ops[i];
        if op.live {
            return;
        }
        let before = (
            self.table.len(),
            wake_counts(&self.wakers),
            self.log.borrow().len(),
        );
        let dispatch = deliver(&mut self.table, Cqe::new(op.id.to_user_data(), 1, 0));
        run_deferred(&mut self.table);
        assert_eq!(
            dispatch,
            Dispatch::Stale,
            "step {}: late CQE for op {i}",
            self.step
        );
        let after = (
            self.table.len(),
            wake_counts(&self.wakers),
            self.log.borrow().len(),
        );
        assert_eq!(
            before, after,
            "step {}: a stale CQE changed something",
            self.step
        );
    }

    fn reserved(&mut self, pick: u8) {
        let kinds = [
            Reserved::Cancel,
            Reserved::Timeout,
            Reserved::Wake,
            Reserved::Ignore,
        ];
        let (user_data, want) = match kinds.get(usize::from(pick % 5)) {
            Some(&r) => (r.to_user_data(), Dispatch::Reserved(r)),
            None => (
                (u64::from(pick) + 100) << 32 | u64::from(u32::MAX),
                Dispatch::Unknown,
            ),
        };
        let len = self.table.len();
        assert_eq!(deliver(&mut self.table, Cqe::new(user_data, 0, 0)), want);
        assert!(!self.table.has_deferred(), "a reserved CQE deferred work");
        assert_eq!(self.table.len(), len, "a reserved CQE changed the table");
    }

    fn check_table(&self) {
        let step = self.step;
        let live = self.ops.iter().filter(|op| op.live);
        assert_eq!(self.table.len(), live.clone().count(), "step {step}: len");
        let orphans = live.clone().filter(|op| !op.future_alive).count();
        assert_eq!(self.table.orphans(), orphans, "step {step}: orphans");
        let awaiting = live.clone().filter(|op| !op.kernel_done).count();
        assert_eq!(
            self.table.awaiting_kernel(),
            awaiting,
            "step {step}: awaiting_kernel"
        );
        for (i, op) in self.ops.iter().enumerate() {
            assert_eq!(
                self.table.contains(op.id),
                op.live,
                "step {step}: contains op {i}"
            );
        }
        let mut ids = self.table.ids();
        let mut want: Vec<OpId> = live.map(|op| op.id).collect();
        ids.sort_by_key(|id| id.index);
        want.sort_by_key(|id| id.index);
        assert_eq!(ids, want, "step {step}: ids");
    }

    /// Shutdown: the kernel posts every outstanding final CQE (cancelled), every live
    /// future polls until its final CQE; then nothing may remain and nothing be lost.
    fn finish(mut self) {
        for i in 0..self.ops.len() {
            if !self.ops[i].kernel_done {
                self.cqe(i, false, -libc::ECANCELED);
            }
        }
        for i in 0..self.ops.len() {
            while self.ops[i].live && self.ops[i].future_alive {
                self.poll(i, 0);
            }
        }
        self.check_table();
        assert!(self.table.is_empty(), "slots left after every final CQE");
        let log = self.log.borrow();
        for (i, op) in self.ops.iter().enumerate() {
            let reaped: Vec<Cqe> = log
                .iter()
                .filter(|(o, _)| *o == i)
                .map(|(_, c)| *c)
                .collect();
            assert_eq!(reaped, op.reaps_due, "op {i}: orphan reaped the wrong CQEs");
            assert_eq!(
                op.posted,
                op.delivered + reaped.len(),
                "op {i}: CQEs posted vs delivered + reaped"
            );
        }
    }
}

/// One step of a schedule, for writing schedules by hand; [`encode`] gives the bytes
/// [`run`] reads back as these steps.
#[derive(Clone, Copy, Debug)]
pub enum Step {
    Insert {
        multishot: bool,
    },
    Poll {
        op: u16,
        waker: u16,
    },
    Drop {
        op: u16,
    },
    /// `res_code` as [`result`] maps it: 0 -> 0, 1 -> -ECANCELED, 2 -> -ENOBUFS, 6.. -> itself.
    Cqe {
        op: u16,
        more: bool,
        res_code: u8,
    },
    Stale {
        op: u16,
    },
    Reserved {
        pick: u8,
    },
}

/// The bytes [`run`] decodes as `steps` (op indexes count inserts, from 0).
pub fn encode(steps: &[Step]) -> Vec<u8> {
    let mut out = Vec::new();
    for step in steps {
        match *step {
            Step::Insert { multishot } => out.extend([0, u8::from(multishot)]),
            Step::Poll { op, waker } => {
                out.push(2);
                out.extend(op.to_le_bytes());
                out.extend(waker.to_le_bytes());
            }
            Step::Drop { op } => {
                out.push(4);
                out.extend(op.to_le_bytes());
            }
            Step::Cqe { op, more, res_code } => {
                out.push(5);
                out.extend(op.to_le_bytes());
                out.extend([u8::from(more), res_code]);
            }
            Step::Stale { op } => {
                out.push(7);
                out.extend(op.to_le_bytes());
            }
            Step::Reserved { pick } => out.extend([8, 0, 0, pick]),
        }
    }
    out
}

fn wake_counts(wakers: &[(Arc<Counter>, Waker)]) -> Vec<usize> {
    wakers
        .iter()
        .map(|(c, _)| c.0.load(Ordering::Relaxed))
        .collect()
}

/// A CQE result: byte counts, zero (EOF), fds, and the errnos late completions carry.
fn result(b: u8) -> i32 {
    match b % 6 {
        0 => 0,
        1 => -libc::ECANCELED,
        2 => -libc::ENOBUFS,
        3 => -libc::EAGAIN,
        _ => i32::from(b),
    }
}
