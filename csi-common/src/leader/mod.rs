//! Lease-based leader election (`coordination.k8s.io/v1`) that shares one lock with upstream Go
//! replicas: Rust counterpart of csi-lib-utils `leaderelection` on top of client-go
//! `tools/leaderelection`.
//!
//! The algorithm is client-go's, so a Go replica and a Rust replica can take turns on the same
//! Lease during a rollout:
//!
//! * A candidate acquires the Lease when it does not exist, when `holderIdentity` is empty (a
//!   released Lease), when the holder is this identity, or when the record has not changed for
//!   `leaseDurationSeconds` **as observed by the local clock**. The Lease's own `renewTime` is
//!   never compared with the local clock (clock skew between nodes must not matter); only a
//!   change of the record restarts the local expiry timer.
//! * Unlike client-go, a standby does not sleep a jittered retry period between attempts: it
//!   reads the Lease when the holder's next renewal can first have landed, then every quarter
//!   retry period (at most 500 ms) until the record changes, and attempts exactly at the
//!   expiry, so a dead holder is replaced within lease duration + 2 s of its last renewal
//!   (issue 14). Failed requests back off as client-go's (retry period plus up to 1.2 × retry
//!   period of jitter), never past a known expiry. See the `timing` module.
//! * The leader renews every retry period: first an optimistic PUT of the record it last wrote
//!   (no GET); on failure (e.g. 409 Conflict) it falls back to GET + PUT. If no renewal
//!   succeeds within the renew deadline, leadership is lost; unlike client-go, that deadline
//!   never ends later than the last successful renewal + retry period + renew deadline, so a
//!   leader frozen (SIGSTOP) past it gives up as soon as it runs again.
//! * `leaseTransitions` is incremented whenever the holder changes; `acquireTime` is kept while
//!   renewing; times are written as MicroTime (`2026-11-21T15:36:56.181130Z`).
//!
//! Unlike upstream, nothing here exits the process: [`LeaderElector::acquire`] returns a
//! [`Leadership`] whose [`Leadership::lost`] resolves when renewals fail, and `main` decides to
//! exit (upstream logs "Stopped leading" and exits 1).
//!
//! The pieces: [`LeaderElectionConfig`] (which Lease, who we are, the timings; checked as
//! client-go checks them), the election loop ([`LeaderElector`] and the [`Leadership`] it
//! returns), the [`Fence`](crate::fence::Fence) that stops a leader's writes at the instant its leadership ends even
//! when the process was frozen past it, the timing of its attempts and deadlines (the private `timing` module),
//! [`LeaderHealth`] for `/healthz/leader-election`, and upstream's naming rules ([`lease_name`],
//! [`identity`], [`namespace_from`]).
//!
//! ```no_run
//! # async fn run(client: kube::Client, registry: prometheus::Registry) -> anyhow::Result<()> {
//! use csi_common::leader::{self, LeaderElectionConfig, LeaderElector};
//!
//! let config = LeaderElectionConfig::new(
//!     leader::lease_name("external-resizer-hostpath.csi.k8s.io"),
//!     "csi",
//!     leader::identity("csi-resizer-0"),
//! );
//! let elector = LeaderElector::new(client, config)?;
//! elector.register_metrics(&registry)?;
//! let health = elector.health(); // served at /healthz/leader-election
//! let mut leadership = elector.acquire().await;
//! tokio::select! {
//!     lost = leadership.lost() => return Err(lost.into()),
//!     () = std::future::pending::<()>() => {} // run the controllers here
//! }
//! leadership.release().await?;
//! # Ok(())
//! # }
//! ```

mod config;
mod election;
mod health;
mod lock;
mod rules;
mod timing;

use std::time::Duration;

pub use config::LeaderElectionConfig;
pub use election::{LeaderElector, Leadership, LeadershipLost, LostReason};
pub use health::LeaderHealth;
pub use lock::LockError;
pub use rules::{
    DEFAULT_NAMESPACE, MalformedLabel, POD_NAMESPACE_ENV, SERVICE_ACCOUNT_NAMESPACE_FILE, identity,
    lease_name, merge_labels, namespace_from, parse_labels, resolve_namespace, sanitize,
};

/// Default `--leader-election-lease-duration` (csi-lib-utils).
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// Default `--leader-election-renew-deadline` (csi-lib-utils).
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// Default `--leader-election-retry-period` (csi-lib-utils).
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(5);
/// How long past the lease duration a leader may go without a successful renewal before the
/// health check fails (csi-lib-utils `DefaultHealthCheckTimeout`).
pub const HEALTH_CHECK_TIMEOUT: Duration = Duration::from_secs(20);
/// HTTP path of the leader-election health check (csi-lib-utils `HealthCheckerAddress`).
pub const HEALTH_CHECK_PATH: &str = "/healthz/leader-election";
/// Maximum extra random delay between acquire attempts, as a multiple of the retry period
/// (client-go `JitterFactor`); also the factor in the renew-deadline validation.
pub const JITTER_FACTOR: f64 = 1.2;

/// Name of the 0/1 leadership gauge (component-base leader-election metrics provider).
pub const MASTER_STATUS_METRIC: &str = "leader_election_master_status";
/// Name of the counter of renewals that needed the GET + PUT slow path.
pub const SLOWPATH_METRIC: &str = "leader_election_slowpath_total";
/// Value of the `name` label of both metrics: upstream's elector has no `Name`, so the label
/// is empty (`leader_election_master_status{name=""}`), and dashboards match on that.
pub const METRIC_NAME_LABEL_VALUE: &str = "";

/// Errors of leader election set-up and release.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The lease duration does not exceed the renew deadline (client-go validation; upstream
    /// panics here).
    #[error(
        "leader election lease duration ({lease_duration:?}) must be greater than the renew deadline ({renew_deadline:?})"
    )]
    LeaseDurationNotAboveRenewDeadline {
        /// Configured lease duration.
        lease_duration: Duration,
        /// Configured renew deadline.
        renew_deadline: Duration,
    },
    /// The renew deadline does not exceed 1.2 × the retry period, so a renewal could not be
    /// retried once before the deadline (client-go validation).
    #[error(
        "leader election renew deadline ({renew_deadline:?}) must be greater than the retry period ({retry_period:?}) times the jitter factor 1.2"
    )]
    RenewDeadlineNotAboveRetryPeriod {
        /// Configured renew deadline.
        renew_deadline: Duration,
        /// Configured retry period.
        retry_period: Duration,
    },
    /// The retry period is zero.
    #[error("leader election retry period must be greater than zero")]
    ZeroRetryPeriod,
    /// The Lease name, namespace or identity is empty.
    #[error("leader election {what} is empty")]
    Empty {
        /// Which value (`lease name`, `namespace`, `identity`).
        what: &'static str,
    },
    /// The leader-election metrics could not be created or registered (for example registered
    /// twice in one registry).
    #[error("cannot register leader election metrics")]
    Metrics(#[source] prometheus::Error),
    /// Handing the Lease back on shutdown failed; the Lease then expires on its own.
    #[error("cannot release lease {lease}")]
    Release {
        /// `<namespace>/<name>` of the Lease.
        lease: String,
        /// What went wrong.
        #[source]
        source: LockError,
    },
    /// The background renewal task panicked.
    #[error("leader election renew task failed")]
    RenewTask(#[source] tokio::task::JoinError),
}

/// Result type of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;
