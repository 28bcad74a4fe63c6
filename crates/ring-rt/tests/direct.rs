//! Direct descriptors (`Builder::direct_descriptors`): accepted TCP streams that live in the
//! worker's ring with no fd until one is asked for. On io_uring with Linux 6.8+ they are
//! direct; on epoll, and under a `RING_FEATURES` profile without `FIXED_FD_INSTALL`, the
//! same code gets fds, and every test checks that the behaviour is the same either way.

#[macro_use]
mod support;

use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::fd::AsRawFd;
use std::time::Duration;

use libtest_mimic::Completion;
use ring_core::probe::{FeatureMask, Features};
use ring_rt::net::{TcpListener, TcpStream};
use ring_rt::{BackendKind, Runtime};
use support::Outcome;

fn main() {
    support::run(&[
        (
            "accepted_streams_echo_and_close_without_an_fd",
            accepted_streams_echo_and_close_without_an_fd,
        ),
        (
            "a_stream_gets_an_fd_only_when_asked_and_keeps_it",
            a_stream_gets_an_fd_only_when_asked_and_keeps_it,
        ),
        (
            "shutdown_of_the_write_half_reaches_the_peer",
            shutdown_of_the_write_half_reaches_the_peer,
        ),
        (
            "into_owned_fd_gives_a_working_fd_and_lets_the_slot_go",
            into_owned_fd_gives_a_working_fd_and_lets_the_slot_go,
        ),
        (
            "a_full_table_fails_an_accept_and_accepting_resumes_once_a_slot_frees",
            a_full_table_fails_an_accept_and_accepting_resumes_once_a_slot_frees,
        ),
        (
            "a_connection_a_dropped_next_took_goes_to_accept_with_its_peer",
            a_connection_a_dropped_next_took_goes_to_accept_with_its_peer,
        ),
        (
            "a_stream_outliving_its_runtime_fails_clearly_and_closes",
            a_stream_outliving_its_runtime_fails_clearly_and_closes,
        ),
        (
            "a_linked_write_and_read_on_a_direct_stream_run_in_order",
            a_linked_write_and_read_on_a_direct_stream_run_in_order,
        ),
        (
            "serve_balanced_moves_direct_streams_to_the_other_worker_without_fds",
            serve_balanced_moves_direct_streams_to_the_other_worker_without_fds,
        ),
        (
            "spawn_stream_on_moves_a_stream_and_its_handle_gives_the_output",
            spawn_stream_on_moves_a_stream_and_its_handle_gives_the_output,
        ),
        (
            "spawn_stream_on_gives_the_stream_back_when_it_cannot_move",
            spawn_stream_on_gives_the_stream_back_when_it_cannot_move,
        ),
        (
            "a_listener_dropped_outside_block_on_closes_the_connections_queued_on_it",
            a_listener_dropped_outside_block_on_closes_the_connections_queued_on_it,
        ),
        (
            "a_listener_dropped_after_its_runtime_closes_the_connections_queued_on_it",
            a_listener_dropped_after_its_runtime_closes_the_connections_queued_on_it,
        ),
        (
            "a_move_dropped_or_aborted_midway_closes_the_connection_and_frees_its_slot",
            a_move_dropped_or_aborted_midway_closes_the_connection_and_frees_its_slot,
        ),
        (
            "spawn_stream_on_after_the_runtime_is_gone_closes_the_stream",
            spawn_stream_on_after_the_runtime_is_gone_closes_the_stream,
        ),
    ])
}

const SLOTS: u32 = 64;

fn runtime_direct(kind: BackendKind, slots: u32) -> Result<Runtime, Completion> {
    support::runtime_with(
        kind,
        Runtime::builder().threads(1).direct_descriptors(slots),
    )
}

macro_rules! direct_runtime {
    ($kind:expr) => {
        direct_runtime!($kind, SLOTS)
    };
    ($kind:expr, $slots:expr) => {
        match runtime_direct($kind, $slots) {
            Ok(rt) => rt,
            Err(skip) => return Ok(skip),
        }
    };
}

/// Whether accepted streams are direct here: io_uring whose (masked) kernel has multishot
/// accept and `FIXED_FD_INSTALL`.
fn expect_direct(kind: BackendKind) -> bool {
    let Ok(probed) = Features::probe() else {
        return false;
    };
    let features = match FeatureMask::from_env() {
        Ok(Some(mask)) => probed.masked(&mask),
        _ => probed.clone(),
    };
    kind == BackendKind::Uring
        && features.has(ring_core::probe::Feature::MultishotAccept)
        && features.has_opcode(io_uring::opcode::FixedFdInstall::CODE)
        && features.has_opcode(io_uring::opcode::Shutdown::CODE)
}

/// Direct descriptors the runtime's rings hold now (opened minus closed).
fn slots_held(rt: &Runtime) -> u64 {
    let io = rt.metrics().io;
    io.direct_opened - io.direct_closed
}

/// A std client and the stream `rt` accepted for it (direct where the runtime accepts
/// so), for tests that go on after `rt` is dropped.
fn std_client_and_accepted(
    rt: &Runtime,
) -> Result<(std::net::TcpStream, TcpStream), libtest_mimic::Failed> {
    rt.block_on(support::bounded(Duration::from_secs(20), async {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let client = std::net::TcpStream::connect(listener.local_addr()?)?;
        let server = listener.incoming().next().await.ok_or("listener ended")??;
        Ok::<_, libtest_mimic::Failed>((client, server))
    }))?
}

async fn settle() {
    for _ in 0..5 {
        ring_rt::time::sleep(Duration::from_millis(1)).await;
    }
}

fn accepted_streams_echo_and_close_without_an_fd(kind: BackendKind) -> Outcome {
    let rt = direct_runtime!(kind);
    let direct = expect_direct(kind);
    let held = rt.block_on(support::bounded(Duration::from_secs(20), async {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let clients = [
            TcpStream::connect(addr).await?,
            TcpStream::connect(addr).await?,
            TcpStream::connect(addr).await?,
        ];
        let fds_before = support::open_fds();
        let mut incoming = listener.incoming();
        let mut servers = Vec::new();
        for _ in &clients {
            let stream = incoming.next().await.ok_or("listener ended")??;
            check!(
                stream.is_direct() == direct,
                "is_direct {} where {} was expected",
                stream.is_direct(),
                direct
            );
            servers.push(stream);
        }
        let fds_accepted = support::open_fds() - fds_before;
        check!(
            !direct || fds_accepted == 0,
            "direct accepts opened {fds_accepted} fds"
        );
        for (i, (client, server)) in clients.iter().zip(&servers).enumerate() {
            let msg = format!("hello {i}").into_bytes();
            client.write_all(msg.clone()).await.0?;
            let mut chunks = server.recv_stream();
            let chunk = chunks.next().await.ok_or("no chunk")??;
            check!(chunk[..] == msg[..], "server read {:?}", &chunk[..]);
            drop(chunks);
            server.write_all(chunk).await.0?;
            let (n, buf) = client.read(vec![0; 64]).await;
            check!(buf[..n?] == msg[..], "client read back {:?}", &buf[..]);
        }
        drop(servers);
        settle().await;
        for client in &clients {
            let (n, _) = client.read(vec![0; 8]).await;
            check!(n? == 0, "a dropped direct stream left its connection open");
        }
        Ok::<_, libtest_mimic::Failed>(())
    }));
    held??;
    check!(
        slots_held(&rt) == 0,
        "slots held after every stream was dropped: {}",
        slots_held(&rt)
    );
    let opened = rt.metrics().io.direct_opened;
    check!(
        (opened == 3) == direct,
        "{opened} direct descriptors opened (direct expected: {direct})"
    );
    Ok(Completion::Completed)
}

fn a_stream_gets_an_fd_only_when_asked_and_keeps_it(kind: BackendKind) -> Outcome {
    let rt = direct_runtime!(kind);
    let direct = expect_direct(kind);
    rt.block_on(support::bounded(Duration::from_secs(20), async {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let client = TcpStream::connect(listener.local_addr()?).await?;
        let fds_base = support::open_fds();
        let server = listener.incoming().next().await.ok_or("listener ended")??;
        let fds_before = support::open_fds();
        check!(
            server.peer_addr()? == client.local_addr()?,
            "peer address of another socket"
        );
        check!(
            server.local_addr()? == listener.local_addr()?,
            "local address"
        );
        let fds_after = support::open_fds();
        check!(
            fds_after - fds_before == usize::from(direct),
            "asking for addresses opened {} fds",
            fds_after - fds_before
        );
        let raw = server.as_raw_fd();
        check!(raw >= 0, "as_raw_fd gave {raw}");
        check!(server.as_raw_fd() == raw, "the fd changed between calls");
        server.set_nodelay(true)?;
        check!(server.nodelay()?, "TCP_NODELAY did not stick");
        check!(
            support::open_fds() == fds_after,
            "later calls opened more fds"
        );
        // The fd and the ops reach the same socket.
        server.write_all(&b"via ring"[..]).await.0?;
        (&std::net::TcpStream::from(std::os::fd::AsFd::as_fd(&server).try_clone_to_owned()?))
            .write_all(b" and fd")?;
        let mut got = Vec::new();
        while got.len() < 15 {
            let (n, buf) = client.read(vec![0; 64]).await;
            got.extend_from_slice(&buf[..n?]);
        }
        check!(got == b"via ring and fd", "client read {got:?}");
        drop(server);
        settle().await;
        check!(
            support::open_fds() == fds_base,
            "the stream's fd outlived it"
        );
        Ok::<_, libtest_mimic::Failed>(())
    }))??;
    check!(slots_held(&rt) == 0, "slots held: {}", slots_held(&rt));
    Ok(Completion::Completed)
}

fn shutdown_of_the_write_half_reaches_the_peer(kind: BackendKind) -> Outcome {
    let rt = direct_runtime!(kind);
    rt.block_on(support::bounded(Duration::from_secs(20), async {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let client = TcpStream::connect(listener.local_addr()?).await?;
        let server = listener.incoming().next().await.ok_or("listener ended")??;
        let fds_before = support::open_fds();
        server.write_all(&b"last"[..]).await.0?;
        server.shutdown(Shutdown::Write)?;
        check!(
            support::open_fds() == fds_before,
            "shutdown installed an fd"
        );
        let mut got = Vec::new();
        loop {
            let (n, buf) = client.read(vec![0; 64]).await;
            let n = n?;
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        check!(got == b"last", "client read {got:?} before end of stream");
        // The read half still works.
        client.write_all(&b"reply"[..]).await.0?;
        let (n, buf) = server.read(vec![0; 8]).await;
        check!(&buf[..n?] == b"reply", "server read {:?}", &buf[..]);
        Ok::<_, libtest_mimic::Failed>(())
    }))??;
    Ok(Completion::Completed)
}

fn into_owned_fd_gives_a_working_fd_and_lets_the_slot_go(kind: BackendKind) -> Outcome {
    let rt = direct_runtime!(kind);
    rt.block_on(support::bounded(Duration::from_secs(20), async {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let client = TcpStream::connect(listener.local_addr()?).await?;
        let server = listener.incoming().next().await.ok_or("listener ended")??;
        let fd = server.into_owned_fd().map_err(|e| e.error().to_string())?;
        let mut std_stream = std::net::TcpStream::from(fd);
        std_stream.write_all(b"std")?;
        let (n, buf) = client.read(vec![0; 8]).await;
        check!(&buf[..n?] == b"std", "client read {:?}", &buf[..]);
        client.write_all(&b"back"[..]).await.0?;
        std_stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut got = [0u8; 4];
        std_stream.read_exact(&mut got)?;
        check!(&got == b"back", "std read {got:?}");
        settle().await;
        Ok::<_, libtest_mimic::Failed>(())
    }))??;
    check!(slots_held(&rt) == 0, "slots held: {}", slots_held(&rt));
    Ok(Completion::Completed)
}

fn a_full_table_fails_an_accept_and_accepting_resumes_once_a_slot_frees(
    kind: BackendKind,
) -> Outcome {
    let rt = direct_runtime!(kind, 2);
    let direct = expect_direct(kind);
    rt.block_on(support::bounded(Duration::from_secs(20), async {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let mut incoming = listener.incoming();
        let mut clients = Vec::new();
        let mut servers = Vec::new();
        for _ in 0..2 {
            clients.push(TcpStream::connect(addr).await?);
            servers.push(incoming.next().await.ok_or("listener ended")??);
        }
        clients.push(TcpStream::connect(addr).await?);
        let third = incoming.next().await.ok_or("listener ended")?;
        match &third {
            Err(e) => check!(
                direct && e.raw_os_error() == Some(libc::ENFILE),
                "third accept failed: {e}"
            ),
            Ok(_) => check!(!direct, "a third stream fitted in a table of two"),
        }
        if third.is_err() {
            // The kernel took the third connection from the backlog before it found the
            // table full, and closed it.
            let (n, _) = clients[2].read(vec![0; 1]).await;
            check!(
                !matches!(n, Ok(1..)),
                "the refused connection delivered bytes"
            );
            drop(servers.pop());
            clients.push(TcpStream::connect(addr).await?);
            let fourth = ring_rt::time::timeout(Duration::from_secs(5), incoming.next())
                .await
                .map_err(|_| "accepting did not resume after a slot freed")?;
            let stream = fourth.ok_or("listener ended")??;
            check!(stream.is_direct(), "the resumed accept gave an fd");
            check!(
                stream.peer_addr()? == clients[3].local_addr()?,
                "the resumed accept gave another connection"
            );
        }
        Ok::<_, libtest_mimic::Failed>(())
    }))??;
    Ok(Completion::Completed)
}

fn a_connection_a_dropped_next_took_goes_to_accept_with_its_peer(kind: BackendKind) -> Outcome {
    let rt = direct_runtime!(kind);
    rt.block_on(support::bounded(Duration::from_secs(20), async {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        {
            let mut incoming = listener.incoming();
            // Nobody connects: the wait is dropped with its accept armed.
            let waited = ring_rt::time::timeout(Duration::from_millis(20), incoming.next()).await;
            check!(waited.is_err(), "accepted with no client");
        }
        let client = TcpStream::connect(addr).await?;
        let (server, peer) = listener.accept().await?;
        check!(peer == client.local_addr()?, "accept gave peer {peer}");
        server.write_all(&b"ok"[..]).await.0?;
        let (n, buf) = client.read(vec![0; 4]).await;
        check!(&buf[..n?] == b"ok", "client read {:?}", &buf[..]);
        Ok::<_, libtest_mimic::Failed>(())
    }))??;
    Ok(Completion::Completed)
}

fn a_stream_outliving_its_runtime_fails_clearly_and_closes(kind: BackendKind) -> Outcome {
    let rt = direct_runtime!(kind);
    let (mut client, server) = std_client_and_accepted(&rt)?;
    drop(rt);
    // No panic, no hang: whatever the answer, it is an answer.
    let _ = server.peer_addr();
    let _ = server.as_raw_fd();
    let read = futures_lite_block_on(std::future::IntoFuture::into_future(
        server.read(vec![0; 4]),
    ));
    check!(
        read.0.is_err(),
        "a read after the runtime went gave {:?}",
        read.0
    );
    drop(server);
    client.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut byte = [0u8; 1];
    let n = client.read(&mut byte)?;
    check!(
        n == 0,
        "the stream dropped after its runtime left its socket open"
    );
    Ok(Completion::Completed)
}

/// Polls `fut` to completion on this thread with a no-op waker (it must finish without
/// waiting: an op polled outside its runtime fails at once).
fn futures_lite_block_on<F: std::future::Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    for _ in 0..1000 {
        if let std::task::Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
    }
    panic!("a future polled outside its runtime never finished");
}

fn a_linked_write_and_read_on_a_direct_stream_run_in_order(kind: BackendKind) -> Outcome {
    let rt = direct_runtime!(kind);
    rt.block_on(support::bounded(Duration::from_secs(20), async {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let client = TcpStream::connect(listener.local_addr()?).await?;
        let server = listener.incoming().next().await.ok_or("listener ended")??;
        client.write_all(&b"ping"[..]).await.0?;
        let ((sent, _), (got, buf)) = server
            .write(&b"pong"[..])
            .link(server.read(vec![0; 4]))
            .await;
        check!(sent? == 4, "linked write");
        check!(&buf[..got?] == b"ping", "linked read {:?}", &buf[..]);
        let (n, buf) = client.read(vec![0; 4]).await;
        check!(&buf[..n?] == b"pong", "client read {:?}", &buf[..]);
        Ok::<_, libtest_mimic::Failed>(())
    }))??;
    Ok(Completion::Completed)
}

/// Two workers, one listener, `serve_balanced`: connections moved to worker 1 go by
/// `IORING_MSG_SEND_FD` and arrive there still direct, so serving 20 connections opens no
/// fd on the server side (only the clients' own); every byte is echoed intact.
fn serve_balanced_moves_direct_streams_to_the_other_worker_without_fds(
    kind: BackendKind,
) -> Outcome {
    const CONNS: usize = 20;
    let rt = match support::runtime_with(
        kind,
        Runtime::builder().threads(2).direct_descriptors(SLOTS),
    ) {
        Ok(rt) => rt,
        Err(skip) => return Ok(skip),
    };
    let direct = expect_direct(kind);
    let (tx, rx) = std::sync::mpsc::channel::<(String, bool)>();
    let fds_opened = rt.block_on(support::bounded(Duration::from_secs(30), async {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let handle = ring_rt::Handle::current();
        let server = ring_rt::spawn(async move {
            handle
                .serve_balanced(&listener, move |stream| {
                    let tx = tx.clone();
                    async move {
                        let name = std::thread::current().name().unwrap_or("").to_string();
                        let _ = tx.send((name, stream.is_direct()));
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
        let fds_before = support::open_fds();
        // All connect first: the accept loop takes them in one burst, each one's move still
        // on its way when the next is placed.
        let mut clients = Vec::new();
        for _ in 0..CONNS {
            clients.push(TcpStream::connect(addr).await?);
        }
        for (i, client) in clients.iter().enumerate() {
            let i = i as u8;
            client.write_all(vec![i; 100]).await.0?;
            let mut got = Vec::new();
            while got.len() < 100 {
                let (n, buf) = client.read(Vec::with_capacity(128)).await;
                match n? {
                    0 => break,
                    n => got.extend_from_slice(&buf[..n]),
                }
            }
            check!(
                got == vec![i; 100],
                "client {i} got {} bytes back",
                got.len()
            );
        }
        let fds_opened = support::open_fds() - fds_before;
        server.abort();
        drop(clients);
        Ok::<_, libtest_mimic::Failed>(fds_opened)
    }))??;
    let served: Vec<(String, bool)> = rx.try_iter().collect();
    check!(served.len() == CONNS, "{} connections served", served.len());
    let mut per_worker = std::collections::HashMap::<&str, usize>::new();
    for (name, _) in &served {
        *per_worker.entry(name.as_str()).or_default() += 1;
    }
    check!(
        per_worker.len() == 2 && per_worker.values().all(|&n| (8..=12).contains(&n)),
        "connections per worker: {per_worker:?}"
    );
    check!(
        served.iter().all(|&(_, d)| d == direct),
        "direct streams served where {direct} was expected: {served:?}"
    );
    // The clients' own fds, and on fds the servers' too.
    let expected = if direct { CONNS } else { 2 * CONNS };
    check!(
        fds_opened == expected,
        "{fds_opened} fds opened for {CONNS} connections (expected {expected})"
    );
    if direct {
        let arrived = rt.metrics().workers[1].io.direct_opened;
        check!(
            arrived >= 5,
            "only {arrived} direct descriptors reached worker 1"
        );
    }
    Ok(Completion::Completed)
}

fn two_workers(kind: BackendKind) -> Result<Runtime, Completion> {
    support::runtime_with(
        kind,
        Runtime::builder().threads(2).direct_descriptors(SLOTS),
    )
}

/// `Handle::spawn_stream_on` moves an accepted stream to worker 1 (by `MSG_SEND_FD` when
/// direct, where it stays direct; by fd otherwise) or keeps it on worker 0, and the handle
/// gives what the serving future returned; the bytes go both ways.
fn spawn_stream_on_moves_a_stream_and_its_handle_gives_the_output(kind: BackendKind) -> Outcome {
    let rt = match two_workers(kind) {
        Ok(rt) => rt,
        Err(skip) => return Ok(skip),
    };
    let direct = expect_direct(kind);
    rt.block_on(support::bounded(Duration::from_secs(20), async {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let mut incoming = listener.incoming();
        for worker in [1, 0] {
            let client = TcpStream::connect(addr).await?;
            let stream = incoming.next().await.ok_or("listener ended")??;
            let handle = ring_rt::Handle::current();
            let served = handle
                .spawn_stream_on(worker, stream, |stream| async move {
                    let name = std::thread::current().name().map(String::from);
                    let was_direct = stream.is_direct();
                    let (n, buf) = stream.read(vec![0; 16]).await;
                    let n = n?;
                    stream.write_all(buf[..n].to_vec()).await.0?;
                    std::io::Result::Ok((name, was_direct))
                })
                .await
                .map_err(|kept| kept.error().to_string())?;
            client.write_all(&b"there and back"[..]).await.0?;
            let (n, buf) = client.read(vec![0; 16]).await;
            check!(&buf[..n?] == b"there and back", "echo {:?}", &buf[..]);
            let (name, was_direct) = served.await.map_err(|e| e.to_string())???;
            let expected = if worker == 1 {
                "ring-rt-worker-1"
            } else {
                "main"
            };
            check!(name.as_deref() == Some(expected), "served on {name:?}");
            check!(was_direct == direct, "served direct: {was_direct}");
        }
        Ok::<_, libtest_mimic::Failed>(())
    }))??;
    check!(slots_held(&rt) == 0, "slots held: {}", slots_held(&rt));
    Ok(Completion::Completed)
}

/// A stream that cannot move comes back, whole: to a worker the runtime does not have
/// (`InvalidInput`), and with bytes a dropped read queued on it (`ResourceBusy`), which the
/// next read still gets. Either way no byte is lost: where nothing was queued (epoll, whose
/// dropped read never took them), the stream moves and worker 1 reads them.
fn spawn_stream_on_gives_the_stream_back_when_it_cannot_move(kind: BackendKind) -> Outcome {
    let rt = match two_workers(kind) {
        Ok(rt) => rt,
        Err(skip) => return Ok(skip),
    };
    rt.block_on(support::bounded(Duration::from_secs(20), async {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let client = TcpStream::connect(listener.local_addr()?).await?;
        let stream = listener.incoming().next().await.ok_or("listener ended")??;
        let handle = ring_rt::Handle::current();
        let kept = match handle.spawn_stream_on(7, stream, |_| async {}).await {
            Ok(_) => return Err(libtest_mimic::Failed::from("moved to worker 7 of 2")),
            Err(kept) => kept,
        };
        check!(
            kept.error().kind() == std::io::ErrorKind::InvalidInput,
            "worker 7: {}",
            kept.error()
        );
        let stream = kept.into_inner();
        {
            // A read in flight when the bytes arrive, dropped: they queue on the stream.
            let mut read = std::pin::pin!(std::future::IntoFuture::into_future(
                stream.read(Vec::with_capacity(64))
            ));
            let pending = std::future::poll_fn(|cx| {
                std::task::Poll::Ready(std::future::Future::poll(read.as_mut(), cx).is_pending())
            })
            .await;
            check!(pending, "the read finished before any data was sent");
            client.write_all(&b"queued"[..]).await.0?;
            ring_rt::time::sleep(Duration::from_millis(50)).await;
        }
        let mut stream = stream;
        for _ in 0..100 {
            let moved = handle
                .spawn_stream_on(1, stream, |stream| async move {
                    let (n, buf) = stream.read(vec![0; 16]).await;
                    std::io::Result::Ok(buf[..n?].to_vec())
                })
                .await;
            match moved {
                // Nothing was queued (epoll: the dropped read never took the bytes from the
                // kernel), so the stream moved, and they are read there.
                Ok(served) => {
                    let got = served.await.map_err(|e| e.to_string())???;
                    check!(got == b"queued", "read on worker 1: {got:?}");
                    return Ok(());
                }
                Err(kept) if kept.error().to_string().contains("queued") => {
                    stream = kept.into_inner();
                    let (n, buf) = stream.read(vec![0; 16]).await;
                    check!(&buf[..n?] == b"queued", "read {:?}", &buf[..]);
                    return Ok(());
                }
                // A dropped read still finishing: done within a turn or two.
                Err(kept) => {
                    check!(
                        kept.error().kind() == std::io::ErrorKind::ResourceBusy,
                        "{}",
                        kept.error()
                    );
                    stream = kept.into_inner();
                    ring_rt::yield_now().await;
                }
            }
        }
        Err(libtest_mimic::Failed::from(
            "the dropped read never finished",
        ))
    }))??;
    Ok(Completion::Completed)
}

/// A listener, connections a dropped `Incoming` took and queued on it (as direct
/// descriptors where they are), and their clients: made inside `block_on`, returned.
fn listener_with_queued_connections(
    rt: &Runtime,
) -> Result<(TcpListener, Vec<std::net::TcpStream>), libtest_mimic::Failed> {
    rt.block_on(support::bounded(Duration::from_secs(20), async {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let mut incoming = listener.incoming();
        let mut clients = vec![std::net::TcpStream::connect(addr)?];
        // The first connection arms the multishot accept, which takes the next four.
        let first = incoming.next().await.ok_or("listener ended")??;
        for _ in 0..4 {
            clients.push(std::net::TcpStream::connect(addr)?);
        }
        settle().await;
        drop(incoming);
        drop(first);
        settle().await;
        Ok::<_, libtest_mimic::Failed>((listener, clients))
    }))?
}

/// How many of `clients` still have their connection open (a read that neither ends nor
/// fails within 300 ms).
fn still_open(clients: &[std::net::TcpStream]) -> std::io::Result<usize> {
    let mut open = 0;
    for client in clients {
        client.set_read_timeout(Some(Duration::from_millis(300)))?;
        let mut byte = [0u8; 1];
        let read = loop {
            match (&*client).read(&mut byte) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                other => break other,
            }
        };
        if read.is_err_and(|e| {
            matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            )
        }) {
            open += 1;
        }
    }
    Ok(open)
}

/// Review AQ (1): a listener dropped outside `block_on` closed its socket, then let go of
/// the direct descriptors queued on it, whose closes waited for a next turn that did not
/// come: their clients hung (with fds they closed at once).
fn a_listener_dropped_outside_block_on_closes_the_connections_queued_on_it(
    kind: BackendKind,
) -> Outcome {
    let rt = direct_runtime!(kind);
    let (listener, clients) = listener_with_queued_connections(&rt)?;
    drop(listener);
    let open = still_open(&clients[1..])?;
    check!(open == 0, "{open} of 4 queued connections stayed open");
    rt.block_on(settle());
    check!(slots_held(&rt) == 0, "slots held: {}", slots_held(&rt));
    Ok(Completion::Completed)
}

/// Review AQ (1), after the runtime: the listener outlives it, then goes, while a stream
/// of the same worker still lives (so the ring does too).
fn a_listener_dropped_after_its_runtime_closes_the_connections_queued_on_it(
    kind: BackendKind,
) -> Outcome {
    let rt = direct_runtime!(kind);
    let (listener, clients) = listener_with_queued_connections(&rt)?;
    // A socket of the same worker that outlives the listener keeps its ring open.
    let keeps_the_ring = rt.block_on(async {
        let other = std::net::TcpListener::bind("127.0.0.1:0")?;
        TcpStream::connect(other.local_addr()?).await
    })?;
    drop(rt);
    drop(listener);
    let open = still_open(&clients[1..])?;
    check!(open == 0, "{open} of 4 queued connections stayed open");
    drop(keeps_the_ring);
    Ok(Completion::Completed)
}

/// How a move is given up in
/// [`a_move_dropped_or_aborted_midway_closes_the_connection_and_frees_its_slot`].
#[derive(Clone, Copy, Debug)]
enum GiveUp {
    /// The `spawn_stream_on` future dropped after one poll (the send pushed).
    AfterFirstPoll,
    /// Dropped after the loop ran a few turns (the send done, its result not taken).
    AfterTheSend,
    /// The handle it gave aborted at once (the claiming task not yet run).
    Abort,
}

/// Review AR (F1): a direct descriptor sent to another worker that nobody claimed (the
/// move's future dropped after the send, the claiming task aborted) stayed in that
/// worker's table for the ring's life, its client hung, and enough of them filled the
/// table (that worker's accepts failed with `ENFILE`). Each way, 12 times, with a table of
/// 8: every client sees its connection end, no slot stays held, and worker 1 still accepts.
fn a_move_dropped_or_aborted_midway_closes_the_connection_and_frees_its_slot(
    kind: BackendKind,
) -> Outcome {
    let rt = match support::runtime_with(kind, Runtime::builder().threads(2).direct_descriptors(8))
    {
        Ok(rt) => rt,
        Err(skip) => return Ok(skip),
    };
    let rt_ref = &rt;
    rt.block_on(support::bounded(Duration::from_secs(30), async {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let handle = ring_rt::Handle::current();
        let mut incoming = listener.incoming();
        for give_up in [GiveUp::AfterFirstPoll, GiveUp::AfterTheSend, GiveUp::Abort] {
            for _ in 0..12 {
                let client = std::net::TcpStream::connect(addr)?;
                let stream = incoming.next().await.ok_or("listener ended")??;
                let serve = |stream: TcpStream| async move { stream.read(vec![0; 8]).await.0 };
                // Boxed, so that dropping it drops the future (a `pin!` would keep it
                // to the end of the block).
                let mut moving = Box::pin(handle.spawn_stream_on(1, stream, serve));
                let polled = std::future::poll_fn(|cx| {
                    std::task::Poll::Ready(std::future::Future::poll(moving.as_mut(), cx))
                })
                .await;
                match (give_up, polled) {
                    // Moved already (by fd: nothing to wait for): given up by its handle.
                    (_, std::task::Poll::Ready(moved)) => {
                        moved.map_err(|kept| kept.error().to_string())?.abort();
                    }
                    (GiveUp::Abort, std::task::Poll::Pending) => {
                        let moved = moving.as_mut().await;
                        moved.map_err(|kept| kept.error().to_string())?.abort();
                    }
                    (GiveUp::AfterTheSend, std::task::Poll::Pending) => settle().await,
                    (GiveUp::AfterFirstPoll, std::task::Poll::Pending) => {}
                }
                drop(moving);
                client.set_read_timeout(Some(Duration::from_secs(5)))?;
                let mut byte = [0u8; 1];
                let ended = ring_rt::spawn_blocking(move || (&client).read(&mut byte)).await;
                let reset = |e: &std::io::Error| e.kind() == std::io::ErrorKind::ConnectionReset;
                check!(
                    matches!(&ended, Ok(Ok(0))) || matches!(&ended, Ok(Err(e)) if reset(e)),
                    "{give_up:?}: the client's connection did not end: {ended:?}"
                );
            }
        }
        support::wait_for(Duration::from_secs(5), || slots_held(rt_ref) == 0).await?;
        // Worker 1's table has room: it accepts a direct stream of its own.
        let other = std::net::TcpListener::bind("127.0.0.1:0")?;
        let other_addr = other.local_addr()?;
        let accepted = handle.spawn_local_on(1, move || async move {
            let listener = TcpListener::from_std(other)?;
            let stream = listener
                .incoming()
                .next()
                .await
                .ok_or_else(|| std::io::Error::other("listener ended"))??;
            std::io::Result::Ok(stream.is_direct())
        })?;
        let _client = std::net::TcpStream::connect(other_addr)?;
        let was_direct = accepted.await.map_err(|e| e.to_string())??;
        check!(
            was_direct == expect_direct(kind),
            "worker 1's accept: direct {was_direct}"
        );
        Ok::<_, libtest_mimic::Failed>(())
    }))??;
    check!(slots_held(&rt) == 0, "slots held: {}", slots_held(&rt));
    Ok(Completion::Completed)
}

/// Review AS (1): a stream outliving its runtime, given to `spawn_stream_on` for its own
/// worker, went into that stopped worker's task slab: the handle never finished and the
/// stream (and through it the worker's ring) was never dropped, its client hanging. Now
/// the stopped worker refuses it: `Cancelled`, and the connection ends.
fn spawn_stream_on_after_the_runtime_is_gone_closes_the_stream(kind: BackendKind) -> Outcome {
    let rt = match two_workers(kind) {
        Ok(rt) => rt,
        Err(skip) => return Ok(skip),
    };
    let handle = rt.handle();
    let (client, server) = std_client_and_accepted(&rt)?;
    drop(rt);
    let moving = handle.spawn_stream_on(0, server, |stream| async move { drop(stream) });
    let moved = futures_lite_block_on(moving);
    if let Ok(served) = moved {
        let out = futures_lite_block_on(served);
        check!(
            matches!(out, Err(ring_rt::JoinError::Cancelled)),
            "the handle gave {out:?}"
        );
    }
    client.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut byte = [0u8; 1];
    let read = (&client).read(&mut byte);
    check!(
        matches!(read, Ok(0))
            || read
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "the client's connection did not end: {read:?}"
    );
    Ok(Completion::Completed)
}
