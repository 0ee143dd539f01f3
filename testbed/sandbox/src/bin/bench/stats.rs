//! What one burst measured ([`Phase`]), percentiles, and the way the reports print times,
//! sizes, per-operation costs and their common header.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;

use crate::procfs::CpuSample;
use crate::requests::Counts;

/// Nearest-rank percentile of sorted `values`.
pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a rank among at most a few million operations, always in 1..=len"
    )]
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted.get(rank - 1).copied()
}

pub(crate) fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

pub(crate) fn kib(v: u64) -> String {
    #[allow(
        clippy::cast_precision_loss,
        reason = "an RSS in KiB is far below 2^52"
    )]
    let mib = v as f64 / 1024.0;
    format!("{mib:.1} MiB ({v} KiB)")
}

/// One burst of operations: objects created, changed or deleted at once, and what it took.
#[derive(Debug, Default)]
pub(crate) struct Phase {
    /// From the bench's call returning to the watch showing the outcome, one per object done.
    pub(crate) latencies: Vec<Duration>,
    /// First call to last outcome seen.
    pub(crate) wall: Option<Duration>,
    /// CPU from the first call to the request snapshot after the settle time.
    pub(crate) cpu: Option<CpuSample>,
    /// The sidecar's API requests over the same window.
    pub(crate) requests: Option<Counts>,
}

/// `value`, or `n/a` when it was not measured.
pub(crate) fn or_na(value: Option<String>) -> String {
    value.unwrap_or_else(|| "n/a".to_owned())
}

/// For every object in `done`, the time from its call returning (`called`) to its outcome.
pub(crate) fn latencies(
    called: &HashMap<String, Instant>,
    done: &HashMap<String, Instant>,
) -> Vec<Duration> {
    done.iter()
        .filter_map(|(name, at)| {
            called
                .get(name)
                .map(|c| at.checked_duration_since(*c).unwrap_or_default())
        })
        .collect()
}

/// The first lines of a report: its title, how the bench was run and which build it is.
pub(crate) fn preamble(sidecar: &str, argv: &[String], command: &str, log: &Path) -> String {
    let build = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    format!(
        "# {sidecar} bench\n\n- bench command: `{}`\n- {}: `{command}`\n- {} log: `{}`\n- bench build: {build}\n",
        argv.join(" "),
        sidecar.trim_start_matches("csi-"),
        sidecar.trim_start_matches("csi-"),
        log.display(),
    )
}

/// The last lines of a report: OK, or FAILED with every failure.
pub(crate) fn result(failures: &[String]) -> String {
    if failures.is_empty() {
        return "\nResult: OK\n".to_owned();
    }
    let lines: Vec<String> = failures.iter().map(|f| format!("- {f}\n")).collect();
    format!("\nResult: FAILED\n{}", lines.concat())
}

/// `total` spread over `count` operations, or `None` when there were none.
pub(crate) fn ms_per(total: Duration, count: usize) -> Option<String> {
    #[allow(
        clippy::cast_precision_loss,
        reason = "an operation count is far below 2^52"
    )]
    let n = count as f64;
    (count > 0).then(|| format!("{:.2} ms", total.as_secs_f64() * 1000.0 / n))
}

/// p50 / p90 / p99 / max of `latencies` (any order), each `n/a` when there are none.
pub(crate) fn latency_summary(latencies: &[Duration]) -> [String; 4] {
    let mut sorted = latencies.to_vec();
    sorted.sort();
    let show = |d: Option<Duration>| d.map_or_else(|| "n/a".to_owned(), ms);
    [
        show(percentile(&sorted, 0.50)),
        show(percentile(&sorted, 0.90)),
        show(percentile(&sorted, 0.99)),
        show(sorted.last().copied()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let values: Vec<Duration> = (1..=10).map(Duration::from_millis).collect();
        assert_eq!(percentile(&values, 0.5), Some(Duration::from_millis(5)));
        assert_eq!(percentile(&values, 0.9), Some(Duration::from_millis(9)));
        assert_eq!(percentile(&values, 0.99), Some(Duration::from_millis(10)));
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn a_summary_of_no_latencies_is_all_not_available() {
        assert_eq!(latency_summary(&[]), ["n/a", "n/a", "n/a", "n/a"]);
        assert_eq!(ms_per(Duration::from_millis(10), 0), None);
        assert_eq!(
            ms_per(Duration::from_millis(10), 4).as_deref(),
            Some("2.50 ms")
        );
    }
}
