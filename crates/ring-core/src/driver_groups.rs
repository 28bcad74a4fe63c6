//! The driver's provided-buffer groups: registration, publishing returns, legacy re-provides.

use std::io;

use io_uring::opcode;

use super::Driver;
use crate::buf_pool::{BufGroup, BufMode};
use crate::cqe::Cqe;
use crate::errno;
use crate::probe::Feature;
use crate::user_data::Reserved;

/// Groups registered on one ring. Each keeps its memory alive for as long as the driver:
/// the kernel may write into any buffer still in its ring until the ring is gone.
#[derive(Default)]
pub(super) struct Groups {
    list: Vec<BufGroup>,
    next_bgid: u16,
    /// Legacy PROVIDE_BUFFERS SQEs that failed (their bids are re-queued by the group).
    pub(super) provide_errors: u64,
}

impl Groups {
    /// Called for the CQE of a legacy `PROVIDE_BUFFERS` SQE.
    pub(super) fn on_provide_cqe(&mut self, cqe: &Cqe) {
        if cqe.res < 0 {
            self.provide_errors += 1;
        }
    }

    /// Keeps every group's memory forever: used when shutdown could not prove the kernel
    /// is done with it.
    pub(super) fn leak(&mut self) {
        for group in self.list.drain(..) {
            std::mem::forget(group);
        }
    }
}

impl Driver {
    /// Registers a group of `count` buffers of `buf_len` bytes for buffer-select ops:
    /// a buffer ring on 5.19+, legacy `PROVIDE_BUFFERS` on 5.7+, else `Unsupported`.
    pub fn register_buf_group(&mut self, count: u16, buf_len: u32) -> io::Result<BufGroup> {
        let bgid = self.groups.next_bgid;
        let group = if self.features.has(Feature::PbufRing) {
            BufGroup::new_ring(&self.ring.submitter(), bgid, count, buf_len)?
        } else if self.features.has_opcode(opcode::ProvideBuffers::CODE) {
            BufGroup::new_legacy(bgid, count, buf_len)?
        } else {
            return Err(errno::unsupported("provided buffers", "5.7"));
        };
        self.groups.next_bgid = bgid.checked_add(1).ok_or_else(|| {
            io::Error::new(io::ErrorKind::OutOfMemory, "all 65,536 buffer group ids are in use")
        })?;
        self.groups.list.push(group.clone());
        Ok(group)
    }

    /// Legacy PROVIDE_BUFFERS SQEs that failed so far.
    pub fn provide_errors(&self) -> u64 {
        self.groups.provide_errors
    }

    /// Publishes buffers returned since the last turn: ring groups commit their staged
    /// entries, legacy groups get PROVIDE_BUFFERS SQEs for returned runs.
    pub(super) fn prepare_groups(&mut self) {
        for i in 0..self.groups.list.len() {
            let group = self.groups.list[i].clone();
            match group.mode() {
                BufMode::Ring => group.commit(),
                BufMode::Legacy => {
                    for sqe in group.take_provide_sqes(Reserved::Provide.to_user_data()) {
                        self.push(sqe);
                    }
                }
                BufMode::User => {}
            }
        }
    }
}
