//! A socket's received data as a stream of pooled buffers. Everything in flight lives in the
//! stream itself, not in the future `next` returns, so dropping that future (a `select!` or
//! a timeout losing the race) loses no data, and the future a connection's task holds while
//! idle is one pointer.

use std::future::Future;
use std::io;
use std::num::NonZeroU64;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{ready, Context, Poll};

use ring_core::buf_pool::{BufGroup, ReturnTurn, ReturnWait};
use ring_core::cqe::Cqe;
use ring_core::user_data::OpId;

use super::socket::Socket;
use crate::backend::Capability;
use crate::completion::Refused;
use crate::op::multishot::Multishot;
use crate::op::net::{keep_chunks, RecvMulti, RecvSelect};
use crate::op::unclaimed::{TurnTicket, Unclaimed};
use crate::op::Op;
use crate::pool::{self, PooledBuf};

/// Received data as it arrives: multishot recv into the worker's pool where the kernel has
/// it (6.0+), else one buffer-select recv after another. `next` gives `None` at end of
/// stream. If the pool runs dry the stream waits for buffers and re-arms: no data is lost.
///
/// Made by `recv_stream` on [`TcpStream`](crate::net::TcpStream) and
/// [`UnixStream`](crate::net::UnixStream). Each chunk is a [`PooledBuf`]; hold few of them
/// at a time, as a chunk held is a pool buffer out. Dropping the stream cancels its
/// receive; data that still arrives for it (a late completion) is copied out, its pool
/// buffer goes back at once, and the socket's next receive returns that data first.
///
/// `next` is cancel-safe: a receive in flight belongs to the stream, so a dropped
/// [`RecvNext`] loses nothing and the following `next` picks up where it stopped.
///
/// # Examples
///
/// ```
/// # ring_rt::Runtime::new()?.block_on(async {
/// let (a, b) = ring_rt::net::UnixStream::pair()?;
/// a.write_all(&b"first "[..]).await.0?;
/// a.write_all(&b"second"[..]).await.0?;
/// drop(a); // end of stream for `b`
///
/// let mut rx = b.recv_stream();
/// let mut text = Vec::new();
/// while let Some(chunk) = rx.next().await {
///     text.extend_from_slice(&chunk?);
/// }
/// assert_eq!(text, b"first second");
/// # std::io::Result::Ok(()) })?;
/// # std::io::Result::Ok(())
/// ```
pub struct RecvStream<'a> {
    socket: &'a Socket,
    /// How it receives, and the worker's receive group and the socket's unclaimed
    /// receives with it: chosen on first poll.
    receiver: Receiver,
    /// The pool's return count when the current receive was started: after an ENOBUFS, a
    /// return since then means a buffer may be free again.
    epoch: u64,
    /// Waiting for a buffer to come back after ENOBUFS, then holding the woken turn until
    /// the retry shows whether it took a buffer (boxed: rare).
    starved: Option<Box<Starved>>,
    /// The socket's receive turn, held from arming until the receive ends (between `next`
    /// calls too), by this number; another receive of the socket may take it.
    hold: Option<NonZeroU64>,
    /// Its place in line for the turn while it waits.
    ticket: Option<TurnTicket>,
    /// Never multishot: `recv_pooled`, which must leave nothing armed behind it.
    single_only: bool,
    done: bool,
}

/// How a receive stream receives. Each way keeps the group and the socket's unclaimed
/// receives once, where its op needs them (a stream is part of every connection's task).
enum Receiver {
    /// Not polled yet.
    Unset,
    /// A multishot recv (6.0+), armed between a poll and its final CQE; its def holds the
    /// group and the unclaimed receives.
    Multishot(Multishot<RecvMulti>),
    /// One buffer-select recv after another, the one in flight boxed (kernels before 6.0
    /// and epoll only).
    Single {
        group: BufGroup,
        unclaimed: Rc<Unclaimed>,
        op: Box<OneShot>,
    },
}

/// The boxed one-shot receive. The box is made once, with the stream's way of receiving,
/// and so is the receive in it, which waits between chunks (`Op::poll_kept`):
/// a stream receiving chunk after chunk allocates once, not once per chunk (an allocation
/// and a free were 135 of epoll's instructions per echo request, callgrind), and makes its
/// op once. It is dropped in place (`Spent`) when it ended without running or another
/// receive took it over (`disown`), and made again by the next receive.
enum OneShot {
    /// Running, or kept for the next receive.
    InFlight(Op<RecvSelect>),
    Spent,
}

impl Receiver {
    /// The group and the unclaimed receives, once chosen.
    fn parts(&self) -> Option<(&BufGroup, &Rc<Unclaimed>)> {
        match self {
            Receiver::Unset => None,
            Receiver::Multishot(m) => Some((&m.def().group, &m.def().unclaimed)),
            Receiver::Single {
                group, unclaimed, ..
            } => Some((group, unclaimed)),
        }
    }

    fn is_multishot(&self) -> bool {
        matches!(self, Receiver::Multishot(_))
    }
}

impl<'a> RecvStream<'a> {
    pub(crate) fn new(socket: &'a Socket) -> RecvStream<'a> {
        RecvStream {
            socket,
            receiver: Receiver::Unset,
            single_only: false,
            epoch: 0,
            starved: None,
            hold: None,
            ticket: None,
            done: false,
        }
    }

    pub(crate) fn single_shot(socket: &'a Socket) -> RecvStream<'a> {
        let mut rx = RecvStream::new(socket);
        rx.single_only = true;
        rx
    }

    /// The next chunk of data, `None` at end of stream (and after an error). Cancel-safe:
    /// dropping the future before it is ready loses no data.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let (a, b) = ring_rt::net::UnixStream::pair()?;
    /// let mut rx = b.recv_stream();
    /// // Nothing sent yet: the timeout wins and drops `next`'s future.
    /// let early = ring_rt::time::timeout(Duration::from_millis(10), rx.next()).await;
    /// assert!(early.is_err());
    ///
    /// a.write_all(&b"ping"[..]).await.0?;
    /// let chunk = rx.next().await.expect("not at end")?;
    /// assert_eq!(&chunk[..], b"ping");
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    // An async stream's `next` (like `StreamExt::next`), not `Iterator::next`.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> RecvNext<'_, 'a> {
        RecvNext { stream: self }
    }

    /// Polls for the next chunk (what [`next`](Self::next) awaits), for hand-written
    /// futures and `Stream` impls: `Ready(None)` at end of stream and after an error.
    ///
    /// Unlike a dropped [`RecvNext`], a caller that stops polling after `Pending` cannot
    /// be seen: the stream keeps its place in line for the socket's receive turn, and
    /// another receive of the socket waits until the stream is polled again or dropped.
    /// Drop the stream (or poll it through `next`) when you stop reading from it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::future::poll_fn;
    ///
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let (a, b) = ring_rt::net::UnixStream::pair()?;
    /// a.write_all(&b"polled"[..]).await.0?;
    /// drop(a);
    /// let mut rx = b.recv_stream();
    /// let chunk = poll_fn(|cx| rx.poll_next(cx)).await.expect("data")?;
    /// assert_eq!(&chunk[..], b"polled");
    /// drop(chunk);
    /// assert!(poll_fn(|cx| rx.poll_next(cx)).await.is_none());
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<PooledBuf>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let out = ready!(self.poll_chunk(cx)).transpose();
        if !matches!(out, Some(Ok(_))) {
            self.done = true;
        }
        Poll::Ready(out)
    }

    /// One chunk, `Ok(None)` at end of stream; waits out ENOBUFS and retries EINTR. What
    /// dropped receives of the socket got comes first.
    pub(crate) fn poll_chunk(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<Option<PooledBuf>>> {
        let (group, unclaimed) = match self.group() {
            Ok(parts) => parts,
            Err(err) => return self.group_refused(err, cx),
        };
        loop {
            if self
                .hold
                .is_some_and(|number| !unclaimed.stream_holds(number))
            {
                // Another receive took the turn: it orphaned our receive, whose data is
                // queued with the socket now.
                self.disown();
            }
            if self.hold.is_some() && unclaimed.has_items() {
                // Bytes that came before anything our receive gets were put back on the
                // socket while we held the turn (an adapter dropped with read-ahead, review
                // AH): our receive lets the turn go, what it got is queued behind them, and
                // the queue is read first.
                self.let_hold_go();
            }
            if self.hold.is_none() {
                match self.poll_starved(&unclaimed, cx) {
                    Poll::Ready(Some(())) => {}
                    // Bytes queued on the socket need no pool buffer: they are taken below.
                    Poll::Ready(None) => self.starved = None,
                    Poll::Pending => return self.pending_or_refused(),
                }
            }
            if self.hold.is_none() {
                let turn = match unclaimed.poll_turn(&mut self.ticket, cx) {
                    Poll::Ready(turn) => turn,
                    Poll::Pending => {
                        // Another receive of the socket holds its turn, for as long as it
                        // likes: the returned buffer's turn goes to the next starved one.
                        self.pass_woken_turn();
                        return self.pending_or_refused();
                    }
                };
                let Some(turn) = turn else {
                    // Queued data comes first (a stream socket queues only bytes). It took
                    // no returned buffer: a woken turn passes on (dropped with `starved`).
                    // Its place in line goes: a stream's next chunk asks again.
                    self.ticket = None;
                    self.starved = None;
                    return Poll::Ready(match unclaimed.take_chunk(group.buf_len()) {
                        Some(chunk) => Ok(Some(chunk)),
                        None => Err(io::Error::other("a stream socket queued a non-byte item")),
                    });
                };
                let core = self.socket.core.clone();
                self.hold = Some(unclaimed.hold_for_stream(turn, core, group.clone()));
            }
            let wakes = unclaimed.wake_count();
            let polled = self.poll_receive(&group, &unclaimed, cx);
            let number = self.hold.expect("held above");
            unclaimed.stream_op(number, self.in_flight());
            let cqe = match polled {
                Poll::Pending => {
                    // Awaited: the turn stays. Woken as well if another receive takes it
                    // once nobody awaits this stream.
                    unclaimed.stream_awaited(number, true);
                    unclaimed.wait_as(number, cx);
                    if unclaimed.wake_count() != wakes {
                        // The socket's waiters were woken while the receive parked its
                        // waker (a clone of it, code that is not ours, put an adapter's
                        // read-ahead back, say), before this stream's waker was among
                        // them: look again now (review AL).
                        continue;
                    }
                    if self.holds_woken_turn() && !self.socket.has_data_now() {
                        // The retry waits for data that has not come: it will not take
                        // the returned buffer soon, another starved receive may.
                        self.pass_woken_turn();
                    }
                    return Poll::Pending;
                }
                Poll::Ready(cqe) => cqe,
            };
            unclaimed.stream_awaited(number, false);
            let over = cqe.as_ref().map_or(true, |cqe| !cqe.is_more());
            // A multishot receive that is over passes the turn on (this stream takes it
            // again next time, after anything queued). A one-shot receive that brings a
            // chunk keeps it for the stream's next receive, as an armed multishot one does:
            // giving it up and taking it back woke this task again for every chunk, and
            // another receive takes it from the idle stream all the same.
            let multishot = self.receiver.is_multishot();
            let single_over = over && !multishot;
            if over && multishot {
                self.end_hold(&unclaimed, number);
            }
            let cqe = match cqe {
                Ok(cqe) => cqe,
                Err(e) => {
                    // The receive failed without a buffer: a woken turn passes on.
                    self.starved = None;
                    if single_over {
                        self.end_hold(&unclaimed, number);
                    }
                    return Poll::Ready(Err(e));
                }
            };
            if over && multishot && cqe.res == -libc::ECANCELED {
                // Cancelled at its bound (the chunks it held unpolled, see
                // `RecvMulti::queue_max`), after every chunk it had: arm again.
                continue;
            }
            let got = pool::from_cqe(&group, cqe);
            if single_over && !matches!(got, Ok(Some(_))) {
                // End of stream, an error, or ENOBUFS (whose wait for a returned buffer
                // runs without the turn).
                self.end_hold(&unclaimed, number);
            }
            match got {
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    // None free again: the woken turn's bid went to another receive.
                    self.used_turn();
                    pool::record_enobufs(&self.socket.core, &group);
                    let wait = group.wait_return(self.epoch);
                    self.starved = Some(Box::new(Starved {
                        stage: Stage::Waiting(wait),
                        waiter: None,
                    }));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(Some(chunk)) => {
                    self.used_turn();
                    return Poll::Ready(Ok(Some(chunk)));
                }
                // End of stream or an error took no buffer: a woken turn passes on.
                other => {
                    self.starved = None;
                    return Poll::Ready(other);
                }
            }
        }
    }

    /// The stream's first poll could not choose its way of receiving. The backend was
    /// busy (the poll is nested in the runtime's own bookkeeping: a waker's `clone`): the
    /// task tries again, as an op's start does (review CN: the stream ended with a
    /// "busy" error). Anything else is the stream's error.
    #[cold]
    fn group_refused(
        &self,
        err: io::Error,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<Option<PooledBuf>>> {
        if Refused::of(&err) == Some(Refused::Busy) {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Poll::Ready(Err(err))
    }

    /// Lets the socket's receive turn go: a receive in flight is orphaned with the turn,
    /// which passes on at its final completion, after what it still got is queued for the
    /// socket's next receive.
    fn let_hold_go(&mut self) {
        let (Some(number), Some((group, unclaimed))) = (self.hold, self.receiver.parts()) else {
            return;
        };
        let in_flight = self.in_flight();
        if let Some(turn) = unclaimed.take_stream(number) {
            match in_flight {
                Some(id) => self
                    .socket
                    .core
                    .orphan(id, keep_chunks(group, unclaimed, Some(turn))),
                None => drop(turn),
            }
        }
        self.disown();
    }

    /// The stream's receive is over and it lets the turn go.
    fn end_hold(&mut self, unclaimed: &Unclaimed, number: NonZeroU64) {
        self.hold = None;
        unclaimed.end_stream(number);
    }

    /// A receive waiting (for its socket's turn, or after ENOBUFS for a pool buffer to come
    /// back) where no loop of its runtime turns (polled elsewhere, or once the runtime is
    /// going) would wait for ever: the holder of the turn never lets it go there, and a
    /// returned buffer never comes. It is refused, as a read waiting in line is (reviews DG
    /// and DI: it stayed pending), and leaves the line and the buffer's waiters as a
    /// dropped receive does (reviews DH and DI: kept, its places held the socket's other
    /// receives at home behind it).
    fn pending_or_refused(&mut self) -> Poll<io::Result<Option<PooledBuf>>> {
        if let Err(refused) = self.socket.core.check_startable() {
            self.leave_starved();
            self.ticket = None;
            return Poll::Ready(Err(refused));
        }
        Poll::Pending
    }

    /// After ENOBUFS: waits for a pool buffer to come back, or for bytes to be queued on
    /// the socket (a dropped receive's, an adapter's read-ahead), which need no buffer.
    /// `Ready(Some(()))` to go on with the receive (not starved, or a buffer's turn woke
    /// it), `Ready(None)` when bytes are queued. Review AI: only a returned buffer woke it,
    /// so with every buffer held by the caller it waited for ever with bytes queued.
    fn poll_starved(
        &mut self,
        unclaimed: &Rc<Unclaimed>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<()>> {
        let Some(starved) = &mut self.starved else {
            return Poll::Ready(Some(()));
        };
        let Stage::Waiting(wait) = &mut starved.stage else {
            return Poll::Ready(Some(()));
        };
        match wait.poll(cx) {
            Poll::Ready(Some(turn)) => starved.stage = Stage::Woken(turn),
            Poll::Ready(None) => self.starved = None,
            Poll::Pending if unclaimed.has_items() => return Poll::Ready(None),
            Poll::Pending => {
                let (_, number) = starved
                    .waiter
                    .get_or_insert_with(|| (unclaimed.clone(), unclaimed.waiter_number()));
                unclaimed.wait_as(*number, cx);
                return Poll::Pending;
            }
        }
        Poll::Ready(Some(()))
    }

    /// Whether this stream holds a returned buffer's turn (woken after ENOBUFS, its retry
    /// not yet done).
    fn holds_woken_turn(&self) -> bool {
        self.starved
            .as_deref()
            .is_some_and(|starved| matches!(starved.stage, Stage::Woken(_)))
    }

    /// Gives a held turn up unused: the next starved receive is woken.
    fn pass_woken_turn(&mut self) {
        if self.holds_woken_turn() {
            self.starved = None;
        }
    }

    /// Nobody awaits this stream any more: it gives up its place among the starved
    /// receives (a woken turn passes on), so a return never wakes a stream nobody polls.
    /// Its next poll starts a receive again.
    fn leave_starved(&mut self) {
        self.starved = None;
    }

    /// The retry after a starved wait took a buffer (or found the returned one gone).
    #[inline]
    fn used_turn(&mut self) {
        if let Some(starved) = self.starved.take() {
            starved.used();
        }
    }

    /// The receive this stream has in the kernel (or waiting for readiness).
    fn in_flight(&self) -> Option<OpId> {
        match &self.receiver {
            Receiver::Multishot(m) => m.armed_id(),
            Receiver::Single { op, .. } => match &**op {
                OneShot::InFlight(op) => op.in_flight_id(),
                OneShot::Spent => None,
            },
            _ => None,
        }
    }

    /// Forgets the receive in flight without orphaning it: someone else did.
    fn disown(&mut self) {
        self.hold = None;
        match &mut self.receiver {
            Receiver::Multishot(m) => m.disown(),
            Receiver::Single { op, .. } => {
                if let OneShot::InFlight(op) = std::mem::replace(&mut **op, OneShot::Spent) {
                    op.disown();
                }
            }
            Receiver::Unset => {}
        }
    }

    fn group(&mut self) -> io::Result<(BufGroup, Rc<Unclaimed>)> {
        if let Some((g, u)) = self.receiver.parts() {
            return Ok((g.clone(), u.clone()));
        }
        let core = &self.socket.core;
        let group = core.recv_group()?;
        let has_multishot = core.supports(Capability::MultishotRecv);
        let unclaimed = self.socket.unclaimed();
        self.receiver = if !self.single_only && has_multishot {
            let def = RecvMulti {
                fd: self.socket.fd(),
                group: group.clone(),
                unclaimed: unclaimed.clone(),
            };
            Receiver::Multishot(Multishot::new(core.clone(), def))
        } else {
            Receiver::Single {
                group: group.clone(),
                unclaimed: unclaimed.clone(),
                op: Box::new(OneShot::Spent),
            }
        };
        Ok((group, unclaimed))
    }

    /// The receive's next CQE, starting (or arming) it first if none is in flight. The
    /// one-shot receive in flight is kept in `self` while pending, so a dropped `RecvNext`
    /// does not cancel a receive that may hold data.
    fn poll_receive(
        &mut self,
        group: &BufGroup,
        unclaimed: &Rc<Unclaimed>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<Cqe>> {
        match &mut self.receiver {
            Receiver::Multishot(multishot) => {
                if !multishot.is_armed() {
                    self.epoch = group.returns();
                }
                multishot.poll_next(cx)
            }
            Receiver::Single { op: boxed, .. } => {
                if let OneShot::Spent = **boxed {
                    let def = RecvSelect {
                        fd: self.socket.fd(),
                        group: group.clone(),
                        unclaimed: unclaimed.clone(),
                    };
                    // Over `Spent`, which owns nothing: forgotten, not dropped (the enum's
                    // destructor is out of line).
                    let spent = std::mem::replace(
                        &mut **boxed,
                        OneShot::InFlight(Op::new(self.socket.core.clone(), def)),
                    );
                    std::mem::forget(spent);
                }
                let OneShot::InFlight(op) = &mut **boxed else {
                    unreachable!("made just above");
                };
                if op.in_flight_id().is_none() {
                    // Its syscall (if any) is tried in this poll: returns from now on
                    // are returns after it. (One in the kernel keeps its start's.)
                    self.epoch = group.returns();
                }
                let cqe = ready!(op.poll_kept(cx));
                if op.is_done() {
                    // Ended without running (refused): dropped in place, its box kept.
                    **boxed = OneShot::Spent;
                }
                Poll::Ready(Ok(cqe))
            }
            Receiver::Unset => unreachable!("`group` chose the way before any receive"),
        }
    }
}

impl Drop for RecvStream<'_> {
    /// The one orphan path, with the turn: a receive in flight is orphaned with the
    /// socket's receive turn, which passes on at its final completion, after what it still
    /// got is queued for the socket's next receive.
    fn drop(&mut self) {
        self.let_hold_go();
    }
}

/// A receive starved of buffers, and its waker with the socket's waiters (for bytes queued
/// meanwhile), taken out when it is dropped.
struct Starved {
    stage: Stage,
    waiter: Option<(Rc<Unclaimed>, NonZeroU64)>,
}

/// Waiting for a buffer to come back, then holding the return's turn (a woken turn dropped
/// unused wakes the next starved receive).
enum Stage {
    Waiting(ReturnWait),
    Woken(ReturnTurn),
    Used,
}

impl Starved {
    /// The retry took a buffer, or found the returned one gone: nobody else is owed a wake.
    fn used(mut self) {
        if let Stage::Woken(turn) = std::mem::replace(&mut self.stage, Stage::Used) {
            turn.used();
        }
    }
}

impl Drop for Starved {
    fn drop(&mut self) {
        if let Some((unclaimed, number)) = self.waiter.take() {
            unclaimed.stop_waiting(number.get());
        }
    }
}

/// The future [`RecvStream::next`] returns. It holds only a borrow of the stream, where
/// the receive in flight lives: dropping it cancels nothing and loses no data.
#[must_use = "futures do nothing unless awaited"]
pub struct RecvNext<'s, 'a> {
    stream: &'s mut RecvStream<'a>,
}

impl Future for RecvNext<'_, '_> {
    type Output = Option<io::Result<PooledBuf>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.stream.poll_next(cx)
    }
}

impl Drop for RecvNext<'_, '_> {
    /// Nobody awaits the stream any more: another receive of the socket may take the turn
    /// (its data then comes back through the socket's queue).
    fn drop(&mut self) {
        if let (Some(number), Some((_, unclaimed))) =
            (self.stream.hold, self.stream.receiver.parts())
        {
            unclaimed.stream_awaited(number, false);
        }
        self.stream.leave_starved();
        // Its place in line for the turn too: kept, the turn would pass to a stream nobody
        // polls, and a read queued behind it would wait for ever.
        self.stream.ticket = None;
    }
}
