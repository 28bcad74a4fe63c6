//! Several workers at their edges: a wake sent as `block_on` ends, a waker that panics,
//! a spawn made just before `block_on` returns, handles that outlive the runtime, a worker
//! stuck in a task at shutdown, the blocking pool under back-to-back pushes. Each test is
//! one finding of review F, H or J (RELIABILITY.md). Both backends.

#[macro_use]
mod support;

use std::future::{Future, IntoFuture};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use libtest_mimic::Completion;
use ring_rt::buf::IoBuf;
use ring_rt::{BackendKind, Builder, Runtime};
use support::{Outcome, PanicsAgain, WakePanicsTwice};

fn main() {
    support::run(&[
        (
            "a_spawn_cancelled_before_it_ran_yields_once_when_awaited",
            a_spawn_cancelled_before_it_ran_yields_once_when_awaited,
        ),
        (
            "a_blocking_spawn_refused_before_it_ran_yields_once_when_awaited",
            a_blocking_spawn_refused_before_it_ran_yields_once_when_awaited,
        ),
        (
            "a_task_aborted_after_it_ran_gives_cancelled_at_the_first_poll",
            a_task_aborted_after_it_ran_gives_cancelled_at_the_first_poll,
        ),
        (
            "a_wake_sent_as_block_on_returns_reaches_its_worker",
            a_wake_sent_as_block_on_returns_reaches_its_worker,
        ),
        (
            "a_wake_sent_as_block_on_unwinds_reaches_its_worker",
            a_wake_sent_as_block_on_unwinds_reaches_its_worker,
        ),
        (
            "back_to_back_blocking_closures_each_get_a_thread",
            back_to_back_blocking_closures_each_get_a_thread,
        ),
        (
            "a_panicking_join_waker_still_frees_the_task",
            a_panicking_join_waker_still_frees_the_task,
        ),
        (
            "spawns_from_block_on_do_not_stall_on_worker_0",
            spawns_from_block_on_do_not_stall_on_worker_0,
        ),
        (
            "handles_that_outlive_the_runtime_keep_no_ring_open",
            handles_that_outlive_the_runtime_keep_no_ring_open,
        ),
        (
            "shutdown_timeout_bounds_a_worker_stuck_in_a_task",
            shutdown_timeout_bounds_a_worker_stuck_in_a_task,
        ),
        (
            "shutdown_timeout_bounds_a_running_blocking_closure",
            shutdown_timeout_bounds_a_running_blocking_closure,
        ),
        (
            "an_aborted_remote_spawn_never_builds_its_future",
            an_aborted_remote_spawn_never_builds_its_future,
        ),
        (
            "a_task_destructor_blocking_past_the_deadline_leaks_no_op",
            a_task_destructor_blocking_past_the_deadline_leaks_no_op,
        ),
        (
            "worker_0_cancels_its_ops_when_the_deadline_has_passed",
            worker_0_cancels_its_ops_when_the_deadline_has_passed,
        ),
        (
            "spawns_after_shutdown_are_cancelled_with_a_worker_left_in_a_task",
            spawns_after_shutdown_are_cancelled_with_a_worker_left_in_a_task,
        ),
        (
            "a_task_spawning_and_awaiting_in_a_loop_lets_its_worker_stop",
            a_task_spawning_and_awaiting_in_a_loop_lets_its_worker_stop,
        ),
        (
            "a_waker_panicking_in_the_shutdown_drain_is_not_raised",
            a_waker_panicking_in_the_shutdown_drain_is_not_raised,
        ),
        (
            "a_stale_join_waker_whose_panic_panics_again_is_contained",
            a_stale_join_waker_whose_panic_panics_again_is_contained,
        ),
        (
            "a_handle_dropped_after_its_task_panicked_with_a_payload_that_panics_again_is_quiet",
            a_handle_dropped_after_its_task_panicked_with_a_payload_that_panics_again_is_quiet,
        ),
        (
            "a_refused_spawn_whose_capture_panics_in_drop_is_still_cancelled",
            a_refused_spawn_whose_capture_panics_in_drop_is_still_cancelled,
        ),
        (
            "a_dropped_handle_lets_its_waker_go_at_once",
            a_dropped_handle_lets_its_waker_go_at_once,
        ),
        (
            "an_aborted_queued_spawn_whose_capture_panics_in_drop_stays_quiet",
            an_aborted_queued_spawn_whose_capture_panics_in_drop_stays_quiet,
        ),
        (
            "a_handle_dropped_while_its_blocking_job_finishes_lets_no_panic_out",
            a_handle_dropped_while_its_blocking_job_finishes_lets_no_panic_out,
        ),
        (
            "a_detached_output_whose_panic_panics_again_is_contained",
            a_detached_output_whose_panic_panics_again_is_contained,
        ),
        (
            "a_wake_whose_panic_panics_again_leaves_the_worker_serving",
            a_wake_whose_panic_panics_again_leaves_the_worker_serving,
        ),
        (
            "a_stale_op_waker_whose_panic_panics_again_leaves_shutdown_quiet",
            a_stale_op_waker_whose_panic_panics_again_leaves_shutdown_quiet,
        ),
        (
            "a_wake_queued_by_a_busy_worker_holds_back_no_other_wake",
            a_wake_queued_by_a_busy_worker_holds_back_no_other_wake,
        ),
        (
            "a_burst_of_wakes_of_block_on_unparks_once",
            a_burst_of_wakes_of_block_on_unparks_once,
        ),
        (
            "a_runtime_dropped_inside_another_stops_its_workers_at_once",
            a_runtime_dropped_inside_another_stops_its_workers_at_once,
        ),
        (
            "shutdown_timeout_of_duration_max_waits_for_a_stuck_worker",
            shutdown_timeout_of_duration_max_waits_for_a_stuck_worker,
        ),
        (
            "wakes_from_plain_threads_get_through_a_busy_workers_queued_ones",
            wakes_from_plain_threads_get_through_a_busy_workers_queued_ones,
        ),
    ])
}

/// How long the work that `shutdown_in_100_ms` must not wait for stays stuck: twice the
/// bound it checks, so a shutdown that waits for it fails however the machine pauses.
const STUCK: Duration = Duration::from_secs(4);

/// `rt.shutdown_timeout(100 ms)`, which must return within 2 s (the deadline, the 200 ms
/// it waits past it for worker threads, and room for a paused machine).
fn shutdown_in_100_ms(rt: Runtime) -> Result<(), String> {
    let start = Instant::now();
    rt.shutdown_timeout(Duration::from_millis(100));
    let took = start.elapsed();
    // 300 ms at most (the timeout and the threads' join grace); the rest is room for a
    // paused VM. A shutdown that waits for the work stuck past its deadline (`STUCK`, 4 s)
    // or takes the 5 s default fails.
    check!(
        took < Duration::from_millis(2000),
        "shutdown_timeout(100 ms) took {took:?}"
    );
    Ok(())
}

/// Drops `rt`. A runtime is not `Send`, so a drop that hangs (a worker that never hears
/// the stop) cannot be waited out on another thread: a watchdog ends the whole test
/// process with a failure after `limit` instead.
fn drop_within(rt: Runtime, limit: Duration) -> Result<(), String> {
    let (tx, rx) = mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if rx.recv_timeout(limit) == Err(mpsc::RecvTimeoutError::Timeout) {
            eprintln!("FAILED: dropping the runtime took more than {limit:?}");
            std::process::exit(101);
        }
    });
    drop(rt);
    drop(tx);
    watchdog
        .join()
        .map_err(|_| "the watchdog panicked".to_string())
}

/// A task on worker 1 awaits a channel; worker 0's `block_on` sends on it in its last
/// poll (or as its future is dropped). The wake to worker 1 (a MSG_RING on io_uring,
/// pushed into worker 0's ring) must go out before `block_on` returns: it used to wait
/// for worker 0's next enter, and worker 1 slept for ever, its runtime's drop too.
fn a_wake_sent_as_block_on_returns_reaches_its_worker(kind: BackendKind) -> Outcome {
    for in_drop in [false, true] {
        let rt = runtime!(kind, Builder::default().threads(2));
        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        let (done_tx, done_rx) = mpsc::channel();
        let task = rt.handle().spawn_on(1, async move {
            let _ = done_tx.send(rx.await.ok());
        })?;
        // Worker 1 parks, awaiting `rx`.
        std::thread::sleep(Duration::from_millis(50));
        if in_drop {
            // The future owns `tx`: it is dropped (waking the receiver) after its last poll.
            rt.block_on(std::future::poll_fn(move |_| {
                let _ = &tx;
                Poll::Ready(())
            }));
        } else {
            rt.block_on(async move {
                let _ = tx.send(7);
            });
        }
        let got = done_rx.recv_timeout(Duration::from_secs(5));
        let want = if in_drop { None } else { Some(7) };
        check!(
            got == Ok(want),
            "in_drop {in_drop}: worker 1's task was not woken: {got:?}"
        );
        // It sent before it returned: give it the moment to finish.
        let start = Instant::now();
        while !task.is_finished() && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        check!(task.is_finished(), "the task did not finish");
        drop_within(rt, Duration::from_secs(10))?;
    }
    Ok(Completion::Completed)
}

/// The same wake, sent by a `block_on` whose future then panics: the unwinding `block_on`
/// still submits it.
fn a_wake_sent_as_block_on_unwinds_reaches_its_worker(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(2));
    let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
    let (done_tx, done_rx) = mpsc::channel();
    let _task = rt.handle().spawn_on(1, async move {
        let _ = done_tx.send(rx.await.ok());
    })?;
    std::thread::sleep(Duration::from_millis(50));
    let unwound = support::expecting_panics(|| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rt.block_on(async move {
                let _ = tx.send(7);
                panic!("the handler failed after replying");
            })
        }))
    });
    check!(unwound.is_err(), "block_on did not pass the panic on");
    let got = done_rx.recv_timeout(Duration::from_secs(5));
    check!(got == Ok(Some(7)), "worker 1's task was not woken: {got:?}");
    drop_within(rt, Duration::from_secs(10))?;
    Ok(Completion::Completed)
}

/// Two closures pushed back to back while one pool thread idles: the second needs a thread
/// of its own (the first waits for it). Both used to go to the one idle thread, which ran
/// them one after the other: a deadlock with a blocking receive.
fn back_to_back_blocking_closures_each_get_a_thread(kind: BackendKind) -> Outcome {
    for round in 0..10 {
        let rt = runtime!(kind, Builder::default().threads(1));
        let handle = rt.handle();
        rt.block_on(handle.spawn_blocking(|| ()))
            .map_err(|e| e.to_string())?;
        // The pool's one thread is idle now.
        std::thread::sleep(Duration::from_millis(5));
        let (tx, rx) = mpsc::channel::<()>();
        let waiter = handle.spawn_blocking(move || rx.recv_timeout(Duration::from_secs(5)).is_ok());
        let sender = handle.spawn_blocking(move || {
            let _ = tx.send(());
        });
        let met = rt.block_on(waiter).map_err(|e| e.to_string())?;
        check!(
            met,
            "round {round}: the second closure never ran beside the first"
        );
        rt.block_on(sender).map_err(|e| e.to_string())?;
    }
    Ok(Completion::Completed)
}

/// Panics when woken.
struct PanickingWaker;

impl Wake for PanickingWaker {
    fn wake(self: Arc<Self>) {
        panic!("the awaiter's waker panicked");
    }
}

/// A JoinHandle polled with a waker that panics when the task finishes: the panic
/// (reported by the worker's loop) must not leave the task's slot behind, which kept
/// the worker counted as loaded for ever.
fn a_panicking_join_waker_still_frees_the_task(kind: BackendKind) -> Outcome {
    support::expecting_panics(|| panicking_join_wakers_free_their_tasks(kind))
}

fn panicking_join_wakers_free_their_tasks(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(2));
    let handle = rt.handle();
    for _ in 0..5 {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let mut task = handle.spawn_on(1, async move {
            let _ = rx.await;
        })?;
        let waker = Waker::from(Arc::new(PanickingWaker));
        let first = std::pin::Pin::new(&mut task).poll(&mut Context::from_waker(&waker));
        check!(first.is_pending(), "the task finished before its message");
        let _ = tx.send(());
        let start = Instant::now();
        while !task.is_finished() && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(2));
        }
        check!(task.is_finished(), "the task never finished");
    }
    let start = Instant::now();
    let alive = loop {
        let alive: Vec<u64> = rt.metrics().workers.iter().map(|w| w.tasks_alive).collect();
        if alive.iter().all(|&n| n == 0) || start.elapsed() > Duration::from_secs(5) {
            break alive;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    check!(
        alive.iter().all(|&n| n == 0),
        "tasks alive per worker: {alive:?}"
    );
    // The worker still serves.
    let out = rt.block_on(handle.spawn_on(1, async { 5 })?);
    check!(
        matches!(out, Ok(5)),
        "worker 1 no longer runs tasks: {out:?}"
    );
    Ok(Completion::Completed)
}

/// Spawns made through a handle inside `block_on`, then awaited after it returned: worker
/// 0 runs only inside `block_on`, so a task put there would never run.
fn spawns_from_block_on_do_not_stall_on_worker_0(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(2));
    let handle = rt.handle();
    let tasks = rt.block_on(async {
        (0..8)
            .map(|i| handle.spawn(async move { i }))
            .collect::<Vec<_>>()
    });
    for (i, task) in tasks.into_iter().enumerate() {
        let out = support::poll_on_thread(task, Duration::from_secs(5));
        check!(
            matches!(out, Some(Ok(n)) if n == i),
            "task {i} did not run after block_on returned: {out:?}"
        );
    }
    Ok(Completion::Completed)
}

/// This process's fds that are io_uring instances or epoll instances.
fn ring_fds() -> usize {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return 0;
    };
    dir.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|p| {
            let p = p.to_string_lossy();
            p.contains("io_uring") || p.contains("eventpoll")
        })
        .count()
}

/// A `Handle`, a `JoinHandle` and a task waker kept after the runtime is dropped hold its
/// workers' wake-up eventfds, but no ring: those closed with the runtime (they used to
/// stay open, one per worker, as long as any handle lived).
fn handles_that_outlive_the_runtime_keep_no_ring_open(kind: BackendKind) -> Outcome {
    let before = ring_fds();
    let mut kept = Vec::new();
    for _ in 0..5 {
        let rt = runtime!(kind, Builder::default().threads(3));
        let task = rt.handle().spawn_on(1, async { 1 })?;
        let waker = rt.block_on(std::future::poll_fn(|cx| Poll::Ready(cx.waker().clone())));
        rt.block_on(async {});
        kept.push((rt.handle(), task, waker));
        drop_within(rt, Duration::from_secs(10))?;
    }
    let after = ring_fds();
    check!(
        after == before,
        "{} ring fds open after the runtimes were dropped (before: {before})",
        after
    );
    Ok(Completion::Completed)
}

/// A worker blocked inside a task (a blocking call in async code) when
/// `shutdown_timeout` runs: the call returns around its timeout, and the worker stops and
/// closes its ring on its own once the task returns, draining its ops first (it drained
/// with the runtime's deadline, long past, and leaked its op table: CI's ASan run caught it).
fn shutdown_timeout_bounds_a_worker_stuck_in_a_task(kind: BackendKind) -> Outcome {
    let before = ring_fds();
    let rt = runtime!(kind, Builder::default().threads(2));
    let (done_tx, done_rx) = mpsc::channel();
    let (began, runs) = mpsc::channel();
    let _task = rt.handle().spawn_on(1, async move {
        let _ = began.send(());
        std::thread::sleep(STUCK);
        let _ = done_tx.send(());
    })?;
    check!(
        runs.recv_timeout(Duration::from_secs(10)).is_ok(),
        "worker 1 did not start the task"
    );
    shutdown_in_100_ms(rt)?;
    check!(
        done_rx.recv_timeout(Duration::from_secs(10)).is_ok(),
        "the stuck task never finished"
    );
    // The worker stops on its own now: its ring closes.
    let start = Instant::now();
    while ring_fds() != before && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    check!(
        ring_fds() == before,
        "the left worker never closed its ring"
    );
    Ok(Completion::Completed)
}

/// Review G: `shutdown_timeout(100 ms)` with a `spawn_blocking` closure running took 5 s:
/// the runtime it consumed shut down again when dropped, with the 5 s default.
fn shutdown_timeout_bounds_a_running_blocking_closure(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(1));
    let (done_tx, done_rx) = mpsc::channel();
    let (began, runs) = mpsc::channel();
    let _job = rt.handle().spawn_blocking(move || {
        let _ = began.send(());
        std::thread::sleep(STUCK);
        let _ = done_tx.send(());
    });
    // Running, not queued (a queued closure is dropped at shutdown): a 50 ms sleep here
    // was not always enough for the pool's new thread on a paused VM.
    check!(
        runs.recv_timeout(Duration::from_secs(10)).is_ok(),
        "the pool did not start the closure"
    );
    shutdown_in_100_ms(rt)?;
    // Let the closure end before the next test counts threads or fds.
    check!(
        done_rx.recv_timeout(Duration::from_secs(10)).is_ok(),
        "the closure never finished"
    );
    Ok(Completion::Completed)
}

/// `spawn_local_on` aborted before its worker got to it: the factory never runs (as a
/// `spawn_blocking` closure aborted before it starts never does).
fn an_aborted_remote_spawn_never_builds_its_future(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(2));
    let handle = rt.handle();
    for round in 0..10 {
        // Worker 1 is busy until the abort has been made: the spawn waits in its queue
        // however slowly this thread runs (a sleep let a preempted test thread abort
        // after the factory had run, on a one-vCPU VM). The spawn is sent only once
        // worker 1 is inside the busy task: sent before, the worker could take both
        // messages in one batch and build the factory before running the busy task
        // (CI's kernel matrix, VM 6.1, round 0).
        let (release, held) = std::sync::mpsc::channel::<()>();
        let (started, busy_started) = std::sync::mpsc::channel::<()>();
        let _busy = handle.spawn_on(1, async move {
            let _ = started.send(());
            let _ = held.recv_timeout(Duration::from_secs(10));
        })?;
        busy_started
            .recv_timeout(Duration::from_secs(10))
            .map_err(|_| format!("round {round}: worker 1 never ran the busy task"))?;
        let built = Arc::new(AtomicBool::new(false));
        let flag = built.clone();
        let task = handle.spawn_local_on(1, move || {
            flag.store(true, Ordering::SeqCst);
            async {}
        })?;
        task.abort();
        let _ = release.send(());
        let out = rt.block_on(task);
        check!(
            out.as_ref().is_err_and(|e| e.is_cancelled()),
            "round {round}: {out:?}"
        );
        check!(
            !built.load(Ordering::SeqCst),
            "round {round}: the aborted spawn's factory ran"
        );
    }
    Ok(Completion::Completed)
}

/// A write buffer that says when it is dropped: an op table leaked at shutdown never drops
/// it (the kernel may still own it, so leaking is the safe failure, but a drain that
/// submits its cancels never has to).
struct Tracked {
    data: Vec<u8>,
    dropped: Arc<AtomicBool>,
}

// SAFETY: forwards to the Vec, whose heap buffer does not move with the struct.
unsafe impl IoBuf for Tracked {
    fn stable_ptr(&self) -> *const u8 {
        self.data.stable_ptr()
    }
    fn bytes_init(&self) -> usize {
        self.data.bytes_init()
    }
    fn bytes_total(&self) -> usize {
        self.data.bytes_total()
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

/// Sleeps in its destructor: a task holding it blocks its worker while being dropped.
struct SlowDrop(Duration);

impl Drop for SlowDrop {
    fn drop(&mut self) {
        std::thread::sleep(self.0);
    }
}

/// A write that never completes: the socket's buffer is full and the peer never reads.
/// `started` runs once the write is in flight.
async fn pending_write(dropped: Arc<AtomicBool>, started: impl FnOnce()) {
    let (a, b) = std::os::unix::net::UnixStream::pair().expect("socketpair");
    a.set_nonblocking(true).expect("nonblocking");
    while std::io::Write::write(&mut &a, &[0u8; 4096]).is_ok() {}
    let a = ring_rt::net::UnixStream::from_std(a).expect("adopt");
    let write = std::future::IntoFuture::into_future(a.write(Tracked {
        data: vec![7; 65536],
        dropped,
    }));
    let mut write = std::pin::pin!(write);
    std::future::poll_fn(|cx| {
        let _ = write.as_mut().poll(cx);
        Poll::Ready(())
    })
    .await;
    started();
    let _ = write.await;
    drop(b);
}

fn wait_flag(flag: &AtomicBool, limit: Duration) -> bool {
    let start = Instant::now();
    while !flag.load(Ordering::SeqCst) && start.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(10));
    }
    flag.load(Ordering::SeqCst)
}

/// Review H: a worker that heard the stop in time took the runtime's deadline for its
/// drain, then a task's destructor blocked past it: the drain started late, submitted no
/// cancel and leaked the op table with the pending write's buffer. The deadline is now
/// decided after the tasks are dropped.
fn a_task_destructor_blocking_past_the_deadline_leaks_no_op(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(2));
    let dropped = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = mpsc::channel();
    let flag = dropped.clone();
    let _task = rt.handle().spawn_local_on(1, move || async move {
        // Declared first, so dropped last: after the write's future, while the task goes.
        let _blocker = SlowDrop(Duration::from_millis(800));
        pending_write(flag, move || {
            let _ = ready_tx.send(());
        })
        .await;
    })?;
    check!(
        ready_rx.recv_timeout(Duration::from_secs(5)).is_ok(),
        "the write never started"
    );
    shutdown_in_100_ms(rt)?;
    check!(
        wait_flag(&dropped, Duration::from_secs(5)),
        "the pending write's buffer was never dropped: its op was leaked"
    );
    Ok(Completion::Completed)
}

/// Review H: worker 0 drained after the wait for the worker threads had used the
/// deadline up, and a drain with its deadline past never entered the kernel: not even the
/// cancels were submitted, and worker 0's op table leaked. A drain now always takes one
/// turn that does not wait.
fn worker_0_cancels_its_ops_when_the_deadline_has_passed(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(2));
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = dropped.clone();
    rt.block_on(async move {
        let (tx, rx) = futures_channel::oneshot::channel();
        ring_rt::spawn(pending_write(flag, move || {
            let _ = tx.send(());
        }));
        let _ = rx.await;
    });
    rt.shutdown_timeout(Duration::ZERO);
    check!(
        wait_flag(&dropped, Duration::from_secs(3)),
        "worker 0's pending write buffer was never dropped: its op was leaked"
    );
    Ok(Completion::Completed)
}

/// Review H: with a worker left inside a task at the deadline, a spawn after
/// `shutdown_timeout` returned ran on that worker; the docs say spawns after the runtime
/// is gone say `Cancelled`.
fn spawns_after_shutdown_are_cancelled_with_a_worker_left_in_a_task(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(2));
    let handle = rt.handle();
    let (done_tx, done_rx) = mpsc::channel();
    let _stuck = rt.handle().spawn_on(1, async move {
        std::thread::sleep(Duration::from_millis(700));
        let _ = done_tx.send(());
    })?;
    std::thread::sleep(Duration::from_millis(50));
    rt.shutdown_timeout(Duration::from_millis(100));
    let out = support::poll_on_thread(handle.spawn(async { 42u32 }), Duration::from_secs(5));
    let on_1 = handle
        .spawn_on(1, async { 7u32 })
        .map(|h| support::poll_on_thread(h, Duration::from_secs(5)));
    check!(
        done_rx.recv_timeout(Duration::from_secs(10)).is_ok(),
        "the stuck task never finished"
    );
    check!(
        matches!(out, Some(Err(ring_rt::JoinError::Cancelled))),
        "a spawn after shutdown gave {out:?}"
    );
    check!(
        matches!(on_1, Ok(Some(Err(ring_rt::JoinError::Cancelled)))),
        "a spawn_on(1) after shutdown gave {on_1:?}"
    );
    Ok(Completion::Completed)
}

/// Review J: with every worker marked stopping at the start of shutdown, a spawn onto a
/// stopping worker said `Cancelled` at once, so a task spawning and awaiting in a loop
/// never yielded: its worker never heard the stop and spun for ever. Such a spawn now
/// waits in the worker's queue like any other, and is cancelled there.
fn a_task_spawning_and_awaiting_in_a_loop_lets_its_worker_stop(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(3));
    let turns = Arc::new(AtomicUsize::new(0));
    for (on, to) in [(1, 1), (2, 1)] {
        let turns = turns.clone();
        rt.handle().spawn_on(on, async move {
            let handle = ring_rt::Handle::current();
            loop {
                if let Ok(spawned) = handle.spawn_on(to, async {}) {
                    let _ = spawned.await;
                }
                turns.fetch_add(1, Ordering::Relaxed);
            }
        })?;
    }
    std::thread::sleep(Duration::from_millis(50));
    let start = Instant::now();
    rt.shutdown_timeout(Duration::from_millis(100));
    let took = start.elapsed();
    // The workers stop: at once on a quiet machine, a little after the shutdown returns
    // on a loaded one (two workers spin here, and a worker still in a task at the
    // deadline stops on its own). Never stopping is the fault: the loops are counted
    // until they stand still for 300 ms, for up to 20 s.
    let mut before = turns.load(Ordering::Relaxed);
    let stood_still = loop {
        std::thread::sleep(Duration::from_millis(300));
        let after = turns.load(Ordering::Relaxed);
        if after == before {
            break true;
        }
        if start.elapsed() > Duration::from_secs(20) {
            break false;
        }
        before = after;
    };
    check!(
        stood_still,
        "the loops still ran 20 s after shutdown: {before} turns (shutdown took {took:?})"
    );
    Ok(Completion::Completed)
}

/// Review J: a read left pending with a panicking waker, its future kept aside: the drain
/// of `shutdown_timeout(0)` delivered its cancelled completion, the wake panicked out of
/// the shutdown, and the blocking pool was never closed (a later `spawn_blocking` ran).
/// The panic is reported, and the shutdown goes on.
fn a_waker_panicking_in_the_shutdown_drain_is_not_raised(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(1));
    let (a, b) = rt.block_on(async { ring_rt::net::UnixStream::pair() })?;
    let mut read = Box::pin(std::future::IntoFuture::into_future(
        a.read(Vec::with_capacity(64)),
    ));
    // Polled once with the panicking waker, then kept, not dropped, past the shutdown: the
    // op stays with the driver, its waker with it, and the drain completes it.
    let pending = rt.block_on(async {
        let waker = Waker::from(Arc::new(PanickingWaker));
        read.as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending()
    });
    check!(pending, "the read did not wait");
    let handle = rt.handle();
    let shutdown = support::expecting_panics(|| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rt.shutdown_timeout(Duration::ZERO)
        }))
    });
    check!(
        shutdown.is_ok(),
        "the waker's panic came out of shutdown_timeout"
    );
    let late = support::poll_on_thread(handle.spawn_blocking(|| 1), Duration::from_secs(5));
    check!(
        matches!(late, Some(Err(ring_rt::JoinError::Cancelled))),
        "spawn_blocking after shutdown gave {late:?}"
    );
    drop(read);
    drop((a, b));
    Ok(Completion::Completed)
}

/// A waker that does nothing, and whose drop panics with a `PanicsAgain` payload.
struct DropPanicsTwice;

impl Wake for DropPanicsTwice {
    fn wake(self: Arc<Self>) {}
}

impl Drop for DropPanicsTwice {
    fn drop(&mut self) {
        std::panic::panic_any(PanicsAgain);
    }
}

/// Panics as it is dropped (a task's future still alive when something else unwinds
/// would make this a panic during a panic: an abort).
struct FutureDropPanics;

impl Drop for FutureDropPanics {
    fn drop(&mut self) {
        panic!("the future panicked as it was dropped");
    }
}

/// Review L: a JoinHandle polled with a waker whose drop panics with a payload that panics
/// again, then dropped: the task lets the handle's slot (and that waker) go at its next
/// poll. The payload's second panic escaped the catch, unwinding through the executor
/// with the task out of its slot (counted alive for ever) and, with the task's future
/// alive and panicking in its own drop, aborting the process.
fn a_stale_join_waker_whose_panic_panics_again_is_contained(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let out = support::expecting_panics(|| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rt.block_on(async {
                // The task waits for `release`, not for a timer: on a slow machine (CI's
                // emulated VMs) a 5 ms sleep ran out before the handle was polled, the
                // handle answered at once, and the test's own last drop of the waker
                // raised its panic.
                let (release, released) = std::sync::mpsc::channel::<()>();
                let mut task = ring_rt::spawn(async move {
                    let guard = FutureDropPanics;
                    while released.try_recv().is_err() {
                        ring_rt::yield_now().await;
                    }
                    std::mem::forget(guard);
                    7u32
                });
                ring_rt::yield_now().await;
                let waker = Waker::from(Arc::new(DropPanicsTwice));
                let first = std::pin::Pin::new(&mut task).poll(&mut Context::from_waker(&waker));
                drop(waker);
                drop(task);
                let _ = release.send(());
                ring_rt::time::sleep(Duration::from_millis(20)).await;
                first.is_pending()
            })
        }))
    });
    check!(
        matches!(out, Ok(true)),
        "the stale waker's panic escaped the runtime: {:?}",
        out.map_err(|_| "panicked")
    );
    let alive = rt.metrics().workers[0].tasks_alive;
    check!(alive == 0, "{alive} tasks left alive");
    Ok(Completion::Completed)
}

/// An output whose drop panics with a payload that panics again, of a task whose handle
/// is gone: the task drops it as it finishes, and neither panic leaves the runtime.
fn a_detached_output_whose_panic_panics_again_is_contained(kind: BackendKind) -> Outcome {
    struct Output;
    impl Drop for Output {
        fn drop(&mut self) {
            std::panic::panic_any(PanicsAgain);
        }
    }
    let rt = runtime!(kind);
    let out = support::expecting_panics(|| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rt.block_on(async {
                drop(ring_rt::spawn(async {
                    ring_rt::yield_now().await;
                    Output
                }));
                ring_rt::time::sleep(Duration::from_millis(10)).await;
                ring_rt::spawn(async { 5u32 }).await.ok()
            })
        }))
    });
    check!(
        matches!(out, Ok(Some(5))),
        "the output's panic escaped the runtime: {:?}",
        out.map_err(|_| "panicked")
    );
    let alive = rt.metrics().workers[0].tasks_alive;
    check!(alive == 0, "{alive} tasks left alive");
    Ok(Completion::Completed)
}

/// Review BE: a task that panicked with a payload whose drop panics, on the same worker or
/// another one; its handle, dropped unread once the task has finished, drops that payload:
/// as tokio's, the handle swallows the payload's panic (nobody reads the output of a
/// dropped handle). It unwound into whoever dropped the handle: `serve_balanced`'s accept
/// loop, for a connection served on another worker.
fn a_handle_dropped_after_its_task_panicked_with_a_payload_that_panics_again_is_quiet(
    kind: BackendKind,
) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(2));
    let handle = rt.handle();
    let out = support::expecting_panics(|| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rt.block_on(async {
                let here = ring_rt::spawn(async { std::panic::panic_any(PanicsAgain) });
                let there = handle.spawn_on(1, async { std::panic::panic_any(PanicsAgain) })?;
                for _ in 0..5_000 {
                    if here.is_finished() && there.is_finished() {
                        break;
                    }
                    ring_rt::time::sleep(Duration::from_millis(1)).await;
                }
                check!(
                    here.is_finished() && there.is_finished(),
                    "{kind}: the panicking tasks never finished"
                );
                drop(here);
                drop(there);
                Ok::<u32, Box<dyn std::error::Error>>(ring_rt::spawn(async { 5u32 }).await?)
            })
        }))
    });
    check!(
        matches!(out, Ok(Ok(5))),
        "{kind}: dropping the handles let the payload's panic out: {:?}",
        out.map(|r| r.map_err(|e| e.to_string()))
            .map_err(|_| "panicked")
    );
    Ok(Completion::Completed)
}

/// Review BG: a `spawn_blocking` whose output panics as it drops, its handle dropped while
/// the job finishes. The handle found no output yet, the job then stored it and let go of
/// the shared slot first, and the handle's own release dropped the output, its panic out in
/// the open (an abort when that drop ran during an unwind). 3 threads race for 2 s at most
/// (before the fix, about 10 panics got out in that time); none may.
fn a_handle_dropped_while_its_blocking_job_finishes_lets_no_panic_out(
    kind: BackendKind,
) -> Outcome {
    /// Its drop panics.
    struct Output;
    impl Drop for Output {
        fn drop(&mut self) {
            panic!("the output panicked as it was dropped");
        }
    }
    let rt = runtime!(kind);
    let handle = rt.handle();
    let deadline = Instant::now() + Duration::from_secs(2);
    let escaped = AtomicUsize::new(0);
    support::expecting_panics(|| {
        std::thread::scope(|scope| {
            for seed in 1..=3u32 {
                let (handle, escaped) = (handle.clone(), &escaped);
                scope.spawn(move || {
                    let mut x = seed.wrapping_mul(2_654_435_761);
                    while Instant::now() < deadline {
                        // xorshift: a different head start for the job and the drop each time.
                        x ^= x << 13;
                        x ^= x >> 17;
                        x ^= x << 5;
                        let (job_spin, drop_spin) = (x % 400, 2_000 + (x >> 10) % 400);
                        let task = handle.spawn_blocking(move || {
                            spin(job_spin);
                            Output
                        });
                        spin(drop_spin);
                        let dropped =
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
                                drop(task)
                            }));
                        if dropped.is_err() {
                            escaped.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                });
            }
        });
    });
    drop(rt);
    let escaped = escaped.load(Ordering::SeqCst);
    check!(
        escaped == 0,
        "{kind}: {escaped} output panics got out of dropped JoinHandles"
    );
    Ok(Completion::Completed)
}

/// Busy for about `n` steps, not optimised away.
fn spin(n: u32) {
    for i in 0..n {
        std::hint::black_box(i);
    }
}

/// Review M: a read on worker 1 polled once with a waker whose wake panics with a payload
/// that panics again; the completion's wake runs in worker 1's loop, whose catch reported
/// the panic and then dropped the payload outside it: the worker's thread died, its tasks
/// with it.
fn a_wake_whose_panic_panics_again_leaves_the_worker_serving(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(2));
    // The wake's panic is raised on worker 1 as soon as the data arrives.
    support::expecting_panics(|| wake_panics_twice_on_worker_1(rt))
}

fn wake_panics_twice_on_worker_1(rt: Runtime) -> Outcome {
    let handle = rt.handle();
    let task = handle.spawn_local_on(1, || async {
        let (a, b) = ring_rt::net::UnixStream::pair()?;
        let mut read = std::pin::pin!(b.read(Vec::with_capacity(8)).into_future());
        let waker = Waker::from(Arc::new(WakePanicsTwice));
        let first = read.as_mut().poll(&mut Context::from_waker(&waker));
        drop(waker);
        a.write_all(b"x".to_vec()).await.0?;
        ring_rt::time::sleep(Duration::from_millis(30)).await;
        std::io::Result::Ok(first.is_pending())
    })?;
    let out = support::poll_on_thread(task, Duration::from_secs(5));
    check!(
        matches!(out, Some(Ok(Ok(true)))),
        "the task on worker 1 did not finish: {out:?}"
    );
    let next = support::poll_on_thread(handle.spawn_on(1, async { 5u32 })?, Duration::from_secs(5));
    check!(
        matches!(next, Some(Ok(5))),
        "worker 1 stopped serving: {next:?}"
    );
    drop_within(rt, Duration::from_secs(10))?;
    Ok(Completion::Completed)
}

/// Review M: a task left pending at shutdown holds a read polled with a waker whose drop
/// panics with a payload that panics again: the shutdown drain's catch dropped the payload
/// outside it, so the runtime's drop panicked (and aborted the process when it ran during
/// another unwind).
fn a_stale_op_waker_whose_panic_panics_again_leaves_shutdown_quiet(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let out = support::expecting_panics(|| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            rt.block_on(async {
                let (a, b) = ring_rt::net::UnixStream::pair()?;
                drop(ring_rt::spawn(async move {
                    let mut read = std::pin::pin!(b.read(Vec::with_capacity(8)).into_future());
                    let waker = Waker::from(Arc::new(DropPanicsTwice));
                    let _ = read.as_mut().poll(&mut Context::from_waker(&waker));
                    drop(waker);
                    std::future::pending::<()>().await;
                }));
                ring_rt::time::sleep(Duration::from_millis(10)).await;
                drop(a);
                std::io::Result::Ok(())
            })?;
            drop(rt);
            std::io::Result::Ok(())
        }))
    });
    check!(
        matches!(out, Ok(Ok(()))),
        "dropping the runtime panicked: {:?}",
        out.map_err(|_| "panicked")
    );
    Ok(Completion::Completed)
}

/// Review Z (2): a task on worker 1 queues a spawn for worker 2, whose wake on io_uring is
/// a MSG_RING in worker 1's ring, leaving with its next enter, and then blocks its thread
/// until a plain thread's spawn on worker 2 is done. The plain thread's wake found worker
/// 2's flag already raised and sent nothing: worker 2 slept until worker 1's enter, which
/// waited on worker 2 (a deadlock; 950 ms for one spawn while worker 1 was busy for 1 s).
fn a_wake_queued_by_a_busy_worker_holds_back_no_other_wake(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(3));
    let handle = rt.handle();
    // Workers 1 and 2 park.
    std::thread::sleep(Duration::from_millis(50));
    let (tx, rx) = mpsc::channel::<Option<u32>>();
    let h = handle.clone();
    let busy = handle.spawn_on(1, async move {
        drop(h.spawn_on(2, async {})?);
        // Blocks worker 1's thread: its queued wake cannot leave until this returns.
        Ok::<_, std::io::Error>(rx.recv_timeout(Duration::from_secs(10)).ok().flatten())
    })?;
    let h = handle.clone();
    let plain = std::thread::spawn(move || {
        let ran = h.spawn_on(2, async { 42u32 }).ok()?;
        let out = support::poll_on_thread(ran, Duration::from_secs(5));
        let got = out.and_then(|r| r.ok());
        let _ = tx.send(got);
        got
    });
    let got = plain.join().map_err(|_| "the plain thread panicked")?;
    check!(
        got == Some(42),
        "a spawn from a plain thread on worker 2 never ran while worker 1 was busy: {got:?}"
    );
    let busy = support::poll_on_thread(busy, Duration::from_secs(15));
    check!(
        matches!(busy, Some(Ok(Ok(Some(42))))),
        "worker 1's task: {busy:?}"
    );
    Ok(Completion::Completed)
}

/// Review Z (6): 100,000 wakes of worker 0's `block_on` waker from worker 1, while worker
/// 0 runs no `block_on`, unparked it 100,000 times: on io_uring 100,000 MSG_RINGs, whose
/// CQEs piled up in the kernel (254 B each, held until the process exited) since nobody
/// reaped worker 0's ring. One unpark stands for the burst now (two at most: a queued
/// MSG_RING and the eventfd write of the wake that found it queued).
fn a_burst_of_wakes_of_block_on_unparks_once(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(2));
    let slot = Arc::new(std::sync::Mutex::new(None::<Waker>));
    let s = slot.clone();
    rt.block_on(std::future::poll_fn(move |cx| {
        *s.lock().unwrap() = Some(cx.waker().clone());
        Poll::Ready(())
    }));
    let waker = slot.lock().unwrap().take().ok_or("no waker")?;
    let sent_before = rt.metrics().workers[1].io.msg_rings_sent;
    let woke = rt.handle().spawn_on(1, async move {
        for _ in 0..100_000 {
            waker.wake_by_ref();
        }
    })?;
    let woke = support::poll_on_thread(woke, Duration::from_secs(30));
    check!(matches!(woke, Some(Ok(()))), "the waking task: {woke:?}");
    let sent = rt.metrics().workers[1].io.msg_rings_sent - sent_before;
    check!(
        sent <= 2,
        "{kind}: 100,000 wakes of a block_on waker sent {sent} MSG_RINGs"
    );
    // The flag is still up: the next block_on polls its future at once, and runs.
    let ran = rt.block_on(async { 7 });
    check!(ran == 7, "block_on after the burst");
    Ok(Completion::Completed)
}

/// Review Z (1): an io_uring runtime with workers, dropped inside another io_uring
/// runtime's `block_on`, sent its workers' stop as MSG_RINGs through the outer runtime's
/// ring, whose next enter came only after the drop had waited out the 5 s shutdown
/// deadline for them (and warned of a worker stuck in a task, where none was). The stop
/// goes by eventfd now: the drop takes what the workers need, not the deadline.
fn a_runtime_dropped_inside_another_stops_its_workers_at_once(kind: BackendKind) -> Outcome {
    let outer = runtime!(kind, Builder::default().threads(1));
    let out = outer.block_on(async {
        let inner = match support::runtime_with(kind, Builder::default().threads(2)) {
            Ok(rt) => rt,
            Err(skip) => return Ok(Some(skip)),
        };
        // Its worker 1 parks.
        std::thread::sleep(Duration::from_millis(50));
        let start = Instant::now();
        // A deadline far past the test's limit: only workers that never hear the stop
        // make the drop wait for it.
        inner.shutdown_timeout(Duration::from_secs(60));
        let took = start.elapsed();
        check!(
            took < Duration::from_secs(20),
            "{kind}: shutting down a runtime inside another took {took:?}"
        );
        Ok::<_, String>(None)
    });
    match out {
        Ok(Some(skip)) => Ok(skip),
        Ok(None) => Ok(Completion::Completed),
        Err(e) => Err(e.into()),
    }
}

/// Review Z (8): `shutdown_timeout(Duration::MAX)` fell back to the drop's 5 s deadline
/// when the deadline overflowed `Instant`, and returned with a worker still in its task.
/// It waits for the task now (5.5 s here, past those 5 s).
fn shutdown_timeout_of_duration_max_waits_for_a_stuck_worker(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(2));
    let done = Arc::new(AtomicBool::new(false));
    let flag = done.clone();
    let _task = rt.handle().spawn_on(1, async move {
        std::thread::sleep(Duration::from_millis(5500));
        flag.store(true, Ordering::SeqCst);
    })?;
    std::thread::sleep(Duration::from_millis(50));
    let (tx, rx) = mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if rx.recv_timeout(Duration::from_secs(60)) == Err(mpsc::RecvTimeoutError::Timeout) {
            eprintln!("FAILED: shutdown_timeout(Duration::MAX) never returned");
            std::process::exit(101);
        }
    });
    rt.shutdown_timeout(Duration::MAX);
    drop(tx);
    let _ = watchdog.join();
    check!(
        done.load(Ordering::SeqCst),
        "{kind}: shutdown_timeout(Duration::MAX) returned with a worker still in its task"
    );
    Ok(Completion::Completed)
}

/// Review AC (1): a task on worker 1 spawning on worker 2 over and over without yielding
/// (its wakes MSG_RINGs queued in worker 1's ring) while a plain thread pings worker 2
/// with spawns. The wake flag's "queued" mark was overwritten by a late "sent" of an
/// earlier raise, after worker 2 had taken the flag and worker 1 raised it again: every
/// later wake skipped its own, and a ping waited until worker 1's task ended (3 s and
/// more, after a few hundred pings). Pings stop at 20,000 or 10 s.
fn wakes_from_plain_threads_get_through_a_busy_workers_queued_ones(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(3));
    let handle = rt.handle();
    let stop = Arc::new(AtomicBool::new(false));
    let (busy_stop, busy_handle) = (stop.clone(), handle.clone());
    let busy = handle.spawn_on(1, async move {
        while !busy_stop.load(Ordering::Relaxed) {
            drop(busy_handle.spawn_on(2, async {}));
            let spin = Instant::now();
            while spin.elapsed() < Duration::from_micros(30) {
                std::hint::spin_loop();
            }
        }
    })?;
    let start = Instant::now();
    let mut stalled = None;
    for ping in 0..20_000u32 {
        if start.elapsed() > Duration::from_secs(10) {
            break;
        }
        let (tx, rx) = mpsc::channel();
        drop(handle.spawn_on(2, async move {
            let _ = tx.send(());
        })?);
        if rx.recv_timeout(Duration::from_secs(2)).is_err() {
            stalled = Some(ping);
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = support::poll_on_thread(busy, Duration::from_secs(10));
    check!(
        stalled.is_none(),
        "{kind}: ping {} waited 2 s for worker 2 while worker 1 was busy",
        stalled.unwrap_or_default()
    );
    Ok(Completion::Completed)
}

/// Counts its wakes.
struct CountingWaker(std::sync::atomic::AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// The kernel matrix's 5.6 row, under load: a task on worker 2 spawning onto worker 1 and
/// awaiting the handle in a loop spun for ever once worker 1 had stopped, since a spawn a
/// stopped worker refuses is cancelled at once and the await never yielded; worker 2,
/// busy in that task, never heard its own stop (48 million turns in 20 s). Such a handle's
/// first poll now yields: it wakes its task and says `Pending`, and the next poll gives
/// `Cancelled`.
fn a_spawn_cancelled_before_it_ran_yields_once_when_awaited(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(2));
    let handle = rt.handle();
    drop(rt);
    // Worker 1 is gone: the spawn is refused, its handle cancelled before it ran.
    yields_once_then_gives_cancelled(handle.spawn_on(1, async {})?)
}

/// Review BD: the same for `spawn_blocking`. When only task spawns were marked, a blocking
/// spawn refused by a runtime that is gone was `Cancelled` at its first poll, and a task
/// awaiting such spawns in a loop never let its worker run (8.7 million in 3 s with a due
/// timer never firing; the runtime's drop waited its 5 s for that worker and left it
/// spinning).
fn a_blocking_spawn_refused_before_it_ran_yields_once_when_awaited(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(2));
    let handle = rt.handle();
    drop(rt);
    yields_once_then_gives_cancelled(handle.spawn_blocking(|| ()))
}

/// Review BH (2, 3): a spawn refused by a runtime that is gone, whose future or closure
/// panics as it is dropped. Its drop ran before the cancel: that panic (caught further out)
/// skipped it, and the task's handle never resolved; a refused `spawn_blocking` panicked
/// in its caller. The cancel comes first now, and the drop's panic is logged.
fn a_refused_spawn_whose_capture_panics_in_drop_is_still_cancelled(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(2));
    let handle = rt.handle();
    drop(rt);
    support::expecting_panics(|| {
        let capture = FutureDropPanics;
        let task = handle.spawn_on(1, async move {
            let _held = &capture;
        })?;
        yields_once_then_gives_cancelled(task)?;
        let capture = FutureDropPanics;
        let blocking = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            handle.spawn_blocking(move || {
                let _held = &capture;
            })
        }));
        check!(
            blocking.is_ok(),
            "{kind}: a refused spawn_blocking panicked in its caller"
        );
        match blocking {
            Ok(blocking) => yields_once_then_gives_cancelled(blocking),
            Err(_) => Ok(Completion::Completed),
        }
    })
}

/// Review BI: a spawn aborted while it waits in its worker's queue, whose future's capture
/// panics as it drops. The queued spawn was cancelled and its factory dropped in the open:
/// the panic came out of the `block_on` that ran the queue. It is logged now, and the
/// handle says `Cancelled`.
fn an_aborted_queued_spawn_whose_capture_panics_in_drop_stays_quiet(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let capture = FutureDropPanics;
    let task = rt.handle().spawn_on(0, async move {
        let _held = &capture;
    })?;
    task.abort();
    let ran = support::expecting_panics(|| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rt.block_on(ring_rt::yield_now())
        }))
    });
    check!(
        ran.is_ok(),
        "{kind}: the capture's panic came out of block_on"
    );
    let out = rt.block_on(task);
    check!(
        out.as_ref().is_err_and(|e| e.is_cancelled()),
        "{kind}: the aborted spawn gave {out:?}"
    );
    Ok(Completion::Completed)
}

/// Review BH (1): the waker a handle was last polled with goes when the handle does
/// (quietly: it is code that is not ours). Left in the shared slot, it went with whichever
/// side let go last, maybe the handle's own release, in the open.
fn a_dropped_handle_lets_its_waker_go_at_once(kind: BackendKind) -> Outcome {
    /// Counts its drops.
    struct Dropped(Arc<AtomicUsize>);
    impl Wake for Dropped {
        fn wake(self: Arc<Self>) {}
    }
    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let rt = runtime!(kind);
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let mut task = rt.handle().spawn_blocking(move || {
        let _ = release_rx.recv_timeout(Duration::from_secs(10));
    });
    let drops = Arc::new(AtomicUsize::new(0));
    let waker = Waker::from(Arc::new(Dropped(drops.clone())));
    let polled = std::pin::Pin::new(&mut task).poll(&mut Context::from_waker(&waker));
    check!(polled.is_pending(), "{kind}: the job finished at once");
    drop(waker);
    drop(task);
    let dropped = drops.load(Ordering::SeqCst);
    let _ = release_tx.send(());
    check!(
        dropped == 1,
        "{kind}: the handle's waker stayed behind it in the slot, with the job still running"
    );
    Ok(Completion::Completed)
}

/// Polls a handle cancelled before its work began: the first poll yields (waking its task
/// once), the second gives `Cancelled`.
fn yields_once_then_gives_cancelled<T: std::fmt::Debug>(
    mut spawned: ring_rt::JoinHandle<T>,
) -> Outcome {
    let waker = Arc::new(CountingWaker(std::sync::atomic::AtomicUsize::new(0)));
    let task_waker = Waker::from(waker.clone());
    let mut cx = Context::from_waker(&task_waker);
    let first = std::pin::Pin::new(&mut spawned).poll(&mut cx);
    check!(
        first.is_pending(),
        "the first poll did not yield: {first:?}"
    );
    check!(
        waker.0.load(Ordering::Relaxed) == 1,
        "the yield did not wake its task"
    );
    let second = std::pin::Pin::new(&mut spawned).poll(&mut cx);
    check!(
        matches!(second, Poll::Ready(Err(ring_rt::JoinError::Cancelled))),
        "the second poll gave {second:?}"
    );
    Ok(Completion::Completed)
}

/// Review AS (2): the yield above came with every cancelled handle, so one whose task had
/// run and was aborted said `Pending` while `is_finished` said true. Only a spawn cancelled
/// before its task was made yields.
fn a_task_aborted_after_it_ran_gives_cancelled_at_the_first_poll(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(1));
    let mut task = rt.spawn(ring_rt::time::sleep(Duration::from_secs(3600)));
    rt.block_on(async {
        ring_rt::yield_now().await;
        task.abort();
        ring_rt::yield_now().await;
        ring_rt::yield_now().await;
    });
    check!(task.is_finished(), "the aborted task is not finished");
    let first = std::pin::Pin::new(&mut task).poll(&mut Context::from_waker(Waker::noop()));
    check!(
        matches!(first, Poll::Ready(Err(ring_rt::JoinError::Cancelled))),
        "the first poll gave {first:?}"
    );
    Ok(Completion::Completed)
}
