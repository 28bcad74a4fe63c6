//! Shared harness for ring-rt's tests: every test runs once per backend, named
//! `<test>::uring` and `<test>::epoll`; a backend this machine cannot run is reported
//! `ignored` with the reason, never passed silently.

#![allow(dead_code)]

use std::time::Duration;

use libtest_mimic::{Arguments, Completion, Failed, Trial};
use ring_rt::{BackendKind, Runtime};

/// What a test returns: passed, ignored with a reason, or failed.
pub type Outcome = Result<Completion, Failed>;

/// A test body, given the backend to run on.
pub type TestFn = fn(BackendKind) -> Outcome;

/// Fails the test with a message unless `cond` holds.
#[macro_export]
macro_rules! check {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+).into());
        }
    };
}

/// Builds the runtime for `kind`, or returns the `ignored` outcome saying why it cannot.
#[macro_export]
macro_rules! runtime {
    ($kind:expr) => {
        match support::runtime($kind) {
            Ok(rt) => rt,
            Err(skip) => return Ok(skip),
        }
    };
    ($kind:expr, $builder:expr) => {
        match support::runtime_with($kind, $builder) {
            Ok(rt) => rt,
            Err(skip) => return Ok(skip),
        }
    };
}

/// Runs `tests` on both backends and exits with libtest's status.
pub fn run(tests: &[(&'static str, TestFn)]) -> ! {
    let mut args = Arguments::from_args();
    // Tests count this process's fds and buffers; one at a time keeps those counts exact.
    args.test_threads.get_or_insert(1);
    let mut trials = Vec::new();
    for &(name, f) in tests {
        for kind in [BackendKind::Uring, BackendKind::Epoll] {
            trials.push(Trial::ignorable_test(
                format!("{name}::{kind}"),
                move || f(kind),
            ));
        }
    }
    libtest_mimic::run(&args, trials).exit()
}

/// Runs `f`, which panics on purpose somewhere inside, without the panic's message and
/// backtrace in the log: a CI log excerpt picked around the first "panicked" line should
/// land on a real failure, not on a test proving that panics are caught. Tests run one at
/// a time (see [`run`]), so swapping the process-wide hook hides no other test's panic.
pub fn expecting_panics<R>(f: impl FnOnce() -> R) -> R {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    std::panic::set_hook(previous);
    out.unwrap_or_else(|payload| std::panic::resume_unwind(payload))
}

/// A runtime forced onto `kind`, with one worker: the suites count one ring's ops in
/// flight and fds, which other workers (each with its own ring, arming its wake-up poll
/// when its thread gets to it) would blur. Tests of several workers ask for them.
pub fn runtime(kind: BackendKind) -> Result<Runtime, Completion> {
    runtime_with(kind, Runtime::builder().threads(1))
}

/// A runtime from `builder`, forced onto `kind`.
pub fn runtime_with(kind: BackendKind, builder: ring_rt::Builder) -> Result<Runtime, Completion> {
    match builder.backend(kind).build() {
        Ok(rt) => Ok(rt),
        Err(e) if e.kind() == std::io::ErrorKind::Unsupported => Err(Completion::ignored_with(
            format!("{kind} backend unavailable here: {e}"),
        )),
        Err(e) => panic!("building a {kind} runtime failed: {e}"),
    }
}

/// Makes a FIFO at `path` (mode 0600).
pub fn mkfifo(path: &std::path::Path) -> std::io::Result<()> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())?;
    // SAFETY: `c` is a valid NUL-terminated path.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// This process's fds open on `path`.
pub fn fds_open_on(path: &std::path::Path) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    dir.flatten()
        .filter(|e| std::fs::read_link(e.path()).is_ok_and(|target| target == path))
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// Open fds of this process.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0)
}

/// CPU time (user + system) this process has used.
pub fn cpu_time() -> Duration {
    rusage_cpu(libc::RUSAGE_SELF)
}

/// CPU time (user + system) the calling thread has used.
pub fn thread_cpu_time() -> Duration {
    rusage_cpu(libc::RUSAGE_THREAD)
}

fn rusage_cpu(who: libc::c_int) -> Duration {
    // SAFETY: rusage is plain data; all-zero is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a live rusage, and a `who` getrusage knows.
    unsafe { libc::getrusage(who, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Polls `done` every millisecond until it holds, failing after `limit`.
pub async fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) -> Result<(), Failed> {
    let deadline = std::time::Instant::now() + limit;
    while !done() {
        if std::time::Instant::now() > deadline {
            return Err(format!("condition not reached within {limit:?}").into());
        }
        ring_rt::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(())
}

/// What the first poll of a sleep due at `deadline` says: pending (`Ok(true)`), or ready
/// late enough that a pause of the machine explains it (`Ok(false)`: that round proves
/// nothing and runs again). Ready before its deadline fails, naming `what`.
pub fn pending_before<T>(
    polled: &std::task::Poll<T>,
    deadline: std::time::Instant,
    what: &str,
) -> Result<bool, Failed> {
    if polled.is_pending() {
        return Ok(true);
    }
    if std::time::Instant::now() >= deadline {
        return Ok(false);
    }
    Err(format!("{what} was ready before its deadline").into())
}

/// Panics as it is dropped: a panic payload whose own drop panics.
pub struct PanicsAgain;

impl Drop for PanicsAgain {
    fn drop(&mut self) {
        panic!("the panic's payload panicked as it was dropped");
    }
}

/// A waker whose wake panics with a `PanicsAgain` payload.
pub struct WakePanicsTwice;

impl std::task::Wake for WakePanicsTwice {
    fn wake(self: std::sync::Arc<Self>) {
        std::panic::panic_any(PanicsAgain);
    }
}

/// Bounds a whole test body: a hang becomes a failure, not a stuck CI.
pub async fn bounded<T>(
    limit: Duration,
    fut: impl std::future::Future<Output = T>,
) -> Result<T, Failed> {
    ring_rt::time::timeout(limit, fut)
        .await
        .map_err(|_| format!("test body did not finish within {limit:?}").into())
}

/// Opens a socket pair the way a program that reuses a just-closed fd number would, waits
/// `settle` for anything still on its way, and says how many bytes its other end received
/// (it never wrote any) and whether its first end took `fd`'s number.
pub async fn bytes_on_a_socket_reusing(
    fd: i32,
    settle: Duration,
) -> std::io::Result<(usize, bool)> {
    let (a, b) = std::os::unix::net::UnixStream::pair()?;
    let reused = std::os::fd::AsRawFd::as_raw_fd(&a) == fd;
    ring_rt::time::sleep(settle).await;
    Ok((waiting_bytes(&b)?, reused))
}

/// A waker whose `clone` calls `on_clone` (and whose wakes do nothing): user code the
/// runtime runs when it keeps the waker of an op it starts or polls, which may be inside
/// its own bookkeeping.
pub fn waker_calling_on_clone(on_clone: fn()) -> std::task::Waker {
    use std::task::{RawWaker, RawWakerVTable, Waker};
    static VTABLE: RawWakerVTable = RawWakerVTable::new(
        |data| {
            // SAFETY: `data` is the `fn()` this waker was made with (see below).
            let on_clone: fn() = unsafe { std::mem::transmute::<*const (), fn()>(data) };
            on_clone();
            RawWaker::new(data, &VTABLE)
        },
        |_| {},
        |_| {},
        |_| {},
    );
    // SAFETY: the vtable only reads `data` back as the `fn()` it is, in `clone`; the other
    // entries ignore it.
    unsafe { Waker::from_raw(RawWaker::new(on_clone as *const (), &VTABLE)) }
}

/// How many bytes (up to 8 KiB) are waiting to be read on `s`, without blocking.
pub fn waiting_bytes(s: &std::os::unix::net::UnixStream) -> std::io::Result<usize> {
    s.set_nonblocking(true)?;
    let mut got = [0u8; 8192];
    match std::io::Read::read(&mut &*s, &mut got) {
        Ok(n) => Ok(n),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(0),
        Err(e) => Err(e),
    }
}

/// Deterministic pseudo-random bytes (xorshift), so failures reproduce.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The env var a child trial finds set (to the backend it should use) when this binary
/// re-runs itself for it: see [`child`].
pub const CHILD_ENV: &str = "RING_RT_TEST_CHILD_BACKEND";

/// A trial that only runs in a child process (see [`child`]).
pub type ChildFn = fn(BackendKind) -> Outcome;

/// Runs `tests` on both backends plus `children` (each only when re-run by [`child`]), and
/// exits with libtest's status.
pub fn run_with_children(
    tests: &[(&'static str, TestFn)],
    children: &[(&'static str, ChildFn)],
) -> ! {
    let mut args = Arguments::from_args();
    args.test_threads.get_or_insert(1);
    let mut trials = Vec::new();
    for &(name, f) in tests {
        for kind in [BackendKind::Uring, BackendKind::Epoll] {
            trials.push(Trial::ignorable_test(
                format!("{name}::{kind}"),
                move || f(kind),
            ));
        }
    }
    for &(name, f) in children {
        trials.push(
            Trial::ignorable_test(name, move || {
                let Some(kind) = std::env::var(CHILD_ENV)
                    .ok()
                    .and_then(|k| BackendKind::parse(&k))
                else {
                    return Ok(Completion::ignored_with("runs only as a child of its test"));
                };
                f(kind)
            })
            .with_ignored_flag(true),
        );
    }
    libtest_mimic::run(&args, trials).exit()
}

/// What a child process did: its exit status and what it printed.
pub struct ChildRun {
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Re-runs this test binary for its child trial `name` on `kind`, with `env` set, and
/// returns what it did (a child that aborts or hangs is this test's failure, not the
/// whole binary's). The child gets `limit` before it is killed.
pub fn child_run(
    name: &str,
    kind: BackendKind,
    env: &[(&str, &str)],
    limit: Duration,
) -> std::io::Result<ChildRun> {
    let mut cmd = std::process::Command::new(std::env::current_exe()?);
    cmd.args([
        name,
        "--exact",
        "--ignored",
        "--test-threads=1",
        "--nocapture",
    ])
    .env(CHILD_ENV, kind.name())
    .env_remove("RING_RT_BACKEND")
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn()?;
    let deadline = std::time::Instant::now() + limit;
    while child.try_wait()?.is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = child.wait_with_output()?;
    Ok(ChildRun {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// [`child`] with LeakSanitizer off, for a child that leaks on purpose (memory the kernel
/// or a stuck thread may still use when the runtime gives up on it).
pub fn child_leaking_on_purpose(name: &str, kind: BackendKind, limit: Duration) -> Outcome {
    child(name, kind, &[("ASAN_OPTIONS", "detect_leaks=0")], limit)
}

/// [`child_run`], mapped to an outcome: the child's own skip is this test's skip; anything
/// but a clean pass (a failure, an abort, a kill at `limit`) fails with its output.
pub fn child(name: &str, kind: BackendKind, env: &[(&str, &str)], limit: Duration) -> Outcome {
    let run = child_run(name, kind, env, limit)?;
    if let Some(line) = run
        .stdout
        .lines()
        .find(|l| l.contains(&format!("test {name} ... ignored")))
    {
        return Ok(Completion::ignored_with(format!("child: {line}")));
    }
    if !(run.status.success() && run.stdout.contains("1 passed")) {
        return Err(format!(
            "child {name} on {kind} failed ({}):\n{}\n{}",
            run.status, run.stdout, run.stderr
        )
        .into());
    }
    eprint!("{}", run.stderr);
    Ok(Completion::Completed)
}

/// A minimal executor for a plain thread (no runtime): polls `fut`, parking until its
/// waker unparks, for at most `limit`; `None` if it did not finish by then.
pub fn poll_on_thread<F: std::future::Future>(fut: F, limit: Duration) -> Option<F::Output> {
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return Some(out);
        }
        std::thread::park_timeout(Duration::from_millis(10));
    }
    None
}

/// Polls `fut` once, with the calling task's waker: whether it is still pending (it has
/// started, and waits).
pub async fn pending_after_a_poll<F: std::future::Future + ?Sized>(
    mut fut: std::pin::Pin<&mut F>,
) -> bool {
    std::future::poll_fn(|cx| std::task::Poll::Ready(fut.as_mut().poll(cx).is_pending())).await
}
