//! Concurrent health requests share one check.
//!
//! Upstream's `/healthz` handlers check once per request with no limit: livenessprobe dials the
//! driver and calls Probe, node-driver-registrar dials its own registration socket and calls
//! GetInfo. A burst of requests (several probes of several kubelets or monitors, or a slow
//! driver while requests keep coming, vsphere-csi-driver #2997) opens one connection per
//! request. The reliability suite's floods found it (docs/reliability.md, "Node sidecars"):
//! 2,000 requests at once held about 2,600 descriptors in livenessprobe and most answered 500
//! because their own connects starved each other past `--probe-timeout`; the registrar answered
//! 500 `DeadlineExceeded` to up to 30 % of 2,000 at once and held 106 MiB afterwards.
//!
//! Here a request that arrives while a check is running waits for that check's verdict instead
//! of starting its own. The verdict is still fresh: a check is joined only within its own
//! budget (the check's timeout since it started), so no answer reports a state older than one
//! timeout, and each check still dials afresh (livenessprobe #68). A request that finds no
//! running check, or one past its budget, starts a new one: kubelet, which probes one at a time,
//! sees exactly upstream's behaviour.
//!
//! The check runs as its own task, so a request that goes away (its client disconnected) does
//! not stall the others; the task ends by the check's own deadline.

use std::future::Future;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// Whether a request arriving at `now` joins the check that started at `started`: only while
/// that check is running and within its `budget`.
fn joins(started: Instant, done: bool, now: Instant, budget: Duration) -> bool {
    !done && now.saturating_duration_since(started) < budget
}

/// The check in flight, if any, and where its verdict appears.
#[derive(Debug)]
struct InFlight<T> {
    started: Instant,
    verdict: watch::Receiver<Option<T>>,
}

/// Runs at most one check at a time for concurrent callers (see the module docs).
#[derive(Debug)]
pub struct Coalesced<T> {
    budget: Duration,
    slot: Mutex<Option<InFlight<T>>>,
}

impl<T: Clone + Send + Sync + 'static> Coalesced<T> {
    /// Checks are joined within `budget` of their start (the check's timeout).
    pub fn new(budget: Duration) -> Self {
        Self {
            budget,
            slot: Mutex::new(None),
        }
    }

    /// The verdict of the running check, or of a new one made by `start` (spawned on the
    /// runtime). `None` only if the check task panicked.
    pub async fn run<F>(&self, start: impl FnOnce() -> F) -> Option<T>
    where
        F: Future<Output = T> + Send + 'static,
    {
        let mut verdict = {
            let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
            let now = Instant::now();
            match slot.as_ref() {
                Some(running)
                    if joins(
                        running.started,
                        running.verdict.borrow().is_some(),
                        now,
                        self.budget,
                    ) =>
                {
                    running.verdict.clone()
                }
                _ => {
                    let (publish, verdict) = watch::channel(None);
                    let probe = start();
                    tokio::spawn(async move {
                        publish.send_replace(Some(probe.await));
                    });
                    *slot = Some(InFlight {
                        started: now,
                        verdict: verdict.clone(),
                    });
                    verdict
                }
            }
        };
        verdict
            .wait_for(Option::is_some)
            .await
            .ok()
            .and_then(|v| v.clone())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[test]
    fn a_request_joins_only_a_running_probe_within_its_budget() {
        let t0 = Instant::now();
        let budget = Duration::from_secs(1);
        let ms = Duration::from_millis;
        let cases = [
            (t0, false, t0, true, "same instant"),
            (t0, false, t0 + ms(999), true, "just within the budget"),
            (t0, false, t0 + ms(1000), false, "budget spent"),
            (t0, true, t0 + ms(1), false, "probe done"),
            (t0 + ms(5), false, t0, true, "clock read before the start"),
        ];
        for (started, done, now, expected, case) in cases {
            assert_eq!(joins(started, done, now, budget), expected, "{case}");
        }
    }

    #[tokio::test]
    async fn concurrent_callers_share_one_probe_and_later_callers_start_another() {
        let coalesced = Arc::new(Coalesced::new(Duration::from_secs(5)));
        let probes = Arc::new(AtomicUsize::new(0));
        let call = || {
            let coalesced = Arc::clone(&coalesced);
            let probes = Arc::clone(&probes);
            async move {
                coalesced
                    .run(move || async move {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        probes.fetch_add(1, Ordering::SeqCst) + 1
                    })
                    .await
            }
        };
        let callers: Vec<_> = (0..3).map(|_| tokio::spawn(call())).collect();
        for caller in callers {
            assert_eq!(caller.await.unwrap(), Some(1));
        }
        // The probe is done: the next caller probes again.
        assert_eq!(call().await, Some(2));
    }

    #[tokio::test]
    async fn a_probe_past_its_budget_is_not_joined() {
        let coalesced = Arc::new(Coalesced::new(Duration::from_millis(100)));
        let slow = {
            let coalesced = Arc::clone(&coalesced);
            tokio::spawn(async move {
                coalesced
                    .run(|| async {
                        tokio::time::sleep(Duration::from_secs(2)).await;
                        "slow"
                    })
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        let fresh = coalesced.run(|| async { "fresh" }).await;
        assert_eq!(fresh, Some("fresh"));
        assert_eq!(slow.await.unwrap(), Some("slow"));
    }

    #[tokio::test]
    async fn a_caller_that_goes_away_does_not_stall_the_probe() {
        let coalesced = Arc::new(Coalesced::new(Duration::from_secs(5)));
        let first = {
            let coalesced = Arc::clone(&coalesced);
            tokio::spawn(async move {
                coalesced
                    .run(|| async {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        7
                    })
                    .await
            })
        };
        tokio::task::yield_now().await;
        first.abort();
        let joined = coalesced.run(|| async { 8 }).await;
        assert_eq!(joined, Some(7));
    }
}
