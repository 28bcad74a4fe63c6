//! The wakers a receive leaves with the runtime, on both backends: one per waiting receive
//! (the last it was polled with), none once it is dropped or done, and a receive starved
//! of pool buffers still woken by data queued on its socket (reviews AI and AJ). Wakers
//! whose `clone` or `drop` runs code that reaches the runtime again: receives, timers.

#[macro_use]
mod support;

use std::cell::RefCell;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Wake, Waker};
use std::time::{Duration, Instant};

use libtest_mimic::Completion;
use ring_rt::compat::Compat;
use ring_rt::net::UnixStream;
use ring_rt::time::{sleep, sleep_until, timeout};
use ring_rt::{BackendKind, Runtime};
use support::{bounded, Outcome};
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

fn main() {
    support::run(&[
        (
            "a_write_whose_first_polls_waker_clone_panics_goes_on",
            a_write_whose_first_polls_waker_clone_panics_goes_on,
        ),
        (
            "a_receive_streams_first_poll_inside_a_wakers_clone_waits",
            a_receive_streams_first_poll_inside_a_wakers_clone_waits,
        ),
        (
            "a_receive_stream_polled_by_many_wakers_keeps_only_the_last",
            a_receive_stream_polled_by_many_wakers_keeps_only_the_last,
        ),
        (
            "a_read_polled_by_many_wakers_keeps_only_the_last",
            a_read_polled_by_many_wakers_keeps_only_the_last,
        ),
        (
            "a_dropped_receive_stream_leaves_no_waker",
            a_dropped_receive_stream_leaves_no_waker,
        ),
        (
            "a_stream_whose_turn_was_taken_leaves_no_waker",
            a_stream_whose_turn_was_taken_leaves_no_waker,
        ),
        (
            "a_starved_stream_takes_bytes_queued_on_its_socket",
            a_starved_stream_takes_bytes_queued_on_its_socket,
        ),
        (
            "a_timed_out_read_leaves_no_waker",
            a_timed_out_read_leaves_no_waker,
        ),
        (
            "a_receive_dropped_after_its_runtime_leaves_no_waker",
            a_receive_dropped_after_its_runtime_leaves_no_waker,
        ),
        (
            "a_receive_whose_waker_clone_frees_the_turn_is_woken",
            a_receive_whose_waker_clone_frees_the_turn_is_woken,
        ),
        (
            "a_receive_whose_waker_clone_queues_bytes_is_woken",
            a_receive_whose_waker_clone_queues_bytes_is_woken,
        ),
        (
            "a_read_whose_waker_clone_gives_read_ahead_back_gets_it",
            a_read_whose_waker_clone_gives_read_ahead_back_gets_it,
        ),
        (
            "a_receive_stream_whose_waker_clone_queues_bytes_gets_them",
            a_receive_stream_whose_waker_clone_queues_bytes_gets_them,
        ),
        (
            "a_sleep_whose_waker_clone_drops_another_sleep",
            a_sleep_whose_waker_clone_drops_another_sleep,
        ),
        (
            "a_sleep_whose_stored_waker_drops_another_sleep_as_it_goes",
            a_sleep_whose_stored_waker_drops_another_sleep_as_it_goes,
        ),
        (
            "a_waker_whose_clone_drops_a_receive_in_line",
            a_waker_whose_clone_drops_a_receive_in_line,
        ),
        (
            "a_waker_whose_clone_drops_the_stream_holding_the_turn",
            a_waker_whose_clone_drops_the_stream_holding_the_turn,
        ),
        (
            "a_waker_whose_clone_polls_a_receive_of_the_same_socket",
            a_waker_whose_clone_polls_a_receive_of_the_same_socket,
        ),
    ])
}

const LIMIT: Duration = Duration::from_secs(20);

thread_local! {
    /// A receive stream's first chunk, polled by `poll_nested` (from a waker's `clone`).
    static NESTED: RefCell<Option<Pin<Box<dyn Future<Output = String>>>>> = const { RefCell::new(None) };
    /// What `NESTED` ended with, if it ended inside a `clone`.
    static NESTED_OUT: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Polls `NESTED` once, with a no-op waker.
fn poll_nested() {
    let Some(mut next) = NESTED.with(|n| n.borrow_mut().take()) else {
        return;
    };
    match next.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => NESTED_OUT.with(|o| *o.borrow_mut() = Some(out)),
        Poll::Pending => NESTED.with(|n| *n.borrow_mut() = Some(next)),
    }
}

/// A receive stream's first poll made inside the runtime's own bookkeeping (a waker's
/// `clone`, while another receive of the socket parks) waits and tries again from its
/// task: it ended with a "busy" `WouldBlock` error, and the stream with it (review CN).
fn a_receive_streams_first_poll_inside_a_wakers_clone_waits(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        let (a, b) = UnixStream::pair()?;
        let b = Rc::new(b);
        let mut rx = b.recv_stream();
        a.write_all(&b"x"[..]).await.0?;
        let first = rx.next().await.transpose()?.map(|c| c.to_vec());
        check!(
            first.as_deref() == Some(&b"x"[..]),
            "the first chunk: {first:?}"
        );
        let reader = b.clone();
        NESTED.with(|n| {
            *n.borrow_mut() = Some(Box::pin(async move {
                match reader.recv_stream().next().await {
                    Some(Ok(chunk)) => format!("chunk {:?}", String::from_utf8_lossy(&chunk)),
                    Some(Err(e)) => format!("error {e} ({:?})", e.kind()),
                    None => "end".to_string(),
                }
            }))
        });
        let waker = support::waker_calling_on_clone(poll_nested);
        let polled = std::pin::pin!(rx.next()).poll(&mut Context::from_waker(&waker));
        check!(
            polled.is_pending(),
            "our stream with no data: {:?}",
            polled.map(|_| ())
        );
        let ended = NESTED_OUT.with(|o| o.borrow_mut().take());
        check!(
            ended.is_none(),
            "the stream polled first inside the clone ended: {ended:?}"
        );
        // Our stream lets the turn go; the other gets what comes next.
        drop(rx);
        let nested = NESTED
            .with(|n| n.borrow_mut().take())
            .ok_or("the nested stream is gone")?;
        a.write_all(&b"y"[..]).await.0?;
        let got = timeout(Duration::from_secs(5), nested).await;
        check!(
            got.as_deref() == Ok("chunk \"y\""),
            "the nested stream then: {got:?}"
        );
        Ok(Completion::Completed)
    }))?
}

/// A `write_all` into a full socket whose waker's clone panics in its first poll (on epoll
/// a write is tried at its start, and its waker parked there when the socket has no room)
/// has sent nothing behind its caller's back: polled again with a good waker it finishes,
/// and every byte arrives once, in order, after the ones that filled the socket.
fn a_write_whose_first_polls_waker_clone_panics_goes_on(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        let (a, b) = UnixStream::pair()?;
        // Fills the socket's buffer (a short write, or one cut at its deadline).
        let (filled, _) = a
            .write(vec![1u8; 8 << 20])
            .timeout(Duration::from_millis(20))
            .await;
        let filled = match filled {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => 0,
            Err(e) => return Err(e.into()),
        };
        let data = support::pattern(23, 64 << 10);
        let reader = ring_rt::spawn(async move {
            // The write's first poll comes before this task's.
            let mut got = Vec::new();
            loop {
                let (n, buf) = b.read(Vec::with_capacity(256 << 10)).await;
                if n? == 0 {
                    return std::io::Result::Ok(got);
                }
                got.extend_from_slice(&buf);
            }
        });
        let first = {
            let mut write = std::pin::pin!(a.write_all(data.clone()).into_future());
            let waker = support::waker_calling_on_clone(|| panic!("this waker's clone panics"));
            let first = support::expecting_panics(|| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    write
                        .as_mut()
                        .poll(&mut Context::from_waker(&waker))
                        .map(|(res, _)| res.is_ok())
                }))
            });
            let (res, _) = write.await;
            res?;
            first
        };
        drop(a);
        let got = reader.await??;
        let mut want = vec![1u8; filled];
        want.extend_from_slice(&data);
        check!(
            got == want,
            "{} bytes arrived of {} ({filled} filling, then the write's {}); the first poll: {first:?}",
            got.len(),
            want.len(),
            data.len()
        );
        Ok(match first {
            Err(_) => Completion::Completed,
            Ok(_) => Completion::ignored_with("the first poll cloned no waker on this backend"),
        })
    }))?
}
const POLLS: usize = 1000;

/// A waker that only counts: the runtime holds it while `Arc::strong_count` is above one.
struct Counted;

impl Wake for Counted {
    fn wake(self: Arc<Self>) {}
}

fn counted() -> (Arc<Counted>, Waker) {
    let flag = Arc::new(Counted);
    (flag.clone(), Waker::from(flag))
}

/// How many of `flags` the runtime still holds a waker of.
fn held(flags: &[Arc<Counted>]) -> usize {
    flags.iter().filter(|f| Arc::strong_count(f) > 1).count()
}

/// Polls `fut` once with each of `POLLS` distinct wakers, each dropped by the test at once,
/// then lets the runtime run (a waker it replaces is dropped at its next safe point): how
/// many it kept, and whether the future stayed pending throughout.
async fn poll_with_many_wakers<F: Future + Unpin>(fut: &mut F) -> (usize, bool) {
    let mut flags = Vec::with_capacity(POLLS);
    let mut pending = true;
    for _ in 0..POLLS {
        let (flag, waker) = counted();
        pending &= Pin::new(&mut *fut)
            .poll(&mut Context::from_waker(&waker))
            .is_pending();
        flags.push(flag);
    }
    settle_until(|| held(&flags) <= 1).await;
    (held(&flags), pending)
}

/// Lets the runtime run loop turns (each ends at a safe point, where the wakers it let go
/// are dropped) until `done` holds, for at most 2 s. Not a fixed sleep: under emulation
/// (the CI's qemu rows) the guest clock can jump past a short sleep's deadline before its
/// first poll, and no turn ran at all (the 6.1 row once saw 1,000 of 1,000 wakers "kept").
async fn settle_until(done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    loop {
        sleep(Duration::from_millis(1)).await;
        if done() || std::time::Instant::now() >= deadline {
            return;
        }
    }
}

/// A `next` that waits is polled with a thousand different wakers (a future moved from
/// task to task, or an executor that makes a waker per poll): the runtime keeps the last
/// one, not all of them. Review AJ: it kept every one, on both backends (the socket's
/// waiters only added), so memory grew with every poll.
fn a_receive_stream_polled_by_many_wakers_keeps_only_the_last(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        let (a, b) = UnixStream::pair()?;
        let mut rx = b.recv_stream();
        let (kept, pending) = {
            let mut next = rx.next();
            poll_with_many_wakers(&mut next).await
        };
        check!(pending, "`next` was ready with nothing sent");
        check!(kept <= 1, "the runtime kept {kept} of {POLLS} wakers");
        a.write_all(&b"after"[..]).await.0?;
        let chunk = timeout(Duration::from_secs(5), rx.next())
            .await
            .map_err(|_| "the stream missed the data")?
            .ok_or("end of stream")??;
        check!(&chunk[..] == b"after", "the stream's chunk");
        Ok(Completion::Completed)
    }))?
}

/// The same for a one-shot `read` and `recv_pooled`: on epoll each parked its waker on the
/// fd's readiness and never replaced one.
fn a_read_polled_by_many_wakers_keeps_only_the_last(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        let (a, b) = UnixStream::pair()?;
        let mut read = Box::pin(b.read(Vec::with_capacity(64)).into_future());
        let (kept, pending) = poll_with_many_wakers(&mut read).await;
        check!(pending, "`read` was ready with nothing sent");
        check!(kept <= 1, "read: the runtime kept {kept} of {POLLS} wakers");
        a.write_all(&b"one"[..]).await.0?;
        let (n, buf) = timeout(Duration::from_secs(5), read)
            .await
            .map_err(|_| "the read missed the data")?;
        check!(&buf[..n?] == b"one", "the read's bytes");

        let mut pooled = Box::pin(b.recv_pooled().into_future());
        let (kept, pending) = poll_with_many_wakers(&mut pooled).await;
        check!(pending, "`recv_pooled` was ready with nothing sent");
        check!(
            kept <= 1,
            "recv_pooled: the runtime kept {kept} of {POLLS} wakers"
        );
        a.write_all(&b"two"[..]).await.0?;
        let chunk = timeout(Duration::from_secs(5), pooled)
            .await
            .map_err(|_| "recv_pooled missed the data")??
            .ok_or("end of stream")?;
        check!(&chunk[..] == b"two", "recv_pooled's bytes");
        Ok(Completion::Completed)
    }))?
}

/// A stream whose `next` waited is dropped: the runtime lets the waker go. Review AJ: the
/// socket kept it until some later receive woke every waiter, so a task that was done was
/// woken (and its memory kept) long after.
fn a_dropped_receive_stream_leaves_no_waker(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        let (a, b) = UnixStream::pair()?;
        let (flag, waker) = counted();
        {
            let mut rx = b.recv_stream();
            let mut next = rx.next();
            let polled = Pin::new(&mut next).poll(&mut Context::from_waker(&waker));
            check!(polled.is_pending(), "`next` was ready with nothing sent");
        }
        drop(waker);
        // The stream's receive is cancelled; let its final completion come in.
        settle_until(|| Arc::strong_count(&flag) == 1).await;
        check!(
            Arc::strong_count(&flag) == 1,
            "the runtime still holds the dropped stream's waker"
        );
        // The socket works on, and nothing was lost.
        a.write_all(&b"later"[..]).await.0?;
        let (n, buf) = timeout(Duration::from_secs(5), b.read(Vec::with_capacity(64)))
            .await
            .map_err(|_| "the read missed the data")?;
        check!(&buf[..n?] == b"later", "the read after the stream");
        Ok(Completion::Completed)
    }))?
}

/// A stream waits (its `next` polled, then dropped by the caller), another receive takes
/// the socket's turn from it, and the stream is polled again and finds the turn gone: the
/// waker its first wait left is let go. Review AI: on epoll the stream forgot its receive
/// without telling the fd's readiness, which kept the waker until the fd was next ready.
fn a_stream_whose_turn_was_taken_leaves_no_waker(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        let (a, b) = UnixStream::pair()?;
        let b = Rc::new(b);
        let (flag, waker) = counted();
        let mut rx = b.recv_stream();
        {
            let mut next = rx.next();
            let polled = Pin::new(&mut next).poll(&mut Context::from_waker(&waker));
            check!(polled.is_pending(), "`next` was ready with nothing sent");
        }
        drop(waker);
        // A read through an adapter takes the turn from the stream nobody awaits.
        let mut adapter = Compat::from_rc(b.clone());
        check!(
            timeout(Duration::from_millis(20), adapter.fill_buf())
                .await
                .is_err(),
            "the adapter read with nothing sent"
        );
        drop(adapter);
        // The stream finds its turn gone and waits in line again.
        check!(
            timeout(Duration::from_millis(20), rx.next()).await.is_err(),
            "the stream had data with nothing sent"
        );
        settle_until(|| Arc::strong_count(&flag) == 1).await;
        check!(
            Arc::strong_count(&flag) == 1,
            "the runtime still holds the waker of the stream's first wait"
        );
        a.write_all(&b"still here"[..]).await.0?;
        let chunk = timeout(Duration::from_secs(5), rx.next())
            .await
            .map_err(|_| "the stream missed the data")?
            .ok_or("end of stream")??;
        check!(&chunk[..] == b"still here", "the stream's chunk");
        Ok(Completion::Completed)
    }))?
}

/// A stream starved of pool buffers (the caller holds both) waits for one to come back.
/// Meanwhile an adapter reads what waits on the socket and is dropped with it unread: the
/// bytes are queued on the socket, needing no pool buffer, and the starved stream gets
/// them. Review AI: it waited for a returned buffer only, so with every buffer held it
/// waited for ever with the bytes queued.
fn a_starved_stream_takes_bytes_queued_on_its_socket(kind: BackendKind) -> Outcome {
    let builder = Runtime::builder().threads(1).recv_buffers(2, 64);
    let rt = runtime!(kind, builder);
    rt.block_on(bounded(LIMIT, async {
        let (a, b) = UnixStream::pair()?;
        let b = Rc::new(b);
        let reader = b.clone();
        let (held_tx, held_rx) = tokio::sync::oneshot::channel::<()>();
        let task = ring_rt::spawn(async move {
            let mut rx = reader.recv_stream();
            let mut kept = Vec::new();
            // Two chunks, each a pool buffer, both kept: the pool is empty.
            while kept.len() < 2 {
                kept.push(rx.next().await.ok_or("end of stream")??);
            }
            let _ = held_tx.send(());
            // Starved: the data waiting on the socket finds no buffer.
            let chunk = rx.next().await.ok_or("end of stream")??;
            let first: Vec<u8> = kept.iter().flat_map(|c| c.to_vec()).collect();
            Ok::<_, Box<dyn std::error::Error>>((first, chunk.to_vec()))
        });
        a.write_all(&b"one"[..]).await.0?;
        sleep(Duration::from_millis(10)).await;
        a.write_all(&b"two"[..]).await.0?;
        held_rx.await.map_err(|_| "the task ended early")?;
        a.write_all(&b"three"[..]).await.0?;
        // The stream tries, gets ENOBUFS and waits for a buffer to come back.
        sleep(Duration::from_millis(20)).await;
        let mut adapter = Compat::from_rc(b.clone());
        let ahead = adapter.fill_buf().await?.to_vec();
        check!(ahead == b"three", "the adapter read {ahead:?}");
        drop(adapter); // gives "three" back
        let (first, chunk) = timeout(Duration::from_secs(5), task)
            .await
            .map_err(|_| "the starved stream waited with bytes queued")???;
        check!(first == b"onetwo", "the first chunks were {first:?}");
        check!(chunk == b"three", "the starved stream got {chunk:?}");
        Ok(Completion::Completed)
    }))?
}

thread_local! {
    /// A receive a waker's `clone` drops or polls (see `support::waker_calling_on_clone`).
    static OTHER: RefCell<Option<Pin<Box<dyn Future<Output = ()>>>>> = const { RefCell::new(None) };
}

fn drop_other() {
    drop(OTHER.with(|o| o.borrow_mut().take()));
}

fn poll_other() {
    if let Some(mut other) = OTHER.with(|o| o.borrow_mut().take()) {
        let _ = other.as_mut().poll(&mut Context::from_waker(Waker::noop()));
        OTHER.with(|o| *o.borrow_mut() = Some(other));
    }
}

/// Sends "ok" from `a` and checks that `read`, a read of the other end, gets it.
async fn sends_ok_to(
    a: &UnixStream,
    read: impl Future<Output = (std::io::Result<usize>, Vec<u8>)>,
) -> Result<(), Box<dyn std::error::Error>> {
    a.write_all(&b"ok"[..]).await.0?;
    let (n, buf) = timeout(Duration::from_secs(5), read)
        .await
        .map_err(|_| "the read missed the data")?;
    if &buf[..n?] != b"ok" {
        return Err(format!("the read got {buf:?}").into());
    }
    Ok(())
}

/// A read of `b`, polled once: it waits in line for the socket's receive turn.
fn waiting_read(b: &Rc<UnixStream>) -> Result<Pin<Box<dyn Future<Output = ()>>>, &'static str> {
    let b = b.clone();
    let mut read: Pin<Box<dyn Future<Output = ()>>> = Box::pin(async move {
        let _ = b.read(Vec::with_capacity(8)).await;
    });
    let polled = read.as_mut().poll(&mut Context::from_waker(Waker::noop()));
    if polled.is_ready() {
        return Err("a read in line was ready");
    }
    Ok(read)
}

/// A read bounded by `.timeout()` times out on a socket that stays quiet: the runtime lets
/// the read's waker go. On epoll the timeout (a worker timer there) gave up the read's
/// readiness wait without taking its waker out of the fd's waiters, which kept it until the
/// fd was next readable (found reading review AM's fix: `Op::time_out` skipped what `Drop`
/// does for a readiness wait).
fn a_timed_out_read_leaves_no_waker(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        let (_a, b) = UnixStream::pair()?;
        let (flag, waker) = counted();
        let mut read = Box::pin(
            b.read(Vec::with_capacity(8))
                .timeout(Duration::from_millis(10))
                .into_future(),
        );
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let (res, _buf) = loop {
            if let std::task::Poll::Ready(out) =
                read.as_mut().poll(&mut Context::from_waker(&waker))
            {
                break out;
            }
            check!(
                std::time::Instant::now() < deadline,
                "the timed read never ended"
            );
            sleep(Duration::from_millis(2)).await;
        };
        check!(
            res.is_err_and(|e| e.kind() == std::io::ErrorKind::TimedOut),
            "the read did not time out"
        );
        drop(waker);
        settle_until(|| Arc::strong_count(&flag) == 1).await;
        check!(
            Arc::strong_count(&flag) == 1,
            "the runtime still holds the timed-out read's waker"
        );
        Ok(Completion::Completed)
    }))?
}

/// A socket pair whose second end is shared, so that receives of it can sit in
/// thread-locals a waker reaches (freed with them: LeakSanitizer runs these tests).
fn shared_pair() -> std::io::Result<(UnixStream, Rc<UnixStream>)> {
    let (a, b) = UnixStream::pair()?;
    Ok((a, Rc::new(b)))
}

/// A read waits in line for the socket's turn, polled with a waker whose `clone` (code that
/// is not the runtime's) drops another read waiting in line. Review AK: the clone ran with
/// the socket's waiters borrowed, and the dropped read's leaving the line borrowed them
/// again: "RefCell already borrowed".
fn a_waker_whose_clone_drops_a_receive_in_line(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let out = rt.block_on(bounded(LIMIT, async {
        let (a, b) = shared_pair()?;
        let holder = b.clone();
        let first = ring_rt::spawn(async move { holder.read(Vec::with_capacity(8)).await });
        ring_rt::yield_now().await; // `first` holds the turn
        let second = waiting_read(&b)?;
        let third = waiting_read(&b)?;
        OTHER.with(|o| *o.borrow_mut() = Some(third));
        let waker = support::waker_calling_on_clone(drop_other);
        let mut fourth = Box::pin(b.read(Vec::with_capacity(8)).into_future());
        let polled = fourth.as_mut().poll(&mut Context::from_waker(&waker));
        check!(polled.is_pending(), "a read in line was ready");
        drop(fourth);
        drop(second);
        let first = async move {
            first
                .await
                .unwrap_or_else(|e| (Err(std::io::Error::other(e.to_string())), Vec::new()))
        };
        sends_ok_to(&a, first).await?;
        Ok(Completion::Completed)
    }));
    drop_other();
    out?
}

/// A read is polled with a waker whose `clone` drops the receive stream holding the
/// socket's turn (its `poll_next` pending): the stream lets the turn go, and the read gets
/// it. Review AK: "RefCell already borrowed" on epoll before the keyed waiters too, on
/// both backends after them until the clone moved out of the borrow.
fn a_waker_whose_clone_drops_the_stream_holding_the_turn(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let out = rt.block_on(bounded(LIMIT, async {
        let (a, b) = shared_pair()?;
        let reader = b.clone();
        let mut stream: Pin<Box<dyn Future<Output = ()>>> = Box::pin(async move {
            let mut rx = reader.recv_stream();
            let _ = std::future::poll_fn(|cx| rx.poll_next(cx)).await;
        });
        let polled = stream
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()));
        check!(
            polled.is_pending(),
            "the stream was ready with nothing sent"
        );
        OTHER.with(|o| *o.borrow_mut() = Some(stream));
        let waker = support::waker_calling_on_clone(drop_other);
        let mut read = Box::pin(b.read(Vec::with_capacity(8)).into_future());
        let _ = read.as_mut().poll(&mut Context::from_waker(&waker));
        check!(
            OTHER.with(|o| o.borrow().is_none()),
            "the waker was never cloned"
        );
        sends_ok_to(&a, read).await?;
        Ok(Completion::Completed)
    }));
    drop_other();
    out?
}

/// A read is polled with a waker whose `clone` polls another read of the same socket.
/// Before review AK's fix the nested poll found the socket's waiters borrowed and panicked
/// (on both backends); after the keyed waiters, the unwinding then dropped a place in line,
/// which borrowed them again: a panic in a destructor during unwinding, and the process
/// aborted.
fn a_waker_whose_clone_polls_a_receive_of_the_same_socket(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let out = rt.block_on(bounded(LIMIT, async {
        let (a, b) = shared_pair()?;
        let holder = b.clone();
        let first = ring_rt::spawn(async move {
            let _ = timeout(
                Duration::from_millis(50),
                holder.read(Vec::with_capacity(8)),
            )
            .await;
        });
        ring_rt::yield_now().await; // `first` holds the turn
        let reader = b.clone();
        let other: Pin<Box<dyn Future<Output = ()>>> = Box::pin(async move {
            let _ = reader.read(Vec::with_capacity(8)).await;
        });
        OTHER.with(|o| *o.borrow_mut() = Some(other));
        let waker = support::waker_calling_on_clone(poll_other);
        let mut read = Box::pin(b.read(Vec::with_capacity(8)).into_future());
        let polled = read.as_mut().poll(&mut Context::from_waker(&waker));
        check!(polled.is_pending(), "a read in line was ready");
        first.await?;
        drop_other();
        sends_ok_to(&a, read).await?;
        Ok(Completion::Completed)
    }));
    drop_other();
    out?
}

/// A read waits, its runtime is dropped, then the read is dropped (its socket outlives the
/// runtime): the waker it parked is let go. Review AK: on epoll it went to the worker's
/// queue of things to drop at its next safe point, which never came after shutdown.
fn a_receive_dropped_after_its_runtime_leaves_no_waker(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let (a, b) = rt.block_on(async { UnixStream::pair() })?;
    let (flag, waker) = counted();
    let read = rt.block_on(async {
        // The read owns its socket: both outlive the runtime, and go together.
        let mut read = Box::pin(async move { b.read(Vec::with_capacity(8)).await });
        let polled = read.as_mut().poll(&mut Context::from_waker(&waker));
        polled.is_pending().then_some(read)
    });
    let read = read.ok_or("a read was ready with nothing sent")?;
    drop(waker);
    drop(rt);
    drop(read);
    check!(
        Arc::strong_count(&flag) == 1,
        "the dropped read's waker is still held"
    );
    drop(a);
    Ok(Completion::Completed)
}

thread_local! {
    /// Run by the next clone of a hooked waker (see `with_hook`).
    static ON_CLONE: RefCell<Option<Box<dyn FnOnce()>>> = const { RefCell::new(None) };
    /// Run by the next drop of a hooked waker.
    static ON_DROP: RefCell<Option<Box<dyn FnOnce()>>> = const { RefCell::new(None) };
    /// A timer a hooked waker's `clone` or `drop` drops.
    static OTHER_SLEEP: RefCell<Option<Pin<Box<ring_rt::time::Sleep>>>> = const { RefCell::new(None) };
    /// The task a hooked waker's wakes wake.
    static TASK: RefCell<Option<Waker>> = const { RefCell::new(None) };
}

static HOOKED: RawWakerVTable = RawWakerVTable::new(
    |data| {
        if let Some(hook) = ON_CLONE.with(|h| h.borrow_mut().take()) {
            hook();
        }
        RawWaker::new(data, &HOOKED)
    },
    |_| wake_task(),
    |_| wake_task(),
    |_| {
        if let Some(hook) = ON_DROP.with(|h| h.borrow_mut().take()) {
            hook();
        }
    },
);

/// A hooked waker (see `with_hook`), made by the test itself.
fn hooked() -> Waker {
    // SAFETY: the vtable ignores `data` (null), and its functions are sound for any.
    unsafe { Waker::from_raw(RawWaker::new(std::ptr::null(), &HOOKED)) }
}

fn wake_task() {
    TASK.with(|t| {
        if let Some(task) = t.borrow().as_ref() {
            task.wake_by_ref();
        }
    });
}

/// Awaits `fut`, polling it with a waker whose first clone runs `on_clone` (code that is
/// not the runtime's, run where the runtime keeps the waker) and whose wakes wake this
/// task.
async fn with_hook<F: Future + Unpin>(mut fut: F, on_clone: impl FnOnce() + 'static) -> F::Output {
    ON_CLONE.with(|h| *h.borrow_mut() = Some(Box::new(on_clone)));
    std::future::poll_fn(move |cx| {
        TASK.with(|t| *t.borrow_mut() = Some(cx.waker().clone()));
        let hooked = hooked();
        Pin::new(&mut fut).poll(&mut Context::from_waker(&hooked))
    })
    .await
}

/// Lets go of what the hooked-waker tests leave in thread-locals (the task's waker, a hook
/// that never ran): freed before the test ends, as LeakSanitizer runs these tests.
fn clear_hooks() {
    drop(TASK.with(|t| t.borrow_mut().take()));
    drop(ON_CLONE.with(|h| h.borrow_mut().take()));
    drop(ON_DROP.with(|h| h.borrow_mut().take()));
}

type ReadOutput = (std::io::Result<usize>, Vec<u8>);

/// Spawns a read of `b` polled with a hooked waker whose first clone runs `on_clone`.
fn spawn_hooked_read(
    b: &Rc<UnixStream>,
    on_clone: impl FnOnce() + 'static,
) -> ring_rt::JoinHandle<ReadOutput> {
    let reader = b.clone();
    ring_rt::spawn(async move {
        let read = Box::pin(reader.read(Vec::with_capacity(8)).into_future());
        with_hook(read, on_clone).await
    })
}

/// Awaits `read` (for at most 5 s): it must give "ello", the bytes an adapter put back.
async fn gets_ello(
    read: ring_rt::JoinHandle<ReadOutput>,
) -> Result<(), Box<dyn std::error::Error>> {
    let (n, buf) = timeout(Duration::from_secs(5), read)
        .await
        .map_err(|_| "the read waited with the adapter's bytes queued")??;
    if &buf[..n?] != b"ello" {
        return Err(format!("the read got {buf:?}").into());
    }
    Ok(())
}

/// A sleep registered with the worker's timers, kept where a waker reaches it.
fn park_other_sleep() -> Result<(), &'static str> {
    let mut other = Box::pin(sleep(Duration::from_secs(60)));
    let polled = other.as_mut().poll(&mut Context::from_waker(Waker::noop()));
    if polled.is_ready() {
        return Err("a sleep of a minute was over");
    }
    OTHER_SLEEP.with(|o| *o.borrow_mut() = Some(other));
    Ok(())
}

fn drop_other_sleep() {
    drop(OTHER_SLEEP.with(|o| o.borrow_mut().take()));
}

/// A sleep is polled with a waker whose `clone` drops another sleep of the same worker.
/// Review AM's sweep found the class; the timers had it too: the clone ran with the
/// worker's timers borrowed, and the other sleep's removal panicked ("already borrowed").
fn a_sleep_whose_waker_clone_drops_another_sleep(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let out = rt.block_on(bounded(LIMIT, async {
        // A sleep already over at its first poll never takes the waker: a paused VM once
        // let 5 ms pass before that poll (CI's 6.12 VM). Such a round proves nothing and
        // is run again, longer; the clone must run in a round whose first poll waited.
        for wait in [5, 50, 500, 5_000].map(Duration::from_millis) {
            park_other_sleep()?;
            let deadline = Instant::now() + wait;
            let mut timer = Box::pin(sleep_until(deadline));
            let first = std::future::poll_fn(|cx| Poll::Ready(timer.as_mut().poll(cx)));
            let polled = with_hook(first, drop_other_sleep).await;
            if !support::pending_before(&polled, deadline, "the sleep")? {
                drop_other_sleep();
                continue;
            }
            check!(
                OTHER_SLEEP.with(|o| o.borrow().is_none()),
                "the clone did not run"
            );
            timer.await;
            return Ok(Completion::Completed);
        }
        Err("every sleep was over at its first poll".into())
    }));
    clear_hooks();
    out?
}

/// A sleep whose stored waker's `drop` drops another sleep is dropped (and, in a second
/// round, polled with a new waker, which replaces the stored one). The stored waker was
/// dropped with the timers borrowed: the other sleep's removal panicked, inside a drop.
fn a_sleep_whose_stored_waker_drops_another_sleep_as_it_goes(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let out = rt.block_on(bounded(LIMIT, async {
        for replace in [false, true] {
            park_other_sleep()?;
            let mut timer = Box::pin(sleep(Duration::from_secs(60)));
            let waker = hooked();
            check!(
                timer
                    .as_mut()
                    .poll(&mut Context::from_waker(&waker))
                    .is_pending(),
                "a sleep of a minute was over"
            );
            drop(waker);
            ON_DROP.with(|h| *h.borrow_mut() = Some(Box::new(drop_other_sleep)));
            if replace {
                let polled = timer.as_mut().poll(&mut Context::from_waker(Waker::noop()));
                check!(polled.is_pending(), "a sleep of a minute was over");
            }
            drop(timer);
            check!(
                OTHER_SLEEP.with(|o| o.borrow().is_none()),
                "the stored waker was not dropped"
            );
        }
        Ok(Completion::Completed)
    }));
    clear_hooks();
    out?
}

/// A socket pair whose second end (shared) had "hello" read ahead by an adapter, which
/// handed out the "h": "ello" goes back on the socket when the adapter is dropped.
async fn hello_read_ahead() -> std::io::Result<(UnixStream, Rc<UnixStream>, Compat<UnixStream>)> {
    let (a, b) = UnixStream::pair()?;
    let b = Rc::new(b);
    a.write_all(&b"hello"[..]).await.0?;
    let mut adapter = Compat::from_rc(b.clone());
    let ahead = adapter.fill_buf().await?;
    if ahead != b"hello" {
        return Err(std::io::Error::other(format!(
            "the adapter read {ahead:?} ahead"
        )));
    }
    Pin::new(&mut adapter).consume(1);
    Ok((a, b, adapter))
}

/// A read waits in line behind one that got its data; the turn is free but the read first
/// in line has not been polled since. A third read's waker, cloned as it waits, drops that
/// first read: the third is then first in line with the turn free, and is woken to take
/// it. Review AL: the wake that said so went out while the waker was being cloned, before
/// it was parked, and the read waited for ever.
fn a_receive_whose_waker_clone_frees_the_turn_is_woken(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let out = rt.block_on(bounded(LIMIT, async {
        let (a, b) = shared_pair()?;
        let mut first = Box::pin(b.read(Vec::with_capacity(8)).into_future());
        let polled = first.as_mut().poll(&mut Context::from_waker(Waker::noop()));
        check!(polled.is_pending(), "a read was ready with nothing sent");
        let second = waiting_read(&b)?;
        a.write_all(&b"x"[..]).await.0?;
        let (n, buf) = first.await;
        check!(&buf[..n?] == b"x", "the first read's bytes");
        let third = spawn_hooked_read(&b, move || drop(second));
        sleep(Duration::from_millis(20)).await;
        sends_ok_to(&a, async move {
            third
                .await
                .unwrap_or_else(|e| (Err(std::io::Error::other(e.to_string())), Vec::new()))
        })
        .await?;
        Ok(Completion::Completed)
    }));
    clear_hooks();
    out?
}

/// An adapter read ahead; another read holds the turn in the kernel (one bounded by a
/// timeout, which is not recalled for put-back bytes: a plain read would come back for them
/// itself). A read's waker, cloned as it waits in line, drops the adapter, which puts its
/// bytes back on the socket: the read is woken and gets them (review AL: it waited for ever
/// with them queued).
fn a_receive_whose_waker_clone_queues_bytes_is_woken(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let out = rt.block_on(bounded(LIMIT, async {
        let (a, b, adapter) = hello_read_ahead().await?;
        let holder = b.clone();
        let holding = ring_rt::spawn(async move {
            let (n, buf) = holder
                .read(Vec::with_capacity(8))
                .timeout(Duration::from_secs(60))
                .await;
            n.map(|n| buf[..n].to_vec())
        });
        ring_rt::yield_now().await; // it holds the turn, in the kernel
        let read = spawn_hooked_read(&b, move || drop(adapter));
        gets_ello(read).await?;
        a.write_all(&b"ok"[..]).await.0?;
        let held = timeout(Duration::from_secs(5), holding)
            .await
            .map_err(|_| "the read holding the turn missed what came next")???;
        check!(held == b"ok", "the read holding the turn got {held:?}");
        Ok(Completion::Completed)
    }));
    clear_hooks();
    out?
}

/// An adapter read ahead and let the turn go. A read takes the turn, and the waker it
/// leaves where its op waits (the op table, or epoll's readiness wait) is cloned there,
/// dropping the adapter: its bytes go back on the socket while the read waits for newer
/// ones, and nothing more is sent. The read comes back for them. Review AM: it waited for
/// ever (the put-back told the waiting receives, not the one holding the turn).
fn a_read_whose_waker_clone_gives_read_ahead_back_gets_it(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let out = rt.block_on(bounded(LIMIT, async {
        let (a, b, adapter) = hello_read_ahead().await?;
        let read = spawn_hooked_read(&b, move || drop(adapter));
        gets_ello(read).await?;
        drop(a);
        Ok(Completion::Completed)
    }));
    clear_hooks();
    out?
}

/// An adapter read ahead and let the turn go. A receive stream takes the turn, and its
/// receive keeps a clone of its waker (the op's, or epoll's readiness wait), which drops
/// the adapter: the bytes go back on the socket while the stream's receive waits in the
/// kernel. The stream notices, lets its receive go and gives them. Review AL: it waited
/// for ever with them queued (on epoll and with user-space buffer selection).
fn a_receive_stream_whose_waker_clone_queues_bytes_gets_them(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let out = rt.block_on(bounded(LIMIT, async {
        let (a, b, adapter) = hello_read_ahead().await?;
        let reader = b.clone();
        let next = ring_rt::spawn(async move {
            let mut rx = reader.recv_stream();
            let chunk = with_hook(Box::pin(rx.next()), move || drop(adapter)).await;
            chunk.map(|chunk| chunk.map(|chunk| chunk.to_vec()))
        });
        let chunk = timeout(Duration::from_secs(5), next)
            .await
            .map_err(|_| "the stream waited with the adapter's bytes queued")??
            .ok_or("end of stream")??;
        check!(chunk == b"ello", "the stream got {chunk:?}");
        drop(a);
        Ok(Completion::Completed)
    }));
    clear_hooks();
    out?
}
