//! The seed file workload: for each 4 KiB page of a file, write it, `fdatasync`, read it
//! back and check it, on blocking std, ring-rt (linked chains, on io_uring and on epoll)
//! and tokio::fs.
//!
//! Every variant starts from the same fresh file, created and sized (sparse) before the
//! clock starts, and deleted afterwards. Each page's contents are derived from its number,
//! so a page read back from the wrong offset fails verification.

use std::fmt;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub mod cli;
mod raw;
pub mod report;
mod ring;
mod tokio_fs;

/// Bytes per page: one write, one read.
pub const PAGE_LEN: usize = 4096;

/// One way of running the workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// Blocking std: `pwrite`, `fdatasync`, `pread`, one page at a time.
    Std,
    /// ring-rt on io_uring: `inflight` linked write -> fsync -> read chains at once.
    RingChain,
    /// ring-rt on io_uring: one chain at a time.
    RingOrdered,
    /// ring-rt on epoll: `inflight` chains at once, each run in order on the thread pool.
    RingEpollChain,
    /// tokio::fs, one page at a time: seek + write_all, sync_data, seek + read_exact.
    TokioFs,
    /// tokio::fs, `inflight` tasks at once, each with its own `File` handle.
    TokioFsTasks,
    /// The raw io-uring crate, no runtime: `inflight` linked chains at once (the limit).
    RawUring,
}

impl Variant {
    /// Every variant, in table order (std first: the others are compared with it).
    pub const ALL: [Variant; 7] = [
        Variant::Std,
        Variant::RingChain,
        Variant::RingOrdered,
        Variant::RingEpollChain,
        Variant::TokioFs,
        Variant::TokioFsTasks,
        Variant::RawUring,
    ];

    /// The name used on the command line and in tables.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Std => "std",
            Variant::RingChain => "ring-chain",
            Variant::RingOrdered => "ring-ordered",
            Variant::RingEpollChain => "ring-epoll-chain",
            Variant::TokioFs => "tokio-fs",
            Variant::TokioFsTasks => "tokio-fs-tasks",
            Variant::RawUring => "raw-uring",
        }
    }

    /// How many pages this variant keeps in flight under `config`.
    pub fn depth(self, config: &Config) -> usize {
        match self {
            Variant::Std | Variant::RingOrdered | Variant::TokioFs => 1,
            Variant::RingChain
            | Variant::RingEpollChain
            | Variant::TokioFsTasks
            | Variant::RawUring => config.inflight,
        }
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Variant {
    type Err = io::Error;

    fn from_str(s: &str) -> io::Result<Variant> {
        Variant::ALL
            .into_iter()
            .find(|v| v.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Variant::ALL.iter().map(|v| v.name()).collect();
                invalid(format!(
                    "unknown variant {s:?} (known: {})",
                    names.join(",")
                ))
            })
    }
}

/// The workload's shape.
#[derive(Clone, Debug)]
pub struct Config {
    /// Pages to write, sync and read back; the file is `pages * PAGE_LEN` bytes.
    pub pages: u64,
    /// Chains (or tasks) in flight for the concurrent variants.
    pub inflight: usize,
    /// Where the file is created.
    pub dir: PathBuf,
    /// ring-rt's `Builder::blocking_threads` (io-wq workers on io_uring, the pool on
    /// epoll): the syncs that may run at once. `None` keeps the runtime's default.
    pub blocking_threads: Option<usize>,
    /// ring-rt's `Builder::batch_wait` (6.12+; zero is off).
    pub batch_wait: Duration,
}

impl Config {
    /// The file's length in bytes.
    pub fn file_len(&self) -> u64 {
        self.pages * PAGE_LEN as u64
    }

    fn check(&self) -> io::Result<()> {
        if self.pages == 0 || self.inflight == 0 {
            return Err(invalid("--pages and --inflight must be positive".into()));
        }
        if self
            .pages
            .checked_mul(PAGE_LEN as u64)
            .is_none_or(|n| n > i64::MAX as u64)
        {
            return Err(invalid(format!("--pages {} is too large", self.pages)));
        }
        Ok(())
    }
}

/// What one timed run measured.
#[derive(Clone, Debug)]
pub struct Run {
    /// The variant that ran.
    pub variant: Variant,
    /// Pages in flight at once.
    pub depth: usize,
    /// Wall time from opening the file to the last page verified.
    pub elapsed: Duration,
    /// Pages written, synced, read back and found equal to their pattern.
    pub verified: u64,
}

/// Runs `variant` once on a fresh file in `config.dir`, which is deleted afterwards. Fails
/// if any page does not read back as written.
pub fn run(variant: Variant, config: &Config) -> io::Result<Run> {
    config.check()?;
    std::fs::create_dir_all(&config.dir)?;
    // Unique per run, so runs in parallel (tests) never share a file.
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let path = config.dir.join(format!(
        "seed-{}-{}-{}.bin",
        variant.name(),
        std::process::id(),
        RUNS.fetch_add(1, Ordering::Relaxed)
    ));
    let file = std::fs::File::create(&path)?;
    file.set_len(config.file_len())?;
    drop(file);
    let start = Instant::now();
    let verified = run_on(variant, config, &path);
    let elapsed = start.elapsed();
    let removed = std::fs::remove_file(&path);
    let verified = verified?;
    removed?;
    if verified != config.pages {
        return Err(io::Error::other(format!(
            "{variant}: {verified} of {} pages verified",
            config.pages
        )));
    }
    Ok(Run {
        variant,
        depth: variant.depth(config),
        elapsed,
        verified,
    })
}

fn run_on(variant: Variant, config: &Config, path: &Path) -> io::Result<u64> {
    let depth = variant.depth(config);
    match variant {
        Variant::Std => run_std(config.pages, path),
        Variant::RingChain | Variant::RingOrdered => {
            ring::run(ring_rt::BackendKind::Uring, config, depth, path)
        }
        Variant::RingEpollChain => ring::run(ring_rt::BackendKind::Epoll, config, depth, path),
        Variant::TokioFs | Variant::TokioFsTasks => tokio_fs::run(config.pages, depth, path),
        Variant::RawUring => raw::run(config, depth, path),
    }
}

/// Blocking std, one page at a time: `pwrite`, `fdatasync`, `pread`.
fn run_std(pages: u64, path: &Path) -> io::Result<u64> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    let mut data = vec![0u8; PAGE_LEN];
    let mut back = vec![0u8; PAGE_LEN];
    for page in 0..pages {
        fill_page(page, &mut data);
        let pos = page * PAGE_LEN as u64;
        file.write_all_at(&data, pos)?;
        file.sync_data()?;
        file.read_exact_at(&mut back, pos)?;
        check_page(page, &back)?;
    }
    Ok(pages)
}

/// Fills `buf` with page `page`'s contents: each 8-byte word a mix of the page number and
/// the word's index, so no two pages (or words) are alike.
pub fn fill_page(page: u64, buf: &mut [u8]) {
    for (i, word) in buf.chunks_mut(8).enumerate() {
        let bytes = mix(page << 16 | i as u64).to_le_bytes();
        word.copy_from_slice(&bytes[..word.len()]);
    }
}

/// Checks that `buf` holds exactly page `page`'s contents.
pub fn check_page(page: u64, buf: &[u8]) -> io::Result<()> {
    let is_page = buf.len() == PAGE_LEN
        && buf
            .chunks(8)
            .enumerate()
            .all(|(i, word)| word == &mix(page << 16 | i as u64).to_le_bytes()[..word.len()]);
    if is_page {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "page {page} read back {} bytes that differ from what was written",
            buf.len()
        ),
    ))
}

/// splitmix64's finaliser: cheap, and every input bit reaches every output bit.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Config {
        Config {
            pages: 256,
            inflight: 16,
            dir: std::env::temp_dir().join("ring-bench-seed-test"),
            blocking_threads: Some(4),
            batch_wait: Duration::ZERO,
        }
    }

    #[test]
    fn every_variant_verifies_every_page() {
        let config = small();
        for variant in Variant::ALL {
            let run = run(variant, &config).unwrap_or_else(|e| panic!("{variant}: {e}"));
            assert_eq!(run.verified, 256, "{variant}");
            assert_eq!(run.depth, variant.depth(&config));
        }
    }

    #[test]
    fn epoll_backend_verifies_one_chain_at_a_time_too() {
        let config = Config {
            inflight: 1,
            ..small()
        };
        let run = run(Variant::RingEpollChain, &config).unwrap();
        assert_eq!((run.verified, run.depth), (256, 1));
    }

    #[test]
    fn a_page_from_another_offset_fails_verification() {
        let mut buf = vec![0u8; PAGE_LEN];
        fill_page(7, &mut buf);
        assert!(check_page(7, &buf).is_ok());
        let err = check_page(8, &buf).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(check_page(7, &buf[..PAGE_LEN - 1]).is_err());
    }

    #[test]
    fn variant_names_round_trip_and_unknown_is_an_error() {
        for variant in Variant::ALL {
            assert_eq!(variant.name().parse::<Variant>().unwrap(), variant);
        }
        let err = "ring-fast".parse::<Variant>().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn zero_pages_is_an_error_not_a_panic() {
        let config = Config {
            pages: 0,
            ..small()
        };
        let err = run(Variant::Std, &config).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }
}
