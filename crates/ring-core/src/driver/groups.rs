//! The driver's provided-buffer groups: registration, publishing returns, legacy re-provides.

use std::io;

use io_uring::opcode;

use super::Driver;
use crate::buf_pool::{BufGroup, BufMode, ProvideRun};
use crate::cqe::Cqe;
use crate::errno;
use crate::lifecycle::{Deferred, Orphan};
use crate::probe::Feature;

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
}

impl Groups {
    /// Keeps every group's memory forever: used when shutdown could not prove the kernel
    /// is done with it.
    pub(super) fn leak(&mut self) {
        for group in self.list.drain(..) {
            std::mem::forget(group);
        }
    }
}

/// A legacy `PROVIDE_BUFFERS` SQE is an op nobody awaits: an orphan from the start, whose
/// release step puts the run back in the queue if the kernel refused it.
struct ProvideOrphan {
    group: BufGroup,
    run: ProvideRun,
}

impl Orphan for ProvideOrphan {
    fn reap(&mut self, cqe: &Cqe, _deferred: &mut Deferred) {
        if cqe.res < 0 {
            // SAFETY: this is the run's own PROVIDE_BUFFERS CQE, and it failed: the kernel
            // holds none of these bids.
            unsafe { self.group.provide_failed(self.run.bid, self.run.nbufs) };
        }
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
            let sqe = group.provide_sqe(run);
            // SAFETY: the SQE points into `group`'s memory, which `Groups::list` keeps until
            // the driver is dropped, after its ring and after shutdown reaped every op.
            let Ok(id) = (unsafe { self.submit_op(sqe) }) else {
                // Only an op table with 2^32 entries refuses: put the run back for later.
                // SAFETY: the SQE never reached the ring, so the kernel holds none of its bids.
                unsafe { group.provide_failed(run.bid, run.nbufs) };
                continue;
            };
            let orphan = ProvideOrphan {
                group: group.clone(),
                run,
            };
            self.ops_orphan_silently(id, Box::new(orphan));
        }
        self.groups.runs = runs;
    }
}
