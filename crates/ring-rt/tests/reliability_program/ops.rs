//! The ops a program spawns, and the ways each one is dropped.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use ring_rt::buf::IoBuf;
use ring_rt::fs::File;
use ring_rt::net::TcpStream;
use ring_rt::time::{sleep, timeout};

use super::{Spawned, World, PAIRS};

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
    match b.u8() % 13 {
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
        _ => Op::Sleep {
            us: u64::from(b.u8()) * 4,
        },
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
        }
    })
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
