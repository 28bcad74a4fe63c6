//! What io_uring offers on this kernel: FEAT bits, opcodes and trial probes, as [`Features`].
//!
//! Minimum kernel: 5.1 (io_uring itself). The opcode probe (`IORING_REGISTER_PROBE`) needs
//! 5.6; before that the opcode set is inferred from the kernel version. Flag-level features
//! (multishot, buffer rings, setup flags) do not show in the opcode probe, and version checks
//! break on vendor backports, so each is tried once on a scratch ring (see `probe/trial.rs`).
//! A [`FeatureMask`] (env `RING_FEATURES`) hides features, to run on this kernel as if it
//! were an older one.

mod mask;
mod table;
mod trial;

use std::fmt;
use std::io;
use std::str::FromStr;
use std::sync::OnceLock;

pub use mask::{FeatureMask, ENV_VAR};
pub use table::FeatureTable;

use crate::setup::SetupError;

/// A capability of io_uring that ring-core may use, probed once per process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Feature {
    // `IORING_FEAT_*` bits reported by `io_uring_setup`, in bit order.
    /// `IORING_FEAT_SINGLE_MMAP`: SQ and CQ rings share one mmap.
    SingleMmap,
    /// `IORING_FEAT_NODROP`: CQEs are kept on overflow instead of dropped.
    NoDrop,
    /// `IORING_FEAT_SUBMIT_STABLE`: SQE data is consumed at submit.
    SubmitStable,
    /// `IORING_FEAT_RW_CUR_POS`: offset -1 means the file position.
    RwCurPos,
    /// `IORING_FEAT_CUR_PERSONALITY`: ops run with the submitter's credentials.
    CurPersonality,
    /// `IORING_FEAT_FAST_POLL`: pollable files wait by internal poll, not a worker thread.
    FastPoll,
    /// `IORING_FEAT_POLL_32BITS`: POLL_ADD takes 32-bit epoll flags.
    Poll32Bits,
    /// `IORING_FEAT_SQPOLL_NONFIXED`: SQPOLL works with unregistered files.
    SqpollNonfixed,
    /// `IORING_FEAT_EXT_ARG`: `io_uring_enter` takes a timeout argument.
    ExtArg,
    /// `IORING_FEAT_NATIVE_WORKERS`: async workers are native threads.
    NativeWorkers,
    /// `IORING_FEAT_RSRC_TAGS`: registered resources can be tagged and updated.
    ResourceTagging,
    /// `IORING_FEAT_CQE_SKIP`: `IOSQE_CQE_SKIP_SUCCESS` is honoured.
    CqeSkip,
    /// `IORING_FEAT_LINKED_FILE`: linked ops resolve their file at execution.
    LinkedFile,
    /// `IORING_FEAT_REG_REG_RING`: registration through a registered ring fd.
    RegRegRing,
    /// `IORING_FEAT_RECVSEND_BUNDLE`: send/recv bundles of provided buffers.
    RecvSendBundle,
    /// `IORING_FEAT_MIN_TIMEOUT`: a minimum wait before returning with fewer CQEs.
    MinTimeout,
    /// `IORING_FEAT_RW_ATTR`: read/write attributes (PI).
    RwAttr,
    /// `IORING_FEAT_NO_IOWAIT`: waiting for CQEs need not count as iowait.
    NoIowait,
    // Trial probes on a scratch ring: what the opcode probe cannot show.
    /// `IORING_ACCEPT_MULTISHOT`: one accept SQE posts a CQE per connection.
    MultishotAccept,
    /// `IORING_RECV_MULTISHOT`: one recv SQE posts a CQE per provided buffer filled.
    MultishotRecv,
    /// `IORING_REGISTER_PBUF_RING`: provided buffers in a shared ring.
    PbufRing,
    /// `IOU_PBUF_RING_INC`: buffers of a ring consumed incrementally.
    PbufRingInc,
    /// `IORING_OP_SEND_ZC` that really sends and notifies on a TCP socket.
    SendZc,
    /// `IORING_SETUP_COOP_TASKRUN`: no IPI to run completions, they run at the next enter.
    CoopTaskrun,
    /// `IORING_SETUP_TASKRUN_FLAG`: `IORING_SQ_TASKRUN` says completions are pending.
    TaskrunFlag,
    /// `IORING_SETUP_SINGLE_ISSUER`: only one task submits.
    SingleIssuer,
    /// `IORING_SETUP_DEFER_TASKRUN`: completion work runs only when the ring enters to wait.
    DeferTaskrun,
    /// `IORING_SETUP_SQPOLL`: a kernel thread polls the SQ (EPERM before 5.11 unprivileged).
    Sqpoll,
    /// `IORING_SETUP_SUBMIT_ALL`: submission continues past a failing SQE.
    SubmitAll,
    /// `IORING_SETUP_NO_SQARRAY`: no SQ index array.
    NoSqArray,
    /// `IORING_OP_MSG_RING`: one ring posts a CQE into another (cross-thread wake-ups
    /// without an eventfd).
    MsgRing,
    /// `IORING_REGISTER_RING_FDS`: a thread registers a ring's fd, and its enters name the
    /// ring by index (`IORING_ENTER_REGISTERED_RING`), skipping the fd lookup.
    RegisteredRing,
    /// `IORING_POLL_ADD_MULTI`: one poll SQE posts a CQE per readiness event and stays
    /// armed (a one-shot poll of a terminal fails on every settings change; this one waits
    /// on).
    MultishotPoll,
}

/// What the tables below record for each [`Feature`].
struct Info {
    name: &'static str,
    since: KernelVersion,
    /// The `IORING_FEAT_*` bit, or 0 for features found by a trial probe.
    feat_bit: u32,
    /// ring-rt relies on it when present (shown in the probe table).
    is_used_by_runtime: bool,
}

const fn info(name: &'static str, major: u16, minor: u16, feat_bit: u32, used: bool) -> Info {
    Info {
        name,
        since: KernelVersion::new(major, minor),
        feat_bit,
        is_used_by_runtime: used,
    }
}

/// Indexed by `Feature as usize`; a unit test checks the order against [`Feature::ALL`].
const INFO: [Info; 33] = [
    info("single_mmap", 5, 4, 1 << 0, false),
    info("nodrop", 5, 5, 1 << 1, true),
    info("submit_stable", 5, 5, 1 << 2, false),
    info("rw_cur_pos", 5, 6, 1 << 3, false),
    info("cur_personality", 5, 6, 1 << 4, false),
    info("fast_poll", 5, 7, 1 << 5, true),
    info("poll_32bits", 5, 9, 1 << 6, false),
    info("sqpoll_nonfixed", 5, 11, 1 << 7, false),
    info("ext_arg", 5, 11, 1 << 8, true),
    info("native_workers", 5, 12, 1 << 9, false),
    info("resource_tagging", 5, 13, 1 << 10, false),
    info("cqe_skip", 5, 17, 1 << 11, false),
    info("linked_file", 5, 17, 1 << 12, false),
    info("reg_reg_ring", 6, 3, 1 << 13, false),
    info("recvsend_bundle", 6, 10, 1 << 14, false),
    info("min_timeout", 6, 12, 1 << 15, false),
    info("rw_attr", 6, 14, 1 << 16, false),
    info("no_iowait", 6, 15, 1 << 17, false),
    info("multishot_accept", 5, 19, 0, true),
    info("multishot_recv", 6, 0, 0, true),
    info("pbuf_ring", 5, 19, 0, true),
    info("pbuf_ring_inc", 6, 12, 0, false),
    info("send_zc", 6, 0, 0, true),
    info("coop_taskrun", 5, 19, 0, true),
    info("taskrun_flag", 5, 19, 0, true),
    info("single_issuer", 6, 0, 0, true),
    info("defer_taskrun", 6, 1, 0, true),
    info("sqpoll", 5, 1, 0, false),
    info("submit_all", 5, 18, 0, true),
    info("no_sqarray", 6, 6, 0, false),
    info("msg_ring", 5, 18, 0, true),
    info("registered_ring", 5, 18, 0, true),
    info("multishot_poll", 5, 13, 0, true),
];

impl Feature {
    /// Every feature, in table order.
    pub const ALL: &'static [Feature] = &[
        Feature::SingleMmap,
        Feature::NoDrop,
        Feature::SubmitStable,
        Feature::RwCurPos,
        Feature::CurPersonality,
        Feature::FastPoll,
        Feature::Poll32Bits,
        Feature::SqpollNonfixed,
        Feature::ExtArg,
        Feature::NativeWorkers,
        Feature::ResourceTagging,
        Feature::CqeSkip,
        Feature::LinkedFile,
        Feature::RegRegRing,
        Feature::RecvSendBundle,
        Feature::MinTimeout,
        Feature::RwAttr,
        Feature::NoIowait,
        Feature::MultishotAccept,
        Feature::MultishotRecv,
        Feature::PbufRing,
        Feature::PbufRingInc,
        Feature::SendZc,
        Feature::CoopTaskrun,
        Feature::TaskrunFlag,
        Feature::SingleIssuer,
        Feature::DeferTaskrun,
        Feature::Sqpoll,
        Feature::SubmitAll,
        Feature::NoSqArray,
        Feature::MsgRing,
        Feature::RegisteredRing,
        Feature::MultishotPoll,
    ];

    fn info(self) -> &'static Info {
        &INFO[self as usize]
    }

    /// The snake_case name used in `RING_FEATURES` and the probe table, e.g. `multishot_accept`.
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// The first mainline kernel that has it.
    pub fn since(self) -> KernelVersion {
        self.info().since
    }

    /// The `IORING_FEAT_*` bit this feature is read from, if it is one.
    pub fn feat_bit(self) -> Option<u32> {
        Some(self.info().feat_bit).filter(|&bit| bit != 0)
    }

    /// True for the features ring-rt uses when they are present.
    pub fn is_used_by_runtime(self) -> bool {
        self.info().is_used_by_runtime
    }

    /// Parses a name from [`Feature::name`]; case, `_` and `-` are ignored (`no_drop` works).
    pub fn from_name(s: &str) -> Option<Feature> {
        let wanted = squash(s);
        Feature::ALL
            .iter()
            .copied()
            .find(|f| squash(f.name()) == wanted)
    }

    fn bit(self) -> u64 {
        1 << self as u32
    }

    /// All names, comma-separated, for error messages.
    pub(crate) fn names() -> String {
        let names: Vec<&str> = Feature::ALL.iter().map(|f| f.name()).collect();
        names.join(", ")
    }
}

fn squash(s: &str) -> String {
    s.chars()
        .filter(|c| *c != '_' && *c != '-')
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// A mainline kernel version, `major.minor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KernelVersion {
    /// The `6` of 6.1.
    pub major: u16,
    /// The `1` of 6.1.
    pub minor: u16,
}

impl KernelVersion {
    /// `major.minor`.
    pub const fn new(major: u16, minor: u16) -> KernelVersion {
        KernelVersion { major, minor }
    }

    /// The version at the start of a `uname -r` release such as `6.18.0-1-cloud-amd64`.
    pub fn from_release(release: &str) -> Option<KernelVersion> {
        let mut parts = release.splitn(3, '.');
        let major = leading_number(parts.next()?)?;
        let minor = leading_number(parts.next()?)?;
        Some(KernelVersion::new(major, minor))
    }
}

fn leading_number(s: &str) -> Option<u16> {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    s[..end].parse().ok()
}

impl FromStr for KernelVersion {
    type Err = String;

    /// Parses exactly `major.minor`, e.g. `5.11`.
    fn from_str(s: &str) -> Result<KernelVersion, String> {
        let bad = || format!("{s:?} is not a kernel version like 5.11");
        let (major, minor) = s.trim().split_once('.').ok_or_else(bad)?;
        let is_number = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
        if !is_number(major) || !is_number(minor) {
            return Err(bad());
        }
        let major = major.parse().map_err(|_| bad())?;
        let minor = minor.parse().map_err(|_| bad())?;
        Ok(KernelVersion::new(major, minor))
    }
}

impl fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// Every `IORING_OP_*` by code: its name and the kernel that added it (io_uring_enter(2)).
const OPCODES: [(&str, u16, u16); 63] = [
    ("nop", 5, 1),
    ("readv", 5, 1),
    ("writev", 5, 1),
    ("fsync", 5, 1),
    ("read_fixed", 5, 1),
    ("write_fixed", 5, 1),
    ("poll_add", 5, 1),
    ("poll_remove", 5, 1),
    ("sync_file_range", 5, 2),
    ("sendmsg", 5, 3),
    ("recvmsg", 5, 3),
    ("timeout", 5, 4),
    ("timeout_remove", 5, 5),
    ("accept", 5, 5),
    ("async_cancel", 5, 5),
    ("link_timeout", 5, 5),
    ("connect", 5, 5),
    ("fallocate", 5, 6),
    ("openat", 5, 6),
    ("close", 5, 6),
    ("files_update", 5, 6),
    ("statx", 5, 6),
    ("read", 5, 6),
    ("write", 5, 6),
    ("fadvise", 5, 6),
    ("madvise", 5, 6),
    ("send", 5, 6),
    ("recv", 5, 6),
    ("openat2", 5, 6),
    ("epoll_ctl", 5, 6),
    ("splice", 5, 7),
    ("provide_buffers", 5, 7),
    ("remove_buffers", 5, 7),
    ("tee", 5, 8),
    ("shutdown", 5, 11),
    ("renameat", 5, 11),
    ("unlinkat", 5, 11),
    ("mkdirat", 5, 15),
    ("symlinkat", 5, 15),
    ("linkat", 5, 15),
    ("msg_ring", 5, 18),
    ("fsetxattr", 5, 19),
    ("setxattr", 5, 19),
    ("fgetxattr", 5, 19),
    ("getxattr", 5, 19),
    ("socket", 5, 19),
    ("uring_cmd", 5, 19),
    ("send_zc", 6, 0),
    ("sendmsg_zc", 6, 1),
    ("read_multishot", 6, 7),
    ("waitid", 6, 7),
    ("futex_wait", 6, 7),
    ("futex_wake", 6, 7),
    ("futex_waitv", 6, 7),
    ("fixed_fd_install", 6, 8),
    ("ftruncate", 6, 9),
    ("bind", 6, 11),
    ("listen", 6, 11),
    ("recv_zc", 6, 15),
    ("epoll_wait", 6, 15),
    ("readv_fixed", 6, 15),
    ("writev_fixed", 6, 15),
    ("pipe", 6, 16),
];

/// The number of opcodes ring-core knows by name (`IORING_OP_LAST` of its table).
pub const OPCODE_COUNT: u8 = OPCODES.len() as u8;

/// The kernel that added `IORING_OP_*` `opcode`, or `None` for a code newer than this table.
pub fn opcode_since(opcode: u8) -> Option<KernelVersion> {
    let &(_, major, minor) = OPCODES.get(usize::from(opcode))?;
    Some(KernelVersion::new(major, minor))
}

/// The kernel's name of `IORING_OP_*` `opcode`, lower case (`send_zc`), or `"unknown"`.
pub fn opcode_name(opcode: u8) -> &'static str {
    OPCODES
        .get(usize::from(opcode))
        .map_or("unknown", |&(name, _, _)| name)
}

fn opcode_bit(opcode: u8) -> u128 {
    1u128.checked_shl(u32::from(opcode)).unwrap_or(0)
}

/// What io_uring offers: the probed (or built) features and opcodes, minus any mask.
///
/// Get the host's from [`Features::probe`], hide some with [`Features::masked`], or build one
/// for tests of pure code with [`Features::from_parts`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Features {
    /// Bits of present [`Feature`]s, by `1 << (f as u32)`.
    present: u64,
    /// Bit `n` set when `IORING_OP` `n` is supported (codes 0..=127).
    opcodes: u128,
    /// `io_uring_params.features`, minus the bits of masked features.
    feat_raw: u32,
    /// `uname -r`; empty for values from [`Features::from_parts`].
    kernel_release: String,
    /// Present on the kernel but hidden by the mask: shown as "masked" in the table.
    hidden: u64,
    hidden_opcodes: u128,
    /// Labels of the masks applied, joined by `+`; `None` when unmasked.
    mask_label: Option<String>,
    /// Trials that failed with an unexpected errno (the feature counts as absent).
    trial_errnos: Vec<(Feature, i32)>,
    /// True when `IORING_REGISTER_PROBE` was unavailable (before 5.6) and the opcode set
    /// was inferred from the kernel version.
    is_opcodes_inferred: bool,
}

impl Features {
    /// Probes the running kernel once per process and returns the unmasked result.
    ///
    /// The first call builds a few scratch rings (well under 100 ms); later calls return the
    /// same value. Fails only when `io_uring_setup` itself fails.
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_core::probe::{Feature, FeatureMask, Features};
    ///
    /// match Features::probe() {
    ///     Ok(features) => {
    ///         println!("{}", features.table()); // what `cargo xtask probe` prints
    ///         if let Err(e) = features.require(Feature::MultishotRecv) {
    ///             println!("{e}"); // names the kernel that has it (6.0)
    ///         }
    ///         // The same kernel, seen as a 5.11 one.
    ///         let old = features.masked(&FeatureMask::parse("5.11").unwrap());
    ///         assert!(!old.has(Feature::PbufRing));
    ///         assert!(!old.has_opcode(io_uring::opcode::SendZc::CODE));
    ///     }
    ///     // Seccomp, `kernel.io_uring_disabled`, no io_uring: the error says which and how
    ///     // to fix it.
    ///     Err(err) => println!("io_uring unavailable: {err}; {}", err.fix()),
    /// }
    /// ```
    pub fn probe() -> Result<&'static Features, SetupError> {
        static PROBED: OnceLock<Result<Features, SetupError>> = OnceLock::new();
        PROBED
            .get_or_init(trial::probe_kernel)
            .as_ref()
            .map_err(Clone::clone)
    }

    /// A value built from explicit parts, no kernel: for tests of pure code (Miri).
    pub fn from_parts(features: &[Feature], opcodes: &[u8]) -> Features {
        let present = features.iter().fold(0, |bits, f| bits | f.bit());
        let feat_raw = features
            .iter()
            .filter_map(|f| f.feat_bit())
            .fold(0, |bits, bit| bits | bit);
        Features {
            present,
            opcodes: opcodes.iter().fold(0, |bits, &op| bits | opcode_bit(op)),
            feat_raw,
            kernel_release: String::new(),
            hidden: 0,
            hidden_opcodes: 0,
            mask_label: None,
            trial_errnos: Vec::new(),
            is_opcodes_inferred: false,
        }
    }

    /// Names of the features this kernel (after any mask) has that ring-rt uses.
    pub fn used_by_runtime(&self) -> Vec<&'static str> {
        Feature::ALL
            .iter()
            .filter(|f| f.is_used_by_runtime() && self.has(**f))
            .map(|f| f.name())
            .collect()
    }

    /// True when `f` is present and not masked.
    pub fn has(&self, f: Feature) -> bool {
        self.present & f.bit() != 0
    }

    /// True when `IORING_OP` `opcode` (e.g. `io_uring::opcode::Accept::CODE`) is supported
    /// and not masked.
    pub fn has_opcode(&self, opcode: u8) -> bool {
        self.opcodes & opcode_bit(opcode) != 0
    }

    /// `Ok` when `f` is available, else `ErrorKind::Unsupported` naming the kernel that has it.
    pub fn require(&self, f: Feature) -> io::Result<()> {
        if self.has(f) {
            return Ok(());
        }
        Err(crate::errno::unsupported(f.name(), &f.since().to_string()))
    }

    /// A copy with the mask's features and opcodes hidden; masking never adds anything.
    pub fn masked(&self, mask: &FeatureMask) -> Features {
        let hide = self.present & mask.features;
        let hide_opcodes = self.opcodes & mask.opcodes;
        let hide_raw = Feature::ALL
            .iter()
            .filter(|f| hide & f.bit() != 0)
            .filter_map(|f| f.feat_bit())
            .fold(0, |bits, bit| bits | bit);
        let mask_label = match &self.mask_label {
            Some(old) => format!("{old} + {}", mask.label()),
            None => mask.label().to_string(),
        };
        Features {
            present: self.present & !hide,
            opcodes: self.opcodes & !hide_opcodes,
            feat_raw: self.feat_raw & !hide_raw,
            hidden: self.hidden | hide,
            hidden_opcodes: self.hidden_opcodes | hide_opcodes,
            mask_label: Some(mask_label),
            ..self.clone()
        }
    }

    /// A readable table: each feature (yes/no/masked, since which kernel) and the opcodes.
    pub fn table(&self) -> FeatureTable<'_> {
        FeatureTable::new(self)
    }

    /// `uname -r` of the probed kernel; empty for values from [`Features::from_parts`].
    pub fn kernel_release(&self) -> &str {
        &self.kernel_release
    }

    /// The version at the start of [`Features::kernel_release`].
    pub fn kernel_version(&self) -> Option<KernelVersion> {
        KernelVersion::from_release(&self.kernel_release)
    }

    /// `io_uring_params.features` as the kernel reported it, minus masked features' bits.
    pub fn feat_raw(&self) -> u32 {
        self.feat_raw
    }

    /// True when the kernel has `f` but a mask hides it.
    pub fn is_masked(&self, f: Feature) -> bool {
        self.hidden & f.bit() != 0
    }

    /// True when the kernel has `opcode` but a mask hides it.
    pub fn is_opcode_masked(&self, opcode: u8) -> bool {
        self.hidden_opcodes & opcode_bit(opcode) != 0
    }

    /// The label of the mask(s) applied, if any.
    pub fn mask_label(&self) -> Option<&str> {
        self.mask_label.as_deref()
    }

    /// The errno of a trial probe that failed unexpectedly (the feature counts as absent).
    pub fn trial_errno(&self, f: Feature) -> Option<i32> {
        self.trial_errnos
            .iter()
            .find(|(g, _)| *g == f)
            .map(|&(_, errno)| errno)
    }

    /// True when the opcode set was inferred from the kernel version (no opcode probe).
    pub fn is_opcodes_inferred(&self) -> bool {
        self.is_opcodes_inferred
    }
}

#[cfg(test)]
mod tests;
