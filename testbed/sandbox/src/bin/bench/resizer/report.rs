//! What the csi-resizer bench measured and how its Markdown report reads.

use std::fmt::Write as _;
use std::path::PathBuf;

use crate::cache::CacheLoad;
use crate::requests::{self, Expected};
use crate::startup::{self, StartUp};
use crate::stats::{Phase, kib, latency_summary, ms, ms_per, or_na, preamble, result};

/// What upstream external-resizer v2.0 sent for one expansion of a csi-driver-host-path volume,
/// from the golden capture (/work/shared/fixtures/traffic/go-sidecar-requests.txt, 15:35:59):
/// the claim's status to `ControllerResizeInProgress` with the `Resizing` condition, the
/// `Resizing` event, the PV capacity, the claim's status to `NodeResizePending` with
/// `FileSystemResizePending`, the `FileSystemResizeRequired` event.
pub(crate) const UPSTREAM_PER_EXPANSION: [Expected; 3] = [
    ("create", "events", 2),
    ("patch", "persistentvolumeclaims/status", 2),
    ("patch", "persistentvolumes", 1),
];

/// What upstream external-resizer v2.0 sent to start (the same capture, 15:35:03): one
/// streaming-list watch per informer, pods included (ours watches pods only in a namespace
/// where a claim waits for them, docs/compatibility.md).
pub(crate) const UPSTREAM_START: [Expected; 3] = [
    ("watch", "persistentvolumeclaims", 1),
    ("watch", "pods", 1),
    ("watch", "persistentvolumes", 1),
];

/// What one run measured.
#[derive(Debug, Default)]
pub(crate) struct Measured {
    /// The first start, on an empty cluster.
    pub(crate) startup: StartUp,
    pub(crate) rss_idle_kib: Option<u64>,
    pub(crate) cache: Option<CacheLoad>,
    pub(crate) expand: Phase,
    /// Claims of the burst that showed a `ControllerResizeError` condition at some point.
    pub(crate) expand_errors: usize,
    pub(crate) rss_expanded_kib: Option<u64>,
    pub(crate) load_before: Option<String>,
    pub(crate) load_after: Option<String>,
    /// A second csi-resizer started with the cached objects stored.
    pub(crate) fresh_start: StartUp,
    pub(crate) failures: Vec<String>,
}

/// Everything the report shows.
#[derive(Debug)]
pub(crate) struct Report {
    pub(crate) args: Vec<String>,
    pub(crate) expansions: usize,
    pub(crate) cached: usize,
    pub(crate) pods: usize,
    pub(crate) resizer_command: String,
    pub(crate) resizer_log: PathBuf,
    pub(crate) measured: Measured,
}

impl Report {
    pub(crate) fn failed(&self) -> bool {
        !self.measured.failures.is_empty()
    }

    pub(crate) fn render(&self) -> String {
        let mut s = preamble(
            "csi-resizer",
            &self.args,
            &self.resizer_command,
            &self.resizer_log,
        );
        let _ = writeln!(
            s,
            "- cached: {} bound claims with their PVs, and {} running pods mounting them",
            self.cached, self.pods
        );
        let _ = writeln!(
            s,
            "- burst: {} bound claims raised from 1Gi to 2Gi at once; the driver answers \
             `node_expansion_required: true` (as csi-driver-host-path)\n",
            self.expansions
        );
        s.push_str(&self.measurements());
        s.push_str(&self.requests());
        let _ = writeln!(
            s,
            "\nCPU time comes from /proc in 10 ms ticks; the burst's CPU and requests run from \
             its first patch to the snapshot taken the settle time after its last claim. \
             Expansion latency runs from the patch raising the request returning to a watch \
             delivering the claim with `allocatedResourceStatuses: NodeResizePending` (the \
             controller's part done)."
        );
        s.push_str(&result(&self.measured.failures));
        s
    }

    fn measurements(&self) -> String {
        let m = &self.measured;
        let mut s = String::new();
        let _ = writeln!(s, "| measurement | value |");
        let _ = writeln!(s, "|---|---|");
        let mut row = |name: &str, value: String| {
            let _ = writeln!(s, "| {name} | {value} |");
        };
        startup::rows(&mut row, "empty cluster: ", &m.startup);
        row("RSS at idle after start-up", or_na(m.rss_idle_kib.map(kib)));
        row(
            "cache load: store to every claim queued and synced",
            or_na(m.cache.as_ref().map(|c| ms(c.wall))),
        );
        row(
            "resizer CPU while loading the cache",
            or_na(m.cache.as_ref().map(|c| ms(c.cpu.sidecar))),
        );
        row(
            &format!(
                "RSS with {} claims + PVs and {} pods present",
                self.cached + self.expansions,
                self.pods
            ),
            or_na(m.cache.as_ref().map(|c| kib(c.rss_kib))),
        );
        row(
            "claims expanded",
            format!("{} of {}", m.expand.latencies.len(), self.expansions),
        );
        row(
            "claims that showed a ControllerResizeError",
            m.expand_errors.to_string(),
        );
        let [p50, p90, p99, max] = latency_summary(&m.expand.latencies);
        row("expansion latency p50", p50);
        row("expansion latency p90", p90);
        row("expansion latency p99", p99);
        row("expansion latency max", max);
        row(
            "burst wall time (first patch to last claim seen expanded)",
            or_na(m.expand.wall.map(ms)),
        );
        row(
            "resizer CPU for the burst (utime+stime)",
            or_na(m.expand.cpu.map(|c| ms(c.sidecar))),
        );
        row(
            "resizer CPU per expansion",
            or_na(
                m.expand
                    .cpu
                    .and_then(|c| ms_per(c.sidecar, m.expand.latencies.len())),
            ),
        );
        row(
            "bench process CPU for the burst (API server, mock driver, watch)",
            or_na(m.expand.cpu.map(|c| ms(c.bench))),
        );
        row("RSS after the burst", or_na(m.rss_expanded_kib.map(kib)));
        let stored = format!(
            "{} claims and PVs and {} pods stored",
            self.cached + self.expansions,
            self.pods
        );
        startup::rows(
            &mut row,
            &format!("fresh start with {stored}: "),
            &m.fresh_start,
        );
        row(
            &format!("RSS of a fresh start with {stored}"),
            startup::rss(&m.fresh_start),
        );
        row(
            "load average 1/5/15 min before / after the burst",
            format!(
                "{} / {}",
                or_na(m.load_before.clone()),
                or_na(m.load_after.clone())
            ),
        );
        s
    }

    fn requests(&self) -> String {
        let m = &self.measured;
        let mut s = String::new();
        let _ = writeln!(s, "\n## API requests of csi-resizer\n");
        let _ = writeln!(
            s,
            "Counted by the API server, minus the bench's own patches.\n"
        );
        let _ = writeln!(s, "### While loading the cache\n");
        match &m.cache {
            Some(cache) => s.push_str(&requests::table(
                &cache.requests,
                self.cached + self.expansions,
                "per claim",
                &[],
            )),
            None => s.push_str("n/a\n"),
        }
        let _ = writeln!(s, "\n### Expansion ({} claims)\n", self.expansions);
        match &m.expand.requests {
            Some(counts) => s.push_str(&requests::table(
                counts,
                self.expansions,
                "per expansion",
                &UPSTREAM_PER_EXPANSION,
            )),
            None => s.push_str("n/a\n"),
        }
        let _ = writeln!(
            s,
            "\n### A fresh start ({} claims and PVs, {} pods stored)\n",
            self.cached + self.expansions,
            self.pods
        );
        s.push_str(&startup::requests_table(&m.fresh_start, &UPSTREAM_START));
        s
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::procfs::CpuSample;

    use crate::requests::own;

    fn report(measured: Measured) -> Report {
        Report {
            args: vec!["bench".into(), "--sidecar".into(), "resizer".into()],
            expansions: 4,
            cached: 10,
            pods: 6,
            resizer_command: "csi-resizer --workers=10".into(),
            resizer_log: "/tmp/w/csi-resizer.log".into(),
            measured,
        }
    }

    #[test]
    fn a_full_run_reports_every_measurement_and_the_requests_per_expansion() {
        let mut requests = own("patch", "persistentvolumeclaims/status", 8);
        requests.extend(own("patch", "persistentvolumes", 4));
        requests.extend(own("create", "events", 8));
        let measured = Measured {
            rss_idle_kib: Some(10240),
            cache: Some(CacheLoad::sample()),
            expand: Phase {
                latencies: [4, 1, 3, 2].map(Duration::from_millis).to_vec(),
                wall: Some(Duration::from_millis(5)),
                cpu: Some(CpuSample {
                    sidecar: Duration::from_millis(40),
                    bench: Duration::from_millis(70),
                }),
                requests: Some(requests),
            },
            ..Measured::default()
        };
        let report = report(measured);
        assert!(!report.failed());
        let text = report.render();
        for line in [
            "# csi-resizer bench\n",
            "- resizer: `csi-resizer --workers=10`\n- resizer log: `/tmp/w/csi-resizer.log`\n",
            "- cached: 10 bound claims with their PVs, and 6 running pods mounting them",
            "| RSS with 14 claims + PVs and 6 pods present | 20.0 MiB (20480 KiB) |",
            "| claims expanded | 4 of 4 |",
            "| expansion latency p50 | 2.0 ms |",
            "| resizer CPU per expansion | 10.00 ms |",
            "| patch | persistentvolumeclaims/status | 8 | 2.00 | 2 |",
            "| **writes** | | 20 | 5.00 | 5 |",
            "\nResult: OK\n",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }

    #[test]
    fn a_failed_run_lists_why() {
        let measured = Measured {
            failures: vec!["only 0 of 4 claims were expanded".into()],
            ..Measured::default()
        };
        let report = report(measured);
        assert!(report.failed());
        let text = report.render();
        assert!(text.contains("| expansion latency p99 | n/a |"), "{text}");
        assert!(text.contains("Result: FAILED\n- only 0 of 4 claims were expanded"));
    }
}
