//! Live-kernel tests of the driver: batching, SQ full, CQ overflow, stale user_data,
//! multishot, orphans. Run with `RING_FEATURES=5.11` (etc.) to exercise older paths.

#[macro_use]
mod support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Duration;

use io_uring::{opcode, squeue, types};
use libtest_mimic::{Arguments, Completion};
use ring_core::driver::{Batch, Driver, DriverConfig, Wait};
use ring_core::probe::Feature;
use ring_core::release::{CloseFd, Keep, RecycleBid};
use ring_core::setup::RingConfig;
use ring_core::user_data::OpId;
use support::{
    child_command, child_outcome, driver_with, features, lacks, lacks_opcode, trial, turn_until,
    wait_op, Outcome,
};

fn main() {
    let mut args = Arguments::from_args();
    // Several tests count this process's open fds; running them one at a time keeps that
    // count meaningful.
    args.test_threads.get_or_insert(1);
    let tests = vec![
        trial("nops_batch_into_few_enters", nops_batch_into_few_enters),
        trial(
            "an_op_submitted_waiting_wakes_its_waker_once",
            an_op_submitted_waiting_wakes_its_waker_once,
        ),
        trial(
            "cq_overflow_loses_no_completion",
            cq_overflow_loses_no_completion,
        ),
        trial("sq_full_cancel_is_not_lost", sq_full_cancel_is_not_lost),
        trial("stale_user_data_is_detected", stale_user_data_is_detected),
        trial(
            "multishot_accept_accumulates_in_one_slot",
            multishot_accept_accumulates_in_one_slot,
        ),
        trial(
            "dropped_accept_closes_late_fd",
            dropped_accept_closes_late_fd,
        ),
        trial(
            "dropped_buffer_select_recv_returns_bid",
            dropped_buffer_select_recv_returns_bid,
        ),
        trial(
            "linked_write_fsync_read_chain",
            linked_write_fsync_read_chain,
        ),
        trial("wait_with_timeout_returns", wait_with_timeout_returns),
        trial(
            "wait_with_timeout_sqe_without_ext_arg",
            wait_with_timeout_sqe_without_ext_arg,
        ),
        trial(
            "wait_timeout_into_full_sq_does_not_sit_on_ready_cqes",
            wait_timeout_into_full_sq_does_not_sit_on_ready_cqes,
        ),
        trial(
            "no_wait_turns_enter_only_for_news",
            no_wait_turns_enter_only_for_news,
        ),
        trial("shutdown_reaps_every_orphan", shutdown_reaps_every_orphan),
        trial(
            "a_panic_in_dispatch_delivers_the_rest_once",
            a_panic_in_dispatch_delivers_the_rest_once,
        ),
        trial(
            "bounded_multishot_accept_stops_at_its_bound",
            bounded_multishot_accept_stops_at_its_bound,
        ),
        trial(
            "registered_buffers_live_as_long_as_their_registration",
            registered_buffers_live_as_long_as_their_registration,
        ),
        trial(
            "batched_wait_gathers_then_gives_up",
            batched_wait_gathers_then_gives_up,
        ),
        trial(
            "enters_name_the_ring_by_its_registered_index",
            enters_name_the_ring_by_its_registered_index,
        ),
        trial(
            "dropped_drivers_give_their_ring_index_back",
            dropped_drivers_give_their_ring_index_back,
        ),
        trial(
            "a_driver_inherited_through_fork_never_enters_the_childs_ring",
            a_driver_inherited_through_fork_never_enters_the_childs_ring,
        ),
        trial(
            "a_driver_inherited_through_a_raw_clone_never_enters_the_childs_ring",
            a_driver_inherited_through_a_raw_clone_never_enters_the_childs_ring,
        ),
        trial(FORK_CHILD_TEST, fork_child).with_ignored_flag(true),
        trial(CLONE_CHILD_TEST, clone_child).with_ignored_flag(true),
    ];
    libtest_mimic::run(&args, tests).exit();
}

fn nop() -> squeue::Entry {
    opcode::Nop::new().build()
}

fn nops_batch_into_few_enters() -> Outcome {
    let features = match features() {
        Ok(f) => f,
        Err(skip) => return Ok(skip),
    };
    let mut driver = driver_with(features, 64, 0);
    let (sq_entries, _) = driver.ring_sizes();
    let before = driver.metrics().snapshot();
    // SAFETY: NOPs point at no memory.
    let ids: Vec<OpId> = (0..4096)
        .map(|_| unsafe { driver.submit_op(nop()) }.unwrap())
        .collect();
    driver.turn(Wait::No)?;
    for id in ids {
        wait_op(&mut driver, id)?;
    }
    let delta = driver.metrics().snapshot().since(&before);
    let allowed = 4096 / u64::from(sq_entries) + 2;
    check!(
        delta.cqes_reaped == 4096,
        "reaped {} CQEs",
        delta.cqes_reaped
    );
    check!(
        delta.enters <= allowed,
        "{} enters for 4096 NOPs (allowed {allowed})",
        delta.enters
    );
    check!(driver.in_flight() == 0, "ops left in flight");
    Ok(Completion::Completed)
}

/// Counts its wakes.
struct CountWakes(std::sync::atomic::AtomicUsize);

impl std::task::Wake for CountWakes {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// `submit_op_waiting` registers the poller's waker with the op: the CQE wakes it (once,
/// through the deferred queue) with no poll in between, and the op's result is then there.
fn an_op_submitted_waiting_wakes_its_waker_once() -> Outcome {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    let features = match features() {
        Ok(f) => f,
        Err(skip) => return Ok(skip),
    };
    let mut driver = driver_with(features, 8, 0);
    let count = Arc::new(CountWakes(Default::default()));
    let waker = std::task::Waker::from(count.clone());
    // SAFETY: a NOP points at no memory.
    let id = unsafe { driver.submit_op_waiting(nop(), &waker) }?;
    check!(
        count.0.load(Ordering::Relaxed) == 0,
        "woken before the op was submitted"
    );
    let mut deferred = ring_core::lifecycle::Deferred::default();
    turn_until(&mut driver, Duration::from_secs(5), |d| {
        d.take_deferred(&mut deferred);
        deferred.run();
        count.0.load(Ordering::Relaxed) > 0
    })?;
    check!(
        count.0.load(Ordering::Relaxed) == 1,
        "woken {} times",
        count.0.load(Ordering::Relaxed)
    );
    let polled = driver.poll_op(id, std::task::Waker::noop());
    check!(
        matches!(polled, std::task::Poll::Ready(Ok(ref cqe)) if cqe.res == 0),
        "the NOP's result after the wake: {polled:?}"
    );
    check!(driver.in_flight() == 0, "the op's slot stayed");
    Ok(Completion::Completed)
}

fn cq_overflow_loses_no_completion() -> Outcome {
    let features = match features() {
        Ok(f) => f,
        Err(skip) => return Ok(skip),
    };
    if let Some(skip) = lacks(&features, Feature::NoDrop) {
        return Ok(skip);
    }
    // DEFER_TASKRUN posts deferred completions only as far as the CQ has room, so it never
    // overflows; a ring without it (as on kernels before 6.1) is the one that can.
    let config = DriverConfig {
        ring: RingConfig {
            entries: 16,
            cq_entries: 32,
            single_issuer: false,
            ..RingConfig::default()
        },
        features,
    };
    let mut driver = Driver::new(&config)?;
    let ts = Box::new(types::Timespec::new().nsec(50_000_000));
    // SAFETY: every timeout points at `ts`, which outlives each op: all are waited for
    // below (and the driver's drop would wait out any left).
    let ids: Vec<OpId> = (0..10_000)
        .map(|_| unsafe { driver.submit_op(opcode::Timeout::new(&*ts).build()) }.unwrap())
        .collect();
    driver.turn(Wait::No)?;
    // Every timeout fires while nobody drains: far more CQEs than the 32-entry CQ holds.
    std::thread::sleep(Duration::from_millis(200));
    let mut seen = 0;
    for id in ids {
        let cqe = wait_op(&mut driver, id)?;
        check!(
            cqe.res == -libc::ETIME,
            "timeout completed with {}",
            cqe.res
        );
        seen += 1;
    }
    let m = driver.metrics().snapshot();
    check!(seen == 10_000, "only {seen} completions");
    check!(
        m.cq_overflows > 0,
        "the CQ never overflowed (sizes {:?}, {m}): the test did not test overflow",
        driver.ring_sizes()
    );
    check!(m.cqes_lost == 0, "{} CQEs lost", m.cqes_lost);
    Ok(Completion::Completed)
}

fn long_timeout(ts: &types::Timespec) -> squeue::Entry {
    opcode::Timeout::new(ts).build()
}

fn sq_full_cancel_is_not_lost() -> Outcome {
    let features = match features() {
        Ok(f) => f,
        Err(skip) => return Ok(skip),
    };
    let mut driver = driver_with(features, 8, 0);
    let hour = Box::new(types::Timespec::new().sec(3600));
    // SAFETY: the timeouts point at `hour`, which outlives them (each is cancelled and
    // reaped below); NOPs point at nothing.
    let timers: Vec<OpId> = (0..2000)
        .map(|_| unsafe { driver.submit_op(long_timeout(&hour)) }.unwrap())
        .collect();
    let (sq_entries, _) = driver.ring_sizes();
    // SAFETY: NOPs point at no memory.
    let nops: Vec<OpId> = (0..sq_entries)
        .map(|_| unsafe { driver.submit_op(nop()) }.unwrap())
        .collect();
    let before = driver.metrics().snapshot();
    // The SQ is full of NOPs now: the cancel must still get in.
    // SAFETY: the timer is this test's own; `hour` outlives its reap below.
    unsafe { driver.orphan(timers[0], Box::new(Keep(()))) };
    let after = driver.metrics().snapshot().since(&before);
    check!(
        after.sq_full >= 1,
        "the SQ was not full when the cancel was pushed"
    );
    turn_until(&mut driver, Duration::from_secs(5), |d| {
        d.metrics().snapshot().orphans_reaped == 1
    })?;
    for id in nops {
        wait_op(&mut driver, id)?;
    }
    for id in &timers[1..] {
        // SAFETY: the timers are this test's own; `hour` outlives their reaps below.
        unsafe { driver.orphan(*id, Box::new(Keep(()))) };
    }
    turn_until(&mut driver, Duration::from_secs(5), |d| d.in_flight() == 0)?;
    let m = driver.metrics().snapshot();
    check!(m.cancels_sent == 2000, "{} cancels sent", m.cancels_sent);
    check!(
        m.orphans_reaped == 2000,
        "{} orphans reaped",
        m.orphans_reaped
    );
    Ok(Completion::Completed)
}

fn stale_user_data_is_detected() -> Outcome {
    let features = match features() {
        Ok(f) => f,
        Err(skip) => return Ok(skip),
    };
    let mut driver = driver_with(features, 8, 0);
    // SAFETY: a NOP points at no memory.
    let old = unsafe { driver.submit_op(nop())? };
    wait_op(&mut driver, old)?;
    let hour = Box::new(types::Timespec::new().sec(3600));
    // SAFETY: the timeout points at `hour`, which outlives it (cancelled and reaped below).
    let new = unsafe { driver.submit_op(long_timeout(&hour))? };
    check!(
        new.index == old.index && new.generation != old.generation,
        "slot not reused: {old:?} {new:?}"
    );
    // A CQE for the old generation: what a late duplicate would look like.
    // SAFETY: a NOP points at no memory.
    unsafe { driver.push(nop().user_data(old.to_user_data())) };
    driver.turn(Wait::No)?;
    turn_until(&mut driver, Duration::from_secs(1), |d| {
        d.metrics().snapshot().stale_cqes == 1
    })?;
    check!(driver.ops().contains(new), "the new op was disturbed");
    // SAFETY: the op is this test's own; `hour` outlives its reap below.
    unsafe { driver.orphan(new, Box::new(Keep(()))) };
    turn_until(&mut driver, Duration::from_secs(5), |d| d.in_flight() == 0)?;
    Ok(Completion::Completed)
}

fn listener() -> std::io::Result<(TcpListener, std::net::SocketAddr)> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?;
    Ok((l, addr))
}

fn multishot_accept_accumulates_in_one_slot() -> Outcome {
    let features = match features() {
        Ok(f) => f,
        Err(skip) => return Ok(skip),
    };
    if let Some(skip) = lacks(&features, Feature::MultishotAccept) {
        return Ok(skip);
    }
    let mut driver = driver_with(features, 16, 0);
    let (l, addr) = listener()?;
    let fds_before = support::open_fds();
    // SAFETY: points at no memory; `l` outlives the op (cancelled and reaped below).
    let id =
        unsafe { driver.submit_op(opcode::AcceptMulti::new(types::Fd(l.as_raw_fd())).build())? };
    let clients: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(addr).unwrap()).collect();
    turn_until(&mut driver, Duration::from_secs(5), |d| {
        d.metrics().snapshot().cqes_reaped >= 3
    })?;
    check!(
        driver.ops().contains(id),
        "slot freed while F_MORE CQEs are queued"
    );
    let mut accepted = Vec::new();
    for _ in 0..3 {
        let cqe = wait_op(&mut driver, id)?;
        check!(cqe.is_more(), "CQE without F_MORE: {cqe:?}");
        accepted.push(cqe.res);
        check!(driver.ops().contains(id), "slot freed before the final CQE");
    }
    for fd in accepted {
        // SAFETY: each is a connection this test accepted and owns alone.
        unsafe { ring_core::release::close_quietly(fd) };
    }
    // SAFETY: the accept is this test's own, and a multishot accept's CQEs each return a new fd nobody owns yet.
    unsafe { driver.orphan(id, Box::new(CloseFd::new())) };
    turn_until(&mut driver, Duration::from_secs(5), |d| d.in_flight() == 0)?;
    drop(clients);
    check!(
        support::open_fds() == fds_before,
        "fds leaked: {} -> {}",
        fds_before,
        support::open_fds()
    );
    Ok(Completion::Completed)
}

fn dropped_accept_closes_late_fd() -> Outcome {
    let features = match features() {
        Ok(f) => f,
        Err(skip) => return Ok(skip),
    };
    if let Some(skip) = lacks_opcode(&features, opcode::Accept::CODE) {
        return Ok(skip);
    }
    let mut driver = driver_with(features, 16, 0);
    let (l, addr) = listener()?;
    let mut client = TcpStream::connect(addr)?;
    let fds_before = support::open_fds();
    let accept = opcode::Accept::new(
        types::Fd(l.as_raw_fd()),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    );
    // SAFETY: no address buffers (null); `l` outlives the op.
    let id = unsafe { driver.submit_op(accept.build())? };
    // Dropped before the accept was even submitted: the accept succeeds in the same enter
    // that carries the cancel, so its CQE arrives late with a real fd nobody owns.
    // SAFETY: the accept is this test's own, and its successful CQE returns a new fd nobody owns yet.
    unsafe { driver.orphan(id, Box::new(CloseFd::new())) };
    turn_until(&mut driver, Duration::from_secs(5), |d| d.in_flight() == 0)?;
    check!(support::open_fds() == fds_before, "late accepted fd leaked");
    client.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut buf = [0u8; 1];
    let n = client.read(&mut buf).unwrap_or(usize::MAX);
    check!(
        n == 0,
        "server side of the late accept was not closed (read gave {n})"
    );
    Ok(Completion::Completed)
}

fn dropped_buffer_select_recv_returns_bid() -> Outcome {
    let features = match features() {
        Ok(f) => f,
        Err(skip) => return Ok(skip),
    };
    if let Some(skip) = lacks_opcode(&features, opcode::ProvideBuffers::CODE) {
        return Ok(skip);
    }
    let mut driver = driver_with(features, 16, 0);
    let group = driver.register_buf_group(4, 256)?;
    driver.turn(Wait::No)?;
    let (mut a, b) = std::os::unix::net::UnixStream::pair()?;
    a.write_all(b"late data")?;
    let recv = opcode::Recv::new(types::Fd(b.as_raw_fd()), std::ptr::null_mut(), 256)
        .buf_group(group.bgid())
        .build()
        .flags(squeue::Flags::BUFFER_SELECT);
    // SAFETY: the kernel picks the buffer from `group`, which the driver keeps; `b` outlives
    // the op.
    let id = unsafe { driver.submit_op(recv)? };
    // SAFETY: the recv is this test's own and selects from `group`.
    unsafe { driver.orphan(id, Box::new(RecycleBid::new(group.clone()))) };
    turn_until(&mut driver, Duration::from_secs(5), |d| d.in_flight() == 0)?;
    check!(
        group.in_use() == 0,
        "{} buffers still out after the late CQE",
        group.in_use()
    );
    Ok(Completion::Completed)
}

fn linked_write_fsync_read_chain() -> Outcome {
    let features = match features() {
        Ok(f) => f,
        Err(skip) => return Ok(skip),
    };
    if let Some(skip) = lacks_opcode(&features, opcode::Read::CODE) {
        return Ok(skip);
    }
    let mut driver = driver_with(features, 16, 0);
    let path = std::env::temp_dir().join(format!("ring-core-chain-{}", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)?;
    std::fs::remove_file(&path)?;
    let fd = types::Fd(file.as_raw_fd());
    let data = vec![0x5au8; 4096];
    let mut back = vec![0u8; 4096];
    let chain = vec![
        opcode::Write::new(fd, data.as_ptr(), 4096)
            .offset(8192)
            .build(),
        opcode::Fsync::new(fd).build(),
        opcode::Read::new(fd, back.as_mut_ptr(), 4096)
            .offset(8192)
            .build(),
    ];
    // SAFETY: `data` and `back` outlive the chain: every op is waited for below.
    let ids = unsafe { driver.submit_chain(chain)? };
    let results: Vec<i32> = ids
        .into_iter()
        .map(|id| wait_op(&mut driver, id).map(|c| c.res))
        .collect::<Result<_, _>>()?;
    check!(results == [4096, 0, 4096], "chain results {results:?}");
    check!(back == data, "read back different bytes");
    Ok(Completion::Completed)
}

fn wait_with_timeout_returns() -> Outcome {
    let features = match features() {
        Ok(f) => f,
        Err(skip) => return Ok(skip),
    };
    let mut driver = driver_with(features, 8, 0);
    let start = std::time::Instant::now();
    let n = driver.turn(Wait::For(Duration::from_millis(20)))?;
    check!(n == 0, "{n} CQEs with nothing in flight");
    check!(
        start.elapsed() >= Duration::from_millis(19),
        "returned before the timeout"
    );
    Ok(Completion::Completed)
}

fn wait_with_timeout_sqe_without_ext_arg() -> Outcome {
    let features = match features() {
        Ok(f) => f,
        Err(skip) => return Ok(skip),
    };
    let masked = features.masked(&ring_core::probe::FeatureMask::default().hide(Feature::ExtArg));
    let mut driver = driver_with(masked, 8, 0);
    let start = std::time::Instant::now();
    driver.turn(Wait::For(Duration::from_millis(20)))?;
    check!(
        start.elapsed() >= Duration::from_millis(19),
        "returned before the timeout"
    );
    // An early wake must not leave a timeout armed: a NOP completes it (count = 1).
    let hour = Box::new(types::Timespec::new().sec(3600));
    // SAFETY: the timeout points at `hour`, which outlives it (cancelled and reaped below).
    let id = unsafe { driver.submit_op(long_timeout(&hour))? };
    // SAFETY: a NOP points at no memory.
    unsafe { driver.push(nop().user_data(ring_core::user_data::Reserved::Ignore.to_user_data())) };
    driver.turn(Wait::For(Duration::from_secs(3600)))?;
    // SAFETY: the timeout is this test's own; `hour` outlives its reap below.
    unsafe { driver.orphan(id, Box::new(Keep(()))) };
    turn_until(&mut driver, Duration::from_secs(5), |d| d.in_flight() == 0)?;
    Ok(Completion::Completed)
}

/// Without EXT_ARG the wait's timeout is an SQE. When the SQ is full, pushing it submits
/// first, and the ops that submission completes inline are copied out at once: the wait
/// must not then block (it did, for the whole timeout, with their CQEs in hand).
fn wait_timeout_into_full_sq_does_not_sit_on_ready_cqes() -> Outcome {
    let features = match features() {
        Ok(f) => f,
        Err(skip) => return Ok(skip),
    };
    let masked = features.masked(&ring_core::probe::FeatureMask::default().hide(Feature::ExtArg));
    let mut driver = driver_with(masked, 8, 0);
    let sq_entries = driver.ring_sizes().0 as usize;
    // SAFETY: NOPs point at no memory.
    let ids: Vec<OpId> = (0..sq_entries)
        .map(|_| unsafe { driver.submit_op(nop()) })
        .collect::<Result<_, _>>()?;
    check!(
        driver.pending_sqes() == sq_entries,
        "the NOPs should fill the SQ exactly"
    );
    let wait = Duration::from_secs(60);
    let start = std::time::Instant::now();
    let dispatched = driver.turn(Wait::For(wait))?;
    let elapsed = start.elapsed();
    check!(
        dispatched == sq_entries,
        "{dispatched} of {sq_entries} NOP completions dispatched by the turn"
    );
    // A hang bound, not a speed target: the bug sat out the whole minute.
    check!(
        elapsed < wait / 2,
        "the turn blocked for {elapsed:?} with every completion already copied out"
    );
    for id in ids {
        wait_op(&mut driver, id)?;
    }
    Ok(Completion::Completed)
}

/// A turn that must not wait enters the kernel only with SQEs to submit or with news the
/// ring's flags announce (TASKRUN_FLAG: pending task work, i.e. completions): an idle one
/// costs no syscall, and a completion arriving later is still reaped by such turns.
fn no_wait_turns_enter_only_for_news() -> Outcome {
    let features = match features() {
        Ok(f) => f,
        Err(skip) => return Ok(skip),
    };
    let mut driver = driver_with(features, 8, 0);
    if !driver.setup_flags().taskrun_flag {
        return Ok(Completion::ignored_with(
            "needs IORING_SETUP_TASKRUN_FLAG (Linux 5.19+): without it every turn enters",
        ));
    }
    let enters = |d: &Driver| d.metrics().snapshot().enters;
    let before = enters(&driver);
    for _ in 0..100 {
        driver.turn(Wait::No)?;
    }
    check!(
        enters(&driver) == before,
        "{} enters for 100 idle turns",
        enters(&driver) - before
    );
    // SAFETY: a NOP points at no memory.
    let id = unsafe { driver.submit_op(nop())? };
    driver.turn(Wait::No)?;
    check!(
        enters(&driver) == before + 1,
        "a turn with an SQE did not enter once"
    );
    wait_op(&mut driver, id)?;
    // Completes a millisecond later, on the kernel's timer: only the TASKRUN flag says so.
    let ms = Box::new(types::Timespec::new().nsec(1_000_000));
    // SAFETY: the timeout points at `ms`, which outlives it (waited for below).
    let id = unsafe { driver.submit_op(long_timeout(&ms))? };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        driver.turn(Wait::No)?;
        if driver.poll_op(id, std::task::Waker::noop()).is_ready() {
            break;
        }
        check!(
            std::time::Instant::now() < deadline,
            "a timeout's completion was never reaped by no-wait turns"
        );
    }
    Ok(Completion::Completed)
}

/// `set_batch`: one enter gathers a whole batch; a batch that does not fill returns what
/// it has once the min wait passes; a shorter wait timeout still bounds the wait.
fn batched_wait_gathers_then_gives_up() -> Outcome {
    let features = match features() {
        Ok(f) => f,
        Err(skip) => return Ok(skip),
    };
    if let Some(skip) = lacks(&features, Feature::MinTimeout) {
        return Ok(skip);
    }
    // Declared before the driver so that it outlives it: the driver's drop waits out any
    // read still in flight (an early return) before these buffers go.
    let mut bufs = [[0u8; 8]; 4];
    let mut driver = driver_with(features, 8, 0);
    let batch = |want, ms| {
        Some(Batch {
            want,
            min_wait: Duration::from_millis(ms),
        })
    };
    check!(driver.set_batch(batch(4, 2_000)), "MIN_TIMEOUT refused");
    // Reads on socket pairs that a thread feeds 5 ms apart. (Timeout ops would not do:
    // the kernel ends every wait when any timeout op fires.)
    let pairs: Vec<_> = (0..4)
        .map(|_| std::os::unix::net::UnixStream::pair())
        .collect::<Result<_, _>>()?;
    for ((ours, _), buf) in pairs.iter().zip(bufs.iter_mut()) {
        let read = opcode::Read::new(types::Fd(ours.as_raw_fd()), buf.as_mut_ptr(), 8);
        // SAFETY: `buf` is declared before the driver, so it outlives the driver's drop,
        // which waits out any read still in flight.
        unsafe { driver.submit_op(read.build())? };
    }
    driver.turn(Wait::No)?;
    let peers: Vec<_> = pairs
        .iter()
        .map(|(_, theirs)| theirs.try_clone())
        .collect::<Result<_, _>>()?;
    let feeder = std::thread::spawn(move || {
        for mut peer in peers {
            std::thread::sleep(Duration::from_millis(5));
            peer.write_all(b"x").expect("feed a read");
        }
    });
    let before = driver.metrics().snapshot();
    let n = driver.turn(Wait::Forever)?;
    let enters = driver.metrics().snapshot().since(&before).enters;
    feeder.join().expect("feeder thread");
    check!(n == 4, "one batched wait dispatched {n} of 4 CQEs");
    check!(enters == 1, "{enters} enters for one batch");

    // Only one CQE will come: the wait settles for it once the 30 ms min wait is over.
    driver.set_batch(batch(4, 30));
    let spans = Box::new(types::Timespec::new().nsec(5_000_000));
    // SAFETY: the timeout points at `spans`, which outlives it (the turn below reaps it).
    unsafe { driver.submit_op(opcode::Timeout::new(&*spans).build())? };
    let start = std::time::Instant::now();
    let n = driver.turn(Wait::Forever)?;
    check!(n == 1, "{n} CQEs from a batch that could not fill");
    check!(
        start.elapsed() < Duration::from_secs(5),
        "a batch that could not fill waited {:?}",
        start.elapsed()
    );

    // Nothing in flight: the turn's own 20 ms timeout ends the wait, not the 10 s batch.
    driver.set_batch(batch(4, 10_000));
    let start = std::time::Instant::now();
    let n = driver.turn(Wait::For(Duration::from_millis(20)))?;
    check!(n == 0, "{n} CQEs with nothing in flight");
    check!(
        start.elapsed() < Duration::from_secs(5),
        "the wait timeout did not bound a batched wait ({:?})",
        start.elapsed()
    );
    Ok(Completion::Completed)
}

fn shutdown_reaps_every_orphan() -> Outcome {
    let features = match features() {
        Ok(f) => f,
        Err(skip) => return Ok(skip),
    };
    let (l, _addr) = listener()?;
    let fds_before = support::open_fds();
    let mut driver = driver_with(features, 32, 0);
    let accept = || {
        opcode::Accept::new(
            types::Fd(l.as_raw_fd()),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
        .build()
    };
    // SAFETY: no address buffers (null); `l` outlives the driver.
    let ids: Vec<OpId> = (0..100)
        .map(|_| unsafe { driver.submit_op(accept()) }.unwrap())
        .collect();
    driver.turn(Wait::No)?;
    let metrics = driver.metrics().clone();
    for id in ids {
        // SAFETY: each accept is this test's own; a successful CQE returns a new fd nobody owns yet.
        unsafe { driver.orphan(id, Box::new(CloseFd::new())) };
    }
    drop(driver);
    let m = metrics.snapshot();
    check!(
        m.orphans_reaped == 100,
        "{} of 100 orphans reaped at shutdown",
        m.orphans_reaped
    );
    check!(m.ops_in_flight == 0, "{} ops left", m.ops_in_flight);
    check!(support::open_fds() == fds_before, "fds leaked by shutdown");
    Ok(Completion::Completed)
}

/// An orphan whose release step panics (a bug in that orphan) while a turn dispatches: the
/// panic is caught inside the table and re-raised where the owner runs the deferred work,
/// once the table is let go. The CQEs behind it are each dispatched exactly once, and the
/// orphan's slot is freed by its final CQE like any other, so the driver drops at once.
fn a_panic_in_dispatch_delivers_the_rest_once() -> Outcome {
    struct PanicOnReap;
    impl ring_core::lifecycle::Orphan for PanicOnReap {
        fn reap(
            &mut self,
            _cqe: &ring_core::cqe::Cqe,
            _deferred: &mut ring_core::lifecycle::Deferred,
        ) {
            panic!("release step panicked");
        }
    }
    let features = match features() {
        Ok(f) => f,
        Err(skip) => return Ok(skip),
    };
    let mut driver = driver_with(features, 8, 0);
    // SAFETY: NOPs point at no memory.
    let (first, second, third) = unsafe {
        (
            driver.submit_op(nop())?,
            driver.submit_op(nop())?,
            driver.submit_op(nop())?,
        )
    };
    // SAFETY: the NOP is this test's own and points at no memory.
    unsafe { driver.orphan(first, Box::new(PanicOnReap)) };
    let before = driver.metrics().snapshot().cqes_reaped;
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    // Turns without running the deferred work: the panic must stay out of the turn.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while driver.metrics().snapshot().cqes_reaped - before < 3 {
        check!(
            std::time::Instant::now() < deadline,
            "the NOPs never completed"
        );
        // No waiting turn: on kernels without EXT_ARG a timed wait is itself a TIMEOUT
        // SQE, whose CQE would be counted beside the NOPs'.
        let turned = driver.turn(Wait::No);
        std::thread::sleep(Duration::from_millis(1));
        if let Err(e) = turned {
            std::panic::set_hook(previous);
            return Err(format!("turn failed: {e}").into());
        }
    }
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        support::run_deferred(&mut driver)
    }));
    std::panic::set_hook(previous);
    check!(
        !driver.ops().contains(first),
        "the panicked orphan's slot was kept after its final CQE"
    );
    let payload = ran.err().ok_or("the release step's panic was swallowed")?;
    check!(
        payload.downcast_ref::<&str>() == Some(&"release step panicked"),
        "another panic reached the owner"
    );
    for id in [second, third] {
        let cqe = wait_op(&mut driver, id)?;
        check!(cqe.res == 0, "NOP completed with {}", cqe.res);
    }
    // The three NOPs and perhaps the orphan's cancel: nothing dispatched twice.
    let reaped = driver.metrics().snapshot().cqes_reaped - before;
    check!(
        (3..=4).contains(&reaped),
        "{reaped} CQEs dispatched for 3 NOPs and a cancel"
    );
    check!(
        matches!(
            driver.poll_op(second, std::task::Waker::noop()),
            std::task::Poll::Ready(Err(_))
        ),
        "a CQE was delivered twice"
    );
    let started = std::time::Instant::now();
    drop(driver);
    check!(
        started.elapsed() < Duration::from_secs(1),
        "dropping the driver waited {:?}: a slot was left awaiting the kernel",
        started.elapsed()
    );
    Ok(Completion::Completed)
}

/// A multishot accept bounded to 2 unpolled CQEs stops accepting there: the driver
/// cancels it, the clients beyond wait in the kernel's backlog, not as fds here.
fn bounded_multishot_accept_stops_at_its_bound() -> Outcome {
    let features = match features() {
        Ok(f) => f,
        Err(skip) => return Ok(skip),
    };
    if let Some(skip) = lacks(&features, Feature::MultishotAccept) {
        return Ok(skip);
    }
    let mut driver = driver_with(features, 16, 0);
    let (l, addr) = listener()?;
    let fds_before = support::open_fds();
    // SAFETY: points at no memory; `l` outlives the op (it ends, and is reaped, below).
    let id =
        unsafe { driver.submit_op(opcode::AcceptMulti::new(types::Fd(l.as_raw_fd())).build())? };
    driver.bound_queue(id, 2);
    driver.turn(Wait::No)?;
    // Clients arrive one at a time, the driver turning in between. (A multishot accept
    // takes every connection already waiting in one go: a bound cannot split that.)
    let mut clients = Vec::new();
    for _ in 0..8 {
        clients.push(TcpStream::connect(addr)?);
        driver.turn(Wait::For(Duration::from_millis(5)))?;
        support::run_deferred(&mut driver);
    }
    let mut cqes = Vec::new();
    turn_until(&mut driver, Duration::from_secs(5), |d| {
        while let std::task::Poll::Ready(cqe) = d.poll_op(id, std::task::Waker::noop()) {
            cqes.push(cqe.expect("accept CQE"));
            if !cqes.last().expect("just pushed").is_more() {
                return true;
            }
        }
        false
    })?;
    let accepted: Vec<i32> = cqes.iter().filter(|c| c.res >= 0).map(|c| c.res).collect();
    let last = cqes.last().expect("the final CQE");
    check!(
        last.res == -libc::ECANCELED && !last.is_more(),
        "the bounded accept ended with {last:?}"
    );
    // The cancel goes in with the next enter: a connection may slip in before it lands.
    check!(
        (2..=3).contains(&accepted.len()),
        "{} of 8 connections accepted under a bound of 2",
        accepted.len()
    );
    for fd in accepted {
        // SAFETY: each is a connection this test accepted and owns alone.
        unsafe { ring_core::release::close_quietly(fd) };
    }
    drop(clients);
    check!(support::open_fds() == fds_before, "fds left open");
    Ok(Completion::Completed)
}

/// The driver keeps a registered pool alive after every handle of the caller's is gone,
/// until the buffers are unregistered: the kernel may write into any registered chunk.
fn registered_buffers_live_as_long_as_their_registration() -> Outcome {
    let features = match features() {
        Ok(f) => f,
        Err(skip) => return Ok(skip),
    };
    let mut driver = driver_with(features, 8, 0);
    let bufs = driver.register_buffers(2, 4096)?;
    let chunk = bufs.alloc().expect("a chunk");
    let ptr = chunk.as_ptr();
    drop(chunk);
    drop(bufs);
    // A READ_FIXED into chunk 0 by index alone: what a kernel write to it looks like.
    let file = std::fs::File::open("/proc/self/stat")?;
    let read = opcode::ReadFixed::new(types::Fd(file.as_raw_fd()), ptr.cast_mut(), 16, 0).build();
    // SAFETY: the driver holds the pool (this test checks exactly that), and `file`
    // outlives the op, which is waited for.
    let id = unsafe { driver.submit_op(read)? };
    let cqe = wait_op(&mut driver, id)?;
    check!(
        cqe.res == 16,
        "READ_FIXED into the kept pool gave {}",
        cqe.res
    );
    driver.unregister_buffers()?;
    check!(
        driver.unregister_buffers().is_err(),
        "a second unregister succeeded"
    );
    Ok(Completion::Completed)
}

/// One NOP through `driver`, waited for with the wait's kinds of enter: a plain wait, a
/// timed one (EXT_ARG's argument, or a timeout SQE before 5.11), and a turn that does not
/// wait.
fn nop_round_trips(driver: &mut Driver) -> Outcome {
    for wait in [Wait::Forever, Wait::For(Duration::from_secs(5)), Wait::No] {
        // SAFETY: a NOP points at no memory.
        let id = unsafe { driver.submit_op(nop())? };
        driver.turn(wait)?;
        let cqe = wait_op(driver, id)?;
        check!(cqe.res == 0, "NOP answered {}", cqe.res);
    }
    Ok(Completion::Completed)
}

/// Where the kernel has `IORING_REGISTER_RING_FDS` (5.18), a driver registers its ring's fd
/// and enters by that index; masked off, it enters by fd. Every kind of enter works both
/// ways.
fn enters_name_the_ring_by_its_registered_index() -> Outcome {
    let features = match features() {
        Ok(f) => f,
        Err(skip) => return Ok(skip),
    };
    if let Some(skip) = lacks(&features, Feature::RegisteredRing) {
        return Ok(skip);
    }
    let mut driver = driver_with(features.clone(), 8, 0);
    check!(
        driver.is_ring_fd_registered(),
        "the ring's fd was not registered"
    );
    nop_round_trips(&mut driver)?;
    let mask = ring_core::probe::FeatureMask::default().hide(Feature::RegisteredRing);
    let mut by_fd = driver_with(features.masked(&mask), 8, 0);
    check!(
        !by_fd.is_ring_fd_registered(),
        "registered though the feature was masked off"
    );
    nop_round_trips(&mut by_fd)
}

/// A thread may hold 16 registered rings: each driver gives its index back when dropped,
/// so a thread that makes driver after driver keeps registering them, and drivers beyond
/// 16 alive at once enter by fd and work as well.
fn dropped_drivers_give_their_ring_index_back() -> Outcome {
    let features = match features() {
        Ok(f) => f,
        Err(skip) => return Ok(skip),
    };
    if let Some(skip) = lacks(&features, Feature::RegisteredRing) {
        return Ok(skip);
    }
    for round in 0..40 {
        let mut driver = driver_with(features.clone(), 4, 0);
        check!(
            driver.is_ring_fd_registered(),
            "driver {round} made one after another was not registered"
        );
        nop_round_trips(&mut driver)?;
    }
    let mut alive: Vec<Driver> = (0..20)
        .map(|_| driver_with(features.clone(), 4, 0))
        .collect();
    let registered = alive.iter().filter(|d| d.is_ring_fd_registered()).count();
    check!(
        (1..=16).contains(&registered),
        "{registered} of 20 drivers alive at once were registered (a thread holds 16)"
    );
    for driver in &mut alive {
        nop_round_trips(driver)?;
    }
    Ok(Completion::Completed)
}

const FORK_CHILD_TEST: &str = "fork_child";
const CLONE_CHILD_TEST: &str = "clone_child";

/// A registered ring index is the registering thread's: a process forked from it has none
/// of its parent's registrations, and the first ring it registers gets the same index. A
/// driver it inherited must then not enter that ring (taking the child's SQEs for its
/// own) but its own, by fd, as before it registered. Run in a child process of its own,
/// single-threaded, so that the fork inside it is safe.
fn a_driver_inherited_through_fork_never_enters_the_childs_ring() -> Outcome {
    child_outcome(FORK_CHILD_TEST, child_command(FORK_CHILD_TEST))
}

/// The same through a raw `clone(2)`, which runs no `pthread_atfork` handler (review AF:
/// a fork counter kept by such a handler missed it).
fn a_driver_inherited_through_a_raw_clone_never_enters_the_childs_ring() -> Outcome {
    child_outcome(CLONE_CHILD_TEST, child_command(CLONE_CHILD_TEST))
}

fn fork_child() -> Outcome {
    // SAFETY: see `forked_child_check`.
    forked_child_check(|| unsafe { libc::fork() })
}

fn clone_child() -> Outcome {
    // SAFETY: a fork by the raw syscall: a copy of the address space (no CLONE_VM), the
    // child on a copy of this stack (stack argument 0), SIGCHLD to the parent at its exit.
    forked_child_check(|| unsafe {
        libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_long, 0, 0, 0, 0) as libc::pid_t
    })
}

/// Makes a driver, forks with `fork`, and checks in the child that the inherited driver
/// leaves the child's own ring alone (see `in_forked_child`).
fn forked_child_check(fork: impl FnOnce() -> libc::pid_t) -> Outcome {
    let features = match features() {
        Ok(f) => f,
        Err(skip) => return Ok(skip),
    };
    if let Some(skip) = lacks(&features, Feature::RegisteredRing) {
        return Ok(skip);
    }
    let mut inherited = driver_with(features.clone(), 4, 0);
    check!(inherited.is_ring_fd_registered(), "not registered");
    // The process is single-threaded (the test harness runs this child trial on its main
    // thread); the forked child only runs this function's code and `_exit`s.
    match fork() {
        -1 => Err(std::io::Error::last_os_error().into()),
        0 => {
            let clean = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                in_forked_child(&features, &mut inherited)
            }));
            // SAFETY: ends the forked child without running the parent's destructors (its
            // drivers, which are the parent's to drop).
            unsafe { libc::_exit(if matches!(clean, Ok(true)) { 0 } else { 1 }) }
        }
        pid => {
            let mut status = 0;
            // SAFETY: waits for the child just forked; `status` is a valid out-pointer.
            let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
            check!(
                waited == pid,
                "waitpid: {}",
                std::io::Error::last_os_error()
            );
            check!(
                libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                "the forked child's inherited driver entered the child's own ring (status {status})"
            );
            nop_round_trips(&mut inherited)
        }
    }
}

/// In the forked child: a ring of its own (registered at the index the parent's has), a
/// NOP queued on it, then a turn of the inherited driver, which must leave that NOP alone.
fn in_forked_child(features: &ring_core::probe::Features, inherited: &mut Driver) -> bool {
    let mut own = driver_with(features.clone(), 4, 0);
    // SAFETY: a NOP points at no memory.
    let queued = unsafe { own.submit_op(nop()) };
    // SAFETY: as above.
    let _ = unsafe { inherited.submit_op(nop()) };
    // By fd, the parent's ring refuses a second issuer (EEXIST) or runs the NOP: either is
    // fine. By the parent's index, the child's own ring would take `own`'s NOP.
    let _ = inherited.turn(Wait::No);
    let untouched = own.pending_sqes() == 1 && !inherited.is_ring_fd_registered();
    let own_works = queued.is_ok() && nop_round_trips(&mut own).is_ok();
    // Leaked: the inherited ring's ops and the child's own are for `_exit` to end.
    std::mem::forget(own);
    untouched && own_works
}
