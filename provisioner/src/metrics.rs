//! The provisioner's own metric families: the provisioning library's `controller_*` counters and
//! histograms, with upstream's names, HELP texts, labels and buckets (dashboards and alerts match
//! on them). They are registered in the one registry of [`csi_common::metrics::CsiMetrics`], next
//! to `csi_sidecar_operations_seconds` and the `workqueue_*` families of
//! [`csi_common::workqueue::metrics`].

use std::time::Duration;

use prometheus::core::Collector;
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

/// Registration failed: a family was registered twice (a programming error).
#[derive(Debug, thiserror::Error)]
#[error("cannot register provisioner metrics")]
pub(crate) struct Error(#[source] prometheus::Error);

/// Result type of this module.
pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

/// Prometheus' default buckets (client_golang `DefBuckets`), used by the lib's histograms.
const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The `controller_*` families of sig-storage-lib-external-provisioner.
#[derive(Clone, Debug)]
pub(crate) struct ControllerMetrics {
    provision_total: IntCounterVec,
    provision_failed_total: IntCounterVec,
    provision_duration: HistogramVec,
    delete_total: IntCounterVec,
    delete_failed_total: IntCounterVec,
    delete_duration: HistogramVec,
}

impl ControllerMetrics {
    /// Creates the families and registers them in `registry`.
    ///
    /// # Errors
    /// If a family of the same name is already registered.
    pub(crate) fn register(registry: &Registry) -> Result<Self> {
        let counter = |name: &str, help: &str, labels: &[&str]| {
            IntCounterVec::new(Opts::new(name, help), labels).map_err(Error)
        };
        let histogram = |name: &str, help: &str, labels: &[&str]| {
            HistogramVec::new(
                HistogramOpts::new(name, help).buckets(DEFAULT_BUCKETS.to_vec()),
                labels,
            )
            .map_err(Error)
        };
        let metrics = Self {
            provision_total: counter(
                "controller_persistentvolumeclaim_provision_total",
                "Total number of persistent volumes provisioned succesfully. Broken down by storage class name and source of the claim.",
                &["class", "source"],
            )?,
            provision_failed_total: counter(
                "controller_persistentvolumeclaim_provision_failed_total",
                "Total number of persistent volume provision failed attempts. Broken down by storage class name and source of the claim.",
                &["class", "source"],
            )?,
            provision_duration: histogram(
                "controller_persistentvolumeclaim_provision_duration_seconds",
                "Latency in seconds to provision persistent volumes. Failed provisioning attempts are ignored. Broken down by storage class name and source of the claim.",
                &["class", "source"],
            )?,
            delete_total: counter(
                "controller_persistentvolume_delete_total",
                "Total number of persistent volumes deleted succesfully. Broken down by storage class name.",
                &["class"],
            )?,
            delete_failed_total: counter(
                "controller_persistentvolume_delete_failed_total",
                "Total number of persistent volume delete failed attempts. Broken down by storage class name.",
                &["class"],
            )?,
            delete_duration: histogram(
                "controller_persistentvolume_delete_duration_seconds",
                "Latency in seconds to delete persistent volumes. Failed deletion attempts are ignored. Broken down by storage class name.",
                &["class"],
            )?,
        };
        for collector in [
            Box::new(metrics.provision_total.clone()) as Box<dyn Collector>,
            Box::new(metrics.provision_failed_total.clone()),
            Box::new(metrics.provision_duration.clone()),
            Box::new(metrics.delete_total.clone()),
            Box::new(metrics.delete_failed_total.clone()),
            Box::new(metrics.delete_duration.clone()),
        ] {
            registry.register(collector).map_err(Error)?;
        }
        Ok(metrics)
    }

    /// One successful provisioning attempt that took `elapsed`.
    pub(crate) fn provisioned(&self, class: &str, source: &str, elapsed: Duration) {
        self.provision_total
            .with_label_values(&[class, source])
            .inc();
        self.provision_duration
            .with_label_values(&[class, source])
            .observe(elapsed.as_secs_f64());
    }

    /// One failed provisioning attempt (upstream counts every attempt that returned an error).
    pub(crate) fn provision_failed(&self, class: &str, source: &str) {
        self.provision_failed_total
            .with_label_values(&[class, source])
            .inc();
    }

    /// One successful deletion that took `elapsed`.
    pub(crate) fn deleted(&self, class: &str, elapsed: Duration) {
        self.delete_total.with_label_values(&[class]).inc();
        self.delete_duration
            .with_label_values(&[class])
            .observe(elapsed.as_secs_f64());
    }

    /// One failed deletion attempt.
    pub(crate) fn delete_failed(&self, class: &str) {
        self.delete_failed_total.with_label_values(&[class]).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(registry: &Registry) -> String {
        csi_common::metrics::render(registry).unwrap()
    }

    #[test]
    fn controller_families_carry_upstream_names_help_and_labels() {
        let registry = Registry::new();
        let metrics = ControllerMetrics::register(&registry).unwrap();
        metrics.provisioned("fast", "", Duration::from_millis(20));
        metrics.provision_failed("fast", "");
        metrics.deleted("fast", Duration::from_millis(30));
        metrics.delete_failed("fast");
        let text = render(&registry);
        for line in [
            "# HELP controller_persistentvolumeclaim_provision_total Total number of persistent volumes provisioned succesfully. Broken down by storage class name and source of the claim.",
            "controller_persistentvolumeclaim_provision_total{class=\"fast\",source=\"\"} 1",
            "controller_persistentvolumeclaim_provision_failed_total{class=\"fast\",source=\"\"} 1",
            "controller_persistentvolumeclaim_provision_duration_seconds_bucket{class=\"fast\",source=\"\",le=\"0.025\"} 1",
            "controller_persistentvolumeclaim_provision_duration_seconds_bucket{class=\"fast\",source=\"\",le=\"0.01\"} 0",
            "# HELP controller_persistentvolume_delete_failed_total Total number of persistent volume delete failed attempts. Broken down by storage class name.",
            "controller_persistentvolume_delete_total{class=\"fast\"} 1",
            "controller_persistentvolume_delete_failed_total{class=\"fast\"} 1",
            "controller_persistentvolume_delete_duration_seconds_bucket{class=\"fast\",le=\"0.05\"} 1",
            "# TYPE controller_persistentvolume_delete_duration_seconds histogram",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }
}
