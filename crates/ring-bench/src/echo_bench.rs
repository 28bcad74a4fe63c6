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
use crate::strace::{self, StraceCell, Traced};
use crate::{plot, sys};

/// The CPU servers run on.
pub const SERVER_CPU: usize = 0;
/// The CPU the load generator runs on.
pub const LOAD_CPU: usize = 1;

/// Command-line help.
pub const USAGE: &str =
    "usage: cargo bench -p ring-bench --bench echo -- [--quick] [--duration SECS] [--warmup SECS]
    [--conns 1,50,...] [--lens 64,512,...] [--servers ring-uring,ring-epoll,tokio-ct,tokio-mt]
    [--idle N] [--strace] [--port P] [--out DIR]";

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

/// The four servers, in table order.
pub fn servers(bins: &Bins) -> Vec<ServerSpec> {
    let spec = |name: &str, program: &Path, args: [&str; 2], has_metrics| ServerSpec {
        name: name.to_string(),
        program: program.to_path_buf(),
        args: args.iter().map(|a| a.to_string()).collect(),
        has_metrics,
    };
    vec![
        spec("ring-uring", &bins.ring_echo, ["--backend", "uring"], true),
        spec("ring-epoll", &bins.ring_echo, ["--backend", "epoll"], true),
        spec(
            "tokio-ct",
            &bins.tokio_echo,
            ["--flavor", "current_thread"],
            false,
        ),
        spec(
            "tokio-mt",
            &bins.tokio_echo,
            ["--flavor", "multi_thread"],
            false,
        ),
    ]
}

/// Runs the benchmark and writes its outputs.
pub fn run(opts: &Options, bins: &Bins) -> io::Result<()> {
    let nofile = sys::raise_nofile_limit()?;
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
    let (mut cells, mut idle) = (Vec::new(), Vec::new());
    for spec in &specs {
        cells.extend(run_matrix(opts, bins, spec)?);
        if idle_conns > 0 {
            idle.push(run_idle(opts, spec, idle_conns)?);
        }
    }
    write_outputs(opts, &machine, &cells, &idle)
}

fn start(spec: &ServerSpec, addr: SocketAddr) -> io::Result<Server> {
    let server = Server::start(spec, addr, SERVER_CPU, None)?;
    let wanted = spec.args.last().map(String::as_str).unwrap_or("");
    if spec.has_metrics && !server.listening().contains(&format!("backend={wanted}")) {
        eprintln!(
            "echo-bench: warning: {} asked for {wanted} but runs: {}",
            spec.name,
            server.listening()
        );
    }
    Ok(server)
}

fn run_matrix(opts: &Options, bins: &Bins, spec: &ServerSpec) -> io::Result<Vec<Cell>> {
    let server = start(spec, opts.addr)?;
    let warm = Shape { conns: 50, len: 64 };
    if !opts.warmup.is_zero() {
        cell::run_load(&bins.echo_load, opts.addr, warm, opts.warmup, LOAD_CPU)?;
    }
    let mut cells = Vec::new();
    for &len in &opts.lens {
        for &conns in &opts.conns {
            let shape = Shape { conns, len };
            let c = cell::measure(
                &server,
                &bins.echo_load,
                opts.addr,
                shape,
                opts.duration,
                LOAD_CPU,
            )?;
            eprintln!(
                "echo-bench: {} {conns} x {len} B: {:.0} req/s, {:.2} us CPU/req, enters/req {}, other CPU {:.0}%",
                spec.name,
                c.load.req_per_s,
                c.cpu_us_per_req(),
                c.enters_per_req().map_or("-".into(), |e| format!("{e:.3}")),
                c.other_busy_pct()
            );
            cells.push(c);
        }
    }
    server.stop(opts.addr)?;
    Ok(cells)
}

fn run_idle(opts: &Options, spec: &ServerSpec, conns: usize) -> io::Result<IdleReport> {
    let server = start(spec, opts.addr)?;
    let report = idle::measure(&server, opts.addr, conns);
    server.stop(opts.addr)?;
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
    for spec in specs {
        let traced = Traced {
            spec,
            echo_load: &bins.echo_load,
            addr: opts.addr,
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

fn write_outputs(
    opts: &Options,
    machine: &Machine,
    cells: &[Cell],
    idle: &[IdleReport],
) -> io::Result<()> {
    let md = format!(
        "### Echo benchmark\n\n{}- server pinned to CPU {SERVER_CPU}, echo-load pinned to CPU {LOAD_CPU}; {:.1} s per cell\n{}\n#### Memory per idle connection\n\n{}",
        machine.markdown(),
        opts.duration.as_secs_f64(),
        report::markdown_cells(cells),
        report::markdown_idle(idle)
    );
    print!("{md}");
    std::fs::write(opts.out_dir.join("echo.md"), &md)?;
    std::fs::write(opts.out_dir.join("echo.csv"), report::csv(cells))?;
    std::fs::write(
        opts.out_dir.join("echo.json"),
        report::json(machine, cells, idle),
    )?;
    if !cells.is_empty() {
        plot::write_svg(cells, &opts.out_dir.join("echo.svg"))?;
    }
    eprintln!(
        "echo-bench: wrote {}/echo.{{md,csv,json,svg}}",
        opts.out_dir.display()
    );
    Ok(())
}
