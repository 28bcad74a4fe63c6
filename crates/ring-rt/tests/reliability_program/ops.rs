//! The ops a program spawns, and the ways each one is dropped.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use ring_rt::buf::IoBuf;
use ring_rt::fs::File;
use ring_rt::net::TcpStream;
use ring_rt::time::{sleep, timeout};

use super::{Spawned, World, INJECTED, PAIRS};

/// Reads a program's bytes; past the end every read is 0, so any input is a whole program.
pub struct Bytes<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Bytes<'a> {
    pub fn new(data: &'a [u8]) -> Bytes<'a> {
        Bytes { data, at: 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.at >= self.data.len()
    }

    pub fn u8(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }
}

/// One op, with the parameters the bytes chose.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    /// One pooled recv; the buffer is held for `hold` executor passes.
    RecvPooled {
        pair: usize,
        side: bool,
        hold: u8,
    },
    /// Takes up to `chunks` chunks from a multishot recv stream, holding each pooled buffer
    /// for `hold` executor passes (pressure on the pool).
    RecvStream {
        pair: usize,
        side: bool,
        chunks: u8,
        hold: u8,
    },
    Read {
        pair: usize,
        side: bool,
        cap: usize,
    },
    Write {
        pair: usize,
        side: bool,
        len: usize,
    },
    Accept,
    Incoming {
        count: u8,
    },
    Connect,
    TcpRead {
        pick: u8,
        cap: usize,
    },
    TcpWrite {
        pick: u8,
        len: usize,
    },
    FileRead {
        pos: u64,
        cap: usize,
    },
    FileWrite {
        pos: u64,
        len: usize,
    },
    Open,
    Sleep {
        us: u64,
    },
    /// `recv_from` on one of the two UDP sockets.
    UdpRecv {
        side: bool,
        cap: usize,
    },
    UdpSend {
        side: bool,
        len: usize,
    },
    /// write -> fdatasync -> read, linked.
    Chain {
        pos: u64,
        len: usize,
    },
    /// A read bounded by `Pending::timeout` of zero, a few microseconds or `Duration::MAX`.
    ReadTimed {
        pair: usize,
        side: bool,
        cap: usize,
        timeout: Timeout,
    },
    /// Reads and writes of nothing, a slice to `..=usize::MAX`, a file offset past i64.
    Extremes {
        pair: usize,
        side: bool,
    },
    /// A read inside a future whose destructor panics.
    PanicOnDrop {
        pair: usize,
        side: bool,
    },
    /// A read polled with a waker that panics when woken: the panic unwinds `block_on`.
    WakerPanics {
        pair: usize,
        side: bool,
    },
    /// The process at its fd limit for `steps` program steps.
    Ballast {
        steps: u8,
    },
}

/// The timeouts `Op::ReadTimed` tries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timeout {
    Zero,
    Micros(u64),
    Never,
}

impl Op {
    /// An op whose future panics when dropped (its task may end with that panic).
    pub fn panics_on_drop(&self) -> bool {
        matches!(self, Op::PanicOnDrop { .. })
    }
}

/// How and when the op's future is dropped.
#[derive(Clone, Copy, Debug)]
pub enum Policy {
    /// Runs until it finishes (at the latest when the program shuts every socket down).
    ToEnd,
    /// `ring_rt::time::timeout` around it.
    Timeout { us: u64 },
    /// A kernel link timeout on the op itself (reads and writes; others use `Timeout`).
    LinkTimeout { us: u64 },
    /// Its task is aborted `steps` program steps later.
    Abort { steps: u8 },
    /// Dropped after `polls` polls, one per executor pass.
    AfterPolls { polls: u8 },
}

fn op(b: &mut Bytes) -> Op {
    let pair = usize::from(b.u8()) % PAIRS;
    let side = b.u8() & 1 == 1;
    let size = |b: &mut Bytes| 1 + usize::from(b.u8()) * 257;
    match b.u8() % 21 {
        0 => Op::RecvPooled {
            pair,
            side,
            hold: b.u8() % 8,
        },
        1 => Op::RecvStream {
            pair,
            side,
            chunks: b.u8() % 16,
            hold: b.u8() % 6,
        },
        2 => Op::Read {
            pair,
            side,
            cap: size(b),
        },
        3 => Op::Write {
            pair,
            side,
            len: size(b),
        },
        4 => Op::Accept,
        5 => Op::Incoming {
            count: 1 + b.u8() % 4,
        },
        6 => Op::Connect,
        7 => Op::TcpRead {
            pick: b.u8(),
            cap: size(b),
        },
        8 => Op::TcpWrite {
            pick: b.u8(),
            len: size(b),
        },
        9 => Op::FileRead {
            pos: u64::from(b.u8()) * 509,
            cap: size(b),
        },
        10 => Op::FileWrite {
            pos: u64::from(b.u8()) * 509,
            len: size(b),
        },
        11 => Op::Open,
        12 => Op::Sleep {
            us: u64::from(b.u8()) * 4,
        },
        13 => Op::UdpRecv {
            side,
            cap: usize::from(b.u8()) * 8,
        },
        14 => Op::UdpSend {
            side,
            len: usize::from(b.u8()) * 8,
        },
        15 => Op::Chain {
            pos: u64::from(b.u8()) * 509,
            len: size(b),
        },
        16 => Op::ReadTimed {
            pair,
            side,
            cap: size(b),
            timeout: match b.u8() % 3 {
                0 => Timeout::Zero,
                1 => Timeout::Micros(u64::from(b.u8())),
                _ => Timeout::Never,
            },
        },
        17 => Op::Extremes { pair, side },
        18 => Op::PanicOnDrop { pair, side },
        19 => match b.u8() % 8 {
            // Rare: each one ends the program early (recovery is checked instead).
            0 => Op::WakerPanics { pair, side },
            _ => Op::Read {
                pair,
                side,
                cap: size(b),
            },
        },
        _ => Op::Ballast { steps: b.u8() % 6 },
    }
}

fn policy(b: &mut Bytes) -> Policy {
    let us = u64::from(b.u8()) * 8;
    match b.u8() % 6 {
        0 => Policy::ToEnd,
        1 => Policy::Timeout { us },
        2 => Policy::LinkTimeout { us },
        3 => Policy::Abort { steps: b.u8() % 8 },
        _ => Policy::AfterPolls { polls: b.u8() % 6 },
    }
}

/// Spawns the next op the bytes describe, as a task applying its drop policy.
pub(super) fn spawn(world: &Rc<World>, b: &mut Bytes, step: usize) -> Spawned {
    let op = op(b);
    let policy = policy(b);
    if std::env::var_os("RING_RT_TRACE").is_some() {
        eprintln!("step {step}: {op:?} {policy:?}");
    }
    if let Op::Ballast { steps } = op {
        world.hold_ballast(step + usize::from(steps));
    }
    let future = run_op(world.clone(), op, policy);
    let handle = ring_rt::spawn(async move {
        match policy {
            Policy::ToEnd | Policy::LinkTimeout { .. } | Policy::Abort { .. } => future.await,
            Policy::Timeout { us } => timeout(Duration::from_micros(us), future)
                .await
                .unwrap_or(Ok(())),
            Policy::AfterPolls { polls } => PollThenDrop {
                future: Some(future),
                polls_left: polls,
            }
            .await
            .unwrap_or(Ok(())),
        }
    });
    let abort_at = match policy {
        Policy::Abort { steps } => Some(step + usize::from(steps)),
        _ => None,
    };
    Spawned {
        handle,
        op,
        policy,
        abort_at,
    }
}

type OpFuture = Pin<Box<dyn Future<Output = Result<(), String>>>>;

fn run_op(world: Rc<World>, op: Op, policy: Policy) -> OpFuture {
    let link = match policy {
        Policy::LinkTimeout { us } => Some(Duration::from_micros(us)),
        _ => None,
    };
    Box::pin(async move {
        match op {
            Op::RecvPooled { pair, side, hold } => {
                let s = world.side(pair, side);
                match s.recv_pooled().await {
                    Ok(Some(buf)) => {
                        for _ in 0..hold {
                            ring_rt::yield_now().await;
                        }
                        check_len(buf.len(), 1, 256)
                    }
                    Ok(None) => Ok(()),
                    Err(e) => os_error(e),
                }
            }
            Op::RecvStream {
                pair,
                side,
                chunks,
                hold,
            } => recv_stream(&world, pair, side, chunks, hold).await,
            Op::Read { pair, side, cap } => {
                let s = world.side(pair, side);
                let buf = Vec::with_capacity(cap);
                let (ptr, cap) = (buf.as_ptr(), buf.capacity());
                let (res, buf) = match link {
                    Some(d) => s.read(buf).timeout(d).await,
                    None => s.read(buf).await,
                };
                read_back(res, &buf, ptr, cap)
            }
            Op::Write { pair, side, len } => {
                let s = world.side(pair, side);
                let data = vec![0x5a; len];
                let ptr = data.as_ptr();
                let (res, buf) = match link {
                    Some(d) => s.write(data).timeout(d).await,
                    None => s.write_all(data).await.map_res(|()| len),
                };
                write_back(res, &buf, ptr, len)
            }
            Op::Accept => match world.listener.accept().await {
                Ok((s, _)) => {
                    world.keep_tcp(s);
                    Ok(())
                }
                Err(e) => os_error(e),
            },
            Op::Incoming { count } => {
                let mut incoming = world.listener.incoming();
                for _ in 0..count {
                    match incoming.next().await {
                        Some(Ok(s)) => world.keep_tcp(s),
                        Some(Err(e)) => return os_error(e),
                        None => return Err("incoming ended while the listener lives".into()),
                    }
                }
                Ok(())
            }
            Op::Connect => match TcpStream::connect(world.addr).await {
                Ok(s) => {
                    world.keep_tcp(s);
                    Ok(())
                }
                Err(e) => os_error(e),
            },
            Op::TcpRead { pick, cap } => {
                let Some(s) = world.tcp_stream(pick) else {
                    return Ok(());
                };
                let buf = Vec::with_capacity(cap);
                let (ptr, cap) = (buf.as_ptr(), buf.capacity());
                let (res, buf) = match link {
                    Some(d) => s.read(buf).timeout(d).await,
                    None => s.read(buf).await,
                };
                read_back(res, &buf, ptr, cap)
            }
            Op::TcpWrite { pick, len } => {
                let Some(s) = world.tcp_stream(pick) else {
                    return Ok(());
                };
                let data = vec![0xa5; len];
                let ptr = data.as_ptr();
                let (res, buf) = s.write_all(data).await.map_res(|()| len);
                write_back(res, &buf, ptr, len)
            }
            Op::FileRead { pos, cap } => {
                let buf = Vec::with_capacity(cap);
                let (ptr, cap) = (buf.as_ptr(), buf.capacity());
                let (res, buf) = match link {
                    Some(d) => world.file.read_at(buf, pos).timeout(d).await,
                    None => world.file.read_at(buf, pos).await,
                };
                read_back(res, &buf, ptr, cap)
            }
            Op::FileWrite { pos, len } => {
                let data = vec![0x33; len];
                let ptr = data.as_ptr();
                let (res, buf) = world.file.write_all_at(data, pos).await.map_res(|()| len);
                write_back(res, &buf, ptr, len)
            }
            // The opened file is dropped at once: its close is queued on the ring.
            Op::Open => File::open(&world.path).await.map(drop).or_else(os_error),
            Op::Sleep { us } => {
                sleep(Duration::from_micros(us)).await;
                Ok(())
            }
            Op::UdpRecv { side, cap } => {
                let (me, peer) = world.udp_pair(side);
                let buf = Vec::with_capacity(cap);
                let (ptr, cap) = (buf.as_ptr(), buf.capacity());
                let (res, buf) = me.recv_from(buf).await;
                match res {
                    Ok((n, from)) if from != peer.local_addr().map_err(|e| e.to_string())? => {
                        Err(format!("{n}-byte datagram from {from}, not the peer"))
                    }
                    Ok((n, _)) => read_back(Ok(n), &buf, ptr, cap),
                    // A shut-down UDP socket gives 0 bytes from nobody, which has no inet
                    // address to report (std errs the same way).
                    Err(e) if e.kind() == io::ErrorKind::InvalidData && world.closed.get() => {
                        Ok(())
                    }
                    Err(e) => read_back(Err(e), &buf, ptr, cap),
                }
            }
            Op::UdpSend { side, len } => {
                let (me, peer) = world.udp_pair(side);
                let to = peer.local_addr().map_err(|e| e.to_string())?;
                let data = vec![0x22u8; len];
                let ptr = data.as_ptr();
                let (res, buf) = me.send_to(data, to).await;
                write_back(res, &buf, ptr, len)
            }
            Op::Chain { pos, len } => {
                let data = vec![0x44u8; len];
                let back = Vec::with_capacity(len);
                let (ptr, rptr) = (data.as_ptr(), back.as_ptr());
                let ((written, synced), read) = world
                    .file
                    .write_at(data, pos)
                    .link(world.file.sync_data())
                    .link(world.file.read_at(back, pos))
                    .await;
                write_back(written.0, &written.1, ptr, len)?;
                synced.or_else(os_error)?;
                read_back(read.0, &read.1, rptr, len)
            }
            Op::ReadTimed {
                pair,
                side,
                cap,
                timeout: limit,
            } => {
                let s = world.side(pair, side);
                let buf = Vec::with_capacity(cap);
                let (ptr, cap) = (buf.as_ptr(), buf.capacity());
                let d = match limit {
                    Timeout::Zero => Duration::ZERO,
                    Timeout::Micros(us) => Duration::from_micros(us),
                    Timeout::Never => Duration::MAX,
                };
                let (res, buf) = s.read(buf).timeout(d).await;
                read_back(res, &buf, ptr, cap)
            }
            Op::Extremes { pair, side } => extremes(&world, pair, side).await,
            Op::PanicOnDrop { pair, side } => {
                let s = world.side(pair, side);
                let read = async move {
                    let buf = Vec::with_capacity(64);
                    let (ptr, cap) = (buf.as_ptr(), buf.capacity());
                    let (res, buf) = s.read(buf).await;
                    read_back(res, &buf, ptr, cap)
                };
                PanicsWhenDropped(Box::pin(read)).await
            }
            Op::WakerPanics { pair, side } => {
                let s = world.side(pair, side);
                let buf = Vec::with_capacity(64);
                let (ptr, cap) = (buf.as_ptr(), buf.capacity());
                let mut read = Box::pin(std::future::IntoFuture::into_future(s.read(buf)));
                let fired = Arc::new(std::sync::atomic::AtomicBool::new(false));
                let (res, buf) = std::future::poll_fn(|cx| {
                    let waker = PanickingWaker {
                        task: cx.waker().clone(),
                        fired: fired.clone(),
                    };
                    let waker = Waker::from(Arc::new(waker));
                    read.as_mut().poll(&mut Context::from_waker(&waker))
                })
                .await;
                read_back(res, &buf, ptr, cap)
            }
            // Held by the world (see `spawn`): nothing to run here.
            Op::Ballast { .. } => Ok(()),
        }
    })
}

/// Zero-length reads and writes complete at once with 0; a slice to `..=usize::MAX` is
/// the whole buffer; a file offset past `i64::MAX` is EINVAL.
async fn extremes(world: &World, pair: usize, side: bool) -> Result<(), String> {
    let s = world.side(pair, side);
    let (res, buf) = s.read(Vec::new()).await;
    read_back(res, &buf, buf.as_ptr(), 0)?;
    let (res, _) = s.write(Vec::new()).await;
    if res.as_ref().is_ok_and(|&n| n != 0) {
        return Err(format!("an empty write wrote {res:?}"));
    }
    let whole = vec![0x66u8; 32].slice(..=usize::MAX);
    if whole.bytes_init() != 32 {
        return Err(format!("slice(..=usize::MAX) holds {}", whole.bytes_init()));
    }
    let (res, _) = s.write(whole).await;
    res.map(drop).or_else(os_error)?;
    let (res, _) = world.file.read_at(Vec::with_capacity(8), u64::MAX).await;
    match res {
        // EINVAL; or EMFILE on epoll while the process is at its fd limit (the blocking
        // job's own fd could not be made).
        Err(e) if e.raw_os_error().is_some() => Ok(()),
        other => Err(format!("a read at offset u64::MAX gave {other:?}")),
    }
}

/// A future whose destructor panics (an injected panic), once its inner future is done
/// with or dropped.
struct PanicsWhenDropped(Pin<Box<dyn Future<Output = Result<(), String>>>>);

impl Future for PanicsWhenDropped {
    type Output = Result<(), String>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.as_mut().poll(cx)
    }
}

impl Drop for PanicsWhenDropped {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("{INJECTED}: a future's destructor");
        }
    }
}

/// A waker that panics the first time it is woken (an injected panic), after waking the
/// task it stands for: a waker that lost the wake-up would leave its task asleep for ever,
/// which no runtime can mend; one that panics must not cost anyone else theirs.
struct PanickingWaker {
    task: Waker,
    /// Shared by every waker of one op: it panics once.
    fired: Arc<std::sync::atomic::AtomicBool>,
}

impl Wake for PanickingWaker {
    fn wake(self: Arc<Self>) {
        self.task.wake_by_ref();
        if !self.fired.swap(true, std::sync::atomic::Ordering::Relaxed) {
            panic!("{INJECTED}: a waker");
        }
    }
}

/// fds held open at the process's fd limit, which is lowered to just above them: every
/// op that needs an fd meanwhile fails with EMFILE. Dropping it closes them and restores
/// the limit.
pub struct Ballast {
    files: Vec<std::fs::File>,
    limit: libc::rlimit,
    /// The program step that releases it.
    until: usize,
}

impl Ballast {
    fn hold(until: usize) -> Option<Ballast> {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: a valid pointer to a live rlimit.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
            return None;
        }
        let lowered = libc::rlimit {
            rlim_cur: (super::open_fds() as u64 + 4).min(limit.rlim_max),
            rlim_max: limit.rlim_max,
        };
        // SAFETY: a valid pointer to a live rlimit; lowering the soft limit needs nothing.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lowered) } != 0 {
            return None;
        }
        let mut files = Vec::new();
        while let Ok(f) = std::fs::File::open("/dev/null") {
            files.push(f);
        }
        Some(Ballast {
            files,
            limit,
            until,
        })
    }
}

impl Drop for Ballast {
    fn drop(&mut self) {
        self.files.clear();
        // SAFETY: restores the limit read in `hold`.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &self.limit) };
    }
}

impl World {
    fn udp_pair(&self, side: bool) -> (Rc<ring_rt::net::UdpSocket>, Rc<ring_rt::net::UdpSocket>) {
        let (me, peer) = if side { (1, 0) } else { (0, 1) };
        (self.udp[me].clone(), self.udp[peer].clone())
    }

    /// Holds the process at its fd limit until step `until` (one ballast at a time).
    pub(super) fn hold_ballast(&self, until: usize) {
        let mut ballast = self.ballast.borrow_mut();
        if ballast.is_none() {
            *ballast = Ballast::hold(until);
        }
    }

    /// Lets the fds go once the program reached the ballast's last step.
    pub(super) fn release_ballast_at(&self, step: usize) {
        let mut ballast = self.ballast.borrow_mut();
        if ballast.as_ref().is_some_and(|b| step >= b.until) {
            *ballast = None;
        }
    }
}

async fn recv_stream(
    world: &World,
    pair: usize,
    side: bool,
    chunks: u8,
    hold: u8,
) -> Result<(), String> {
    let s = world.side(pair, side);
    let mut stream = s.recv_stream();
    for _ in 0..chunks {
        match stream.next().await {
            Some(Ok(buf)) => {
                check_len(buf.len(), 1, 256)?;
                // Hold the buffer while other tasks run, so they find the pool dry; but
                // never across our own next(): a task that holds every pooled buffer and
                // asks for one more waits forever, as with any pool (see RELIABILITY.md).
                for _ in 0..hold {
                    ring_rt::yield_now().await;
                }
                drop(buf);
            }
            Some(Err(e)) => return os_error(e),
            None => break,
        }
    }
    Ok(())
}

impl World {
    fn side(&self, pair: usize, side: bool) -> Rc<ring_rt::net::UnixStream> {
        let (a, b) = &self.pairs[pair];
        if side {
            b.clone()
        } else {
            a.clone()
        }
    }

    fn tcp_stream(&self, pick: u8) -> Option<Rc<TcpStream>> {
        let tcp = self.tcp.borrow();
        tcp.get(usize::from(pick) % tcp.len().max(1)).cloned()
    }
}

/// `(io::Result<()>, B)` as `(io::Result<usize>, B)`, so writes check alike.
trait MapRes<B> {
    fn map_res(self, f: impl FnOnce(()) -> usize) -> (io::Result<usize>, B);
}

impl<B> MapRes<B> for (io::Result<()>, B) {
    fn map_res(self, f: impl FnOnce(()) -> usize) -> (io::Result<usize>, B) {
        (self.0.map(f), self.1)
    }
}

/// An error an op may legitimately end with: one the OS reported (reset, pipe, timed out,
/// cancelled, no buffers...). Anything else is the runtime's own bookkeeping failing.
fn os_error(e: io::Error) -> Result<(), String> {
    match e.raw_os_error() {
        Some(_) => Ok(()),
        None if e.kind() == io::ErrorKind::TimedOut => Ok(()),
        None => Err(format!("not an OS error: {e:?}")),
    }
}

fn check_len(n: usize, min: usize, max: usize) -> Result<(), String> {
    if n < min || n > max {
        return Err(format!("pooled buffer of {n} bytes (want {min}..={max})"));
    }
    Ok(())
}

/// A read gave its buffer back: the same allocation, with exactly the bytes read.
fn read_back(
    res: io::Result<usize>,
    buf: &Vec<u8>,
    ptr: *const u8,
    cap: usize,
) -> Result<(), String> {
    if buf.as_ptr() != ptr || buf.capacity() != cap {
        return Err("read returned another buffer".into());
    }
    match res {
        Ok(n) if n == buf.len() && n <= cap => Ok(()),
        Ok(n) => Err(format!(
            "read {n} into a buffer of len {} cap {cap}",
            buf.len()
        )),
        Err(e) if buf.is_empty() => os_error(e),
        Err(e) => Err(format!(
            "failed read ({e}) left {} bytes marked read",
            buf.len()
        )),
    }
}

/// A write gave its buffer back: the same allocation, unchanged in length.
fn write_back(
    res: io::Result<usize>,
    buf: &impl IoBuf,
    ptr: *const u8,
    len: usize,
) -> Result<(), String> {
    if buf.stable_ptr() != ptr || buf.bytes_init() != len {
        return Err("write returned another buffer".into());
    }
    match res {
        Ok(n) if n <= len => Ok(()),
        Ok(n) => Err(format!("wrote {n} of {len}")),
        Err(e) => os_error(e),
    }
}

/// Polls `future` at most `polls` times (once per executor pass), then drops it.
struct PollThenDrop {
    future: Option<OpFuture>,
    polls_left: u8,
}

impl Future for PollThenDrop {
    type Output = Option<Result<(), String>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // PollThenDrop is Unpin (the future is boxed).
        let this = self.get_mut();
        let Some(future) = this.future.as_mut() else {
            return Poll::Ready(None);
        };
        if this.polls_left == 0 {
            this.future = None;
            return Poll::Ready(None);
        }
        this.polls_left -= 1;
        match future.as_mut().poll(cx) {
            Poll::Ready(out) => {
                this.future = None;
                Poll::Ready(Some(out))
            }
            Poll::Pending => {
                // Come back on the next pass whether or not the op made progress.
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }
}
