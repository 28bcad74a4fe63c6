//! Running a row on the host: each test binary as a child with the row's environment and,
//! for the seccomp rows, the filter; output to a log file, a time limit, counts from libtest.

use std::fs::File;
use std::io;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::backend::BackendLine;
use super::binaries::{Built, TestBinary};
use super::libtest::{BinaryRun, Exit};
use super::rows::{Place, Row};
use ring_testkit::seccomp;

/// Per-binary time limit on the host: each takes seconds; a hang is a failure, and must
/// not cost more than a minute per row.
pub const BINARY_TIMEOUT: Duration = Duration::from_secs(60);

/// What a host row produced.
pub struct HostOutcome {
    pub backend: Option<BackendLine>,
    pub runs: Vec<BinaryRun>,
}

/// Applies the row's environment and seccomp filter to `cmd`.
fn apply_place(cmd: &mut Command, place: &Place) {
    // Rows start from a clean slate: the caller's own RING_* settings must not leak in.
    cmd.env_remove("RING_FEATURES")
        .env_remove("RING_RT_BACKEND");
    if let Place::Host { env, seccomp_errno } = place {
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        if let Some(errno) = seccomp_errno {
            seccomp::block_io_uring(cmd, *errno);
        }
    }
}

/// Runs the row's binaries (chosen from `built` by its suite), plus the backend report.
pub fn run_row(row: &Row, built: &[Built], log_dir: &Path) -> HostOutcome {
    let backend = backend_report(row, log_dir);
    let runs = super::select(row, built)
        .into_iter()
        .map(|(bin, args)| run_binary(row, &bin, args, log_dir))
        .collect();
    HostOutcome { backend, runs }
}

/// `xtask matrix-backend` run in the row's conditions.
fn backend_report(row: &Row, log_dir: &Path) -> Option<BackendLine> {
    let exe = std::env::current_exe().ok()?;
    let mut cmd = Command::new(exe);
    cmd.arg("matrix-backend").stdin(Stdio::null());
    apply_place(&mut cmd, &row.place);
    let out = cmd.output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let _ = std::fs::write(log_dir.join("backend.log"), text.as_bytes());
    BackendLine::parse(&text)
}

fn run_binary(row: &Row, bin: &TestBinary, args: Vec<String>, log_dir: &Path) -> BinaryRun {
    let log = log_dir.join(format!("{}.log", bin.file_name()));
    let start = Instant::now();
    let exit = match spawn(row, bin, &args, &log) {
        Ok(child) => wait_with_timeout(child, BINARY_TIMEOUT),
        Err(err) => Exit::NotRun(format!("cannot start {}: {err}", bin.path.display())),
    };
    let output = std::fs::read_to_string(&log).unwrap_or_default();
    let mut run = BinaryRun::from_output(bin.name(), args, exit, &output);
    run.secs = start.elapsed().as_secs_f64();
    run
}

fn spawn(row: &Row, bin: &TestBinary, args: &[String], log: &PathBuf) -> io::Result<Child> {
    let out = File::create(log)?;
    let err = out.try_clone()?;
    let mut cmd = Command::new(&bin.path);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        // Its own process group, so a timeout kills whatever the tests started too.
        .process_group(0);
    apply_place(&mut cmd, &row.place);
    cmd.spawn()
}

/// Waits for `child`, killing its process group after `limit`.
pub fn wait_with_timeout(mut child: Child, limit: Duration) -> Exit {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return exit_of(status),
            Ok(None) if Instant::now() >= deadline => {
                kill_group(&child);
                let _ = child.wait();
                return Exit::TimedOut(limit.as_secs());
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(err) => return Exit::NotRun(format!("wait failed: {err}")),
        }
    }
}

fn kill_group(child: &Child) {
    let Ok(pid) = i32::try_from(child.id()) else {
        return;
    };
    // SAFETY: kill(2) with a negative pid signals the process group the child leads (it was
    // spawned with process_group(0)); no memory is involved.
    unsafe {
        libc::kill(-pid, libc::SIGKILL);
    }
}

/// The verdict for an exit status.
pub fn exit_of(status: ExitStatus) -> Exit {
    match (status.code(), status.signal()) {
        (Some(0), _) => Exit::Success,
        (Some(code), _) => Exit::Code(code),
        (None, Some(sig)) => Exit::Signal(sig),
        (None, None) => Exit::Code(-1),
    }
}
