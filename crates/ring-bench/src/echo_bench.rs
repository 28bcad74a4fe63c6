//! The echo benchmark driver behind `cargo bench -p ring-bench --bench echo`: each server
//! pinned to CPU 0, `echo-load` pinned to CPU 1, over a matrix of connections x message
//! lengths; then memory per idle connection on a fresh server; outputs to
//! `target/echo-bench/`.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cell::{self, Cell, Shape};
use crate::idle::{self, IdleReport};
use crate::report::{self, Machine};
use crate::server::{Server, ServerSpec};
use crate::stats::system_busy;
use crate::strace::{self, StraceCell, Traced};
use crate::{plot, sys};

/// The CPU servers run on.
pub const SERVER_CPU: usize = 0;
/// The CPU the load generator runs on.
pub const LOAD_CPU: usize = 1;

/// Command-line help.
pub const USAGE: &str =
    "usage: cargo bench -p ring-bench --bench echo -- [--quick] [--duration SECS] [--warmup SECS]
    [--conns 1,50,...] [--lens 64,512,...] [--servers ring-uring,ring-uring-batch,ring-uring-direct,ring-epoll,tokio-ct,tokio-mt]
    [--idle N] [--strace] [--quiet PCT] [--quiet-wait SECS] [--attempts N] [--port P] [--out DIR]";

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Connection counts.
    pub conns: Vec<usize>,
    /// Message lengths.
    pub lens: Vec<usize>,
    /// Measured duration per cell.
    pub duration: Duration,
    /// Load before the first measured cell of each server.
    pub warmup: Duration,
    /// Servers to run (by name); empty = all.
    pub servers: Vec<String>,
    /// Idle connections for the memory test (0 skips it).
    pub idle_conns: usize,
    /// Run the `strace -c` cross-check instead of the timed matrix.
    pub strace: bool,
    /// Other processes' CPU (percent of one core) above which a cell counts as disturbed.
    pub quiet_pct: f64,
    /// Runs per cell at most while disturbed.
    pub attempts: usize,
    /// How long to wait for the machine to go quiet before each run.
    pub quiet_wait: Duration,
    /// Where servers listen.
    pub addr: SocketAddr,
    /// Output directory.
    pub out_dir: PathBuf,
}

fn list(v: &str) -> Result<Vec<usize>, String> {
    v.split(',')
        .map(|n| n.trim().parse().map_err(|e| format!("{v}: {e}")))
        .collect()
}

impl Options {
    /// Parses the command line (`--bench`, which cargo passes, is ignored).
    pub fn from_args(
        args: impl Iterator<Item = String>,
        out_dir: PathBuf,
    ) -> Result<Options, String> {
        let mut o = Options {
            conns: vec![1, 50, 150, 300, 500, 1000],
            lens: vec![64, 512, 1000],
            duration: Duration::from_secs(5),
            warmup: Duration::from_secs(1),
            servers: Vec::new(),
            idle_conns: 10_000,
            strace: false,
            quiet_pct: 25.0,
            attempts: 3,
            quiet_wait: Duration::from_secs(60),
            addr: "127.0.0.1:7878".parse().expect("literal"),
            out_dir,
        };
        let secs = |v: &str| {
            v.parse::<f64>()
                .map(Duration::from_secs_f64)
                .map_err(|e| format!("{v}: {e}"))
        };
        let mut args = args.peekable();
        while let Some(flag) = args.next() {
            match flag.as_str() {
                "--bench" => continue,
                "--strace" => {
                    o.strace = true;
                    continue;
                }
                "--quick" => {
                    (o.conns, o.lens) = (vec![1, 50, 500], vec![64]);
                    (o.duration, o.warmup) = (Duration::from_secs(2), Duration::from_millis(500));
                    continue;
                }
                _ => {}
            }
            let v = args.next().ok_or(format!("{flag} needs a value"))?;
            match flag.as_str() {
                "--conns" => o.conns = list(&v)?,
                "--lens" => o.lens = list(&v)?,
                "--duration" => o.duration = secs(&v)?,
                "--warmup" => o.warmup = secs(&v)?,
                "--servers" => o.servers = v.split(',').map(str::to_string).collect(),
                "--idle" => o.idle_conns = v.parse().map_err(|e| format!("--idle {v}: {e}"))?,
                "--quiet" => o.quiet_pct = v.parse().map_err(|e| format!("--quiet {v}: {e}"))?,
                "--attempts" => {
                    o.attempts = v.parse().map_err(|e| format!("--attempts {v}: {e}"))?
                }
                "--quiet-wait" => o.quiet_wait = secs(&v)?,
                "--port" => o
                    .addr
                    .set_port(v.parse().map_err(|e| format!("--port {v}: {e}"))?),
                "--out" => o.out_dir = PathBuf::from(v),
                _ => return Err(format!("unknown flag {flag}")),
            }
        }
        Ok(o)
    }
}

/// The binaries the benchmark runs.
#[derive(Clone, Debug)]
pub struct Bins {
    /// `echo-load`.
    pub echo_load: PathBuf,
    /// `tokio-echo`.
    pub tokio_echo: PathBuf,
    /// ring-rt's echo example.
    pub ring_echo: PathBuf,
}

/// The servers, in table order: ring-rt's echo example on io_uring (also with batched waits,
/// 6.12+) and on epoll, and tokio's two runtimes.
pub fn servers(bins: &Bins) -> Vec<ServerSpec> {
    let spec = |name: &str, program: &Path, args: &[&str], has_metrics| ServerSpec {
        name: name.to_string(),
        program: program.to_path_buf(),
        args: args.iter().map(|a| a.to_string()).collect(),
        has_metrics,
        all_cpus: false,
    };
    // Two workers on the two cores (the load generator shares them): ring-rt's workers,
    // one SO_REUSEPORT listener each, against tokio's two worker threads.
    let on_all = |s: ServerSpec| ServerSpec {
        all_cpus: true,
        ..s
    };
    vec![
        spec("ring-uring", &bins.ring_echo, &["--backend", "uring"], true),
        spec(
            "ring-uring-batch",
            &bins.ring_echo,
            &["--backend", "uring", "--batch-wait-us", BATCH_WAIT_US],
            true,
        ),
        spec(
            "ring-uring-direct",
            &bins.ring_echo,
            &["--backend", "uring", "--direct", "1024"],
            true,
        ),
        spec("ring-epoll", &bins.ring_echo, &["--backend", "epoll"], true),
        spec(
            "tokio-ct",
            &bins.tokio_echo,
            &["--flavor", "current_thread"],
            false,
        ),
        spec(
            "tokio-mt",
            &bins.tokio_echo,
            &["--flavor", "multi_thread"],
            false,
        ),
        on_all(spec(
            "ring-uring-2w",
            &bins.ring_echo,
            &["--backend", "uring", "--threads", "2"],
            true,
        )),
        on_all(spec(
            "tokio-mt-2w",
            &bins.tokio_echo,
            &["--flavor", "multi_thread"],
            false,
        )),
    ]
}

/// `ring-uring-batch`'s `Builder::batch_wait`, in microseconds: long enough for a busy
/// loop's next batch to gather, short against a request's latency.
const BATCH_WAIT_US: &str = "50";

/// Runs the benchmark and writes its outputs.
pub fn run(opts: &Options, bins: &Bins) -> io::Result<()> {
    // The soft open-file limit up to the hard one (the servers and echo-load started below
    // inherit it); returns the new soft limit.
    let nofile = rlimit::increase_nofile_limit(u64::MAX)?;
    if sys::cpus_allowed() < 2 {
        eprintln!("echo-bench: warning: fewer than 2 CPUs; server and load share one");
    }
    std::fs::create_dir_all(&opts.out_dir)?;
    let specs: Vec<ServerSpec> = servers(bins)
        .into_iter()
        .filter(|s| opts.servers.is_empty() || opts.servers.contains(&s.name))
        .collect();
    let machine = Machine::current();
    if opts.strace {
        return run_strace(opts, bins, &specs);
    }
    // Leave room for the driver's own fds (and the server's) under the limit.
    let idle_conns = opts.idle_conns.min(nofile.saturating_sub(256) as usize);
    let cells = run_matrix(opts, &machine, bins, &specs)?;
    let mut idle = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        if idle_conns > 0 {
            idle.push(run_idle(spec, port_for(opts, i, 1), idle_conns)?);
        }
    }
    write_outputs(opts, &machine, &cells, &idle)
}

/// Every server start gets a port of its own: tens of thousands of client connections in
/// TIME_WAIT towards one port would otherwise collide with new connects.
fn port_for(opts: &Options, server: usize, phase: usize) -> SocketAddr {
    let mut addr = opts.addr;
    addr.set_port(opts.addr.port().wrapping_add((2 * server + phase) as u16));
    addr
}

fn start(spec: &ServerSpec, addr: SocketAddr) -> io::Result<Server> {
    let server = Server::start(spec, addr, SERVER_CPU, None)?;
    // The value after `--backend`.
    let wanted = spec
        .args
        .iter()
        .skip_while(|a| *a != "--backend")
        .nth(1)
        .map_or("", String::as_str);
    if spec.has_metrics && !server.listening().contains(&format!("backend={wanted}")) {
        eprintln!(
            "echo-bench: warning: {} asked for {wanted} but runs: {}",
            spec.name,
            server.listening()
        );
    }
    Ok(server)
}

/// Runs every cell on every server. All servers run at once, each on its own port and all
/// on the server CPU (an idle one sleeps in the kernel), and each cell visits them back to
/// back in rotating order: drift in the machine's speed over the run then shows up in every
/// server's numbers alike instead of in whichever server ran last.
fn run_matrix(
    opts: &Options,
    machine: &Machine,
    bins: &Bins,
    specs: &[ServerSpec],
) -> io::Result<Vec<Cell>> {
    let mut servers = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let addr = port_for(opts, i, 0);
        servers.push((start(spec, addr)?, addr));
    }
    let warm = Shape { conns: 50, len: 64 };
    for (_, addr) in servers.iter().filter(|_| !opts.warmup.is_zero()) {
        cell::run_load(&bins.echo_load, *addr, warm, opts.warmup, LOAD_CPU)?;
    }
    let mut cells: Vec<(usize, Cell)> = Vec::new();
    let shapes = opts
        .lens
        .iter()
        .flat_map(|&len| opts.conns.iter().map(move |&conns| Shape { conns, len }));
    for (round, shape) in shapes.enumerate() {
        for k in 0..servers.len() {
            let index = (round + k) % servers.len();
            let (server, addr) = &servers[index];
            let c = measure_quietest(opts, bins, server, *addr, shape)?;
            log_cell(&c);
            cells.push((index, c));
            write_files(opts, machine, &in_table_order(&cells), &[])?;
        }
    }
    for (server, addr) in servers {
        server.stop(addr)?;
    }
    Ok(in_table_order(&cells))
}

/// By shape, then by server as listed.
fn in_table_order(cells: &[(usize, Cell)]) -> Vec<Cell> {
    let mut sorted = cells.to_vec();
    sorted.sort_by_key(|(index, c)| (c.shape.len, c.shape.conns, *index));
    sorted.into_iter().map(|(_, c)| c).collect()
}

fn log_cell(c: &Cell) {
    eprintln!(
        "echo-bench: {} {} x {} B: {:.0} req/s, {:.2} us CPU/req, enters/req {}, other CPU {:.0}%",
        c.server,
        c.shape.conns,
        c.shape.len,
        c.load.req_per_s,
        c.cpu_us_per_req(),
        c.enters_per_req().map_or("-".into(), |e| format!("{e:.3}")),
        c.other_busy_pct()
    );
}

/// Measures a cell when the machine is quiet: waits for other processes to go below
/// `quiet_pct` of a core, and repeats a run they disturbed (up to `attempts` runs, keeping
/// the least disturbed). The other helpers' compilers share these CPUs.
fn measure_quietest(
    opts: &Options,
    bins: &Bins,
    server: &Server,
    addr: SocketAddr,
    shape: Shape,
) -> io::Result<Cell> {
    let mut best: Option<Cell> = None;
    for _ in 0..opts.attempts.max(1) {
        wait_quiet(opts.quiet_pct, opts.quiet_wait)?;
        let c = cell::measure(
            server,
            &bins.echo_load,
            addr,
            shape,
            opts.duration,
            LOAD_CPU,
        )?;
        let quiet = c.other_busy_pct() <= opts.quiet_pct;
        if best
            .as_ref()
            .is_none_or(|b| c.other_busy_pct() < b.other_busy_pct())
        {
            best = Some(c);
        }
        if quiet {
            break;
        }
        eprintln!(
            "echo-bench: {} {} x {} B: other processes used {:.0}% of a core; again",
            server.name(),
            shape.conns,
            shape.len,
            best.as_ref().map_or(0.0, Cell::other_busy_pct)
        );
    }
    Ok(best.expect("at least one attempt"))
}

/// Waits (at most `max_wait`) until the machine's busy time, with our servers idle, stays
/// under `limit_pct` of one core over half a second.
fn wait_quiet(limit_pct: f64, max_wait: Duration) -> io::Result<()> {
    let sample = Duration::from_millis(500);
    let deadline = std::time::Instant::now() + max_wait;
    loop {
        let before = system_busy()?;
        std::thread::sleep(sample);
        let busy = system_busy()?.saturating_sub(before);
        let pct = 100.0 * busy.as_secs_f64() / sample.as_secs_f64();
        if pct <= limit_pct {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            eprintln!(
                "echo-bench: machine still {pct:.0}% busy after {:.0} s; measuring anyway",
                max_wait.as_secs_f64()
            );
            return Ok(());
        }
    }
}

fn run_idle(spec: &ServerSpec, addr: SocketAddr, conns: usize) -> io::Result<IdleReport> {
    let server = start(spec, addr)?;
    let report = idle::measure(&server, addr, conns);
    server.stop(addr)?;
    let report = report?;
    eprintln!(
        "echo-bench: {} idle: {} conns, RSS {} -> {} KiB = {:.0} B/conn",
        spec.name,
        conns,
        report.rss_before_kib,
        report.rss_after_kib,
        report.bytes_per_conn()
    );
    Ok(report)
}

fn run_strace(opts: &Options, bins: &Bins, specs: &[ServerSpec]) -> io::Result<()> {
    let mut rows: Vec<StraceCell> = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let traced = Traced {
            spec,
            echo_load: &bins.echo_load,
            addr: port_for(opts, i, 0),
            out_dir: &opts.out_dir,
        };
        for &len in &opts.lens {
            for &conns in &opts.conns {
                let row = strace::run_cell(&traced, Shape { conns, len }, opts.duration)?;
                eprintln!("echo-bench: strace {}", row.markdown_row());
                rows.push(row);
            }
        }
    }
    let md: Vec<String> = rows.iter().map(StraceCell::markdown_row).collect();
    let md = format!("{}\n{}\n", strace::MARKDOWN_HEADER, md.join("\n"));
    print!("{md}");
    let json: Vec<String> = rows.iter().map(StraceCell::to_json).collect();
    std::fs::write(opts.out_dir.join("strace.md"), md)?;
    std::fs::write(
        opts.out_dir.join("strace.json"),
        format!("[\n{}\n]\n", json.join(",\n")),
    )
}

/// Writes the files (rewritten after every cell, so an interrupted run keeps what it
/// measured) and returns the markdown.
fn write_files(
    opts: &Options,
    machine: &Machine,
    cells: &[Cell],
    idle: &[IdleReport],
) -> io::Result<String> {
    let md = format!(
        "### Echo benchmark\n\n{}- server pinned to CPU {SERVER_CPU}, echo-load pinned to CPU {LOAD_CPU}; {:.1} s per cell\n- a cell is run again (up to {} runs, the least disturbed kept) while other processes use more than {:.0}% of a core; `other CPU %` is what remained; `(sat)` marks a load generator that used over 90% of its core\n{}\n#### Memory per idle connection\n\n{}",
        machine.markdown(),
        opts.duration.as_secs_f64(),
        opts.attempts,
        opts.quiet_pct,
        report::markdown_cells(cells),
        report::markdown_idle(idle)
    );
    std::fs::write(opts.out_dir.join("echo.md"), &md)?;
    std::fs::write(opts.out_dir.join("echo.csv"), report::csv(cells))?;
    std::fs::write(
        opts.out_dir.join("echo.json"),
        report::json(machine, cells, idle),
    )?;
    if !cells.is_empty() {
        plot::write_svg(cells, &opts.out_dir.join("echo.svg"))?;
    }
    Ok(md)
}

fn write_outputs(
    opts: &Options,
    machine: &Machine,
    cells: &[Cell],
    idle: &[IdleReport],
) -> io::Result<()> {
    print!("{}", write_files(opts, machine, cells, idle)?);
    eprintln!(
        "echo-bench: wrote {}/echo.{{md,csv,json,svg}}",
        opts.out_dir.display()
    );
    Ok(())
}
