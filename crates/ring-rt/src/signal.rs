//! Waiting for Unix signals (SIGINT, SIGTERM, ...) as I/O, through a signalfd.
//!
//! Signals must be blocked in every thread for a signalfd to receive them: call [`block`]
//! first, before building a multi-worker runtime (threads inherit the mask).

use std::io;
use std::os::fd::RawFd;
use std::rc::Rc;

use crate::op::net::ReadPollable;
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
    let set = sigset(signals)?;
    // SAFETY: valid set pointer; the old mask is not requested.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Waits for one of `signals` (blocked first, see [`block`]); returns its number.
///
/// Each signal delivered is returned by one wait only: when several tasks wait for the
/// same signal, one of them gets it. Cancel-safe: a wait dropped before it returned took
/// no signal (readiness first, then the read in the poll that returns it), so the next
/// wait gets it. An empty list, SIGKILL or SIGSTOP (which nobody can block) and numbers
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
/// A server that stops on Ctrl-C or SIGTERM (`no_run`: it runs until a signal arrives):
///
/// ```no_run
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
    block(signals)?;
    let set = sigset(signals)?;
    // SAFETY: valid set pointer; -1 asks for a new fd.
    let fd = unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let core = Core::current_io()?;
    let fd = SignalFd {
        fd,
        core: core.clone(),
    };
    let size = std::mem::size_of::<libc::signalfd_siginfo>();
    loop {
        let buf = vec![0u8; size];
        let op = ReadPollable { fd: fd.fd, buf };
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
