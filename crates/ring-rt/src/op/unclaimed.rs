//! What a dropped receive got stays with its socket, for the next receive: the bytes of a
//! stream read, a datagram and its sender, a connection a dropped accept took.
//!
//! With completion I/O a receive can finish in the kernel after its future was dropped (a
//! `timeout` or a `select` lost the race): the data is then in the op's buffer, and without
//! this it would go with the buffer. Instead the op's orphan moves what it got here, and
//! the socket's next receive takes it first.
//!
//! Receives of one socket take turns: one at a time is in the kernel (its [`RecvTurn`]),
//! the others wait here, and a dropped one keeps the turn until its final completion. So
//! what a dropped receive brings is queued before any later receive starts: nothing is
//! lost, nothing is reordered, and no receive waits in the kernel for data that already
//! sits here. Receives get the turn in the order they asked for it. A
//! [`RecvStream`](crate::net::RecvStream) holds the turn between its `next` calls (its
//! multishot receive stays armed); once nobody awaits it, another receive takes the turn
//! from it, its receive then being orphaned so that what it had goes here. Accepts only
//! use the queue and wait for dropped accepts to finish.
//!
//! Bytes an adapter read ahead go back in front of the queue when it is dropped
//! ([`Unclaimed::unread`]): they are older than anything a receive in the kernel gets. A
//! stream holding the turn then lets it go; a one-shot read holding it is recalled (its op
//! cancelled, or its readiness wait woken), takes them, and queues what it got behind
//! them. A read in a linked chain (in the kernel or run op by op), or bounded by
//! `.timeout()`, is not recalled (cancelling it would end its chain, or report a timeout
//! early): it keeps the order the same way when it completes, but waits for that (review
//! BW's `a07`: for new bytes, with the put-back ones queued).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::num::NonZeroU64;
use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use ring_core::buf_pool::BufGroup;
use ring_core::direct::OwnedSlot;
use ring_core::lifecycle::Deferred;
use ring_core::user_data::OpId;

use socket2::SockAddr;

use crate::pool::PooledBuf;
use crate::waiters::{Waiters, ANONYMOUS};
use crate::worker::Core;

/// One thing a dropped receive got.
pub(crate) enum Item {
    /// Stream bytes, in a pooled buffer or a copy; read out from the front.
    Bytes(PooledBuf),
    /// A datagram, with its sender where it is known.
    Datagram(Vec<u8>, Option<SockAddr>),
    /// An accepted connection, with its peer address where the accept got one.
    Conn(Conn, Option<SockAddr>),
}

/// An accepted connection: an fd, or a direct descriptor in the worker's ring (see
/// `Builder::direct_descriptors`). Either closes its socket when dropped.
#[derive(Debug)]
pub(crate) enum Conn {
    Fd(OwnedFd),
    Direct(OwnedSlot),
}

/// A socket's unclaimed receives and its receive turn, shared by the socket, its receives
/// and their orphans.
#[derive(Default)]
pub(crate) struct Unclaimed {
    /// What dropped receives got and the receives waiting in line: both empty on nearly
    /// every socket, so they live in a box made on first use and freed once both are empty
    /// again (an idle connection carries 8 B for them instead of 80). A `Cell`, reached
    /// through [`with_lines`](Self::with_lines): no borrow flag in every socket.
    lines: Cell<Option<Box<Lines>>>,
    /// Dropped accepts whose final completion has not arrived.
    pending: Cell<u32>,
    /// The waiters not in line (receives in line park their wakers with their places): a
    /// stream holding the turn under its hold's number, a starved stream under a number of
    /// its own, and accepts waiting for dropped accepts (anonymous: all woken together,
    /// soon).
    waiters: RefCell<Waiters>,
    /// How many times the waiters were woken (wrapping): a waiter whose waker's clone made
    /// a wake go out before that waker was parked sees it change (see `wait` and
    /// `wait_in_line`).
    wakes: Cell<u32>,
    /// How many hold the turn: 0 when it is free; else the receives of one linked chain
    /// sharing it, each counted (a live one, a dropped one finishing), or a receive stream
    /// between two `next` calls (one).
    ///
    /// A `u16` keeps an idle connection's `Unclaimed` at 96 B (a `u32` made it 104): a
    /// chain is a tuple of `link` calls in the program's text, so its receives of one
    /// socket do not reach 65,535 (the count saturates there).
    turn_holders: Cell<u16>,
    /// The receive stream holding the turn, which another receive takes it from: the
    /// number of its hold (`None`: no stream holds the turn). The hold's parts are `Cell`s
    /// of their own, the ones read on every chunk plain copies.
    hold: Cell<Option<NonZeroU64>>,
    /// Someone awaits the holding stream's next chunk: the turn stays with it (taking it
    /// would only bounce the turn between two receivers that both wait). An idle stream
    /// gives it up.
    hold_awaited: Cell<bool>,
    /// The receive holding the turn in the kernel: the holding stream's once armed, or a
    /// one-shot receive's whose future awaits it (`None`: nothing known in flight). Bytes
    /// put back in front (an adapter dropped) make a one-shot receive come back for them.
    turn_op: Cell<Option<OpId>>,
    /// The one-shot receive holding the turn is one that comes back for bytes put back in
    /// front of what it waits for (a plain stream read, recalled: see
    /// [`unread`](Self::unread)); until it lets the turn go, the receives in line leave
    /// such bytes to it, also while it is not polled (a read polled once and kept: the
    /// receives asked after it wait for it, as they wait for its turn). Not one in a
    /// linked chain (in the kernel or run op by op) or bounded by `.timeout()`, which is
    /// not recalled: the first in line takes them (review AL).
    recalls: Cell<bool>,
    /// The holding stream's worker and receive group: what orphaning its receive needs.
    hold_owner: Cell<Option<(Rc<Core>, BufGroup)>>,
    /// The last number handed out, to a stream's hold (so a stream can tell its hold was
    /// taken) or to a place in line: one counter for both, as each kind is only compared
    /// with its own.
    numbers: Cell<u64>,
}

/// A socket's queues, boxed in [`Unclaimed`] while either has an entry.
#[derive(Default)]
struct Lines {
    /// What dropped receives got, oldest first.
    items: VecDeque<Item>,
    /// Receives waiting for the turn (or for queued data), first come first served: a
    /// receive stream that keeps re-arming cannot starve a receive that asked before.
    /// Numbered in the order they joined, so sorted by number.
    queue: VecDeque<Place>,
    /// How many items at the front adapters put back: older than anything a receive
    /// holding the turn got, so what a dropped chain gives back goes behind them.
    put_back: usize,
}

/// A receive's place in line, with the waker it left there: only the first in line can go
/// on when the turn passes, so only its waker is woken (waking every one, each polling
/// again to find it is not first, cost n wakes per turn with n receives in line).
struct Place {
    number: u64,
    waker: Option<Waker>,
}

impl Lines {
    /// Where place `number` is in line.
    fn place(&self, number: u64) -> Option<usize> {
        self.queue.binary_search_by_key(&number, |p| p.number).ok()
    }

    fn is_empty(&self) -> bool {
        self.items.is_empty() && self.queue.is_empty()
    }

    /// Takes the first item out (a put-back one first, while there are any).
    fn pop_front(&mut self) -> Option<Item> {
        let item = self.items.pop_front()?;
        self.put_back = self.put_back.saturating_sub(1);
        Some(item)
    }
}

/// A receive's place in its socket's queue; dropping it (the receive got its turn or data,
/// or was dropped while waiting) leaves the queue.
pub(crate) struct TurnTicket {
    unclaimed: Rc<Unclaimed>,
    number: u64,
}

impl Drop for TurnTicket {
    fn drop(&mut self) {
        self.unclaimed.leave_queue(self.number);
    }
}

/// The socket's receive turn: one receive in the kernel at a time. Dropping it (the op
/// completed, or its orphan was dropped after the final completion) hands the turn on,
/// once no other holder of it is left ([`share`](Self::share)).
pub(crate) struct RecvTurn(Option<Rc<Unclaimed>>);

impl RecvTurn {
    /// The turn for one more holder (a later receive of the same linked chain): counted
    /// in the socket, not boxed, as a one-shot read takes a turn per call.
    fn share(&self) -> RecvTurn {
        if let Some(unclaimed) = &self.0 {
            let holders = unclaimed.turn_holders.get();
            unclaimed.turn_holders.set(holders.saturating_add(1));
        }
        RecvTurn(self.0.clone())
    }
}

impl Drop for RecvTurn {
    fn drop(&mut self) {
        if let Some(unclaimed) = self.0.take() {
            unclaimed.drop_turn_holder();
        }
    }
}

/// A receive op's place in its socket's turn order: the turn once it has it (kept by the
/// op, and by its orphan, until the final completion), the ticket while it waits. The
/// turn is shared by the receives of one linked chain on the same socket: it passes on
/// once the last of them lets go.
#[derive(Default)]
pub(crate) struct TurnSlot {
    turn: Option<RecvTurn>,
    ticket: Option<TurnTicket>,
}

/// The receive turns the ops of one linked chain hold, so that a later receive of the
/// chain on the same socket goes on with the turn an earlier one took (waiting for it
/// would wait for the chain itself) and the socket's receives stay in chain order. Also
/// the places in line of a chain's receives served from bytes queued on their socket
/// (they took no turn): the chain's next receive of that socket takes the place over,
/// so no receive that asked in between takes bytes from the middle of the chain's (as
/// none can when the chain runs in the kernel, or holds the turn). A chain keeps both, a
/// turn and a place, until it ends, also while a later op of it waits on another socket:
/// what its ended receives got goes back in front of the socket's queue if the chain is
/// dropped, and a receive that took bytes meanwhile would have taken later bytes first
/// (review BV: "CDAB" for "ABCD" when a chain let its place go as it moved on).
#[doc(hidden)]
#[derive(Default)]
pub struct ChainTurns {
    turns: RefCell<Vec<(Rc<Unclaimed>, RecvTurn)>>,
    places: RefCell<Vec<TurnTicket>>,
}

impl ChainTurns {
    fn find(&self, unclaimed: &Rc<Unclaimed>) -> Option<RecvTurn> {
        self.turns
            .borrow()
            .iter()
            .find(|(u, _)| Rc::ptr_eq(u, unclaimed))
            .map(|(_, turn)| turn.share())
    }

    fn add(&self, unclaimed: &Rc<Unclaimed>, turn: &RecvTurn) {
        let known = self
            .turns
            .borrow()
            .iter()
            .any(|(u, _)| Rc::ptr_eq(u, unclaimed));
        if !known {
            self.turns
                .borrow_mut()
                .push((unclaimed.clone(), turn.share()));
        }
    }

    /// The place in line an earlier receive of the chain left on this socket.
    fn take_place(&self, unclaimed: &Rc<Unclaimed>) -> Option<TurnTicket> {
        let mut places = self.places.borrow_mut();
        let at = places
            .iter()
            .position(|t| Rc::ptr_eq(&t.unclaimed, unclaimed))?;
        Some(places.swap_remove(at))
    }

    /// Keeps a receive's place in line, until the chain ends, for the chain's next
    /// receive of the same socket (one place per socket: that receive takes it over).
    fn keep_place(&self, ticket: TurnTicket) {
        self.places.borrow_mut().push(ticket);
    }
}

impl TurnSlot {
    /// `Ready(true)`: the receive holds the turn and goes to the kernel; `Ready(false)`: data
    /// is queued on the socket, to be taken first (see [`Unclaimed::poll_turn`]); the slot
    /// keeps the place in line (first) until it is dropped or shared.
    pub(crate) fn poll(&mut self, unclaimed: &Rc<Unclaimed>, cx: &mut Context<'_>) -> Poll<bool> {
        if self.turn.is_some() {
            return Poll::Ready(true);
        }
        let turn = std::task::ready!(unclaimed.poll_turn(&mut self.ticket, cx));
        let granted = turn.is_some();
        self.turn = turn;
        Poll::Ready(granted)
    }

    /// Whether [`poll`](Self::poll) would serve the receive from queued data at once
    /// (`Ready(false)`), waiting for nothing.
    pub(crate) fn is_served_at_once(&self, unclaimed: &Unclaimed) -> bool {
        self.turn.is_none() && unclaimed.serves_at_once(self.ticket.as_ref())
    }

    /// Leaves the place in line kept after being served from queued data.
    pub(crate) fn let_place_go(&mut self) {
        self.ticket = None;
    }

    /// Whether the receive holds its socket's turn (it went, or goes, to the kernel).
    pub(crate) fn holds(&self) -> bool {
        self.turn.is_some()
    }

    /// Whether the receive would have to wait before it could go into a kernel-linked chain.
    pub(crate) fn must_wait(&self, unclaimed: &Unclaimed) -> bool {
        self.turn.is_none() && !unclaimed.turn_is_free()
    }

    /// Takes the turn at once, for a receive going into a kernel-linked chain.
    pub(crate) fn claim(&mut self, unclaimed: &Rc<Unclaimed>) {
        if self.turn.is_none() {
            self.turn = unclaimed.try_turn();
        }
    }

    /// Goes on with the turn an earlier op of the same chain holds on this socket, or
    /// from the place in line it left there.
    pub(crate) fn adopt(&mut self, unclaimed: &Rc<Unclaimed>, turns: &ChainTurns) {
        if self.turn.is_none() {
            self.turn = turns.find(unclaimed);
        }
        if self.turn.is_none() && self.ticket.is_none() {
            self.ticket = turns.take_place(unclaimed);
        }
    }

    /// Offers the turn this op holds to the later ops of its chain; an op served from
    /// queued bytes hands them its place in line instead.
    pub(crate) fn share(&mut self, unclaimed: &Rc<Unclaimed>, turns: &ChainTurns) {
        if let Some(turn) = &self.turn {
            turns.add(unclaimed, turn);
        } else if let Some(ticket) = self.ticket.take() {
            turns.keep_place(ticket);
        }
    }
}

impl Unclaimed {
    pub(crate) fn new() -> Rc<Unclaimed> {
        Rc::new(Unclaimed::default())
    }

    /// An accept was dropped in flight: what it still gets comes here, and new accepts
    /// wait for its final completion ([`orphan_done`](Self::orphan_done)).
    pub(crate) fn orphan_started(&self) {
        self.pending.set(self.pending.get() + 1);
    }

    /// A dropped accept's final completion arrived. The accepts that waited for it are
    /// woken through `deferred`: this runs inside the op table (an orphan's release step).
    pub(crate) fn orphan_done(&self, deferred: &mut Deferred) {
        self.pending.set(self.pending.get().saturating_sub(1));
        if self.pending.get() == 0 {
            for waker in self.take_waiters() {
                deferred.wake(waker);
            }
        }
    }

    /// Keeps what a dropped receive got.
    pub(crate) fn push(&self, item: Item) {
        self.add_to_lines(|lines| lines.items.push_back(item));
    }

    /// Gives back what an ended receive of a dropped chain got, ahead of everything
    /// queued: it came first. A chain gives its ended receives back last to first.
    ///
    /// `from_kernel`: the receive held the turn and got its bytes from the kernel, when
    /// nothing could be queued but what adapters put back meanwhile; those are older and
    /// stay in front (review AN: it went in front of them). A receive served from this
    /// queue got the oldest bytes there were, and goes back at the very front (review AO:
    /// putting those behind the put-back ones reordered them). Not kept in one case (review
    /// BW's `a06`, not changed): an adapter that had read ahead from this queue before
    /// the receive was served, and puts its bytes back after, has older bytes than the
    /// receive's, which still go in front of them.
    pub(crate) fn push_front(&self, item: Item, from_kernel: bool) {
        self.add_to_lines(|lines| {
            let at = if from_kernel { lines.put_back } else { 0 };
            lines.items.insert(at.min(lines.items.len()), item);
        });
    }

    /// Runs `f` on the queues, taken out of their cell for it and put back after. `f` runs
    /// no code that is not ours and never reaches this socket again (no drop of an item
    /// under it: a pooled buffer's return wakes), so nothing sees the cell empty meanwhile.
    fn with_lines<R>(&self, f: impl FnOnce(&mut Option<Box<Lines>>) -> R) -> R {
        let mut lines = self.lines.take();
        let out = f(&mut lines);
        self.lines.set(lines);
        out
    }

    fn add_to_lines(&self, add: impl FnOnce(&mut Lines)) {
        self.with_lines(|lines| add(lines.get_or_insert_with(Box::default)));
    }

    /// Runs `take` on the queues if there are any, freeing them once both are empty. What
    /// it takes is returned, never dropped under the borrow (an item's drop may be a
    /// pooled buffer's return, which wakes).
    fn take_from_lines<R>(&self, take: impl FnOnce(&mut Lines) -> Option<R>) -> Option<R> {
        self.with_lines(|slot| {
            let lines = slot.as_mut()?;
            let taken = take(lines);
            if lines.is_empty() {
                // Empty: dropping it drops no item.
                *slot = None;
            }
            taken
        })
    }

    /// True when what dropped receives got (or an adapter's read-ahead) is queued here.
    pub(crate) fn has_items(&self) -> bool {
        self.with_lines(|lines| lines.as_ref().is_some_and(|lines| !lines.items.is_empty()))
    }

    fn first_in_line(&self) -> Option<u64> {
        self.with_lines(|lines| {
            lines
                .as_ref()
                .and_then(|lines| lines.queue.front().map(|p| p.number))
        })
    }

    /// Ready once no dropped accept is still finishing; then the next accept may start
    /// (after taking what is here).
    pub(crate) fn poll_settled(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.pending.get() == 0 {
            return Poll::Ready(());
        }
        self.wait(ANONYMOUS, cx);
        Poll::Pending
    }

    /// True when an accept has something to do before it starts (take what is here, or
    /// wait for a dropped one to finish).
    pub(crate) fn is_busy(&self) -> bool {
        self.pending.get() > 0 || self.has_items()
    }

    /// Why the socket cannot be given up as a plain fd now: bytes, datagrams or connections
    /// a dropped receive got are queued here, or a dropped receive is still in the kernel
    /// (what it gets would come here, after the fd had a new owner).
    pub(crate) fn busy_reason(&self) -> Option<&'static str> {
        if self.has_items() {
            Some("a dropped receive's data is queued on the socket: read it first")
        } else if self.turn_holders.get() > 0 || self.pending.get() > 0 {
            Some("a dropped receive is still finishing: try again after the runtime runs a turn (yield_now)")
        } else {
            None
        }
    }

    /// True when a receive could go to the kernel now: nothing is queued here, no
    /// receive holds the turn, none waits for it.
    pub(crate) fn turn_is_free(&self) -> bool {
        self.turn_holders.get() == 0 && self.with_lines(|lines| lines.is_none())
    }

    /// The turn, if [`turn_is_free`](Self::turn_is_free).
    pub(crate) fn try_turn(self: &Rc<Self>) -> Option<RecvTurn> {
        if !self.turn_is_free() {
            return None;
        }
        Some(self.take_free_turn())
    }

    /// The turn, which is free: its first holder.
    fn take_free_turn(self: &Rc<Self>) -> RecvTurn {
        debug_assert_eq!(self.turn_holders.get(), 0, "the turn is taken");
        self.turn_holders.set(1);
        RecvTurn(Some(self.clone()))
    }

    /// A receive's way in, in the order receives asked (its place kept in `ticket`):
    /// `Ready(None)` when data is queued here and no receive recalled for it holds the turn
    /// (take it: it comes first; `ticket` keeps the place, first in line, until the caller
    /// drops it), `Ready(Some(turn))`
    /// to go to the kernel, `Pending` while it is not this receive's turn (a receive
    /// stream holding the turn is made to give it up).
    pub(crate) fn poll_turn(
        self: &Rc<Self>,
        ticket: &mut Option<TurnTicket>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<RecvTurn>> {
        if ticket.is_none() && self.turn_is_free() {
            // Nobody is in line, nothing is queued: the turn, without a place in line
            // (whose box an idle connection would otherwise keep).
            return Poll::Ready(Some(self.take_free_turn()));
        }
        let number = ticket.get_or_insert_with(|| self.join_queue()).number;
        if self.first_in_line() == Some(number) {
            // Not while a one-shot receive that is recalled for them holds the turn: bytes
            // queued then are what a dropped adapter put back, and that receive asked
            // before this one (review BX: the receive in line took them first).
            if self.has_items() && !(self.one_shot_holds_turn() && self.recalls.get()) {
                return Poll::Ready(None);
            }
            if self.turn_holders.get() == 0 {
                *ticket = None;
                return Poll::Ready(Some(self.take_free_turn()));
            }
        }
        self.wait_in_line(number, cx);
        self.take_from_stream();
        Poll::Pending
    }

    /// Whether [`poll_turn`](Self::poll_turn) would hand queued data to the receive with
    /// `ticket` at once (`Ready(None)`): first in line, or the line empty where it has no
    /// place yet, with data queued that no recalled receive waits for.
    pub(crate) fn serves_at_once(&self, ticket: Option<&TurnTicket>) -> bool {
        let first = self.first_in_line();
        let ours = match ticket {
            Some(ticket) => first == Some(ticket.number),
            None => first.is_none(),
        };
        ours && self.has_items() && !(self.one_shot_holds_turn() && self.recalls.get())
    }

    /// A number not handed out before on this socket (a `u64` does not wrap in practice).
    fn next_number(&self) -> NonZeroU64 {
        let number = NonZeroU64::MIN.saturating_add(self.numbers.get());
        self.numbers.set(number.get());
        number
    }

    fn join_queue(self: &Rc<Self>) -> TurnTicket {
        let number = self.next_number().get();
        self.add_to_lines(|lines| {
            lines.queue.push_back(Place {
                number,
                waker: None,
            })
        });
        TurnTicket {
            unclaimed: self.clone(),
            number,
        }
    }

    fn leave_queue(&self, number: u64) {
        let (was_first, waker) = self
            .take_from_lines(|lines| {
                let at = lines.place(number)?;
                let place = lines.queue.remove(at)?;
                Some((at == 0, place.waker))
            })
            .unwrap_or((false, None));
        // It waits no more (it has its turn or its data, or was dropped).
        drop_later(waker);
        if was_first {
            // The next in line may go now.
            self.wake_all();
        }
    }

    /// Makes the stream holding the turn give it up: its receive in the kernel is
    /// orphaned, what it got (queued or late) comes here, and the turn passes on at its
    /// final completion.
    fn take_from_stream(self: &Rc<Self>) {
        if self.hold.get().is_none() || self.hold_awaited.get() {
            return;
        }
        let (op, owner) = self.clear_hold();
        let turn = RecvTurn(Some(self.clone()));
        match (op, owner) {
            (Some(id), Some((core, group))) => {
                core.orphan(id, crate::op::net::keep_chunks(&group, self, Some(turn)))
            }
            _ => drop(turn),
        }
    }

    /// Ends the stream's hold (the turn stays taken): its receive in flight and its owner.
    /// The waker it left waiting on the hold goes: a stream whose hold ends is polled (it
    /// ended the hold itself), dropped, or not awaited (another receive took the hold).
    fn clear_hold(&self) -> (Option<OpId>, Option<(Rc<Core>, BufGroup)>) {
        if let Some(number) = self.hold.take() {
            self.stop_waiting(number.get());
        }
        self.hold_awaited.set(false);
        (self.turn_op.take(), self.hold_owner.take())
    }

    /// A receive stream keeps `turn` between its `next` calls, until
    /// [`end_stream`](Self::end_stream) or another receive takes it. Returns the number
    /// the stream checks its hold by.
    pub(crate) fn hold_for_stream(
        &self,
        mut turn: RecvTurn,
        core: Rc<Core>,
        group: BufGroup,
    ) -> NonZeroU64 {
        // The count stays: the hold now stands for this holder of the turn.
        turn.0 = None;
        let number = self.next_number();
        self.hold.set(Some(number));
        self.hold_awaited.set(true);
        self.turn_op.set(None);
        // The owner it replaces (none: the turn was free) drops after the cells are set.
        drop(self.hold_owner.replace(Some((core, group))));
        number
    }

    /// Records whether someone awaits the stream's next chunk (see `hold_awaited`). A
    /// stream that stops being awaited while another receive waits gives the turn up now.
    pub(crate) fn stream_awaited(self: &Rc<Self>, number: NonZeroU64, awaited: bool) {
        if self.stream_holds(number) {
            self.hold_awaited.set(awaited);
        }
        if !awaited && self.first_in_line().is_some() {
            self.take_from_stream();
        }
    }

    /// Whether the stream's hold `number` still has the turn.
    pub(crate) fn stream_holds(&self, number: NonZeroU64) -> bool {
        self.hold.get() == Some(number)
    }

    /// Records the receive the stream's hold `number` has in the kernel.
    pub(crate) fn stream_op(&self, number: NonZeroU64, op: Option<OpId>) {
        if self.stream_holds(number) {
            self.turn_op.set(op);
        }
    }

    /// The stream's hold `number` ends: its receive is over (or never started). The turn
    /// passes on.
    pub(crate) fn end_stream(&self, number: NonZeroU64) {
        if self.stream_holds(number) {
            drop(self.clear_hold());
            self.drop_turn_holder();
        }
    }

    /// The stream's hold `number` as a turn of its own (the stream is dropped with its
    /// receive in the kernel: the turn goes with that receive's orphan).
    pub(crate) fn take_stream(self: &Rc<Self>, number: NonZeroU64) -> Option<RecvTurn> {
        if !self.stream_holds(number) {
            return None;
        }
        drop(self.clear_hold());
        Some(RecvTurn(Some(self.clone())))
    }

    /// Puts bytes read ahead but never handed out back in front of the queue (an
    /// adapter dropped with data in its buffer): they are older than anything here.
    ///
    /// Returns `Some` when a one-shot receive holds the turn: it waits in the kernel (or for
    /// readiness) for bytes newer than these, and must come back for them (review AM: it
    /// took the newer bytes first, or waited for ever with these queued). The caller
    /// recalls it: the op in the kernel, if known, is cancelled; an epoll read waiting for
    /// readiness is woken. A receive stream holding the turn is woken here instead, and
    /// lets its turn go.
    #[cfg(any(feature = "tokio-io", feature = "futures-io"))]
    pub(crate) fn unread(&self, bytes: Vec<u8>) -> Option<Option<OpId>> {
        if bytes.is_empty() {
            return None;
        }
        self.add_to_lines(|lines| {
            lines.items.push_front(Item::Bytes(PooledBuf::owned(bytes)));
            lines.put_back += 1;
        });
        self.wake_all();
        self.one_shot_holds_turn().then(|| self.turn_op.take())
    }

    /// A one-shot receive (not a receive stream) holds the turn: a live read, or a dropped
    /// one's orphan.
    fn one_shot_holds_turn(&self) -> bool {
        self.turn_holders.get() > 0 && self.hold.get().is_none()
    }

    /// A one-shot receive holding the turn went to the backend, as op `id` in the kernel
    /// (`None`: an epoll wait for readiness): bytes put back in front of what it gets
    /// recall it (see [`unread`](Self::unread)).
    pub(crate) fn one_shot_started(&self, id: Option<OpId>) {
        if self.one_shot_holds_turn() {
            self.turn_op.set(id);
            self.recalls.set(true);
        }
    }

    /// The one-shot receive op holding the turn in the kernel, to cancel once: `None` when
    /// it is not known or was cancelled already.
    pub(crate) fn take_turn_op(&self) -> Option<OpId> {
        if !self.one_shot_holds_turn() {
            return None;
        }
        self.turn_op.take()
    }

    /// One holder of the turn lets it go; the last hands it on.
    fn drop_turn_holder(&self) {
        let holders = self.turn_holders.get().saturating_sub(1);
        self.turn_holders.set(holders);
        if holders == 0 {
            self.turn_op.set(None);
            self.recalls.set(false);
            self.wake_all();
        }
    }

    /// Waiter `number` waits here too: a receive stream holding the turn (by its hold's
    /// number), woken when bytes are put back in front of what its receive gets; a stream
    /// starved of pool buffers (by a [`waiter_number`](Self::waiter_number)), woken when
    /// what a dropped receive got, or an adapter's read-ahead, is queued here.
    pub(crate) fn wait_as(&self, number: NonZeroU64, cx: &mut Context<'_>) {
        self.wait(number.get(), cx);
    }

    /// How many times the socket's waiters were woken (wrapping): a receive that parks its
    /// waker elsewhere first (its op's readiness or completion) compares it before and
    /// after, as that clone may have made a wake go out before it waited here.
    pub(crate) fn wake_count(&self) -> u32 {
        self.wakes.get()
    }

    /// A number for a waiter of its own (a stream starved of pool buffers), not handed out
    /// before on this socket.
    pub(crate) fn waiter_number(&self) -> NonZeroU64 {
        self.next_number()
    }

    /// Waiter `key` waits no more: the waker it left goes (dropped at the worker's next
    /// safe point).
    pub(crate) fn stop_waiting(&self, key: u64) {
        // Nothing that is not ours runs under this borrow (see `wait`), so it is free; if
        // some path ever reached here under one, the waker would stay until the next wake
        // rather than panic (this runs in drops, during unwinding too).
        let Ok(mut waiters) = self.waiters.try_borrow_mut() else {
            return;
        };
        let left = waiters.remove(key);
        drop(waiters);
        drop_later(left);
    }

    /// Parks the waker of waiter `key`, replacing the one it left before (a waiter polled
    /// with a new waker each time keeps one here, not all). The waker is cloned outside the
    /// borrow: a clone is code that is not ours, and may drop or poll another receive of
    /// this socket (review AK: it panicked with the borrow held, and aborted when the
    /// unwinding dropped a ticket). What the caller checked before waiting may have changed
    /// in that clone (the receive first in line dropped, an adapter's read-ahead put back),
    /// and the wake saying so gone out before this waker was here: then the waiters are
    /// woken again, this one with them (review AL: the receive waited for ever).
    fn wait(&self, key: u64, cx: &mut Context<'_>) {
        if key != ANONYMOUS && self.waiters.borrow().has(key, cx.waker()) {
            return;
        }
        self.park(cx, |waker| self.waiters.borrow_mut().put(key, waker));
    }

    /// Parks a clone of `cx`'s waker with `put`, which returns the waker it replaced (or
    /// the clone, if it kept none) to drop at the next safe point. The clone is made here,
    /// outside every borrow (it is code that is not ours); a wake it made go out before the
    /// waker was parked wakes the waiters again (see [`wait`](Self::wait)).
    fn park(&self, cx: &mut Context<'_>, put: impl FnOnce(Waker) -> Option<Waker>) {
        let wakes = self.wakes.get();
        let waker = cx.waker().clone();
        drop_later(put(waker));
        if self.wakes.get() != wakes {
            self.wake_all();
        }
    }

    /// Parks the waker of the receive in line under `number`, as [`wait`](Self::wait)
    /// does for the other waiters (the same care with its clone), beside its place.
    fn wait_in_line(&self, number: u64, cx: &mut Context<'_>) {
        let parked = self.with_lines(|lines| {
            let lines = lines.as_ref()?;
            let place = &lines.queue[lines.place(number)?];
            Some(
                place
                    .waker
                    .as_ref()
                    .is_some_and(|w| w.will_wake(cx.waker())),
            )
        });
        if parked != Some(false) {
            // Parked already, or not in line (the caller holds its place: never).
            return;
        }
        self.park(cx, |waker| {
            self.with_lines(|lines| match lines.as_mut() {
                Some(lines) => match lines.place(number) {
                    Some(at) => lines.queue[at].waker.replace(waker),
                    None => Some(waker),
                },
                // Not dropped here, under the lines' cell: it goes back to be dropped later.
                None => Some(waker),
            })
        });
    }

    /// Wakes the waiters that may go on: the first in line (takes the turn or the data;
    /// the others in line cannot go before it, and are woken as they come first) and every
    /// waiter not in line (a stream holding the turn, streams waiting for queued data,
    /// accepts). The wakes wait for the worker's next safe point (a waker is code that is
    /// not ours, and this may run inside an op's poll).
    fn wake_all(&self) {
        let waiters = self.take_waiters();
        let first = self.with_lines(|lines| {
            let place = lines.as_mut()?.queue.front_mut()?;
            place.waker.take()
        });
        if !waiters.is_empty() || first.is_some() {
            at_safe_point(|deferred| {
                waiters
                    .into_iter()
                    .chain(first)
                    .for_each(|w| deferred.wake(w))
            });
        }
    }

    /// Takes every waiter out, to be woken, and counts the wake: even with nobody here, a
    /// waiter may be cloning its waker (see `wait`).
    fn take_waiters(&self) -> Waiters {
        self.wakes.set(self.wakes.get().wrapping_add(1));
        self.waiters.take()
    }

    /// Copies up to `len` stream bytes to `dst`; how many (0: none here).
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len` bytes.
    pub(crate) unsafe fn take_bytes(&self, dst: *mut u8, len: usize) -> usize {
        let (n, emptied) = self
            .take_from_lines(|lines| {
                let Some(Item::Bytes(buf)) = lines.items.front_mut() else {
                    return None;
                };
                let n = buf.len().min(len);
                // SAFETY: `buf` holds `buf.len() >= n` initialised bytes; `dst` is writable
                // for `len >= n` bytes by the caller's contract; they cannot overlap (`dst`
                // is the caller's own buffer, `buf` ours).
                unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), dst, n) };
                if n == buf.len() {
                    Some((n, lines.pop_front()))
                } else {
                    buf.consume(n);
                    Some((n, None))
                }
            })
            .unwrap_or((0, None));
        // Dropped out of the borrow: a pooled buffer's return wakes.
        drop(emptied);
        n
    }

    /// The first unclaimed chunk of stream bytes, at most `max` bytes of it (pooled
    /// receives promise chunks no longer than the pool's buffers).
    pub(crate) fn take_chunk(&self, max: usize) -> Option<PooledBuf> {
        self.take_from_lines(|lines| {
            let Some(Item::Bytes(buf)) = lines.items.front_mut() else {
                return None;
            };
            if buf.len() > max {
                let piece = PooledBuf::owned(buf[..max].to_vec());
                buf.consume(max);
                return Some(piece);
            }
            match lines.pop_front() {
                Some(Item::Bytes(buf)) => Some(buf),
                _ => unreachable!("just matched a chunk"),
            }
        })
    }

    /// The first unclaimed datagram.
    pub(crate) fn take_datagram(&self) -> Option<(Vec<u8>, Option<SockAddr>)> {
        self.take_from_lines(|lines| match lines.items.front() {
            Some(Item::Datagram(..)) => match lines.pop_front() {
                Some(Item::Datagram(data, from)) => Some((data, from)),
                _ => unreachable!("just matched a datagram"),
            },
            _ => None,
        })
    }

    /// The first unclaimed connection, with its peer address if known.
    pub(crate) fn take_conn(&self) -> Option<(Conn, Option<SockAddr>)> {
        self.take_from_lines(|lines| match lines.items.front() {
            Some(Item::Conn(..)) => match lines.pop_front() {
                Some(Item::Conn(fd, peer)) => Some((fd, peer)),
                _ => unreachable!("just matched a connection"),
            },
            _ => None,
        })
    }
}

/// Drops a waker the socket's waiters let go at the worker's next safe point: a waker's drop
/// is code that is not ours, and this may run inside an op's poll or a socket's borrow.
fn drop_later(waker: Option<Waker>) {
    if let Some(waker) = waker {
        at_safe_point(|deferred| deferred.drop_waker_later(waker));
    }
}

/// Queues what `work` puts in a `Deferred` (wakes, wakers to drop) for the worker's next
/// safe point; outside a worker (its runtime gone, no loop turn coming) it runs now.
fn at_safe_point(work: impl FnOnce(&mut Deferred)) {
    match Core::current() {
        Some(core) => core.defer_with(work),
        None => {
            let mut deferred = Deferred::default();
            work(&mut deferred);
            deferred.run();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{ChainTurns, TurnSlot, Unclaimed};

    /// The receives of one chain share the turn: it stays taken until the last of them
    /// lets go, and is free after (a count off by one either way hands the turn to a
    /// receive outside the chain too early, or never).
    #[test]
    fn a_shared_turn_is_free_only_after_its_last_holder() {
        let unclaimed = Unclaimed::new();
        let turns = ChainTurns::default();
        let mut first = TurnSlot::default();
        first.claim(&unclaimed);
        assert!(first.holds() && !unclaimed.turn_is_free());
        first.share(&unclaimed, &turns);
        let mut second = TurnSlot::default();
        second.adopt(&unclaimed, &turns);
        let mut third = TurnSlot::default();
        third.adopt(&unclaimed, &turns);
        assert!(second.holds() && third.holds());
        drop(turns);
        drop(first);
        drop(second);
        assert!(
            !unclaimed.turn_is_free(),
            "freed while a receive of the chain holds it"
        );
        drop(third);
        assert!(
            unclaimed.turn_is_free(),
            "still taken after its last holder"
        );
        let mut next = TurnSlot::default();
        next.claim(&unclaimed);
        assert!(next.holds(), "the next receive did not get the free turn");
    }
}
