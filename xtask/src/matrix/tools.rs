//! Making sure the host tools a VM row needs are installed: qemu, and the kernel build's
//! toolchain. Installs them with apt-get when it can (root on Debian/Ubuntu); otherwise the
//! error gives the exact command to run.

use std::io;
use std::path::Path;
use std::process::{Command, Stdio};

/// What booting the VMs needs: (Debian package, a command on PATH or a file it installs).
pub const QEMU: &[(&str, &str)] = &[("qemu-system-x86", "qemu-system-x86_64")];

/// What building the tiny kernel needs, on top of gcc and make.
pub const KERNEL_BUILD: &[(&str, &str)] = &[
    ("linux-source-6.1", "/usr/src/linux-source-6.1.tar.xz"),
    ("make", "make"),
    ("gcc", "gcc"),
    ("bc", "bc"),
    ("bison", "bison"),
    ("flex", "flex"),
    ("xz-utils", "xz"),
    ("libelf-dev", "/usr/include/libelf.h"),
    ("libssl-dev", "/usr/include/openssl/ssl.h"),
];

/// The apt-get command installing `packages`.
pub fn install_command(packages: &[&str]) -> String {
    format!(
        "apt-get install -y --no-install-recommends {}",
        packages.join(" ")
    )
}

/// Installs whichever of `needs` is missing, or says how.
pub fn ensure(needs: &[(&str, &str)]) -> io::Result<()> {
    let missing: Vec<&str> = needs
        .iter()
        .filter(|(_, what)| !is_installed(what))
        .map(|(package, _)| *package)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let command = install_command(&missing);
    if !can_apt() {
        return Err(io::Error::other(format!(
            "missing {}: install with `sudo {command}` (Debian/Ubuntu)",
            missing.join(", ")
        )));
    }
    progress!("{command}");
    if apt(&["install", "-y", "--no-install-recommends"], &missing)? {
        return Ok(());
    }
    // Stale or empty package lists are the usual cause: refresh once and retry.
    apt(&["update"], &[])?;
    if apt(&["install", "-y", "--no-install-recommends"], &missing)? {
        return Ok(());
    }
    Err(io::Error::other(format!(
        "`{command}` failed (see its output above); install them by hand"
    )))
}

/// A path exists, or a bare command name is found on PATH.
pub fn is_installed(what: &str) -> bool {
    if what.contains('/') {
        return Path::new(what).exists();
    }
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(what).is_file()))
}

/// True when we are root on a system with apt-get.
pub fn can_apt() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let is_root = unsafe { libc::geteuid() } == 0;
    is_root && Path::new("/usr/bin/apt-get").exists()
}

/// Runs `apt-get <args> <packages>` quietly, noninteractive; true on success.
pub fn apt(args: &[&str], packages: &[&str]) -> io::Result<bool> {
    let status = Command::new("apt-get")
        .args(["-q", "-o", "Dpkg::Use-Pty=0"])
        .args(args)
        .args(packages)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()?;
    Ok(status.success())
}

/// Runs `cmd`, failing with its name and exit status; `log` receives its output.
pub fn run_logged(cmd: &mut Command, what: &str, log: &Path) -> io::Result<()> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let status = cmd
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .status()
        .map_err(|e| io::Error::other(format!("{what}: cannot start: {e}")))?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "{what} failed ({status}); log: {}",
            log.display()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_install_command_lists_every_package() {
        assert_eq!(
            install_command(&["qemu-system-x86", "bc"]),
            "apt-get install -y --no-install-recommends qemu-system-x86 bc"
        );
    }

    #[test]
    fn nothing_missing_means_nothing_to_do() {
        assert!(ensure(&[("coreutils", "/")]).is_ok());
    }

    #[test]
    fn commands_are_looked_up_on_path() {
        assert!(is_installed("sh"));
        assert!(!is_installed("no-such-command-here"));
        assert!(!is_installed("/no/such/file"));
    }
}
