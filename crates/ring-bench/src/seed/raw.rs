//! The seed workload on the raw io-uring crate, with no runtime: the limit ring-rt's
//! figure is held against. One ring set up as ring-rt sets up its own (the same setup flags
//! where the kernel has them), `depth` linked `WRITE -> FSYNC(DATASYNC) -> READ` chains in
//! flight, one `io_uring_enter` per loop turn that submits every new chain and waits for at
//! least one completion.

use std::fs::OpenOptions;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

use io_uring::{opcode, squeue, types, IoUring};

use super::{check_page, fill_page, Config, PAGE_LEN};

/// The three ops of a chain, in `user_data`'s low two bits.
const OP_WRITE: u64 = 0;
const OP_FSYNC: u64 = 1;
const OP_READ: u64 = 2;

/// One chain slot: its page and its two buffers, which the kernel uses while the chain is
/// in flight (they never move: the slots' Vec is never resized).
struct Slot {
    page: u64,
    data: Vec<u8>,
    back: Vec<u8>,
    /// CQEs of the current chain still to come (3 while it runs, 0 when free).
    pending: u8,
}

/// A ring as ring-rt sets one up on this kernel: `SUBMIT_ALL`, `COOP_TASKRUN` with
/// `TASKRUN_FLAG`, `SINGLE_ISSUER` with `DEFER_TASKRUN`, each only where it is accepted.
fn ring(entries: u32) -> io::Result<IoUring> {
    let full = IoUring::builder()
        .setup_submit_all()
        .setup_coop_taskrun()
        .setup_taskrun_flag()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(entries);
    full.or_else(|_| IoUring::new(entries))
}

/// Runs `config.pages` pages with `depth` chains in flight; returns the pages verified.
pub(super) fn run(config: &Config, depth: usize, path: &Path) -> io::Result<u64> {
    let file = OpenOptions::new().read(true).write(true).open(path)?;
    let fd = types::Fd(file.as_raw_fd());
    let depth = depth.clamp(1, 4096);
    let entries = (depth * 3).next_power_of_two().max(8) as u32;
    let mut ring = ring(entries)?;
    let mut slots: Vec<Slot> = (0..depth)
        .map(|_| Slot {
            page: 0,
            data: vec![0u8; PAGE_LEN],
            back: vec![0u8; PAGE_LEN],
            pending: 0,
        })
        .collect();
    let result = run_chains(&mut ring, fd, &mut slots, config.pages);
    // On an error, chains may still be in the kernel: their buffers must outlive them, so
    // wait for every outstanding CQE before `slots` is freed.
    if result.is_err() && !drain(&mut ring, &mut slots) {
        // The ring could not wait for them: leak the buffers rather than free them under
        // the kernel.
        std::mem::forget(slots);
    }
    result
}

/// Waits for the CQEs of every chain still in flight (their results are beside the point
/// here); false if the ring cannot wait any more.
fn drain(ring: &mut IoUring, slots: &mut [Slot]) -> bool {
    while slots.iter().any(|s| s.pending > 0) {
        if ring.submit_and_wait(1).is_err() {
            return false;
        }
        for cqe in ring.completion() {
            let slot = &mut slots[(cqe.user_data() >> 2) as usize];
            slot.pending = slot.pending.saturating_sub(1);
        }
    }
    true
}

fn run_chains(
    ring: &mut IoUring,
    fd: types::Fd,
    slots: &mut [Slot],
    pages: u64,
) -> io::Result<u64> {
    let (mut next_page, mut verified, mut running) = (0u64, 0u64, 0usize);
    loop {
        for (i, slot) in slots.iter_mut().enumerate() {
            if slot.pending == 0 && next_page < pages {
                start_chain(ring, fd, i, slot, next_page)?;
                next_page += 1;
                running += 1;
            }
        }
        if running == 0 {
            return Ok(verified);
        }
        ring.submit_and_wait(1)?;
        let mut cq = ring.completion();
        cq.sync();
        for cqe in &mut cq {
            let (index, op) = ((cqe.user_data() >> 2) as usize, cqe.user_data() & 3);
            let slot = &mut slots[index];
            slot.pending -= 1;
            let want = if op == OP_FSYNC { 0 } else { PAGE_LEN as i32 };
            if cqe.result() != want {
                return Err(io::Error::other(format!(
                    "page {}: op {op} gave {} (wanted {want})",
                    slot.page,
                    cqe.result()
                )));
            }
            if op == OP_READ {
                check_page(slot.page, &slot.back)?;
                verified += 1;
                running -= 1;
            }
        }
    }
}

/// Pushes page `page`'s chain for slot `index` (the SQ has room: it holds three SQEs per
/// slot and only free slots start chains).
fn start_chain(
    ring: &mut IoUring,
    fd: types::Fd,
    index: usize,
    slot: &mut Slot,
    page: u64,
) -> io::Result<()> {
    slot.page = page;
    slot.pending = 3;
    fill_page(page, &mut slot.data);
    let pos = page * PAGE_LEN as u64;
    let ud = |op: u64| ((index as u64) << 2) | op;
    let write = opcode::Write::new(fd, slot.data.as_ptr(), PAGE_LEN as u32)
        .offset(pos)
        .build()
        .flags(squeue::Flags::IO_LINK)
        .user_data(ud(OP_WRITE));
    let fsync = opcode::Fsync::new(fd)
        .flags(types::FsyncFlags::DATASYNC)
        .build()
        .flags(squeue::Flags::IO_LINK)
        .user_data(ud(OP_FSYNC));
    let read = opcode::Read::new(fd, slot.back.as_mut_ptr(), PAGE_LEN as u32)
        .offset(pos)
        .build()
        .user_data(ud(OP_READ));
    // SAFETY: the SQEs point into this slot's two buffers, which stay allocated and unmoved
    // (the slots' Vec is never resized) and are not touched until the chain's three CQEs
    // are in; the fd is `file`'s, open for the whole run.
    unsafe { ring.submission().push_multiple(&[write, fsync, read]) }
        .map_err(|_| io::Error::other("the SQ had no room for a chain"))
}
