//! What the csi-attacher bench measured and how its Markdown report reads.

use std::fmt::Write as _;
use std::path::PathBuf;

use crate::cache::CacheLoad;
use crate::requests::{self, Expected};
use crate::startup::{self, StartUp};
use crate::stats::{Phase, kib, latency_summary, ms, ms_per, or_na, preamble, result};

/// What upstream external-attacher v4.12 sent for the first attach of a PV, from the golden
/// capture (/work/shared/fixtures/traffic/go-sidecar-requests.txt, 15:35:56): the PV finalizer
/// (JSON patch), the VA finalizer with the node-ID annotation (merge patch), and the status.
/// It sends no events (spec sidecars.md §1.3).
pub(crate) const UPSTREAM_PER_ATTACH: [Expected; 3] = [
    ("patch", "persistentvolumes", 1),
    ("patch", "volumeattachments", 1),
    ("patch", "volumeattachments/status", 1),
];

/// The same capture's detach (15:36:05): the VA finalizer off, then the status write, which
/// answers 404 because the API server has already deleted the VA.
pub(crate) const UPSTREAM_PER_DETACH: [Expected; 2] = [
    ("patch", "volumeattachments", 1),
    ("patch", "volumeattachments/status", 1),
];

/// What upstream external-attacher v4.12 sent to start (the same capture, 15:35:56): one
/// streaming-list watch per informer.
pub(crate) const UPSTREAM_START: [Expected; 3] = [
    ("watch", "volumeattachments", 1),
    ("watch", "persistentvolumes", 1),
    ("watch", "csinodes", 1),
];

/// What one run measured.
#[derive(Debug, Default)]
pub(crate) struct Measured {
    /// The first start, on an empty cluster.
    pub(crate) startup: StartUp,
    pub(crate) rss_idle_kib: Option<u64>,
    pub(crate) cache: Option<CacheLoad>,
    pub(crate) attach: Phase,
    /// VolumeAttachments of the burst that showed a `status.attachError` at some point.
    pub(crate) attach_errors: usize,
    pub(crate) rss_attached_kib: Option<u64>,
    pub(crate) detach: Phase,
    pub(crate) load_before: Option<String>,
    pub(crate) load_after: Option<String>,
    /// A second csi-attacher started with the cached objects stored.
    pub(crate) fresh_start: StartUp,
    pub(crate) failures: Vec<String>,
}

/// Everything the report shows.
#[derive(Debug)]
pub(crate) struct Report {
    pub(crate) args: Vec<String>,
    pub(crate) attachments: usize,
    pub(crate) cached: usize,
    pub(crate) attacher_command: String,
    pub(crate) attacher_log: PathBuf,
    pub(crate) measured: Measured,
}

impl Report {
    pub(crate) fn failed(&self) -> bool {
        !self.measured.failures.is_empty()
    }

    pub(crate) fn render(&self) -> String {
        let m = &self.measured;
        let mut s = self.header();
        s.push_str(&self.measurements());
        s.push_str(&self.requests());
        let _ = writeln!(
            s,
            "\nCPU time comes from /proc in 10 ms ticks; a phase's CPU and requests run from its \
             first call to the snapshot taken the settle time after its last VA. Attach latency \
             runs from the VA's create call returning to a watch delivering it with \
             `status.attached=true`; detach latency from the delete call returning to the watch \
             delivering its deletion."
        );
        s.push_str(&result(&m.failures));
        s
    }

    fn header(&self) -> String {
        let mut s = preamble(
            "csi-attacher",
            &self.args,
            &self.attacher_command,
            &self.attacher_log,
        );
        let _ = writeln!(
            s,
            "- cached: {} PVs, each with a VolumeAttachment stored as the attacher leaves it \
             after an attach (finalizers, annotations, `status.attached=true`)",
            self.cached
        );
        let _ = writeln!(
            s,
            "- burst: {} VolumeAttachments created at once, then deleted at once\n",
            self.attachments
        );
        s
    }

    fn measurements(&self) -> String {
        let m = &self.measured;
        let n = self.attachments;
        let mut s = String::new();
        let _ = writeln!(s, "| measurement | value |");
        let _ = writeln!(s, "|---|---|");
        let mut row = |name: &str, value: String| {
            let _ = writeln!(s, "| {name} | {value} |");
        };
        startup::rows(&mut row, "empty cluster: ", &m.startup);
        row("RSS at idle after start-up", or_na(m.rss_idle_kib.map(kib)));
        row(
            "cache load: store to every VA queued and synced",
            or_na(m.cache.as_ref().map(|c| ms(c.wall))),
        );
        row(
            "attacher CPU while loading the cache",
            or_na(m.cache.as_ref().map(|c| ms(c.cpu.sidecar))),
        );
        row(
            &format!("RSS with {} PVs and VAs cached", self.cached),
            or_na(m.cache.as_ref().map(|c| kib(c.rss_kib))),
        );
        row(
            "VAs attached",
            format!("{} of {n}", m.attach.latencies.len()),
        );
        row(
            "VAs that showed an attachError",
            m.attach_errors.to_string(),
        );
        phase_rows(&mut row, "attach", &m.attach);
        row(
            "RSS after the attach burst",
            or_na(m.rss_attached_kib.map(kib)),
        );
        row(
            "VAs detached (gone)",
            format!("{} of {n}", m.detach.latencies.len()),
        );
        phase_rows(&mut row, "detach", &m.detach);
        let fresh = format!("fresh start with {} PVs and VAs stored: ", self.cached);
        startup::rows(&mut row, &fresh, &m.fresh_start);
        row(
            &format!("RSS of a fresh start with {} PVs and VAs", self.cached),
            startup::rss(&m.fresh_start),
        );
        row(
            "load average 1/5/15 min before the attach burst / after the detaches",
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
        let n = self.attachments;
        let mut s = String::new();
        let _ = writeln!(s, "\n## API requests of csi-attacher\n");
        let _ = writeln!(
            s,
            "Counted by the API server, minus the bench's own creates and deletes.\n"
        );
        let _ = writeln!(
            s,
            "### While loading the cache ({} VAs already attached)\n",
            self.cached
        );
        match &m.cache {
            Some(cache) => s.push_str(&requests::table(
                &cache.requests,
                self.cached,
                "per VA",
                &[],
            )),
            None => s.push_str("n/a\n"),
        }
        for (title, per, phase, upstream) in [
            ("Attach", "per attach", &m.attach, &UPSTREAM_PER_ATTACH[..]),
            ("Detach", "per detach", &m.detach, &UPSTREAM_PER_DETACH[..]),
        ] {
            let _ = writeln!(s, "\n### {title} ({n} VAs)\n");
            match &phase.requests {
                Some(counts) => s.push_str(&requests::table(counts, n, per, upstream)),
                None => s.push_str("n/a\n"),
            }
        }
        let _ = writeln!(
            s,
            "\n### A fresh start ({} PVs and VAs stored)\n",
            self.cached
        );
        s.push_str(&startup::requests_table(&m.fresh_start, &UPSTREAM_START));
        s
    }
}

/// Latency percentiles, wall time and CPU of one phase.
fn phase_rows(row: &mut impl FnMut(&str, String), op: &str, phase: &Phase) {
    let [p50, p90, p99, max] = latency_summary(&phase.latencies);
    row(&format!("{op} latency p50"), p50);
    row(&format!("{op} latency p90"), p90);
    row(&format!("{op} latency p99"), p99);
    row(&format!("{op} latency max"), max);
    row(
        &format!("{op} burst wall time (first call to last VA seen)"),
        or_na(phase.wall.map(ms)),
    );
    row(
        &format!("attacher CPU for the {op} burst (utime+stime)"),
        or_na(phase.cpu.map(|c| ms(c.sidecar))),
    );
    row(
        &format!("attacher CPU per {op}"),
        or_na(
            phase
                .cpu
                .and_then(|c| ms_per(c.sidecar, phase.latencies.len())),
        ),
    );
    row(
        &format!("bench process CPU for the {op} burst (API server, mock driver, watch)"),
        or_na(phase.cpu.map(|c| ms(c.bench))),
    );
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::procfs::CpuSample;

    use crate::requests::own;

    fn report(measured: Measured) -> Report {
        Report {
            args: vec!["bench".into(), "--sidecar".into(), "attacher".into()],
            attachments: 4,
            cached: 10,
            attacher_command: "csi-attacher --worker-threads=10".into(),
            attacher_log: "/tmp/w/csi-attacher.log".into(),
            measured,
        }
    }

    #[test]
    fn a_full_run_reports_every_measurement_and_the_requests_per_operation() {
        let mut attach_requests = own("patch", "volumeattachments", 4);
        attach_requests.extend(own("patch", "volumeattachments/status", 4));
        attach_requests.extend(own("patch", "persistentvolumes", 4));
        let measured = Measured {
            rss_idle_kib: Some(10240),
            cache: Some(CacheLoad::sample()),
            attach: Phase {
                latencies: [4, 1, 3, 2].map(Duration::from_millis).to_vec(),
                wall: Some(Duration::from_millis(5)),
                cpu: Some(CpuSample {
                    sidecar: Duration::from_millis(40),
                    bench: Duration::from_millis(70),
                }),
                requests: Some(attach_requests),
            },
            detach: Phase::default(),
            fresh_start: StartUp {
                http: Some(Duration::from_millis(10)),
                synced: Some(Duration::from_millis(20)),
                first_line_logged: Some(Duration::from_millis(2)),
                synced_logged: Some(Duration::from_millis(18)),
                drained: Some(Duration::from_millis(30)),
                requests: Some(own("watch", "volumeattachments", 1)),
                rss_kib: Some(30720),
            },
            failures: vec!["only 0 of 4 VAs went away".into()],
            ..Measured::default()
        };
        let report = report(measured);
        assert!(report.failed());
        let text = report.render();
        for line in [
            "# csi-attacher bench\n",
            "- attacher: `csi-attacher --worker-threads=10`\n- attacher log: `/tmp/w/csi-attacher.log`\n",
            "| RSS at idle after start-up | 10.0 MiB (10240 KiB) |",
            "| RSS with 10 PVs and VAs cached | 20.0 MiB (20480 KiB) |",
            "| VAs attached | 4 of 4 |",
            "| attach latency p50 | 2.0 ms |",
            "| attach latency max | 4.0 ms |",
            "| attacher CPU per attach | 10.00 ms |",
            "| VAs detached (gone) | 0 of 4 |",
            "| detach latency p99 | n/a |",
            "| attacher CPU per detach | n/a |",
            "| patch | persistentvolumes | 4 | 1.00 | 1 |",
            "| fresh start with 10 PVs and VAs stored: start to caches synced (ready) | 20.0 ms |",
            "| fresh start with 10 PVs and VAs stored: start to its first log line, by its log's clock | 2.0 ms |",
            "| fresh start with 10 PVs and VAs stored: start to caches synced, by its log's clock | 18.0 ms |",
            "| empty cluster: start to caches synced, by its log's clock | n/a |",
            "| fresh start with 10 PVs and VAs stored: start to every stored object through its queue | 30.0 ms |",
            "| RSS of a fresh start with 10 PVs and VAs | 30.0 MiB (30720 KiB) |",
            "### A fresh start (10 PVs and VAs stored)\n",
            "| watch | persistentvolumes | 0 | 0.00 | 1 |\n| watch | volumeattachments | 1 | 1.00 | 1 |",
            "| **writes** | | 12 | 3.00 | 3 |",
            "| **writes** | | 0 | 0.00 | 0 |",
            "Result: FAILED\n- only 0 of 4 VAs went away",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }

    #[test]
    fn a_run_without_failures_is_ok() {
        let report = report(Measured::default());
        assert!(!report.failed());
        assert!(report.render().contains("\nResult: OK\n"));
    }
}
