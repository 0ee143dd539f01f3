//! The table `chaos --churn` prints (docs/reliability.md, "Bounded resources").

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::time::Instant;

use super::sample::Sample;
use crate::Sidecar;
use crate::report::load_average;

/// What the churn of one sidecar found.
#[derive(Debug)]
pub(crate) struct Row {
    pub(crate) sidecar: Sidecar,
    /// Object lifecycles completed.
    pub(crate) lifecycles: usize,
    pub(crate) churned_for: Duration,
    /// The first-minute level, the peak and the last sample.
    pub(crate) level: Sample,
    pub(crate) peak: Sample,
    pub(crate) end: Sample,
    /// RSS growth over the second half of the churn, in KiB.
    pub(crate) late_growth_kib: Option<i64>,
    /// From the end of the churn to the last sample.
    pub(crate) settled_in: Duration,
    /// Why the row failed; empty when it passed.
    pub(crate) problems: Vec<String>,
}

/// The whole churn run.
#[derive(Debug)]
pub(crate) struct Report {
    command: String,
    work_dir: PathBuf,
    load_before: String,
    load_after: String,
    started: Instant,
    elapsed_secs: u64,
    pub(crate) rows: Vec<Row>,
}

impl Report {
    pub(crate) fn new(argv: &[String], work_dir: &Path) -> Self {
        Self {
            command: argv.join(" "),
            work_dir: work_dir.to_owned(),
            load_before: load_average(),
            load_after: String::new(),
            started: Instant::now(),
            elapsed_secs: 0,
            rows: Vec::new(),
        }
    }

    /// Notes the load and the wall time at the end of the run.
    pub(crate) fn finish(&mut self) {
        self.load_after = load_average();
        self.elapsed_secs = self.started.elapsed().as_secs();
    }

    pub(crate) fn failed(&self) -> bool {
        self.rows.iter().any(|r| !r.problems.is_empty())
    }

    pub(crate) fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "- command: `{}`", self.command);
        let _ = writeln!(
            s,
            "- load average 1/5/15 min before / after: {} / {}",
            self.load_before, self.load_after
        );
        let _ = writeln!(s, "- wall time: {} s", self.elapsed_secs);
        let _ = writeln!(s, "- logs: {}\n", self.work_dir.display());
        let _ = writeln!(
            s,
            "| sidecar | churn | lifecycles (per hour at this rate) | RSS MiB first minute / peak / end | fds | sockets | API connections | API watches | threads | tasks | RSS growth, 2nd half of the churn | settled in | result |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        for row in &self.rows {
            let _ = writeln!(s, "{}", render_row(row));
        }
        let _ = writeln!(
            s,
            "\nCounts are first minute / peak / end. Pass: after the churn, the work queues empty and RSS within the tolerance of its first-minute level, every count at or below its first-minute level."
        );
        s
    }
}

/// One table line.
pub(crate) fn render_row(row: &Row) -> String {
    let result = if row.problems.is_empty() {
        "pass".to_owned()
    } else {
        format!("FAIL: {}", row.problems.join("; "))
    };
    let counts = |pick: fn(&Sample) -> u64| {
        format!(
            "{} / {} / {}",
            pick(&row.level),
            pick(&row.peak),
            pick(&row.end)
        )
    };
    let mib = |s: &Sample| format!("{:.1}", kib_to_mib(s.rss_kib));
    let minutes = row.churned_for.as_secs_f64() / 60.0;
    #[allow(
        clippy::cast_precision_loss,
        reason = "a lifecycle count is far below 2^52"
    )]
    let per_hour = if minutes > 0.0 {
        row.lifecycles as f64 * 60.0 / minutes
    } else {
        0.0
    };
    format!(
        "| {} | {minutes:.1} min | {} ({per_hour:.0}/h) | {} / {} / {} | {} | {} | {} | {} | {} | {} | {} | {:.0} s | {result} |",
        row.sidecar.binary(),
        row.lifecycles,
        mib(&row.level),
        mib(&row.peak),
        mib(&row.end),
        counts(|s| s.fds),
        counts(|s| s.sockets),
        counts(|s| s.api_connections),
        counts(|s| s.api_watches),
        counts(|s| s.threads),
        counts(|s| s.tasks),
        row.late_growth_kib
            .map_or_else(|| "n/a".to_owned(), |k| format!("{k:+} KiB")),
        row.settled_in.as_secs_f64(),
    )
}

#[allow(
    clippy::cast_precision_loss,
    reason = "an RSS in KiB is far below 2^52"
)]
fn kib_to_mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}
