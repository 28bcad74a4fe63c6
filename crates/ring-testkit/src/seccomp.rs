//! A seccomp filter that makes io_uring's three syscalls fail with a chosen errno, as
//! Docker's default profile (EPERM) and Podman's (ENOSYS) do. Seccomp filters: Linux 3.5+.
//!
//! Installed in a child between fork and exec, so the test binary and everything it starts
//! run under it while the matrix itself keeps io_uring. Unprivileged: `PR_SET_NO_NEW_PRIVS`
//! is what allows a filter without CAP_SYS_ADMIN.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// `AUDIT_ARCH_X86_64` from `<linux/audit.h>` (EM_X86_64 | 64-bit | little-endian); libc
/// does not export it.
const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;

/// `io_uring_setup`, `io_uring_enter`, `io_uring_register`: the same numbers on every
/// architecture since 5.1 (the unified syscall table).
pub const IO_URING_SYSCALLS: [u32; 3] = [425, 426, 427];

/// Offsets into `struct seccomp_data`: `int nr` then `__u32 arch`.
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;

fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump_eq(k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt,
        jf,
        k,
    }
}

/// The BPF program: on x86_64, io_uring's syscalls return `errno`; everything else (and
/// any other architecture's syscalls) is allowed. Not a sandbox, a simulation.
pub fn program(errno: i32) -> Vec<libc::sock_filter> {
    let load = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    let ret = libc::BPF_RET | libc::BPF_K;
    let n = IO_URING_SYSCALLS.len() as u8;
    let mut prog = vec![
        stmt(load, DATA_ARCH),
        // Not x86_64: skip the checks (and the load) straight to ALLOW.
        jump_eq(AUDIT_ARCH_X86_64, 0, n + 1),
        stmt(load, DATA_NR),
    ];
    for (i, nr) in IO_URING_SYSCALLS.iter().enumerate() {
        // Jump over the remaining checks and the ALLOW to the ERRNO return.
        let to_errno = (n - 1 - i as u8) + 1;
        prog.push(jump_eq(*nr, to_errno, 0));
    }
    prog.push(stmt(ret, libc::SECCOMP_RET_ALLOW));
    prog.push(stmt(
        ret,
        libc::SECCOMP_RET_ERRNO | (errno as u32 & libc::SECCOMP_RET_DATA),
    ));
    prog
}

/// Makes `cmd`'s child install the filter before it execs.
pub fn block_io_uring(cmd: &mut Command, errno: i32) {
    let prog = program(errno);
    // SAFETY: the closure runs in the forked child before exec. It only makes two raw
    // syscalls (async-signal-safe, no allocation, no locks) on `prog`, which was built
    // before the fork and is moved into the closure, so it is valid memory in the child.
    unsafe {
        cmd.pre_exec(move || install(&prog));
    }
}

/// Sets no_new_privs and installs `prog` in the calling thread.
fn install(prog: &[libc::sock_filter]) -> io::Result<()> {
    // SAFETY: prctl with integer arguments only; no memory is passed.
    let rc = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr().cast_mut(),
    };
    // SAFETY: `fprog` points at `prog.len()` filters that outlive this call; the kernel
    // copies the program and does not write through the pointer.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0,
            &fprog as *const libc::sock_fprog,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the program the way the kernel would on (arch, nr), returning the action.
    fn eval(prog: &[libc::sock_filter], arch: u32, nr: u32) -> u32 {
        let (mut acc, mut pc) = (0u32, 0usize);
        loop {
            let ins = prog[pc];
            let code = u32::from(ins.code);
            if code == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS {
                acc = if ins.k == DATA_ARCH { arch } else { nr };
                pc += 1;
            } else if code == libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K {
                let skip = if acc == ins.k { ins.jt } else { ins.jf };
                pc += 1 + usize::from(skip);
            } else {
                return ins.k;
            }
        }
    }

    #[test]
    fn io_uring_syscalls_get_the_errno() {
        let prog = program(libc::ENOSYS);
        for nr in IO_URING_SYSCALLS {
            let action = eval(&prog, AUDIT_ARCH_X86_64, nr);
            assert_eq!(
                action,
                libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
                "nr {nr}"
            );
        }
    }

    #[test]
    fn other_syscalls_and_arches_are_allowed() {
        let prog = program(libc::EPERM);
        for nr in [0, 1, 424, 428, 435] {
            assert_eq!(eval(&prog, AUDIT_ARCH_X86_64, nr), libc::SECCOMP_RET_ALLOW);
        }
        assert_eq!(eval(&prog, 0x4000_0003, 425), libc::SECCOMP_RET_ALLOW);
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn a_filtered_child_installs_it_and_still_runs() {
        // The errno itself is checked end to end by the seccomp rows (the runtime reports it).
        let mut cmd = Command::new("/bin/true");
        block_io_uring(&mut cmd, libc::EPERM);
        let status = cmd.status().expect("/bin/true runs under the filter");
        assert!(status.success());
    }
}
