//! How ring-rt names a direct descriptor where it names fds: as a negative number below -1,
//! which no fd is. A socket accepted into the ring's file table (io_uring 6.8+, see
//! `ring_core::direct`) carries `encode(slot)` in its fd field, so the paths that pass an fd
//! along (ops, closes, parked work) carry the slot unchanged; the SQE is built with the
//! fixed-file flag ([`sqe_on!`]), and a plain syscall given the number fails with `EBADF`
//! instead of reaching some other file. -1 keeps its meaning: no fd.

use std::os::fd::RawFd;

/// The number standing for direct descriptor `slot` (slots stop at 2^20, far from
/// wrapping).
pub(crate) fn encode(slot: u32) -> RawFd {
    -2 - slot as RawFd
}

/// The slot `fd` stands for, if it stands for one.
#[inline]
pub(crate) fn slot_of(fd: RawFd) -> Option<u32> {
    (fd <= -2).then(|| (-2 - fd) as u32)
}

/// Builds an SQE naming `$fd`: `$t` is bound to `types::Fixed(slot)` when `$fd` stands for
/// a direct descriptor, to `types::Fd($fd)` otherwise, and `$build` is built with it.
macro_rules! sqe_on {
    ($fd:expr, |$t:ident| $build:expr) => {
        match $crate::backend::direct::slot_of($fd) {
            Some(slot) => {
                let $t = io_uring::types::Fixed(slot);
                $build
            }
            None => {
                let $t = io_uring::types::Fd($fd);
                $build
            }
        }
    };
}
pub(crate) use sqe_on;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_round_trip_and_no_fd_or_minus_one_is_a_slot() {
        for slot in [0, 1, 1 << 20] {
            assert_eq!(slot_of(encode(slot)), Some(slot));
            assert!(encode(slot) < -1);
        }
        for fd in [-1, 0, 1, 1 << 20, RawFd::MAX] {
            assert_eq!(slot_of(fd), None);
        }
    }
}
