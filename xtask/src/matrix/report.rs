//! The matrix's results: one [`RowResult`] per row, printed as a table on stdout and
//! written as `matrix.md` and `matrix.json`.

use std::fmt::Write as _;

use serde_json::{json, Value};

use super::backend::BackendLine;
use super::libtest::{BinaryRun, Counts};
use super::rows::{Row, URING_HALVES};

/// What one row produced.
#[derive(Clone, Debug)]
pub struct RowResult {
    pub row: Row,
    /// What the runtime reported in this row's conditions.
    pub backend: Option<BackendLine>,
    pub runs: Vec<BinaryRun>,
    /// Why the row fails besides failed tests (wrong backend, build or boot failure).
    pub problems: Vec<String>,
    pub secs: f64,
}

impl RowResult {
    /// The sum over the row's binaries (a crashed binary counts as a failure).
    pub fn counts(&self) -> Counts {
        let mut total = Counts::default();
        for run in &self.runs {
            total.add(run.counts());
        }
        total
    }

    pub fn is_failed(&self) -> bool {
        self.counts().failed > 0 || !self.problems.is_empty()
    }

    /// Problems first, then each badly ended binary.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = self.problems.clone();
        notes.extend(self.runs.iter().filter_map(BinaryRun::note));
        notes
    }

    fn kernel(&self) -> &str {
        self.backend.as_ref().map_or("?", |b| b.kernel.as_str())
    }

    /// "uring", or "epoll (EPERM)" when io_uring setup failed.
    fn backend_text(&self) -> String {
        match &self.backend {
            Some(b) if b.errno != "-" && !b.errno.is_empty() => format!("{} ({})", b.kind, b.errno),
            Some(b) => b.kind.clone(),
            None => "?".into(),
        }
    }

    fn features(&self) -> String {
        self.backend
            .as_ref()
            .map_or("?".into(), BackendLine::features_text)
    }

    fn feature_count(&self) -> String {
        match &self.backend {
            Some(b) if b.features.is_empty() => "-".into(),
            Some(b) => b.features.len().to_string(),
            None => "?".into(),
        }
    }

    fn status(&self) -> &'static str {
        if self.is_failed() {
            "FAIL"
        } else {
            "ok"
        }
    }
}

const HEAD: [&str; 10] = [
    "row", "kind", "kernel", "backend", "features", "pass", "skip", "fail", "result", "note",
];

/// A row's cells; `note_len` shortens the first note and counts the rest (terminal), `None`
/// joins them all (files).
fn cells(r: &RowResult, features: String, note_len: Option<usize>) -> Vec<String> {
    let c = r.counts();
    let notes = r.notes();
    let note = match (note_len, notes.split_first()) {
        (_, None) => String::new(),
        (None, Some(_)) => notes.join("; "),
        (Some(len), Some((first, []))) => shorten(first, len),
        (Some(len), Some((first, rest))) => {
            format!("{} (+{} more)", shorten(first, len), rest.len())
        }
    };
    vec![
        r.row.name.clone(),
        r.row.kind.to_string(),
        r.kernel().to_string(),
        r.backend_text(),
        features,
        c.passed.to_string(),
        c.ignored.to_string(),
        c.failed.to_string(),
        r.status().to_string(),
        note,
    ]
}

fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let cut: String = text.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

/// The table for a terminal: features as a count (listed below), notes shortened.
pub fn table(results: &[RowResult]) -> String {
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| cells(r, r.feature_count(), Some(80)))
        .collect();
    let head: Vec<String> = HEAD.iter().map(|h| h.to_string()).collect();
    let widths: Vec<usize> = (0..HEAD.len())
        .map(|i| {
            rows.iter()
                .chain([&head])
                .map(|r| r[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in [&head].into_iter().chain(&rows) {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    out
}

/// Per row: the features used and every note in full.
pub fn details(results: &[RowResult]) -> String {
    let mut out = String::new();
    for r in results {
        let _ = writeln!(
            out,
            "{} ({:.0} s): features used: {}",
            r.row.name,
            r.secs,
            r.features()
        );
        if let Some(b) = &r.backend {
            let _ = writeln!(out, "    backend: {} ({})", b.kind, b.reason);
        }
        let left_out = uring_halves_left_out(r);
        if !left_out.is_empty() {
            let _ = writeln!(
                out,
                "    io_uring halves left out (--skip {}, #[ring_rt::test] binaries): {}",
                URING_HALVES,
                left_out.join(", ")
            );
        }
        for note in r.notes() {
            let _ = writeln!(out, "    note: {note}");
        }
    }
    out
}

/// Every failed row's notes and what its badly ended binaries printed about it: printed
/// last, so the tail of a CI log shows what failed.
pub fn failures(results: &[RowResult]) -> String {
    let mut out = String::new();
    for r in results.iter().filter(|r| r.is_failed()) {
        let _ = writeln!(out, "FAILED row {}:", r.row.name);
        for note in r.notes() {
            let _ = writeln!(out, "    note: {note}");
        }
        for run in r.runs.iter().filter(|run| !run.excerpt.is_empty()) {
            let _ = writeln!(out, "    {} said:", run.name);
            for line in &run.excerpt {
                let _ = writeln!(out, "        {line}");
            }
        }
    }
    out
}

/// The binaries this row ran with `--skip ::uring`.
fn uring_halves_left_out(r: &RowResult) -> Vec<&str> {
    r.runs
        .iter()
        .filter(|run| {
            run.args
                .windows(2)
                .any(|w| w[0] == "--skip" && w[1] == URING_HALVES)
        })
        .map(|run| run.name.as_str())
        .collect()
}

/// The markdown file: a heading, what ran, the full table, the details.
pub fn markdown(results: &[RowResult], preamble: &str) -> String {
    let mut out = format!("# ring-rt kernel matrix\n\n{preamble}\n\n");
    let _ = writeln!(out, "| {} |", HEAD.join(" | "));
    let _ = writeln!(out, "|{}", " --- |".repeat(HEAD.len()));
    for r in results {
        let row = cells(r, r.features().replace(',', ", "), None);
        let row: Vec<String> = row.iter().map(|c| c.replace('|', "\\|")).collect();
        let _ = writeln!(out, "| {} |", row.join(" | "));
    }
    let _ = write!(out, "\n## Details\n\n```\n{}```\n", details(results));
    out
}

/// The JSON file: every row with its binaries.
pub fn json(results: &[RowResult], preamble: &str) -> Value {
    let rows: Vec<Value> = results.iter().map(row_json).collect();
    json!({
        "about": preamble,
        "ok": !results.iter().any(RowResult::is_failed),
        "rows": rows,
    })
}

fn row_json(r: &RowResult) -> Value {
    let c = r.counts();
    let runs: Vec<Value> = r
        .runs
        .iter()
        .map(|b| {
            let s = b.counts();
            json!({
                "binary": b.name, "args": b.args, "exit": b.exit.to_string(),
                "has_summary": b.summary.is_some(), "failed_tests": b.failed_tests,
                "excerpt": b.excerpt,
                "passed": s.passed, "skipped": s.ignored, "failed": s.failed,
                "filtered_out": s.filtered, "secs": b.secs,
            })
        })
        .collect();
    json!({
        "row": r.row.name, "group": r.row.group.name(), "kind": r.row.kind.to_string(),
        "kernel": r.kernel(),
        "backend": r.backend.as_ref().map(|b| b.kind.clone()),
        "setup_errno": r.backend.as_ref().map(|b| b.errno.clone()).filter(|e| e != "-"),
        "backend_reason": r.backend.as_ref().map(|b| b.reason.clone()),
        "expected_backend": r.row.expect.backend,
        "features_used": r.backend.as_ref().map(|b| b.features.clone()),
        "passed": c.passed, "skipped": c.ignored, "failed": c.failed,
        "ok": !r.is_failed(), "notes": r.notes(), "secs": r.secs, "binaries": runs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::libtest::{parse_summary, Exit};
    use crate::matrix::rows::{rows, Group};

    fn result(problems: Vec<String>) -> RowResult {
        let row = rows(&[Group::Seccomp], "").remove(0);
        RowResult {
            row,
            backend: BackendLine::parse(
                "@@matrix backend kind=epoll errno=EPERM kernel=6.18 features=- reason=blocked",
            ),
            runs: vec![BinaryRun {
                name: "ring-core/driver".into(),
                args: Vec::new(),
                exit: Exit::Success,
                summary: parse_summary("test result: ok. 0 passed; 0 failed; 9 ignored;"),
                unfinished: None,
                failed_tests: Vec::new(),
                excerpt: Vec::new(),
                secs: 1.0,
            }],
            problems,
            secs: 1.0,
        }
    }

    #[test]
    fn a_clean_row_is_ok_and_shows_its_errno() {
        let r = result(Vec::new());
        assert!(!r.is_failed());
        let text = table(&[r]);
        assert!(
            text.contains("epoll (EPERM)") && text.contains(" ok"),
            "{text}"
        );
    }

    #[test]
    fn a_problem_fails_the_row_everywhere() {
        let r = result(vec!["expected uring".into()]);
        assert!(r.is_failed());
        assert!(table(std::slice::from_ref(&r)).contains("FAIL"));
        let md = markdown(std::slice::from_ref(&r), "about");
        assert!(md.contains("| seccomp EPERM |") && md.contains("expected uring"));
        let value = json(&[r], "about");
        assert_eq!(value["ok"], false);
        assert_eq!(value["rows"][0]["skipped"], 9);
    }

    #[test]
    fn failures_name_the_row_its_notes_and_what_the_binary_said() {
        let mut r = result(Vec::new());
        r.runs[0] = BinaryRun::from_output(
            "ring-rt/fs".into(),
            Vec::new(),
            Exit::Code(101),
            "test a ... FAILED\n\nfailures:\n\n---- a ----\nround 3: 5 bytes\n\n\
             test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured;\n",
        );
        let ok = result(Vec::new());
        let text = failures(&[ok, r]);
        assert!(text.starts_with("FAILED row seccomp EPERM:"), "{text}");
        assert!(text.contains("note: ring-rt/fs: a FAILED"), "{text}");
        assert!(text.contains("        round 3: 5 bytes"), "{text}");
        assert_eq!(text.matches("FAILED row").count(), 1, "{text}");
    }
}
