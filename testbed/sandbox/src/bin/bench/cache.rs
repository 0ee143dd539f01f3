//! The cache-load phase every bench mode has: objects stored straight into the API server
//! until the sidecar has synced them all, then what that cost the sidecar.

use std::future::Future;
use std::time::Duration;

use testbed_cluster::apiserver::ApiServer;
use tokio::time::Instant;

use crate::procfs::{CpuSample, rss_kib};
use crate::requests::{self, Counts};

/// What loading the cache cost.
#[derive(Debug, Clone)]
pub(crate) struct CacheLoad {
    /// From the first object stored to the sidecar having queued and synced every one.
    pub(crate) wall: Duration,
    /// CPU over the load and the settle time after it.
    pub(crate) cpu: CpuSample,
    /// The sidecar's API requests over the same window (the store writes are not requests).
    pub(crate) requests: Counts,
    /// RSS the settle time after the load.
    pub(crate) rss_kib: u64,
}

/// Runs `load` (store the objects, wait until the sidecar synced them), waits `settle`, and
/// measures it.
pub(crate) async fn measure(
    server: &ApiServer,
    pid: u32,
    settle: Duration,
    load: impl Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<CacheLoad> {
    let requests_before = server.requests().snapshot();
    let cpu_before = CpuSample::take(pid)?;
    let started = Instant::now();
    load.await?;
    let wall = started.elapsed();
    tokio::time::sleep(settle).await;
    Ok(CacheLoad {
        wall,
        cpu: cpu_before.until(CpuSample::take(pid)?),
        requests: requests::sent_by_others(
            &requests_before,
            &server.requests().snapshot(),
            &Counts::new(),
        ),
        rss_kib: rss_kib(pid)?,
    })
}

#[cfg(test)]
impl CacheLoad {
    /// A load of 250 ms, 30 ms sidecar CPU, no requests and 20 MiB RSS, for report tests.
    pub(crate) fn sample() -> Self {
        Self {
            wall: Duration::from_millis(250),
            cpu: CpuSample {
                sidecar: Duration::from_millis(30),
                bench: Duration::from_millis(90),
            },
            requests: Counts::new(),
            rss_kib: 20480,
        }
    }
}
