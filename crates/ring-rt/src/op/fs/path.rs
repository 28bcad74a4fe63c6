//! Ops on names and metadata: statx, unlinkat (5.11), renameat (5.11), mkdirat (5.15);
//! paths are CStrings the op owns, relative to the current directory.

use std::ffi::CString;
use std::io;
use std::os::fd::RawFd;

use io_uring::{opcode, squeue, types};
use ring_core::cqe::Cqe;

use super::{on_dup, res_int};
use crate::op::{Emulation, OpDef, Operation};
use crate::sys;

/// `statx(dirfd, path, flags, mask)` into a boxed buffer the op owns.
pub(crate) struct Statx {
    pub(crate) dirfd: RawFd,
    /// The path (empty with `AT_EMPTY_PATH` to stat `dirfd` itself).
    pub(crate) path: CString,
    pub(crate) flags: i32,
    pub(crate) mask: u32,
    /// Where the kernel writes; boxed because the SQE points at it.
    pub(crate) out: Box<libc::statx>,
}

impl Statx {
    pub(crate) fn new(dirfd: RawFd, path: CString, flags: i32, mask: u32) -> Statx {
        // SAFETY: statx is plain integers; all-zero is a valid value.
        let out = Box::new(unsafe { std::mem::zeroed::<libc::statx>() });
        Statx {
            dirfd,
            path,
            flags,
            mask,
            out,
        }
    }
}

// SAFETY: the SQE and any blocking job point only at memory this op owns on the heap
// (its buffer, boxed addresses and headers, a CString) and at its own fd.
unsafe impl Operation for Statx {
    fn fd(&self) -> Option<RawFd> {
        // AT_FDCWD names no fd.
        (self.dirfd >= 0).then_some(self.dirfd)
    }

    fn opcode(&self) -> Option<u8> {
        Some(opcode::Statx::CODE)
    }

    fn sqe(&mut self) -> squeue::Entry {
        let out: *mut libc::statx = &mut *self.out;
        opcode::Statx::new(types::Fd(self.dirfd), self.path.as_ptr(), out.cast())
            .flags(self.flags)
            .mask(self.mask)
            .build()
    }

    fn emulate(&mut self) -> Emulation {
        let (flags, mask) = (self.flags, self.mask);
        let path = self.path.as_ptr() as usize;
        let out: *mut libc::statx = &mut *self.out;
        let out = out as usize;
        let job = move |dirfd: RawFd| {
            // The raw syscall, not libc's wrapper: older glibc and musl builds lack statx().
            // SAFETY: path is the op's CString and out its boxed statx, both alive until
            // completion.
            let ret = unsafe { libc::syscall(libc::SYS_statx, dirfd, path, flags, mask, out) };
            sys::res(ret as isize)
        };
        if self.dirfd == libc::AT_FDCWD {
            return Emulation::Blocking(Box::new(move || job(libc::AT_FDCWD)));
        }
        on_dup(self.dirfd, job)
    }
}

impl OpDef for Statx {
    type Output = io::Result<libc::statx>;

    fn complete(self, cqe: Cqe) -> Self::Output {
        crate::completion::result(&cqe).map(|_| *self.out)
    }
}

/// `unlinkat(AT_FDCWD, path, flags)`: a file, or a directory with `AT_REMOVEDIR` (5.11).
pub(crate) struct UnlinkAt {
    pub(crate) path: CString,
    pub(crate) flags: i32,
}

// SAFETY: the SQE and any blocking job point only at memory this op owns on the heap
// (its buffer, boxed addresses and headers, a CString) and at its own fd.
unsafe impl Operation for UnlinkAt {
    fn opcode(&self) -> Option<u8> {
        Some(opcode::UnlinkAt::CODE)
    }

    fn sqe(&mut self) -> squeue::Entry {
        opcode::UnlinkAt::new(types::Fd(libc::AT_FDCWD), self.path.as_ptr())
            .flags(self.flags)
            .build()
    }

    fn emulate(&mut self) -> Emulation {
        let (path, flags) = (self.path.as_ptr() as usize, self.flags);
        Emulation::Blocking(Box::new(move || {
            // SAFETY: path is the op's CString, alive until completion.
            res_int(unsafe { libc::unlinkat(libc::AT_FDCWD, path as *const _, flags) })
        }))
    }
}

impl OpDef for UnlinkAt {
    type Output = io::Result<()>;

    fn complete(self, cqe: Cqe) -> io::Result<()> {
        crate::completion::result(&cqe).map(drop)
    }
}

/// `renameat(AT_FDCWD, from, AT_FDCWD, to)` (5.11).
pub(crate) struct RenameAt {
    pub(crate) from: CString,
    pub(crate) to: CString,
}

// SAFETY: the SQE and any blocking job point only at memory this op owns on the heap
// (its buffer, boxed addresses and headers, a CString) and at its own fd.
unsafe impl Operation for RenameAt {
    fn opcode(&self) -> Option<u8> {
        Some(opcode::RenameAt::CODE)
    }

    fn sqe(&mut self) -> squeue::Entry {
        let cwd = types::Fd(libc::AT_FDCWD);
        opcode::RenameAt::new(cwd, self.from.as_ptr(), cwd, self.to.as_ptr()).build()
    }

    fn emulate(&mut self) -> Emulation {
        let (from, to) = (self.from.as_ptr() as usize, self.to.as_ptr() as usize);
        Emulation::Blocking(Box::new(move || {
            let cwd = libc::AT_FDCWD;
            // SAFETY: both paths are the op's CStrings, alive until completion.
            res_int(unsafe { libc::renameat(cwd, from as *const _, cwd, to as *const _) })
        }))
    }
}

impl OpDef for RenameAt {
    type Output = io::Result<()>;

    fn complete(self, cqe: Cqe) -> io::Result<()> {
        crate::completion::result(&cqe).map(drop)
    }
}

/// `mkdirat(AT_FDCWD, path, mode)` (5.15).
pub(crate) struct MkDirAt {
    pub(crate) path: CString,
    pub(crate) mode: u32,
}

// SAFETY: the SQE and any blocking job point only at memory this op owns on the heap
// (its buffer, boxed addresses and headers, a CString) and at its own fd.
unsafe impl Operation for MkDirAt {
    fn opcode(&self) -> Option<u8> {
        Some(opcode::MkDirAt::CODE)
    }

    fn sqe(&mut self) -> squeue::Entry {
        opcode::MkDirAt::new(types::Fd(libc::AT_FDCWD), self.path.as_ptr())
            .mode(self.mode)
            .build()
    }

    fn emulate(&mut self) -> Emulation {
        let (path, mode) = (self.path.as_ptr() as usize, self.mode);
        Emulation::Blocking(Box::new(move || {
            // SAFETY: path is the op's CString, alive until completion.
            res_int(unsafe { libc::mkdirat(libc::AT_FDCWD, path as *const _, mode) })
        }))
    }
}

impl OpDef for MkDirAt {
    type Output = io::Result<()>;

    fn complete(self, cqe: Cqe) -> io::Result<()> {
        crate::completion::result(&cqe).map(drop)
    }
}
