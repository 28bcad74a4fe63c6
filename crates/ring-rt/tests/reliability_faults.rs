//! Fault injection on both backends, each with one expected outcome: the receive pool running
//! dry during a multishot recv (ENOBUFS), the SQ full while cancels are pushed, the process
//! out of fds while accepting (EMFILE, in a child process with a lowered RLIMIT_NOFILE), a
//! dropped multishot accept with connections queued in its slot, and the process stopped and
//! continued while an open waits in the kernel (in a child process), and a signal wait that
//! another thread could lose its signal to (in a child process).

#[macro_use]
mod support;

use std::net::Shutdown;
use std::process::Command;
use std::rc::Rc;
use std::time::{Duration, Instant};

use libtest_mimic::Completion;
use ring_rt::net::{TcpListener, UnixStream};
use ring_rt::time::sleep;
use ring_rt::{BackendKind, Runtime};
use support::{bounded, cpu_time, open_fds, pattern, wait_for, Outcome, TestFn};

const LIMIT: Duration = Duration::from_secs(20);
/// The child trial run with a lowered fd limit, and the env var naming its backend.
const EMFILE_CHILD: &str = "child_accept_at_fd_limit";
/// The child trial stopped and continued while its open waits.
const STOP_CHILD: &str = "child_open_across_a_stop";
/// The child trial that waits for a signal a thread of its own does not block.
const WARNING_CHILD: &str = "child_warning_of_threads_not_blocking";
/// How long a child trial may take before it is killed (and fails).
const CHILD_LIMIT: Duration = Duration::from_secs(60);

fn main() {
    let tests: &[(&str, TestFn)] = &[
        (
            "enobufs_multishot_rearms_when_buffers_return",
            enobufs_multishot_rearms_when_buffers_return,
        ),
        (
            "enobufs_wait_does_not_spin_while_cqes_hold_buffers",
            enobufs_wait_does_not_spin_while_cqes_hold_buffers,
        ),
        (
            "enobufs_wait_wakes_on_an_orphans_late_return",
            enobufs_wait_wakes_on_an_orphans_late_return,
        ),
        ("sq_full_cancels_are_not_lost", sq_full_cancels_are_not_lost),
        (
            "sqes_waiting_for_a_full_sq_go_in_before_the_loop_sleeps",
            sqes_waiting_for_a_full_sq_go_in_before_the_loop_sleeps,
        ),
        (
            "emfile_on_accept_backs_off_and_recovers",
            emfile_on_accept_backs_off_and_recovers,
        ),
        (
            "dropped_incoming_leaves_its_connections_to_the_listener",
            dropped_incoming_leaves_its_connections_to_the_listener,
        ),
        (
            "an_open_waiting_across_a_stop_and_continue_opens",
            an_open_waiting_across_a_stop_and_continue_opens,
        ),
        (
            "a_signal_wait_names_the_threads_that_could_take_its_signal",
            a_signal_wait_names_the_threads_that_could_take_its_signal,
        ),
    ];
    // Tests count this process's fds, buffers and CPU time: one at a time.
    support::run_with_children(
        tests,
        &[
            (EMFILE_CHILD, child_accept_at_fd_limit),
            (STOP_CHILD, child_open_across_a_stop),
            (WARNING_CHILD, child_warning_of_threads_not_blocking),
        ],
    )
}

/// 4 pooled buffers of 64 B, all leased by the reader: the next chunk waits, without
/// spinning, and arrives as soon as the buffers come back; no byte is lost.
fn enobufs_multishot_rearms_when_buffers_return(kind: BackendKind) -> Outcome {
    // A pause of the machine between the release and the chunk reads as a slow re-arm (a
    // VM's can pass 50 ms); a re-arm that waits for a timer or a back-off is slow in every
    // round, so only three slow rounds fail.
    let mut slow = None;
    for _ in 0..3 {
        let outcome = enobufs_round(kind, &mut slow)?;
        if slow.is_none() {
            return Ok(outcome);
        }
    }
    Err(slow.unwrap_or_default().into())
}

/// One round of the test above; a slow re-arm is put in `slow`, not failed.
fn enobufs_round(kind: BackendKind, slow: &mut Option<String>) -> Outcome {
    *slow = None;
    let rt = runtime!(kind, Runtime::builder().threads(1).recv_buffers(4, 64));
    let rt = &rt;
    rt.block_on(bounded(LIMIT, async {
        let (a, b) = UnixStream::pair()?;
        let data = pattern(11, 4096);
        let (res, _) = a.write_all(data.clone()).await;
        res?;
        a.shutdown(Shutdown::Write)?;
        let mut stream = b.recv_stream();
        let mut got = Vec::new();
        let mut held = Vec::new();
        while held.len() < 4 {
            let chunk = stream
                .next()
                .await
                .ok_or("EOF while the pool had buffers")??;
            got.extend_from_slice(&chunk);
            held.push(chunk);
        }
        check!(rt.metrics().recv_buffers_in_use == 4, "the pool is not dry");
        let before = rt.metrics().io;
        let hold = Duration::from_millis(100);
        let released = Rc::new(std::cell::Cell::new(None));
        let releaser = {
            let released = released.clone();
            ring_rt::spawn(async move {
                sleep(hold).await;
                drop(held);
                released.set(Some(Instant::now()));
            })
        };
        let cpu = cpu_time();
        let next = stream
            .next()
            .await
            .ok_or("EOF instead of the next chunk")??;
        let arrived = Instant::now();
        let cpu_used = cpu_time() - cpu;
        releaser.await?;
        let released = released.get().ok_or("buffers never released")?;
        let waits = rt.metrics().io.since(&before).enobufs;
        check!(
            arrived >= released,
            "a chunk arrived while every buffer was leased"
        );
        let rearm = arrived - released;
        if rearm >= Duration::from_millis(50) {
            *slow = Some(format!("re-armed {rearm:?} after buffers returned"));
        }
        check!(
            waits <= 8,
            "{waits} ENOBUFS retries while dry: the wait spins"
        );
        check!(
            cpu_used < hold / 2,
            "{cpu_used:?} CPU while waiting {hold:?} for a buffer"
        );
        got.extend_from_slice(&next);
        drop(next);
        while let Some(chunk) = stream.next().await {
            got.extend_from_slice(&chunk?);
        }
        check!(
            got == data,
            "lost or reordered bytes: {} of {}",
            got.len(),
            data.len()
        );
        check!(rt.metrics().recv_buffers_in_use == 0, "buffers still out");
        Ok(Completion::Completed)
    }))?
}

/// A multishot recv whose CQEs sit unpolled in its slot holds provided buffers the pool
/// still counts as free (their bids are unreaped). Another stream that hits ENOBUFS must wait
/// for a buffer to come back, not resubmit in a loop because the count says one is free.
fn enobufs_wait_does_not_spin_while_cqes_hold_buffers(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Runtime::builder().threads(1).recv_buffers(4, 64));
    let rt = &rt;
    rt.block_on(bounded(LIMIT, async {
        let (a1, b1) = UnixStream::pair()?;
        let (a2, b2) = UnixStream::pair()?;
        let data1 = pattern(21, 1024);
        let data2 = pattern(22, 64);
        let (res, _) = a1.write_all(data1.clone()).await;
        res?;
        a1.shutdown(Shutdown::Write)?;
        // Stream 1 takes one chunk and holds it; its multishot recv fills the other three
        // buffers with CQEs it does not poll for now. The ring is empty.
        let mut s1 = b1.recv_stream();
        let first = s1.next().await.ok_or("no first chunk")??;
        let mut got1 = first.to_vec();
        sleep(Duration::from_millis(10)).await;
        let (res, _) = a2.write_all(data2.clone()).await;
        res?;
        a2.shutdown(Shutdown::Write)?;
        let before = rt.metrics().io;
        let cpu = cpu_time();
        let reader2 = ring_rt::spawn(async move {
            let mut s2 = b2.recv_stream();
            let mut got = Vec::new();
            while let Some(chunk) = s2.next().await {
                got.extend_from_slice(&chunk?);
            }
            Ok::<_, std::io::Error>(got)
        });
        let idle = Duration::from_millis(200);
        sleep(idle).await;
        let cpu_used = cpu_time() - cpu;
        let waits = rt.metrics().io.since(&before).enobufs;
        drop(first);
        while let Some(chunk) = s1.next().await {
            got1.extend_from_slice(&chunk?);
        }
        let got2 = reader2.await??;
        check!(got1 == data1 && got2 == data2, "a stream lost bytes");
        check!(
            waits <= 8 && cpu_used < idle / 2,
            "stream 2 retried {waits} times and used {cpu_used:?} CPU in {idle:?} while \
             stream 1's unpolled CQEs held the buffers: the ENOBUFS wait spins"
        );
        Ok(Completion::Completed)
    }))?
}

/// Kernel-selected buffers (io_uring 5.7+): a pool of one buffer, filled by a receive whose
/// future is dropped before it saw its completion: the orphan's release returns the buffer,
/// and that return alone must wake a receive on another stream that hit ENOBUFS meanwhile.
/// Nothing else wakes it (no data, no timer), so a return that woke nobody would hang here
/// until the test's limit. Buffers selected in user space (epoll, io_uring before 5.7): an
/// unpolled receive holds no buffer, so the other receive never waits.
fn enobufs_wait_wakes_on_an_orphans_late_return(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Runtime::builder().threads(1).recv_buffers(1, 64));
    let rt = &rt;
    rt.block_on(bounded(LIMIT, async {
        let (a1, b1) = UnixStream::pair()?;
        let (a2, b2) = UnixStream::pair()?;
        let mut orphan = Box::pin(b1.recv_pooled());
        // Submitted (pending), then its data arrives and takes the only buffer.
        let first_poll = std::future::poll_fn(|cx| {
            std::task::Poll::Ready(std::future::Future::poll(orphan.as_mut(), cx))
        })
        .await;
        check!(
            first_poll.is_pending(),
            "a receive with no data completed at once"
        );
        a1.write_all(&b"taken"[..]).await.0?;
        sleep(Duration::from_millis(20)).await;
        a2.write_all(&b"waits"[..]).await.0?;
        let before = rt.metrics().io;
        let reader = ring_rt::spawn(async move { b2.recv_pooled().await });
        sleep(Duration::from_millis(50)).await;
        let waits = rt.metrics().io.since(&before).enobufs;
        if !kernel_selects_buffers(rt) {
            // Buffers selected in user space (epoll, io_uring before 5.7) are taken in the
            // receive's own poll after readiness: the unpolled receive never took one, so
            // the second found it free.
            check!(
                waits == 0,
                "ENOBUFS with a receive that was never polled again"
            );
            check!(
                reader.is_finished(),
                "the second receive waited with a buffer free"
            );
        } else {
            check!(
                waits > 0,
                "the second receive never hit ENOBUFS: the test proves nothing"
            );
            check!(
                !reader.is_finished(),
                "the second receive finished with no buffer free"
            );
        }
        drop(orphan);
        let got = reader.await??.ok_or("end of stream instead of data")?;
        check!(got.as_slice() == b"waits", "received {:?}", got.as_slice());
        drop(got);
        check!(
            rt.metrics().recv_buffers_in_use == 0,
            "a buffer never came home"
        );
        Ok(Completion::Completed)
    }))?
}

/// Whether the kernel picks receive buffers (a buffer ring, 5.19+, or `PROVIDE_BUFFERS`,
/// 5.7+), so a receive takes one as soon as its data arrives, polled or not.
fn kernel_selects_buffers(rt: &Runtime) -> bool {
    rt.features().is_some_and(|f| {
        f.has(ring_rt::Feature::PbufRing) || f.has_opcode(io_uring::opcode::ProvideBuffers::CODE)
    })
}

/// Review BF: a 2-entry SQ with a kernel thread polling it (`sqpoll`), two socket pairs each
/// with a reader and a writer. SQEs pushed while the SQ was full waited in the driver's
/// backlog, and the loop turn then slept for a completion that only those SQEs (the
/// writes) could bring: the reads waited for ever. A turn with a backlog left must not
/// sleep.
fn sqes_waiting_for_a_full_sq_go_in_before_the_loop_sleeps(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, Runtime::builder().threads(1).entries(2).sqpoll(5));
    rt.block_on(bounded(LIMIT, async {
        let mut tasks = Vec::new();
        for _ in 0..2 {
            let (a, b) = UnixStream::pair()?;
            tasks.push(ring_rt::spawn(async move {
                let writer = ring_rt::spawn(async move { a.write_all(vec![7u8; 1000]).await.0 });
                let mut got = 0;
                while got < 1000 {
                    match b.read(vec![0u8; 100]).await.0? {
                        0 => break,
                        n => got += n,
                    }
                }
                writer.await.map_err(std::io::Error::from)??;
                Ok::<usize, std::io::Error>(got)
            }));
        }
        for task in tasks {
            let got = task.await.map_err(std::io::Error::from)??;
            check!(got == 1000, "{kind}: a reader got {got} of 1,000 bytes");
        }
        Ok(Completion::Completed)
    }))?
}

/// A 2-entry SQ and 1,000 reads in flight, all aborted in one executor pass: every cancel
/// gets through (queued, not dropped), every orphan is reaped, and the sockets still work.
fn sq_full_cancels_are_not_lost(kind: BackendKind) -> Outcome {
    const READS: usize = 1000;
    // One worker: the test counts one ring's ops in flight against a baseline, which
    // another worker's own ops (its wake-up op, published at its loop turns) would blur.
    let rt = runtime!(kind, Runtime::builder().threads(1).threads(1).entries(2));
    let rt = &rt;
    rt.block_on(bounded(LIMIT, async {
        ring_rt::yield_now().await;
        let steady = rt.metrics().io.ops_in_flight;
        // One socket each: a socket's receives take turns, one in the kernel at a time.
        let pairs = (0..READS)
            .map(|_| UnixStream::pair())
            .collect::<Result<Vec<_>, _>>()?;
        let (writers, readers): (Vec<_>, Vec<_>) = pairs.into_iter().unzip();
        let readers: Vec<_> = readers.into_iter().map(Rc::new).collect();
        let tasks: Vec<_> = readers
            .iter()
            .map(|b| {
                let b = b.clone();
                ring_rt::spawn(async move { b.read(Vec::with_capacity(64)).await.0.map(|_| ()) })
            })
            .collect();
        if kind == BackendKind::Uring {
            let all_in_flight = || rt.metrics().io.ops_in_flight - steady == READS as u64;
            wait_for(Duration::from_secs(5), all_in_flight).await?;
        } else {
            sleep(Duration::from_millis(20)).await;
        }
        let before = rt.metrics().io;
        for t in &tasks {
            t.abort();
        }
        for t in tasks {
            check!(
                t.await.is_err_and(|e| e.is_cancelled()),
                "a read finished instead"
            );
        }
        wait_for(Duration::from_secs(5), || {
            rt.metrics().io.ops_in_flight == steady
        })
        .await?;
        let delta = rt.metrics().io.since(&before);
        if kind == BackendKind::Uring {
            check!(
                delta.cancels_sent == READS as u64,
                "{} cancels sent",
                delta.cancels_sent
            );
            check!(
                delta.orphans_reaped >= READS as u64,
                "{} reaped",
                delta.orphans_reaped
            );
            check!(
                delta.sq_full > 0,
                "the SQ never filled: the test tested nothing"
            );
        }
        for (a, b) in writers.iter().zip(&readers).step_by(97) {
            let (res, _) = a.write_all(b"after".to_vec()).await;
            res?;
            let (res, buf) = b.read(Vec::with_capacity(16)).await;
            check!(
                res? == 5 && buf == b"after",
                "a socket lost data after the cancels"
            );
        }
        Ok(Completion::Completed)
    }))?
}

/// Runs [`child_accept_at_fd_limit`] in a child process (its fd limit is lowered there).
fn emfile_on_accept_backs_off_and_recovers(kind: BackendKind) -> Outcome {
    support::child(EMFILE_CHILD, kind, &[], CHILD_LIMIT)
}

/// At the fd limit, `incoming()` yields EMFILE and backs off (10 ms doubling to 1 s) instead
/// of spinning; when fds free up it accepts every waiting connection.
fn child_accept_at_fd_limit(kind: BackendKind) -> Outcome {
    const CLIENTS: usize = 20;
    let rt = runtime!(kind);
    let rt = &rt;
    rt.block_on(bounded(LIMIT, async {
        let l = Rc::new(TcpListener::bind("127.0.0.1:0")?);
        let addr = l.local_addr()?;
        let clients: Vec<socket2::Socket> = (0..CLIENTS)
            .map(|_| socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None))
            .collect::<Result<_, _>>()?;
        let ballast = fill_to_limit(open_fds() as u64 + 40)?;
        check!(
            ballast.len() >= 30,
            "only {} fds below the limit",
            ballast.len()
        );
        for c in &clients {
            c.set_nonblocking(true)?;
            // Loopback finishes the handshake without waiting for accept.
            let _ = c.connect(&addr.into());
        }
        let stats = Rc::new(std::cell::RefCell::new((0usize, 0usize)));
        let server = {
            let (l, stats) = (l.clone(), stats.clone());
            ring_rt::spawn(async move {
                let mut incoming = l.incoming();
                let mut kept = Vec::new();
                while kept.len() < CLIENTS {
                    match incoming.next().await {
                        Some(Ok(s)) => kept.push(s),
                        Some(Err(e)) if e.raw_os_error() == Some(libc::EMFILE) => {}
                        Some(Err(e)) => return Err(e),
                        None => return Err(std::io::Error::other("incoming ended")),
                    }
                    let tries = stats.borrow().1 + 1;
                    *stats.borrow_mut() = (kept.len(), tries);
                }
                Ok(kept.len())
            })
        };
        let at_limit = Duration::from_millis(1500);
        let cpu = cpu_time();
        sleep(at_limit).await;
        let cpu_used = cpu_time() - cpu;
        let (accepted, tries) = *stats.borrow();
        check!(accepted == 0, "accepted {accepted} with no fd free");
        check!(
            (1..=12).contains(&tries),
            "{tries} EMFILE results in {at_limit:?}: no back-off"
        );
        check!(
            cpu_used < Duration::from_millis(150),
            "{cpu_used:?} CPU at the fd limit"
        );
        let freed = Instant::now();
        drop(ballast);
        let n = server.await??;
        let recovery = freed.elapsed();
        check!(n == CLIENTS, "accepted {n} of {CLIENTS}");
        // The back-off caps at 1 s; the rest is room for a paused VM.
        check!(
            recovery < Duration::from_millis(2500),
            "recovered after {recovery:?}"
        );
        eprintln!(
            "{kind}: {tries} EMFILE results in {at_limit:?} at the limit, {cpu_used:?} CPU; \
             all {CLIENTS} accepted {recovery:?} after fds were freed"
        );
        Ok(Completion::Completed)
    }))?
}

/// Lowers the soft fd limit to `limit` and opens /dev/null until the next fd would fail:
/// the process is then exactly at its limit. Returns the fds that filled it.
fn fill_to_limit(limit: u64) -> std::io::Result<Vec<std::fs::File>> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid pointer to a live rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    rl.rlim_cur = limit.min(rl.rlim_max);
    // SAFETY: a valid pointer to a live rlimit; lowering the soft limit needs no privilege.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &rl) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut ballast = Vec::new();
    loop {
        match std::fs::File::open("/dev/null") {
            Ok(f) => ballast.push(f),
            Err(e) if e.raw_os_error() == Some(libc::EMFILE) => return Ok(ballast),
            Err(e) => return Err(e),
        }
    }
}

/// An `Incoming` dropped with connections queued in its multishot slot (or still in the
/// backlog): none is closed; the listener's next accepts return every one, and dropping
/// them and the listener leaves no fd behind.
fn dropped_incoming_leaves_its_connections_to_the_listener(kind: BackendKind) -> Outcome {
    use std::io::Read;
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        let baseline = open_fds();
        let l = TcpListener::bind("127.0.0.1:0")?;
        let addr = l.local_addr()?;
        let mut incoming = l.incoming();
        let first = std::net::TcpStream::connect(addr)?;
        let s = incoming.next().await.ok_or("incoming ended")??;
        let mut clients: Vec<_> = (0..10)
            .map(|_| std::net::TcpStream::connect(addr))
            .collect::<Result<_, _>>()?;
        // Let an armed multishot accept take some into its slot, then drop the stream.
        sleep(Duration::from_millis(20)).await;
        drop(incoming);
        drop(s);
        // None of them was closed: taken by the dropped stream or still in the backlog,
        // each is there for the listener's next accept.
        for c in &mut clients {
            c.set_nonblocking(true)?;
            let mut byte = [0u8; 1];
            let open =
                matches!(c.read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
            check!(open, "a connection the dropped stream took was closed");
        }
        let mut again = l.incoming();
        let mut accepted = Vec::new();
        for _ in 0..10 {
            accepted.push(again.next().await.ok_or("incoming ended")??);
        }
        drop((accepted, again));
        drop(l);
        drop((first, clients));
        wait_for(Duration::from_secs(2), || open_fds() == baseline).await?;
        Ok(Completion::Completed)
    }))?
}

/// A process stopped and continued (Ctrl-Z and `fg`, `docker pause`, a debugger) while an
/// open waits in the kernel (a FIFO's writer waiting for a reader) gets its file, as std's
/// `open` does. On io_uring such an open waits in a kernel worker thread, which the stop
/// interrupts: its CQE carried the kernel's internal `ERESTARTSYS`, and the open failed
/// with "Unknown error 512" (a run of the tests under random stops found it).
fn an_open_waiting_across_a_stop_and_continue_opens(kind: BackendKind) -> Outcome {
    support::child(STOP_CHILD, kind, &[], CHILD_LIMIT)
}

/// The child of the test above: another process stops and continues this one while its
/// open waits; a reader comes after that.
fn child_open_across_a_stop(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let fifo = std::env::temp_dir().join(format!("ring-rt-stop-{}", std::process::id()));
    support::mkfifo(&fifo)?;
    let pid = std::process::id().to_string();
    let script = "sleep 0.2; kill -STOP $1; sleep 0.2; kill -CONT $1";
    let mut stopper = Command::new("sh")
        .args(["-c", script, "sh", &pid])
        .spawn()?;
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(800));
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&fifo)
        })
    };
    let opened = rt.block_on(bounded(
        LIMIT,
        ring_rt::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .open(&fifo),
    ));
    let stopped = stopper.wait()?;
    let reader = reader.join().map_err(|_| "the reader thread panicked")?;
    let _ = std::fs::remove_file(&fifo);
    check!(stopped.success(), "the stop and continue failed: {stopped}");
    let _reader = reader?;
    let _file = opened??;
    Ok(Completion::Completed)
}

/// Review CS: a wait whose signal another thread does not block can lose it to that thread
/// (whose default action for most signals ends the process), as the `signal` module's
/// server example did with no `signal::block`. The first wait says so, naming the threads.
fn a_signal_wait_names_the_threads_that_could_take_its_signal(kind: BackendKind) -> Outcome {
    support::child(WARNING_CHILD, kind, &[], CHILD_LIMIT)
}

/// The child of the test above: a process of its own, as the warning comes once per signal
/// and process, and tracing's dispatch is process-wide state.
fn child_warning_of_threads_not_blocking(kind: BackendKind) -> Outcome {
    // Its default action (ignore) is harmless were one sent.
    let signal = libc::SIGWINCH;
    let rt = runtime!(kind);
    // A thread that does not block it, there until the test ends.
    let (done, wait_done) = std::sync::mpsc::channel::<()>();
    let (running, runs) = std::sync::mpsc::channel::<()>();
    let bystander = std::thread::Builder::new()
        .name("bystander".into())
        .spawn(move || {
            let _ = running.send(());
            wait_done.recv()
        })?;
    // Running: a thread starting has every signal blocked until then (glibc).
    runs.recv_timeout(Duration::from_secs(10))
        .map_err(|_| "the bystander never ran")?;
    let warnings = Warnings::default();
    let seen = warnings.0.clone();
    tracing::subscriber::with_default(warnings, || {
        rt.block_on(async {
            let waited =
                ring_rt::time::timeout(Duration::from_millis(10), ring_rt::signal::wait(&[signal]))
                    .await;
            check!(
                waited.is_err(),
                "{kind}: a signal nobody sent arrived: {waited:?}"
            );
            // Once: a second wait says nothing more.
            let signals = [signal];
            let again = ring_rt::signal::wait(&signals);
            let _ = ring_rt::time::timeout(Duration::from_millis(1), again).await;
            Outcome::Ok(Completion::Completed)
        })
    })?;
    drop(done);
    let _ = bystander.join();
    let seen = seen.lock().map_err(|_| "poisoned")?.clone();
    check!(
        seen.len() == 1,
        "{kind}: {} warnings, not one: {seen:?}",
        seen.len()
    );
    check!(
        seen[0].contains("do not block")
            && seen[0].contains(&signal.to_string())
            && seen[0].contains("bystander"),
        "{kind}: the warning: {}",
        seen[0]
    );
    Ok(Completion::Completed)
}

/// A tracing subscriber that keeps each warning's fields as text.
#[derive(Default)]
struct Warnings(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl tracing::Subscriber for Warnings {
    fn enabled(&self, meta: &tracing::Metadata<'_>) -> bool {
        *meta.level() == tracing::Level::WARN
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Text(String);
        impl tracing::field::Visit for Text {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{}={value:?} ", field.name()));
            }
        }
        let mut text = Text(String::new());
        event.record(&mut text);
        if let Ok(mut seen) = self.0.lock() {
            seen.push(text.0);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}
