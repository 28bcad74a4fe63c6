//! What a tokio user reaches for first, on ring-rt (docs/FROM_TOKIO.md cites these tests):
//! runtime-agnostic channels within one worker and between two workers (tokio's mpsc,
//! oneshot, broadcast and Notify, futures-channel's mpsc and oneshot, async-channel),
//! `select!` over ring-rt futures (tokio's and futures'), what replaces `JoinSet`, a stream
//! read by one task while another writes, timeouts on reads, tokio's I/O traits through
//! `Compat`, and `from_std` for every listener and stream. Written with `#[ring_rt::test]`:
//! each test runs on io_uring and on epoll.

use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use ring_rt::net::{TcpListener, TcpStream, UdpSocket, UnixListener, UnixStream};
use ring_rt::{Handle, JoinHandle};

/// A bound on every test body: a lost wake-up fails the test instead of hanging the run.
const LIMIT: Duration = Duration::from_secs(20);

async fn bounded<F: Future>(body: F) -> F::Output {
    ring_rt::time::timeout(LIMIT, body)
        .await
        .unwrap_or_else(|_| panic!("the test did not finish within {LIMIT:?}"))
}

fn thread_name() -> String {
    std::thread::current().name().unwrap_or("").to_string()
}

/// Runs the `!Send` future `make` builds on worker 1 (with ring-rt timers in it, say),
/// checking that it really runs there.
fn on_worker_1<F, Fut>(make: F) -> JoinHandle<Fut::Output>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future + 'static,
    Fut::Output: Send + 'static,
{
    let handle = Handle::current();
    assert_eq!(handle.workers(), 2, "the test asks for two workers");
    handle
        .spawn_local_on(1, move || {
            assert_eq!(thread_name(), "ring-rt-worker-1");
            make()
        })
        .expect("worker 1 exists")
}

/// A pause on the worker it runs on, so the other side waits first.
async fn pause() {
    ring_rt::time::sleep(Duration::from_millis(2)).await;
}

// ---- channels: each one within worker 0, then across workers 0 and 1 ----

#[ring_rt::test(workers = 2)]
async fn tokio_mpsc_within_and_across_workers() {
    bounded(async {
        // Capacity 2 for 20 messages: the sender waits for room, the receiver for data.
        let (tx, mut rx) = tokio::sync::mpsc::channel(2);
        let local = ring_rt::spawn(async move {
            for i in 0..20 {
                tx.send(i).await.expect("receiver alive");
            }
        });
        let mut got = Vec::new();
        while let Some(i) = rx.recv().await {
            got.push(i);
        }
        local.await.expect("local sender");
        assert_eq!(got, (0..20).collect::<Vec<_>>());

        let (tx, mut rx) = tokio::sync::mpsc::channel(2);
        let remote = on_worker_1(move || async move {
            for i in 0..20 {
                tx.send(i).await.expect("receiver alive");
                if i % 5 == 0 {
                    pause().await;
                }
            }
        });
        let mut got = Vec::new();
        while let Some(i) = rx.recv().await {
            got.push(i);
        }
        remote.await.expect("remote sender");
        assert_eq!(got, (0..20).collect::<Vec<_>>());
    })
    .await
}

#[ring_rt::test(workers = 2)]
async fn tokio_oneshot_within_and_across_workers() {
    bounded(async {
        let (tx, rx) = tokio::sync::oneshot::channel();
        ring_rt::spawn(async move {
            pause().await;
            let _ = tx.send("local");
        });
        assert_eq!(rx.await, Ok("local"));

        // Worker 1 waits for worker 0's answer, and answers back.
        let (ask_tx, ask_rx) = tokio::sync::oneshot::channel::<u32>();
        let (reply_tx, reply_rx) = tokio::sync::oneshot::channel();
        let remote = on_worker_1(move || async move {
            let n = ask_rx.await.expect("a question");
            let _ = reply_tx.send(n * 2);
        });
        pause().await;
        ask_tx.send(21).expect("worker 1 waits");
        assert_eq!(reply_rx.await, Ok(42));
        remote.await.expect("remote task");
    })
    .await
}

#[ring_rt::test(workers = 2)]
async fn tokio_broadcast_within_and_across_workers() {
    bounded(async {
        let (tx, mut here) = tokio::sync::broadcast::channel(16);
        let mut there = tx.subscribe();
        let mut local_rx = tx.subscribe();
        let local = ring_rt::spawn(async move {
            let mut got = Vec::new();
            for _ in 0..3 {
                got.push(local_rx.recv().await.expect("a message"));
            }
            got
        });
        let remote = on_worker_1(move || async move {
            let mut got = Vec::new();
            for _ in 0..3 {
                got.push(there.recv().await.expect("a message"));
            }
            got
        });
        for i in 0..3 {
            pause().await;
            tx.send(i).expect("receivers alive");
        }
        for got in [local.await, remote.await] {
            assert_eq!(got.expect("receiver task"), [0, 1, 2]);
        }
        for i in 0..3 {
            assert_eq!(here.recv().await, Ok(i));
        }
    })
    .await
}

#[ring_rt::test(workers = 2)]
async fn tokio_notify_within_and_across_workers() {
    bounded(async {
        let notify = Arc::new(tokio::sync::Notify::new());
        let waiter = ring_rt::spawn({
            let notify = notify.clone();
            async move { notify.notified().await }
        });
        pause().await;
        notify.notify_one();
        waiter.await.expect("local waiter");

        // Worker 1 waits, then wakes worker 0 in turn.
        let (to_remote, to_local) = (
            Arc::new(tokio::sync::Notify::new()),
            Arc::new(tokio::sync::Notify::new()),
        );
        let remote = on_worker_1({
            let (to_remote, to_local) = (to_remote.clone(), to_local.clone());
            move || async move {
                to_remote.notified().await;
                pause().await;
                to_local.notify_one();
            }
        });
        pause().await;
        to_remote.notify_one();
        to_local.notified().await;
        remote.await.expect("remote task");
    })
    .await
}

#[ring_rt::test(workers = 2)]
async fn futures_channel_mpsc_and_oneshot_within_and_across_workers() {
    use futures_util::{SinkExt, StreamExt};
    bounded(async {
        let (mut tx, rx) = futures_channel::mpsc::channel::<u32>(1);
        let local = ring_rt::spawn(async move {
            for i in 0..10 {
                tx.send(i).await.expect("receiver alive");
            }
        });
        assert_eq!(rx.collect::<Vec<_>>().await, (0..10).collect::<Vec<_>>());
        local.await.expect("local sender");

        let (mut tx, rx) = futures_channel::mpsc::channel::<u32>(1);
        let (done_tx, done_rx) = futures_channel::oneshot::channel();
        let remote = on_worker_1(move || async move {
            for i in 0..10 {
                tx.send(i).await.expect("receiver alive");
            }
            drop(tx);
            pause().await;
            let _ = done_tx.send("sent all");
        });
        assert_eq!(rx.collect::<Vec<_>>().await, (0..10).collect::<Vec<_>>());
        assert_eq!(done_rx.await, Ok("sent all"));
        remote.await.expect("remote sender");
    })
    .await
}

#[ring_rt::test(workers = 2)]
async fn async_channel_receivers_on_both_workers() {
    bounded(async {
        // Multi-producer, multi-consumer: clones of one receiver on each worker. Worker 1's
        // takes the first ten messages (worker 0's is not polled until it is done), worker
        // 0's the rest.
        let (tx, rx) = async_channel::bounded::<u32>(2);
        let remote_rx = rx.clone();
        let remote = on_worker_1(move || async move {
            let mut got = Vec::new();
            for _ in 0..10 {
                got.push(remote_rx.recv().await.expect("a message"));
                pause().await;
            }
            got
        });
        for i in 0..10 {
            tx.send(i).await.expect("worker 1 receives");
        }
        assert_eq!(remote.await.expect("remote"), (0..10).collect::<Vec<_>>());
        let local = ring_rt::spawn(async move {
            let mut got = Vec::new();
            while let Ok(i) = rx.recv().await {
                got.push(i);
            }
            got
        });
        for i in 10..40 {
            tx.send(i).await.expect("worker 0 receives");
        }
        tx.close();
        assert_eq!(local.await.expect("local"), (10..40).collect::<Vec<_>>());
    })
    .await
}

// ---- select!, JoinSet, split, timeouts, Compat, from_std ----

#[ring_rt::test]
async fn tokio_select_races_a_read_against_a_timer() -> std::io::Result<()> {
    let (a, b) = UnixStream::pair()?;
    // Nothing to read: the timer wins, and the read it drops loses no data.
    tokio::select! {
        (n, _) = b.read(vec![0; 16]) => panic!("read {n:?} from a silent stream"),
        () = ring_rt::time::sleep(Duration::from_millis(5)) => {}
    }
    a.write_all(&b"now"[..]).await.0?;
    let (n, buf) = tokio::select! {
        got = b.read(vec![0; 16]) => got,
        () = ring_rt::time::sleep(LIMIT) => panic!("the read lost to a {LIMIT:?} timer"),
    };
    assert_eq!(&buf[..n?], b"now");
    Ok(())
}

#[ring_rt::test]
async fn futures_select_races_a_read_against_a_timer() -> std::io::Result<()> {
    use futures_util::FutureExt;
    use std::future::IntoFuture;
    let (a, b) = UnixStream::pair()?;
    let writer = ring_rt::spawn(async move {
        pause().await;
        a.write_all(&b"late"[..]).await.0
    });
    let mut timer = std::pin::pin!(ring_rt::time::sleep(LIMIT).fuse());
    // A ring-rt op is IntoFuture (it can be linked or timed first): into_future, then fuse.
    let mut read = std::pin::pin!(b.read(vec![0; 16]).into_future().fuse());
    futures_util::select! {
        (n, buf) = read => assert_eq!(&buf[..n?], b"late"),
        () = timer => panic!("the read lost to a {LIMIT:?} timer"),
    }
    writer.await.expect("writer")?;
    Ok(())
}

#[ring_rt::test(workers = 2)]
async fn join_handles_replace_join_set() {
    bounded(async {
        // A Vec of JoinHandles, awaited in order (spawned on both workers).
        let handle = Handle::current();
        let tasks: Vec<JoinHandle<u64>> = (0..8u64)
            .map(|i| {
                handle
                    .spawn_on((i % 2) as usize, async move { i * i })
                    .expect("a worker")
            })
            .collect();
        let mut squares = Vec::new();
        for task in tasks {
            squares.push(task.await.expect("task"));
        }
        assert_eq!(squares, [0, 1, 4, 9, 16, 25, 36, 49]);

        // FuturesUnordered: results as they finish, like JoinSet::join_next.
        use futures_util::stream::{FuturesUnordered, StreamExt};
        let mut set: FuturesUnordered<JoinHandle<u64>> = (0..4u64)
            .map(|i| {
                ring_rt::spawn(async move {
                    ring_rt::time::sleep(Duration::from_millis(8 - 2 * i)).await;
                    i
                })
            })
            .collect();
        let mut order = Vec::new();
        while let Some(done) = set.next().await {
            order.push(done.expect("task"));
        }
        assert_eq!(order.len(), 4);
        order.sort_unstable();
        assert_eq!(order, [0, 1, 2, 3]);

        // JoinSet's abort_all: abort each handle; an aborted task says so.
        let forever = ring_rt::spawn(ring_rt::time::sleep(LIMIT));
        forever.abort();
        assert!(forever.await.expect_err("aborted").is_cancelled());
    })
    .await
}

#[ring_rt::test]
async fn a_stream_is_read_by_one_task_while_another_writes() -> std::io::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let client = TcpStream::connect(listener.local_addr()?).await?;
    let (server, _) = listener.accept().await?;
    // tokio's `into_split`: read and write take &self, so two tasks share one Rc.
    let client = Rc::new(client);
    let writer = ring_rt::spawn({
        let client = client.clone();
        async move {
            for i in 0..50u8 {
                client.write_all(vec![i; 100]).await.0?;
            }
            client.shutdown(std::net::Shutdown::Write)
        }
    });
    let reader = ring_rt::spawn({
        let client = client.clone();
        async move {
            let mut echoed = Vec::new();
            loop {
                let (n, buf) = client.read(Vec::with_capacity(4096)).await;
                if n? == 0 {
                    return std::io::Result::Ok(echoed);
                }
                echoed.extend_from_slice(&buf);
            }
        }
    });
    // The server echoes until the client's write side ends.
    loop {
        let (n, buf) = server.read(Vec::with_capacity(4096)).await;
        if n? == 0 {
            break;
        }
        server.write_all(buf).await.0?;
    }
    server.shutdown(std::net::Shutdown::Write)?;
    writer.await.expect("writer")?;
    let echoed = reader.await.expect("reader")?;
    let sent: Vec<u8> = (0..50u8).flat_map(|i| [i; 100]).collect();
    assert_eq!(echoed, sent);
    Ok(())
}

#[ring_rt::test]
async fn compat_halves_split_a_stream_for_tokio_io() -> std::io::Result<()> {
    use ring_rt::compat::Compat;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let (a, b) = UnixStream::pair()?;
    let b = Rc::new(b);
    // One adapter per direction over the same stream: tokio::io::split without a lock.
    let mut lines = Compat::from_rc(b.clone()).lines();
    let mut out = Compat::from_rc(b);
    let echo = ring_rt::spawn(async move {
        while let Some(line) = lines.next_line().await? {
            out.write_all(format!("{}\n", line.to_uppercase()).as_bytes())
                .await?;
        }
        out.shutdown().await
    });
    a.write_all(&b"one\ntwo\n"[..]).await.0?;
    a.shutdown(std::net::Shutdown::Write)?;
    let mut reply = Vec::new();
    loop {
        let (n, buf) = a.read(Vec::with_capacity(64)).await;
        if n? == 0 {
            break;
        }
        reply.extend_from_slice(&buf);
    }
    echo.await.expect("echo task")?;
    assert_eq!(reply, b"ONE\nTWO\n");
    Ok(())
}

#[ring_rt::test]
async fn a_read_with_a_timeout_keeps_late_data() -> std::io::Result<()> {
    let (a, b) = UnixStream::pair()?;
    // tokio::time::timeout(d, stream.read(&mut buf)) becomes:
    let read = ring_rt::time::timeout(Duration::from_millis(5), b.read(vec![0; 16])).await;
    assert!(read.is_err(), "a silent stream timed out");
    // Or bounded in the kernel, with the buffer handed back: `.timeout(d)` on the op.
    let (res, buf) = b
        .read(Vec::with_capacity(16))
        .timeout(Duration::from_millis(5))
        .await;
    assert_eq!(
        res.expect_err("timed out").kind(),
        std::io::ErrorKind::TimedOut
    );
    a.write_all(&b"after"[..]).await.0?;
    let (n, buf) = b.read(buf).await;
    assert_eq!(&buf[..n?], b"after");
    Ok(())
}

#[ring_rt::test]
async fn from_std_adopts_every_listener_and_stream() -> std::io::Result<()> {
    let listener = TcpListener::from_std(std::net::TcpListener::bind("127.0.0.1:0")?)?;
    let client = TcpStream::from_std(std::net::TcpStream::connect(listener.local_addr()?)?)?;
    let (server, _) = listener.accept().await?;
    client.write_all(&b"tcp"[..]).await.0?;
    let (n, buf) = server.read(vec![0; 8]).await;
    assert_eq!(&buf[..n?], b"tcp");

    let dir = std::env::temp_dir().join(format!("ring-rt-from-std-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!("{}.sock", thread_name().replace("::", "-")));
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::from_std(std::os::unix::net::UnixListener::bind(&path)?)?;
    let client = UnixStream::from_std(std::os::unix::net::UnixStream::connect(&path)?)?;
    let server = listener.accept().await?;
    client.write_all(&b"unix"[..]).await.0?;
    let (n, buf) = server.read(vec![0; 8]).await;
    assert_eq!(&buf[..n?], b"unix");
    std::fs::remove_file(&path)?;

    let a = UdpSocket::from_std(std::net::UdpSocket::bind("127.0.0.1:0")?)?;
    let b = UdpSocket::from_std(std::net::UdpSocket::bind("127.0.0.1:0")?)?;
    a.send_to(&b"udp"[..], b.local_addr()?).await.0?;
    let (got, buf) = b.recv_from(vec![0; 8]).await;
    let (n, from) = got?;
    assert_eq!((&buf[..n], from), (&b"udp"[..], a.local_addr()?));
    Ok(())
}
