//! Shared test harness: live-kernel tests that report "ignored, <reason>" when this kernel
//! (or the `RING_FEATURES` profile) lacks what they need, instead of passing silently.

#![allow(dead_code)]

use std::task::Waker;
use std::time::{Duration, Instant};

use libtest_mimic::{Completion, Failed, Trial};
use ring_core::cqe::Cqe;
use ring_core::driver::{Driver, DriverConfig, Wait};
use ring_core::probe::{Feature, FeatureMask, Features};
use ring_core::setup::RingConfig;
use ring_core::user_data::OpId;

/// What a live test returns: passed, ignored with a reason, or failed.
pub type Outcome = Result<Completion, Failed>;

/// A test that may report itself ignored at run time.
pub fn trial(name: &str, f: fn() -> Outcome) -> Trial {
    Trial::ignorable_test(name, f)
}

/// Fails the test with a message unless `cond` holds.
#[macro_export]
macro_rules! check {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+).into());
        }
    };
}

/// The probed features, masked by `RING_FEATURES` when set; `Err` = io_uring unavailable.
pub fn features() -> Result<Features, Completion> {
    let probed = Features::probe()
        .map_err(|e| Completion::ignored_with(format!("io_uring unavailable: {e}")))?;
    match FeatureMask::from_env() {
        Ok(Some(mask)) => Ok(probed.masked(&mask)),
        Ok(None) => Ok(probed.clone()),
        Err(e) => panic!("bad RING_FEATURES: {e}"),
    }
}

/// Returns `Some(ignored)` when `features` lacks `feature`.
pub fn lacks(features: &Features, feature: Feature) -> Option<Completion> {
    (!features.has(feature)).then(|| {
        Completion::ignored_with(format!(
            "needs {} (Linux {}+), absent on this kernel/profile",
            feature.name(),
            feature.since()
        ))
    })
}

/// Returns `Some(ignored)` when `features` lacks the opcode.
pub fn lacks_opcode(features: &Features, opcode: u8) -> Option<Completion> {
    (!features.has_opcode(opcode)).then(|| {
        Completion::ignored_with(format!(
            "needs opcode {} (Linux {}+), absent on this kernel/profile",
            ring_core::probe::opcode_name(opcode),
            ring_core::probe::opcode_since(opcode).map_or("?".into(), |v| v.to_string())
        ))
    })
}

/// A driver on `features` with `entries` SQ entries and `cq_entries` (0 = auto).
pub fn driver_with(features: Features, entries: u32, cq_entries: u32) -> Driver {
    let config = DriverConfig {
        ring: RingConfig {
            entries,
            cq_entries,
            ..RingConfig::default()
        },
        features,
    };
    Driver::new(&config).expect("ring setup on a kernel whose probe succeeded")
}

/// Turns the driver until `done` holds, failing after `limit`.
pub fn turn_until(
    driver: &mut Driver,
    limit: Duration,
    mut done: impl FnMut(&mut Driver) -> bool,
) -> Result<(), Failed> {
    let deadline = Instant::now() + limit;
    while !done(driver) {
        if Instant::now() > deadline {
            return Err(format!("condition not reached within {limit:?}").into());
        }
        driver
            .turn(Wait::For(Duration::from_millis(10)))
            .map_err(|e| format!("turn failed: {e}"))?;
    }
    Ok(())
}

/// Turns until op `id` yields a CQE, and returns it.
pub fn wait_op(driver: &mut Driver, id: OpId) -> Result<Cqe, Failed> {
    let mut got = None;
    turn_until(driver, Duration::from_secs(5), |d| {
        if let std::task::Poll::Ready(r) = d.poll_op(id, Waker::noop()) {
            got = Some(r);
        }
        got.is_some()
    })?;
    got.expect("set by the loop")
        .map_err(|e| format!("poll failed: {e}").into())
}

/// Open fds of this process.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0)
}
