//! The burst phase every bench mode has: one API call per object at once (as a
//! controller-manager or a user script sends them), a watch until each object shows the
//! outcome, then what that cost the sidecar.

use std::future::Future;
use std::time::Duration;

use testbed_cluster::apiserver::ApiServer;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::procfs::CpuSample;
use crate::stats::Phase;
use crate::{calls, requests, stats, watch};

/// Where and how big a burst is.
pub(crate) struct Burst<'a> {
    pub(crate) server: &'a ApiServer,
    /// The sidecar's process.
    pub(crate) pid: u32,
    /// Objects in the burst.
    pub(crate) count: usize,
    /// Longest wait for the outcomes.
    pub(crate) timeout: Duration,
    /// Wait after the last outcome before CPU and requests are read (a sidecar writes its
    /// events after the status the watch shows).
    pub(crate) settle: Duration,
}

impl Burst<'_> {
    /// Runs `call(i)` for every object at once (the bench's own request: `verb` on
    /// `resource`, subtracted from the counts), then reads `seen` until `pick` has named each
    /// object (or the timeout); then, after the settle time, the phase's CPU and API requests.
    pub(crate) async fn run<E, F, Fut>(
        &self,
        seen: &mut mpsc::UnboundedReceiver<watch::Seen<E>>,
        (verb, resource): (&str, &str),
        call: F,
        pick: impl FnMut(E) -> Option<(String, Instant)>,
    ) -> anyhow::Result<Phase>
    where
        F: Fn(usize) -> Fut,
        Fut: Future<Output = anyhow::Result<String>>,
    {
        let requests_before = self.server.requests().snapshot();
        let cpu_before = CpuSample::take(self.pid)?;
        let started = Instant::now();
        let called = calls::at_once(self.count, call).await?;
        let done = watch::collect(seen, self.count, started + self.timeout, pick).await?;
        let latencies = stats::latencies(&called, &done);
        let wall = done.values().max().map(|last| last.duration_since(started));
        tokio::time::sleep(self.settle).await;
        let cpu = cpu_before.until(CpuSample::take(self.pid)?);
        let own = requests::own(verb, resource, called.len());
        let requests =
            requests::sent_by_others(&requests_before, &self.server.requests().snapshot(), &own);
        Ok(Phase {
            latencies,
            wall,
            cpu: Some(cpu),
            requests: Some(requests),
        })
    }
}
