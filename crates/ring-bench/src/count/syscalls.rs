//! Syscalls from a `strace -f -c` summary of every call, grouped the way an echo server's
//! costs split: the wait (`io_uring_enter`, `epoll_wait` and its kin), socket reads, socket
//! writes, and everything else.

use std::collections::BTreeMap;

/// Calls per syscall over one traced run, with strace's own `total`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Syscalls {
    /// Calls by syscall name.
    pub calls: BTreeMap<String, u64>,
    /// The summary's `total` row.
    pub total: u64,
}

/// The wait calls of an epoll loop.
pub const EPOLL_WAITS: &[&str] = &["epoll_wait", "epoll_pwait", "epoll_pwait2"];
/// Calls that read from a socket.
pub const READS: &[&str] = &["read", "readv", "recvfrom", "recvmsg", "recvmmsg"];
/// Calls that write to a socket.
pub const WRITES: &[&str] = &["write", "writev", "sendto", "sendmsg", "sendmmsg"];

impl Syscalls {
    /// Reads a `strace -c` summary: rows of `% time, seconds, usecs/call, calls, [errors],
    /// syscall`, then the `total` row.
    pub fn parse(summary: &str) -> Syscalls {
        let mut s = Syscalls::default();
        for line in summary.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(name), Some(calls)) = (fields.last(), fields.get(3)) else {
                continue;
            };
            let Ok(calls) = calls.parse::<u64>() else {
                continue;
            };
            match *name {
                "total" => s.total = calls,
                _ => *s.calls.entry(name.to_string()).or_default() += calls,
            }
        }
        s
    }

    /// Calls to any of `names`.
    pub fn sum(&self, names: &[&str]) -> u64 {
        names.iter().filter_map(|n| self.calls.get(*n)).sum()
    }

    /// Calls to `io_uring_enter`.
    pub fn io_uring_enter(&self) -> u64 {
        self.sum(&["io_uring_enter"])
    }

    /// Calls outside the groups above.
    pub fn other(&self) -> u64 {
        let grouped =
            self.io_uring_enter() + self.sum(EPOLL_WAITS) + self.sum(READS) + self.sum(WRITES);
        self.total.saturating_sub(grouped)
    }

    /// The calls outside the groups, by name.
    pub fn others(&self) -> impl Iterator<Item = (&str, u64)> {
        let grouped = |n: &str| {
            n == "io_uring_enter"
                || EPOLL_WAITS.contains(&n)
                || READS.contains(&n)
                || WRITES.contains(&n)
        };
        self.calls
            .iter()
            .filter(move |(n, _)| !grouped(n))
            .map(|(n, c)| (n.as_str(), *c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUMMARY: &str = "\
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 80.00    0.008000           8      1000           epoll_wait
 10.00    0.001000           1      2000       100 recvfrom
  5.00    0.000500           1      1900           sendto
  5.00    0.000500           1         7         1 futex
------ ----------- ----------- --------- --------- ----------------
100.00    0.010000           2      4907       101 total
";

    #[test]
    fn summary_rows_are_grouped_into_waits_reads_writes_and_others() {
        let s = Syscalls::parse(SUMMARY);
        assert_eq!(s.total, 4907);
        assert_eq!(s.sum(EPOLL_WAITS), 1000);
        assert_eq!(s.sum(READS), 2000);
        assert_eq!(s.sum(WRITES), 1900);
        assert_eq!(s.io_uring_enter(), 0);
        assert_eq!(s.other(), 7);
        assert_eq!(s.others().collect::<Vec<_>>(), vec![("futex", 7)]);
    }
}
