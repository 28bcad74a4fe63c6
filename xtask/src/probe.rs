//! `cargo xtask probe`: a report of what io_uring offers here, and what ring-rt would use.
//!
//! Prints the kernel release, the probe table, the flags a default ring gets, and, when
//! `RING_FEATURES` is set, the same under that mask. io_uring being unavailable is a finding,
//! not a failure: it prints the cause and fix and exits 0. Only a bad `RING_FEATURES` (or a
//! stray argument) exits nonzero.

use std::process::ExitCode;
use std::time::Instant;

use ring_core::probe::{FeatureMask, Features, ENV_VAR};
use ring_core::setup::{build_ring, RingConfig};

pub fn run(args: &[String]) -> ExitCode {
    if let Some(arg) = args.first() {
        eprintln!("cargo xtask probe takes no arguments (got {arg:?}); set {ENV_VAR} to mask");
        return ExitCode::from(2);
    }
    let mask = match FeatureMask::from_env() {
        Ok(mask) => mask,
        Err(err) => {
            eprintln!("{err}");
            return ExitCode::from(2);
        }
    };
    let start = Instant::now();
    let features = match Features::probe() {
        Ok(features) => features,
        Err(err) => {
            println!("io_uring is unavailable: {err}");
            println!("ring-rt would use its epoll backend here.");
            return ExitCode::SUCCESS;
        }
    };
    let probe_us = start.elapsed().as_micros();
    println!(
        "kernel {} (probed in {probe_us} us)\n",
        features.kernel_release()
    );
    report(features);
    if let Some(mask) = mask {
        println!("\n--- as seen through {ENV_VAR}={} ---\n", mask.label());
        report(&features.masked(&mask));
    }
    ExitCode::SUCCESS
}

/// The table, then the flags `build_ring` picks for a default ring from these features.
fn report(features: &Features) {
    print!("{}", features.table());
    println!("\n\"uses\" marks the features ring-rt relies on when present.");
    match build_ring(features, &RingConfig::default()) {
        Ok(ring) => {
            let cq_entries = ring.ring.params().cq_entries();
            println!(
                "default ring: setup flags {}, CQ {cq_entries} entries",
                ring.flags
            );
        }
        Err(err) => println!("default ring: {err}"),
    }
}
