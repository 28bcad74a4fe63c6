//! The seed workload's report: syscall counts from `strace -f -c` on a child process that
//! runs one variant (separately from the timed runs, which strace would slow), and the
//! markdown table and JSON of timings and counts.

use std::io;
use std::path::Path;
use std::process::{Command, Stdio};

use super::{Config, Run, Variant};
use crate::cell::strace_calls;
use crate::json::Object;

/// Syscall counts for one variant, traced from process start to exit.
#[derive(Clone, Debug)]
pub struct Traced {
    /// Every syscall strace counted (all threads, including process start-up).
    pub total: u64,
    /// Calls per syscall, most frequent first.
    pub calls: Vec<(String, u64)>,
}

impl Traced {
    /// Calls of `syscall` (0 if never made).
    pub fn of(&self, syscall: &str) -> u64 {
        self.calls
            .iter()
            .find(|(name, _)| name == syscall)
            .map_or(0, |(_, n)| *n)
    }

    /// Reads a `strace -c` summary table.
    pub fn parse(summary: &str) -> Traced {
        let mut calls: Vec<(String, u64)> = summary
            .lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let name = *fields.last()?;
                let n = fields.get(3)?.parse::<u64>().ok()?;
                (name != "total").then(|| (name.to_string(), n))
            })
            .collect();
        calls.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Traced {
            total: strace_calls(summary, "total"),
            calls,
        }
    }

    /// The `count` most frequent syscalls, as `name N, name N`.
    pub fn top(&self, count: usize) -> String {
        let top: Vec<String> = self
            .calls
            .iter()
            .take(count)
            .map(|(name, n)| format!("{name} {n}"))
            .collect();
        top.join(", ")
    }
}

/// Runs `variant` in a child (`exe --child VARIANT ...`) under `strace -f -c`, the summary
/// kept in `out_dir`. Fails if strace is missing or the child fails verification.
pub fn trace(exe: &Path, variant: Variant, config: &Config, out_dir: &Path) -> io::Result<Traced> {
    std::fs::create_dir_all(out_dir)?;
    let out = out_dir.join(format!("strace-seed-{}.txt", variant.name()));
    let status = Command::new("strace")
        .args(["-f", "-c", "-o"])
        .arg(&out)
        .arg("--")
        .arg(exe)
        .args(["--child", variant.name()])
        .args(["--pages", &config.pages.to_string()])
        .args(["--inflight", &config.inflight.to_string()])
        .args([
            "--blocking-threads",
            &config.blocking_threads.unwrap_or(0).to_string(),
        ])
        .args([
            "--batch-wait-us",
            &config.batch_wait.as_micros().to_string(),
        ])
        .arg("--dir")
        .arg(&config.dir)
        .stdout(Stdio::null())
        .status()
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => io::Error::new(
                e.kind(),
                "strace not found: install it with `apt-get update && apt-get install -y strace`",
            ),
            _ => e,
        })?;
    if !status.success() {
        return Err(io::Error::other(format!(
            "{variant} under strace exited with {status}"
        )));
    }
    Ok(Traced::parse(&std::fs::read_to_string(&out)?))
}

/// One variant's line in the report: the median of its timed runs, and its trace if taken.
#[derive(Clone, Debug)]
pub struct Row {
    /// The median timed run.
    pub run: Run,
    /// Every timed run's wall time, in milliseconds, in the order run.
    pub runs_ms: Vec<f64>,
    /// Syscall counts, when traced.
    pub traced: Option<Traced>,
}

impl Row {
    /// A row from its timed runs (at least one) and trace.
    pub fn new(mut runs: Vec<Run>, traced: Option<Traced>) -> io::Result<Row> {
        let runs_ms: Vec<f64> = runs.iter().map(ms).collect();
        runs.sort_by_key(|r| r.elapsed);
        let median = runs.len() / 2;
        let run = runs
            .into_iter()
            .nth(median)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no timed run"))?;
        Ok(Row {
            run,
            runs_ms,
            traced,
        })
    }

    fn per_page(&self, n: u64) -> f64 {
        n as f64 / self.run.verified.max(1) as f64
    }

    /// One markdown row; `std_ms` is the std variant's time, when it ran.
    pub fn markdown_row(&self, std_ms: Option<f64>) -> String {
        let ms = ms(&self.run);
        let speedup = std_ms.map_or("-".to_string(), |s| format!("{:.2}x", s / ms));
        let (total, enters, per_page, top) = match &self.traced {
            Some(t) => (
                t.total.to_string(),
                t.of("io_uring_enter").to_string(),
                format!("{:.2}", self.per_page(t.total)),
                t.top(5),
            ),
            None => ("-".into(), "-".into(), "-".into(), "-".into()),
        };
        format!(
            "| {} | {} | {:.0} | {} | {} | {} | {} | {} |",
            self.run.variant, self.run.depth, ms, speedup, total, enters, per_page, top
        )
    }

    /// One flat JSON object.
    pub fn to_json(&self, std_ms: Option<f64>) -> String {
        let ms = ms(&self.run);
        let mut obj = Object::default()
            .str("variant", self.run.variant.name())
            .num("depth", self.run.depth as f64)
            .num("pages", self.run.verified as f64)
            .num("ms", ms)
            .str("runs_ms", &format!("{:?}", self.runs_ms))
            .opt("speedup_vs_std", std_ms.map(|s| s / ms));
        if let Some(t) = &self.traced {
            obj = obj
                .num("strace_total", t.total as f64)
                .num("syscalls_per_page", self.per_page(t.total));
            for (name, n) in t.calls.iter().take(8) {
                obj = obj.num(&format!("strace_{name}"), *n as f64);
            }
        }
        obj.finish()
    }
}

/// The markdown table of `rows` (std's row, if present, is the baseline).
pub fn markdown(rows: &[Row]) -> String {
    let std_ms = std_ms(rows);
    let mut out = String::from(
        "| variant | in flight | ms | x vs std | syscalls (strace) | io_uring_enter | syscalls/page | top syscalls |\n|---|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for row in rows {
        out.push_str(&row.markdown_row(std_ms));
        out.push('\n');
    }
    out
}

/// `rows` as a JSON array, one object per line.
pub fn json(rows: &[Row]) -> String {
    let std_ms = std_ms(rows);
    let objs: Vec<String> = rows.iter().map(|r| r.to_json(std_ms)).collect();
    format!("[\n{}\n]\n", objs.join(",\n"))
}

fn std_ms(rows: &[Row]) -> Option<f64> {
    rows.iter()
        .find(|r| r.run.variant == Variant::Std)
        .map(|r| ms(&r.run))
}

fn ms(run: &Run) -> f64 {
    run.elapsed.as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strace_summary_is_sorted_by_calls_and_keeps_the_total() {
        let summary = "\
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 90.00    1.000000          15     65536           fdatasync
  5.00    0.050000           1     65537         1 pwrite64
  1.00    0.010000           1        12           mmap
------ ----------- ----------- --------- --------- ----------------
100.00    1.060000           8    131085         1 total
";
        let t = Traced::parse(summary);
        assert_eq!(t.total, 131085);
        assert_eq!(t.of("pwrite64"), 65537);
        assert_eq!(t.of("io_uring_enter"), 0);
        assert_eq!(t.top(2), "pwrite64 65537, fdatasync 65536");
    }
}
