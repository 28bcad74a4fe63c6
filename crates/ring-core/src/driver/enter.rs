//! The driver's loop turn: one `io_uring_enter`, then drain every CQE (overflow included).

use std::io;
use std::time::{Duration, Instant};

use io_uring::{opcode, types, EnterFlags};

use super::{Driver, Wait};
use crate::cqe::Cqe;
use crate::metrics::Metrics;
use crate::user_data::Reserved;

/// How often one turn re-enters after EBUSY/EAGAIN before giving the caller back control.
const BUSY_RETRIES_MAX: u32 = 8;
/// How long a shutdown waits for cancelled ops to post their final CQEs (the epoll
/// backend's blocking jobs too): past it their memory is leaked rather than freed.
pub const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

/// A shutdown's drain, for both backends: calls `turn` (one loop turn, answering whether
/// ops still await their final completion) until it says none do or `deadline` passes.
pub fn drain_until(deadline: Instant, mut turn: impl FnMut() -> bool) {
    while Instant::now() < deadline && turn() {}
}

impl Driver {
    /// One loop turn: submit everything pending with one `io_uring_enter`, wait as asked
    /// (not at all if CQEs are already waiting), then dispatch every available CQE.
    /// Returns how many op CQEs were dispatched.
    pub fn turn(&mut self, wait: Wait) -> io::Result<usize> {
        self.prepare_groups();
        self.flush_backlog();
        self.push_queued_closes();
        // SQEs still waiting for room in the SQ (with SQPOLL the kernel's thread takes what
        // is there in its own time) must not wait behind a sleep: the completion it waits
        // for may be one only they would bring (review BF: a read waiting for its write,
        // for ever). This turn submits what fits; the next takes the rest in.
        let wait = if self.is_cq_ready() || !self.scratch.is_empty() || !self.backlog.is_empty() {
            Wait::No
        } else {
            wait
        };
        if self.needs_enter(wait) {
            self.enter(wait)?;
        }
        let dispatched = self.reap_cqes()?;
        // A backlog left over means the SQ filled during this turn: get it in now.
        self.flush_backlog();
        Ok(dispatched)
    }

    /// Submits pending SQEs without waiting (used when a push finds the SQ full). CQEs
    /// are copied out, not dispatched, so the CQ keeps room and no waker runs inside a push.
    pub(super) fn submit_now(&mut self) -> io::Result<()> {
        self.enter(Wait::No)?;
        self.copy_cqes();
        Ok(())
    }

    /// Submits what was pushed (the backlog included), without waiting and without
    /// dispatching: for SQEs pushed while no loop turns, such as the `CLOSE` of a socket
    /// dropped outside the loop, which the peer should see now. The next turn dispatches
    /// what completed. Nothing pushed: no syscall.
    pub fn submit(&mut self) -> io::Result<()> {
        self.flush_backlog();
        self.push_queued_closes();
        if self.ring.submission().is_empty() {
            return Ok(());
        }
        self.submit_now()
    }

    /// Whether a turn that must not wait needs `io_uring_enter` at all (liburing's
    /// `sq_ring_needs_enter` and `cq_ring_needs_flush`). With SQPOLL the kernel thread picks
    /// SQEs up by itself; without it, SQEs need an enter, and with nothing to submit an enter
    /// could only flush an overflow or run pending task work (the completions of
    /// COOP/DEFER_TASKRUN rings), both of which the ring's flags announce when it has
    /// TASKRUN_FLAG (5.19). Without that flag nothing says so: enter every turn.
    fn needs_enter(&mut self, wait: Wait) -> bool {
        if wait != Wait::No {
            return true;
        }
        let (sqpoll, taskrun_flag) = (self.flags.sqpoll, self.flags.taskrun_flag);
        let sq = self.ring.submission();
        let has_news = sq.cq_overflow() || sq.taskrun();
        if sqpoll {
            return sq.need_wakeup() || has_news;
        }
        !sq.is_empty() || !taskrun_flag || has_news
    }

    fn is_cq_ready(&mut self) -> bool {
        !self.ring.completion().is_empty()
    }

    fn enter(&mut self, wait: Wait) -> io::Result<()> {
        let (mut min_complete, mut timeout) = match wait {
            Wait::No => (0, None),
            Wait::For(d) => (1, Some(d)),
            Wait::Forever => (1, None),
        };
        if let Some(d) = timeout.filter(|_| !self.has_ext_arg()) {
            timeout = None;
            if !self.push_wait_timeout(d) {
                min_complete = 0;
            }
        }
        let mut min_wait = None;
        if let (Some(batch), 1) = (self.batch, min_complete) {
            // `set_batch` only stores a batch when the kernel has MIN_TIMEOUT (6.12+), so
            // EXT_ARG (5.11) is there too. A min wait longer than the timeout is cut to it.
            min_complete = batch.want;
            min_wait = Some(timeout.map_or(batch.min_wait, |d| d.min(batch.min_wait)));
        }
        for _ in 0..BUSY_RETRIES_MAX {
            let res = self.enter_counted(min_complete, timeout, min_wait);
            let Err(err) = res else { return Ok(()) };
            match err.raw_os_error() {
                // The wait timed out, or a signal arrived: both normal ends of a wait. The
                // caller's loop comes round again and recomputes its deadline.
                Some(libc::ETIME) | Some(libc::EINTR) => return Ok(()),
                // The kernel could not take SQEs now: its CQ overflow list is backed up
                // (EBUSY) or an allocation failed transiently (EAGAIN). Draining frees CQ
                // space and flushes the overflow; then retry without waiting.
                Some(libc::EBUSY) | Some(libc::EAGAIN) => {
                    self.reap_cqes()?;
                    (min_complete, timeout, min_wait) = (0, None, None);
                }
                // The kernel had to drop overflowed CQEs it could not allocate room for.
                Some(libc::EBADR) => {
                    Metrics::bump(&self.metrics.cqes_lost);
                    return Ok(());
                }
                _ => return Err(err),
            }
        }
        Ok(())
    }

    /// One `io_uring_enter` submitting everything in the SQ, counted: the enter, and the
    /// SQEs the kernel took.
    pub(super) fn enter_counted(
        &mut self,
        min_complete: u32,
        timeout: Option<Duration>,
        min_wait: Option<Duration>,
    ) -> io::Result<usize> {
        let queued = self.ring.submission().len();
        let res = self.enter_raw(queued as u32, min_complete, timeout, min_wait);
        Metrics::bump(&self.metrics.enters);
        let left = self.ring.submission().len();
        Metrics::add(
            &self.metrics.sqes_submitted,
            queued.saturating_sub(left) as u64,
        );
        res
    }

    fn enter_raw(
        &mut self,
        to_submit: u32,
        min_complete: u32,
        timeout: Option<Duration>,
        min_wait: Option<Duration>,
    ) -> io::Result<usize> {
        // GETEVENTS always: it is what runs deferred task work (DEFER_TASKRUN) and flushes
        // overflowed CQEs, and costs nothing when there is none. Hence the crate's raw
        // `Submitter::enter`: its `submit_and_wait`/`submit_with_args` leave GETEVENTS out
        // of a turn that does not wait (unless the SQ flags ask for it) and may skip the
        // syscall under SQPOLL, where `needs_enter` has already decided that one is needed.
        let mut flags = EnterFlags::GETEVENTS;
        if self.flags.sqpoll && self.ring.submission().need_wakeup() {
            flags |= EnterFlags::SQ_WAKEUP;
        }
        if timeout.is_none() && min_wait.is_none() {
            let null = std::ptr::null();
            // SAFETY: no argument pointer (null, size 0), and every SQE in the SQ points only
            // at memory owned by its op until the final CQE (see `try_push`).
            return unsafe {
                self.ring_fd
                    .enter(to_submit, min_complete, flags.bits(), null, 0)
            };
        }
        let ts = timeout.map(timespec);
        let args = match &ts {
            Some(ts) => types::SubmitArgs::new().timespec(ts),
            None => types::SubmitArgs::new(),
        };
        let args = match min_wait {
            Some(d) => args.min_wait_usec(min_wait_usec(d)),
            None => args,
        };
        let flags = flags | EnterFlags::EXT_ARG;
        let arg: *const types::SubmitArgs<'_, '_> = &args;
        let size = std::mem::size_of::<types::SubmitArgs<'_, '_>>();
        // SAFETY: `args` and the `ts` it may point at outlive the call; EXT_ARG tells the
        // kernel the argument is an `io_uring_getevents_arg`, which `SubmitArgs` wraps
        // (repr(transparent)), and `size` is that of `SubmitArgs`, as the crate's own
        // `Submitter::enter` passes it. Every SQE in the SQ points only at memory owned by
        // its op until the final CQE (see `try_push`).
        unsafe {
            self.ring_fd
                .enter(to_submit, min_complete, flags.bits(), arg.cast(), size)
        }
    }

    /// Kernels without `EXT_ARG` (before 5.11) wait with a timeout SQE. `count(1)` makes it
    /// complete as soon as any other CQE arrives, so an early wake leaves nothing armed.
    ///
    /// Returns whether the wait may block. It must not when making room for the timeout in
    /// a full SQ submitted early and copied CQEs out (they wait in `scratch`: blocking now
    /// would sit out the whole timeout with completions in hand), or when there was no
    /// room at all (a wait without its timeout could block past every deadline).
    fn push_wait_timeout(&mut self, d: Duration) -> bool {
        *self.wait_ts = timespec(d);
        let ts: *const types::Timespec = &*self.wait_ts;
        let sqe = opcode::Timeout::new(ts)
            .count(1)
            .build()
            .user_data(Reserved::Timeout.to_user_data());
        // The timeout may go ahead of the backlog: it belongs to no chain, and it times
        // this wait, not an op.
        let group = [sqe];
        if !self.try_push(&group) {
            Metrics::bump(&self.metrics.sq_full);
            if self.submit_now().is_err() || !self.try_push(&group) {
                return false;
            }
        }
        self.scratch.is_empty()
    }

    /// Dispatches every CQE the kernel has, including ones parked on its overflow list.
    pub(super) fn reap_cqes(&mut self) -> io::Result<usize> {
        let mut total = 0;
        loop {
            self.copy_cqes();
            if !self.scratch.is_empty() {
                total += self.dispatch_scratch();
                continue;
            }
            if !self.ring.submission().cq_overflow() {
                return Ok(total);
            }
            // The CQ filled up and the kernel parked CQEs on its overflow list (NODROP,
            // 5.5+). An enter with GETEVENTS moves them into the CQ we just emptied.
            Metrics::bump(&self.metrics.cq_overflows);
            self.flush_overflow()?;
        }
    }

    fn flush_overflow(&mut self) -> io::Result<()> {
        let flags = EnterFlags::GETEVENTS.bits();
        // SAFETY: no argument pointer, nothing submitted: this only asks the kernel to
        // flush overflowed CQEs into the CQ.
        let res = unsafe { self.ring_fd.enter(0, 0, flags, std::ptr::null(), 0) };
        Metrics::bump(&self.metrics.enters);
        match res {
            Ok(_) => Ok(()),
            Err(err)
                if matches!(
                    err.raw_os_error(),
                    Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                ) =>
            {
                Ok(())
            }
            Err(err) if err.raw_os_error() == Some(libc::EBADR) => {
                Metrics::bump(&self.metrics.cqes_lost);
                Ok(())
            }
            Err(err) => Err(err),
        }
    }

    /// Copies all available CQEs out and releases their CQ slots to the kernel at once.
    pub(super) fn copy_cqes(&mut self) {
        let mut cq = self.ring.completion();
        let lost = u64::from(cq.overflow());
        // Room first, then a plain loop: `extend` over the mapped iterator, which does not
        // know its length, cost about 40 instructions per CQE (callgrind, echo).
        self.scratch.reserve(cq.len());
        for entry in cq.by_ref() {
            self.scratch.push_back(Cqe::from(&entry));
        }
        drop(cq);
        let seen = self.overflow_seen;
        if lost > seen {
            Metrics::add(&self.metrics.cqes_lost, lost - seen);
            self.overflow_seen = lost;
        }
    }

    /// Cancels every op and waits until `deadline` for every final CQE. An op that has not
    /// completed by then is abandoned: it stays in the table, so polling it stays pending
    /// (its future never gets its buffer back, as the kernel may still write into it), and
    /// when the driver is dropped its memory is leaked rather than freed under the kernel.
    /// The driver stays usable; what the CQEs woke or finished is deferred
    /// ([`take_deferred`](Driver::take_deferred)).
    pub fn drain(&mut self, deadline: Instant) {
        for id in self.ops.ids() {
            self.cancel(id);
        }
        // One turn that does not wait, whatever the deadline: it submits the cancels and
        // collects what completes at once (a deadline already past would otherwise leave
        // every op, and its memory, to be leaked).
        let _ = self.turn(Wait::No);
        drain_until(deadline, || {
            self.ops.awaiting_kernel() > 0
                && self.turn(Wait::For(Duration::from_millis(50))).is_ok()
        });
        self.abandoned |= self.ops.awaiting_kernel() > 0;
    }

    /// At drop: leaks the memory of ops still awaiting the kernel (and the buffers the
    /// kernel may still write: provided groups, the registered table) instead of freeing it.
    pub(crate) fn leak_abandoned(&mut self) {
        if self.ops.awaiting_kernel() > 0 {
            std::mem::forget(std::mem::take(&mut self.ops));
            self.groups.leak();
            std::mem::forget(self.registered_bufs.take());
        }
    }
}

/// A batched wait's minimum (`min_wait_usec` of `io_uring_getevents_arg`, 6.12), in whole
/// microseconds. At least 1 us: 0 would mean "no minimum" and turn the batch into a plain
/// wait for `want` CQEs with no bound.
fn min_wait_usec(d: Duration) -> u32 {
    d.as_micros().clamp(1, u32::MAX as u128) as u32
}

/// `d` as the kernel's timespec. Its `tv_sec` is signed: a longer wait (`Duration::MAX`,
/// say) would be negative, which the kernel refuses (EINVAL) or reads as already past, so
/// it is cut to `i64::MAX` seconds, far beyond any real deadline.
pub(crate) fn timespec(d: Duration) -> types::Timespec {
    types::Timespec::new()
        .sec(d.as_secs().min(i64::MAX as u64))
        .nsec(d.subsec_nanos())
}
