//! The seed workload's command line, shared by the `seed-file` binary and
//! `cargo bench --bench seed_file`: a markdown table of wall times and, with `--strace`,
//! syscall counts from a separate traced run of each variant.
//!
//! [--pages 65536] [--inflight 64] [--variants std,ring-chain,...] [--runs 1]
//! [--blocking-threads N] [--batch-wait-us N] [--strace] [--dir target/bench-files]
//! [--json FILE]

use std::io;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::seed::report::{self, Row};
use crate::seed::{self, Config, Variant};

const USAGE: &str = "usage: seed-file [--pages 65536] [--inflight 64] [--variants std,ring-chain,ring-ordered,ring-epoll-chain,tokio-fs,tokio-fs-tasks,raw-uring] [--runs 1] [--blocking-threads N (0: ring-rt's default)] [--batch-wait-us N] [--strace] [--dir target/bench-files] [--json FILE]";

struct Args {
    config: Config,
    variants: Vec<Variant>,
    runs: usize,
    strace: bool,
    json: Option<PathBuf>,
    /// Internal: run one variant once and exit (what `--strace` traces).
    child: Option<Variant>,
}

fn parse(args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut a = Args {
        config: Config {
            pages: 65536,
            inflight: 64,
            dir: crate::crit::bench_files_dir(),
            blocking_threads: None,
            batch_wait: Duration::ZERO,
        },
        variants: Variant::ALL.to_vec(),
        runs: 1,
        strace: false,
        json: None,
        child: None,
    };
    let mut args = args.peekable();
    while let Some(flag) = args.next() {
        if flag == "--strace" {
            a.strace = true;
            continue;
        }
        let v = args.next().ok_or(format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {v}: {e}");
        match flag.as_str() {
            "--pages" => a.config.pages = v.parse().map_err(|e| bad(&e))?,
            "--inflight" => a.config.inflight = v.parse().map_err(|e| bad(&e))?,
            "--dir" => a.config.dir = PathBuf::from(&v),
            "--json" => a.json = Some(PathBuf::from(&v)),
            "--runs" => a.runs = v.parse().map_err(|e| bad(&e))?,
            "--blocking-threads" => {
                let n: usize = v.parse().map_err(|e| bad(&e))?;
                a.config.blocking_threads = (n > 0).then_some(n);
            }
            "--batch-wait-us" => {
                a.config.batch_wait = Duration::from_micros(v.parse().map_err(|e| bad(&e))?)
            }
            "--child" => a.child = Some(v.parse().map_err(|e| bad(&e))?),
            "--variants" => {
                a.variants = v
                    .split(',')
                    .map(|s| s.trim().parse())
                    .collect::<io::Result<_>>()
                    .map_err(|e| bad(&e))?
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if a.runs == 0 || a.variants.is_empty() {
        return Err("--runs and --variants must not be empty".into());
    }
    Ok(a)
}

/// Runs every variant `--runs` times, interleaved run by run (v1, v2, .., v1, v2, ..), so
/// whatever else the machine does hits them alike.
fn bench(args: &Args) -> io::Result<Vec<Row>> {
    let exe = std::env::current_exe()?;
    let mut all_runs: Vec<Vec<seed::Run>> = args.variants.iter().map(|_| Vec::new()).collect();
    for _ in 0..args.runs {
        for (i, &variant) in args.variants.iter().enumerate() {
            let run = seed::run(variant, &args.config)?;
            eprintln!("{variant}: {:.0} ms", run.elapsed.as_secs_f64() * 1e3);
            all_runs[i].push(run);
        }
    }
    let mut rows = Vec::with_capacity(args.variants.len());
    for (&variant, runs) in args.variants.iter().zip(all_runs) {
        let traced = match args.strace {
            true => Some(report::trace(
                &exe,
                variant,
                &args.config,
                &args.config.dir,
            )?),
            false => None,
        };
        rows.push(Row::new(runs, traced)?);
    }
    Ok(rows)
}

/// Runs the command line `args` (without the program name).
pub fn main(args: impl Iterator<Item = String>) -> ExitCode {
    let args = match parse(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("seed-file: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if let Some(variant) = args.child {
        return match seed::run(variant, &args.config) {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("seed-file --child {variant}: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let rows = match bench(&args) {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("seed-file: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{}", report::markdown(&rows));
    if let Some(path) = &args.json {
        if let Err(e) = std::fs::write(path, report::json(&rows)) {
            eprintln!("seed-file: writing {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
