//! The matrix's rows: where each runs (host, host under a mask or seccomp, a VM kernel),
//! which tests it runs, and which backend it must end up on.

use std::fmt;

/// Profiles of older kernels' feature sets, as `RING_FEATURES` takes them.
pub const PROFILES: &[&str] = &["5.1", "5.6", "5.11", "5.19", "6.0", "6.1"];

/// The ring-rt filter for VM rows: emulation is slow, so VMs run ring-core's integration
/// tests and the ring-rt tests whose names contain this (every test, on both backends, when
/// empty). `--vm-filter` overrides it.
pub const VM_RT_FILTER: &str = "";

/// Tests VM rows leave out (`--skip`), with the reason the output gives. Emulation runs
/// code 20-50 times slower than the host: wall-clock bounds meant for real CPUs fail, and
/// sweeps the host rows already cover would eat the VM's time limit.
pub const VM_SKIPS: &[(&str, &str)] = &[
    (
        "first_probe_is_fast",
        "a wall-clock bound for real CPUs; the host rows check it",
    ),
    (
        "every_profile_serves_echo",
        "an echo sweep over every profile, a minute under emulation; the profile rows cover it",
    ),
];

/// Test binaries VM rows leave out unless `--vm-full`: (name prefix, why). The lean VM
/// suite keeps every kernel-facing behaviour test; these suites re-run the same paths many
/// times and take minutes under emulation.
pub const VM_LEAN_SKIP_BINARIES: &[(&str, &str)] = &[(
    "reliability_",
    "property, fault-injection and scale suites, run on the host rows",
)];

/// The row groups `--rows` selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    Host,
    Profiles,
    Seccomp,
    Vm,
}

impl Group {
    pub const ALL: [Group; 4] = [Group::Host, Group::Profiles, Group::Seccomp, Group::Vm];

    pub fn name(self) -> &'static str {
        match self {
            Group::Host => "host",
            Group::Profiles => "profiles",
            Group::Seccomp => "seccomp",
            Group::Vm => "vm",
        }
    }

    pub fn parse(s: &str) -> Option<Group> {
        Group::ALL.into_iter().find(|g| g.name() == s.trim())
    }
}

/// Whether a row runs on a real kernel or simulates one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The kernel the tests see is the one named (host, or booted under qemu).
    Real,
    /// The host kernel with its io_uring features masked or blocked.
    Simulated,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Real => "real",
            Kind::Simulated => "simulated",
        })
    }
}

/// Which tests a row runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Suite {
    /// Run ring-core's test binaries (unfiltered: libtest-mimic takes one filter).
    pub core: bool,
    /// Run ring-rt's test binaries with this filter (`Some("")`: all of them).
    pub rt_filter: Option<String>,
    /// Only integration-test binaries (`tests/*.rs`), not the pure unit tests of the lib.
    pub integration_only: bool,
    /// Tests left out, passed to every binary as `--skip NAME`.
    pub skips: Vec<String>,
    /// Binaries left out: those whose target name starts with one of these.
    pub skip_binaries: Vec<String>,
}

impl Suite {
    /// The libtest arguments for one binary: the filter (ring-rt only: ring-core's harness
    /// takes one filter and its names would not match), then the skips.
    /// True when this suite runs the binary built from test target `target`.
    pub fn runs_binary(&self, target: &str) -> bool {
        !self
            .skip_binaries
            .iter()
            .any(|p| target.starts_with(p.as_str()))
    }

    pub fn args(&self, is_rt: bool) -> Vec<String> {
        let filter = self.rt_filter.iter().filter(|f| is_rt && !f.is_empty());
        let skips = self
            .skips
            .iter()
            .flat_map(|s| ["--skip".to_string(), s.clone()]);
        filter.cloned().chain(skips).collect()
    }
}

/// The name suffix of `#[ring_rt::test]`'s io_uring tests, which rows that expect epoll
/// pass to those binaries as `--skip`.
pub const URING_HALVES: &str = "::uring";

impl Row {
    /// True when this row's runtime must end up on epoll (io_uring blocked, missing or too
    /// old): `#[ring_rt::test]`'s `::uring` tests would fail here by design.
    pub fn skips_uring_halves(&self) -> bool {
        self.expect.backend != "uring"
    }
}

/// Which Debian or built kernel a VM row boots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmKernel {
    /// Debian's `linux-image-cloud-amd64` (6.1).
    Debian61,
    /// Debian's `linux-image-6.12-cloud-amd64`.
    Debian612,
    /// 6.1 from `linux-source-6.1`, tinyconfig, `CONFIG_IO_URING` off.
    Tiny61NoUring,
}

/// Where a row runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    /// On the host, with these environment variables and, optionally, a seccomp filter
    /// making io_uring's syscalls fail with this errno.
    Host {
        env: Vec<(&'static str, String)>,
        seccomp_errno: Option<i32>,
    },
    /// Under qemu, booting `kernel` with `cmdline` appended.
    Vm {
        kernel: VmKernel,
        cmdline: &'static str,
    },
}

/// What the runtime must choose in this row; a different choice fails the row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expect {
    /// "uring" or "epoll".
    pub backend: &'static str,
    /// The `io_uring_setup` errno name that must be reported, when io_uring is blocked.
    pub errno: Option<&'static str>,
}

/// One row of the matrix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub name: String,
    pub group: Group,
    pub kind: Kind,
    pub place: Place,
    pub suite: Suite,
    pub expect: Expect,
}

/// The rows of the selected groups, in table order.
pub fn rows(groups: &[Group], vm_filter: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    for group in Group::ALL.into_iter().filter(|g| groups.contains(g)) {
        match group {
            Group::Host => rows.extend(host_rows()),
            Group::Profiles => rows.extend(PROFILES.iter().map(|p| profile_row(p))),
            Group::Seccomp => rows.extend(seccomp_rows()),
            Group::Vm => rows.extend(vm_rows(vm_filter)),
        }
    }
    rows
}

fn full_suite() -> Suite {
    Suite {
        core: true,
        rt_filter: Some(String::new()),
        integration_only: false,
        skips: Vec::new(),
        skip_binaries: Vec::new(),
    }
}

fn uring() -> Expect {
    Expect {
        backend: "uring",
        errno: None,
    }
}

fn epoll(errno: Option<&'static str>) -> Expect {
    Expect {
        backend: "epoll",
        errno,
    }
}

/// The host kernel on each backend: io_uring with ring-core's tests and ring-rt's
/// `::uring` tests, then epoll with ring-rt's `::epoll` tests.
fn host_rows() -> Vec<Row> {
    let row = |backend: &'static str, core: bool, expect| Row {
        name: format!("host · {backend}"),
        group: Group::Host,
        kind: Kind::Real,
        place: Place::Host {
            env: vec![("RING_RT_BACKEND", backend.to_string())],
            seccomp_errno: None,
        },
        suite: Suite {
            core,
            rt_filter: Some(format!("::{backend}")),
            integration_only: false,
            skips: Vec::new(),
            skip_binaries: Vec::new(),
        },
        expect,
    };
    vec![
        row("uring", true, uring()),
        row("epoll", false, epoll(None)),
    ]
}

/// The host masked down to an older kernel: before 5.6 the runtime lacks opcodes it needs
/// and must pick epoll; from 5.6 it runs io_uring with what the profile allows.
fn profile_row(profile: &str) -> Row {
    let expect = if profile == "5.1" {
        epoll(None)
    } else {
        uring()
    };
    Row {
        name: format!("profile {profile}"),
        group: Group::Profiles,
        kind: Kind::Simulated,
        place: Place::Host {
            env: vec![("RING_FEATURES", profile.to_string())],
            seccomp_errno: None,
        },
        suite: Suite {
            integration_only: true,
            ..full_suite()
        },
        expect,
    }
}

/// io_uring's syscalls failing as under Docker's (EPERM) and Podman's (ENOSYS) profiles.
fn seccomp_rows() -> Vec<Row> {
    let row = |errno: i32, name: &'static str| Row {
        name: format!("seccomp {name}"),
        group: Group::Seccomp,
        kind: Kind::Simulated,
        place: Place::Host {
            env: Vec::new(),
            seccomp_errno: Some(errno),
        },
        suite: Suite {
            integration_only: true,
            ..full_suite()
        },
        expect: epoll(Some(name)),
    };
    vec![row(libc::EPERM, "EPERM"), row(libc::ENOSYS, "ENOSYS")]
}

fn vm_rows(filter: &str) -> Vec<Row> {
    let row = |name: &str, kernel, cmdline, expect| Row {
        name: name.to_string(),
        group: Group::Vm,
        kind: Kind::Real,
        place: Place::Vm { kernel, cmdline },
        suite: Suite {
            core: true,
            rt_filter: Some(filter.to_string()),
            integration_only: true,
            skips: VM_SKIPS.iter().map(|(name, _)| name.to_string()).collect(),
            skip_binaries: VM_LEAN_SKIP_BINARIES
                .iter()
                .map(|(prefix, _)| prefix.to_string())
                .collect(),
        },
        expect,
    };
    vec![
        row("vm 6.1 cloud", VmKernel::Debian61, "", uring()),
        row("vm 6.12 cloud", VmKernel::Debian612, "", uring()),
        row(
            "vm 6.12 io_uring_disabled=2",
            VmKernel::Debian612,
            "sysctl.kernel.io_uring_disabled=2",
            epoll(Some("EPERM")),
        ),
        row(
            "vm 6.1 no io_uring",
            VmKernel::Tiny61NoUring,
            "",
            epoll(Some("ENOSYS")),
        ),
    ]
}

/// Parses `--rows host,profiles,...`.
pub fn parse_groups(list: &str) -> Result<Vec<Group>, String> {
    list.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            Group::parse(s).ok_or_else(|| {
                format!("unknown row group {s:?}: expected host, profiles, seccomp or vm")
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_groups_give_every_required_row() {
        let names: Vec<String> = rows(&Group::ALL, "").into_iter().map(|r| r.name).collect();
        for want in ["host · uring", "host · epoll", "profile 5.1", "profile 6.1"] {
            assert!(names.iter().any(|n| n == want), "missing {want}: {names:?}");
        }
        assert_eq!(names.iter().filter(|n| n.starts_with("seccomp")).count(), 2);
        assert_eq!(names.iter().filter(|n| n.starts_with("vm")).count(), 4);
    }

    #[test]
    fn blocked_rows_expect_epoll_with_the_errno() {
        for row in rows(&[Group::Seccomp, Group::Vm], "") {
            if row.name.contains("seccomp") || row.name.contains("no io_uring") {
                assert_eq!(row.expect.backend, "epoll", "{}", row.name);
                assert!(row.expect.errno.is_some(), "{}", row.name);
            }
        }
    }

    #[test]
    fn vm_args_carry_the_filter_for_ring_rt_only_and_every_skip() {
        let row = rows(&[Group::Vm], "::epoll").remove(0);
        let rt = row.suite.args(true);
        assert_eq!(rt[0], "::epoll");
        assert_eq!(rt.iter().filter(|a| *a == "--skip").count(), VM_SKIPS.len());
        assert!(!row.suite.args(false).contains(&"::epoll".to_string()));
    }

    #[test]
    fn lean_vm_rows_leave_out_the_reliability_binaries_only() {
        let vm = rows(&[Group::Vm], "").remove(0);
        assert!(!vm.suite.runs_binary("reliability_scale"));
        assert!(vm.suite.runs_binary("net"));
        let host = rows(&[Group::Host], "").remove(0);
        assert!(host.suite.runs_binary("reliability_scale"));
    }

    #[test]
    fn only_rows_that_expect_epoll_skip_the_uring_halves() {
        for row in rows(&Group::ALL, "") {
            let blocked = row.name.contains("seccomp")
                || row.name.contains("no io_uring")
                || row.name.contains("disabled")
                || row.name == "profile 5.1"
                || row.name == "host · epoll";
            assert_eq!(row.skips_uring_halves(), blocked, "{}", row.name);
        }
    }

    #[test]
    fn groups_parse_and_reject_unknown_names() {
        assert_eq!(parse_groups("host,vm"), Ok(vec![Group::Host, Group::Vm]));
        assert!(parse_groups("host,nope").is_err());
    }
}
