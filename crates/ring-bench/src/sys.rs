//! Process plumbing for the bench drivers: CPU pinning, signals by pid (the open-file limit
//! is raised with the rlimit crate).

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Makes `cmd`'s process run only on `cpu` (set between fork and exec, so the process never
/// runs anywhere else, and its threads inherit the mask).
pub fn pin_to_cpu(cmd: &mut Command, cpu: usize) -> &mut Command {
    let closure = move || {
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "cpu out of range",
            ));
        }
        // SAFETY: cpu_set_t is plain data; all zeroes is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `cpu` was checked against CPU_SETSIZE, so the bit lies inside `set`.
        unsafe { libc::CPU_SET(cpu, &mut set) };
        // SAFETY: valid set pointer and size; sched_setaffinity is async-signal-safe (a raw
        // syscall), as pre_exec requires.
        let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    };
    // SAFETY: the closure only calls sched_setaffinity, which is async-signal-safe and
    // touches no memory shared with the parent.
    unsafe { cmd.pre_exec(closure) }
}

/// The number of CPUs this process may run on.
pub fn cpus_allowed() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Sends `sig` to process `pid`.
pub fn kill(pid: u32, sig: i32) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "pid out of range"))?;
    // SAFETY: kill takes plain integers; a stale pid is reported as ESRCH.
    if unsafe { libc::kill(pid, sig) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_child_sees_one_cpu() {
        let mut cmd = Command::new("grep");
        cmd.args(["Cpus_allowed_list", "/proc/self/status"]);
        let out = pin_to_cpu(&mut cmd, 0).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(text.split_whitespace().nth(1), Some("0"), "{text}");
    }
}
