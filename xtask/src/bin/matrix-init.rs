//! `/init` of the kernel-matrix VMs: mounts the pseudo filesystems, brings `lo` up, reports
//! the backend ring-rt picks, runs the test binaries listed in `/matrix/plan` with a time
//! limit each, and ends the VM (a reboot qemu turns into an exit). Built static (musl); runs on any kernel the matrix
//! boots (the tiny 6.1 included: it needs only proc, sysfs, devtmpfs, tmpfs and INET).
//!
//! It speaks to the host through the serial console with `@@matrix` lines that
//! `xtask/src/matrix/vm.rs` parses; the test output in between is libtest's own.

use std::ffi::CString;
use std::io::{self, Write as _};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The run plan: one line per binary, `name \t file \t args (space-separated, - for none)
/// \t timeout_s`.
const PLAN: &str = "/matrix/plan";
/// The plan of rows where ring-rt must end up on epoll, chosen by `PLAN_EPOLL_PARAM` on
/// the kernel command line (xtask's `initramfs::PLAN_EPOLL_PARAM`).
const PLAN_EPOLL: &str = "/matrix/plan-epoll";
const PLAN_EPOLL_PARAM: &str = "ring_matrix.plan=epoll";
/// The musl `xtask`, for `xtask matrix-backend`.
const XTASK: &str = "/bin/xtask";

fn main() {
    if let Err(err) = mount_all() {
        say(&format!("@@matrix warn mounting failed: {err}"));
    }
    if let Err(err) = loopback_up() {
        say(&format!("@@matrix warn lo up failed: {err}"));
    }
    if let Err(err) = raise_nofile() {
        say(&format!(
            "@@matrix warn raising RLIMIT_NOFILE failed: {err}"
        ));
    }
    say(&format!("@@matrix boot kernel={}", release()));
    run_backend_report();
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
    let plan = if cmdline.split_whitespace().any(|p| p == PLAN_EPOLL_PARAM) {
        PLAN_EPOLL
    } else {
        PLAN
    };
    match std::fs::read_to_string(plan) {
        Ok(text) => text.lines().filter_map(Step::parse).for_each(|s| s.run()),
        Err(err) => say(&format!("@@matrix warn no plan at {plan}: {err}")),
    }
    say("@@matrix done");
    reboot_vm();
}

/// Prints a line to the console and flushes, so the host sees it even if we die next.
fn say(line: &str) {
    let mut out = io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// One binary to run.
struct Step {
    name: String,
    file: String,
    args: Vec<String>,
    timeout: Duration,
}

impl Step {
    fn parse(line: &str) -> Option<Step> {
        let mut fields = line.split('\t');
        let (name, file, args, secs) = (
            fields.next()?,
            fields.next()?,
            fields.next()?,
            fields.next()?,
        );
        Some(Step {
            name: name.to_string(),
            file: file.to_string(),
            args: match args {
                "-" => Vec::new(),
                args => args.split_whitespace().map(String::from).collect(),
            },
            timeout: Duration::from_secs(secs.trim().parse().ok()?),
        })
    }

    fn run(&self) {
        say(&format!("@@matrix begin {}", self.name));
        let start = Instant::now();
        let mut cmd = Command::new(&self.file);
        cmd.args(&self.args)
            .env("TMPDIR", "/tmp")
            .env("RUST_BACKTRACE", "1")
            .stdin(Stdio::null());
        let end = match cmd.spawn() {
            Ok(child) => wait(child, self.timeout),
            Err(err) => format!("notrun={}", err.to_string().replace(' ', "_")),
        };
        if end != "exit=0" {
            say_network_counters();
        }
        say(&format!(
            "@@matrix end {} {end} secs={:.1}",
            self.name,
            start.elapsed().as_secs_f64()
        ));
    }
}

/// After a failed step: the kernel's non-zero TCP counters and socket memory, which tell
/// a connection the kernel dropped or reset (listen overflows, memory pressure, aborts)
/// from one the runtime lost. The VM boots `quiet`, so its kernel log shows none of it.
fn say_network_counters() {
    for (file, prefixes) in [
        ("/proc/net/netstat", &["TcpExt:"][..]),
        ("/proc/net/snmp", &["Tcp:"][..]),
    ] {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        let lines: Vec<&str> = text.lines().collect();
        for pair in lines.chunks(2) {
            let [names, values] = pair else { continue };
            let Some(prefix) = prefixes.iter().find(|p| names.starts_with(**p)) else {
                continue;
            };
            let nonzero: Vec<String> = names
                .split_whitespace()
                .zip(values.split_whitespace())
                .skip(1)
                .filter(|(_, v)| *v != "0")
                .map(|(n, v)| format!("{n}={v}"))
                .collect();
            say(&format!("counters {prefix} {}", nonzero.join(" ")));
        }
    }
    for file in ["/proc/net/sockstat", "/proc/sys/net/ipv4/tcp_mem"] {
        if let Ok(text) = std::fs::read_to_string(file) {
            say(&format!(
                "counters {file}: {}",
                text.trim().replace('\n', "; ")
            ));
        }
    }
}

/// Waits for `child` up to `limit`; the result as `exit=N`, `signal=N` or `timeout=S`.
fn wait(mut child: Child, limit: Duration) -> String {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return describe(status),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return format!("timeout={}", limit.as_secs());
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(err) => return format!("notrun=wait_failed_{}", err.raw_os_error().unwrap_or(0)),
        }
    }
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit={code}"),
        (None, Some(sig)) => format!("signal={sig}"),
        (None, None) => "exit=-1".into(),
    }
}

fn run_backend_report() {
    let status = Command::new(XTASK)
        .arg("matrix-backend")
        .stdin(Stdio::null())
        .status();
    if let Err(err) = status {
        say(&format!("@@matrix warn {XTASK} matrix-backend: {err}"));
    }
}

/// Open files allowed to the tests, as on a typical host (the kernel gives init 1024/4096,
/// too few for tests that open thousands of sockets).
const NOFILE: libc::rlim_t = 65536;

fn raise_nofile() -> io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: NOFILE,
        rlim_max: NOFILE,
    };
    // SAFETY: `limit` is a valid rlimit read by the kernel during the call; as root (PID 1)
    // we may raise the hard limit up to fs.nr_open (1048576 by default).
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Mounts /proc, /sys, /dev (devtmpfs) and /tmp (tmpfs).
fn mount_all() -> io::Result<()> {
    mount("proc", "/proc", "proc")?;
    mount("sysfs", "/sys", "sysfs")?;
    mount("devtmpfs", "/dev", "devtmpfs")?;
    mount("tmpfs", "/tmp", "tmpfs")
}

fn mount(source: &str, target: &str, fstype: &str) -> io::Result<()> {
    let _ = std::fs::create_dir_all(target);
    let c = |s: &str| CString::new(s).map_err(io::Error::other);
    let (source, target, fstype) = (c(source)?, c(target)?, c(fstype)?);
    // SAFETY: the three pointers are NUL-terminated strings alive for the call; data is
    // null, which every filesystem mounted here accepts.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `ip link set lo up`: SIOCGIFFLAGS, add IFF_UP, SIOCSIFFLAGS.
fn loopback_up() -> io::Result<()> {
    // SAFETY: socket(2) with constant arguments; the fd is closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let result = set_up(fd);
    // SAFETY: `fd` is the socket opened above and not used after this.
    unsafe { libc::close(fd) };
    result
}

fn set_up(fd: i32) -> io::Result<()> {
    // SAFETY: ifreq is plain data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: `req` is a valid ifreq naming "lo"; the kernel fills ifru_flags.
    if unsafe { libc::ioctl(fd, request(libc::SIOCGIFFLAGS), &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFFLAGS filled the flags member of the union, so reading it is valid.
    unsafe { req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
    // SAFETY: as above; the kernel only reads `req`.
    if unsafe { libc::ioctl(fd, request(libc::SIOCSIFFLAGS), &req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// An ioctl request number as this libc's `ioctl` takes it (glibc: c_ulong, musl: c_int).
#[allow(clippy::unnecessary_cast, reason = "a no-op on glibc, needed on musl")]
fn request(code: libc::c_ulong) -> libc::Ioctl {
    code as libc::Ioctl
}

/// Syncs and reboots, which qemu's `-no-reboot` turns into an exit. Not RB_POWER_OFF: the
/// tiny kernel has no ACPI, and there power-off only halts, leaving qemu running.
fn reboot_vm() -> ! {
    // SAFETY: sync and reboot take no pointers; as PID 1 we may reboot.
    unsafe {
        libc::sync();
        libc::reboot(libc::RB_AUTOBOOT);
    }
    // reboot only returns on failure (not PID 1, no CAP_SYS_BOOT): leave via panic=-1.
    say("@@matrix warn reboot failed");
    std::process::exit(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_lines_give_args_and_timeout() {
        let step = Step::parse("ring-rt/net\t/matrix/ring-rt.net\t::epoll --skip slow\t60")
            .expect("a valid line");
        assert_eq!(step.args, ["::epoll", "--skip", "slow"]);
        assert_eq!(step.timeout, Duration::from_secs(60));
        let bare = Step::parse("a\t/matrix/a\t-\t5").expect("a valid line");
        assert!(bare.args.is_empty());
        assert!(Step::parse("a\t/matrix/a\t-").is_none());
    }
}
