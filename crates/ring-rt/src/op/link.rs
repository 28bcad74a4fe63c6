//! Linked ops (`IOSQE_IO_LINK`, 5.3+) and link timeouts (`LINK_TIMEOUT`, 5.5+).
//!
//! A chain runs its ops in order, each only if the one before succeeded; the rest complete
//! with `ECANCELED`, as the kernel does. On io_uring the chain is one contiguous group of
//! SQEs in one submission; the epoll backend runs the same ops one after another.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use io_uring::{opcode, squeue, types};
use ring_core::cqe::Cqe;
use ring_core::lifecycle::Orphan;
use ring_core::user_data::OpId;

use super::{Emulation, Op, OpDef};
use crate::backend::BackendKind;
use crate::runtime::Core;

type Boxed<T> = Pin<Box<dyn Future<Output = T>>>;

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
    fn sqes(&mut self, out: &mut Vec<squeue::Entry>);
    #[doc(hidden)]
    fn finish(self, cqes: &mut std::vec::IntoIter<Vec<Cqe>>) -> Self::Output;
    #[doc(hidden)]
    fn orphans(self, out: &mut Vec<Box<dyn Orphan>>);
    #[doc(hidden)]
    fn run_in_order(self, core: Rc<Core>, failed: bool) -> Boxed<(Self::Output, bool)>;
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

impl<T: OpDef> OpDef for Raw<T> {
    type Output = (T, Cqe);
    fn sqe(&mut self) -> squeue::Entry {
        self.0.sqe()
    }
    fn emulate(&mut self) -> Emulation {
        self.0.emulate()
    }
    fn try_syscall(&mut self) -> Cqe {
        self.0.try_syscall()
    }
    fn try_inline(&mut self) -> Option<Cqe> {
        self.0.try_inline()
    }
    fn on_more(&mut self, cqe: Cqe) {
        self.0.on_more(cqe)
    }
    fn complete(self, cqe: Cqe) -> (T, Cqe) {
        (self.0, cqe)
    }
    fn into_orphan(self) -> Box<dyn Orphan> {
        self.0.into_orphan()
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

    fn sqes(&mut self, out: &mut Vec<squeue::Entry>) {
        out.push(self.0.sqe());
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

    fn run_in_order(self, core: Rc<Core>, failed: bool) -> Boxed<(T::Output, bool)> {
        Box::pin(async move {
            if failed {
                return (self.0.complete(cancelled()), true);
            }
            let (op, cqe) = Op::new(core, Raw(self.0)).await;
            let failed = cqe.res < 0;
            (op.complete(cqe), failed)
        })
    }
}

impl<A: Chain, B: Chain> Chain for (A, B) {
    type Output = (A::Output, B::Output);

    fn count(&self) -> usize {
        self.0.count() + self.1.count()
    }

    fn sqes(&mut self, out: &mut Vec<squeue::Entry>) {
        self.0.sqes(out);
        self.1.sqes(out);
    }

    fn finish(self, cqes: &mut std::vec::IntoIter<Vec<Cqe>>) -> Self::Output {
        let a = self.0.finish(cqes);
        (a, self.1.finish(cqes))
    }

    fn orphans(self, out: &mut Vec<Box<dyn Orphan>>) {
        self.0.orphans(out);
        self.1.orphans(out);
    }

    fn run_in_order(self, core: Rc<Core>, failed: bool) -> Boxed<(Self::Output, bool)> {
        Box::pin(async move {
            let (a, failed) = self.0.run_in_order(core.clone(), failed).await;
            let (b, failed) = self.1.run_in_order(core, failed).await;
            ((a, b), failed)
        })
    }
}

enum LinkState<C: Chain> {
    Unsubmitted(C),
    /// io_uring: one id per op, their CQEs as they arrive, and which have ended.
    Uring {
        chain: Option<C>,
        ids: Vec<OpId>,
        cqes: Vec<Vec<Cqe>>,
        done: Vec<bool>,
    },
    /// epoll: the ops running one after another.
    InOrder(Boxed<(C::Output, bool)>),
    Done,
}

/// A linked chain of ops: await it for every op's output. Built with [`Pending::link`];
/// borrows the handles (files, sockets) its ops use, like the ops themselves.
///
/// On io_uring the chain is submitted at once (`IOSQE_IO_LINK`) and the kernel starts each
/// op when the one before succeeds; on epoll the same ops run one after another. Either
/// way, an op after a failed one completes with `ECANCELED`. Dropping the chain in flight
/// cancels what is still running.
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
pub struct Link<'a, C: Chain> {
    core: Rc<Core>,
    state: LinkState<C>,
    _owners: PhantomData<&'a ()>,
}

impl<'a, C: Chain> Link<'a, C> {
    fn new(core: Rc<Core>, chain: C) -> Link<'a, C> {
        Link {
            core,
            state: LinkState::Unsubmitted(chain),
            _owners: PhantomData,
        }
    }

    /// Appends `next`, which runs only if every op so far succeeded.
    ///
    /// # Panics
    /// If this chain was already polled.
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
    pub fn link<'b, U: OpDef>(mut self, next: Pending<'b, U>) -> Link<'b, (C, Single<U>)>
    where
        'a: 'b,
    {
        let LinkState::Unsubmitted(chain) = std::mem::replace(&mut self.state, LinkState::Done)
        else {
            panic!("ops can be linked only before the chain is first polled")
        };
        Link::new(self.core.clone(), (chain, Single(next.op.into_def())))
    }

    fn start(&mut self, mut chain: C) {
        if self.core.choice.kind == BackendKind::Epoll {
            self.state = LinkState::InOrder(chain.run_in_order(self.core.clone(), false));
            return;
        }
        let mut sqes = Vec::with_capacity(chain.count());
        chain.sqes(&mut sqes);
        let n = sqes.len();
        match self.core.backend.borrow_mut().submit_chain(sqes) {
            Ok(ids) => {
                self.state = LinkState::Uring {
                    chain: Some(chain),
                    ids,
                    cqes: vec![Vec::new(); n],
                    done: vec![false; n],
                };
            }
            Err(err) => {
                let failed = vec![vec![super::error_cqe(&err)]; n];
                self.state = LinkState::InOrder(Box::pin(std::future::ready((
                    chain.finish(&mut failed.into_iter()),
                    true,
                ))));
            }
        }
    }

    fn poll_uring(&mut self, cx: &mut Context<'_>) -> Poll<C::Output> {
        let LinkState::Uring {
            chain,
            ids,
            cqes,
            done,
        } = &mut self.state
        else {
            unreachable!("poll_uring is only called in Uring")
        };
        let mut backend = self.core.backend.borrow_mut();
        for i in 0..ids.len() {
            while !done[i] {
                match backend.poll(ids[i], cx.waker()) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(res) => {
                        let cqe = res.unwrap_or_else(|e| super::error_cqe(&e));
                        done[i] = !cqe.is_more();
                        cqes[i].push(cqe);
                    }
                }
            }
        }
        drop(backend);
        let chain = chain.take().expect("the chain is finished once");
        let cqes = std::mem::take(cqes);
        self.state = LinkState::Done;
        Poll::Ready(chain.finish(&mut cqes.into_iter()))
    }
}

impl<C: Chain> Future for Link<'_, C> {
    type Output = C::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<C::Output> {
        let this = &mut *self;
        if let LinkState::Unsubmitted(_) = this.state {
            let LinkState::Unsubmitted(chain) = std::mem::replace(&mut this.state, LinkState::Done)
            else {
                unreachable!("checked just above")
            };
            this.start(chain);
        }
        match &mut this.state {
            LinkState::Uring { .. } => this.poll_uring(cx),
            LinkState::InOrder(fut) => {
                let (out, _) = std::task::ready!(fut.as_mut().poll(cx));
                this.state = LinkState::Done;
                Poll::Ready(out)
            }
            LinkState::Unsubmitted(_) | LinkState::Done => {
                panic!("ring-rt link polled after it completed")
            }
        }
    }
}

impl<C: Chain> Drop for Link<'_, C> {
    /// Ops still in the kernel become orphans; ops that already ended have their CQEs
    /// reaped (a late fd closed, a buffer returned) before their memory is freed.
    fn drop(&mut self) {
        let LinkState::Uring {
            chain: Some(chain),
            ids,
            cqes,
            done,
        } = std::mem::replace(&mut self.state, LinkState::Done)
        else {
            return;
        };
        let mut orphans = Vec::with_capacity(ids.len());
        chain.orphans(&mut orphans);
        let Ok(mut backend) = self.core.backend.try_borrow_mut() else {
            std::mem::forget(orphans);
            return;
        };
        for (i, mut orphan) in orphans.into_iter().enumerate() {
            if done[i] {
                cqes[i].iter().for_each(|cqe| orphan.reap(cqe));
            } else {
                backend.orphan(ids[i], orphan);
            }
        }
    }
}

/// The `LINK_TIMEOUT` SQE that bounds the op linked before it.
struct LinkTimeout {
    ts: Box<types::Timespec>,
}

impl OpDef for LinkTimeout {
    type Output = Cqe;
    fn sqe(&mut self) -> squeue::Entry {
        opcode::LinkTimeout::new(&*self.ts).build()
    }
    fn emulate(&mut self) -> Emulation {
        Emulation::Blocking(Box::new(|| -libc::EOPNOTSUPP))
    }
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
pub struct Timed<'a, T: OpDef> {
    inner: TimedInner<'a, T>,
}

enum TimedInner<'a, T: OpDef> {
    Uring(Link<'a, (Single<Raw<T>>, Single<LinkTimeout>)>),
    Epoll(Op<T>, crate::time::Sleep),
}

impl<T: OpDef> Future for Timed<'_, T> {
    type Output = T::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T::Output> {
        match &mut self.inner {
            TimedInner::Uring(link) => {
                let ((op, cqe), timeout) = std::task::ready!(Pin::new(link).poll(cx));
                // The kernel cancels the op when the timer fires; say why.
                let timed_out = timeout.res == -libc::ETIME && cqe.res == -libc::ECANCELED;
                let cqe = if timed_out {
                    Cqe::new(cqe.user_data, -libc::ETIMEDOUT, cqe.flags)
                } else {
                    cqe
                };
                Poll::Ready(op.complete(cqe))
            }
            TimedInner::Epoll(op, sleep) => {
                if let Poll::Ready(out) = Pin::new(&mut *op).poll(cx) {
                    return Poll::Ready(out);
                }
                if Pin::new(sleep).poll(cx).is_pending() {
                    return Poll::Pending;
                }
                // Expired: an op waiting for readiness stops now; a blocking syscall already
                // running on the pool cannot be interrupted and is awaited.
                match op.take_waiting() {
                    Some(def) => Poll::Ready(def.complete(Cqe::new(0, -libc::ETIMEDOUT, 0))),
                    None => Pin::new(op).poll(cx),
                }
            }
        }
    }
}

/// One op, not yet submitted, borrowing the handle it works on: await it, or first
/// [`link`](Pending::link) ops after it, or bound it with a [`timeout`](Pending::timeout).
/// Returned by the ops that can be linked: `read`/`write` on streams, `read_at`,
/// `write_at`, `sync_all` and `sync_data` on files. Like any op it is submitted on its
/// first poll, so creating one and dropping it unpolled costs nothing.
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
pub struct Pending<'a, T: OpDef> {
    op: Op<T>,
    _owner: PhantomData<&'a ()>,
}

impl<'a, T: OpDef> Pending<'a, T> {
    pub(crate) fn new(core: Rc<Core>, def: T) -> Pending<'a, T> {
        Pending {
            op: Op::new(core, def),
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
        let core = self.op.core.clone();
        Link::new(
            core,
            (Single(self.op.into_def()), Single(next.op.into_def())),
        )
    }

    /// Bounds this op by `timeout`: past it the op is cancelled and completes with
    /// `TimedOut` (`ETIMEDOUT`), handing its buffers back as usual. On io_uring this is a
    /// kernel `LINK_TIMEOUT`; on epoll a readiness wait is abandoned, while a file op already
    /// running on the blocking pool finishes first.
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
        let core = self.op.core.clone();
        if core.choice.kind == BackendKind::Epoll {
            return Timed {
                inner: TimedInner::Epoll(self.op, crate::time::sleep(timeout)),
            };
        }
        let ts = types::Timespec::new()
            .sec(timeout.as_secs())
            .nsec(timeout.subsec_nanos());
        let chain = (
            Single(Raw(self.op.into_def())),
            Single(LinkTimeout { ts: Box::new(ts) }),
        );
        Timed {
            inner: TimedInner::Uring(Link::new(core, chain)),
        }
    }
}

impl<T: OpDef> Future for Pending<'_, T> {
    type Output = T::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T::Output> {
        Pin::new(&mut self.op).poll(cx)
    }
}
