//! Scale: 10,000 echo connections open at once, every byte verified, on both backends.
//!
//! The server runs in this process on the backend under test; the 10,000 clients run in a
//! child process (this binary again), so that each process needs ~10,000 fds rather than one
//! needing 20,000. Client sockets bind to 127.0.0.(1..=200) before connecting, so repeated
//! runs never run out of ephemeral ports (each source address has its own port range).

#[macro_use]
mod support;

use std::cell::Cell;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::process::{Command, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant};

use libtest_mimic::{Arguments, Completion, Trial};
use ring_rt::net::tcp::ListenOptions;
use ring_rt::net::{TcpListener, TcpStream};
use ring_rt::time::sleep;
use ring_rt::{BackendKind, Runtime};
use support::{bounded, open_fds, pattern, Outcome};

const CONNS: usize = 10_000;
/// Round trips per connection, each of a different size (64 B .. 4 KiB).
const ROUNDS: usize = 3;
const LIMIT: Duration = Duration::from_secs(240);
const CHILD: &str = "child_echo_clients";
const ADDR_ENV: &str = "RING_RT_SCALE_ADDR";
const BACKEND_ENV: &str = "RING_RT_SCALE_BACKEND";

fn main() {
    let mut args = Arguments::from_args();
    args.test_threads.get_or_insert(1);
    let mut trials: Vec<Trial> = [BackendKind::Uring, BackendKind::Epoll]
        .into_iter()
        .map(|kind| {
            Trial::ignorable_test(
                format!("echo_10000_concurrent_connections::{kind}"),
                move || echo_10000_concurrent_connections(kind),
            )
        })
        .collect();
    trials.push(Trial::ignorable_test(CHILD, child_echo_clients).with_ignored_flag(true));
    libtest_mimic::run(&args, trials).exit()
}

/// Raises the soft fd limit to the hard one; `Err(reason)` if that is below `need`.
fn raise_fd_limit(need: u64) -> Result<u64, String> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid pointer to a live rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 {
        return Err(format!("getrlimit: {}", std::io::Error::last_os_error()));
    }
    if rl.rlim_max < need {
        return Err(format!(
            "needs {need} fds per process, hard RLIMIT_NOFILE is {} (raise `ulimit -Hn`)",
            rl.rlim_max
        ));
    }
    rl.rlim_cur = rl.rlim_max;
    // SAFETY: a valid pointer to a live rlimit; raising the soft limit up to the hard one
    // needs no privilege.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &rl) } != 0 {
        return Err(format!("setrlimit: {}", std::io::Error::last_os_error()));
    }
    Ok(rl.rlim_max)
}

/// Echo server state: connections accepted, connections finished, most open at once.
#[derive(Default)]
struct Counts {
    accepted: Cell<usize>,
    closed: Cell<usize>,
    open_max: Cell<usize>,
}

fn echo_10000_concurrent_connections(kind: BackendKind) -> Outcome {
    if let Err(reason) = raise_fd_limit(CONNS as u64 + 500) {
        return Ok(Completion::ignored_with(reason));
    }
    let rt = runtime!(kind, Runtime::builder().threads(1).entries(1024));
    let rt = &rt;
    rt.block_on(bounded(LIMIT, async {
        let opts = ListenOptions {
            backlog: 4096,
            ..ListenOptions::default()
        };
        let l = TcpListener::bind_with("127.0.0.1:0", opts)?;
        let addr = l.local_addr()?;
        let baseline = open_fds();
        let counts = Rc::new(Counts::default());
        ring_rt::spawn(serve(l, counts.clone()));
        let start = Instant::now();
        let mut child = Command::new(std::env::current_exe()?)
            .args([CHILD, "--exact", "--ignored", "--test-threads=1"])
            .env(ADDR_ENV, addr.to_string())
            .env(BACKEND_ENV, kind.name())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        // The child's connects return once the kernel holds each connection, accepted or
        // not: it starts its round trips only when the server has accepted all of them, so
        // "open at once" is about the runtime, not about who ran first on a busy machine.
        let mut go = child.stdin.take();
        while child.try_wait()?.is_none() {
            if go.is_some() && counts.accepted.get() == CONNS {
                use std::io::Write;
                go.take()
                    .map(|mut stdin| stdin.write_all(b"go\n"))
                    .transpose()?;
            }
            sleep(Duration::from_millis(20)).await;
        }
        let out = child.wait_with_output()?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        check!(
            out.status.success() && stdout.contains("1 passed"),
            "client process failed ({}):\n{stdout}\n{stderr}",
            out.status
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while counts.closed.get() < CONNS && Instant::now() < deadline {
            sleep(Duration::from_millis(10)).await;
        }
        let (accepted, closed, open_max) = (
            counts.accepted.get(),
            counts.closed.get(),
            counts.open_max.get(),
        );
        check!(accepted == CONNS, "accepted {accepted} of {CONNS}");
        check!(closed == CONNS, "{closed} of {CONNS} connections finished");
        check!(
            open_max == CONNS,
            "at most {open_max} connections were open at once"
        );
        sleep(Duration::from_millis(50)).await;
        check!(
            open_fds() == baseline,
            "server fds {baseline} -> {}",
            open_fds()
        );
        check!(
            rt.metrics().recv_buffers_in_use == 0,
            "pooled buffers still out"
        );
        eprint!("{stderr}");
        eprintln!(
            "{kind}: {CONNS} connections open at once, {ROUNDS} verified round trips each, \
             {:?} in all; server {}",
            start.elapsed(),
            rt.metrics().io
        );
        Ok(Completion::Completed)
    }))?
}

/// Accepts forever, echoing each connection until its peer closes.
async fn serve(l: TcpListener, counts: Rc<Counts>) {
    let mut incoming = l.incoming();
    while let Some(res) = incoming.next().await {
        let Ok(s) = res else { continue };
        counts.accepted.set(counts.accepted.get() + 1);
        let open = counts.accepted.get() - counts.closed.get();
        counts.open_max.set(counts.open_max.get().max(open));
        let counts = counts.clone();
        ring_rt::spawn(async move {
            let mut rx = s.recv_stream();
            while let Some(Ok(buf)) = rx.next().await {
                if s.write_all(buf).await.0.is_err() {
                    break;
                }
            }
            counts.closed.set(counts.closed.get() + 1);
        });
    }
}

/// The client side, in the child: connect all 10,000 first (so all are open at once),
/// then run every connection's round trips concurrently on a runtime of the same backend.
fn child_echo_clients() -> Outcome {
    let (Ok(addr), Ok(kind)) = (std::env::var(ADDR_ENV), std::env::var(BACKEND_ENV)) else {
        return Ok(Completion::ignored_with(
            "runs only as the child of the scale test",
        ));
    };
    let addr: SocketAddr = addr.parse()?;
    let kind = BackendKind::parse(&kind).ok_or("bad backend")?;
    raise_fd_limit(CONNS as u64 + 500)?;
    let start = Instant::now();
    let streams = connect_all(addr)?;
    let connected_in = start.elapsed();
    // Wait for the server to have accepted every connection (see the parent).
    let mut go = String::new();
    std::io::stdin().read_line(&mut go)?;
    check!(go.trim() == "go", "no go from the server (got {go:?})");
    let rt = runtime!(kind, Runtime::builder().threads(1).entries(1024));
    let failures = rt.block_on(bounded(LIMIT, async {
        let tasks: Vec<_> = streams
            .into_iter()
            .enumerate()
            .map(|(i, s)| ring_rt::spawn(round_trips(i, s)))
            .collect();
        let mut failures = Vec::new();
        for (i, t) in tasks.into_iter().enumerate() {
            if let Err(e) = t.await.map_err(std::io::Error::from).and_then(|r| r) {
                failures.push(format!("connection {i}: {e}"));
            }
        }
        failures
    }))?;
    check!(
        failures.is_empty(),
        "{} of {CONNS} connections failed, first: {}",
        failures.len(),
        failures[0]
    );
    eprintln!(
        "clients: {CONNS} connected in {connected_in:?} from 200 source addresses, \
         echoed in {:?}",
        start.elapsed() - connected_in
    );
    Ok(Completion::Completed)
}

/// Connects `CONNS` blocking sockets from 4 threads, client `i` bound to 127.0.0.(1 + i % 200).
fn connect_all(addr: SocketAddr) -> Result<Vec<std::net::TcpStream>, String> {
    const THREADS: usize = 4;
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            std::thread::spawn(move || {
                (t..CONNS)
                    .step_by(THREADS)
                    .map(|i| connect_from(i, addr).map(|s| (i, s)))
                    .collect::<std::io::Result<Vec<_>>>()
            })
        })
        .collect();
    let mut all = Vec::with_capacity(CONNS);
    for h in handles {
        let part = h.join().map_err(|_| "connect thread panicked")?;
        all.extend(part.map_err(|e| format!("connect: {e}"))?);
    }
    all.sort_by_key(|(i, _)| *i);
    Ok(all.into_iter().map(|(_, s)| s).collect())
}

fn connect_from(i: usize, addr: SocketAddr) -> std::io::Result<std::net::TcpStream> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    let src = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 1 + (i % 200) as u8), 0);
    s.bind(&src.into())?;
    s.connect_timeout(&addr.into(), Duration::from_secs(10))?;
    Ok(s.into())
}

/// `ROUNDS` round trips of different sizes on connection `i`, every byte checked.
async fn round_trips(i: usize, s: std::net::TcpStream) -> std::io::Result<()> {
    let s = TcpStream::from_std(s)?;
    for round in 0..ROUNDS {
        let len = 64 + (i * 37 + round * 1031) % 4000;
        let data = pattern((i * ROUNDS + round) as u64, len);
        let (res, data) = s.write_all(data).await;
        res?;
        let mut got = Vec::with_capacity(len);
        while got.len() < len {
            let (res, buf) = s.read(Vec::with_capacity(len - got.len())).await;
            let n = res?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            got.extend_from_slice(&buf[..n]);
        }
        if got != data {
            return Err(std::io::Error::other(format!(
                "round {round}: echo differs"
            )));
        }
    }
    Ok(())
}
