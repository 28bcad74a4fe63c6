//! `fileio [--file F] [--rw randread|randwrite|read|write] [--bs 4096] [--depth 1]
//! [--direct 0|1] [--fsync 0] [--secs 10] [--backend uring|epoll] [--size-mib 256]`: one fio
//! job's worth of file I/O on ring-rt (default `Builder` settings), printing one line with
//! ops, IOPS, MiB/s and the CPU the process used (user + system, `getrusage`; per op also
//! for the runtime's thread alone, as fio counts its own), to compare with fio on the same
//! file (`scripts/fio-compare.sh`).
//!
//! `--depth N` keeps N ops in flight (N tasks, one op each, as fio's `iodepth`). `--fsync N`
//! links an `fdatasync` after every N-th write of the job (write -> fdatasync as one
//! `IOSQE_IO_LINK` chain, so the sync runs once that write is done; fio's `--fdatasync=N`
//! issues it as an op of its own after the N-th write); 0 = never. Writes carry random
//! data, stamped per write. Offsets stay inside the first `--size-mib` MiB of F (or F's
//! size, if smaller) and wrap around, so F never grows; sequential ops take the job's next
//! block in turn. F defaults to `target/bench-files/fileio-<size>m.bin` and is created
//! (written data, not sparse) when missing; before the run its pages are written back and
//! dropped from the page cache, as fio does before each job (`invalidate=1`).
//!
//! `--fixed 1` reads into and writes from registered buffers (`ring_rt::buf::FixedBuf`, one
//! per op in flight, `Builder::fixed_buffers(depth, bs)`): `READ_FIXED` / `WRITE_FIXED` on
//! io_uring, fio's `--fixedbufs=1`. `bs` must then be whole pages.

use std::io;
use std::num::{NonZeroU64, NonZeroUsize};
use std::path::PathBuf;
use std::process::ExitCode;
use std::rc::Rc;
use std::time::{Duration, Instant};

use ring_bench::crit::{self, Stop};
use ring_bench::fileio::{self, Done, Job, Rw};
use ring_bench::stats;
use ring_demo::flags::Flags;
use ring_rt::BackendKind;

const USAGE: &str = "usage: fileio [--file F] [--rw randread|randwrite|read|write] [--bs 4096] \
                     [--depth 1] [--direct 0|1] [--fsync 0] [--secs 10] \
                     [--backend uring|epoll] [--size-mib 256] [--fixed 0|1]";

struct Args {
    file: Option<PathBuf>,
    rw: Rw,
    bs: usize,
    depth: usize,
    direct: bool,
    fsync_every: u64,
    secs: u64,
    backend: BackendKind,
    size_mib: u64,
    fixed: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut out = Args {
        file: None,
        rw: Rw::RandRead,
        bs: 4096,
        depth: 1,
        direct: false,
        fsync_every: 0,
        secs: 10,
        backend: BackendKind::Uring,
        size_mib: 256,
        fixed: false,
    };
    let mut flags = Flags::from_env();
    while let Some(flag) = flags.next_flag()? {
        match flag.as_str() {
            "--file" => out.file = Some(flags.value()?),
            "--rw" => out.rw = flags.value()?,
            "--bs" => out.bs = flags.value::<NonZeroUsize>()?.get(),
            "--depth" => out.depth = flags.value::<NonZeroUsize>()?.get(),
            "--direct" => out.direct = parse_bool(flags.value()?, "--direct")?,
            "--fsync" => out.fsync_every = flags.value()?,
            "--secs" => out.secs = flags.value::<NonZeroU64>()?.get(),
            "--backend" => out.backend = flags.value()?,
            "--size-mib" => out.size_mib = flags.value::<NonZeroU64>()?.get(),
            "--fixed" => out.fixed = parse_bool(flags.value()?, "--fixed")?,
            _ => return Err(flags.unknown()),
        }
    }
    if out.fsync_every != 0 && !out.rw.is_write() {
        return Err(format!(
            "--fsync needs a write workload, not --rw {}",
            out.rw
        ));
    }
    Ok(out)
}

/// fio's 0|1 for a flag.
fn parse_bool(value: u8, flag: &str) -> Result<bool, String> {
    match value {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(format!("{flag} {value}: expected 0 or 1")),
    }
}

/// F, created when missing and dropped from the page cache (as fio's `invalidate=1`); the
/// job's region is its first `--size-mib` MiB, or all of it when it is smaller, in whole
/// blocks.
fn prepare(args: &Args) -> io::Result<(PathBuf, Job)> {
    let size_bytes = args.size_mib << 20;
    let file = args
        .file
        .clone()
        .unwrap_or_else(|| crit::bench_files_dir().join(format!("fileio-{}m.bin", args.size_mib)));
    if !file.exists() {
        crit::ensure_file(&file, size_bytes)?;
    }
    fileio::drop_cached_pages(&file)?;
    let len = std::fs::metadata(&file)?.len().min(size_bytes);
    let job = Job {
        rw: args.rw,
        bs: args.bs,
        depth: args.depth,
        fsync_every: args.fsync_every,
        region_bytes: len - len % args.bs as u64,
        fixed: args.fixed,
    };
    Ok((file, job))
}

/// What one run measured: its ops, wall time, and CPU time of the process and of the
/// runtime's thread (worker 0, which runs every task).
struct Measured {
    done: Done,
    elapsed: Duration,
    cpu: Duration,
    thread_cpu: Duration,
}

fn run(args: &Args) -> io::Result<()> {
    let (path, job) = prepare(args)?;
    let mut builder = ring_rt::Runtime::builder().backend(args.backend);
    if args.fixed {
        let count = u16::try_from(job.depth).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "--fixed takes a depth of at most 16384",
            )
        })?;
        builder = builder.fixed_buffers(count, job.bs);
    }
    let rt = builder.build()?;
    let measured = rt.block_on(async {
        let file = Rc::new(fileio::open(&path, args.rw, args.direct).await?);
        let cpu_before = stats::self_cpu();
        let thread_before = stats::thread_cpu();
        let start = Instant::now();
        let stop = Stop::At(start + Duration::from_secs(args.secs));
        let done = fileio::run(file, job, stop).await?;
        io::Result::Ok(Measured {
            done,
            elapsed: start.elapsed(),
            cpu: stats::self_cpu().saturating_sub(cpu_before),
            thread_cpu: stats::thread_cpu().saturating_sub(thread_before),
        })
    })?;
    println!("{}", report(args, &job, &measured));
    Ok(())
}

/// The result line: `key=value` pairs, the last ones the figures. `cpu_*` is the whole
/// process (io-wq workers and the blocking pool included); `thread_cpu_us_per_op` the
/// runtime's thread alone, as fio counts its own CPU.
fn report(args: &Args, job: &Job, m: &Measured) -> String {
    let secs = m.elapsed.as_secs_f64();
    let ops = m.done.ops;
    let iops = ops as f64 / secs;
    let mib_s = iops * job.bs as f64 / f64::from(1 << 20);
    let per_op_us = |cpu: Duration| cpu.as_secs_f64() * 1e6 / ops.max(1) as f64;
    format!(
        "fileio backend={} rw={} bs={} depth={} direct={} fsync={} fixed={} region_mib={} ops={ops} \
         syncs={} secs={secs:.2} iops={iops:.0} mib_s={mib_s:.1} cpu_pct={:.0} \
         cpu_us_per_op={:.2} thread_cpu_us_per_op={:.2}",
        args.backend,
        job.rw,
        job.bs,
        job.depth,
        u8::from(args.direct),
        job.fsync_every,
        u8::from(job.fixed),
        job.region_bytes >> 20,
        m.done.syncs,
        100.0 * m.cpu.as_secs_f64() / secs,
        per_op_us(m.cpu),
        per_op_us(m.thread_cpu),
    )
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("fileio: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fileio: {e}");
            ExitCode::FAILURE
        }
    }
}
