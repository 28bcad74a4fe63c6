//! The fd numbers that kernel-linked ops name, kept taken until those ops are issued.
//!
//! The kernel looks a link's fd number up only when it issues the link, after the ops
//! before it completed: an fsync running in io-wq (which no cancel stops) can hold a
//! dropped chain's write back for a long time. Closing the fd then, or handing it out to
//! code that closes it, frees the number, and the write went to whatever reused it (review
//! P). So a close of such an fd waits until every link naming it has ended, and an fd
//! given away while one is still pending is handed out as a duplicate.

use std::os::fd::RawFd;

use ring_core::op_table::OpTable;
use ring_core::user_data::OpId;

/// Fewest entries before [`LinkedFds::note`] prunes finished links.
const PRUNE_MIN: usize = 64;

#[derive(Default)]
pub(crate) struct LinkedFds {
    /// A link not yet known to have ended, and the fd it names.
    links: Vec<(RawFd, OpId)>,
    /// `links.len()` at which the next `note` drops ended links (amortised: at most
    /// twice what was left after the last prune).
    prune_at: usize,
    /// Fds whose close waits for links naming them.
    closes: Vec<RawFd>,
}

impl LinkedFds {
    /// Notes the links of a chain just pushed: `(fd, id)` of each op after the first.
    pub(crate) fn note(&mut self, links: impl Iterator<Item = (RawFd, OpId)>, ops: &OpTable) {
        self.links.extend(links);
        if self.links.len() >= self.prune_at.max(PRUNE_MIN) {
            self.prune(ops);
            self.prune_at = 2 * self.links.len();
        }
    }

    /// Whether a link that names `fd` may still be issued.
    pub(crate) fn names(&mut self, fd: RawFd, ops: &OpTable) -> bool {
        if self.links.is_empty() {
            return false;
        }
        self.prune(ops);
        self.links.iter().any(|&(named, _)| named == fd)
    }

    /// Keeps `fd` open until no link names it ([`take_closable`](Self::take_closable)).
    pub(crate) fn close_later(&mut self, fd: RawFd) {
        self.closes.push(fd);
    }

    /// Closes waiting for nothing any more, taken out.
    pub(crate) fn take_closable(&mut self, ops: &OpTable) -> Vec<RawFd> {
        if self.closes.is_empty() {
            return Vec::new();
        }
        self.prune(ops);
        let links = &self.links;
        let (ready, waiting) = self
            .closes
            .iter()
            .partition(|&&fd| !links.iter().any(|&(named, _)| named == fd));
        self.closes = waiting;
        ready
    }

    /// Every close still waiting, taken out (at shutdown).
    pub(crate) fn take_all_closes(&mut self) -> Vec<RawFd> {
        std::mem::take(&mut self.closes)
    }

    fn prune(&mut self, ops: &OpTable) {
        self.links.retain(|&(_, id)| ops.awaits_kernel_for(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_close_waits_for_the_links_naming_its_fd() {
        let mut ops = OpTable::new();
        let head = ops.insert().unwrap();
        let link = ops.insert().unwrap();
        let mut fds = LinkedFds::default();
        fds.note([(7, link)].into_iter(), &ops);
        let _ = head;
        assert!(fds.names(7, &ops));
        assert!(!fds.names(8, &ops));
        fds.close_later(7);
        assert!(fds.take_closable(&ops).is_empty());
        // SAFETY: the link's own (made-up) final completion; its slot holds no memory.
        let _ = unsafe { ops.complete(ring_core::cqe::Cqe::new(link.to_user_data(), 0, 0)) };
        assert!(!fds.names(7, &ops));
        assert_eq!(fds.take_closable(&ops), [7]);
        assert!(fds.take_closable(&ops).is_empty());
    }
}
