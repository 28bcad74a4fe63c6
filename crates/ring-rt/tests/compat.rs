//! The tokio-io / futures-io adapter (`ring_rt::compat::Compat`) on both backends: round
//! trips through the traits, codecs, file cursors, errors, and drops with ops in flight.

#[macro_use]
mod support;

use std::io::{ErrorKind, IoSlice};
use std::rc::Rc;
use std::time::Duration;

use futures_util::StreamExt;
use libtest_mimic::Completion;
use ring_rt::compat::Compat;
use ring_rt::fs::{File, OpenOptions};
use ring_rt::net::{TcpListener, TcpStream, UnixStream};
use ring_rt::time::{sleep, timeout};
use ring_rt::BackendKind;
use support::{bounded, open_fds, pattern, Outcome};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::codec::{FramedRead, LinesCodec};

fn main() {
    support::run(&[
        (
            "a_write_made_by_a_destructor_at_shutdown_sends_nothing",
            a_write_made_by_a_destructor_at_shutdown_sends_nothing,
        ),
        (
            "bytes_read_ahead_stay_readable_once_the_runtime_stops",
            bytes_read_ahead_stay_readable_once_the_runtime_stops,
        ),
        (
            "bounded_and_linked_reads_are_served_from_bytes_read_ahead_too",
            bounded_and_linked_reads_are_served_from_bytes_read_ahead_too,
        ),
        (
            "a_write_after_its_runtime_dropped_sends_nothing",
            a_write_after_its_runtime_dropped_sends_nothing,
        ),
        (
            "a_write_polled_as_the_poll_budget_runs_out_goes_out",
            a_write_polled_as_the_poll_budget_runs_out_goes_out,
        ),
        (
            "a_write_behind_a_finished_write_goes_out_with_the_budget_spent",
            a_write_behind_a_finished_write_goes_out_with_the_budget_spent,
        ),
        (
            "put_back_bytes_go_to_the_read_holding_the_turn_before_the_reads_in_line",
            put_back_bytes_go_to_the_read_holding_the_turn_before_the_reads_in_line,
        ),
        ("tokio_round_trip_over_tcp", tokio_round_trip_over_tcp),
        (
            "a_large_write_with_room_goes_straight_to_the_socket",
            a_large_write_with_room_goes_straight_to_the_socket,
        ),
        (
            "writes_past_a_full_socket_buffer_keep_their_order",
            writes_past_a_full_socket_buffer_keep_their_order,
        ),
        (
            "a_vectored_write_of_more_slices_than_sendmsg_takes_succeeds",
            a_vectored_write_of_more_slices_than_sendmsg_takes_succeeds,
        ),
        (
            "tokio_lines_codec_framed_read",
            tokio_lines_codec_framed_read,
        ),
        (
            "tiny_buffers_split_reads_and_writes",
            tiny_buffers_split_reads_and_writes,
        ),
        (
            "futures_io_round_trip_over_unix",
            futures_side::futures_io_round_trip_over_unix,
        ),
        ("file_cursor_reads_and_writes", file_cursor_reads_and_writes),
        (
            "small_writes_behind_one_in_flight_share_the_next_op",
            small_writes_behind_one_in_flight_share_the_next_op,
        ),
        (
            "writes_waiting_behind_one_keep_their_offset_when_the_cursor_moves",
            writes_waiting_behind_one_keep_their_offset_when_the_cursor_moves,
        ),
        (
            "a_read_after_the_cursor_moves_reads_there",
            a_read_after_the_cursor_moves_reads_there,
        ),
        ("write_after_shutdown_fails", write_after_shutdown_fails),
        (
            "write_to_reset_peer_reports_error",
            write_to_reset_peer_reports_error,
        ),
        (
            "dropped_adapter_with_ops_in_flight",
            dropped_adapter_with_ops_in_flight,
        ),
        (
            "a_dropped_adapter_gives_its_read_ahead_back",
            a_dropped_adapter_gives_its_read_ahead_back,
        ),
        (
            "read_ahead_given_back_comes_before_what_a_receive_stream_holds",
            read_ahead_given_back_comes_before_what_a_receive_stream_holds,
        ),
        (
            "read_ahead_given_back_comes_before_what_a_read_in_flight_gets",
            read_ahead_given_back_comes_before_what_a_read_in_flight_gets,
        ),
        (
            "read_ahead_given_back_reaches_a_read_in_flight",
            read_ahead_given_back_reaches_a_read_in_flight,
        ),
        (
            "a_read_recalled_for_bytes_another_read_took_reads_on",
            a_read_recalled_for_bytes_another_read_took_reads_on,
        ),
        (
            "read_ahead_given_back_comes_before_a_dropped_chains_reads",
            read_ahead_given_back_comes_before_a_dropped_chains_reads,
        ),
        (
            "a_dropped_chains_read_served_from_the_queue_goes_back_first",
            a_dropped_chains_read_served_from_the_queue_goes_back_first,
        ),
        (
            "a_huge_read_capacity_is_out_of_memory",
            a_huge_read_capacity_is_out_of_memory,
        ),
        (
            "accepted_bytes_survive_a_panicking_waker_clone_in_flush",
            accepted_bytes_survive_a_panicking_waker_clone_in_flush,
        ),
        (
            "a_files_flush_after_a_panicking_waker_clone_writes_everything",
            a_files_flush_after_a_panicking_waker_clone_writes_everything,
        ),
        (
            "a_read_after_a_panicking_waker_clone_reads_on",
            a_read_after_a_panicking_waker_clone_reads_on,
        ),
        (
            "a_large_write_into_a_full_socket_waits_for_room_without_copying",
            a_large_write_into_a_full_socket_waits_for_room_without_copying,
        ),
        (
            "a_poll_write_that_panicked_writes_nothing",
            a_poll_write_that_panicked_writes_nothing,
        ),
    ])
}

/// Bytes the adapter read ahead but never handed out go back to the stream when it is
/// dropped: the stream's next read returns them. (They went with the adapter's buffer: 96
/// of 100 bytes were lost after a `read_exact` of 4.)
fn a_dropped_adapter_gives_its_read_ahead_back(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        let (a, b) = UnixStream::pair()?;
        let b = Rc::new(b);
        let data = pattern(5, 100);
        a.write_all(data.clone()).await.0?;
        drop(a);
        let mut four = [0u8; 4];
        Compat::from_rc(b.clone()).read_exact(&mut four).await?;
        check!(four[..] == data[..4], "the adapter read the wrong bytes");
        let mut rest = Vec::new();
        loop {
            let (n, buf) = b.read(Vec::with_capacity(256)).await;
            match n? {
                0 => break,
                n => rest.extend_from_slice(&buf[..n]),
            }
        }
        check!(
            rest == data[4..],
            "after the adapter: {} of 96 bytes",
            rest.len()
        );
        Ok(Completion::Completed)
    }))?
}

/// An adapter dropped with read-ahead while a receive stream of the same socket holds its
/// receive turn (armed, its `next` dropped by a timeout): the adapter's bytes came first,
/// so the stream gives them before what its own receive got after them. Review AH: the
/// stream went on with its receive, giving "CCCC" and then waiting for ever with "BBBBBB"
/// queued (or ending the stream with them still there).
fn read_ahead_given_back_comes_before_what_a_receive_stream_holds(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        let (a, b) = UnixStream::pair()?;
        let b = Rc::new(b);
        let mut rx = b.recv_stream();
        a.write_all(&b"AAAA"[..]).await.0?;
        let first = rx.next().await.ok_or("end of stream")??;
        check!(&first[..] == b"AAAA", "the stream's first chunk");
        drop(first);
        let mut adapter = Compat::from_rc(b.clone());
        a.write_all(&b"BBBBBBBB"[..]).await.0?;
        let mut two = [0u8; 2];
        adapter.read_exact(&mut two).await?;
        check!(&two == b"BB", "the adapter's first bytes");
        // The stream takes the turn back and arms; nobody awaits it after the timeout.
        check!(
            timeout(Duration::from_millis(20), rx.next()).await.is_err(),
            "the stream had data it should not have"
        );
        a.write_all(&b"CCCC"[..]).await.0?;
        sleep(Duration::from_millis(20)).await;
        drop(adapter); // gives "BBBBBB" back
        drop(a);
        let mut rest = Vec::new();
        while let Some(chunk) = timeout(Duration::from_secs(5), rx.next())
            .await
            .map_err(|_| "the stream waited with data queued")?
        {
            rest.extend_from_slice(&chunk?);
        }
        check!(
            rest == b"BBBBBBCCCC",
            "after the adapter the stream gave {:?}",
            String::from_utf8_lossy(&rest)
        );
        Ok(Completion::Completed)
    }))?
}

/// An adapter read ahead; a task's `read` then holds the socket's receive turn in the
/// kernel, waiting for data. The adapter is dropped (its bytes go back on the socket), then
/// the peer writes more: the read gives the adapter's bytes first, the next read the newer
/// ones. Review AM: the read in flight was not told, took the newer bytes, and the
/// put-back ones came after them ("WORLD" before "ello"), on both backends.
fn read_ahead_given_back_comes_before_what_a_read_in_flight_gets(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        let (a, b, read) = read_in_flight_behind_read_ahead().await?;
        a.write_all(&b"WORLD"[..]).await.0?;
        let first = timeout(Duration::from_secs(5), read)
            .await
            .map_err(|_| "the read in flight hung")???;
        let (n, buf) = timeout(Duration::from_secs(5), b.read(Vec::with_capacity(16)))
            .await
            .map_err(|_| "the next read hung")?;
        let second = String::from_utf8_lossy(&buf[..n?]).into_owned();
        check!(
            first == "ello" && second == "WORLD",
            "reads gave {first:?} then {second:?}"
        );
        Ok(Completion::Completed)
    }))?
}

/// As above with nothing more written: the read in flight gets the put-back bytes. Review
/// AM: it stayed in the kernel waiting for new data while they sat on the socket.
fn read_ahead_given_back_reaches_a_read_in_flight(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        let (_a, _b, read) = read_in_flight_behind_read_ahead().await?;
        let first = timeout(Duration::from_secs(5), read)
            .await
            .map_err(|_| "the read in flight waited with bytes queued")???;
        check!(first == "ello", "the read gave {first:?}");
        Ok(Completion::Completed)
    }))?
}

/// As above with a second read waiting in line when the adapter is dropped: one of the two
/// gets the put-back bytes, the other what the peer sends next; neither fails. (The read in
/// flight is cancelled to come back for the bytes; finding them taken, it goes back to the
/// kernel. A first version reported that cancel as the read's error.)
fn a_read_recalled_for_bytes_another_read_took_reads_on(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        let (a, b, adapter) = hello_read_ahead().await?;
        let reads: Vec<_> = (0..2)
            .map(|_| {
                let reader = b.clone();
                ring_rt::spawn(async move {
                    let (n, buf) = reader.read(Vec::with_capacity(16)).await;
                    n.map(|n| String::from_utf8_lossy(&buf[..n]).into_owned())
                })
            })
            .collect();
        sleep(Duration::from_millis(20)).await;
        drop(adapter);
        sleep(Duration::from_millis(20)).await;
        a.write_all(&b"ok"[..]).await.0?;
        let mut got = Vec::new();
        for read in reads {
            let res = timeout(Duration::from_secs(5), read)
                .await
                .map_err(|_| "a read hung")??;
            got.push(res.map_err(|e| format!("a read failed: {e}"))?);
        }
        got.sort();
        check!(got == ["ello", "ok"], "the reads gave {got:?}");
        Ok(Completion::Completed)
    }))?
}

/// A chain's first op reads the socket and ends (with bytes newer than an adapter's
/// read-ahead); its second op, on another socket, waits. The adapter is dropped (its bytes
/// go back in front), then the chain: the ended read's bytes go back behind them. Review
/// AN: they went back in front of everything, giving "WORLD" before "ello" (epoll, and
/// io_uring whenever a chain runs op by op).
fn read_ahead_given_back_comes_before_a_dropped_chains_reads(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        let (a, b, adapter) = hello_read_ahead().await?;
        let (_quiet, c) = UnixStream::pair()?;
        let mut chain = chain_waiting_on(&b, &c, 16)?;
        a.write_all(&b"WORLD"[..]).await.0?;
        sleep(Duration::from_millis(20)).await;
        check!(still_pending(&mut chain), "the chain ended");
        drop(adapter);
        drop(chain);
        let got = read_at_least(&b, 9).await?;
        check!(
            got == b"elloWORLD",
            "reads gave {:?}",
            String::from_utf8_lossy(&got)
        );
        Ok(Completion::Completed)
    }))?
}

/// A chain's read is served from the socket's queue (the bytes a dropped adapter gave
/// back), not from the kernel; the chain waits on another socket and is dropped: its read's
/// bytes go back at the very front, being the oldest. Review AO: with AN's fix they went
/// behind what adapters had put back: behind the rest of their own item when the read took
/// part of it ("loel"), or behind newer bytes a second adapter read ahead and gave back
/// while the chain waited ("WORLDhello"); both backends. A second adapter's read now waits
/// for the chain, which keeps its place in the socket's line until it ends, as it keeps a
/// turn (review BV), and gets the chain's bytes first once it is dropped.
fn a_dropped_chains_read_served_from_the_queue_goes_back_first(kind: BackendKind) -> Outcome {
    use std::future::Future;
    use tokio::io::AsyncReadExt;
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        for (capacity, second_adapter) in [(2, false), (16, true)] {
            let (a, b, adapter) = hello_read_ahead().await?;
            drop(adapter); // "ello" back on the socket
            let (_quiet, c) = UnixStream::pair()?;
            let mut chain = chain_waiting_on(&b, &c, capacity)?;
            sleep(Duration::from_millis(10)).await;
            check!(still_pending(&mut chain), "the chain ended");
            a.write_all(&b"WORLD"[..]).await.0?;
            if second_adapter {
                let mut second = Compat::from_rc(b.clone());
                let mut got = [0; 9];
                let mut read = std::pin::pin!(second.read_exact(&mut got));
                let noop = &mut std::task::Context::from_waker(std::task::Waker::noop());
                check!(
                    read.as_mut().poll(noop).is_pending(),
                    "the second adapter read past the chain"
                );
                sleep(Duration::from_millis(10)).await;
                drop(chain);
                timeout(Duration::from_secs(5), read)
                    .await
                    .map_err(|_| "the second adapter's read hung")??;
                check!(
                    got == *b"elloWORLD",
                    "the second adapter read {:?}",
                    String::from_utf8_lossy(&got)
                );
                continue;
            }
            drop(chain);
            let got = read_at_least(&b, 9).await?;
            check!(
                got == b"elloWORLD",
                "read capacity {capacity}: reads gave {:?}",
                String::from_utf8_lossy(&got)
            );
        }
        Ok(Completion::Completed)
    }))?
}

type Chain<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + 'a>>;

/// A chain whose first op reads `b` (into `capacity` bytes) and whose second waits on
/// `quiet`, which nothing is sent to; polled once, so it has started.
fn chain_waiting_on<'a>(
    b: &'a UnixStream,
    quiet: &'a UnixStream,
    capacity: usize,
) -> Result<Chain<'a>, &'static str> {
    let mut chain: Chain<'a> = Box::pin(async move {
        let _ = b
            .read(Vec::with_capacity(capacity))
            .link(quiet.read(Vec::with_capacity(16)))
            .await;
    });
    if !still_pending(&mut chain) {
        return Err("the chain ended");
    }
    Ok(chain)
}

/// Polls `chain` once, with a waker that does nothing: whether it is still running.
fn still_pending(chain: &mut Chain<'_>) -> bool {
    let noop = &mut std::task::Context::from_waker(std::task::Waker::noop());
    chain.as_mut().poll(noop).is_pending()
}

/// Reads `b` until at least `want` bytes came (each read bounded by 5 s).
async fn read_at_least(b: &UnixStream, want: usize) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    let mut got = Vec::new();
    while got.len() < want {
        let (n, buf) = timeout(Duration::from_secs(5), b.read(Vec::with_capacity(64)))
            .await
            .map_err(|_| "a read hung")?;
        got.extend_from_slice(&buf[..n?]);
    }
    Ok(got)
}

/// A socket pair whose second end (shared) had "hello" read ahead by an adapter, which
/// handed out the "h": "ello" goes back on the socket when the adapter is dropped.
async fn hello_read_ahead() -> std::io::Result<(UnixStream, Rc<UnixStream>, Compat<UnixStream>)> {
    use tokio::io::AsyncBufReadExt;
    let (a, b) = UnixStream::pair()?;
    let b = Rc::new(b);
    a.write_all(&b"hello"[..]).await.0?;
    let mut adapter = Compat::from_rc(b.clone()).with_capacity(64, 0);
    let ahead = adapter.fill_buf().await?;
    if ahead != b"hello" {
        return Err(std::io::Error::other(format!(
            "the adapter read {ahead:?} ahead"
        )));
    }
    std::pin::Pin::new(&mut adapter).consume(1);
    Ok((a, b, adapter))
}

/// A pair whose second end had "hello" read ahead by an adapter (one byte consumed), and a
/// task whose `read` of it waits in the kernel when the adapter is dropped (giving "ello"
/// back). Returns the ends and the task.
async fn read_in_flight_behind_read_ahead() -> std::io::Result<(
    UnixStream,
    Rc<UnixStream>,
    ring_rt::JoinHandle<std::io::Result<String>>,
)> {
    let (a, b, adapter) = hello_read_ahead().await?;
    let reader = b.clone();
    let read = ring_rt::spawn(async move {
        let (n, buf) = reader.read(Vec::with_capacity(16)).await;
        Ok(String::from_utf8_lossy(&buf[..n?]).into_owned())
    });
    // The read starts and waits in the kernel (or for readiness) with the turn.
    sleep(Duration::from_millis(20)).await;
    drop(adapter);
    sleep(Duration::from_millis(20)).await;
    Ok((a, b, read))
}

const LIMIT: Duration = Duration::from_secs(20);

/// A connected TCP pair on the current worker (the kernel completes the handshake before
/// the accept).
async fn tcp_pair() -> std::io::Result<(TcpStream, TcpStream)> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let client = TcpStream::connect(l.local_addr()?).await?;
    let (server, _) = l.accept().await?;
    Ok((client, server))
}

fn tokio_round_trip_over_tcp(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        let (client, server) = tcp_pair().await?;
        // The server echoes everything, then closes its write side.
        let echo = ring_rt::spawn(async move {
            let mut io = Compat::new(server);
            let mut all = Vec::new();
            io.read_to_end(&mut all).await?;
            io.write_all(&all).await?;
            io.shutdown().await?;
            std::io::Result::Ok(all.len())
        });
        let data = pattern(7, 1 << 20);
        let mut io = Compat::new(client);
        io.write_all(&data).await?;
        io.shutdown().await?;
        let mut back = Vec::new();
        io.read_to_end(&mut back).await?;
        check!(echo.await?? == data.len(), "server saw a different length");
        check!(
            back == data,
            "echoed bytes differ ({} of {})",
            back.len(),
            data.len()
        );
        Ok(Completion::Completed)
    }))?
}

fn tokio_lines_codec_framed_read(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        let (client, server) = tcp_pair().await?;
        let lines: Vec<String> = (0..2000)
            .map(|i| "x".repeat(i % 300) + &i.to_string())
            .collect();
        let sent = lines.clone();
        let writer = ring_rt::spawn(async move {
            let mut io = Compat::new(server);
            for line in &sent {
                io.write_all(line.as_bytes()).await?;
                io.write_all(b"\n").await?;
            }
            io.shutdown().await
        });
        let mut framed = FramedRead::new(Compat::new(client), LinesCodec::new());
        let mut got = Vec::new();
        while let Some(line) = framed.next().await {
            got.push(line?);
        }
        writer.await??;
        check!(
            got == lines,
            "got {} lines, expected {}",
            got.len(),
            lines.len()
        );
        Ok(Completion::Completed)
    }))?
}

/// Buffers of 7 and 5 bytes: every read and write is split across many ops, and vectored
/// writes are gathered up to the cap.
fn tiny_buffers_split_reads_and_writes(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        let (a, b) = UnixStream::pair()?;
        let data = pattern(3, 20_000);
        let sent = data.clone();
        let writer = ring_rt::spawn(async move {
            let mut io = Compat::new(a).with_capacity(7, 5);
            let n = io
                .write_vectored(&[IoSlice::new(b"ab"), IoSlice::new(b"cdefgh")])
                .await?;
            // Copied through the 5-byte buffer, or (epoll: any write with nothing in
            // flight) sent straight from the slices, all 8 bytes.
            if n != 5 && n != 8 {
                return Err(std::io::Error::other(format!("vectored write took {n}")));
            }
            io.write_all(&b"abcdefgh"[n..]).await?;
            io.write_all(&sent).await?;
            io.shutdown().await
        });
        let mut io = Compat::new(b).with_capacity(7, 5);
        let mut back = Vec::new();
        io.read_to_end(&mut back).await?;
        writer.await??;
        check!(
            &back[..8] == b"abcdefgh",
            "vectored prefix {:?}",
            &back[..8]
        );
        check!(back[8..] == data[..], "data differs after tiny-buffer copy");
        Ok(Completion::Completed)
    }))?
}

/// futures-io's traits, kept apart from tokio's extension traits whose methods share names.
mod futures_side {
    use futures_util::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
    use libtest_mimic::Completion;
    use ring_rt::compat::Compat;
    use ring_rt::net::UnixStream;
    use ring_rt::BackendKind;

    use super::{support, LIMIT};
    use support::{bounded, pattern, Outcome};

    pub fn futures_io_round_trip_over_unix(kind: BackendKind) -> Outcome {
        let rt = runtime!(kind);
        rt.block_on(bounded(LIMIT, async {
            let (a, b) = UnixStream::pair()?;
            let data = pattern(11, 300_000);
            let sent = data.clone();
            let writer = ring_rt::spawn(async move {
                let mut io = Compat::new(a);
                io.write_all(b"header line\n").await?;
                io.write_all(&sent).await?;
                io.close().await
            });
            let mut io = Compat::new(b);
            let mut header = Vec::new();
            io.read_until(b'\n', &mut header).await?;
            let mut rest = Vec::new();
            io.read_to_end(&mut rest).await?;
            writer.await??;
            check!(header == b"header line\n", "header {:?}", header);
            check!(
                rest == data,
                "body differs ({} of {})",
                rest.len(),
                data.len()
            );
            Ok(Completion::Completed)
        }))?
    }
}

fn temp_path(name: &str, kind: BackendKind) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "ring-rt-compat-{}-{name}-{kind}",
        std::process::id()
    ))
}

/// Small writes accepted while one write is in flight go out together in the next op:
/// `tokio::io::copy` hands over 8 KiB at a time, and a file write went to the kernel (or
/// the blocking pool) once per 8 KiB, each waiting for the one before (`tokio::io::copy`
/// over `Compat<File>` took 1.07x tokio's own `File` copy on io_uring). 1 MiB in 8 KiB
/// writes, no yield in between, then a flush: the bytes land in order at the cursor, in
/// far fewer completions than writes. A write at the end after a read ahead, and a read
/// of what was just written, see the bytes the writes accepted.
fn small_writes_behind_one_in_flight_share_the_next_op(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let counters = rt.metrics_handle();
    let path = temp_path("coalesce", kind);
    let outcome = rt.block_on(bounded(LIMIT, async {
        let data = pattern(11, 1 << 20);
        let mut opts = OpenOptions::new();
        opts.read(true).write(true).create(true).truncate(true);
        let file = Rc::new(opts.open(&path).await?);
        let mut w = Compat::from_rc(file.clone());
        let before = counters.snapshot().cqes_reaped;
        for chunk in data.chunks(8 << 10) {
            w.write_all(chunk).await?;
        }
        w.flush().await?;
        let completions = counters.snapshot().cqes_reaped - before;
        check!(
            w.position() == data.len() as u64,
            "cursor {} after the writes",
            w.position()
        );
        let on_disk = ring_rt::fs::read(&path).await?;
        check!(on_disk == data, "the file differs from the bytes written");
        check!(
            completions <= 40,
            "128 writes of 8 KiB took {completions} completions"
        );
        // Writes accepted behind one in flight, then a read at the cursor: the read sees
        // them (the adapter writes everything accepted first).
        let mut rw = Compat::from_rc(file.clone()).with_position(0);
        for _ in 0..4 {
            rw.write_all(b"abcd").await?;
        }
        let mut next = [0u8; 4];
        rw.read_exact(&mut next).await?;
        check!(
            next[..] == data[16..20],
            "read after 16 written bytes: {next:?}"
        );
        let mut head = [0u8; 16];
        Compat::from_rc(file).read_exact(&mut head).await?;
        check!(head[..] == b"abcdabcdabcdabcd"[..], "head {head:?}");
        Ok(Completion::Completed)
    }));
    let _ = std::fs::remove_file(&path);
    outcome?
}

/// Review S: bytes accepted behind a write in flight went where the cursor stood when
/// they were sent, not where it stood when they were accepted: after `with_position`
/// moved it, 4 KiB of 'b' meant for 4096 landed at 15,904 (or over the 'a's at 0).
fn writes_waiting_behind_one_keep_their_offset_when_the_cursor_moves(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let path = temp_path("cursor-moves", kind);
    let outcome = rt.block_on(bounded(LIMIT, async {
        for (moved_to, c_at) in [(20_000u64, 20_000usize), (0, 0)] {
            let mut opts = OpenOptions::new();
            opts.read(true).write(true).create(true).truncate(true);
            let mut io = Compat::new(opts.open(&path).await?);
            io.write_all(&[b'a'; 4096]).await?;
            io.write_all(&[b'b'; 4096]).await?;
            let mut io = io.with_position(moved_to);
            io.write_all(&[b'c'; 10]).await?;
            io.flush().await?;
            let mut expect = vec![0u8; 8192.max(c_at + 10)];
            expect[..4096].fill(b'a');
            expect[4096..8192].fill(b'b');
            expect[c_at..c_at + 10].fill(b'c');
            let on_disk = ring_rt::fs::read(&path).await?;
            check!(
                on_disk == expect,
                "cursor moved to {moved_to}: {} bytes, 'b' first at {:?}",
                on_disk.len(),
                on_disk.iter().position(|&x| x == b'b')
            );
        }
        Ok(Completion::Completed)
    }));
    let _ = std::fs::remove_file(&path);
    outcome?
}

/// Review T: `with_position` left what was read ahead from the old cursor (or the read in
/// flight there) to the next read: after reading 'a' of "abcdefghijklmnop", moving to 8
/// read 'b'. Both ways: bytes buffered, and a read polled once and dropped.
fn a_read_after_the_cursor_moves_reads_there(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let path = temp_path("read-moves", kind);
    std::fs::write(&path, b"abcdefghijklmnop")?;
    let outcome = rt.block_on(bounded(LIMIT, async {
        let mut one = [0u8; 1];
        let mut io = Compat::new(File::open(&path).await?);
        io.read_exact(&mut one).await?;
        let mut io = io.with_position(8);
        io.read_exact(&mut one).await?;
        check!(
            one == *b"i",
            "after a buffered read-ahead: {:?}",
            one[0] as char
        );

        let mut io = Compat::new(File::open(&path).await?);
        {
            let mut read = std::pin::pin!(io.read(&mut one));
            let _ = std::future::poll_fn(|cx| {
                std::task::Poll::Ready(std::future::Future::poll(read.as_mut(), cx).is_ready())
            })
            .await;
        }
        let mut io = io.with_position(12);
        io.read_exact(&mut one).await?;
        check!(one == *b"m", "after a read in flight: {:?}", one[0] as char);
        check!(io.position() == 13, "cursor {}", io.position());
        Ok(Completion::Completed)
    }));
    let _ = std::fs::remove_file(&path);
    outcome?
}

/// Writes, reads at the cursor, overwrites in the middle of a read-ahead: the file ends up
/// as a std cursor would leave it.
fn file_cursor_reads_and_writes(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let path = temp_path("cursor", kind);
    let outcome = rt.block_on(bounded(LIMIT, async {
        let data = pattern(5, 300_000);
        let mut opts = OpenOptions::new();
        opts.read(true).write(true).create(true).truncate(true);
        let file = Rc::new(opts.open(&path).await?);
        let mut w = Compat::from_rc(file.clone());
        w.write_all(&data).await?;
        w.flush().await?;
        check!(
            w.position() == data.len() as u64,
            "cursor {} after write",
            w.position()
        );
        let mut tail = [0u8; 1];
        check!(w.read(&mut tail).await? == 0, "read at the end was not EOF");

        // A second cursor from 0: read 10 (the adapter reads ahead), write 3, read on.
        let mut rw = Compat::from_rc(file.clone()).with_position(0);
        let mut head = [0u8; 10];
        rw.read_exact(&mut head).await?;
        rw.write_all(b"XYZ").await?;
        let mut next = [0u8; 5];
        rw.read_exact(&mut next).await?;
        check!(head[..] == data[..10], "head differs");
        check!(
            next[..] == data[13..18],
            "read after the overwrite did not resume at 13"
        );
        check!(rw.position() == 18, "cursor {} != 18", rw.position());

        let mut expect = data.clone();
        expect[10..13].copy_from_slice(b"XYZ");
        let on_disk = ring_rt::fs::read(&path).await?;
        check!(
            on_disk == expect,
            "file content differs from a std cursor's result"
        );
        let mut all = Vec::new();
        Compat::new(File::open(&path).await?)
            .read_to_end(&mut all)
            .await?;
        check!(all == expect, "read_to_end through a fresh adapter differs");
        Ok(Completion::Completed)
    }));
    let _ = std::fs::remove_file(&path);
    outcome?
}

fn write_after_shutdown_fails(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        let (client, server) = tcp_pair().await?;
        let mut io = Compat::new(client);
        io.write_all(b"bye").await?;
        io.shutdown().await?;
        let err = io.write_all(b"more").await.err();
        check!(
            err.as_ref().map(|e| e.kind()) == Some(ErrorKind::BrokenPipe),
            "write after shutdown gave {err:?}"
        );
        let mut peer = Compat::new(server);
        let mut got = Vec::new();
        peer.read_to_end(&mut got).await?;
        check!(got == b"bye", "peer read {got:?} before EOF");
        Ok(Completion::Completed)
    }))?
}

/// A write that fails after `poll_write` accepted its bytes is reported by a later
/// write or flush, never swallowed.
fn write_to_reset_peer_reports_error(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        let l = TcpListener::bind("127.0.0.1:0")?;
        let peer = socket2::Socket::from(std::net::TcpStream::connect(l.local_addr()?)?);
        let (s, _) = l.accept().await?;
        peer.set_linger(Some(Duration::ZERO))?;
        drop(peer); // RST
        sleep(Duration::from_millis(20)).await;
        let mut io = Compat::new(s);
        let chunk = vec![1u8; 65536];
        let mut result = Ok(());
        for _ in 0..20 {
            result = io.write_all(&chunk).await;
            if result.is_ok() {
                result = io.flush().await;
            }
            if result.is_err() {
                break;
            }
        }
        let err = result
            .err()
            .ok_or("writes to a reset peer kept succeeding")?;
        check!(
            matches!(
                err.kind(),
                ErrorKind::BrokenPipe | ErrorKind::ConnectionReset
            ),
            "unexpected error {err}"
        );
        Ok(Completion::Completed)
    }))?
}

/// Dropping an adapter with a read and a write in flight: no op left in flight, no fd left
/// open, the runtime keeps working.
fn dropped_adapter_with_ops_in_flight(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let baseline = open_fds();
    rt.block_on(bounded(LIMIT, async {
        // After one loop turn the backend has its own ops in flight (io_uring: the
        // wake-up eventfd's poll); only ops beyond those count.
        sleep(Duration::from_millis(1)).await;
        let ops_baseline = rt.metrics().io.ops_in_flight;
        let (client, server) = tcp_pair().await?;
        let mut io = Compat::new(client);
        let mut buf = [0u8; 16];
        // The peer never writes: the read op stays in flight inside the adapter.
        check!(
            timeout(Duration::from_millis(20), io.read(&mut buf))
                .await
                .is_err(),
            "read"
        );
        // The peer never reads: writes fill the socket buffers and one stays in flight.
        let big = vec![0u8; 64 << 20];
        let wrote = timeout(Duration::from_millis(200), io.write_all(&big)).await;
        check!(wrote.is_err(), "64 MiB fit in the socket buffers");
        let cancels = rt.metrics().io.cancels_sent;
        drop(io);
        let cancelled = rt.metrics().io.cancels_sent - cancels;
        // On io_uring both ops were in the kernel and are cancelled; epoll has nothing in
        // flight between readiness tries.
        check!(
            kind == BackendKind::Epoll || cancelled == 2,
            "dropping the adapter sent {cancelled} cancels, expected 2 (read and write)"
        );
        drop(server);
        let (mut in_flight, mut fds) = (u64::MAX, usize::MAX);
        for _ in 0..200 {
            sleep(Duration::from_millis(10)).await;
            in_flight = rt.metrics().io.ops_in_flight;
            fds = open_fds();
            if in_flight == ops_baseline && fds == baseline {
                break;
            }
        }
        check!(
            in_flight == ops_baseline,
            "{in_flight} ops in flight after the drop, {ops_baseline} before"
        );
        check!(fds == baseline, "fds {baseline} -> {fds} after the drop");
        // The runtime still works.
        let (a, b) = tcp_pair().await?;
        let (mut a, mut b) = (Compat::new(a), Compat::new(b));
        a.write_all(b"ok").await?;
        a.flush().await?;
        let mut two = [0u8; 2];
        b.read_exact(&mut two).await?;
        check!(&two == b"ok", "after-drop round trip");
        Ok(Completion::Completed)
    }))?
}

/// A read capacity too large to allocate fails the read with `OutOfMemory`, as `fs::read`
/// does: `usize::MAX` panicked (capacity overflow) and 2^46 aborted the process (found by
/// the fifth attacker review).
fn a_huge_read_capacity_is_out_of_memory(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(bounded(Duration::from_secs(20), async {
        for cap in [usize::MAX, 1 << 46] {
            let (a, b) = UnixStream::pair()?;
            a.write_all(b"hello".to_vec()).await.0?;
            let mut io = Compat::new(b).with_capacity(cap, cap);
            let mut buf = [0u8; 5];
            let res = io.read_exact(&mut buf).await;
            check!(
                res.as_ref()
                    .is_err_and(|e| e.kind() == ErrorKind::OutOfMemory),
                "a read with capacity {cap} gave {res:?}"
            );
        }
        Ok(Completion::Completed)
    }))?
}

/// A 64 KiB write on a socket with room for it: the adapter sends it from the caller's
/// bytes at once (no copy, no op left in flight), as a poll-based runtime would; it used
/// to copy the bytes into a write op that waited for the loop's next turn.
fn a_large_write_with_room_goes_straight_to_the_socket(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        let (a, b) = UnixStream::pair()?;
        let data = pattern(11, 64 * 1024);
        let mut io = Compat::new(a);
        let written = std::future::poll_fn(|cx| {
            tokio::io::AsyncWrite::poll_write(std::pin::Pin::new(&mut io), cx, &data)
        })
        .await?;
        check!(written == data.len(), "wrote {written} of {}", data.len());
        let state = format!("{io:?}");
        check!(
            state.contains("write_in_flight: false"),
            "the bytes went into an op: {state}"
        );
        let mut got = Vec::new();
        while got.len() < data.len() {
            let (n, buf) = b.read(Vec::with_capacity(data.len())).await;
            check!(n? > 0, "end of stream after {} bytes", got.len());
            got.extend_from_slice(&buf);
        }
        check!(got == data, "the peer read other bytes");
        Ok(Completion::Completed)
    }))?
}

/// Writes of every size, small and large, through a socket whose buffer the reader lets
/// fill up: the ones sent straight from the caller's bytes and the ones copied into an op
/// (once the buffer is full) arrive whole and in order.
fn writes_past_a_full_socket_buffer_keep_their_order(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        let (a, b) = UnixStream::pair()?;
        let data = pattern(13, 6 << 20);
        let sizes = [1usize, 100, 4096, 16 * 1024, 64 * 1024, 300 * 1024, 5];
        let sent = data.clone();
        let writer = ring_rt::spawn(async move {
            let mut io = Compat::new(a);
            let (mut at, mut i) = (0, 0);
            while at < sent.len() {
                let end = (at + sizes[i % sizes.len()]).min(sent.len());
                io.write_all(&sent[at..end]).await?;
                at = end;
                i += 1;
            }
            io.shutdown().await
        });
        // Let the writer fill the socket's buffer before reading anything.
        sleep(Duration::from_millis(20)).await;
        let mut got = Vec::with_capacity(data.len());
        loop {
            let (n, buf) = b.read(Vec::with_capacity(256 * 1024)).await;
            if n? == 0 {
                break;
            }
            got.extend_from_slice(&buf);
        }
        writer.await??;
        check!(
            got.len() == data.len(),
            "read {} of {} bytes",
            got.len(),
            data.len()
        );
        check!(got == data, "bytes arrived out of order");
        Ok(Completion::Completed)
    }))?
}

/// Review M: a vectored write of more slices than one `sendmsg` takes (1,024), as 8,192
/// slices of 16 bytes and as 1,500 empty slices before an 80 KiB one: the direct send
/// passed them all and failed with `EMSGSIZE`. It takes what fits, as std's
/// `write_vectored` does, and the rest follows in order.
fn a_vectored_write_of_more_slices_than_sendmsg_takes_succeeds(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        let data = pattern(17, 8192 * 16);
        let many: Vec<IoSlice<'_>> = data.chunks(16).map(IoSlice::new).collect();
        let tail = pattern(19, 80 * 1024);
        let mut empty_first: Vec<IoSlice<'_>> = (0..1500).map(|_| IoSlice::new(&[])).collect();
        empty_first.push(IoSlice::new(&tail));
        for (name, slices, want) in [("many", &many, &data), ("empty first", &empty_first, &tail)] {
            let (a, b) = UnixStream::pair()?;
            let mut io = Compat::new(a);
            let mut sent = 0;
            while sent < want.len() {
                // The slices still to send: skip what went, by bytes.
                let mut skip = sent;
                let rest: Vec<IoSlice<'_>> = slices
                    .iter()
                    .filter_map(|s| {
                        if skip >= s.len() {
                            skip -= s.len();
                            return None;
                        }
                        let part = IoSlice::new(&s[skip..]);
                        skip = 0;
                        Some(part)
                    })
                    .collect();
                let n = io.write_vectored(&rest).await;
                check!(n.is_ok(), "{name}: {n:?}");
                let n = n?;
                check!(n > 0, "{name}: a vectored write took nothing");
                sent += n;
            }
            io.shutdown().await?;
            let mut got = Vec::new();
            loop {
                let (n, buf) = b.read(Vec::with_capacity(64 * 1024)).await;
                if n? == 0 {
                    break;
                }
                got.extend_from_slice(&buf);
            }
            check!(
                &got == want,
                "{name}: the peer read other bytes ({} of {})",
                got.len(),
                want.len()
            );
        }
        Ok(Completion::Completed)
    }))?
}

fn clone_panics() {
    panic!("this waker's clone panics");
}

/// Completed when `panics` happened; else ignored: no `what` cloned the waker on this
/// backend, so the path under test was not taken.
fn completed_if_any_panicked(panics: usize, what: &str) -> Completion {
    match panics {
        0 => Completion::ignored_with(format!("no {what} cloned the waker on this backend")),
        _ => Completion::Completed,
    }
}

/// Reads `b` to its end, with a receive of up to 256 KiB at a time.
async fn read_to_end(b: UnixStream) -> std::io::Result<Vec<u8>> {
    let mut got = Vec::new();
    loop {
        let (n, buf) = b.read(Vec::with_capacity(256 << 10)).await;
        if n? == 0 {
            return Ok(got);
        }
        got.extend_from_slice(&buf);
    }
}

/// Polls `f` once with a waker whose clone panics: `None` when it panicked.
fn poll_with_a_panicking_clone<T>(f: impl FnOnce(&mut std::task::Context<'_>) -> T) -> Option<T> {
    let waker = support::waker_calling_on_clone(clone_panics);
    let mut cx = std::task::Context::from_waker(&waker);
    support::expecting_panics(|| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut cx))).ok()
    })
}

/// Accepts writes of up to `chunk` bytes from `data[at..]` until the adapter takes no
/// more (the socket's buffer is full, and the adapter's too when it copies); returns how
/// far it accepted.
async fn accept_until_full<S: ring_rt::compat::CompatIo>(
    io: &mut Compat<S>,
    data: &[u8],
    mut at: usize,
    chunk: usize,
) -> std::io::Result<usize> {
    std::future::poll_fn(|cx| loop {
        let end = data.len().min(at + chunk);
        match tokio::io::AsyncWrite::poll_write(std::pin::Pin::new(&mut *io), cx, &data[at..end]) {
            std::task::Poll::Ready(Ok(n)) if at + n < data.len() => at += n,
            std::task::Poll::Ready(Ok(n)) => return std::task::Poll::Ready(Ok(at + n)),
            std::task::Poll::Ready(Err(e)) => return std::task::Poll::Ready(Err(e)),
            std::task::Poll::Pending => return std::task::Poll::Ready(Ok(at)),
        }
    })
    .await
}

/// Review BS: bytes `poll_write` accepted are written even when a waker's clone panics
/// in the flush that starts their op (the op, holding them, was dropped by the unwind:
/// 1,000 of 10,000 bytes never arrived on io_uring), when it panics while the op waits
/// for room, and when it panics in a write that waits for room. Afterwards a flush with a good waker finishes and every byte arrives
/// once, in order.
fn accepted_bytes_survive_a_panicking_waker_clone_in_flush(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        let data = pattern(17, 4 << 20);
        let mut panics = 0;
        for reader_first in [false, true] {
            let (a, b) = UnixStream::pair()?;
            let mut io = Compat::new(a).with_capacity(1000, 1000);
            // The peer reads nothing yet: the socket's buffer fills, then the adapter's.
            let mut accepted = accept_until_full(&mut io, &data, 0, 5000).await?;
            let reader = ring_rt::spawn(read_to_end(b));
            if reader_first {
                // The write in flight ends; the flush starts the one behind it.
                sleep(Duration::from_millis(50)).await;
            }
            if poll_with_a_panicking_clone(|cx| {
                tokio::io::AsyncWrite::poll_flush(std::pin::Pin::new(&mut io), cx)
            })
            .is_none()
            {
                panics += 1;
            }
            // A write whose poll waits for room (or for the write in flight).
            let next = &data[accepted..accepted + 5000];
            match poll_with_a_panicking_clone(|cx| {
                tokio::io::AsyncWrite::poll_write(std::pin::Pin::new(&mut io), cx, next)
            }) {
                None => panics += 1,
                Some(std::task::Poll::Ready(n)) => accepted += n?,
                Some(std::task::Poll::Pending) => {}
            }
            io.flush().await?;
            io.shutdown().await?;
            drop(io);
            let got = reader.await??;
            check!(
                got.len() == accepted && got[..] == data[..accepted],
                "reader first: {reader_first}: {} of {accepted} accepted bytes arrived{}",
                got.len(),
                if got.len() == accepted {
                    ", out of order"
                } else {
                    ""
                }
            );
        }
        Ok(completed_if_any_panicked(panics, "flush"))
    }))?
}

/// A file's adapter after a waker's clone panicked in the flush that writes its accepted
/// bytes: the next flush finishes (a re-polled write panicked with "`async fn` resumed
/// after panicking") and the file holds every accepted byte.
fn a_files_flush_after_a_panicking_waker_clone_writes_everything(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let path = temp_path("clone-panic", kind);
    let outcome = rt.block_on(bounded(LIMIT, async {
        let data = pattern(19, 256 << 10);
        let mut opts = OpenOptions::new();
        opts.read(true).write(true).create(true).truncate(true);
        let file = opts.open(&path).await?;
        let mut io = Compat::new(file).with_capacity(4096, 4096);
        let mut panics = 0;
        let mut at = 0;
        while at < data.len() {
            at = accept_until_full(&mut io, &data, at, data.len()).await?;
            if at < data.len() || panics == 0 {
                // Let the write in flight end, so the flush starts the next one.
                sleep(Duration::from_millis(5)).await;
                if poll_with_a_panicking_clone(|cx| {
                    tokio::io::AsyncWrite::poll_flush(std::pin::Pin::new(&mut io), cx)
                })
                .is_none()
                {
                    panics += 1;
                }
            }
            io.flush().await?;
        }
        drop(io);
        let on_disk = ring_rt::fs::read(&path).await?;
        check!(
            on_disk == data,
            "the file holds {} of {} bytes{}",
            on_disk.len(),
            data.len(),
            if on_disk.len() == data.len() {
                ", not the ones written"
            } else {
                ""
            }
        );
        Ok(completed_if_any_panicked(panics, "flush"))
    }));
    let _ = std::fs::remove_file(&path);
    outcome?
}

/// A read through the adapter whose first poll meets a waker whose clone panics: the next
/// read goes on and returns the bytes in order (a file's read was an `async` block, which
/// panicked again with "resumed after panicking"; a stream's read keeps its turn).
fn a_read_after_a_panicking_waker_clone_reads_on(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let path = temp_path("read-clone-panic", kind);
    let outcome = rt.block_on(bounded(LIMIT, async {
        let data = pattern(23, 64 << 10);
        std::fs::write(&path, &data)?;
        let mut panics = 0;
        let mut file = Compat::new(File::open(&path).await?).with_capacity(4096, 4096);
        let (a, b) = UnixStream::pair()?;
        let mut stream = Compat::new(b).with_capacity(4096, 4096);
        let mut first = [0u8; 100];
        // A read the page cache serves at once (epoll) returns its bytes without a waker.
        let mut got = Vec::new();
        match poll_with_a_panicking_clone(|cx| {
            let mut rb = tokio::io::ReadBuf::new(&mut first);
            let polled =
                tokio::io::AsyncRead::poll_read(std::pin::Pin::new(&mut file), cx, &mut rb);
            polled.map_ok(|()| rb.filled().len())
        }) {
            None => panics += 1,
            Some(std::task::Poll::Ready(n)) => got.extend_from_slice(&first[..n?]),
            Some(std::task::Poll::Pending) => {}
        }
        file.read_to_end(&mut got).await?;
        check!(
            got == data,
            "read {} of {} file bytes after the panic{}",
            got.len(),
            data.len(),
            if got.len() == data.len() {
                ", not the ones written"
            } else {
                ""
            }
        );
        // A stream: the read waits in the kernel (or for readiness) when the clone panics.
        // Nothing to read yet: the poll is pending or panics.
        if poll_with_a_panicking_clone(|cx| {
            let mut rb = tokio::io::ReadBuf::new(&mut first);
            tokio::io::AsyncRead::poll_read(std::pin::Pin::new(&mut stream), cx, &mut rb)
        })
        .is_none()
        {
            panics += 1;
        }
        let writer = ring_rt::spawn(async move {
            let (res, _) = a.write_all(data).await;
            res
        });
        let mut got = vec![0u8; 64 << 10];
        stream.read_exact(&mut got).await?;
        writer.await??;
        check!(
            got == pattern(23, 64 << 10),
            "the stream's bytes after the panic differ"
        );
        Ok(completed_if_any_panicked(panics, "read"))
    }));
    let _ = std::fs::remove_file(&path);
    outcome?
}

/// A large write that meets a full socket buffer waits for room and sends the caller's
/// bytes then, as a poll-based runtime does, instead of copying them into an op: once
/// the adapter takes no more, nothing it accepted waits in it (a flush is ready at once)
/// and the peer can read every accepted byte. (They were copied 64 KiB at a time into an
/// op and 64 KiB more behind it: on io_uring most of a 16 MiB body was copied, 9% of
/// the server's CPU.) Then the rest goes through in order.
fn a_large_write_into_a_full_socket_waits_for_room_without_copying(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        let data = pattern(29, 8 << 20);
        let (a, b) = UnixStream::pair()?;
        let mut io = Compat::new(a);
        let accepted = accept_until_full(&mut io, &data, 0, data.len()).await?;
        check!(
            accepted < data.len(),
            "the socket took all {accepted} bytes"
        );
        let flushed = std::future::poll_fn(|cx| {
            let polled = tokio::io::AsyncWrite::poll_flush(std::pin::Pin::new(&mut io), cx);
            std::task::Poll::Ready(polled)
        })
        .await;
        check!(
            matches!(flushed, std::task::Poll::Ready(Ok(()))),
            "a flush after the adapter stopped taking bytes: {flushed:?}"
        );
        let reader = ring_rt::spawn(read_to_end(b));
        io.write_all(&data[accepted..]).await?;
        io.shutdown().await?;
        drop(io);
        let got = reader.await??;
        check!(
            got == data,
            "read {} of {} bytes{}",
            got.len(),
            data.len(),
            if got.len() == data.len() {
                ", out of order"
            } else {
                ""
            }
        );
        Ok(Completion::Completed)
    }))?
}

/// Review BT: a `poll_write` that panics (a waker whose clone panics as its op starts)
/// reported no count, so its bytes are not written: the caller may write others, or the
/// same ones again. (Keeping that op for the next flush, as the write of bytes reported
/// earlier must be kept, wrote 3,000 bytes nobody accepted into a file, and every byte of
/// a retried stream write twice on io_uring.)
fn a_poll_write_that_panicked_writes_nothing(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let path = temp_path("ghost", kind);
    let outcome = rt.block_on(bounded(LIMIT, async {
        let mut panics = 0;
        let mut opts = OpenOptions::new();
        opts.read(true).write(true).create(true).truncate(true);
        let mut file = Compat::new(opts.open(&path).await?).with_capacity(4096, 4096);
        let ghost = vec![b'G'; 3000];
        let mut accepted = 0;
        match poll_with_a_panicking_clone(|cx| {
            tokio::io::AsyncWrite::poll_write(std::pin::Pin::new(&mut file), cx, &ghost)
        }) {
            None => panics += 1,
            Some(std::task::Poll::Ready(n)) => accepted = n?,
            Some(std::task::Poll::Pending) => {}
        }
        file.write_all(b"real").await?;
        file.flush().await?;
        drop(file);
        let on_disk = std::fs::read(&path)?;
        let want: Vec<u8> = match accepted {
            0 => b"real".to_vec(),
            n => [&ghost[..n], b"real"].concat(),
        };
        check!(
            on_disk == want,
            "the file holds {} bytes, starting {:?}",
            on_disk.len(),
            String::from_utf8_lossy(&on_disk[..on_disk.len().min(8)])
        );
        // A stream: small writes (an op each on io_uring), each first polled with the
        // panicking waker and, when that panicked, written again with a good one.
        let (a, b) = UnixStream::pair()?;
        let reader = ring_rt::spawn(read_to_end(b));
        let mut io = Compat::new(a).with_capacity(1000, 1000);
        let data = pattern(31, 40_000);
        let mut at = 0;
        while at < data.len() {
            io.flush().await?;
            let next = &data[at..(at + 1000).min(data.len())];
            match poll_with_a_panicking_clone(|cx| {
                tokio::io::AsyncWrite::poll_write(std::pin::Pin::new(&mut io), cx, next)
            }) {
                None => panics += 1,
                Some(std::task::Poll::Ready(n)) => {
                    at += n?;
                    continue;
                }
                Some(std::task::Poll::Pending) => {}
            }
            at += io.write(next).await?;
        }
        io.shutdown().await?;
        drop(io);
        let got = reader.await??;
        check!(
            got == data,
            "the peer read {} bytes for {} written{}",
            got.len(),
            data.len(),
            if got.len() == data.len() {
                ", not the ones written"
            } else {
                ""
            }
        );
        Ok(completed_if_any_panicked(panics, "write"))
    }));
    let _ = std::fs::remove_file(&path);
    outcome?
}

/// A read waiting in the kernel holds the turn and another waits in line when a dropped
/// adapter gives "ello" back: the read holding the turn, which asked first, is recalled and
/// gets the first of those bytes, the read in line the rest. Review BX: the read in line,
/// woken by the put-back, took them from the queue first ("lo" then "el"; both backends,
/// older than the review's commit).
fn put_back_bytes_go_to_the_read_holding_the_turn_before_the_reads_in_line(
    kind: BackendKind,
) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        let (_a, b, adapter) = hello_read_ahead().await?;
        let read_two = |b: &Rc<UnixStream>| {
            let b = b.clone();
            ring_rt::spawn(async move {
                let (n, buf) = b.read(Vec::with_capacity(2)).await;
                n.map(|n| buf[..n].to_vec())
            })
        };
        let holder = read_two(&b);
        ring_rt::yield_now().await;
        let in_line = read_two(&b);
        ring_rt::yield_now().await;
        drop(adapter);
        let mut got = Vec::new();
        for (name, task) in [
            ("the read holding the turn", holder),
            ("the read in line", in_line),
        ] {
            let bytes = timeout(Duration::from_secs(5), task)
                .await
                .map_err(|_| format!("{name} never finished"))?
                .map_err(|e| format!("{name}'s task: {e:?}"))??;
            got.push(String::from_utf8_lossy(&bytes).into_owned());
        }
        check!(
            got == ["el", "lo"],
            "the read holding the turn got {:?}, the read in line {:?}",
            got[0],
            got[1]
        );
        Ok(Completion::Completed)
    }))?
}

/// A write polled as the poll's op budget runs out (each count of it spent before is
/// tried: the budget is an internal constant) is accepted and goes out without a flush
/// (nothing was in flight), or waits for the next poll and then does: never accepted and
/// left unstarted, which a caller awaiting the reply would wait on for ever. Ops that
/// complete at once (sleeps already due) spend the budget, one each.
fn a_write_polled_as_the_poll_budget_runs_out_goes_out(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    for spent in 0..=140 {
        let got = rt
            .block_on(async {
                let (a, b) = UnixStream::pair()?;
                let mut writer = Compat::new(a);
                for _ in 0..spent {
                    sleep(Duration::ZERO).await;
                }
                writer.write_all(b"A").await?;
                let read = b
                    .read(Vec::with_capacity(16))
                    .timeout(Duration::from_secs(2));
                let (n, buf) = read.await;
                n?;
                writer.flush().await?;
                std::io::Result::Ok(buf)
            })
            .map_err(|e| format!("after {spent} ops of the poll's budget: {e}"))?;
        check!(
            got == b"A",
            "after {spent} ops of the poll's budget: {got:?}"
        );
    }
    Ok(Completion::Completed)
}

/// The adapter's write ended while the task did other things; the next write comes with
/// the poll's budget spent: it sees that write done and starts at once, and its bytes reach
/// the peer without a flush (review CB: the ended write looked unfinished under the spent
/// budget, the bytes were queued behind it and nothing sent them, on io_uring).
fn a_write_behind_a_finished_write_goes_out_with_the_budget_spent(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let got = rt.block_on(async {
        let (a, b) = UnixStream::pair()?;
        let mut writer = Compat::new(a);
        writer.write_all(&[b'A'; 100]).await?;
        sleep(Duration::from_millis(5)).await;
        std::future::poll_fn(|cx| loop {
            let mut due = std::pin::pin!(sleep(Duration::ZERO));
            if std::future::Future::poll(due.as_mut(), cx).is_pending() {
                return std::task::Poll::Ready(());
            }
        })
        .await;
        writer.write_all(b"B").await?;
        let mut got = Vec::new();
        while got.len() < 101 {
            let read = b
                .read(Vec::with_capacity(256))
                .timeout(Duration::from_secs(2));
            let (n, buf) = read.await;
            n?;
            got.extend_from_slice(&buf);
        }
        writer.flush().await?;
        std::io::Result::Ok(got)
    })?;
    check!(got.ends_with(b"AB"), "the peer got {} bytes", got.len());
    Ok(Completion::Completed)
}

/// Review DC: a socket's adapter written after its runtime dropped sent the bytes (its
/// direct send, the way a write that the socket takes at once goes), where every op says
/// the runtime is gone; so did a write that had waited for room before the drop. Small
/// and large writes (io_uring sends small ones as an op).
fn a_write_after_its_runtime_dropped_sends_nothing(kind: BackendKind) -> Outcome {
    use std::os::fd::AsRawFd;
    use tokio::io::AsyncWrite;
    for len in [8 << 10, 128 << 10] {
        let rt = runtime!(kind);
        let (a, b) = rt.block_on(async { UnixStream::pair() })?;
        let mut io = Compat::new(a);
        let mut waited = None;
        if len > 8 << 10 {
            // Once more with a write that waited for room, the room come before the drop.
            waited = rt.block_on(async {
                let chunk = vec![1u8; len];
                for _ in 0..64 {
                    let polled = std::future::poll_fn(|cx| {
                        std::task::Poll::Ready(std::pin::Pin::new(&mut io).poll_write(cx, &chunk))
                    })
                    .await;
                    if polled.is_pending() {
                        return Some(());
                    }
                }
                None
            });
            let mut sink = vec![0u8; 1 << 20];
            // SAFETY: a live fd and buffer.
            while unsafe {
                libc::recv(
                    b.as_raw_fd(),
                    sink.as_mut_ptr().cast(),
                    sink.len(),
                    libc::MSG_DONTWAIT,
                )
            } > 0
            {}
            rt.block_on(sleep(Duration::from_millis(20)));
        }
        drop(rt);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let polled = std::pin::Pin::new(&mut io).poll_write(&mut cx, &vec![2u8; len]);
        let mut buf = vec![0u8; 1 << 20];
        // SAFETY: a live fd and buffer.
        let got = unsafe {
            libc::recv(
                b.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        check!(
            got <= 0
                && matches!(&polled, std::task::Poll::Ready(Err(e)) if e.kind() == ErrorKind::NotConnected),
            "{kind}: a {len}-byte write after the drop (waited for room before: {}) gave {polled:?}; the peer got {got} bytes",
            waited.is_some()
        );
    }
    Ok(Completion::Completed)
}

/// Review DF (2): bytes the runtime holds for a socket (here what an adapter read ahead and
/// gave back when dropped) were out of reach once the shutdown began: every read was
/// refused before the socket's queue was looked at, and `into_owned_fd` refused while the
/// queue held them. A read served from that queue needs no kernel and no loop turn: it is
/// served by a task's destructor during the shutdown and after the runtime dropped, by
/// the stream's own read and by a new adapter's. A read finding nothing queued is refused
/// and takes nothing from the kernel, and the fd can then be given up.
fn bytes_read_ahead_stay_readable_once_the_runtime_stops(kind: BackendKind) -> Outcome {
    use std::future::{Future, IntoFuture};
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};
    use tokio::io::{AsyncRead, ReadBuf};
    type Got = Rc<std::cell::RefCell<String>>;
    /// One poll of a read of `stream`, as "Ok(bytes)" or "Err(kind)".
    fn read_once(stream: &UnixStream) -> String {
        let mut read = pin!(stream.read(Vec::with_capacity(32)).into_future());
        match read.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready((Ok(n), buf)) => format!("Ok({})", String::from_utf8_lossy(&buf[..n])),
            Poll::Ready((Err(e), _)) => format!("Err({:?})", e.kind()),
            Poll::Pending => "Pending".into(),
        }
    }
    /// One poll of a new adapter's read of `stream`.
    fn adapter_read_once(stream: Rc<UnixStream>) -> String {
        let mut io = Compat::from_rc(stream);
        let mut space = [0u8; 32];
        let mut buf = ReadBuf::new(&mut space);
        let polled = std::pin::Pin::new(&mut io)
            .poll_read(&mut Context::from_waker(Waker::noop()), &mut buf);
        match polled {
            Poll::Ready(Ok(())) => format!("Ok({})", String::from_utf8_lossy(buf.filled())),
            Poll::Ready(Err(e)) => format!("Err({:?})", e.kind()),
            Poll::Pending => "Pending".into(),
        }
    }
    struct ReadsOnDrop(Option<Rc<UnixStream>>, Got);
    impl Drop for ReadsOnDrop {
        fn drop(&mut self) {
            if let Some(stream) = self.0.take() {
                *self.1.borrow_mut() = read_once(&stream);
            }
        }
    }
    for by_destructor in [false, true] {
        let rt = runtime!(kind);
        let (stream, mut peer) = world_given_back(&rt)?;
        let got: Got = Rc::default();
        if by_destructor {
            let guard = ReadsOnDrop(Some(stream.clone()), got.clone());
            drop(rt.spawn(async move {
                let _guard = guard;
                std::future::pending::<()>().await
            }));
            rt.block_on(sleep(Duration::from_millis(5)));
        }
        drop(rt);
        let first = if by_destructor {
            got.borrow().clone()
        } else {
            read_once(&stream)
        };
        check!(
            first == "Ok(world)",
            "{kind}: the first read once the runtime stopped (by a destructor: {by_destructor}) gave {first}"
        );
        // Nothing queued now: refused, taking nothing from the kernel.
        std::io::Write::write_all(&mut peer, b"later")?;
        let (next, by_adapter) = (read_once(&stream), adapter_read_once(stream.clone()));
        check!(
            next == "Err(NotConnected)" && by_adapter == "Err(NotConnected)",
            "{kind}: with nothing queued a read gave {next}, an adapter's {by_adapter}"
        );
        let stream = Rc::try_unwrap(stream).map_err(|_| "the stream is shared")?;
        let fd = stream
            .into_owned_fd()
            .map_err(|e| format!("{kind}: into_owned_fd: {}", e.error()))?;
        let mut rest = [0u8; 16];
        let n = std::io::Read::read(&mut std::os::unix::net::UnixStream::from(fd), &mut rest)?;
        check!(
            &rest[..n] == b"later",
            "{kind}: the fd given up then read {:?}",
            &rest[..n]
        );
    }
    // An adapter's read after the drop is served from the queue too.
    let rt = runtime!(kind);
    let (stream, _peer) = world_given_back(&rt)?;
    drop(rt);
    let by_adapter = adapter_read_once(stream);
    check!(
        by_adapter == "Ok(world)",
        "{kind}: an adapter's read after the drop gave {by_adapter}"
    );
    Ok(Completion::Completed)
}

/// A stream whose peer sent "helloworld", read through an adapter that took "hello" and
/// read "world" ahead, then dropped: "world" is queued on the stream.
fn world_given_back(
    rt: &ring_rt::Runtime,
) -> Result<(Rc<UnixStream>, std::os::unix::net::UnixStream), libtest_mimic::Failed> {
    let (ours, mut peer) = std::os::unix::net::UnixStream::pair()?;
    std::io::Write::write_all(&mut peer, b"helloworld")?;
    let stream = rt.block_on(async {
        let stream = Rc::new(UnixStream::from_std(ours)?);
        let mut io = Compat::from_rc(stream.clone());
        let mut hello = [0u8; 5];
        io.read_exact(&mut hello).await?;
        check!(&hello == b"hello", "the adapter read {hello:?}");
        Ok::<_, libtest_mimic::Failed>(stream)
    })?;
    Ok((stream, peer))
}

/// Review DJ: the test above for a read bounded by `.timeout` and for reads linked into a
/// chain: both were refused whole where their runtime's loop does not turn (a chain is
/// refused before it starts, and run op by op after the drop, where its ops did not say
/// they could be served).
fn bounded_and_linked_reads_are_served_from_bytes_read_ahead_too(kind: BackendKind) -> Outcome {
    use std::future::{Future, IntoFuture};
    use std::task::{Context, Poll, Waker};
    fn shown(res: std::io::Result<usize>, buf: &[u8]) -> String {
        match res {
            Ok(n) => format!("Ok({})", String::from_utf8_lossy(&buf[..n])),
            Err(e) => format!("Err({:?})", e.kind()),
        }
    }
    let rt = runtime!(kind);
    let other = match kind {
        BackendKind::Uring => ring_rt::Builder::new().backend(BackendKind::Epoll),
        BackendKind::Epoll => ring_rt::Builder::new().backend(BackendKind::Uring),
    }
    .build()
    .or_else(|_| ring_rt::Builder::new().backend(kind).build())?;
    let (stream, _peer) = world_given_back(&rt)?;
    let timed = other.block_on(
        stream
            .read(Vec::with_capacity(1))
            .timeout(Duration::from_secs(1)),
    );
    let timed = shown(timed.0, &timed.1);
    check!(
        timed == "Ok(w)",
        "{kind}: a bounded read polled in another runtime gave {timed}"
    );
    drop(rt);
    let mut chain = std::pin::pin!(stream
        .read(Vec::with_capacity(3))
        .link(stream.read(Vec::with_capacity(32)))
        .into_future());
    let linked = match chain.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(((a, abuf), (b, bbuf))) => format!("{} {}", shown(a, &abuf), shown(b, &bbuf)),
        Poll::Pending => "Pending".into(),
    };
    check!(
        linked == "Ok(orl) Ok(d)",
        "{kind}: two linked reads after the drop gave {linked}"
    );
    let mut timed = std::pin::pin!(stream
        .read(Vec::with_capacity(32))
        .timeout(Duration::from_secs(1)));
    let timed = match timed.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready((res, buf)) => shown(res, &buf),
        Poll::Pending => "Pending".into(),
    };
    check!(
        timed == "Err(NotConnected)",
        "{kind}: a bounded read after the drop with nothing queued gave {timed}"
    );
    Ok(Completion::Completed)
}

/// Review DF: a task's destructor, which the shutdown runs, writing through a socket's
/// adapter: the write sent (its direct send: every size on epoll, 64 KiB and up on
/// io_uring), where a native write and io_uring's small writes were refused.
fn a_write_made_by_a_destructor_at_shutdown_sends_nothing(kind: BackendKind) -> Outcome {
    use std::os::fd::AsRawFd;
    use tokio::io::AsyncWrite;
    type Got = Rc<std::cell::RefCell<Option<std::task::Poll<std::io::Result<usize>>>>>;
    struct WritesOnDrop {
        io: Option<Compat<UnixStream>>,
        len: usize,
        got: Got,
    }
    impl Drop for WritesOnDrop {
        fn drop(&mut self) {
            let Some(mut io) = self.io.take() else {
                return;
            };
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            let polled = std::pin::Pin::new(&mut io).poll_write(&mut cx, &vec![7u8; self.len]);
            *self.got.borrow_mut() = Some(polled);
        }
    }
    for len in [10, 100 << 10] {
        let rt = runtime!(kind);
        let (a, b) = rt.block_on(async { UnixStream::pair() })?;
        let got: Got = Rc::default();
        let guard = WritesOnDrop {
            io: Some(Compat::new(a)),
            len,
            got: got.clone(),
        };
        drop(rt.spawn(async move {
            let _guard = guard;
            std::future::pending::<()>().await
        }));
        rt.block_on(sleep(Duration::from_millis(5)));
        drop(rt);
        let mut buf = vec![0u8; 1 << 20];
        // SAFETY: a live fd and buffer.
        let sent = unsafe {
            libc::recv(
                b.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        let got = got.borrow_mut().take();
        check!(
            sent <= 0
                && matches!(&got, Some(std::task::Poll::Ready(Err(e))) if e.kind() == ErrorKind::NotConnected),
            "{kind}: a {len}-byte adapter write by a destructor at shutdown gave {got:?}; the peer got {sent} bytes"
        );
    }
    Ok(Completion::Completed)
}
