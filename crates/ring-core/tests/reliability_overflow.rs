//! CQ overflow at scale: 100,000 ops through a 16-entry SQ into a 32-entry CQ, every
//! completion posted at once while nobody drains. The driver must deliver all 100,000, each to its
//! own op, and lose none (the kernel parks the excess on its overflow list, NODROP 5.5+).

#[macro_use]
mod support;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use io_uring::{opcode, types};
use libtest_mimic::{Arguments, Completion};
use ring_core::driver::{Driver, DriverConfig, Wait};
use ring_core::probe::Feature;
use ring_core::setup::RingConfig;
use ring_core::user_data::OpId;
use support::{features, lacks, trial, Outcome};

fn main() {
    let mut args = Arguments::from_args();
    args.test_threads.get_or_insert(1);
    let tests = vec![trial(
        "cq_overflow_100k_ops_loses_nothing",
        cq_overflow_100k_ops_loses_nothing,
    )];
    libtest_mimic::run(&args, tests).exit();
}

fn cq_overflow_100k_ops_loses_nothing() -> Outcome {
    const OPS: usize = 100_000;
    let features = or_skip!(features());
    skip_if!(lacks(&features, Feature::NoDrop));
    // Without single_issuer there is no DEFER_TASKRUN, which would post completions only
    // as far as the CQ has room and so never overflow (see tests/driver.rs).
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
    // Every op is a poll on one eventfd: a single write completes all 100,000 at once,
    // however long submitting them took (under AddressSanitizer, ten times longer).
    // SAFETY: no pointers; the result is checked.
    let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    check!(efd >= 0, "eventfd: {}", std::io::Error::last_os_error());
    // SAFETY: a fresh fd nobody else owns.
    let efd = unsafe { OwnedFd::from_raw_fd(efd) };
    let poll = || opcode::PollAdd::new(types::Fd(efd.as_raw_fd()), libc::POLLIN as u32).build();
    let ids: Vec<OpId> = (0..OPS)
        // SAFETY: a POLL_ADD points at no memory; `efd` outlives the driver's shutdown.
        .map(|_| unsafe { driver.submit_op(poll()) })
        .collect::<Result<_, _>>()?;
    driver.turn(Wait::No)?;
    let one = 1u64.to_ne_bytes();
    // SAFETY: writes 8 bytes from a live buffer to an eventfd we own.
    let wrote = unsafe { libc::write(efd.as_raw_fd(), one.as_ptr().cast(), 8) };
    check!(
        wrote == 8,
        "eventfd write: {}",
        std::io::Error::last_os_error()
    );
    // The kernel posts the completions while nobody drains the 32-entry CQ.
    std::thread::sleep(Duration::from_millis(200));
    let mut seen = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen < OPS && Instant::now() < deadline {
        driver.turn(Wait::For(Duration::from_millis(10)))?;
        for &id in &ids[seen..] {
            let std::task::Poll::Ready(cqe) = driver.poll_op(id, std::task::Waker::noop()) else {
                break;
            };
            let cqe = cqe?;
            check!(
                cqe.res > 0 && cqe.res & libc::POLLIN as i32 != 0,
                "op {seen} completed with {}",
                cqe.res
            );
            seen += 1;
        }
    }
    let m = driver.metrics().snapshot();
    check!(seen == OPS, "{seen} of {OPS} completions delivered ({m})");
    check!(
        m.cq_overflows > 0,
        "the CQ never overflowed ({m}): the test tested nothing"
    );
    check!(m.sq_full > 0, "the SQ never filled ({m})");
    check!(
        m.cqes_lost == 0 && m.stale_cqes == 0,
        "lost or stale CQEs: {m}"
    );
    check!(
        driver.in_flight() == 0,
        "{} ops left in flight",
        driver.in_flight()
    );
    eprintln!("{OPS} ops: {m}");
    Ok(Completion::Completed)
}
