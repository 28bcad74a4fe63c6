//! `Builder`: ring sizes, worker threads, backend choice, feature mask, SQPOLL.

use std::io;
use std::rc::Rc;
use std::sync::Arc;

use ring_core::driver::DriverConfig;
use ring_core::probe::FeatureMask;
use ring_core::setup::RingConfig;

use crate::backend::epoll::EpollBackend;
use crate::backend::uring::{RecvBuffers, UringBackend};
use crate::backend::{Backend, BackendKind};
use crate::executor::{Executor, Shared};
use crate::runtime::{Core, Runtime};
use crate::select::{self, Choice};
use crate::time::Timers;
use crate::unpark::Unparker;
use crate::worker::Workers;

/// Configures and builds a [`Runtime`].
///
/// ```
/// let rt = ring_rt::Runtime::builder().entries(512).build().unwrap();
/// println!("backend: {}", rt.backend());
/// ```
#[derive(Clone, Debug)]
pub struct Builder {
    entries: u32,
    threads: usize,
    backend: Option<BackendKind>,
    mask: Option<FeatureMask>,
    sqpoll_idle_ms: Option<u32>,
    pin_workers: bool,
    recv_buffers: RecvBuffers,
}

impl Default for Builder {
    fn default() -> Builder {
        Builder::new()
    }
}

impl Builder {
    /// Defaults: 256 SQ entries, one worker (the calling thread), backend chosen at run time
    /// (`RING_RT_BACKEND` overrides), features masked by `RING_FEATURES` if set, no SQPOLL,
    /// a shared receive pool of 1,024 buffers of 4 KiB per worker.
    pub fn new() -> Builder {
        Builder {
            entries: 256,
            threads: 1,
            backend: None,
            mask: None,
            sqpoll_idle_ms: None,
            pin_workers: false,
            recv_buffers: RecvBuffers {
                count: 1024,
                len: 4096,
            },
        }
    }

    /// SQ entries per ring (rounded up to a power of two; the CQ is sized for multishot).
    pub fn entries(mut self, entries: u32) -> Builder {
        self.entries = entries;
        self
    }

    /// Number of workers, each with its own ring; the calling thread is worker 0.
    pub fn threads(mut self, threads: usize) -> Builder {
        self.threads = threads.max(1);
        self
    }

    /// Forces a backend. Forcing `Uring` where io_uring is unavailable makes `build` fail.
    pub fn backend(mut self, backend: BackendKind) -> Builder {
        self.backend = Some(backend);
        self
    }

    /// Hides io_uring features (e.g. `FeatureMask::parse("5.11")`), overriding `RING_FEATURES`.
    pub fn feature_mask(mut self, mask: FeatureMask) -> Builder {
        self.mask = Some(mask);
        self
    }

    /// Uses a kernel SQ polling thread that sleeps after `idle_ms` without work.
    pub fn sqpoll(mut self, idle_ms: u32) -> Builder {
        self.sqpoll_idle_ms = Some(idle_ms);
        self
    }

    /// Pins worker `i` to CPU `i % nproc`.
    pub fn pin_workers(mut self, pin: bool) -> Builder {
        self.pin_workers = pin;
        self
    }

    /// Size of each worker's shared pool for pooled receives (`count` a power of two).
    pub fn recv_buffers(mut self, count: u16, len: u32) -> Builder {
        self.recv_buffers = RecvBuffers { count, len };
        self
    }

    /// Builds the runtime: chooses the backend, sets up worker 0 on this thread and starts
    /// the other workers.
    pub fn build(&self) -> io::Result<Runtime> {
        let config = Arc::new(self.resolved()?);
        let workers = match self.threads {
            1 => None,
            n => Some(Workers::start(n - 1, config.clone())?),
        };
        match config.build_core(0) {
            Ok(core) => Ok(Runtime { core, workers }),
            Err(err) => {
                if let Some(workers) = workers {
                    workers.shutdown();
                }
                Err(err)
            }
        }
    }

    fn resolved(&self) -> io::Result<WorkerConfig> {
        let requested = match self.backend {
            Some(kind) => Some(kind),
            None => select::backend_from_env()?,
        };
        let mask = match &self.mask {
            Some(mask) => Some(mask.clone()),
            None => FeatureMask::from_env().map_err(|e| {
                io::Error::new(io::ErrorKind::InvalidInput, format!("RING_FEATURES: {e}"))
            })?,
        };
        Ok(WorkerConfig {
            requested,
            mask,
            ring: RingConfig {
                entries: self.entries,
                sqpoll_idle_ms: self.sqpoll_idle_ms,
                ..RingConfig::default()
            },
            pin_workers: self.pin_workers,
            recv_buffers: self.recv_buffers,
        })
    }
}

/// What every worker is built from (shared with the worker threads).
#[derive(Debug)]
pub(crate) struct WorkerConfig {
    requested: Option<BackendKind>,
    mask: Option<FeatureMask>,
    ring: RingConfig,
    pin_workers: bool,
    recv_buffers: RecvBuffers,
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
        Ok(Rc::new(Core {
            executor: Executor::new(shared),
            backend: std::cell::RefCell::new(backend),
            timers: std::cell::RefCell::new(Timers::default()),
            buf_waiters: std::cell::RefCell::new(Vec::new()),
            buf_returns: std::cell::Cell::new(0),
            choice,
        }))
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
        match UringBackend::new(&config, shared.unparker.fd(), on_wake, self.recv_buffers) {
            Ok(backend) => Ok((Backend::Uring(backend), choice)),
            Err(err) if self.requested == Some(BackendKind::Uring) => Err(err.into()),
            Err(err) => self.epoll(shared, select::setup_failed(err)),
        }
    }

    fn epoll(&self, shared: &Arc<Shared>, choice: Choice) -> io::Result<(Backend, Choice)> {
        let waker_shared = shared.clone();
        let on_wake = Box::new(move || waker_shared.unparker.reset());
        let backend = EpollBackend::new(shared.unparker.fd(), on_wake, self.recv_buffers)?;
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
