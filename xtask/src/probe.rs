//! `cargo xtask probe`: a report of what io_uring offers here, and what ring-rt would use.
//!
//! Prints the kernel release, the probe table, the flags a default ring gets, and, when
//! `RING_FEATURES` is set, the same under that mask. io_uring being unavailable is a finding,
//! not a failure: it prints the cause and fix and exits 0. Only a bad `RING_FEATURES` (or a
//! stray argument) exits nonzero.

use std::fmt::Write as _;
use std::io::{self, Write as _};
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
            let text =
                format!("io_uring is unavailable: {err}\nring-rt uses its epoll backend here.\n");
            return emit(&text);
        }
    };
    let probe_us = start.elapsed().as_micros();
    let mut text = format!(
        "kernel {} (probed in {probe_us} us)\n\n",
        features.kernel_release()
    );
    report(&mut text, features);
    if let Some(mask) = mask {
        let _ = writeln!(
            text,
            "\n--- as seen through {ENV_VAR}={} ---\n",
            mask.label()
        );
        report(&mut text, &features.masked(&mask));
    }
    emit(&text)
}

/// The table, then the flags `build_ring` picks for a default ring from these features.
fn report(text: &mut String, features: &Features) {
    let _ = write!(text, "{}", features.table());
    text.push_str("\n\"uses\" marks the features ring-rt relies on when present.\n");
    let _ = match build_ring(features, &RingConfig::default()) {
        Ok(ring) => {
            let cq_entries = ring.ring.params().cq_entries();
            writeln!(
                text,
                "default ring: setup flags {}, CQ {cq_entries} entries",
                ring.flags
            )
        }
        Err(err) => writeln!(text, "default ring: {err}"),
    };
}

/// Writes the report; a closed pipe (`| head`) is not an error for a report.
fn emit(text: &str) -> ExitCode {
    match io::stdout().lock().write_all(text.as_bytes()) {
        Err(err) if err.kind() != io::ErrorKind::BrokenPipe => {
            eprintln!("cannot write the report: {err}");
            ExitCode::FAILURE
        }
        _ => ExitCode::SUCCESS,
    }
}
