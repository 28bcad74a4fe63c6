//! The fd numbers that kernel-linked ops name, kept taken until those ops are issued.
//!
//! The kernel looks a link's fd number up only when it issues the link, after the ops
//! before it completed: an fsync running in io-wq (which no cancel stops) can hold a
//! dropped chain's write back for a long time. Closing the fd then, or handing it out to
//! code that closes it, frees the number, and the write went to whatever reused it (review
//! P). So the number stays taken until every link naming it has ended: a close puts a
//! placeholder (an `O_PATH` fd of `/`) on the number with `dup3` (close-on-exec), which
//! releases the file at once (a socket's peer sees the close) while a link issued later
//! fails with `EBADF`; the number itself is closed once its links ended. An fd given away
//! while a link names it is handed out as a duplicate.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use ring_core::op_table::OpTable;
use ring_core::user_data::OpId;

/// Fewest links noted before [`LinkedFds::note`] prunes ended ones.
const PRUNE_MIN: usize = 64;

pub(crate) struct LinkedFds {
    /// Per fd, its links not yet known to have ended.
    links: HashMap<RawFd, Vec<OpId>>,
    /// Links in `links`, and the count at which the next `note` drops ended ones
    /// (amortised: twice what was left after the last prune).
    noted: usize,
    prune_at: usize,
    /// Numbers closed (their file released, or kept where no placeholder could be put
    /// there) whose links have not all ended.
    closes: Vec<RawFd>,
    /// The `O_PATH` fd whose file a closed number holds meanwhile: opened with the ring
    /// (so that it exists before the fd table could fill up, and no chain pays for an
    /// `open`), reopened when a hand-out took it.
    placeholder: Option<OwnedFd>,
}

impl LinkedFds {
    /// An empty table with its placeholder (none if it cannot be opened: closes then keep
    /// their file open until their links end).
    pub(crate) fn new() -> LinkedFds {
        LinkedFds {
            links: HashMap::new(),
            noted: 0,
            prune_at: 0,
            closes: Vec::new(),
            placeholder: open_placeholder().ok(),
        }
    }

    /// Notes the links of a chain just pushed: `(fd, id)` of each op after the first.
    pub(crate) fn note(&mut self, links: impl Iterator<Item = (RawFd, OpId)>, ops: &OpTable) {
        for (fd, id) in links {
            self.links.entry(fd).or_default().push(id);
            self.noted += 1;
        }
        if self.noted >= self.prune_at.max(PRUNE_MIN) {
            self.prune(ops);
            self.prune_at = 2 * self.noted;
        }
        if self.placeholder.is_none() && !self.links.is_empty() {
            self.placeholder = open_placeholder().ok();
        }
    }

    fn prune(&mut self, ops: &OpTable) {
        self.links.retain(|_, ids| {
            ids.retain(|&id| ops.awaits_kernel_for(id));
            !ids.is_empty()
        });
        self.noted = self.links.values().map(Vec::len).sum();
    }

    /// Whether a link that names `fd` may still be issued.
    pub(crate) fn names(&mut self, fd: RawFd, ops: &OpTable) -> bool {
        let Some(ids) = self.links.get_mut(&fd) else {
            return false;
        };
        let before = ids.len();
        ids.retain(|&id| ops.awaits_kernel_for(id));
        self.noted -= before - ids.len();
        if ids.is_empty() {
            self.links.remove(&fd);
            return false;
        }
        true
    }

    /// Closes `fd`, which links still name: the placeholder takes its number (releasing
    /// the file now) until [`take_closable`](Self::take_closable) hands the number back.
    /// Without a placeholder the file itself stays open until then.
    pub(crate) fn close_later(&mut self, fd: RawFd) {
        if let Some(placeholder) = &self.placeholder {
            let _ = dup_onto(placeholder.as_raw_fd(), fd);
        }
        self.closes.push(fd);
    }

    /// Gives `fd` away while links still name it and no duplicate could be made (the fd
    /// table is full): the placeholder's number becomes a duplicate of `fd` and is handed
    /// out, and `fd` is closed later with its file kept open until its links ended. `None`
    /// without a placeholder.
    pub(crate) fn hand_out_as_placeholder(&mut self, fd: RawFd) -> Option<OwnedFd> {
        let placeholder = self.placeholder.take()?;
        // The placeholder's number is ours; after this it holds `fd`'s file.
        if dup_onto(fd, placeholder.as_raw_fd()).is_err() {
            self.placeholder = Some(placeholder);
            return None;
        }
        self.closes.push(fd);
        Some(placeholder)
    }

    /// Closes waiting for nothing any more, taken out.
    pub(crate) fn take_closable(&mut self, ops: &OpTable) -> Vec<RawFd> {
        if self.closes.is_empty() {
            return Vec::new();
        }
        let mut ready = Vec::new();
        let mut waiting = Vec::new();
        for fd in std::mem::take(&mut self.closes) {
            if self.names(fd, ops) {
                waiting.push(fd);
            } else {
                ready.push(fd);
            }
        }
        self.closes = waiting;
        ready
    }

    /// Every close still waiting, taken out (at shutdown).
    pub(crate) fn take_all_closes(&mut self) -> Vec<RawFd> {
        std::mem::take(&mut self.closes)
    }
}

/// Makes number `onto` refer to `from`'s file, close-on-exec (`dup2` would clear the flag:
/// a child process started meanwhile would inherit the placeholder, an fd of `/`, or the
/// file handed out).
fn dup_onto(from: RawFd, onto: RawFd) -> io::Result<()> {
    // SAFETY: dup3 takes and returns integers; `onto` is a number this table owns (a
    // closed fd's, or the placeholder's).
    if unsafe { libc::dup3(from, onto, libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn open_placeholder() -> io::Result<OwnedFd> {
    let root = c"/";
    // SAFETY: `root` is a NUL-terminated string; the result is checked.
    let fd = unsafe { libc::open(root.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_close_waits_for_the_links_naming_its_fd() {
        let mut ops = OpTable::new();
        let link = ops.insert().unwrap();
        let mut fds = LinkedFds::new();
        fds.note([(7, link)].into_iter(), &ops);
        assert!(fds.names(7, &ops));
        assert!(!fds.names(8, &ops));
        fds.closes.push(7);
        assert!(fds.take_closable(&ops).is_empty());
        // SAFETY: the link's own (made-up) final completion; its slot holds no memory.
        let _ = unsafe { ops.complete(ring_core::cqe::Cqe::new(link.to_user_data(), 0, 0)) };
        assert!(!fds.names(7, &ops));
        assert_eq!(fds.take_closable(&ops), [7]);
        assert!(fds.take_closable(&ops).is_empty());
        assert_eq!(fds.noted, 0);
    }

    #[test]
    fn a_closed_number_holds_the_placeholder_until_its_links_end() {
        let mut ops = OpTable::new();
        let link = ops.insert().unwrap();
        let mut fds = LinkedFds::new();
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let fd = std::os::fd::IntoRawFd::into_raw_fd(a);
        fds.note([(fd, link)].into_iter(), &ops);
        assert!(fds.placeholder.is_some());
        fds.close_later(fd);
        // The peer sees the close at once; the number stays taken (by `/`, O_PATH).
        let mut byte = [0u8; 1];
        assert_eq!(std::io::Read::read(&mut &b, &mut byte).unwrap(), 0);
        let path = std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap();
        assert_eq!(path, std::path::Path::new("/"));
        // SAFETY: F_GETFD takes and returns integers.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        assert_eq!(
            flags & libc::FD_CLOEXEC,
            libc::FD_CLOEXEC,
            "a child would inherit `/`"
        );
        assert!(fds.take_closable(&ops).is_empty());
        // SAFETY: the link's own (made-up) final completion; its slot holds no memory.
        let _ = unsafe { ops.complete(ring_core::cqe::Cqe::new(link.to_user_data(), 0, 0)) };
        assert_eq!(fds.take_closable(&ops), [fd]);
        // SAFETY: the number this table handed back; nothing else uses it.
        drop(unsafe { OwnedFd::from_raw_fd(fd) });
        assert!(fds.placeholder.is_some(), "kept for the next close");
    }
}
