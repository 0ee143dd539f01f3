//! The election loop (client-go `tools/leaderelection`): acquire, renew every retry period,
//! lose leadership when no renewal succeeds within the renew deadline, release on shutdown.

use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use prometheus::{IntCounterVec, IntGaugeVec, Opts, Registry};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, error, info, warn};

use crate::fence::Fence;
use crate::logging::error_chain;

use super::lock::{Lock, LockError, Record};
use super::timing::{self, NotAcquired, Sighting, Timing};
use super::{
    Error, HEALTH_CHECK_TIMEOUT, LeaderElectionConfig, LeaderHealth, MASTER_STATUS_METRIC,
    METRIC_NAME_LABEL_VALUE, Result, SLOWPATH_METRIC,
};

const MASTER_STATUS_HELP: &str = "[ALPHA] Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.";
const SLOWPATH_HELP: &str = "[ALPHA] Total number of slow path exercised in renewing leader leases. 'name' is the string used to identify the lease. Please make sure to group by name.";

/// What the elector last observed, shared with the health check and the metrics.
#[derive(Debug, Default)]
pub(super) struct Observed {
    pub(super) record: Record,
    /// Local time the record was last seen to change (client-go `observedTime`); `None` before
    /// the first observation.
    pub(super) at: Option<Instant>,
}

/// State shared between the election loop, [`LeaderHealth`] and [`Leadership`].
#[derive(Debug)]
pub(super) struct Shared {
    lease: String,
    pub(super) lease_name: String,
    pub(super) identity: String,
    pub(super) lease_duration: Duration,
    observed: Mutex<Observed>,
    leading: watch::Sender<bool>,
    /// The fence of the clients that write as this leader, if they have one.
    fence: OnceLock<Fence>,
    master_status: IntGaugeVec,
    slowpath: IntCounterVec,
}

impl Shared {
    pub(super) fn observed(&self) -> MutexGuard<'_, Observed> {
        // The guarded data stays consistent even if a holder panicked: every write replaces
        // both fields at once.
        self.observed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn observed_record(&self) -> Record {
        self.observed().record.clone()
    }

    fn set_observed(&self, record: Record, at: Instant) {
        let mut observed = self.observed();
        observed.record = record;
        observed.at = Some(at);
    }

    /// client-go `IsLeader`: the last observed record names this identity.
    fn is_leader(&self) -> bool {
        self.observed().record.holder_identity == self.identity
    }

    /// client-go `isLeaseValid`: the observed record has not gone unchanged for its own
    /// `leaseDurationSeconds` of local time.
    fn lease_valid(&self, now: Instant) -> bool {
        let observed = self.observed();
        observed
            .at
            .is_some_and(|at| at + observed.record.lease_duration() > now)
    }

    fn set_leading(&self, leading: bool) {
        if !leading && let Some(fence) = self.fence.get() {
            fence.close();
        }
        self.leading.send_replace(leading);
        self.master_status
            .with_label_values(&[METRIC_NAME_LABEL_VALUE])
            .set(i64::from(leading));
    }
}

/// Why a [`Leadership`] ended without [`Leadership::release`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LostReason {
    /// No renewal succeeded within the renew deadline (upstream: "failed to renew lease", then
    /// "Stopped leading").
    #[error("no renewal succeeded within the renew deadline of {renew_deadline:?}{}", last_error_suffix(.last_error.as_deref()))]
    RenewDeadlineExceeded {
        /// The configured renew deadline.
        renew_deadline: Duration,
        /// Why the last attempt failed, when one finished before the deadline.
        last_error: Option<String>,
    },
    /// The renewal task ended without reporting (it panicked or was aborted).
    #[error("the renewal task ended unexpectedly")]
    RenewTaskEnded,
}

fn last_error_suffix(last_error: Option<&str>) -> String {
    last_error
        .map(|e| format!(" (last attempt: {e})"))
        .unwrap_or_default()
}

/// Leadership was lost; `main` should stop its controllers and exit (upstream exits 1).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("stopped leading lease {lease}")]
pub struct LeadershipLost {
    /// `<namespace>/<name>` of the Lease.
    pub lease: String,
    /// What happened.
    #[source]
    pub reason: LostReason,
}

/// A candidate for one Lease. Build it, hand out [`health`](Self::health) and
/// [`register_metrics`](Self::register_metrics), then [`acquire`](Self::acquire).
pub struct LeaderElector {
    core: Core,
}

impl fmt::Debug for LeaderElector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderElector")
            .field("lease", &self.core.shared.lease)
            .field("identity", &self.core.shared.identity)
            .finish_non_exhaustive()
    }
}

impl LeaderElector {
    /// Validates `config` (see [`LeaderElectionConfig::validate`]) and prepares an elector that
    /// talks to the API through `client`.
    ///
    /// Give it its own client (a second [`crate::kube_client::client`] call): upstream uses a
    /// dedicated clientset so throttling of the main client cannot starve renewals.
    pub fn new(client: kube::Client, config: LeaderElectionConfig) -> Result<Self> {
        config.validate()?;
        let master_status = IntGaugeVec::new(
            Opts::new(MASTER_STATUS_METRIC, MASTER_STATUS_HELP),
            &["name"],
        )
        .map_err(Error::Metrics)?;
        let slowpath = IntCounterVec::new(Opts::new(SLOWPATH_METRIC, SLOWPATH_HELP), &["name"])
            .map_err(Error::Metrics)?;
        let lock = Lock::new(
            client,
            &config.namespace,
            &config.lease_name,
            &config.identity,
            config.labels.clone(),
        );
        let shared = Arc::new(Shared {
            lease: lock.describe(),
            lease_name: config.lease_name.clone(),
            identity: config.identity.clone(),
            lease_duration: config.lease_duration,
            observed: Mutex::new(Observed::default()),
            leading: watch::Sender::new(false),
            fence: OnceLock::new(),
            master_status,
            slowpath,
        });
        // client-go reports "not leader" as soon as the elector exists.
        shared.set_leading(false);
        Ok(Self {
            core: Core {
                lock,
                config,
                shared,
                observed_raw: None,
                latest_read_sent: None,
                sighting: None,
                reported_leader: String::new(),
                last_failure: None,
            },
        })
    }

    /// Has this elector hold `fence`: closed until it leads, then open until the instant its
    /// leadership ends at the latest (the last successful renewal + retry period + renew
    /// deadline), moved on by each renewal, closed again when leadership ends. Give the same
    /// fence to the clients the controllers write with (see [`Fence`]), not to this elector's
    /// own client. A second fence is ignored.
    #[must_use]
    pub fn with_fence(self, fence: Fence) -> Self {
        fence.close();
        let _ = self.core.shared.fence.set(fence);
        self
    }

    /// The health check for [`HEALTH_CHECK_PATH`](super::HEALTH_CHECK_PATH), with upstream's 20 s tolerance.
    pub fn health(&self) -> LeaderHealth {
        LeaderHealth {
            shared: Arc::clone(&self.core.shared),
            tolerance: HEALTH_CHECK_TIMEOUT,
        }
    }

    /// Whether this replica currently leads, as a watch (true from acquisition until loss or
    /// release), e.g. for readiness or logging.
    pub fn leading(&self) -> watch::Receiver<bool> {
        self.core.shared.leading.subscribe()
    }

    /// Registers `leader_election_master_status{name=""}` (0 standby, 1 leader) and
    /// `leader_election_slowpath_total{name=""}` in `registry`. Call once per registry.
    pub fn register_metrics(&self, registry: &Registry) -> Result<()> {
        registry
            .register(Box::new(self.core.shared.master_status.clone()))
            .map_err(Error::Metrics)?;
        registry
            .register(Box::new(self.core.shared.slowpath.clone()))
            .map_err(Error::Metrics)
    }

    /// Waits until this replica holds the Lease, then starts renewing it in a background task
    /// and returns the [`Leadership`].
    ///
    /// Like client-go, every failure (API errors, 403, conflicts) is logged and retried,
    /// forever; to give up (e.g. on SIGTERM), drop this future. The attempts are timed so that
    /// a Lease whose holder died is taken at its expiry (see the `timing` module) rather than
    /// client-go's jittered retry period; the expiry rule itself is client-go's.
    /// Must run inside a tokio runtime.
    pub async fn acquire(self) -> Leadership {
        let mut core = self.core;
        let timing = Timing::new(core.config.retry_period);
        info!(lease = %core.shared.lease, "attempting to acquire leader lease");
        loop {
            let attempt = core.try_acquire_or_renew().await;
            core.maybe_report_transition();
            let Err(not_acquired) = attempt else {
                break;
            };
            let now = Instant::now();
            let wake = timing::next_attempt(
                core.sighting.as_ref(),
                not_acquired,
                timing,
                now,
                unit_random(),
            );
            debug!(
                lease = %core.shared.lease,
                next_attempt_in = ?wake.at.saturating_duration_since(now),
                why = ?wake.why,
                "failed to acquire lease"
            );
            tokio::time::sleep_until(wake.at).await;
        }
        core.spawn_event("became leader");
        core.hold_fence(Instant::now());
        core.shared.set_leading(true);
        info!(lease = %core.shared.lease, "successfully acquired lease");

        let shared = Arc::clone(&core.shared);
        let release_on_cancel = core.config.release_on_cancel;
        let (stop_tx, stop_rx) = oneshot::channel();
        let (lost_tx, lost_rx) = watch::channel(None);
        let task = tokio::spawn(core.renew(stop_rx, lost_tx));
        Leadership {
            shared,
            release_on_cancel,
            stop: Some(stop_tx),
            task: Some(task),
            lost: lost_rx,
        }
    }
}

/// This replica holds the Lease and a background task keeps renewing it.
///
/// Run the controllers while awaiting [`lost`](Self::lost); on clean shutdown call
/// [`release`](Self::release). Dropping it stops renewing at once (the Lease then expires after
/// the lease duration).
pub struct Leadership {
    shared: Arc<Shared>,
    release_on_cancel: bool,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<(Core, bool)>>,
    lost: watch::Receiver<Option<LeadershipLost>>,
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("lease", &self.shared.lease)
            .field("identity", &self.shared.identity)
            .field("leading", &*self.shared.leading.borrow())
            .finish_non_exhaustive()
    }
}

impl Leadership {
    /// Resolves when leadership is lost: no renewal succeeded within the renew deadline (or
    /// the renewal task died). Cancel-safe, so it can sit in a `select!` loop; resolves
    /// immediately on every call after the loss.
    pub async fn lost(&mut self) -> LeadershipLost {
        let lease = self.shared.lease.clone();
        match self.lost.wait_for(Option::is_some).await {
            Ok(lost) => lost.clone().unwrap_or(LeadershipLost {
                lease,
                reason: LostReason::RenewTaskEnded,
            }),
            Err(_) => LeadershipLost {
                lease,
                reason: LostReason::RenewTaskEnded,
            },
        }
    }

    /// Whether this replica still leads (false once renewals have failed past the deadline).
    pub fn is_leader(&self) -> bool {
        *self.shared.leading.borrow()
    }

    /// Whether this replica leads, as a watch.
    pub fn leading(&self) -> watch::Receiver<bool> {
        self.shared.leading.subscribe()
    }

    /// Ends this term on clean shutdown, after the controllers have stopped: stops renewing
    /// and, when [`LeaderElectionConfig::release_on_cancel`] is set, hands the Lease back the
    /// way client-go `release()` does (same Lease, `holderIdentity: ""`,
    /// `leaseDurationSeconds: 1`, `acquireTime`/`renewTime` now, `leaseTransitions` kept) so a
    /// standby takes over on its next attempt instead of waiting out the lease duration.
    /// Without that flag the Lease is left to expire, as upstream does by default. Either way
    /// a "stopped leading" Event is posted.
    ///
    /// Nothing is written if the Lease no longer names this replica.
    pub async fn release(mut self) -> Result<()> {
        if let Some(stop) = self.stop.take() {
            // The task may already have ended after a loss; then nobody listens.
            let _ = stop.send(());
        }
        let Some(task) = self.task.take() else {
            return Ok(());
        };
        let (mut core, lost) = task.await.map_err(Error::RenewTask)?;
        let result = if self.release_on_cancel {
            core.release().await.map_err(|source| Error::Release {
                lease: core.shared.lease.clone(),
                source,
            })
        } else {
            Ok(())
        };
        if !lost {
            // The process is about to exit, so post inline (bounded) instead of spawning.
            core.post_event("stopped leading", core.config.retry_period)
                .await;
        }
        result
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            self.shared.set_leading(false);
        }
    }
}

/// The election loop's own state (client-go `LeaderElector` minus the shared parts).
struct Core {
    lock: Lock,
    config: LeaderElectionConfig,
    shared: Arc<Shared>,
    /// Last record read from the API (client-go `observedRawRecord`); only a difference to this
    /// restarts the local expiry timer.
    observed_raw: Option<Record>,
    /// When the latest successful read was sent (it returned `observed_raw`).
    latest_read_sent: Option<Instant>,
    /// What the reads saw of `observed_raw`, for timing the next attempt.
    sighting: Option<Sighting>,
    /// Last holder reported in the logs (client-go `reportedLeader`).
    reported_leader: String,
    /// Why the last attempt failed, for the loss report.
    last_failure: Option<String>,
}

impl Core {
    /// Opens the fence, if any, until leadership would end after a successful renewal at
    /// `renewed_at` with no later one ([`timing::renew_deadline`]'s latest instant).
    fn hold_fence(&self, renewed_at: Instant) {
        if let Some(fence) = self.shared.fence.get() {
            fence.open_until(renewed_at + self.config.retry_period + self.config.renew_deadline);
        }
    }

    /// One attempt of client-go `tryAcquireOrRenew`; `Ok` when this replica now holds the Lease.
    async fn try_acquire_or_renew(&mut self) -> Result<(), NotAcquired> {
        let now_wall = Timestamp::now();
        let now = Instant::now();
        let mut desired = Record {
            holder_identity: self.config.identity.clone(),
            lease_duration_seconds: i32::try_from(self.config.lease_duration.as_secs())
                .unwrap_or(i32::MAX),
            acquire_time: Some(now_wall),
            renew_time: Some(now_wall),
            lease_transitions: 0,
        };

        // 1. Fast path: the leader updates optimistically from the record it wrote last.
        if self.shared.is_leader() && self.shared.lease_valid(now) {
            let old = self.shared.observed_record();
            desired.acquire_time = old.acquire_time;
            desired.lease_transitions = old.lease_transitions;
            match self.lock.update(&desired).await {
                Ok(()) => {
                    self.shared.set_observed(desired, Instant::now());
                    return Ok(());
                }
                Err(err) => warn!(
                    lease = %self.shared.lease,
                    error = %error_chain(&err),
                    "failed to update lock optimistically, falling back to slow path"
                ),
            }
        }

        // 2. Read the record, or create the Lease if there is none.
        let current = match self.lock.get().await {
            Ok(Some(current)) => current,
            Ok(None) => {
                return match self.lock.create(&desired).await {
                    Ok(()) => {
                        self.shared.set_observed(desired, Instant::now());
                        Ok(())
                    }
                    Err(err) => {
                        self.failed("error initially creating leader election record", &err)
                    }
                };
            }
            Err(err) => return self.failed("error retrieving resource lock", &err),
        };

        // 3. Only a changed record restarts the local expiry timer.
        if self.observed_raw.as_ref() != Some(&current) {
            self.sight(&current, Instant::now());
        }
        self.latest_read_sent = Some(now);
        if !current.holder_identity.is_empty()
            && self.shared.lease_valid(now)
            && !self.shared.is_leader()
        {
            debug!(
                lease = %self.shared.lease,
                holder = %current.holder_identity,
                "lock is held by another candidate and has not yet expired"
            );
            self.last_failure = Some(format!(
                "lease is held by {} and has not yet expired",
                current.holder_identity
            ));
            return Err(NotAcquired::HeldByOther);
        }

        // 4. Take over (or renew through the slow path).
        if self.shared.is_leader() {
            desired.acquire_time = current.acquire_time;
            desired.lease_transitions = current.lease_transitions;
            self.shared
                .slowpath
                .with_label_values(&[METRIC_NAME_LABEL_VALUE])
                .inc();
        } else {
            desired.lease_transitions = current.lease_transitions.saturating_add(1);
        }
        match self.lock.update(&desired).await {
            Ok(()) => {
                self.shared.set_observed(desired, Instant::now());
                Ok(())
            }
            Err(err) => self.failed("failed to update lock", &err),
        }
    }

    /// Records that a read answered at `seen_at` returned `current`, which differs from the
    /// record seen before: client-go's `setObservedRecord`, plus what the timing of the next
    /// attempt needs.
    fn sight(&mut self, current: &Record, seen_at: Instant) {
        let previous = self.observed_raw.replace(current.clone());
        self.shared.set_observed(current.clone(), seen_at);
        // Within one holder's term, each write comes at least a retry period after the last
        // one was acknowledged. A new holder renews at once after acquiring (client-go starts
        // `renew` right away), so its first write gives no such bound.
        let same_term = previous.is_some_and(|previous| {
            previous.holder_identity == current.holder_identity
                && previous.acquire_time == current.acquire_time
        });
        self.sighting = Some(Sighting {
            seen_at,
            previous_read_sent: self.latest_read_sent.filter(|_| same_term),
            lease_duration: current.lease_duration(),
        });
    }

    fn failed(&mut self, what: &str, err: &LockError) -> Result<(), NotAcquired> {
        let message = format!("{what}: {}", error_chain(err));
        error!(lease = %self.shared.lease, "{message}");
        self.last_failure = Some(message);
        Err(NotAcquired::Failed)
    }

    fn maybe_report_transition(&mut self) {
        let holder = self.shared.observed_record().holder_identity;
        if holder != self.reported_leader {
            debug!(lease = %self.shared.lease, leader = %holder, "new leader detected");
            self.reported_leader = holder;
        }
    }

    /// client-go `renew`: every retry period, retry renewing until it succeeds or the renew
    /// deadline passes. Returns the core (for release) and whether leadership was lost.
    async fn renew(
        mut self,
        mut stop: oneshot::Receiver<()>,
        lost_tx: watch::Sender<Option<LeadershipLost>>,
    ) -> (Self, bool) {
        let lost = tokio::select! {
            // A dropped sender (Leadership gone without release) also stops renewing.
            _ = &mut stop => None,
            reason = self.renew_until_failure() => Some(reason),
        };
        self.shared.set_leading(false);
        let Some(reason) = lost else {
            return (self, false);
        };
        let lost = LeadershipLost {
            lease: self.shared.lease.clone(),
            reason,
        };
        error!(lease = %self.shared.lease, error = %error_chain(&lost), "failed to renew lease");
        self.spawn_event("stopped leading");
        lost_tx.send_replace(Some(lost));
        (self, true)
    }

    async fn renew_until_failure(&mut self) -> LostReason {
        let retry_period = self.config.retry_period;
        // acquire() returns right after the write that won the Lease.
        let mut renewed_at = Instant::now();
        loop {
            self.last_failure = None;
            let now = Instant::now();
            let deadline =
                timing::renew_deadline(now, renewed_at, retry_period, self.config.renew_deadline);
            // Dropping the attempt at the deadline also cancels its in-flight request, as the
            // deadline context does in client-go. A deadline already past (the process was
            // frozen, e.g. SIGSTOP) ends leadership without another request.
            let renewed = now < deadline
                && tokio::time::timeout_at(deadline, async {
                    while self.try_acquire_or_renew().await.is_err() {
                        tokio::time::sleep(retry_period).await;
                    }
                })
                .await
                .is_ok();
            self.maybe_report_transition();
            if !renewed {
                return LostReason::RenewDeadlineExceeded {
                    renew_deadline: self.config.renew_deadline,
                    last_error: self.last_failure.take(),
                };
            }
            renewed_at = Instant::now();
            self.hold_fence(renewed_at);
            debug!(lease = %self.shared.lease, "successfully renewed lease");
            tokio::time::sleep(retry_period).await;
        }
    }

    /// client-go `release`: if the observed record still names us, write an empty holder with a
    /// one-second lease.
    async fn release(&mut self) -> Result<(), LockError> {
        if !self.shared.is_leader() {
            return Ok(());
        }
        let now = Timestamp::now();
        let record = Record {
            holder_identity: String::new(),
            lease_duration_seconds: 1,
            acquire_time: Some(now),
            renew_time: Some(now),
            lease_transitions: self.shared.observed_record().lease_transitions,
        };
        self.lock.update(&record).await?;
        self.shared.set_observed(record, Instant::now());
        info!(lease = %self.shared.lease, "released leader lease");
        Ok(())
    }

    /// Posts a leadership Event in the background: a slow or failing Event must never delay a
    /// renewal (client-go's recorder is asynchronous too).
    fn spawn_event(&self, action: &str) {
        let Some(event) = self.lock.event(action, Timestamp::now()) else {
            return;
        };
        let events = self.lock.events();
        tokio::spawn(async move {
            if let Err(err) = events.create(&PostParams::default(), &event).await {
                warn!(error = %error_chain(&err), "cannot post leader election event");
            }
        });
    }

    /// Posts a leadership Event and waits for it, at most `limit`.
    async fn post_event(&self, action: &str, limit: Duration) {
        let Some(event) = self.lock.event(action, Timestamp::now()) else {
            return;
        };
        let events = self.lock.events();
        match tokio::time::timeout(limit, events.create(&PostParams::default(), &event)).await {
            Ok(Ok(_)) => {}
            Ok(Err(err)) => warn!(error = %error_chain(&err), "cannot post leader election event"),
            Err(_) => warn!("timed out posting leader election event"),
        }
    }
}

/// A random number in `[0, 1)`. The jitter only spreads candidates apart, so the per-instance
/// random keys of std's `RandomState` are random enough and avoid a dependency.
fn unit_random() -> f64 {
    let bits = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    // 53 random bits fit an f64 mantissa exactly.
    #[allow(
        clippy::cast_precision_loss,
        reason = "both values are below 2^53 and convert exactly"
    )]
    let unit = (bits >> 11) as f64 / (1_u64 << 53) as f64;
    unit
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_units_are_in_the_unit_interval() {
        for _ in 0..100 {
            let unit = unit_random();
            assert!((0.0..1.0).contains(&unit), "{unit}");
        }
    }

    #[test]
    fn lost_reason_names_the_deadline_and_the_last_error() {
        let lost = LeadershipLost {
            lease: "ns/lease".into(),
            reason: LostReason::RenewDeadlineExceeded {
                renew_deadline: Duration::from_secs(10),
                last_error: Some("failed to update lock: boom".into()),
            },
        };
        assert_eq!(
            error_chain(&lost),
            "stopped leading lease ns/lease: no renewal succeeded within the renew deadline of 10s (last attempt: failed to update lock: boom)"
        );
    }
}
