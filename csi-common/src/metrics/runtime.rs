//! `tokio_alive_tasks`: the number of tasks alive in the sidecar's Tokio runtime, read at every
//! scrape. An extra family, not one of upstream's: it stands in for Go's `go_goroutines`
//! (not served, see docs/compatibility.md), so that a task leak shows on `/metrics` as a
//! goroutine leak does on upstream's, and the reliability suite's churn mode (issue 14) can
//! check that the count returns to its level once the work queues drain.

use prometheus::core::{Collector, Desc};
use prometheus::proto::{Gauge, Metric, MetricFamily, MetricType};
use tokio::runtime::Handle;

/// Name of the alive-tasks gauge.
pub const ALIVE_TASKS_METRIC: &str = "tokio_alive_tasks";
const ALIVE_TASKS_HELP: &str = "Number of tasks alive in the Tokio runtime (spawned and not yet finished; the counterpart of go_goroutines).";

/// Reads [`tokio::runtime::RuntimeMetrics::num_alive_tasks`] of one runtime at every scrape:
/// a relaxed atomic load, so a scrape costs nothing the runtime would notice.
#[derive(Debug)]
pub(super) struct RuntimeCollector {
    handle: Handle,
    desc: Desc,
}

impl RuntimeCollector {
    pub(super) fn new(handle: Handle) -> prometheus::Result<Self> {
        let desc = Desc::new(
            ALIVE_TASKS_METRIC.to_owned(),
            ALIVE_TASKS_HELP.to_owned(),
            vec![],
            std::collections::HashMap::default(),
        )?;
        Ok(Self { handle, desc })
    }
}

impl Collector for RuntimeCollector {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        // usize -> f64 is exact for any task count a process can hold.
        #[allow(clippy::cast_precision_loss)]
        let alive = self.handle.metrics().num_alive_tasks() as f64;
        let mut gauge = Gauge::default();
        gauge.set_value(alive);
        let mut metric = Metric::default();
        metric.set_gauge(gauge);
        let mut family = MetricFamily::default();
        family.set_name(ALIVE_TASKS_METRIC.to_owned());
        family.set_help(ALIVE_TASKS_HELP.to_owned());
        family.set_field_type(MetricType::GAUGE);
        family.set_metric(vec![metric]);
        vec![family]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{CsiMetrics, ProcessMetrics};

    fn alive(metrics: &CsiMetrics) -> Option<u64> {
        let text = metrics.render().ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("tokio_alive_tasks "))?
            .parse()
            .ok()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_gauge_counts_a_spawned_task_until_it_finishes() {
        let metrics = CsiMetrics::new(ProcessMetrics::Full).unwrap();
        metrics.register_runtime(Handle::current()).unwrap();
        let before = alive(&metrics).unwrap();
        let (release, wait) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = wait.await;
        });
        assert_eq!(alive(&metrics), Some(before + 1));
        release.send(()).unwrap();
        task.await.unwrap();
        // The JoinHandle is woken when the output is stored; the worker that ran the task
        // releases it from the runtime's task list (and the count) a moment later, so the
        // count is awaited, not read once (read once, it failed a `.ci/run` with 1 left).
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while alive(&metrics) != Some(before) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert_eq!(alive(&metrics), Some(before));
        assert!(
            metrics
                .render()
                .unwrap()
                .contains("# TYPE tokio_alive_tasks gauge\n")
        );
    }
}
