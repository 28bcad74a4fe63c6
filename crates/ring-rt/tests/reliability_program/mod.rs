//! A byte-coded program of socket, file and timer ops, each dropped at a point the bytes
//! choose, run on a real runtime: shared by the property tests
//! (`tests/reliability_props.rs`, both backends) and the `runtime_schedule` fuzz target.
//!
//! The bytes spawn ops (recv, pooled recv, multishot recv stream, read, write, accept,
//! incoming, connect, file read/write/open, sleep, UDP send and receive, linked file
//! chains, reads with a timeout of zero or `Duration::MAX`, reads of zero and huge sizes),
//! each with a drop policy: run to the end, a timeout around it, a kernel link timeout, an
//! abort of its task some steps later, a drop after k polls, or detached. The bytes also
//! inject faults: a future whose destructor panics, a waker that panics (the panic leaves
//! `block_on`; the runtime must be whole afterwards), and the process out of fds for a few
//! steps (a lowered `RLIMIT_NOFILE`). Between ops the program yields, sleeps or half-closes
//! a socket. At the end every socket is shut down so each op still alive must finish.
//!
//! Invariants (any violation is an `Err` naming it):
//! - no panic in any task, and every task not aborted finishes once its sockets are shut
//!   down (no lost wake-up), all within a bound (no hang);
//! - every op hands its buffer back, the same allocation, on success and on error; errors
//!   are OS errors (never "bid handed out twice" or another bookkeeping error);
//! - afterwards the fd count is back to where it was, `ops_in_flight` is back to its steady
//!   value (every orphan reaped), no pooled receive buffer is out, no stale or lost CQE;
//! - after the runtime is dropped the process's fd count is back to its baseline;
//! - after a panicking waker unwound `block_on`, the same holds once the world is shut
//!   down, and the runtime still serves a round trip.
//!
//! Replaying a failure: set `RING_RT_TRACE=1` and each spawned op and its drop policy is
//! printed as the program runs.

#![allow(dead_code)]

mod ops;

use std::cell::RefCell;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ring_rt::fs::File;
use ring_rt::net::{TcpListener, TcpStream, UdpSocket, UnixStream};
use ring_rt::time::{sleep, timeout};
use ring_rt::{BackendKind, JoinHandle, Runtime};

pub use ops::{Op, Policy};

/// What injected panics say: a panic hook installed by [`silence_injected_panics`] keeps
/// them out of the log (and out of libFuzzer's crash handling).
pub const INJECTED: &str = "ring-rt-program: injected panic";

/// Installs a panic hook that swallows the panics programs inject on purpose and hands any
/// other to the hook installed before (the default one, or libFuzzer's, which aborts).
pub fn silence_injected_panics() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !is_injected(info.payload()) {
            previous(info);
        }
    }));
}

/// True for a panic a program injected.
fn is_injected(payload: &(dyn std::any::Any + Send)) -> bool {
    let msg = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str));
    msg.is_some_and(|m| m.contains(INJECTED))
}

/// Steps one program runs at most, whatever its length.
pub const STEPS_MAX: usize = 64;
/// How long the whole program may take before it counts as a hang.
const PROGRAM_LIMIT: Duration = Duration::from_secs(10);
/// How long tasks still alive get to finish once their sockets are shut down.
const FINISH_LIMIT: Duration = Duration::from_secs(5);
/// How long the counters get to settle (a close queued on io_uring runs on the next turn).
const SETTLE_LIMIT: Duration = Duration::from_secs(2);

/// What one run did, for reports and for checking that the schedules reach the paths
/// they are meant to.
#[derive(Clone, Copy, Debug, Default)]
pub struct Report {
    pub ops: usize,
    pub aborted: usize,
    pub cancels_sent: u64,
    pub orphans_reaped: u64,
    pub enobufs: u64,
    pub sq_full: u64,
}

/// The sockets and the file a program's ops work on.
pub struct World {
    pairs: Vec<(Rc<UnixStream>, Rc<UnixStream>)>,
    /// Two UDP sockets with datagrams waiting both ways.
    udp: [Rc<UdpSocket>; 2],
    /// fds held to keep the process at its fd limit (see `Op::Ballast`).
    ballast: RefCell<Option<ops::Ballast>>,
    listener: Rc<TcpListener>,
    addr: SocketAddr,
    /// Accepted and connected TCP streams, for TCP reads and writes (at most `TCP_MAX`).
    tcp: RefCell<Vec<Rc<TcpStream>>>,
    file: Rc<File>,
    path: PathBuf,
    /// Set by `shut_down`: streams kept after it are shut down at once.
    closed: std::cell::Cell<bool>,
}

const PAIRS: usize = 3;
const TCP_MAX: usize = 12;
/// Bytes written each way on every pair before the program starts.
const PRELOAD: usize = 4096;

impl World {
    async fn new(path: PathBuf) -> std::io::Result<World> {
        let pairs: Vec<_> = (0..PAIRS)
            .map(|_| UnixStream::pair().map(|(a, b)| (Rc::new(a), Rc::new(b))))
            .collect::<Result<_, _>>()?;
        // Data waiting in both directions, so receives find some without a matching write.
        for (a, b) in &pairs {
            for side in [a, b] {
                let (res, _) = side.write_all(vec![0x11u8; PRELOAD]).await;
                res?;
            }
        }
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let udp = [
            Rc::new(UdpSocket::bind("127.0.0.1:0")?),
            Rc::new(UdpSocket::bind("127.0.0.1:0")?),
        ];
        for (from, to) in [(0, 1), (1, 0)] {
            for len in [1usize, 100, 1500] {
                let (res, _) = udp[from]
                    .send_to(vec![0x22u8; len], udp[to].local_addr()?)
                    .await;
                res?;
            }
        }
        std::fs::write(&path, vec![7u8; 64 << 10])?;
        let file = ring_rt::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .await?;
        Ok(World {
            pairs,
            udp,
            ballast: RefCell::new(None),
            listener: Rc::new(listener),
            addr,
            tcp: RefCell::new(Vec::new()),
            file: Rc::new(file),
            path,
            closed: std::cell::Cell::new(false),
        })
    }

    fn keep_tcp(&self, stream: TcpStream) {
        // A connect or accept whose task resumes after the shutdown: shut this one too,
        // or a later read on it would wait forever for a peer nobody drives.
        if self.closed.get() {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
        let mut tcp = self.tcp.borrow_mut();
        if tcp.len() < TCP_MAX {
            tcp.push(Rc::new(stream));
        }
    }

    /// Half-closes (write side) one end of one pair: the peer's reads see EOF.
    fn half_close(&self, pick: u8) {
        let (a, b) = &self.pairs[usize::from(pick) % PAIRS];
        let side = if pick & 0x80 == 0 { a } else { b };
        let _ = side.shutdown(std::net::Shutdown::Write);
    }

    /// Shuts every socket down, so that every op on one finishes: reads see EOF, writes
    /// EPIPE, accepts EINVAL (a listening socket shut down stops listening).
    fn shut_down(&self) {
        drop(self.ballast.borrow_mut().take());
        for (a, b) in &self.pairs {
            let _ = a.shutdown(std::net::Shutdown::Both);
            let _ = b.shutdown(std::net::Shutdown::Both);
        }
        self.closed.set(true);
        for s in self.tcp.borrow().iter() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        // SAFETY: shutdown on an fd the listener owns for its whole life; no memory involved.
        unsafe { libc::shutdown(self.listener.as_raw_fd(), libc::SHUT_RDWR) };
        for udp in &self.udp {
            // SAFETY: as above. An unconnected UDP socket answers ENOTCONN but is shut
            // down all the same (its receives return at once).
            unsafe { libc::shutdown(udp.as_raw_fd(), libc::SHUT_RDWR) };
        }
    }
}

/// Open fds of this process.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// Runs the program `data` encodes on a fresh runtime of `kind`. `Ok(None)`: this backend
/// cannot run here.
pub fn run(kind: BackendKind, data: &[u8]) -> Result<Option<Report>, String> {
    let outer_fds = open_fds();
    // A tiny SQ, receive pool and blocking pool, so SQ-full pushes, ENOBUFS and queued
    // blocking jobs happen in short programs.
    // One worker: the program's steady-state counts (ops in flight, fds) are one ring's.
    let built = Runtime::builder()
        .backend(kind)
        .threads(1)
        .entries(8)
        .recv_buffers(2, 256)
        .blocking_threads(2)
        .build();
    let rt = match built {
        Ok(rt) => rt,
        Err(e) if e.kind() == std::io::ErrorKind::Unsupported => return Ok(None),
        Err(e) => return Err(format!("building a {kind} runtime: {e}")),
    };
    let path = scratch_path();
    let state = State::default();
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(async {
            match timeout(PROGRAM_LIMIT, program(&rt, data, path.clone(), &state)).await {
                Ok(res) => res,
                Err(_) => Err(format!(
                    "program did not finish within {PROGRAM_LIMIT:?}: a hang"
                )),
            }
        })
    }));
    let mut ran = ran;
    // A waker the program made panicked as asked and unwound block_on: the runtime must be
    // whole all the same. (Another such waker may fire while winding down: again. Each
    // panics once, and a program has fewer than 512 ops; every due wake is delivered, so
    // a program with many of them unwinds that many times.)
    for _ in 0..512 {
        match ran {
            Err(payload) if is_injected(&*payload) => {
                ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    rt.block_on(recover(&rt, &state))
                }));
            }
            _ => break,
        }
    }
    let report = match ran {
        Ok(report) => report,
        Err(payload) => std::panic::resume_unwind(payload),
    };
    drop(state);
    drop(rt);
    let _ = std::fs::remove_file(&path);
    let report = report?;
    if open_fds() != outer_fds {
        return Err(format!(
            "fds {outer_fds} -> {} after the runtime was dropped",
            open_fds()
        ));
    }
    Ok(Some(report))
}

/// What a program shares with `run`, so a program cut short by an injected waker panic can
/// be wound down from outside.
#[derive(Default)]
struct State {
    world: RefCell<Option<Rc<World>>>,
    /// fds, ops in flight and counters when the program started.
    start: std::cell::Cell<Option<(usize, u64)>>,
    before: std::cell::Cell<Option<ring_core::metrics::Snapshot>>,
}

/// After an injected waker panic: shut every socket down, let every task finish (the
/// program's JoinHandles went with it), then check the runtime is back to its steady state
/// and still serves a round trip.
async fn recover(rt: &Runtime, state: &State) -> Result<Report, String> {
    if let Some(world) = state.world.borrow_mut().take() {
        world.shut_down();
    }
    let deadline = Instant::now() + FINISH_LIMIT;
    while rt.metrics().tasks_alive > 0 {
        if Instant::now() > deadline {
            return Err(format!(
                "{} tasks never finished after an injected waker panic and shutdown",
                rt.metrics().tasks_alive
            ));
        }
        sleep(Duration::from_millis(1)).await;
    }
    let (fds, steady_ops) = state.start.get().unwrap_or((open_fds(), 0));
    settle(rt, fds, steady_ops).await?;
    let (a, b) = UnixStream::pair().map_err(|e| format!("after the panic: {e}"))?;
    a.write_all(&b"still here"[..])
        .await
        .0
        .map_err(|e| e.to_string())?;
    let (n, buf) = b.read(Vec::with_capacity(16)).await;
    if n.map_err(|e| e.to_string())? != 10 || &buf[..] != b"still here" {
        return Err("no round trip after an injected waker panic".into());
    }
    let before = state.before.get().unwrap_or_default();
    let delta = rt.metrics().io.since(&before);
    Ok(Report {
        cancels_sent: delta.cancels_sent,
        orphans_reaped: delta.orphans_reaped,
        ..Report::default()
    })
}

fn scratch_path() -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("ring-rt-program-{}-{n}", std::process::id()))
}

/// A spawned op and what the program decided about it.
struct Spawned {
    handle: JoinHandle<Result<(), String>>,
    op: Op,
    policy: Policy,
    /// The program step at which its task is aborted, for `Policy::Abort`.
    abort_at: Option<usize>,
}

async fn program(
    rt: &Runtime,
    data: &[u8],
    path: PathBuf,
    state: &State,
) -> Result<Report, String> {
    ring_rt::yield_now().await;
    let fds = open_fds();
    let steady_ops = rt.metrics().io.ops_in_flight;
    state.start.set(Some((fds, steady_ops)));
    state.before.set(Some(rt.metrics().io));
    let before = rt.metrics().io;
    let world = Rc::new(World::new(path).await.map_err(|e| format!("setup: {e}"))?);
    *state.world.borrow_mut() = Some(world.clone());
    let mut bytes = ops::Bytes::new(data);
    let mut spawned: Vec<Spawned> = Vec::new();
    let mut step = 0;
    while !bytes.is_empty() && step < STEPS_MAX {
        step += 1;
        match bytes.u8() % 8 {
            0..=4 => spawned.push(ops::spawn(&world, &mut bytes, step)),
            5 => ring_rt::yield_now().await,
            6 => sleep(Duration::from_micros(u64::from(bytes.u8()) * 8)).await,
            _ => world.half_close(bytes.u8()),
        }
        for s in spawned.iter().filter(|s| s.abort_at == Some(step)) {
            s.handle.abort();
        }
        world.release_ballast_at(step);
    }
    world.shut_down();
    state.world.borrow_mut().take();
    let aborted = finish(&mut spawned).await?;
    drop(spawned);
    drop(world);
    // Every orphan reaped: `settle` waits for `ops_in_flight` to come back to its steady
    // value (an orphan keeps its slot until its final CQE). Cancels and orphans are not
    // one to one: timers and the accept bound cancel live ops, and a dropped op whose CQE
    // had arrived needs no cancel.
    settle(rt, fds, steady_ops).await?;
    let delta = rt.metrics().io.since(&before);
    if delta.stale_cqes != 0 || delta.cqes_lost != 0 {
        return Err(format!("stale or lost CQEs: {delta}"));
    }
    Ok(Report {
        ops: step,
        aborted,
        cancels_sent: delta.cancels_sent,
        orphans_reaped: delta.orphans_reaped,
        enobufs: delta.enobufs,
        sq_full: delta.sq_full,
    })
}

/// Waits for every task: those not aborted must finish by themselves now that every socket
/// is shut down. Returns how many were aborted.
async fn finish(spawned: &mut [Spawned]) -> Result<usize, String> {
    let deadline = Instant::now() + FINISH_LIMIT;
    let mut aborted = 0;
    for (i, s) in spawned.iter_mut().enumerate() {
        let left = deadline.saturating_duration_since(Instant::now());
        let joined = timeout(left, &mut s.handle).await.map_err(|_| {
            format!(
                "task {i} ({:?}, {:?}) never finished after shutdown: lost wake-up or hang",
                s.op, s.policy
            )
        })?;
        match joined {
            Ok(Ok(())) => {}
            Ok(Err(violation)) => return Err(format!("task {i} ({:?}): {violation}", s.op)),
            Err(e) if e.is_cancelled() && s.abort_at.is_some() => aborted += 1,
            // A future whose destructor panics, dropped inside the task's poll (a timeout,
            // a drop after k polls) or by an abort: the task reports that panic.
            Err(e) if e.is_panic() && s.op.panics_on_drop() => {
                aborted += usize::from(s.abort_at.is_some());
            }
            Err(e) => return Err(format!("task {i} ({:?}, {:?}): {e}", s.op, s.policy)),
        }
    }
    Ok(aborted)
}

/// Waits until the fd count, ops in flight and pooled buffers are back to their steady values.
async fn settle(rt: &Runtime, fds: usize, steady_ops: u64) -> Result<(), String> {
    let deadline = Instant::now() + SETTLE_LIMIT;
    loop {
        let m = rt.metrics();
        let now = (
            open_fds(),
            m.io.ops_in_flight,
            m.recv_buffers_in_use,
            m.tasks_alive,
        );
        if now == (fds, steady_ops, 0, 0) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "not back to steady state after {SETTLE_LIMIT:?}: (fds, ops_in_flight, \
                 recv_buffers_in_use, tasks_alive) = {now:?}, want ({fds}, {steady_ops}, 0, 0); \
                 {}",
                m.io
            ));
        }
        sleep(Duration::from_millis(1)).await;
    }
}
