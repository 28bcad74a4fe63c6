//! The executor and timers, on both backends.

#[macro_use]
mod support;

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use libtest_mimic::Completion;
use ring_rt::time::{interval, sleep, timeout};
use ring_rt::{BackendKind, Runtime};
use support::{thread_cpu_time, Outcome};

fn main() {
    support::run(&[
        (
            "a_read_started_by_a_destructor_at_shutdown_takes_nothing",
            a_read_started_by_a_destructor_at_shutdown_takes_nothing,
        ),
        (
            "an_op_polled_by_a_destructor_at_shutdown_says_shut_down",
            an_op_polled_by_a_destructor_at_shutdown_says_shut_down,
        ),
        ("block_on_returns_output", block_on_returns_output),
        ("spawn_join_and_local_tasks", spawn_join_and_local_tasks),
        ("panic_reaches_join_handle", panic_reaches_join_handle),
        ("abort_cancels_task", abort_cancels_task),
        ("yield_now_lets_others_run", yield_now_lets_others_run),
        ("sleep_waits_at_least", sleep_waits_at_least),
        (
            "timeout_elapses_and_drops_future",
            timeout_elapses_and_drops_future,
        ),
        ("interval_ticks", interval_ticks),
        ("many_timers_fire_in_order", many_timers_fire_in_order),
        ("wake_from_another_thread", wake_from_another_thread),
        ("threads_run_on_every_worker", threads_run_on_every_worker),
        ("backend_reports_choice", backend_reports_choice),
        ("nested_block_on_is_refused", nested_block_on_is_refused),
        ("signal_wait_works_repeatedly", signal_wait_works_repeatedly),
        (
            "spinning_loop_runs_io_timers_and_remote_wakes",
            spinning_loop_runs_io_timers_and_remote_wakes,
        ),
        (
            "spinning_loop_parks_after_its_spin",
            spinning_loop_parks_after_its_spin,
        ),
        (
            "spinning_loop_fires_timers_on_time",
            spinning_loop_fires_timers_on_time,
        ),
        (
            "socket_reads_that_never_wait_let_other_tasks_run",
            socket_reads_that_never_wait_let_other_tasks_run,
        ),
        (
            "file_reads_that_never_wait_let_other_tasks_run",
            file_reads_that_never_wait_let_other_tasks_run,
        ),
        (
            "adapter_writes_that_never_wait_let_other_tasks_run",
            adapter_writes_that_never_wait_let_other_tasks_run,
        ),
        (
            "sleeps_already_due_let_other_tasks_run",
            sleeps_already_due_let_other_tasks_run,
        ),
        (
            "timeouts_that_elapse_at_once_let_other_tasks_run",
            timeouts_that_elapse_at_once_let_other_tasks_run,
        ),
        (
            "finished_join_handles_let_other_tasks_run",
            finished_join_handles_let_other_tasks_run,
        ),
        (
            "adapter_reads_of_buffered_bytes_let_other_tasks_run",
            adapter_reads_of_buffered_bytes_let_other_tasks_run,
        ),
        (
            "a_timeout_tries_its_future_first_with_the_budget_spent",
            a_timeout_tries_its_future_first_with_the_budget_spent,
        ),
        (
            "a_timeout_fires_around_a_future_that_spends_every_budget",
            a_timeout_fires_around_a_future_that_spends_every_budget,
        ),
        (
            "an_unconstrained_future_completes_every_ready_op_in_one_poll",
            an_unconstrained_future_completes_every_ready_op_in_one_poll,
        ),
        (
            "a_nested_executor_inside_unconstrained_finishes_due_sleeps_with_the_budget_spent",
            a_nested_executor_inside_unconstrained_finishes_due_sleeps_with_the_budget_spent,
        ),
    ])
}

fn block_on_returns_output(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    check!(rt.block_on(async { 7 }) == 7, "wrong output");
    Ok(Completion::Completed)
}

fn spawn_join_and_local_tasks(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let total = rt.block_on(async {
        // !Send state shared between local tasks.
        let counter = Rc::new(Cell::new(0));
        let handles: Vec<_> = (0..100)
            .map(|i| {
                let counter = counter.clone();
                ring_rt::spawn(async move {
                    counter.set(counter.get() + 1);
                    i
                })
            })
            .collect();
        let mut sum = 0;
        for h in handles {
            sum += h.await.unwrap();
        }
        (sum, counter.get())
    });
    check!(total == (4950, 100), "got {total:?}");
    check!(rt.metrics().tasks_alive == 0, "tasks left alive");
    Ok(Completion::Completed)
}

fn panic_reaches_join_handle(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let err = support::expecting_panics(|| {
        rt.block_on(async {
            let task = ring_rt::spawn(async { panic!("boom") });
            let joined: Result<(), _> = task.await;
            joined.unwrap_err()
        })
    });
    check!(err.is_panic(), "not a panic: {err}");
    check!(err.to_string().contains("boom"), "message lost: {err}");
    // The runtime survives.
    check!(
        rt.block_on(async { ring_rt::spawn(async { 1 }).await.unwrap() }) == 1,
        "runtime broken"
    );
    Ok(Completion::Completed)
}

fn abort_cancels_task(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let (res, finished) = rt.block_on(async {
        let h = ring_rt::spawn(async { sleep(Duration::from_secs(3600)).await });
        ring_rt::yield_now().await;
        h.abort();
        ring_rt::yield_now().await;
        let finished = h.is_finished();
        (h.await, finished)
    });
    check!(
        res.as_ref().is_err_and(|e| e.is_cancelled()),
        "not cancelled: {res:?}"
    );
    check!(finished, "is_finished false after abort");
    check!(rt.metrics().timers == 0, "aborted sleep left its timer");
    Ok(Completion::Completed)
}

fn yield_now_lets_others_run(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let order = rt.block_on(async {
        let log = Rc::new(std::cell::RefCell::new(Vec::new()));
        let l2 = log.clone();
        let h = ring_rt::spawn(async move { l2.borrow_mut().push("task") });
        log.borrow_mut().push("main-before");
        ring_rt::yield_now().await;
        log.borrow_mut().push("main-after");
        h.await.unwrap();
        let v = log.borrow().clone();
        v
    });
    check!(
        order == ["main-before", "task", "main-after"],
        "order {order:?}"
    );
    Ok(Completion::Completed)
}

fn sleep_waits_at_least(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let start = Instant::now();
    rt.block_on(sleep(Duration::from_millis(30)));
    check!(
        start.elapsed() >= Duration::from_millis(30),
        "woke early: {:?}",
        start.elapsed()
    );
    rt.block_on(sleep(Duration::ZERO));
    Ok(Completion::Completed)
}

fn timeout_elapses_and_drops_future(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let dropped = Rc::new(Cell::new(false));
    struct Flag(Rc<Cell<bool>>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.set(true);
        }
    }
    let flag = Flag(dropped.clone());
    let res = rt.block_on(timeout(Duration::from_millis(10), async move {
        let _flag = flag;
        sleep(Duration::from_secs(3600)).await
    }));
    check!(res.is_err(), "timeout did not elapse");
    check!(dropped.get(), "future not dropped on timeout");
    let ok = rt.block_on(timeout(Duration::from_secs(5), async { 5 }));
    check!(ok == Ok(5), "fast future timed out");
    let err: std::io::Error = res.unwrap_err().into();
    check!(
        err.kind() == std::io::ErrorKind::TimedOut,
        "kind {:?}",
        err.kind()
    );
    Ok(Completion::Completed)
}

fn interval_ticks(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let start = Instant::now();
    rt.block_on(async {
        let mut iv = interval(Duration::from_millis(5));
        for _ in 0..4 {
            iv.tick().await;
        }
    });
    check!(
        start.elapsed() >= Duration::from_millis(15),
        "3 periods took {:?}",
        start.elapsed()
    );
    Ok(Completion::Completed)
}

fn many_timers_fire_in_order(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    // The first deadline is `ahead` so that every task has registered its sleep before any
    // is due: a deadline already past at the first poll completes in poll order (and the
    // tasks are spawned in reverse), which is right but not what this tests. A paused VM
    // can pass 100 ms before the last first poll: such a round runs again, further ahead.
    for ahead in [100, 1_000, 5_000].map(Duration::from_millis) {
        let (order, registered, early) = rt.block_on(timers_in_order(ahead));
        check!(!early, "a sleep ended before its deadline");
        if !registered {
            continue;
        }
        let sorted: Vec<u64> = (0..50).collect();
        check!(order == sorted, "timers out of order: {order:?}");
        return Ok(Completion::Completed);
    }
    Err("a sleep was over at its first poll in every round".into())
}

/// The order 50 sleeps due 2 ms apart fire in, whether each was pending at its first poll,
/// and whether any ended before its deadline. Deadlines from one instant: under emulation
/// a poll can take longer than the 2 ms spacing, which would reorder sleeps measured from
/// each task's own first poll.
async fn timers_in_order(ahead: Duration) -> (Vec<u64>, bool, bool) {
    let log = Rc::new(RefCell::new(Vec::new()));
    let (registered, early) = (Rc::new(Cell::new(true)), Rc::new(Cell::new(false)));
    let start = Instant::now() + ahead;
    let hs: Vec<_> = (0..50u64)
        .rev()
        .map(|i| {
            let (log, registered, early) = (log.clone(), registered.clone(), early.clone());
            ring_rt::spawn(async move {
                let deadline = start + Duration::from_millis(i * 2);
                let mut nap = std::pin::pin!(ring_rt::time::sleep_until(deadline));
                let pending = std::future::poll_fn(|cx| {
                    let polled = std::future::Future::poll(nap.as_mut(), cx);
                    std::task::Poll::Ready(polled.is_pending())
                })
                .await;
                if !pending {
                    registered.set(false);
                }
                nap.await;
                // After a first poll that was ready too: one that was not due fails.
                if Instant::now() < deadline {
                    early.set(true);
                }
                log.borrow_mut().push(i);
            })
        })
        .collect();
    for h in hs {
        h.await.unwrap();
    }
    let v = log.borrow().clone();
    (v, registered.get(), early.get())
}

fn wake_from_another_thread(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let got = rt.block_on(async {
        let (tx, rx) = std::sync::mpsc::channel::<u32>();
        let waker_slot = std::sync::Arc::new(std::sync::Mutex::new(None::<std::task::Waker>));
        let slot = waker_slot.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            tx.send(42).unwrap();
            if let Some(w) = slot.lock().unwrap().take() {
                w.wake();
            }
        });
        let v = std::future::poll_fn(|cx| match rx.try_recv() {
            Ok(v) => std::task::Poll::Ready(v),
            Err(_) => {
                *waker_slot.lock().unwrap() = Some(cx.waker().clone());
                // Re-check after publishing the waker: the sender may have just sent.
                match rx.try_recv() {
                    Ok(v) => std::task::Poll::Ready(v),
                    Err(_) => std::task::Poll::Pending,
                }
            }
        })
        .await;
        t.join().unwrap();
        v
    });
    check!(got == 42, "got {got}");
    Ok(Completion::Completed)
}

fn threads_run_on_every_worker(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Runtime::builder().threads(1).threads(3));
    check!(rt.threads() == 3, "threads() = {}", rt.threads());
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = seen.clone();
    rt.spawn_on_all(move |i| {
        let s = s.clone();
        async move {
            s.lock().unwrap().push((i, std::thread::current().id()));
        }
    });
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(5);
        while seen.lock().unwrap().len() < 3 && Instant::now() < deadline {
            sleep(Duration::from_millis(5)).await;
        }
    });
    let mut seen = seen.lock().unwrap().clone();
    seen.sort_by_key(|(i, _)| *i);
    check!(
        seen.iter().map(|(i, _)| *i).collect::<Vec<_>>() == [0, 1, 2],
        "workers {seen:?}"
    );
    let threads: std::collections::HashSet<_> = seen.iter().map(|(_, t)| *t).collect();
    check!(threads.len() == 3, "workers share threads: {seen:?}");
    Ok(Completion::Completed)
}

fn backend_reports_choice(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    check!(
        rt.backend().kind == kind,
        "asked {kind}, got {}",
        rt.backend()
    );
    check!(
        rt.features().is_some() == (kind == BackendKind::Uring),
        "features on {kind}"
    );
    Ok(Completion::Completed)
}

fn nested_block_on_is_refused(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let inner = runtime!(kind);
    let caught = support::expecting_panics(|| {
        rt.block_on(async {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| inner.block_on(async {})))
        })
    });
    check!(caught.is_err(), "nested block_on ran");
    Ok(Completion::Completed)
}

/// Each `signal::wait` opens and closes a signalfd; the next one may get the same fd
/// number, which the epoll backend must register afresh.
fn signal_wait_works_repeatedly(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    ring_rt::signal::block(&[libc::SIGUSR2])?;
    for round in 0..3 {
        let got = rt.block_on(async {
            let waiter = ring_rt::spawn(ring_rt::signal::wait(&[libc::SIGUSR2]));
            ring_rt::yield_now().await;
            // SAFETY: raising a signal this thread has blocked only makes it pending.
            unsafe { libc::raise(libc::SIGUSR2) };
            timeout(Duration::from_secs(5), waiter).await
        });
        let signo = got.map_err(|_| format!("round {round}: signal never arrived"))???;
        check!(signo == libc::SIGUSR2, "round {round}: got signal {signo}");
    }
    Ok(Completion::Completed)
}

/// A loop that spins for longer than anything here takes still completes socket reads
/// that arrive mid-spin, fires timers and takes wakes from other threads: the spin turns
/// the backend and notices ready tasks and due timers instead of waiting for its end.
fn spinning_loop_runs_io_timers_and_remote_wakes(kind: BackendKind) -> Outcome {
    let builder = Runtime::builder()
        .threads(1)
        .spin_before_park(Duration::from_secs(30));
    let rt = runtime!(kind, builder);
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let peer = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut conn, _) = listener.accept()?;
        std::thread::sleep(Duration::from_millis(20));
        std::io::Write::write_all(&mut conn, b"late bytes")
    });
    let got = rt.block_on(timeout(Duration::from_secs(10), async {
        let stream = ring_rt::net::TcpStream::connect(addr).await?;
        let (n, buf) = stream.read(vec![0u8; 64]).await;
        let read = buf[..n?].to_vec();
        sleep(Duration::from_millis(5)).await;
        let woken = ring_rt::spawn(value_from_thread(7, Duration::from_millis(5)));
        std::io::Result::Ok((read, woken.await.unwrap()))
    }));
    peer.join().expect("peer thread")?;
    let (read, woken) = got.map_err(|_| "the spinning loop never finished")??;
    check!(read == b"late bytes", "read {read:?}");
    check!(woken == 7, "woken with {woken}");
    check!(rt.metrics().spin_turns > 0, "the loop never spun");
    Ok(Completion::Completed)
}

/// `value`, set `delay` from now by another thread, which then wakes the awaiting task.
async fn value_from_thread(value: u32, delay: Duration) -> u32 {
    type Slot = (Option<u32>, Option<std::task::Waker>);
    let slot = std::sync::Arc::new(std::sync::Mutex::new(Slot::default()));
    let theirs = slot.clone();
    let thread = std::thread::spawn(move || {
        std::thread::sleep(delay);
        let mut slot = theirs.lock().unwrap();
        slot.0 = Some(value);
        if let Some(waker) = slot.1.take() {
            waker.wake();
        }
    });
    // One lock covers the value and the waker, so no wake can fall between the two.
    let got = std::future::poll_fn(|cx| {
        let mut slot = slot.lock().unwrap();
        match slot.0 {
            Some(v) => std::task::Poll::Ready(v),
            None => {
                slot.1 = Some(cx.waker().clone());
                std::task::Poll::Pending
            }
        }
    })
    .await;
    thread.join().expect("waking thread");
    got
}

/// A short spin gives way to a real sleep: over a 300 ms timer the loop spins for 2 ms and
/// parks, so the thread uses far less CPU than the wait lasts (a loop that never parked
/// would use about all of it).
fn spinning_loop_parks_after_its_spin(kind: BackendKind) -> Outcome {
    let builder = Runtime::builder()
        .threads(1)
        .spin_before_park(Duration::from_millis(2));
    let rt = runtime!(kind, builder);
    let (cpu_before, start) = (thread_cpu_time(), Instant::now());
    rt.block_on(sleep(Duration::from_millis(300)));
    let (cpu, wall) = (thread_cpu_time() - cpu_before, start.elapsed());
    check!(rt.metrics().spin_turns > 0, "the loop never spun");
    check!(
        cpu < wall / 3,
        "the loop used {cpu:?} of CPU over a {wall:?} sleep: it kept spinning"
    );
    Ok(Completion::Completed)
}

/// A spin that runs out before the next timer is due leaves a shorter wait: a 1 s sleep
/// behind an 800 ms spin ends after about 1 s, not 1.8 s (a wait computed before the spin
/// would add the spin to every timer). The bound leaves 400 ms for a slow (emulated) CPU.
fn spinning_loop_fires_timers_on_time(kind: BackendKind) -> Outcome {
    let (spin, nap) = (Duration::from_millis(800), Duration::from_secs(1));
    // A pause of the machine over 400 ms fails one round; the bug fails every round (each
    // on a runtime of its own, so the first wait of a fresh loop is what every round times).
    let mut elapsed = Duration::ZERO;
    for _ in 0..3 {
        let rt = runtime!(kind, Runtime::builder().threads(1).spin_before_park(spin));
        let start = Instant::now();
        rt.block_on(sleep(nap));
        elapsed = start.elapsed();
        if elapsed < nap + spin / 2 {
            return Ok(Completion::Completed);
        }
    }
    Err(format!(
        "a {nap:?} sleep took {elapsed:?} behind a {spin:?} spin: the spin delayed the timer"
    )
    .into())
}

/// How many ops the loop of a task completes before a task spawned after it, ready all
/// along, runs: `step` is one op that completes without waiting (data already there), run
/// until the other task has run or `limit` times. A task's poll that never returns
/// `Pending` holds the worker: on epoll such ops completed inside one poll for as long as
/// the data lasted (review BY: one task read 100,000 queued bytes in one poll).
async fn steps_before_a_neighbour_runs<F, Fut>(limit: usize, mut step: F) -> io::Result<usize>
where
    F: FnMut() -> Fut + 'static,
    Fut: Future<Output = io::Result<()>>,
{
    let ran = Rc::new(Cell::new(false));
    let seen = ran.clone();
    let greedy = ring_rt::spawn(async move {
        let mut steps = 0;
        while !seen.get() && steps < limit {
            step().await?;
            steps += 1;
        }
        Ok::<_, io::Error>(steps)
    });
    let neighbour = ring_rt::spawn(async move { ran.set(true) });
    let steps = greedy.await.map_err(joined)??;
    neighbour.await.map_err(joined)?;
    Ok(steps)
}

fn joined(err: ring_rt::JoinError) -> io::Error {
    io::Error::other(err.to_string())
}

/// Most ops a task completes in one poll before it yields: a budget of 128 per poll,
/// with room for the neighbour's turn to come after a few such polls.
const MOST_STEPS_BEFORE_A_NEIGHBOUR: usize = 1_000;

/// A socket with more bytes queued than the reader takes: 16-byte reads complete at once
/// on epoll (on io_uring each one's completion comes a loop turn later).
fn socket_reads_that_never_wait_let_other_tasks_run(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let (reader, writer) = std::os::unix::net::UnixStream::pair()?;
    writer.set_nonblocking(true)?;
    let mut queued = 0;
    loop {
        match (&writer).write(&[7; 4096]) {
            Ok(n) => queued += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e.into()),
        }
    }
    let limit = 5_000;
    check!(queued >= limit * 16, "only {queued} bytes queued");
    let steps = rt.block_on(async {
        let reader = Rc::new(ring_rt::net::UnixStream::from_std(reader)?);
        steps_before_a_neighbour_runs(limit, move || {
            let reader = reader.clone();
            async move {
                let (res, _) = reader.read(Vec::with_capacity(16)).await;
                check_some_bytes(res)
            }
        })
        .await
    })?;
    check!(
        steps <= MOST_STEPS_BEFORE_A_NEIGHBOUR,
        "{steps} reads ran before a task ready all along"
    );
    Ok(Completion::Completed)
}

fn check_some_bytes(res: io::Result<usize>) -> io::Result<()> {
    match res? {
        0 => Err(io::Error::other("end of stream")),
        _ => Ok(()),
    }
}

/// A file in the page cache: epoll's reads of it complete at once (RWF_NOWAIT).
fn file_reads_that_never_wait_let_other_tasks_run(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let limit = 5_000u64;
    let path =
        std::env::temp_dir().join(format!("ring-rt-fair-reads-{}-{kind}", std::process::id()));
    std::fs::write(&path, vec![7u8; limit as usize * 16])?;
    let steps = rt.block_on(async {
        let file = Rc::new(ring_rt::fs::File::open(&path).await?);
        let at = Rc::new(Cell::new(0u64));
        steps_before_a_neighbour_runs(limit as usize, move || {
            let (file, at) = (file.clone(), at.clone());
            async move {
                let (res, _) = file.read_at(Vec::with_capacity(16), at.get()).await;
                at.set(at.get() + 16);
                check_some_bytes(res)
            }
        })
        .await
    });
    std::fs::remove_file(&path)?;
    let steps = steps?;
    check!(
        steps <= MOST_STEPS_BEFORE_A_NEIGHBOUR,
        "{steps} reads ran before a task ready all along"
    );
    Ok(Completion::Completed)
}

/// A tokio-style adapter over a TCP connection whose peer reads as fast as it writes: a
/// write the socket takes at once is sent straight from the caller's bytes, no op.
fn adapter_writes_that_never_wait_let_other_tasks_run(kind: BackendKind) -> Outcome {
    use tokio::io::AsyncWriteExt;

    let rt = runtime!(kind);
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let client = std::net::TcpStream::connect(listener.local_addr()?)?;
    let (mut peer, _) = listener.accept()?;
    let drain = std::thread::spawn(move || {
        let mut buf = vec![0; 1 << 16];
        while matches!(peer.read(&mut buf), Ok(n) if n > 0) {}
    });
    let steps = rt.block_on(async {
        let writer = ring_rt::net::TcpStream::from_std(client)?;
        let writer = Rc::new(Cell::new(Some(ring_rt::compat::Compat::new(writer))));
        steps_before_a_neighbour_runs(5_000, move || {
            let writer = writer.clone();
            async move {
                // Taken out for the write: only this task uses the adapter.
                let mut adapter = writer.take().expect("the adapter is put back");
                let wrote = adapter.write(&[7; 1024]).await;
                writer.set(Some(adapter));
                wrote.map(drop)
            }
        })
        .await
    });
    drain.join().expect("the draining thread");
    let steps = steps?;
    check!(
        steps <= MOST_STEPS_BEFORE_A_NEIGHBOUR,
        "{steps} writes ran before a task ready all along"
    );
    Ok(Completion::Completed)
}

/// A sleep whose deadline passed completes at once: a loop of them in a task, and in
/// `block_on`'s own future, lets the other tasks run.
fn sleeps_already_due_let_other_tasks_run(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let limit = 100_000;
    let steps = rt.block_on(steps_before_a_neighbour_runs(limit, || async {
        sleep(Duration::ZERO).await;
        Ok(())
    }))?;
    check!(
        steps <= MOST_STEPS_BEFORE_A_NEIGHBOUR,
        "{steps} due sleeps in a task before a task ready all along"
    );
    let main_steps = rt.block_on(async {
        let ran = Rc::new(Cell::new(false));
        let flag = ran.clone();
        let neighbour = ring_rt::spawn(async move { flag.set(true) });
        let mut steps = 0;
        while !ran.get() && steps < limit {
            sleep(Duration::ZERO).await;
            steps += 1;
        }
        neighbour.await.map(|()| steps)
    });
    let main_steps = main_steps.map_err(|e| e.to_string())?;
    check!(
        main_steps <= MOST_STEPS_BEFORE_A_NEIGHBOUR,
        "{main_steps} due sleeps in block_on's future before a task ready all along"
    );
    Ok(Completion::Completed)
}

/// Spends what is left of the running poll's op budget: polls sleeps already due until one
/// is held back (which also queues a wake of the task for after the loop turn).
pub fn spend_the_budget() -> impl Future<Output = ()> {
    std::future::poll_fn(|cx| loop {
        let mut due = std::pin::pin!(sleep(Duration::ZERO));
        if due.as_mut().poll(cx).is_pending() {
            return std::task::Poll::Ready(());
        }
    })
}

fn finished_join_handles_let_other_tasks_run(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let limit = 5_000;
    let steps = rt.block_on(async {
        let handles: Vec<_> = (0..limit).map(|_| ring_rt::spawn(async {})).collect();
        // Every one of them finishes before the first is awaited.
        ring_rt::yield_now().await;
        let handles = Rc::new(RefCell::new(handles.into_iter()));
        steps_before_a_neighbour_runs(limit, move || {
            let next = handles.borrow_mut().next();
            async move {
                match next {
                    Some(handle) => handle.await.map_err(joined),
                    None => Err(io::Error::other("no handle left")),
                }
            }
        })
        .await
    })?;
    check!(
        steps <= MOST_STEPS_BEFORE_A_NEIGHBOUR,
        "{steps} finished handles awaited before a task ready all along"
    );
    Ok(Completion::Completed)
}

/// 1-byte reads through the adapter, served from its buffer (each refill is an op).
fn adapter_reads_of_buffered_bytes_let_other_tasks_run(kind: BackendKind) -> Outcome {
    use tokio::io::AsyncReadExt;

    let rt = runtime!(kind);
    let (reader, writer) = std::os::unix::net::UnixStream::pair()?;
    writer.set_nonblocking(true)?;
    let mut queued = 0;
    while queued < 64 * 1024 {
        match (&writer).write(&[7; 4096]) {
            Ok(n) => queued += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e.into()),
        }
    }
    let limit = 20_000.min(queued);
    let steps = rt.block_on(async {
        let reader = ring_rt::net::UnixStream::from_std(reader)?;
        let adapter = Rc::new(Cell::new(Some(ring_rt::compat::Compat::new(reader))));
        steps_before_a_neighbour_runs(limit, move || {
            let adapter = adapter.clone();
            async move {
                // Taken out for the read: only this task uses the adapter.
                let mut taken = adapter.take().expect("the adapter is put back");
                let read = taken.read_u8().await;
                adapter.set(Some(taken));
                read.map(drop)
            }
        })
        .await
    })?;
    drop(writer);
    check!(
        steps <= MOST_STEPS_BEFORE_A_NEIGHBOUR,
        "{steps} buffered reads before a task ready all along"
    );
    Ok(Completion::Completed)
}

/// With the poll's budget spent, a read bounded by a zero timeout still returns the bytes
/// queued for it: it waits for the next poll and is tried then, before its deadline is
/// looked at (it timed out untried on epoll). `.timeout()` on the op on both backends;
/// `time::timeout` on epoll only (on io_uring the read's completion comes a loop turn
/// after a zero deadline, with or without a budget).
fn a_timeout_tries_its_future_first_with_the_budget_spent(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    for future_level in [false, true] {
        if future_level && kind == BackendKind::Uring {
            continue;
        }
        let got = rt.block_on(async {
            let (a, b) = ring_rt::net::UnixStream::pair()?;
            a.write_all(&b"hello"[..]).await.0?;
            sleep(Duration::from_millis(2)).await;
            spend_the_budget().await;
            let (res, buf) = if future_level {
                timeout(Duration::ZERO, b.read(Vec::with_capacity(16)))
                    .await
                    .map_err(io::Error::from)?
            } else {
                b.read(Vec::with_capacity(16)).timeout(Duration::ZERO).await
            };
            res.map(|_| buf)
        });
        let got = got.map_err(|e| format!("future level {future_level}: {e}"))?;
        check!(got == b"hello", "future level {future_level}: read {got:?}");
    }
    Ok(Completion::Completed)
}

/// A future that never runs out of ops that complete at once spends every poll's budget:
/// its timeout still fires (its sleep was polled within the spent budget, and never
/// registered).
fn a_timeout_fires_around_a_future_that_spends_every_budget(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let start = Instant::now();
    let (ended, watchdog) = (Arc::new(AtomicBool::new(false)), Instant::now());
    let ended2 = ended.clone();
    // A hang is reported, not waited out: the process ends after 10 s.
    let guard = std::thread::spawn(move || {
        while !ended2.load(Ordering::Relaxed) {
            if watchdog.elapsed() > Duration::from_secs(10) {
                eprintln!("a_timeout_fires_around_a_future_that_spends_every_budget: hung");
                std::process::exit(1);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    let timed = rt.block_on(timeout(Duration::from_millis(20), async {
        loop {
            sleep(Duration::ZERO).await;
        }
    }));
    ended.store(true, Ordering::Relaxed);
    guard.join().expect("watchdog");
    check!(timed.is_err(), "the endless future ended");
    check!(
        start.elapsed() < Duration::from_secs(5),
        "fired after {:?}",
        start.elapsed()
    );
    Ok(Completion::Completed)
}

/// How many of `n` sleeps already due complete when polled one after another in one poll.
fn due_sleeps_ready_in_one_poll(n: usize) -> impl Future<Output = usize> {
    std::future::poll_fn(move |cx| {
        let ready = (0..n)
            .filter(|_| std::pin::pin!(sleep(Duration::ZERO)).poll(cx).is_ready())
            .count();
        std::task::Poll::Ready(ready)
    })
}

/// `unconstrained` lifts the budget for the future it wraps, in a task and in `block_on`'s
/// future, and the spent budget around it is spent again once it returns.
fn an_unconstrained_future_completes_every_ready_op_in_one_poll(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let (fresh, spent, after) = rt.block_on(async {
        let fresh = ring_rt::unconstrained(due_sleeps_ready_in_one_poll(1_000)).await;
        let task = ring_rt::spawn(async {
            spend_the_budget().await;
            let spent = ring_rt::unconstrained(due_sleeps_ready_in_one_poll(1_000)).await;
            (spent, due_sleeps_ready_in_one_poll(1).await)
        });
        task.await.map(|(spent, after)| (fresh, spent, after))
    })?;
    check!(fresh == 1_000, "{fresh} of 1,000 due sleeps in block_on");
    check!(
        spent == 1_000,
        "{spent} of 1,000 with the task's budget spent"
    );
    check!(after == 0, "the task's spent budget came back refilled");
    Ok(Completion::Completed)
}

/// A nested executor (here a loop polling with a no-op waker) inside a task that spent
/// its budget waits for a loop turn it blocks; inside `unconstrained` what completes
/// without the loop (due sleeps here) runs. (io_uring I/O needs the loop either way.)
fn a_nested_executor_inside_unconstrained_finishes_due_sleeps_with_the_budget_spent(
    kind: BackendKind,
) -> Outcome {
    let rt = runtime!(kind);
    let polls = rt.block_on(async {
        let task = ring_rt::spawn(async {
            spend_the_budget().await;
            let mut inner = std::pin::pin!(async {
                for _ in 0..300 {
                    sleep(Duration::ZERO).await;
                }
            });
            ring_rt::unconstrained(std::future::poll_fn(|_| {
                let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
                let polls = (1..=10_000).find(|_| inner.as_mut().poll(&mut cx).is_ready());
                std::task::Poll::Ready(polls)
            }))
            .await
        });
        task.await
    })?;
    check!(polls == Some(1), "the nested executor's polls: {polls:?}");
    Ok(Completion::Completed)
}

/// A timeout whose deadline has passed elapses at once, and counts against the task's
/// budget as the sleep it is (review CG: `timeout` polled its sleep outside the budget, so
/// a loop of `timeout(ZERO, ..)` never yielded; and on epoll an op-level `.timeout(ZERO)`
/// read of an idle socket timed out without spending anything).
fn timeouts_that_elapse_at_once_let_other_tasks_run(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let limit = 100_000;
    let pending = rt.block_on(steps_before_a_neighbour_runs(limit, || async {
        let _ = timeout(Duration::ZERO, std::future::pending::<()>()).await;
        Ok(())
    }))?;
    let (reader, _writer) = std::os::unix::net::UnixStream::pair()?;
    let timed_reads = rt.block_on(async {
        let reader = Rc::new(ring_rt::net::UnixStream::from_std(reader)?);
        steps_before_a_neighbour_runs(limit, move || {
            let reader = reader.clone();
            async move {
                let (res, _) = reader
                    .read(Vec::with_capacity(16))
                    .timeout(Duration::ZERO)
                    .await;
                match res {
                    Err(e) if e.kind() == io::ErrorKind::TimedOut => Ok(()),
                    other => Err(io::Error::other(format!("an idle read gave {other:?}"))),
                }
            }
        })
        .await
    })?;
    check!(
        pending <= MOST_STEPS_BEFORE_A_NEIGHBOUR,
        "{pending} elapsed timeouts before a task ready all along"
    );
    check!(
        timed_reads <= MOST_STEPS_BEFORE_A_NEIGHBOUR,
        "{timed_reads} zero-bounded reads of an idle socket before a task ready all along"
    );
    Ok(Completion::Completed)
}

/// Review DB: a task's destructor, which the runtime's shutdown runs, polls the task's
/// socket read (in flight on io_uring, waiting for readiness on epoll): it said it was
/// polled outside its runtime (`InvalidInput`), where the runtime was shutting down
/// (`NotConnected`, as an op polled after the drop says). Review DC: a FIFO's `fs::read`
/// whose bytes had come, polled so, took them (one try of its call) and then dropped them
/// with the refusal; it now moves nothing.
fn an_op_polled_by_a_destructor_at_shutdown_says_shut_down(kind: BackendKind) -> Outcome {
    type Got = Rc<RefCell<Vec<io::Result<usize>>>>;
    /// Polls its op when dropped, a few times (an op polled outside its runtime takes a
    /// poll or two to have its cancel's completion in), and keeps what it got.
    struct PollOnDrop {
        op: std::pin::Pin<Box<dyn Future<Output = io::Result<usize>>>>,
        got: Got,
    }
    impl Drop for PollOnDrop {
        fn drop(&mut self) {
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            for _ in 0..20 {
                if let std::task::Poll::Ready(out) = self.op.as_mut().poll(&mut cx) {
                    self.got.borrow_mut().push(out);
                    return;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
    /// Spawns a task that polls `op` until it waits, then waits for ever holding it (and
    /// counts itself in `parked` then: the FIFO's bytes must come only after that, or the
    /// read takes them at home and its drop loses them, as any dropped read's would).
    fn hold(
        op: std::pin::Pin<Box<dyn Future<Output = io::Result<usize>>>>,
        got: &Got,
        parked: &Rc<Cell<usize>>,
    ) {
        let mut guard = PollOnDrop {
            op,
            got: got.clone(),
        };
        let parked = parked.clone();
        ring_rt::spawn(async move {
            for _ in 0..3 {
                let polled =
                    std::future::poll_fn(|cx| std::task::Poll::Ready(guard.op.as_mut().poll(cx)))
                        .await;
                assert!(polled.is_pending(), "an op with nothing to read ended");
                sleep(Duration::from_millis(5)).await;
            }
            parked.set(parked.get() + 1);
            std::future::pending::<()>().await;
        });
    }
    let rt = runtime!(kind);
    let got: Got = Rc::default();
    let (_a, b) = rt.block_on(async { ring_rt::net::UnixStream::pair() })?;
    let fifo =
        std::env::temp_dir().join(format!("ring-rt-dtor-fifo-{}-{kind}", std::process::id()));
    let _ = std::fs::remove_file(&fifo);
    support::mkfifo(&fifo)?;
    let mut held = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo)?;
    let path = fifo.clone();
    let parked = Rc::new(Cell::new(0));
    rt.block_on(async {
        let b = Rc::new(b);
        hold(
            Box::pin(async move { b.read(vec![0u8; 8]).await.0 }),
            &got,
            &parked,
        );
        hold(
            Box::pin(async move { ring_rt::fs::read(path).await.map(|v| v.len()) }),
            &got,
            &parked,
        );
        // Slow VMs (CI's kernel rows) polled the read after the bytes came with a fixed wait.
        let start = Instant::now();
        while parked.get() < 2 && start.elapsed() < Duration::from_secs(20) {
            sleep(Duration::from_millis(2)).await;
        }
        // The FIFO read's readiness comes; it is not polled before the shutdown.
        held.write_all(b"hello")?;
        sleep(Duration::from_millis(30)).await;
        io::Result::Ok(())
    })?;
    drop(rt);
    let _ = std::fs::remove_file(&fifo);
    let got = std::mem::take(&mut *got.borrow_mut());
    let mut left = [0u8; 16];
    let n = held.read(&mut left).unwrap_or(0);
    check!(
        got.len() == 2
            && got
                .iter()
                .all(|g| matches!(g, Err(e) if e.kind() == io::ErrorKind::NotConnected))
            && &left[..n] == b"hello",
        "{kind}: ops polled by their task's destructor at shutdown gave {got:?}; {:?} left in the FIFO",
        String::from_utf8_lossy(&left[..n])
    );
    Ok(Completion::Completed)
}

/// Review DE: a task's destructor, which the shutdown runs, starting a new read of a socket
/// whose bytes had come: on io_uring the receive went to the kernel, was cancelled as
/// polled outside its runtime, and took the bytes to a queue nothing could read after the
/// shutdown (epoll refused it). No op starts while the shutdown drops the tasks.
fn a_read_started_by_a_destructor_at_shutdown_takes_nothing(kind: BackendKind) -> Outcome {
    use std::os::fd::AsRawFd;
    struct ReadsOnDrop {
        stream: Option<ring_rt::net::UnixStream>,
        got: Rc<RefCell<Option<std::task::Poll<io::Result<usize>>>>>,
    }
    impl Drop for ReadsOnDrop {
        fn drop(&mut self) {
            let Some(stream) = self.stream.take() else {
                return;
            };
            let mut read = Box::pin(std::future::IntoFuture::into_future(
                stream.read(Vec::with_capacity(16)),
            ));
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            let polled = read.as_mut().poll(&mut cx).map(|(res, _)| res);
            *self.got.borrow_mut() = Some(polled);
        }
    }
    let rt = runtime!(kind);
    let (ours, mut peer) = std::os::unix::net::UnixStream::pair()?;
    let probe = ours.try_clone()?;
    let stream = rt.block_on(async { ring_rt::net::UnixStream::from_std(ours) })?;
    let got = Rc::new(RefCell::new(None));
    let guard = ReadsOnDrop {
        stream: Some(stream),
        got: got.clone(),
    };
    drop(rt.spawn(async move {
        let _guard = guard;
        std::future::pending::<()>().await
    }));
    rt.block_on(sleep(Duration::from_millis(10)));
    peer.write_all(b"hello")?;
    drop(rt);
    let mut waiting: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through a pointer to a live one.
    unsafe { libc::ioctl(probe.as_raw_fd(), libc::FIONREAD, &mut waiting) };
    let got = got.borrow_mut().take();
    check!(
        matches!(&got, Some(std::task::Poll::Ready(Err(e))) if e.kind() == io::ErrorKind::NotConnected)
            && waiting == 5,
        "{kind}: a read started by a destructor at shutdown gave {got:?}; {waiting} of 5 bytes left"
    );
    Ok(Completion::Completed)
}
