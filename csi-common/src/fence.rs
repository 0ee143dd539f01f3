//! The fence: whether this replica may still write as the leader, judged by the clock at the
//! moment a request leaves, not by the renewal task having run.
//!
//! A leader frozen past its renew deadline (SIGSTOP, a paused VM, a starved node) runs all its
//! tasks at once when it thaws. Its renewal task then sees the deadline passed and ends
//! leadership, but a controller task polled before it can still send the write it was about to
//! make, after a standby has taken the Lease: the chaos suite saw a resumed csi-attacher mark
//! VolumeAttachments attached after the new leader had started publishing them (a
//! ControllerPublishVolume repeated after success). client-go has the same window (it only
//! stops its controllers when `OnStoppedLeading` runs). The fence closes it: the elector
//! holds it open until the instant its leadership ends at the latest (the last successful
//! renewal plus the retry period and the renew deadline, see `leader`'s `timing` module), and a
//! client built with [`FenceLayer`](crate::kube_client::FenceLayer) refuses every write once
//! that instant has passed, whatever task runs first. The CSI connection does the same for the
//! calls that change the driver's volumes ([`RpcLogLayer`](crate::rpc_log::RpcLogLayer)): a
//! ControllerPublishVolume the thawed leader sends after the new leader has unpublished the
//! volume (its VolumeAttachment deleted meanwhile) would leave it published with nobody to
//! undo it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::time::Instant;

/// Why a write was not sent: the [`Fence`] it passes had closed.
#[derive(Debug, thiserror::Error)]
#[error("not sent: this replica is no longer the leader (its lease ended at its renew deadline)")]
pub struct NotLeading;

/// `until` of a fence that no elector holds: always open.
const OPEN: u64 = u64::MAX;

/// Shared between a [`LeaderElector`](crate::leader::LeaderElector) and the clients whose writes it fences.
///
/// A new fence is open: a sidecar without leader election never closes it. An elector given
/// the fence ([`LeaderElector::with_fence`](crate::leader::LeaderElector::with_fence)) closes it until it leads.
#[derive(Clone, Debug)]
pub struct Fence(Arc<State>);

#[derive(Debug)]
struct State {
    /// What `until` counts from.
    base: Instant,
    /// Nanoseconds after `base` at which writes stop, or [`OPEN`].
    until: AtomicU64,
}

impl Default for Fence {
    fn default() -> Self {
        Self::new()
    }
}

impl Fence {
    /// An open fence.
    pub fn new() -> Self {
        Self(Arc::new(State {
            base: Instant::now(),
            until: AtomicU64::new(OPEN),
        }))
    }

    /// Whether a write may be sent now.
    pub fn is_open(&self) -> bool {
        self.is_open_at(Instant::now())
    }

    fn is_open_at(&self, now: Instant) -> bool {
        let until = self.0.until.load(Ordering::Acquire);
        until == OPEN || self.nanos(now) < until
    }

    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.0.base).as_nanos()).unwrap_or(OPEN - 1)
    }

    /// Refuses writes from now on (not leading).
    pub(crate) fn close(&self) {
        self.0.until.store(0, Ordering::Release);
    }

    /// Lets writes through until `until` (leading, and its renewals have kept up so far).
    pub(crate) fn open_until(&self, until: Instant) {
        self.0
            .until
            .store(self.nanos(until).min(OPEN - 1), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_held_fence_closes_at_its_instant_even_if_nobody_runs() {
        let fence = Fence::new();
        assert!(fence.is_open(), "a fence no elector holds is open");
        fence.close();
        assert!(!fence.is_open());

        fence.open_until(Instant::now() + Duration::from_secs(3));
        assert!(fence.is_open());
        // A frozen process: time passes and no renewal runs.
        tokio::time::advance(Duration::from_millis(2_999)).await;
        assert!(fence.is_open());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(!fence.is_open());

        // A renewal moves the instant on.
        fence.open_until(Instant::now() + Duration::from_secs(3));
        assert!(fence.is_open());
    }
}
