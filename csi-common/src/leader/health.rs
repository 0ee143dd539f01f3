//! The leader-election health check served at `/healthz/leader-election`.

use std::sync::Arc;
use std::time::Duration;

use super::election::Shared;

/// The leader-election health check served at [`HEALTH_CHECK_PATH`](super::HEALTH_CHECK_PATH); cheap to clone.
///
/// Rust counterpart of client-go `HealthzAdaptor` with csi-lib-utils' 20 s tolerance.
#[derive(Clone, Debug)]
pub struct LeaderHealth {
    pub(super) shared: Arc<Shared>,
    pub(super) tolerance: Duration,
}

impl LeaderHealth {
    /// `Ok` while this replica is not the holder (standbys are healthy) or its last successful
    /// renewal is at most lease duration + [`HEALTH_CHECK_TIMEOUT`](super::HEALTH_CHECK_TIMEOUT) old; otherwise
    /// `Err("failed election to renew leadership on lease <name>")`, so kubelet restarts a
    /// leader whose election loop is wedged (csi-lib-utils #66).
    ///
    /// Upstream prints an empty lease name in that message (its elector has no `Name`); this
    /// prints the real one.
    pub fn check(&self) -> Result<(), String> {
        let observed = self.shared.observed();
        if observed.record.holder_identity != self.shared.identity {
            return Ok(());
        }
        let Some(at) = observed.at else {
            return Ok(());
        };
        if at.elapsed() > self.shared.lease_duration + self.tolerance {
            return Err(format!(
                "failed election to renew leadership on lease {}",
                self.shared.lease_name
            ));
        }
        Ok(())
    }

    /// The same check with a different tolerance past the lease duration.
    #[must_use]
    pub fn with_tolerance(mut self, tolerance: Duration) -> Self {
        self.tolerance = tolerance;
        self
    }
}
