//! CSI call metrics: the `csi_sidecar_operations_seconds` histogram and the process metrics
//! upstream sidecars expose, in one registry per process (no global registry).
//!
//! Rust counterpart of csi-lib-utils `metrics.CSIMetricsManager`. Names, HELP texts, label names,
//! label values and buckets are copied from what the upstream binaries serve, because dashboards
//! and alerts match on them.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use prometheus::core::{Collector, Desc};
use prometheus::proto::{Counter, Gauge, Metric, MetricFamily, MetricType};
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts, Registry};

use crate::status;

mod runtime;
mod text;

pub use runtime::ALIVE_TASKS_METRIC;

/// Name of the CSI operations histogram.
pub const OPERATIONS_METRIC: &str = "csi_sidecar_operations_seconds";

/// `driver_name` label value used until the driver name is known (upstream's
/// `unknown-driver`; the GetPluginInfo call that learns the name is recorded with it).
pub const UNKNOWN_DRIVER: &str = "unknown-driver";

/// `grpc_status_code` label value for a failed call that carried no gRPC status.
pub const NON_GRPC_ERROR: &str = "unknown-non-grpc";

/// Histogram buckets of `csi_sidecar_operations_seconds`, in seconds (csi-lib-utils
/// `metrics.go`: CSI calls range from milliseconds to the ten-minute provisioning timeouts some
/// drivers use).
pub const OPERATION_BUCKETS: [f64; 13] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 25.0, 50.0, 120.0, 300.0, 600.0,
];

/// The Content-Type upstream's metrics handler answers with (Prometheus text format 0.0.4).
pub const TEXT_CONTENT_TYPE: &str =
    "text/plain; version=0.0.4; charset=utf-8; escaping=underscores";

// component-base prefixes the HELP text of ALPHA metrics with "[ALPHA] ".
const OPERATIONS_HELP: &str =
    "[ALPHA] Container Storage Interface operation duration with gRPC error code status total";
const START_TIME_HELP: &str = "[ALPHA] Start time of the process since unix epoch in seconds.";
// The Go process collector's own text.
const PLAIN_START_TIME_HELP: &str = "Start time of the process since unix epoch in seconds.";

/// Which process metrics a sidecar exposes.
///
/// Upstream livenessprobe only registers `process_start_time_seconds` (csi-lib-utils adds it to
/// its private registry); attacher, resizer and provisioner also serve Prometheus' Go process
/// collector (`process_cpu_seconds_total`, `process_open_fds`, ...). Go runtime (`go_*`) families
/// have no Rust equivalent and are not emulated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ProcessMetrics {
    /// Only `process_start_time_seconds` (livenessprobe).
    #[default]
    StartTimeOnly,
    /// The full `process_*` set of the Go process collector, with the start time under
    /// csi-lib-utils' `[ALPHA]` help, whose registry comes first in csi-attacher and
    /// csi-resizer.
    Full,
    /// The full set with the start time under the Go process collector's plain help: in
    /// csi-provisioner the default Prometheus registry comes first among the merged gatherers,
    /// and the first registry wins on a duplicate family.
    FullPlainStartTime,
}

/// Whether scrapes are counted, as client_golang's `promhttp.InstrumentMetricHandler` does for
/// csi-provisioner (the only sidecar that wraps its handler with it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ScrapeMetrics {
    /// No scrape metrics.
    #[default]
    Off,
    /// `promhttp_metric_handler_requests_total{code}` (a scrape counts once answered) and
    /// `promhttp_metric_handler_requests_in_flight` (the one being answered included).
    Promhttp,
}

/// Errors building the metrics registry.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A metric family could not be registered (a programming error: duplicate names).
    #[error("cannot register metric")]
    Register(#[source] prometheus::Error),
    /// The registry could not be rendered as text.
    #[error("cannot encode metrics")]
    Encode(#[source] prometheus::Error),
}

/// Result type of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The CSI metrics of one sidecar process: cheap to clone, shared by the gRPC layer that records
/// every call and the HTTP server that renders it.
#[derive(Clone, Debug)]
pub struct CsiMetrics {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    registry: Registry,
    operations: Arc<RwLock<Operations>>,
    driver_name: RwLock<String>,
    scrapes: Option<Scrapes>,
}

/// `csi_sidecar_operations_seconds`, with or without the `migrated` label.
#[derive(Debug)]
struct Operations {
    histogram: HistogramVec,
    migrated_label: bool,
}

impl Operations {
    fn new(migrated_label: bool) -> Result<Self> {
        let base = ["driver_name", "method_name", "grpc_status_code"];
        let labels: &[&str] = if migrated_label {
            &[
                "driver_name",
                "method_name",
                "grpc_status_code",
                MIGRATED_LABEL,
            ]
        } else {
            &base
        };
        let histogram = HistogramVec::new(
            HistogramOpts::new(OPERATIONS_METRIC, OPERATIONS_HELP)
                .buckets(OPERATION_BUCKETS.to_vec()),
            labels,
        )
        .map_err(Error::Register)?;
        Ok(Self {
            histogram,
            migrated_label,
        })
    }
}

/// What the registry holds for `csi_sidecar_operations_seconds`: the family as it is now,
/// with or without `migrated`. The registry refuses a second family of one name with other
/// labels even after the first is unregistered, so the switch happens behind this collector
/// (registered once, described by the family it started with).
struct OperationsCollector {
    operations: Arc<RwLock<Operations>>,
    desc: Vec<Desc>,
}

impl Collector for OperationsCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.desc.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.operations
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .histogram
            .collect()
    }
}

/// The label csi-lib-utils adds to the operations of a CSI-migration driver
/// (`metrics.LabelMigrated`, `WithMigration`).
const MIGRATED_LABEL: &str = "migrated";

/// Marks a CSI call as one about a translated in-tree volume: put into the `tonic::Request`'s
/// extensions, it makes the call's sample `migrated="true"` once [`CsiMetrics::label_migrated`]
/// is on (csi-lib-utils' `AdditionalInfo{Migrated: "true"}` in the call's context).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migrated;

/// promhttp's handler metrics.
#[derive(Debug)]
struct Scrapes {
    total: IntCounterVec,
    in_flight: IntGauge,
}

impl Scrapes {
    fn register(registry: &Registry) -> Result<Self> {
        let total = IntCounterVec::new(
            Opts::new(
                "promhttp_metric_handler_requests_total",
                "Total number of scrapes by HTTP status code.",
            ),
            &["code"],
        )
        .map_err(Error::Register)?;
        // promhttp creates these three series up front, so they are scraped as 0.
        for code in ["200", "500", "503"] {
            total.with_label_values(&[code]);
        }
        let in_flight = IntGauge::new(
            "promhttp_metric_handler_requests_in_flight",
            "Current number of scrapes being served.",
        )
        .map_err(Error::Register)?;
        registry
            .register(Box::new(total.clone()))
            .map_err(Error::Register)?;
        registry
            .register(Box::new(in_flight.clone()))
            .map_err(Error::Register)?;
        Ok(Self { total, in_flight })
    }
}

impl CsiMetrics {
    /// Builds a registry with `csi_sidecar_operations_seconds` and the chosen process metrics.
    ///
    /// # Errors
    /// Only if registration fails, which would be a programming error (duplicate families).
    pub fn new(process: ProcessMetrics) -> Result<Self> {
        Self::with_scrape_metrics(process, ScrapeMetrics::Off)
    }

    /// [`CsiMetrics::new`], plus the scrape metrics `scrapes` asks for.
    ///
    /// # Errors
    /// Only if registration fails, which would be a programming error (duplicate families).
    pub fn with_scrape_metrics(process: ProcessMetrics, scrapes: ScrapeMetrics) -> Result<Self> {
        let registry = Registry::new();
        let operations = Operations::new(false)?;
        let desc = operations.histogram.desc().into_iter().cloned().collect();
        let operations = Arc::new(RwLock::new(operations));
        registry
            .register(Box::new(OperationsCollector {
                operations: Arc::clone(&operations),
                desc,
            }))
            .map_err(Error::Register)?;
        registry
            .register(Box::new(ProcessCollector::new(process)))
            .map_err(Error::Register)?;
        let scrapes = match scrapes {
            ScrapeMetrics::Off => None,
            ScrapeMetrics::Promhttp => Some(Scrapes::register(&registry)?),
        };
        Ok(Self {
            inner: Arc::new(Inner {
                registry,
                operations,
                driver_name: RwLock::new(UNKNOWN_DRIVER.to_owned()),
                scrapes,
            }),
        })
    }

    /// Sets the `driver_name` label value for calls recorded from now on (csi-lib-utils
    /// `SetDriverName`, called once GetPluginInfo answered).
    pub fn set_driver_name(&self, name: &str) {
        // A poisoned lock only means a panic elsewhere while writing a String; the value is
        // still a whole String, so keep using it.
        let mut guard = self
            .inner
            .driver_name
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        name.clone_into(&mut guard);
    }

    /// The current `driver_name` label value.
    pub fn driver_name(&self) -> String {
        self.inner
            .driver_name
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Gives `csi_sidecar_operations_seconds` the `migrated` label, as upstream does for a
    /// CSI-migration driver (`csi_common::migration::is_migration_driver`): its `main` replaces
    /// the first metrics manager with one built `WithMigration`, so the samples recorded before
    /// (GetPluginInfo, the first Probe) are not served, and every later call carries
    /// `migrated`, `"true"` for a call marked [`Migrated`], else `"false"`. Idempotent.
    ///
    /// # Errors
    /// Only if the new family cannot be built (a programming error).
    pub fn label_migrated(&self) -> Result<()> {
        let mut operations = self
            .inner
            .operations
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if operations.migrated_label {
            return Ok(());
        }
        *operations = Operations::new(true)?;
        Ok(())
    }

    /// Records one finished CSI call.
    ///
    /// `method` is the full gRPC method (`/csi.v1.Identity/Probe`); `code` is the gRPC status the
    /// call ended with, or `None` for an error that carried no status (`unknown-non-grpc`);
    /// `migrated`: the call was marked [`Migrated`].
    pub fn record_operation(
        &self,
        method: &str,
        code: Option<tonic::Code>,
        elapsed: Duration,
        migrated: bool,
    ) {
        let code = code.map_or(NON_GRPC_ERROR, status::code_name);
        let driver = self.driver_name();
        let operations = self
            .inner
            .operations
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let migrated = if migrated { "true" } else { "false" };
        let labels = [driver.as_str(), method, code, migrated];
        let labels = if operations.migrated_label {
            &labels[..]
        } else {
            &labels[..3]
        };
        operations
            .histogram
            .with_label_values(labels)
            .observe(elapsed.as_secs_f64());
    }

    /// Adds [`ALIVE_TASKS_METRIC`], the alive tasks of the runtime `handle` names (an extra
    /// family, upstream has none: the counterpart of Go's `go_goroutines`). The controller
    /// sidecars register it at start-up.
    ///
    /// # Errors
    /// Only if it is registered twice (a programming error).
    pub fn register_runtime(&self, handle: tokio::runtime::Handle) -> Result<()> {
        let collector = runtime::RuntimeCollector::new(handle).map_err(Error::Register)?;
        self.inner
            .registry
            .register(Box::new(collector))
            .map_err(Error::Register)
    }

    /// The registry, for sidecars that add families of their own (controller, workqueue,
    /// leader-election metrics).
    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// Renders every family in the Prometheus text format upstream serves.
    ///
    /// # Errors
    /// If a family cannot be encoded (a programming error, e.g. an invalid label value).
    pub fn render(&self) -> Result<String> {
        render(&self.inner.registry)
    }

    /// Renders for one HTTP scrape: [`CsiMetrics::render`], counted in the scrape metrics when
    /// they are on.
    ///
    /// # Errors
    /// As [`CsiMetrics::render`]; such a scrape counts as a 500.
    pub fn scrape(&self) -> Result<String> {
        let Some(scrapes) = &self.inner.scrapes else {
            return self.render();
        };
        scrapes.in_flight.inc();
        let rendered = self.render();
        scrapes.in_flight.dec();
        let code = if rendered.is_ok() { "200" } else { "500" };
        scrapes.total.with_label_values(&[code]).inc();
        rendered
    }
}

/// Renders every family of `registry` in the Prometheus text format upstream serves, numbers
/// and bucket bounds written as Go writes them (`le="1e-05"`, `1.79527530232e+09`).
///
/// # Errors
/// None today: the `Result` keeps callers ready for an encoder that can fail.
pub fn render(registry: &Registry) -> Result<String> {
    Ok(text::encode(&registry.gather()))
}

/// Reads the process metrics from procfs at every scrape, like Prometheus' Go process collector.
#[derive(Debug)]
struct ProcessCollector {
    which: ProcessMetrics,
    descs: Vec<Desc>,
}

/// (name, help, type) of every family the Go process collector serves, in its order.
const PROCESS_FAMILIES: [(&str, &str, MetricType); 9] = [
    (
        "process_cpu_seconds_total",
        "Total user and system CPU time spent in seconds.",
        MetricType::COUNTER,
    ),
    (
        "process_max_fds",
        "Maximum number of open file descriptors.",
        MetricType::GAUGE,
    ),
    (
        "process_network_receive_bytes_total",
        "Number of bytes received by the process over the network.",
        MetricType::COUNTER,
    ),
    (
        "process_network_transmit_bytes_total",
        "Number of bytes sent by the process over the network.",
        MetricType::COUNTER,
    ),
    (
        "process_open_fds",
        "Number of open file descriptors.",
        MetricType::GAUGE,
    ),
    (
        "process_resident_memory_bytes",
        "Resident memory size in bytes.",
        MetricType::GAUGE,
    ),
    // The help depends on which registry upstream gathers first (see `ProcessMetrics`);
    // `ProcessCollector::help` picks it.
    (
        "process_start_time_seconds",
        START_TIME_HELP,
        MetricType::GAUGE,
    ),
    (
        "process_virtual_memory_bytes",
        "Virtual memory size in bytes.",
        MetricType::GAUGE,
    ),
    (
        "process_virtual_memory_max_bytes",
        "Maximum amount of virtual memory available in bytes.",
        MetricType::GAUGE,
    ),
];

impl ProcessCollector {
    fn new(which: ProcessMetrics) -> Self {
        let descs = Self::families(which)
            .filter_map(|(name, help, _)| {
                Desc::new(
                    (*name).to_owned(),
                    Self::help(which, name, help).to_owned(),
                    vec![],
                    std::collections::HashMap::default(),
                )
                .ok()
            })
            .collect();
        Self { which, descs }
    }

    fn help(which: ProcessMetrics, name: &str, help: &'static str) -> &'static str {
        if which == ProcessMetrics::FullPlainStartTime && name == "process_start_time_seconds" {
            PLAIN_START_TIME_HELP
        } else {
            help
        }
    }

    fn families(
        which: ProcessMetrics,
    ) -> impl Iterator<Item = &'static (&'static str, &'static str, MetricType)> {
        PROCESS_FAMILIES.iter().filter(move |(name, _, _)| {
            which != ProcessMetrics::StartTimeOnly || *name == "process_start_time_seconds"
        })
    }
}

impl Collector for ProcessCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let sample = procfs::sample();
        Self::families(self.which)
            .filter_map(|(name, help, kind)| {
                let value = sample.value(name)?;
                let mut metric = Metric::default();
                if *kind == MetricType::COUNTER {
                    let mut counter = Counter::default();
                    counter.set_value(value);
                    metric.set_counter(counter);
                } else {
                    let mut gauge = Gauge::default();
                    gauge.set_value(value);
                    metric.set_gauge(gauge);
                }
                let mut family = MetricFamily::default();
                family.set_name((*name).to_owned());
                family.set_help(Self::help(self.which, name, help).to_owned());
                family.set_field_type(*kind);
                family.set_metric(vec![metric]);
                Some(family)
            })
            .collect()
    }
}

/// Minimal procfs readers. Each value is optional: a family whose source cannot be read is left
/// out of the scrape rather than reported as zero.
pub(crate) mod procfs {
    use std::fs;

    /// Linux reports CPU times in USER_HZ ticks, fixed at 100 on every architecture Kubernetes
    /// nodes run (it is part of the kernel ABI, independent of CONFIG_HZ).
    const USER_HZ: f64 = 100.0;

    #[derive(Debug, Default)]
    pub(super) struct Sample {
        cpu_seconds: Option<f64>,
        max_fds: Option<f64>,
        net_rx: Option<f64>,
        net_tx: Option<f64>,
        open_fds: Option<f64>,
        rss_bytes: Option<f64>,
        start_time: Option<f64>,
        vsize: Option<f64>,
        vsize_max: Option<f64>,
    }

    impl Sample {
        pub(super) fn value(&self, name: &str) -> Option<f64> {
            match name {
                "process_cpu_seconds_total" => self.cpu_seconds,
                "process_max_fds" => self.max_fds,
                "process_network_receive_bytes_total" => self.net_rx,
                "process_network_transmit_bytes_total" => self.net_tx,
                "process_open_fds" => self.open_fds,
                "process_resident_memory_bytes" => self.rss_bytes,
                "process_start_time_seconds" => self.start_time,
                "process_virtual_memory_bytes" => self.vsize,
                "process_virtual_memory_max_bytes" => self.vsize_max,
                _ => None,
            }
        }
    }

    pub(super) fn sample() -> Sample {
        let mut sample = Sample::default();
        if let Ok(stat) = fs::read_to_string("/proc/self/stat") {
            let fields = stat_fields(&stat);
            let field = |n: usize| fields.get(n).and_then(|f| f.parse::<f64>().ok());
            // Field numbers from proc(5), counted from 1 with comm as field 2.
            if let (Some(utime), Some(stime)) = (field(14), field(15)) {
                sample.cpu_seconds = Some((utime + stime) / USER_HZ);
            }
            sample.vsize = field(23);
            let boot_time = fs::read_to_string("/proc/stat")
                .ok()
                .and_then(|s| parse_boot_time(&s));
            if let (Some(start_ticks), Some(btime)) = (field(22), boot_time) {
                sample.start_time = Some(btime + start_ticks / USER_HZ);
            }
        }
        if let Ok(status) = fs::read_to_string("/proc/self/status") {
            sample.rss_bytes = parse_status_kib(&status, "VmRSS:").map(|kib: f64| kib * 1024.0);
        }
        if let Ok(limits) = fs::read_to_string("/proc/self/limits") {
            sample.max_fds = parse_limit(&limits, "Max open files");
            sample.vsize_max = parse_limit(&limits, "Max address space");
        }
        if let Ok(entries) = fs::read_dir("/proc/self/fd") {
            // usize -> f64 is exact for any realistic descriptor count.
            #[allow(clippy::cast_precision_loss)]
            let count = entries.count() as f64;
            sample.open_fds = Some(count);
        }
        if let Ok(dev) = fs::read_to_string("/proc/self/net/dev") {
            (sample.net_rx, sample.net_tx) = parse_net_dev(&dev);
        }
        sample
    }

    /// Splits /proc/self/stat into 1-based fields; the command name (field 2) may contain spaces
    /// and parentheses, so everything up to the last ')' is one field.
    pub(super) fn stat_fields(stat: &str) -> Vec<&str> {
        let mut fields = vec![""];
        if let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) {
            fields.push(stat[..open].trim());
            fields.push(&stat[open + 1..close]);
            fields.extend(stat[close + 1..].split_whitespace());
        }
        // Shift so that index n is field n (pid is field 1).
        fields.remove(0);
        fields.insert(0, "");
        fields
    }

    pub(super) fn parse_boot_time(stat: &str) -> Option<f64> {
        stat.lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse().ok())
    }

    /// The number of a /proc/PID/status row such as `VmRSS:` (the file gives it in kB, KiB).
    pub(crate) fn parse_status_kib<T: std::str::FromStr>(status: &str, key: &str) -> Option<T> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    }

    /// The soft limit of one /proc/self/limits row; "unlimited" is reported as u64::MAX, which
    /// is what Go's procfs (and so the upstream scrape: 1.8446744073709552e+19) reports.
    pub(super) fn parse_limit(limits: &str, row: &str) -> Option<f64> {
        let rest = limits.lines().find_map(|l| l.strip_prefix(row))?;
        let soft = rest.split_whitespace().next()?;
        if soft == "unlimited" {
            #[allow(clippy::cast_precision_loss)]
            return Some(u64::MAX as f64);
        }
        soft.parse().ok()
    }

    /// Sums received and transmitted bytes over every interface of the process' network
    /// namespace, as Go's procfs `NetDev.Total` does.
    pub(super) fn parse_net_dev(dev: &str) -> (Option<f64>, Option<f64>) {
        let mut rx = 0.0;
        let mut tx = 0.0;
        let mut any = false;
        for line in dev.lines().skip(2) {
            let Some((_, counters)) = line.split_once(':') else {
                continue;
            };
            let cols: Vec<f64> = counters
                .split_whitespace()
                .filter_map(|c| c.parse().ok())
                .collect();
            if let (Some(r), Some(t)) = (cols.first(), cols.get(8)) {
                rx += r;
                tx += t;
                any = true;
            }
        }
        if any {
            (Some(rx), Some(tx))
        } else {
            (None, None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines of the rendered text that belong to one family, with sample values removed so the
    /// comparison pins names, labels and buckets but not timings.
    fn shape(text: &str, family: &str) -> Vec<String> {
        text.lines()
            .filter(|l| {
                l.starts_with(family)
                    || l.starts_with(&format!("# HELP {family} "))
                    || l.starts_with(&format!("# TYPE {family} "))
            })
            .map(|l| {
                if l.starts_with('#') {
                    l.to_owned()
                } else {
                    l.rsplit_once(' ')
                        .map_or(l, |(series, _)| series)
                        .to_owned()
                }
            })
            .collect()
    }

    #[test]
    fn operations_histogram_matches_upstream_names_labels_and_buckets() {
        let metrics = CsiMetrics::new(ProcessMetrics::StartTimeOnly).unwrap();
        metrics.record_operation(
            "/csi.v1.Identity/GetPluginInfo",
            Some(tonic::Code::Ok),
            Duration::from_millis(4),
            false,
        );
        metrics.set_driver_name("hostpath.csi.k8s.io");
        metrics.record_operation(
            "/csi.v1.Identity/Probe",
            Some(tonic::Code::DeadlineExceeded),
            Duration::from_secs(3),
            false,
        );
        let text = metrics.render().unwrap();

        // Captured from upstream livenessprobe v2.19.0 (shared/fixtures/metrics), values cut.
        let mut expected = vec![
            "# HELP csi_sidecar_operations_seconds [ALPHA] Container Storage Interface operation duration with gRPC error code status total".to_owned(),
            "# TYPE csi_sidecar_operations_seconds histogram".to_owned(),
        ];
        for (driver, code, method) in [
            (
                "hostpath.csi.k8s.io",
                "DeadlineExceeded",
                "/csi.v1.Identity/Probe",
            ),
            ("unknown-driver", "OK", "/csi.v1.Identity/GetPluginInfo"),
        ] {
            let labels = format!(
                "driver_name=\"{driver}\",grpc_status_code=\"{code}\",method_name=\"{method}\""
            );
            for le in [
                "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "15", "25", "50", "120", "300", "600",
                "+Inf",
            ] {
                expected.push(format!(
                    "csi_sidecar_operations_seconds_bucket{{{labels},le=\"{le}\"}}"
                ));
            }
            expected.push(format!("csi_sidecar_operations_seconds_sum{{{labels}}}"));
            expected.push(format!("csi_sidecar_operations_seconds_count{{{labels}}}"));
        }
        assert_eq!(shape(&text, "csi_sidecar_operations_seconds"), expected);
        assert!(text.contains(
            "csi_sidecar_operations_seconds_count{driver_name=\"hostpath.csi.k8s.io\",grpc_status_code=\"DeadlineExceeded\",method_name=\"/csi.v1.Identity/Probe\"} 1"
        ));
        assert!(text.contains(
            "csi_sidecar_operations_seconds_bucket{driver_name=\"hostpath.csi.k8s.io\",grpc_status_code=\"DeadlineExceeded\",method_name=\"/csi.v1.Identity/Probe\",le=\"2.5\"} 0"
        ));
    }

    #[test]
    fn a_call_without_grpc_status_is_labelled_unknown_non_grpc() {
        let metrics = CsiMetrics::new(ProcessMetrics::StartTimeOnly).unwrap();
        metrics.record_operation(
            "/csi.v1.Identity/Probe",
            None,
            Duration::from_millis(1),
            false,
        );
        let text = metrics.render().unwrap();
        assert!(
            text.contains("grpc_status_code=\"unknown-non-grpc\""),
            "{text}"
        );
    }

    #[test]
    fn a_migration_drivers_operations_carry_migrated_and_drop_the_samples_before() {
        let metrics = CsiMetrics::new(ProcessMetrics::StartTimeOnly).unwrap();
        let ok = Some(tonic::Code::Ok);
        let ms = Duration::from_millis(1);
        metrics.record_operation("/csi.v1.Identity/GetPluginInfo", ok, ms, false);
        metrics.set_driver_name("ebs.csi.aws.com");
        metrics.label_migrated().unwrap();
        metrics.label_migrated().unwrap();
        metrics.record_operation("/csi.v1.Identity/Probe", ok, ms, false);
        let publish = "/csi.v1.Controller/ControllerPublishVolume";
        metrics.record_operation(publish, ok, ms, true);
        metrics.record_operation(publish, ok, ms, false);
        let counts: Vec<String> = metrics
            .render()
            .unwrap()
            .lines()
            .filter(|l| l.starts_with("csi_sidecar_operations_seconds_count"))
            .map(str::to_owned)
            .collect();
        let series = |method: &str, migrated: &str| {
            format!(
                "csi_sidecar_operations_seconds_count{{driver_name=\"ebs.csi.aws.com\",grpc_status_code=\"OK\",method_name=\"{method}\",migrated=\"{migrated}\"}} 1"
            )
        };
        // Labels in alphabetical order, as csi-lib-utils serves them; GetPluginInfo's sample
        // went with the first family, as upstream's went with its first metrics manager.
        assert_eq!(
            counts,
            [
                series(publish, "false"),
                series(publish, "true"),
                series("/csi.v1.Identity/Probe", "false"),
            ]
        );
    }

    #[test]
    fn livenessprobe_registry_has_only_start_time_besides_operations() {
        let metrics = CsiMetrics::new(ProcessMetrics::StartTimeOnly).unwrap();
        let text = metrics.render().unwrap();
        let families: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .collect();
        assert_eq!(families, ["process_start_time_seconds gauge"]);
        assert!(text.contains(
            "# HELP process_start_time_seconds [ALPHA] Start time of the process since unix epoch in seconds."
        ));
        let value: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("process_start_time_seconds "))
            .unwrap()
            .parse()
            .unwrap();
        // Started after 2020 and not in the future by more than a day: a real epoch timestamp.
        assert!(value > 1.6e9, "{value}");
    }

    #[test]
    fn full_process_metrics_have_the_go_collector_names_help_and_types() {
        let metrics = CsiMetrics::new(ProcessMetrics::Full).unwrap();
        let text = metrics.render().unwrap();
        let expected = [
            "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.",
            "# TYPE process_cpu_seconds_total counter",
            "# HELP process_max_fds Maximum number of open file descriptors.",
            "# TYPE process_max_fds gauge",
            "# HELP process_network_receive_bytes_total Number of bytes received by the process over the network.",
            "# TYPE process_network_receive_bytes_total counter",
            "# HELP process_network_transmit_bytes_total Number of bytes sent by the process over the network.",
            "# TYPE process_network_transmit_bytes_total counter",
            "# HELP process_open_fds Number of open file descriptors.",
            "# TYPE process_open_fds gauge",
            "# HELP process_resident_memory_bytes Resident memory size in bytes.",
            "# TYPE process_resident_memory_bytes gauge",
            "# HELP process_start_time_seconds [ALPHA] Start time of the process since unix epoch in seconds.",
            "# TYPE process_start_time_seconds gauge",
            "# HELP process_virtual_memory_bytes Virtual memory size in bytes.",
            "# TYPE process_virtual_memory_bytes gauge",
            "# HELP process_virtual_memory_max_bytes Maximum amount of virtual memory available in bytes.",
            "# TYPE process_virtual_memory_max_bytes gauge",
        ];
        let comments: Vec<&str> = text.lines().filter(|l| l.starts_with('#')).collect();
        assert_eq!(comments, expected);
        let rss: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("process_resident_memory_bytes "))
            .unwrap()
            .parse()
            .unwrap();
        assert!(rss > 0.0);
    }

    #[test]
    fn the_provisioners_start_time_has_the_plain_help() {
        let text = CsiMetrics::new(ProcessMetrics::FullPlainStartTime)
            .unwrap()
            .render()
            .unwrap();
        assert!(text.contains(
            "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n"
        ));
        assert_eq!(text.matches("# TYPE process_").count(), 9, "{text}");
    }

    #[test]
    fn promhttp_counts_answered_scrapes_and_the_one_in_flight() {
        let metrics =
            CsiMetrics::with_scrape_metrics(ProcessMetrics::StartTimeOnly, ScrapeMetrics::Promhttp)
                .unwrap();
        let first = metrics.scrape().unwrap();
        for line in [
            "# HELP promhttp_metric_handler_requests_in_flight Current number of scrapes being served.",
            "# TYPE promhttp_metric_handler_requests_in_flight gauge",
            "promhttp_metric_handler_requests_in_flight 1",
            "# HELP promhttp_metric_handler_requests_total Total number of scrapes by HTTP status code.",
            "# TYPE promhttp_metric_handler_requests_total counter",
            "promhttp_metric_handler_requests_total{code=\"200\"} 0",
            "promhttp_metric_handler_requests_total{code=\"500\"} 0",
            "promhttp_metric_handler_requests_total{code=\"503\"} 0",
        ] {
            assert!(first.lines().any(|l| l == line), "{line:?} in\n{first}");
        }
        let second = metrics.scrape().unwrap();
        assert!(second.contains("promhttp_metric_handler_requests_total{code=\"200\"} 1\n"));
        let off = CsiMetrics::new(ProcessMetrics::StartTimeOnly).unwrap();
        assert!(!off.scrape().unwrap().contains("promhttp"));
    }

    #[test]
    fn procfs_parsers_read_the_kernel_formats() {
        let stat = "42 (my (odd) cmd) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 4 0 1000 123456 789";
        let fields = procfs::stat_fields(stat);
        assert_eq!(fields[1], "42");
        assert_eq!(fields[2], "my (odd) cmd");
        assert_eq!(fields[3], "S");
        assert_eq!(fields[14], "250");
        assert_eq!(fields[15], "50");
        assert_eq!(fields[22], "1000");
        assert_eq!(fields[23], "123456");

        assert_eq!(
            procfs::parse_boot_time("cpu 1 2\nbtime 1700000000\n"),
            Some(1.7e9)
        );
        assert_eq!(
            procfs::parse_status_kib("Name:\tx\nVmRSS:\t  2048 kB\n", "VmRSS:"),
            Some(2048.0)
        );
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            20000                20000                files\n\
                      Max address space         unlimited            unlimited            bytes\n";
        assert_eq!(procfs::parse_limit(limits, "Max open files"), Some(20000.0));
        #[allow(clippy::cast_precision_loss)]
        let max = u64::MAX as f64;
        assert_eq!(procfs::parse_limit(limits, "Max address space"), Some(max));
        let dev = "Inter-|   Receive                                                |  Transmit\n \
                   face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
                   lo:  100 1 0 0 0 0 0 0  100 1 0 0 0 0 0 0\n  \
                   eth0: 5000 9 0 0 0 0 0 0 700 4 0 0 0 0 0 0\n";
        assert_eq!(procfs::parse_net_dev(dev), (Some(5100.0), Some(800.0)));
    }
}
