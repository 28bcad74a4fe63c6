//! What a worker is built from, and building one: pinning it to a CPU, opening its
//! backend (chosen in `backend::select`), making its core.

use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use super::Core;
use crate::backend::select::{self, BackendConfig, Choice, WakeSource};
use crate::backend::{Backend, Mechanism};
use crate::executor::{Executor, Shared};
use crate::sys;
use crate::unpark::Unparker;

/// What every worker is built from (shared with the worker threads).
#[derive(Debug)]
pub(crate) struct WorkerConfig {
    pub(crate) backend: BackendConfig,
    /// The runtime's worker set, filled once every worker started.
    pub(crate) set: Arc<std::sync::OnceLock<Arc<super::WorkerSet>>>,
    pub(crate) pin_workers: bool,
    pub(crate) spin_before_park: Duration,
}

impl WorkerConfig {
    /// Builds worker `index`'s core on the calling thread.
    pub(crate) fn build_core(&self, index: usize) -> io::Result<Rc<Core>> {
        // Worker 0 is the caller's own thread: it stays as the caller set it (pinning it
        // would outlive the runtime).
        if self.pin_workers && index > 0 {
            pin_to_cpu(index)?;
        }
        let shared = Arc::new(Shared::new(Unparker::new()?));
        let on_wake = || -> Box<dyn Fn()> {
            let shared = shared.clone();
            Box::new(move || shared.unparker.reset())
        };
        let wake = WakeSource {
            fd: shared.unparker.fd(),
            on_wake: &on_wake,
        };
        let (backend, choice) = select::open(&self.backend, wake)?;
        trace_start(index, &backend, &choice);
        let core = Rc::new(Core::new(
            Executor::new(shared.clone()),
            backend,
            choice,
            self.spin_before_park,
            self.set.clone(),
        ));
        // Other io_uring workers may now wake this one through its ring.
        if let Some(target) = core.wake_target() {
            shared.unparker.set_ring(target);
        }
        Ok(core)
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
    // The CPUs this thread may run on (inherited from the thread that built the runtime):
    // worker `index` takes the `index`-th of them, wrapping.
    let allowed = sys::allowed_cpus()?;
    sys::set_cpus(&[allowed[index % allowed.len()]])
}
