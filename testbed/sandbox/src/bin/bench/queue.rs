//! A sidecar's work queue, read from its `/metrics`: how the bench knows that the sidecar has
//! seen and synced every object it stored (the `workqueue_*` families, upstream's names).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context as _, bail};
use testbed_support::http_client;
use tokio::time::Instant;

/// `workqueue_adds_total` of work queue `queue` so far.
pub(crate) async fn adds(http: SocketAddr, queue: &str) -> anyhow::Result<f64> {
    queue_metric(http, queue, "workqueue_adds_total").await
}

/// A sum of one metric family's samples on work queue `queue`, scraped from the sidecar.
async fn queue_metric(http: SocketAddr, queue: &str, name: &str) -> anyhow::Result<f64> {
    let metrics = http_client::get(http, "/metrics", Duration::from_secs(5))
        .await
        .context("cannot scrape the sidecar's /metrics")?;
    Ok(
        testbed_sandbox::flows::metric_value(&metrics.body, name, &[("name", queue)])
            .unwrap_or(0.0),
    )
}

/// Waits until work queue `queue` has had `added` more adds than `adds_before` and is empty
/// again: the sidecar has seen and synced every stored object.
pub(crate) async fn wait_drained(
    http: SocketAddr,
    queue: &str,
    adds_before: f64,
    added: usize,
    timeout: Duration,
) -> anyhow::Result<()> {
    #[allow(
        clippy::cast_precision_loss,
        reason = "an object count is far below 2^52"
    )]
    let want = adds_before + added as f64;
    let deadline = Instant::now() + timeout;
    loop {
        let adds = queue_metric(http, queue, "workqueue_adds_total").await?;
        if adds >= want && queue_metric(http, queue, "workqueue_depth").await? == 0.0 {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("work queue {queue} saw {adds} adds of {want} within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
