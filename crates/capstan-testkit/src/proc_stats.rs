//! What a process costs, read from Linux's `/proc`: memory and CPU time.

/// A memory figure of process `pid` from `/proc/<pid>/status` — `field` is e.g. `VmRSS:` (now)
/// or `VmHWM:` (peak) — in KiB; `None` once the process is gone.
pub fn proc_status_kib(pid: u32, field: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|line| {
        line.strip_prefix(field)?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    })
}

/// CPU time process `pid` has used so far (user + system, every thread), in seconds, from
/// `/proc/<pid>/stat` (clock ticks of 1/100 s, Linux's USER_HZ on every mainstream build).
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) end with ')'; utime and stime are
    // fields 14 and 15, i.e. the 12th and 13th after it.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// CPU time process `pid`'s threads have run so far, in nanoseconds, from the scheduler's own
/// accounting (`/proc/<pid>/task/*/schedstat`, its first field): no tick to round to, so a run
/// of a hundred calls can be measured, and sides compared call chunk by call chunk. Threads
/// that have ended are not counted.
pub fn cpu_nanos(pid: u32) -> u64 {
    let Ok(threads) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    threads
        .flatten()
        .filter_map(|thread| std::fs::read_to_string(thread.path().join("schedstat")).ok())
        .filter_map(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// A reading of process `pid`'s CPU time in both accountings: the scheduler's per thread (to the
/// nanosecond, but a thread that ends takes its time with it) and the process's (every thread
/// that ever ran, in ticks of 10 ms). [`CpuTime::since`] gives the precise figure unless a
/// thread ended between two readings.
#[derive(Clone, Copy, Debug)]
pub struct CpuTime {
    nanos: u64,
    seconds: f64,
}

/// Reads process `pid`'s CPU time now.
pub fn cpu_time(pid: u32) -> CpuTime {
    CpuTime {
        nanos: cpu_nanos(pid),
        seconds: cpu_seconds(pid),
    }
}

impl CpuTime {
    /// Seconds of CPU used since `earlier`: the scheduler's figure, or the ticks' when the two
    /// disagree by more than two ticks (a thread that ran ended in between).
    pub fn since(&self, earlier: &CpuTime) -> f64 {
        let precise = self.nanos.saturating_sub(earlier.nanos) as f64 / 1e9;
        let ticked = self.seconds - earlier.seconds;
        if (precise - ticked).abs() > 0.02 {
            ticked
        } else {
            precise
        }
    }
}
