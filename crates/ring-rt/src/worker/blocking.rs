//! The pool `spawn_blocking` runs closures on, on both backends: threads started on
//! demand up to a cap, each leaving after a while idle. (epoll's file ops use a pool of
//! their own, tied to its op table: `backend/blocking.rs`.)

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::executor::task::discard_payload;

/// A closure for the pool.
pub(crate) type BlockingTask = Box<dyn FnOnce() + Send + 'static>;

/// How long a pool thread waits for work before it leaves.
const IDLE_KEEP: Duration = Duration::from_secs(10);

/// The default cap on threads, as tokio's (`Builder::max_blocking_threads`).
pub(crate) const DEFAULT_MAX_THREADS: usize = 512;

#[derive(Default)]
struct State {
    queue: VecDeque<BlockingTask>,
    /// Threads alive, and how many of them wait for work.
    threads: usize,
    idle: usize,
    is_closed: bool,
}

struct Inner {
    state: Mutex<State>,
    work: Condvar,
    /// Signalled when the last thread leaves (shutdown waits for it).
    gone: Condvar,
    max_threads: usize,
    /// Where its threads run when the workers are pinned.
    cpus: crate::sys::HelperCpus,
}

/// The runtime's pool for `spawn_blocking`; cheap to clone.
#[derive(Clone)]
pub(crate) struct BlockingTasks {
    inner: Arc<Inner>,
}

impl BlockingTasks {
    pub(crate) fn new(max_threads: usize, cpus: crate::sys::HelperCpus) -> BlockingTasks {
        BlockingTasks {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                work: Condvar::new(),
                gone: Condvar::new(),
                max_threads: max_threads.max(1),
                cpus,
            }),
        }
    }

    /// Queues `task`; a thread is started for it unless an idle one is free for it (idle
    /// threads not already claimed by queued tasks) or the cap is reached
    /// (it then waits for a thread to finish its task). `Err(task)` if the pool is closed
    /// (the runtime is gone), or no thread runs and none could start.
    pub(crate) fn push(&self, task: BlockingTask) -> Result<(), BlockingTask> {
        let mut state = self.inner.lock();
        if state.is_closed {
            return Err(task);
        }
        state.queue.push_back(task);
        // Each queued task needs a thread of its own: an idle thread counts as idle until
        // it runs again, so two pushes in a row must not both count on the same one.
        if state.queue.len() <= state.idle {
            self.inner.work.notify_one();
            return Ok(());
        }
        if state.threads >= self.inner.max_threads {
            return Ok(());
        }
        state.threads += 1;
        drop(state);
        let inner = self.inner.clone();
        let started = thread::Builder::new()
            .name("ring-rt-blocking".into())
            .spawn(move || inner.serve());
        if started.is_ok() {
            return Ok(());
        }
        // No thread: if none runs to take it later, the task is handed back, never left.
        let mut state = self.inner.lock();
        state.threads -= 1;
        if state.threads == 0 {
            if let Some(task) = state.queue.pop_back() {
                return Err(task);
            }
        }
        Ok(())
    }

    /// Closes the pool: queued tasks are dropped (their handles say `Cancelled`), then it
    /// waits until `deadline` for running ones; a task still running then (stuck in a
    /// syscall) is left to finish on its own thread.
    pub(crate) fn close(&self, deadline: Instant) {
        let queued = {
            let mut state = self.inner.lock();
            state.is_closed = true;
            std::mem::take(&mut state.queue)
        };
        self.inner.work.notify_all();
        for task in queued {
            if let Err(payload) =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(task)))
            {
                discard_payload(payload);
            }
        }
        let state = self.inner.lock();
        let left = deadline.saturating_duration_since(Instant::now());
        let _ = self
            .inner
            .gone
            .wait_timeout_while(state, left, |state| state.threads > 0)
            .unwrap_or_else(|e| e.into_inner());
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A pool thread: runs tasks until the pool closes or it has idled for `IDLE_KEEP`.
    fn serve(&self) {
        crate::sys::unpin_helper(&self.cpus);
        let mut state = self.lock();
        loop {
            if let Some(task) = state.queue.pop_front() {
                drop(state);
                // A panic belongs to the task (its handle reports it); the thread goes on.
                if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(task)) {
                    // Its payload too: one that panics as it drops must not end the thread.
                    discard_payload(payload);
                }
                state = self.lock();
                continue;
            }
            if state.is_closed {
                break;
            }
            state.idle += 1;
            let (next, timed_out) = match self.work.wait_timeout(state, IDLE_KEEP) {
                Ok((s, t)) => (s, t.timed_out()),
                Err(poisoned) => {
                    let (s, t) = poisoned.into_inner();
                    (s, t.timed_out())
                }
            };
            state = next;
            state.idle -= 1;
            if timed_out && state.queue.is_empty() {
                break;
            }
        }
        state.threads -= 1;
        if state.threads == 0 {
            self.gone.notify_all();
        }
    }
}
