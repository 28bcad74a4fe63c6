//! Socket ops: accept, connect, recv, send, buffer-select recv, zero-copy send, msg ops.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use io_uring::{opcode, squeue, types};
use ring_core::buf_pool::BufGroup;
use ring_core::cqe::Cqe;
use ring_core::lifecycle::Orphan;
use ring_core::release::{Both, CloseFd, Keep, RecycleBid};
use socket2::{SockAddr, SockAddrStorage};

use super::{Emulation, OpDef};
use crate::buf::{read_output, IoBuf, IoBufMut};
use crate::sys;

/// Socket op lengths: io_uring's send/recv reject lengths above `i32::MAX` (`EINVAL`) where
/// `send(2)`/`recv(2)` clamp, so a larger buffer is used up to `i32::MAX` bytes (a short
/// transfer, which every caller already handles).
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
}

/// `accept4`: a new connection and its peer address.
pub(crate) struct Accept {
    pub(crate) fd: RawFd,
    pub(crate) addr: Box<AddrOut>,
}

impl OpDef for Accept {
    type Output = io::Result<(OwnedFd, SockAddr)>;

    fn emulate(&mut self) -> Emulation {
        Emulation::Readiness {
            fd: self.fd,
            events: libc::POLLIN as u32,
        }
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
        opcode::Accept::new(types::Fd(self.fd), addr, len)
            .flags(libc::SOCK_CLOEXEC)
            .build()
    }

    fn complete(self, cqe: Cqe) -> Self::Output {
        let fd = owned_fd(cqe.result()?);
        Ok((fd, self.addr.into_addr()))
    }

    fn into_orphan(self) -> Box<dyn Orphan> {
        Box::new(Both(Keep(self), CloseFd))
    }
}

/// Multishot accept (5.19+): one SQE, one CQE per connection, until an error or cancel.
pub(crate) struct AcceptMulti {
    pub(crate) fd: RawFd,
}

impl AcceptMulti {
    pub(crate) fn sqe(&self) -> squeue::Entry {
        opcode::AcceptMulti::new(types::Fd(self.fd))
            .flags(libc::SOCK_CLOEXEC)
            .build()
    }
}

/// `connect` to an address the op owns.
pub(crate) struct Connect {
    pub(crate) fd: RawFd,
    pub(crate) addr: Box<SockAddr>,
    /// epoll only: `connect` was issued and returned EINPROGRESS.
    pub(crate) started: bool,
}

impl OpDef for Connect {
    type Output = io::Result<()>;

    fn emulate(&mut self) -> Emulation {
        Emulation::Readiness {
            fd: self.fd,
            events: libc::POLLOUT as u32,
        }
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

    fn complete(self, cqe: Cqe) -> io::Result<()> {
        cqe.result().map(drop)
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
}

impl<B: IoBufMut> OpDef for Recv<B> {
    type Output = (io::Result<usize>, B);

    fn emulate(&mut self) -> Emulation {
        Emulation::Readiness {
            fd: self.fd,
            events: libc::POLLIN as u32,
        }
    }

    fn try_syscall(&mut self) -> Cqe {
        let len = self.buf.bytes_total();
        // recv(len = 0) on a stream socket would wait for data; an empty read is done.
        if len == 0 {
            return Cqe::new(0, 0, 0);
        }
        // SAFETY: the buffer is writable for bytes_total bytes and owned by the op.
        let n = unsafe { libc::recv(self.fd, self.buf.stable_mut_ptr().cast(), len, self.flags) };
        Cqe::new(0, sys::res(n), 0)
    }

    fn sqe(&mut self) -> squeue::Entry {
        if self.buf.bytes_total() == 0 {
            // As above: a NOP completes with 0 at once.
            return opcode::Nop::new().build();
        }
        let len = len_u32(self.buf.bytes_total());
        opcode::Recv::new(types::Fd(self.fd), self.buf.stable_mut_ptr(), len)
            .flags(self.flags)
            .build()
    }

    fn leaves_unready(&self, cqe: &Cqe) -> bool {
        self.is_stream && is_short(cqe, self.buf.bytes_total())
    }

    fn complete(self, cqe: Cqe) -> Self::Output {
        // SAFETY: `cqe` is this op's final completion, a read into the start of `buf`.
        unsafe { read_output(&cqe, self.buf) }
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
}

impl<B: IoBuf> OpDef for Send<B> {
    type Output = (io::Result<usize>, B);

    fn emulate(&mut self) -> Emulation {
        Emulation::Readiness {
            fd: self.fd,
            events: libc::POLLOUT as u32,
        }
    }

    fn try_syscall(&mut self) -> Cqe {
        let len = self.buf.bytes_init();
        // SAFETY: the buffer is readable for bytes_init bytes and owned by the op.
        let n = unsafe {
            libc::send(
                self.fd,
                self.buf.stable_ptr().cast(),
                len,
                self.flags | libc::MSG_NOSIGNAL,
            )
        };
        Cqe::new(0, sys::res(n), 0)
    }

    fn sqe(&mut self) -> squeue::Entry {
        let len = len_u32(self.buf.bytes_init());
        opcode::Send::new(types::Fd(self.fd), self.buf.stable_ptr(), len)
            .flags(self.flags | libc::MSG_NOSIGNAL)
            .build()
    }

    fn leaves_unready(&self, cqe: &Cqe) -> bool {
        is_short(cqe, self.buf.bytes_init())
    }

    fn complete(self, cqe: Cqe) -> Self::Output {
        (cqe.result().map(|n| n as usize), self.buf)
    }
}

/// Zero-copy send (6.0+): the first CQE carries the result, the buffer stays the kernel's
/// until the notification CQE.
pub(crate) struct SendZc<B> {
    pub(crate) fd: RawFd,
    pub(crate) buf: B,
    pub(crate) result: Option<i32>,
}

impl<B: IoBuf> OpDef for SendZc<B> {
    type Output = (io::Result<usize>, B);

    fn emulate(&mut self) -> Emulation {
        Emulation::Readiness {
            fd: self.fd,
            events: libc::POLLOUT as u32,
        }
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
                libc::MSG_NOSIGNAL,
            )
        };
        Cqe::new(0, sys::res(n), 0)
    }

    fn sqe(&mut self) -> squeue::Entry {
        let len = len_u32(self.buf.bytes_init());
        opcode::SendZc::new(types::Fd(self.fd), self.buf.stable_ptr(), len)
            .flags(libc::MSG_NOSIGNAL)
            .build()
    }

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
        (ring_core::errno::cvt(res).map(|n| n as usize), self.buf)
    }
}

/// `recv` into a buffer the kernel picks from `group` (buffer select).
pub(crate) struct RecvSelect {
    pub(crate) fd: RawFd,
    pub(crate) group: BufGroup,
}

impl OpDef for RecvSelect {
    type Output = Cqe;

    fn emulate(&mut self) -> Emulation {
        Emulation::Readiness {
            fd: self.fd,
            events: libc::POLLIN as u32,
        }
    }

    fn try_syscall(&mut self) -> Cqe {
        recv_into_group(self.fd, &self.group)
    }

    fn leaves_unready(&self, cqe: &Cqe) -> bool {
        // Only stream sockets receive into the pool.
        is_short(cqe, self.group.buf_len())
    }

    fn sqe(&mut self) -> squeue::Entry {
        let len = len_u32(self.group.buf_len());
        opcode::Recv::new(types::Fd(self.fd), std::ptr::null_mut(), len)
            .buf_group(self.group.bgid())
            .build()
            .flags(squeue::Flags::BUFFER_SELECT)
    }

    fn complete(self, cqe: Cqe) -> Cqe {
        cqe
    }

    fn into_orphan(self) -> Box<dyn Orphan> {
        // SAFETY: this op's SQE selects from `group`.
        Box::new(unsafe { RecycleBid::new(self.group) })
    }
}

/// Multishot recv with buffer select (6.0+).
pub(crate) fn recv_multi_sqe(fd: RawFd, group: &BufGroup) -> squeue::Entry {
    opcode::RecvMulti::new(types::Fd(fd), group.bgid()).build()
}

/// Waits until `fd` is readable (a one-shot `POLL_ADD`; on epoll, a readiness wait).
pub(crate) struct PollIn {
    pub(crate) fd: RawFd,
}

impl OpDef for PollIn {
    type Output = io::Result<()>;

    fn emulate(&mut self) -> Emulation {
        Emulation::Readiness {
            fd: self.fd,
            events: libc::POLLIN as u32,
        }
    }

    fn try_syscall(&mut self) -> Cqe {
        let mut pfd = libc::pollfd {
            fd: self.fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, zero timeout.
        let n = unsafe { libc::poll(&mut pfd, 1, 0) };
        Cqe::new(
            0,
            if n == 0 {
                -libc::EAGAIN
            } else {
                sys::res(n as isize)
            },
            0,
        )
    }

    fn sqe(&mut self) -> squeue::Entry {
        opcode::PollAdd::new(types::Fd(self.fd), libc::POLLIN as u32).build()
    }

    fn complete(self, cqe: Cqe) -> io::Result<()> {
        cqe.result().map(drop)
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

/// `sendmsg` to an address (UDP `send_to`).
pub(crate) struct SendMsg<B> {
    pub(crate) fd: RawFd,
    pub(crate) buf: B,
    pub(crate) hdr: Box<MsgHdr>,
}

impl<B: IoBuf> OpDef for SendMsg<B> {
    type Output = (io::Result<usize>, B);

    fn emulate(&mut self) -> Emulation {
        Emulation::Readiness {
            fd: self.fd,
            events: libc::POLLOUT as u32,
        }
    }

    fn try_syscall(&mut self) -> Cqe {
        // SAFETY: the msghdr points at the op's own iovec, buffer and address.
        let n = unsafe { libc::sendmsg(self.fd, &self.hdr.msg, libc::MSG_NOSIGNAL) };
        Cqe::new(0, sys::res(n), 0)
    }

    fn sqe(&mut self) -> squeue::Entry {
        opcode::SendMsg::new(types::Fd(self.fd), &self.hdr.msg)
            .flags(libc::MSG_NOSIGNAL as u32)
            .build()
    }

    fn complete(self, cqe: Cqe) -> Self::Output {
        (cqe.result().map(|n| n as usize), self.buf)
    }
}

/// `recvmsg` with the sender's address (UDP `recv_from`).
pub(crate) struct RecvMsg<B> {
    pub(crate) fd: RawFd,
    pub(crate) buf: B,
    pub(crate) hdr: Box<MsgHdr>,
}

impl<B: IoBufMut> OpDef for RecvMsg<B> {
    type Output = (io::Result<(usize, SockAddr)>, B);

    fn emulate(&mut self) -> Emulation {
        Emulation::Readiness {
            fd: self.fd,
            events: libc::POLLIN as u32,
        }
    }

    fn try_syscall(&mut self) -> Cqe {
        // SAFETY: the msghdr points at the op's own iovec, buffer and address storage.
        let n = unsafe { libc::recvmsg(self.fd, &mut self.hdr.msg, 0) };
        Cqe::new(0, sys::res(n), 0)
    }

    fn sqe(&mut self) -> squeue::Entry {
        opcode::RecvMsg::new(types::Fd(self.fd), &mut self.hdr.msg).build()
    }

    fn complete(mut self, cqe: Cqe) -> Self::Output {
        let res = cqe.result().map(|n| n as usize);
        let Ok(n) = res else {
            return (res.map(|_| unreachable!("Err checked")), self.buf);
        };
        // SAFETY: the kernel wrote `n` bytes into the buffer's start.
        unsafe { self.buf.set_init(n) };
        let mut hdr = self.hdr;
        hdr.addr.len = hdr.msg.msg_namelen;
        (Ok((n, hdr.addr.into_addr())), self.buf)
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
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd, zero timeout.
    if unsafe { libc::poll(&mut pfd, 1, 0) } == 0 {
        return Cqe::new(0, -libc::EAGAIN, 0);
    }
    let mut err: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: SO_ERROR writes one c_int into `err`, whose size is passed in `len`.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut err as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Cqe::new(0, sys::res(rc as isize), 0);
    }
    Cqe::new(0, -err, 0)
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
    let n = unsafe { libc::recv(fd, ptr.cast(), len, libc::MSG_DONTWAIT) };
    let res = sys::res(n);
    if res < 0 {
        // SAFETY: the bid came from `take` above and was not leased.
        unsafe { group.recycle(bid) };
        return Cqe::new(0, res, 0);
    }
    Cqe::new(0, res, Cqe::buffer_flags(bid))
}

/// `read(2)` on a pollable non-socket fd (pipe, eventfd, signalfd): readiness on epoll.
pub(crate) struct ReadPollable<B> {
    pub(crate) fd: RawFd,
    pub(crate) buf: B,
}

impl<B: IoBufMut> OpDef for ReadPollable<B> {
    type Output = (io::Result<usize>, B);

    fn emulate(&mut self) -> Emulation {
        Emulation::Readiness {
            fd: self.fd,
            events: libc::POLLIN as u32,
        }
    }

    fn try_syscall(&mut self) -> Cqe {
        let len = self.buf.bytes_total();
        // SAFETY: the buffer is writable for bytes_total bytes and owned by the op.
        let n = unsafe { libc::read(self.fd, self.buf.stable_mut_ptr().cast(), len) };
        Cqe::new(0, sys::res(n), 0)
    }

    fn sqe(&mut self) -> squeue::Entry {
        let len = len_u32(self.buf.bytes_total());
        // Offset -1: the fd's current position, as read(2) uses (pipes have none).
        opcode::Read::new(types::Fd(self.fd), self.buf.stable_mut_ptr(), len)
            .offset(u64::MAX)
            .build()
    }

    fn complete(self, cqe: Cqe) -> Self::Output {
        // SAFETY: `cqe` is this op's final completion, a read into the start of `buf`.
        unsafe { read_output(&cqe, self.buf) }
    }
}
