//! The runtime-less io_uring echo server, the baseline of the instruction counts (issue 19):
//! what echo costs on the io-uring crate alone. One thread and one ring set up as ring-rt
//! sets up its own; a multishot accept (5.19+; a plain accept re-armed per connection before
//! that); per connection one recv into its own 4 KiB buffer, then one send of what came (again
//! for a short send); one `io_uring_enter` per loop turn, which submits everything the last
//! turn pushed and waits for a completion, after which the whole CQ is drained.
//!
//! SIGTERM or SIGINT (a signalfd polled in the ring) cancels every op, waits for each op's
//! last CQE, and exits, printing `metrics {"backend":"raw-uring","enters":..}` on stderr as
//! ring-rt's echo example does.
//!
//! raw-uring-echo --addr IP:PORT

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::ExitCode;

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use ring_demo::flags::Flags;

const USAGE: &str = "usage: raw-uring-echo --addr IP:PORT";
/// SQ entries, as ring-rt's default.
const ENTRIES: u32 = 256;
/// CQ entries, as ring-rt sizes them for a 256-entry SQ.
const CQ_ENTRIES: u32 = 4096;
/// Each connection's buffer.
const BUF_LEN: usize = 4096;

/// What an op is, in the low three bits of its `user_data`; a connection's slab index sits
/// above them. A slot is freed only when its connection has no op in flight, so a CQE never
/// meets a slot reused by another connection and needs no generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tag {
    Accept = 0,
    Recv = 1,
    Send = 2,
    /// The poll on the signalfd.
    Signal = 3,
    /// An `ASYNC_CANCEL` at shutdown (its own CQE says nothing we need).
    Cancel = 4,
}

const TAG_BITS: u32 = 3;

fn user_data(tag: Tag, index: usize) -> u64 {
    ((index as u64) << TAG_BITS) | tag as u64
}

fn decode(user_data: u64) -> (Tag, usize) {
    let tag = match user_data & ((1 << TAG_BITS) - 1) {
        0 => Tag::Accept,
        1 => Tag::Recv,
        2 => Tag::Send,
        3 => Tag::Signal,
        4 => Tag::Cancel,
        other => unreachable!("no op is tagged {other}"),
    };
    (tag, (user_data >> TAG_BITS) as usize)
}

/// One connection.
struct Conn {
    fd: OwnedFd,
    /// Written by the kernel during a recv, read by it during a send. Boxed, so it stays put
    /// when the slab grows; freed only with the connection, which waits for its op's CQE.
    buf: Box<[u8; BUF_LEN]>,
    /// Bytes the last recv brought, to send back.
    len: usize,
    /// Of those, bytes sent so far.
    sent: usize,
    /// The op in flight (`Recv` or `Send`), if any; the slot may be freed only when none.
    op: Option<Tag>,
}

/// The setup flags tried in turn, best first; after each refusal the next drops one more,
/// in the order ring-core drops them after EINVAL (DEFER_TASKRUN, SINGLE_ISSUER,
/// COOP_TASKRUN with TASKRUN_FLAG, SUBMIT_ALL).
const SETUPS: [&str; 5] = [
    "submit_all,coop_taskrun,taskrun_flag,single_issuer,defer_taskrun",
    "submit_all,coop_taskrun,taskrun_flag,single_issuer",
    "submit_all,coop_taskrun,taskrun_flag",
    "submit_all",
    "none",
];

/// A ring as ring-rt sets one up on this kernel, and the setup flags it got.
fn ring() -> io::Result<(IoUring, &'static str)> {
    let mut refused = None;
    for (level, name) in SETUPS.iter().enumerate() {
        let mut builder = IoUring::builder();
        builder.setup_cqsize(CQ_ENTRIES);
        if level <= 3 {
            builder.setup_submit_all();
        }
        if level <= 2 {
            builder.setup_coop_taskrun().setup_taskrun_flag();
        }
        if level <= 1 {
            builder.setup_single_issuer();
        }
        if level == 0 {
            builder.setup_defer_taskrun();
        }
        match builder.build(ENTRIES) {
            Ok(ring) => return Ok((ring, name)),
            Err(e) => refused = Some(e),
        }
    }
    Err(refused.expect("at least one setup was tried"))
}

/// A signalfd for SIGTERM and SIGINT, both blocked in this (the only) thread so that they
/// wait in the fd instead of killing the process.
fn signal_fd() -> io::Result<OwnedFd> {
    // SAFETY: sigset_t is plain data; all zeroes is a valid value for sigemptyset to fill.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a live sigset_t and the signal numbers are valid.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
    }
    // SAFETY: `set` is initialised; a null old-set pointer is allowed.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    // SAFETY: -1 asks for a new fd; `set` is initialised.
    let fd = unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: signalfd just returned this fd, and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

struct Server {
    ring: IoUring,
    listener: TcpListener,
    signals: OwnedFd,
    /// Connections by slab index; `free` lists the empty slots.
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    /// CQEs copied out of the CQ, so that handling them may push new SQEs.
    cqes: Vec<cqueue::Entry>,
    /// Multishot accept (until the kernel refuses it with EINVAL).
    is_multishot: bool,
    /// The accept, or the signal poll, still has a CQE to come.
    accept_armed: bool,
    signal_armed: bool,
    /// A signal came: every op was cancelled, and the loop ends once all are reaped.
    stopping: bool,
    /// `io_uring_enter` calls, CQEs reaped, failed accepts.
    enters: u64,
    cqes_reaped: u64,
    accept_errors: u64,
}

impl Server {
    /// Stages `sqe`, first submitting what is staged when the SQ is full.
    ///
    /// # Safety
    ///
    /// Whatever `sqe` points at (buffers, fds) stays valid and unmoved until the op's last
    /// CQE is reaped.
    unsafe fn push(&mut self, sqe: &squeue::Entry) -> io::Result<()> {
        for _ in 0..2 {
            // SAFETY: the caller's contract.
            if unsafe { self.ring.submission().push(sqe) }.is_ok() {
                return Ok(());
            }
            self.ring.submit()?;
            self.enters += 1;
        }
        Err(io::Error::other("the SQ stays full after a submit"))
    }

    fn arm_accept(&mut self) -> io::Result<()> {
        let fd = types::Fd(self.listener.as_raw_fd());
        let sqe = if self.is_multishot {
            opcode::AcceptMulti::new(fd).build()
        } else {
            opcode::Accept::new(fd, std::ptr::null_mut(), std::ptr::null_mut()).build()
        };
        let sqe = sqe.user_data(user_data(Tag::Accept, 0));
        self.accept_armed = true;
        // SAFETY: the accept points at no memory (no peer address is asked for), and the
        // listener lives in `self` until the loop has reaped the accept's last CQE.
        unsafe { self.push(&sqe) }
    }

    fn arm_signal(&mut self) -> io::Result<()> {
        let fd = types::Fd(self.signals.as_raw_fd());
        let sqe = opcode::PollAdd::new(fd, libc::POLLIN as _)
            .build()
            .user_data(user_data(Tag::Signal, 0));
        self.signal_armed = true;
        // SAFETY: a poll points at no memory; the signalfd lives in `self` until the loop
        // has reaped the poll's CQE.
        unsafe { self.push(&sqe) }
    }

    fn arm_recv(&mut self, index: usize) -> io::Result<()> {
        let conn = self.conns[index].as_mut().expect("a live connection");
        let sqe = opcode::Recv::new(
            types::Fd(conn.fd.as_raw_fd()),
            conn.buf.as_mut_ptr(),
            BUF_LEN as u32,
        )
        .build()
        .user_data(user_data(Tag::Recv, index));
        conn.op = Some(Tag::Recv);
        // SAFETY: the recv writes into the connection's boxed buffer, which neither moves
        // nor is freed while `op` is set (`close` requires it clear), and the fd lives with it.
        unsafe { self.push(&sqe) }
    }

    fn arm_send(&mut self, index: usize) -> io::Result<()> {
        let conn = self.conns[index].as_mut().expect("a live connection");
        let rest = &conn.buf[conn.sent..conn.len];
        let sqe = opcode::Send::new(
            types::Fd(conn.fd.as_raw_fd()),
            rest.as_ptr(),
            rest.len() as u32,
        )
        .build()
        .user_data(user_data(Tag::Send, index));
        conn.op = Some(Tag::Send);
        // SAFETY: the send reads the connection's boxed buffer, which neither moves nor is
        // freed nor written while `op` is set, and the fd lives with it.
        unsafe { self.push(&sqe) }
    }

    /// Cancels the op whose `user_data` is `target`.
    fn cancel(&mut self, target: u64) -> io::Result<()> {
        let sqe = opcode::AsyncCancel::new(target)
            .build()
            .user_data(user_data(Tag::Cancel, 0));
        // SAFETY: a cancel points at no memory.
        unsafe { self.push(&sqe) }
    }

    /// Frees connection `index` (closing its fd); it has no op in flight.
    fn close(&mut self, index: usize) {
        let conn = self.conns[index].take().expect("a live connection");
        assert!(
            conn.op.is_none(),
            "closing a connection with an op in flight"
        );
        self.free.push(index);
    }

    fn insert(&mut self, fd: OwnedFd) -> usize {
        let conn = Conn {
            fd,
            buf: Box::new([0; BUF_LEN]),
            len: 0,
            sent: 0,
            op: None,
        };
        match self.free.pop() {
            Some(index) => {
                self.conns[index] = Some(conn);
                index
            }
            None => {
                self.conns.push(Some(conn));
                self.conns.len() - 1
            }
        }
    }

    fn accepted(&mut self, res: i32, has_more: bool) -> io::Result<()> {
        self.accept_armed &= has_more;
        if res >= 0 {
            // SAFETY: the kernel just gave us this fd, and nothing else owns it.
            let fd = unsafe { OwnedFd::from_raw_fd(res) };
            if !self.stopping {
                let index = self.insert(fd);
                self.arm_recv(index)?;
            }
        } else if res == -libc::EINVAL && self.is_multishot && !has_more {
            // Before 5.19 the kernel refuses the multishot flag: accept one at a time.
            self.is_multishot = false;
        } else if res != -libc::ECANCELED {
            // Out of fds and the like: report sparingly.
            self.accept_errors += 1;
            if self.accept_errors.is_power_of_two() {
                let e = io::Error::from_raw_os_error(-res);
                eprintln!(
                    "raw-uring-echo: accept: {e} ({} so far)",
                    self.accept_errors
                );
            }
        }
        if !self.accept_armed && !self.stopping {
            self.arm_accept()?;
        }
        Ok(())
    }

    fn received(&mut self, index: usize, res: i32) -> io::Result<()> {
        let conn = self.conns[index].as_mut().expect("a live connection");
        conn.op = None;
        // EOF, an error, or a cancel: the connection is done.
        if res <= 0 || self.stopping {
            self.close(index);
            return Ok(());
        }
        (conn.len, conn.sent) = (res as usize, 0);
        self.arm_send(index)
    }

    fn sent(&mut self, index: usize, res: i32) -> io::Result<()> {
        let conn = self.conns[index].as_mut().expect("a live connection");
        conn.op = None;
        if res <= 0 || self.stopping {
            self.close(index);
            return Ok(());
        }
        conn.sent += res as usize;
        if conn.sent < conn.len {
            self.arm_send(index)
        } else {
            self.arm_recv(index)
        }
    }

    /// A signal came: cancel the accept and every connection's op.
    fn stop(&mut self) -> io::Result<()> {
        self.stopping = true;
        if self.accept_armed {
            self.cancel(user_data(Tag::Accept, 0))?;
        }
        let in_flight: Vec<u64> = (self.conns.iter().enumerate())
            .filter_map(|(i, c)| Some(user_data(c.as_ref()?.op?, i)))
            .collect();
        for target in in_flight {
            self.cancel(target)?;
        }
        Ok(())
    }

    fn complete(&mut self, cqe: &cqueue::Entry) -> io::Result<()> {
        let (tag, index) = decode(cqe.user_data());
        match tag {
            Tag::Accept => self.accepted(cqe.result(), cqueue::more(cqe.flags())),
            Tag::Recv => self.received(index, cqe.result()),
            Tag::Send => self.sent(index, cqe.result()),
            Tag::Signal => {
                self.signal_armed = false;
                self.stop()
            }
            Tag::Cancel => Ok(()),
        }
    }

    /// One loop turn: one enter that submits what was pushed and waits for a CQE, then
    /// every CQE in the CQ handled.
    fn turn(&mut self) -> io::Result<()> {
        match self.ring.submit_and_wait(1) {
            Ok(_) => {}
            // A signal interrupted the wait (EINTR), or the kernel wants the CQ drained
            // before it takes more (EBUSY) or has no memory for now (EAGAIN): drain, retry.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR | libc::EBUSY | libc::EAGAIN)
                ) => {}
            Err(e) => return Err(e),
        }
        self.enters += 1;
        let mut cqes = std::mem::take(&mut self.cqes);
        cqes.extend(self.ring.completion());
        self.cqes_reaped += cqes.len() as u64;
        let result = cqes.iter().try_for_each(|cqe| self.complete(cqe));
        cqes.clear();
        self.cqes = cqes;
        result
    }

    /// Whether a signal came and every op has had its last CQE.
    fn is_done(&self) -> bool {
        self.stopping
            && !self.accept_armed
            && !self.signal_armed
            && self.conns.iter().flatten().all(|c| c.op.is_none())
    }

    fn run(&mut self) -> io::Result<()> {
        self.arm_signal()?;
        self.arm_accept()?;
        while !self.is_done() {
            self.turn()?;
        }
        Ok(())
    }
}

fn serve(addr: SocketAddr) -> io::Result<()> {
    let signals = signal_fd()?;
    let (ring, setup) = ring()?;
    let listener = TcpListener::bind(addr)?;
    let mut server = Server {
        ring,
        listener,
        signals,
        conns: Vec::new(),
        free: Vec::new(),
        cqes: Vec::with_capacity(CQ_ENTRIES as usize),
        is_multishot: true,
        accept_armed: false,
        signal_armed: false,
        stopping: false,
        enters: 0,
        cqes_reaped: 0,
        accept_errors: 0,
    };
    println!("echo listening on {addr} backend=raw-uring threads=1 setup={setup}");
    let result = server.run();
    if result.is_err() && !server.is_done() {
        // Ops may still be in the kernel, writing into connection buffers: never free those
        // under it. The process exits next, which cancels them.
        std::mem::forget(server.conns);
        return result;
    }
    eprintln!(
        "metrics {{\"backend\":\"raw-uring\",\"enters\":{},\"cqes_reaped\":{}}}",
        server.enters, server.cqes_reaped
    );
    eprintln!("raw-uring-echo: signal, shutting down");
    result
}

fn parse_args() -> Result<SocketAddr, String> {
    let mut addr = "127.0.0.1:7000".parse().expect("literal");
    let mut flags = Flags::from_env();
    while let Some(flag) = flags.next_flag()? {
        match flag.as_str() {
            "--addr" => addr = flags.value()?,
            _ => return Err(flags.unknown()),
        }
    }
    Ok(addr)
}

fn main() -> ExitCode {
    let addr = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("raw-uring-echo: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match serve(addr) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("raw-uring-echo: {e}");
            ExitCode::FAILURE
        }
    }
}
