//! The `fileio` workload (issue 19): reads or writes of one block size, random or
//! sequential, buffered or `O_DIRECT`, at a fixed depth, with an optional `fdatasync` every
//! N writes; ring-rt's side of `scripts/fio-compare.sh`, shaped as the fio job of the same
//! options.
//!
//! The run is one job, as fio's with `numjobs=1`: `depth` tasks, each keeping one op in
//! flight (fio's `iodepth`). Sequential ops take the job's next block in turn, so the
//! blocks in flight are adjacent, as fio's are; random ones a block anywhere in the region.
//! Offsets wrap around inside the region, so the file never grows.

use std::cell::Cell;
use std::fmt;
use std::io;
use std::ops::DerefMut;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::rc::Rc;
use std::str::FromStr;
use std::time::Instant;

use ring_rt::buf::{FixedBuf, IoBufMut};
use ring_rt::fs::{AlignedBuf, File, OpenOptions, DEFAULT_ALIGN};

use crate::crit::{self, Rng, Stop};

/// What the job does, by fio's `--rw` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rw {
    /// Reads at random blocks.
    RandRead,
    /// Writes at random blocks.
    RandWrite,
    /// Reads of the next block.
    Read,
    /// Writes of the next block.
    Write,
}

impl Rw {
    /// Every kind, in the order the usage names them.
    pub const ALL: [Rw; 4] = [Rw::RandRead, Rw::RandWrite, Rw::Read, Rw::Write];

    /// fio's name: `randread`, `randwrite`, `read`, `write`.
    pub fn name(self) -> &'static str {
        match self {
            Rw::RandRead => "randread",
            Rw::RandWrite => "randwrite",
            Rw::Read => "read",
            Rw::Write => "write",
        }
    }

    /// Writes rather than reads.
    pub fn is_write(self) -> bool {
        matches!(self, Rw::RandWrite | Rw::Write)
    }

    /// Random offsets rather than sequential ones.
    pub fn is_random(self) -> bool {
        matches!(self, Rw::RandRead | Rw::RandWrite)
    }
}

impl fmt::Display for Rw {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Rw {
    type Err = io::Error;

    fn from_str(s: &str) -> io::Result<Rw> {
        Rw::ALL
            .into_iter()
            .find(|rw| rw.name() == s)
            .ok_or_else(|| {
                invalid(format!(
                    "{s:?} is no workload: expected randread, randwrite, read or write"
                ))
            })
    }
}

/// One run's shape (fio's options of the same names).
#[derive(Clone, Copy, Debug)]
pub struct Job {
    /// Reads or writes, random or sequential (`rw`).
    pub rw: Rw,
    /// Bytes per op (`bs`); `O_DIRECT` wants a multiple of the device's logical block.
    pub bs: usize,
    /// Ops in flight (`iodepth`): one task each.
    pub depth: usize,
    /// An `fdatasync` after every this many writes of the job (`fdatasync`); 0 = never.
    pub fsync_every: u64,
    /// Bytes of the file the job uses, from offset 0 (`size`); a whole number of blocks.
    pub region_bytes: u64,
    /// Buffers from the worker's registered pool (`ring_rt::buf::FixedBuf`, fio's
    /// `fixedbufs`): the runtime must have `Builder::fixed_buffers` of at least `depth`
    /// buffers of `bs` bytes, and `bs` must be whole pages.
    pub fixed: bool,
}

impl Job {
    /// Blocks of `bs` bytes in the region.
    pub fn blocks(&self) -> u64 {
        self.region_bytes / self.bs.max(1) as u64
    }
}

/// What a run did: data ops (reads or writes), and the `fdatasync`s among them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Done {
    /// Reads or writes done (syncs not counted, as fio counts them apart).
    pub ops: u64,
    /// `fdatasync`s done, each linked after a write.
    pub syncs: u64,
}

impl Done {
    fn add(self, other: Done) -> Done {
        Done {
            ops: self.ops + other.ops,
            syncs: self.syncs + other.syncs,
        }
    }
}

/// The job's state its tasks share (one worker: plain cells).
struct Shared {
    job: Job,
    /// The next block of a sequential job.
    cursor: Cell<u64>,
    /// Writes started so far, which decides which one carries the `fdatasync`.
    writes: Cell<u64>,
}

impl Shared {
    fn new(job: Job) -> Shared {
        Shared {
            job,
            cursor: Cell::new(0),
            writes: Cell::new(0),
        }
    }

    /// The byte offset of the next op: the job's next block (wrapping at the region's
    /// end), or a random one.
    fn next_pos(&self, rng: &mut Rng) -> u64 {
        let blocks = self.job.blocks();
        let block = if self.job.rw.is_random() {
            rng.below(blocks)
        } else {
            let block = self.cursor.get();
            self.cursor.set((block + 1) % blocks);
            block
        };
        block * self.job.bs as u64
    }

    /// Counts a write about to start; true when it is the N-th since the last sync, so
    /// an `fdatasync` follows it.
    fn is_sync_due(&self) -> bool {
        let n = self.writes.get() + 1;
        self.writes.set(n);
        self.job.fsync_every != 0 && n.is_multiple_of(self.job.fsync_every)
    }
}

/// Writes back and drops `path`'s pages from the page cache, as fio does at the start of
/// every job (`invalidate=1`), so a run starts cold whatever ran before it. It matters most
/// to `O_DIRECT` writes: one over a cached page must invalidate it, which may block, so
/// io_uring hands it to an io-wq worker instead of issuing it inline.
pub fn drop_cached_pages(path: &Path) -> io::Result<()> {
    let file = std::fs::File::open(path)?;
    // Dirty pages are not dropped, only queued for writeback: write them back first.
    file.sync_data()?;
    // SAFETY: posix_fadvise takes only integers, here an fd this function owns.
    let err = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    match err {
        0 => Ok(()),
        err => Err(io::Error::from_raw_os_error(err)),
    }
}

/// Opens `path` for `rw` (read-only, or read-write without creating or truncating), with
/// `O_DIRECT` when `direct`. A filesystem that refuses `O_DIRECT` is an error saying so:
/// a buffered run in its place would measure something else than asked.
pub async fn open(path: &Path, rw: Rw, direct: bool) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true).write(rw.is_write()).direct(direct);
    options.open(path).await.map_err(|e| {
        if direct && e.raw_os_error() == Some(libc::EINVAL) {
            invalid(format!(
                "{}: the filesystem refuses O_DIRECT (run with --direct 0)",
                path.display()
            ))
        } else {
            e
        }
    })
}

/// Runs `job` on `file` until `stop`: `job.depth` tasks, each with one op in flight. With
/// `Stop::Count(n)` the `n` ops are shared out among the tasks. Runs on the current
/// runtime.
pub async fn run(file: Rc<File>, job: Job, stop: Stop) -> io::Result<Done> {
    if job.bs == 0 || job.blocks() == 0 {
        return Err(invalid(format!(
            "a region of {} bytes holds no block of {} bytes",
            job.region_bytes, job.bs
        )));
    }
    let depth = job.depth.max(1);
    let shared = Rc::new(Shared::new(job));
    let mut tasks = Vec::with_capacity(depth);
    for slot in 0..depth {
        let slot_stop = match stop {
            Stop::Count(n) => Stop::Count(crit::share(n, depth, slot)),
            at => at,
        };
        let seed = 0x9e37_79b9_7f4a_7c15 ^ slot as u64;
        let task = run_slot(file.clone(), shared.clone(), seed, slot_stop);
        tasks.push(ring_rt::spawn(task));
    }
    let mut done = Done::default();
    for task in tasks {
        let slot = task
            .await
            .map_err(|e| io::Error::other(format!("fileio task: {e}")))??;
        done = done.add(slot);
    }
    Ok(done)
}

/// One task of [`run`]: an op at a time, with one reused aligned (or registered) buffer.
async fn run_slot(file: Rc<File>, shared: Rc<Shared>, seed: u64, stop: Stop) -> io::Result<Done> {
    let mut rng = Rng::new(seed);
    let job = shared.job;
    if job.fixed {
        let buf = fixed_block_buf(job.bs, job.rw.is_write(), &mut rng)?;
        return run_slot_with(file, shared, rng, stop, buf).await;
    }
    let buf = block_buf(job.bs, job.rw.is_write(), &mut rng)?;
    run_slot_with(file, shared, rng, stop, buf).await
}

async fn run_slot_with<B: BlockBuf>(
    file: Rc<File>,
    shared: Rc<Shared>,
    mut rng: Rng,
    stop: Stop,
    mut buf: B,
) -> io::Result<Done> {
    let job = shared.job;
    let mut done = Done::default();
    loop {
        match stop {
            Stop::Count(n) if done.ops >= n => return Ok(done),
            Stop::At(at) if Instant::now() >= at => return Ok(done),
            _ => {}
        }
        let pos = shared.next_pos(&mut rng);
        if job.rw.is_write() {
            let sync = shared.is_sync_due();
            stamp(&mut buf, done.ops, pos);
            buf = write_block(&file, buf, pos, sync).await?;
            done.syncs += u64::from(sync);
        } else {
            buf = read_block(&file, buf, pos).await?;
        }
        done.ops += 1;
    }
}

/// A buffer of exactly `bs` bytes, aligned for `O_DIRECT` (to the largest power of two
/// dividing `bs`, at most a page); for writes full of random bytes, as fio's buffers are.
pub fn block_buf(bs: usize, is_write: bool, rng: &mut Rng) -> io::Result<AlignedBuf> {
    let align = (1usize << bs.trailing_zeros()).min(DEFAULT_ALIGN);
    let mut buf = AlignedBuf::with_alignment(bs, align)?;
    if is_write {
        for word in buf.as_capacity_mut().chunks_mut(8) {
            let bytes = rng.next_u64().to_le_bytes();
            word.copy_from_slice(&bytes[..word.len()]);
        }
        buf.set_len_checked(bs)?;
    }
    Ok(buf)
}

/// What a job's task reads into and writes from: an [`AlignedBuf`] or a registered
/// [`FixedBuf`].
pub trait BlockBuf: IoBufMut + DerefMut<Target = [u8]> {}

impl BlockBuf for AlignedBuf {}
impl BlockBuf for FixedBuf {}

/// A registered buffer of `bs` bytes (whole pages, so the chunk is exactly one block), for
/// writes full of random bytes.
pub fn fixed_block_buf(bs: usize, is_write: bool, rng: &mut Rng) -> io::Result<FixedBuf> {
    let mut buf = FixedBuf::take()?;
    if buf.capacity() != bs {
        return Err(invalid(format!(
            "registered buffers of {} bytes for blocks of {bs}: fixed buffers take whole pages",
            buf.capacity()
        )));
    }
    if is_write {
        let mut block = vec![0u8; bs];
        for word in block.chunks_mut(8) {
            let bytes = rng.next_u64().to_le_bytes();
            word.copy_from_slice(&bytes[..word.len()]);
        }
        buf.extend_from_slice(&block);
    }
    Ok(buf)
}

/// Makes each write's block differ from the last: its first 16 bytes (or fewer) carry the
/// task's write count and the offset.
fn stamp(buf: &mut [u8], count: u64, pos: u64) {
    let mut tag = [0u8; 16];
    tag[..8].copy_from_slice(&count.to_le_bytes());
    tag[8..].copy_from_slice(&pos.to_le_bytes());
    let n = buf.len().min(tag.len());
    buf[..n].copy_from_slice(&tag[..n]);
}

/// One write of the whole buffer at `pos`; with `sync`, linked to an `fdatasync` that runs
/// only once the write is done (`IOSQE_IO_LINK` on io_uring, one after the other on epoll).
async fn write_block<B: BlockBuf>(file: &File, buf: B, pos: u64, sync: bool) -> io::Result<B> {
    let len = buf.bytes_init();
    if !sync {
        let (res, buf) = file.write_at(buf, pos).await;
        check_full(res?, len, "write", pos)?;
        return Ok(buf);
    }
    let ((res, buf), synced) = file.write_at(buf, pos).link(file.sync_data()).await;
    // A failed or short write cancels its sync: report the write, not `ECANCELED`.
    check_full(res?, len, "write", pos)?;
    synced?;
    Ok(buf)
}

/// One read of the buffer's capacity at `pos`.
async fn read_block<B: BlockBuf>(file: &File, buf: B, pos: u64) -> io::Result<B> {
    let len = buf.bytes_total();
    let (res, buf) = file.read_at(buf, pos).await;
    check_full(res?, len, "read", pos)?;
    Ok(buf)
}

/// A short transfer inside the region means the file is smaller than the job thinks.
fn check_full(n: usize, len: usize, what: &str, pos: u64) -> io::Result<()> {
    if n == len {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("short {what} at {pos}: {n} of {len} bytes (is the file smaller than --size-mib?)"),
    ))
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring_rt::Runtime;

    fn job(rw: Rw, blocks: u64, fsync_every: u64) -> Job {
        Job {
            rw,
            bs: 4096,
            depth: 4,
            fsync_every,
            region_bytes: blocks * 4096,
            fixed: false,
        }
    }

    #[test]
    fn sequential_offsets_advance_and_wrap_inside_the_region() {
        let shared = Shared::new(job(Rw::Write, 3, 0));
        let mut rng = Rng::new(1);
        let pos: Vec<u64> = (0..7).map(|_| shared.next_pos(&mut rng)).collect();
        assert_eq!(pos, [0, 4096, 8192, 0, 4096, 8192, 0]);
    }

    #[test]
    fn random_offsets_stay_block_aligned_inside_the_region() {
        let shared = Shared::new(job(Rw::RandWrite, 100, 0));
        let mut rng = Rng::new(7);
        assert!((0..1000)
            .map(|_| shared.next_pos(&mut rng))
            .all(|pos| pos % 4096 == 0 && pos < 100 * 4096));
    }

    #[test]
    fn every_nth_write_carries_the_sync_and_zero_means_never() {
        let shared = Shared::new(job(Rw::Write, 8, 3));
        let due: Vec<bool> = (0..7).map(|_| shared.is_sync_due()).collect();
        assert_eq!(due, [false, false, true, false, false, true, false]);
        let never = Shared::new(job(Rw::Write, 8, 0));
        assert!((0..10).all(|_| !never.is_sync_due()));
    }

    #[test]
    fn write_buffers_are_whole_blocks_of_data_not_zeros() {
        let buf = block_buf(4096, true, &mut Rng::new(3)).unwrap();
        assert_eq!((buf.len(), buf.capacity()), (4096, 4096));
        assert_eq!(buf.as_ptr() as usize % 4096, 0);
        assert!(buf.iter().filter(|&&b| b == 0).count() < 64);
        let small = block_buf(512, true, &mut Rng::new(3)).unwrap();
        assert_eq!((small.len(), small.capacity()), (512, 512));
    }

    #[test]
    fn workload_names_round_trip_and_unknown_is_an_error() {
        for rw in Rw::ALL {
            assert_eq!(rw.name().parse::<Rw>().unwrap(), rw);
        }
        let err = "randrw".parse::<Rw>().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn writes_with_syncs_keep_the_file_size_on_both_backends() {
        let path = std::env::temp_dir().join(format!("ring-bench-fileio-{}", std::process::id()));
        crit::ensure_file(&path, 16 * 4096).unwrap();
        drop_cached_pages(&path).unwrap();
        for (kind, label) in crit::BACKENDS {
            for rw in [Rw::RandWrite, Rw::Write] {
                let rt = crit::runtime(kind).unwrap();
                let done = rt
                    .block_on(async {
                        let file = Rc::new(open(&path, rw, false).await?);
                        run(file, job(rw, 16, 5), Stop::Count(40)).await
                    })
                    .unwrap_or_else(|e| panic!("{label} {rw}: {e}"));
                assert_eq!(done, Done { ops: 40, syncs: 8 }, "{label} {rw}");
                assert_eq!(std::fs::metadata(&path).unwrap().len(), 16 * 4096);
            }
        }
        // The last (sequential) run wrote every block: each carries its own offset.
        let data = std::fs::read(&path).unwrap();
        for (block, chunk) in data.chunks(4096).enumerate() {
            let pos = u64::from_le_bytes(chunk[8..16].try_into().unwrap());
            assert_eq!(pos, block as u64 * 4096);
        }
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn jobs_on_registered_buffers_write_and_read_their_blocks_on_both_backends() {
        let path = std::env::temp_dir().join(format!("ring-bench-fixed-{}", std::process::id()));
        crit::ensure_file(&path, 16 * 4096).unwrap();
        for (kind, label) in crit::BACKENDS {
            let rt = Runtime::builder()
                .backend(kind)
                .threads(1)
                .fixed_buffers(4, 4096)
                .build()
                .unwrap();
            for rw in [Rw::Write, Rw::RandRead] {
                let fixed = Job {
                    fixed: true,
                    ..job(rw, 16, 0)
                };
                let done = rt
                    .block_on(async {
                        let file = Rc::new(open(&path, rw, false).await?);
                        run(file, fixed, Stop::Count(32)).await
                    })
                    .unwrap_or_else(|e| panic!("{label} {rw}: {e}"));
                assert_eq!(done, Done { ops: 32, syncs: 0 }, "{label} {rw}");
            }
            // The sequential writes went through registered buffers: each block carries
            // its own offset.
            let data = std::fs::read(&path).unwrap();
            for (block, chunk) in data.chunks(4096).enumerate() {
                let pos = u64::from_le_bytes(chunk[8..16].try_into().unwrap());
                assert_eq!(pos, block as u64 * 4096, "{label}");
            }
            std::fs::write(&path, vec![0u8; 16 * 4096]).unwrap();
        }
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_region_smaller_than_a_block_is_an_error() {
        let rt = crit::runtime(ring_rt::BackendKind::Epoll).unwrap();
        let err = rt
            .block_on(async {
                let file = Rc::new(File::open("/dev/null").await?);
                run(file, job(Rw::Read, 0, 0), Stop::Count(1)).await
            })
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }
}
