//! Latency percentiles and process CPU time.

use std::time::Duration;

/// The median of `v` with its minimum and maximum, `(median, min, max)`: what the benches
/// report per figure over their rounds. `v` must not be empty.
pub fn median_range(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

/// Percentile `p` (0..=100) of sorted samples, in microseconds.
pub fn percentile_us(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// User + system CPU time of this process so far: every thread, including io_uring's
/// io-wq workers and the blocking pool.
pub fn self_cpu() -> Duration {
    rusage_cpu(libc::RUSAGE_SELF)
}

/// User + system CPU time of the calling thread so far (`RUSAGE_THREAD`): what fio reports
/// as its job's `usr_cpu` + `sys_cpu`, which leaves out the io-wq workers running the ops
/// io_uring punts (buffered writes on ext4, fsyncs).
pub fn thread_cpu() -> Duration {
    rusage_cpu(libc::RUSAGE_THREAD)
}

fn rusage_cpu(who: libc::c_int) -> Duration {
    // SAFETY: rusage is plain data; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a live rusage.
    unsafe { libc::getrusage(who, &mut ru) };
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn tv(t: libc::timeval) -> Duration {
    Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
}

/// The kernel's clock ticks per second (`/proc` CPU times are in these).
pub fn clock_ticks_per_sec() -> u64 {
    // SAFETY: sysconf takes an integer and returns one.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64
}

/// CPU time (utime + stime) of process `pid` from `/proc/<pid>/stat`.
pub fn proc_cpu(pid: u32) -> std::io::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of the stat line: 11 and 12 after the ')'.
    let hz = clock_ticks_per_sec();
    let total = ticks(11) + ticks(12);
    Ok(Duration::from_micros(total * 1_000_000 / hz))
}

/// CPU time the whole machine spent busy so far (all CPUs: user, nice, system, irq,
/// softirq, steal; not idle or iowait), from the `cpu` line of `/proc/stat`.
pub fn system_busy() -> std::io::Result<Duration> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let line = stat
        .lines()
        .find(|l| l.starts_with("cpu "))
        .unwrap_or("cpu");
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal: skip idle (3) and iowait (4).
    let busy: u64 = ticks
        .iter()
        .take(8)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, t)| t)
        .sum();
    // SAFETY: sysconf takes an integer and returns one.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Ok(Duration::from_micros(busy * 1_000_000 / hz))
}

/// Resident set size of process `pid`, in KiB.
pub fn proc_rss_kib(pid: u32) -> std::io::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .unwrap_or("VmRSS: 0 kB");
    Ok(line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_known_samples() {
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile_us(&v, 50.0), 51);
        assert_eq!(percentile_us(&v, 99.0), 99);
        assert_eq!(percentile_us(&v, 100.0), 100);
        assert_eq!(percentile_us(&[], 50.0), 0);
    }

    #[test]
    fn own_cpu_and_rss_are_readable() {
        let pid = std::process::id();
        assert!(proc_rss_kib(pid).unwrap() > 0);
        let spin = std::time::Instant::now();
        while spin.elapsed() < Duration::from_millis(30) {}
        assert!(proc_cpu(pid).unwrap() > Duration::ZERO);
        assert!(self_cpu() > Duration::ZERO);
        assert!(system_busy().unwrap() > Duration::ZERO);
    }
}
