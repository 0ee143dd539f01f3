//! What the sandbox tells the user: one row per flow (result, duration, notes), the state of
//! every sidecar, and the `/healthz` and `/metrics` highlights, as a readable text table and
//! as JSON (`--report-json`) for CI.

use std::fmt::Write as _;

use serde::Serialize;

/// How a flow ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Everything it checked held.
    Passed,
    /// Something it checked did not hold.
    Failed,
    /// It could not run (a sidecar it needs is not built yet).
    Skipped,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Passed => "passed",
            Outcome::Failed => "FAILED",
            Outcome::Skipped => "skipped",
        }
    }
}

/// One flow's row.
#[derive(Debug, Clone, Serialize)]
pub struct FlowReport {
    /// Flow name.
    pub name: String,
    /// Result.
    pub outcome: Outcome,
    /// Wall time in milliseconds.
    pub duration_ms: u64,
    /// What happened, in order (timings, counts, the reason of a failure or skip).
    pub notes: Vec<String>,
}

/// One sidecar's row.
#[derive(Debug, Clone, Serialize)]
pub struct SidecarReport {
    /// Binary name.
    pub name: String,
    /// `running (pid N)`, `not built yet, skipped`, `failed to start: ...` or
    /// `exited with ...`.
    pub state: String,
    /// Whether its state fails the run (it did not start, or it is not running at the end).
    pub failed: bool,
    /// Its `--http-endpoint`, when started.
    pub http_endpoint: Option<String>,
    /// Full command line, when started.
    pub command: Option<String>,
    /// Log file, when started.
    pub log: Option<String>,
}

/// Health and metrics scraped from one sidecar after the flows.
#[derive(Debug, Clone, Serialize)]
pub struct Highlight {
    /// Sidecar name.
    pub sidecar: String,
    /// `GET /healthz`: status code and body, or the error.
    pub healthz: String,
    /// Selected `/metrics` lines.
    pub metrics: Vec<String>,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The API server URL.
    pub api_server: String,
    /// The kubeconfig written for kubectl.
    pub kubeconfig: String,
    /// Where child logs are.
    pub log_dir: String,
    /// The sidecars.
    pub sidecars: Vec<SidecarReport>,
    /// The flows, in run order.
    pub flows: Vec<FlowReport>,
    /// Health and metrics highlights.
    pub highlights: Vec<Highlight>,
}

impl Report {
    /// True when no flow failed and every built sidecar started and is still running.
    pub fn passed(&self) -> bool {
        self.flows.iter().all(|f| f.outcome != Outcome::Failed)
            && self.sidecars.iter().all(|s| !s.failed)
    }

    /// The report as text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "CSI sidecar sandbox");
        let _ = writeln!(out, "  API server: {}", self.api_server);
        let _ = writeln!(out, "  kubeconfig: {}", self.kubeconfig);
        let _ = writeln!(out, "  logs:       {}", self.log_dir);
        let _ = writeln!(out);
        let _ = writeln!(out, "Sidecars:");
        for s in &self.sidecars {
            match &s.http_endpoint {
                Some(endpoint) => {
                    let _ = writeln!(out, "  {:<28} {} (http {endpoint})", s.name, s.state);
                }
                None => {
                    let _ = writeln!(out, "  {:<28} {}", s.name, s.state);
                }
            }
        }
        let _ = writeln!(out);
        out.push_str(&self.flow_table());
        let _ = writeln!(out);
        let _ = writeln!(out, "Health and metrics:");
        for h in &self.highlights {
            let _ = writeln!(out, "  {}: /healthz {}", h.sidecar, h.healthz);
            for line in &h.metrics {
                let _ = writeln!(out, "    {line}");
            }
        }
        let failed = self
            .flows
            .iter()
            .filter(|f| f.outcome == Outcome::Failed)
            .count();
        let skipped = self
            .flows
            .iter()
            .filter(|f| f.outcome == Outcome::Skipped)
            .count();
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "Result: {} ({} flows, {} failed, {} skipped)",
            if self.passed() { "PASSED" } else { "FAILED" },
            self.flows.len(),
            failed,
            skipped
        );
        out
    }

    fn flow_table(&self) -> String {
        let name_width = self
            .flows
            .iter()
            .map(|f| f.name.chars().count())
            .chain(std::iter::once(4))
            .max()
            .unwrap_or(4);
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:<name_width$}  {:<7}  {:>9}  NOTES",
            "FLOW", "RESULT", "DURATION"
        );
        for f in &self.flows {
            let duration = format!("{} ms", f.duration_ms);
            let mut notes = f.notes.iter();
            let _ = writeln!(
                out,
                "{:<name_width$}  {:<7}  {:>9}  {}",
                f.name,
                f.outcome.as_str(),
                duration,
                notes.next().map_or("", String::as_str)
            );
            for note in notes {
                let _ = writeln!(out, "{:<name_width$}  {:<7}  {:>9}  {note}", "", "", "");
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(outcomes: &[Outcome]) -> Report {
        Report {
            api_server: "http://127.0.0.1:1".into(),
            kubeconfig: "sandbox.kubeconfig".into(),
            log_dir: "/tmp/x".into(),
            sidecars: vec![SidecarReport {
                name: "csi-attacher".into(),
                state: "not built yet, skipped".into(),
                failed: false,
                http_endpoint: None,
                command: None,
                log: None,
            }],
            flows: outcomes
                .iter()
                .enumerate()
                .map(|(i, o)| FlowReport {
                    name: format!("flow {i}"),
                    outcome: *o,
                    duration_ms: 12,
                    notes: vec!["first".into(), "second".into()],
                })
                .collect(),
            highlights: vec![],
        }
    }

    #[test]
    fn a_failed_flow_fails_the_report_and_a_skipped_one_does_not() {
        assert!(report(&[Outcome::Passed, Outcome::Skipped]).passed());
        assert!(!report(&[Outcome::Passed, Outcome::Failed]).passed());
    }

    #[test]
    fn the_table_has_one_row_per_note_and_a_result_line() {
        let text = report(&[Outcome::Passed, Outcome::Failed]).render();
        assert!(
            text.contains("flow 0  passed       12 ms  first\n"),
            "{text}"
        );
        assert!(
            text.contains("flow 1  FAILED       12 ms  first\n"),
            "{text}"
        );
        assert!(
            text.contains("                           second\n"),
            "{text}"
        );
        assert!(text.contains("csi-attacher                 not built yet, skipped"));
        assert!(text.contains("Result: FAILED (2 flows, 1 failed, 0 skipped)"));
    }
}
