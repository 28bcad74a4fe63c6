//! Probing and ring setup against the live kernel (written on 6.18; older kernels skip what
//! they cannot have). Tests of the probe itself read the unmasked probe and apply masks
//! themselves; tests that build rings use the `RING_FEATURES` profile, so `RING_FEATURES=5.11`
//! builds the rings a 5.11 kernel would get. Tests that need a fresh process or a changed
//! environment (the probe's first-call cost, `RING_FEATURES`, a seccomp filter) re-run this
//! binary on one child-only trial, registered as ignored so that only its parent runs it.

#[macro_use]
mod support;

use std::env;
use std::ptr;
use std::time::{Duration, Instant};

use io_uring::opcode;
use libtest_mimic::{Arguments, Completion};
use ring_core::errno::errno_name;
use ring_core::probe::{opcode_since, Feature, FeatureMask, Features, KernelVersion, OPCODE_COUNT};
use ring_core::setup::{build_ring, RingConfig, SetupCause, SetupError};
use support::{child_command, child_outcome, features, lacks, lacks_kernel, trial, Outcome};

fn main() {
    let args = Arguments::from_args();
    let tests = vec![
        trial(
            "probe_finds_everything_the_kernel_version_promises",
            probe_finds_everything_the_kernel_version_promises,
        ),
        trial(
            "probe_on_6_18_has_the_runtime_features",
            probe_on_6_18_has_the_runtime_features,
        ),
        trial("probe_is_cached", probe_is_cached),
        trial("first_probe_is_fast", first_probe_is_fast),
        trial("child_first_probe", child_first_probe).with_ignored_flag(true),
        trial(
            "profile_5_11_masks_newer_features_on_this_host",
            profile_5_11_masks_newer_features_on_this_host,
        ),
        trial("profile_5_1_masks_accept", profile_5_1_masks_accept),
        trial(
            "feature_list_masks_only_what_it_names",
            feature_list_masks_only_what_it_names,
        ),
        trial("ring_features_env_is_read", ring_features_env_is_read),
        trial("child_from_env", child_from_env).with_ignored_flag(true),
        trial(
            "default_ring_uses_coop_single_issuer_and_defer",
            default_ring_uses_coop_single_issuer_and_defer,
        ),
        trial(
            "masked_defer_taskrun_is_not_used",
            masked_defer_taskrun_is_not_used,
        ),
        trial(
            "profile_5_11_ring_uses_no_taskrun_flags",
            profile_5_11_ring_uses_no_taskrun_flags,
        ),
        trial("cq_size_is_honoured", cq_size_is_honoured),
        trial(
            "sqpoll_is_used_only_on_request",
            sqpoll_is_used_only_on_request,
        ),
        trial(
            "setup_errors_name_cause_and_fix",
            setup_errors_name_cause_and_fix,
        ),
        trial(
            "seccomp_blocked_io_uring_is_reported",
            seccomp_blocked_io_uring_is_reported,
        ),
        trial("child_seccomp", child_seccomp).with_ignored_flag(true),
    ];
    libtest_mimic::run(&args, tests).exit();
}

/// The probe's budget for its first call, in this process.
const PROBE_BUDGET: Duration = Duration::from_millis(100);

fn v(s: &str) -> KernelVersion {
    s.parse().expect("a kernel version")
}

/// The host's unmasked features, or why the test is ignored.
fn host() -> Result<&'static Features, Completion> {
    Features::probe()
        .map_err(|err| Completion::ignored_with(format!("io_uring is unavailable here: {err}")))
}

/// The host's unmasked features when its kernel is at least `min`.
fn host_at_least(min: &str) -> Result<&'static Features, Completion> {
    let features = host()?;
    match features.kernel_version() {
        Some(version) if version >= v(min) => Ok(features),
        _ => Err(Completion::ignored_with(format!(
            "needs a Linux {min}+ host, have {}",
            features.kernel_release()
        ))),
    }
}

fn probe_finds_everything_the_kernel_version_promises() -> Outcome {
    let features = or_skip!(host());
    let version = features.kernel_version().expect("uname release parses");
    for &f in Feature::ALL {
        if f.since() <= version {
            assert!(
                features.has(f),
                "{} (since {}) missing:\n{}",
                f.name(),
                f.since(),
                features.table()
            );
        }
        assert_eq!(features.trial_errno(f), None, "{} trial failed", f.name());
    }
    for op in (0..OPCODE_COUNT).filter(|&op| opcode_since(op).is_some_and(|s| s <= version)) {
        assert!(features.has_opcode(op), "opcode {op} missing");
    }
    assert!(!features.is_opcodes_inferred());
    assert_eq!(features.mask_label(), None);
    Ok(Completion::Completed)
}

fn probe_on_6_18_has_the_runtime_features() -> Outcome {
    let features = or_skip!(host_at_least("6.18"));
    for f in [
        Feature::MultishotAccept,
        Feature::MultishotRecv,
        Feature::MultishotPoll,
        Feature::PbufRing,
        Feature::PbufRingInc,
        Feature::SendZc,
        Feature::DeferTaskrun,
        Feature::ExtArg,
        Feature::NoSqArray,
    ] {
        assert!(features.has(f), "{}", f.name());
    }
    assert_eq!(features.feat_raw() & 0x3ffff, 0x3ffff);
    assert!(features.has_opcode(opcode::SendZc::CODE) && features.has_opcode(OPCODE_COUNT - 1));
    Ok(Completion::Completed)
}

fn probe_is_cached() -> Outcome {
    let first = or_skip!(host());
    let again = Features::probe().expect("cached success");
    assert!(ptr::eq(first, again));
    Ok(Completion::Completed)
}

/// Times the probe in a child process, where no other test has probed yet. A pause of the
/// machine (a VM's can pass the budget) fails one child; a slow probe is slow every time,
/// so only three slow children fail.
fn first_probe_is_fast() -> Outcome {
    let mut last = run_child("child_first_probe", &[]);
    for _ in 1..3 {
        if last.is_ok() {
            break;
        }
        last = run_child("child_first_probe", &[]);
    }
    last
}

/// The child of [`first_probe_is_fast`].
fn child_first_probe() -> Outcome {
    let start = Instant::now();
    let probed = Features::probe();
    let took = start.elapsed();
    if let Err(err) = probed {
        let reason = format!("io_uring is unavailable here: {err}");
        return Ok(Completion::ignored_with(reason));
    }
    eprintln!("first probe took {} us", took.as_micros());
    assert!(took < PROBE_BUDGET, "first probe took {took:?}");
    // The second call, the first the cache answers (a pause here fails this child only).
    let start = Instant::now();
    Features::probe().expect("cached");
    let again = start.elapsed();
    assert!(
        again < Duration::from_millis(1),
        "a cached probe took {again:?}"
    );
    Ok(Completion::Completed)
}

fn profile_5_11_masks_newer_features_on_this_host() -> Outcome {
    let host = or_skip!(host_at_least("5.19"));
    let masked = host.masked(&FeatureMask::profile(v("5.11")));
    for f in [
        Feature::MultishotAccept,
        Feature::PbufRing,
        Feature::CoopTaskrun,
    ] {
        assert!(!masked.has(f) && masked.is_masked(f), "{}", f.name());
    }
    assert!(!masked.has_opcode(opcode::Socket::CODE));
    assert!(masked.has(Feature::ExtArg) && masked.has_opcode(opcode::Accept::CODE));
    assert!(
        host.has(Feature::MultishotAccept),
        "the host itself is untouched"
    );
    let table = masked.table().to_string();
    assert!(table.contains("RING_FEATURES=5.11"), "{table}");
    Ok(Completion::Completed)
}

fn profile_5_1_masks_accept() -> Outcome {
    let host = or_skip!(host());
    let masked = host.masked(&FeatureMask::profile(v("5.1")));
    assert!(!masked.has_opcode(opcode::Accept::CODE));
    assert!(masked.has_opcode(opcode::Readv::CODE));
    Ok(Completion::Completed)
}

fn feature_list_masks_only_what_it_names() -> Outcome {
    let host = or_skip!(host_at_least("5.19"));
    let mask = FeatureMask::parse("multishot_accept,-pbuf_ring").expect("valid list");
    let masked = host.masked(&mask);
    assert!(!masked.has(Feature::MultishotAccept) && !masked.has(Feature::PbufRing));
    assert!(masked.has(Feature::CoopTaskrun) && masked.has_opcode(opcode::Socket::CODE));
    let err = FeatureMask::parse("multishot_acept").unwrap_err();
    assert!(
        err.contains("multishot_accept"),
        "the error lists valid names: {err}"
    );
    Ok(Completion::Completed)
}

fn ring_features_env_is_read() -> Outcome {
    let cases = [
        ("5.11", "5.11"),
        (
            "-multishot_accept,pbuf_ring",
            "-multishot_accept,-pbuf_ring",
        ),
        ("", "absent"),
        ("bogus", "error"),
    ];
    for (value, expect) in cases {
        let env = [("RING_FEATURES", value), ("EXPECT_MASK", expect)];
        let done = run_child("child_from_env", &env)
            .map_err(|e| format!("RING_FEATURES={value:?}: {}", e.message().unwrap_or("")))?;
        if !matches!(done, Completion::Completed) {
            return Ok(done);
        }
    }
    Ok(Completion::Completed)
}

/// The child of [`ring_features_env_is_read`].
fn child_from_env() -> Outcome {
    let Ok(expect) = env::var("EXPECT_MASK") else {
        return Ok(Completion::ignored_with(
            "runs only as a child of ring_features_env_is_read",
        ));
    };
    let got = match FeatureMask::from_env() {
        Ok(Some(mask)) => mask.label().to_string(),
        Ok(None) => "absent".to_string(),
        Err(err) => {
            assert!(err.contains("bogus"), "{err}");
            "error".to_string()
        }
    };
    assert_eq!(got, expect);
    Ok(Completion::Completed)
}

fn default_ring_uses_coop_single_issuer_and_defer() -> Outcome {
    let features = or_skip!(features());
    for f in [
        Feature::CoopTaskrun,
        Feature::TaskrunFlag,
        Feature::SingleIssuer,
        Feature::DeferTaskrun,
        Feature::SubmitAll,
    ] {
        skip_if!(lacks(&features, f));
    }
    let built = build_ring(&features, &RingConfig::default()).expect("ring");
    let flags = built.flags;
    assert!(flags.coop_taskrun && flags.taskrun_flag, "{flags}");
    assert!(
        flags.single_issuer && flags.defer_taskrun && flags.submit_all,
        "{flags}"
    );
    assert!(!flags.sqpoll);
    assert_eq!(built.ring.params().sq_entries(), 256);
    assert_eq!(built.ring.params().cq_entries(), 4096);
    assert_nop_completes(built.ring);
    Ok(Completion::Completed)
}

/// A NOP round trip proves the flags make a working ring (DEFER_TASKRUN: reaped on enter).
fn assert_nop_completes(mut ring: io_uring::IoUring) {
    let nop = opcode::Nop::new().build().user_data(42);
    // SAFETY: a NOP references no memory.
    unsafe { ring.submission().push(&nop) }.expect("SQ has room");
    ring.submit_and_wait(1).expect("enter");
    let cqe = ring.completion().next().expect("a CQE");
    assert_eq!((cqe.user_data(), cqe.result()), (42, 0));
}

fn masked_defer_taskrun_is_not_used() -> Outcome {
    let features = or_skip!(features());
    skip_if!(lacks(&features, Feature::SingleIssuer));
    // Hiding DEFER_TASKRUN shows something only where it would otherwise be used.
    skip_if!(lacks(&features, Feature::DeferTaskrun));
    let features = features.masked(&FeatureMask::default().hide(Feature::DeferTaskrun));
    let built = build_ring(&features, &RingConfig::default()).expect("ring");
    assert!(
        !built.flags.defer_taskrun && built.flags.single_issuer,
        "{}",
        built.flags
    );
    assert_nop_completes(built.ring);
    Ok(Completion::Completed)
}

fn profile_5_11_ring_uses_no_taskrun_flags() -> Outcome {
    let features = or_skip!(features()).masked(&FeatureMask::profile(v("5.11")));
    let built = build_ring(&features, &RingConfig::default()).expect("ring");
    assert_eq!(built.flags.to_string(), "none");
    assert_nop_completes(built.ring);
    Ok(Completion::Completed)
}

fn cq_size_is_honoured() -> Outcome {
    let features = or_skip!(features());
    skip_if!(lacks_kernel(&features, "5.5", "IORING_SETUP_CQSIZE"));
    for (entries, cq_entries, sq_want, cq_want) in [
        (64, 1024, 64, 1024),
        (100, 1000, 128, 1024),
        (8, 0, 8, 4096),
    ] {
        let config = RingConfig {
            entries,
            cq_entries,
            ..RingConfig::default()
        };
        let built = build_ring(&features, &config).expect("ring");
        let params = built.ring.params();
        assert_eq!(
            (params.sq_entries(), params.cq_entries()),
            (sq_want, cq_want)
        );
    }
    Ok(Completion::Completed)
}

fn sqpoll_is_used_only_on_request() -> Outcome {
    let features = or_skip!(features());
    if !features.has(Feature::Sqpoll) {
        let why = features
            .trial_errno(Feature::Sqpoll)
            .map_or("absent", errno_name);
        let reason = format!("needs SQPOLL, unavailable here (trial probe: {why})");
        return Ok(Completion::ignored_with(reason));
    }
    let config = RingConfig {
        sqpoll_idle_ms: Some(10),
        ..RingConfig::default()
    };
    let built = build_ring(&features, &config).expect("ring");
    assert!(built.flags.sqpoll && !built.flags.coop_taskrun && !built.flags.defer_taskrun);
    assert_nop_completes(built.ring);
    Ok(Completion::Completed)
}

fn setup_errors_name_cause_and_fix() -> Outcome {
    let cases = [
        (
            libc::EPERM,
            SetupCause::Blocked,
            ["EPERM", "seccomp", "io_uring_disabled=0"],
        ),
        (
            libc::ENOSYS,
            SetupCause::NoIoUring,
            ["ENOSYS", "CONFIG_IO_URING", "seccomp"],
        ),
        (
            libc::ENOMEM,
            SetupCause::MemLock,
            ["ENOMEM", "RLIMIT_MEMLOCK", "ulimit -l"],
        ),
    ];
    for (errno, cause, words) in cases {
        let err = SetupError::from_errno(errno);
        assert_eq!(err.cause, cause);
        let text = err.to_string();
        for word in words {
            assert!(text.contains(word), "{word:?} missing from: {text}");
        }
        assert!(text.contains(err.fix()));
    }
    Ok(Completion::Completed)
}

fn seccomp_blocked_io_uring_is_reported() -> Outcome {
    for (errno, cause) in [(libc::EPERM, "Blocked"), (libc::ENOSYS, "NoIoUring")] {
        let errno_text = errno.to_string();
        let env = [
            ("SECCOMP_ERRNO", errno_text.as_str()),
            ("EXPECT_CAUSE", cause),
        ];
        let done = run_child("child_seccomp", &env)
            .map_err(|e| format!("errno {errno}: {}", e.message().unwrap_or("")))?;
        if !matches!(done, Completion::Completed) {
            return Ok(done);
        }
    }
    Ok(Completion::Completed)
}

/// The child of [`seccomp_blocked_io_uring_is_reported`]; it filters io_uring out of its
/// own process, so it refuses to run anywhere else.
fn child_seccomp() -> Outcome {
    let (Ok(errno), Ok(expect)) = (env::var("SECCOMP_ERRNO"), env::var("EXPECT_CAUSE")) else {
        return Ok(Completion::ignored_with(
            "runs only as a child of seccomp_blocked_io_uring_is_reported",
        ));
    };
    let errno: u32 = errno.parse().expect("a number");
    if let Err(err) = deny_io_uring(errno) {
        let reason = format!("cannot install a seccomp filter: {err}");
        return Ok(Completion::ignored_with(reason));
    }
    let err = Features::probe().expect_err("io_uring is filtered");
    assert_eq!(format!("{:?}", err.cause), expect);
    eprintln!("{err}");
    let err = build_ring(&Features::from_parts(&[], &[]), &RingConfig::default()).err();
    assert_eq!(err.map(|e| e.errno), Some(errno as i32));
    Ok(Completion::Completed)
}

/// Makes `io_uring_setup`, `io_uring_enter` and `io_uring_register` (425-427) fail with
/// `errno` for this thread, as Docker's (EPERM) or Podman's (ENOSYS) default profiles do.
fn deny_io_uring(errno: u32) -> std::io::Result<()> {
    const LD_NR: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const JGE: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
    const JGT: u16 = (libc::BPF_JMP | libc::BPF_JGT | libc::BPF_K) as u16;
    const RET: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    let op = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let mut filter = [
        op(LD_NR, 0, 0, 0),
        op(JGE, 0, 2, 425),
        op(JGT, 1, 0, 427),
        op(RET, 0, 0, libc::SECCOMP_RET_ERRNO | errno),
        op(RET, 0, 0, libc::SECCOMP_RET_ALLOW),
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_mut_ptr(),
    };
    // SAFETY: PR_SET_NO_NEW_PRIVS takes plain integers and only restricts this process.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mode = libc::SECCOMP_MODE_FILTER as libc::c_ulong;
    // SAFETY: `prog` points at `filter`, both alive for the call; the kernel copies the program.
    if unsafe { libc::prctl(libc::PR_SET_SECCOMP, mode, ptr::addr_of!(prog)) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Runs the child-only trial `test` of this binary in a fresh process with `envs` set (and
/// `RING_FEATURES` unset unless `envs` sets it); its outcome is this test's.
fn run_child(test: &str, envs: &[(&str, &str)]) -> Outcome {
    let mut command = child_command(test);
    command.env_remove("RING_FEATURES");
    command.envs(envs.iter().copied());
    child_outcome(test, command)
}
