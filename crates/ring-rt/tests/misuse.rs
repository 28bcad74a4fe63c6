//! Calls a user gets wrong, each answered with a clear error instead of a hang, an abort,
//! lost data or a silent difference between the backends (the second attacker review of
//! issue 16): out-of-range builder knobs, a timer taken to another runtime, giving up a
//! socket's fd while a dropped read's bytes are queued, bad Unix paths, a JoinHandle
//! polled after its output, and bad or dropped signal waits.

#[macro_use]
mod support;

use std::future::{poll_fn, Future, IntoFuture};
use std::io::{ErrorKind, Read, Write};
use std::pin::pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use libtest_mimic::Completion;
use ring_rt::net::{TcpStream, UnixListener, UnixStream};
use ring_rt::time::sleep;
use ring_rt::{BackendKind, Builder};
use support::{bounded, Outcome};

const LIMIT: Duration = Duration::from_secs(20);

fn main() {
    support::run(&[
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
            "a_write_to_a_dropped_peer_fails_on_both_backends",
            a_write_to_a_dropped_peer_fails_on_both_backends,
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
    let mut nap = Box::pin(sleep(Duration::from_millis(30)));
    first.block_on(async {
        let polled = poll_fn(|cx| Poll::Ready(nap.as_mut().poll(cx).is_pending())).await;
        check!(polled, "the sleep was over at once");
        Ok::<(), libtest_mimic::Failed>(())
    })?;
    let start = Instant::now();
    second.block_on(bounded(Duration::from_secs(5), nap))?;
    check!(
        start.elapsed() < Duration::from_secs(2),
        "the sleep took {:?} in the second runtime",
        start.elapsed()
    );
    Ok(Completion::Completed)
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
            let pending = poll_fn(|cx| Poll::Ready(read.as_mut().poll(cx).is_pending())).await;
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

/// A wait dropped after its signal arrived (a timeout, a select) must not take the signal
/// with it: on io_uring the signalfd read ran in the kernel, and the dropped future lost
/// the signal. The next wait gets it.
fn a_dropped_signal_wait_takes_no_signal(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    ring_rt::signal::block(&[libc::SIGUSR2])?;
    rt.block_on(bounded(LIMIT, async {
        {
            let mut wait = pin!(ring_rt::signal::wait(&[libc::SIGUSR2]));
            let pending = poll_fn(|cx| Poll::Ready(wait.as_mut().poll(cx).is_pending())).await;
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
