//! What a worker is built from, and building one: choosing its backend, pinning it to a
//! CPU, making its core.

use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use ring_core::driver::DriverConfig;
use ring_core::probe::FeatureMask;
use ring_core::setup::RingConfig;

use super::Core;
use crate::backend::epoll::EpollBackend;
use crate::backend::select::{self, Choice};
use crate::backend::uring::UringBackend;
use crate::backend::{blocking, Backend, BackendKind, RecvBuffers};
use crate::executor::{Executor, Shared};
use crate::unpark::Unparker;

/// What every worker is built from (shared with the worker threads).
#[derive(Debug)]
pub(crate) struct WorkerConfig {
    pub(crate) requested: Option<BackendKind>,
    pub(crate) mask: Option<FeatureMask>,
    pub(crate) ring: RingConfig,
    pub(crate) pin_workers: bool,
    pub(crate) recv_buffers: RecvBuffers,
    pub(crate) batch_wait: Duration,
    pub(crate) blocking_threads: Option<usize>,
    pub(crate) spin_before_park: Duration,
}

impl WorkerConfig {
    /// Builds worker `index`'s core on the calling thread.
    pub(crate) fn build_core(&self, index: usize) -> io::Result<Rc<Core>> {
        if self.pin_workers {
            pin_to_cpu(index)?;
        }
        let shared = Arc::new(Shared::new(Unparker::new()?));
        let (backend, choice) = self.build_backend(&shared)?;
        trace_start(index, &backend, &choice);
        Ok(Rc::new(Core::new(
            Executor::new(shared),
            backend,
            choice,
            self.spin_before_park,
        )))
    }

    fn build_backend(&self, shared: &Arc<Shared>) -> io::Result<(Backend, Choice)> {
        let choice = select::choose(self.requested, self.mask.as_ref())?;
        if choice.kind == BackendKind::Epoll {
            return self.epoll(shared, choice);
        }
        let features = choice
            .features
            .clone()
            .expect("io_uring choice carries features");
        let config = DriverConfig {
            ring: self.ring.clone(),
            features,
        };
        let waker_shared = shared.clone();
        let on_wake = Box::new(move || waker_shared.unparker.reset());
        let backend = UringBackend::new(&config, shared.unparker.fd(), on_wake, self.recv_buffers);
        let backend = backend.map(|b| {
            b.with_batch_wait(self.batch_wait)
                .with_blocking_threads(self.blocking_threads(), self.blocking_threads.is_some())
        });
        match backend {
            Ok(backend) => Ok((Backend::Uring(backend), choice)),
            Err(err) if self.requested == Some(BackendKind::Uring) => Err(err.into()),
            Err(err) => self.epoll(shared, select::setup_failed(err)),
        }
    }

    /// The blocking-thread cap for either backend: the builder's, else the default.
    fn blocking_threads(&self) -> usize {
        self.blocking_threads
            .unwrap_or_else(blocking::default_threads)
    }

    fn epoll(&self, shared: &Arc<Shared>, choice: Choice) -> io::Result<(Backend, Choice)> {
        let waker_shared = shared.clone();
        let on_wake = Box::new(move || waker_shared.unparker.reset());
        let threads = self.blocking_threads();
        let backend = EpollBackend::new(shared.unparker.fd(), on_wake, self.recv_buffers, threads)?;
        Ok((Backend::Epoll(backend), choice))
    }
}

/// The runtime-start event (and a warning when io_uring was not usable).
fn trace_start(worker: usize, backend: &Backend, choice: &Choice) {
    let kind = backend.kind();
    let report = &choice.report;
    if report.is_fallback() {
        tracing::warn!(target: "ring_rt", worker, backend = %kind, reason = %report.reason, "io_uring not used; falling back to epoll");
    }
    let features = backend
        .features()
        .map(|f| f.used_by_runtime().join(","))
        .unwrap_or_default();
    let (sq_entries, cq_entries) = backend.ring_sizes();
    tracing::info!(target: "ring_rt", worker, backend = %kind, reason = %report.reason, features, sq_entries, cq_entries, "ring-rt worker started");
}

fn pin_to_cpu(index: usize) -> io::Result<()> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET writes within `set` for a cpu index below CPU_SETSIZE.
    unsafe { libc::CPU_SET(index % cpus, &mut set) };
    // SAFETY: passes a valid pointer to a live cpu_set_t and its size; pid 0 = this thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
