//! Several workers: the `Handle` that reaches any of them from any thread, `JoinHandle`s
//! awaited across threads, `spawn_blocking`, metrics of every worker, and what happens to
//! work sent to a runtime that is gone. Both backends.

#[macro_use]
mod support;

use std::collections::HashSet;
use std::future::Future;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};

use std::time::{Duration, Instant};

use libtest_mimic::Completion;
use ring_rt::net::UnixStream;
use ring_rt::{BackendKind, Builder, Handle};
use support::{bounded, Outcome};

const LIMIT: Duration = Duration::from_secs(20);

fn main() {
    support::run(&[
        (
            "the_default_is_one_worker_per_cpu",
            the_default_is_one_worker_per_cpu,
        ),
        (
            "handle_spawns_spread_over_the_workers",
            handle_spawns_spread_over_the_workers,
        ),
        (
            "a_handle_works_from_a_thread_outside_the_runtime",
            a_handle_works_from_a_thread_outside_the_runtime,
        ),
        (
            "spawn_local_builds_its_future_on_its_worker",
            spawn_local_builds_its_future_on_its_worker,
        ),
        (
            "a_join_handle_is_awaited_on_another_worker",
            a_join_handle_is_awaited_on_another_worker,
        ),
        (
            "a_remote_task_can_be_aborted_from_another_thread",
            a_remote_task_can_be_aborted_from_another_thread,
        ),
        (
            "spawns_after_the_runtime_is_gone_are_cancelled",
            spawns_after_the_runtime_is_gone_are_cancelled,
        ),
        (
            "a_panicking_factory_is_the_tasks_panic",
            a_panicking_factory_is_the_tasks_panic,
        ),
        (
            "bad_worker_indices_are_invalid_input",
            bad_worker_indices_are_invalid_input,
        ),
        (
            "spawn_blocking_runs_off_the_workers",
            spawn_blocking_runs_off_the_workers,
        ),
        (
            "spawn_blocking_keeps_to_its_thread_cap",
            spawn_blocking_keeps_to_its_thread_cap,
        ),
        (
            "blocking_work_queued_at_shutdown_is_cancelled",
            blocking_work_queued_at_shutdown_is_cancelled,
        ),
        ("metrics_cover_every_worker", metrics_cover_every_worker),
        (
            "handle_current_is_the_running_runtimes",
            handle_current_is_the_running_runtimes,
        ),
        (
            "cross_worker_wakes_go_by_msg_ring_where_the_kernel_has_it",
            cross_worker_wakes_go_by_msg_ring_where_the_kernel_has_it,
        ),
        (
            "serve_balanced_spreads_connections_by_load",
            serve_balanced_spreads_connections_by_load,
        ),
        (
            "serve_balanced_ends_when_its_listener_fails_for_good",
            serve_balanced_ends_when_its_listener_fails_for_good,
        ),
        (
            "serve_balanced_on_another_worker_leaves_worker_0_out",
            serve_balanced_on_another_worker_leaves_worker_0_out,
        ),
        (
            "a_panicking_serve_ends_only_its_connection",
            a_panicking_serve_ends_only_its_connection,
        ),
        (
            "a_serve_panicking_with_a_payload_that_panics_in_drop_ends_only_its_connection",
            a_serve_panicking_with_a_payload_that_panics_in_drop_ends_only_its_connection,
        ),
        (
            "a_blocking_closure_reaches_its_runtime",
            a_blocking_closure_reaches_its_runtime,
        ),
        (
            "pinned_workers_stay_inside_the_affinity_mask",
            pinned_workers_stay_inside_the_affinity_mask,
        ),
        (
            "blocking_threads_of_pinned_workers_use_the_whole_mask",
            blocking_threads_of_pinned_workers_use_the_whole_mask,
        ),
    ])
}

fn thread_name() -> String {
    std::thread::current().name().unwrap_or("?").to_string()
}

/// Polls `fut` on this plain thread until it finishes (a test's limit ends a hang).
fn block_on_thread<F: Future>(fut: F) -> F::Output {
    support::poll_on_thread(fut, Duration::from_secs(3600)).expect("finished within the hour")
}

/// `Runtime::new()` (and `Builder::new`) has one worker per CPU this process may run on.
fn the_default_is_one_worker_per_cpu(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::new());
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    check!(
        rt.threads() == cpus,
        "{} workers for {cpus} CPUs",
        rt.threads()
    );
    check!(
        rt.handle().workers() == cpus,
        "the handle counts {}",
        rt.handle().workers()
    );
    Ok(Completion::Completed)
}

/// Futures spawned through a handle run on more than one worker, and every output
/// comes back; workers 1 and up take them all, inside `block_on` or not.
fn handle_spawns_spread_over_the_workers(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(3));
    let handle = rt.handle();
    // Outside block_on: worker 0 does not run, so workers 1 and 2 take every spawn.
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            handle.spawn_local(move || async move {
                ring_rt::time::sleep(Duration::from_millis(5)).await;
                (i, thread_name())
            })
        })
        .collect();
    let outputs: Vec<(i32, String)> = tasks
        .into_iter()
        .map(|t| block_on_thread(t).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let sum: i32 = outputs.iter().map(|(i, _)| i).sum();
    check!(sum == (0..64).sum::<i32>(), "outputs summed to {sum}");
    let threads: HashSet<&str> = outputs.iter().map(|(_, t)| t.as_str()).collect();
    let expected: HashSet<&str> = ["ring-rt-worker-1", "ring-rt-worker-2"].into();
    check!(threads == expected, "ran on {threads:?}");
    // Inside block_on too: worker 0 runs only while its block_on does, so spawns that
    // name no worker keep off it (spawn_on(0, ..) still puts a task there).
    let names = rt.block_on(bounded(LIMIT, async {
        let tasks: Vec<_> = (0..30)
            .map(|_| {
                handle.spawn_local(|| async {
                    ring_rt::time::sleep(Duration::from_millis(20)).await;
                    thread_name()
                })
            })
            .collect();
        let mut names = HashSet::new();
        for t in tasks {
            names.insert(t.await.map_err(|e| e.to_string())?);
        }
        Ok::<_, String>(names)
    }))??;
    let names: HashSet<&str> = names.iter().map(String::as_str).collect();
    check!(names == expected, "inside block_on they ran on {names:?}");
    let on_0 = rt.block_on(handle.spawn_on(0, async { thread_name() })?);
    check!(
        on_0.as_deref()
            .is_ok_and(|name| !name.starts_with("ring-rt-worker")),
        "spawn_on(0) ran on {on_0:?}"
    );
    Ok(Completion::Completed)
}

/// A handle taken to a plain thread spawns there, and that thread awaits the output; a
/// handle is `Send + Sync + Clone`.
fn a_handle_works_from_a_thread_outside_the_runtime(kind: BackendKind) -> Outcome {
    fn assert_send_sync<T: Send + Sync + Clone>(_: &T) {}
    let rt = runtime!(kind, Builder::default().threads(2));
    let handle = rt.handle();
    assert_send_sync(&handle);
    let got = std::thread::spawn(move || {
        let task = handle.spawn_local(|| async {
            let (a, b) = UnixStream::pair()?;
            a.write_all(b"across".to_vec()).await.0?;
            let (n, buf) = b.read(Vec::with_capacity(16)).await;
            std::io::Result::Ok(buf[..n?].to_vec())
        });
        block_on_thread(task)
    })
    .join()
    .map_err(|_| "the thread panicked")?;
    check!(
        got.as_ref()
            .is_ok_and(|r| r.as_ref().is_ok_and(|b| b == b"across")),
        "got {got:?}"
    );
    Ok(Completion::Completed)
}

/// `spawn_local_on` sends only the factory: the future it builds holds an `Rc` and a
/// socket and runs on the worker named.
fn spawn_local_builds_its_future_on_its_worker(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(2));
    let task = rt.handle().spawn_local_on(1, || {
        let local = Rc::new(String::from("not Send"));
        async move {
            let (a, b) = UnixStream::pair().expect("pair");
            a.write_all(local.as_bytes().to_vec())
                .await
                .0
                .expect("write");
            let (n, buf) = b.read(Vec::with_capacity(16)).await;
            (
                String::from_utf8_lossy(&buf[..n.expect("read")]).into_owned(),
                thread_name(),
            )
        }
    })?;
    let (text, name) = rt
        .block_on(bounded(LIMIT, task))?
        .map_err(|e| e.to_string())?;
    check!(
        text == "not Send" && name == "ring-rt-worker-1",
        "got {text:?} on {name}"
    );
    Ok(Completion::Completed)
}

/// A task on worker 1 awaits a JoinHandle of a task on worker 0, and the other way round.
fn a_join_handle_is_awaited_on_another_worker(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(2));
    let handle = rt.handle();
    let out = rt.block_on(bounded(LIMIT, async {
        let on_zero = ring_rt::spawn(async {
            ring_rt::time::sleep(Duration::from_millis(10)).await;
            thread_name()
        });
        let on_one = handle.spawn_on(1, async move { (on_zero.await, thread_name()) })?;
        let (zero, one) = on_one.await.map_err(std::io::Error::from)?;
        std::io::Result::Ok((zero.map_err(std::io::Error::from)?, one))
    }))??;
    let main = thread_name();
    check!(
        out.0 == main && out.1 == "ring-rt-worker-1",
        "ran on {out:?} (main is {main})"
    );
    Ok(Completion::Completed)
}

/// `abort` from a thread outside the runtime cancels a task that waits on worker 1.
fn a_remote_task_can_be_aborted_from_another_thread(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(2));
    let task = rt.handle().spawn_local_on(1, std::future::pending::<()>)?;
    let task = Arc::new(task);
    let aborter = task.clone();
    std::thread::spawn(move || aborter.abort())
        .join()
        .map_err(|_| "the thread panicked")?;
    let task = Arc::try_unwrap(task).map_err(|_| "still shared")?;
    let out = rt.block_on(bounded(LIMIT, task))?;
    check!(
        out.as_ref().is_err_and(|e| e.is_cancelled()),
        "the aborted task gave {out:?}"
    );
    // An abort that comes before the spawn reaches its worker holds too.
    let task = rt.handle().spawn_on(1, std::future::pending::<()>())?;
    task.abort();
    let out = rt.block_on(bounded(LIMIT, task))?;
    check!(
        out.as_ref().is_err_and(|e| e.is_cancelled()),
        "aborted at once, it gave {out:?}"
    );
    Ok(Completion::Completed)
}

/// Work sent through a handle after its runtime was dropped ends `Cancelled` (a queued
/// spawn too): nothing waits for ever.
fn spawns_after_the_runtime_is_gone_are_cancelled(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(2));
    let handle = rt.handle();
    // Queued for worker 0, which never runs again.
    let queued = handle.spawn_on(0, async { 1 })?;
    drop(rt);
    let after = handle.spawn(async { 2 });
    let local = handle.spawn_local(|| async { 3 });
    let blocking = handle.spawn_blocking(|| 4);
    for (what, out) in [
        ("queued", block_on_thread(queued)),
        ("spawn", block_on_thread(after)),
        ("spawn_local", block_on_thread(local)),
        ("spawn_blocking", block_on_thread(blocking)),
    ] {
        check!(
            out.as_ref().is_err_and(|e| e.is_cancelled()),
            "{what} after the runtime was dropped gave {out:?}"
        );
    }
    Ok(Completion::Completed)
}

/// A factory that panics on its worker: the task's handle reports the panic, and the
/// worker goes on serving.
fn a_panicking_factory_is_the_tasks_panic(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(2));
    let out = support::expecting_panics(|| {
        let task = rt
            .handle()
            .spawn_local_on(1, || -> std::future::Ready<()> {
                panic!("this factory panics on purpose")
            })
            .expect("worker 1");
        rt.block_on(bounded(LIMIT, task))
    })?;
    check!(out.as_ref().is_err_and(|e| e.is_panic()), "gave {out:?}");
    let after = rt.handle().spawn_on(1, async { thread_name() })?;
    let name = rt
        .block_on(bounded(LIMIT, after))?
        .map_err(|e| e.to_string())?;
    check!(name == "ring-rt-worker-1", "then ran on {name}");
    Ok(Completion::Completed)
}

/// A worker the runtime does not have is `InvalidInput`, not a panic.
fn bad_worker_indices_are_invalid_input(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(2));
    for index in [2, 17, usize::MAX] {
        let spawned = rt.handle().spawn_on(index, async {});
        check!(
            spawned
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::InvalidInput),
            "spawn_on({index}) gave {:?}",
            spawned.map(|_| ())
        );
        let local = rt.handle().spawn_local_on(index, || async {});
        check!(local.is_err(), "spawn_local_on({index}) was accepted");
    }
    Ok(Completion::Completed)
}

/// `spawn_blocking` runs on a pool thread (not a worker), on both backends, gives back
/// the closure's output or its panic, and a handle aborted before the closure starts
/// keeps it from running.
fn spawn_blocking_runs_off_the_workers(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(1));
    let name = rt.block_on(bounded(LIMIT, async {
        ring_rt::spawn_blocking(thread_name).await
    }))?;
    check!(
        name.as_deref().is_ok_and(|n| n == "ring-rt-blocking"),
        "ran on {name:?}"
    );
    let panicked = support::expecting_panics(|| {
        rt.block_on(bounded(LIMIT, async {
            ring_rt::spawn_blocking(|| panic!("this closure panics on purpose")).await
        }))
    })?;
    check!(
        panicked.as_ref().is_err_and(|e| e.is_panic()),
        "a panicking closure gave {panicked:?}"
    );
    // Hold the only pool thread, so the next closure waits in the queue; abort it there.
    let rt = runtime!(kind, Builder::default().threads(1).max_blocking_threads(1));
    let gate = Arc::new(Barrier::new(2));
    let ran = Arc::new(AtomicUsize::new(0));
    let held = {
        let gate = gate.clone();
        rt.handle().spawn_blocking(move || {
            gate.wait();
        })
    };
    let queued = {
        let ran = ran.clone();
        rt.handle()
            .spawn_blocking(move || ran.fetch_add(1, Ordering::SeqCst))
    };
    queued.abort();
    gate.wait();
    rt.block_on(bounded(LIMIT, held))?
        .map_err(|e| e.to_string())?;
    let out = rt.block_on(bounded(LIMIT, queued))?;
    check!(
        out.as_ref().is_err_and(|e| e.is_cancelled()) && ran.load(Ordering::SeqCst) == 0,
        "a closure aborted in the queue gave {out:?} and ran {} times",
        ran.load(Ordering::SeqCst)
    );
    Ok(Completion::Completed)
}

/// Never more pool threads than `max_blocking_threads`: 8 closures that each hold for a
/// while, a cap of 3.
fn spawn_blocking_keeps_to_its_thread_cap(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(1).max_blocking_threads(3));
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (running, most) = (running.clone(), most.clone());
            rt.handle().spawn_blocking(move || {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(20));
                running.fetch_sub(1, Ordering::SeqCst);
            })
        })
        .collect();
    rt.block_on(bounded(LIMIT, async {
        for t in tasks {
            t.await.map_err(|e| e.to_string())?;
        }
        Ok::<(), String>(())
    }))??;
    let most = most.load(Ordering::SeqCst);
    check!((1..=3).contains(&most), "{most} closures ran at once");
    Ok(Completion::Completed)
}

/// Dropping the runtime with closures queued on its pool cancels them, and waits (bounded)
/// for the one running.
fn blocking_work_queued_at_shutdown_is_cancelled(kind: BackendKind) -> Outcome {
    // The first closure tells when it runs (a sleep gave the pool's new thread 10 ms, and a
    // paused VM took longer) and when it ends. A round in which it ended before the drop
    // began (a pause of `hold`) proves nothing and runs again, holding longer.
    for hold in [300, 2_000].map(Duration::from_millis) {
        let rt = runtime!(kind, Builder::default().threads(1).max_blocking_threads(1));
        let (began, runs) = std::sync::mpsc::channel();
        let ended = Arc::new(std::sync::Mutex::new(None));
        let end = ended.clone();
        let running = rt.handle().spawn_blocking(move || {
            let _ = began.send(());
            std::thread::sleep(hold);
            *end.lock().unwrap() = Some(Instant::now());
        });
        let queued = rt.handle().spawn_blocking(|| 7);
        check!(
            runs.recv_timeout(LIMIT).is_ok(),
            "the pool did not start the first closure"
        );
        let started = Instant::now();
        drop(rt);
        let took = started.elapsed();
        let ended = *ended.lock().unwrap();
        check!(
            took < hold + Duration::from_secs(2),
            "the drop took {took:?}"
        );
        let running = block_on_thread(running);
        let queued = block_on_thread(queued);
        check!(running.is_ok(), "the running closure gave {running:?}");
        let ended = ended.ok_or("the drop did not wait for the running closure")?;
        if ended < started {
            continue;
        }
        check!(
            queued.as_ref().is_err_and(|e| e.is_cancelled()),
            "the queued closure gave {queued:?}"
        );
        return Ok(Completion::Completed);
    }
    Err("the first closure ended before the drop in every round".into())
}

/// `Runtime::metrics` sums every worker and lists each worker's own figures.
fn metrics_cover_every_worker(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(2));
    let handle = rt.handle();
    rt.block_on(bounded(LIMIT, async {
        for _ in 0..3 {
            ring_rt::spawn(async {}).await.map_err(|e| e.to_string())?;
        }
        for _ in 0..5 {
            handle
                .spawn_local_on(1, || async {
                    ring_rt::time::sleep(Duration::from_millis(1)).await;
                })
                .map_err(|e| e.to_string())?
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok::<(), String>(())
    }))??;
    let m = rt.metrics();
    check!(m.workers.len() == 2, "{} workers listed", m.workers.len());
    check!(
        m.workers[0].tasks_spawned == 3 && m.workers[1].tasks_spawned == 5,
        "spawned per worker: {} and {}",
        m.workers[0].tasks_spawned,
        m.workers[1].tasks_spawned
    );
    check!(m.tasks_spawned == 8, "{} spawned in all", m.tasks_spawned);
    check!(
        m.io.enters == m.workers[0].io.enters + m.workers[1].io.enters
            && m.workers[1].io.enters > 0,
        "enters {} = {} + {}",
        m.io.enters,
        m.workers[0].io.enters,
        m.workers[1].io.enters
    );
    Ok(Completion::Completed)
}

/// `Handle::current` inside a task is the running runtime's, on every worker; outside
/// any it is an error from `try_current` (and `spawn_blocking`'s free function panics,
/// as `spawn` does).
fn handle_current_is_the_running_runtimes(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(2));
    check!(
        Handle::try_current().is_err(),
        "a handle outside any runtime"
    );
    let task = rt.handle().spawn_on(1, async {
        let here = Handle::current();
        let inner = here.spawn_on(0, async { thread_name() }).expect("worker 0");
        (here.workers(), inner.await)
    })?;
    let (workers, inner) = rt
        .block_on(bounded(LIMIT, task))?
        .map_err(|e| e.to_string())?;
    check!(
        workers == 2,
        "the handle on worker 1 counts {workers} workers"
    );
    check!(
        inner.as_deref().is_ok_and(|n| n == thread_name()),
        "the spawn back onto worker 0 ran on {inner:?}"
    );
    Ok(Completion::Completed)
}

/// A ping-pong between tasks on workers 0 and 1 over a runtime-agnostic channel: every
/// wake crosses workers. Between io_uring workers (5.18+) the wakes go by MSG_RING, a CQE
/// posted into the other worker's ring: `msg_rings_sent` counts them on both workers. On
/// epoll, or with `msg_ring` masked, the eventfd carries them and none is counted. The
/// exchange completes either way.
fn cross_worker_wakes_go_by_msg_ring_where_the_kernel_has_it(kind: BackendKind) -> Outcome {
    const ROUNDS: u32 = 200;
    for masked in [false, true] {
        let mut builder = Builder::default().threads(2);
        if masked {
            builder = builder.feature_mask(ring_rt::FeatureMask::parse("-msg_ring")?);
        }
        let rt = runtime!(kind, builder);
        let has_msg_ring = rt
            .features()
            .is_some_and(|f| f.has(ring_rt::Feature::MsgRing));
        let (to_one, mut at_one) = tokio::sync::mpsc::channel::<u32>(1);
        let (to_zero, mut at_zero) = tokio::sync::mpsc::channel::<u32>(1);
        let echo = rt.handle().spawn_on(1, async move {
            while let Some(n) = at_one.recv().await {
                if to_zero.send(n + 1).await.is_err() {
                    break;
                }
            }
        })?;
        let before = rt.metrics();
        rt.block_on(bounded(LIMIT, async {
            for n in 0..ROUNDS {
                to_one.send(n).await.map_err(|e| e.to_string())?;
                let back = at_zero.recv().await.ok_or("the echo task ended")?;
                if back != n + 1 {
                    return Err(format!("sent {n}, got {back}"));
                }
            }
            Ok(())
        }))??;
        drop(to_one);
        rt.block_on(bounded(LIMIT, echo))?
            .map_err(|e| e.to_string())?;
        let after = rt.metrics();
        let sent: Vec<u64> = (0..2)
            .map(|w| after.workers[w].io.msg_rings_sent - before.workers[w].io.msg_rings_sent)
            .collect();
        if has_msg_ring && kind == BackendKind::Uring {
            check!(
                sent.iter().all(|&n| n >= u64::from(ROUNDS) / 2),
                "MSG_RING wakes sent by workers 0 and 1: {sent:?} over {ROUNDS} round trips"
            );
        } else {
            check!(
                sent == [0, 0],
                "{kind}, masked {masked}: MSG_RING wakes {sent:?} where there is none"
            );
        }
    }
    Ok(Completion::Completed)
}

/// One listener on worker 0, `serve_balanced`: 20 long-lived connections are served half
/// on each worker (the least loaded takes the next), every byte echoed intact, whether
/// the connection stayed on worker 0 or moved to worker 1 by its fd.
fn serve_balanced_spreads_connections_by_load(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(2));
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let counts = rt
        .block_on(bounded(LIMIT, async {
            let listener = ring_rt::net::TcpListener::bind("127.0.0.1:0")?;
            let addr = listener.local_addr()?;
            let handle = Handle::current();
            let server = ring_rt::spawn(async move {
                handle
                    .serve_balanced(&listener, move |stream| {
                        let tx = tx.clone();
                        async move {
                            let _ = tx.send(thread_name());
                            let mut chunks = stream.recv_stream();
                            while let Some(Ok(buf)) = chunks.next().await {
                                if stream.write_all(buf).await.0.is_err() {
                                    break;
                                }
                            }
                        }
                    })
                    .await
            });
            let mut clients = Vec::new();
            for i in 0..20u8 {
                let client = ring_rt::net::TcpStream::connect(addr).await?;
                client.write_all(vec![i; 100]).await.0?;
                let mut got = Vec::new();
                while got.len() < 100 {
                    let (n, buf) = client.read(Vec::with_capacity(128)).await;
                    let n = n?;
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                if got != vec![i; 100] {
                    return Err(
                        format!("client {i} got {} bytes back, not its own", got.len()).into(),
                    );
                }
                clients.push(client);
            }
            let mut counts = std::collections::HashMap::<String, usize>::new();
            for _ in 0..20 {
                *counts
                    .entry(rx.recv().map_err(|e| e.to_string())?)
                    .or_default() += 1;
            }
            server.abort();
            drop(clients);
            Ok::<_, Box<dyn std::error::Error>>(counts)
        }))?
        .map_err(|e| e.to_string())?;
    check!(
        counts.len() == 2 && counts.values().all(|&n| (8..=12).contains(&n)),
        "connections per worker: {counts:?}"
    );
    Ok(Completion::Completed)
}

/// Echoes what `stream` sends until it ends.
async fn echo_all(stream: ring_rt::net::TcpStream) {
    loop {
        let (n, mut buf) = stream.read(vec![0u8; 64]).await;
        match n {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.truncate(n),
        }
        if stream.write_all(buf).await.0.is_err() {
            break;
        }
    }
}

/// One echo round trip on a plain client, bounded in time.
fn echo_once(client: &mut std::net::TcpStream, byte: u8) -> std::io::Result<()> {
    use std::io::{Read, Write};
    client.set_read_timeout(Some(Duration::from_secs(2)))?;
    client.write_all(&[byte])?;
    let mut back = [0u8; 1];
    client.read_exact(&mut back)?;
    if back[0] != byte {
        return Err(std::io::Error::other("echoed another byte"));
    }
    Ok(())
}

/// Review Z (3): a listener shut down underneath fails every accept with `EINVAL` for
/// good. `serve_balanced` skipped every error and never ended: a core at 100%, and on
/// epoll (each try failing at once, the loop never pending) the worker's other tasks
/// never ran. It returns that error now.
fn serve_balanced_ends_when_its_listener_fails_for_good(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(2));
    rt.block_on(bounded(LIMIT, async {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let other_end = socket2::Socket::from(std_listener.try_clone()?);
        let listener = ring_rt::net::TcpListener::from_std(std_listener)?;
        other_end.shutdown(std::net::Shutdown::Both)?;
        let handle = Handle::current();
        let serve = handle.serve_balanced(&listener, |_| async {});
        let err = ring_rt::time::timeout(Duration::from_secs(10), serve)
            .await
            .map_err(|_| "serve_balanced went on after its listener failed for good")?;
        check!(
            err.raw_os_error() == Some(libc::EINVAL),
            "{kind}: ended with {err}"
        );
        // Review AC (2): a UDP socket taken for a listener (safe std conversions) failed
        // every accept with EOPNOTSUPP, which may pass on a TCP listener: it spun a core
        // for ever. `from_std` now refuses it at the door (a socket of another type).
        let udp: std::os::fd::OwnedFd = std::net::UdpSocket::bind("127.0.0.1:0")?.into();
        let not_tcp = ring_rt::net::TcpListener::from_std(std::net::TcpListener::from(udp));
        check!(
            not_tcp
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::InvalidInput),
            "{kind}: a UDP socket taken as a TcpListener: {:?}",
            not_tcp.map(drop)
        );
        Ok(Completion::Completed)
    }))?
}

/// Review Z (4): an accept loop on worker 1 handed connections to worker 0 whenever some
/// unrelated `block_on` ran on it; once that returned, those connections sat unserved.
fn serve_balanced_on_another_worker_leaves_worker_0_out(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(2));
    let handle = rt.handle();
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = std_listener.local_addr()?;
    let h = handle.clone();
    let _server = handle.spawn_local_on(1, move || async move {
        match ring_rt::net::TcpListener::from_std(std_listener) {
            Ok(listener) => Some(h.serve_balanced(&listener, echo_all).await),
            Err(_) => None,
        }
    })?;
    let clients = std::thread::spawn(move || -> std::io::Result<Vec<std::net::TcpStream>> {
        let mut clients = Vec::new();
        for i in 0..6u8 {
            let mut c = std::net::TcpStream::connect(addr)?;
            echo_once(&mut c, i)?;
            clients.push(c);
        }
        Ok(clients)
    });
    // An unrelated block_on, running while the connections come in.
    rt.block_on(ring_rt::time::sleep(Duration::from_millis(300)));
    let mut clients = clients
        .join()
        .map_err(|_| "the client thread panicked")?
        .map_err(|e| format!("first echoes: {e}"))?;
    for (i, c) in clients.iter_mut().enumerate() {
        let echoed = echo_once(c, 100 + i as u8);
        check!(
            echoed.is_ok(),
            "{kind}: connection {i} went unserved once block_on returned: {echoed:?}"
        );
    }
    Ok(Completion::Completed)
}

/// Review Z (7): `serve` panicking killed the whole accept loop when the connection
/// stayed on the accepting worker (it was called right there), and only its own task
/// when the connection moved. It is the connection task's panic wherever it runs.
fn a_panicking_serve_ends_only_its_connection(kind: BackendKind) -> Outcome {
    serve_panicking_first(kind, || panic!("serve panics for the first connection"))
}

/// A panic payload whose own drop panics.
struct PanicsAsItDrops;

impl Drop for PanicsAsItDrops {
    fn drop(&mut self) {
        panic!("the payload panicked as it was dropped");
    }
}

/// As above, with a payload that panics again as it is dropped: the connection's task
/// ends with it, and nobody awaits that task, so the payload is dropped where the
/// connection's panic ended up, never inside the accept loop.
fn a_serve_panicking_with_a_payload_that_panics_in_drop_ends_only_its_connection(
    kind: BackendKind,
) -> Outcome {
    serve_panicking_first(kind, || std::panic::panic_any(PanicsAsItDrops))
}

/// `serve_balanced` on one worker whose `serve` calls `panic` for the first connection:
/// the second is served all the same.
fn serve_panicking_first(kind: BackendKind, panic: fn()) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(1));
    let served = Arc::new(AtomicUsize::new(0));
    let out = support::expecting_panics(|| {
        rt.block_on(bounded(LIMIT, async {
            let listener = ring_rt::net::TcpListener::bind("127.0.0.1:0")?;
            let addr = listener.local_addr()?;
            let count = served.clone();
            let server = ring_rt::spawn(async move {
                Handle::current()
                    .serve_balanced(&listener, move |stream| {
                        if count.fetch_add(1, Ordering::SeqCst) == 0 {
                            panic();
                        }
                        echo_all(stream)
                    })
                    .await
            });
            let first = ring_rt::net::TcpStream::connect(addr).await?;
            let second = ring_rt::net::TcpStream::connect(addr).await?;
            second.write_all(&b"x"[..]).await.0?;
            let (n, buf) = second.read(Vec::with_capacity(8)).await;
            check!(
                n.as_ref().is_ok_and(|&n| n == 1) && buf == b"x",
                "{kind}: the second connection was not served after the first's panic: {n:?}"
            );
            check!(!server.is_finished(), "{kind}: the accept loop ended");
            server.abort();
            drop(first);
            Ok(Completion::Completed)
        }))
    });
    out?
}

/// Review Z (9): inside a `spawn_blocking` closure, `Handle::try_current` and a nested
/// `ring_rt::spawn_blocking` said "no ring-rt runtime on this thread", where tokio gives
/// the runtime's handle: a closure that hands work back to the workers needs it.
fn a_blocking_closure_reaches_its_runtime(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Builder::default().threads(2));
    let out = rt.block_on(bounded(LIMIT, async {
        let from_blocking = ring_rt::spawn_blocking(|| {
            let handle = Handle::try_current()?;
            let nested = ring_rt::spawn_blocking(|| 6 * 7);
            let spawned = handle.spawn(async { "on a worker" });
            let nested = support::poll_on_thread(nested, Duration::from_secs(10));
            let spawned = support::poll_on_thread(spawned, Duration::from_secs(10));
            Ok::<_, std::io::Error>((handle.workers(), nested, spawned))
        });
        from_blocking.await
    }))?;
    let (workers, nested, spawned) = out
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("{kind}: Handle::try_current in a blocking closure: {e}"))?;
    check!(workers == 2, "{kind}: {workers} workers");
    check!(matches!(nested, Some(Ok(42))), "{kind}: nested: {nested:?}");
    check!(
        matches!(spawned, Some(Ok("on a worker"))),
        "{kind}: spawned from a blocking closure: {spawned:?}"
    );
    // Outside any closure the thread has no runtime again.
    let after = std::thread::spawn(|| Handle::try_current().is_err()).join();
    check!(matches!(after, Ok(true)), "a plain thread found a runtime");
    Ok(Completion::Completed)
}

/// The CPUs the calling thread may run on.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a live cpu_set_t and its size; pid 0 is this thread.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    assert_eq!(rc, 0, "sched_getaffinity");
    (0..libc::CPU_SETSIZE as usize)
        .filter(|&cpu| {
            // SAFETY: reads within `set` for indices below CPU_SETSIZE.
            unsafe { libc::CPU_ISSET(cpu, &set) }
        })
        .collect()
}

/// The builder thread's mask, the workers' CPUs, and the builder thread's mask after.
type Masks = (Vec<usize>, Vec<usize>, Vec<usize>);

/// Restricts the calling thread to `cpu`.
fn pin_this_thread(cpu: usize) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: writes within `set` for a cpu below CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: a valid pointer to a live cpu_set_t and its size; pid 0 is this thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Review Z (5): `pin_workers` pinned worker `i` to CPU `i % nproc` whatever the affinity
/// mask (under `taskset -c 1`, worker 1 went to CPU 0), and pinned the caller's own thread
/// (worker 0) for good, past the runtime. Workers now take CPUs of the builder thread's
/// mask, and the caller's thread is left as it was. Run on a thread restricted to the
/// last CPU it may use, as `taskset` would.
fn pinned_workers_stay_inside_the_affinity_mask(kind: BackendKind) -> Outcome {
    // Skips with the reason where this backend cannot run.
    drop(runtime!(kind));
    let ran = std::thread::spawn(move || -> Result<Masks, String> {
        let last = *allowed_cpus().last().ok_or("no CPU allowed")?;
        pin_this_thread(last).map_err(|e| e.to_string())?;
        let mask = allowed_cpus();
        let rt = Builder::default()
            .backend(kind)
            .threads(3)
            .pin_workers(true)
            .build()
            .map_err(|e| e.to_string())?;
        let handle = rt.handle();
        let mut on_workers = Vec::new();
        for worker in 1..3 {
            let cpus = handle
                .spawn_on(worker, async { allowed_cpus() })
                .map_err(|e| e.to_string())?;
            let cpus = support::poll_on_thread(cpus, Duration::from_secs(10))
                .ok_or("a worker never ran its task")?
                .map_err(|e| e.to_string())?;
            on_workers.extend(cpus);
        }
        drop(rt);
        Ok((mask, on_workers, allowed_cpus()))
    })
    .join()
    .map_err(|_| "the test thread panicked")??;
    let (mask, on_workers, after) = ran;
    check!(
        on_workers.iter().all(|cpu| mask.contains(cpu)) && on_workers.len() == 2,
        "{kind}: workers pinned to {on_workers:?}, outside the mask {mask:?}"
    );
    check!(
        after == mask,
        "{kind}: the builder's thread may run on {after:?} after the runtime, {mask:?} before"
    );
    Ok(Completion::Completed)
}

/// Review AC (3): a blocking-pool thread started by a pinned worker inherited that worker's
/// one CPU and kept it for every later closure, whoever spawned it (and on epoll, the file
/// ops of that worker's pool): with a mask of two CPUs, blocking work ran on one. Helper
/// threads go back to the builder thread's mask now.
fn blocking_threads_of_pinned_workers_use_the_whole_mask(kind: BackendKind) -> Outcome {
    let mask = allowed_cpus();
    if mask.len() < 2 {
        return Ok(Completion::ignored_with(format!(
            "needs a mask of two CPUs or more to tell one CPU from the mask; this one is {mask:?}"
        )));
    }
    let rt = runtime!(kind, Builder::default().threads(2).pin_workers(true));
    let handle = rt.handle();
    let from_worker_1 = handle.spawn_local_on(1, || async {
        let blocking = ring_rt::spawn_blocking(allowed_cpus).await;
        // A file op: on epoll it runs on the worker's own pool.
        let file = ring_rt::fs::File::open("/proc/self/status").await;
        (blocking, file.is_ok())
    })?;
    let (blocking, file_ok) = support::poll_on_thread(from_worker_1, Duration::from_secs(10))
        .ok_or("worker 1 never ran its task")?
        .map_err(|e| e.to_string())?;
    let blocking = blocking.map_err(|e| e.to_string())?;
    check!(file_ok, "{kind}: a file open on worker 1 failed");
    check!(
        blocking == mask,
        "{kind}: a blocking closure spawned from pinned worker 1 ran on {blocking:?}, not the mask {mask:?}"
    );
    let later = rt
        .block_on(handle.spawn_blocking(allowed_cpus))
        .map_err(|e| e.to_string())?;
    check!(
        later == mask,
        "{kind}: a later blocking closure ran on {later:?}, not the mask {mask:?}"
    );
    Ok(Completion::Completed)
}
