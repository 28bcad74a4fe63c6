//! Closed-loop echo load generator (the rust_echo_bench model): N connections, each sends a
//! message and waits for the whole echo before the next, verifying every byte.
//!
//! echo-load --addr 127.0.0.1:7000 --conns 50 --len 64 [--len-max 4096] --duration 5
//!           [--requests N] [--threads T] [--json]

use std::process::ExitCode;

use ring_bench::load::{self, LoadConfig};

fn main() -> ExitCode {
    let config = match LoadConfig::from_args(std::env::args().skip(1)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("echo-load: {e}\n{}", LoadConfig::USAGE);
            return ExitCode::from(2);
        }
    };
    let report = match load::run(&config) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("echo-load: {e}");
            return ExitCode::FAILURE;
        }
    };
    if config.json {
        println!("{}", report.to_json());
    } else {
        println!("{report}");
    }
    if let Some(warning) = report.saturation_warning() {
        eprintln!("echo-load: warning: {warning}");
    }
    if report.errors > 0 || report.mismatches > 0 {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
