//! Extra workers for `Builder::threads(n)`: each a thread with its own core and ring.
//!
//! Work reaches another worker as a job on its inject queue, and the worker's eventfd wakes
//! its loop (io_uring's MSG_RING would save the eventfd write; the eventfd works on both
//! backends).

use std::cell::Cell;
use std::future::Future;
use std::io;
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::task::Poll;
use std::thread;
use std::time::{Duration, Instant};

use super::WorkerConfig;
use crate::executor::{Shared, MAIN_KEY};

thread_local! {
    /// Set on a worker thread when the runtime asks it to stop: the deadline of its drain.
    static STOP: Cell<Option<Instant>> = const { Cell::new(None) };
}

struct Worker {
    shared: Arc<Shared>,
    thread: Option<thread::JoinHandle<()>>,
    exited: Arc<Exited>,
}

/// Set when a worker thread ends (unwinding too), so shutdown can wait for it with a
/// deadline: `JoinHandle::join` has none.
#[derive(Default)]
struct Exited {
    done: Mutex<bool>,
    changed: Condvar,
}

impl Exited {
    fn set(&self) {
        *self.done.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.changed.notify_all();
    }

    /// Whether the thread ended by `deadline`.
    fn wait_until(&self, deadline: Instant) -> bool {
        let done = self.done.lock().unwrap_or_else(|e| e.into_inner());
        let left = deadline.saturating_duration_since(Instant::now());
        let (done, _) = self
            .changed
            .wait_timeout_while(done, left, |done| !*done)
            .unwrap_or_else(|e| e.into_inner());
        *done
    }
}

/// Sets `Exited` when the worker thread's closure ends, however it ends.
struct ExitSignal(Arc<Exited>);

impl Drop for ExitSignal {
    fn drop(&mut self) {
        self.0.set();
    }
}

/// How long past the drain deadline shutdown waits for a worker thread to end: its own
/// drain uses the same deadline, and then closes its ring.
const JOIN_GRACE: Duration = Duration::from_millis(200);

/// The workers beyond the calling thread.
pub(crate) struct Workers {
    workers: Mutex<Vec<Worker>>,
    shareds: Vec<Arc<Shared>>,
}

impl Workers {
    /// Starts `n` workers (indices 1..=n); fails if any cannot build its core.
    pub(crate) fn start(n: usize, config: Arc<WorkerConfig>) -> io::Result<Arc<Workers>> {
        let mut workers = Vec::new(); // not with_capacity(n): n comes from the user
        let mut failure = None;
        for index in 1..=n {
            match start_one(index, config.clone()) {
                Ok(worker) => workers.push(worker),
                Err(err) => {
                    failure = Some(err);
                    break;
                }
            }
        }
        let shareds = workers.iter().map(|w| w.shared.clone()).collect();
        let all = Arc::new(Workers {
            workers: Mutex::new(workers),
            shareds,
        });
        match failure {
            None => Ok(all),
            Some(err) => {
                all.shutdown(Instant::now() + crate::backend::SHUTDOWN_WAIT);
                Err(err)
            }
        }
    }

    /// Number of extra workers.
    pub(crate) fn len(&self) -> usize {
        self.shareds.len()
    }

    /// The extra workers' shared parts, in index order (worker 1 first).
    pub(crate) fn shareds(&self) -> &[Arc<Shared>] {
        &self.shareds
    }

    /// Stops every worker and waits for its thread: each drops its tasks and drains its
    /// ring, waiting for the kernel until `deadline`. A worker still inside a task then (a
    /// task that blocks its thread) is not waited for: it stops, drops its tasks and
    /// closes its ring on its own once that task returns.
    pub(crate) fn shutdown(&self, deadline: Instant) {
        let mut workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
        for worker in workers.iter() {
            // Before the stop goes out: a spawn after this says Cancelled, even on a worker
            // that is still inside a task when shutdown returns.
            worker.shared.stop_taking_spawns();
            let shared = worker.shared.clone();
            // Woken by its eventfd: this thread now waits for the worker, so a MSG_RING
            // queued in its own ring (an outer runtime's worker) would leave too late.
            worker.shared.push_job_now(Box::new(move || {
                STOP.with(|s| s.set(Some(deadline)));
                shared.schedule(MAIN_KEY);
            }));
        }
        let join_by = deadline.checked_add(JOIN_GRACE).unwrap_or(deadline);
        for (i, worker) in workers.iter_mut().enumerate() {
            let Some(thread) = worker.thread.take() else {
                continue;
            };
            if worker.exited.wait_until(join_by) {
                let _ = thread.join();
            } else {
                tracing::warn!(target: "ring_rt", worker = i + 1, "a worker is still inside a task at the shutdown deadline; it is left to stop on its own when that task returns");
            }
        }
    }
}

/// The deadline of a stopping worker's drain: the runtime's, while its shutdown still
/// waits; a worker that gets here after it (left inside a task at the deadline, or in a
/// task's destructor, no longer waited for) drains on its own time, as a runtime with no
/// deadline does. Draining with a deadline already past would wait for no cancel and
/// leave the ops' memory to leak, since it may not be freed while the kernel owns it.
fn drain_deadline(stop: Option<Instant>, now: Instant) -> Instant {
    match stop {
        Some(deadline) if deadline > now => deadline,
        _ => now + crate::backend::SHUTDOWN_WAIT,
    }
}

fn start_one(index: usize, config: Arc<WorkerConfig>) -> io::Result<Worker> {
    let (ready_tx, ready_rx) = mpsc::channel();
    let exited = Arc::new(Exited::default());
    let signal = ExitSignal(exited.clone());
    let thread = thread::Builder::new()
        .name(format!("ring-rt-worker-{index}"))
        .spawn(move || {
            let _signal = signal;
            let core = match config.build_core(index) {
                Ok(core) => core,
                Err(err) => {
                    let _ = ready_tx.send(Err(err));
                    return;
                }
            };
            // Running from now on as far as spawns are concerned: its loop starts at once
            // (worker 0, unlike these, runs only inside block_on).
            let shared = core.executor.shared.clone();
            shared.is_running.store(true, std::sync::atomic::Ordering::Relaxed);
            let _ = ready_tx.send(Ok(shared));
            // A panic that escapes the loop (a waker that panicked: task destructors'
            // panics stay in their tasks) is reported, and the worker goes on serving.
            while let Err(payload) =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| core.block_on(stopped())))
            {
                let what = panic_message(&payload);
                tracing::error!(target: "ring_rt", worker = index, panic = %what, "a panic escaped the worker's loop; it keeps running");
                // Its payload may panic as it drops, too: that must not end the thread.
                crate::executor::task::discard_payload(payload);
            }
            // Decided after the tasks are dropped: a destructor may block past the deadline.
            core.shutdown(|| drain_deadline(STOP.with(Cell::get), Instant::now()));
        })?;
    match ready_rx.recv() {
        Ok(Ok(shared)) => Ok(Worker {
            shared,
            thread: Some(thread),
            exited,
        }),
        Ok(Err(err)) => {
            let _ = thread.join();
            Err(err)
        }
        Err(_) => Err(io::Error::other(format!(
            "worker {index} died while starting"
        ))),
    }
}

/// Completes once this worker thread has been asked to stop.
fn stopped() -> impl Future<Output = ()> {
    std::future::poll_fn(|_| {
        if STOP.with(|s| s.get().is_some()) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
}

/// A panic payload's message, if it has one.
pub(super) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    crate::executor::task::panic_text(payload)
        .unwrap_or("a non-string panic payload")
        .to_string()
}
