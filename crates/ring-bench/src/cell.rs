//! One benchmark cell: a server, a connection count and a message length. Runs `echo-load`
//! pinned to its own CPU and records what the run cost the server.

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::json::{self, Object};
use crate::server::Server;
use crate::stats::system_busy;
use crate::sys;

/// The shape of one cell.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Concurrent connections.
    pub conns: usize,
    /// Message length, bytes.
    pub len: usize,
}

/// What `echo-load --json` reported.
#[derive(Clone, Debug, Default)]
pub struct LoadRun {
    /// Round trips completed and verified.
    pub requests: f64,
    /// Wall time, seconds.
    pub elapsed_s: f64,
    /// Requests per second.
    pub req_per_s: f64,
    /// Latency percentiles, microseconds.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Failed connections.
    pub errors: f64,
    /// Echoes that differed from what was sent.
    pub mismatches: f64,
    /// The load generator's own CPU time, seconds.
    pub client_cpu_s: f64,
}

impl LoadRun {
    fn parse(obj: &str) -> io::Result<LoadRun> {
        let get = |key: &str| {
            json::number(obj, key).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("echo-load: no {key} in {obj}"),
                )
            })
        };
        Ok(LoadRun {
            requests: get("requests")?,
            elapsed_s: get("elapsed_s")?,
            req_per_s: get("req_per_s")?,
            p50_us: get("p50_us")?,
            p99_us: get("p99_us")?,
            p999_us: get("p999_us")?,
            errors: get("errors")?,
            mismatches: get("mismatches")?,
            client_cpu_s: get("client_cpu_s")?,
        })
    }

    /// Whether the load generator used (nearly) all of its core, so it, not the server,
    /// may have set the rate.
    pub fn is_client_saturated(&self) -> bool {
        self.client_cpu_s > 0.9 * self.elapsed_s
    }
}

/// Runs `echo-load` against `addr` for `requests_per_conn` round trips on each connection,
/// on any CPU; kills it after `timeout` (a server that stopped answering).
pub fn run_counted(
    echo_load: &Path,
    addr: SocketAddr,
    shape: Shape,
    requests_per_conn: u64,
    timeout: Duration,
) -> io::Result<LoadRun> {
    let mut cmd = Command::new(echo_load);
    cmd.arg("--addr").arg(addr.to_string());
    cmd.args(["--conns", &shape.conns.to_string()]);
    cmd.args(["--len", &shape.len.to_string()]);
    cmd.args(["--requests", &requests_per_conn.to_string(), "--json"]);
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    let deadline = Instant::now() + timeout;
    while child.try_wait()?.is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("echo-load still running after {} s", timeout.as_secs()),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // The load generator prints one line or a few: they fit in the pipes while it runs.
    load_result(child.wait_with_output()?)
}

/// Runs `echo-load` against `addr`, pinned to `cpu`.
pub fn run_load(
    echo_load: &Path,
    addr: SocketAddr,
    shape: Shape,
    duration: Duration,
    cpu: usize,
) -> io::Result<LoadRun> {
    let mut cmd = Command::new(echo_load);
    cmd.arg("--addr").arg(addr.to_string());
    cmd.args([
        "--conns",
        &shape.conns.to_string(),
        "--len",
        &shape.len.to_string(),
    ]);
    cmd.args(["--duration", &duration.as_secs_f64().to_string(), "--json"]);
    load_result(sys::pin_to_cpu(&mut cmd, cpu).output()?)
}

/// `echo-load`'s result line, its other lines passed on to stderr.
fn load_result(out: Output) -> io::Result<LoadRun> {
    let stderr = String::from_utf8_lossy(&out.stderr);
    for line in stderr
        .lines()
        .filter(|l| !l.contains("may be the bottleneck"))
    {
        eprintln!("[echo-load] {line}");
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().find(|l| l.starts_with('{')).ok_or_else(|| {
        io::Error::other(format!(
            "echo-load printed no result ({}): {stderr}",
            out.status
        ))
    })?;
    LoadRun::parse(line)
}

/// One measured cell.
#[derive(Clone, Debug)]
pub struct Cell {
    /// The server's name.
    pub server: String,
    /// Connections and message length.
    pub shape: Shape,
    /// What the client measured.
    pub load: LoadRun,
    /// Server CPU (user + system, all threads) over the run, seconds.
    pub server_cpu_s: f64,
    /// Server `io_uring_enter` (or `epoll_wait`) calls over the run, from its own counters.
    pub enters: Option<f64>,
    /// SQEs the server submitted over the run.
    pub sqes: Option<f64>,
    /// Server RSS at the end of the run, KiB.
    pub rss_kib: u64,
    /// CPU time on the machine used by neither server nor client (other processes,
    /// interrupts) during the measurement window, seconds: the noise indicator.
    pub other_cpu_s: f64,
    /// Wall time of the measurement window (load process start to the last reading),
    /// seconds.
    pub window_s: f64,
}

impl Cell {
    /// Server CPU per request, microseconds.
    pub fn cpu_us_per_req(&self) -> f64 {
        self.server_cpu_s * 1e6 / self.load.requests.max(1.0)
    }

    /// `io_uring_enter` (epoll: `epoll_wait`) calls per request.
    pub fn enters_per_req(&self) -> Option<f64> {
        self.enters.map(|e| e / self.load.requests.max(1.0))
    }

    /// Other processes' CPU as a percentage of one core over the measurement window.
    pub fn other_busy_pct(&self) -> f64 {
        100.0 * self.other_cpu_s / self.window_s.max(1e-9)
    }

    /// One JSON object.
    pub fn to_json(&self) -> String {
        let l = &self.load;
        Object::default()
            .str("server", &self.server)
            .num("conns", self.shape.conns as f64)
            .num("len", self.shape.len as f64)
            .num("requests", l.requests)
            .num("elapsed_s", l.elapsed_s)
            .num("req_per_s", l.req_per_s)
            .num("p50_us", l.p50_us)
            .num("p99_us", l.p99_us)
            .num("p999_us", l.p999_us)
            .num("errors", l.errors)
            .num("mismatches", l.mismatches)
            .num("client_cpu_s", l.client_cpu_s)
            .num("server_cpu_s", self.server_cpu_s)
            .num("server_cpu_us_per_req", self.cpu_us_per_req())
            .opt("enters_per_req", self.enters_per_req())
            .opt("sqes_per_req", self.sqes.map(|s| s / l.requests.max(1.0)))
            .num("server_rss_kib", self.rss_kib as f64)
            .num("other_busy_pct", self.other_busy_pct())
            .finish()
    }
}

/// Runs one cell against a running server, reading its CPU time, counters and the
/// machine's busy time around the load.
pub fn measure(
    server: &Server,
    echo_load: &Path,
    addr: SocketAddr,
    shape: Shape,
    duration: Duration,
    load_cpu: usize,
) -> io::Result<Cell> {
    let counters_before = server.metrics()?;
    let (cpu_before, busy_before) = (server.cpu()?, system_busy()?);
    let window = Instant::now();
    let load = run_load(echo_load, addr, shape, duration, load_cpu)?;
    // Let the server see the connections close, so teardown is charged like setup.
    std::thread::sleep(Duration::from_millis(100));
    let (cpu_after, busy_after) = (server.cpu()?, system_busy()?);
    let window_s = window.elapsed().as_secs_f64();
    let counters_after = server.metrics()?;
    let delta = |key: &str| {
        let before = json::number(counters_before.as_deref()?, key)?;
        Some(json::number(counters_after.as_deref()?, key)? - before)
    };
    let server_cpu_s = cpu_after.saturating_sub(cpu_before).as_secs_f64();
    let busy_s = busy_after.saturating_sub(busy_before).as_secs_f64();
    Ok(Cell {
        server: server.name().to_string(),
        shape,
        server_cpu_s,
        enters: delta("enters"),
        sqes: delta("sqes_submitted"),
        rss_kib: server.rss_kib()?,
        other_cpu_s: (busy_s - server_cpu_s - load.client_cpu_s).max(0.0),
        window_s,
        load,
    })
}

/// Calls per syscall from a `strace -c` summary.
pub fn strace_calls(summary: &str, syscall: &str) -> u64 {
    summary
        .lines()
        .filter(|l| l.split_whitespace().last() == Some(syscall))
        .filter_map(|l| l.split_whitespace().nth(3)?.parse::<u64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strace_summary_calls_are_read_with_or_without_errors() {
        let summary = "\
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 90.00    0.009000           9      1000           io_uring_enter
 10.00    0.001000           1       120         3 epoll_wait
------ ----------- ----------- --------- --------- ----------------
100.00    0.010000           8      1120         3 total
";
        assert_eq!(strace_calls(summary, "io_uring_enter"), 1000);
        assert_eq!(strace_calls(summary, "epoll_wait"), 120);
        assert_eq!(strace_calls(summary, "epoll_pwait"), 0);
    }

    #[test]
    fn load_report_parses_and_rejects_missing_fields() {
        let line = r#"{"conns":50,"requests":1000,"elapsed_s":2.000,"req_per_s":500.0,"p50_us":10,"p99_us":20,"p999_us":30,"errors":0,"mismatches":0,"client_cpu_s":1.950}"#;
        let run = LoadRun::parse(line).unwrap();
        assert_eq!(run.requests, 1000.0);
        assert!(run.is_client_saturated());
        assert!(LoadRun::parse(r#"{"requests":1}"#).is_err());
    }
}
