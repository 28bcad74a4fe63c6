//! `cargo bench -p ring-bench --bench balance [-- --rounds N --bursts N --burst N]`: how
//! connections and CPU spread over two workers when clients open connections in bursts,
//! with one `SO_REUSEPORT` listener per worker (`hash`: the kernel picks by a hash of the
//! 4-tuple) against one listener handing each connection to the least loaded worker
//! (`load`: `Handle::serve_balanced`), and the same with the connections accepted as direct
//! descriptors (`load-direct`: `--direct 4096`), which move to the other worker by
//! `IORING_MSG_SEND_FD` instead of by their fd (Linux 6.8+; fds before). All are ring-rt's
//! echo example with `--threads 2` on io_uring, on every CPU.
//!
//! Each round: `--bursts` bursts of `--burst` connections opened at once; in each burst
//! one connection in eight is heavy (2,000 round trips of 64 B), the rest light (50); a
//! burst's connections all run to their end before the next burst opens. Measured per
//! worker: the connections it served (its tasks spawned, from the server's metrics line)
//! and the CPU its thread used (`/proc/<pid>/task/<tid>/stat`). The figure of merit is the
//! busier worker's share (50% is even). Modes are interleaved round by round.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use ring_bench::server::{Server, ServerSpec};
use ring_bench::stats::median_range;

/// Per-worker CPU seconds of the server's threads, by thread name.
fn thread_cpu(pid: u32) -> io::Result<HashMap<String, f64>> {
    let ticks = ring_bench::stats::clock_ticks_per_sec() as f64;
    let mut out = HashMap::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let task = task?.path();
        let name = std::fs::read_to_string(task.join("comm"))?
            .trim()
            .to_string();
        let stat = std::fs::read_to_string(task.join("stat"))?;
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let t = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        *out.entry(name).or_default() += (t(11) + t(12)) / ticks;
    }
    Ok(out)
}

/// Runs one burst: `n` connections at once, one in eight heavy.
async fn burst(addr: SocketAddr, n: usize) -> io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tasks = Vec::new();
    for i in 0..n {
        let trips = if i % 8 == 0 { 2000 } else { 50 };
        tasks.push(tokio::spawn(async move {
            let mut stream = tokio::net::TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            let mut buf = [0u8; 64];
            for _ in 0..trips {
                stream.write_all(&[7u8; 64]).await?;
                stream.read_exact(&mut buf).await?;
            }
            io::Result::Ok(())
        }));
    }
    for t in tasks {
        t.await.map_err(io::Error::other)??;
    }
    Ok(())
}

/// One round of one mode: connections per worker, CPU seconds per worker.
type Spread = ([u64; 2], [f64; 2]);

/// The modes, run in this order in every round.
const MODES: [&str; 3] = ["hash", "load", "load-direct"];

fn round(echo: &Path, mode: &str, port: u16, bursts: usize, n: usize) -> io::Result<Spread> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let spec = ServerSpec {
        name: format!("ring-{mode}"),
        program: echo.to_path_buf(),
        args: echo_args(mode),
        has_metrics: true,
        all_cpus: true,
    };
    let server = Server::start(&spec, addr, 0, None)?;
    let cpu_before = thread_cpu(server.pid())?;
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    client.block_on(async {
        for _ in 0..bursts {
            burst(addr, n).await?;
        }
        io::Result::Ok(())
    })?;
    // Let the last connections' tasks end before counting.
    std::thread::sleep(Duration::from_millis(100));
    let metrics = server.metrics()?.unwrap_or_default();
    let cpu_after = thread_cpu(server.pid())?;
    server.stop(addr)?;
    let field = |name: &str| -> u64 {
        let key = format!("\"{name}\":");
        metrics
            .split(&key)
            .nth(1)
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    // Worker 0 also runs the accept loop(s): one task for `load`, one per worker's
    // listener for `hash` (worker 1's runs there).
    // With direct descriptors, worker 0 also runs one short task per connection it
    // sends to worker 1 (the send and its result).
    let w1 = field("w1_tasks_spawned").saturating_sub(u64::from(mode == "hash"));
    let sends = if mode == "load-direct" { w1 } else { 0 };
    let conns = [field("w0_tasks_spawned").saturating_sub(1 + sends), w1];
    let cpu_of = |name: &str| {
        cpu_after.get(name).copied().unwrap_or(0.0) - cpu_before.get(name).copied().unwrap_or(0.0)
    };
    // Worker 0 is the main thread ("echo"); worker 1 is "ring-rt-worker-1", which the
    // kernel's 15-character thread names cut to "ring-rt-worker-".
    let cpu = [cpu_of("echo"), cpu_of("ring-rt-worker-")];
    Ok((conns, cpu))
}

/// The echo example's flags for `mode`.
fn echo_args(mode: &str) -> Vec<String> {
    let mut args = vec!["--backend", "uring", "--threads", "2"];
    match mode {
        "load-direct" => args.extend(["--balance", "load", "--direct", "4096"]),
        other => args.extend(["--balance", other]),
    }
    args.into_iter().map(String::from).collect()
}

fn share(v: [f64; 2]) -> f64 {
    let total = v[0] + v[1];
    if total <= 0.0 {
        return 0.5;
    }
    v[0].max(v[1]) / total
}

fn main() -> ExitCode {
    let (mut rounds, mut bursts, mut n) = (5usize, 10usize, 32usize);
    let mut flags =
        ring_demo::flags::Flags::new(std::env::args().skip(1).filter(|a| a != "--bench"));
    let parsed: Result<(), String> = (|| {
        while let Some(flag) = flags.next_flag()? {
            match flag.as_str() {
                "--rounds" => rounds = flags.value::<usize>()?.max(1),
                "--bursts" => bursts = flags.value::<usize>()?.max(1),
                "--burst" => n = flags.value::<usize>()?.max(1),
                _ => return Err(flags.unknown()),
            }
        }
        Ok(())
    })();
    if let Err(e) = parsed {
        eprintln!("balance: {e}\nusage: balance [--rounds N] [--bursts N] [--burst N]");
        return ExitCode::from(2);
    }
    let _ = rlimit::increase_nofile_limit(u64::MAX);
    let profile_dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent()?.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("target/release"));
    let echo = match ring_bench::server::build_echo_example(&profile_dir) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("balance: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut results: HashMap<&str, Vec<Spread>> = HashMap::new();
    for r in 0..rounds {
        for (m, mode) in MODES.into_iter().enumerate() {
            let port = 7700 + (r * MODES.len() + m) as u16;
            match round(&echo, mode, port, bursts, n) {
                Ok(res) => results.entry(mode).or_default().push(res),
                Err(e) => {
                    eprintln!("balance: {mode} round {r}: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    println!(
        "balance: {rounds} rounds of {bursts} bursts x {n} connections (1 in 8 heavy), 2 workers, io_uring"
    );
    println!("| mode | round | connections w0 / w1 | busier worker's share of connections | CPU s w0 / w1 | busier worker's share of CPU |");
    println!("|---|---|---|---|---|---|");
    for mode in MODES {
        for (i, (conns, cpu)) in results.get(mode).into_iter().flatten().enumerate() {
            let cshare = share([conns[0] as f64, conns[1] as f64]);
            println!(
                "| {mode} | {i} | {} / {} | {:.1}% | {:.2} / {:.2} | {:.1}% |",
                conns[0],
                conns[1],
                cshare * 100.0,
                cpu[0],
                cpu[1],
                share(*cpu) * 100.0
            );
        }
    }
    for mode in MODES {
        let rs = results.get(mode).cloned().unwrap_or_default();
        if rs.is_empty() {
            continue;
        }
        let cs = median_range(
            rs.iter()
                .map(|(c, _)| share([c[0] as f64, c[1] as f64]) * 100.0)
                .collect(),
        );
        let us = median_range(rs.iter().map(|(_, u)| share(*u) * 100.0).collect());
        println!(
            "{mode}: busier worker's share, median (min..max): connections {:.1}% ({:.1}..{:.1}), CPU {:.1}% ({:.1}..{:.1})",
            cs.0, cs.1, cs.2, us.0, us.1, us.2
        );
    }
    ExitCode::SUCCESS
}
