//! `compat-copy [--mib 200] [--rounds 5]`: copying a file to another with
//! `tokio::io::copy`, the first thing a tokio user writes, over ring-rt's `Compat<File>`
//! (io_uring and epoll) against tokio's own `tokio::fs::File` (current_thread), with
//! ring-rt's owned-buffer `read_at`/`write_at` loop (64 KiB) as the floor. The variants are
//! interleaved round by round; each copies the same source (written once, then read from
//! the page cache) to a fresh destination. Prints medians with min..max of the wall time,
//! and the process CPU time, per variant.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use ring_bench::stats::{median_range, self_cpu};
use ring_demo::flags::Flags;
use ring_rt::compat::Compat;
use ring_rt::BackendKind;

const CHUNK: usize = 64 * 1024;

#[derive(Clone, Copy)]
enum Variant {
    CompatUring,
    CompatEpoll,
    TokioFs,
    NativeUring,
}

impl Variant {
    const ALL: [Variant; 4] = [
        Variant::CompatUring,
        Variant::CompatEpoll,
        Variant::TokioFs,
        Variant::NativeUring,
    ];

    fn name(self) -> &'static str {
        match self {
            Variant::CompatUring => "tokio::io::copy over Compat<File>, io_uring",
            Variant::CompatEpoll => "tokio::io::copy over Compat<File>, epoll",
            Variant::TokioFs => "tokio::io::copy over tokio::fs::File (current_thread)",
            Variant::NativeUring => "ring-rt read_at/write_at, 64 KiB, io_uring",
        }
    }
}

fn ring_runtime(kind: BackendKind) -> std::io::Result<ring_rt::Runtime> {
    ring_rt::Runtime::builder().backend(kind).threads(1).build()
}

fn copy_compat(kind: BackendKind, src: &Path, dst: &Path) -> std::io::Result<u64> {
    ring_runtime(kind)?.block_on(async {
        let from = ring_rt::fs::File::open(src).await?;
        let to = ring_rt::fs::File::create(dst).await?;
        let (mut from, mut to) = (Compat::new(from), Compat::new(to));
        let n = tokio::io::copy(&mut from, &mut to).await?;
        tokio::io::AsyncWriteExt::flush(&mut to).await?;
        Ok(n)
    })
}

fn copy_tokio(src: &Path, dst: &Path) -> std::io::Result<u64> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut from = tokio::fs::File::open(src).await?;
        let mut to = tokio::fs::File::create(dst).await?;
        let n = tokio::io::copy(&mut from, &mut to).await?;
        tokio::io::AsyncWriteExt::flush(&mut to).await?;
        Ok(n)
    })
}

fn copy_native(src: &Path, dst: &Path) -> std::io::Result<u64> {
    ring_runtime(BackendKind::Uring)?.block_on(async {
        let from = ring_rt::fs::File::open(src).await?;
        let to = ring_rt::fs::File::create(dst).await?;
        let mut buf = Vec::with_capacity(CHUNK);
        let mut pos = 0u64;
        loop {
            let (n, back) = from.read_at(buf, pos).await;
            let n = n?;
            if n == 0 {
                return Ok(pos);
            }
            let (res, back) = to.write_all_at(back, pos).await;
            res?;
            buf = back;
            buf.clear();
            pos += n as u64;
        }
    })
}

fn run(variant: Variant, src: &Path, dst: &Path) -> std::io::Result<(Duration, Duration, u64)> {
    let _ = std::fs::remove_file(dst);
    let (start, cpu) = (Instant::now(), self_cpu());
    let n = match variant {
        Variant::CompatUring => copy_compat(BackendKind::Uring, src, dst)?,
        Variant::CompatEpoll => copy_compat(BackendKind::Epoll, src, dst)?,
        Variant::TokioFs => copy_tokio(src, dst)?,
        Variant::NativeUring => copy_native(src, dst)?,
    };
    Ok((start.elapsed(), self_cpu() - cpu, n))
}

fn main() -> ExitCode {
    let (mut mib, mut rounds) = (200u64, 5usize);
    let mut flags = Flags::from_env();
    let parsed: Result<(), String> = (|| {
        while let Some(flag) = flags.next_flag()? {
            match flag.as_str() {
                "--mib" => mib = flags.value::<u64>()?.max(1),
                "--rounds" => rounds = flags.value::<usize>()?.max(1),
                _ => return Err(flags.unknown()),
            }
        }
        Ok(())
    })();
    if let Err(e) = parsed {
        eprintln!("compat-copy: {e}\nusage: compat-copy [--mib 200] [--rounds 5]");
        return ExitCode::from(2);
    }
    let dir = ring_bench::crit::bench_files_dir();
    let src: PathBuf = dir.join(format!("copy-src-{mib}m.bin"));
    let dst: PathBuf = dir.join("copy-dst.bin");
    if let Err(e) = ring_bench::crit::ensure_file(&src, mib << 20) {
        eprintln!("compat-copy: {}: {e}", src.display());
        return ExitCode::FAILURE;
    }
    let mut times: Vec<Vec<(Duration, Duration)>> =
        Variant::ALL.iter().map(|_| Vec::new()).collect();
    for _ in 0..rounds {
        for (i, &v) in Variant::ALL.iter().enumerate() {
            match run(v, &src, &dst) {
                Ok((wall, cpu, n)) if n == mib << 20 => times[i].push((wall, cpu)),
                Ok((_, _, n)) => {
                    eprintln!(
                        "compat-copy: {} copied {n} bytes of {}",
                        v.name(),
                        mib << 20
                    );
                    return ExitCode::FAILURE;
                }
                Err(e) => {
                    eprintln!("compat-copy: {}: {e}", v.name());
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    let _ = std::fs::remove_file(&dst);
    println!("compat-copy: {mib} MiB, {rounds} rounds (medians, min..max)");
    println!("| variant | ms | CPU ms |");
    println!("|---|---:|---:|");
    for (i, v) in Variant::ALL.iter().enumerate() {
        let wall = median_range(times[i].iter().map(|t| t.0.as_secs_f64() * 1e3).collect());
        let cpu = median_range(times[i].iter().map(|t| t.1.as_secs_f64() * 1e3).collect());
        println!(
            "| {} | {:.0} ({:.0}..{:.0}) | {:.0} ({:.0}..{:.0}) |",
            v.name(),
            wall.0,
            wall.1,
            wall.2,
            cpu.0,
            cpu.1,
            cpu.2
        );
    }
    ExitCode::SUCCESS
}
