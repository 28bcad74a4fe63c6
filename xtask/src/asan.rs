//! `cargo xtask asan`: ring-core's and ring-rt's test suites under AddressSanitizer
//! (nightly), their test binaries run as many at once as there are cores.
//!
//! `cargo test` runs test binaries one after another. Under ASan, on CI's 2 cores, the 30
//! binaries took 206 s that way and 120-121 s two at a time, every one passing (measured by
//! hand on 2026-11-29). Each binary is a process of its own, so the tests that count their
//! own fds see only their own, as in the kernel matrix's rows, which run the same binaries
//! side by side. Each runs in its package's directory, as `cargo test` runs it, and its
//! output goes to a log of its own, printed whole when it fails.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use serde_json::Value;

use crate::matrix::{cores, in_parallel, workspace_root, PACKAGES};

/// The host target, named: with `--target`, cargo gives `RUSTFLAGS` to the tests and what
/// they link, not to build scripts and proc macros, which then need no sanitizer runtime.
const TARGET: &str = "x86_64-unknown-linux-gnu";

/// An allocation too large to satisfy returns null, as in a normal build, so `fs::read` of
/// a huge sparse file reports `OutOfMemory` (a test checks it) instead of ASan aborting the
/// process.
const ASAN_OPTIONS: &str = "allocator_may_return_null=1";

const USAGE: &str = "usage: cargo xtask asan

Builds ring-core's and ring-rt's tests with `cargo +nightly` and -Zsanitizer=address into
target/asan, then runs the test binaries as many at once as there are cores, each in its
package's directory. Logs: target/asan/logs/<package>.<target>.log";

/// One test binary to run.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Binary {
    /// `ring-rt/net`, `ring-core/lib`.
    name: String,
    path: PathBuf,
    /// Its package's directory, where `cargo test` would run it.
    dir: PathBuf,
}

/// How one binary ended.
struct Ran {
    passed: bool,
    line: String,
}

pub fn run(args: &[String]) -> ExitCode {
    if let Some(arg) = args.first() {
        let help = matches!(arg.as_str(), "-h" | "--help");
        if help {
            println!("{USAGE}");
        } else {
            eprintln!("unknown argument {arg:?}\n\n{USAGE}");
        }
        return if help {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(2)
        };
    }
    let root = workspace_root();
    let target_dir = root.join("target").join("asan");
    let binaries = match build(&root, &target_dir) {
        Ok(binaries) => binaries,
        Err(err) => {
            eprintln!("asan: {err}");
            return ExitCode::FAILURE;
        }
    };
    let logs = target_dir.join("logs");
    if let Err(err) = std::fs::create_dir_all(&logs) {
        eprintln!("asan: cannot create {}: {err}", logs.display());
        return ExitCode::FAILURE;
    }
    let jobs = cores();
    println!("asan: {} test binaries, {jobs} at a time", binaries.len());
    let start = Instant::now();
    let results = in_parallel(&binaries, jobs, |binary| {
        let ran = run_one(binary, &logs);
        println!("{}", ran.line);
        ran
    });
    let failed: Vec<&str> = binaries
        .iter()
        .zip(&results)
        .filter(|(_, ran)| !ran.passed)
        .map(|(binary, _)| binary.name.as_str())
        .collect();
    let secs = start.elapsed().as_secs_f64();
    if failed.is_empty() {
        println!(
            "asan: all {} binaries passed in {secs:.0} s",
            binaries.len()
        );
        ExitCode::SUCCESS
    } else {
        println!(
            "asan: {} of {} binaries failed in {secs:.0} s: {}",
            failed.len(),
            binaries.len(),
            failed.join(", ")
        );
        ExitCode::FAILURE
    }
}

/// Builds the tests with the sanitizer and returns their binaries.
fn build(root: &Path, target_dir: &Path) -> io::Result<Vec<Binary>> {
    let mut cmd = Command::new("cargo");
    cmd.arg("+nightly")
        .args(["test", "--no-run", "--tests", "--target", TARGET])
        .arg("--message-format=json-render-diagnostics")
        .args(PACKAGES.iter().flat_map(|p| ["-p", p]))
        .current_dir(root)
        .env("RUSTFLAGS", "-Zsanitizer=address")
        .env("CARGO_TARGET_DIR", target_dir)
        // What `cargo xtask` (a stable cargo) left in the environment would otherwise
        // choose the toolchain or the flags: `+nightly` and `RUSTFLAGS` must.
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("RUSTC")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .stdin(Stdio::null())
        .stderr(Stdio::inherit());
    let out = cmd.output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "cargo +nightly test --no-run failed ({})",
            out.status
        )));
    }
    let binaries = parse_artifacts(&String::from_utf8_lossy(&out.stdout));
    if binaries.is_empty() {
        return Err(io::Error::other("cargo built no test binaries"));
    }
    Ok(binaries)
}

/// Test binaries out of cargo's JSON messages, in the order cargo reported them.
fn parse_artifacts(json_lines: &str) -> Vec<Binary> {
    json_lines
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|msg| msg["reason"] == "compiler-artifact" && msg["profile"]["test"] == true)
        .filter_map(|msg| {
            let path = PathBuf::from(msg["executable"].as_str()?);
            let dir = Path::new(msg["manifest_path"].as_str()?).parent()?;
            let package = dir.file_name()?.to_string_lossy();
            let is_integration = msg["target"]["kind"]
                .as_array()?
                .iter()
                .any(|k| k == "test");
            let target = if is_integration {
                msg["target"]["name"].as_str()?
            } else {
                "lib"
            };
            Some(Binary {
                name: format!("{package}/{target}"),
                path,
                dir: dir.to_path_buf(),
            })
        })
        .collect()
}

/// Runs one binary, its stdout and stderr into one log; says how it went in one line, or
/// with the whole log when it failed.
fn run_one(binary: &Binary, logs: &Path) -> Ran {
    let log = logs.join(format!("{}.log", binary.name.replace('/', ".")));
    let start = Instant::now();
    let status = File::create(&log).and_then(|out| {
        Command::new(&binary.path)
            .current_dir(&binary.dir)
            .env(
                "ASAN_OPTIONS",
                asan_options(std::env::var("ASAN_OPTIONS").ok()),
            )
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .status()
    });
    let secs = start.elapsed().as_secs_f64();
    let output = std::fs::read_to_string(&log).unwrap_or_default();
    let passed = matches!(status, Ok(s) if s.success());
    let how = match &status {
        Ok(s) => summary(&output).unwrap_or_else(|| s.to_string()),
        Err(err) => format!("cannot run: {err}"),
    };
    let mut line = format!(
        "{} {} ({secs:.1} s): {how}",
        if passed { "ok    " } else { "FAILED" },
        binary.name
    );
    if !passed {
        line.push_str(&format!(
            "\n---- {} ({}) ----\n{output}---- end of {} ----",
            binary.name,
            log.display(),
            binary.name
        ));
    }
    Ran { passed, line }
}

/// libtest's last `test result:` line, which counts what passed, failed and was ignored.
fn summary(output: &str) -> Option<String> {
    output
        .lines()
        .rev()
        .find(|l| l.starts_with("test result:"))
        .map(str::to_string)
}

/// Ours after the caller's, so a caller's own options stay and ours decide where both say.
fn asan_options(caller: Option<String>) -> String {
    match caller {
        Some(theirs) if !theirs.is_empty() => format!("{theirs}:{ASAN_OPTIONS}"),
        _ => ASAN_OPTIONS.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_artifacts_become_binaries_run_in_their_package() {
        let json = r#"{"reason":"compiler-artifact","profile":{"test":false},"manifest_path":"/w/crates/ring-core/Cargo.toml","target":{"kind":["lib"],"name":"ring_core"},"executable":null}
{"reason":"compiler-artifact","profile":{"test":true},"manifest_path":"/w/crates/ring-core/Cargo.toml","target":{"kind":["lib"],"name":"ring_core"},"executable":"/t/ring_core-1"}
{"reason":"build-finished","success":true}
{"reason":"compiler-artifact","profile":{"test":true},"manifest_path":"/w/crates/ring-rt/Cargo.toml","target":{"kind":["test"],"name":"net"},"executable":"/t/net-2"}"#;
        assert_eq!(
            parse_artifacts(json),
            vec![
                Binary {
                    name: "ring-core/lib".into(),
                    path: "/t/ring_core-1".into(),
                    dir: "/w/crates/ring-core".into(),
                },
                Binary {
                    name: "ring-rt/net".into(),
                    path: "/t/net-2".into(),
                    dir: "/w/crates/ring-rt".into(),
                },
            ]
        );
    }

    #[test]
    fn the_summary_is_libtests_last_result_line() {
        let out = "running 2 tests\ntest a ... ok\ntest result: ok. 1 passed; 0 failed\n\
                   running 1 test\ntest result: FAILED. 0 passed; 1 failed\nerror: exit 101\n";
        assert_eq!(
            summary(out).as_deref(),
            Some("test result: FAILED. 0 passed; 1 failed")
        );
        assert_eq!(
            summary("==1==ERROR: AddressSanitizer: heap-use-after-free"),
            None
        );
    }

    #[test]
    fn the_callers_asan_options_stay_before_ours() {
        assert_eq!(asan_options(None), ASAN_OPTIONS);
        assert_eq!(asan_options(Some(String::new())), ASAN_OPTIONS);
        assert_eq!(
            asan_options(Some("detect_leaks=0".into())),
            format!("detect_leaks=0:{ASAN_OPTIONS}")
        );
    }

    /// A binary that fails is reported with its whole output; one that passes in a line.
    #[test]
    fn a_failing_binary_is_reported_with_its_log() {
        let dir = std::env::temp_dir().join(format!("xtask-asan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = |name: &str, body: &str| {
            let path = dir.join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            let mut perms = std::fs::metadata(&path).unwrap().permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
            std::fs::set_permissions(&path, perms).unwrap();
            Binary {
                name: format!("pkg/{name}"),
                path,
                dir: dir.clone(),
            }
        };
        let good = script("good", "pwd; echo 'test result: ok. 3 passed'");
        let bad = script("bad", "echo ran in $PWD; echo boom >&2; exit 3");
        let ran = run_one(&good, &dir);
        assert!(ran.passed, "{}", ran.line);
        assert!(
            ran.line.ends_with("test result: ok. 3 passed"),
            "{}",
            ran.line
        );
        let ran = run_one(&bad, &dir);
        assert!(!ran.passed);
        assert!(ran.line.contains("boom"), "{}", ran.line);
        assert!(
            ran.line.contains(&format!("ran in {}", dir.display())),
            "{}",
            ran.line
        );
        let missing = Binary {
            name: "pkg/missing".into(),
            path: dir.join("no-such-binary"),
            dir: dir.clone(),
        };
        let ran = run_one(&missing, &dir);
        assert!(
            !ran.passed && ran.line.contains("cannot run"),
            "{}",
            ran.line
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
