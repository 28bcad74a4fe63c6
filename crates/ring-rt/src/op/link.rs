//! Linked ops (`IOSQE_IO_LINK`, 5.3+) and op timeouts (`LINK_TIMEOUT`, 5.5+).
//!
//! A chain runs its ops in order, each only if the one before succeeded; the rest complete
//! with `ECANCELED`, as the kernel does. Where the backend can link them (io_uring, ops
//! that have SQEs) the chain is one contiguous group of SQEs in one submission; elsewhere
//! (epoll, or an op that must first collect bytes a dropped read left) the same ops run one
//! after another.
//!
//! [`Pending`] and [`Link`] are builders: they become futures only by being awaited
//! (`IntoFuture`), so an op can be linked or given a timeout only before it has started.
//! Linking an op that is already in flight, which once freed its buffer under the kernel,
//! cannot be written.

use std::future::{Future, IntoFuture};
use std::io;
use std::marker::PhantomData;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use io_uring::{opcode, squeue, types};
use ring_core::cqe::Cqe;
use ring_core::lifecycle::{Deferred, Orphan};
use ring_core::user_data::OpId;

use super::ChainTurns;
use super::{error_cqe, Emulation, Op, OpDef, Operation};
use crate::worker::{deadline_after, Core, TimerEntry, FOREVER};

/// Ops that can run as one linked chain: a single op, or a chain followed by an op.
///
/// Implemented by ring-rt's chain types only; it shows in signatures as
/// `Link<'_, (Single<A>, Single<B>)>`, and its `Output` nests as the chain was built:
/// `((a, b), c)` for `a.link(b).link(c)`.
///
/// # Examples
///
/// ```
/// use ring_rt::fs::File;
///
/// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
/// # ring_rt::Runtime::new()?.block_on(async {
/// let file = File::create(&path).await?;
/// let chain = file
///     .write_at(&b"abc"[..], 0)
///     .link(file.write_at(&b"def"[..], 3))
///     .link(file.sync_all());
/// let (((first, _), (second, _)), synced) = chain.await;
/// assert_eq!((first?, second?), (3, 3));
/// synced?;
/// # std::fs::remove_file(&path)?;
/// # std::io::Result::Ok(()) })?;
/// # std::io::Result::Ok(())
/// ```
pub trait Chain: Unpin + 'static {
    /// What awaiting the chain gives: one output per op, nested as the chain was built.
    type Output;
    #[doc(hidden)]
    fn count(&self) -> usize;
    #[doc(hidden)]
    fn ops<'s>(&'s mut self, out: &mut Vec<&'s mut dyn Operation>);
    #[doc(hidden)]
    fn needs_prepare(&self) -> bool;
    /// Whether the chain's first op would be served without a start (see
    /// `OpDef::is_served_at_once`): such a chain runs op by op where it cannot start.
    #[doc(hidden)]
    fn is_served_at_once(&self) -> bool;
    #[doc(hidden)]
    fn claim(&mut self, turns: &ChainTurns);
    #[doc(hidden)]
    fn finish(self, cqes: &mut std::vec::IntoIter<Vec<Cqe>>) -> Self::Output;
    #[doc(hidden)]
    fn orphans(self, out: &mut Vec<Box<dyn Orphan>>);
    /// What running the chain op by op gives before it is turned into the output: each
    /// op with its final CQE, which a chain dropped before it ends reaps like an orphan.
    #[doc(hidden)]
    type Ran: Unpin;
    /// The chain running op by op: each op with its final CQE, and whether the chain
    /// broke. A plain future, not an `async` block: polled again after a poll that
    /// panicked (a waker whose clone panics), it goes on where it stopped.
    #[doc(hidden)]
    type InOrder: Future<Output = (Self::Ran, bool)> + Unpin;
    #[doc(hidden)]
    fn run_in_order(self, core: Rc<Core>, failed: bool, turns: Rc<ChainTurns>) -> Self::InOrder;
    #[doc(hidden)]
    fn output(ran: Self::Ran) -> Self::Output;
}

/// One op of a chain (what [`Pending::link`] wraps). It only appears in the type of a
/// [`Link`], e.g. `Link<'_, (Single<A>, Single<B>)>`.
///
/// # Examples
///
/// Naming a two-op chain's type, to store it before awaiting it:
///
/// ```
/// use ring_rt::op::link::{Chain, Link, Single};
///
/// fn run_later<C: Chain>(link: Link<'_, C>) -> Link<'_, C> {
///     link
/// }
///
/// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
/// # ring_rt::Runtime::new()?.block_on(async {
/// let file = ring_rt::fs::File::create(&path).await?;
/// let link = run_later(file.write_at(&b"x"[..], 0).link(file.sync_data()));
/// let ((written, _), synced) = link.await;
/// assert_eq!(written?, 1);
/// synced?;
/// # std::fs::remove_file(&path)?;
/// # std::io::Result::Ok(()) })?;
/// # std::io::Result::Ok(())
/// ```
pub struct Single<T>(T);

/// An op whose completion hands back the op itself with its CQE, unconsumed.
struct Raw<T>(T);

// SAFETY: every method forwards to the wrapped op, which upholds the contract.
unsafe impl<T: OpDef> Operation for Raw<T> {
    fn sqe(&mut self) -> squeue::Entry {
        self.0.sqe()
    }
    fn emulate(&mut self) -> Emulation {
        self.0.emulate()
    }
    fn try_syscall(&mut self) -> Cqe {
        self.0.try_syscall()
    }
    fn leaves_unready(&self, cqe: &Cqe) -> bool {
        self.0.leaves_unready(cqe)
    }
    fn moves_nothing(&self) -> bool {
        self.0.moves_nothing()
    }
    fn try_inline(&mut self) -> Option<Cqe> {
        self.0.try_inline()
    }
    fn opcode(&self) -> Option<u8> {
        self.0.opcode()
    }
    fn is_readiness_only(&self) -> bool {
        self.0.is_readiness_only()
    }
    fn is_wait_only(&self) -> bool {
        self.0.is_wait_only()
    }
    fn breaks_link(&self, cqe: &Cqe) -> bool {
        self.0.breaks_link(cqe)
    }
    fn returns_fd(&self) -> bool {
        self.0.returns_fd()
    }
    fn ends_at_read_shutdown(&self) -> bool {
        self.0.ends_at_read_shutdown()
    }
    fn submits_at_once(&self) -> bool {
        self.0.submits_at_once()
    }
    fn fd(&self) -> Option<std::os::fd::RawFd> {
        self.0.fd()
    }
}

impl<T: OpDef> OpDef for Raw<T> {
    type Output = (T, Cqe);
    fn complete(self, cqe: Cqe) -> (T, Cqe) {
        (self.0, cqe)
    }
    fn on_more(&mut self, cqe: Cqe) {
        self.0.on_more(cqe)
    }
    fn into_orphan(self) -> Box<dyn Orphan> {
        self.0.into_orphan()
    }
    fn poll_prepare(&mut self, cx: &mut Context<'_>) -> Poll<Option<Cqe>> {
        self.0.poll_prepare(cx)
    }
    fn needs_prepare(&self) -> bool {
        self.0.needs_prepare()
    }
    fn is_served_at_once(&self) -> bool {
        self.0.is_served_at_once()
    }
    fn claim(&mut self) {
        self.0.claim();
    }
    fn adopt_turn(&mut self, turns: &ChainTurns) {
        self.0.adopt_turn(turns);
    }
    fn share_turn(&mut self, turns: &ChainTurns) {
        self.0.share_turn(turns);
    }
    fn give_back(self, cqe: &Cqe, deferred: &mut Deferred) {
        self.0.give_back(cqe, deferred);
    }
}

fn cancelled() -> Cqe {
    Cqe::new(0, -libc::ECANCELED, 0)
}

impl<T: OpDef> Chain for Single<T> {
    type Output = T::Output;

    fn count(&self) -> usize {
        1
    }

    fn ops<'s>(&'s mut self, out: &mut Vec<&'s mut dyn Operation>) {
        out.push(&mut self.0);
    }

    fn needs_prepare(&self) -> bool {
        self.0.needs_prepare()
    }

    fn is_served_at_once(&self) -> bool {
        self.0.is_served_at_once()
    }

    fn claim(&mut self, turns: &ChainTurns) {
        self.0.adopt_turn(turns);
        self.0.claim();
        self.0.share_turn(turns);
    }

    fn finish(mut self, cqes: &mut std::vec::IntoIter<Vec<Cqe>>) -> T::Output {
        let mut mine = cqes.next().unwrap_or_default();
        let last = mine.pop().unwrap_or_else(cancelled);
        for more in mine {
            self.0.on_more(more);
        }
        self.0.complete(last)
    }

    fn orphans(self, out: &mut Vec<Box<dyn Orphan>>) {
        out.push(self.0.into_orphan());
    }

    type Ran = Ran<T>;
    type InOrder = SingleInOrder<T>;

    fn run_in_order(self, core: Rc<Core>, failed: bool, turns: Rc<ChainTurns>) -> SingleInOrder<T> {
        SingleInOrder {
            state: SingleState::Unstarted(self.0, failed),
            core,
            turns,
        }
    }

    fn output(mut ran: Ran<T>) -> T::Output {
        let Some(op) = ran.op.take() else {
            unreachable!("a Ran op is taken only here or by its drop")
        };
        op.complete(ran.cqe)
    }
}

/// One op of a chain running op by op (see [`Chain::InOrder`]).
#[doc(hidden)]
pub struct SingleInOrder<T: OpDef> {
    state: SingleState<T>,
    core: Rc<Core>,
    turns: Rc<ChainTurns>,
}

enum SingleState<T: OpDef> {
    /// Not started; `true` if an earlier op broke the chain (it completes as cancelled).
    Unstarted(T, bool),
    Running(Op<Raw<T>>),
    Done,
}

impl<T: OpDef> Future for SingleInOrder<T> {
    type Output = (Ran<T>, bool);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<(Ran<T>, bool)> {
        let this = &mut *self;
        if let SingleState::Unstarted(..) = this.state {
            let SingleState::Unstarted(mut def, failed) =
                std::mem::replace(&mut this.state, SingleState::Done)
            else {
                unreachable!("checked just above")
            };
            if failed {
                return Poll::Ready((Ran::new(def, cancelled(), this.core.clone()), true));
            }
            def.adopt_turn(&this.turns);
            this.state = SingleState::Running(Op::new(this.core.clone(), Raw(def)));
        }
        let SingleState::Running(op) = &mut this.state else {
            panic!("ring-rt link polled after it completed")
        };
        let (mut def, cqe) = std::task::ready!(Pin::new(op).poll(cx));
        this.state = SingleState::Done;
        def.share_turn(&this.turns);
        let failed = def.breaks_link(&cqe);
        Poll::Ready((Ran::new(def, cqe, this.core.clone()), failed))
    }
}

/// An op of a chain run op by op, ended, and its final CQE: kept so that a chain dropped
/// while a later op runs reaps it like an orphan (a read's bytes go back to its socket,
/// an opened fd is closed), as the kernel-linked path does for ops that already ended.
#[doc(hidden)]
pub struct Ran<T: OpDef> {
    op: Option<T>,
    cqe: Cqe,
    core: Rc<Core>,
}

impl<T: OpDef> Ran<T> {
    fn new(op: T, cqe: Cqe, core: Rc<Core>) -> Ran<T> {
        Ran {
            op: Some(op),
            cqe,
            core,
        }
    }
}

impl<T: OpDef> Drop for Ran<T> {
    fn drop(&mut self) {
        let Some(op) = self.op.take() else {
            return;
        };
        let mut deferred = Deferred::default();
        op.give_back(&self.cqe, &mut deferred);
        self.core.defer(deferred);
    }
}

/// Two parts of a chain run op by op. Dropped, the later part goes first: ended receives
/// give their bytes back to the front of their socket's queue, so the last goes back first
/// and the first ends up in front.
#[doc(hidden)]
pub struct RanPair<A, B> {
    // Field order is drop order.
    later: B,
    earlier: A,
}

impl<A: Chain, B: Chain> Chain for (A, B) {
    type Output = (A::Output, B::Output);

    fn count(&self) -> usize {
        self.0.count() + self.1.count()
    }

    fn ops<'s>(&'s mut self, out: &mut Vec<&'s mut dyn Operation>) {
        self.0.ops(out);
        self.1.ops(out);
    }

    fn needs_prepare(&self) -> bool {
        self.0.needs_prepare() || self.1.needs_prepare()
    }

    fn is_served_at_once(&self) -> bool {
        self.0.is_served_at_once()
    }

    fn claim(&mut self, turns: &ChainTurns) {
        self.0.claim(turns);
        self.1.claim(turns);
    }

    fn finish(self, cqes: &mut std::vec::IntoIter<Vec<Cqe>>) -> Self::Output {
        let a = self.0.finish(cqes);
        (a, self.1.finish(cqes))
    }

    fn orphans(self, out: &mut Vec<Box<dyn Orphan>>) {
        self.0.orphans(out);
        self.1.orphans(out);
    }

    type Ran = RanPair<A::Ran, B::Ran>;
    type InOrder = PairInOrder<A, B>;

    fn run_in_order(
        self,
        core: Rc<Core>,
        failed: bool,
        turns: Rc<ChainTurns>,
    ) -> PairInOrder<A, B> {
        let earlier = self.0.run_in_order(core.clone(), failed, turns.clone());
        PairInOrder {
            state: PairState::Earlier {
                earlier,
                later: Some(self.1),
                core,
                turns,
            },
        }
    }

    fn output(ran: Self::Ran) -> Self::Output {
        (A::output(ran.earlier), B::output(ran.later))
    }
}

/// Two parts of a chain running op by op, the earlier first (see [`Chain::InOrder`]).
#[doc(hidden)]
pub struct PairInOrder<A: Chain, B: Chain> {
    state: PairState<A, B>,
}

enum PairState<A: Chain, B: Chain> {
    Earlier {
        earlier: A::InOrder,
        later: Option<B>,
        core: Rc<Core>,
        turns: Rc<ChainTurns>,
    },
    /// Field order is drop order: the later part goes first (see [`RanPair`]), and the
    /// chain's turns and places in line after what its ended receives give back, so the
    /// bytes are back before a receive waiting behind them can go (outside a worker a
    /// wake runs at once).
    Later {
        later: B::InOrder,
        earlier: A::Ran,
        _turns: Rc<ChainTurns>,
    },
    Done,
}

impl<A: Chain, B: Chain> Future for PairInOrder<A, B> {
    type Output = (RanPair<A::Ran, B::Ran>, bool);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        if let PairState::Earlier { earlier, .. } = &mut this.state {
            let (ran, failed) = std::task::ready!(Pin::new(earlier).poll(cx));
            let PairState::Earlier {
                later, core, turns, ..
            } = std::mem::replace(&mut this.state, PairState::Done)
            else {
                unreachable!("checked just above")
            };
            let Some(later) = later else {
                unreachable!("the later part starts once")
            };
            this.state = PairState::Later {
                later: later.run_in_order(core, failed, turns.clone()),
                earlier: ran,
                _turns: turns,
            };
        }
        let PairState::Later { later, .. } = &mut this.state else {
            panic!("ring-rt link polled after it completed")
        };
        let (later, failed) = std::task::ready!(Pin::new(later).poll(cx));
        let PairState::Later { earlier, .. } = std::mem::replace(&mut this.state, PairState::Done)
        else {
            unreachable!("checked just above")
        };
        Poll::Ready((RanPair { later, earlier }, failed))
    }
}

/// What pushing a chain into the kernel gave.
enum Pushed<C: Chain> {
    /// In flight as one linked group.
    InKernel(InKernel<C>),
    /// The backend cannot link it: the chain, to run some other way.
    NotLinkable(C),
    /// The push failed (the op table is full): every op's output, with the error.
    Failed(C::Output),
    /// The backend is busy (a poll from inside a loop turn): try again.
    Busy(C),
}

/// Every op of `chain` completed with `err`, none started.
fn fail_all<C: Chain>(chain: C, err: &io::Error) -> C::Output {
    let failed = vec![vec![error_cqe(err)]; chain.count()];
    chain.finish(&mut failed.into_iter())
}

/// Pushes `chain` as one linked group, where the backend can link every op of it.
fn push_chain<C: Chain>(core: &Rc<Core>, mut chain: C) -> Pushed<C> {
    if core.is_shut_down() {
        return Pushed::NotLinkable(chain);
    }
    // Pushed into a ring nobody turns, it would wait for ever. One whose first op needs no
    // start (a read of bytes queued on its socket) runs op by op, each served or refused
    // (review DJ: a read bounded by `.timeout` was refused with its bytes queued).
    if let Err(err) = core.check_startable() {
        if chain.is_served_at_once() {
            return Pushed::NotLinkable(chain);
        }
        return Pushed::Failed(fail_all(chain, &err));
    }
    if chain.needs_prepare() {
        return Pushed::NotLinkable(chain);
    }
    // The turns live on in the ops that took them; the list is only for the claiming.
    chain.claim(&ChainTurns::default());
    let n = chain.count();
    let pushed = {
        let mut ops = Vec::with_capacity(n);
        chain.ops(&mut ops);
        core.start_chain(&mut ops)
    };
    match pushed {
        Ok(Some(Ok(ids))) => Pushed::InKernel(InKernel {
            core: core.clone(),
            chain: Some(chain),
            ids,
            cqes: vec![Vec::new(); n],
            done: vec![false; n],
        }),
        Ok(Some(Err(err))) => Pushed::Failed(fail_all(chain, &err)),
        Ok(None) => Pushed::NotLinkable(chain),
        Err(_) => Pushed::Busy(chain),
    }
}

/// A chain in the kernel: one id per op, their CQEs as they arrive, and which have ended.
struct InKernel<C: Chain> {
    core: Rc<Core>,
    chain: Option<C>,
    ids: Vec<OpId>,
    cqes: Vec<Vec<Cqe>>,
    done: Vec<bool>,
}

impl<C: Chain> InKernel<C> {
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<C::Output> {
        for i in 0..self.ids.len() {
            while !self.done[i] {
                let id = self.ids[i];
                let polled = self.core.poll_id(id, cx.waker());
                let cqe = match polled {
                    Ok(Poll::Pending) => return Poll::Pending,
                    Ok(Poll::Ready(res)) => res.unwrap_or_else(|e| error_cqe(&e)),
                    Err(_) => {
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                };
                self.done[i] = !cqe.is_more();
                self.cqes[i].push(cqe);
            }
        }
        let chain = self.chain.take().expect("a chain finishes once");
        let cqes = std::mem::take(&mut self.cqes);
        Poll::Ready(chain.finish(&mut cqes.into_iter()))
    }
}

impl<C: Chain> Drop for InKernel<C> {
    /// Ops still in the kernel become orphans (the one orphan path); ops that already
    /// ended have their CQEs reaped (a late fd closed, a buffer returned) before their
    /// memory is freed.
    fn drop(&mut self) {
        let Some(chain) = self.chain.take() else {
            return;
        };
        let mut orphans = Vec::with_capacity(self.ids.len());
        chain.orphans(&mut orphans);
        let mut deferred = Deferred::default();
        for (i, mut orphan) in orphans.into_iter().enumerate() {
            if self.done[i] {
                self.cqes[i]
                    .iter()
                    .for_each(|cqe| orphan.reap(cqe, &mut deferred));
                deferred.drop_later(orphan);
            } else {
                self.core.orphan(self.ids[i], orphan);
            }
        }
        self.core.defer(deferred);
    }
}

/// A linked chain of ops, built with [`Pending::link`]: await it for every op's output.
/// It borrows the handles (files, sockets) its ops use, like the ops themselves.
///
/// On io_uring the chain is submitted at once (`IOSQE_IO_LINK`) and the kernel starts each
/// op when the one before succeeds; on epoll the same ops run one after another. Either
/// way, an op after a failed one completes with `ECANCELED`. A chain that cannot start at
/// all (awaited outside its runtime) fails every op with that error instead. Dropping the
/// chain in flight cancels what is still running. A short transfer ends the chain for a
/// file op (as the kernel's rule is) but not for a socket op: in `a.write(x).link(a.write(y))`
/// a short first send is followed by all of `y`, so `x`'s tail is not on the wire before it.
/// To send both whole and in order, await a `write_all` of each.
///
/// A chain's receives of one socket get consecutive bytes: from the moment the chain first
/// receives from a socket until it ends, a receive of that socket asked for later waits
/// for the chain, also while the chain's later ops wait on other sockets (in the kernel
/// this is the socket's receive turn, run op by op the turn or a place in its line). So a
/// chain must not wait for data that such a receive, or the task awaiting it, would bring
/// about: that waits for ever. Two chains that receive from the same two sockets in
/// opposite orders can wait for each other that way when both run op by op (on epoll, or
/// when a socket's turn was busy as they started).
///
/// # Examples
///
/// ```
/// use ring_rt::fs::File;
///
/// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
/// # ring_rt::Runtime::new()?.block_on(async {
/// std::fs::write(&path, "")?;
/// let file = File::open(&path).await?; // read-only: the write fails
/// let ((written, _), synced) = file.write_at(&b"x"[..], 0).link(file.sync_all()).await;
/// assert_eq!(written.unwrap_err().raw_os_error(), Some(libc::EBADF));
/// assert_eq!(synced.unwrap_err().raw_os_error(), Some(libc::ECANCELED)); // never ran
/// # std::fs::remove_file(&path)?;
/// # std::io::Result::Ok(()) })?;
/// # std::io::Result::Ok(())
/// ```
///
/// A chain is built before it runs: it is not a future itself, so there is no way to poll
/// it and then append to it.
///
/// ```compile_fail,E0277
/// fn poll_it(_: impl std::future::Future) {}
/// # fn f(file: &ring_rt::fs::File) {
/// poll_it(file.write_at(&b"x"[..], 0).link(file.sync_data())); // not a Future
/// # }
/// ```
pub struct Link<'a, C: Chain> {
    core: Rc<Core>,
    chain: C,
    /// Some op belongs to another runtime than the first: the chain fails as a whole
    /// (`InvalidInput`) before anything starts, since one ring cannot run another's ops.
    is_mixed: bool,
    _owners: PhantomData<&'a ()>,
}

impl<'a, C: Chain> Link<'a, C> {
    /// Appends `next`, which runs only if every op so far succeeded.
    ///
    /// # Examples
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let file = ring_rt::fs::File::create(&path).await?;
    /// let ((header, body), synced) = file
    ///     .write_at(&b"head"[..], 0)
    ///     .link(file.write_at(&b"body"[..], 4)) // Pending::link makes the Link
    ///     .link(file.sync_all()) // Link::link appends to it
    ///     .await;
    /// assert_eq!((header.0?, body.0?), (4, 4));
    /// synced?;
    /// # std::fs::remove_file(&path)?;
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn link<'b, U: OpDef>(self, next: Pending<'b, U>) -> Link<'b, (C, Single<U>)>
    where
        'a: 'b,
    {
        Link {
            is_mixed: self.is_mixed || !Rc::ptr_eq(&self.core, &next.core),
            core: self.core,
            chain: (self.chain, Single(next.def)),
            _owners: PhantomData,
        }
    }
}

impl<'a, C: Chain> IntoFuture for Link<'a, C> {
    type Output = C::Output;
    type IntoFuture = LinkFuture<'a, C>;

    fn into_future(self) -> LinkFuture<'a, C> {
        let state = if self.is_mixed {
            LinkState::Mixed(self.chain)
        } else {
            LinkState::Unstarted(self.core, self.chain)
        };
        LinkFuture {
            state,
            _owners: PhantomData,
        }
    }
}

enum LinkState<C: Chain> {
    Unstarted(Rc<Core>, C),
    /// Ops of more than one runtime: fails on first poll, nothing started.
    Mixed(C),
    InKernel(InKernel<C>),
    /// The ops running one after another.
    InOrder(C::InOrder),
    Done,
}

/// A [`Link`] running: what awaiting one polls.
#[must_use = "futures do nothing unless awaited"]
pub struct LinkFuture<'a, C: Chain> {
    state: LinkState<C>,
    _owners: PhantomData<&'a ()>,
}

impl<C: Chain> Future for LinkFuture<'_, C> {
    type Output = C::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<C::Output> {
        let this = &mut *self;
        if let LinkState::Mixed(..) = this.state {
            let LinkState::Mixed(chain) = std::mem::replace(&mut this.state, LinkState::Done)
            else {
                unreachable!("checked just above")
            };
            let err = io::Error::new(
                io::ErrorKind::InvalidInput,
                "a linked chain's ops must belong to one ring-rt runtime",
            );
            return Poll::Ready(fail_all(chain, &err));
        }
        if let LinkState::Unstarted(..) = this.state {
            let LinkState::Unstarted(core, chain) =
                std::mem::replace(&mut this.state, LinkState::Done)
            else {
                unreachable!("checked just above")
            };
            this.state = match push_chain(&core, chain) {
                Pushed::InKernel(running) => LinkState::InKernel(running),
                Pushed::NotLinkable(chain) => {
                    LinkState::InOrder(chain.run_in_order(core, false, Rc::default()))
                }
                Pushed::Failed(out) => return Poll::Ready(out),
                Pushed::Busy(chain) => {
                    cx.waker().wake_by_ref();
                    this.state = LinkState::Unstarted(core, chain);
                    return Poll::Pending;
                }
            };
        }
        let out = match &mut this.state {
            LinkState::InKernel(running) => std::task::ready!(running.poll(cx)),
            LinkState::InOrder(fut) => C::output(std::task::ready!(Pin::new(fut).poll(cx)).0),
            LinkState::Unstarted(..) | LinkState::Mixed(..) | LinkState::Done => {
                panic!("ring-rt link polled after it completed")
            }
        };
        this.state = LinkState::Done;
        Poll::Ready(out)
    }
}

/// The `LINK_TIMEOUT` SQE that bounds the op linked before it.
struct LinkTimeout {
    ts: Box<types::Timespec>,
}

// SAFETY: the SQE points at `ts`, boxed and owned by the op.
unsafe impl Operation for LinkTimeout {
    fn sqe(&mut self) -> squeue::Entry {
        opcode::LinkTimeout::new(&*self.ts).build()
    }
    fn emulate(&mut self) -> Emulation {
        // Only ever pushed in a kernel chain (`push_chain`); never emulated.
        Emulation::Blocking(Box::new(|| -libc::EOPNOTSUPP))
    }
}

impl OpDef for LinkTimeout {
    type Output = Cqe;
    fn complete(self, cqe: Cqe) -> Cqe {
        cqe
    }
}

/// An op bounded by a deadline: see [`Pending::timeout`]. Await it for the op's own output;
/// past the deadline that output is a `TimedOut` error (with the buffers handed back).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// # ring_rt::Runtime::new()?.block_on(async {
/// let (a, b) = ring_rt::net::UnixStream::pair()?;
/// let timed = b.read(vec![0; 16]).timeout(Duration::from_secs(5));
/// a.write_all(&b"in time"[..]).await.0?;
/// let (n, _buf) = timed.await;
/// assert_eq!(n?, 7);
/// # std::io::Result::Ok(()) })?;
/// # std::io::Result::Ok(())
/// ```
#[must_use = "futures do nothing unless awaited"]
pub struct Timed<'a, T: OpDef> {
    state: TimedState<T>,
    _owner: PhantomData<&'a ()>,
}

enum TimedState<T: OpDef> {
    Unstarted(Rc<Core>, T, Duration),
    /// The op and a `LINK_TIMEOUT` linked in the kernel.
    InKernel(InKernel<(Single<Raw<T>>, Single<LinkTimeout>)>),
    /// The op, and a timer of its worker that cancels it.
    Timer {
        op: Op<Raw<T>>,
        timer: TimerEntry,
        deadline: std::time::Instant,
        cancel_sent: bool,
    },
    /// No deadline worth a timer (`Duration::MAX` and the like).
    Plain(Op<T>),
    Done,
}

impl<T: OpDef> Timed<'_, T> {
    /// Starts the op: linked to a kernel timeout where the backend can link it, else with
    /// a timer of its worker.
    fn start(&mut self) -> Option<T::Output> {
        let TimedState::Unstarted(core, def, timeout) =
            std::mem::replace(&mut self.state, TimedState::Done)
        else {
            unreachable!("started once")
        };
        if timeout >= FOREVER {
            self.state = TimedState::Plain(Op::new(core, def));
            return None;
        }
        let ts = types::Timespec::new()
            .sec(timeout.as_secs())
            .nsec(timeout.subsec_nanos());
        let chain = (Single(Raw(def)), Single(LinkTimeout { ts: Box::new(ts) }));
        self.state = match push_chain(&core, chain) {
            Pushed::InKernel(running) => TimedState::InKernel(running),
            Pushed::Failed(((op, cqe), _)) => return Some(op.complete(cqe)),
            Pushed::NotLinkable((Single(Raw(def)), _)) | Pushed::Busy((Single(Raw(def)), _)) => {
                TimedState::Timer {
                    op: Op::new(core.clone(), Raw(def)),
                    timer: TimerEntry::on(core),
                    deadline: deadline_after(timeout),
                    cancel_sent: false,
                }
            }
        };
        None
    }
}

impl<T: OpDef> Future for Timed<'_, T> {
    type Output = T::Output;

    /// With the task's op budget spent (see `executor::coop`) nothing is polled: the op is
    /// tried before its deadline can win (review CB: a read with its bytes queued timed
    /// out untried).
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T::Output> {
        std::task::ready!(crate::worker::poll_budget(cx));
        let this = &mut *self;
        if let TimedState::Unstarted(..) = this.state {
            if let Some(out) = this.start() {
                return Poll::Ready(out);
            }
        }
        match &mut this.state {
            TimedState::InKernel(running) => {
                let ((op, cqe), timeout) = std::task::ready!(running.poll(cx));
                // The kernel cancels the op when the timer fires; say why.
                let timed_out = timeout.res == -libc::ETIME && cqe.res == -libc::ECANCELED;
                Poll::Ready(op.complete(if timed_out { timed_out_cqe(cqe) } else { cqe }))
            }
            TimedState::Timer {
                op,
                timer,
                deadline,
                cancel_sent,
            } => {
                if let Poll::Ready((op, cqe)) = Pin::new(&mut *op).poll(cx) {
                    let timed_out = *cancel_sent && cqe.res == -libc::ECANCELED;
                    return Poll::Ready(op.complete(if timed_out {
                        timed_out_cqe(cqe)
                    } else {
                        cqe
                    }));
                }
                std::task::ready!(timer.poll(*deadline, cx));
                // Expired. An op waiting for epoll's readiness tries once more first: the
                // socket may have been taken as drained by an earlier short transfer with
                // bytes come since the last loop turn (io_uring's kernel tries an op before
                // its linked timeout fires).
                if !*cancel_sent && op.forget_drained() {
                    if let Poll::Ready((op, cqe)) = Pin::new(&mut *op).poll(cx) {
                        return Poll::Ready(op.complete(cqe));
                    }
                }
                // Expired: an op with nothing in flight stops now; one in the kernel (or
                // on the blocking pool) is cancelled and its completion awaited.
                match op.time_out(cancel_sent) {
                    // Timed out with nothing in flight: spends one, as a completion would
                    // (review CG: a loop of zero-bounded reads of an idle socket never
                    // yielded on epoll).
                    Some(Raw(def)) => {
                        crate::executor::coop::spend();
                        Poll::Ready(def.complete(timed_out_cqe(Cqe::new(0, 0, 0))))
                    }
                    None => Pin::new(op).poll(cx).map(|(op, cqe)| {
                        let timed_out = cqe.res == -libc::ECANCELED;
                        op.complete(if timed_out { timed_out_cqe(cqe) } else { cqe })
                    }),
                }
            }
            TimedState::Plain(op) => Pin::new(op).poll(cx),
            TimedState::Unstarted(..) | TimedState::Done => {
                panic!("ring-rt timed op polled after it completed")
            }
        }
    }
}

/// `cqe` with its result replaced by `ETIMEDOUT`.
fn timed_out_cqe(cqe: Cqe) -> Cqe {
    Cqe::new(cqe.user_data, -libc::ETIMEDOUT, cqe.flags)
}

/// One op, not yet started, borrowing the handle it works on: await it, or first
/// [`link`](Pending::link) ops after it, or bound it with a [`timeout`](Pending::timeout).
/// Returned by the ops that can be linked: `read`/`write` on streams, `read_at`,
/// `write_at`, `sync_all` and `sync_data` on files. Like any op it starts when first
/// polled, so creating one and dropping it unawaited costs nothing.
///
/// It is not itself a future: awaiting it (`.await`, or
/// [`IntoFuture::into_future`] for combinators that
/// want a `Future`) turns it into one, [`OpFuture`]. So `link` and `timeout` can only be
/// called before the op started.
///
/// # Examples
///
/// ```
/// use ring_rt::fs::OpenOptions;
///
/// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
/// # ring_rt::Runtime::new()?.block_on(async {
/// let file = OpenOptions::new().read(true).write(true).create(true).open(&path).await?;
/// // write -> fsync -> read as one chain: each runs only if the previous succeeded.
/// let ((written, synced), read) = file
///     .write_at(vec![7u8; 4096], 0)
///     .link(file.sync_data())
///     .link(file.read_at(Vec::with_capacity(4096), 0))
///     .await;
/// written.0?;
/// synced?;
/// assert_eq!(read.0?, 4096);
/// # std::fs::remove_file(&path)?;
/// # std::io::Result::Ok(()) })?;
/// # std::io::Result::Ok(())
/// ```
///
/// A `Pending` cannot be polled, and once it is a future it has no `link` or `timeout`:
/// bounding or linking an op that already started (and whose buffer the kernel may be
/// writing) does not compile.
///
/// ```compile_fail,E0277
/// fn poll_it(_: impl std::future::Future) {}
/// # fn f(a: ring_rt::net::UnixStream) {
/// poll_it(a.read(vec![0u8; 64])); // not a Future until awaited
/// # }
/// ```
///
/// ```compile_fail,E0599
/// use std::future::IntoFuture;
/// # fn f(a: ring_rt::net::UnixStream) {
/// let running = a.read(vec![0u8; 64]).into_future();
/// let _ = running.timeout(std::time::Duration::from_secs(1)); // OpFuture has no timeout
/// # }
/// ```
pub struct Pending<'a, T: OpDef> {
    core: Rc<Core>,
    def: T,
    _owner: PhantomData<&'a ()>,
}

impl<'a, T: OpDef> Pending<'a, T> {
    pub(crate) fn new(core: Rc<Core>, def: T) -> Pending<'a, T> {
        Pending {
            core,
            def,
            _owner: PhantomData,
        }
    }

    /// Links `next` after this op: it runs only if this op succeeds (else it completes with
    /// `ECANCELED`). Await the chain for both outputs.
    ///
    /// # Examples
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let file = ring_rt::fs::File::create(&path).await?;
    /// let ((written, _buf), synced) = file.write_at(&b"data"[..], 0).link(file.sync_data()).await;
    /// assert_eq!(written?, 4);
    /// synced?;
    /// # std::fs::remove_file(&path)?;
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn link<'b, U: OpDef>(self, next: Pending<'b, U>) -> Link<'b, (Single<T>, Single<U>)>
    where
        'a: 'b,
    {
        Link {
            is_mixed: !Rc::ptr_eq(&self.core, &next.core),
            core: self.core,
            chain: (Single(self.def), Single(next.def)),
            _owners: PhantomData,
        }
    }

    /// Bounds this op by `timeout`: past it the op is cancelled and completes with
    /// `TimedOut` (`ETIMEDOUT`), handing its buffers back as usual. On io_uring this is a
    /// kernel `LINK_TIMEOUT`; elsewhere a timer of the worker cancels the op (a file op
    /// already running on epoll's blocking pool cannot be interrupted and finishes first).
    /// `Duration::MAX`, or anything beyond decades, means no timeout. `Duration::ZERO` tries
    /// a socket op once: it completes if it can without waiting (bytes queued, room to
    /// send), else it times out. On epoll a socket op is tried once more as its deadline is
    /// handled, so a worker that comes late to the deadline returns what arrived meanwhile
    /// rather than `TimedOut` (io_uring's kernel timer does not wait for the worker).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::ErrorKind;
    /// use std::time::Duration;
    ///
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let (_a, b) = ring_rt::net::UnixStream::pair()?;
    /// let (res, buf) = b.read(vec![0; 16]).timeout(Duration::from_millis(10)).await;
    /// assert_eq!(res.unwrap_err().kind(), ErrorKind::TimedOut);
    /// assert_eq!(buf.len(), 16); // the buffer is back, to retry with
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn timeout(self, timeout: Duration) -> Timed<'a, T> {
        Timed {
            state: TimedState::Unstarted(self.core, self.def, timeout),
            _owner: PhantomData,
        }
    }
}

impl<T: OpDef> Pending<'_, T> {
    /// The op, unstarted, without the borrow of its owner: for a caller that keeps the
    /// owner alive beside it (see `Socket::read_unbound`).
    pub(crate) fn into_op(self) -> Op<T> {
        Op::new(self.core, self.def)
    }
}

impl<'a, T: OpDef> IntoFuture for Pending<'a, T> {
    type Output = T::Output;
    type IntoFuture = OpFuture<'a, T>;

    fn into_future(self) -> OpFuture<'a, T> {
        OpFuture {
            op: self.into_op(),
            _owner: PhantomData,
        }
    }
}

/// A [`Pending`] op running: what awaiting one polls. Dropping it in flight cancels the
/// op (the runtime keeps its memory until the kernel is done).
#[must_use = "futures do nothing unless awaited"]
pub struct OpFuture<'a, T: OpDef> {
    op: Op<T>,
    _owner: PhantomData<&'a ()>,
}

impl<T: OpDef> Future for OpFuture<'_, T> {
    type Output = T::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T::Output> {
        Pin::new(&mut self.op).poll(cx)
    }
}
