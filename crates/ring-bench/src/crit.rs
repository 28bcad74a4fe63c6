//! Shared fixtures of the criterion micro-benchmarks (`benches/*.rs`) and the `randread`
//! and `fileio` binaries: runtimes per backend, bench files under `target/bench-files`, the
//! `O_DIRECT` probe and the random-read loop.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Instant;

use ring_rt::fs::{AlignedBuf, File, OpenOptions};
use ring_rt::{BackendKind, Runtime};

/// The unit of every file bench: one 4 KiB block.
pub const BLOCK_BYTES: usize = 4096;

/// Both ring-rt backends with the labels the benches report them under.
pub const BACKENDS: [(BackendKind, &str); 2] = [
    (BackendKind::Uring, "ring-rt/uring"),
    (BackendKind::Epoll, "ring-rt/epoll"),
];

/// A one-worker ring-rt runtime on `kind`; forcing io_uring where it is unavailable fails.
pub fn runtime(kind: BackendKind) -> io::Result<Runtime> {
    Runtime::builder().backend(kind).build()
}

/// tokio's single-threaded runtime, the like-for-like comparison of a one-worker ring-rt.
pub fn tokio_current_thread() -> io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// `target/bench-files` of the workspace (not of `CARGO_TARGET_DIR`, so every build shares
/// one copy of the large files), or `RING_BENCH_FILES` when set.
pub fn bench_files_dir() -> PathBuf {
    match std::env::var_os("RING_BENCH_FILES") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench-files"),
    }
}

/// Makes `path` a file of exactly `size_bytes` of written (not sparse) data, reusing it
/// when it already has that size: reads of a hole never reach the disk, so a sparse file
/// would make `O_DIRECT` reads look free.
pub fn ensure_file(path: &Path, size_bytes: u64) -> io::Result<()> {
    if fs::metadata(path).is_ok_and(|m| m.len() == size_bytes) {
        return Ok(());
    }
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    let mut file = fs::File::create(path)?;
    let mut rng = Rng::new(size_bytes);
    let mut chunk = vec![0u8; 1 << 20];
    let mut left = size_bytes;
    while left > 0 {
        for word in chunk.chunks_exact_mut(8) {
            word.copy_from_slice(&rng.next_u64().to_le_bytes());
        }
        let n = left.min(chunk.len() as u64) as usize;
        file.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    file.sync_all()
}

/// How a bench file was opened: `O_DIRECT` when the filesystem takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadMode {
    /// `O_DIRECT`: every read goes to the device.
    Direct,
    /// The filesystem refused `O_DIRECT` (`EINVAL`): reads may hit the page cache.
    Buffered,
}

impl ReadMode {
    /// "O_DIRECT" or "buffered".
    pub fn name(self) -> &'static str {
        match self {
            ReadMode::Direct => "O_DIRECT",
            ReadMode::Buffered => "buffered",
        }
    }
}

/// Opens `path` read-only with `O_DIRECT` if one aligned read at offset 0 works, else
/// (`EINVAL` from the open or the read, as on tmpfs) buffered. Runs on the current runtime.
pub async fn open_for_random_reads(path: &Path) -> io::Result<(File, ReadMode)> {
    let direct = OpenOptions::new().read(true).direct(true).open(path).await;
    match direct {
        Ok(file) => {
            let (res, _) = file.read_at(AlignedBuf::new(BLOCK_BYTES)?, 0).await;
            match res {
                Ok(_) => return Ok((file, ReadMode::Direct)),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
                Err(e) => return Err(e),
            }
        }
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
        Err(e) => return Err(e),
    }
    Ok((File::open(path).await?, ReadMode::Buffered))
}

/// When a task of the random-read loop (or of `fileio::run`) stops.
#[derive(Clone, Copy, Debug)]
pub enum Stop {
    /// After this many reads.
    Count(u64),
    /// At the first completion past this instant.
    At(Instant),
}

/// Random 4 KiB reads from `file` (of `blocks` blocks) with `depth` reads in flight: one
/// task per slot, each awaiting its read and issuing the next, as fio's `iodepth` keeps
/// the queue full. With `Stop::Count(n)` the `n` reads are shared out among the tasks.
/// Returns the reads done. Runs on the current runtime.
pub async fn random_reads(
    file: Rc<File>,
    blocks: u64,
    depth: usize,
    stop: Stop,
) -> io::Result<u64> {
    let depth = depth.max(1);
    let mut tasks = Vec::with_capacity(depth);
    for slot in 0..depth {
        let slot_stop = match stop {
            Stop::Count(n) => Stop::Count(share(n, depth, slot)),
            at => at,
        };
        let file = file.clone();
        let seed = 0x9e37_79b9_7f4a_7c15 ^ slot as u64;
        tasks.push(ring_rt::spawn(read_slot(file, blocks, seed, slot_stop)));
    }
    let mut done = 0;
    for task in tasks {
        done += task
            .await
            .map_err(|e| io::Error::other(format!("random-read task: {e}")))??;
    }
    Ok(done)
}

/// Slot `slot`'s part of `n` reads (or other ops) shared among `depth` slots (the first ones
/// take the remainder).
pub fn share(n: u64, depth: usize, slot: usize) -> u64 {
    let depth = depth as u64;
    n / depth + u64::from((slot as u64) < n % depth)
}

/// One slot of [`random_reads`]: a read at a time, into one reused aligned buffer.
async fn read_slot(file: Rc<File>, blocks: u64, seed: u64, stop: Stop) -> io::Result<u64> {
    let mut rng = Rng::new(seed);
    let mut buf = AlignedBuf::new(BLOCK_BYTES)?;
    let mut done = 0;
    loop {
        match stop {
            Stop::Count(n) if done >= n => return Ok(done),
            Stop::At(at) if Instant::now() >= at => return Ok(done),
            _ => {}
        }
        let pos = rng.below(blocks) * BLOCK_BYTES as u64;
        let (res, back) = file.read_at(buf, pos).await;
        buf = back;
        if res? != BLOCK_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("short read at {pos}: the bench file is smaller than {blocks} blocks"),
            ));
        }
        done += 1;
    }
}

/// xorshift64*: cheap, deterministic offsets (the benches must not measure the RNG).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (0 is remapped: xorshift never leaves the zero state).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A value in `0..n` (`n` > 0; the modulo bias is irrelevant for offsets).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up_to_the_count() {
        for (n, depth) in [(0, 1), (7, 3), (100, 32), (31, 32)] {
            let total: u64 = (0..depth).map(|slot| share(n, depth, slot)).sum();
            assert_eq!(total, n, "n={n} depth={depth}");
        }
    }

    #[test]
    fn rng_stays_below_bound() {
        let mut rng = Rng::new(0);
        assert!((0..1000).all(|_| rng.below(65_536) < 65_536));
    }
}
