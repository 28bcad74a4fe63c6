//! `cargo bench -p ring-bench --bench seed_file [-- --strace --runs 3 ...]`: the seed file
//! workload (65,536 x write 4 KiB page -> fdatasync -> read back, on std, ring-rt linked
//! chains and tokio::fs), the same program as the `seed-file` binary; see
//! `ring_bench::seed::cli` for the options.

fn main() -> std::process::ExitCode {
    // cargo passes `--bench` to every bench target; criterion's filters do not apply here.
    let args = std::env::args().skip(1).filter(|a| a != "--bench");
    ring_bench::seed::cli::main(args)
}
