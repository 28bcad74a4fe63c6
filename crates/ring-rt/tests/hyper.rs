//! The hyper example's server (examples/hyper.rs) on both backends, driven by a real HTTP
//! client: curl. Without curl those tests are reported ignored (apt-get install -y curl).
//! Also `HyperTimer`, hyper's timer on ring-rt: firing order, reset, drop, its header-read
//! timeout against a stalled client, and its fallback outside any runtime.

#[macro_use]
mod support;

/// The example itself, so the test exercises the server that ships.
#[allow(dead_code)]
#[path = "../../../examples/hyper.rs"]
mod example;

use std::cell::RefCell;
use std::future::{Future, IntoFuture};
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::process::Command;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hyper::rt::Timer;
use libtest_mimic::{Completion, Failed};
use ring_rt::compat::HyperTimer;
use ring_rt::net::TcpListener;
use ring_rt::BackendKind;
use support::{pattern, Outcome};

fn main() {
    support::run(&[
        ("root_status_and_headers", root_status_and_headers),
        ("echo_post_1mib_byte_for_byte", echo_post_1mib_byte_for_byte),
        (
            "big_16mib_length_and_checksum",
            big_16mib_length_and_checksum,
        ),
        (
            "keep_alive_two_urls_one_connection",
            keep_alive_two_urls_one_connection,
        ),
        (
            "partial_request_line_closed_after_header_timeout",
            partial_request_line_closed_after_header_timeout,
        ),
        (
            "hyper_timer_fires_in_deadline_order",
            hyper_timer_fires_in_deadline_order,
        ),
        (
            "hyper_timer_reset_moves_deadline_in_place",
            hyper_timer_reset_moves_deadline_in_place,
        ),
        (
            "hyper_sleep_reset_sooner_elsewhere_fires_then",
            hyper_sleep_reset_sooner_elsewhere_fires_then,
        ),
        (
            "hyper_sleep_dropped_elsewhere_wakes_nobody",
            hyper_sleep_dropped_elsewhere_wakes_nobody,
        ),
        (
            "hyper_sleep_moves_to_the_runtime_polling_it",
            hyper_sleep_moves_to_the_runtime_polling_it,
        ),
        (
            "a_sleep_moving_back_and_forth_keeps_one_entry_per_worker",
            a_sleep_moving_back_and_forth_keeps_one_entry_per_worker,
        ),
        (
            "a_waker_panicking_in_drop_loses_no_wake",
            a_waker_panicking_in_drop_loses_no_wake,
        ),
        (
            "a_worker_that_does_not_turn_holds_one_entry_of_a_sleep",
            a_worker_that_does_not_turn_holds_one_entry_of_a_sleep,
        ),
        (
            "a_sleep_dropped_on_its_workers_thread_leaves_no_entry",
            a_sleep_dropped_on_its_workers_thread_leaves_no_entry,
        ),
        (
            "the_helper_thread_survives_a_payload_panicking_in_drop",
            the_helper_thread_survives_a_payload_panicking_in_drop,
        ),
        (
            "a_timer_wake_run_outside_its_worker_still_fires",
            a_timer_wake_run_outside_its_worker_still_fires,
        ),
        (
            "a_sleep_polled_while_its_runtime_drops_still_fires",
            a_sleep_polled_while_its_runtime_drops_still_fires,
        ),
        (
            "pending_hyper_sleeps_arm_timers_not_tasks",
            pending_hyper_sleeps_arm_timers_not_tasks,
        ),
        (
            "hyper_sleep_polled_outside_runtime_fires",
            hyper_sleep_polled_outside_runtime_fires,
        ),
    ])
}

/// What the server thread reports once it is listening (or why it is not).
enum Started {
    Listening(SocketAddr),
    Skip(Completion),
    Failed(String),
}

/// The example's `serve` on a runtime of one backend, in its own thread; stopped on drop.
struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// The example's default header-read timeout.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

impl Server {
    fn start(kind: BackendKind) -> Result<Server, Outcome> {
        Server::start_with(kind, HEADER_TIMEOUT)
    }

    fn start_with(kind: BackendKind, header_timeout: Duration) -> Result<Server, Outcome> {
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || serve_until(kind, header_timeout, &tx, &stopping));
        let addr = match rx.recv() {
            Ok(Started::Listening(addr)) => addr,
            Ok(Started::Skip(skip)) => return Err(Ok(skip)),
            Ok(Started::Failed(e)) => return Err(Err(e.into())),
            Err(_) => return Err(Err("the server thread died before listening".into())),
        };
        Ok(Server {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Runs the server until `stop` is set; dropping the runtime then drops every connection.
fn serve_until(
    kind: BackendKind,
    header_timeout: Duration,
    started: &mpsc::Sender<Started>,
    stop: &AtomicBool,
) {
    let rt = match support::runtime(kind) {
        Ok(rt) => rt,
        Err(skip) => return drop(started.send(Started::Skip(skip))),
    };
    rt.block_on(async {
        let listener = match TcpListener::bind("127.0.0.1:0") {
            Ok(l) => l,
            Err(e) => return drop(started.send(Started::Failed(format!("bind: {e}")))),
        };
        let addr = listener
            .local_addr()
            .expect("a bound listener has an address");
        ring_rt::spawn(example::serve(listener, header_timeout));
        let _ = started.send(Started::Listening(addr));
        while !stop.load(Ordering::Acquire) {
            ring_rt::time::sleep(Duration::from_millis(10)).await;
        }
    });
}

/// Starts the server, or returns the test's outcome (ignored: no curl or no backend).
macro_rules! server {
    ($kind:expr) => {{
        if let Some(skip) = missing_curl() {
            return Ok(skip);
        }
        match Server::start($kind) {
            Ok(server) => server,
            Err(outcome) => return outcome,
        }
    }};
}

fn missing_curl() -> Option<Completion> {
    match Command::new("curl").arg("--version").output() {
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(Completion::ignored_with(format!(
            "curl --version failed: {}",
            out.status
        ))),
        Err(e) => Some(Completion::ignored_with(format!(
            "curl not runnable ({e}): apt-get install -y curl"
        ))),
    }
}

/// Runs curl (silent, errors shown, bounded) and returns its stdout.
fn curl(args: &[&str]) -> Result<Vec<u8>, Failed> {
    let out = Command::new("curl")
        .args(["--silent", "--show-error", "--max-time", "60"])
        .args(args)
        .output()?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(format!("curl {args:?}: {}: {stderr}", out.status).into());
    }
    Ok(out.stdout)
}

/// FNV-1a, 64 bit: a checksum that notices reordered as well as changed bytes.
fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn root_status_and_headers(kind: BackendKind) -> Outcome {
    let server = server!(kind);
    let out = String::from_utf8(curl(&["--include", &server.url("/")])?)?;
    let (head, body) = out
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no end of headers in {out:?}"))?;
    let mut lines = head.lines();
    check!(
        lines.next() == Some("HTTP/1.1 200 OK"),
        "status line in {head:?}"
    );
    let headers: Vec<String> = lines.map(str::to_ascii_lowercase).collect();
    for want in ["content-type: text/plain", "content-length: 19"] {
        check!(
            headers.iter().any(|h| h == want),
            "no {want:?} in {headers:?}"
        );
    }
    check!(body == "hello from ring-rt\n", "body {body:?}");
    let code = curl(&[
        "--output",
        "/dev/null",
        "--write-out",
        "%{http_code}",
        &server.url("/nope"),
    ])?;
    check!(
        code == b"404",
        "/nope gave {:?}",
        String::from_utf8_lossy(&code)
    );
    Ok(Completion::Completed)
}

fn echo_post_1mib_byte_for_byte(kind: BackendKind) -> Outcome {
    let server = server!(kind);
    let data = pattern(42, 1 << 20);
    let path = std::env::temp_dir().join(format!(
        "ring-rt-hyper-echo-{}-{kind}.bin",
        std::process::id()
    ));
    std::fs::write(&path, &data)?;
    let body_arg = format!("@{}", path.display());
    let out = curl(&[
        "--data-binary",
        &body_arg,
        "--header",
        "Content-Type: application/octet-stream",
        &server.url("/echo"),
    ]);
    let _ = std::fs::remove_file(&path);
    let out = out?;
    check!(
        out.len() == data.len(),
        "echoed {} of {} bytes",
        out.len(),
        data.len()
    );
    let first_diff = out.iter().zip(&data).position(|(a, b)| a != b);
    check!(first_diff.is_none(), "echo differs at byte {first_diff:?}");
    Ok(Completion::Completed)
}

fn big_16mib_length_and_checksum(kind: BackendKind) -> Outcome {
    const LEN: u64 = 16 << 20;
    let server = server!(kind);
    let out = curl(&[&server.url(&format!("/big?n={LEN}"))])?;
    check!(
        out.len() as u64 == LEN,
        "downloaded {} of {LEN} bytes",
        out.len()
    );
    let expected = fnv1a((0..LEN).map(ring_demo::service::big_byte));
    check!(fnv1a(out.iter().copied()) == expected, "checksum mismatch");
    Ok(Completion::Completed)
}

/// Two URLs in one curl run: the second request reuses the first one's connection.
fn keep_alive_two_urls_one_connection(kind: BackendKind) -> Outcome {
    let server = server!(kind);
    let out = curl(&[
        "--output",
        "/dev/null",
        "--output",
        "/dev/null",
        "--write-out",
        "%{num_connects} %{http_code}\\n",
        &server.url("/"),
        &server.url("/big?n=100000"),
    ])?;
    let out = String::from_utf8(out)?;
    let lines: Vec<&str> = out.lines().collect();
    check!(
        lines == ["1 200", "0 200"],
        "connects and codes per URL: {lines:?}"
    );
    Ok(Completion::Completed)
}

/// A client that sends half a request line and stalls: hyper's header-read timeout, on
/// `HyperTimer`, closes the connection (possibly after a 408) well before the read bound.
fn partial_request_line_closed_after_header_timeout(kind: BackendKind) -> Outcome {
    const TIMEOUT: Duration = Duration::from_millis(200);
    let server = match Server::start_with(kind, TIMEOUT) {
        Ok(server) => server,
        Err(outcome) => return outcome,
    };
    let start = Instant::now();
    let mut client = std::net::TcpStream::connect(server.addr)?;
    client.set_read_timeout(Some(Duration::from_secs(10)))?;
    client.write_all(b"GET / HT")?;
    let mut reply = Vec::new();
    let closed = match client.read_to_end(&mut reply) {
        Ok(_) => "end of stream",
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            return Err(format!("connection still open after {:?}", start.elapsed()).into())
        }
        Err(_) => "reset",
    };
    let elapsed = start.elapsed();
    // The deadline is set after the server accepts, so it cannot pass before TIMEOUT.
    check!(
        elapsed >= TIMEOUT,
        "closed ({closed}) after {elapsed:?}, before the {TIMEOUT:?} timeout"
    );
    check!(
        reply.is_empty() || reply.starts_with(b"HTTP/1.1 408"),
        "unexpected reply {:?}",
        String::from_utf8_lossy(&reply)
    );
    Ok(Completion::Completed)
}

/// Three sleeps created out of order complete in deadline order, none early.
fn hyper_timer_fires_in_deadline_order(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    // `apart` between deadlines, so a slow first poll (a VM under emulation) cannot reorder
    // them. A sleep already due at its first poll fires in poll order, which is right but
    // not what this tests: a pause can cause it, and that round runs again, further apart.
    for apart in [100, 1_000].map(Duration::from_millis) {
        let (order, registered, settled) = rt.block_on(hyper_sleeps_in_order(&rt, apart));
        check!(
            order.iter().all(|&(_, on_time)| on_time),
            "a sleep fired before its deadline: {order:?}"
        );
        if !registered {
            continue;
        }
        check!(
            order == [(1, true), (2, true), (3, true)],
            "(deadline in steps, on time) in firing order: {order:?}"
        );
        check!(settled, "tasks left after firing");
        return Ok(Completion::Completed);
    }
    Err("a sleep was due at its first poll in every round".into())
}

/// Fires three hyper sleeps `apart` from each other, created out of order: the order they
/// fired in, whether each was pending at its first poll, and whether their tasks ended.
async fn hyper_sleeps_in_order(
    rt: &ring_rt::Runtime,
    apart: Duration,
) -> (Vec<(u32, bool)>, bool, bool) {
    let timer = HyperTimer::new();
    let start = Instant::now();
    let fired = Rc::new(RefCell::new(Vec::new()));
    let registered = Rc::new(std::cell::Cell::new(true));
    let waiters: Vec<_> = [3u32, 1, 2]
        .into_iter()
        .map(|steps| {
            let deadline = start + apart * steps;
            let mut sleep = timer.sleep_until(deadline);
            let (fired, registered) = (fired.clone(), registered.clone());
            ring_rt::spawn(async move {
                let pending = support::pending_after_a_poll(sleep.as_mut()).await;
                if !pending {
                    registered.set(false);
                }
                sleep.await;
                fired.borrow_mut().push((steps, Instant::now() >= deadline));
            })
        })
        .collect();
    for waiter in waiters {
        waiter.await.expect("a sleep waiter completes");
    }
    // A sleep whose own poll found it due ends its timer task at that task's next turn.
    let settled = support::wait_for(Duration::from_secs(5), || rt.metrics().tasks_alive == 0);
    (fired.take(), registered.get(), settled.await.is_ok())
}

/// `Timer::reset` moves a pending sleep sooner or later and re-arms a fired one, keeping
/// at most one timer per sleep; a later deadline does not wake the sleep's task early.
fn hyper_timer_reset_moves_deadline_in_place(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    // Each step polls a sleep before a deadline `step` ahead. A paused VM can let it pass
    // first (50 ms was not always enough): that round proves nothing and runs again with
    // steps 10 times as long. A sleep ready before its deadline fails at once.
    for step in [50, 500, 5_000].map(Duration::from_millis) {
        let limit = 20 * step + Duration::from_secs(10);
        if rt.block_on(support::bounded(limit, reset_rounds(&rt, step)))?? == Round::Done {
            return Ok(Completion::Completed);
        }
    }
    Err("every round's deadline passed before its poll".into())
}

#[derive(PartialEq)]
enum Round {
    Done,
    Paused,
}

/// Ends a paused round: its sleep and its timer go before the next round counts timers.
fn paused(
    rt: &ring_rt::Runtime,
    base: u64,
    sleep: Pin<Box<dyn hyper::rt::Sleep>>,
) -> Result<Round, Failed> {
    drop(sleep);
    timers_are(rt, base, "after a paused round's sleep was dropped")?;
    Ok(Round::Paused)
}

/// Fails unless the runtime (polled on its own worker) holds `expected` timers.
fn timers_are(rt: &ring_rt::Runtime, expected: u64, when: &str) -> Result<(), Failed> {
    let timers = rt.metrics().timers;
    check!(
        timers == expected,
        "{timers} timers {when} (expected {expected})"
    );
    Ok(())
}

async fn reset_rounds(rt: &ring_rt::Runtime, step: Duration) -> Result<Round, Failed> {
    let timer = HyperTimer::new();
    // Once pending, the caller's bound is a timer too: counted from here.
    ring_rt::yield_now().await;
    let base = rt.metrics().timers;
    let mut sleep = timer.sleep(Duration::from_secs(60));
    check!(poll_once(&mut sleep).is_pending(), "a 60 s sleep was ready");
    timers_are(rt, base + 1, "after a pending poll")?;
    let start = Instant::now();
    timer.reset(&mut sleep, start + step);
    if !support::pending_before(&poll_once(&mut sleep), start + step, "a reset sleep")? {
        return paused(rt, base, sleep);
    }
    timers_are(rt, base + 1, "after a reset sooner")?;
    (&mut sleep).await;
    check!(start.elapsed() >= step, "fired early");
    timers_are(rt, base, "after firing")?;
    let rearmed = Instant::now() + step;
    timer.reset(&mut sleep, rearmed);
    if !support::pending_before(
        &poll_once(&mut sleep),
        rearmed,
        "a sleep reset after firing",
    )? {
        return paused(rt, base, sleep);
    }
    sleep.await;
    check!(Instant::now() >= rearmed, "re-armed sleep fired early");
    timers_are(rt, base, "after the re-armed sleep fired")?;

    // Later (hyper's per-request case): the old entry fires first and re-arms, waking
    // nobody until the new deadline.
    let deadline = Instant::now() + step;
    let mut sleep = timer.sleep(step);
    let wakes = Arc::new(CountWakes::default());
    let waker = Waker::from(wakes.clone());
    let polled = sleep.as_mut().poll(&mut Context::from_waker(&waker));
    if !support::pending_before(&polled, deadline, "a new sleep")? {
        return paused(rt, base, sleep);
    }
    let later = Instant::now() + 3 * step;
    timer.reset(&mut sleep, later);
    ring_rt::time::sleep_until(deadline + step).await;
    if Instant::now() >= later {
        return paused(rt, base, sleep);
    }
    let woken = wakes.0.load(Ordering::SeqCst);
    check!(woken == 0, "woken {woken} times before the later deadline");
    timers_are(
        rt,
        base + 1,
        "after the old deadline of a sleep reset later",
    )?;
    sleep.await;
    check!(Instant::now() >= later, "fired at the old deadline");
    timers_are(rt, base, "after the sleep reset later fired")?;
    Ok(Round::Done)
}

/// A sleep moved sooner from another thread (hyper's sleeps are `Send`) fires at the new
/// deadline once its task polls it again, and leaves no timer behind.
fn hyper_sleep_reset_sooner_elsewhere_fires_then(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(async {
        let timer = HyperTimer::new();
        let base = rt.metrics().timers;
        let mut sleep = timer.sleep(Duration::from_secs(60));
        let wakes = Arc::new(CountWakes::default());
        let waker = Waker::from(wakes.clone());
        let polled = sleep.as_mut().poll(&mut Context::from_waker(&waker));
        check!(polled.is_pending(), "a 60 s sleep was ready");
        let soon = Instant::now() + Duration::from_millis(20);
        std::thread::scope(|s| s.spawn(|| timer.reset(&mut sleep, soon)).join())
            .map_err(|_| "reset on another thread panicked")?;
        let woken = wakes.0.load(Ordering::SeqCst);
        check!(
            woken == 1,
            "a reset sooner from elsewhere woke the task {woken} times"
        );
        let fired = ring_rt::time::timeout(Duration::from_secs(10), &mut sleep).await;
        // `timeout` polls the sleep before its own timer, so a sleep nobody fires still
        // completes at the 10 s bound: only an early finish shows a timer fired it.
        let late = Instant::now().saturating_duration_since(soon);
        check!(
            fired.is_ok() && late < Duration::from_secs(5),
            "the sleep moved sooner fired {late:?} late"
        );
        check!(Instant::now() >= soon, "fired before its new deadline");
        timers_are(&rt, base, "after it fired")?;
        Ok(Completion::Completed)
    })
}

/// A pending sleep dropped on another thread: its entry stays on the worker until the
/// deadline, then fires into nothing (the old waker is not woken) and is gone.
fn hyper_sleep_dropped_elsewhere_wakes_nobody(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    rt.block_on(async {
        let timer = HyperTimer::new();
        let base = rt.metrics().timers;
        let deadline = Instant::now() + Duration::from_millis(20);
        let mut sleep = timer.sleep_until(deadline);
        let wakes = Arc::new(CountWakes::default());
        let waker = Waker::from(wakes.clone());
        let polled = sleep.as_mut().poll(&mut Context::from_waker(&waker));
        if !support::pending_before(&polled, deadline, "a 20 ms sleep")? {
            return Ok(Completion::Completed); // paused past it: nothing to test
        }
        std::thread::spawn(move || drop(sleep))
            .join()
            .map_err(|_| "drop on another thread panicked")?;
        timers_are(&rt, base + 1, "after a drop elsewhere (its entry waits)")?;
        let gone = support::wait_for(Duration::from_secs(5), || rt.metrics().timers == base);
        check!(
            gone.await.is_ok(),
            "the stale entry did not go after its deadline"
        );
        let woken = wakes.0.load(Ordering::SeqCst);
        check!(
            woken == 0,
            "a dropped sleep woke its old task {woken} times"
        );
        Ok(Completion::Completed)
    })
}

/// A sleep first polled in one runtime and then awaited in another fires there, with the
/// first still alive (not running) or already dropped.
fn hyper_sleep_moves_to_the_runtime_polling_it(kind: BackendKind) -> Outcome {
    for drop_first in [false, true] {
        let first = runtime!(kind);
        let second = runtime!(kind);
        let timer = HyperTimer::new();
        let deadline = Instant::now() + Duration::from_millis(50);
        let mut sleep = timer.sleep_until(deadline);
        let polled = first.block_on(async { poll_once(&mut sleep) });
        if !support::pending_before(&polled, deadline, "a 50 ms sleep")? {
            continue; // paused past it: this round proves nothing
        }
        if drop_first {
            drop(first);
        }
        let fired = second.block_on(ring_rt::time::timeout(Duration::from_secs(10), &mut sleep));
        // `timeout` polls the sleep before its own timer, so a sleep nobody fires still
        // completes at the 10 s bound: only an early finish shows a timer fired it.
        let late = Instant::now().saturating_duration_since(deadline);
        check!(
            fired.is_ok() && late < Duration::from_secs(5),
            "a sleep moved to a second runtime fired {late:?} late (first dropped: {drop_first})"
        );
        check!(Instant::now() >= deadline, "fired early");
        drop(sleep);
        check!(
            second.metrics().timers == 0,
            "the second runtime kept a timer"
        );
    }
    Ok(Completion::Completed)
}

/// A sleep polled round and round ten runtimes (more workers than a sleep could keep a
/// short list of), and between them on a plain thread, keeps at most one entry in each
/// worker's timers; dropped on a worker, it leaves none there (one left on another worker
/// waits for its deadline).
fn a_sleep_moving_back_and_forth_keeps_one_entry_per_worker(kind: BackendKind) -> Outcome {
    const ROUNDS: usize = 30;
    let mut rts = Vec::new();
    for _ in 0..10 {
        rts.push(runtime!(kind));
    }
    let timer = HyperTimer::new();
    let mut sleep = timer.sleep(Duration::from_secs(30));
    for round in 0..ROUNDS {
        for rt in &rts {
            check!(
                rt.block_on(async { poll_once(&mut sleep) }).is_pending(),
                "a 30 s sleep was ready"
            );
        }
        let _ = poll_once(&mut sleep); // on this thread: the helper thread's
        let timers: Vec<u64> = rts.iter().map(|rt| rt.metrics().timers).collect();
        check!(
            timers.iter().all(|&t| t <= 1),
            "timers per runtime after {} rounds: {timers:?}",
            round + 1
        );
    }
    rts[0].block_on(async move {
        let _ = poll_once(&mut sleep);
        drop(sleep);
    });
    timers_are(&rts[0], 0, "after the sleep was dropped on that worker")?;
    Ok(Completion::Completed)
}

/// A sleep armed on a runtime that does not turn (its `block_on` returned), then on a second
/// one that fires it early and re-arms it: the idle runtime keeps one entry of it, not one
/// per round (the second runtime forgot the idle one's entry before).
fn a_worker_that_does_not_turn_holds_one_entry_of_a_sleep(kind: BackendKind) -> Outcome {
    const ROUNDS: usize = 50;
    let a = runtime!(kind);
    let b = runtime!(kind);
    let timer = HyperTimer::new();
    let mut sleep = timer.sleep(Duration::from_secs(60));
    for _ in 0..ROUNDS {
        let now = Instant::now();
        timer.reset(&mut sleep, now + Duration::from_millis(3));
        let _ = a.block_on(async { poll_once(&mut sleep) }); // armed on a
        let _ = b.block_on(async {
            timer.reset(&mut sleep, now + Duration::from_millis(4));
            poll_once(&mut sleep) // armed on b, which does not turn again this round
        });
        std::thread::sleep(Duration::from_millis(6));
        timer.reset(&mut sleep, Instant::now() + Duration::from_secs(60));
        // a turns: its old entry fires and finds b's armed entry due (not yet fired).
        a.block_on(ring_rt::time::sleep(Duration::from_millis(2)));
    }
    let on_b = b.metrics().timers;
    check!(
        on_b <= 1,
        "{ROUNDS} rounds left {on_b} entries on the idle runtime"
    );
    Ok(Completion::Completed)
}

/// A sleep dropped on its worker's thread while that worker is not the current one (after
/// its `block_on` returned, or inside it while another runtime drops the task holding the
/// sleep) still takes its entry out: none waits out its deadline (30 years here).
fn a_sleep_dropped_on_its_workers_thread_leaves_no_entry(kind: BackendKind) -> Outcome {
    const SLEEPS: usize = 20;
    let rt = runtime!(kind);
    let timer = HyperTimer::new();
    for _ in 0..SLEEPS {
        let mut sleep = timer.sleep(Duration::MAX);
        let _ = rt.block_on(async { poll_once(&mut sleep) });
        drop(sleep);
    }
    timers_are(&rt, 0, "after sleeps were dropped outside block_on")?;
    let inner_dropped = rt.block_on(async {
        for _ in 0..SLEEPS {
            let mut sleep = timer.sleep(Duration::MAX);
            let _ = poll_once(&mut sleep);
            let inner = support::runtime(kind)?;
            drop(inner.spawn(async move {
                let _sleep = sleep;
                std::future::pending::<()>().await;
            }));
            drop(inner); // drops the task, and the sleep, here
        }
        Ok::<_, Completion>(rt.metrics().timers)
    });
    match inner_dropped {
        Ok(timers) => check!(
            timers == 0,
            "{timers} timers after sleeps were dropped by another runtime's drop"
        ),
        Err(skip) => return Ok(skip),
    }
    Ok(Completion::Completed)
}

/// A helper-thread sleep whose waker panics with a payload that panics again as it drops:
/// the helper thread survives, and a later sleep outside any runtime still fires.
fn the_helper_thread_survives_a_payload_panicking_in_drop(_kind: BackendKind) -> Outcome {
    let timer = HyperTimer::new();
    let mut bomb = timer.sleep(Duration::from_millis(10));
    let waker = Waker::from(Arc::new(support::WakePanicsTwice));
    let _ = bomb.as_mut().poll(&mut Context::from_waker(&waker));
    support::expecting_panics(|| std::thread::sleep(Duration::from_millis(200)));
    let mut later = timer.sleep(Duration::from_millis(20));
    let wakes = Arc::new(CountWakes::default());
    let _ = later
        .as_mut()
        .poll(&mut Context::from_waker(&Waker::from(wakes.clone())));
    check!(
        woken_within(&wakes, Duration::from_secs(5)),
        "a sleep outside any runtime never fired after the helper's waker panicked"
    );
    Ok(Completion::Completed)
}

/// A wake a panicking waker left queued runs later from a poll outside the runtime's
/// `block_on` (an op polled elsewhere runs the queue), where its worker is not current:
/// the sleep, reset later meanwhile, still fires at its new deadline.
fn a_timer_wake_run_outside_its_worker_still_fires(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let timer = HyperTimer::new();
    let (a, b) = rt.block_on(async { ring_rt::net::UnixStream::pair() })?;
    let mut read = Box::pin(b.read(vec![0u8; 8]).into_future());
    let deadline = Instant::now() + Duration::from_millis(50);
    let mut bomb = timer.sleep_until(deadline);
    let mut sleep = timer.sleep_until(deadline);
    let panicked = support::expecting_panics(|| {
        std::panic::catch_unwind(AssertUnwindSafe(|| {
            rt.block_on(async {
                let _ = std::future::poll_fn(|cx| Poll::Ready(read.as_mut().poll(cx))).await;
                let waker = Waker::from(Arc::new(PanicsOnWake));
                let _ = bomb.as_mut().poll(&mut Context::from_waker(&waker));
                let _ = std::future::poll_fn(|cx| Poll::Ready(sleep.as_mut().poll(cx))).await;
                ring_rt::time::sleep(Duration::from_millis(200)).await;
            })
        }))
    });
    check!(panicked.is_err(), "the waker did not panic out of block_on");
    // Outside `block_on`: runs the worker's queue, with the sleep's wake in it (io_uring).
    let _ = read.as_mut().poll(&mut Context::from_waker(Waker::noop()));
    drop(read);
    let later = Instant::now() + Duration::from_millis(100);
    timer.reset(&mut sleep, later);
    let fired = rt.block_on(ring_rt::time::timeout(Duration::from_secs(10), &mut sleep));
    // `timeout` polls the sleep before its own timer: only an early finish shows a
    // timer fired it.
    let late = Instant::now().saturating_duration_since(later);
    drop(a);
    check!(
        fired.is_ok() && late < Duration::from_secs(5),
        "a sleep whose wake ran outside its worker fired {late:?} late"
    );
    Ok(Completion::Completed)
}

/// A task's destructor, run while its runtime drops, polls a sleep for a waiter on another
/// thread: the sleep is armed where a turn will come (the helper thread), not on the
/// worker being dropped, and the waiter is woken.
fn a_sleep_polled_while_its_runtime_drops_still_fires(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let timer = HyperTimer::new();
    let slot = Arc::new(std::sync::Mutex::new(Some(
        timer.sleep(Duration::from_millis(50)),
    )));
    let wakes = Arc::new(CountWakes::default());
    let guard = PollOnDrop(slot.clone(), Waker::from(wakes.clone()));
    rt.block_on(async {
        let _task = ring_rt::spawn(async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        });
        ring_rt::yield_now().await;
    });
    drop(rt);
    check!(
        woken_within(&wakes, Duration::from_secs(5)),
        "a sleep polled while its runtime dropped never woke its waiter"
    );
    Ok(Completion::Completed)
}

/// A hyper sleep, as `Timer::sleep` makes it.
type HyperSleep = Pin<Box<dyn hyper::rt::Sleep>>;

/// Polls its sleep as it drops.
struct PollOnDrop(Arc<std::sync::Mutex<Option<HyperSleep>>>, Waker);

impl Drop for PollOnDrop {
    fn drop(&mut self) {
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(sleep) = slot.as_mut() {
            let _ = sleep.as_mut().poll(&mut Context::from_waker(&self.1));
        }
    }
}

/// Whether `wakes` counts a wake within `limit` (checked every 5 ms).
fn woken_within(wakes: &CountWakes, limit: Duration) -> bool {
    let start = Instant::now();
    while wakes.0.load(Ordering::SeqCst) == 0 {
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// A waker whose wake panics.
struct PanicsOnWake;

impl Wake for PanicsOnWake {
    fn wake(self: Arc<Self>) {
        panic!("a waker panicking as it wakes");
    }
}

/// A poll that arms a sleep on the helper thread and then lets go of an old waker whose
/// drop panics: the panic comes out of that poll, but the sleep is armed and its new waker
/// is woken at the deadline.
fn a_waker_panicking_in_drop_loses_no_wake(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let timer = HyperTimer::new();
    let deadline = Instant::now() + Duration::from_millis(100);
    let mut sleep = timer.sleep_until(deadline);
    let polled = rt.block_on(async {
        let waker = Waker::from(Arc::new(PanicsOnDrop));
        sleep.as_mut().poll(&mut Context::from_waker(&waker))
    });
    if !support::pending_before(&polled, deadline, "a 100 ms sleep")? {
        return Ok(Completion::Completed); // paused past it: nothing to test
    }
    let wakes = Arc::new(CountWakes::default());
    let waker = Waker::from(wakes.clone());
    let poll = || sleep.as_mut().poll(&mut Context::from_waker(&waker));
    let out = support::expecting_panics(|| std::panic::catch_unwind(AssertUnwindSafe(poll)));
    check!(
        out.is_err(),
        "the old waker's drop did not panic (nothing tested)"
    );
    check!(
        woken_within(&wakes, Duration::from_secs(5)),
        "the sleep never woke its new waker"
    );
    check!(Instant::now() >= deadline, "woken before the deadline");
    Ok(Completion::Completed)
}

/// A waker whose drop panics (not while unwinding).
struct PanicsOnDrop;

impl Wake for PanicsOnDrop {
    fn wake(self: Arc<Self>) {}
}

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("a waker panicking as it drops");
        }
    }
}

/// A pending sleep polled on a worker arms one timer there and spawns nothing (hyper makes
/// a sleep per request: a task each cost a spawn per request); dropping it on that worker
/// removes its timer at once, so nothing idles until the deadline.
fn pending_hyper_sleeps_arm_timers_not_tasks(kind: BackendKind) -> Outcome {
    const SLEEPS: usize = 1000;
    let rt = runtime!(kind);
    rt.block_on(async {
        let timer = HyperTimer::new();
        let before = rt.metrics();
        let mut sleeps: Vec<_> = (0..SLEEPS)
            .map(|_| timer.sleep(Duration::from_secs(30)))
            .collect();
        for sleep in &mut sleeps {
            check!(poll_once(sleep).is_pending(), "a 30 s sleep was ready");
        }
        let armed = rt.metrics();
        check!(
            (armed.tasks_alive, armed.timers)
                == (before.tasks_alive, before.timers + SLEEPS as u64),
            "after polling {SLEEPS} sleeps: {} tasks, {} timers (before: {}, {})",
            armed.tasks_alive,
            armed.timers,
            before.tasks_alive,
            before.timers
        );
        drop(sleeps);
        let after = rt.metrics();
        check!(
            (after.tasks_alive, after.timers, after.tasks_spawned)
                == (before.tasks_alive, before.timers, before.tasks_spawned),
            "after drop: {} tasks, {} timers, {} spawned (before: {}, {}, {})",
            after.tasks_alive,
            after.timers,
            after.tasks_spawned,
            before.tasks_alive,
            before.timers,
            before.tasks_spawned
        );
        Ok(Completion::Completed)
    })
}

/// With no ring-rt worker on the polling thread, the helper thread fires the sleep.
fn hyper_sleep_polled_outside_runtime_fires(_kind: BackendKind) -> Outcome {
    let timer = HyperTimer::new();
    let start = Instant::now();
    let (soon, later) = (Duration::from_millis(5), Duration::from_millis(15));
    let mut sleeps = [timer.sleep(later), timer.sleep(soon)];
    let mut woken_at = Vec::new();
    let thread = std::thread::current();
    let waker = Waker::from(Arc::new(Unpark(thread)));
    while woken_at.len() < sleeps.len() {
        // The soon sleep is polled first: a thread descheduled past both deadlines finds
        // both ready in one pass, and polling the later one first recorded it as firing
        // first (the test failed once so on a loaded machine). A later sleep ready while
        // the soon one is not still fails the check below.
        for (i, sleep) in sleeps.iter_mut().enumerate().rev() {
            let is_new = !woken_at.iter().any(|&(j, _)| j == i);
            if is_new
                && sleep
                    .as_mut()
                    .poll(&mut Context::from_waker(&waker))
                    .is_ready()
            {
                woken_at.push((i, start.elapsed()));
            }
        }
        if woken_at.len() < sleeps.len() {
            std::thread::park_timeout(Duration::from_secs(10));
        }
        check!(
            start.elapsed() < Duration::from_secs(10),
            "sleeps never fired"
        );
    }
    check!(
        woken_at[0].0 == 1 && woken_at[0].1 >= soon && woken_at[1].1 >= later,
        "(index, at) in firing order: {woken_at:?}"
    );
    Ok(Completion::Completed)
}

/// Polls a hyper sleep once with a no-op waker.
fn poll_once(sleep: &mut Pin<Box<dyn hyper::rt::Sleep>>) -> Poll<()> {
    sleep.as_mut().poll(&mut Context::from_waker(Waker::noop()))
}

/// Counts its wakes.
#[derive(Default)]
struct CountWakes(std::sync::atomic::AtomicUsize);

impl Wake for CountWakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Wakes a parked thread.
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}
