//! Counts that noise cannot move (issue 19), behind the `echo-count` binary: for each echo
//! server, the user-space instructions it executes per request (callgrind's `Ir`) and the
//! syscalls it makes per request (`strace -f -c`). Each figure is taken from two runs on
//! fresh servers that differ only in the number of requests: the difference of the two
//! counts over the difference of the two request counts, so start-up and shutdown cancel.

pub mod callgrind;
mod report;
pub mod syscalls;

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ring_demo::flags::Flags;

use crate::cell::{self, Shape};
use crate::json;
use crate::server::{callgrind_log, Server, ServerSpec, Stopped, Wrap};
use callgrind::FnCost;
use syscalls::Syscalls;

/// Command-line help.
pub const USAGE: &str = "usage: echo-count [--servers ring-uring,ring-epoll,tokio-ct,raw-uring]
    [--requests 20000,60000] [--conns 10] [--len 64] [--tools callgrind,strace] [--top 5]
    [--port 7600] [--load-timeout SECS] [--out DIR]";

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Servers to run (by name); empty = all.
    pub servers: Vec<String>,
    /// Requests (over all connections) in the short and the long run.
    pub requests: [u64; 2],
    /// Connections and message length.
    pub shape: Shape,
    /// Run every server under callgrind.
    pub callgrind: bool,
    /// Run every server under `strace -f -c`.
    pub strace: bool,
    /// Hot functions listed per server.
    pub top: usize,
    /// Where the first server listens; each start takes the next port.
    pub addr: SocketAddr,
    /// How long one load run may take before it counts as hung.
    pub load_timeout: Duration,
    /// Where profiles, summaries and the report go.
    pub out_dir: PathBuf,
}

impl Options {
    /// Parses the command line.
    pub fn from_args(
        args: impl Iterator<Item = String>,
        out_dir: PathBuf,
    ) -> Result<Options, String> {
        let mut o = Options {
            servers: Vec::new(),
            requests: [20_000, 60_000],
            shape: Shape { conns: 10, len: 64 },
            callgrind: true,
            strace: true,
            top: 5,
            addr: "127.0.0.1:7600".parse().expect("literal"),
            load_timeout: Duration::from_secs(300),
            out_dir,
        };
        let mut flags = Flags::new(args);
        while let Some(flag) = flags.next_flag()? {
            match flag.as_str() {
                "--servers" => o.servers = names(&flags.value::<String>()?),
                "--requests" => o.requests = two_counts(&flags.value::<String>()?)?,
                "--conns" => o.shape.conns = flags.value()?,
                "--len" => o.shape.len = flags.value()?,
                "--tools" => {
                    let tools = names(&flags.value::<String>()?);
                    o.callgrind = tools.iter().any(|t| t == "callgrind");
                    o.strace = tools.iter().any(|t| t == "strace");
                }
                "--top" => o.top = flags.value()?,
                "--port" => o.addr.set_port(flags.value()?),
                "--load-timeout" => o.load_timeout = Duration::from_secs(flags.value()?),
                "--out" => o.out_dir = flags.value()?,
                _ => return Err(flags.unknown()),
            }
        }
        o.check()?;
        Ok(o)
    }

    fn check(&self) -> Result<(), String> {
        if self.shape.conns == 0 || self.shape.len == 0 {
            return Err("--conns and --len must be positive".into());
        }
        if self
            .requests
            .iter()
            .any(|r| r % self.shape.conns as u64 != 0)
        {
            return Err("each --requests count must be a multiple of --conns".into());
        }
        if !(self.callgrind || self.strace) {
            return Err("--tools: callgrind, strace or both".into());
        }
        Ok(())
    }
}

fn names(list: &str) -> Vec<String> {
    list.split(',').map(|s| s.trim().to_string()).collect()
}

/// `A,B` with A < B.
fn two_counts(list: &str) -> Result<[u64; 2], String> {
    let counts: Vec<u64> = list
        .split(',')
        .map(|n| {
            n.trim()
                .parse()
                .map_err(|e| format!("--requests {list}: {e}"))
        })
        .collect::<Result<_, _>>()?;
    match counts[..] {
        [a, b] if a < b => Ok([a, b]),
        _ => Err(format!("--requests {list}: two counts, the smaller first")),
    }
}

/// The binaries the counts run.
#[derive(Clone, Debug)]
pub struct Bins {
    /// `echo-load`.
    pub echo_load: PathBuf,
    /// ring-rt's echo example.
    pub ring_echo: PathBuf,
    /// `tokio-echo`.
    pub tokio_echo: PathBuf,
    /// `raw-uring-echo`.
    pub raw_echo: PathBuf,
}

impl Bins {
    /// The binaries beside `dir` (a profile directory: `target/release`), or which is
    /// missing and how to build it.
    pub fn in_dir(dir: &Path) -> Result<Bins, String> {
        let bins = Bins {
            echo_load: dir.join("echo-load"),
            ring_echo: dir.join("examples").join("echo"),
            tokio_echo: dir.join("tokio-echo"),
            raw_echo: dir.join("raw-uring-echo"),
        };
        let all = [
            &bins.echo_load,
            &bins.ring_echo,
            &bins.tokio_echo,
            &bins.raw_echo,
        ];
        match all.iter().find(|p| !p.exists()) {
            Some(missing) => Err(format!(
                "{} is missing: cargo build --release -p ring-rt --example echo -p ring-bench --bins",
                missing.display()
            )),
            None => Ok(bins),
        }
    }
}

/// The servers, in table order: ring-rt's echo example on each backend with one worker
/// (and on io_uring with direct descriptors), tokio's current_thread runtime, and the
/// runtime-less io_uring baseline.
pub fn servers(bins: &Bins) -> Vec<ServerSpec> {
    let spec = |name: &str, program: &Path, args: &[&str]| ServerSpec {
        name: name.to_string(),
        program: program.to_path_buf(),
        args: args.iter().map(|a| a.to_string()).collect(),
        has_metrics: false,
        all_cpus: true,
    };
    let ring = |backend| ["--backend", backend, "--threads", "1"];
    vec![
        spec("ring-uring", &bins.ring_echo, &ring("uring")),
        // Accepted streams as direct descriptors (Linux 6.8+; fds elsewhere).
        spec(
            "ring-uring-direct",
            &bins.ring_echo,
            &["--backend", "uring", "--threads", "1", "--direct", "1024"],
        ),
        spec("ring-epoll", &bins.ring_echo, &ring("epoll")),
        spec(
            "tokio-ct",
            &bins.tokio_echo,
            &["--flavor", "current_thread"],
        ),
        spec("raw-uring", &bins.raw_echo, &[]),
    ]
}

/// One server's two callgrind runs.
#[derive(Clone, Debug)]
pub struct IrCounts {
    /// Requests served and verified in each run.
    pub requests: [u64; 2],
    /// The profile's total instructions in each run.
    pub totals: [u64; 2],
    /// The server's own count of waits (`io_uring_enter` or `epoll_wait`) in each run, for
    /// the servers that print one at shutdown.
    pub enters: [Option<f64>; 2],
    /// Self cost per function in each run, most expensive first.
    pub functions: [Vec<FnCost>; 2],
    /// Valgrind's warnings over both runs.
    pub warnings: Vec<String>,
}

impl IrCounts {
    /// Instructions per request.
    pub fn per_req(&self) -> f64 {
        per_req(self.totals.map(|t| t as f64), self.requests)
    }

    /// Waits per request under callgrind (how many requests one loop turn served).
    pub fn enters_per_req(&self) -> Option<f64> {
        Some(per_req([self.enters[0]?, self.enters[1]?], self.requests))
    }

    /// Instructions per request spent in function `name` itself.
    pub fn fn_per_req(&self, name: &str) -> f64 {
        let ir = |run: &[FnCost]| run.iter().find(|f| f.name == name).map_or(0, |f| f.ir);
        let [short, long] = &self.functions;
        per_req([ir(short) as f64, ir(long) as f64], self.requests)
    }
}

/// One server's two strace runs.
#[derive(Clone, Debug)]
pub struct SysCounts {
    /// Requests served and verified in each run.
    pub requests: [u64; 2],
    /// The calls counted in each run.
    pub runs: [Syscalls; 2],
}

impl SysCounts {
    /// Calls per request of the kind `count` picks.
    pub fn per_req(&self, count: impl Fn(&Syscalls) -> u64) -> f64 {
        per_req(self.runs.each_ref().map(|s| count(s) as f64), self.requests)
    }
}

/// `(long - short) / (long requests - short requests)`.
fn per_req(counts: [f64; 2], requests: [u64; 2]) -> f64 {
    (counts[1] - counts[0]) / (requests[1] as f64 - requests[0] as f64)
}

/// Everything counted for one server.
#[derive(Clone, Debug)]
pub struct ServerCounts {
    /// The server's name.
    pub name: String,
    /// The line it printed when ready (its backend and setup), from its first run.
    pub listening: String,
    /// Its callgrind runs, when asked for.
    pub ir: Option<IrCounts>,
    /// Its strace runs, when asked for.
    pub sys: Option<SysCounts>,
}

/// Where the runs happen.
struct Ctx<'a> {
    opts: &'a Options,
    bins: &'a Bins,
    /// Starts so far: each takes the next port, so no run meets the last one's sockets.
    starts: u16,
}

impl Ctx<'_> {
    fn next_addr(&mut self) -> SocketAddr {
        let mut addr = self.opts.addr;
        addr.set_port(addr.port().wrapping_add(self.starts));
        self.starts += 1;
        addr
    }
}

/// One verified load run on a fresh server under `wrap`.
struct Run {
    stopped: Stopped,
    listening: String,
}

fn run_once(ctx: &mut Ctx, spec: &ServerSpec, wrap: Wrap, requests: u64) -> io::Result<Run> {
    let addr = ctx.next_addr();
    let shape = ctx.opts.shape;
    let per_conn = requests / shape.conns as u64;
    let server = Server::start_wrapped(spec, addr, None, wrap)?;
    let listening = server.listening().to_string();
    let timeout = ctx.opts.load_timeout;
    let load = cell::run_counted(&ctx.bins.echo_load, addr, shape, per_conn, timeout);
    let stopped = server.stop(addr)?;
    let load = load?;
    if load.errors > 0.0 || load.mismatches > 0.0 || load.requests != requests as f64 {
        return Err(io::Error::other(format!(
            "{}: {} of {requests} requests served, {} failed connections, {} mismatches",
            spec.name, load.requests, load.errors, load.mismatches
        )));
    }
    Ok(Run { stopped, listening })
}

/// One callgrind run: the profile's total, its functions, the server's own wait count,
/// valgrind's warnings.
struct IrRun {
    total: u64,
    functions: Vec<FnCost>,
    enters: Option<f64>,
    warnings: Vec<String>,
    listening: String,
}

fn callgrind_run(ctx: &mut Ctx, spec: &ServerSpec, requests: u64) -> io::Result<IrRun> {
    let profile = ctx
        .opts
        .out_dir
        .join(format!("callgrind-{}-{requests}.out", spec.name));
    // A profile left by an earlier run must not pass for this one's.
    let _ = std::fs::remove_file(&profile);
    let started = Instant::now();
    let run = run_once(ctx, spec, Wrap::Callgrind(&profile), requests)?;
    let total = callgrind::totals(&std::fs::read_to_string(&profile)?).ok_or_else(|| {
        io::Error::other(format!(
            "{}: no totals line: callgrind did not finish it",
            profile.display()
        ))
    })?;
    eprintln!(
        "echo-count: {} callgrind, {requests} requests: {total} Ir ({:.1} s)",
        spec.name,
        started.elapsed().as_secs_f64()
    );
    let annotated = callgrind::annotate(&profile)?;
    std::fs::write(profile.with_extension("annotate.txt"), &annotated)?;
    Ok(IrRun {
        total,
        functions: callgrind::functions(&annotated),
        enters: run
            .stopped
            .last_metrics
            .and_then(|m| json::number(&m, "enters")),
        warnings: callgrind::warnings(
            &std::fs::read_to_string(callgrind_log(&profile)).unwrap_or_default(),
        ),
        listening: run.listening,
    })
}

fn strace_run(ctx: &mut Ctx, spec: &ServerSpec, requests: u64) -> io::Result<(Syscalls, String)> {
    let out = ctx
        .opts
        .out_dir
        .join(format!("strace-{}-{requests}.txt", spec.name));
    let started = Instant::now();
    let run = run_once(ctx, spec, Wrap::StraceAll(&out), requests)?;
    let calls = Syscalls::parse(&run.stopped.strace.unwrap_or_default());
    if calls.total == 0 {
        return Err(io::Error::other(format!(
            "{}: no strace summary with a total row",
            out.display()
        )));
    }
    eprintln!(
        "echo-count: {} strace, {requests} requests: {} syscalls ({:.1} s)",
        spec.name,
        calls.total,
        started.elapsed().as_secs_f64()
    );
    Ok((calls, run.listening))
}

fn count_ir(ctx: &mut Ctx, spec: &ServerSpec) -> io::Result<(IrCounts, String)> {
    let requests = ctx.opts.requests;
    let short = callgrind_run(ctx, spec, requests[0])?;
    let long = callgrind_run(ctx, spec, requests[1])?;
    let mut warnings = short.warnings;
    for w in long.warnings {
        if !warnings.contains(&w) {
            warnings.push(w);
        }
    }
    let counts = IrCounts {
        requests,
        totals: [short.total, long.total],
        enters: [short.enters, long.enters],
        functions: [short.functions, long.functions],
        warnings,
    };
    Ok((counts, short.listening))
}

fn count_syscalls(ctx: &mut Ctx, spec: &ServerSpec) -> io::Result<(SysCounts, String)> {
    let requests = ctx.opts.requests;
    let (short, listening) = strace_run(ctx, spec, requests[0])?;
    let (long, _) = strace_run(ctx, spec, requests[1])?;
    let runs = [short, long];
    Ok((SysCounts { requests, runs }, listening))
}

fn count_server(ctx: &mut Ctx, spec: &ServerSpec) -> io::Result<ServerCounts> {
    let mut counts = ServerCounts {
        name: spec.name.clone(),
        listening: String::new(),
        ir: None,
        sys: None,
    };
    if ctx.opts.callgrind {
        let (ir, listening) = count_ir(ctx, spec)?;
        (counts.ir, counts.listening) = (Some(ir), listening);
    }
    if ctx.opts.strace {
        let (sys, listening) = count_syscalls(ctx, spec)?;
        counts.sys = Some(sys);
        if counts.listening.is_empty() {
            counts.listening = listening;
        }
    }
    Ok(counts)
}

/// Runs every server under each tool and writes `count.md` to the output directory;
/// returns the markdown. `command` is the command line, printed above the tables.
pub fn run(opts: &Options, bins: &Bins, command: &str) -> io::Result<String> {
    std::fs::create_dir_all(&opts.out_dir)?;
    let specs: Vec<ServerSpec> = servers(bins)
        .into_iter()
        .filter(|s| opts.servers.is_empty() || opts.servers.contains(&s.name))
        .collect();
    let mut ctx = Ctx {
        opts,
        bins,
        starts: 0,
    };
    let mut all = Vec::new();
    for spec in &specs {
        all.push(count_server(&mut ctx, spec)?);
    }
    let md = report::markdown(opts, command, &all);
    std::fs::write(opts.out_dir.join("count.md"), &md)?;
    Ok(md)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> impl Iterator<Item = String> + '_ {
        line.split_whitespace().map(str::to_string)
    }

    #[test]
    fn options_take_two_ordered_request_counts_that_conns_divide() {
        let out = PathBuf::from("out");
        let o = Options::from_args(args("--requests 100,300 --conns 10"), out.clone()).unwrap();
        assert_eq!(o.requests, [100, 300]);
        assert!(Options::from_args(args("--requests 300,100"), out.clone()).is_err());
        assert!(Options::from_args(args("--requests 105,300 --conns 10"), out.clone()).is_err());
        assert!(Options::from_args(args("--tools perf"), out).is_err());
    }

    #[test]
    fn per_request_figures_cancel_what_both_runs_share() {
        // 1,000,000 instructions of start-up and shutdown, then 3,000 per request.
        let ir = IrCounts {
            requests: [20_000, 60_000],
            totals: [61_000_000, 181_000_000],
            enters: [Some(2_500.0), None],
            functions: [
                vec![FnCost {
                    name: "poll".into(),
                    ir: 21_000_000,
                }],
                vec![FnCost {
                    name: "poll".into(),
                    ir: 61_000_000,
                }],
            ],
            warnings: Vec::new(),
        };
        assert_eq!(ir.per_req(), 3_000.0);
        assert_eq!(ir.fn_per_req("poll"), 1_000.0);
        assert_eq!(ir.fn_per_req("absent"), 0.0);
        assert_eq!(ir.enters_per_req(), None);
    }
}
