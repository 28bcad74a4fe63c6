//! Building the test binaries of ring-core and ring-rt and finding them, from
//! `cargo test --no-run --message-format=json`: whatever tests exist today are what runs.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

/// The packages whose tests the matrix runs.
pub const PACKAGES: [&str; 2] = ["ring-core", "ring-rt"];

/// The static target VM binaries are built for.
pub const MUSL: &str = "x86_64-unknown-linux-musl";

/// One test executable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestBinary {
    /// "ring-core" or "ring-rt".
    pub package: String,
    /// The cargo target: "lib" for unit tests, else the `tests/<name>.rs` name.
    pub target: String,
    /// True for `tests/*.rs` binaries; false for the lib's unit tests.
    pub is_integration: bool,
    /// Its source uses `#[ring_rt::test]`, whose `::uring` half fails (not ignored) where
    /// io_uring cannot run.
    pub uses_test_macro: bool,
    pub path: PathBuf,
}

impl TestBinary {
    /// `ring-core/driver`, `ring-rt/lib`: the name in logs and notes.
    pub fn name(&self) -> String {
        format!("{}/{}", self.package, self.target)
    }

    /// A file name safe for logs and the initramfs: `ring-core.driver`.
    pub fn file_name(&self) -> String {
        format!("{}.{}", self.package, self.target)
    }
}

/// The outcome of building one package's tests.
#[derive(Clone, Debug)]
pub struct Built {
    pub package: &'static str,
    pub binaries: Vec<TestBinary>,
    /// `Some(why)` when cargo failed: rows running this package fail with it.
    pub error: Option<String>,
}

/// `cargo`, as the running `cargo xtask` was started with.
pub fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// The workspace root (xtask's parent).
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// Builds each package's tests (for `target`, or the host when `None`), one cargo call per
/// package so that one package failing to build does not hide the other's tests.
pub fn build_all(target: Option<&str>, log_dir: &Path) -> Vec<Built> {
    PACKAGES
        .iter()
        .map(|package| build(package, target, log_dir))
        .collect()
}

fn build(package: &'static str, target: Option<&str>, log_dir: &Path) -> Built {
    let mut cmd = cargo();
    cmd.current_dir(workspace_root())
        .args(["test", "--no-run", "--message-format=json", "-p", package])
        // Keeps building after a target fails to compile (cargo test's spelling of
        // --keep-going), so one broken test file hides no other.
        .arg("--no-fail-fast")
        .stdin(Stdio::null());
    if let Some(target) = target {
        cmd.args(["--target", target]);
    }
    let label = format!("build-{package}-{}", target.unwrap_or("host"));
    progress!("building {package} tests ({})", target.unwrap_or("host"));
    match cmd.output() {
        Ok(out) => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let _ = std::fs::write(log_dir.join(format!("{label}.log")), stderr.as_bytes());
            let binaries = parse_artifacts(package, &String::from_utf8_lossy(&out.stdout));
            let error = (!out.status.success()).then(|| build_error(&stderr, log_dir, &label));
            Built {
                package,
                binaries,
                error,
            }
        }
        Err(err) => Built {
            package,
            binaries: Vec::new(),
            error: Some(format!("cannot run cargo: {err}")),
        },
    }
}

/// The first error line of a failed build, and where the full log is.
fn build_error(stderr: &str, log_dir: &Path, label: &str) -> String {
    let first = stderr
        .lines()
        .find(|l| l.starts_with("error"))
        .unwrap_or("cargo failed");
    format!(
        "build failed: {first} (log: {})",
        log_dir.join(format!("{label}.log")).display()
    )
}

/// Test executables out of cargo's JSON messages.
pub fn parse_artifacts(package: &str, json_lines: &str) -> Vec<TestBinary> {
    json_lines
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|msg| msg["reason"] == "compiler-artifact" && msg["profile"]["test"] == true)
        .filter_map(|msg| {
            let path = msg["executable"].as_str()?;
            let kinds = msg["target"]["kind"].as_array()?;
            let is_integration = kinds.iter().any(|k| k == "test");
            let target = if is_integration {
                msg["target"]["name"].as_str()?.to_string()
            } else {
                "lib".to_string()
            };
            let source = msg["target"]["src_path"].as_str().map(Path::new);
            Some(TestBinary {
                package: package.to_string(),
                target,
                is_integration,
                uses_test_macro: is_integration && source.is_some_and(uses_test_macro),
                path: PathBuf::from(path),
            })
        })
        .collect()
}

/// True when the test file at `source` uses `#[ring_rt::test]` (an unreadable file: no).
fn uses_test_macro(source: &Path) -> bool {
    std::fs::read_to_string(source).is_ok_and(|text| text.contains("#[ring_rt::test"))
}

/// True when `rustup` lists `target` as installed, or there is no rustup to ask.
fn has_target(target: &str) -> bool {
    match Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
    {
        Ok(out) => String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.trim() == target),
        Err(_) => true,
    }
}

/// Installs the musl target with rustup when missing; the error says the command.
pub fn ensure_musl_target() -> io::Result<()> {
    if has_target(MUSL) {
        return Ok(());
    }
    progress!("rustup target add {MUSL}");
    let status = Command::new("rustup")
        .args(["target", "add", MUSL])
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "`rustup target add {MUSL}` failed; run it by hand"
        )))
    }
}

/// Builds xtask's `xtask` and `matrix-init` binaries for musl (the VM's `/init` and the
/// backend report), returning their paths.
pub fn build_vm_tools(log_dir: &Path) -> io::Result<(PathBuf, PathBuf)> {
    let out = cargo()
        .current_dir(workspace_root())
        .args(["build", "--message-format=json", "-p", "xtask", "--bins"])
        .args(["--target", MUSL])
        .stdin(Stdio::null())
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let _ = std::fs::write(log_dir.join("build-xtask-musl.log"), stderr.as_bytes());
    if !out.status.success() {
        return Err(io::Error::other(build_error(
            &stderr,
            log_dir,
            "build-xtask-musl",
        )));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let find = |name: &str| executable(&stdout, name);
    match (find("xtask"), find("matrix-init")) {
        (Some(xtask), Some(init)) => Ok((xtask, init)),
        _ => Err(io::Error::other(
            "cargo built no xtask/matrix-init executables",
        )),
    }
}

fn executable(json_lines: &str, name: &str) -> Option<PathBuf> {
    json_lines
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|msg| msg["reason"] == "compiler-artifact" && msg["target"]["name"] == name)
        .find_map(|msg| msg["executable"].as_str().map(PathBuf::from))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_artifacts_are_found_and_named() {
        let json = r#"{"reason":"compiler-artifact","profile":{"test":false},"target":{"kind":["lib"],"name":"ring_core"},"executable":null}
{"reason":"compiler-artifact","profile":{"test":true},"target":{"kind":["lib"],"name":"ring_core"},"executable":"/t/ring_core-1"}
{"reason":"compiler-artifact","profile":{"test":true},"target":{"kind":["test"],"name":"driver"},"executable":"/t/driver-2"}
{"reason":"build-finished","success":true}"#;
        let found = parse_artifacts("ring-core", json);
        let names: Vec<String> = found.iter().map(TestBinary::name).collect();
        assert_eq!(names, ["ring-core/lib", "ring-core/driver"]);
        assert!(found[1].is_integration && !found[0].is_integration);
        assert_eq!(found[1].path, PathBuf::from("/t/driver-2"));
        assert!(!found[1].uses_test_macro, "no src_path, nothing read");
    }

    #[test]
    fn binaries_written_with_the_test_macro_are_recognised() {
        let rt = workspace_root().join("crates/ring-rt/tests");
        let line = |name: &str| {
            format!(
                r#"{{"reason":"compiler-artifact","profile":{{"test":true}},"target":{{"kind":["test"],"name":"{name}","src_path":"{}"}},"executable":"/t/{name}"}}"#,
                rt.join(format!("{name}.rs")).display()
            )
        };
        let json = [line("macros"), line("tokio_users"), line("net")].join("\n");
        let found = parse_artifacts("ring-rt", &json);
        let with: Vec<&str> = found
            .iter()
            .filter(|b| b.uses_test_macro)
            .map(|b| b.target.as_str())
            .collect();
        assert_eq!(with, ["macros", "tokio_users"]);
    }

    #[test]
    fn bins_are_found_by_name() {
        let json = r#"{"reason":"compiler-artifact","profile":{"test":false},"target":{"kind":["bin"],"name":"matrix-init"},"executable":"/t/matrix-init"}"#;
        assert_eq!(
            executable(json, "matrix-init"),
            Some(PathBuf::from("/t/matrix-init"))
        );
        assert_eq!(executable(json, "xtask"), None);
    }
}
