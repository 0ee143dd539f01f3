//! component-base's `workqueue_*` families, one label `name` per queue, with upstream's names,
//! HELP texts and buckets (dashboards and alerts match on them).

use std::sync::{Arc, Mutex, PoisonError};

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{
    GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry,
};

/// Registration failed: a family was registered twice (a programming error).
#[derive(Debug, thiserror::Error)]
#[error("cannot register the workqueue metrics")]
pub struct Error(#[source] prometheus::Error);

/// Result type of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// component-base's workqueue buckets, `ExponentialBuckets(10e-9, 10, 10)`. They are computed
/// the same way (start, then times ten nine times), not written as literals: the products are
/// not all the nearest floats to powers of ten (the fourth is 9.999999999999999e-06), and the
/// bounds are the `le` label values dashboards select on.
fn workqueue_buckets() -> Result<Vec<f64>> {
    prometheus::exponential_buckets(10e-9, 10.0, 10).map_err(Error)
}

/// Reports (unfinished seconds, longest running seconds) of one queue at scrape time.
pub type ProcessingProbe = Arc<dyn Fn() -> (f64, f64) + Send + Sync>;

/// component-base's `workqueue_*` families, one label `name` per queue.
#[derive(Clone, Debug)]
pub struct WorkQueueMetrics {
    depth: IntGaugeVec,
    adds: IntCounterVec,
    queue_duration: HistogramVec,
    work_duration: HistogramVec,
    retries: IntCounterVec,
    processing: Arc<ProcessingCollector>,
}

impl WorkQueueMetrics {
    /// Creates the families and registers them in `registry`.
    ///
    /// # Errors
    /// If a family of the same name is already registered.
    pub fn register(registry: &Registry) -> Result<Self> {
        let buckets = workqueue_buckets()?;
        let metrics = Self {
            depth: IntGaugeVec::new(
                Opts::new("workqueue_depth", "[BETA] Current depth of workqueue"),
                &["name"],
            )
            .map_err(Error)?,
            adds: IntCounterVec::new(
                Opts::new(
                    "workqueue_adds_total",
                    "[BETA] Total number of adds handled by workqueue",
                ),
                &["name"],
            )
            .map_err(Error)?,
            queue_duration: HistogramVec::new(
                HistogramOpts::new(
                    "workqueue_queue_duration_seconds",
                    "[BETA] How long in seconds an item stays in workqueue before being requested.",
                )
                .buckets(buckets.clone()),
                &["name"],
            )
            .map_err(Error)?,
            work_duration: HistogramVec::new(
                HistogramOpts::new(
                    "workqueue_work_duration_seconds",
                    "[BETA] How long in seconds processing an item from workqueue takes.",
                )
                .buckets(buckets),
                &["name"],
            )
            .map_err(Error)?,
            retries: IntCounterVec::new(
                Opts::new(
                    "workqueue_retries_total",
                    "[BETA] Total number of retries handled by workqueue",
                ),
                &["name"],
            )
            .map_err(Error)?,
            processing: Arc::new(ProcessingCollector::new()?),
        };
        for collector in [
            Box::new(metrics.depth.clone()) as Box<dyn Collector>,
            Box::new(metrics.adds.clone()),
            Box::new(metrics.queue_duration.clone()),
            Box::new(metrics.work_duration.clone()),
            Box::new(metrics.retries.clone()),
            Box::new(SharedCollector(Arc::clone(&metrics.processing))),
        ] {
            registry.register(collector).map_err(Error)?;
        }
        Ok(metrics)
    }

    /// The series of one queue.
    pub fn queue(&self, name: &str) -> QueueMetrics {
        QueueMetrics {
            depth: self.depth.with_label_values(&[name]),
            adds: self.adds.with_label_values(&[name]),
            queue_duration: self.queue_duration.with_label_values(&[name]),
            work_duration: self.work_duration.with_label_values(&[name]),
            retries: self.retries.with_label_values(&[name]),
        }
    }

    /// Reports queue `name`'s in-progress gauges from `probe` at scrape time (client-go
    /// refreshes them every 500 ms; computing them when scraped needs no timer while idle).
    pub fn observe_processing(&self, name: &str, probe: ProcessingProbe) {
        self.processing.add(name, probe);
    }
}

/// The series of one named queue.
#[derive(Clone, Debug)]
pub struct QueueMetrics {
    /// `workqueue_depth`.
    pub depth: IntGauge,
    /// `workqueue_adds_total`.
    pub adds: IntCounter,
    /// `workqueue_queue_duration_seconds`.
    pub queue_duration: Histogram,
    /// `workqueue_work_duration_seconds`.
    pub work_duration: Histogram,
    /// `workqueue_retries_total`.
    pub retries: IntCounter,
}

impl QueueMetrics {
    /// Series that are not registered anywhere (unit tests of the queue).
    pub fn unregistered(name: &str) -> Self {
        let metrics = WorkQueueMetrics::register(&Registry::new())
            .unwrap_or_else(|_| unreachable!("a fresh registry has no families yet"));
        metrics.queue(name)
    }
}

/// `workqueue_unfinished_work_seconds` and `workqueue_longest_running_processor_seconds`,
/// computed from each queue's in-progress items when scraped.
struct ProcessingCollector {
    unfinished: GaugeVec,
    longest: GaugeVec,
    probes: Mutex<Vec<(String, ProcessingProbe)>>,
}

impl std::fmt::Debug for ProcessingCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessingCollector")
            .finish_non_exhaustive()
    }
}

impl ProcessingCollector {
    fn new() -> Result<Self> {
        Ok(Self {
            unfinished: GaugeVec::new(
                Opts::new(
                    "workqueue_unfinished_work_seconds",
                    "[BETA] How many seconds of work has done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases.",
                ),
                &["name"],
            )
            .map_err(Error)?,
            longest: GaugeVec::new(
                Opts::new(
                    "workqueue_longest_running_processor_seconds",
                    "[BETA] How many seconds has the longest running processor for workqueue been running.",
                ),
                &["name"],
            )
            .map_err(Error)?,
            probes: Mutex::new(Vec::new()),
        })
    }

    fn add(&self, name: &str, probe: ProcessingProbe) {
        self.unfinished.with_label_values(&[name]).set(0.0);
        self.longest.with_label_values(&[name]).set(0.0);
        self.probes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((name.to_owned(), probe));
    }
}

/// Registers the shared collector (the registry wants an owned box).
struct SharedCollector(Arc<ProcessingCollector>);

impl Collector for SharedCollector {
    fn desc(&self) -> Vec<&Desc> {
        let mut descs = self.0.unfinished.desc();
        descs.extend(self.0.longest.desc());
        descs
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let probes = self
            .0
            .probes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for (name, probe) in probes {
            let (unfinished, longest) = probe();
            self.0
                .unfinished
                .with_label_values(&[&name])
                .set(unfinished);
            self.0.longest.with_label_values(&[&name]).set(longest);
        }
        let mut families = self.0.unfinished.collect();
        families.extend(self.0.longest.collect());
        families
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(registry: &Registry) -> String {
        crate::metrics::render(registry).unwrap()
    }

    #[test]
    fn workqueue_bucket_bounds_are_the_floats_upstream_emits() {
        let registry = Registry::new();
        let metrics = WorkQueueMetrics::register(&registry).unwrap();
        metrics.queue("claims").work_duration.observe(0.5);
        let text = render(&registry);
        let bounds: Vec<&str> = text
            .lines()
            .filter_map(|l| {
                l.strip_prefix("workqueue_work_duration_seconds_bucket{name=\"claims\",le=\"")?
                    .split_once('"')
                    .map(|(le, _)| le)
            })
            .collect();
        // Upstream csi-provisioner's scrape (shared/fixtures/metrics): component-base computes
        // ExponentialBuckets(10e-9, 10, 10) by repeated multiplication, so two bounds are not
        // the decimal powers of ten, and those strings are the `le` label values.
        assert_eq!(
            bounds,
            [
                "1e-08",
                "1e-07",
                "1e-06",
                "9.999999999999999e-06",
                "9.999999999999999e-05",
                "0.001",
                "0.01",
                "0.1",
                "1",
                "10",
                "+Inf"
            ]
        );
    }

    #[test]
    fn workqueue_families_report_per_queue_series_and_scrape_time_gauges() {
        let registry = Registry::new();
        let metrics = WorkQueueMetrics::register(&registry).unwrap();
        let claims = metrics.queue("claims");
        metrics.observe_processing("claims", Arc::new(|| (3.5, 2.0)));
        let _volumes = metrics.queue("volumes");
        metrics.observe_processing("volumes", Arc::new(|| (0.0, 0.0)));
        claims.adds.inc();
        claims.depth.set(4);
        claims.retries.inc();
        claims.queue_duration.observe(0.5);
        let text = render(&registry);
        for line in [
            "# HELP workqueue_depth [BETA] Current depth of workqueue",
            "workqueue_depth{name=\"claims\"} 4",
            "workqueue_depth{name=\"volumes\"} 0",
            "workqueue_adds_total{name=\"claims\"} 1",
            "workqueue_retries_total{name=\"claims\"} 1",
            "workqueue_queue_duration_seconds_bucket{name=\"claims\",le=\"1\"} 1",
            "workqueue_queue_duration_seconds_bucket{name=\"claims\",le=\"1e-08\"} 0",
            "workqueue_unfinished_work_seconds{name=\"claims\"} 3.5",
            "workqueue_longest_running_processor_seconds{name=\"claims\"} 2",
            "workqueue_longest_running_processor_seconds{name=\"volumes\"} 0",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }
}
