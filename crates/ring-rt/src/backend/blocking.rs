//! The blocking pool: a bounded set of threads running syscalls that have no readiness
//! (files, fsync, open) for the epoll backend. Completions go back to the loop through a
//! queue and an eventfd; when every thread is busy, jobs wait in the queue (callers wait)
//! rather than more threads being spawned.
//!
//! A job never outlives its op: it is either run by a thread and reported, or removed from
//! the queue (cancelled, or no thread could ever start to run it) and reported as never run.
//! Dropping the pool waits for busy threads only up to a bound: a thread stuck in a syscall
//! (an `open` of a FIFO nobody writes) is left to finish on its own.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Instant;

use ring_core::user_data::OpId;

/// A syscall to run on the blocking pool (epoll backend): it returns what the kernel would
/// post as the CQE's result, `>= 0` or `-errno`. Only ring-rt's own ops make these; the
/// raw addresses it holds point at memory its op keeps until the completion is reported.
///
/// # Examples
///
/// ```
/// use ring_rt::backend::BlockingJob;
///
/// let job: BlockingJob = Box::new(|| -libc::EOPNOTSUPP);
/// assert_eq!(job(), -libc::EOPNOTSUPP);
/// ```
pub type BlockingJob = Box<dyn FnOnce() -> i32 + Send + 'static>;

/// Threads per worker for blocking file ops unless `Builder::blocking_threads` says
/// otherwise, on both backends: 4 per CPU (io-wq's own default on io_uring), but at least
/// 16, so that a small machine still overlaps many syncs (one fsync barely uses a CPU).
pub(crate) fn default_threads() -> usize {
    let cpus = thread::available_parallelism().map_or(1, |n| n.get());
    (4 * cpus).max(16)
}

/// A queued job: its op, the syscall, and whether a successful result is a new fd.
struct Job {
    id: OpId,
    run: BlockingJob,
    returns_fd: bool,
}

/// What the threads and the loop share, under one lock.
struct Queue {
    jobs: VecDeque<Job>,
    /// Threads waiting for a job.
    idle: usize,
    /// Threads alive (running a job or idle).
    threads: usize,
    /// The pool is being dropped: idle threads exit.
    closed: bool,
}

/// Results for the loop, under their own lock (a job's completion takes only this one).
#[derive(Default)]
struct Done {
    results: Vec<(OpId, i32)>,
    /// The pool stopped waiting for busy threads: a result they report now reaches
    /// nobody, so a thread releases it itself (closes a new fd) instead of reporting it.
    given_up: bool,
}

struct Inner {
    queue: Mutex<Queue>,
    /// Signals idle threads that a job (or the close) arrived, and the dropping pool that a
    /// thread exited.
    available: Condvar,
    done: Mutex<Done>,
    has_done: AtomicBool,
    /// Written when a completion is queued; the epoll loop watches it.
    notify: OwnedFd,
    /// Where its threads run when the workers are pinned.
    cpus: crate::sys::HelperCpus,
}

pub(crate) struct BlockingPool {
    inner: Arc<Inner>,
    handles: Vec<thread::JoinHandle<()>>,
    /// The most threads this pool starts; jobs beyond them wait in the queue.
    threads_max: usize,
}

impl BlockingPool {
    pub(crate) fn new(
        threads_max: usize,
        cpus: crate::sys::HelperCpus,
    ) -> io::Result<BlockingPool> {
        // SAFETY: eventfd takes no pointers; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let inner = Arc::new(Inner {
            queue: Mutex::new(Queue {
                jobs: VecDeque::new(),
                idle: 0,
                threads: 0,
                closed: false,
            }),
            available: Condvar::new(),
            done: Mutex::new(Done::default()),
            has_done: AtomicBool::new(false),
            // SAFETY: a fresh eventfd owned by nobody else.
            notify: unsafe { OwnedFd::from_raw_fd(fd) },
            cpus,
        });
        Ok(BlockingPool {
            inner,
            handles: Vec::new(),
            threads_max: threads_max.max(1),
        })
    }

    /// The eventfd that becomes readable when completions are waiting.
    pub(crate) fn notify_fd(&self) -> RawFd {
        self.inner.notify.as_raw_fd()
    }

    /// Queues `job` for op `id`, starting a thread if none is idle and the cap allows. If
    /// no thread can start (a pids limit, memory) and none is alive to run the job later,
    /// the job is taken back out and the error returned: it never runs.
    /// `returns_fd`: a successful result is a new fd (an open), closed by the thread if
    /// nobody can take it any more.
    pub(crate) fn submit(
        &mut self,
        id: OpId,
        job: BlockingJob,
        returns_fd: bool,
    ) -> io::Result<()> {
        let mut q = lock(&self.inner.queue);
        q.jobs.push_back(Job {
            id,
            run: job,
            returns_fd,
        });
        let spawn = q.idle == 0 && q.threads < self.threads_max;
        if spawn {
            q.threads += 1;
        }
        drop(q);
        self.inner.available.notify_one();
        if !spawn {
            return Ok(());
        }
        let inner = self.inner.clone();
        let spawned = thread::Builder::new()
            .name("ring-rt-blocking".into())
            .spawn(move || worker(&inner));
        match spawned {
            Ok(handle) => {
                self.handles.push(handle);
                Ok(())
            }
            Err(err) => self.spawn_failed(id, err),
        }
    }

    /// A thread for `id`'s job could not start. With another thread alive the job waits
    /// for it, as beyond the cap; with none, it would wait for ever: take it back.
    fn spawn_failed(&mut self, id: OpId, err: io::Error) -> io::Result<()> {
        let mut q = lock(&self.inner.queue);
        q.threads -= 1;
        if q.threads > 0 {
            return Ok(());
        }
        let before = q.jobs.len();
        q.jobs.retain(|job| job.id != id);
        if q.jobs.len() == before {
            // A thread took it in the meantime (and has since exited): it ran, and its
            // completion is on its way.
            return Ok(());
        }
        Err(err)
    }

    /// Removes a job that has not started; true if it was still queued (it will never run).
    pub(crate) fn cancel(&self, id: OpId) -> bool {
        let mut q = lock(&self.inner.queue);
        let before = q.jobs.len();
        q.jobs.retain(|job| job.id != id);
        q.jobs.len() != before
    }

    /// Completions since the last call.
    pub(crate) fn take_done(&self) -> Vec<(OpId, i32)> {
        if !self.inner.has_done.swap(false, Ordering::AcqRel) {
            return Vec::new();
        }
        let mut value = 0u64;
        // SAFETY: reads 8 bytes into a live u64 from our non-blocking eventfd.
        unsafe { libc::read(self.notify_fd(), (&mut value as *mut u64).cast(), 8) };
        std::mem::take(&mut lock(&self.inner.done).results)
    }

    /// True when completions are waiting to be taken.
    pub(crate) fn has_done(&self) -> bool {
        self.inner.has_done.load(Ordering::Acquire)
    }

    /// Stops the pool: queued jobs are dropped unrun (their ops were cancelled by then),
    /// idle threads exit, and busy threads are waited for until `deadline`. A thread still
    /// busy then (stuck in a syscall) is left to finish on its own: it holds only the
    /// shared state (its job's memory belongs to an op the backend keeps or leaks), and it
    /// exits once its syscall returns.
    pub(crate) fn close(&mut self, deadline: Instant) {
        let mut q = lock(&self.inner.queue);
        if q.closed {
            // Closed already (by the runtime's drain): nothing more to wait for.
            return;
        }
        q.closed = true;
        let unrun = std::mem::take(&mut q.jobs);
        self.inner.available.notify_all();
        let left = deadline.saturating_duration_since(Instant::now());
        q = self
            .inner
            .available
            .wait_timeout_while(q, left, |q| q.threads > 0)
            .unwrap_or_else(|e| e.into_inner())
            .0;
        let all_exited = q.threads == 0;
        // Decided under the results' lock: a thread reports either before this (its
        // result is taken by the drain) or after (it releases the result itself).
        lock(&self.inner.done).given_up = !all_exited;
        drop(q);
        drop(unrun);
        if all_exited {
            for handle in self.handles.drain(..) {
                let _ = handle.join();
            }
        } else {
            // Detached: joining would wait for the stuck syscall.
            self.handles.clear();
        }
    }
}

impl Drop for BlockingPool {
    fn drop(&mut self) {
        if !self.handles.is_empty() {
            self.close(Instant::now());
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn worker(inner: &Inner) {
    crate::sys::unpin_helper(&inner.cpus);
    while let Some(job) = next_job(inner) {
        let res = (job.run)();
        if !report(inner, job.id, res) && job.returns_fd && res >= 0 {
            // SAFETY: the job's result is a new fd nobody else owns, and nobody ever will:
            // the pool gave up on this thread, so the result reaches no op.
            unsafe { ring_core::release::close_quietly(res) };
        }
    }
}

/// Queues `id`'s result for the loop; false if the pool gave up on this thread (checked
/// and queued under one lock, so `close` cannot give up in between).
fn report(inner: &Inner, id: OpId, res: i32) -> bool {
    let mut done = lock(&inner.done);
    if done.given_up {
        return false;
    }
    done.results.push((id, res));
    // Flagged before the lock goes: a `take_done` seeing no flag finds no result either
    // (else the drain after `close` could miss one, and its op would be abandoned).
    let first = !inner.has_done.swap(true, Ordering::AcqRel);
    drop(done);
    if first {
        let one = 1u64;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd.
        unsafe { libc::write(inner.notify.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }
    true
}

/// The next job, or `None` once the pool is closed (the thread then exits, counted out).
fn next_job(inner: &Inner) -> Option<Job> {
    let mut q = lock(&inner.queue);
    loop {
        if q.closed {
            q.threads -= 1;
            // Wakes a pool waiting in `close` for its threads.
            inner.available.notify_all();
            return None;
        }
        if let Some(job) = q.jobs.pop_front() {
            return Some(job);
        }
        q.idle += 1;
        q = inner.available.wait(q).unwrap_or_else(|e| e.into_inner());
        q.idle -= 1;
    }
}
