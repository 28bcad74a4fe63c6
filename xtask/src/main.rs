//! `cargo xtask <command>`: project tasks written in Rust, using only public APIs.
//!
//! A small dispatcher: each command lives in its own module with a `run(args)` entry.

use std::process::ExitCode;

mod asan;
mod layers;
mod matrix;
mod probe;

const USAGE: &str = "usage: cargo xtask <command>

commands:
  probe           print what io_uring offers on this kernel (and under RING_FEATURES, if set)
  layers          check that ring-rt's modules import only their layer or below
                  (docs/ARCHITECTURE.md) and that ring-core names nothing of ring-rt
  kernel-matrix   run the tests on the host, feature profiles, seccomp and qemu kernels
                  (`cargo xtask kernel-matrix --help` for options)
  asan            run ring-core's and ring-rt's tests under AddressSanitizer (nightly),
                  as many test binaries at once as there are cores
  matrix-backend  print the backend a default ring-rt runtime picks here (one line)";

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let command = args.next();
    let rest: Vec<String> = args.collect();
    match command.as_deref() {
        Some("probe") => probe::run(&rest),
        Some("layers") => layers::run(&rest),
        Some("kernel-matrix") => matrix::run(&rest),
        Some("asan") => asan::run(&rest),
        Some("matrix-backend") => matrix::backend::run(&rest),
        Some("help" | "-h" | "--help") => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Some(other) => {
            eprintln!("unknown command {other:?}\n\n{USAGE}");
            ExitCode::from(2)
        }
        None => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}
