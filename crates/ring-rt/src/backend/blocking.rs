//! The blocking pool: a bounded set of threads running syscalls that have no readiness
//! (files, fsync, open) for the epoll backend. Completions go back to the loop through a
//! queue and an eventfd; when every thread is busy, jobs wait in the queue (callers wait)
//! rather than more threads being spawned.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;

use ring_core::user_data::OpId;

use crate::op::BlockingJob;

/// Threads per worker for blocking file ops unless `Builder::blocking_threads` says
/// otherwise, on both backends: 4 per CPU (io-wq's own default on io_uring), but at least
/// 16, so that a small machine still overlaps many syncs (one fsync barely uses a CPU).
pub(crate) fn default_threads() -> usize {
    let cpus = thread::available_parallelism().map_or(1, |n| n.get());
    (4 * cpus).max(16)
}

struct Queue {
    jobs: VecDeque<(OpId, BlockingJob)>,
    idle: usize,
    threads: usize,
    closed: bool,
}

struct Inner {
    queue: Mutex<Queue>,
    available: Condvar,
    done: Mutex<Vec<(OpId, i32)>>,
    has_done: AtomicBool,
    /// Written when a completion is queued; the epoll loop watches it.
    notify: OwnedFd,
}

pub(crate) struct BlockingPool {
    inner: Arc<Inner>,
    handles: Vec<thread::JoinHandle<()>>,
    /// The most threads this pool starts; jobs beyond them wait in the queue.
    threads_max: usize,
}

impl BlockingPool {
    pub(crate) fn new(threads_max: usize) -> io::Result<BlockingPool> {
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
            done: Mutex::new(Vec::new()),
            has_done: AtomicBool::new(false),
            // SAFETY: a fresh eventfd owned by nobody else.
            notify: unsafe { OwnedFd::from_raw_fd(fd) },
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

    /// Queues `job` for op `id`, starting a thread if none is idle and the cap allows.
    pub(crate) fn submit(&mut self, id: OpId, job: BlockingJob) -> io::Result<()> {
        let mut q = lock(&self.inner.queue);
        q.jobs.push_back((id, job));
        let spawn = q.idle == 0 && q.threads < self.threads_max;
        if spawn {
            q.threads += 1;
        }
        drop(q);
        self.inner.available.notify_one();
        if spawn {
            let inner = self.inner.clone();
            let handle = thread::Builder::new()
                .name("ring-rt-blocking".into())
                .spawn(move || worker(&inner))
                .inspect_err(|_| lock(&self.inner.queue).threads -= 1)?;
            self.handles.push(handle);
        }
        Ok(())
    }

    /// Removes a job that has not started; true if it was still queued.
    pub(crate) fn cancel(&self, id: OpId) -> bool {
        let mut q = lock(&self.inner.queue);
        let before = q.jobs.len();
        q.jobs.retain(|(queued, _)| *queued != id);
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
        std::mem::take(&mut *lock(&self.inner.done))
    }

    /// True when completions are waiting to be taken.
    pub(crate) fn has_done(&self) -> bool {
        self.inner.has_done.load(Ordering::Acquire)
    }
}

impl Drop for BlockingPool {
    fn drop(&mut self) {
        lock(&self.inner.queue).closed = true;
        self.inner.available.notify_all();
        for handle in self.handles.drain(..) {
            let _ = handle.join();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn worker(inner: &Inner) {
    while let Some((id, job)) = next_job(inner) {
        let res = job();
        lock(&inner.done).push((id, res));
        if !inner.has_done.swap(true, Ordering::AcqRel) {
            let one = 1u64;
            // SAFETY: writes 8 bytes from a live u64 to our eventfd.
            unsafe { libc::write(inner.notify.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }
    }
}

fn next_job(inner: &Inner) -> Option<(OpId, BlockingJob)> {
    let mut q = lock(&inner.queue);
    loop {
        if let Some(job) = q.jobs.pop_front() {
            return Some(job);
        }
        if q.closed {
            q.threads -= 1;
            return None;
        }
        q.idle += 1;
        q = inner.available.wait(q).unwrap_or_else(|e| e.into_inner());
        q.idle -= 1;
    }
}
