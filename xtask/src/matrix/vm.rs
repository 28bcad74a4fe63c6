//! Booting a kernel under qemu (TCG: this machine's KVM cannot run stock kernels) with the
//! matrix initramfs, under a wall-clock limit, and reading the serial log back into results.

use std::fs::File;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::backend::BackendLine;
use super::host::wait_with_timeout;
use super::libtest::{BinaryRun, Exit};

/// Wall-clock allowance per VM on top of its binaries' own limits: boot, the backend
/// report and shutdown (a few seconds each under emulation), with margin.
pub const VM_BOOT_ALLOWANCE: Duration = Duration::from_secs(60);

/// A binary in the VM's plan: its name and libtest arguments.
pub type Planned = (String, Vec<String>);

/// What one VM run produced.
pub struct VmOutcome {
    pub backend: Option<BackendLine>,
    pub runs: Vec<BinaryRun>,
    /// Boot-level problems: qemu failed, the VM timed out, init never finished.
    pub notes: Vec<String>,
}

/// Boots `kernel` with `initrd`, `cmdline` appended, saving the serial console to `log`;
/// killed after `limit`.
pub fn boot(
    kernel: &Path,
    initrd: &Path,
    cmdline: &str,
    log: &Path,
    planned: &[Planned],
    limit: Duration,
) -> VmOutcome {
    let start = Instant::now();
    let exit = match spawn(kernel, initrd, cmdline, log) {
        Ok(child) => wait_with_timeout(child, limit),
        Err(err) => Exit::NotRun(format!("cannot start qemu-system-x86_64: {err}")),
    };
    let serial = std::fs::read(log).unwrap_or_default();
    let serial = String::from_utf8_lossy(&serial);
    let mut outcome = parse_serial(&serial, planned);
    if !serial.contains("@@matrix done") {
        let stderr = std::fs::read_to_string(log.with_extension("qemu.err")).unwrap_or_default();
        let stderr = stderr.lines().last().unwrap_or("").trim().to_string();
        outcome.notes.push(format!(
            "VM did not finish ({exit} after {:.0} s){}; serial log: {}",
            start.elapsed().as_secs_f64(),
            if stderr.is_empty() {
                String::new()
            } else {
                format!("; qemu: {stderr}")
            },
            log.display()
        ));
    }
    outcome
}

fn spawn(
    kernel: &Path,
    initrd: &Path,
    cmdline: &str,
    log: &Path,
) -> std::io::Result<std::process::Child> {
    let append = format!("console=ttyS0 panic=-1 quiet {cmdline}");
    let mut serial = std::ffi::OsString::from("file:");
    serial.push(log);
    let _ = std::fs::remove_file(log);
    let err = File::create(log.with_extension("qemu.err"))?;
    Command::new("qemu-system-x86_64")
        .args(["-accel", "tcg", "-cpu", "max", "-m", "512", "-smp", "1"])
        .args(["-display", "none", "-monitor", "none", "-no-reboot"])
        .arg("-serial")
        .arg(serial)
        .arg("-kernel")
        .arg(kernel)
        .arg("-initrd")
        .arg(initrd)
        .arg("-append")
        .arg(append.trim_end())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
}

/// Reads matrix-init's `@@matrix` lines: the backend line, then per binary a `begin`, the
/// libtest output, and an `end` with its exit. Planned binaries that never began are
/// reported as not run.
pub fn parse_serial(serial: &str, planned: &[Planned]) -> VmOutcome {
    let lines: Vec<&str> = serial.lines().collect();
    let runs = planned
        .iter()
        .map(|name| binary_run(&lines, name))
        .collect();
    let notes = lines
        .iter()
        .filter_map(|l| {
            l.split_once("@@matrix warn ")
                .map(|(_, w)| w.trim().to_string())
        })
        .collect();
    VmOutcome {
        backend: BackendLine::parse(serial),
        runs,
        notes,
    }
}

fn binary_run(lines: &[&str], (name, args): &Planned) -> BinaryRun {
    let begin = format!("@@matrix begin {name}");
    let end = format!("@@matrix end {name} ");
    let Some(first) = lines.iter().position(|l| l.trim_end() == begin) else {
        let exit = Exit::NotRun("the VM stopped before it started".into());
        return BinaryRun::from_output(name.clone(), args.clone(), exit, "");
    };
    let rest = &lines[first + 1..];
    let last = rest.iter().position(|l| l.contains(&end));
    let mut segment = rest[..last.unwrap_or(rest.len())].join("\n");
    // A hung test leaves `test NAME ... ` unterminated, so the end marker shares its line.
    if let Some((before, _)) = last.and_then(|i| rest[i].split_once(&end)) {
        segment.push('\n');
        segment.push_str(before);
    }
    let (exit, secs) = match last {
        Some(i) => parse_end(rest[i].split_once(&end).map_or("", |(_, t)| t)),
        None => (
            Exit::NotRun("the VM stopped while it ran (timeout or crash)".into()),
            0.0,
        ),
    };
    let mut run = BinaryRun::from_output(name.clone(), args.clone(), exit, &segment);
    run.secs = secs;
    run
}

/// `exit=0 secs=1.2` → (exit, seconds).
fn parse_end(text: &str) -> (Exit, f64) {
    let mut exit = Exit::NotRun(format!("unreadable end line {text:?}"));
    let mut secs = 0.0;
    for (key, value) in text.split_whitespace().filter_map(|t| t.split_once('=')) {
        let number = value.parse::<i32>();
        exit = match (key, number) {
            ("exit", Ok(0)) => Exit::Success,
            ("exit", Ok(code)) => Exit::Code(code),
            ("signal", Ok(sig)) => Exit::Signal(sig),
            ("timeout", Ok(s)) => Exit::TimedOut(s.unsigned_abs().into()),
            ("notrun", _) => Exit::NotRun(value.replace('_', " ")),
            ("secs", _) => {
                secs = value.parse().unwrap_or(0.0);
                continue;
            }
            _ => continue,
        };
    }
    (exit, secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERIAL: &str = "\
[    0.000000] Linux version 6.12\r
@@matrix boot kernel=6.12.1\r
@@matrix backend kind=uring errno=- kernel=6.12.1 features=ExtArg reason=io_uring available\r
@@matrix begin ring-core/driver\r
running 2 tests\r
test result: ok. 2 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out\r
@@matrix end ring-core/driver exit=0 secs=3.5\r
@@matrix begin ring-rt/net\r
test a ... ok\r
";

    #[test]
    fn a_timed_out_binary_names_the_test_it_was_in() {
        let serial = "@@matrix begin ring-rt/x\ntest a ... ok\ntest b::uring ... \
                      @@matrix end ring-rt/x timeout=60 secs=60.0\n";
        let out = parse_serial(serial, &[("ring-rt/x".to_string(), Vec::new())]);
        assert_eq!(out.runs[0].exit, Exit::TimedOut(60));
        assert_eq!(out.runs[0].unfinished.as_deref(), Some("b::uring"));
    }

    #[test]
    fn finished_binaries_get_their_counts_and_exit() {
        let planned = [("ring-core/driver".to_string(), Vec::new())];
        let out = parse_serial(SERIAL, &planned);
        let run = &out.runs[0];
        assert_eq!(run.exit, Exit::Success);
        assert_eq!(run.summary.map(|c| (c.passed, c.ignored)), Some((2, 1)));
        assert!((run.secs - 3.5).abs() < 1e-9);
        assert_eq!(out.backend.map(|b| b.kind), Some("uring".into()));
    }

    #[test]
    fn a_binary_cut_off_or_never_started_is_not_run() {
        let planned = [
            ("ring-rt/net".to_string(), Vec::new()),
            ("ring-rt/fs".to_string(), Vec::new()),
        ];
        let out = parse_serial(SERIAL, &planned);
        assert!(matches!(&out.runs[0].exit, Exit::NotRun(w) if w.contains("while it ran")));
        assert!(matches!(&out.runs[1].exit, Exit::NotRun(w) if w.contains("before")));
        assert!(out.runs.iter().all(BinaryRun::is_broken));
    }

    #[test]
    fn end_lines_give_exit_kinds() {
        assert_eq!(parse_end("exit=101 secs=2").0, Exit::Code(101));
        assert_eq!(parse_end("signal=9 secs=2").0, Exit::Signal(9));
        assert_eq!(parse_end("timeout=90 secs=90").0, Exit::TimedOut(90));
    }
}
