//! The VMs' initramfs: a `cpio -H newc` archive written directly, holding `/init`
//! (matrix-init), `/bin/xtask`, the static test binaries under `/matrix/`, and the plan.
//!
//! Written by hand rather than with `cpio` so that `/dev/console` (a device node, which the
//! kernel needs before devtmpfs is mounted) needs no root and no `mknod`. Left uncompressed:
//! every kernel unpacks plain newc, and under emulation gunzip is slower than reading more
//! bytes.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// `S_IFDIR`, `S_IFREG`, `S_IFCHR` file types for the newc mode field.
const DIR: u32 = 0o040_000;
const REG: u32 = 0o100_000;
const CHR: u32 = 0o020_000;

/// One binary the VM runs, with its libtest arguments and time limit.
#[derive(Clone, Debug)]
pub struct PlanStep {
    /// Name in the matrix (`ring-core/driver`).
    pub name: String,
    /// File name under /matrix.
    pub file: String,
    /// Host path of the (static) binary.
    pub source: PathBuf,
    /// Filter and `--skip`s; test names and filters hold no whitespace.
    pub args: Vec<String>,
    pub timeout: Duration,
}

/// The kernel command-line parameter that makes matrix-init run `/matrix/plan-epoll`
/// instead of `/matrix/plan` (matrix-init has its own copy of this string).
pub const PLAN_EPOLL_PARAM: &str = "ring_matrix.plan=epoll";

/// The plan file matrix-init reads: `name \t /matrix/file \t args|- \t timeout_s`, the
/// arguments separated by spaces.
pub fn plan_text(steps: &[PlanStep]) -> String {
    steps
        .iter()
        .map(|s| {
            let args = if s.args.is_empty() {
                "-".to_string()
            } else {
                s.args.join(" ")
            };
            format!(
                "{}\t/matrix/{}\t{args}\t{}\n",
                s.name,
                s.file,
                s.timeout.as_secs()
            )
        })
        .collect()
}

/// A newc archive being written.
pub struct Cpio<W: Write> {
    out: W,
    ino: u32,
    written: u64,
}

impl<W: Write> Cpio<W> {
    pub fn new(out: W) -> Cpio<W> {
        Cpio {
            out,
            ino: 1,
            written: 0,
        }
    }

    fn header(&mut self, name: &str, mode: u32, size: usize, rdev: (u32, u32)) -> io::Result<()> {
        let namesize = name.len() + 1;
        let fields = [
            self.ino,
            mode,
            0, // uid
            0, // gid
            if mode & DIR != 0 { 2 } else { 1 },
            0, // mtime: fixed, so the archive is reproducible
            size as u32,
            0,
            0, // dev major/minor
            rdev.0,
            rdev.1,
            namesize as u32,
            0, // check
        ];
        self.ino += 1;
        let mut text = String::from("070701");
        for f in fields {
            text.push_str(&format!("{f:08x}"));
        }
        self.put(text.as_bytes())?;
        self.put(name.as_bytes())?;
        self.put(&[0])?;
        self.pad()
    }

    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// newc aligns headers and file data to 4 bytes.
    fn pad(&mut self) -> io::Result<()> {
        let pad = (4 - self.written % 4) % 4;
        self.put(&[0; 3][..pad as usize])
    }

    pub fn dir(&mut self, name: &str) -> io::Result<()> {
        self.header(name, DIR | 0o755, 0, (0, 0))
    }

    pub fn char_dev(&mut self, name: &str, major: u32, minor: u32) -> io::Result<()> {
        self.header(name, CHR | 0o600, 0, (major, minor))
    }

    pub fn file(&mut self, name: &str, perm: u32, data: &[u8]) -> io::Result<()> {
        if u32::try_from(data.len()).is_err() {
            return Err(io::Error::other(format!(
                "{name}: over 4 GiB, too big for newc"
            )));
        }
        self.header(name, REG | perm, data.len(), (0, 0))?;
        self.put(data)?;
        self.pad()
    }

    /// Writes the trailer and returns the writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.header("TRAILER!!!", 0, 0, (0, 0))?;
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Writes the initramfs to `dest`; `stage` holds stripped copies of the binaries.
pub fn write(
    dest: &Path,
    stage: &Path,
    init: &Path,
    xtask: &Path,
    steps: &[PlanStep],
    epoll_steps: &[PlanStep],
) -> io::Result<()> {
    std::fs::create_dir_all(stage)?;
    let mut cpio = Cpio::new(BufWriter::new(File::create(dest)?));
    for dir in ["dev", "proc", "sys", "tmp", "bin", "etc", "matrix"] {
        cpio.dir(dir)?;
    }
    cpio.char_dev("dev/console", 5, 1)?;
    cpio.file("etc/hosts", 0o644, b"127.0.0.1 localhost\n::1 localhost\n")?;
    cpio.file("init", 0o755, &stripped(init, stage)?)?;
    cpio.file("bin/xtask", 0o755, &stripped(xtask, stage)?)?;
    for step in steps {
        let data = stripped(&step.source, stage)?;
        cpio.file(&format!("matrix/{}", step.file), 0o755, &data)?;
    }
    cpio.file("matrix/plan", 0o644, plan_text(steps).as_bytes())?;
    // The same binaries with the arguments of rows where ring-rt must end up on epoll
    // (`#[ring_rt::test]` binaries skip their io_uring halves), chosen by the kernel
    // command line (`PLAN_EPOLL_PARAM`).
    cpio.file(
        "matrix/plan-epoll",
        0o644,
        plan_text(epoll_steps).as_bytes(),
    )?;
    cpio.finish()?;
    Ok(())
}

/// The binary without debug info (a third of the size: less to load and unpack), or the
/// binary as is when `strip` is not installed.
fn stripped(source: &Path, stage: &Path) -> io::Result<Vec<u8>> {
    let name = source.file_name().unwrap_or_default();
    let copy = stage.join(name);
    let ok = Command::new("strip")
        .arg("--strip-debug")
        .arg("-o")
        .arg(&copy)
        .arg(source)
        .status()
        .is_ok_and(|s| s.success());
    std::fs::read(if ok { &copy } else { source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_and_data_are_four_byte_aligned() {
        let mut cpio = Cpio::new(Vec::new());
        cpio.dir("dev").expect("in memory");
        cpio.char_dev("dev/console", 5, 1).expect("in memory");
        cpio.file("init", 0o755, b"abcde").expect("in memory");
        let bytes = cpio.finish().expect("in memory");
        assert_eq!(bytes.len() % 4, 0);
        assert!(bytes.starts_with(b"070701"));
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("dev/console") && text.contains("TRAILER!!!"));
    }

    #[test]
    fn header_fields_are_hex_with_mode_and_size() {
        let mut cpio = Cpio::new(Vec::new());
        cpio.file("a", 0o755, b"xyz").expect("in memory");
        let bytes = cpio.finish().expect("in memory");
        let field = |i: usize| &bytes[6 + 8 * i..6 + 8 * (i + 1)];
        assert_eq!(field(1), format!("{:08x}", REG | 0o755).as_bytes());
        assert_eq!(field(6), b"00000003"); // filesize
        assert_eq!(field(11), b"00000002"); // namesize: "a" + NUL
                                            // 110-byte header + "a\0" = 112, already aligned, then the data.
        assert_eq!(&bytes[112..115], b"xyz");
    }

    #[test]
    fn plan_lines_have_four_tab_separated_fields() {
        let step = PlanStep {
            name: "ring-rt/net".into(),
            file: "ring-rt.net".into(),
            source: PathBuf::from("/x"),
            args: vec!["--skip".into(), "slow".into()],
            timeout: Duration::from_secs(90),
        };
        assert_eq!(
            plan_text(&[step]),
            "ring-rt/net\t/matrix/ring-rt.net\t--skip slow\t90\n"
        );
    }
}
