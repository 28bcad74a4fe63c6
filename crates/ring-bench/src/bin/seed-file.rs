//! The seed file workload (write a page, fdatasync, read it back and verify, for every
//! page of a file) on std, ring-rt and tokio::fs; see `ring_bench::seed::cli`.
//!
//! seed-file [--pages 65536] [--inflight 64] [--variants std,ring-chain,...] [--runs 1]
//!           [--strace] [--dir target/bench-files] [--json FILE]

fn main() -> std::process::ExitCode {
    ring_bench::seed::cli::main(std::env::args().skip(1))
}
