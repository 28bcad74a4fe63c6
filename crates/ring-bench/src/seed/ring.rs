//! The seed workload on ring-rt: `depth` tasks, each running one linked
//! `write_at -> sync_data -> read_at` chain at a time, so `depth` chains are in flight.
//!
//! On io_uring each chain is three linked SQEs in one submission (links: 5.3+); on epoll
//! ring-rt runs the three ops in order on its blocking pool.

use std::cell::Cell;
use std::io;
use std::path::Path;
use std::rc::Rc;

use ring_rt::fs::File;
use ring_rt::BackendKind;

use super::{check_page, fill_page, Config, PAGE_LEN};

/// Runs `config.pages` pages on a fresh single-worker runtime of `backend`; returns the
/// pages verified.
pub(super) fn run(
    backend: BackendKind,
    config: &Config,
    depth: usize,
    path: &Path,
) -> io::Result<u64> {
    let pages = config.pages;
    // Three SQEs per chain; a ring smaller than that would only make chains wait for room.
    let entries = (depth * 3).next_power_of_two().max(256);
    let mut builder = ring_rt::Runtime::builder()
        .backend(backend)
        .entries(u32::try_from(entries).unwrap_or(u32::MAX))
        .batch_wait(config.batch_wait);
    if let Some(threads) = config.blocking_threads {
        builder = builder.blocking_threads(threads);
    }
    let rt = builder.build()?;
    rt.block_on(async {
        let file = ring_rt::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .await?;
        let file = Rc::new(file);
        let next_page = Rc::new(Cell::new(0u64));
        let tasks: Vec<_> = (0..depth)
            .map(|_| ring_rt::spawn(pages_in_turn(file.clone(), next_page.clone(), pages)))
            .collect();
        let mut verified = 0;
        for task in tasks {
            verified += task.await??;
        }
        Ok(verified)
    })
}

/// Takes the next unclaimed page until none are left, one chain at a time; the two page
/// buffers go into each chain and come back with its result.
async fn pages_in_turn(file: Rc<File>, next_page: Rc<Cell<u64>>, pages: u64) -> io::Result<u64> {
    let mut data = vec![0u8; PAGE_LEN];
    let mut back = Vec::with_capacity(PAGE_LEN);
    let mut verified = 0;
    loop {
        let page = next_page.get();
        if page >= pages {
            return Ok(verified);
        }
        next_page.set(page + 1);
        fill_page(page, &mut data);
        back.clear();
        (data, back) = write_sync_read(&file, page, data, back).await?;
        check_page(page, &back)?;
        verified += 1;
    }
}

/// One linked chain: the read runs only if the write and the sync succeeded.
async fn write_sync_read(
    file: &File,
    page: u64,
    data: Vec<u8>,
    back: Vec<u8>,
) -> io::Result<(Vec<u8>, Vec<u8>)> {
    let pos = page * PAGE_LEN as u64;
    let ((written, synced), read) = file
        .write_at(data, pos)
        .link(file.sync_data())
        .link(file.read_at(back, pos))
        .await;
    let (n_written, data) = (written.0?, written.1);
    synced?;
    let (n_read, back) = (read.0?, read.1);
    if n_written != PAGE_LEN || n_read != PAGE_LEN {
        // A regular file never transfers less than a page here; if it did, say so.
        return Err(io::Error::other(format!(
            "page {page}: short transfer (wrote {n_written}, read {n_read} of {PAGE_LEN})"
        )));
    }
    Ok((data, back))
}
