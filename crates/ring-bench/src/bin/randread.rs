//! `randread --file F [--depth 32] [--secs 10] [--backend uring|epoll] [--size-mib 256]
//! [--spin-us N]`: random 4 KiB reads at a fixed queue depth for a fixed time on ring-rt,
//! printing IOPS and the CPU it used, to compare with fio on the same file
//! (`scripts/fio-randread.sh`). `--spin-us` sets `Builder::spin_before_park`. Creates F
//! (written data, not sparse) when it does not exist; uses `O_DIRECT` when the filesystem
//! takes it.

use std::io;
use std::num::{NonZeroU64, NonZeroUsize};
use std::path::PathBuf;
use std::process::ExitCode;
use std::rc::Rc;
use std::time::{Duration, Instant};

use ring_bench::crit::{self, Stop, BLOCK_BYTES};
use ring_demo::flags::Flags;
use ring_rt::BackendKind;

const USAGE: &str = "usage: randread --file F [--depth 32] [--secs 10] [--backend uring|epoll] \
                     [--size-mib 256] [--spin-us 0]";

struct Args {
    file: PathBuf,
    depth: usize,
    secs: u64,
    backend: BackendKind,
    size_mib: u64,
    spin_us: u64,
}

fn parse_args() -> Result<Args, String> {
    let mut out = Args {
        file: PathBuf::new(),
        depth: 32,
        secs: 10,
        backend: BackendKind::Uring,
        size_mib: 256,
        spin_us: 0,
    };
    let mut flags = Flags::from_env();
    while let Some(flag) = flags.next_flag()? {
        match flag.as_str() {
            "--file" => out.file = flags.value()?,
            "--depth" => out.depth = flags.value::<NonZeroUsize>()?.get(),
            "--secs" => out.secs = flags.value::<NonZeroU64>()?.get(),
            "--size-mib" => out.size_mib = flags.value::<NonZeroU64>()?.get(),
            "--spin-us" => out.spin_us = flags.value()?,
            "--backend" => out.backend = flags.value()?,
            _ => return Err(flags.unknown()),
        }
    }
    if out.file.as_os_str().is_empty() {
        return Err("--file is required".into());
    }
    Ok(out)
}

fn run(args: &Args) -> io::Result<()> {
    if !args.file.exists() {
        crit::ensure_file(&args.file, args.size_mib << 20)?;
    }
    let blocks = std::fs::metadata(&args.file)?.len() / BLOCK_BYTES as u64;
    if blocks == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is smaller than one 4 KiB block", args.file.display()),
        ));
    }
    let rt = ring_rt::Runtime::builder()
        .backend(args.backend)
        .spin_before_park(Duration::from_micros(args.spin_us))
        .build()?;
    let cpu_before = ring_bench::stats::self_cpu();
    let (reads, mode, elapsed) = rt.block_on(async {
        let (file, mode) = crit::open_for_random_reads(&args.file).await?;
        let start = Instant::now();
        let stop = Stop::At(start + Duration::from_secs(args.secs));
        let reads = crit::random_reads(Rc::new(file), blocks, args.depth, stop).await?;
        io::Result::Ok((reads, mode, start.elapsed()))
    })?;
    let cpu = ring_bench::stats::self_cpu().saturating_sub(cpu_before);
    let iops = reads as f64 / elapsed.as_secs_f64();
    println!(
        "randread backend={} mode={} depth={} spin_us={} reads={reads} secs={:.2} iops={iops:.0} cpu_pct={:.0}",
        args.backend,
        mode.name(),
        args.depth,
        args.spin_us,
        elapsed.as_secs_f64(),
        100.0 * cpu.as_secs_f64() / elapsed.as_secs_f64()
    );
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("randread: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("randread: {e}");
            ExitCode::FAILURE
        }
    }
}
