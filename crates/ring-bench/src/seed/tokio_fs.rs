//! The seed workload on tokio::fs, the idiomatic way: `tokio::fs::File` with seek +
//! `write_all`, `sync_data`, seek + `read_exact`. Each of those runs on tokio's blocking
//! pool; the runtime itself is current-thread.
//!
//! Depth 1 is one page at a time on one handle; depth K is K tasks, each with its own
//! `File` (a tokio `File` runs one operation at a time, so sharing one would serialise them).

use std::io::{self, SeekFrom};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

use super::{check_page, fill_page, PAGE_LEN};

/// Runs `pages` pages with `depth` tasks; returns the pages verified.
pub(super) fn run(pages: u64, depth: usize, path: &Path) -> io::Result<u64> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let next_page = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::with_capacity(depth);
        for _ in 0..depth {
            let file = tokio::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(path)
                .await?;
            tasks.push(tokio::spawn(pages_in_turn(file, next_page.clone(), pages)));
        }
        let mut verified = 0;
        for task in tasks {
            verified += task.await.map_err(io::Error::other)??;
        }
        Ok(verified)
    })
}

/// Takes the next unclaimed page until none are left.
async fn pages_in_turn(
    mut file: tokio::fs::File,
    next_page: Arc<AtomicU64>,
    pages: u64,
) -> io::Result<u64> {
    let mut data = vec![0u8; PAGE_LEN];
    let mut back = vec![0u8; PAGE_LEN];
    let mut verified = 0;
    loop {
        let page = next_page.fetch_add(1, Ordering::Relaxed);
        if page >= pages {
            return Ok(verified);
        }
        let pos = page * PAGE_LEN as u64;
        fill_page(page, &mut data);
        file.seek(SeekFrom::Start(pos)).await?;
        file.write_all(&data).await?;
        file.sync_data().await?;
        file.seek(SeekFrom::Start(pos)).await?;
        file.read_exact(&mut back).await?;
        check_page(page, &back)?;
        verified += 1;
    }
}
