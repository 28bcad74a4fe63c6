//! Copies a file with many reads and writes in flight: 32 tasks each take the next 128 KiB
//! chunk, read it at its offset and write it at the same offset in the destination.
//! Prints bytes copied and MB/s; checking the copy is the tests' job.
//!
//! cargo run --release --example copy -- SRC DST    (RING_RT_BACKEND=epoll to compare)

use std::cell::Cell;
use std::io;
use std::process::ExitCode;
use std::rc::Rc;
use std::time::Instant;

use ring_rt::buf::IoBuf;
use ring_rt::fs::{File, OpenOptions};
use ring_rt::Runtime;

const TASKS: usize = 32;
const CHUNK: usize = 128 << 10;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [src, dst] = args.as_slice() else {
        eprintln!("usage: copy SRC DST");
        return ExitCode::from(2);
    };
    let rt = match Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("copy: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let started = Instant::now();
    match rt.block_on(copy(src, dst)) {
        Ok(bytes) => {
            let secs = started.elapsed().as_secs_f64();
            let mb_s = bytes as f64 / 1e6 / secs.max(1e-9);
            println!(
                "{bytes} bytes in {secs:.3} s: {mb_s:.1} MB/s ({})",
                rt.backend()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("copy {src} -> {dst}: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn copy(src: &str, dst: &str) -> io::Result<u64> {
    let from = Rc::new(File::open(src).await?);
    let len = from.metadata().await?.len();
    let mut options = OpenOptions::new();
    options.write(true).create(true).truncate(true);
    let to = Rc::new(options.open(dst).await?);
    let next = Rc::new(Cell::new(0u64));
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| ring_rt::spawn(copy_chunks(from.clone(), to.clone(), next.clone(), len)))
        .collect();
    let mut copied = 0;
    for task in tasks {
        copied += task.await??;
    }
    Ok(copied)
}

/// Copies chunks until none is left; `next` is the offset of the next unclaimed chunk.
async fn copy_chunks(
    from: Rc<File>,
    to: Rc<File>,
    next: Rc<Cell<u64>>,
    len: u64,
) -> io::Result<u64> {
    let mut buf = Vec::with_capacity(CHUNK);
    let mut copied = 0;
    loop {
        let pos = next.get();
        if pos >= len {
            return Ok(copied);
        }
        next.set(pos + CHUNK as u64);
        let want = (len - pos).min(CHUNK as u64) as usize;
        buf.clear();
        let (res, slice) = from.read_exact_at(buf.slice(..want), pos).await;
        buf = slice.into_inner();
        res?;
        let (res, back) = to.write_all_at(buf, pos).await;
        buf = back;
        res?;
        copied += want as u64;
    }
}
