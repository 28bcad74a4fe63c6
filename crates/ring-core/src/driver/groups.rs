//! The driver's provided-buffer groups: registration, publishing returns, legacy re-provides.

use std::io;

use io_uring::opcode;
use slab::Slab;

use super::Driver;
use crate::buf_pool::{BufGroup, BufMode, ProvideRun};
use crate::cqe::Cqe;
use crate::errno;
use crate::metrics::Metrics;
use crate::probe::Feature;
use crate::user_data::{self, UserData};

/// Groups registered on one ring. Each keeps its memory alive for as long as the driver:
/// the kernel may write into any buffer still in its ring until the ring is gone.
#[derive(Default)]
pub(super) struct Groups {
    list: Vec<BufGroup>,
    next_bgid: u16,
    /// Any group uses legacy PROVIDE_BUFFERS (so pushes check for queued returns).
    has_legacy: bool,
    /// The runs of the last re-provide, kept for their memory: a `Vec` per re-provide was
    /// an allocation per returned buffer.
    runs: Vec<ProvideRun>,
    /// Legacy `PROVIDE_BUFFERS` SQEs whose CQE has not come, by the number their
    /// `user_data` carries: a failed one puts its run back. They are not ops: nobody awaits
    /// them, and an op's table slot and boxed orphan per provide were an allocation per
    /// returned buffer. A slot is freed only by its own CQE (a provide completes once), so
    /// a number is never taken for another provide's while one is in flight.
    provides: Slab<Provide>,
}

/// A legacy `PROVIDE_BUFFERS` in flight: the run it gives back to the kernel.
struct Provide {
    group: BufGroup,
    run: ProvideRun,
}

impl Groups {
    /// Keeps every group's memory forever: used when shutdown could not prove the kernel
    /// is done with it.
    pub(super) fn leak(&mut self) {
        for group in self.list.drain(..) {
            std::mem::forget(group);
        }
        for provide in self.provides.drain() {
            std::mem::forget(provide);
        }
    }

    /// Notes a provide of `run` from `group` about to be pushed; the number its SQE's
    /// `user_data` carries, or `None` when every number is taken (more provides in flight
    /// than a `user_data` can number, 2^29: the SQ and its backlog bound them far below).
    fn track_provide(&mut self, group: &BufGroup, run: ProvideRun) -> Option<u32> {
        let key = u32::try_from(self.provides.vacant_key())
            .ok()
            .filter(|&key| key <= user_data::PROVIDE_MAX)?;
        self.provides.insert(Provide {
            group: group.clone(),
            run,
        });
        Some(key)
    }

    /// The CQE of provide `key` came, with `res`: what the kernel did not take of the run
    /// goes back to its group's queue, for the next re-provide. False if no provide in
    /// flight has that number (a provide completes once: a second CQE is not the kernel's).
    fn finish_provide(&mut self, key: u32, res: i32) -> bool {
        let Some(provide) = self.provides.try_remove(key as usize) else {
            return false;
        };
        let ProvideRun { bid, nbufs } = provide.run;
        let taken = provided_of(res, nbufs, provide.group.bgid());
        if taken < nbufs {
            // SAFETY: `res` is this run's own PROVIDE_BUFFERS CQE's (its number stays taken
            // until that CQE); the kernel adds a run's bids in order and stops at the first
            // it cannot, so it holds none of the bids from `bid + taken` on.
            unsafe { provide.group.provide_failed(bid + taken, nbufs - taken) };
        }
        true
    }
}

impl Driver {
    /// Registers a group of `count` buffers of `buf_len` bytes for buffer-select ops:
    /// a buffer ring on 5.19+, legacy `PROVIDE_BUFFERS` on 5.7+, else `Unsupported`.
    pub fn register_buf_group(&mut self, count: u16, buf_len: u32) -> io::Result<BufGroup> {
        let bgid = self.groups.next_bgid;
        let group = if self.features.has(Feature::PbufRing) {
            // SAFETY: `Groups::list` keeps a handle to every group until the driver is
            // dropped, after shutdown has reaped every op (or leaked the groups), so the
            // registered memory outlives the kernel's use of it.
            unsafe { BufGroup::new_ring(&self.ring.submitter(), bgid, count, buf_len)? }
        } else if self.features.has_opcode(opcode::ProvideBuffers::CODE) {
            BufGroup::new_legacy(bgid, count, buf_len)?
        } else {
            return Err(errno::unsupported("provided buffers", "5.7"));
        };
        self.groups.next_bgid = bgid.checked_add(1).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::OutOfMemory,
                "all 65,536 buffer group ids are in use",
            )
        })?;
        self.groups.has_legacy |= group.mode() == BufMode::Legacy;
        self.groups.list.push(group.clone());
        Ok(group)
    }

    /// Legacy groups: provides returned buffers now, so an op pushed next (a recv retried
    /// after ENOBUFS) finds them. Free for buffer rings, which publish on return.
    pub(super) fn provide_queued(&mut self) {
        if !self.groups.has_legacy {
            return;
        }
        for i in 0..self.groups.list.len() {
            let group = self.groups.list[i].clone();
            if group.mode() == BufMode::Legacy && group.queued() > 0 {
                self.provide(&group);
            }
        }
    }

    /// Publishes buffers returned since the last turn: ring groups commit their staged
    /// entries, legacy groups get PROVIDE_BUFFERS SQEs for returned runs.
    pub(super) fn prepare_groups(&mut self) {
        for i in 0..self.groups.list.len() {
            let group = self.groups.list[i].clone();
            match group.mode() {
                BufMode::Ring => group.commit(),
                BufMode::Legacy => self.provide(&group),
                BufMode::User => {}
            }
        }
    }

    fn provide(&mut self, group: &BufGroup) {
        let mut runs = std::mem::take(&mut self.groups.runs);
        group.take_provide_runs_into(&mut runs);
        for &run in &runs {
            let Some(key) = self.groups.track_provide(group, run) else {
                // Put the run back for later.
                // SAFETY: no SQE was made, so the kernel holds none of its bids.
                unsafe { group.provide_failed(run.bid, run.nbufs) };
                continue;
            };
            let sqe = group
                .provide_sqe(run)
                .user_data(user_data::provide_user_data(key));
            // SAFETY: the SQE points into `group`'s memory, which `Groups::list` keeps until
            // the driver is dropped, after its ring; the kernel reads that address as it
            // runs the SQE and writes there only for the buffer-select ops that pick those
            // buffers, each an op of the table that shutdown waits for.
            unsafe { self.push(sqe) };
        }
        self.groups.runs = runs;
    }

    /// Takes the CQE of one of the driver's legacy provides; false if `cqe` is not one.
    pub(super) fn reap_provide(&mut self, cqe: &Cqe) -> bool {
        let UserData::Provide(key) = user_data::decode(cqe.user_data) else {
            return false;
        };
        if !self.groups.finish_provide(key, cqe.res) {
            Metrics::bump(&self.metrics.stale_cqes);
        }
        true
    }
}

/// How many of a run of `nbufs` bids for group `bgid` a `PROVIDE_BUFFERS` CQE's `res` says
/// the kernel took. An error: none. Kernels 5.7 to 5.18 answer how many they added to a
/// group they had, fewer than asked when an allocation failed part-way (the rest were lost
/// to the pool for good when every non-negative answer counted as all). Any other success
/// counts as all: 5.19+ answer 0; 5.13 to 5.18 answer 0 for a group they make anew (its last
/// buffer handed out, a group is gone until provided again); 5.7 to 5.12 answer such a
/// group's `bgid` (review BG: read as a count, bids the kernel held would be provided twice).
/// So an answer equal to `bgid` counts as all: a part taken that happens to number
/// `bgid` is lost, as every part was before.
fn provided_of(res: i32, nbufs: u16, bgid: u16) -> u16 {
    match u16::try_from(res) {
        Err(_) if res < 0 => 0,
        Ok(taken) if taken > 0 && taken < nbufs && taken != bgid => taken,
        _ => nbufs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A legacy group of 4 buffers, its one run taken to be provided.
    fn group_and_run() -> (BufGroup, ProvideRun) {
        let group = BufGroup::new_legacy(0, 4, 64).expect("a legacy group");
        let mut runs = Vec::new();
        group.take_provide_runs_into(&mut runs);
        assert_eq!(runs.len(), 1, "4 fresh bids are one run");
        assert_eq!(group.queued(), 0);
        (group, runs[0])
    }

    /// As `group_and_run`, the run tracked as pushed: the group, the books, its number.
    fn tracked_run() -> (BufGroup, Groups, u32) {
        let (group, run) = group_and_run();
        let mut groups = Groups::default();
        let key = groups.track_provide(&group, run).expect("a number");
        (group, groups, key)
    }

    #[test]
    fn a_refused_provide_puts_its_run_back_once() {
        let (group, mut groups, key) = tracked_run();
        assert!(groups.finish_provide(key, -libc::ENOMEM));
        assert_eq!(group.queued(), 4, "the refused run is queued again");
        // A second CQE under that number is not the kernel's: nothing is given back twice.
        assert!(!groups.finish_provide(key, -libc::ENOMEM));
        assert_eq!(group.queued(), 4);
    }

    /// Review BF: kernels before 5.19 answer how many bids they added; fewer than the run
    /// (an allocation failed part-way) left the rest nobody's, for good.
    #[test]
    fn a_provide_the_kernel_took_in_part_puts_the_rest_back() {
        let (group, mut groups, key) = tracked_run();
        assert!(groups.finish_provide(key, 1));
        assert_eq!(
            group.queued(),
            3,
            "the 3 bids the kernel did not add are queued again"
        );
        let mut runs = Vec::new();
        group.take_provide_runs_into(&mut runs);
        assert_eq!(
            runs,
            [ProvideRun { bid: 1, nbufs: 3 }],
            "the rest of the run, from the first bid not added"
        );
    }

    #[test]
    fn provide_answers_count_as_the_kernels_mean_them() {
        assert_eq!(provided_of(-libc::ENOMEM, 4, 0), 0);
        assert_eq!(provided_of(0, 4, 0), 4, "5.19+: 0 is success");
        assert_eq!(provided_of(4, 4, 0), 4, "5.7-5.18: the count added");
        assert_eq!(provided_of(3, 4, 0), 3);
        assert_eq!(provided_of(i32::MAX, 4, 0), 4);
        // Review BG: 5.7-5.12 answer a group made anew with its bgid.
        assert_eq!(provided_of(2, 4, 2), 4, "a new group's bgid is no count");
        assert_eq!(provided_of(3, 4, 2), 3);
    }

    #[test]
    fn a_provide_that_succeeded_leaves_its_run_with_the_kernel() {
        let (group, mut groups, key) = tracked_run();
        assert!(groups.finish_provide(key, 0));
        assert_eq!(group.queued(), 0);
        assert!(groups.provides.is_empty(), "its number is free again");
    }

    #[test]
    fn provides_in_flight_have_numbers_of_their_own() {
        let (group, run) = group_and_run();
        let mut groups = Groups::default();
        let keys: Vec<u32> = (0..3)
            .map(|_| groups.track_provide(&group, run).expect("a number"))
            .collect();
        assert_eq!(keys, [0, 1, 2]);
        assert!(groups.finish_provide(1, 0));
        assert_eq!(
            groups.track_provide(&group, run),
            Some(1),
            "a freed number is reused"
        );
    }
}
