//! Small helpers for the raw syscalls ops run themselves (on epoll, or inline).

/// A libc return value as a CQE result: the value, or `-errno` on failure.
pub(crate) fn res(ret: isize) -> i32 {
    if ret < 0 {
        -std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    } else {
        ret.min(i32::MAX as isize) as i32
    }
}

/// The CPUs in the calling thread's affinity mask, in order (never empty: the kernel
/// refuses an empty mask).
pub(crate) fn allowed_cpus() -> std::io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: passes a valid pointer to a live cpu_set_t and its size; pid 0 = this thread.
    if unsafe { libc::sched_getaffinity(0, size, &mut set) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        .filter(|&cpu| {
            // SAFETY: CPU_ISSET reads within `set` for indices below CPU_SETSIZE.
            unsafe { libc::CPU_ISSET(cpu, &set) }
        })
        .collect();
    if cpus.is_empty() {
        return Err(std::io::Error::other(
            "this thread's CPU affinity mask is empty",
        ));
    }
    Ok(cpus)
}

/// Restricts the calling thread to `cpus` (each below `CPU_SETSIZE`, as `allowed_cpus`
/// gives them).
pub(crate) fn set_cpus(cpus: &[usize]) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus.iter().filter(|&&cpu| cpu < libc::CPU_SETSIZE as usize) {
        // SAFETY: CPU_SET writes within `set` for a cpu index below CPU_SETSIZE.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: passes a valid pointer to a live cpu_set_t and its size; pid 0 = this thread.
    if unsafe { libc::sched_setaffinity(0, size, &set) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Where a runtime's helper threads (blocking pools) run when its workers are pinned: the
/// mask of the thread that built the runtime. A helper thread started by a pinned worker
/// would otherwise inherit that worker's one CPU, and serve every worker's jobs from it.
pub(crate) type HelperCpus = Option<std::sync::Arc<Vec<usize>>>;

/// Run first by a helper thread: back to the runtime's mask, if its workers are pinned.
pub(crate) fn unpin_helper(cpus: &HelperCpus) {
    if let Some(cpus) = cpus {
        if let Err(err) = set_cpus(cpus) {
            tracing::debug!(target: "ring_rt", error = %err, "a helper thread kept its creator's CPU affinity");
        }
    }
}

/// The process's soft open-file limit (`RLIMIT_NOFILE`), which the kernel also applies to
/// a ring's file table; `u32::MAX` when it cannot be read or is unlimited.
pub(crate) fn open_file_limit() -> u32 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` into the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return u32::MAX;
    }
    u32::try_from(limit.rlim_cur).unwrap_or(u32::MAX)
}

/// An integer socket option of `fd` (`getsockopt` at `level`, `name`): the value, or the
/// negative errno as a CQE result would carry it.
pub(crate) fn socket_int(fd: std::os::fd::RawFd, level: i32, name: i32) -> Result<i32, i32> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the option writes at most one c_int into `value`, whose size `len` gives.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(res(rc as isize));
    }
    Ok(value)
}

/// What `fd` is ready for among `events` now, by a `poll(2)` that never blocks: its
/// `revents` (0: nothing yet), or the negative errno as a CQE result would carry it.
pub(crate) fn poll_now(fd: std::os::fd::RawFd, events: i16) -> Result<i16, i32> {
    let mut pfd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: one valid `pollfd` for the call's duration; a zero timeout never blocks.
    let n = unsafe { libc::poll(&mut pfd, 1, 0) };
    if n < 0 {
        return Err(res(n as isize));
    }
    Ok(pfd.revents)
}

/// `fd`'s terminal settings, or `None` if it is not a terminal (or they cannot be read).
pub(crate) fn termios(fd: std::os::fd::RawFd) -> Option<libc::termios> {
    // SAFETY: termios is plain data; tcgetattr fills it in.
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: one live termios for the call's duration; a bad fd or a non-terminal is an
    // error, nothing more.
    (unsafe { libc::tcgetattr(fd, &mut t) } == 0).then_some(t)
}
