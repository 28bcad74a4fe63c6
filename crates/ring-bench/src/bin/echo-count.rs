//! Instructions and syscalls per echo request, counts that the machine's load cannot move
//! (issue 19): each echo server under callgrind and under `strace -f -c`, twice, with two
//! request counts; see `ring_bench::count`. Needs valgrind and strace, and the binaries:
//!
//! cargo build --release -p ring-rt --example echo -p ring-bench --bins
//! target/release/echo-count [--servers ring-uring,ring-epoll,tokio-ct,raw-uring]
//!     [--requests 20000,60000] [--conns 10] [--len 64] [--tools callgrind,strace] [--top 5]
//!
//! Writes target/echo-count/count.md (also printed), with the profiles, the annotated
//! profiles and the strace summaries beside it.

use std::path::PathBuf;
use std::process::ExitCode;

use ring_bench::count::{self, Bins, Options};

fn main() -> ExitCode {
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("echo-count"));
    let profile_dir = exe.parent().map(PathBuf::from).unwrap_or_default();
    let out_dir = profile_dir
        .parent()
        .unwrap_or(&profile_dir)
        .join("echo-count");
    let opts = match Options::from_args(std::env::args().skip(1), out_dir) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("echo-count: {e}\n{}", count::USAGE);
            return ExitCode::from(2);
        }
    };
    let bins = match Bins::in_dir(&profile_dir) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("echo-count: {e}");
            return ExitCode::FAILURE;
        }
    };
    let command: Vec<String> = std::env::args().collect();
    match count::run(&opts, &bins, &command.join(" ")) {
        Ok(md) => {
            print!("{md}");
            eprintln!("echo-count: wrote {}/count.md", opts.out_dir.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("echo-count: {e}");
            ExitCode::FAILURE
        }
    }
}
