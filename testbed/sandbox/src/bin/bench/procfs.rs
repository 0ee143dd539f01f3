//! What the bench reads about a process and the machine from /proc: resident memory, CPU time
//! and the load average.

use std::time::Duration;

use anyhow::Context as _;

/// `/proc/<pid>/stat` counts CPU time in USER_HZ ticks, which Linux fixes at 100 per second
/// for every userspace-visible interface (`getconf CLK_TCK`).
const TICKS_PER_SECOND: u64 = 100;

/// `VmRSS` of `pid` in KiB.
pub(crate) fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .with_context(|| format!("no VmRSS in {path}"))?;
    let kib = line
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .with_context(|| format!("cannot parse VmRSS {line:?}"))?;
    Ok(kib)
}

/// utime + stime of `pid` (user and system CPU time of all its threads).
pub(crate) fn cpu_time(pid: u32) -> anyhow::Result<Duration> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    // The command name (field 2) is in parentheses and may contain spaces: fields are counted
    // after the last ')'. There field 3 (state) comes first, so utime (14) and stime (15) are
    // at indexes 11 and 12.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .with_context(|| format!("no ')' in {path}"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| -> anyhow::Result<u64> {
        fields
            .get(i)
            .with_context(|| format!("{path} is too short"))?
            .parse::<u64>()
            .with_context(|| format!("cannot parse field {} of {path}", i + 3))
    };
    let ticks = tick(11)? + tick(12)?;
    Ok(Duration::from_millis(ticks * 1000 / TICKS_PER_SECOND))
}

/// The 1, 5 and 15 minute load averages (the machine is shared; this tells how busy it was).
pub(crate) fn load_average() -> Option<String> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    Some(
        text.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// CPU time of a sidecar and of the bench process itself, taken together at one moment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuSample {
    /// The sidecar's utime+stime.
    pub(crate) sidecar: Duration,
    /// This process's (API server, mock driver, watches).
    pub(crate) bench: Duration,
}

impl CpuSample {
    /// Reads both now.
    pub(crate) fn take(sidecar_pid: u32) -> anyhow::Result<Self> {
        Ok(Self {
            sidecar: cpu_time(sidecar_pid)?,
            bench: cpu_time(std::process::id())?,
        })
    }

    /// The CPU used from `self` to `later`.
    pub(crate) fn until(self, later: Self) -> Self {
        Self {
            sidecar: later.sidecar.saturating_sub(self.sidecar),
            bench: later.bench.saturating_sub(self.bench),
        }
    }
}
