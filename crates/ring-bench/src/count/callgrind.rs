//! Reading what callgrind leaves: the profile's `totals:` line, `callgrind_annotate`'s
//! per-function costs (summed over the files a function's inlined code came from), and the
//! warnings in valgrind's log.

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::process::Command;

/// One function's self cost in instructions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FnCost {
    /// The (demangled) function name, without file or object.
    pub name: String,
    /// Instructions executed in the function itself (not its callees).
    pub ir: u64,
}

/// The `totals:` line of a callgrind profile: every instruction the program executed in
/// user space. Its absence means the profile was not written out whole (the server was
/// killed rather than stopped).
pub fn totals(profile: &str) -> Option<u64> {
    profile
        .lines()
        .find_map(|l| l.strip_prefix("totals:"))
        .and_then(|n| n.split_whitespace().next()?.parse().ok())
}

/// Runs `callgrind_annotate` on `profile` (self costs, every function) and returns its
/// output.
pub fn annotate(profile: &Path) -> io::Result<String> {
    let out = Command::new("callgrind_annotate")
        .args(["--inclusive=no", "--threshold=100", "--auto=no"])
        .arg(profile)
        .output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "callgrind_annotate {}: {}",
            profile.display(),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Per-function self costs from `callgrind_annotate` output, most expensive first. The
/// annotator's function table (the section under the `file:function` header; source
/// annotation, if any, follows it) lists a function once per source file its code came
/// from (inlined code counts under the file it was written in), as
/// `1,234 (5.6%)  file:function [object]`; these rows are summed by function.
pub fn functions(annotated: &str) -> Vec<FnCost> {
    let table = annotated
        .lines()
        .skip_while(|l| !l.trim_end().ends_with("file:function"))
        .skip(2)
        .take_while(|l| !l.starts_with("---"));
    let mut by_name: HashMap<String, u64> = HashMap::new();
    for (ir, name) in table.filter_map(parse_row) {
        *by_name.entry(name).or_default() += ir;
    }
    let mut costs: Vec<FnCost> = by_name
        .into_iter()
        .map(|(name, ir)| FnCost { name, ir })
        .collect();
    costs.sort_by(|a, b| b.ir.cmp(&a.ir).then_with(|| a.name.cmp(&b.name)));
    costs
}

/// `(ir, function)` from one annotator row; `None` for every other line.
fn parse_row(line: &str) -> Option<(u64, String)> {
    let line = line.trim_start();
    let (count, rest) = line.split_once(' ')?;
    let ir: u64 = count.replace(',', "").parse().ok()?;
    let rest = rest.trim_start();
    let rest = match rest.strip_prefix('(') {
        Some(r) => r.split_once(')')?.1.trim_start(),
        None => rest,
    };
    if rest.starts_with("PROGRAM TOTALS") {
        return None;
    }
    let (_file, function) = rest.split_once(':')?;
    let function = match function.rsplit_once(" [") {
        Some((f, object)) if object.ends_with(']') => f,
        _ => function,
    };
    Some((ir, function.trim().to_string()))
}

/// The warnings in valgrind's log (an unhandled syscall, for one), each once.
pub fn warnings(log: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    for line in log.lines().filter(|l| l.contains("WARNING")) {
        // Drop the `==pid==` or `--pid--` prefix so repeats from one run compare equal.
        let text = line
            .trim_start_matches(|c: char| c == '=' || c == '-' || c.is_ascii_digit())
            .trim()
            .to_string();
        if !found.contains(&text) {
            found.push(text);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_line_is_read_and_its_absence_noticed() {
        let profile = "events: Ir\nsummary: 30176230\n\nfn=(1) main\n1 2\ntotals: 30176230\n";
        assert_eq!(totals(profile), Some(30_176_230));
        assert_eq!(totals("events: Ir\nsummary: 12\nfn=(1) main\n"), None);
    }

    #[test]
    fn rows_of_one_function_from_several_files_are_summed() {
        let annotated = "\
--------------------------------------------------------------------------------
30,176,230 (100.0%)  PROGRAM TOTALS
--------------------------------------------------------------------------------
Ir                  file:function
--------------------------------------------------------------------------------
4,213,048 (13.96%)  ./string/../memset-vec-unaligned-erms.S:__memset_avx2_unaligned_erms [/usr/lib/libc.so.6]
  967,571 ( 3.21%)  /rustc/abc/library/alloc/src/collections/vec_deque/mod.rs:ring_core::lifecycle::Deferred::append
  585,626 ( 1.94%)  /work/crates/ring-core/src/lifecycle/mod.rs:ring_core::lifecycle::Deferred::append [/work/echo]
      100 ( 0.00%)  ???:<T as core::any::Any>::type_id [/work/echo]

--------------------------------------------------------------------------------
-- Auto-annotated source: /work/src/main.rs
--------------------------------------------------------------------------------
990 ( 0.05%)  => /rustc/abc/library/std/src/env.rs:std::env::args (1x)
";
        let costs = functions(annotated);
        assert_eq!(
            costs,
            vec![
                FnCost {
                    name: "__memset_avx2_unaligned_erms".into(),
                    ir: 4_213_048
                },
                FnCost {
                    name: "ring_core::lifecycle::Deferred::append".into(),
                    ir: 1_553_197
                },
                FnCost {
                    name: "<T as core::any::Any>::type_id".into(),
                    ir: 100
                },
            ]
        );
    }

    #[test]
    fn warnings_are_listed_once_without_their_pid() {
        let log = "==12== Callgrind\n--16639-- WARNING: unhandled amd64-linux syscall: 441\n\
                   --16639-- You may be able to write your own handler.\n\
                   --16639-- WARNING: unhandled amd64-linux syscall: 441\n";
        assert_eq!(
            warnings(log),
            vec!["WARNING: unhandled amd64-linux syscall: 441".to_string()]
        );
    }
}
