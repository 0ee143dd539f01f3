//! The table `chaos` prints (and docs/reliability.md shows).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use tokio::time::Instant;

use crate::scenario::Row;

/// The whole run.
#[derive(Debug)]
pub(crate) struct Report {
    command: String,
    seed: u64,
    work_dir: PathBuf,
    load_before: String,
    load_after: String,
    started: Instant,
    elapsed_secs: u64,
    pub(crate) rows: Vec<Row>,
    /// The node part's rows (`node`), shown in a table of their own.
    pub(crate) node_rows: Vec<crate::node::NodeRow>,
}

/// `/proc/loadavg`'s three load figures, or `n/a`.
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "n/a".to_owned(),
        |text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        },
    )
}

impl Report {
    pub(crate) fn new(argv: &[String], seed: u64, work_dir: &Path) -> Self {
        Self {
            command: argv.join(" "),
            seed,
            work_dir: work_dir.to_owned(),
            load_before: load_average(),
            load_after: String::new(),
            started: Instant::now(),
            elapsed_secs: 0,
            rows: Vec::new(),
            node_rows: Vec::new(),
        }
    }

    /// Notes the load and the wall time at the end of the run.
    pub(crate) fn finish(&mut self) {
        self.load_after = load_average();
        self.elapsed_secs = self.started.elapsed().as_secs();
    }

    pub(crate) fn failed(&self) -> bool {
        self.rows.iter().any(|r| !r.problems.is_empty()) || crate::node::failed(&self.node_rows)
    }

    pub(crate) fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "- command: `{}`", self.command);
        let _ = writeln!(s, "- seed: {}", self.seed);
        let _ = writeln!(
            s,
            "- load average 1/5/15 min before / after: {} / {}",
            self.load_before, self.load_after
        );
        let _ = writeln!(s, "- wall time: {} s", self.elapsed_secs);
        let _ = writeln!(s, "- logs: {}\n", self.work_dir.display());
        if !self.rows.is_empty() {
            let _ = writeln!(
                s,
                "| fault | sidecar | objects | converged | orphaned | duplicated | time to converge | restarts | observed | result | upstream's behaviour |"
            );
            let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|");
        }
        for row in &self.rows {
            let _ = writeln!(s, "{}", render_row(row));
        }
        if !self.node_rows.is_empty() {
            if !self.rows.is_empty() {
                s.push('\n');
            }
            s.push_str(&crate::node::render(&self.node_rows));
        }
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
    format!(
        "| {} | {} | {} | {}/{} | {} | {} | {} | {} | {} | {} | {} |",
        row.fault.name(),
        row.sidecar.binary(),
        row.tally.total,
        row.tally.done,
        row.tally.total,
        row.orphaned
            .map_or_else(|| "n/a".to_owned(), |n| n.to_string()),
        row.duplicated,
        row.converged_in
            .map_or_else(|| "-".to_owned(), |d| format!("{:.1} s", d.as_secs_f64())),
        row.restarts,
        row.notes.join("; "),
        result,
        row.fault.upstream(row.sidecar),
    )
}
