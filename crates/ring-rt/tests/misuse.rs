//! Calls a user gets wrong, each answered with a clear error instead of a hang, an abort,
//! lost data or a silent difference between the backends (the second attacker review of
//! issue 16): out-of-range builder knobs, a timer taken to another runtime, giving up a
//! socket's fd while a dropped read's bytes are queued, bad Unix paths, a JoinHandle
//! polled after its output, and bad or dropped signal waits; from the fifth: chains and ops
//! that cross runtimes, and panics in timer wakers and `spawn_on_all` factories.

#[macro_use]
mod support;

use std::future::{poll_fn, Future, IntoFuture};
use std::io::{ErrorKind, Read, Write};
use std::pin::pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use libtest_mimic::Completion;
use ring_rt::net::{TcpStream, UnixListener, UnixStream};
use ring_rt::time::{sleep, timeout};
use ring_rt::{BackendKind, Builder};
use support::{bounded, Outcome};

const LIMIT: Duration = Duration::from_secs(20);

fn main() {
    support::run(&[
        (
            "a_pooled_receive_waiting_in_line_ends_where_no_loop_turns",
            a_pooled_receive_waiting_in_line_ends_where_no_loop_turns,
        ),
        (
            "a_starved_pooled_receive_ends_where_no_loop_turns",
            a_starved_pooled_receive_ends_where_no_loop_turns,
        ),
        (
            "a_refused_receive_kept_leaves_its_place_in_line",
            a_refused_receive_kept_leaves_its_place_in_line,
        ),
        (
            "builder_refuses_knobs_out_of_range",
            builder_refuses_knobs_out_of_range,
        ),
        (
            "a_sleep_taken_to_another_runtime_fires_there",
            a_sleep_taken_to_another_runtime_fires_there,
        ),
        (
            "into_owned_fd_never_drops_queued_bytes",
            into_owned_fd_never_drops_queued_bytes,
        ),
        (
            "a_dropped_send_never_reaches_the_fd_into_owned_fd_gave_away",
            a_dropped_send_never_reaches_the_fd_into_owned_fd_gave_away,
        ),
        (
            "an_fd_given_up_from_a_wakers_clone_never_receives_a_dropped_send",
            an_fd_given_up_from_a_wakers_clone_never_receives_a_dropped_send,
        ),
        (
            "a_unix_path_with_a_nul_byte_is_invalid_input",
            a_unix_path_with_a_nul_byte_is_invalid_input,
        ),
        (
            "a_join_handle_polled_after_its_output_is_an_error",
            a_join_handle_polled_after_its_output_is_an_error,
        ),
        (
            "signal_waits_that_could_never_end_are_invalid_input",
            signal_waits_that_could_never_end_are_invalid_input,
        ),
        (
            "a_dropped_signal_wait_takes_no_signal",
            a_dropped_signal_wait_takes_no_signal,
        ),
        (
            "a_signal_wait_outside_a_runtime_opens_and_blocks_nothing",
            a_signal_wait_outside_a_runtime_opens_and_blocks_nothing,
        ),
        (
            "a_write_to_a_dropped_peer_fails_on_both_backends",
            a_write_to_a_dropped_peer_fails_on_both_backends,
        ),
        (
            "a_chain_of_two_runtimes_fails_before_it_starts",
            a_chain_of_two_runtimes_fails_before_it_starts,
        ),
        (
            "an_op_polled_in_another_runtime_ends",
            an_op_polled_in_another_runtime_ends,
        ),
        (
            "an_op_that_cannot_run_says_why_in_its_error",
            an_op_that_cannot_run_says_why_in_its_error,
        ),
        (
            "a_receive_stream_between_chunks_says_why_it_cannot_go_on",
            a_receive_stream_between_chunks_says_why_it_cannot_go_on,
        ),
        (
            "an_op_refused_in_flight_says_why_in_its_error",
            an_op_refused_in_flight_says_why_in_its_error,
        ),
        (
            "a_stream_refused_outside_its_runtime_works_again_inside",
            a_stream_refused_outside_its_runtime_works_again_inside,
        ),
        (
            "only_the_runtimes_own_cancels_are_reported_as_refusals",
            only_the_runtimes_own_cancels_are_reported_as_refusals,
        ),
        (
            "a_panicking_timer_waker_leaves_other_timers_woken",
            a_panicking_timer_waker_leaves_other_timers_woken,
        ),
        (
            "a_panicking_spawn_on_all_factory_leaves_the_runtime_droppable",
            a_panicking_spawn_on_all_factory_leaves_the_runtime_droppable,
        ),
    ])
}

fn invalid_input<T>(r: std::io::Result<T>) -> bool {
    r.err().is_some_and(|e| e.kind() == ErrorKind::InvalidInput)
}

/// Each knob's bad value fails `build` with `InvalidInput`, the same on both backends:
/// `threads(usize::MAX)` aborted on a capacity overflow, `batch_wait(Duration::MAX)` parked
/// a busy worker for 71 minutes, and the receive pool's sizes were checked only at the
/// first pooled receive, differently per backend (40,000 buffers worked on epoll only).
fn builder_refuses_knobs_out_of_range(kind: BackendKind) -> Outcome {
    drop(runtime!(kind));
    let b = || Builder::default().backend(kind);
    let cases: [(&str, Builder); 7] = [
        ("threads(usize::MAX)", b().threads(usize::MAX)),
        (
            "threads(MAX_THREADS + 1)",
            b().threads(Builder::MAX_THREADS + 1),
        ),
        ("recv_buffers(0, 8)", b().recv_buffers(0, 8)),
        ("recv_buffers(8, 0)", b().recv_buffers(8, 0)),
        ("recv_buffers(40000, 8)", b().recv_buffers(40000, 8)),
        ("recv_buffers(1, u32::MAX)", b().recv_buffers(1, u32::MAX)),
        ("batch_wait(Duration::MAX)", b().batch_wait(Duration::MAX)),
    ];
    for (what, builder) in cases {
        check!(
            invalid_input(builder.build()),
            "{what} was not InvalidInput"
        );
    }
    // The limits themselves are fine.
    let rt = b()
        .recv_buffers(Builder::MAX_RECV_BUFFERS, 16)
        .batch_wait(Builder::MAX_BATCH_WAIT)
        .build()?;
    drop(rt);
    Ok(Completion::Completed)
}

/// A sleep first polled in one runtime and then awaited in another fires in the second:
/// its timer stayed in the first runtime's map, which nothing ran, and never fired.
fn a_sleep_taken_to_another_runtime_fires_there(kind: BackendKind) -> Outcome {
    let first = runtime!(kind);
    let second = runtime!(kind);
    // A sleep over before its first poll never reaches the first runtime's timers: a
    // paused VM can make 30 ms pass first, so such a round runs again, 10 times longer.
    for nap in [30, 300].map(Duration::from_millis) {
        let deadline = Instant::now() + nap;
        let mut nap = Box::pin(ring_rt::time::sleep_until(deadline));
        let polled = first.block_on(poll_fn(|cx| Poll::Ready(nap.as_mut().poll(cx))));
        if !support::pending_before(&polled, deadline, "the sleep")? {
            continue;
        }
        let start = Instant::now();
        second.block_on(bounded(Duration::from_secs(5), nap))?;
        check!(
            start.elapsed() < Duration::from_secs(2),
            "the sleep took {:?} in the second runtime",
            start.elapsed()
        );
        return Ok(Completion::Completed);
    }
    Err("the sleep was over at once in every round".into())
}

/// A stream (with its peer and fd number) whose 512-byte send was polled once and dropped:
/// on io_uring its SQE may still wait in the submission queue.
async fn stream_with_a_dropped_send() -> std::io::Result<(UnixStream, UnixStream, i32)> {
    let (mine, peer) = UnixStream::pair()?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&mine);
    let mut send = Box::pin(mine.write(vec![b'x'; 512]).into_future());
    let _ = !support::pending_after_a_poll(send.as_mut()).await;
    drop(send);
    Ok((mine, peer, fd))
}

/// A send polled once and dropped before `into_owned_fd` hands the fd out never reaches
/// what reuses the number after the caller closes it (on io_uring its SQE may still wait in
/// the submission queue, and the kernel looks the number up when it takes it).
fn a_dropped_send_never_reaches_the_fd_into_owned_fd_gave_away(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        let mut reused = 0;
        for round in 0..20 {
            let (mine, _peer, fd) = stream_with_a_dropped_send().await?;
            let owned = match mine.into_owned_fd() {
                Ok(owned) => owned,
                // Refused while a dropped op finishes: nothing was handed out, nothing to test.
                Err(_) => continue,
            };
            drop(owned);
            let (n, is_reused) =
                support::bytes_on_a_socket_reusing(fd, Duration::from_millis(5)).await?;
            reused += usize::from(is_reused);
            check!(
                n == 0,
                "round {round}: {n} bytes of a dropped send went out on another socket"
            );
        }
        check!(
            reused > 0,
            "no round handed out and reused the fd number; the test proved nothing"
        );
        Ok(Completion::Completed)
    }))?
}

thread_local! {
    /// The stream [`give_up_the_stream`] gives up, and the fd it got.
    static GIVEN_UP: std::cell::RefCell<(Option<UnixStream>, Option<std::io::Result<std::os::fd::OwnedFd>>)> =
        const { std::cell::RefCell::new((None, None)) };
}

/// Gives up the stream in [`GIVEN_UP`] (`into_owned_fd`), from a waker's `clone`.
fn give_up_the_stream() {
    GIVEN_UP.with(|g| {
        let mut g = g.borrow_mut();
        if let Some(stream) = g.0.take() {
            g.1 = Some(stream.into_owned_fd().map_err(std::io::Error::from));
        }
    });
}

/// Review Q: `into_owned_fd` run by a waker's `clone`, which the runtime calls while its
/// backend is busy (keeping the waker of an op it starts or polls). The fd went out at
/// once while a dropped send's SQE still waited in the submission queue, and the send
/// reached the socket that reused the number (io_uring, round 0).
fn an_fd_given_up_from_a_wakers_clone_never_receives_a_dropped_send(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        let mut given_up = 0;
        for round in 0..20 {
            let (mine, _peer, fd) = stream_with_a_dropped_send().await?;
            GIVEN_UP.with(|g| g.borrow_mut().0 = Some(mine));
            // A read that waits (on both backends): the runtime keeps its waker.
            let (other, mut other_peer) = std::os::unix::net::UnixStream::pair()?;
            let other = UnixStream::from_std(other)?;
            let mut read = Box::pin(other.read(Vec::with_capacity(8)).into_future());
            let waker = support::waker_calling_on_clone(give_up_the_stream);
            let _ = read
                .as_mut()
                .poll(&mut std::task::Context::from_waker(&waker));
            let (left, got) = GIVEN_UP.with(|g| std::mem::take(&mut *g.borrow_mut()));
            drop(left);
            let owned = match got {
                Some(Ok(owned)) => owned,
                // Refused, or the runtime never cloned the waker: nothing was handed out.
                Some(Err(_)) | None => continue,
            };
            given_up += 1;
            drop(owned);
            let (n, _) = support::bytes_on_a_socket_reusing(fd, Duration::from_millis(5)).await?;
            check!(
                n == 0,
                "round {round}: {n} bytes of a dropped send went out on another socket"
            );
            other_peer.write_all(b"y")?;
            read.await.0?;
        }
        check!(
            given_up > 0,
            "no round gave the fd up from the waker's clone; the test proved nothing"
        );
        Ok(Completion::Completed)
    }))?
}

/// A read dropped after the kernel received bytes for it queues them on the stream;
/// `into_owned_fd` then hands the stream back (`ResourceBusy`) instead of dropping them
/// with it. Whichever way the fd is given up, every byte reaches the reader.
fn into_owned_fd_never_drops_queued_bytes(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let mut peer = std::net::TcpStream::connect(listener.local_addr()?)?;
    let (accepted, _) = listener.accept()?;
    let got = rt.block_on(bounded(LIMIT, async {
        let stream = TcpStream::from_std(accepted)?;
        {
            // A read in flight (on io_uring, in the kernel) when the bytes arrive, then
            // dropped unpolled: the kernel's completion goes to the stream's queue.
            let mut read = pin!(stream.read(Vec::with_capacity(64)).into_future());
            let pending = support::pending_after_a_poll(read.as_mut()).await;
            check!(pending, "the read finished before any data was sent");
            peer.write_all(b"queued bytes")?;
            sleep(Duration::from_millis(50)).await;
        }
        let mut got = Vec::new();
        let mut stream = stream;
        let fd = loop {
            match stream.into_owned_fd() {
                Ok(fd) => break fd,
                Err(busy) => {
                    let queued = busy.error().to_string().contains("queued");
                    check!(
                        busy.error().kind() == ErrorKind::ResourceBusy,
                        "into_owned_fd: {}",
                        busy.error()
                    );
                    stream = busy.into_inner();
                    if queued {
                        let (n, buf) = stream.read(Vec::with_capacity(64)).await;
                        got.extend_from_slice(&buf[..n?]);
                    } else {
                        // A dropped read finishing: it is done within a turn or two.
                        ring_rt::yield_now().await;
                    }
                }
            }
        };
        drop(peer);
        let mut std_stream = std::net::TcpStream::from(fd);
        std_stream.set_nonblocking(false)?;
        std_stream.read_to_end(&mut got)?;
        Ok::<_, libtest_mimic::Failed>(got)
    }))??;
    check!(got == b"queued bytes", "the reader got {got:?}");
    Ok(Completion::Completed)
}

/// A NUL byte in a Unix socket path is `InvalidInput`, as in std: the kernel would stop the
/// name at it (binding `"a\0b"` bound `"a"`), and a leading one names an abstract socket.
fn a_unix_path_with_a_nul_byte_is_invalid_input(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let dir = std::env::temp_dir().join(format!("ring-rt-nul-{}-{kind}", std::process::id()));
    let mut with_nul = dir.into_os_string().into_encoded_bytes();
    with_nul.extend_from_slice(b"\0tail");
    // SAFETY: the bytes came from an OsString, with an ASCII suffix appended.
    let path = unsafe { std::ffi::OsString::from_encoded_bytes_unchecked(with_nul) };
    rt.block_on(async {
        check!(
            invalid_input(UnixListener::bind(&path)),
            "bind accepted a NUL byte"
        );
        check!(
            invalid_input(UnixStream::connect(&path).await),
            "connect accepted a NUL byte"
        );
        check!(
            invalid_input(UnixListener::bind("\0abstract")),
            "bind accepted a leading NUL byte"
        );
        Ok(Completion::Completed)
    })
}

/// Polling a JoinHandle again after it returned the output is `AlreadyTaken`, not a
/// made-up cancellation.
fn a_join_handle_polled_after_its_output_is_an_error(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(async {
        let mut handle = pin!(ring_rt::spawn(async { 7 }));
        let first = (&mut handle).await;
        check!(matches!(first, Ok(7)), "first poll: {first:?}");
        let again = poll_fn(|cx| handle.as_mut().poll(cx)).await;
        let err = again.err().ok_or("the second poll gave an output")?;
        check!(
            !err.is_cancelled() && !err.is_panic(),
            "the second poll said {err}"
        );
        check!(err.to_string().contains("polled after"), "message: {err}");
        Ok(Completion::Completed)
    })
}

/// A signal wait that could never return is refused: no signal at all, or SIGKILL and
/// SIGSTOP, which nobody can block (the signalfd silently ignored them: a wait for ever).
fn signal_waits_that_could_never_end_are_invalid_input(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        check!(invalid_input(ring_rt::signal::wait(&[]).await), "wait(&[])");
        check!(
            invalid_input(ring_rt::signal::wait(&[libc::SIGKILL]).await),
            "wait(SIGKILL)"
        );
        check!(
            invalid_input(ring_rt::signal::wait(&[libc::SIGUSR2, libc::SIGSTOP]).await),
            "wait(SIGUSR2, SIGSTOP)"
        );
        check!(invalid_input(ring_rt::signal::block(&[])), "block(&[])");
        check!(
            invalid_input(ring_rt::signal::wait(&[100_000]).await),
            "wait(100000)"
        );
        Ok(Completion::Completed)
    }))?
}

/// Review CS: `signal::wait` polled where no runtime runs (a plain thread, or after its
/// runtime was dropped) failed, as it should, but only after it had blocked the signal in
/// the calling thread and opened a signalfd it never closed: one fd leaked per call.
fn a_signal_wait_outside_a_runtime_opens_and_blocks_nothing(kind: BackendKind) -> Outcome {
    const CALLS: usize = 64;
    let rt = runtime!(kind);
    rt.block_on(async {});
    drop(rt);
    // First polled on a thread whose runtime is gone (an async fn runs nothing before).
    let late = ring_rt::signal::wait(&[libc::SIGURG]);
    let before = signalfds();
    let mut late = pin!(late);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let first = late.as_mut().poll(&mut cx);
    check!(
        matches!(first, Poll::Ready(Err(_))),
        "{kind}: a wait polled after its runtime's drop: {first:?}"
    );
    // SIGURG: its default is to be ignored, so a mask left changed harms no other test.
    check!(
        !blocked_here(libc::SIGURG),
        "{kind}: a wait failed after its runtime's drop left SIGURG blocked in its thread"
    );
    std::thread::spawn(move || -> Outcome {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        for _ in 0..CALLS {
            let mut wait = pin!(ring_rt::signal::wait(&[libc::SIGURG]));
            let polled = wait.as_mut().poll(&mut cx);
            check!(
                matches!(polled, Poll::Ready(Err(_))),
                "{kind}: a wait outside any runtime: {polled:?}"
            );
        }
        // Other tests of this binary may hold a signalfd or two meanwhile, never 64.
        let opened = signalfds().saturating_sub(before);
        check!(
            opened < CALLS / 2,
            "{kind}: {opened} signalfds left open by {} failed waits",
            CALLS + 1
        );
        check!(
            !blocked_here(libc::SIGURG),
            "{kind}: a failed wait left SIGURG blocked in its thread"
        );
        Ok(Completion::Completed)
    })
    .join()
    .map_err(|_| "the waiting thread panicked")?
}

/// signalfds this process has open.
fn signalfds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |dir| {
        dir.flatten()
            .filter(|e| {
                std::fs::read_link(e.path())
                    .is_ok_and(|target| target.to_string_lossy().contains("signalfd"))
            })
            .count()
    })
}

/// Whether `signal` is blocked in the calling thread.
fn blocked_here(signal: i32) -> bool {
    // SAFETY: sigset_t is plain data, filled in by pthread_sigmask.
    let mut mask: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: a null new set only reads the mask into `mask`, a live sigset_t.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut mask) };
    // SAFETY: `mask` was filled in above.
    unsafe { libc::sigismember(&mask, signal) == 1 }
}

/// A wait dropped after its signal arrived (a timeout, a select) must not take the signal
/// with it: on io_uring the signalfd read ran in the kernel, and the dropped future lost
/// the signal. The next wait gets it.
fn a_dropped_signal_wait_takes_no_signal(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    ring_rt::signal::block(&[libc::SIGUSR2])?;
    rt.block_on(bounded(LIMIT, async {
        {
            let mut wait = pin!(ring_rt::signal::wait(&[libc::SIGUSR2]));
            let pending = support::pending_after_a_poll(wait.as_mut()).await;
            check!(pending, "a signal was pending before the test sent one");
            // To this thread, where SIGUSR2 is blocked: it stays pending for the signalfd.
            // SAFETY: plain syscall with integer arguments.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_tgkill,
                    libc::getpid(),
                    libc::gettid(),
                    libc::SIGUSR2,
                )
            };
            check!(rc == 0, "tgkill: {}", std::io::Error::last_os_error());
            sleep(Duration::from_millis(30)).await;
        }
        let next = ring_rt::time::timeout(
            Duration::from_secs(5),
            ring_rt::signal::wait(&[libc::SIGUSR2]),
        )
        .await
        .map_err(|_| "the signal was lost with the dropped wait")??;
        check!(next == libc::SIGUSR2, "got signal {next}");
        Ok(Completion::Completed)
    }))?
}

/// Dropping a socket closes it at once on both backends: on io_uring a `CLOSE` SQE ran
/// whenever the kernel got to it, so a write to the just-dropped peer still succeeded there
/// (EPIPE on epoll; found by the second attacker review).
fn a_write_to_a_dropped_peer_fails_on_both_backends(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        let (c, d) = UnixStream::pair()?;
        drop(d);
        let (w, _) = c.write(b"x".to_vec()).await;
        check!(
            w.as_ref().err().and_then(|e| e.raw_os_error()) == Some(libc::EPIPE),
            "a write to a peer dropped before it: {w:?}"
        );
        Ok(Completion::Completed)
    }))?
}

/// A runtime of the other backend where this machine has it (crossing backends is the
/// harder case), else another of the same.
fn second_runtime(kind: BackendKind) -> ring_rt::Runtime {
    let other = match kind {
        BackendKind::Uring => BackendKind::Epoll,
        BackendKind::Epoll => BackendKind::Uring,
    };
    Builder::default()
        .backend(other)
        .build()
        .or_else(|_| Builder::default().backend(kind).build())
        .expect("a second runtime")
}

/// An op that cannot run (polled outside its runtime, or after the runtime was dropped)
/// fails with the runtime's own message, whichever way the op reports its result: a
/// socket read, a zero-copy send, a file read and a chain (an open outside every runtime
/// says there is none). The message went through the op's completion as a bare errno
/// before, so a file read after the drop said "Transport endpoint is not connected" and
/// one outside the runtime "Invalid argument".
fn an_op_that_cannot_run_says_why_in_its_error(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let path = std::env::temp_dir().join(format!("ring-rt-says-why-{}", std::process::id()));
    std::fs::write(&path, b"0123456789")?;
    let (sock, _peer, file, tcp, _tcp_peer) = rt.block_on(async {
        let (a, b) = UnixStream::pair()?;
        let file = ring_rt::fs::File::open(&path).await?;
        let listener = ring_rt::net::TcpListener::bind("127.0.0.1:0")?;
        let tcp = TcpStream::connect(listener.local_addr()?).await?;
        std::io::Result::Ok((a, b, file, tcp, listener.accept().await?))
    })?;
    let mut rt = Some(rt);
    for dropped in [false, true] {
        if dropped {
            drop(rt.take());
        }
        let (wanted, words) = match dropped {
            false => (ErrorKind::InvalidInput, "not running here"),
            true => (ErrorKind::NotConnected, "was dropped"),
        };
        let says = |what: &str, r: std::io::Result<usize>| match r {
            Err(e) if e.kind() == wanted && e.to_string().contains(words) => Ok(()),
            other => Err(format!(
                "{what} (runtime dropped: {dropped}): {other:?}, not {wanted:?} saying '{words}'"
            )),
        };
        says(
            "socket read",
            poll_outside(sock.read(vec![0; 4]).into_future())?.0,
        )?;
        says(
            "file read",
            poll_outside(file.read_at(vec![0; 4], 0).into_future())?.0,
        )?;
        says("zero-copy send", poll_outside(tcp.send_zc(vec![1; 8]))?.0)?;
        let chain = file.read_at(vec![0; 4], 0).link(sock.write(b"x".to_vec()));
        let ((r, _), (w, _)) = poll_outside(chain.into_future())?;
        says("chain's read", r)?;
        // The op after a failed one is cancelled, as in every chain (or, when the chain
        // cannot start at all, fails the same way).
        check!(w.is_err(), "the chain's write after its failed read: {w:?}");
        if !dropped {
            // A path op belongs to no runtime yet: outside every runtime it says so.
            let open = poll_outside(ring_rt::fs::File::open(&path))?;
            check!(
                open.as_ref()
                    .is_err_and(|e| e.to_string().contains("no ring-rt runtime")),
                "an open outside every runtime: {:?}",
                open.map(|_| ())
            );
        }
    }
    let _ = std::fs::remove_file(&path);
    Ok(Completion::Completed)
}

/// A receive stream between two chunks, polled outside its runtime and after the runtime
/// was dropped, fails saying why, as an op does, and ends. On epoll (and io_uring without
/// multishot receive) its one-shot receive stays running between chunks, not made again
/// for each: the runtime's checks at an op's start are then its poll's.
fn a_receive_stream_between_chunks_says_why_it_cannot_go_on(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let (a, b, c, d) = rt.block_on(async {
        let (a, b) = UnixStream::pair()?;
        let (c, d) = UnixStream::pair()?;
        std::io::Result::Ok((a, b, c, d))
    })?;
    let (mut rx_b, mut rx_d) = (b.recv_stream(), d.recv_stream());
    let got = rt.block_on(async {
        a.write_all(&b"one"[..]).await.0?;
        c.write_all(&b"two"[..]).await.0?;
        let first = rx_b.next().await.transpose()?.map(|c| c.to_vec());
        let second = rx_d.next().await.transpose()?.map(|c| c.to_vec());
        std::io::Result::Ok((first, second))
    })?;
    check!(
        got == (Some(b"one".to_vec()), Some(b"two".to_vec())),
        "inside the runtime: {got:?}"
    );
    let mut rt = Some(rt);
    for (dropped, rx) in [(false, &mut rx_b), (true, &mut rx_d)] {
        if dropped {
            drop(rt.take());
        }
        let (wanted, words) = match dropped {
            false => (ErrorKind::InvalidInput, "not running here"),
            true => (ErrorKind::NotConnected, "was dropped"),
        };
        let next = poll_outside(rx.next())?;
        check!(
            matches!(&next, Some(Err(e)) if e.kind() == wanted && e.to_string().contains(words)),
            "the next chunk (runtime dropped: {dropped}): {:?}, not {wanted:?} saying '{words}'",
            next.map(|r| r.map(|c| c.to_vec()))
        );
        let after = poll_outside(rx.next())?;
        check!(
            after.is_none(),
            "after the failure (runtime dropped: {dropped}): {:?}",
            after.map(|r| r.map(|c| c.to_vec()))
        );
    }
    Ok(Completion::Completed)
}

/// Polls `fut` on this thread, outside every runtime, until it ends (at most 5 s).
fn poll_outside<F: Future>(fut: F) -> Result<F::Output, &'static str> {
    support::poll_on_thread(fut, Duration::from_secs(5)).ok_or("an op polled outside hung")
}

/// An op started inside its runtime and refused while in flight (polled again outside the
/// runtime's `block_on`, or after the runtime was dropped) says why, as one refused before
/// it started does: a timed read, a receive stream and a chain's first op. On io_uring
/// these came back as a bare `ECANCELED` (review V): the cancel the refusal sent was
/// reported as the kernel's.
fn an_op_refused_in_flight_says_why_in_its_error(kind: BackendKind) -> Outcome {
    let limit = Duration::from_secs(5);
    for dropped in [false, true] {
        let (kind_wanted, words) = match dropped {
            false => (ErrorKind::InvalidInput, "not running here"),
            true => (ErrorKind::NotConnected, "was dropped"),
        };
        let says = |what: &str, r: std::io::Result<usize>| {
            match r {
            Err(e) if e.kind() == kind_wanted && e.to_string().contains(words) => Ok(()),
            other => Err(format!(
                "{what} (runtime dropped: {dropped}): {other:?}, not {kind_wanted:?} saying '{words}'"
            )),
        }
        };
        let rt = runtime!(kind);
        let (a, _b) = rt.block_on(async { UnixStream::pair() })?;
        let mut timed = Box::pin(a.read(vec![0; 4]).timeout(Duration::from_secs(30)));
        let mut chunks = a.recv_stream();
        let mut chain = Box::pin(
            a.read(vec![0; 4])
                .link(a.write(b"x".to_vec()))
                .into_future(),
        );
        let (mut next, mut chained) = (Box::pin(chunks.next()), chain.as_mut());
        rt.block_on(async {
            // Each starts (and waits for data that never comes), then the runtime settles.
            let started = poll_fn(|cx| {
                let t = timed.as_mut().poll(cx).is_pending();
                let n = next.as_mut().poll(cx).is_pending();
                let c = chained.as_mut().poll(cx).is_pending();
                Poll::Ready(t && n && c)
            })
            .await;
            sleep(Duration::from_millis(20)).await;
            started
        })
        .then_some(())
        .ok_or("an op finished inside the runtime")?;
        let alive = if dropped {
            drop(rt);
            None
        } else {
            Some(rt)
        };
        let timed = support::poll_on_thread(timed, limit).ok_or("the timed read hung")?;
        says("timed read", timed.0)?;
        let chunk = support::poll_on_thread(next, limit).ok_or("the receive stream hung")?;
        let chunk = chunk.ok_or("the receive stream ended without an error")?;
        says("receive stream", chunk.map(|c| c.len()))?;
        let ((r, _), _) = support::poll_on_thread(chain, limit).ok_or("the chain hung")?;
        says("chain's read", r)?;
        drop(alive);
    }
    Ok(Completion::Completed)
}

/// An accept stream armed inside the runtime, refused once outside it (its multishot
/// accept cancelled), accepts again inside, and once dropped leaves the listener working.
/// Review W: on io_uring the refusal left the stream holding the freed op's id, so every
/// later `next()` failed ("not in flight") and the drop's orphan left the listener's
/// accepts waiting for ever.
fn a_stream_refused_outside_its_runtime_works_again_inside(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let listener = rt.block_on(async { ring_rt::net::TcpListener::bind("127.0.0.1:0") })?;
    let addr = listener.local_addr()?;
    let mut incoming = listener.incoming();
    let armed = rt.block_on(async {
        let mut next = pin!(incoming.next());
        support::pending_after_a_poll(next.as_mut()).await
    });
    check!(
        armed,
        "the accept stream had a connection before any client"
    );
    let outside = support::poll_on_thread(incoming.next(), Duration::from_secs(5))
        .ok_or("the accept stream outside the runtime hung")?;
    check!(
        matches!(&outside, Some(Err(e)) if e.kind() == ErrorKind::InvalidInput),
        "outside the runtime: {:?}",
        outside.map(|r| r.map(|_| ()))
    );
    let _client = std::net::TcpStream::connect(addr)?;
    let inside = rt.block_on(bounded(LIMIT, async { incoming.next().await }))?;
    check!(
        matches!(inside, Some(Ok(_))),
        "inside again: {:?}",
        inside.map(|r| r.map(|_| ()))
    );
    drop(incoming);
    let _second = std::net::TcpStream::connect(addr)?;
    let accepted = rt.block_on(async { timeout(Duration::from_secs(5), listener.accept()).await });
    check!(
        matches!(accepted, Ok(Ok(_))),
        "accept after the stream was dropped: {:?}",
        accepted.map(|r| r.map(|_| ()))
    );
    Ok(Completion::Completed)
}

/// A cancel the runtime sent (the op was polled outside it, or the runtime shut down) is
/// reported as that refusal wherever the op is polled next; a cancel of the op's own (its
/// timeout fired) stays what it was, even when polled after the drop. Review W: after the
/// drop every `ECANCELED` read as "was dropped" (a fired timeout too), and a read refused
/// outside, then awaited inside, ended with a bare `ECANCELED` on io_uring.
fn only_the_runtimes_own_cancels_are_reported_as_refusals(kind: BackendKind) -> Outcome {
    let limit = Duration::from_secs(5);
    // A timeout that fired inside the runtime, its op's end polled after the drop.
    let rt = runtime!(kind);
    let (a, _b) = rt.block_on(async { UnixStream::pair() })?;
    let mut timed = Box::pin(a.read(vec![0; 4]).timeout(Duration::from_millis(10)));
    rt.block_on(async {
        let _ = support::pending_after_a_poll(timed.as_mut()).await;
        sleep(Duration::from_millis(100)).await;
    });
    drop(rt);
    let (r, _) = support::poll_on_thread(timed, limit).ok_or("the timed read hung")?;
    // io_uring's kernel ended the read at its timeout, before the drop. epoll times an op
    // by a worker timer whose expiry only the op's next poll sees: that poll came after
    // the drop, which refuses it first.
    let got = r.as_ref().err().map(|e| e.kind());
    let wanted: &[ErrorKind] = match kind {
        BackendKind::Uring => &[ErrorKind::TimedOut],
        _ => &[ErrorKind::TimedOut, ErrorKind::NotConnected],
    };
    check!(
        got.is_some_and(|k| wanted.contains(&k)),
        "a timeout that fired before the drop, polled after it: {r:?}"
    );
    // A read refused outside the runtime, then awaited inside it.
    let rt = runtime!(kind);
    let (a, _b) = rt.block_on(async { UnixStream::pair() })?;
    let mut read = Box::pin(a.read(vec![0; 4]).into_future());
    rt.block_on(async {
        let _ = support::pending_after_a_poll(read.as_mut()).await;
    });
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let outside = read.as_mut().poll(&mut cx);
    let (r, _) = match outside {
        Poll::Ready(out) => out,
        Poll::Pending => rt.block_on(bounded(LIMIT, read))?,
    };
    check!(
        r.as_ref()
            .is_err_and(|e| e.kind() == ErrorKind::InvalidInput
                && e.to_string().contains("not running here")),
        "a read refused outside, then awaited inside: {r:?}"
    );
    Ok(Completion::Completed)
}

/// A chain whose ops belong to two runtimes fails as a whole (`InvalidInput`) before
/// anything starts. Its later op skipped the "wrong runtime" check: a blocking-mode
/// io_uring socket read by epoll's loop blocked the whole thread, and epoll registered
/// another runtime's fd, so a later socket with that number waited for ever (found by the
/// fifth attacker review).
fn a_chain_of_two_runtimes_fails_before_it_starts(kind: BackendKind) -> Outcome {
    let rt_a = runtime!(kind);
    let rt_b = second_runtime(kind);
    let (sa, peer) = rt_a.block_on(async { UnixStream::pair() })?;
    rt_b.block_on(bounded(LIMIT, async {
        let (x, _y) = UnixStream::pair()?;
        let chain = x.write(b"hi".to_vec()).link(sa.read(Vec::with_capacity(8)));
        let started = Instant::now();
        let outcome = ring_rt::time::timeout(Duration::from_secs(2), chain.into_future()).await;
        let ((w, _), (r, _)) = outcome.map_err(|_| "the chain waited")?;
        check!(
            invalid_input(w) && invalid_input(r),
            "the chain's ops did not fail with InvalidInput"
        );
        check!(
            started.elapsed() < Duration::from_secs(1),
            "the chain took {:?}",
            started.elapsed()
        );
        Ok::<(), libtest_mimic::Failed>(())
    }))??;
    // The socket is whole in its own runtime.
    rt_a.block_on(bounded(LIMIT, async {
        peer.write_all(b"data".to_vec()).await.0?;
        let (n, buf) = sa.read(Vec::with_capacity(8)).await;
        check!(n? == 4 && buf == b"data", "the read got {buf:?}");
        Ok::<(), libtest_mimic::Failed>(())
    }))??;
    Ok(Completion::Completed)
}

/// An op started in one runtime and then polled in another ends there: with its data if
/// the kernel already had it, else with `InvalidInput` once its cancel is in (its buffer
/// is the kernel's until then). On io_uring it waited for ever: nothing turned its ring
/// (found by the fifth attacker review).
fn an_op_polled_in_another_runtime_ends(kind: BackendKind) -> Outcome {
    let rt_a = runtime!(kind);
    let rt_b = second_runtime(kind);
    let (a, b) = rt_a.block_on(async { UnixStream::pair() })?;
    fn poll_once<F: Future>(rt: &ring_rt::Runtime, fut: &mut std::pin::Pin<Box<F>>) -> bool {
        rt.block_on(async { support::pending_after_a_poll(fut.as_mut()).await })
    }
    // Data arrives after the read started in A: B gets it.
    let mut read = Box::pin(b.read(Vec::with_capacity(8)).into_future());
    check!(poll_once(&rt_a, &mut read), "the read finished at once");
    use std::os::fd::AsFd;
    std::os::unix::net::UnixStream::from(a.as_fd().try_clone_to_owned()?).write_all(b"data")?;
    let (n, buf) = rt_b.block_on(bounded(Duration::from_secs(5), read.as_mut()))?;
    check!(
        n.as_ref().is_ok_and(|&n| n == 4) && buf == b"data",
        "with data, B got {n:?} {buf:?}"
    );
    // No data: B ends the read with InvalidInput, the buffer back.
    let mut read = Box::pin(b.read(vec![0u8; 8]).into_future());
    check!(poll_once(&rt_a, &mut read), "the read finished at once");
    let started = Instant::now();
    let (n, buf) = rt_b.block_on(bounded(Duration::from_secs(5), read.as_mut()))?;
    check!(
        invalid_input(n),
        "without data, B's read did not fail with InvalidInput"
    );
    check!(buf.len() == 8, "the buffer came back as {buf:?}");
    check!(
        started.elapsed() < Duration::from_secs(2),
        "ending it took {:?}",
        started.elapsed()
    );
    Ok(Completion::Completed)
}

/// A timer's waker that panics leaves the other timers due in the same turn woken: they
/// were woken inline, and the unwind dropped the rest (a task whose sleep was over never
/// ran again; found by the fifth attacker review).
fn a_panicking_timer_waker_leaves_other_timers_woken(kind: BackendKind) -> Outcome {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::task::{Context, Wake, Waker};
    struct Panicky;
    impl Wake for Panicky {
        fn wake(self: Arc<Self>) {
            panic!("this waker panics on purpose");
        }
    }
    // Both sleeps must be pending at their first polls, or no waker is stored and the
    // round proves nothing: a paused VM can let the deadline pass first. Such a round
    // runs again with a deadline 10 times as far.
    for ahead in [30, 300, 3_000].map(Duration::from_millis) {
        let rt = runtime!(kind);
        let deadline = Instant::now() + ahead;
        let task_waited = Arc::new(AtomicBool::new(false));
        let waited = task_waited.clone();
        let task = rt.spawn(async move {
            let mut nap = pin!(ring_rt::time::sleep_until(deadline));
            let pending = support::pending_after_a_poll(nap.as_mut()).await;
            waited.store(pending, Ordering::SeqCst);
            nap.await;
            Instant::now()
        });
        let odd_deadline = deadline - Duration::from_micros(1);
        let odd_polled = std::cell::Cell::new(None);
        let panicked = support::expecting_panics(|| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                rt.block_on(async {
                    ring_rt::yield_now().await;
                    let mut odd = Box::pin(ring_rt::time::sleep_until(odd_deadline));
                    let waker = Waker::from(Arc::new(Panicky));
                    let polled = odd.as_mut().poll(&mut Context::from_waker(&waker));
                    odd_polled.set(Some((polled.is_pending(), Instant::now())));
                    ring_rt::time::sleep_until(deadline + Duration::from_millis(70)).await;
                })
            }))
            .is_err()
        });
        let (odd_waited, odd_at) = odd_polled.get().ok_or("the odd sleep was never polled")?;
        check!(
            odd_waited || odd_at >= odd_deadline,
            "a sleep was over before its deadline"
        );
        let woke = rt
            .block_on(bounded(Duration::from_secs(5), task))?
            .map_err(|e| format!("the task failed: {e}"))?;
        check!(
            woke >= deadline,
            "the task's sleep ended before its deadline"
        );
        if !(odd_waited && task_waited.load(Ordering::SeqCst)) {
            continue;
        }
        check!(panicked, "the panicking waker was never woken");
        return Ok(Completion::Completed);
    }
    Err("every round's deadline passed before its sleeps were polled".into())
}

/// A `spawn_on_all` factory that panics on one worker leaves that worker's other queued
/// jobs to run, its stop job among them: dropping the runtime then returns. The panic
/// dropped the rest of the batch, and the drop waited for ever for the worker to stop
/// (found by the fifth attacker review).
fn a_panicking_spawn_on_all_factory_leaves_the_runtime_droppable(kind: BackendKind) -> Outcome {
    drop(runtime!(kind));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        support::expecting_panics(|| {
            let rt = Builder::default().backend(kind).threads(2).build().unwrap();
            rt.spawn_on_all(|i| {
                if i == 1 {
                    panic!("this factory panics on purpose on worker 1");
                }
                std::future::ready(())
            });
            // On worker 0 too (review Z 10): it escaped spawn_on_all, which then spawned
            // nothing on the other workers; it is worker 0's task's panic now.
            let (on_1_tx, on_1_rx) = std::sync::mpsc::channel();
            let handles = rt.spawn_on_all(move |i| {
                if i == 0 {
                    panic!("this factory panics on purpose on worker 0");
                }
                let _ = on_1_tx.send(i);
                std::future::ready(())
            });
            let worker_1_ran = on_1_rx.recv_timeout(Duration::from_secs(5)) == Ok(1);
            let first = handles.into_iter().next().map(|h| rt.block_on(h));
            let worker_0_panicked = matches!(first, Some(Err(e)) if e.is_panic());
            let (ran_tx, ran_rx) = std::sync::mpsc::channel();
            rt.spawn_on_all(move |i| {
                let _ = ran_tx.send(i);
                std::future::ready(())
            });
            let mut ran: Vec<usize> = Vec::new();
            while let Ok(i) = ran_rx.recv_timeout(Duration::from_secs(2)) {
                ran.push(i);
                if ran.len() == 2 {
                    break;
                }
            }
            let started = Instant::now();
            drop(rt);
            let _ = tx.send((ran, started.elapsed(), worker_1_ran, worker_0_panicked));
        })
    });
    let (mut ran, took, worker_1_ran, worker_0_panicked) = rx
        .recv_timeout(Duration::from_secs(15))
        .map_err(|_| "dropping the runtime did not return within 15 s")?;
    check!(
        worker_1_ran && worker_0_panicked,
        "a factory panicking for worker 0: worker 1 ran {worker_1_ran}, worker 0's handle a panic {worker_0_panicked}"
    );
    ran.sort();
    check!(
        ran == [0, 1],
        "the second spawn_on_all ran on workers {ran:?}"
    );
    check!(took < Duration::from_secs(5), "the drop took {took:?}");
    Ok(Completion::Completed)
}

/// Review DG: a pooled receive waiting in line behind another receive of its socket,
/// polled inside another runtime or after its own runtime dropped, stayed pending for ever
/// (the receive holding the turn never lets it go there); a read waiting in line is
/// refused at once. Both backends.
fn a_pooled_receive_waiting_in_line_ends_where_no_loop_turns(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let other = second_runtime(kind);
    let (_a, b) = rt.block_on(async { UnixStream::pair() })?;
    let b = std::rc::Rc::new(b);
    let mut first = Box::pin(b.read(vec![0u8; 8]).into_future());
    let mut second = Box::pin(b.recv_pooled());
    let mut third = Box::pin(b.recv_pooled());
    let waiting = rt.block_on(async {
        support::pending_after_a_poll(first.as_mut()).await
            && support::pending_after_a_poll(second.as_mut()).await
            && support::pending_after_a_poll(third.as_mut()).await
    });
    check!(waiting, "{kind}: a receive with nothing sent ended");
    let elsewhere = other.block_on(timeout(Duration::from_secs(2), second.as_mut()));
    check!(
        matches!(&elsewhere, Ok(Err(e)) if e.kind() == ErrorKind::InvalidInput),
        "{kind}: a pooled receive in line polled in another runtime gave {:?}",
        elsewhere.map(|r| r.map(|b| b.map(|b| b.len())))
    );
    drop(rt);
    let after = other.block_on(timeout(Duration::from_secs(2), third.as_mut()));
    check!(
        matches!(&after, Ok(Err(e)) if e.kind() == ErrorKind::NotConnected),
        "{kind}: a pooled receive in line polled after its runtime's drop gave {:?}",
        after.map(|r| r.map(|b| b.map(|b| b.len())))
    );
    Ok(Completion::Completed)
}

/// Review DI: a pooled receive starved of pool buffers (`ENOBUFS`, waiting for one to come
/// back) was never refused where no loop of its runtime turns: in another runtime and
/// after its runtime's drop it stayed pending until a buffer came back, and, kept, it held
/// its place among the buffer's waiters, so a starved receive at home that a returned
/// buffer should have woken waited for ever. It is refused as a receive waiting in line is
/// (the test above), leaving the waiters.
fn a_starved_pooled_receive_ends_where_no_loop_turns(kind: BackendKind) -> Outcome {
    let builder = Builder::new().threads(1).recv_buffers(2, 64);
    for after_drop in [false, true] {
        let rt = runtime!(kind, builder.clone());
        let other = second_runtime(kind);
        let (a, b) = rt.block_on(async { UnixStream::pair() })?;
        let starved = rt.block_on(async {
            // Both of the pool's buffers held by the caller: the next receive is starved.
            let mut held = Vec::new();
            for word in [&b"first"[..], &b"second"[..]] {
                a.write_all(word).await.0?;
                let chunk = timeout(LIMIT, b.recv_pooled()).await??;
                held.push(chunk.ok_or("end of stream")?);
            }
            let mut starved = Box::pin(b.recv_pooled());
            check!(
                support::pending_after_a_poll(starved.as_mut()).await,
                "{kind}: a receive with nothing sent ended"
            );
            a.write_all(&b"0123456789"[..]).await.0?;
            sleep(Duration::from_millis(20)).await;
            check!(
                support::pending_after_a_poll(starved.as_mut()).await,
                "{kind}: a receive with no pool buffer left ended"
            );
            Ok::<_, libtest_mimic::Failed>((held, starved))
        });
        let (mut held, mut starved) = starved?;
        if after_drop {
            drop(rt);
            let after = other.block_on(timeout(Duration::from_secs(2), starved.as_mut()));
            check!(
                matches!(&after, Ok(Err(e)) if e.kind() == ErrorKind::NotConnected),
                "{kind}: a starved pooled receive polled after its runtime's drop gave {:?}",
                after.map(|r| r.map(|c| c.map(|c| c.len())))
            );
            continue;
        }
        let elsewhere = other.block_on(timeout(Duration::from_secs(2), starved.as_mut()));
        check!(
            matches!(&elsewhere, Ok(Err(e)) if e.kind() == ErrorKind::InvalidInput),
            "{kind}: a starved pooled receive polled in another runtime gave {:?}",
            elsewhere.map(|r| r.map(|c| c.map(|c| c.len())))
        );
        // Kept, it waits for no buffer: the one given back goes to a receive at home.
        let home = rt.block_on(async {
            let mut home = Box::pin(b.recv_pooled());
            support::pending_after_a_poll(home.as_mut()).await;
            drop(held.pop());
            timeout(Duration::from_secs(2), home).await
        });
        let home = home.map(|r| r.map(|c| c.map(|c| c.to_vec())));
        check!(
            matches!(&home, Ok(Ok(Some(bytes))) if bytes.starts_with(b"0123")),
            "{kind}: with a refused starved receive kept, a receive at home given a returned buffer gave {home:?}"
        );
        drop(starved);
    }
    Ok(Completion::Completed)
}

/// Review DH: a pooled receive refused where no loop of its runtime turns (see the test
/// above), its future kept, still held its place in the socket's line: the socket's other
/// receives at home waited behind it for ever (a dropped one lets its place go).
fn a_refused_receive_kept_leaves_its_place_in_line(kind: BackendKind) -> Outcome {
    use std::os::fd::AsFd;
    let rt = runtime!(kind);
    let other = second_runtime(kind);
    let (_a, b) = rt.block_on(async { UnixStream::pair() })?;
    let mut stream = b.recv_stream();
    let _ = rt.block_on(timeout(Duration::from_millis(5), stream.next()));
    let mut behind = Box::pin(b.recv_pooled());
    let refused = other.block_on(timeout(Duration::from_secs(2), behind.as_mut()));
    check!(
        refused.is_ok(),
        "{kind}: a pooled receive in line behind an idle stream, polled in another runtime, stayed pending"
    );
    std::os::unix::net::UnixStream::from(_a.as_fd().try_clone_to_owned()?).write_all(b"hello")?;
    let got = rt.block_on(timeout(Duration::from_secs(2), stream.next()));
    let got = got.map(|c| c.map(|c| c.map(|c| c.to_vec())));
    check!(
        matches!(&got, Ok(Some(Ok(bytes))) if bytes == b"hello"),
        "{kind}: with a refused receive kept, the stream at home gave {got:?}"
    );
    drop(behind);
    drop(stream);
    Ok(Completion::Completed)
}
