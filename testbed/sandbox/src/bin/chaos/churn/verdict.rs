//! The pass criteria of a churn run (issue 14: "memory back to its level after the first
//! minute, and no task, connection or file-descriptor growth"), as pure functions of the
//! samples: the first-minute level, the peak, and whether the end is back to the level.

use super::sample::Sample;

/// The level a run is held to: the first sample taken at or after `warmup` into the churn
/// (the end of "the first minute"); `None` when the churn ended before.
pub(crate) fn first_minute(samples: &[Sample], warmup: std::time::Duration) -> Option<Sample> {
    samples.iter().find(|s| s.at >= warmup).copied()
}

/// The highest value of every column over `samples` (each column's own maximum).
pub(crate) fn peak(samples: &[Sample]) -> Sample {
    samples.iter().fold(Sample::default(), |p, s| Sample {
        at: p.at.max(s.at),
        rss_kib: p.rss_kib.max(s.rss_kib),
        fds: p.fds.max(s.fds),
        sockets: p.sockets.max(s.sockets),
        api_connections: p.api_connections.max(s.api_connections),
        api_watches: p.api_watches.max(s.api_watches),
        threads: p.threads.max(s.threads),
        tasks: p.tasks.max(s.tasks),
        queued: p.queued.max(s.queued),
    })
}

/// How much the RSS grew over the second half of the churn (KiB, `None` without samples
/// there): a leak keeps growing at the churn's rate, caches that reached their bound (the
/// event correlator's 4096 keys, as client-go's) do not.
pub(crate) fn second_half_growth(
    samples: &[Sample],
    churned_for: std::time::Duration,
) -> Option<i64> {
    let half = churned_for / 2;
    let during: Vec<&Sample> = samples.iter().filter(|s| s.at <= churned_for).collect();
    let first = during.iter().find(|s| s.at >= half)?;
    let last = during.last()?;
    let kib = |s: &Sample| i64::try_from(s.rss_kib).unwrap_or(i64::MAX);
    Some(kib(last) - kib(first))
}

/// Why `end` is not back to `level`; empty when it is. Memory may exceed the level by
/// `rss_tolerance_percent` (the allocator keeps freed pages, and a first minute's cache is
/// not yet at its steady size); descriptors, sockets, API connections, the watches the API
/// server serves it, threads and tasks must be at or below it, and the work queues empty.
pub(crate) fn judge(level: &Sample, end: &Sample, rss_tolerance_percent: u64) -> Vec<String> {
    let mut problems = Vec::new();
    let rss_limit = level.rss_kib + level.rss_kib * rss_tolerance_percent / 100;
    if end.rss_kib > rss_limit {
        problems.push(format!(
            "RSS {} KiB > first-minute {} KiB + {rss_tolerance_percent}%",
            end.rss_kib, level.rss_kib
        ));
    }
    for (what, first, last) in [
        ("fds", level.fds, end.fds),
        ("sockets", level.sockets, end.sockets),
        (
            "API connections",
            level.api_connections,
            end.api_connections,
        ),
        ("API watches", level.api_watches, end.api_watches),
        ("threads", level.threads, end.threads),
        ("tasks", level.tasks, end.tasks),
    ] {
        if last > first {
            problems.push(format!("{what} {last} > first-minute {first}"));
        }
    }
    if end.queued > 0 {
        problems.push(format!("{} items still queued", end.queued));
    }
    problems
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn sample(secs: u64, rss_kib: u64, fds: u64, tasks: u64) -> Sample {
        Sample {
            at: Duration::from_secs(secs),
            rss_kib,
            fds,
            sockets: 4,
            api_connections: 2,
            api_watches: 6,
            threads: 5,
            tasks,
            queued: 0,
        }
    }

    #[test]
    fn the_level_is_the_first_sample_past_the_warmup() {
        let samples = [
            sample(0, 10, 9, 30),
            sample(58, 20, 12, 40),
            sample(61, 22, 12, 41),
        ];
        assert_eq!(
            first_minute(&samples, Duration::from_mins(1)),
            Some(samples[2])
        );
        assert_eq!(first_minute(&samples, Duration::from_mins(2)), None);
    }

    #[test]
    fn the_second_half_growth_is_from_the_middle_to_the_last_sample_of_the_churn() {
        let samples = [
            sample(0, 100, 9, 30),
            sample(30, 140, 9, 30),
            sample(60, 150, 9, 30),
            sample(90, 155, 9, 30),
            // After the churn (settling): not part of it.
            sample(130, 999, 9, 30),
        ];
        assert_eq!(
            second_half_growth(&samples, Duration::from_mins(2)),
            Some(5)
        );
        assert_eq!(
            second_half_growth(&samples[..1], Duration::from_mins(2)),
            None
        );
    }

    #[test]
    fn the_peak_takes_each_column_at_its_highest() {
        let peak = peak(&[sample(1, 30, 9, 50), sample(2, 20, 14, 40)]);
        assert_eq!((peak.rss_kib, peak.fds, peak.tasks), (30, 14, 50));
    }

    #[test]
    fn judged_against_the_first_minute() {
        let level = sample(60, 10_000, 12, 40);
        let cases: [(&str, Sample, Vec<&str>); 6] = [
            ("all back", sample(600, 10_000, 12, 40), vec![]),
            ("below", sample(600, 9_000, 10, 30), vec![]),
            ("RSS within 10%", sample(600, 11_000, 12, 40), vec![]),
            (
                "RSS past 10%",
                sample(600, 11_001, 12, 40),
                vec!["RSS 11001 KiB > first-minute 10000 KiB + 10%"],
            ),
            (
                "one fd and one task more",
                sample(600, 10_000, 13, 41),
                vec!["fds 13 > first-minute 12", "tasks 41 > first-minute 40"],
            ),
            (
                "queues not drained",
                Sample {
                    queued: 3,
                    ..sample(600, 10_000, 12, 40)
                },
                vec!["3 items still queued"],
            ),
        ];
        for (name, end, want) in cases {
            assert_eq!(judge(&level, &end, 10), want, "{name}");
        }
        let more_sockets = Sample {
            sockets: 5,
            api_connections: 3,
            api_watches: 7,
            threads: 6,
            ..level
        };
        assert_eq!(
            judge(&level, &more_sockets, 10),
            [
                "sockets 5 > first-minute 4",
                "API connections 3 > first-minute 2",
                "API watches 7 > first-minute 6",
                "threads 6 > first-minute 5"
            ]
        );
    }
}
