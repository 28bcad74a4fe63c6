//! `cargo xtask matrix-backend`: builds a ring-rt runtime here and prints which backend it
//! chose, why, and the io_uring features it may use, as one `@@matrix backend` line.
//!
//! Every matrix row runs this in the row's own conditions (its `RING_FEATURES`,
//! `RING_RT_BACKEND`, seccomp filter, or VM kernel), so the reported choice is the runtime's
//! own, not a guess. [`BackendLine::parse`] reads the line back.

use std::fmt;
use std::process::ExitCode;

use ring_core::errno::errno_name;
use ring_rt::Runtime;

/// The prefix of the line; the rest is `key=value` pairs with `reason=` last.
pub const MARKER: &str = "@@matrix backend ";

/// What one runtime reported about its backend.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackendLine {
    /// "uring", "epoll", or "error" when the runtime could not be built.
    pub kind: String,
    /// The `io_uring_setup` errno name when io_uring could not be set up, else "-".
    pub errno: String,
    /// `uname -r` of the kernel the runtime ran on.
    pub kernel: String,
    /// The io_uring features the runtime may use (after any mask); empty on epoll.
    pub features: Vec<String>,
    /// The runtime's own words for the choice (or the build error).
    pub reason: String,
}

impl BackendLine {
    /// Reads the line out of `output`; `None` when absent or malformed.
    pub fn parse(output: &str) -> Option<BackendLine> {
        let line = output.lines().find_map(|l| l.split_once(MARKER))?.1;
        let (pairs, reason) = line.split_once("reason=")?;
        let mut out = BackendLine {
            reason: reason.trim().to_string(),
            ..BackendLine::default()
        };
        for (key, value) in pairs.split_whitespace().filter_map(|p| p.split_once('=')) {
            match key {
                "kind" => out.kind = value.to_string(),
                "errno" => out.errno = value.to_string(),
                "kernel" => out.kernel = value.to_string(),
                "features" => out.features = split_list(value),
                _ => {}
            }
        }
        (!out.kind.is_empty()).then_some(out)
    }

    /// The features as a comma list, "-" when none.
    pub fn features_text(&self) -> String {
        if self.features.is_empty() {
            "-".into()
        } else {
            self.features.join(",")
        }
    }
}

impl fmt::Display for BackendLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{MARKER}kind={} errno={} kernel={} features={} reason={}",
            self.kind,
            self.errno,
            self.kernel,
            self.features_text(),
            self.reason.replace('\n', " ")
        )
    }
}

fn split_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .filter(|s| !s.is_empty() && *s != "-")
        .map(String::from)
        .collect()
}

/// Builds a runtime with the environment's settings and prints what it chose.
pub fn run(args: &[String]) -> ExitCode {
    if let Some(arg) = args.first() {
        eprintln!("cargo xtask matrix-backend takes no arguments (got {arg:?})");
        return ExitCode::from(2);
    }
    let line = observe();
    println!("{line}");
    if line.kind == "error" {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// The backend a default runtime picks here.
pub fn observe() -> BackendLine {
    let kernel = kernel_release();
    match Runtime::new() {
        Ok(rt) => {
            let choice = rt.backend();
            BackendLine {
                kind: choice.kind.name().to_string(),
                errno: choice
                    .setup_error
                    .as_ref()
                    .map_or("-".into(), |e| errno_name(e.errno).to_string()),
                kernel,
                features: rt.features().map_or_else(Vec::new, |f| {
                    f.used_by_runtime().into_iter().map(String::from).collect()
                }),
                reason: choice.reason.clone(),
            }
        }
        Err(err) => BackendLine {
            kind: "error".into(),
            errno: "-".into(),
            kernel,
            features: Vec::new(),
            reason: format!("building a runtime failed: {err}"),
        },
    }
}

/// `uname -r`, or "?" when /proc is not mounted.
fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_round_trips_through_display_and_parse() {
        let line = BackendLine {
            kind: "epoll".into(),
            errno: "EPERM".into(),
            kernel: "6.12.1".into(),
            features: vec![],
            reason: "io_uring unavailable: io_uring_setup failed with EPERM".into(),
        };
        let text = format!("boot noise\n{line}\nmore\n");
        assert_eq!(BackendLine::parse(&text), Some(line));
    }

    #[test]
    fn features_list_is_split_on_commas() {
        let text =
            "@@matrix backend kind=uring errno=- kernel=6.18 features=ExtArg,FastPoll reason=x";
        let line = BackendLine::parse(text).expect("a valid line");
        assert_eq!(line.features, ["ExtArg", "FastPoll"]);
        assert_eq!(line.features_text(), "ExtArg,FastPoll");
    }

    #[test]
    fn missing_marker_is_none() {
        assert_eq!(BackendLine::parse("kind=uring reason=x"), None);
    }
}
