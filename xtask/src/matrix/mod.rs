//! `cargo xtask kernel-matrix`: ring-core's and ring-rt's tests on the host kernel (both
//! backends), under older kernels' feature profiles, with io_uring blocked by seccomp, and
//! on real 6.1 / 6.12 / no-io_uring kernels under qemu; one row each, with pass/skip/fail
//! counts, the backend the runtime chose and the features it used.
//!
//! Output: a table on stdout, `target/kernel-matrix/matrix.{md,json}`, logs under
//! `target/kernel-matrix/logs/`; the exit status is nonzero when any row fails.

/// A progress line on stderr, with the seconds since the matrix started.
macro_rules! progress {
    ($($arg:tt)+) => {
        eprintln!("[{:>4.0} s] kernel-matrix: {}", $crate::matrix::elapsed_secs(), format!($($arg)+))
    };
}

pub mod backend;
mod binaries;
mod host;
mod initramfs;
mod kernels;
mod libtest;
mod report;
mod rows;

mod tools;
mod vm;
mod vm_rows;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

pub(crate) use binaries::{workspace_root, PACKAGES};
use binaries::{Built, TestBinary};
use report::RowResult;
use rows::{Group, Row};

const USAGE: &str = "usage: cargo xtask kernel-matrix [--rows host,profiles,seccomp,vm] [--quick]
                                  [--vm-filter FILTER] [--vm-full] [--skip TEST]...

  --rows       row groups to run (default: all)
  --quick      host, profile and seccomp rows only (no VMs)
  --vm-filter  libtest filter for ring-rt's tests in VMs (default: all of them)
  --vm-full    run every test binary in VMs (default: the lean suite, without reliability_*)
  --skip       leave tests whose names contain TEST out of every row (named in the output)";

/// Parsed command line.
struct Options {
    groups: Vec<Group>,
    vm_filter: String,
    /// `--skip`s for every row.
    skips: Vec<String>,
    /// Every binary in VMs, not the lean suite.
    vm_full: bool,
}

impl Options {
    fn parse(args: &[String]) -> Result<Options, String> {
        let mut opts = Options {
            groups: Group::ALL.to_vec(),
            vm_filter: rows::VM_RT_FILTER.to_string(),
            skips: Vec::new(),
            vm_full: false,
        };
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut value = || args.next().ok_or(format!("{arg} needs a value"));
            match arg.as_str() {
                "--rows" => opts.groups = rows::parse_groups(value()?)?,
                "--quick" => opts.groups = vec![Group::Host, Group::Profiles, Group::Seccomp],
                "--vm-filter" => opts.vm_filter = value()?.clone(),
                "--skip" => opts.skips.push(value()?.clone()),
                "--vm-full" => opts.vm_full = true,
                _ => return Err(format!("unknown argument {arg:?}")),
            }
        }
        Ok(opts)
    }
}

/// Runs the selected rows and reports them; nonzero exit when any row fails.
pub fn run(args: &[String]) -> ExitCode {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let opts = match Options::parse(args) {
        Ok(opts) => opts,
        Err(err) => {
            eprintln!("{err}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let root = target_dir().join("kernel-matrix");
    let logs = root.join("logs");
    if let Err(err) = std::fs::create_dir_all(&logs) {
        eprintln!("cannot create {}: {err}", logs.display());
        return ExitCode::FAILURE;
    }
    let start = *START.get_or_init(Instant::now);
    let mut all = rows::rows(&opts.groups, &opts.vm_filter);
    for row in &mut all {
        row.suite.skips.extend(opts.skips.iter().cloned());
        if opts.vm_full {
            row.suite.skip_binaries.clear();
        }
    }
    let (vm_rows, host_rows): (Vec<Row>, Vec<Row>) =
        all.into_iter().partition(|r| r.group == Group::Vm);
    let built = if host_rows.is_empty() {
        Vec::new()
    } else {
        binaries::build_all(None, &logs)
    };
    let results = std::thread::scope(|scope| {
        // What the VMs boot with (static builds, kernel downloads, the 6.1 kernel build:
        // about 7 minutes of CPU-bound work in a fresh clone) is made while the host rows
        // run, at the lowest CPU priority: those rows leave CPU idle (a profile row: 139 s
        // on the clock, 67 s of CPU, 2026-11-29; two at once about one core), and they must
        // not be slowed.
        // Started after the host build, so the two cargo builds never wait on each other.
        let prep = (!vm_rows.is_empty()).then(|| {
            scope.spawn(|| {
                lower_this_threads_priority();
                vm_rows::prepare(&vm_rows, &root, &logs)
            })
        });
        let mut results = run_host_rows(&host_rows, &built, &logs);
        if let Some(prep) = prep {
            let prepared = prep
                .join()
                .unwrap_or_else(|_| vm_rows::Prepared::failed("preparing the VMs panicked"));
            results.extend(vm_rows::run(&vm_rows, prepared, &logs));
        }
        results
    });
    finish(&results, &root, &about(&opts, start.elapsed()))
}

/// Gives the calling thread, and every process it starts from now on, the lowest CPU
/// priority (nice 19). Linux keeps the nice value per thread and a child starts with its
/// parent thread's, so the rest of xtask and the tests it runs keep theirs. Best effort: a
/// failure is reported and the work runs at the default priority. (No I/O priority: nice
/// 19 already means best-effort level 7, and the build's writes go out through the page
/// cache's writeback threads at their own priority, review of 2026-11-29.)
fn lower_this_threads_priority() {
    // SAFETY: gettid has no preconditions and cannot fail.
    let tid = unsafe { libc::gettid() };
    // SAFETY: setpriority takes and returns plain integers; no memory is involved.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 19) } != 0 {
        progress!(
            "cannot lower the VM preparation's priority ({}); it runs at the default",
            std::io::Error::last_os_error()
        );
    }
}

static START: OnceLock<Instant> = OnceLock::new();

/// Seconds since `run` started, for progress lines.
pub fn elapsed_secs() -> f64 {
    START.get_or_init(Instant::now).elapsed().as_secs_f64()
}

/// `$CARGO_TARGET_DIR`, else the workspace's `target/`.
fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if Path::new(&dir).is_absolute() => PathBuf::from(dir),
        Some(dir) => binaries::workspace_root().join(dir),
        None => binaries::workspace_root().join("target"),
    }
}

/// The sentence saying what ran, for the table's heading and the files.
fn about(opts: &Options, took: Duration) -> String {
    let asked = if opts.skips.is_empty() {
        String::new()
    } else {
        format!(" Every row skips {:?} (--skip).", opts.skips)
    };
    format!(
        "Host rows run every test binary of ring-core and ring-rt (host · uring: ring-rt's \
         `::uring` tests, host · epoll: its `::epoll` tests); profile and seccomp rows run the \
         integration-test binaries; {} s limit per binary. {} Skipped = libtest's ignored (a \
         feature the kernel or profile lacks). On rows that expect epoll, binaries written with \
         `#[ring_rt::test]` (which fails, never ignores, a backend that cannot run) run with \
         `--skip {}`: their io_uring halves are left out there, not failed.{asked} Whole run: \
         {:.0} s.",
        host::BINARY_TIMEOUT.as_secs(),
        vm_suite_text(opts),
        rows::URING_HALVES,
        took.as_secs_f64()
    )
}

/// What the VM rows run, named: the filter, the binaries and tests left out, and why.
fn vm_suite_text(opts: &Options) -> String {
    let filter = if opts.vm_filter.is_empty() {
        "all ring-rt tests".to_string()
    } else {
        format!("ring-rt tests matching {:?}", opts.vm_filter)
    };
    let named = |list: &[(&str, &str)], suffix: &str| -> Vec<String> {
        list.iter()
            .map(|(name, why)| format!("`{name}{suffix}` ({why})"))
            .collect()
    };
    let mut left_out = named(rows::VM_SKIPS, "");
    if !opts.vm_full {
        left_out.extend(named(rows::VM_LEAN_SKIP_BINARIES, "*"));
    }
    format!(
        "VM rows (qemu TCG, one CPU, {} s limit per binary) run ring-core's integration tests \
         and {filter}, leaving out {}.",
        vm_rows::VM_BINARY_TIMEOUT.as_secs(),
        left_out.join(", ")
    )
}

/// The test binaries `row` runs, each with its libtest arguments.
fn select(row: &Row, built: &[Built]) -> Vec<(TestBinary, Vec<String>)> {
    let wanted = |b: &&TestBinary| {
        (b.is_integration || !row.suite.integration_only) && row.suite.runs_binary(&b.target)
    };
    built
        .iter()
        .flat_map(|pkg| pkg.binaries.iter().filter(wanted))
        .filter_map(|bin| match bin.package.as_str() {
            "ring-core" if row.suite.core => Some((bin.clone(), row.suite.args(false))),
            "ring-rt" if row.suite.rt_filter.is_some() => Some((bin.clone(), rt_args(row, bin))),
            _ => None,
        })
        .collect()
}

/// A ring-rt binary's arguments: the row's, plus `--skip ::uring` for a binary written with
/// `#[ring_rt::test]` on a row where the runtime must choose epoll. Those tests fail where
/// their backend cannot run (they never pass silently); libtest-mimic binaries report
/// the same halves as ignored by themselves.
fn rt_args(row: &Row, bin: &TestBinary) -> Vec<String> {
    let mut args = row.suite.args(true);
    if bin.uses_test_macro && row.skips_uring_halves() {
        args.extend(["--skip".to_string(), rows::URING_HALVES.to_string()]);
    }
    args
}

/// Build failures and missing binaries of the packages `row` runs.
fn build_problems(row: &Row, built: &[Built]) -> Vec<String> {
    let mut problems = Vec::new();
    for pkg in built {
        let runs = match pkg.package {
            "ring-core" => row.suite.core,
            _ => row.suite.rt_filter.is_some(),
        };
        if !runs {
            continue;
        }
        if let Some(err) = &pkg.error {
            problems.push(format!("{}: {err}", pkg.package));
        } else if select(row, std::slice::from_ref(pkg)).is_empty() {
            problems.push(format!("{}: no test binaries for this row", pkg.package));
        }
    }
    problems
}

/// Fails the row when the runtime's choice is not the expected one.
fn check_backend(row: &Row, result: &mut RowResult) {
    let want = &row.expect;
    match &result.backend {
        None => result
            .problems
            .push("no backend report (xtask matrix-backend did not run)".into()),
        Some(got) if got.kind != want.backend => result.problems.push(format!(
            "expected the {} backend, the runtime chose {} ({})",
            want.backend, got.kind, got.reason
        )),
        Some(got) => {
            if let Some(errno) = want.errno.filter(|e| *e != got.errno) {
                result.problems.push(format!(
                    "expected io_uring setup to fail with {errno}, got {} ({})",
                    got.errno, got.reason
                ));
            }
        }
    }
}

/// The row's name as a file name: `host · uring` → `host-uring`.
fn row_slug(row: &Row) -> String {
    let slug: String = row
        .name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    slug.replace("---", "-")
}

fn row_log_dir(logs: &Path, row: &Row) -> PathBuf {
    logs.join(row_slug(row))
}

/// Runs the host rows as many at once as there are cores, each row's binaries one after
/// another (a row's tests count its own process's fds, never another's). A row leaves most
/// of a core idle (the 6.1 profile: 139 s on the clock, 67 s of CPU, 2026-11-29: timers and
/// shutdown bounds wait), so one at a time left half the machine unused.
fn run_host_rows(rows: &[Row], built: &[Built], logs: &Path) -> Vec<RowResult> {
    in_parallel(rows, cores(), |row| {
        let start = Instant::now();
        let dir = row_log_dir(logs, row);
        let _ = std::fs::create_dir_all(&dir);
        progress!("{}", row.name);
        let out = host::run_row(row, built, &dir);
        let mut result = RowResult {
            row: row.clone(),
            backend: out.backend,
            runs: out.runs,
            problems: build_problems(row, built),
            secs: 0.0,
        };
        check_backend(row, &mut result);
        result.secs = start.elapsed().as_secs_f64();
        result
    })
}

/// The machine's cores (1 when unknown).
pub(crate) fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// `f` over `items` on up to `jobs` threads, each taking the next item as it finishes one;
/// the results come back in `items`' order. A panic in `f` is raised again here once every
/// thread has stopped (`thread::scope` does that).
pub(crate) fn in_parallel<T: Sync, R: Send>(
    items: &[T],
    jobs: usize,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<R>>> = Mutex::new((0..items.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, items.len().max(1)) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                let result = f(item);
                if let Ok(mut slots) = results.lock() {
                    slots[i] = Some(result);
                }
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_default()
        .into_iter()
        .flatten()
        .collect()
}

/// Prints the table and writes the files; the exit status says whether every row passed.
fn finish(results: &[RowResult], root: &Path, about: &str) -> ExitCode {
    println!(
        "{about}\n\n{}\n{}",
        report::table(results),
        report::details(results)
    );
    let md = root.join("matrix.md");
    let js = root.join("matrix.json");
    let json = serde_json::to_string_pretty(&report::json(results, about)).unwrap_or_default();
    for (path, text) in [(&md, report::markdown(results, about)), (&js, json)] {
        if let Err(err) = std::fs::write(path, text) {
            eprintln!("cannot write {}: {err}", path.display());
            return ExitCode::FAILURE;
        }
    }
    println!("wrote {} and {}", md.display(), js.display());
    if results.iter().any(RowResult::is_failed) {
        println!("\n{}", report::failures(results));
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_parallel_keeps_the_items_order() {
        let items: Vec<u64> = (0..9).collect();
        for jobs in [0, 1, 2, 16] {
            let out = in_parallel(&items, jobs, |&n| {
                // Later items finish first, so the order is not the finishing order.
                std::thread::sleep(Duration::from_millis(9 - n));
                n * 10
            });
            assert_eq!(
                out,
                (0..9).map(|n| n * 10).collect::<Vec<_>>(),
                "{jobs} jobs"
            );
        }
        assert!(in_parallel(&[] as &[u8], 2, |_| ()).is_empty());
    }

    fn binary(target: &str, uses_test_macro: bool) -> TestBinary {
        TestBinary {
            package: "ring-rt".into(),
            target: target.into(),
            is_integration: true,
            uses_test_macro,
            path: PathBuf::from(format!("/t/{target}")),
        }
    }

    fn skips_uring(args: &[String]) -> bool {
        args.windows(2)
            .any(|w| w[0] == "--skip" && w[1] == rows::URING_HALVES)
    }

    #[test]
    fn macro_binaries_skip_their_uring_halves_only_where_epoll_is_expected() {
        let seccomp = rows::rows(&[Group::Seccomp], "").remove(0);
        let profile = rows::rows(&[Group::Profiles], "")
            .into_iter()
            .find(|r| r.name == "profile 6.1")
            .expect("a 6.1 profile row");
        assert!(skips_uring(&rt_args(
            &seccomp,
            &binary("tokio_users", true)
        )));
        assert!(!skips_uring(&rt_args(&seccomp, &binary("net", false))));
        assert!(!skips_uring(&rt_args(
            &profile,
            &binary("tokio_users", true)
        )));
    }
}
