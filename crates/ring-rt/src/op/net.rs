//! Socket ops: accept, connect, recv, send, buffer-select recv, zero-copy send, msg ops.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::task::{Context, Poll};

use io_uring::{opcode, squeue, types};
use ring_core::buf_pool::{BufGroup, BufMode};
use ring_core::cqe::{Cqe, F_SOCK_NONEMPTY};
use ring_core::direct::DirectCloser;
use ring_core::lifecycle::{Deferred, Orphan};
use ring_core::user_data::OpId;
use socket2::{SockAddr, SockAddrStorage};

use super::multishot::MultishotDef;
pub(crate) use super::unclaimed::Conn;
use super::unclaimed::{ChainTurns, Item, RecvTurn, TurnSlot, Unclaimed};
use super::{Emulation, OpDef, Operation};
use crate::backend::direct::sqe_on;
use crate::buf::{read_output, IoBuf, IoBufMut};
use crate::pool::PooledBuf;
use crate::sys;

/// Connections a multishot accept may hold that `Incoming::next` has not returned yet:
/// past this many the accept is cancelled (connections then wait in the kernel's listen
/// backlog) and re-armed once they are taken. A server that stops calling `next` stops
/// accepting.
pub const ACCEPT_QUEUE_MAX: u16 = 16;

/// The flag every receive and send `try_syscall` makes carries: it runs on the loop's own
/// thread, and must not block there whatever the fd's mode. The mode belongs to the socket,
/// shared by every dup of its fd, and another owner of a dup can make it blocking: a
/// receive then waited on the loop thread for the peer, stopping every task (review CK).
/// Accept and connect have no such flag, and still rely on `O_NONBLOCK`.
const NO_WAIT: i32 = libc::MSG_DONTWAIT;

/// How a socket op waits on epoll (and a readiness-only op on io_uring): for `fd` to take
/// or give data.
pub(super) fn readable(fd: RawFd) -> Emulation {
    Emulation::Readiness {
        fd,
        events: libc::POLLIN as u32,
    }
}

pub(super) fn writable(fd: RawFd) -> Emulation {
    Emulation::Readiness {
        fd,
        events: libc::POLLOUT as u32,
    }
}

/// Socket op lengths: io_uring's send/recv reject lengths above `i32::MAX` (`EINVAL`) where
/// `send(2)`/`recv(2)` clamp, so a larger buffer is used up to `i32::MAX` bytes (a short
/// transfer, which every caller already handles).
#[inline]
fn len_u32(len: usize) -> u32 {
    len.min(i32::MAX as usize) as u32
}

/// Takes ownership of an fd the kernel returned.
fn owned_fd(res: u32) -> OwnedFd {
    // SAFETY: a successful accept/socket/open CQE's result is a new fd nobody else owns.
    unsafe { OwnedFd::from_raw_fd(res as RawFd) }
}

/// A peer address the kernel fills in (boxed: the SQE points at it).
pub(crate) struct AddrOut {
    storage: SockAddrStorage,
    len: libc::socklen_t,
}

impl AddrOut {
    pub(crate) fn new() -> Box<AddrOut> {
        let storage = SockAddrStorage::zeroed();
        let len = storage.size_of();
        Box::new(AddrOut { storage, len })
    }

    fn ptrs(&mut self) -> (*mut libc::sockaddr, *mut libc::socklen_t) {
        (
            (&mut self.storage as *mut SockAddrStorage).cast(),
            &mut self.len,
        )
    }

    pub(crate) fn into_addr(self) -> SockAddr {
        // SAFETY: the kernel filled `storage` with an address of `len` bytes (accept /
        // recvmsg completed successfully), and len never exceeds the storage size.
        unsafe { SockAddr::new(self.storage, self.len) }
    }

    /// A copy of the address, after a successful accept filled it in.
    fn to_addr(&self) -> SockAddr {
        // SAFETY: as in `into_addr`; `storage` is plain bytes, copied.
        unsafe { SockAddr::new(std::ptr::read(&self.storage), self.len) }
    }
}

/// `accept4`: a new connection and its peer address.
pub(crate) struct Accept {
    pub(crate) fd: RawFd,
    pub(crate) addr: Box<AddrOut>,
    /// The listener's unclaimed connections: taken first, and where a dropped accept's
    /// connection goes.
    pub(crate) unclaimed: Rc<Unclaimed>,
    /// Accepts into the worker's direct-descriptor table, whose closes go here (`None`:
    /// an fd).
    pub(crate) direct: Option<DirectCloser>,
    /// A connection a dropped accept took, found before this one started: what it gives.
    pub(crate) queued: Option<(Conn, Option<SockAddr>)>,
}

impl Accept {
    /// An accept on listener `fd`, into the direct table `direct` closes for if given.
    pub(crate) fn new(fd: RawFd, unclaimed: Rc<Unclaimed>, direct: Option<DirectCloser>) -> Accept {
        Accept {
            fd,
            addr: AddrOut::new(),
            unclaimed,
            direct,
            queued: None,
        }
    }
}

/// `accept4` flags: close-on-exec for an fd. A direct descriptor has no fd to mark (the
/// kernel refuses the flag with one, `EINVAL`); the fd installed for it later is
/// close-on-exec.
fn accept_flags(direct: bool) -> i32 {
    if direct {
        0
    } else {
        libc::SOCK_CLOEXEC
    }
}

/// The connection in a successful accept CQE's result: a new fd, or a slot of the direct
/// table `direct` closes for.
fn accepted(res: u32, direct: Option<&DirectCloser>) -> Conn {
    match direct {
        // SAFETY: a successful direct accept's result is the slot its connection went
        // into, which nobody else owns.
        Some(closer) => Conn::Direct(unsafe { closer.adopt(res) }),
        None => Conn::Fd(owned_fd(res)),
    }
}

// SAFETY: the SQE and any blocking job point only at memory this op owns on the heap
// (its buffer, boxed addresses and headers, a CString) and at its own fd.
unsafe impl Operation for Accept {
    fn fd(&self) -> Option<RawFd> {
        Some(self.fd)
    }

    /// An accept's 0 would be an fd (see the trait's docs).
    fn ends_at_read_shutdown(&self) -> bool {
        false
    }

    fn emulate(&mut self) -> Emulation {
        readable(self.fd)
    }

    fn try_syscall(&mut self) -> Cqe {
        let (addr, len) = self.addr.ptrs();
        // SAFETY: addr/len point into the op's boxed storage, valid for the call.
        let fd =
            unsafe { libc::accept4(self.fd, addr, len, libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK) };
        Cqe::new(0, sys::res(fd as isize), 0)
    }

    fn sqe(&mut self) -> squeue::Entry {
        let (addr, len) = self.addr.ptrs();
        let slot = self
            .direct
            .as_ref()
            .map(|_| types::DestinationSlot::auto_target());
        opcode::Accept::new(types::Fd(self.fd), addr, len)
            .flags(accept_flags(self.direct.is_some()))
            .file_index(slot)
            .build()
    }
}

impl OpDef for Accept {
    /// The connection, and its peer's address where known (always, but for a direct
    /// descriptor a dropped multishot accept took: its caller asks the socket).
    type Output = io::Result<(Conn, Option<SockAddr>)>;

    fn complete(mut self, cqe: Cqe) -> Self::Output {
        if let Some(queued) = self.queued.take() {
            return Ok(queued);
        }
        let conn = accepted(crate::completion::result(&cqe)?, self.direct.as_ref());
        Ok((conn, Some(self.addr.into_addr())))
    }

    fn into_orphan(self) -> Box<dyn Orphan> {
        self.unclaimed.orphan_started();
        Box::new(KeepConns {
            unclaimed: self.unclaimed.clone(),
            addr: Some(self.addr),
            direct: self.direct,
        })
    }

    /// A connection a dropped accept took comes first, with the peer address that accept
    /// got. One a dropped multishot accept took has none: the socket is asked, and one
    /// whose peer already reset it (no address any more) is closed and passed over, as
    /// nobody can be told where it came from. A direct descriptor cannot be asked without
    /// an fd: it comes as it is.
    fn poll_prepare(&mut self, cx: &mut Context<'_>) -> Poll<Option<Cqe>> {
        std::task::ready!(self.unclaimed.poll_settled(cx));
        while let Some((conn, peer)) = self.unclaimed.take_conn() {
            let peer = match &conn {
                Conn::Fd(fd) => peer.or_else(|| socket2::SockRef::from(fd).peer_addr().ok()),
                Conn::Direct(_) => peer,
            };
            if peer.is_some() || matches!(conn, Conn::Direct(_)) {
                self.queued = Some((conn, peer));
                return Poll::Ready(Some(Cqe::new(0, 0, 0)));
            }
        }
        Poll::Ready(None)
    }

    fn needs_prepare(&self) -> bool {
        self.unclaimed.is_busy()
    }
}

/// The orphan of a dropped accept (or multishot accept): connections it still accepts go
/// to the listener's unclaimed queue for the next accept; its memory is kept until its
/// final CQE.
struct KeepConns {
    unclaimed: Rc<Unclaimed>,
    /// A one-shot accept's peer address, which the kernel fills in (kept until the final
    /// CQE: the SQE points at it); `None` for a multishot accept, which gets none.
    addr: Option<Box<AddrOut>>,
    /// The accept's direct table, if it accepts direct descriptors.
    direct: Option<DirectCloser>,
}

impl Orphan for KeepConns {
    fn reap(&mut self, cqe: &Cqe, deferred: &mut Deferred) {
        if cqe.res >= 0 {
            let peer = self.addr.as_ref().map(|addr| addr.to_addr());
            let conn = accepted(cqe.res as u32, self.direct.as_ref());
            self.unclaimed.push(Item::Conn(conn, peer));
        }
        if !cqe.is_more() {
            self.unclaimed.orphan_done(deferred);
        }
    }
}

/// Multishot accept (5.19+): one SQE, one CQE per connection, until an error or cancel.
pub(crate) struct AcceptMulti {
    pub(crate) fd: RawFd,
    pub(crate) unclaimed: Rc<Unclaimed>,
    /// Accepts into the worker's direct-descriptor table (`None`: fds).
    pub(crate) direct: Option<DirectCloser>,
}

impl AcceptMulti {
    /// The connection in one of its successful CQEs.
    pub(crate) fn accepted(&self, res: u32) -> Conn {
        accepted(res, self.direct.as_ref())
    }
}

// SAFETY: the SQE points at no memory, only at the listener's fd.
unsafe impl Operation for AcceptMulti {
    fn fd(&self) -> Option<RawFd> {
        Some(self.fd)
    }

    /// An accept's 0 would be an fd (see the trait's docs).
    fn ends_at_read_shutdown(&self) -> bool {
        false
    }

    fn sqe(&mut self) -> squeue::Entry {
        opcode::AcceptMulti::new(types::Fd(self.fd))
            .flags(accept_flags(self.direct.is_some()))
            .allocate_file_index(self.direct.is_some())
            .build()
    }

    fn emulate(&mut self) -> Emulation {
        readable(self.fd)
    }
}

impl MultishotDef for AcceptMulti {
    fn queue_max(&self) -> u16 {
        ACCEPT_QUEUE_MAX
    }

    fn orphan(&self) -> Box<dyn Orphan> {
        self.unclaimed.orphan_started();
        Box::new(KeepConns {
            unclaimed: self.unclaimed.clone(),
            addr: None,
            direct: self.direct.clone(),
        })
    }
}

/// `connect` to an address the op owns.
pub(crate) struct Connect {
    pub(crate) fd: RawFd,
    pub(crate) addr: Box<SockAddr>,
    /// epoll only: `connect` was issued and returned EINPROGRESS.
    pub(crate) started: bool,
}

// SAFETY: the SQE and any blocking job point only at memory this op owns on the heap
// (its buffer, boxed addresses and headers, a CString) and at its own fd.
unsafe impl Operation for Connect {
    fn fd(&self) -> Option<RawFd> {
        Some(self.fd)
    }

    fn emulate(&mut self) -> Emulation {
        writable(self.fd)
    }

    fn try_syscall(&mut self) -> Cqe {
        connect_step(self.fd, &self.addr, &mut self.started)
    }

    fn sqe(&mut self) -> squeue::Entry {
        opcode::Connect::new(
            types::Fd(self.fd),
            self.addr.as_ptr().cast(),
            self.addr.len(),
        )
        .build()
    }
}

impl OpDef for Connect {
    type Output = io::Result<()>;

    fn complete(self, cqe: Cqe) -> io::Result<()> {
        crate::completion::result(&cqe).map(drop)
    }
}

/// `recv` into an owned buffer.
pub(crate) struct Recv<B> {
    pub(crate) fd: RawFd,
    pub(crate) buf: B,
    pub(crate) flags: i32,
    /// A stream socket: a short read means its receive queue is empty (see
    /// `OpDef::leaves_unready`); a datagram says nothing of the next one.
    pub(crate) is_stream: bool,
    /// The socket's unclaimed receives: taken first, and where a dropped read's bytes go.
    pub(crate) unclaimed: Rc<Unclaimed>,
    /// The socket's receive turn, taken before the op starts (see `Unclaimed`), and the
    /// op's place in line for it.
    pub(crate) turn: TurnSlot,
}

// SAFETY: the SQE and any blocking job point only at memory this op owns on the heap
// (its buffer, boxed addresses and headers, a CString) and at its own fd.
unsafe impl<B: IoBufMut> Operation for Recv<B> {
    fn fd(&self) -> Option<RawFd> {
        Some(self.fd)
    }

    fn emulate(&mut self) -> Emulation {
        readable(self.fd)
    }

    fn try_syscall(&mut self) -> Cqe {
        let len = self.buf.bytes_total();
        // recv(len = 0) on a stream socket would wait for data; an empty read is done.
        if len == 0 {
            return Cqe::new(0, 0, 0);
        }
        let ptr = self.buf.stable_mut_ptr();
        if !self.is_stream {
            // SAFETY: the buffer is writable for bytes_total bytes and owned by the op.
            let n = unsafe { libc::recv(self.fd, ptr.cast(), len, self.flags | NO_WAIT) };
            return Cqe::new(0, sys::res(n), 0);
        }
        // SAFETY: the buffer is writable for bytes_total bytes and owned by the op.
        unsafe { recv_stream_bytes(self.fd, ptr, len, self.flags | NO_WAIT) }
    }

    fn sqe(&mut self) -> squeue::Entry {
        if self.buf.bytes_total() == 0 {
            // As above: a NOP completes with 0 at once.
            return opcode::Nop::new().build();
        }
        let len = len_u32(self.buf.bytes_total());
        let ptr = self.buf.stable_mut_ptr();
        sqe_on!(self.fd, |t| opcode::Recv::new(t, ptr, len)
            .flags(self.flags)
            .build())
    }

    fn leaves_unready(&self, cqe: &Cqe) -> bool {
        self.is_stream && is_short(cqe, self.buf.bytes_total()) && cqe.flags & F_SOCK_NONEMPTY == 0
    }

    fn moves_nothing(&self) -> bool {
        self.buf.bytes_total() == 0
    }
}

impl<B: IoBufMut> OpDef for Recv<B> {
    type Output = (io::Result<usize>, B);

    fn complete(mut self, cqe: Cqe) -> Self::Output {
        let cqe = self.behind_put_back(cqe);
        // SAFETY: `cqe` is this op's final completion, a read into the start of `buf` (by
        // the kernel, or from unclaimed bytes by `poll_prepare` or `behind_put_back`).
        unsafe { read_output(&cqe, self.buf) }
    }

    fn started(&self, id: Option<OpId>) {
        if self.holds_stream_turn() {
            self.unclaimed.one_shot_started(id);
        }
    }

    /// Bytes were queued while it held the turn: only adapters put bytes there then.
    fn is_recalled(&self) -> bool {
        self.holds_stream_turn() && self.unclaimed.has_items()
    }

    fn take_recall(&self) -> bool {
        self.unclaimed.take_turn_op().is_some()
    }

    /// Cancelled by a recall (no cancel of a user's reaches a plain op: a timeout's goes to
    /// its chain), with the put-back bytes taken by another receive meanwhile: it goes back
    /// to the kernel, still holding the turn, rather than report a cancel nobody asked for.
    fn restarts_after(&self, cqe: &Cqe) -> bool {
        cqe.res == -libc::ECANCELED && self.holds_stream_turn() && !self.unclaimed.has_items()
    }

    fn poll_prepare(&mut self, cx: &mut Context<'_>) -> Poll<Option<Cqe>> {
        if self.moves_nothing() {
            // An empty receive takes nothing, so it has no place in the socket's order:
            // done at once (review DM: it waited behind a receive already waiting).
            return Poll::Ready(Some(Cqe::new(0, 0, 0)));
        }
        if std::task::ready!(self.turn.poll(&self.unclaimed, cx)) {
            return Poll::Ready(None);
        }
        let (dst, len) = (self.buf.stable_mut_ptr(), self.buf.bytes_total());
        let n = if self.is_stream {
            // SAFETY: the buffer is writable for bytes_total bytes and owned by the op.
            unsafe { self.unclaimed.take_bytes(dst, len) }
        } else {
            match self.unclaimed.take_datagram() {
                // A datagram longer than the buffer is truncated, as the kernel does.
                Some((data, _)) => {
                    let n = data.len().min(len);
                    // SAFETY: as above; `data` is ours, `n` fits both.
                    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, n) };
                    n
                }
                None => 0,
            }
        };
        Poll::Ready(Some(Cqe::new(0, n.min(i32::MAX as usize) as i32, 0)))
    }

    fn is_served_at_once(&self) -> bool {
        self.turn.is_served_at_once(&self.unclaimed)
    }

    // An empty receive takes no part in its socket's order (see `poll_prepare`), in a chain
    // too: it neither waits, nor takes, adopts or shares a turn or a place (review DN: it
    // held the turn for the whole chain).
    fn needs_prepare(&self) -> bool {
        !self.moves_nothing() && self.turn.must_wait(&self.unclaimed)
    }

    fn claim(&mut self) {
        if !self.moves_nothing() {
            self.turn.claim(&self.unclaimed);
        }
    }

    fn adopt_turn(&mut self, turns: &ChainTurns) {
        if !self.moves_nothing() {
            self.turn.adopt(&self.unclaimed, turns);
        }
    }

    fn share_turn(&mut self, turns: &ChainTurns) {
        if !self.moves_nothing() {
            self.turn.share(&self.unclaimed, turns);
        }
    }

    fn into_orphan(self) -> Box<dyn Orphan> {
        Box::new(KeepReceived {
            unclaimed: self.unclaimed.clone(),
            op: self,
        })
    }

    fn give_back(self, cqe: &Cqe, _deferred: &mut Deferred) {
        if let Some(item) = self.item(cqe.res) {
            self.unclaimed.push_front(item, self.turn.holds());
        }
    }
}

impl<B: IoBufMut> Recv<B> {
    /// A stream read holding its socket's receive turn: the one receive in the kernel, the
    /// kind bytes put back in front can recall.
    fn holds_stream_turn(&self) -> bool {
        self.is_stream && self.turn.holds()
    }

    /// A stream read that held its socket's turn, finishing with bytes queued on the socket:
    /// they were put back in front while it was in the kernel (an adapter dropped with
    /// read-ahead), so they are older than what it got. What it got goes behind them and
    /// it gives the first of them instead (review AM: it gave the newer bytes first). A
    /// read recalled for them (cancelled, or woken from its readiness wait) gives them
    /// too; an error is reported, the bytes staying for the next read.
    fn behind_put_back(&mut self, cqe: Cqe) -> Cqe {
        if !self.is_recalled() {
            return cqe;
        }
        match cqe.res {
            n if n > 0 => {
                let got = received_bytes(&self.buf, n as usize);
                self.unclaimed.push(Item::Bytes(PooledBuf::owned(got)));
            }
            0 => {}
            res if res == -libc::ECANCELED || res == -libc::ETIMEDOUT => {}
            _ => return cqe,
        }
        let (dst, len) = (self.buf.stable_mut_ptr(), self.buf.bytes_total());
        // SAFETY: the buffer is writable for bytes_total bytes and, the op being complete,
        // the kernel is done with it.
        let n = unsafe { self.unclaimed.take_bytes(dst, len) };
        Cqe::new(cqe.user_data, n.min(i32::MAX as usize) as i32, cqe.flags)
    }
}

/// The orphan of a dropped read: bytes it still receives go to the socket's unclaimed
/// queue for the next read; its buffer (and the socket's receive turn, in the op) is kept
/// until its final CQE.
struct KeepReceived<T> {
    unclaimed: Rc<Unclaimed>,
    op: T,
}

/// An op that received into its own buffer: what its orphan keeps of a CQE.
trait Received {
    /// What a completion of `res` brought, as an unclaimed item (`None`: nothing, or an
    /// error).
    fn item(&self, res: i32) -> Option<Item>;
}

impl<B: IoBufMut> Received for Recv<B> {
    fn item(&self, res: i32) -> Option<Item> {
        let n = usize::try_from(res).ok()?;
        let bytes = received_bytes(&self.buf, n);
        if self.is_stream {
            // 0 is end of stream, which the next read finds by itself.
            (n > 0).then(|| Item::Bytes(PooledBuf::owned(bytes)))
        } else if self.moves_nothing() {
            // An empty receive is a NOP (`sqe`): it got no datagram, not an empty one.
            None
        } else {
            // An empty datagram is one too. `recv` is for a connected socket: the sender
            // is its peer.
            let peer = socket2::SockRef::from(&BorrowedFd(self.fd))
                .peer_addr()
                .ok();
            Some(Item::Datagram(bytes, peer))
        }
    }
}

/// An fd this op does not own, for socket2's `SockRef`.
struct BorrowedFd(RawFd);

impl std::os::fd::AsFd for BorrowedFd {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        // SAFETY: the op's socket is open for as long as the op (its owner borrows it).
        unsafe { std::os::fd::BorrowedFd::borrow_raw(self.0) }
    }
}

/// A copy of the first `n` bytes of `buf`, which a completed read wrote.
fn received_bytes<B: IoBuf>(buf: &B, n: usize) -> Vec<u8> {
    let n = n.min(buf.bytes_total());
    // SAFETY: a read op's buffer is readable for bytes_total bytes (IoBufMut's contract:
    // writable, hence allocated), and the kernel initialised the first `n` of them.
    unsafe { std::slice::from_raw_parts(buf.stable_ptr(), n) }.to_vec()
}

impl<T: Received> Orphan for KeepReceived<T> {
    /// Queued behind what is there: a receive in the kernel holds its socket's turn, so
    /// what is queued came before it, and the receives of one kernel-linked chain
    /// complete (and are reaped) in chain order.
    fn reap(&mut self, cqe: &Cqe, _deferred: &mut Deferred) {
        if let Some(item) = self.op.item(cqe.res) {
            self.unclaimed.push(item);
        }
    }
}

/// A transfer that moved something, but less than `len`: on a stream socket, the receive
/// queue is empty or the send buffer full. (0 is end of file, or nothing asked: no news.)
fn is_short(cqe: &Cqe, len: usize) -> bool {
    cqe.res > 0 && (cqe.res as usize) < len
}

/// `send` from an owned buffer.
pub(crate) struct Send<B> {
    pub(crate) fd: RawFd,
    pub(crate) buf: B,
    pub(crate) flags: i32,
    /// For `write_all`: on io_uring the send carries `MSG_WAITALL`, so the kernel goes on
    /// sending a buffer larger than the socket takes at once (waiting for room itself)
    /// instead of completing short and having the caller issue another send through a
    /// loop turn per piece (5.19+; older kernels complete short, as without it). epoll's
    /// non-blocking `send` ignores the flag, so it is left out there.
    pub(crate) all: bool,
}

// SAFETY: the SQE and any blocking job point only at memory this op owns on the heap
// (its buffer, boxed addresses and headers, a CString) and at its own fd.
unsafe impl<B: IoBuf> Operation for Send<B> {
    fn fd(&self) -> Option<RawFd> {
        Some(self.fd)
    }

    fn emulate(&mut self) -> Emulation {
        writable(self.fd)
    }

    fn try_syscall(&mut self) -> Cqe {
        let len = self.buf.bytes_init();
        // SAFETY: the buffer is readable for bytes_init bytes and owned by the op.
        let n = unsafe {
            libc::send(
                self.fd,
                self.buf.stable_ptr().cast(),
                len,
                self.flags | libc::MSG_NOSIGNAL | NO_WAIT,
            )
        };
        Cqe::new(0, sys::res(n), 0)
    }

    fn sqe(&mut self) -> squeue::Entry {
        let len = len_u32(self.buf.bytes_init());
        let all = if self.all { libc::MSG_WAITALL } else { 0 };
        let (ptr, flags) = (self.buf.stable_ptr(), self.flags | libc::MSG_NOSIGNAL | all);
        sqe_on!(self.fd, |t| opcode::Send::new(t, ptr, len)
            .flags(flags)
            .build())
    }

    /// No stream check, unlike a receive's: a datagram send is all or nothing, never short.
    fn leaves_unready(&self, cqe: &Cqe) -> bool {
        is_short(cqe, self.buf.bytes_init())
    }

    fn moves_nothing(&self) -> bool {
        self.buf.bytes_init() == 0
    }
}

impl<B: IoBuf> OpDef for Send<B> {
    type Output = (io::Result<usize>, B);

    fn complete(self, cqe: Cqe) -> Self::Output {
        (
            crate::completion::result(&cqe).map(|n| n as usize),
            self.buf,
        )
    }
}

/// Zero-copy send (6.0+): the first CQE carries the result, the buffer stays the kernel's
/// until the notification CQE.
pub(crate) struct SendZc<B> {
    pub(crate) fd: RawFd,
    pub(crate) buf: B,
    pub(crate) result: Option<i32>,
}

// SAFETY: the SQE and any blocking job point only at memory this op owns on the heap
// (its buffer, boxed addresses and headers, a CString) and at its own fd.
unsafe impl<B: IoBuf> Operation for SendZc<B> {
    fn fd(&self) -> Option<RawFd> {
        Some(self.fd)
    }

    fn emulate(&mut self) -> Emulation {
        writable(self.fd)
    }

    fn try_syscall(&mut self) -> Cqe {
        // epoll has no zero-copy send: a plain send gives the same bytes on the wire.
        let len = self.buf.bytes_init();
        // SAFETY: the buffer is readable for bytes_init bytes and owned by the op.
        let n = unsafe {
            libc::send(
                self.fd,
                self.buf.stable_ptr().cast(),
                len,
                libc::MSG_NOSIGNAL | NO_WAIT,
            )
        };
        Cqe::new(0, sys::res(n), 0)
    }

    fn sqe(&mut self) -> squeue::Entry {
        let len = len_u32(self.buf.bytes_init());
        let ptr = self.buf.stable_ptr();
        sqe_on!(self.fd, |t| opcode::SendZc::new(t, ptr, len)
            .flags(libc::MSG_NOSIGNAL)
            .build())
    }
}

impl<B: IoBuf> OpDef for SendZc<B> {
    type Output = (io::Result<usize>, B);

    fn on_more(&mut self, cqe: Cqe) {
        self.result = Some(cqe.res);
    }

    fn complete(self, cqe: Cqe) -> Self::Output {
        // A failed send posts one CQE and no notification; otherwise the last CQE is the
        // notification and the result came before it.
        let res = if cqe.is_notif() {
            self.result.unwrap_or(cqe.res)
        } else {
            cqe.res
        };
        (
            crate::completion::result_of(res).map(|n| n as usize),
            self.buf,
        )
    }
}

/// `recv` into a buffer the kernel picks from `group` (buffer select); before 5.7 (a
/// group selected in user space) it waits for readiness and picks the buffer itself.
pub(crate) struct RecvSelect {
    pub(crate) fd: RawFd,
    pub(crate) group: BufGroup,
    /// The socket's unclaimed receives: where a dropped receive's chunk goes.
    pub(crate) unclaimed: Rc<Unclaimed>,
}

// SAFETY: the SQE points at no memory of its own: the kernel picks a buffer of `group`,
// which the driver keeps registered for as long as its ring.
unsafe impl Operation for RecvSelect {
    fn fd(&self) -> Option<RawFd> {
        Some(self.fd)
    }

    fn sqe(&mut self) -> squeue::Entry {
        let len = len_u32(self.group.buf_len());
        let bgid = self.group.bgid();
        sqe_on!(self.fd, |t| opcode::Recv::new(t, std::ptr::null_mut(), len)
            .buf_group(bgid)
            .build())
        .flags(squeue::Flags::BUFFER_SELECT)
    }

    fn emulate(&mut self) -> Emulation {
        readable(self.fd)
    }

    fn try_syscall(&mut self) -> Cqe {
        recv_into_group(self.fd, &self.group)
    }

    fn leaves_unready(&self, cqe: &Cqe) -> bool {
        // Only stream sockets receive into the pool.
        is_short(cqe, self.group.buf_len()) && cqe.flags & F_SOCK_NONEMPTY == 0
    }

    fn is_readiness_only(&self) -> bool {
        self.group.mode() == BufMode::User
    }
}

impl OpDef for RecvSelect {
    type Output = Cqe;

    fn complete(self, cqe: Cqe) -> Cqe {
        cqe
    }

    /// The CQE owns nothing of the op (the kernel or the syscall picked the buffer).
    fn kept_output(&self, cqe: &Cqe) -> Option<Cqe> {
        Some(*cqe)
    }

    fn into_orphan(self) -> Box<dyn Orphan> {
        keep_chunks(&self.group, &self.unclaimed, None)
    }
}

/// Multishot recv with buffer select (6.0+).
pub(crate) struct RecvMulti {
    pub(crate) fd: RawFd,
    pub(crate) group: BufGroup,
    pub(crate) unclaimed: Rc<Unclaimed>,
}

// SAFETY: as for `RecvSelect`: the kernel picks the buffers from `group`.
unsafe impl Operation for RecvMulti {
    fn fd(&self) -> Option<RawFd> {
        Some(self.fd)
    }

    fn sqe(&mut self) -> squeue::Entry {
        let bgid = self.group.bgid();
        sqe_on!(self.fd, |t| opcode::RecvMulti::new(t, bgid).build())
    }

    fn emulate(&mut self) -> Emulation {
        readable(self.fd)
    }
}

impl MultishotDef for RecvMulti {
    /// Chunks a receive may hold unpolled, each in a buffer of the worker's shared pool:
    /// an eighth of the pool, from 1 to 16 (64 KiB in the default 4 KiB buffers, about what
    /// a socket's own receive buffer would hold). Past that the receive is cancelled and
    /// stays so until the stream is polled again; the rest waits in the socket. A stream
    /// whose task is busy elsewhere then holds no more than that plus what the kernel takes
    /// in one burst before the cancel (it retries a multishot receive while data is there,
    /// up to its own limit): a bound, not an even share. With tiny pools the bound of 1
    /// costs throughput (a third less for 32 flooded connections on 8 buffers, review AB);
    /// 2 there let one burst take the whole pool again.
    fn queue_max(&self) -> u16 {
        (self.group.count() / 8).clamp(1, 16)
    }

    fn orphan(&self) -> Box<dyn Orphan> {
        keep_chunks(&self.group, &self.unclaimed, None)
    }
}

/// The orphan of a dropped pooled receive: chunks it still receives go to the socket's
/// unclaimed queue for the next receive, copied out so the pool buffer goes back at once
/// (unclaimed data must not starve the other receives of a worker's shared pool). It keeps
/// the socket's receive `turn` (if it had it) until its final CQE.
pub(crate) fn keep_chunks(
    group: &BufGroup,
    unclaimed: &Rc<Unclaimed>,
    turn: Option<RecvTurn>,
) -> Box<dyn Orphan> {
    Box::new(KeepChunks {
        group: group.clone(),
        unclaimed: unclaimed.clone(),
        _turn: turn,
    })
}

struct KeepChunks {
    group: BufGroup,
    unclaimed: Rc<Unclaimed>,
    _turn: Option<RecvTurn>,
}

impl Orphan for KeepChunks {
    fn reap(&mut self, cqe: &Cqe, deferred: &mut Deferred) {
        if let Some(bid) = cqe.bid() {
            // Copied out, and the buffer given back at once (its waiter woken later).
            // SAFETY: the bid comes from this op's own CQE, selected from `group`, and the
            // kernel wrote `res` bytes into it when `res` is positive.
            let lease = unsafe { self.group.lease(bid, cqe.res.max(0) as usize) };
            if let Ok(lease) = lease {
                if !lease.is_empty() {
                    self.unclaimed
                        .push(Item::Bytes(PooledBuf::owned(lease.as_slice().to_vec())));
                }
                lease.release_into(deferred);
            }
        }
    }
}

/// A socket address for `sendmsg`/`recvmsg`, with the msghdr and iovec pointing into it.
pub(crate) struct MsgHdr {
    pub(crate) msg: libc::msghdr,
    pub(crate) iov: libc::iovec,
    pub(crate) addr: AddrOut,
}

impl MsgHdr {
    /// A boxed header whose pointers refer to its own (heap) fields.
    pub(crate) fn new(ptr: *mut u8, len: usize, addr: Option<&SockAddr>) -> Box<MsgHdr> {
        let mut out = AddrOut::new();
        if let Some(a) = addr {
            // SAFETY: copies `a.len()` bytes of a valid address into storage of at least
            // that size (SockAddrStorage holds any socket address).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    a.as_ptr().cast::<u8>(),
                    (&mut out.storage as *mut SockAddrStorage).cast::<u8>(),
                    a.len() as usize,
                );
            }
            out.len = a.len();
        }
        // SAFETY: msghdr is plain data; zeroed means no name, no control, no flags.
        let msg: libc::msghdr = unsafe { std::mem::zeroed() };
        let mut hdr = Box::new(MsgHdr {
            msg,
            iov: libc::iovec {
                iov_base: ptr.cast(),
                iov_len: len,
            },
            addr: *out,
        });
        hdr.msg.msg_iov = &mut hdr.iov;
        hdr.msg.msg_iovlen = 1;
        hdr.msg.msg_name = (&mut hdr.addr.storage as *mut SockAddrStorage).cast();
        hdr.msg.msg_namelen = if addr.is_some() || len == usize::MAX {
            hdr.addr.len
        } else {
            hdr.addr.storage.size_of()
        };
        hdr
    }
}

impl MsgHdr {
    /// Sets the address a completed `recvmsg` reports (a datagram taken from the unclaimed
    /// queue carries its sender there).
    fn set_name(&mut self, addr: &SockAddr) {
        let len = (addr.len() as usize).min(std::mem::size_of::<SockAddrStorage>());
        // SAFETY: copies `len` bytes of a valid address into storage of at least that size.
        unsafe {
            std::ptr::copy_nonoverlapping(
                addr.as_ptr().cast::<u8>(),
                (&mut self.addr.storage as *mut SockAddrStorage).cast::<u8>(),
                len,
            );
        }
        self.msg.msg_namelen = len as libc::socklen_t;
    }
}

impl AddrOut {
    /// The address a completed op left here, `len` bytes of it (`None` for none).
    fn clone_filled(&self, len: libc::socklen_t) -> Option<SockAddr> {
        if len == 0 {
            return None;
        }
        let len = len.min(self.storage.size_of());
        let mut copy = SockAddrStorage::zeroed();
        // SAFETY: copies `len` bytes between two storages of the same type and size.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (&self.storage as *const SockAddrStorage).cast::<u8>(),
                (&mut copy as *mut SockAddrStorage).cast::<u8>(),
                len as usize,
            );
        }
        // SAFETY: the kernel filled `len` bytes of the storage with an address (the op
        // completed with a datagram), and `len` is within the storage.
        Some(unsafe { SockAddr::new(copy, len) })
    }
}

/// `sendmsg` to an address (UDP `send_to`).
pub(crate) struct SendMsg<B> {
    pub(crate) fd: RawFd,
    pub(crate) buf: B,
    pub(crate) hdr: Box<MsgHdr>,
}

// SAFETY: the SQE and any blocking job point only at memory this op owns on the heap
// (its buffer, boxed addresses and headers, a CString) and at its own fd.
unsafe impl<B: IoBuf> Operation for SendMsg<B> {
    fn fd(&self) -> Option<RawFd> {
        Some(self.fd)
    }

    fn emulate(&mut self) -> Emulation {
        writable(self.fd)
    }

    fn try_syscall(&mut self) -> Cqe {
        // SAFETY: the msghdr points at the op's own iovec, buffer and address.
        let n = unsafe { libc::sendmsg(self.fd, &self.hdr.msg, libc::MSG_NOSIGNAL | NO_WAIT) };
        Cqe::new(0, sys::res(n), 0)
    }

    fn sqe(&mut self) -> squeue::Entry {
        opcode::SendMsg::new(types::Fd(self.fd), &self.hdr.msg)
            .flags(libc::MSG_NOSIGNAL as u32)
            .build()
    }
}

impl<B: IoBuf> OpDef for SendMsg<B> {
    type Output = (io::Result<usize>, B);

    fn complete(self, cqe: Cqe) -> Self::Output {
        (
            crate::completion::result(&cqe).map(|n| n as usize),
            self.buf,
        )
    }
}

/// `recvmsg` with the sender's address (UDP `recv_from`).
pub(crate) struct RecvMsg<B> {
    pub(crate) fd: RawFd,
    pub(crate) buf: B,
    pub(crate) hdr: Box<MsgHdr>,
    /// The socket's unclaimed datagrams: taken first, and where a dropped receive's go.
    pub(crate) unclaimed: Rc<Unclaimed>,
    /// The socket's receive turn, taken before the op starts (see `Unclaimed`), and the
    /// op's place in line for it.
    pub(crate) turn: TurnSlot,
}

// SAFETY: the SQE and any blocking job point only at memory this op owns on the heap
// (its buffer, boxed addresses and headers, a CString) and at its own fd.
unsafe impl<B: IoBufMut> Operation for RecvMsg<B> {
    fn fd(&self) -> Option<RawFd> {
        Some(self.fd)
    }

    fn emulate(&mut self) -> Emulation {
        readable(self.fd)
    }

    fn try_syscall(&mut self) -> Cqe {
        // SAFETY: the msghdr points at the op's own iovec, buffer and address storage.
        let n = unsafe { libc::recvmsg(self.fd, &mut self.hdr.msg, NO_WAIT) };
        Cqe::new(0, sys::res(n), 0)
    }

    fn sqe(&mut self) -> squeue::Entry {
        opcode::RecvMsg::new(types::Fd(self.fd), &mut self.hdr.msg).build()
    }
}

impl<B: IoBufMut> OpDef for RecvMsg<B> {
    type Output = (io::Result<(usize, SockAddr)>, B);

    fn complete(mut self, cqe: Cqe) -> Self::Output {
        let res = crate::completion::result(&cqe).map(|n| n as usize);
        let Ok(n) = res else {
            return (res.map(|_| unreachable!("Err checked")), self.buf);
        };
        // SAFETY: the kernel wrote `n` bytes into the buffer's start.
        unsafe { self.buf.set_init(n) };
        let mut hdr = self.hdr;
        hdr.addr.len = hdr.msg.msg_namelen;
        (Ok((n, hdr.addr.into_addr())), self.buf)
    }

    fn poll_prepare(&mut self, cx: &mut Context<'_>) -> Poll<Option<Cqe>> {
        if std::task::ready!(self.turn.poll(&self.unclaimed, cx)) {
            return Poll::Ready(None);
        }
        let Some((data, from)) = self.unclaimed.take_datagram() else {
            // Something else is queued (never on a datagram socket): receive anew, out of
            // line, as before the place was kept for chains (review BR).
            self.turn.let_place_go();
            return Poll::Ready(None);
        };
        let n = data.len().min(self.buf.bytes_total());
        // SAFETY: the buffer is writable for bytes_total >= n bytes and owned by the op;
        // `data` is ours. A longer datagram is truncated, as the kernel does.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.buf.stable_mut_ptr(), n) };
        match from {
            Some(from) => self.hdr.set_name(&from),
            // A sender nobody recorded: `recv` on a socket that is not connected.
            None => self.hdr.msg.msg_namelen = 0,
        }
        Poll::Ready(Some(Cqe::new(0, n as i32, 0)))
    }

    fn is_served_at_once(&self) -> bool {
        self.turn.is_served_at_once(&self.unclaimed)
    }

    fn needs_prepare(&self) -> bool {
        self.turn.must_wait(&self.unclaimed)
    }

    fn claim(&mut self) {
        self.turn.claim(&self.unclaimed);
    }

    fn adopt_turn(&mut self, turns: &ChainTurns) {
        self.turn.adopt(&self.unclaimed, turns);
    }

    fn share_turn(&mut self, turns: &ChainTurns) {
        self.turn.share(&self.unclaimed, turns);
    }

    fn into_orphan(self) -> Box<dyn Orphan> {
        Box::new(KeepReceived {
            unclaimed: self.unclaimed.clone(),
            op: self,
        })
    }

    fn give_back(self, cqe: &Cqe, _deferred: &mut Deferred) {
        if let Some(item) = self.item(cqe.res) {
            self.unclaimed.push_front(item, self.turn.holds());
        }
    }
}

impl<B: IoBufMut> Received for RecvMsg<B> {
    fn item(&self, res: i32) -> Option<Item> {
        let n = usize::try_from(res).ok()?;
        let from = self.hdr.addr.clone_filled(self.hdr.msg.msg_namelen);
        // 0 with no sender is a socket shut down for reading, which says so again by
        // itself; an empty datagram has its sender (review DM: it was queued as a datagram
        // nobody sent).
        if n == 0 && from.is_none() {
            return None;
        }
        Some(Item::Datagram(received_bytes(&self.buf, n), from))
    }
}

/// One step of a non-blocking connect: start it, or, once writable, read its outcome.
fn connect_step(fd: RawFd, addr: &SockAddr, started: &mut bool) -> Cqe {
    if !*started {
        // SAFETY: addr points at a valid socket address of addr.len() bytes.
        let rc = unsafe { libc::connect(fd, addr.as_ptr().cast(), addr.len()) };
        let res = sys::res(rc as isize);
        if res == -libc::EINPROGRESS {
            *started = true;
            return Cqe::new(0, -libc::EAGAIN, 0);
        }
        return Cqe::new(0, res, 0);
    }
    // A wake is not proof the connect finished (a timer may share the task): only a
    // writable (or failed) socket has an outcome to read.
    if sys::poll_now(fd, libc::POLLOUT) == Ok(0) {
        return Cqe::new(0, -libc::EAGAIN, 0);
    }
    match sys::socket_int(fd, libc::SOL_SOCKET, libc::SO_ERROR) {
        Ok(err) => Cqe::new(0, -err, 0),
        Err(res) => Cqe::new(0, res, 0),
    }
}

/// Emulated buffer select: take a free buffer only now that the socket is readable (an idle
/// connection holds none), recv into it, and report its bid as the kernel would.
pub(crate) fn recv_into_group(fd: RawFd, group: &BufGroup) -> Cqe {
    let Some(bid) = group.take() else {
        // Counted where the CQE is handled (`pool::record_enobufs`), as a kernel's is.
        return Cqe::new(0, -libc::ENOBUFS, 0);
    };
    let Some((ptr, len)) = group.buf_ptr(bid) else {
        return Cqe::new(0, -libc::EINVAL, 0);
    };
    // MSG_DONTWAIT: on io_uring the socket is in blocking mode, and a readiness report
    // another reader raced us to must give EAGAIN, not block the loop.
    // SAFETY: `take` handed us bid exclusively; its memory is `len` writable bytes.
    let cqe = unsafe { recv_stream_bytes(fd, ptr, len, NO_WAIT) };
    if cqe.res < 0 {
        // SAFETY: the bid came from `take` above and was not leased.
        unsafe { group.recycle(bid) };
        return cqe;
    }
    Cqe::new(0, cqe.res, cqe.flags | Cqe::buffer_flags(bid))
}

/// A stream socket's `recv` of up to `len` bytes at `ptr`, as a `recvmsg` without a control
/// buffer: a read stops short before all that is queued where the kernel will not glue
/// messages (a Unix message that passed fds or credentials, which such a read drops, and
/// says so with `MSG_CTRUNC`), with no edge to come for the rest. Its CQE then says the
/// socket is not empty, as io_uring's `F_SOCK_NONEMPTY` does, and epoll does not take the
/// short read as drained (review CD; for pooled receives review CE). A socket with
/// `SO_PASSCRED` set gets `MSG_CTRUNC` on every such read (its credentials have nowhere to
/// go), so it is never taken as drained: each short read is followed by one that says
/// `EAGAIN` (review CF), a syscall, not a wait lost.
///
/// # Safety
///
/// `ptr` is writable for `len` bytes for the whole call.
unsafe fn recv_stream_bytes(fd: RawFd, ptr: *mut u8, len: usize, flags: i32) -> Cqe {
    let mut iov = libc::iovec {
        iov_base: ptr.cast(),
        iov_len: len,
    };
    // SAFETY: all-zero is a valid msghdr (no name, no control, no iovecs).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    // SAFETY: `msg` names one iovec, `len` writable bytes at `ptr` (the caller's promise);
    // no name or control buffer; `msg` and `iov` live across the call.
    let n = unsafe { libc::recvmsg(fd, &mut msg, flags) };
    let more = if n > 0 && msg.msg_flags & libc::MSG_CTRUNC != 0 {
        F_SOCK_NONEMPTY
    } else {
        0
    };
    Cqe::new(0, sys::res(n), more)
}

/// Sends a direct descriptor to another worker's ring (`IORING_OP_MSG_RING` with
/// `IORING_MSG_SEND_FD`, 6.0+), into a slot that ring's kernel allocates; that ring gets a
/// CQE carrying `seq` (`ring_core::user_data::arrival_user_data`). The result is 0 once the
/// other ring has it: `ENXIO` when it has no table, `ENFILE` when its table is full. The
/// sender's slot stays open; its owner closes it after a success.
pub(crate) struct SendDirect {
    /// The sender's direct descriptor, encoded as a socket's fd (see `backend::direct`).
    pub(crate) fd: RawFd,
    /// The receiving ring's fd (a duplicate): the op keeps it open until its final CQE, as
    /// the kernel looks it up when it takes the SQE.
    pub(crate) target: std::sync::Arc<OwnedFd>,
    /// The receiving worker, told to close what arrives if the send's future is dropped
    /// before it learns the send succeeded (nobody would claim it then).
    pub(crate) to: std::sync::Arc<crate::executor::Shared>,
    pub(crate) seq: u32,
}

/// A direct descriptor sent to another worker under `seq` that nobody there has claimed
/// yet. Dropped unclaimed (the sender's future dropped after the send, the claiming task
/// aborted or never run), it sends that worker a job that gives the arrival up, so the
/// descriptor is closed there rather than held in its table for the ring's life (review
/// AR). `Send`: it travels with the claiming job.
pub(crate) struct InTransit {
    seq: u32,
    to: Option<std::sync::Arc<crate::executor::Shared>>,
}

impl InTransit {
    pub(crate) fn new(seq: u32, to: std::sync::Arc<crate::executor::Shared>) -> InTransit {
        InTransit { seq, to: Some(to) }
    }

    pub(crate) fn seq(&self) -> u32 {
        self.seq
    }

    /// A claim for the arrival exists now (it gives the arrival up itself if dropped).
    pub(crate) fn claimed(mut self) {
        self.to = None;
    }
}

impl Drop for InTransit {
    fn drop(&mut self) {
        let Some(to) = self.to.take() else { return };
        let seq = self.seq;
        // A worker already gone drops the job: its ring's teardown closes the table.
        to.push_job(Box::new(move || {
            if let Some(core) = crate::worker::Core::current() {
                core.forget_arrival(seq);
            }
        }));
    }
}

/// The orphan of a dropped send: keeps the target's fd until the final CQE, and if that
/// CQE says the other ring got the descriptor, gives it up there (at the worker's next
/// safe point: the job's push may wake that worker).
struct SentOrphan {
    op: SendDirect,
}

impl Orphan for SentOrphan {
    fn reap(&mut self, cqe: &Cqe, deferred: &mut Deferred) {
        if cqe.res >= 0 && !cqe.is_more() {
            let in_transit = InTransit::new(self.op.seq, self.op.to.clone());
            deferred.drop_later(Box::new(DropLater(in_transit)));
        }
    }
}

/// Something dropped with the worker's deferred work, off the op table's dispatch.
struct DropLater<T>(T);

impl<T> Orphan for DropLater<T> {
    fn reap(&mut self, _cqe: &Cqe, _deferred: &mut Deferred) {}
}

// SAFETY: the SQE points at no memory: only the target's fd, which the op owns (an `Arc`
// held until the final CQE), the sender's slot, which its socket keeps open until the op
// completes (its owner awaits it), and integers.
unsafe impl Operation for SendDirect {
    fn sqe(&mut self) -> squeue::Entry {
        // Not a slot (never, by construction): `u32::MAX`, which the kernel refuses.
        let slot = crate::backend::direct::slot_of(self.fd).unwrap_or(u32::MAX);
        let target = std::os::fd::AsRawFd::as_raw_fd(&*self.target);
        opcode::MsgRingSendFd::new(
            types::Fd(target),
            types::Fixed(slot),
            types::DestinationSlot::auto_target(),
            ring_core::user_data::arrival_user_data(self.seq),
        )
        .build()
    }

    /// Never run: only io_uring workers have direct descriptors to send. Refused.
    fn emulate(&mut self) -> Emulation {
        Emulation::Blocking(Box::new(|| -libc::EOPNOTSUPP))
    }

    fn opcode(&self) -> Option<u8> {
        Some(opcode::MsgRingSendFd::CODE)
    }
}

impl OpDef for SendDirect {
    type Output = io::Result<InTransit>;

    fn complete(self, cqe: Cqe) -> Self::Output {
        crate::completion::result(&cqe)?;
        Ok(InTransit::new(self.seq, self.to))
    }

    fn into_orphan(self) -> Box<dyn Orphan> {
        Box::new(SentOrphan { op: self })
    }
}
