//! The echo benchmark's outputs: markdown tables, CSV and JSON, and the machine they were
//! measured on.

use std::fmt::Write;
use std::process::Command;

use crate::cell::Cell;
use crate::idle::IdleReport;
use crate::json::Object;

/// The server every CPU ratio is taken against.
pub const BASELINE: &str = "tokio-ct";

/// Where the numbers come from.
#[derive(Clone, Debug)]
pub struct Machine {
    /// CPUs online.
    pub nproc: usize,
    /// `uname -r`.
    pub kernel: String,
    /// `model name` from /proc/cpuinfo.
    pub cpu_model: String,
    /// UTC time the run started.
    pub date: String,
    /// /proc/loadavg at the start.
    pub loadavg: String,
    /// The git commit measured, `-dirty` when ring-rt, ring-core or the example had
    /// uncommitted changes.
    pub commit: String,
}

impl Machine {
    /// Reads this machine's description.
    pub fn current() -> Machine {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpuinfo = read("/proc/cpuinfo");
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map_or("unknown".into(), |(_, m)| m.trim().to_string());
        let date = Command::new("date")
            .args(["-u", "+%Y-%m-%d %H:%M UTC"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        // SAFETY: sysconf takes an integer and returns one.
        let nproc = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
        Machine {
            nproc,
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
            cpu_model,
            date,
            loadavg: read("/proc/loadavg").trim().to_string(),
            commit: git_commit(),
        }
    }

    /// A markdown bullet list.
    pub fn markdown(&self) -> String {
        format!(
            "- date: {}\n- commit: {}\n- CPUs: {} x {}\n- kernel: {}\n- load average at start: {}\n",
            self.date, self.commit, self.nproc, self.cpu_model, self.kernel, self.loadavg
        )
    }

    /// One JSON object.
    pub fn to_json(&self) -> String {
        Object::default()
            .num("nproc", self.nproc as f64)
            .str("kernel", &self.kernel)
            .str("cpu_model", &self.cpu_model)
            .str("date", &self.date)
            .str("loadavg", &self.loadavg)
            .str("commit", &self.commit)
            .finish()
    }
}

fn git_commit() -> String {
    let run = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let Some(head) = run(&["rev-parse", "--short", "HEAD"]) else {
        return "unknown".into();
    };
    let measured = [
        "status",
        "--porcelain",
        "--",
        ":/crates/ring-rt",
        ":/crates/ring-core",
        ":/examples",
    ];
    match run(&measured) {
        Some(changes) if !changes.is_empty() => format!("{head}-dirty"),
        _ => head,
    }
}

/// One table per message length; rows by connections, then server.
pub fn markdown_cells(cells: &[Cell]) -> String {
    let mut out = String::new();
    let mut lens: Vec<usize> = cells.iter().map(|c| c.shape.len).collect();
    lens.sort_unstable();
    lens.dedup();
    for len in lens {
        let _ = writeln!(out, "\n#### {len}-byte messages\n");
        out.push_str("| conns | server | req/s | p50 us | p99 us | p99.9 us | server CPU us/req | vs tokio-ct | enters/req | server RSS MiB | client CPU % | other CPU % |\n");
        out.push_str("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        let mut rows: Vec<&Cell> = cells.iter().filter(|c| c.shape.len == len).collect();
        rows.sort_by_key(|c| c.shape.conns);
        for c in rows {
            out.push_str(&markdown_row(c, cells));
        }
    }
    out
}

fn markdown_row(c: &Cell, all: &[Cell]) -> String {
    let l = &c.load;
    let baseline = all.iter().find(|b| {
        b.server == BASELINE && b.shape.conns == c.shape.conns && b.shape.len == c.shape.len
    });
    let ratio = baseline.map_or("-".into(), |b| {
        format!("{:.2}x", c.cpu_us_per_req() / b.cpu_us_per_req().max(1e-9))
    });
    let enters = c.enters_per_req().map_or("-".into(), |e| format!("{e:.3}"));
    let mut flags = String::new();
    if l.errors > 0.0 || l.mismatches > 0.0 {
        let _ = write!(
            flags,
            " **{} errors, {} mismatches**",
            l.errors, l.mismatches
        );
    }
    if l.is_client_saturated() {
        flags.push_str(" (sat)");
    }
    format!(
        "| {} | {} | {:.0}{flags} | {:.0} | {:.0} | {:.0} | {:.2} | {ratio} | {enters} | {:.1} | {:.0} | {:.0} |\n",
        c.shape.conns,
        c.server,
        l.req_per_s,
        l.p50_us,
        l.p99_us,
        l.p999_us,
        c.cpu_us_per_req(),
        c.rss_kib as f64 / 1024.0,
        100.0 * l.client_cpu_s / l.elapsed_s.max(1e-9),
        c.other_busy_pct(),
    )
}

/// The idle-connection memory table.
pub fn markdown_idle(idle: &[IdleReport]) -> String {
    let mut out = String::from("| server | idle conns | RSS before KiB | RSS after KiB | bytes per idle conn |\n|---|---:|---:|---:|---:|\n");
    for r in idle {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.0} |",
            r.server,
            r.conns,
            r.rss_before_kib,
            r.rss_after_kib,
            r.bytes_per_conn()
        );
    }
    out
}

/// CSV of every cell, one header line.
pub fn csv(cells: &[Cell]) -> String {
    let mut out = String::from("server,conns,len,requests,elapsed_s,req_per_s,p50_us,p99_us,p999_us,errors,mismatches,client_cpu_s,server_cpu_s,server_cpu_us_per_req,enters_per_req,server_rss_kib,other_busy_pct\n");
    for c in cells {
        let l = &c.load;
        let enters = c
            .enters_per_req()
            .map_or(String::new(), |e| format!("{e:.4}"));
        let _ = writeln!(
            out,
            "{},{},{},{},{:.3},{:.1},{},{},{},{},{},{:.3},{:.3},{:.3},{enters},{},{:.1}",
            c.server,
            c.shape.conns,
            c.shape.len,
            l.requests,
            l.elapsed_s,
            l.req_per_s,
            l.p50_us,
            l.p99_us,
            l.p999_us,
            l.errors,
            l.mismatches,
            l.client_cpu_s,
            c.server_cpu_s,
            c.cpu_us_per_req(),
            c.rss_kib,
            c.other_busy_pct()
        );
    }
    out
}

/// `{"machine":{..},"cells":[..],"idle":[..]}`.
pub fn json(machine: &Machine, cells: &[Cell], idle: &[IdleReport]) -> String {
    let cells: Vec<String> = cells.iter().map(Cell::to_json).collect();
    let idle: Vec<String> = idle.iter().map(IdleReport::to_json).collect();
    format!(
        "{{\"machine\":{},\n\"cells\":[\n{}\n],\n\"idle\":[\n{}\n]}}\n",
        machine.to_json(),
        cells.join(",\n"),
        idle.join(",\n")
    )
}
