//! Reading test binaries' results: libtest's summary line into counts, and a binary's exit
//! into a verdict. Used the same way for host rows and for VM serial logs.

use std::fmt;

/// The four counts of a libtest summary (`ignored` is what the matrix calls skipped).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub passed: u32,
    pub failed: u32,
    pub ignored: u32,
    pub filtered: u32,
}

impl Counts {
    /// Adds `other` into `self`.
    pub fn add(&mut self, other: Counts) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.ignored += other.ignored;
        self.filtered += other.filtered;
    }
}

/// Parses `test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 2 filtered out; ...`.
pub fn parse_summary(line: &str) -> Option<Counts> {
    let rest = line.split_once("test result: ")?.1;
    let (_, rest) = rest.split_once(". ")?;
    let mut counts = Counts::default();
    let mut seen = 0;
    for part in rest.split(';') {
        let mut words = part.split_whitespace();
        let (Some(n), Some(what)) = (words.next(), words.next()) else {
            continue;
        };
        let Ok(n) = n.parse::<u32>() else { continue };
        seen += 1;
        match what {
            "passed" => counts.passed = n,
            "failed" => counts.failed = n,
            "ignored" => counts.ignored = n,
            "filtered" => counts.filtered = n,
            _ => {}
        }
    }
    (seen >= 3).then_some(counts)
}

/// The last summary in `output` (a binary prints one).
pub fn find_summary(output: &str) -> Option<Counts> {
    output.lines().rev().find_map(parse_summary)
}

/// How a test binary ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Exit status 0.
    Success,
    /// A nonzero exit status.
    Code(i32),
    /// Killed by a signal (a crash, or our kill after the timeout).
    Signal(i32),
    /// Killed after running past its time limit.
    TimedOut(u64),
    /// Never ran: the reason.
    NotRun(String),
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exit::Success => f.write_str("exit 0"),
            Exit::Code(code) => write!(f, "exit {code}"),
            Exit::Signal(sig) => write!(f, "killed by signal {sig}"),
            Exit::TimedOut(secs) => write!(f, "timed out after {secs} s"),
            Exit::NotRun(why) => write!(f, "not run: {why}"),
        }
    }
}

/// One test binary's run in one row.
#[derive(Clone, Debug)]
pub struct BinaryRun {
    /// The binary's short name (`ring_core-driver`).
    pub name: String,
    /// The libtest arguments passed (filter, `--skip`s).
    pub args: Vec<String>,
    pub exit: Exit,
    /// Its summary, when it printed one.
    pub summary: Option<Counts>,
    /// The test that started but never reported (what a hang or crash was running).
    pub unfinished: Option<String>,
    /// Names of the tests reported FAILED.
    pub failed_tests: Vec<String>,
    /// What a badly ended binary printed about it (see [`excerpt`]); empty for a clean run.
    pub excerpt: Vec<String>,
    pub secs: f64,
}

impl BinaryRun {
    /// A run read from the binary's output.
    pub fn from_output(name: String, args: Vec<String>, exit: Exit, output: &str) -> Self {
        let mut run = BinaryRun {
            name,
            args,
            exit,
            summary: find_summary(output),
            unfinished: unfinished_test(output),
            failed_tests: failed_tests(output),
            excerpt: Vec::new(),
            secs: 0.0,
        };
        if run.is_broken() {
            run.excerpt = excerpt(output);
        }
        run
    }

    /// The counts this run contributes: its summary, plus one failure when the binary
    /// ended badly without a failed test to show for it (crash, timeout, no summary).
    pub fn counts(&self) -> Counts {
        let mut counts = self.summary.unwrap_or_default();
        if self.is_broken() && counts.failed == 0 {
            counts.failed += 1;
        }
        counts
    }

    /// True when the binary did not end with a clean summary.
    pub fn is_broken(&self) -> bool {
        self.summary.is_none() || self.exit != Exit::Success
    }

    /// A note for the row when the binary ended badly.
    pub fn note(&self) -> Option<String> {
        if !self.is_broken() {
            return None;
        }
        // Failed tests with a summary: their names say it all (the exit is libtest's 101).
        if self.summary.is_some() && !self.failed_tests.is_empty() {
            return Some(format!(
                "{}: {} FAILED",
                self.name,
                self.failed_tests.join(", ")
            ));
        }
        let summary = if self.summary.is_some() {
            ""
        } else {
            ", no libtest summary"
        };
        let during = self
            .unfinished
            .as_ref()
            .map_or(String::new(), |t| format!(", during {t}"));
        Some(format!("{}: {}{summary}{during}", self.name, self.exit))
    }
}

/// Names from `test NAME ... FAILED` lines (colours stripped; a test run in a child process
/// and reported by its parent counts once).
pub fn failed_tests(output: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for line in output.lines().map(strip_ansi) {
        let Some((name, result)) = line
            .strip_prefix("test ")
            .and_then(|l| l.split_once(" ..."))
        else {
            continue;
        };
        let name = name.trim().to_string();
        if result.trim() == "FAILED" && !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// The most lines [`excerpt`] keeps.
const EXCERPT_LINES: usize = 40;

/// What a badly ended binary said about it, for the end of the matrix's output (a CI log
/// excerpt shows its tail): libtest's `failures:` section (each failed test's message)
/// and the `panicked at` lines with the message after each; with neither (a crash, a
/// hang), the output's last lines. At most [`EXCERPT_LINES`] lines.
pub fn excerpt(output: &str) -> Vec<String> {
    let lines: Vec<String> = output.lines().map(strip_ansi).collect();
    let mut kept: Vec<String> = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.contains("panicked at") {
            kept.extend(lines[i..].iter().take(2).cloned());
        }
    }
    if let Some(start) = lines.iter().position(|l| l.trim_end() == "failures:") {
        kept.extend(
            lines[start..]
                .iter()
                .take_while(|l| !l.starts_with("test result:"))
                .filter(|l| !l.trim().is_empty())
                .cloned(),
        );
    }
    if kept.is_empty() {
        let from = lines.len().saturating_sub(EXCERPT_LINES);
        kept = lines[from..].to_vec();
    }
    if kept.len() > EXCERPT_LINES {
        // The end names the failures; the start may be earlier, expected panics.
        kept.drain(..kept.len() - EXCERPT_LINES);
    }
    kept
}

/// `line` without ANSI colour sequences (`ESC [ ... m`), which libtest prints on a tty such
/// as the VM's serial console.
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            chars.by_ref().find(|&c| c == 'm');
        } else {
            out.push(c);
        }
    }
    out
}

/// The last `test NAME ... ` line with no result after it: the test running when the
/// binary hung or died.
pub fn unfinished_test(output: &str) -> Option<String> {
    let last = strip_ansi(output.lines().rev().find(|l| l.starts_with("test "))?);
    let (name, result) = last.strip_prefix("test ")?.split_once(" ...")?;
    result.trim().is_empty().then(|| name.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_line_gives_all_counts() {
        let line = "test result: FAILED. 3 passed; 1 failed; 2 ignored; 0 measured; \
                    5 filtered out; finished in 0.01s";
        let counts = parse_summary(line).expect("a summary");
        assert_eq!(
            counts,
            Counts {
                passed: 3,
                failed: 1,
                ignored: 2,
                filtered: 5
            }
        );
    }

    #[test]
    fn last_summary_wins_and_noise_is_ignored() {
        let out = "running 1 test\ntest a ... ok\n\
                   test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n\
                   [   1.2] random: crng init done\n";
        assert_eq!(find_summary(out).map(|c| c.passed), Some(1));
        assert_eq!(find_summary("no summary here"), None);
    }

    #[test]
    fn a_crash_without_failures_counts_as_one_failure() {
        let run = BinaryRun {
            name: "x".into(),
            args: Vec::new(),
            exit: Exit::Signal(11),
            summary: None,
            unfinished: unfinished_test("test a ... ok\ntest b::uring   ... \nboom\n"),
            failed_tests: Vec::new(),
            excerpt: Vec::new(),
            secs: 0.0,
        };
        assert_eq!(run.counts().failed, 1);
        assert!(run.note().expect("a note").contains("during b::uring"));
        assert!(run.note().expect("a note").contains("signal 11"));
    }

    #[test]
    fn failed_tests_are_named_once_without_colours() {
        let out = "test a::uring ... \u{1b}[31mFAILED\u{1b}[0m\ntest b ... ok\n\
                   test a::uring ... FAILED\ntest c ... FAILED\n";
        assert_eq!(failed_tests(out), ["a::uring", "c"]);
    }

    #[test]
    fn a_failure_keeps_its_message_and_panic_lines() {
        let out = "test a ... ok\nthread 'main' panicked at t.rs:1:2:\nboom\n\
                   stack backtrace:\n   0: x\ntest b ... FAILED\n\nfailures:\n\n\
                   ---- b ----\nround 3: 5 bytes\n\nfailures:\n    b\n\n\
                   test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured;\n";
        let run = BinaryRun::from_output("x".into(), Vec::new(), Exit::Code(101), out);
        assert_eq!(
            run.excerpt,
            [
                "thread 'main' panicked at t.rs:1:2:",
                "boom",
                "failures:",
                "---- b ----",
                "round 3: 5 bytes",
                "failures:",
                "    b"
            ]
        );
        let clean = "test a ... ok\ntest result: ok. 1 passed; 0 failed; 0 ignored;\n";
        let run = BinaryRun::from_output("x".into(), Vec::new(), Exit::Success, clean);
        assert!(run.excerpt.is_empty());
    }

    #[test]
    fn a_crash_keeps_the_last_lines() {
        let out: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let got = excerpt(&out);
        assert_eq!(got.len(), EXCERPT_LINES);
        assert_eq!(got.last().map(String::as_str), Some("line 99"));
    }

    #[test]
    fn a_clean_run_has_no_note() {
        let run = BinaryRun {
            name: "x".into(),
            args: Vec::new(),
            exit: Exit::Success,
            summary: parse_summary("test result: ok. 2 passed; 0 failed; 1 ignored;"),
            unfinished: None,
            failed_tests: Vec::new(),
            excerpt: Vec::new(),
            secs: 0.0,
        };
        assert_eq!(run.counts().passed, 2);
        assert_eq!(run.note(), None);
    }
}
