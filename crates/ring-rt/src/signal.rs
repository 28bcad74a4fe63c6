//! Waiting for Unix signals (SIGINT, SIGTERM, ...) as I/O, through a signalfd.
//!
//! A signal sent to the process goes to one of its threads that does not block it, and a
//! signalfd gets it only while every thread blocks it. So call [`block`] first, in `main`
//! before the runtime or any other thread starts: threads inherit the mask, the runtime's
//! workers and blocking-pool threads too (on epoll, file operations start pool threads).
//! [`wait`] blocks its signals in the calling thread only: a thread started earlier
//! that does not block them may take a signal meant for the wait, and its default action
//! (for SIGTERM, SIGINT, SIGUSR1, ...) ends the process. The first wait for a signal logs a
//! warning naming such threads.
//!
//! The mask is inherited by processes started from a thread that has it, too
//! (`std::process::Command` keeps it): a child started after `block(&[SIGINT])` does not
//! stop on Ctrl-C unless it unblocks the signal itself.

use std::io;
use std::os::fd::RawFd;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::op::pollable::ReadPollable;
use crate::op::Op;
use crate::worker::Core;

fn sigset(signals: &[i32]) -> io::Result<libc::sigset_t> {
    if signals.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no signal given: waiting for none would never end",
        ));
    }
    if let Some(sig) = signals
        .iter()
        .find(|&&s| s == libc::SIGKILL || s == libc::SIGSTOP)
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("signal {sig} (SIGKILL or SIGSTOP) cannot be blocked or waited for"),
        ));
    }
    // SAFETY: sigset_t is plain data; sigemptyset initialises it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t.
    unsafe { libc::sigemptyset(&mut set) };
    for &sig in signals {
        // SAFETY: `set` is valid; an invalid signal number is reported as EINVAL.
        if unsafe { libc::sigaddset(&mut set, sig) } != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("invalid signal {sig}"),
            ));
        }
    }
    Ok(set)
}

/// Blocks `signals` in the calling thread (and threads it starts later), so they are only
/// delivered through [`wait`]. The same inputs as `wait` are `InvalidInput`.
///
/// # Examples
///
/// ```
/// // Before building the runtime, so every worker thread inherits the mask.
/// ring_rt::signal::block(&[libc::SIGTERM, libc::SIGINT])?;
/// let rt = ring_rt::Runtime::builder().threads(2).build()?;
/// # drop(rt);
/// # std::io::Result::Ok(())
/// ```
pub fn block(signals: &[i32]) -> io::Result<()> {
    block_set(&sigset(signals)?)
}

/// Blocks the signals of `set` in the calling thread.
fn block_set(set: &libc::sigset_t) -> io::Result<()> {
    // SAFETY: valid set pointer; the old mask is not requested.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Waits for one of `signals`, which it blocks in the calling thread first (see the
/// [module docs](self) for the other threads, and [`block`]); returns its number.
///
/// Each signal delivered is returned by one wait only: when several tasks wait for the
/// same signal, one of them gets it. Cancel-safe: a wait dropped before it returned took
/// no signal (its read runs in the poll that returns it, and only readiness waits between
/// tries), so the next wait gets it. An empty list, SIGKILL or SIGSTOP (which nobody can block) and numbers
/// that are not signals are `InvalidInput`.
///
/// # Examples
///
/// ```
/// ring_rt::signal::block(&[libc::SIGUSR1])?;
/// # ring_rt::Runtime::new()?.block_on(async {
/// // SAFETY: sends SIGUSR1 to this process; it is blocked, so it waits for `wait`.
/// unsafe { libc::kill(libc::getpid(), libc::SIGUSR1) };
/// let signo = ring_rt::signal::wait(&[libc::SIGUSR1]).await?;
/// assert_eq!(signo, libc::SIGUSR1);
/// # std::io::Result::Ok(()) })?;
/// # std::io::Result::Ok(())
/// ```
///
/// A server that stops on Ctrl-C or SIGTERM (`no_run`: it runs until a signal arrives).
/// The signals are blocked before the runtime starts its threads: a default runtime runs
/// more than one, and a signal one of them took would end the process.
///
/// ```no_run
/// ring_rt::signal::block(&[libc::SIGINT, libc::SIGTERM])?;
/// # ring_rt::Runtime::new()?.block_on(async {
/// let server = ring_rt::spawn(async {
///     // accept and serve connections ...
///     std::future::pending::<()>().await
/// });
/// let signo = ring_rt::signal::wait(&[libc::SIGINT, libc::SIGTERM]).await?;
/// println!("stopping on signal {signo}");
/// server.abort(); // drops the server's task, cancelling its I/O
/// # std::io::Result::Ok(()) })?;
/// # std::io::Result::Ok(())
/// ```
pub async fn wait(signals: &[i32]) -> io::Result<i32> {
    // The runtime first: outside one (or after its drop) the wait fails before it blocks
    // anything or opens a signalfd (review CS: a signalfd leaked on every such call, and
    // the thread's mask changed).
    let core = Core::current_io()?;
    let set = sigset(signals)?;
    block_set(&set)?;
    // Review CS: this module's server example, which did not call `block`, died of the
    // first SIGTERM (taken by worker 1 or a blocking-pool thread). Say why, once.
    warn_of_threads_not_blocking(signals);
    // SAFETY: valid set pointer; -1 asks for a new fd.
    let fd = unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = SignalFd {
        fd,
        core: core.clone(),
    };
    let size = std::mem::size_of::<libc::signalfd_siginfo>();
    loop {
        let buf = vec![0u8; size];
        let op = ReadPollable {
            fd: fd.fd,
            buf,
            waits: true,
        };
        let (res, buf) = Op::new(core.clone(), op).await;
        match res {
            Ok(n) if n == size => {
                let signo = u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]);
                return Ok(signo as i32);
            }
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "short signalfd read",
                ))
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e),
        }
    }
}

/// Signals [`warn_of_threads_not_blocking`] has looked into (bit `n - 1` for signal `n`):
/// once per signal and process is enough to say why a process died of one, and a program
/// that blocks them as it should does not read `/proc` for every wait (review CT: 17 ms a
/// wait with 500 threads).
static CHECKED: AtomicU64 = AtomicU64::new(0);

/// Logs a warning, the first time each signal is waited for, naming the threads of this
/// process other than the caller that do not block one of `signals`: a signal sent to the
/// process may go to one of them instead of the wait, and end the process (or be lost, if
/// ignored). Best effort: a thread that ends or starts meanwhile (a thread starting has
/// every signal blocked until it runs), or after that first wait, or a `/proc` that
/// cannot be read, is passed over.
fn warn_of_threads_not_blocking(signals: &[i32]) {
    let wanted = signals
        .iter()
        .filter_map(|&s| u32::try_from(s - 1).ok().and_then(|b| 1u64.checked_shl(b)))
        .fold(0, |mask, bit| mask | bit);
    let new = wanted & !CHECKED.fetch_or(wanted, Ordering::Relaxed);
    if new == 0 {
        return;
    }
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return;
    };
    // SAFETY: gettid has no arguments and cannot fail.
    let me = unsafe { libc::gettid() }.to_string();
    let mut missing = 0;
    let mut threads = Vec::new();
    for task in tasks.flatten() {
        if task.file_name().to_str() == Some(me.as_str()) {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
            continue;
        };
        let unblocked = new & !blocked_mask(&status).unwrap_or(u64::MAX);
        if unblocked != 0 {
            missing |= unblocked;
            let name = status_field(&status, "Name:").unwrap_or("?");
            threads.push(format!("{name} ({})", task.file_name().to_string_lossy()));
        }
    }
    if missing == 0 {
        return;
    }
    let numbers: Vec<u32> = (0..64)
        .filter(|b| missing >> b & 1 == 1)
        .map(|b| b + 1)
        .collect();
    tracing::warn!(target: "ring_rt", signals = ?numbers, threads = %threads.join(", "),
        "signal::wait: these threads do not block the signals waited for; one sent to the \
         process may go to them and end it: call ring_rt::signal::block in main before \
         starting the runtime or any thread");
}

/// The `SigBlk` mask of a `/proc/<pid>/task/<tid>/status` text.
fn blocked_mask(status: &str) -> Option<u64> {
    u64::from_str_radix(status_field(status, "SigBlk:")?, 16).ok()
}

/// The value of a `/proc/.../status` line starting with `key`.
fn status_field<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(key))
        .map(str::trim)
}

/// The signalfd, closed through the worker's backend: the epoll backend must forget a
/// registered fd before its number can be reused (by the next `wait`, for one).
struct SignalFd {
    fd: RawFd,
    core: Rc<Core>,
}

impl Drop for SignalFd {
    fn drop(&mut self) {
        self.core.close(self.fd);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_files_blocked_mask_is_read() {
        let status = "Name:\tring-rt-worker-1\nSigQ:\t0/94324\nSigPnd:\t0000000000000000\n\
                      SigBlk:\t0000000000004202\nSigIgn:\t0000000000001000\n";
        assert_eq!(status_field(status, "Name:"), Some("ring-rt-worker-1"));
        // Signals 2 (SIGINT), 10 (SIGUSR1) and 15 (SIGTERM).
        assert_eq!(blocked_mask(status), Some(1 << 1 | 1 << 9 | 1 << 14));
        assert_eq!(blocked_mask("Name:\tx\n"), None);
        assert_eq!(blocked_mask("SigBlk:\tzz\n"), None);
    }
}
