//! `deny-io-uring EPERM|ENOSYS -- CMD [ARGS...]`: runs CMD with io_uring's syscalls failing
//! as under Docker's (EPERM) or Podman's (ENOSYS) default seccomp profile.

use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let errno = match args.first().map(String::as_str) {
        Some("EPERM") => libc::EPERM,
        Some("ENOSYS") => libc::ENOSYS,
        _ => return usage(),
    };
    if args.get(1).map(String::as_str) != Some("--") || args.len() < 3 {
        return usage();
    }
    let mut cmd = Command::new(&args[2]);
    cmd.args(&args[3..]);
    ring_testkit::seccomp::block_io_uring(&mut cmd, errno);
    let err = cmd.exec();
    eprintln!("deny-io-uring: exec {}: {err}", args[2]);
    ExitCode::from(127)
}

fn usage() -> ExitCode {
    eprintln!("usage: deny-io-uring EPERM|ENOSYS -- CMD [ARGS...]");
    ExitCode::from(2)
}
