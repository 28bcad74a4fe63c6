//! `echo-count`'s markdown: the command line, what was run, the instruction and syscall
//! tables, each server's hot functions, and notes (backends, valgrind's warnings, the
//! syscalls outside the table's groups).

use std::fmt::Write;
use std::process::Command;

use super::syscalls::{Syscalls, EPOLL_WAITS, READS, WRITES};
use super::{Options, ServerCounts};
use crate::report::Machine;

/// The whole report.
pub fn markdown(opts: &Options, command: &str, all: &[ServerCounts]) -> String {
    let [short, long] = opts.requests;
    let mut md = format!(
        "### Instructions and syscalls per echo request\n\n```\n{command}\n```\n\n{}- tools: {}, {}\n- load: echo-load, {} connections x {} B, closed loop, every byte verified; each server runs twice per tool on a fresh process, {short} and {long} requests; **per request = (count of the {long}-request run - count of the {short}-request run) / {}**, so start-up and shutdown cancel\n- instructions: user-space instructions of the server process (callgrind `Ir`); syscalls: every call the server's threads make (`strace -f -c`); no CPU pinning\n- these counts do not move with the machine's load, as CPU time does; what can move them is batching (how many requests one loop turn serves), shown by the waits per request\n\n",
        Machine::current().markdown(),
        tool_version("valgrind", "--version"),
        tool_version("strace", "-V"),
        opts.shape.conns,
        opts.shape.len,
        long - short
    );
    if all.iter().any(|s| s.ir.is_some()) {
        md.push_str(&ir_table(opts, all));
        md.push_str(&hot_functions(opts, all));
    }
    if all.iter().any(|s| s.sys.is_some()) {
        md.push_str(&sys_table(all));
    }
    md.push_str(&notes(all));
    md
}

fn tool_version(program: &str, flag: &str) -> String {
    Command::new(program)
        .arg(flag)
        .output()
        .ok()
        .and_then(|o| {
            Some(
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()?
                    .to_string(),
            )
        })
        .unwrap_or_else(|| format!("{program} (version unknown)"))
}

fn ir_table(opts: &Options, all: &[ServerCounts]) -> String {
    let [short, long] = opts.requests;
    let mut md = format!(
        "#### User-space instructions per request (callgrind)\n\n| server | Ir per request | Ir, {short} requests | Ir, {long} requests | waits per request under callgrind (own counter) |\n|---|---:|---:|---:|---:|\n"
    );
    for s in all {
        let Some(ir) = &s.ir else { continue };
        let enters = ir
            .enters_per_req()
            .map_or("-".to_string(), |e| format!("{e:.3}"));
        let _ = writeln!(
            md,
            "| {} | {:.0} | {} | {} | {enters} |",
            s.name,
            ir.per_req(),
            ir.totals[0],
            ir.totals[1]
        );
    }
    md.push('\n');
    md
}

fn hot_functions(opts: &Options, all: &[ServerCounts]) -> String {
    let long = opts.requests[1];
    let mut md = format!(
        "#### Hot functions (callgrind self cost, top {} of the {long}-request run)\n\n| server | function | Ir | % of run | Ir per request |\n|---|---|---:|---:|---:|\n",
        opts.top
    );
    for s in all {
        let Some(ir) = &s.ir else { continue };
        for f in ir.functions[1].iter().take(opts.top) {
            let _ = writeln!(
                md,
                "| {} | `{}` | {} | {:.1} | {:.0} |",
                s.name,
                f.name.replace('|', "\\|"),
                f.ir,
                100.0 * f.ir as f64 / ir.totals[1].max(1) as f64,
                ir.fn_per_req(&f.name)
            );
        }
    }
    md.push('\n');
    md
}

fn sys_table(all: &[ServerCounts]) -> String {
    let mut md = String::from(
        "#### Syscalls per request (strace -f -c)\n\n| server | all | io_uring_enter | epoll_wait* | read, recv* | write, send* | other |\n|---|---:|---:|---:|---:|---:|---:|\n",
    );
    for s in all {
        let Some(sys) = &s.sys else { continue };
        let _ = writeln!(
            md,
            "| {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
            s.name,
            sys.per_req(|c| c.total),
            sys.per_req(Syscalls::io_uring_enter),
            sys.per_req(|c| c.sum(EPOLL_WAITS)),
            sys.per_req(|c| c.sum(READS)),
            sys.per_req(|c| c.sum(WRITES)),
            sys.per_req(Syscalls::other)
        );
    }
    md.push_str(
        "\n`epoll_wait*`: epoll_wait, epoll_pwait, epoll_pwait2; `read, recv*`: read, readv, recvfrom, recvmsg, recvmmsg; `write, send*`: write, writev, sendto, sendmsg, sendmmsg.\n\n",
    );
    md
}

fn notes(all: &[ServerCounts]) -> String {
    let mut md = String::from("#### Notes\n\n");
    for s in all {
        let _ = writeln!(md, "- {}: `{}`", s.name, s.listening);
        if let Some(ir) = &s.ir {
            for w in &ir.warnings {
                let _ = writeln!(md, "  - valgrind: {w}{}", explain(w));
            }
        }
        if let Some(sys) = &s.sys {
            let others = other_calls(sys);
            if !others.is_empty() {
                let _ = writeln!(md, "  - other syscalls per request: {others}");
            }
        }
    }
    md
}

/// What a valgrind warning seen here means for the counts.
fn explain(warning: &str) -> &'static str {
    if warning.ends_with("syscall: 441") {
        // Valgrind 3.19 fails a syscall it has no wrapper for with ENOSYS.
        " (epoll_pwait2, which valgrind 3.19 fails with ENOSYS: ring-rt's epoll backend probes it once at start and falls back to epoll_wait plus a timerfd for fine timeouts; with no timer armed the echo loop waits with epoll_wait either way, as the strace table shows, so the count is unaffected)"
    } else {
        ""
    }
}

/// The calls outside the table's groups whose count grew with the requests, per request.
fn other_calls(sys: &super::SysCounts) -> String {
    let long: Vec<(&str, u64)> = sys.runs[1].others().collect();
    let mut parts = Vec::new();
    for (name, _) in long {
        let per_req = sys.per_req(|c| c.calls.get(name).copied().unwrap_or(0));
        if per_req.abs() >= 0.0005 {
            parts.push(format!("{name} {per_req:.3}"));
        }
    }
    parts.join(", ")
}
