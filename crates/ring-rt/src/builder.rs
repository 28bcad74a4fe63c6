//! `Builder`: ring sizes, worker threads, backend choice, feature mask, SQPOLL.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use ring_core::probe::FeatureMask;
use ring_core::setup::RingConfig;

use crate::backend::select::{self, BackendConfig};
use crate::backend::{BackendKind, FixedBuffers, RecvBuffers};

use crate::runtime::Runtime;
use crate::worker::blocking::BlockingTasks;
use crate::worker::set::WorkerSet;
use crate::worker::{WorkerConfig, Workers};

/// The default for [`Builder::batch_wait`].
const DEFAULT_BATCH_WAIT: Duration = Duration::ZERO;

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
    fixed_buffers: Option<FixedBuffers>,
    batch_wait: Duration,
    blocking_threads: Option<usize>,
    max_blocking_threads: usize,
    spin_before_park: Duration,
    direct_slots: u32,
}

/// One worker per CPU this process may run on.
fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl Default for Builder {
    fn default() -> Builder {
        Builder::new()
    }
}

impl Builder {
    /// Defaults: 256 SQ entries; one worker per CPU this process may run on (the
    /// affinity mask and any cgroup CPU quota, as `std::thread::available_parallelism`
    /// and tokio's multi-thread runtime count them), the calling thread being worker 0;
    /// backend chosen at run time (`RING_RT_BACKEND` overrides), features masked by
    /// `RING_FEATURES` if set, no SQPOLL, a shared receive pool of 1,024 buffers of 4 KiB
    /// per worker, up to 512 threads for `spawn_blocking`.
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = ring_rt::Builder::new().build()?;
    /// let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    /// assert_eq!(rt.threads(), cpus);
    /// # std::io::Result::Ok(())
    /// ```
    pub fn new() -> Builder {
        Builder {
            entries: 256,
            threads: default_threads(),
            backend: None,
            mask: None,
            sqpoll_idle_ms: None,
            pin_workers: false,
            recv_buffers: RecvBuffers {
                count: 1024,
                len: 4096,
            },
            fixed_buffers: None,
            batch_wait: DEFAULT_BATCH_WAIT,
            blocking_threads: None,
            max_blocking_threads: crate::worker::blocking::DEFAULT_MAX_THREADS,
            spin_before_park: Duration::ZERO,
            direct_slots: 0,
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
    /// as 1). The default is one per CPU this process may run on. Put work on the workers
    /// with a [`Handle`](crate::Handle) (`Runtime::handle`, `Handle::current`) or with
    /// [`Runtime::spawn_on_all`]; `ring_rt::spawn` stays on the worker it is called on.
    /// More than
    /// [`MAX_THREADS`](Self::MAX_THREADS) makes `build` fail with `InvalidInput`; a thread the system cannot
    /// start makes it fail with that error, after stopping the workers already started.
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

    /// Pins worker `i` (for `i >= 1`) to the `i`-th CPU, wrapping, of the affinity mask of
    /// the thread that calls `build` (what `taskset` or a cpuset left it). Worker 0 is that
    /// thread itself, which `block_on` borrows: it stays as its caller set it, before and
    /// after the runtime (pin it yourself if you want it pinned). The blocking pools'
    /// threads (`spawn_blocking`, epoll's file ops) run on the whole mask, whichever worker
    /// started them; where io_uring's own kernel workers (io-wq) run is the kernel's
    /// choice.
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

    /// Size of each worker's shared pool for pooled receives: `count` buffers (1 to
    /// [`MAX_RECV_BUFFERS`](Self::MAX_RECV_BUFFERS); a power of two fills a buffer ring exactly) of `len` bytes (1 to
    /// `i32::MAX`); `build` fails with `InvalidInput` outside those ranges, on both backends.
    /// The pool is allocated at the first pooled receive (`OutOfMemory` there if it cannot be):
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

    /// Gives each worker a pool of `count` registered buffers of `len` bytes (rounded up to
    /// whole pages), lent out by [`FixedBuf::take`](crate::buf::FixedBuf::take): file reads
    /// and writes of them go to the kernel as `READ_FIXED` / `WRITE_FIXED`, which skip
    /// pinning the buffer's pages for every op. A worker allocates and registers its pool
    /// when its first buffer is taken. None by default. `count` must be 1..=16,384 (the
    /// kernel's limit) and `len` 1..=1 GiB, or `build` fails with `InvalidInput`.
    ///
    /// The pages are pinned for the ring's life and count against `RLIMIT_MEMLOCK` for a
    /// user without `CAP_IPC_LOCK`; where the kernel refuses them (that limit, a seccomp
    /// filter), and on epoll, the buffers work as plain memory and
    /// [`is_registered`](crate::buf::FixedBuf::is_registered) says so.
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = ring_rt::Runtime::builder().fixed_buffers(64, 4096).build()?;
    /// rt.block_on(async {
    ///     let buf = ring_rt::buf::FixedBuf::take()?;
    ///     assert_eq!(buf.capacity(), 4096);
    ///     std::io::Result::Ok(())
    /// })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn fixed_buffers(mut self, count: u16, len: usize) -> Builder {
        self.fixed_buffers = Some(FixedBuffers { count, len });
        self
    }

    /// Accepts TCP connections as *direct descriptors*: into a table of up to `slots`
    /// entries in each worker's ring, with no fd in the process's fd table. Their ops name
    /// the table entry (the kernel skips the fd lookup and its reference count), and a
    /// connection moves to another worker by `IORING_MSG_SEND_FD`
    /// ([`Handle::serve_balanced`](crate::Handle::serve_balanced)). 0, the default, keeps
    /// accepting fds.
    ///
    /// It applies to [`TcpListener::incoming`](crate::net::TcpListener::incoming) and
    /// `serve_balanced` on io_uring workers whose kernel has every piece (Linux 6.8+:
    /// `FIXED_FD_INSTALL`); elsewhere (epoll, older kernels, a `RING_FEATURES` profile
    /// without them) accepts return fds as before and the reason is logged. The table is
    /// cut to the process's open-file limit, which the kernel applies to it. A full table
    /// fails an accept with `ENFILE`, as a full fd table fails it with `EMFILE`, with one
    /// difference the kernel makes: it found the table full only after taking the
    /// connection from the listen backlog, and closes that connection (a full fd table
    /// leaves it waiting). Size the table for the connections a worker holds at once; a
    /// worker accepting for `serve_balanced` also holds, for a loop turn or two, those on
    /// their way to another worker (their slot here closes once the other ring has them),
    /// so a burst needs room for itself too.
    /// [`TcpListener::accept`](crate::net::TcpListener::accept) keeps returning fds.
    ///
    /// A direct stream gets a regular fd only when asked for one:
    /// [`as_raw_fd`](std::os::fd::AsRawFd::as_raw_fd), socket options such as
    /// [`set_nodelay`](crate::net::TcpStream::set_nodelay) (set `TCP_NODELAY` on the
    /// listener instead: accepted sockets inherit it), the peer's address, or
    /// `into_owned_fd` install one (`IORING_OP_FIXED_FD_INSTALL`, an `io_uring_enter` of
    /// its own). [`TcpStream::is_direct`](crate::net::TcpStream::is_direct) says which a
    /// stream is.
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_rt::net::{TcpListener, TcpStream};
    ///
    /// let rt = ring_rt::Runtime::builder().threads(1).direct_descriptors(1024).build()?;
    /// rt.block_on(async {
    ///     let listener = TcpListener::bind("127.0.0.1:0")?;
    ///     let client = TcpStream::connect(listener.local_addr()?).await?;
    ///     let server = listener.incoming().next().await.expect("never None")?;
    ///     // Direct on io_uring with Linux 6.8+; a plain fd elsewhere. Either way:
    ///     server.write_all(&b"hi"[..]).await.0?;
    ///     let (n, buf) = client.read(vec![0; 2]).await;
    ///     assert_eq!(&buf[..n?], b"hi");
    ///     assert_eq!(server.peer_addr()?, client.local_addr()?);
    ///     std::io::Result::Ok(())
    /// })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn direct_descriptors(mut self, slots: u32) -> Builder {
        self.direct_slots = slots;
        self
    }

    /// How long a busy io_uring worker may wait to gather as many completions per
    /// `io_uring_enter` as its last turn had (at most 64) before running what
    /// is ready. Fewer enters per request under load, at the cost of up to this much extra
    /// latency when load suddenly drops. `Duration::ZERO` turns it off; an idle or lightly
    /// loaded worker (one completion per turn) never waits. Needs 6.12+
    /// (`IORING_FEAT_MIN_TIMEOUT`); ignored on older kernels and on epoll. Longer than
    /// [`MAX_BATCH_WAIT`](Self::MAX_BATCH_WAIT) makes `build` fail with `InvalidInput`: this is a latency budget
    /// per turn, and a `Duration::MAX` here would park a busy worker for an hour.
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

    /// The most threads [`spawn_blocking`](crate::spawn_blocking) runs closures on at once
    /// (512 by default, as tokio's; 0 counts as 1). Threads start on demand and leave after
    /// 10 s idle; past the cap, closures wait in a queue. Shared by all workers, on both
    /// backends (files on epoll use a pool of their own: see
    /// [`blocking_threads`](Self::blocking_threads)).
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = ring_rt::Runtime::builder().max_blocking_threads(2).build()?;
    /// let tasks: Vec<_> = (0..4)
    ///     .map(|i| rt.handle().spawn_blocking(move || i + 1))
    ///     .collect();
    /// let sum: i32 = rt.block_on(async {
    ///     let mut sum = 0;
    ///     for task in tasks {
    ///         sum += task.await.unwrap();
    ///     }
    ///     sum
    /// });
    /// assert_eq!(sum, 10); // four closures, at most two at a time
    /// # std::io::Result::Ok(())
    /// ```
    pub fn max_blocking_threads(mut self, threads: usize) -> Builder {
        self.max_blocking_threads = threads.max(1);
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
        let core = match config.build_core(0) {
            Ok(core) => core,
            Err(err) => {
                if let Some(workers) = workers {
                    workers.shutdown(std::time::Instant::now() + crate::backend::SHUTDOWN_WAIT);
                }
                return Err(err);
            }
        };
        let mut shareds = vec![core.executor.shared.clone()];
        if let Some(workers) = &workers {
            shareds.extend(workers.shareds().iter().cloned());
        }
        let blocking = BlockingTasks::new(
            self.max_blocking_threads,
            config.backend.helper_cpus.clone(),
        );
        let set = Arc::new(WorkerSet::new(shareds, blocking));
        let _ = config.set.set(set.clone());
        Ok(Runtime { core, workers, set })
    }

    fn resolved(&self) -> io::Result<WorkerConfig> {
        self.check_limits()?;
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
            backend: BackendConfig {
                requested,
                mask,
                ring: RingConfig {
                    entries: self.entries,
                    sqpoll_idle_ms: self.sqpoll_idle_ms,
                    ..RingConfig::default()
                },
                recv_buffers: self.recv_buffers,
                fixed_buffers: self.fixed_buffers.unwrap_or_default(),
                helper_cpus: match self.pin_workers {
                    true => Some(Arc::new(crate::sys::allowed_cpus()?)),
                    false => None,
                },
                batch_wait: self.batch_wait,
                blocking_threads: self.blocking_threads,
                direct_slots: self.direct_slots,
            },
            pin_workers: self.pin_workers,
            spin_before_park: self.spin_before_park,
            set: Arc::default(),
        })
    }

    /// The longest [`batch_wait`](Self::batch_wait): a latency budget per turn, not a timeout
    /// (a busy worker whose batch never fills would sit this long with a completion ready).
    pub const MAX_BATCH_WAIT: Duration = Duration::from_millis(100);
    /// The most workers [`threads`](Self::threads) starts: each has its own thread and ring.
    pub const MAX_THREADS: usize = 4096;
    /// The most buffers in [`recv_buffers`](Self::recv_buffers)' pool: a buffer ring's limit.
    pub const MAX_RECV_BUFFERS: u16 = 32768;
    /// The most buffers in [`fixed_buffers`](Self::fixed_buffers)' pool: the kernel's
    /// `IORING_MAX_REG_BUFFERS`.
    pub const MAX_FIXED_BUFFERS: u16 = ring_core::register_buf::REG_BUFFERS_MAX;
    /// The longest buffer [`fixed_buffers`](Self::fixed_buffers) takes: the kernel's 1 GiB.
    pub const MAX_FIXED_BUFFER_LEN: usize = ring_core::register_buf::REG_BUFFER_LEN_MAX;

    /// The knobs whose bad values would otherwise surface late, or differently per backend.
    fn check_limits(&self) -> io::Result<()> {
        let invalid = |msg: String| Err(io::Error::new(io::ErrorKind::InvalidInput, msg));
        if self.threads > Self::MAX_THREADS {
            let max = Self::MAX_THREADS;
            return invalid(format!("threads({}): at most {max} workers", self.threads));
        }
        let RecvBuffers { count, len } = self.recv_buffers;
        let max = Self::MAX_RECV_BUFFERS;
        if count == 0 || count > max || len == 0 || i32::try_from(len).is_err() {
            return invalid(format!(
                "recv_buffers({count}, {len}): count must be 1..={max} and len 1..={}",
                i32::MAX
            ));
        }
        let (count_max, len_max) = (Self::MAX_FIXED_BUFFERS, Self::MAX_FIXED_BUFFER_LEN);
        if let Some(FixedBuffers { count, len }) = self
            .fixed_buffers
            .filter(|f| f.count == 0 || f.count > count_max || f.len == 0 || f.len > len_max)
        {
            return invalid(format!(
                "fixed_buffers({count}, {len}): count must be 1..={count_max} and len 1..={len_max}"
            ));
        }
        if self.batch_wait > Self::MAX_BATCH_WAIT {
            return invalid(format!(
                "batch_wait({:?}): at most {:?}, a latency budget per turn",
                self.batch_wait,
                Self::MAX_BATCH_WAIT
            ));
        }
        Ok(())
    }
}

/// Making a runtime: here beside the builder, so `runtime.rs` (below this file in the
/// layers) never names `Builder`.
impl Runtime {
    /// A runtime with the default configuration (see [`Builder::new`]): io_uring unless it
    /// is unavailable, `RING_RT_BACKEND` and `RING_FEATURES` honoured.
    ///
    /// # Errors
    /// A bad `RING_RT_BACKEND`/`RING_FEATURES` value (`InvalidInput`), or
    /// `RING_RT_BACKEND=uring` where io_uring is unavailable (`Unsupported`).
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = ring_rt::Runtime::new()?;
    /// println!("running on {}", rt.backend().kind);
    /// # std::io::Result::Ok(())
    /// ```
    pub fn new() -> io::Result<Runtime> {
        Builder::new().build()
    }

    /// A builder for configuring a runtime, the same as [`Builder::new`].
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = ring_rt::Runtime::builder().entries(64).threads(1).build()?;
    /// assert_eq!(rt.threads(), 1);
    /// # std::io::Result::Ok(())
    /// ```
    pub fn builder() -> Builder {
        Builder::new()
    }
}
