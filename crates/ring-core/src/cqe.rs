//! `Cqe`: a completion as ring-core passes it around, whichever backend produced it.
//!
//! The io_uring backend copies kernel CQEs into this type before dispatching them; the
//! epoll backend builds the same values itself (result, flags, buffer id, `F_MORE`), so
//! everything above the backend handles one kind of completion.

use std::io;

/// `IORING_CQE_F_BUFFER`: the upper 16 bits of `flags` carry a provided buffer id.
pub const F_BUFFER: u32 = 1 << 0;
/// `IORING_CQE_F_MORE`: a multishot op will post more CQEs for this `user_data`.
pub const F_MORE: u32 = 1 << 1;
/// `IORING_CQE_F_SOCK_NONEMPTY`: the socket had more data after this recv.
pub const F_SOCK_NONEMPTY: u32 = 1 << 2;
/// `IORING_CQE_F_NOTIF`: a zero-copy send's notification that the buffer is free again.
pub const F_NOTIF: u32 = 1 << 3;
const BUFFER_SHIFT: u32 = 16;

/// One completion: the kernel's `io_uring_cqe` without the big-CQE extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cqe {
    /// The op's identity, see [`crate::user_data`].
    pub user_data: u64,
    /// A non-negative result, or a negated errno.
    pub res: i32,
    /// `IORING_CQE_F_*` bits, and the buffer id when `F_BUFFER` is set.
    pub flags: u32,
}

impl Cqe {
    /// Builds a completion, as the epoll backend does for an op it emulates.
    pub fn new(user_data: u64, res: i32, flags: u32) -> Cqe {
        Cqe {
            user_data,
            res,
            flags,
        }
    }

    /// The flags word for a completion that consumed provided buffer `bid`.
    pub fn buffer_flags(bid: u16) -> u32 {
        F_BUFFER | (u32::from(bid) << BUFFER_SHIFT)
    }

    /// True when more CQEs follow for the same multishot op.
    pub fn is_more(&self) -> bool {
        self.flags & F_MORE != 0
    }

    /// True for a zero-copy send's buffer-release notification.
    pub fn is_notif(&self) -> bool {
        self.flags & F_NOTIF != 0
    }

    /// The provided buffer this completion consumed, if any.
    pub fn bid(&self) -> Option<u16> {
        if self.flags & F_BUFFER == 0 {
            return None;
        }
        Some((self.flags >> BUFFER_SHIFT) as u16)
    }

    /// The result as `io::Result`: a negative `res` becomes the matching OS error.
    pub fn result(&self) -> io::Result<u32> {
        crate::errno::cvt(self.res)
    }
}

impl From<&io_uring::cqueue::Entry> for Cqe {
    fn from(entry: &io_uring::cqueue::Entry) -> Cqe {
        Cqe::new(entry.user_data(), entry.result(), entry.flags())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_id_round_trips_through_flags() {
        let cqe = Cqe::new(7, 64, Cqe::buffer_flags(513) | F_MORE);
        assert_eq!(cqe.bid(), Some(513));
        assert!(cqe.is_more());
        assert_eq!(Cqe::new(7, 64, 0).bid(), None);
    }

    #[test]
    fn negative_result_is_os_error() {
        let err = Cqe::new(1, -libc::ENOBUFS, 0).result().unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOBUFS));
        assert_eq!(Cqe::new(1, 5, 0).result().unwrap(), 5);
    }
}
