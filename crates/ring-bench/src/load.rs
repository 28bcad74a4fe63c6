//! The closed-loop echo client behind `echo-load`, usable from the bench drivers too.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ring_rt::net::TcpStream;
use ring_rt::Runtime;

use crate::stats::{percentile_us, self_cpu};

/// What to run.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// Server address.
    pub addr: SocketAddr,
    /// Concurrent connections.
    pub conns: usize,
    /// Message length (smallest, when `len_max` is larger).
    pub len: usize,
    /// Largest message length; lengths vary between `len` and this.
    pub len_max: usize,
    /// How long to run (ignored when `requests` is set).
    pub duration: Duration,
    /// Round trips per connection, instead of a duration.
    pub requests: Option<u64>,
    /// Print JSON instead of text.
    pub json: bool,
}

impl LoadConfig {
    /// Command-line help.
    pub const USAGE: &'static str = "usage: echo-load --addr IP:PORT [--conns N] [--len BYTES] [--len-max BYTES] [--duration SECS] [--requests N] [--json]";

    /// Parses the command line.
    pub fn from_args(args: impl Iterator<Item = String>) -> Result<LoadConfig, String> {
        let mut c = LoadConfig {
            addr: "127.0.0.1:7000".parse().expect("literal"),
            conns: 50,
            len: 64,
            len_max: 0,
            duration: Duration::from_secs(5),
            requests: None,
            json: false,
        };
        let mut args = args.peekable();
        while let Some(flag) = args.next() {
            if flag == "--json" {
                c.json = true;
                continue;
            }
            let v = args.next().ok_or(format!("{flag} needs a value"))?;
            let bad = |e: &dyn fmt::Display| format!("{flag} {v}: {e}");
            match flag.as_str() {
                "--addr" => c.addr = v.parse().map_err(|e| bad(&e))?,
                "--conns" => c.conns = v.parse().map_err(|e| bad(&e))?,
                "--len" => c.len = v.parse().map_err(|e| bad(&e))?,
                "--len-max" => c.len_max = v.parse().map_err(|e| bad(&e))?,
                "--duration" => {
                    c.duration = Duration::from_secs_f64(v.parse().map_err(|e| bad(&e))?)
                }
                "--requests" => c.requests = Some(v.parse().map_err(|e| bad(&e))?),
                _ => return Err(format!("unknown flag {flag}")),
            }
        }
        if c.conns == 0 || c.len == 0 {
            return Err("--conns and --len must be positive".into());
        }
        c.len_max = c.len_max.max(c.len);
        Ok(c)
    }
}

/// What a run measured.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Round trips completed and verified.
    pub requests: u64,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// Latency percentiles, microseconds.
    pub p50_us: u32,
    /// 99th percentile.
    pub p99_us: u32,
    /// 99.9th percentile.
    pub p999_us: u32,
    /// Connections that failed (connect, I/O error, early EOF).
    pub errors: u64,
    /// Echoes whose bytes differed from what was sent.
    pub mismatches: u64,
    /// This client's CPU time over the run.
    pub client_cpu: Duration,
    /// Connections configured.
    pub conns: usize,
}

impl Report {
    /// Requests per second.
    pub fn rate(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Set when the client itself used (nearly) a whole core: then it, not the server, may
    /// be what limits the rate.
    pub fn saturation_warning(&self) -> Option<String> {
        let busy = self.client_cpu.as_secs_f64() / self.elapsed.as_secs_f64().max(1e-9);
        (busy > 0.9).then(|| format!("the load generator used {:.0}% of a core: it may be the bottleneck; compare servers by CPU per request", busy * 100.0))
    }

    /// One JSON object.
    pub fn to_json(&self) -> String {
        format!(
            "{{\"conns\":{},\"requests\":{},\"elapsed_s\":{:.3},\"req_per_s\":{:.1},\"p50_us\":{},\"p99_us\":{},\"p999_us\":{},\"errors\":{},\"mismatches\":{},\"client_cpu_s\":{:.3}}}",
            self.conns, self.requests, self.elapsed.as_secs_f64(), self.rate(), self.p50_us, self.p99_us, self.p999_us, self.errors, self.mismatches, self.client_cpu.as_secs_f64()
        )
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} conns: {} requests in {:.2}s = {:.0} req/s; latency p50 {} us, p99 {} us, p99.9 {} us; errors {}, mismatches {}; client CPU {:.2}s",
            self.conns, self.requests, self.elapsed.as_secs_f64(), self.rate(), self.p50_us, self.p99_us, self.p999_us, self.errors, self.mismatches, self.client_cpu.as_secs_f64()
        )
    }
}

/// Per-connection outcome.
#[derive(Default)]
struct ConnResult {
    latencies_us: Vec<u32>,
    failed: bool,
    mismatches: u64,
}

/// Runs the load on a ring-rt runtime of its own (one thread) and reports.
pub fn run(config: &LoadConfig) -> io::Result<Report> {
    let rt = Runtime::new()?;
    let cpu_before = self_cpu();
    let start = Instant::now();
    let results = rt.block_on(async {
        let deadline = start + config.duration;
        let tasks: Vec<_> = (0..config.conns)
            .map(|i| ring_rt::spawn(connection(config.clone(), i as u64, deadline)))
            .collect();
        let mut results = Vec::with_capacity(tasks.len());
        for t in tasks {
            results.push(t.await.unwrap_or_else(|_| ConnResult {
                failed: true,
                ..ConnResult::default()
            }));
        }
        results
    });
    Ok(summarize(
        config,
        results,
        start.elapsed(),
        self_cpu().saturating_sub(cpu_before),
    ))
}

fn summarize(
    config: &LoadConfig,
    results: Vec<ConnResult>,
    elapsed: Duration,
    cpu: Duration,
) -> Report {
    let mut all: Vec<u32> = results
        .iter()
        .flat_map(|r| r.latencies_us.iter().copied())
        .collect();
    all.sort_unstable();
    Report {
        requests: all.len() as u64,
        elapsed,
        p50_us: percentile_us(&all, 50.0),
        p99_us: percentile_us(&all, 99.0),
        p999_us: percentile_us(&all, 99.9),
        errors: results.iter().filter(|r| r.failed).count() as u64,
        mismatches: results.iter().map(|r| r.mismatches).sum(),
        client_cpu: cpu,
        conns: config.conns,
    }
}

/// Deterministic message bytes for connection `seed`, round `round`.
fn message(seed: u64, round: u64, len: usize) -> Vec<u8> {
    let mut x = (seed << 32) ^ round ^ 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

async fn connection(config: LoadConfig, seed: u64, deadline: Instant) -> ConnResult {
    let mut out = ConnResult::default();
    let Ok(stream) = TcpStream::connect(config.addr).await else {
        out.failed = true;
        return out;
    };
    let _ = stream.set_nodelay(true);
    let span = config.len_max - config.len + 1;
    let mut round = 0u64;
    let mut rx = Vec::with_capacity(config.len_max.max(4096));
    loop {
        let done = match config.requests {
            Some(n) => round >= n,
            None => Instant::now() >= deadline,
        };
        if done {
            return out;
        }
        let len = config.len + (seed as usize * 7919 + round as usize * 104_729) % span;
        let msg = message(seed, round, len);
        let sent = Instant::now();
        match round_trip(&stream, msg, rx).await {
            Ok((equal, buf)) => {
                rx = buf;
                out.latencies_us
                    .push(sent.elapsed().as_micros().min(u32::MAX as u128) as u32);
                out.mismatches += u64::from(!equal);
            }
            Err(_) => {
                out.failed = true;
                return out;
            }
        }
        round += 1;
    }
}

/// Sends `msg`, reads until as many bytes came back, and compares them.
async fn round_trip(
    stream: &TcpStream,
    msg: Vec<u8>,
    mut rx: Vec<u8>,
) -> io::Result<(bool, Vec<u8>)> {
    let (res, msg) = stream.write_all(msg).await;
    res?;
    let mut got = 0;
    let mut equal = true;
    while got < msg.len() {
        rx.clear();
        let (res, buf) = stream.read(rx).await;
        rx = buf;
        let n = res?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let end = (got + n).min(msg.len());
        equal &= rx[..end - got] == msg[got..end] && got + n <= msg.len();
        got += n;
    }
    Ok((equal, rx))
}
