//! Error paths on both backends, each a clear `io::Error` (or a clear result), never a
//! panic, a hang or lost data: a peer reset while a write is in flight, a half-close under a
//! multishot recv stream, zero-length reads and writes, an fd closed underneath the runtime,
//! and a read into a buffer longer than the kernel's u32 length.
//! (A directory opened for writing, bad paths and 4 GiB writes are in `tests/fs.rs`.)

#[macro_use]
mod support;

use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use libtest_mimic::Completion;
use ring_rt::buf::IoBuf;
use ring_rt::fs::File;
use ring_rt::net::{TcpListener, TcpStream, UdpSocket, UnixStream};
use ring_rt::time::{sleep, timeout};
use ring_rt::BackendKind;
use support::{bounded, pattern, Outcome};

const LIMIT: Duration = Duration::from_secs(20);

fn main() {
    support::run(&[
        (
            "peer_reset_mid_write_fails_promptly",
            peer_reset_mid_write_fails_promptly,
        ),
        (
            "half_close_ends_recv_stream_and_writes_continue",
            half_close_ends_recv_stream_and_writes_continue,
        ),
        (
            "zero_length_reads_and_writes_complete_at_once",
            zero_length_reads_and_writes_complete_at_once,
        ),
        (
            "fd_closed_underneath_is_ebadf",
            fd_closed_underneath_is_ebadf,
        ),
        (
            "into_owned_fd_then_runtime_drop_leaves_no_fd",
            into_owned_fd_then_runtime_drop_leaves_no_fd,
        ),
        (
            "huge_socket_buffers_are_clamped_not_rejected",
            huge_socket_buffers_are_clamped_not_rejected,
        ),
        (
            "udp_receive_ends_when_its_socket_is_shut_down",
            udp_receive_ends_when_its_socket_is_shut_down,
        ),
    ])
}

/// Shutting a UDP socket down wakes a receive waiting on it (a common way to stop a
/// receiving task): io_uring's blocking recvmsg then returns 0, and so must epoll's
/// emulation, whose non-blocking recvmsg answers EAGAIN for ever after the one edge epoll
/// reports. (Found by the runtime_schedule fuzz target.)
fn udp_receive_ends_when_its_socket_is_shut_down(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        let socket = std::rc::Rc::new(UdpSocket::bind("127.0.0.1:0")?);
        for started_before in [true, false] {
            let waiting = {
                let socket = socket.clone();
                ring_rt::spawn(async move { socket.recv(Vec::with_capacity(64)).await.0 })
            };
            if started_before {
                sleep(Duration::from_millis(10)).await;
            }
            // SAFETY: shutdown on the socket's own fd; ENOTCONN for an unconnected UDP
            // socket, which is shut down all the same.
            unsafe { libc::shutdown(socket.as_raw_fd(), libc::SHUT_RDWR) };
            let got = timeout(Duration::from_secs(2), waiting).await;
            check!(
                matches!(got, Ok(Ok(Ok(0)))),
                "a receive {} the shutdown gave {got:?}",
                if started_before {
                    "started before"
                } else {
                    "started after"
                }
            );
        }
        Ok(Completion::Completed)
    }))?
}

fn tcp_pair() -> std::io::Result<(TcpListener, std::net::SocketAddr)> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?;
    Ok((l, addr))
}

/// A 64 MiB write blocks on a peer that never reads; the peer resets. The write completes
/// promptly (within 2 s) with ECONNRESET or EPIPE, and hands its buffer back.
fn peer_reset_mid_write_fails_promptly(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        let (l, addr) = tcp_pair()?;
        let peer = socket2::Socket::from(std::net::TcpStream::connect(addr)?);
        let (s, _) = l.accept().await?;
        let data = vec![0x42u8; 64 << 20];
        let ptr = data.as_ptr();
        let writer = ring_rt::spawn(async move { s.write_all(data).await });
        // Long enough for both socket buffers to fill and the write to wait in flight.
        sleep(Duration::from_millis(100)).await;
        check!(!writer.is_finished(), "64 MiB fit in the socket buffers");
        peer.set_linger(Some(Duration::ZERO))?;
        let reset = Instant::now();
        drop(peer);
        let (res, buf) = timeout(Duration::from_secs(5), writer)
            .await
            .map_err(|_| "the write hung after the peer reset")??;
        let took = reset.elapsed();
        let err = res.err().ok_or("the write to a reset peer succeeded")?;
        check!(
            matches!(err.raw_os_error(), Some(libc::ECONNRESET | libc::EPIPE)),
            "unexpected error {err:?}"
        );
        // Promptly: well inside the 5 s a hang would take, with room for a paused VM.
        check!(took < Duration::from_secs(2), "the error took {took:?}");
        check!(
            buf.as_ptr() == ptr && buf.len() == 64 << 20,
            "buffer not handed back"
        );
        Ok(Completion::Completed)
    }))?
}

/// The peer sends and half-closes: the multishot recv stream yields every byte, then ends;
/// our direction still works both ways after, until we half-close too.
fn half_close_ends_recv_stream_and_writes_continue(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        let (l, addr) = tcp_pair()?;
        let mut peer = std::net::TcpStream::connect(addr)?;
        let (s, _) = l.accept().await?;
        let data = pattern(31, 100_000);
        let sender = {
            let data = data.clone();
            let mut peer = peer.try_clone()?;
            std::thread::spawn(move || {
                peer.write_all(&data)?;
                peer.shutdown(Shutdown::Write)
            })
        };
        let mut got = Vec::new();
        let mut stream = s.recv_stream();
        while let Some(chunk) = stream.next().await {
            got.extend_from_slice(&chunk?);
        }
        sender.join().map_err(|_| "sender panicked")??;
        check!(got == data, "got {} of {} bytes", got.len(), data.len());
        check!(
            stream.next().await.is_none(),
            "the stream went on after its end"
        );
        drop(stream);
        let (res, _) = s.write_all(b"still open".to_vec()).await;
        res?;
        s.shutdown(Shutdown::Write)?;
        let mut back = Vec::new();
        peer.set_read_timeout(Some(Duration::from_secs(5)))?;
        peer.read_to_end(&mut back)?;
        check!(
            back == b"still open",
            "the reply after half-close: {back:?}"
        );
        Ok(Completion::Completed)
    }))?
}

/// Zero-capacity reads and empty writes on TCP, Unix, UDP and files give `Ok(0)` at once.
/// (The kernel's recv(len = 0) on a stream socket waits for data and then returns 0 without
/// consuming it; a zero-capacity read must not wait on an idle connection.) Every case is
/// tried and every failure reported.
fn zero_length_reads_and_writes_complete_at_once(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let path = std::env::temp_dir().join(format!("ring-rt-zero-{}-{kind}", std::process::id()));
    std::fs::write(&path, b"data")?;
    let failures = rt.block_on(bounded(LIMIT, async {
        let (l, addr) = tcp_pair()?;
        let c = TcpStream::connect(addr).await?;
        let (_s, _) = l.accept().await?;
        let (u1, _u2) = UnixStream::pair()?;
        let f = ring_rt::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .await?;
        let mut failures: Vec<String> = Vec::new();
        macro_rules! zero {
            ($what:expr, $fut:expr) => {
                match timeout(Duration::from_secs(1), $fut).await {
                    Err(_) => failures.push(format!("{}: no result within 1 s", $what)),
                    Ok((Ok(0), buf)) if buf.bytes_init() == 0 => {}
                    Ok((res, _)) => failures.push(format!("{}: {res:?}", $what)),
                }
            };
        }
        zero!("tcp read into capacity 0", c.read(Vec::with_capacity(0)));
        zero!("unix read into capacity 0", u1.read(Vec::with_capacity(0)));
        zero!("tcp write of nothing", c.write(Vec::new()));
        zero!("unix write of nothing", u1.write(Vec::new()));
        zero!(
            "tcp write of an empty slice",
            c.write(vec![1u8; 8].slice(5..5))
        );
        zero!(
            "file read into capacity 0",
            f.read_at(Vec::with_capacity(0), 0)
        );
        zero!("file write of nothing", f.write_at(Vec::new(), 2));
        if c.write_all(Vec::new()).await.0.is_err() {
            failures.push("tcp write_all of nothing failed".into());
        }
        if f.read_exact_at(Vec::with_capacity(0), 0).await.0.is_err()
            || f.write_all_at(Vec::new(), 0).await.0.is_err()
        {
            failures.push("file read_exact_at/write_all_at of nothing failed".into());
        }
        // The same on a socket epoll takes as drained and full (review CE: after a short
        // read and a short write on a registered socket, an empty read or write waited for
        // the next event).
        let (m1, m2) = UnixStream::pair()?;
        let bound = Duration::from_millis(10);
        let _ = m1.write(vec![7u8; 8 << 20]).timeout(bound).await; // fills it
        let _ = m1.write(vec![7u8; 1 << 20]).timeout(bound).await; // waits: registered
        while m2.read(vec![0u8; 1 << 20]).timeout(bound).await.0.is_ok() {}
        sleep(Duration::from_millis(2)).await;
        let _ = m1.write(vec![7u8; 8 << 20]).timeout(bound).await; // short: full
        m2.write_all(&b"x"[..]).await.0?;
        sleep(Duration::from_millis(2)).await;
        let _ = m1.read(vec![0u8; 16]).await; // short: drained
        zero!(
            "marked unix read into capacity 0",
            m1.read(Vec::with_capacity(0))
        );
        zero!("marked unix write of nothing", m1.write(Vec::new()));
        let a = UdpSocket::bind("127.0.0.1:0")?;
        let b = UdpSocket::bind("127.0.0.1:0")?;
        let (res, _) = a.send_to(Vec::new(), b.local_addr()?).await;
        check!(res? == 0, "empty datagram send");
        let (res, _) = timeout(Duration::from_secs(1), b.recv_from(vec![0u8; 16]))
            .await
            .map_err(|_| "an empty datagram never arrived")?;
        let (n, from) = res?;
        check!(
            n == 0 && from == a.local_addr()?,
            "empty datagram: {n} from {from}"
        );
        Ok::<_, libtest_mimic::Failed>(failures)
    }));
    let contents = std::fs::read(&path);
    let _ = std::fs::remove_file(&path);
    let failures = failures??;
    check!(failures.is_empty(), "{}", failures.join("; "));
    check!(contents? == b"data", "empty writes changed the file");
    Ok(Completion::Completed)
}

/// True while `fd` is open in this process.
fn is_open(fd: i32) -> bool {
    // SAFETY: F_GETFD only reads the fd table entry; no memory is passed.
    unsafe { libc::fcntl(fd, libc::F_GETFD) != -1 }
}

/// A file and a socket whose fd was closed behind the runtime's back: every op fails with
/// EBADF, nothing panics or hangs. (Afterwards each number is filled with a /dev/null
/// duplicate, so that the owners' own close at drop closes that, not a reused number.)
fn fd_closed_underneath_is_ebadf(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(bounded(LIMIT, async {
        let file = File::from_std(std::fs::File::open("/proc/self/status")?)?;
        let (l, addr) = tcp_pair()?;
        let _peer = std::net::TcpStream::connect(addr)?;
        let (sock, _) = l.accept().await?;
        let (ffd, sfd) = (file.as_raw_fd(), sock.as_raw_fd());
        // SAFETY: closes two fds this test owns through `file` and `sock`; both numbers are
        // re-occupied below before their owners close them again.
        unsafe {
            libc::close(ffd);
            libc::close(sfd);
        }
        check!(
            !is_open(ffd) && !is_open(sfd),
            "an fd was reopened under the test"
        );
        let ebadf = |e: std::io::Error| e.raw_os_error() == Some(libc::EBADF);
        let (res, buf) = file.read_at(Vec::with_capacity(64), 0).await;
        check!(
            res.is_err_and(ebadf) && buf.is_empty(),
            "file read on a closed fd"
        );
        let err = file.metadata().await.err().ok_or("statx on a closed fd")?;
        check!(ebadf(err), "file metadata on a closed fd");
        let (res, _) = sock.read(Vec::with_capacity(64)).await;
        check!(res.is_err_and(ebadf), "socket read on a closed fd");
        let (res, _) = sock.write_all(b"x".to_vec()).await;
        check!(res.is_err_and(ebadf), "socket write on a closed fd");
        let res = timeout(Duration::from_secs(2), sock.recv_pooled()).await;
        check!(
            matches!(res, Ok(Err(ref e)) if e.raw_os_error() == Some(libc::EBADF)),
            "pooled recv on a closed fd: {res:?}"
        );
        let null = std::fs::File::open("/dev/null")?;
        for fd in [ffd, sfd] {
            // SAFETY: dup2 onto a number nobody holds open (checked above); `file` and
            // `sock` then close the duplicate when dropped.
            let got = unsafe { libc::dup2(null.as_raw_fd(), fd) };
            check!(
                got == fd,
                "dup2 onto {fd}: {}",
                std::io::Error::last_os_error()
            );
        }
        Ok(Completion::Completed)
    }))?
}

/// Taking a stream's fd out of the runtime (`into_owned_fd`) leaves the runtime whole: when
/// it is dropped, its ring, eventfd and epoll fds are closed like any runtime's.
fn into_owned_fd_then_runtime_drop_leaves_no_fd(kind: BackendKind) -> Outcome {
    let baseline = support::open_fds();
    let owned = {
        let rt = runtime!(kind);
        rt.block_on(bounded(LIMIT, async {
            let (l, addr) = tcp_pair()?;
            let c = TcpStream::connect(addr).await?;
            let (_s, _) = l.accept().await?;
            Ok::<_, libtest_mimic::Failed>(c.into_owned_fd())
        }))??
    };
    drop(owned);
    let now = support::open_fds();
    check!(
        now == baseline,
        "fds {baseline} -> {now} after the runtime was dropped"
    );
    Ok(Completion::Completed)
}

/// A read into, and a write from, a buffer of 4 GiB + 16 bytes use as much as one call
/// can (the kernel moves at most `MAX_RW_COUNT`, just under 2 GiB, per call), never fail
/// for the length and never use the length truncated to 32 bits (16). The pages are never
/// touched (a write reads the shared zero page), so this costs no memory.
fn huge_socket_buffers_are_clamped_not_rejected(kind: BackendKind) -> Outcome {
    const HUGE: usize = (1 << 32) + 16;
    let rt = runtime!(kind);
    let mut big: Vec<u8> = Vec::new();
    if let Err(e) = big.try_reserve_exact(HUGE) {
        return Ok(Completion::ignored_with(format!(
            "no 4 GiB of address space: {e}"
        )));
    }
    let zeros = vec![0u8; HUGE];
    rt.block_on(bounded(LIMIT, async {
        let (a, b) = UnixStream::pair()?;
        let data = pattern(41, 1000);
        let (res, _) = a.write_all(data.clone()).await;
        res?;
        let (read, big) = b.read(big).await;
        let read_ok = matches!(read, Ok(1000)) && big[..] == data[..];
        // The peer never reads: the write takes what the socket buffer holds.
        let (written, _) = timeout(Duration::from_secs(5), a.write(zeros))
            .await
            .map_err(|_| "a huge write to a full socket hung")?;
        let write_ok = matches!(written, Ok(n) if n > 16);
        check!(
            read_ok && write_ok,
            "read of 1000 bytes into 4 GiB + 16: {read:?}; write of 4 GiB + 16: {written:?}"
        );
        Ok(Completion::Completed)
    }))?
}
