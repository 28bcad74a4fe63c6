//! What an idle connection and a detached task cost in heap, counted exactly: a global
//! allocator that counts the bytes the runtime's own thread holds (the test's clients run
//! on another thread and are not counted). Sizes, not timings: the same build gives the
//! same figures on a loaded machine. Both backends, every kernel profile.
//!
//! BENCHMARKS.md's idle-connection figure is the RSS view of the same thing (issue 19,
//! goal 6); these tests keep what was cut from coming back.

#[macro_use]
mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::future::{Future, IntoFuture};
use std::io::{Read, Write};
use std::sync::mpsc;
use std::time::Duration;

use libtest_mimic::Completion;
use ring_rt::net::TcpListener;
use ring_rt::BackendKind;
use support::Outcome;

/// Counts, per thread, the bytes allocated minus the bytes freed by that thread.
struct Counting;

thread_local! {
    static HELD: Cell<isize> = const { Cell::new(0) };
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    // `try_with`: a thread being torn down has no counter left, and frees anyway.
    let _ = HELD.try_with(|held| held.set(held.get() + delta));
    if delta > 0 {
        let _ = ALLOCS.try_with(|allocs| allocs.set(allocs.get() + 1));
    }
}

// SAFETY: forwards every call to the system allocator unchanged; the counting touches a
// const-initialised thread-local `Cell`, which allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc` is passed on as it is.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        count(-(layout.size() as isize));
        // SAFETY: `p` came from `alloc` above (the system allocator) with this layout.
        unsafe { System.dealloc(p, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn held() -> isize {
    HELD.with(Cell::get)
}

/// Allocations made by this thread so far.
fn allocs() -> usize {
    ALLOCS.with(Cell::get)
}

fn main() {
    support::run(&[
        (
            "an_idle_echo_connection_stays_within_its_heap_budget",
            an_idle_echo_connection_stays_within_its_heap_budget,
        ),
        (
            "a_connection_served_balanced_holds_what_a_spawned_one_does",
            a_connection_served_balanced_holds_what_a_spawned_one_does,
        ),
        (
            "a_detached_task_lets_its_output_slot_go",
            a_detached_task_lets_its_output_slot_go,
        ),
        (
            "a_detached_tasks_output_panicking_in_drop_leaves_the_worker_running",
            a_detached_tasks_output_panicking_in_drop_leaves_the_worker_running,
        ),
        (
            "ops_polled_outside_their_runtime_leave_nothing_behind",
            ops_polled_outside_their_runtime_leave_nothing_behind,
        ),
        (
            "reads_dropped_on_a_socket_that_stays_unready_leave_nothing_behind",
            reads_dropped_on_a_socket_that_stays_unready_leave_nothing_behind,
        ),
        (
            "an_echo_connection_allocates_nothing_per_request",
            an_echo_connection_allocates_nothing_per_request,
        ),
        (
            "echo_connections_sharing_a_small_pool_allocate_nothing_per_request",
            echo_connections_sharing_a_small_pool_allocate_nothing_per_request,
        ),
    ])
}

// The echo handler of examples/echo.rs, the very file: what every connection's task holds
// while idle.
#[path = "../../../examples/echo_handler.rs"]
mod echo_handler;
use echo_handler::echo;

/// Connections measured, after `WARM` that settle the pools and tables: the accept loop's
/// task, 63 + 448 connections' is 512 tasks, where the task slab and op table are exactly
/// full (they grow by doubling), so each connection is charged one slot of each rather than
/// a share of spare capacity.
const WARM: usize = 63;
const MEASURED: usize = 448;

/// Heap bytes an idle echo connection may hold on the server's thread. Measured on
/// 2026-11-26 (Linux 6.18, all features): io_uring 424 B, epoll 704 B (676 B since
/// 2026-11-29: epoll's per-fd `Registration` is 56 B, not 64); io_uring without
/// multishot receive (`RING_FEATURES=5.19`) 480 B, as it boxes a one-shot receive as epoll
/// does. Before the receive stream, the pending write and the socket's queues were packed
/// and the handler reshaped: 560 B and 840 B.
fn budget(kind: BackendKind) -> isize {
    match kind {
        BackendKind::Uring => 520,
        BackendKind::Epoll => 780,
    }
}

/// How the accept loop hands each connection to `echo`.
#[derive(Clone, Copy, Debug)]
enum Serving {
    /// `ring_rt::spawn(echo(stream))` for each accepted stream.
    Spawned,
    /// `Handle::serve_balanced(&listener, echo)`, on a runtime of one worker.
    Balanced,
}

/// Opens `WARM + MEASURED` connections from a client thread, each echoing one byte, and
/// counts what the server thread holds per idle connection after the last `MEASURED`.
fn an_idle_echo_connection_stays_within_its_heap_budget(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    let per_conn = idle_echo_heap(&rt, Serving::Spawned)?;
    eprintln!("{kind}: {per_conn} B of heap per idle echo connection");
    check!(
        per_conn <= budget(kind),
        "{kind}: an idle echo connection holds {per_conn} B of heap, over its budget of {} B",
        budget(kind)
    );
    Ok(Completion::Completed)
}

/// `serve_balanced` runs each connection's handler as that connection's task, wrapped in
/// nothing that is kept while it is idle: a connection it serves holds what one spawned
/// by hand does.
fn a_connection_served_balanced_holds_what_a_spawned_one_does(kind: BackendKind) -> Outcome {
    // A runtime each: epoll's registrations, by fd number, grow with the first.
    let spawned = idle_echo_heap(&runtime!(kind), Serving::Spawned)?;
    let balanced = idle_echo_heap(&runtime!(kind), Serving::Balanced)?;
    eprintln!("{kind}: {spawned} B per idle connection spawned, {balanced} B served balanced");
    check!(
        balanced <= spawned,
        "{kind}: a connection served by serve_balanced holds {balanced} B of heap, one spawned by hand {spawned} B"
    );
    Ok(Completion::Completed)
}

/// Heap the server's thread holds per idle echo connection, `serving` the way it says.
fn idle_echo_heap(rt: &ring_rt::Runtime, serving: Serving) -> Result<isize, String> {
    let (addr_tx, addr_rx) = mpsc::channel();
    let (step_tx, step_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let client = std::thread::spawn(move || -> std::io::Result<Vec<std::net::TcpStream>> {
        let addr = addr_rx
            .recv()
            .map_err(|_| std::io::Error::other("no address"))?;
        let mut conns = Vec::new();
        for i in 0..WARM + MEASURED {
            let mut s = std::net::TcpStream::connect(addr)?;
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            s.write_all(b"x")?;
            let mut byte = [0u8; 1];
            s.read_exact(&mut byte)?;
            conns.push(s);
            if i + 1 == WARM || i + 1 == WARM + MEASURED {
                let _ = step_tx.send(());
                let _ = go_rx.recv_timeout(Duration::from_secs(30));
            }
        }
        Ok(conns)
    });
    let per_conn = rt
        .block_on(support::bounded(Duration::from_secs(60), async move {
            let listener = TcpListener::bind("127.0.0.1:0")?;
            addr_tx
                .send(listener.local_addr()?)
                .map_err(|_| "client gone")?;
            let accepting = ring_rt::spawn(async move {
                match serving {
                    Serving::Spawned => {
                        let mut incoming = listener.incoming();
                        while let Some(Ok(stream)) = incoming.next().await {
                            drop(ring_rt::spawn(echo(stream)));
                        }
                    }
                    Serving::Balanced => {
                        let handle = ring_rt::Handle::current();
                        drop(handle.serve_balanced(&listener, echo).await);
                    }
                }
            });
            // The client has its echoes at each step: every task is back at its idle await.
            wait_for_step(&step_rx).await?;
            settle().await;
            let base = held();
            let _ = go_tx.send(());
            wait_for_step(&step_rx).await?;
            settle().await;
            let per_conn = (held() - base) / MEASURED as isize;
            accepting.abort();
            let _ = go_tx.send(());
            Ok::<isize, Box<dyn std::error::Error>>(per_conn)
        }))
        .map_err(|e| format!("{e:?}"))?;
    let per_conn = per_conn.map_err(|e| e.to_string())?;
    let conns = client
        .join()
        .map_err(|_| "client panicked")?
        .map_err(|e| e.to_string())?;
    drop(conns);
    Ok(per_conn)
}

async fn wait_for_step(rx: &mpsc::Receiver<()>) -> Result<(), &'static str> {
    for _ in 0..30_000 {
        if rx.try_recv().is_ok() {
            return Ok(());
        }
        ring_rt::time::sleep(Duration::from_millis(1)).await;
    }
    Err("the client never finished its echoes")
}

/// A few loop turns with a timer, so every completion of the echoes is taken and every
/// task polled back to its idle await.
async fn settle() {
    for _ in 0..20 {
        ring_rt::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Tasks that wait for ever, spawned with their handles kept and then detached: the
/// detached ones hold less, by the output slot they no longer keep (it held the task's
/// output for a handle that is gone, for the task's whole life).
fn a_detached_task_lets_its_output_slot_go(kind: BackendKind) -> Outcome {
    const TASKS: usize = 256;
    let rt = runtime!(kind);
    let (kept, detached) = rt.block_on(async {
        // Warm the slab to its size for both rounds, so neither pays its growth.
        let warm: Vec<_> = (0..2 * TASKS)
            .map(|_| ring_rt::spawn(std::future::pending::<()>()))
            .collect();
        warm.iter().for_each(|t| t.abort());
        drop(warm);
        settle().await;
        let mut handles = Vec::with_capacity(TASKS);
        let before = held();
        for _ in 0..TASKS {
            handles.push(ring_rt::spawn(std::future::pending::<[u8; 64]>()));
        }
        settle().await;
        let kept = (held() - before) / TASKS as isize;
        handles.iter().for_each(|t| t.abort());
        handles.clear();
        settle().await;
        let before = held();
        for _ in 0..TASKS {
            drop(ring_rt::spawn(std::future::pending::<[u8; 64]>()));
        }
        settle().await;
        (kept, (held() - before) / TASKS as isize)
    });
    eprintln!("{kind}: a waiting task holds {kept} B with its handle, {detached} B detached");
    // The slot holds at least the output (64 B) and a waker's place.
    check!(
        kept - detached >= 64,
        "a detached task holds {detached} B against {kept} B with its handle kept: its output slot stayed"
    );
    Ok(Completion::Completed)
}

/// An output whose drop panics.
struct PanicsOnDrop;

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        panic!("the output panicked as it was dropped");
    }
}

/// A detached task's output is dropped as the task finishes (nobody can read it): its
/// panic is logged, the task's slot is freed and the worker runs on.
fn a_detached_tasks_output_panicking_in_drop_leaves_the_worker_running(
    kind: BackendKind,
) -> Outcome {
    let rt = runtime!(kind);
    let out = support::expecting_panics(|| {
        rt.block_on(async {
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            drop(ring_rt::spawn(async move {
                let _ = rx.await;
                PanicsOnDrop
            }));
            ring_rt::yield_now().await;
            let _ = tx.send(());
            settle().await;
            ring_rt::spawn(async { 7 }).await
        })
    });
    check!(
        matches!(out, Ok(7)),
        "the worker stopped running tasks: {out:?}"
    );
    let alive = rt.metrics().workers[0].tasks_alive;
    check!(alive == 0, "{alive} tasks left alive");
    Ok(Completion::Completed)
}

/// An op polled outside its runtime is cancelled, and the worker notes which ops it
/// cancelled so (to tell that refusal from the kernel's own `ECANCELED`). An op dropped
/// then, or ending inside with a result that beat the cancel, must not leave its note
/// behind: a program that keeps doing so would grow without bound.
fn ops_polled_outside_their_runtime_leave_nothing_behind(kind: BackendKind) -> Outcome {
    const ROUNDS: usize = 1024;
    let rt = runtime!(kind);
    let (a, b) = rt.block_on(async { ring_rt::net::UnixStream::pair() })?;
    let round = |ends_inside: bool| -> Result<(), Box<dyn std::error::Error>> {
        let mut read = Box::pin(b.read(vec![0u8; 8]).into_future());
        // Started inside: on io_uring the read is in the kernel now.
        let done = rt.block_on(std::future::poll_fn(|cx| {
            std::task::Poll::Ready(read.as_mut().poll(cx).is_ready())
        }));
        if done {
            // A byte an earlier round's refused read left outlived that round's short drain
            // (a slow machine: CI's 6.12 VM) and this read took it at once. It is over:
            // polling it again would poll a finished op.
            return Ok(());
        }
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        // io_uring: pending, its cancel sent. epoll: refused at once (nothing of a socket
        // read is in flight while it waits for readiness), so there is nothing to end.
        let pending = read.as_mut().poll(&mut cx).is_pending();
        if pending && ends_inside {
            // The read gets its byte before the runtime turns again: it ends inside, with
            // the byte if its own result beat the cancel, refused if the cancel won.
            rt.block_on(async {
                a.write_all(&b"x"[..]).await.0?;
                let _ = read.await;
                // A byte the refused read left is read now, to keep the rounds alike.
                let _ =
                    ring_rt::time::timeout(Duration::from_millis(1), b.read(vec![0u8; 8])).await;
                Ok::<(), std::io::Error>(())
            })?;
        } else {
            drop(read);
        }
        // A turn or two takes in what the kernel still owed (a cancel's completion).
        rt.block_on(async {
            ring_rt::yield_now().await;
            ring_rt::yield_now().await;
        });
        Ok(())
    };
    // Warm up: the op table, the pools and the worker's lists reach their sizes.
    for i in 0..256 {
        round(i % 2 == 0).map_err(|e| e.to_string())?;
    }
    let before = held();
    for i in 0..ROUNDS {
        round(i % 2 == 0).map_err(|e| e.to_string())?;
    }
    let grown = held() - before;
    eprintln!("{kind}: {grown} B more heap after {ROUNDS} ops polled outside their runtime");
    check!(
        grown < 1024,
        "{kind}: {ROUNDS} ops polled outside their runtime left {grown} B of heap behind"
    );
    Ok(Completion::Completed)
}

/// Task after task reads a socket that never gets data, each giving up at a timeout (the
/// read's future dropped while it waits): nothing of the finished tasks may stay behind.
/// On epoll the wait is a waker parked on the fd until it is ready, which kept each
/// finished task's waker (and its header) for as long as the socket stayed unready.
fn reads_dropped_on_a_socket_that_stays_unready_leave_nothing_behind(kind: BackendKind) -> Outcome {
    const TASKS: usize = 1024;
    let rt = runtime!(kind);
    let grown = rt.block_on(async {
        let (_a, b) = ring_rt::net::UnixStream::pair()?;
        let b = std::rc::Rc::new(b);
        let round = |tasks: usize| {
            let b = b.clone();
            async move {
                for _ in 0..tasks {
                    let b = b.clone();
                    ring_rt::spawn(async move {
                        let read = b.read(vec![0u8; 8]);
                        ring_rt::time::timeout(Duration::from_micros(1), read).await
                    })
                    .await
                    .map_err(std::io::Error::from)?
                    .err()
                    .ok_or_else(|| std::io::Error::other("a read got data nobody sent"))?;
                }
                Ok::<(), std::io::Error>(())
            }
        };
        round(64).await?;
        let before = held();
        round(TASKS).await?;
        Ok::<isize, std::io::Error>(held() - before)
    })?;
    eprintln!("{kind}: {grown} B more heap after {TASKS} tasks dropped a waiting read");
    check!(
        grown < 1024,
        "{kind}: {TASKS} tasks that dropped a read on an unready socket left {grown} B of heap behind"
    );
    Ok(Completion::Completed)
}

/// A busy echo connection, one request at a time, as the echo handler serves it: after a
/// warm-up, a request (a chunk received, written back) allocates nothing on the server's
/// thread. A receive stream taking one chunk per one-shot receive (epoll, io_uring before
/// 6.0) boxed each receive: one allocation per request until its box was kept. On io_uring
/// with `PROVIDE_BUFFERS` and no buffer rings (5.7 to 5.18) each returned buffer goes back
/// by an SQE of its own, which was an op with a boxed orphan: one allocation per request
/// (three, and a scan of the whole group, before the group kept a list of what came back).
fn an_echo_connection_allocates_nothing_per_request(kind: BackendKind) -> Outcome {
    let rt = runtime!(kind);
    echo_allocates_nothing_per_request(kind, &rt, 1)
}

/// Review BF: 8 echo connections sharing a receive pool of 8 buffers, each holding one while
/// its write goes out, so the pool runs dry and a multishot receive ends and re-arms now and
/// then. Each such end queued the hold's waker to be dropped through a `Deferred` of its
/// own: 1.4 allocations per request. Where a receive finds the pool empty (`ENOBUFS`, which
/// the runtime counts) its wait for a returned buffer is boxed, by design, and a multishot
/// receive that the kernel ends there is armed anew: those are allowed, a few each. This
/// host (6.18) and a 6.12 VM meet no `ENOBUFS` here; CI's 6.1 VM met 567, with 1,533
/// allocations in all (2.7 per `ENOBUFS`).
fn echo_connections_sharing_a_small_pool_allocate_nothing_per_request(
    kind: BackendKind,
) -> Outcome {
    const CONNS: usize = 8;
    let rt = runtime!(
        kind,
        ring_rt::Runtime::builder()
            .threads(1)
            .recv_buffers(CONNS as u16, 64)
    );
    echo_allocates_nothing_per_request(kind, &rt, CONNS)
}

/// `conns` clients, each sending 64-byte requests one at a time to an echo task serving
/// it by its receive stream: after every connection's warm-up, the server's thread
/// allocates (almost) nothing while they all make their requests.
fn echo_allocates_nothing_per_request(
    kind: BackendKind,
    rt: &ring_rt::Runtime,
    conns: usize,
) -> Outcome {
    const WARM_REQUESTS: usize = 32;
    const REQUESTS: usize = 256;
    let enobufs_before = rt.metrics().io.enobufs;
    let (addr_tx, addr_rx) = mpsc::channel();
    let clients = std::thread::spawn(move || -> std::io::Result<()> {
        let addr: std::net::SocketAddr = addr_rx
            .recv()
            .map_err(|_| std::io::Error::other("no address"))?;
        let each: Vec<_> = (0..conns)
            .map(|c| {
                std::thread::spawn(move || -> std::io::Result<()> {
                    let mut s = std::net::TcpStream::connect(addr)?;
                    s.set_read_timeout(Some(Duration::from_secs(10)))?;
                    s.set_nodelay(true)?;
                    let mut reply = [0u8; 64];
                    for i in 0..WARM_REQUESTS + REQUESTS {
                        let request = [(i + c) as u8; 64];
                        s.write_all(&request)?;
                        s.read_exact(&mut reply)?;
                        if reply != request {
                            return Err(std::io::Error::other(format!("request {i} echoed wrong")));
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for client in each {
            client
                .join()
                .map_err(|_| std::io::Error::other("a client panicked"))??;
        }
        Ok(())
    });
    let made = rt.block_on(support::bounded(Duration::from_secs(60), async move {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        addr_tx
            .send(listener.local_addr()?)
            .map_err(|_| "client gone")?;
        // Connections past their warm-up, and the count when the last one got there.
        let warmed = std::rc::Rc::new(Cell::new(0));
        let start = std::rc::Rc::new(Cell::new(0));
        let mut served = Vec::new();
        for _ in 0..conns {
            let (stream, _) = listener.accept().await?;
            let (warmed, start) = (warmed.clone(), start.clone());
            served.push(ring_rt::spawn(async move {
                let mut chunks = stream.recv_stream();
                let mut bytes = 0;
                while let Some(chunk) = chunks.next().await {
                    let chunk = chunk?;
                    // A request may come in more than one chunk: counted by its bytes.
                    let before = bytes / 64;
                    bytes += chunk.len();
                    if before < WARM_REQUESTS && bytes / 64 >= WARM_REQUESTS {
                        warmed.set(warmed.get() + 1);
                        if warmed.get() == conns {
                            start.set(allocs());
                        }
                    }
                    let (res, _) = stream.write_all(chunk).await;
                    res?;
                    if bytes / 64 >= WARM_REQUESTS + REQUESTS {
                        return Ok::<(), std::io::Error>(());
                    }
                }
                Err(std::io::Error::other("the client left early"))
            }));
        }
        for task in served {
            task.await??;
        }
        Ok::<usize, Box<dyn std::error::Error>>(allocs() - start.get())
    }))?;
    let made = made.map_err(|e| e.to_string())?;
    clients
        .join()
        .map_err(|_| "client panicked")?
        .map_err(|e| e.to_string())?;
    let requests = conns * REQUESTS;
    let enobufs = rt.metrics().io.enobufs - enobufs_before;
    eprintln!(
        "{kind}: {made} allocations in {requests} echo requests on {conns} connections ({enobufs} ENOBUFS)"
    );
    // Not zero: a queue or table may still grow once while the count runs, and the
    // connections still warming while the last one did are counted too. A receive that
    // found the pool empty boxes its wait and may be armed anew (see above).
    let allowed = conns * REQUESTS / 16 + 4 * enobufs as usize;
    check!(
        made < allowed,
        "{kind}: {made} allocations in {requests} echo requests on {conns} connections ({enobufs} ENOBUFS), {} per request",
        made as f64 / requests as f64
    );
    Ok(Completion::Completed)
}
