//! Ring setup: the best setup flags the (masked) [`Features`] allow, and why setup failed.
//!
//! Minimum kernel: 5.1. Each flag is used only when probed present (SUBMIT_ALL 5.18,
//! COOP_TASKRUN/TASKRUN_FLAG 5.19, SINGLE_ISSUER 6.0, DEFER_TASKRUN 6.1) and dropped one by one
//! if the kernel still answers EINVAL, so a mis-probe costs a retry, not a failure.

use std::fmt;
use std::fs;
use std::io;

use io_uring::IoUring;

use crate::errno::errno_name;
use crate::probe::{Feature, Features};

/// `IORING_MAX_ENTRIES`: the largest SQ the kernel accepts.
pub const ENTRIES_MAX: u32 = 32768;
/// `IORING_MAX_CQ_ENTRIES`: the largest CQ (CLAMP caps requests there).
pub const CQ_ENTRIES_MAX: u32 = 2 * ENTRIES_MAX;
/// The smallest automatic CQ: room for a burst from many multishot ops (64 KiB of CQEs).
pub const CQ_ENTRIES_AUTO_MIN: u32 = 4096;
/// Automatic CQ entries per SQ entry.
pub const CQ_PER_SQ_AUTO: u32 = 8;

/// What to ask of the kernel; [`build_ring`] decides which flags it actually gets.
#[derive(Clone, Debug)]
pub struct RingConfig {
    /// SQ entries; rounded up to a power of two and clamped to 1..=[`ENTRIES_MAX`].
    pub entries: u32,
    /// CQ entries; 0 = auto, `max(8 * entries, 4096)`. A multishot accept or recv posts one
    /// CQE per connection or buffer without any new SQE, so the SQ size bounds submissions,
    /// not completions: 8x covers a loop turn where every SQ slot is a multishot op posting
    /// several CQEs, and the 4096 floor a small SQ holding many long-lived multishot recvs.
    /// Overflow loses nothing (NODROP) but is a slow path, so it should stay rare.
    pub cq_entries: u32,
    /// `IORING_SETUP_SQPOLL` with this idle time; only on request, as it costs a kernel thread.
    pub sqpoll_idle_ms: Option<u32>,
    /// The ring is used by one thread only: SINGLE_ISSUER + DEFER_TASKRUN when available.
    /// Build the ring on that thread: the kernel binds such a ring to the task that created
    /// it, and submissions from any other task fail with EEXIST.
    pub single_issuer: bool,
}

impl Default for RingConfig {
    fn default() -> RingConfig {
        RingConfig {
            entries: 256,
            cq_entries: 0,
            sqpoll_idle_ms: None,
            single_issuer: true,
        }
    }
}

impl RingConfig {
    /// The SQ size asked of the kernel: a power of two in 1..=[`ENTRIES_MAX`].
    pub fn sq_entries(&self) -> u32 {
        self.entries.clamp(1, ENTRIES_MAX).next_power_of_two()
    }

    /// The CQ size asked of the kernel: auto-sized when 0, never below the SQ (the kernel
    /// rejects that), a power of two (the kernel rounds up anyway), at most the maximum.
    pub fn cq_entries_wanted(&self) -> u32 {
        let sq = self.sq_entries();
        let wanted = match self.cq_entries {
            0 => (sq * CQ_PER_SQ_AUTO).max(CQ_ENTRIES_AUTO_MIN),
            n => n.max(sq),
        };
        wanted.min(CQ_ENTRIES_MAX).next_power_of_two()
    }
}

/// The setup flags a built ring actually uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetupFlags {
    /// `IORING_SETUP_COOP_TASKRUN`: completions run at the next enter, no IPI.
    pub coop_taskrun: bool,
    /// `IORING_SETUP_TASKRUN_FLAG`: `IORING_SQ_TASKRUN` tells the driver to enter.
    pub taskrun_flag: bool,
    /// `IORING_SETUP_SINGLE_ISSUER`: only the creating thread submits.
    pub single_issuer: bool,
    /// `IORING_SETUP_DEFER_TASKRUN`: completions appear only when entering with GETEVENTS.
    pub defer_taskrun: bool,
    /// `IORING_SETUP_SQPOLL`: a kernel thread polls the SQ.
    pub sqpoll: bool,
    /// `IORING_SETUP_SUBMIT_ALL`: one failing SQE does not stop the rest of the batch.
    pub submit_all: bool,
}

impl SetupFlags {
    /// The best flags `features` allow for `config`.
    pub fn wanted(features: &Features, config: &RingConfig) -> SetupFlags {
        let sqpoll = config.sqpoll_idle_ms.is_some() && features.has(Feature::Sqpoll);
        let single_issuer = config.single_issuer && features.has(Feature::SingleIssuer);
        // The kernel rejects the task-run (IPI) flags together with SQPOLL: its thread runs them.
        let defer_taskrun = single_issuer && !sqpoll && features.has(Feature::DeferTaskrun);
        let coop_taskrun = !sqpoll && features.has(Feature::CoopTaskrun);
        let taskrun_flag = (coop_taskrun || defer_taskrun) && features.has(Feature::TaskrunFlag);
        SetupFlags {
            coop_taskrun,
            taskrun_flag,
            single_issuer,
            defer_taskrun,
            sqpoll,
            submit_all: features.has(Feature::SubmitAll),
        }
    }

    /// These flags minus the next one to give up after EINVAL: DEFER_TASKRUN, then
    /// SINGLE_ISSUER, then COOP_TASKRUN with TASKRUN_FLAG, then SUBMIT_ALL. SQPOLL is never
    /// dropped: it was asked for.
    pub fn without_next(self) -> Option<SetupFlags> {
        let mut next = self;
        if next.defer_taskrun {
            next.defer_taskrun = false;
            // TASKRUN_FLAG is only valid with COOP_TASKRUN or DEFER_TASKRUN.
            next.taskrun_flag &= next.coop_taskrun;
        } else if next.single_issuer {
            next.single_issuer = false;
        } else if next.coop_taskrun || next.taskrun_flag {
            next.coop_taskrun = false;
            next.taskrun_flag = false;
        } else if next.submit_all {
            next.submit_all = false;
        } else {
            return None;
        }
        Some(next)
    }

    fn apply(self, builder: &mut io_uring::Builder, config: &RingConfig) {
        if let (true, Some(idle_ms)) = (self.sqpoll, config.sqpoll_idle_ms) {
            builder.setup_sqpoll(idle_ms);
        }
        if self.coop_taskrun {
            builder.setup_coop_taskrun();
        }
        if self.taskrun_flag {
            builder.setup_taskrun_flag();
        }
        if self.single_issuer {
            builder.setup_single_issuer();
        }
        if self.defer_taskrun {
            builder.setup_defer_taskrun();
        }
        if self.submit_all {
            builder.setup_submit_all();
        }
    }

    fn as_features(self) -> [(bool, Feature); 6] {
        [
            (self.coop_taskrun, Feature::CoopTaskrun),
            (self.taskrun_flag, Feature::TaskrunFlag),
            (self.single_issuer, Feature::SingleIssuer),
            (self.defer_taskrun, Feature::DeferTaskrun),
            (self.sqpoll, Feature::Sqpoll),
            (self.submit_all, Feature::SubmitAll),
        ]
    }
}

impl fmt::Display for SetupFlags {
    /// The flags in use by their feature names, comma-separated, or `none`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self
            .as_features()
            .iter()
            .filter(|(is_set, _)| *is_set)
            .map(|(_, feature)| feature.name())
            .collect();
        if names.is_empty() {
            return f.write_str("none");
        }
        f.write_str(&names.join(","))
    }
}

/// A built ring and the setup flags it really has.
pub struct Ring {
    /// The ring itself.
    pub ring: IoUring,
    /// The flags the kernel accepted; the driver must honour them (DEFER_TASKRUN: reap only
    /// after an enter with GETEVENTS).
    pub flags: SetupFlags,
}

/// Builds a ring with the best flags `features` (already masked) allow for `config`.
///
/// On EINVAL it drops flags one by one ([`SetupFlags::without_next`]) and finally the CQ
/// size (CQSIZE is 5.5, CLAMP 5.6) and retries; any other errno is a [`SetupError`].
pub fn build_ring(features: &Features, config: &RingConfig) -> Result<Ring, SetupError> {
    let mut flags = SetupFlags::wanted(features, config);
    let mut is_cq_sized = true;
    loop {
        let err = match try_build(flags, is_cq_sized, config) {
            Ok(ring) => return Ok(Ring { ring, flags }),
            Err(err) => err,
        };
        if err.raw_os_error() != Some(libc::EINVAL) {
            return Err(SetupError::from_io(&err));
        }
        match flags.without_next() {
            Some(next) => flags = next,
            None if is_cq_sized => is_cq_sized = false,
            None => return Err(SetupError::from_io(&err)),
        }
    }
}

fn try_build(flags: SetupFlags, is_cq_sized: bool, config: &RingConfig) -> io::Result<IoUring> {
    let mut builder: io_uring::Builder = IoUring::builder();
    if is_cq_sized {
        builder
            .setup_cqsize(config.cq_entries_wanted())
            .setup_clamp();
    }
    flags.apply(&mut builder, config);
    builder.build(config.sq_entries())
}

/// Why `io_uring_setup` failed, as far as the errno tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetupCause {
    /// ENOSYS: a kernel without io_uring, or a seccomp profile (Podman's) hiding it.
    NoIoUring,
    /// EPERM: Docker's seccomp profile, or sysctl `kernel.io_uring_disabled` (6.6+).
    Blocked,
    /// ENOMEM: RLIMIT_MEMLOCK too low (kernels before 5.12 charge ring memory to it).
    MemLock,
    /// Anything else.
    Other,
}

/// `io_uring_setup` failed: the errno and its likely cause. Display gives the fix.
#[derive(Clone, Debug)]
pub struct SetupError {
    /// The errno `io_uring_setup` returned.
    pub errno: i32,
    /// What that errno most likely means.
    pub cause: SetupCause,
}

impl SetupError {
    /// Classifies `errno` from `io_uring_setup`.
    pub fn from_errno(errno: i32) -> SetupError {
        let cause = match errno {
            libc::ENOSYS => SetupCause::NoIoUring,
            libc::EPERM => SetupCause::Blocked,
            libc::ENOMEM => SetupCause::MemLock,
            _ => SetupCause::Other,
        };
        SetupError { errno, cause }
    }

    /// Classifies an `io::Error` from building a ring (EIO if it carries no errno).
    pub fn from_io(err: &io::Error) -> SetupError {
        SetupError::from_errno(err.raw_os_error().unwrap_or(libc::EIO))
    }

    /// The concrete fix for this cause.
    pub fn fix(&self) -> &'static str {
        match self.cause {
            SetupCause::NoIoUring => {
                "use a kernel built with CONFIG_IO_URING (5.19+ for all of ring-rt), or run the \
                 container with --security-opt seccomp=unconfined or a seccomp profile allowing \
                 io_uring_setup, io_uring_enter and io_uring_register"
            }
            SetupCause::Blocked => {
                "run the container with --security-opt seccomp=unconfined or a seccomp profile \
                 allowing io_uring_setup, io_uring_enter and io_uring_register; or set sysctl \
                 kernel.io_uring_disabled=0 (or, when it is 1, add the user to \
                 kernel.io_uring_group)"
            }
            SetupCause::MemLock => {
                "raise RLIMIT_MEMLOCK (ulimit -l, LimitMEMLOCK= in systemd, --ulimit memlock=-1 \
                 in Docker), or use a 5.12+ kernel, which no longer charges rings to it"
            }
            SetupCause::Other => "see io_uring_setup(2) for this errno",
        }
    }

    fn likely_cause(&self) -> &'static str {
        match self.cause {
            SetupCause::NoIoUring => {
                "the kernel has no io_uring (CONFIG_IO_URING off, or older than 5.1) or a \
                 seccomp profile such as Podman's hides it"
            }
            SetupCause::Blocked => {
                "io_uring is blocked by a seccomp profile such as Docker's default or by sysctl \
                 kernel.io_uring_disabled"
            }
            SetupCause::MemLock => {
                "the ring does not fit in RLIMIT_MEMLOCK, which kernels before 5.12 charge it to"
            }
            SetupCause::Other => "an unexpected error",
        }
    }

    /// The sentence [`Display`](fmt::Display) prints, given `kernel.io_uring_disabled`.
    fn describe(&self, io_uring_disabled: Option<u32>) -> String {
        let os = io::Error::from_raw_os_error(self.errno).to_string();
        // std appends " (os error N)"; the errno name already says which.
        let os = os.split(" (os error").next().unwrap_or_default();
        let name = errno_name(self.errno);
        let mut text = format!("io_uring_setup failed with {name} ({os}): ");
        text.push_str(self.likely_cause());
        match io_uring_disabled.filter(|_| self.cause == SetupCause::Blocked) {
            Some(1) => text.push_str(
                " (here kernel.io_uring_disabled=1: only kernel.io_uring_group may use it)",
            ),
            Some(value @ 2..) => text.push_str(&format!(
                " (here kernel.io_uring_disabled={value}: off for everyone)"
            )),
            _ => {}
        }
        text.push_str("; fix: ");
        text.push_str(self.fix());
        text
    }
}

/// `kernel.io_uring_disabled` (6.6+); `None` when absent or unreadable.
fn read_io_uring_disabled() -> Option<u32> {
    let text = fs::read_to_string("/proc/sys/kernel/io_uring_disabled").ok()?;
    text.trim().parse().ok()
}

impl fmt::Display for SetupError {
    /// One sentence: what failed, the errno, the likely cause (with `kernel.io_uring_disabled`
    /// when it is set), and the fix.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let disabled = match self.cause {
            SetupCause::Blocked => read_io_uring_disabled(),
            _ => None,
        };
        f.write_str(&self.describe(disabled))
    }
}

impl std::error::Error for SetupError {}

impl From<SetupError> for io::Error {
    /// Keeps the errno's kind (`PermissionDenied`, `Unsupported`, `OutOfMemory`, ...) with the
    /// `SetupError` inside. `raw_os_error()` of the result is `None`; recover the errno with
    /// `err.get_ref().and_then(|e| e.downcast_ref::<SetupError>()).map(|e| e.errno)`.
    fn from(err: SetupError) -> io::Error {
        let kind = io::Error::from_raw_os_error(err.errno).kind();
        io::Error::new(kind, err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_classifies_the_cause() {
        assert_eq!(
            SetupError::from_errno(libc::ENOSYS).cause,
            SetupCause::NoIoUring
        );
        assert_eq!(
            SetupError::from_errno(libc::EPERM).cause,
            SetupCause::Blocked
        );
        assert_eq!(
            SetupError::from_errno(libc::ENOMEM).cause,
            SetupCause::MemLock
        );
        assert_eq!(
            SetupError::from_errno(libc::EFAULT).cause,
            SetupCause::Other
        );
    }

    #[test]
    fn blocked_description_names_the_sysctl_value() {
        let err = SetupError::from_errno(libc::EPERM);
        let text = err.describe(Some(2));
        assert!(text.contains("EPERM"), "{text}");
        assert!(text.contains("kernel.io_uring_disabled=2"), "{text}");
        assert!(text.contains("seccomp=unconfined"), "{text}");
        assert!(!err.describe(Some(0)).contains("io_uring_disabled=0:"));
    }

    #[test]
    fn io_error_keeps_kind_and_errno() {
        let err = io::Error::from(SetupError::from_errno(libc::EPERM));
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
        let inner = err.get_ref().and_then(|e| e.downcast_ref::<SetupError>());
        assert_eq!(inner.map(|e| e.errno), Some(libc::EPERM));
    }

    #[test]
    fn auto_cq_is_sized_for_multishot() {
        let config = RingConfig::default();
        assert_eq!(config.sq_entries(), 256);
        assert_eq!(config.cq_entries_wanted(), 4096);
        let big = RingConfig {
            entries: 1000,
            ..RingConfig::default()
        };
        assert_eq!(big.sq_entries(), 1024);
        assert_eq!(big.cq_entries_wanted(), 8192);
        let small_cq = RingConfig {
            cq_entries: 16,
            ..RingConfig::default()
        };
        assert_eq!(small_cq.cq_entries_wanted(), 256);
        let huge = RingConfig {
            entries: u32::MAX,
            cq_entries: u32::MAX,
            ..RingConfig::default()
        };
        assert_eq!(
            (huge.sq_entries(), huge.cq_entries_wanted()),
            (ENTRIES_MAX, CQ_ENTRIES_MAX)
        );
    }

    #[test]
    fn wanted_flags_follow_features_and_config() {
        let all = [
            Feature::CoopTaskrun,
            Feature::TaskrunFlag,
            Feature::SingleIssuer,
            Feature::DeferTaskrun,
            Feature::SubmitAll,
            Feature::Sqpoll,
        ];
        let features = Features::from_parts(&all, &[]);
        let flags = SetupFlags::wanted(&features, &RingConfig::default());
        assert!(flags.coop_taskrun && flags.taskrun_flag && flags.defer_taskrun && !flags.sqpoll);
        assert_eq!(
            flags.to_string(),
            "coop_taskrun,taskrun_flag,single_issuer,defer_taskrun,submit_all"
        );
        let shared = RingConfig {
            single_issuer: false,
            sqpoll_idle_ms: Some(10),
            ..RingConfig::default()
        };
        let flags = SetupFlags::wanted(&features, &shared);
        assert_eq!(flags.to_string(), "sqpoll,submit_all");
    }

    #[test]
    fn fallback_drops_flags_in_order() {
        let features = Features::from_parts(
            &[
                Feature::DeferTaskrun,
                Feature::SingleIssuer,
                Feature::TaskrunFlag,
                Feature::SubmitAll,
            ],
            &[],
        );
        let mut flags = SetupFlags::wanted(&features, &RingConfig::default());
        let mut seen = vec![flags.to_string()];
        while let Some(next) = flags.without_next() {
            flags = next;
            seen.push(flags.to_string());
        }
        let expected = [
            "taskrun_flag,single_issuer,defer_taskrun,submit_all",
            "single_issuer,submit_all",
            "submit_all",
            "none",
        ];
        assert_eq!(seen, expected);
    }
}
