//! `cargo bench -p ring-bench --bench echo [-- --quick]`: ring-rt's echo example (uring and
//! epoll backends) against tokio echo servers. See `ring_bench::echo_bench`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ring_bench::echo_bench::{self, Bins, Options};

fn main() -> ExitCode {
    let echo_load = PathBuf::from(env!("CARGO_BIN_EXE_echo-load"));
    let profile_dir = echo_load
        .parent()
        .expect("binary in a profile dir")
        .to_path_buf();
    let out_dir = profile_dir
        .parent()
        .unwrap_or(&profile_dir)
        .join("echo-bench");
    let mut opts = match Options::from_args(std::env::args().skip(1), out_dir) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("echo-bench: {e}\n{}", echo_bench::USAGE);
            return ExitCode::from(2);
        }
    };
    // cargo runs a bench in its package's directory (crates/ring-bench): a relative --out
    // is taken from the workspace root, where the command was typed.
    if opts.out_dir.is_relative() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let root = root.canonicalize().unwrap_or(root);
        opts.out_dir = root.join(&opts.out_dir);
    }
    let ring_echo = match ring_bench::server::build_echo_example(&profile_dir) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("echo-bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    let bins = Bins {
        echo_load,
        tokio_echo: PathBuf::from(env!("CARGO_BIN_EXE_tokio-echo")),
        ring_echo,
    };
    match echo_bench::run(&opts, &bins) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("echo-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
