//! `Builder`: ring sizes, worker threads, backend choice, feature mask, SQPOLL.

use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use ring_core::driver::DriverConfig;
use ring_core::probe::FeatureMask;
use ring_core::setup::RingConfig;

use crate::backend::blocking;
use crate::backend::epoll::EpollBackend;
use crate::backend::uring::UringBackend;
use crate::backend::{Backend, BackendKind, RecvBuffers};

/// The default for [`Builder::batch_wait`].
const DEFAULT_BATCH_WAIT: Duration = Duration::ZERO;
use crate::executor::{Executor, Shared};
use crate::runtime::{Core, Runtime};
use crate::select::{self, Choice};
use crate::time::Timers;
use crate::unpark::Unparker;
use crate::worker::Workers;

/// Configures and builds a [`Runtime`].
///
/// # Examples
///
/// ```
/// let rt = ring_rt::Runtime::builder().entries(512).build().unwrap();
/// println!("backend: {}", rt.backend());
/// ```
///
/// Every knob at once (each is described on its method):
///
/// ```
/// use ring_rt::{BackendKind, Builder, FeatureMask};
///
/// let builder = Builder::new()
///     .entries(128)
///     .threads(2)
///     .feature_mask(FeatureMask::parse("6.1").unwrap())
///     .recv_buffers(256, 2048)
///     .pin_workers(false);
/// let rt = builder.build()?;
/// assert_eq!(rt.threads(), 2);
/// // A builder can be reused, e.g. to force the fallback for comparison.
/// let epoll = builder.backend(BackendKind::Epoll).build()?;
/// assert_eq!(epoll.backend().kind, BackendKind::Epoll);
/// # std::io::Result::Ok(())
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
    batch_wait: Duration,
    blocking_threads: Option<usize>,
    spin_before_park: Duration,
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
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = ring_rt::Builder::new().build()?;
    /// assert_eq!(rt.threads(), 1);
    /// # std::io::Result::Ok(())
    /// ```
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
            batch_wait: DEFAULT_BATCH_WAIT,
            blocking_threads: None,
            spin_before_park: Duration::ZERO,
        }
    }

    /// SQ entries per ring (rounded up to a power of two; the CQ is sized for multishot).
    /// A full SQ is submitted and the push retried, so this bounds batching, not the number
    /// of ops in flight. Ignored on epoll.
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = ring_rt::Runtime::builder().entries(1024).build()?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn entries(mut self, entries: u32) -> Builder {
        self.entries = entries;
        self
    }

    /// Number of workers, each with its own ring; the calling thread is worker 0 (0 counts
    /// as 1). Put work on the other workers with [`Runtime::spawn_on_all`].
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = ring_rt::Runtime::builder().threads(3).build()?;
    /// assert_eq!(rt.threads(), 3);
    /// # std::io::Result::Ok(())
    /// ```
    pub fn threads(mut self, threads: usize) -> Builder {
        self.threads = threads.max(1);
        self
    }

    /// Forces a backend, overriding `RING_RT_BACKEND`. Forcing `Uring` where io_uring is
    /// unavailable makes `build` fail with `Unsupported` instead of falling back.
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_rt::{BackendKind, Runtime};
    ///
    /// let rt = Runtime::builder().backend(BackendKind::Epoll).build()?;
    /// assert_eq!(rt.backend().reason, "requested");
    /// assert!(rt.features().is_none());
    /// # std::io::Result::Ok(())
    /// ```
    pub fn backend(mut self, backend: BackendKind) -> Builder {
        self.backend = Some(backend);
        self
    }

    /// Hides io_uring features (e.g. `FeatureMask::parse("5.11")`), overriding `RING_FEATURES`,
    /// so the runtime behaves as on an older kernel.
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_rt::{Feature, FeatureMask, Runtime};
    ///
    /// let mask = FeatureMask::parse("multishot_accept").unwrap();
    /// let rt = Runtime::builder().feature_mask(mask).build()?;
    /// if let Some(features) = rt.features() {
    ///     assert!(!features.has(Feature::MultishotAccept)); // one accept per connection
    /// }
    /// # std::io::Result::Ok(())
    /// ```
    pub fn feature_mask(mut self, mask: FeatureMask) -> Builder {
        self.mask = Some(mask);
        self
    }

    /// Uses a kernel SQ polling thread that sleeps after `idle_ms` without work, where the
    /// kernel allows it (`IORING_SETUP_SQPOLL`; unprivileged since 5.11); ignored on epoll.
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = ring_rt::Runtime::builder().sqpoll(100).build()?;
    /// let out = rt.block_on(async {
    ///     let (a, b) = ring_rt::net::UnixStream::pair()?;
    ///     a.write_all(&b"polled"[..]).await.0?;
    ///     let (n, buf) = b.read(vec![0; 16]).await;
    ///     std::io::Result::Ok(buf[..n?].to_vec())
    /// })?;
    /// assert_eq!(out, b"polled");
    /// # std::io::Result::Ok(())
    /// ```
    pub fn sqpoll(mut self, idle_ms: u32) -> Builder {
        self.sqpoll_idle_ms = Some(idle_ms);
        self
    }

    /// Pins worker `i` to CPU `i % nproc` (worker 0 is the thread that calls `build`).
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = ring_rt::Runtime::builder().threads(2).pin_workers(true).build()?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn pin_workers(mut self, pin: bool) -> Builder {
        self.pin_workers = pin;
        self
    }

    /// Size of each worker's shared pool for pooled receives (`count` a power of two):
    /// [`recv_pooled`](crate::net::TcpStream::recv_pooled) and
    /// [`recv_stream`](crate::net::TcpStream::recv_stream) return chunks of at most `len`
    /// bytes. When every buffer is out, receivers wait for one to come back.
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = ring_rt::Runtime::builder().recv_buffers(16, 8).build()?;
    /// rt.block_on(async {
    ///     let (a, b) = ring_rt::net::UnixStream::pair()?;
    ///     a.write_all(&b"0123456789"[..]).await.0?;
    ///     let chunk = b.recv_pooled().await?.expect("data");
    ///     assert_eq!(&chunk[..], b"01234567"); // at most 8 bytes per buffer
    ///     std::io::Result::Ok(())
    /// })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn recv_buffers(mut self, count: u16, len: u32) -> Builder {
        self.recv_buffers = RecvBuffers { count, len };
        self
    }

    /// How long a busy io_uring worker may wait to gather as many completions per
    /// `io_uring_enter` as its last turn had (at most 64) before running what
    /// is ready. Fewer enters per request under load, at the cost of up to this much extra
    /// latency when load suddenly drops. `Duration::ZERO` turns it off; an idle or lightly
    /// loaded worker (one completion per turn) never waits. Needs 6.12+
    /// (`IORING_FEAT_MIN_TIMEOUT`); ignored on older kernels and on epoll.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let rt = ring_rt::Runtime::builder().batch_wait(Duration::from_micros(50)).build()?;
    /// // A lone op is not delayed: one completion per turn never waits for more.
    /// rt.block_on(ring_rt::time::sleep(Duration::from_millis(1)));
    /// # std::io::Result::Ok(())
    /// ```
    pub fn batch_wait(mut self, wait: Duration) -> Builder {
        self.batch_wait = wait;
        self
    }

    /// How long an idle worker keeps polling for completions before it sleeps in the
    /// kernel (`Duration::ZERO`, the default, sleeps at once). A completion that arrives
    /// within the spin is run without the cost of a sleep and a wake-up, which matters
    /// for storage at queue depth: with all reads in flight, a worker that sleeps pays an
    /// interrupt, a context switch and a cold cache for every few completions. The price
    /// is CPU: a worker that keeps finding completions within the spin never sleeps, and
    /// an idle one burns up to this much after each burst. On io_uring (5.19+, with
    /// `TASKRUN_FLAG`) a spinning turn reads the ring's flags and enters the kernel only
    /// when they announce completions; on epoll each spinning turn is an `epoll_wait(0)`.
    /// [`RuntimeMetrics::spin_turns`](crate::RuntimeMetrics::spin_turns) counts them.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let rt = ring_rt::Runtime::builder()
    ///     .spin_before_park(Duration::from_micros(100))
    ///     .build()?;
    /// // A 5 ms sleep spins for 100 us, then parks until the timer is due.
    /// rt.block_on(ring_rt::time::sleep(Duration::from_millis(5)));
    /// assert!(rt.metrics().spin_turns > 0);
    /// # std::io::Result::Ok(())
    /// ```
    pub fn spin_before_park(mut self, spin: Duration) -> Builder {
        self.spin_before_park = spin;
        self
    }

    /// How many threads may run one worker's blocking file ops (`fsync`, reads that miss
    /// the page cache, `open`) at once. On io_uring this caps the kernel's bounded io-wq
    /// workers (`IORING_REGISTER_IOWQ_MAX_WORKERS`, 5.15+; older kernels keep their own
    /// min(SQ entries, 4 x CPUs), with a logged warning); on epoll it sizes the blocking
    /// pool. The default is 4 per CPU but at least 16, on both backends. Syncs and uncached
    /// reads run in parallel up to this count and queue beyond it: raise it when many are
    /// in flight at once, lower it to bound the threads a worker may start.
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_rt::fs::OpenOptions;
    ///
    /// let rt = ring_rt::Runtime::builder().blocking_threads(64).build()?;
    /// rt.block_on(async {
    ///     let path = std::env::temp_dir().join(format!("ring-rt-doc-{}", std::process::id()));
    ///     let file = OpenOptions::new().write(true).create(true).open(&path).await?;
    ///     file.write_all_at(&b"synced"[..], 0).await.0?;
    ///     file.sync_data().await?; // one of up to 64 syncs this worker may run at once
    ///     std::fs::remove_file(&path)
    /// })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn blocking_threads(mut self, threads: usize) -> Builder {
        self.blocking_threads = Some(threads.max(1));
        self
    }

    /// Builds the runtime: chooses the backend, sets up worker 0 on this thread and starts
    /// the other workers.
    ///
    /// # Errors
    /// A bad `RING_RT_BACKEND`/`RING_FEATURES` value (`InvalidInput`), io_uring forced but
    /// unavailable (`Unsupported`), or a worker that could not start (e.g. `pin_workers`
    /// where affinity is not allowed).
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = ring_rt::Runtime::builder();
    /// let first = builder.build()?;
    /// let second = builder.build()?; // one builder, many runtimes
    /// # std::io::Result::Ok(())
    /// ```
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
            batch_wait: self.batch_wait,
            blocking_threads: self.blocking_threads,
            spin_before_park: self.spin_before_park,
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
    batch_wait: Duration,
    blocking_threads: Option<usize>,
    spin_before_park: Duration,
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
            choice,
            spin: self.spin_before_park,
            spin_turns: std::cell::Cell::new(0),
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
