//! The io_uring backend: a ring-core driver plus the worker's wake-up poll and buffer group.

use std::io;
use std::os::fd::RawFd;
use std::task::Waker;
use std::time::Duration;

use io_uring::{opcode, types};
use ring_core::buf_pool::BufGroup;
use ring_core::driver::{Batch, Driver, DriverConfig, Wait};
use ring_core::release::Keep;
use ring_core::setup::SetupError;
use ring_core::user_data::OpId;

use super::{RecvBuffers, RecvPool};

pub(crate) struct UringBackend {
    pub(crate) driver: Driver,
    /// The eventfd other threads write to wake this worker.
    wake_fd: RawFd,
    /// The armed poll on `wake_fd`, if any.
    wake_op: Option<OpId>,
    /// The worker's shared receive group (see `Backend::recv_group`).
    pub(crate) recv_pool: RecvPool,
    /// Called when the eventfd fired, to reset it.
    on_wake: Box<dyn Fn()>,
    /// The longest a blocking wait may linger to gather a batch; zero for never.
    batch_wait: Duration,
    /// Op CQEs the last turn dispatched: the batch the next wait asks for.
    last_batch: usize,
}

/// The most CQEs one batched wait asks for: past this, a batch saves no more enters worth
/// the latency.
pub(crate) const BATCH_MAX: usize = 64;

impl UringBackend {
    pub(crate) fn new(
        config: &DriverConfig,
        wake_fd: RawFd,
        on_wake: Box<dyn Fn()>,
        recv_buffers: RecvBuffers,
    ) -> Result<UringBackend, SetupError> {
        Ok(UringBackend {
            driver: Driver::new(config)?,
            wake_fd,
            wake_op: None,
            recv_pool: RecvPool::new(recv_buffers),
            on_wake,
            batch_wait: Duration::ZERO,
            last_batch: 0,
        })
    }

    /// Turns batched waits on (see `Builder::batch_wait`); a no-op before 6.12.
    pub(crate) fn with_batch_wait(mut self, wait: Duration) -> UringBackend {
        // `set_batch(None)` changes nothing; it says whether the kernel can batch.
        if self.driver.set_batch(None) {
            self.batch_wait = wait;
        }
        self
    }

    /// Caps the kernel's bounded io-wq workers for this worker's ring at `threads`: the
    /// threads that run file ops which cannot complete inline (fsync, reads that miss the
    /// cache). io-wq belongs to the thread, so the cap covers every ring this worker thread
    /// creates. Before 5.15 the kernel has no such knob and keeps its own default,
    /// min(SQ entries, 4 x CPUs); a cap the user asked for then logs a warning.
    pub(crate) fn with_blocking_threads(self, threads: usize, is_explicit: bool) -> UringBackend {
        let bounded = u32::try_from(threads.max(1)).unwrap_or(u32::MAX);
        // [bounded, unbounded]; 0 leaves the unbounded (socket, pipe) count as it is.
        let mut counts = [bounded, 0];
        match self
            .driver
            .submitter()
            .register_iowq_max_workers(&mut counts)
        {
            Ok(()) => {}
            Err(err) if is_explicit => {
                tracing::warn!(target: "ring_rt", threads, error = %err, "io-wq worker cap not set (needs Linux 5.15+); the kernel's default applies")
            }
            Err(err) => {
                tracing::debug!(target: "ring_rt", threads, error = %err, "io-wq worker cap not set (needs Linux 5.15+)")
            }
        }
        self
    }

    pub(crate) fn turn(&mut self, wait: Wait) -> io::Result<()> {
        if self.wake_op.is_none() {
            let poll = opcode::PollAdd::new(types::Fd(self.wake_fd), libc::POLLIN as u32);
            self.wake_op = Some(self.driver.submit_op(poll.build())?);
        }
        self.set_batch(wait);
        self.last_batch = self.driver.turn(wait)?;
        if let Some(id) = self.wake_op {
            if self.driver.poll_op(id, Waker::noop()).is_ready() {
                self.wake_op = None;
                (self.on_wake)();
            }
        }
        Ok(())
    }

    /// A busy ring waits for as many CQEs as its last turn brought, so steady load costs
    /// one enter per batch rather than one per CQE; one CQE per turn waits as usual.
    fn set_batch(&mut self, wait: Wait) {
        if self.batch_wait.is_zero() || wait == Wait::No {
            return;
        }
        let want = self.last_batch.min(BATCH_MAX) as u32;
        let batch = (want > 1).then_some(Batch {
            want,
            min_wait: self.batch_wait,
        });
        self.driver.set_batch(batch);
    }
}

/// Registers a worker's receive group on its ring: a buffer ring (5.19+) or legacy provided
/// buffers (5.7+); before 5.7 the kernel cannot select buffers, so they are selected in user
/// space after a readiness poll, as on epoll (still no buffer per idle socket).
pub(crate) fn recv_group(driver: &mut Driver, count: u16, len: u32) -> io::Result<BufGroup> {
    match driver.register_buf_group(count, len) {
        Err(e) if e.kind() == io::ErrorKind::Unsupported => BufGroup::new_user(0, count, len),
        other => other,
    }
}

impl Drop for UringBackend {
    fn drop(&mut self) {
        // The wake poll has no future: orphan it so the driver's shutdown can reap it.
        if let Some(id) = self.wake_op.take() {
            self.driver.orphan(id, Box::new(Keep(())));
        }
    }
}
