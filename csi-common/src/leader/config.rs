//! What one elector is configured with, checked as client-go checks it.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{
    DEFAULT_LEASE_DURATION, DEFAULT_RENEW_DEADLINE, DEFAULT_RETRY_PERIOD, Error, JITTER_FACTOR,
    Result,
};

/// Everything one elector needs: which Lease, who we are, the timings and the labels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderElectionConfig {
    /// Lease name, already sanitized (see [`lease_name`](super::lease_name)).
    pub lease_name: String,
    /// Namespace of the Lease (see [`resolve_namespace`](super::resolve_namespace)).
    pub namespace: String,
    /// Holder identity written into the Lease (see [`identity`](super::identity)).
    pub identity: String,
    /// How long a Lease whose record has not changed stays valid for other candidates
    /// (`--leader-election-lease-duration`).
    pub lease_duration: Duration,
    /// How long the leader keeps retrying a failed renewal before giving up leadership
    /// (`--leader-election-renew-deadline`).
    pub renew_deadline: Duration,
    /// Pause between attempts (`--leader-election-retry-period`).
    pub retry_period: Duration,
    /// Labels put on the Lease while this replica leads (`--leader-election-labels`).
    pub labels: BTreeMap<String, String>,
    /// Whether [`Leadership::release`](super::Leadership::release) hands the Lease back (holder `""`) so a standby takes
    /// over at once. Upstream sets this only with the `ReleaseLeaderElectionOnExit` feature gate.
    pub release_on_cancel: bool,
}

impl LeaderElectionConfig {
    /// A config with upstream's default timings (15 s / 10 s / 5 s), no labels and no release on
    /// shutdown.
    pub fn new(
        lease_name: impl Into<String>,
        namespace: impl Into<String>,
        identity: impl Into<String>,
    ) -> Self {
        Self {
            lease_name: lease_name.into(),
            namespace: namespace.into(),
            identity: identity.into(),
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_deadline: DEFAULT_RENEW_DEADLINE,
            retry_period: DEFAULT_RETRY_PERIOD,
            labels: BTreeMap::new(),
            release_on_cancel: false,
        }
    }

    /// Checks what client-go `NewLeaderElector` checks, in the same order: lease duration >
    /// renew deadline > 1.2 × retry period, non-zero retry period, identity non-empty (plus a
    /// non-empty Lease name and namespace, which upstream only finds out from the API server).
    pub fn validate(&self) -> Result<()> {
        if self.lease_duration <= self.renew_deadline {
            return Err(Error::LeaseDurationNotAboveRenewDeadline {
                lease_duration: self.lease_duration,
                renew_deadline: self.renew_deadline,
            });
        }
        let jittered_retry =
            Duration::try_from_secs_f64(self.retry_period.as_secs_f64() * JITTER_FACTOR)
                .unwrap_or(Duration::MAX);
        if self.renew_deadline <= jittered_retry {
            return Err(Error::RenewDeadlineNotAboveRetryPeriod {
                renew_deadline: self.renew_deadline,
                retry_period: self.retry_period,
            });
        }
        // The two checks above already imply a non-zero lease duration and renew deadline.
        if self.retry_period.is_zero() {
            return Err(Error::ZeroRetryPeriod);
        }
        for (what, value) in [
            ("lease name", &self.lease_name),
            ("namespace", &self.namespace),
            ("identity", &self.identity),
        ] {
            if value.is_empty() {
                return Err(Error::Empty { what });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(lease: u64, renew: u64, retry: u64) -> LeaderElectionConfig {
        LeaderElectionConfig {
            lease_duration: Duration::from_millis(lease),
            renew_deadline: Duration::from_millis(renew),
            retry_period: Duration::from_millis(retry),
            ..LeaderElectionConfig::new("lease", "ns", "me")
        }
    }

    #[test]
    fn default_timings_are_valid() {
        config(15_000, 10_000, 5_000).validate().unwrap();
        LeaderElectionConfig::new("lease", "ns", "me")
            .validate()
            .unwrap();
    }

    #[test]
    fn invalid_timings_are_rejected_like_client_go() {
        let cases: [(u64, u64, u64, &str); 7] = [
            (10_000, 10_000, 5_000, "lease duration"),
            (9_000, 10_000, 5_000, "lease duration"),
            // renew must exceed 1.2 × retry: 6 s is not above 1.2 × 5 s.
            (15_000, 6_000, 5_000, "renew deadline"),
            (15_000, 5_000, 5_000, "renew deadline"),
            (15_000, 10_000, 0, "retry period must be greater than zero"),
            (0, 0, 0, "lease duration"),
            (15_000, 0, 0, "renew deadline"),
        ];
        for (lease, renew, retry, needle) in cases {
            let err = config(lease, renew, retry).validate().unwrap_err();
            assert!(
                err.to_string().contains(needle),
                "({lease}, {renew}, {retry}) gave {err}, expected {needle:?}"
            );
        }
        // Just above 1.2 × retry is fine.
        config(15_000, 6_001, 5_000).validate().unwrap();
    }

    #[test]
    fn empty_names_are_rejected() {
        for (mutate, what) in [
            (
                (|c: &mut LeaderElectionConfig| c.identity.clear()) as fn(&mut _),
                "identity",
            ),
            (|c| c.lease_name.clear(), "lease name"),
            (|c| c.namespace.clear(), "namespace"),
        ] {
            let mut c = config(15_000, 10_000, 5_000);
            mutate(&mut c);
            let err = c.validate().unwrap_err();
            assert_eq!(err.to_string(), format!("leader election {what} is empty"));
        }
    }
}
