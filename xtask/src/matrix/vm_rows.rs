//! Running the VM rows: build the static test binaries and the initramfs once, fetch or
//! build each kernel (one at a time: apt and the kernel build share state), then boot the
//! VMs, as many at once as there are cores (each VM is one emulated CPU).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::report::RowResult;
use super::rows::{self, Place, Row, VmKernel};
use super::vm::Planned;
use super::{binaries, build_problems, check_backend, initramfs, kernels, row_slug, select};
use super::{tools, vm};

/// Per-binary time limit inside a VM (the VM as a whole gets the sum plus
/// `vm::VM_BOOT_ALLOWANCE`, so only a stuck kernel or init ends it): a hung
/// binary costs this much and the rest still run. Under TCG on 2 busy cores `ring-rt/net`
/// took 35-48 s for its epoll half alone and ran out of a 60 s limit with both halves, and
/// `worker_edges` took 58 s (2026-11-28); 180 s leaves room for a slower machine.
pub const VM_BINARY_TIMEOUT: Duration = Duration::from_secs(180);

/// What every VM boots with.
struct VmAssets {
    initrd: PathBuf,
    /// The binaries in plan order, with their arguments.
    planned: Vec<Planned>,
    /// The same for rows where ring-rt must end up on epoll (`/matrix/plan-epoll`).
    planned_epoll: Vec<Planned>,
    /// Build problems, reported on each VM row.
    problems: Vec<String>,
    /// The VM's wall-clock limit: every binary's limit plus the boot allowance, so it
    /// only ends a VM whose kernel or init is stuck.
    limit: Duration,
}

/// What the VM rows boot with, built before any boots: the assets every VM shares (or why
/// there are none) and each row's kernel image, in row order.
pub struct Prepared {
    assets: Result<VmAssets, String>,
    images: Vec<Result<PathBuf, String>>,
}

impl Prepared {
    /// Nothing to boot with, for the reason given (each row reports it).
    pub fn failed(problem: impl Into<String>) -> Prepared {
        Prepared {
            assets: Err(problem.into()),
            images: Vec::new(),
        }
    }
}

/// Builds the static test binaries and the initramfs (all VM rows share one suite, so one
/// initramfs), then fetches or builds each row's kernel. Boots nothing: `mod.rs` runs this
/// beside the host rows and boots once they are done (see [`run`]).
pub fn prepare(rows: &[Row], root: &Path, logs: &Path) -> Prepared {
    let Some(first) = rows.first() else {
        return Prepared::failed("no VM rows");
    };
    let start = Instant::now();
    let assets = match prepare_assets(first, root, logs) {
        Ok(assets) => assets,
        Err(err) => return Prepared::failed(err),
    };
    progress!(
        "VM binaries and initramfs ready in {:.0} s",
        start.elapsed().as_secs_f64()
    );
    let images = rows
        .iter()
        .map(|row| kernel_image(row, root, logs))
        .collect();
    Prepared {
        assets: Ok(assets),
        images,
    }
}

/// Boots `rows` with what [`prepare`] made for them.
pub fn run(rows: &[Row], prepared: Prepared, logs: &Path) -> Vec<RowResult> {
    match prepared.assets {
        Ok(assets) => boot_all(rows, &prepared.images, &assets, logs),
        Err(err) => rows.iter().map(|r| failed_row(r, err.clone())).collect(),
    }
}

/// A row that could not run at all.
fn failed_row(row: &Row, problem: String) -> RowResult {
    RowResult {
        row: row.clone(),
        backend: None,
        runs: Vec::new(),
        problems: vec![problem],
        secs: 0.0,
    }
}

fn prepare_assets(row: &Row, root: &Path, logs: &Path) -> Result<VmAssets, String> {
    tools::ensure(tools::QEMU).map_err(|e| e.to_string())?;
    binaries::ensure_musl_target().map_err(|e| e.to_string())?;
    let built = binaries::build_all(Some(binaries::MUSL), logs);
    let (xtask, init) = binaries::build_vm_tools(logs).map_err(|e| e.to_string())?;
    // Every VM row runs one suite; only `#[ring_rt::test]` binaries' arguments differ
    // between rows that expect io_uring and rows that expect epoll.
    let plan = |expect_epoll: bool| -> Vec<initramfs::PlanStep> {
        select(row, &built)
            .into_iter()
            .map(|(bin, args)| initramfs::PlanStep {
                name: bin.name(),
                file: bin.file_name(),
                args: uring_halves(&bin, args, expect_epoll),
                source: bin.path,
                timeout: VM_BINARY_TIMEOUT,
            })
            .collect()
    };
    let (steps, epoll_steps) = (plan(false), plan(true));
    let initrd = root.join("initramfs.cpio");
    initramfs::write(
        &initrd,
        &root.join("stage"),
        &init,
        &xtask,
        &steps,
        &epoll_steps,
    )
    .map_err(|e| format!("writing the initramfs: {e}"))?;
    let limit = vm::VM_BOOT_ALLOWANCE + VM_BINARY_TIMEOUT * steps.len() as u32;
    let planned = |steps: Vec<initramfs::PlanStep>| -> Vec<Planned> {
        steps.into_iter().map(|s| (s.name, s.args)).collect()
    };
    Ok(VmAssets {
        limit,
        initrd,
        planned: planned(steps),
        planned_epoll: planned(epoll_steps),
        problems: build_problems(row, &built),
    })
}

/// `args` with `--skip ::uring` for a `#[ring_rt::test]` binary exactly when the row
/// expects epoll (whatever the row `select` was asked for had).
fn uring_halves(bin: &binaries::TestBinary, args: Vec<String>, expect_epoll: bool) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len() + 2);
    let mut rest = args.into_iter();
    while let Some(arg) = rest.next() {
        let next = rest.as_slice().first().map(String::as_str);
        if arg == "--skip" && next == Some(rows::URING_HALVES) {
            rest.next();
            continue;
        }
        out.push(arg);
    }
    if bin.uses_test_macro && expect_epoll {
        out.extend(["--skip".to_string(), rows::URING_HALVES.to_string()]);
    }
    out
}

fn vm_kernel(row: &Row) -> (VmKernel, &'static str) {
    match &row.place {
        Place::Vm { kernel, cmdline } => (*kernel, cmdline),
        Place::Host { .. } => unreachable!("mod.rs passes only the VM partition here"),
    }
}

fn kernel_image(row: &Row, root: &Path, logs: &Path) -> Result<PathBuf, String> {
    let (kernel, _) = vm_kernel(row);
    kernels::image(kernel, root, logs).map_err(|e| format!("kernel {}: {e}", kernel.label()))
}

/// Boots the rows on a few threads; results come back in row order.
fn boot_all(
    rows: &[Row],
    images: &[Result<PathBuf, String>],
    assets: &VmAssets,
    logs: &Path,
) -> Vec<RowResult> {
    let jobs: Vec<_> = rows.iter().zip(images).collect();
    super::in_parallel(&jobs, super::cores(), |&(row, image)| match image {
        Ok(image) => boot_row(row, image, assets, logs),
        Err(err) => failed_row(row, err.clone()),
    })
}

fn boot_row(row: &Row, image: &Path, assets: &VmAssets, logs: &Path) -> RowResult {
    let start = Instant::now();
    progress!("{} (booting)", row.name);
    let (_, cmdline) = vm_kernel(row);
    let log = logs.join(format!("{}.serial.log", row_slug(row)));
    let (cmdline, planned) = if row.skips_uring_halves() {
        let param = initramfs::PLAN_EPOLL_PARAM;
        (format!("{cmdline} {param}"), &assets.planned_epoll)
    } else {
        (cmdline.to_string(), &assets.planned)
    };
    let out = vm::boot(image, &assets.initrd, &cmdline, &log, planned, assets.limit);
    let mut problems = assets.problems.clone();
    problems.extend(out.notes);
    let mut result = RowResult {
        row: row.clone(),
        backend: out.backend,
        runs: out.runs,
        problems,
        secs: start.elapsed().as_secs_f64(),
    };
    check_backend(row, &mut result);
    progress!("{} finished in {:.0} s", row.name, result.secs);
    result
}
