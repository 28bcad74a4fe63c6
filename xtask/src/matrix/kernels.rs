//! The kernels the VM rows boot, fetched or built once and cached under
//! `target/kernel-matrix/kernels/`: Debian's 6.1 and 6.12 cloud images (`apt-get download`
//! + `dpkg -x`, never installed), and 6.1 built from `linux-source-6.1` without io_uring.
//!
//! Delete a kernel's directory to fetch or build it again.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use super::rows::VmKernel;
use super::tools;

/// Options the no-io_uring kernel needs on top of `make tinyconfig`: a serial console, an
/// initramfs, ELF, the pseudo filesystems matrix-init mounts, what ring-rt's epoll backend
/// and std use (epoll, eventfd, signalfd, timerfd, futex), networking for socket tests, and
/// seccomp for the fallback tests.
pub const TINY_OPTIONS: &[&str] = &[
    "64BIT",
    "PRINTK",
    "TTY",
    "SERIAL_8250",
    "SERIAL_8250_CONSOLE",
    "BLK_DEV_INITRD",
    "BINFMT_ELF",
    "PROC_FS",
    "PROC_SYSCTL",
    "SYSCTL",
    "SYSFS",
    "DEVTMPFS",
    "SHMEM",
    "TMPFS",
    "EPOLL",
    "EVENTFD",
    "SIGNALFD",
    "TIMERFD",
    "FUTEX",
    "POSIX_TIMERS",
    "HIGH_RES_TIMERS",
    "FILE_LOCKING",
    "MULTIUSER",
    "NET",
    "INET",
    "IPV6",
    "UNIX",
    // ring-rt's fallback tests install seccomp filters (which need NET too).
    "SECCOMP",
    "SECCOMP_FILTER",
];

impl VmKernel {
    /// The cache directory name.
    pub fn label(self) -> &'static str {
        match self {
            VmKernel::Debian61 => "debian-6.1-cloud",
            VmKernel::Debian612 => "debian-6.12-cloud",
            VmKernel::Tiny61NoUring => "tiny-6.1-no-io_uring",
        }
    }

    /// The Debian meta package that depends on the current image.
    fn meta_package(self) -> Option<&'static str> {
        match self {
            VmKernel::Debian61 => Some("linux-image-cloud-amd64"),
            VmKernel::Debian612 => Some("linux-image-6.12-cloud-amd64"),
            VmKernel::Tiny61NoUring => None,
        }
    }
}

/// The kernel image for `kernel`, fetching or building it when not cached.
pub fn image(kernel: VmKernel, root: &Path, log_dir: &Path) -> io::Result<PathBuf> {
    let dir = root.join("kernels").join(kernel.label());
    let image = dir.join("vmlinuz");
    if image.exists() {
        return Ok(image);
    }
    std::fs::create_dir_all(&dir)?;
    let start = Instant::now();
    match kernel.meta_package() {
        Some(meta) => fetch_debian(meta, &dir, &image)?,
        None => build_tiny(root, &image, log_dir)?,
    }
    progress!(
        "{} ready in {:.0} s",
        kernel.label(),
        start.elapsed().as_secs_f64()
    );
    Ok(image)
}

/// `apt-cache depends <meta>` names the versioned image package; download and unpack it.
fn fetch_debian(meta: &str, dir: &Path, image: &Path) -> io::Result<()> {
    let package = match resolve(meta)? {
        Some(p) => p,
        None => {
            // Not in the package lists: refresh them once.
            tools::apt(&["update"], &[])?;
            resolve(meta)?.ok_or_else(|| {
                io::Error::other(format!(
                    "apt-cache knows no {meta}; on Debian 12 (bookworm, with \
                     bookworm-security) run `apt-get update`, or put a vmlinuz at {}",
                    image.display()
                ))
            })?
        }
    };
    progress!("apt-get download {package}");
    let download = dir.join("deb");
    let _ = std::fs::remove_dir_all(&download);
    std::fs::create_dir_all(&download)?;
    let log = dir.join("fetch.log");
    let mut get = Command::new("apt-get");
    get.current_dir(&download).args(["download", &package]);
    tools::run_logged(&mut get, &format!("apt-get download {package}"), &log)?;
    let deb = only_file(&download, ".deb")?;
    let unpacked = dir.join("unpacked");
    let mut unpack = Command::new("dpkg");
    unpack.arg("-x").arg(&deb).arg(&unpacked);
    tools::run_logged(&mut unpack, "dpkg -x", &log)?;
    let vmlinuz = only_file(&unpacked.join("boot"), "vmlinuz-")?;
    std::fs::copy(&vmlinuz, image)?;
    std::fs::write(dir.join("package"), format!("{package}\n"))?;
    let _ = std::fs::remove_dir_all(&unpacked);
    let _ = std::fs::remove_dir_all(&download);
    Ok(())
}

/// The versioned `linux-image-*` package `meta` depends on, if apt knows `meta`.
fn resolve(meta: &str) -> io::Result<Option<String>> {
    let out = Command::new("apt-cache").args(["depends", meta]).output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Depends: "))
        .find(|p| p.starts_with("linux-image-"))
        .map(String::from))
}

/// The one file in `dir` whose name contains `pattern`.
fn only_file(dir: &Path, pattern: &str) -> io::Result<PathBuf> {
    std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().contains(pattern))
        })
        .ok_or_else(|| io::Error::other(format!("no {pattern}* in {}", dir.display())))
}

/// Builds 6.1 from Debian's `linux-source-6.1` with tinyconfig and no io_uring.
fn build_tiny(root: &Path, image: &Path, log_dir: &Path) -> io::Result<()> {
    tools::ensure(tools::KERNEL_BUILD)?;
    let build = root.join("build");
    let tree = build.join("linux-source-6.1");
    let log = log_dir.join("tiny-kernel-build.log");
    let _ = std::fs::remove_file(&log);
    progress!(
        "building the 6.1 kernel without io_uring (a few minutes; log: {})",
        log.display()
    );
    if !tree.join("Makefile").exists() {
        std::fs::create_dir_all(&build)?;
        let mut untar = Command::new("tar");
        untar
            .current_dir(&build)
            .args(["xf", "/usr/src/linux-source-6.1.tar.xz"]);
        tools::run_logged(&mut untar, "unpacking linux-source-6.1", &log)?;
    }
    configure_tiny(&tree, &log)?;
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut make = Command::new("make");
    make.current_dir(&tree)
        .arg(format!("-j{jobs}"))
        .arg("bzImage");
    tools::run_logged(&mut make, "make bzImage", &log)?;
    std::fs::copy(tree.join("arch/x86/boot/bzImage"), image)?;
    std::fs::copy(tree.join(".config"), image.with_file_name("config"))?;
    // The tree is over a gigabyte; the image is all we keep.
    let _ = std::fs::remove_dir_all(&tree);
    Ok(())
}

/// tinyconfig, the options above, IO_URING off; then checks the result.
fn configure_tiny(tree: &Path, log: &Path) -> io::Result<()> {
    let make = |target: &str| {
        let mut cmd = Command::new("make");
        cmd.current_dir(tree).arg(target);
        cmd
    };
    tools::run_logged(&mut make("tinyconfig"), "make tinyconfig", log)?;
    let mut config = Command::new("scripts/config");
    config.current_dir(tree);
    for option in TINY_OPTIONS {
        config.args(["--enable", option]);
    }
    config.args(["--disable", "IO_URING"]);
    tools::run_logged(&mut config, "scripts/config", log)?;
    tools::run_logged(&mut make("olddefconfig"), "make olddefconfig", log)?;
    let text = std::fs::read_to_string(tree.join(".config"))?;
    check_config(&text)
}

/// Every wanted option is `=y` and io_uring is off, or an error naming what is not.
pub fn check_config(text: &str) -> io::Result<()> {
    let has = |o: &str| text.lines().any(|l| l == format!("CONFIG_{o}=y"));
    let missing: Vec<&str> = TINY_OPTIONS.iter().copied().filter(|o| !has(o)).collect();
    if !missing.is_empty() {
        return Err(io::Error::other(format!(
            "the tiny kernel config lacks {} (a dependency missing from TINY_OPTIONS?)",
            missing.join(", ")
        )));
    }
    if has("IO_URING") {
        return Err(io::Error::other(
            "the tiny kernel config still has IO_URING",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_without_an_option_is_rejected_by_name() {
        let full: String = TINY_OPTIONS
            .iter()
            .map(|o| format!("CONFIG_{o}=y\n"))
            .collect();
        assert!(check_config(&full).is_ok());
        let without_unix = full.replace("CONFIG_UNIX=y\n", "");
        let err = check_config(&without_unix).expect_err("UNIX is missing");
        assert!(err.to_string().contains("UNIX"));
        let with_uring = format!("{full}CONFIG_IO_URING=y\n");
        assert!(check_config(&with_uring).is_err());
    }
}
