//! Gives back to the system the memory a burst of work freed.
//!
//! glibc's malloc keeps what the program frees in its arenas for reuse and, on its own, returns
//! pages only from the top of a heap. After a burst (thousands of claims provisioned, a fresh
//! start's initial lists) the live heap shrinks but the RSS stays near the burst's peak, for as
//! long as the process runs (docs/bench.md). Upstream's sidecars run on Go's runtime, whose
//! background scavenger returns freed memory by itself. `malloc_trim(0)` does that for glibc:
//! since glibc 2.8 it releases every whole free page of every arena (malloc_trim(3)).
//!
//! [`release_freed_memory`] runs beside every sidecar ([`crate::runtime::block_on_until_signal`]
//! starts it). Every [`CHECK_PERIOD`] it reads the process's anonymous RSS; when that has grown
//! by [`GROWTH`] over the lowest value since the last trim, it trims, and trims once more at the
//! next check that shows no more growth: what the burst's last work freed goes back within
//! seconds of its end. Memory freed without any growth (the pool closing connections that went
//! idle after a burst) shows in no reading, so it trims at the latest every [`LATEST_CHECKS`]
//! checks (30 s) as well; a trim that finds nothing whole to give back costs a walk of the free
//! lists (3.5-4 ms for 100,000 free chunks, in a C program on the development machine; not
//! measured inside a sidecar).
//!
//! Elsewhere than on glibc (musl, other systems) there is nothing to call and nothing runs.

use std::time::Duration;

/// How often the anonymous RSS is read: often enough that a burst's freed memory goes back
/// within seconds of the burst, and rare enough (one small read of /proc) to cost nothing.
pub const CHECK_PERIOD: Duration = Duration::from_secs(5);

/// How far the anonymous RSS must grow over its lowest value since the last trim before the
/// next one: less would trim on ordinary churn, where there is nothing whole to give back.
pub const GROWTH: u64 = 1024 * 1024;

/// The most checks between two trims, whatever the readings: freed memory that no reading
/// shows goes back within this many [`CHECK_PERIOD`]s (30 s).
pub const LATEST_CHECKS: u32 = 6;

/// What the trimmer remembers since the last trim (or the start): the lowest anonymous RSS, in
/// bytes, how many checks have passed, and whether the last check grew.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Floor {
    lowest: Option<u64>,
    checks: u32,
    grew: bool,
}

impl Floor {
    /// No reading yet: the first one sets the floor.
    pub(crate) const fn new() -> Self {
        Self {
            lowest: None,
            checks: 0,
            grew: false,
        }
    }

    /// Takes a check's reading of the anonymous RSS; returns whether to trim now: on growth of
    /// [`GROWTH`] over the lowest reading, at the first check after such growth (a burst that
    /// grew until the last check frees what its last work held without any reading showing
    /// it; two bench runs caught it waiting for the 30 s rule, docs/bench.md "The trim after a
    /// burst's end"), or at the [`LATEST_CHECKS`]th check. A trim's caller then hands the
    /// reading after it to [`Floor::trimmed`].
    pub(crate) fn observe(&mut self, rss: u64) -> bool {
        let lowest = self.lowest.map_or(rss, |lowest| lowest.min(rss));
        self.lowest = Some(lowest);
        self.checks = self.checks.saturating_add(1);
        let grown = rss >= lowest.saturating_add(GROWTH);
        let after_growth = std::mem::replace(&mut self.grew, grown);
        grown || after_growth || self.checks >= LATEST_CHECKS
    }

    /// A trim left the anonymous RSS at `rss` (or it could not be read): growth is measured
    /// from there on, and the checks counted again (whether the last check grew is kept).
    pub(crate) fn trimmed(&mut self, rss: Option<u64>) {
        self.lowest = rss;
        self.checks = 0;
    }
}

/// Every [`CHECK_PERIOD`], trims glibc's arenas when the anonymous RSS has grown by
/// [`GROWTH`] since the last trim, at the check after such growth, and at the latest every
/// [`LATEST_CHECKS`] checks (see the module documentation). Runs until dropped; returns at once where there is no `malloc_trim`.
pub async fn release_freed_memory() {
    if !TRIM_SUPPORTED {
        return;
    }
    run(CHECK_PERIOD, anonymous_rss, trim).await;
}

/// The loop of [`release_freed_memory`], with the reading and the trim passed in (tests pass
/// fakes).
pub(crate) async fn run(
    period: Duration,
    mut read: impl FnMut() -> Option<u64>,
    mut trim: impl FnMut() -> bool,
) {
    let mut floor = Floor::new();
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(before) = read() else { continue };
        if !floor.observe(before) {
            continue;
        }
        let released = trim();
        let after = read();
        floor.trimmed(after);
        tracing::debug!(
            released,
            before_kib = before / 1024,
            after_kib = after.map(|a| a / 1024),
            "returned freed memory to the system"
        );
    }
}

/// The process's anonymous resident memory in bytes (`RssAnon` of /proc/self/status): what a
/// trim can give back, without the file-backed pages (the binary) that it cannot.
fn anonymous_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_rss_anon(&status)
}

/// `RssAnon` of a /proc/PID/status text, in bytes (the file gives kB, which proc(5) means as
/// KiB).
pub(crate) fn parse_rss_anon(status: &str) -> Option<u64> {
    crate::metrics::procfs::parse_status_kib(status, "RssAnon:")
        .map(|kib: u64| kib.saturating_mul(1024))
}

/// Whether this build has a `malloc_trim` to call.
const TRIM_SUPPORTED: bool = cfg!(all(target_os = "linux", target_env = "gnu"));

/// glibc's `malloc_trim(0)`: returns whether memory went back to the system.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub(crate) fn trim() -> bool {
    // SAFETY: malloc_trim takes no pointer and works only on glibc's own free lists, under each
    // arena's lock (MT-Safe in malloc_trim(3)); it frees nothing the program still holds.
    unsafe { libc::malloc_trim(0) == 1 }
}

/// No `malloc_trim` outside glibc.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn trim() -> bool {
    false
}

#[cfg(test)]
mod tests;
