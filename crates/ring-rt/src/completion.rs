//! What a completion says: its result as ring-rt reports it, and the runtime's refusals
//! that travel in it.
//!
//! An op that cannot run (its runtime is not running here, or was dropped) completes
//! through the same `OpDef::complete` as one the kernel ran, fed a CQE. Carried as an
//! errno, the runtime's message was lost on the way: a file read after the runtime was
//! dropped said "Transport endpoint is not connected". So each refusal has a result code
//! of its own, below any the kernel posts (it posts -4095..=-1 for errors), and
//! [`result`] turns it back into the refusal's error.

use std::fmt;
use std::io;

use ring_core::cqe::Cqe;

/// A CQE's result as ring-rt's ops report it: the kernel's errno, or the runtime's own
/// refusal (see the module header). Every op of ring-rt turns its result into an
/// `io::Result` through this (clippy forbids ring-core's `Cqe::result` and `errno::cvt`
/// in ring-rt).
#[inline]
pub(crate) fn result(cqe: &Cqe) -> io::Result<u32> {
    result_of(cqe.res)
}

/// [`result`] of a result code kept apart from its CQE (a zero-copy send's, which comes
/// before its notification).
#[inline]
#[allow(clippy::disallowed_methods)] // The one place that maps a result code to an error.
pub(crate) fn result_of(res: i32) -> io::Result<u32> {
    match Refused::from_res(res) {
        Some(refused) => Err(refused.error()),
        None => ring_core::errno::cvt(res),
    }
}

/// Whether `cqe` is the runtime's refusal of an op, which never ran (not a kernel result).
#[inline]
pub(crate) fn is_refusal(cqe: &Cqe) -> bool {
    Refused::from_res(cqe.res).is_some()
}

/// Result codes start here and go down; far below the kernel's errno range.
const RES_BASE: i32 = -0x0100_0000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The backend is inside a loop turn (the call came from a waker or a destructor).
    Busy,
    /// The op's runtime is not running on this thread.
    Elsewhere,
    /// The op's runtime was dropped.
    ShutDown,
}

const ALL: [Refused; 3] = [Refused::Busy, Refused::Elsewhere, Refused::ShutDown];

impl Refused {
    /// The error callers see: its kind, and this as its source (for [`Refused::of`]).
    pub(crate) fn error(self) -> io::Error {
        let kind = match self {
            Refused::Busy => io::ErrorKind::WouldBlock,
            Refused::Elsewhere => io::ErrorKind::InvalidInput,
            Refused::ShutDown => io::ErrorKind::NotConnected,
        };
        io::Error::new(kind, self)
    }

    /// The refusal `err` carries, if it is one.
    pub(crate) fn of(err: &io::Error) -> Option<Refused> {
        err.get_ref()?.downcast_ref::<Refused>().copied()
    }

    /// Its result code for a CQE.
    pub(crate) fn res(self) -> i32 {
        RES_BASE - self as i32
    }

    /// The refusal a CQE's result code stands for, if it is one.
    #[inline]
    pub(crate) fn from_res(res: i32) -> Option<Refused> {
        // One comparison for every result the kernel posts: this runs on every completion.
        if res > RES_BASE {
            return None;
        }
        ALL.into_iter().find(|r| r.res() == res)
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Refused::Busy => {
                "the ring-rt worker is in the middle of a loop turn (called from a waker or a \
                 destructor it runs): retry from a task"
            }
            Refused::Elsewhere => {
                "this ring-rt object belongs to a runtime that is not running here: use it \
                 inside the block_on (or a task) of the runtime it was made in"
            }
            Refused::ShutDown => "the ring-rt runtime this object belongs to was dropped",
        })
    }
}

impl std::error::Error for Refused {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_survives_its_result_code() {
        for r in ALL {
            assert!(
                r.res() < -4095,
                "{r:?} collides with the kernel's errno range"
            );
            assert_eq!(Refused::from_res(r.res()), Some(r));
            assert_eq!(Refused::of(&r.error()), Some(r));
            assert_eq!(r.error().to_string(), r.to_string());
        }
        assert_eq!(Refused::from_res(-libc::EINVAL), None);
        assert_eq!(
            Refused::of(&io::Error::from_raw_os_error(libc::EINVAL)),
            None
        );
    }
}
