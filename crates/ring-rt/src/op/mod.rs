//! The one op interface every backend runs: an op is a plain struct that says how to run
//! it either way (the backend's [`Operation`]) and turns its final completion into an
//! output ([`OpDef`]). `Op` is the future that starts it on first poll and, dropped with
//! the op in flight, hands the op's memory to the worker as an orphan: the one orphan path
//! that single-shot, linked and multishot ops all take.

pub(crate) mod fs;
pub mod link;
pub(crate) mod multishot;
pub(crate) mod net;
pub(crate) mod pollable;
pub(crate) mod unclaimed;

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use ring_core::cqe::Cqe;
use ring_core::lifecycle::{Deferred, Orphan};

use crate::buf::{advance, write_zero, IoBuf, Slice};
use ring_core::release::Keep;
use ring_core::user_data::OpId;

pub use crate::backend::{BlockingJob, Emulation, Operation};
use crate::backend::{ReadyWait, Start, Token};
use crate::completion::Refused;
use crate::executor::coop;
use crate::worker::Core;
pub use unclaimed::ChainTurns;

/// One kind of operation (implemented by ring-rt's own op types only).
#[doc(hidden)]
pub trait OpDef: Operation + Unpin + 'static {
    /// What awaiting the op gives.
    type Output;

    /// The final CQE's result, turned into the output (handing owned buffers back).
    fn complete(self, cqe: Cqe) -> Self::Output;

    /// A CQE with `F_MORE` before the final one (e.g. a zero-copy send's result, whose
    /// buffer the kernel holds until the notification CQE).
    fn on_more(&mut self, _cqe: Cqe) {}

    /// What to keep and release if the future is dropped in flight. The default keeps the
    /// op's memory until the final CQE and releases nothing.
    fn into_orphan(self) -> Box<dyn Orphan>
    where
        Self: Sized,
    {
        Box::new(Keep(self))
    }

    /// Before the op starts: `Ready(Some(cqe))` completes it without the backend (a read
    /// served from bytes an earlier, dropped read received), `Pending` holds it back (that
    /// earlier read is still finishing, and its bytes come first), `Ready(None)` starts it.
    fn poll_prepare(&mut self, _cx: &mut Context<'_>) -> Poll<Option<Cqe>> {
        Poll::Ready(None)
    }

    /// Whether [`poll_prepare`](Self::poll_prepare) would complete the op now, waiting
    /// for nothing and needing no backend (a read served from bytes queued on its socket):
    /// such an op is served even where it could not start (review DF: once the runtime
    /// stopped, no read reached the bytes an adapter had given back).
    fn is_served_at_once(&self) -> bool {
        false
    }

    /// Whether [`poll_prepare`](Self::poll_prepare) has something to do now; such an op
    /// cannot go into a kernel-linked chain as it is.
    fn needs_prepare(&self) -> bool {
        false
    }

    /// Does at once what `poll_prepare` would before the op starts, for an op going into a
    /// kernel-linked chain (where `needs_prepare` said nothing has to wait): a receive
    /// takes its socket's receive turn.
    fn claim(&mut self) {}

    /// The op went to the backend on its own (not in a chain, not bounded by a timeout),
    /// as `id` where it is in flight (`None`: an epoll wait for readiness): a stream read
    /// holding its socket's receive turn records it, to be recalled by bytes put back in
    /// front of what it gets (see [`is_recalled`](Self::is_recalled)).
    fn started(&self, _id: Option<OpId>) {}

    /// Bytes were put back on the op's socket in front of what it waits for (an adapter
    /// dropped with read-ahead): it must come back for them. With nothing of it in the
    /// kernel it completes now (its `complete` gives them); in the kernel it is cancelled,
    /// once (see [`take_recall`](Self::take_recall)), and its completion gives them.
    fn is_recalled(&self) -> bool {
        false
    }

    /// The op's final completion says it was recalled and found nothing left: it starts
    /// again instead (a stream read cancelled for put-back bytes another receive took).
    fn restarts_after(&self, _cqe: &Cqe) -> bool {
        false
    }

    /// The output of a final completion that leaves the op's definition in place for a
    /// next run (see `Op::poll_kept`): `Some` only for an op whose output owns nothing of
    /// the definition (a pool receive's CQE).
    fn kept_output(&self, _cqe: &Cqe) -> Option<Self::Output> {
        None
    }

    /// Whether the recalled op's cancel is still to be sent (true once, and only if the
    /// socket's `unread` did not send it).
    fn take_recall(&self) -> bool {
        false
    }

    /// In a chain, before the op starts: a receive goes on with the receive turn an
    /// earlier op of the chain holds on the same socket.
    fn adopt_turn(&mut self, _turns: &ChainTurns) {}

    /// In a chain, once the op holds what it needs: a receive offers its socket's turn
    /// to the later ops of the chain.
    fn share_turn(&mut self, _turns: &ChainTurns) {}

    /// An op that ended in a chain dropped before the chain ended: what its final CQE
    /// brought is released as an orphan's would be (an fd closed, a buffer returned), or
    /// given back (a receive's bytes go to the front of its socket's queue).
    fn give_back(self, cqe: &Cqe, deferred: &mut Deferred)
    where
        Self: Sized,
    {
        let mut orphan = self.into_orphan();
        orphan.reap(cqe, deferred);
        deferred.drop_later(orphan);
    }
}

enum State<T> {
    Unstarted(T),
    /// Started on the backend: polled through the token.
    Running(T, Token),
    Done,
}

/// One I/O operation on its worker, started on its first poll. It owns its buffers
/// until it completes; dropping it in flight cancels it, and the runtime keeps its memory
/// until the kernel is done.
pub(crate) struct Op<T: OpDef> {
    core: Rc<Core>,
    state: State<T>,
}

impl<T: OpDef> Op<T> {
    pub(crate) fn new(core: Rc<Core>, op: T) -> Op<T> {
        Op {
            core,
            state: State::Unstarted(op),
        }
    }

    /// Polls a write-all's op, whose slice carries its progress (`begin` is what was
    /// written, `end` the total): after a short write `next` makes the op for the rest
    /// (from the op's worker, the unwritten slice, and how much was written), until every
    /// byte is; `WriteZero` if a write moves nothing, `EINTR` goes on. The buffer always
    /// comes back. Shared by a stream's `write_all` and the adapter's file write-all.
    pub(crate) fn poll_write_all<B: IoBuf>(
        &mut self,
        cx: &mut Context<'_>,
        mut next: impl FnMut(&Rc<Core>, Slice<B>, usize) -> Op<T>,
    ) -> Poll<(io::Result<()>, B)>
    where
        T: OpDef<Output = (io::Result<usize>, Slice<B>)>,
    {
        loop {
            let (res, slice) = std::task::ready!(Pin::new(&mut *self).poll(cx));
            let (done, total) = (slice.begin(), slice.end());
            let buf = slice.into_inner();
            let done = match advance(res, done, total, write_zero) {
                Ok(moved) => moved,
                Err(e) => return Poll::Ready((Err(e), buf)),
            };
            if done >= total {
                return Poll::Ready((Ok(()), buf));
            }
            *self = next(&self.core, buf.slice(done..total), done);
        }
    }

    /// The op's definition, until its completion takes it.
    #[inline]
    pub(crate) fn def(&self) -> Option<&T> {
        match &self.state {
            State::Unstarted(op) | State::Running(op, _) => Some(op),
            State::Done => None,
        }
    }

    /// An op waiting for epoll's readiness at its deadline: its fd is no longer taken as
    /// drained, so the op's next poll tries its syscall once more (what came since the
    /// last loop turn, which io_uring's kernel would try before its linked timeout fires).
    /// False for anything else (nothing to retry: not started, in flight, done).
    pub(crate) fn forget_drained(&self) -> bool {
        match &self.state {
            State::Running(
                _,
                Token::Ready {
                    fd,
                    wait: ReadyWait::Parked(_),
                    ..
                },
            ) => {
                self.core.forget_drained(*fd);
                true
            }
            _ => false,
        }
    }

    /// Gives up on the op because its deadline passed: `Some` with its definition when
    /// nothing of it is in flight (never started, or waiting for readiness); otherwise a
    /// cancel is sent (once) and `None`: the op's completion, usually `ECANCELED`, still
    /// comes through [`poll`](Future::poll).
    pub(crate) fn time_out(&mut self, cancel_sent: &mut bool) -> Option<T> {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Unstarted(op) => Some(op),
            State::Running(op, token) => match token.in_flight() {
                Some((id, true)) => {
                    if !std::mem::replace(cancel_sent, true) {
                        let _ = self.core.cancel(id);
                    }
                    self.state = State::Running(op, token);
                    None
                }
                _ => {
                    self.core.let_readiness_wait_go(&token);
                    Some(op)
                }
            },
            State::Done => None,
        }
    }
}

/// A CQE standing for an error that happened before the kernel saw the op. A refusal of
/// the runtime's own (not running here, dropped) keeps its message through a result code
/// of its own, which [`crate::completion::result`] reads back; another error without an errno keeps its kind
/// through the errno of that kind, not a blanket `EIO`.
pub(crate) fn error_cqe(err: &io::Error) -> Cqe {
    let res = match Refused::of(err) {
        Some(refused) => refused.res(),
        None => -errno_of(err),
    };
    Cqe::new(0, res, 0)
}

fn errno_of(err: &io::Error) -> i32 {
    use io::ErrorKind as K;
    err.raw_os_error().unwrap_or(match err.kind() {
        K::NotConnected => libc::ENOTCONN,
        K::WouldBlock => libc::EAGAIN,
        K::OutOfMemory => libc::ENOMEM,
        K::Unsupported => libc::EOPNOTSUPP,
        K::InvalidInput => libc::EINVAL,
        K::TimedOut => libc::ETIMEDOUT,
        K::PermissionDenied => libc::EPERM,
        K::NotFound => libc::ENOENT,
        _ => libc::EIO,
    })
}

impl<T: OpDef> Future for Op<T> {
    type Output = T::Output;

    /// Within the op budget of the task's poll (see `executor::coop`): an op polled once
    /// it is spent does nothing and waits for a loop turn; one that completes spends it.
    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T::Output> {
        std::task::ready!(crate::worker::poll_budget(cx));
        coop::spending(self.poll_op::<false>(cx))
    }
}

impl<T: OpDef> Op<T> {
    /// An unstarted op that cannot start here: served all the same when that needs no
    /// backend (see [`OpDef::is_served_at_once`]), else failed with `err`.
    fn refuse_unstarted(&mut self, err: io::Error, cx: &mut Context<'_>) -> T::Output {
        if let State::Unstarted(op) = &mut self.state {
            if op.is_served_at_once() {
                if let Poll::Ready(Some(cqe)) = op.poll_prepare(cx) {
                    return self.finish(cqe);
                }
            }
        }
        self.finish(error_cqe(&err))
    }

    /// Polls the op; with `KEEP`, a final completion whose output owns nothing of the
    /// definition (see [`OpDef::kept_output`]) leaves the op for its next run instead of
    /// done: running, where its start would make again what it has (an idle readiness
    /// wait), else `Unstarted`.
    #[inline]
    fn poll_op<const KEEP: bool>(&mut self, cx: &mut Context<'_>) -> Poll<T::Output> {
        let this = self;
        loop {
            match &mut this.state {
                State::Unstarted(op) => {
                    // Before waiting for anything (a socket's receive turn): an op that
                    // cannot start here fails now.
                    let startable = match this.core.check_startable() {
                        Ok(startable) => startable,
                        Err(err) => return Poll::Ready(this.refuse_unstarted(err, cx)),
                    };
                    if let Some(cqe) = std::task::ready!(op.poll_prepare(cx)) {
                        return Poll::Ready(this.finish(cqe));
                    }
                    match this.core.start(op, cx.waker(), startable) {
                        Ok(Start::Token(token)) => this.run(token),
                        Ok(Start::Waiting(token)) => {
                            this.run(token);
                            // Recalled while it started (a waker's clone dropped an
                            // adapter): dealt with now, as no wake says so.
                            if !this.is_recalled() {
                                return Poll::Pending;
                            }
                        }
                        Ok(Start::Done(cqe)) => return Poll::Ready(this.finish(cqe)),
                        Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                            // Polled from inside a loop turn: try again from the task.
                            cx.waker().wake_by_ref();
                            return Poll::Pending;
                        }
                        Err(err) => return Poll::Ready(this.finish(error_cqe(&err))),
                    }
                }
                State::Running(op, token) => {
                    if op.is_recalled() {
                        if let Some(cqe) = recall(&this.core, op, token) {
                            return Poll::Ready(this.finish(cqe));
                        }
                    }
                    let cqe = match this.core.poll(token, op, cx.waker()) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Ok(cqe)) => cqe,
                        Poll::Ready(Err(err)) if err.kind() == io::ErrorKind::WouldBlock => {
                            cx.waker().wake_by_ref();
                            return Poll::Pending;
                        }
                        // The op is no longer in the table (or never reached the kernel).
                        Poll::Ready(Err(err)) => error_cqe(&err),
                    };
                    if cqe.is_more() {
                        op.on_more(cqe);
                        continue;
                    }
                    if op.restarts_after(&cqe) {
                        this.restart();
                        continue;
                    }
                    if KEEP {
                        if let Some(output) = op.kept_output(&cqe) {
                            // A readiness op with nothing in flight and no wait is what a
                            // start would make again: it stays running (its next poll tries
                            // the syscall). One in the kernel starts over.
                            if !matches!(
                                token,
                                Token::Ready {
                                    wait: ReadyWait::Idle,
                                    ..
                                }
                            ) {
                                this.restart();
                            }
                            return Poll::Ready(output);
                        }
                    }
                    return Poll::Ready(this.finish(cqe));
                }
                State::Done => panic!("ring-rt op polled after it completed"),
            }
        }
    }
}

impl<T: OpDef> Op<T> {
    /// The id of the op in flight (in the kernel, on the pool, or waiting for readiness).
    pub(crate) fn in_flight_id(&self) -> Option<OpId> {
        match &self.state {
            State::Running(_, token) => token.in_flight().map(|(id, _)| id),
            _ => None,
        }
    }

    /// Unstarted -> Running with `token`.
    fn run(&mut self, token: Token) {
        let State::Unstarted(op) = std::mem::replace(&mut self.state, State::Done) else {
            unreachable!("an op starts once, from Unstarted")
        };
        op.started(token.in_flight().map(|(id, _)| id));
        self.leave_done(State::Running(op, token));
    }

    /// Replaces the `Done` a transition left in the state with `next`. `Done` owns nothing,
    /// so it is forgotten rather than dropped: an assignment, `self.state = next`, drops the
    /// value it overwrites, through the state's out-of-line destructor (an op start and a
    /// chunk each, callgrind).
    #[inline]
    fn leave_done(&mut self, next: State<T>) {
        debug_assert!(matches!(self.state, State::Done));
        std::mem::forget(std::mem::replace(&mut self.state, next));
    }

    /// Running -> Unstarted, after its final completion (see [`OpDef::restarts_after`]).
    fn restart(&mut self) {
        let State::Running(op, _) = std::mem::replace(&mut self.state, State::Done) else {
            unreachable!("only a running op restarts")
        };
        self.leave_done(State::Unstarted(op));
    }

    /// Whether the running op was recalled (see [`OpDef::is_recalled`]).
    fn is_recalled(&self) -> bool {
        matches!(&self.state, State::Running(op, _) if op.is_recalled())
    }

    /// Completes the op with its final CQE.
    fn finish(&mut self, cqe: Cqe) -> T::Output {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Unstarted(op) | State::Running(op, _) => op.complete(cqe),
            State::Done => unreachable!("an op finishes once"),
        }
    }
}

/// Recalls a running op (see [`OpDef::is_recalled`]): `Some` with the CQE to complete it
/// by when nothing of it is in the kernel (a readiness wait, let go); else its cancel is
/// sent, once, and `None`: its completion comes through the backend. Rare, and kept out of
/// line: `Op::poll` is every op's hot path.
#[cold]
#[inline(never)]
fn recall<T: OpDef>(core: &Core, op: &T, token: &Token) -> Option<Cqe> {
    match token.in_flight() {
        Some((id, true)) => {
            if op.take_recall() {
                core.recall_receive(op.fd().unwrap_or(-1), Some(id));
            }
            None
        }
        _ => {
            core.let_readiness_wait_go(token);
            Some(Cqe::new(0, -libc::ECANCELED, 0))
        }
    }
}

impl Op<net::RecvSelect> {
    /// Polls the receive as awaiting it does, but its completion leaves it for the next
    /// receive instead of done: a receive stream's one-shot receive is made once, not once
    /// per chunk (its worker, pool group and unclaimed receives are three reference counts
    /// taken and let go per chunk, and the op's drop). A readiness receive (epoll, and
    /// io_uring's without a kernel buffer ring) stays running with an idle wait, which is
    /// what its start would make again; one that was in the kernel is `Unstarted` again.
    /// After shutdown the running one fails as every running readiness op does
    /// (`Core::poll`); polled outside its runtime it makes one try of its syscall, as they
    /// do, and fails if that finds nothing. An op that ended without running (refused: see
    /// `is_done`) is done, as any op is.
    #[inline]
    pub(crate) fn poll_kept(&mut self, cx: &mut Context<'_>) -> Poll<Cqe> {
        std::task::ready!(crate::worker::poll_budget(cx));
        coop::spending(self.poll_op::<true>(cx))
    }

    /// Whether the op is done: it cannot run again.
    #[inline]
    pub(crate) fn is_done(&self) -> bool {
        matches!(self.state, State::Done)
    }

    /// Drops the op without orphaning what is in flight: the caller orphaned it already,
    /// with an orphan of its own. Only for this op, which has no memory of its own (the
    /// kernel picks a pool buffer): nothing is freed under the kernel.
    pub(crate) fn disown(mut self) {
        if let State::Running(_, token) = std::mem::replace(&mut self.state, State::Done) {
            // Nothing of it is in flight, but a readiness wait's waker is parked: let it
            // go (review AI: it stayed until the fd was next ready).
            self.core.parked_wait_dropped(&token);
        }
    }
}

impl<T: OpDef> Drop for Op<T> {
    /// The one orphan path (see the module header): what is in flight goes to the worker.
    fn drop(&mut self) {
        // A finished op (the usual drop) has nothing to let go: looked at first, as taking
        // its state out wrote a `Done` in its place and dropped the `Done` taken out (an
        // out-of-line call; the field's own drop glue still runs after this either way).
        if matches!(self.state, State::Done) {
            return;
        }
        let State::Running(op, token) = std::mem::replace(&mut self.state, State::Done) else {
            return;
        };
        match token.in_flight() {
            Some((id, true)) => self.core.orphan(id, op.into_orphan()),
            _ => self.core.let_readiness_wait_go(&token),
        }
    }
}
