//! Tasks: the type-erased future in its slot, its waker, and the `JoinHandle` to its output.
//!
//! A task's future lives on its worker thread and may be `!Send`. Its waker (an `Arc<Header>`)
//! is `Send + Sync` as `Waker` requires: waking on the owner thread pushes onto the local run
//! queue; waking from any other thread goes through the worker's mutex-guarded inject queue
//! and unparks its loop.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::Wake;
use std::task::{Context, Poll, Waker};

use super::Shared;

/// Identity of a task slot: slab index plus a generation, so a late wake of a finished
/// task whose slot was reused is recognised and ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TaskKey {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

/// The part of a task other threads may touch: what its waker points at.
pub(crate) struct Header {
    pub(crate) key: TaskKey,
    /// Set while the task sits in a run queue, so a burst of wakes queues it once.
    pub(crate) scheduled: AtomicBool,
    /// Set by `JoinHandle::abort`: the executor drops the future instead of polling it.
    pub(crate) aborted: AtomicBool,
    pub(crate) shared: Arc<Shared>,
}

impl Header {
    /// The header behind `block_on`'s waker: it only raises the main-woken flag.
    pub(crate) fn main(shared: Arc<Shared>) -> Header {
        Header {
            key: super::MAIN_KEY,
            scheduled: AtomicBool::new(false),
            aborted: AtomicBool::new(false),
            shared,
        }
    }
}

impl Wake for Header {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // The main future has no run-queue entry to dedupe: its flag is the schedule.
        if self.key == super::MAIN_KEY || !self.scheduled.swap(true, Ordering::AcqRel) {
            self.shared.schedule(self.key);
        }
    }
}

/// Why a task produced no output. Converts into an `io::Error` (kind `Other`) for `?`.
///
/// # Examples
///
/// ```
/// # std::panic::set_hook(Box::new(|_| {})); // keep the doctest's output quiet
/// # ring_rt::Runtime::new()?.block_on(async {
/// let panicked = ring_rt::spawn(async { panic!("boom") }).await.unwrap_err();
/// assert!(panicked.is_panic() && !panicked.is_cancelled());
/// assert_eq!(panicked.to_string(), "task panicked: boom");
/// let payload = panicked.into_panic().expect("a panic payload");
/// assert_eq!(payload.downcast_ref::<&str>(), Some(&"boom"));
///
/// let task = ring_rt::spawn(std::future::pending::<()>());
/// task.abort();
/// let cancelled = task.await.unwrap_err();
/// assert!(cancelled.is_cancelled());
/// assert!(cancelled.into_panic().is_none());
/// # std::io::Result::Ok(()) })?;
/// # std::io::Result::Ok(())
/// ```
pub enum JoinError {
    /// The task panicked; the payload is what it panicked with.
    Panic(Box<dyn Any + Send + 'static>),
    /// The task was aborted (or its runtime shut down) before it finished.
    Cancelled,
    /// The handle was polled again after it had returned the task's output (a misuse:
    /// the output went to the first poll that was ready).
    AlreadyTaken,
}

impl JoinError {
    /// True if the task panicked (see the [type's example](JoinError)).
    pub fn is_panic(&self) -> bool {
        matches!(self, JoinError::Panic(_))
    }

    /// True if the task was aborted, or its runtime shut down first (see the
    /// [type's example](JoinError)).
    pub fn is_cancelled(&self) -> bool {
        matches!(self, JoinError::Cancelled)
    }

    /// The panic payload, if the task panicked, e.g. to resume the panic with
    /// [`std::panic::resume_unwind`] (see the [type's example](JoinError)).
    pub fn into_panic(self) -> Option<Box<dyn Any + Send + 'static>> {
        match self {
            JoinError::Panic(p) => Some(p),
            JoinError::Cancelled | JoinError::AlreadyTaken => None,
        }
    }

    fn message(&self) -> String {
        match self {
            JoinError::Cancelled => "task was cancelled".into(),
            JoinError::AlreadyTaken => {
                "JoinHandle polled after it returned the task's output".into()
            }
            JoinError::Panic(p) => task_panic_message(&**p),
        }
    }
}

/// What a panic payload says, when it is a string (as `panic!` makes it).
pub(crate) fn panic_text(payload: &(dyn Any + Send)) -> Option<&str> {
    match (
        payload.downcast_ref::<&str>(),
        payload.downcast_ref::<String>(),
    ) {
        (Some(s), _) => Some(s),
        (_, Some(s)) => Some(s),
        _ => None,
    }
}

fn task_panic_message(payload: &(dyn Any + Send)) -> String {
    match panic_text(payload) {
        Some(s) => format!("task panicked: {s}"),
        None => "task panicked".into(),
    }
}

impl fmt::Debug for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

impl fmt::Display for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

impl std::error::Error for JoinError {}

impl From<JoinError> for std::io::Error {
    fn from(e: JoinError) -> std::io::Error {
        std::io::Error::other(e.message())
    }
}

/// Output slot shared by a task and its JoinHandle.
struct JoinState<T> {
    result: Option<Result<T, JoinError>>,
    finished: bool,
    /// The output went to a poll of the handle already.
    taken: bool,
    /// The handle was dropped: an output stored from then on would only be dropped where
    /// the last of the two lets go, maybe the handle's release (see its `Drop`), so the
    /// task drops it itself instead.
    handle_gone: bool,
    waker: Option<Waker>,
}

/// What a task (or a blocking job) and its `JoinHandle` share. The handle may live on
/// another thread than the task (it is `Send` when the output is), so the slot is behind a
/// mutex; nothing but moves happen under it (wakers are cloned before and woken after).
pub(crate) struct JoinInner<T> {
    state: Mutex<JoinState<T>>,
    /// The task's header, once the task exists on its worker: a handle made for a spawn
    /// from another thread exists first.
    header: OnceLock<Arc<Header>>,
    /// `abort` was called; a task made after that is aborted at once.
    abort_requested: AtomicBool,
    /// Cancelled before its task was ever made or its blocking closure started (a spawn a
    /// stopped or stopping worker or a closed pool refused, or one aborted on its way): the
    /// handle's first poll yields.
    cancelled_unrun: AtomicBool,
}

impl<T> JoinInner<T> {
    pub(crate) fn new() -> Arc<JoinInner<T>> {
        Arc::new(JoinInner {
            state: Mutex::new(JoinState {
                result: None,
                finished: false,
                taken: false,
                handle_gone: false,
                waker: None,
            }),
            header: OnceLock::new(),
            abort_requested: AtomicBool::new(false),
            cancelled_unrun: AtomicBool::new(false),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, JoinState<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The task now exists: an abort asked for before is carried out.
    fn attach(&self, header: &Arc<Header>) {
        let _ = self.header.set(header.clone());
        if self.abort_requested.load(Ordering::SeqCst) {
            header.aborted.store(true, Ordering::SeqCst);
            Waker::from(header.clone()).wake();
        }
    }

    /// Whether `abort` was called (a blocking job checks before it starts).
    pub(crate) fn is_abort_requested(&self) -> bool {
        self.abort_requested.load(Ordering::SeqCst)
    }

    /// Cancels a spawn whose task was never made (see `cancelled_unrun`).
    pub(crate) fn cancel_unrun(&self) {
        self.cancelled_unrun.store(true, Ordering::SeqCst);
        self.finish(Err(JoinError::Cancelled));
    }

    /// Stores the result and wakes whoever awaits it.
    pub(crate) fn finish(&self, result: Result<T, JoinError>) {
        if let Some(waker) = self.complete(result) {
            waker.wake();
        }
    }

    /// Stores the result; returns the waker of whoever awaits it, for the caller to wake
    /// once its own bookkeeping is done (the waker is code that is not ours, and may panic).
    pub(crate) fn complete(&self, result: Result<T, JoinError>) -> Option<Waker> {
        let mut state = self.state();
        state.finished = true;
        if state.handle_gone {
            // Nobody will read it: dropped here, quietly (see `handle_gone`).
            drop(state);
            drop_quietly(result);
            return None;
        }
        state.result = Some(result);
        state.waker.take()
    }
}

/// Awaits a spawned task's output. Dropping it detaches the task; an output (or a panic's
/// payload) the task had already left is dropped with it, and a panic of that drop is caught
/// and logged, never raised where the handle was dropped (as with tokio's handle).
///
/// # Examples
///
/// ```
/// # ring_rt::Runtime::new()?.block_on(async {
/// let handle = ring_rt::spawn(async { "output" });
/// assert_eq!(handle.await.unwrap(), "output");
///
/// // Detached: the task still runs.
/// drop(ring_rt::spawn(async { println!("running unobserved") }));
/// ring_rt::yield_now().await;
/// # std::io::Result::Ok(()) })?;
/// # std::io::Result::Ok(())
/// ```
/// It is `Send` and `Sync` when the output is `Send`: a task spawned through a
/// [`Handle`](crate::Handle) can be awaited on any worker or thread.
///
/// A spawn cancelled before its task was made or its blocking closure started (sent to a
/// worker or blocking pool that has stopped, or aborted on its way) yields once when first
/// polled, then gives `Cancelled`: a task that spawns and awaits in a loop then still lets
/// its own worker run.
pub struct JoinHandle<T> {
    inner: Arc<JoinInner<T>>,
    /// A poll of this handle has returned `Pending` (or yielded) already.
    has_waited: bool,
}

impl<T> JoinHandle<T> {
    pub(crate) fn new(inner: Arc<JoinInner<T>>) -> JoinHandle<T> {
        JoinHandle {
            inner,
            has_waited: false,
        }
    }
}

impl<T> JoinHandle<T> {
    /// Cancels the task: its future is dropped at the executor's next chance (which drops
    /// and cancels any I/O it had in flight). Awaiting the handle then gives `Cancelled`,
    /// unless the task had already finished. Called outside `block_on`, the drop (and the
    /// closing of the task's sockets) waits until the runtime next runs or is dropped, as
    /// on tokio's current-thread runtime.
    ///
    /// # Examples
    ///
    /// Aborting a task that waits on a socket cancels its read:
    ///
    /// ```
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let (_a, b) = ring_rt::net::UnixStream::pair()?;
    /// let reader = ring_rt::spawn(async move { b.read(vec![0; 64]).await.1 });
    /// ring_rt::yield_now().await; // let the read start
    /// reader.abort();
    /// assert!(reader.await.unwrap_err().is_cancelled());
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn abort(&self) {
        self.inner.abort_requested.store(true, Ordering::SeqCst);
        if let Some(header) = self.inner.header.get() {
            header.aborted.store(true, Ordering::SeqCst);
            Waker::from(header.clone()).wake();
        }
    }

    /// True once the task has completed, panicked or been aborted.
    ///
    /// # Examples
    ///
    /// ```
    /// # ring_rt::Runtime::new()?.block_on(async {
    /// let task = ring_rt::spawn(async {});
    /// assert!(!task.is_finished()); // spawned, not yet run
    /// ring_rt::yield_now().await;
    /// assert!(task.is_finished());
    /// # std::io::Result::Ok(()) })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn is_finished(&self) -> bool {
        self.inner.state().finished
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = Result<T, JoinError>;

    /// A handle whose task has finished counts against the awaiting task's budget of 128
    /// operations per poll, as an I/O op does: a loop over finished tasks' handles yields
    /// after 128 of them (review CB: 20,000 in one poll before), as tokio's does.
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        std::task::ready!(super::coop::poll_budget_requeued(cx));
        super::coop::spending(self.as_mut().poll_joined(cx))
    }
}

impl<T> JoinHandle<T> {
    fn poll_joined(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T, JoinError>> {
        // Cloned before the lock: a waker's clone is code that is not ours.
        let waker = cx.waker().clone();
        let mut state = self.inner.state();
        let unrun = self.inner.cancelled_unrun.load(Ordering::SeqCst);
        if !self.has_waited && unrun && matches!(state.result, Some(Err(JoinError::Cancelled))) {
            // Cancelled before it ever ran (its worker stopped): the first poll yields.
            // A task spawning onto a stopped worker and awaiting in a loop never yielded
            // otherwise, and its own worker, busy in it, never heard its own stop (the
            // kernel matrix's 5.6 row, under load: 48 million turns in 20 s).
            drop(state);
            self.has_waited = true;
            waker.wake();
            return Poll::Pending;
        }
        if let Some(result) = state.result.take() {
            state.taken = true;
            return Poll::Ready(result);
        }
        if state.taken {
            return Poll::Ready(Err(JoinError::AlreadyTaken));
        }
        if state.finished {
            return Poll::Ready(Err(JoinError::Cancelled));
        }
        let old = state.waker.replace(waker);
        drop(state);
        drop(old);
        self.has_waited = true;
        Poll::Pending
    }
}

impl<T> Drop for JoinHandle<T> {
    /// The output nobody will read (or a panic's payload) is dropped here if the task has
    /// stored it, its own panic caught and logged, as tokio's handle does: a payload that
    /// panics as it drops unwound into whoever dropped the handle (review BE: the accept
    /// loop of `serve_balanced`), and aborted the process when that was already unwinding.
    /// Under the same lock the slot learns the handle is gone, so an output the task
    /// finishes with later is the task's to drop, quietly too: stored, it would be dropped
    /// by whichever of the two let go of the slot last, maybe this handle's release, out in
    /// the open (review BG: a blocking job finishing while its handle was dropped). The
    /// waker the handle was last polled with goes now too, quietly: left in the slot, it
    /// went the same way (review BH).
    fn drop(&mut self) {
        let (result, waker) = {
            let mut state = self.inner.state();
            state.handle_gone = true;
            (state.result.take(), state.waker.take())
        };
        if result.is_some() {
            drop_quietly(result);
        }
        if waker.is_some() {
            drop_quietly(waker);
        }
    }
}

impl<T> fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinHandle")
            .field("finished", &self.is_finished())
            .finish()
    }
}

/// A spawned future, erased to what the executor needs.
pub(crate) trait RawTask {
    /// Polls the future; Ready once it finished (or panicked) and its output is stored,
    /// with the waker of the JoinHandle's awaiter for the caller to wake after its
    /// bookkeeping (a waker that panics must not leave the task's slot behind).
    fn poll_task(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Waker>>;
    /// Records cancellation for the JoinHandle, whose awaiter's waker the caller wakes;
    /// the caller then drops the task.
    fn cancel(self: Pin<&mut Self>) -> Option<Waker>;
}

pin_project_lite::pin_project! {
    /// A spawned future, inline, and the output slot its `JoinHandle` reads: one allocation
    /// per spawn, pinned as a whole (`Pin<Box<dyn RawTask>>`).
    struct Task<F: Future> {
        // `None` once the future finished, panicked or was cancelled: it is dropped in
        // place then, so its in-flight ops become orphans at once.
        #[pin]
        future: Option<F>,
        // `None` once nobody can read the output: the handle was dropped (a detached
        // task, as every connection's task is), so the slot is freed at the next poll
        // rather than kept for the task's whole life.
        state: Option<Arc<JoinInner<F::Output>>>,
    }
}

impl<F: Future> Task<F> {
    /// Lets the output slot go if this task holds the only reference to it. Nobody else
    /// can take a new one then: references come only from clones of existing ones.
    fn release_unread_state(state: &mut Option<Arc<JoinInner<F::Output>>>) {
        if state.as_ref().is_some_and(|s| Arc::strong_count(s) == 1) {
            // It may hold a waker the handle was last polled with: code that is not ours.
            drop_quietly(state.take());
        }
    }

    /// Stores the result for the handle, if one can still read it.
    fn complete(
        state: &Option<Arc<JoinInner<F::Output>>>,
        result: Result<F::Output, JoinError>,
    ) -> Option<Waker> {
        match state {
            Some(state) => state.complete(result),
            None => {
                drop_quietly(result);
                None
            }
        }
    }
}

/// Drops what may run code that is not ours (an output nobody reads, a slot holding a
/// stale waker, a finished task, a job nobody will run) with its panic caught and logged:
/// it must not unwind through the executor.
pub(crate) fn drop_quietly<T>(value: T) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(move || drop(value))) {
        report_drop_panic(payload);
    }
}

impl<F: Future> RawTask for Task<F> {
    fn poll_task(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Waker>> {
        let mut this = self.project();
        Self::release_unread_state(this.state);
        let Some(future) = this.future.as_mut().as_pin_mut() else {
            return Poll::Ready(None);
        };
        let result = match catch_unwind(AssertUnwindSafe(|| future.poll(cx))) {
            Ok(Poll::Pending) => return Poll::Pending,
            Ok(Poll::Ready(output)) => Ok(output),
            Err(payload) => Err(JoinError::Panic(payload)),
        };
        // The output (or the poll's panic) is what the task produced; a panic while
        // dropping the finished future after it has nobody to report to but the log.
        if let Err(payload) = drop_future(this.future) {
            report_drop_panic(payload);
        }
        // An output nobody reads (the handle is gone) is dropped here, after the future.
        Poll::Ready(Self::complete(this.state, result))
    }

    fn cancel(self: Pin<&mut Self>) -> Option<Waker> {
        let this = self.project();
        if this.future.is_none() {
            return None;
        }
        // Drop the future first: its in-flight ops become orphans now. A panic in its
        // destructor is what the task ends with.
        let result = match drop_future(this.future) {
            Ok(()) => Err(JoinError::Cancelled),
            Err(payload) => Err(JoinError::Panic(payload)),
        };
        Self::complete(this.state, result)
    }
}

/// Drops a task's future in place, catching a panic of its destructor: the panic belongs
/// to the task, and must not unwind through the executor (which would leave the loop, and
/// the task's slot, behind).
fn drop_future<F>(future: Pin<&mut Option<F>>) -> Result<(), Box<dyn Any + Send>> {
    let mut future = future;
    catch_unwind(AssertUnwindSafe(|| future.set(None)))
}

/// Logs a panic that nobody else will see, then gets rid of its payload.
pub(crate) fn report_drop_panic(payload: Box<dyn Any + Send>) {
    let message = task_panic_message(&*payload);
    tracing::error!(target: "ring_rt", panic = %message, "a task's destructor panicked after it finished");
    discard_payload(payload);
}

/// Drops a caught panic's payload, whose own destructor is code that is not ours and may
/// panic in turn (with a payload of its own, dropped the same way), never letting that
/// unwind: through the executor with a task out of its slot, or out of a destructor during
/// another unwind, which aborts. A chain longer than `PAYLOAD_DROPS` is leaked. (ring-core
/// keeps the same loop for `Deferred::reap`, privately: a public one there would make the
/// packaged ring-rt need a ring-core release it cannot name yet.)
pub(crate) fn discard_payload(mut payload: Box<dyn Any + Send>) {
    for _ in 0..PAYLOAD_DROPS {
        match catch_unwind(AssertUnwindSafe(move || drop(payload))) {
            Ok(()) => return,
            Err(next) => payload = next,
        }
    }
    std::mem::forget(payload);
}

/// How many payloads, each panicking as it drops, `discard_payload` follows before it
/// leaks the last (a panic's payload is almost always a string; two is already contrived).
const PAYLOAD_DROPS: usize = 8;

/// Builds a task around `future` whose output goes to `state` (its `JoinHandle`'s).
pub(crate) fn new_task<F: Future + 'static>(
    future: F,
    header: &Arc<Header>,
    state: Arc<JoinInner<F::Output>>,
) -> Pin<Box<dyn RawTask>> {
    state.attach(header);
    Box::pin(Task {
        future: Some(future),
        state: Some(state),
    })
}
