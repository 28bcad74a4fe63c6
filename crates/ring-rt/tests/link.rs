//! Linked chains and link timeouts, on both backends.

#[macro_use]
mod support;

use std::io::ErrorKind;
use std::time::{Duration, Instant};

use libtest_mimic::Completion;
use ring_rt::net::UnixStream;
use ring_rt::BackendKind;
use support::{pattern, Outcome};

/// Review DN: a read into a buffer with no capacity moves nothing, so it takes no place in
/// its socket's order; in a chain it took the socket's receive turn for the whole chain:
/// with the chain waiting on another socket, a plain read of the first waited for the
/// chain (for ever, had the chain's bytes depended on it). Both orders in the chain.
fn an_empty_read_in_a_chain_holds_no_turn(kind: BackendKind) -> Outcome {
    use std::rc::Rc;
    let rt = runtime!(kind);
    rt.block_on(async {
        for empty_first in [true, false] {
            let (a, b) = UnixStream::pair()?;
            let (c_peer, c) = UnixStream::pair()?;
            let (b, c) = (Rc::new(b), Rc::new(c));
            let chain = {
                let (b, c) = (b.clone(), c.clone());
                ring_rt::spawn(async move {
                    let (empty, (n, buf)) = if empty_first {
                        b.read(Vec::new()).link(c.read(Vec::with_capacity(4))).await
                    } else {
                        let (read, empty) =
                            c.read(Vec::with_capacity(4)).link(b.read(Vec::new())).await;
                        (empty, read)
                    };
                    (empty.0.ok(), n.ok().map(|n| buf[..n].to_vec()))
                })
            };
            ring_rt::time::sleep(Duration::from_millis(5)).await;
            a.write_all(b"XY".to_vec()).await.0?;
            let plain =
                ring_rt::time::timeout(Duration::from_secs(1), b.read(Vec::with_capacity(4)))
                    .await
                    .map(|(n, buf)| n.map(|n| buf[..n].to_vec()));
            c_peer.write_all(b"CCCC".to_vec()).await.0?;
            let chained = ring_rt::time::timeout(Duration::from_secs(2), chain).await;
            check!(
                matches!(&plain, Ok(Ok(got)) if got == b"XY"),
                "{kind} (empty read first: {empty_first}): a plain read beside the chain gave {plain:?}"
            );
            check!(
                matches!(&chained, Ok(Ok((Some(0), Some(got)))) if got == b"CCCC"),
                "{kind} (empty read first: {empty_first}): the chain gave {chained:?}"
            );
        }
        Ok(Completion::Completed)
    })
}

fn main() {
    support::run(&[
        (
            "an_empty_read_in_a_chain_holds_no_turn",
            an_empty_read_in_a_chain_holds_no_turn,
        ),
        (
            "a_dropped_chain_served_from_queued_bytes_that_moved_on_keeps_the_order",
            a_dropped_chain_served_from_queued_bytes_that_moved_on_keeps_the_order,
        ),
        (
            "a_dropped_chain_that_moved_on_gives_its_bytes_back_in_order",
            a_dropped_chain_that_moved_on_gives_its_bytes_back_in_order,
        ),
        (
            "a_chain_polled_again_after_a_panicking_waker_clone_completes",
            a_chain_polled_again_after_a_panicking_waker_clone_completes,
        ),
        ("write_fsync_read_chain", write_fsync_read_chain),
        ("failed_op_cancels_the_rest", failed_op_cancels_the_rest),
        (
            "a_short_read_cancels_the_rest",
            a_short_read_cancels_the_rest,
        ),
        ("many_chains_in_flight", many_chains_in_flight),
        (
            "timeout_fires_and_returns_buffer",
            timeout_fires_and_returns_buffer,
        ),
        (
            "timeout_not_reached_keeps_result",
            timeout_not_reached_keeps_result,
        ),
        ("dropped_chain_is_safe", dropped_chain_is_safe),
        (
            "a_dropped_chain_gives_back_what_its_ended_read_got",
            a_dropped_chain_gives_back_what_its_ended_read_got,
        ),
        (
            "a_chain_of_two_reads_of_one_socket_completes_in_order",
            a_chain_of_two_reads_of_one_socket_completes_in_order,
        ),
        (
            "a_dropped_chain_of_two_reads_gives_the_bytes_back_in_order",
            a_dropped_chain_of_two_reads_gives_the_bytes_back_in_order,
        ),
        (
            "a_chain_served_from_queued_bytes_reads_them_back_to_back",
            a_chain_served_from_queued_bytes_reads_them_back_to_back,
        ),
        (
            "a_chain_longer_than_the_sq_runs_op_by_op",
            a_chain_longer_than_the_sq_runs_op_by_op,
        ),
    ])
}

fn temp_file(tag: &str, kind: BackendKind) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("ring-rt-link-{tag}-{}-{kind}", std::process::id()))
}

fn write_fsync_read_chain(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let path = temp_file("chain", kind);
    let res = rt.block_on(async {
        let file = ring_rt::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .await?;
        let data = pattern(9, 4096);
        let ((written, synced), read) = file
            .write_at(data.clone(), 8192)
            .link(file.sync_data())
            .link(file.read_at(Vec::with_capacity(4096), 8192))
            .await;
        check!(written.0? == 4096, "write");
        synced?;
        let (n, back) = read;
        check!(n? == 4096 && back == data, "read back differs");
        Ok(Completion::Completed)
    });
    let _ = std::fs::remove_file(&path);
    res
}

fn failed_op_cancels_the_rest(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let path = temp_file("fail", kind);
    let res = rt.block_on(async {
        let file = ring_rt::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .open(&path)
            .await?;
        // An offset past i64::MAX fails with EINVAL; the fsync and write after it must not run.
        let ((bad, synced), write) = file
            .read_at(vec![0u8; 16], u64::MAX)
            .link(file.sync_all())
            .link(file.write_at(b"never".to_vec(), 0))
            .await;
        check!(
            bad.0.as_ref().err().and_then(|e| e.raw_os_error()) == Some(libc::EINVAL),
            "first: {:?}",
            bad.0
        );
        check!(
            synced.as_ref().err().and_then(|e| e.raw_os_error()) == Some(libc::ECANCELED),
            "second: {synced:?}"
        );
        check!(
            write.0.as_ref().err().and_then(|e| e.raw_os_error()) == Some(libc::ECANCELED),
            "third: {:?}",
            write.0
        );
        check!(write.1 == b"never", "buffer not handed back");
        check!(
            std::fs::metadata(&path)?.len() == 0,
            "the cancelled write ran"
        );
        Ok(Completion::Completed)
    });
    let _ = std::fs::remove_file(&path);
    res
}

/// The kernel fails a link on a short file read or write, not only on an error: a chain
/// run one op after another (epoll) must cancel the same rest, or the two backends differ.
fn a_short_read_cancels_the_rest(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let path = temp_file("short", kind);
    std::fs::write(&path, b"ten bytes!")?;
    let res = rt.block_on(async {
        let file = ring_rt::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .await?;
        let (read, write) = file
            .read_at(Vec::with_capacity(64), 0)
            .link(file.write_at(b"never".to_vec(), 100))
            .await;
        check!(
            read.0.as_ref().ok() == Some(&10) && read.1 == b"ten bytes!",
            "read: {:?}",
            read.0
        );
        check!(
            write.0.as_ref().err().and_then(|e| e.raw_os_error()) == Some(libc::ECANCELED),
            "the write after a short read: {:?}",
            write.0
        );
        check!(
            std::fs::metadata(&path)?.len() == 10,
            "the cancelled write ran"
        );
        Ok(Completion::Completed)
    });
    let _ = std::fs::remove_file(&path);
    res
}

fn many_chains_in_flight(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let path = temp_file("many", kind);
    let res = rt.block_on(async {
        let file = std::rc::Rc::new(
            ring_rt::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .open(&path)
                .await?,
        );
        let tasks: Vec<_> = (0..64u64)
            .map(|page| {
                let file = file.clone();
                ring_rt::spawn(async move {
                    let data = pattern(page, 4096);
                    let pos = page * 4096;
                    let ((w, s), r) = file
                        .write_at(data.clone(), pos)
                        .link(file.sync_data())
                        .link(file.read_at(Vec::with_capacity(4096), pos))
                        .await;
                    w.0?;
                    s?;
                    let n = r.0?;
                    Ok::<bool, std::io::Error>(n == 4096 && r.1 == data)
                })
            })
            .collect();
        for t in tasks {
            check!(t.await??, "a chain read back the wrong page");
        }
        Ok(Completion::Completed)
    });
    let _ = std::fs::remove_file(&path);
    res
}

fn timeout_fires_and_returns_buffer(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(async {
        let (_a, b) = UnixStream::pair()?;
        let start = Instant::now();
        let (res, buf) = b
            .read(vec![0u8; 64])
            .timeout(Duration::from_millis(30))
            .await;
        let err = res.err().ok_or("read of a silent socket succeeded")?;
        check!(err.kind() == ErrorKind::TimedOut, "got {err:?}");
        check!(buf.len() == 64, "buffer not returned");
        check!(
            start.elapsed() >= Duration::from_millis(25),
            "fired early: {:?}",
            start.elapsed()
        );
        Ok(Completion::Completed)
    })
}

fn timeout_not_reached_keeps_result(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(async {
        let (a, b) = UnixStream::pair()?;
        let (res, _) = a.write_all(b"ready".to_vec()).await;
        res?;
        let (res, buf) = b.read(vec![0u8; 64]).timeout(Duration::from_secs(10)).await;
        check!(&buf[..res?] == b"ready", "wrong data");
        Ok(Completion::Completed)
    })
}

fn dropped_chain_is_safe(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(async {
        for _ in 0..20 {
            let (_a, b) = UnixStream::pair()?;
            // A read that never completes, linked to a write: drop the chain mid-flight.
            let chain = b.read(vec![0u8; 64]).link(b.write(b"x".to_vec()));
            let _ = ring_rt::time::timeout(Duration::from_millis(2), chain).await;
        }
        ring_rt::time::sleep(Duration::from_millis(20)).await;
        Ok(Completion::Completed)
    })
}

/// A chain run op by op (epoll; io_uring too while a socket has queued data) and dropped
/// after its read ended but before the chain did: the read's bytes go back to the socket
/// for the next read. They were dropped with the chain's future (found by the fourth
/// attacker review; the kernel-linked path already reaped ended ops).
fn a_dropped_chain_gives_back_what_its_ended_read_got(kind: BackendKind) -> Outcome {
    use std::future::IntoFuture;
    use std::pin::pin;
    let rt = runtime!(kind);
    rt.block_on(support::bounded(Duration::from_secs(20), async {
        let (a, b) = UnixStream::pair()?;
        let (c, _d) = UnixStream::pair()?;
        {
            // A read that received "first" and was dropped: "first" is queued on `b`.
            let mut read = pin!(b.read(Vec::with_capacity(16)).into_future());
            let pending = support::pending_after_a_poll(read.as_mut()).await;
            check!(pending, "the read finished at once");
            a.write_all(b"first".to_vec()).await.0?;
            ring_rt::time::sleep(Duration::from_millis(20)).await;
        }
        {
            // The chain's read takes "first"; its second op waits; then it is dropped.
            let chain = b
                .read(Vec::with_capacity(16))
                .link(c.read(Vec::with_capacity(16)));
            let mut chain = pin!(chain.into_future());
            for _ in 0..3 {
                let pending = support::pending_after_a_poll(chain.as_mut()).await;
                check!(pending, "the chain finished");
                ring_rt::time::sleep(Duration::from_millis(5)).await;
            }
        }
        a.write_all(b"second".to_vec()).await.0?;
        let mut got = Vec::new();
        while got.len() < 11 {
            let read =
                ring_rt::time::timeout(Duration::from_secs(2), b.read(Vec::with_capacity(16)));
            let (n, buf) = read.await.map_err(|_| format!("only {got:?} arrived"))?;
            got.extend_from_slice(&buf[..n?]);
        }
        check!(got == b"firstsecond", "the reads got {got:?}");
        Ok(Completion::Completed)
    }))?
}

/// Reads everything `b` gets until `len` bytes arrived (2 s per read at most).
async fn read_until(b: &UnixStream, len: usize) -> Result<Vec<u8>, libtest_mimic::Failed> {
    let mut got = Vec::new();
    while got.len() < len {
        let read = ring_rt::time::timeout(Duration::from_secs(2), b.read(Vec::with_capacity(16)));
        let (n, buf) = read.await.map_err(|_| format!("only {got:?} arrived"))?;
        got.extend_from_slice(&buf[..n?]);
    }
    Ok(got)
}

/// A chain of two reads of the same socket: the second goes on with the receive turn
/// the first took. Run op by op (epoll; io_uring while a dropped read still holds the
/// turn, so the chain cannot go to the kernel as one) the second read waited for the
/// turn its own chain held, for ever (found by the fifth attacker review).
fn a_chain_of_two_reads_of_one_socket_completes_in_order(kind: BackendKind) -> Outcome {
    use std::future::IntoFuture;
    use std::pin::pin;
    let rt = runtime!(kind);
    rt.block_on(support::bounded(Duration::from_secs(20), async {
        let (a, b) = UnixStream::pair()?;
        let a = std::rc::Rc::new(a);
        for round in 0..2 {
            if round == 0 {
                a.write_all(b"AAAABBBB".to_vec()).await.0?;
            } else {
                // A read polled once and dropped holds the turn until its cancel ends, so
                // the chain cannot go to the kernel as one; the data comes later.
                let mut read = pin!(b.read(Vec::with_capacity(4)).into_future());
                let pending = support::pending_after_a_poll(read.as_mut()).await;
                check!(pending, "the read finished at once");
                let writer = a.clone();
                ring_rt::spawn(async move {
                    ring_rt::time::sleep(Duration::from_millis(50)).await;
                    writer.write_all(b"AAAABBBB".to_vec()).await.0
                });
            }
            let chain = b
                .read(Vec::with_capacity(4))
                .link(b.read(Vec::with_capacity(4)));
            let timed = ring_rt::time::timeout(Duration::from_secs(3), chain.into_future());
            let ((r1, b1), (r2, b2)) = timed
                .await
                .map_err(|_| format!("round {round}: the chain never finished"))?;
            check!(
                r1? == 4 && r2? == 4 && b1 == b"AAAA" && b2 == b"BBBB",
                "round {round}: the reads got {b1:?} and {b2:?}"
            );
        }
        Ok(Completion::Completed)
    }))?
}

/// A chain of two reads of one socket, dropped after both received (their completions
/// not yet taken): the next reads get the bytes in the order they arrived. On io_uring
/// both reads were orphans and each put its bytes at the front of the socket's queue,
/// so they came back reversed (found by the fifth attacker review).
fn a_dropped_chain_of_two_reads_gives_the_bytes_back_in_order(kind: BackendKind) -> Outcome {
    use std::future::IntoFuture;
    let rt = runtime!(kind);
    rt.block_on(support::bounded(Duration::from_secs(20), async {
        let (a, b) = UnixStream::pair()?;
        let mut chain = Box::pin(
            b.read(Vec::with_capacity(4))
                .link(b.read(Vec::with_capacity(4)))
                .into_future(),
        );
        let pending = support::pending_after_a_poll(chain.as_mut()).await;
        check!(pending, "the chain finished at once");
        a.write_all(b"AAAA".to_vec()).await.0?;
        ring_rt::time::sleep(Duration::from_millis(10)).await;
        a.write_all(b"BBBB".to_vec()).await.0?;
        ring_rt::time::sleep(Duration::from_millis(10)).await;
        drop(chain);
        a.write_all(b"CCCC".to_vec()).await.0?;
        let got = read_until(&b, 12).await?;
        check!(got == b"AAAABBBBCCCC", "the next reads got {got:?}");
        Ok(Completion::Completed)
    }))?
}

/// A chain of two reads whose first is served from bytes a dropped read left queued on the
/// socket (it takes no turn), with a plain read asking in between: the chain's reads get
/// consecutive bytes, as they do in the kernel. The chain's second read lined up behind
/// the plain read, which took bytes from the middle (io_uring; found by review BQ).
fn a_chain_served_from_queued_bytes_reads_them_back_to_back(kind: BackendKind) -> Outcome {
    use std::future::IntoFuture;
    let rt = runtime!(kind);
    rt.block_on(support::bounded(Duration::from_secs(20), async {
        let (a, b) = UnixStream::pair()?;
        let b = std::rc::Rc::new(b);
        // A read in the kernel, dropped once its bytes are in: they are queued on `b`.
        let mut first = Box::pin(b.read(Vec::with_capacity(16)).into_future());
        let pending = support::pending_after_a_poll(first.as_mut()).await;
        check!(pending, "the first read finished at once");
        let chained = b.clone();
        let chain = ring_rt::spawn(async move {
            let ((r1, x), (r2, y)) = chained
                .read(Vec::with_capacity(2))
                .link(chained.read(Vec::with_capacity(2)))
                .await;
            (r1.map(|n| x[..n].to_vec()), r2.map(|n| y[..n].to_vec()))
        });
        ring_rt::yield_now().await;
        let plain = b.clone();
        let plain = ring_rt::spawn(async move {
            let (r, x) = plain.read(Vec::with_capacity(2)).await;
            r.map(|n| x[..n].to_vec())
        });
        ring_rt::yield_now().await;
        a.write_all(b"ABCDEF".to_vec()).await.0?;
        ring_rt::time::sleep(Duration::from_millis(5)).await;
        drop(first);
        let (c1, c2) = ring_rt::time::timeout(Duration::from_secs(3), chain)
            .await
            .map_err(|_| "the chain never finished")?
            .map_err(|e| format!("the chain's task: {e:?}"))?;
        let p = ring_rt::time::timeout(Duration::from_secs(3), plain)
            .await
            .map_err(|_| "the plain read never finished")?
            .map_err(|e| format!("the plain read's task: {e:?}"))??;
        let (c1, c2) = (c1?, c2?);
        check!(
            c1 == b"AB" && c2 == b"CD" && p == b"EF",
            "the chain (asked first) got {c1:?} then {c2:?}, the plain read {p:?}"
        );
        Ok(Completion::Completed)
    }))?
}

/// A chain with more ops than the SQ has entries, and a timed op on a 1-entry SQ (op and
/// LINK_TIMEOUT are two SQEs), run op by op with the same results as on epoll. They failed
/// with a bare EINVAL on io_uring (found by the fifth attacker review).
fn a_chain_longer_than_the_sq_runs_op_by_op(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind, ring_rt::Builder::default().threads(1).entries(1));
    rt.block_on(support::bounded(Duration::from_secs(20), async {
        let (a, b) = UnixStream::pair()?;
        let (res, _) = b
            .read(Vec::with_capacity(8))
            .timeout(Duration::from_millis(10))
            .await;
        check!(
            res.as_ref().is_err_and(|e| e.kind() == ErrorKind::TimedOut),
            "a timed read with nothing to read gave {res:?}"
        );
        a.write_all(b"x".to_vec()).await.0?;
        let (res, buf) = b
            .read(Vec::with_capacity(8))
            .timeout(Duration::from_secs(1))
            .await;
        check!(
            res.as_ref().is_ok_and(|&n| n == 1) && buf == b"x",
            "a timed read with data gave {res:?} {buf:?}"
        );
        let ((w1, _), (w2, _)) = a
            .write(b"1".to_vec())
            .link(a.write(b"2".to_vec()))
            .link(a.write(b"3".to_vec()))
            .await
            .0;
        check!(
            w1.is_ok() && w2.is_ok(),
            "a 3-op chain on a 1-entry SQ gave {w1:?} {w2:?}"
        );
        let got = read_until(&b, 3).await?;
        check!(got == b"123", "the chain's writes arrived as {got:?}");
        Ok(Completion::Completed)
    }))?
}

fn clone_panics() {
    panic!("this waker's clone panics");
}

/// Review BS (2): a chain whose poll met a waker whose clone panics, polled again with a
/// good waker, goes on and completes in order (run op by op, it panicked again with
/// "`async fn` resumed after panicking"). A chain of two reads and one of a write and a
/// read, each polled once with such a waker before anything is there to read.
fn a_chain_polled_again_after_a_panicking_waker_clone_completes(kind: BackendKind) -> Outcome {
    use std::future::{poll_fn, Future, IntoFuture};
    let rt = runtime!(kind);
    rt.block_on(support::bounded(Duration::from_secs(20), async {
        let (a, b) = UnixStream::pair()?;
        let mut chain = Box::pin(
            b.read(Vec::with_capacity(3))
                .link(b.read(Vec::with_capacity(3)))
                .into_future(),
        );
        let waker = support::waker_calling_on_clone(clone_panics);
        let mut cx = std::task::Context::from_waker(&waker);
        let panicked = support::expecting_panics(|| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                chain.as_mut().poll(&mut cx).is_ready()
            }))
        });
        a.write_all(b"abcdef".to_vec()).await.0?;
        let ((r1, x), (r2, y)) = ring_rt::time::timeout(
            Duration::from_secs(3),
            poll_fn(|cx| chain.as_mut().poll(cx)),
        )
        .await
        .map_err(|_| "the chain never finished")?;
        let (n1, n2) = (r1?, r2?);
        check!(
            x[..n1] == *b"abc" && y[..n2] == *b"def",
            "the chain read {:?} then {:?}",
            &x[..n1],
            &y[..n2]
        );
        match panicked {
            Err(_) => Ok(Completion::Completed),
            Ok(ready) => Ok(Completion::ignored_with(format!(
                "the chain's first poll cloned no waker (ready: {ready})"
            ))),
        }
    }))?
}

/// Review BV: a chain that read socket b and moved on to socket d, dropped while another
/// read of b waits, gives b's bytes back in order: the other read gets them first and the
/// later bytes after ("CDAB" when a chain let b's turn go as it moved on: the other read
/// took the later bytes, and the chain's were given back behind them).
fn a_dropped_chain_that_moved_on_gives_its_bytes_back_in_order(kind: BackendKind) -> Outcome {
    use std::future::IntoFuture;
    let rt = runtime!(kind);
    rt.block_on(support::bounded(Duration::from_secs(20), async {
        let (a, b) = UnixStream::pair()?;
        let (_c, d) = UnixStream::pair()?;
        let b = std::rc::Rc::new(b);
        a.write_all(b"AB".to_vec()).await.0?;
        // A read in the kernel on d, dropped: the chain cannot take d's turn at once and
        // runs op by op (io_uring; epoll always does).
        let mut dropped = Box::pin(d.read(Vec::with_capacity(1)).into_future());
        support::pending_after_a_poll(dropped.as_mut()).await;
        drop(dropped);
        let chain = Box::pin(
            b.read(Vec::with_capacity(2))
                .link(d.read(Vec::with_capacity(2)))
                .into_future(),
        );
        reads_around_a_dropped_chain(&b, chain, Some((&a, b"CD")), b"ABCD").await?;
        Ok(Completion::Completed)
    }))?
}

/// Polls `chain` (which read `b` and waits on a socket nothing is sent to) three times,
/// sends `then` (if any), asks for a plain read of `b`, drops the chain and reads `b`
/// until `want`'s length came: b's reads must have got `want`, in the order they got it.
async fn reads_around_a_dropped_chain<C: std::future::Future>(
    b: &std::rc::Rc<UnixStream>,
    mut chain: std::pin::Pin<Box<C>>,
    then: Option<(&UnixStream, &'static [u8])>,
    want: &[u8],
) -> Result<(), libtest_mimic::Failed> {
    for _ in 0..3 {
        let pending = support::pending_after_a_poll(chain.as_mut()).await;
        check!(pending, "the chain ended with nothing to read on d");
        ring_rt::time::sleep(Duration::from_millis(5)).await;
    }
    if let Some((peer, bytes)) = then {
        peer.write_all(bytes).await.0?;
    }
    let other = b.clone();
    let plain = ring_rt::spawn(async move {
        let (r, x) = other.read(Vec::with_capacity(2)).await;
        r.map(|n| x[..n].to_vec())
    });
    ring_rt::time::sleep(Duration::from_millis(30)).await;
    drop(chain);
    let mut got = ring_rt::time::timeout(Duration::from_secs(3), plain)
        .await
        .map_err(|_| "the plain read never finished")?
        .map_err(|e| format!("the plain read's task: {e:?}"))??;
    got.extend(read_until(b, want.len() - got.len()).await?);
    check!(
        got == want,
        "reads of b in turn gave {:?}",
        String::from_utf8_lossy(&got)
    );
    Ok(())
}

/// Review BV: a chain whose read of b was served from bytes a dropped read left queued
/// there, dropped while it waits on socket d and another read of b waits, gives b's bytes
/// back in order ("CDAB" for "ABCD" on io_uring: the chain let its place in b's line go as
/// it moved on, the other read took the later bytes, and the chain's went back in front of
/// what was left). The chain keeps the place to its end, as it keeps a turn.
fn a_dropped_chain_served_from_queued_bytes_that_moved_on_keeps_the_order(
    kind: BackendKind,
) -> Outcome {
    use std::future::IntoFuture;
    let rt = runtime!(kind);
    rt.block_on(support::bounded(Duration::from_secs(20), async {
        let (a, b) = UnixStream::pair()?;
        let (_c, d) = UnixStream::pair()?;
        let b = std::rc::Rc::new(b);
        // A read in the kernel, dropped once its bytes are in: they are queued on b.
        let mut dropped = Box::pin(b.read(Vec::with_capacity(16)).into_future());
        support::pending_after_a_poll(dropped.as_mut()).await;
        a.write_all(b"ABCD".to_vec()).await.0?;
        ring_rt::time::sleep(Duration::from_millis(20)).await;
        drop(dropped);
        let chain = Box::pin(
            b.read(Vec::with_capacity(2))
                .link(d.read(Vec::with_capacity(2)))
                .into_future(),
        );
        reads_around_a_dropped_chain(&b, chain, None, b"ABCD").await?;
        Ok(Completion::Completed)
    }))?
}
