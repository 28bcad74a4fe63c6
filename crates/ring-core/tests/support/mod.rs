//! Shared test harness: live-kernel tests that report "ignored, <reason>" when this kernel
//! (or the `RING_FEATURES` profile) lacks what they need, instead of passing silently.

#![allow(dead_code)]

use std::process::Command;
use std::task::Waker;
use std::time::{Duration, Instant};

use libtest_mimic::{Completion, Failed, Trial};
use ring_core::cqe::Cqe;
use ring_core::driver::{Driver, DriverConfig, Wait};
use ring_core::lifecycle::Deferred;
use ring_core::probe::{Feature, FeatureMask, Features, KernelVersion};
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

/// Unwraps a `Result<T, Completion>` (such as [`features`]'s), returning `Ok(ignored)` from
/// the test on `Err`.
#[macro_export]
macro_rules! or_skip {
    ($res:expr) => {
        match $res {
            Ok(value) => value,
            Err(skip) => return Ok(skip),
        }
    };
}

/// Returns `Ok(ignored)` from the test when an `Option<Completion>` (such as [`lacks`]'s) is
/// `Some`.
#[macro_export]
macro_rules! skip_if {
    ($skip:expr) => {
        if let Some(skip) = $skip {
            return Ok(skip);
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
        run_deferred(driver);
    }
    Ok(())
}

/// Wakes and drops what the driver deferred, as its owner does after each turn.
pub fn run_deferred(driver: &mut Driver) {
    let mut deferred = Deferred::default();
    driver.take_deferred(&mut deferred);
    deferred.run();
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

/// The kernel `features` stand for: the host's version, or the oldest profile version named in
/// its mask label (`RING_FEATURES=5.11`); `None` when the release does not parse.
pub fn effective_version(features: &Features) -> Option<KernelVersion> {
    let profiles = features
        .mask_label()
        .into_iter()
        .flat_map(|label| label.split(['+', ',']))
        .filter_map(|token| token.trim().parse::<KernelVersion>().ok());
    features.kernel_version().into_iter().chain(profiles).min()
}

/// Returns `Some(ignored)` when `features` stand for a kernel older than `since`: for
/// capabilities that neither a `Feature` nor an opcode shows (direct descriptors, sparse file
/// tables).
pub fn lacks_kernel(features: &Features, since: &str, what: &str) -> Option<Completion> {
    let since: KernelVersion = since.parse().expect("a kernel version like 5.15");
    let version = effective_version(features)?;
    (version < since).then(|| {
        Completion::ignored_with(format!(
            "needs {what} (Linux {since}+), absent on this kernel/profile ({version})"
        ))
    })
}

/// A command that runs only the child-only trial `name` of this test binary (one registered
/// with `.with_ignored_flag(true)`, which ordinary runs list as ignored and never run).
pub fn child_command(name: &str) -> Command {
    let exe = std::env::current_exe().expect("test binary path");
    let mut command = Command::new(exe);
    command.args([name, "--exact", "--ignored", "--test-threads=1"]);
    command.args(["--color=never", "--format=pretty"]);
    command
}

/// Runs `command` (from [`child_command`]`(name)`) and reports what the child trial reported:
/// `ok` passes, `ignored (reason)` is ignored with the reason, and anything else (a failed
/// check, a panic, a crash, or no such trial run at all) fails with the child's output.
pub fn child_outcome(name: &str, mut command: Command) -> Outcome {
    let out = command
        .output()
        .map_err(|e| format!("spawn child {name}: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = || {
        let stderr = String::from_utf8_lossy(&out.stderr);
        format!("child {name} ({}):\n{stdout}\n{stderr}", out.status)
    };
    let prefix = format!("test {name} ... ");
    let verdict = stdout.lines().find_map(|line| line.strip_prefix(&prefix));
    let ran_one = |summary: &str| stdout.contains(summary);
    match verdict {
        Some("ok") if out.status.success() && ran_one(" 1 passed; 0 failed; 0 ignored") => {
            Ok(Completion::Completed)
        }
        Some(v) if out.status.success() && ran_one(" 0 passed; 0 failed; 1 ignored") => {
            let reason = v
                .strip_prefix("ignored (")
                .and_then(|r| r.strip_suffix(')'));
            let reason = reason.ok_or_else(report)?;
            Ok(Completion::ignored_with(format!("child: {reason}")))
        }
        _ => Err(report().into()),
    }
}
