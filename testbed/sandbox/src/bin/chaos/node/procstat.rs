//! What a churn row reads about the sidecar from `/proc`, and the verdict on it: the levels at
//! the end of the churn must be back to those of its first minute.

use std::time::Duration;

use anyhow::Context as _;

/// One reading of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sample {
    /// Since the churn started.
    pub(crate) at: Duration,
    /// `VmRSS`, KiB.
    pub(crate) rss_kib: u64,
    /// Open file descriptors (`/proc/<pid>/fd` entries).
    pub(crate) fds: u64,
    /// Of which sockets (TCP, unix).
    pub(crate) sockets: u64,
    /// `Threads`.
    pub(crate) threads: u64,
}

impl Sample {
    /// Reads `pid` now.
    pub(crate) fn read(pid: u32, at: Duration) -> anyhow::Result<Self> {
        let status_path = format!("/proc/{pid}/status");
        let status = std::fs::read_to_string(&status_path)
            .with_context(|| format!("cannot read {status_path}"))?;
        let field = |name: &str| -> anyhow::Result<u64> {
            let value = status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .with_context(|| format!("no {name} in {status_path}"))?;
            value
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .with_context(|| format!("cannot parse {name} {value:?}"))
        };
        let fd_dir = format!("/proc/{pid}/fd");
        let mut fds = 0;
        let mut sockets = 0;
        for entry in std::fs::read_dir(&fd_dir).with_context(|| format!("cannot read {fd_dir}"))? {
            let Ok(entry) = entry else { continue };
            fds += 1;
            // A descriptor closed between the listing and the readlink is simply not counted
            // as a socket.
            if std::fs::read_link(entry.path())
                .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"))
            {
                sockets += 1;
            }
        }
        Ok(Self {
            at,
            rss_kib: field("VmRSS:")?,
            fds,
            sockets,
            threads: field("Threads:")?,
        })
    }

    /// `VmRSS` in MiB, for display.
    pub(crate) fn rss_mib(&self) -> f64 {
        #[allow(
            clippy::cast_precision_loss,
            reason = "a KiB count far below 2^52, shown with one decimal"
        )]
        let kib = self.rss_kib as f64;
        kib / 1024.0
    }

    /// `rss 12.3 MiB, fds 14 (sockets 6), threads 5`.
    pub(crate) fn describe(&self) -> String {
        let mib = self.rss_mib();
        format!(
            "rss {mib:.1} MiB, fds {} (sockets {}), threads {}",
            self.fds, self.sockets, self.threads
        )
    }
}

/// Memory the allocator may keep above the first minute's peak without it counting as growth:
/// 10 % of that peak (freed memory is not always returned to the system at once).
const RSS_SLACK_PERCENT: u64 = 10;

/// The window whose levels a churn of `duration` must come back to: its first minute, or its
/// first third when shorter runs (the fast test) leave no minute to compare with.
pub(crate) fn first_window(duration: Duration) -> Duration {
    (duration / 3).min(Duration::from_mins(1))
}

/// The highest of each level among the samples taken in the first `window`.
pub(crate) fn first_window_peak(samples: &[Sample], window: Duration) -> Option<Sample> {
    samples
        .iter()
        .filter(|s| s.at <= window)
        .copied()
        .reduce(|a, b| Sample {
            at: a.at.max(b.at),
            rss_kib: a.rss_kib.max(b.rss_kib),
            fds: a.fds.max(b.fds),
            sockets: a.sockets.max(b.sockets),
            threads: a.threads.max(b.threads),
        })
}

/// Whether memory at the `end` is above the first-window `peak` by more than
/// [`RSS_SLACK_PERCENT`].
pub(crate) fn rss_growth(peak: &Sample, end: &Sample) -> Option<String> {
    let rss_limit = peak.rss_kib + peak.rss_kib * RSS_SLACK_PERCENT / 100;
    (end.rss_kib > rss_limit).then(|| {
        format!(
            "rss {} KiB at the end, above the first window's {} KiB + {RSS_SLACK_PERCENT} %",
            end.rss_kib, peak.rss_kib
        )
    })
}

/// What is above the first-window `peak` at the `end`: descriptors, sockets and threads must
/// not exceed it at all, memory not by more than [`RSS_SLACK_PERCENT`].
pub(crate) fn growth(peak: &Sample, end: &Sample) -> Vec<String> {
    let mut problems: Vec<String> = rss_growth(peak, end).into_iter().collect();
    for (what, at_end, first) in [
        ("fds", end.fds, peak.fds),
        ("sockets", end.sockets, peak.sockets),
        ("threads", end.threads, peak.threads),
    ] {
        if at_end > first {
            problems.push(format!(
                "{what} {at_end} at the end, above the first window's {first}"
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(secs: u64, rss_kib: u64, fds: u64, sockets: u64, threads: u64) -> Sample {
        Sample {
            at: Duration::from_secs(secs),
            rss_kib,
            fds,
            sockets,
            threads,
        }
    }

    #[test]
    fn the_peak_takes_each_level_s_maximum_within_the_window_only() {
        let samples = [
            sample(1, 1000, 10, 4, 3),
            sample(30, 900, 12, 5, 3),
            sample(60, 950, 11, 6, 4),
            sample(61, 5000, 50, 40, 9),
        ];
        assert_eq!(
            first_window_peak(&samples, Duration::from_mins(1)),
            Some(sample(60, 1000, 12, 6, 4))
        );
        assert_eq!(first_window_peak(&samples, Duration::ZERO), None);
    }

    #[test]
    fn growth_is_any_descriptor_socket_or_thread_above_the_peak_and_memory_beyond_the_slack() {
        let peak = sample(60, 10_000, 12, 6, 4);
        let cases = [
            (sample(300, 10_000, 12, 6, 4), 0, "equal"),
            (sample(300, 11_000, 8, 2, 4), 0, "memory within 10 %"),
            (sample(300, 11_001, 12, 6, 4), 1, "memory beyond 10 %"),
            (sample(300, 10_000, 13, 6, 4), 1, "one more fd"),
            (sample(300, 10_000, 13, 7, 4), 2, "one more socket"),
            (sample(300, 10_000, 12, 6, 5), 1, "one more thread"),
        ];
        for (end, problems, case) in cases {
            assert_eq!(growth(&peak, &end).len(), problems, "{case}");
        }
    }

    #[test]
    fn this_process_can_be_read() {
        let me = Sample::read(std::process::id(), Duration::ZERO).unwrap();
        assert!(me.rss_kib > 0 && me.fds > 0 && me.threads > 0, "{me:?}");
        assert!(me.describe().starts_with("rss "));
    }
}
