//! When a standby tries the Lease next ([`next_attempt`]: a pure decision from what its reads
//! saw, the timings and the current instant) and when a leader gives up ([`renew_deadline`]).
//!
//! client-go sleeps `retry period × (1 + up to 1.2 jitter)` between attempts, whatever it saw.
//! Two lags add up there: a renewal is seen up to 2.2 retry periods after it was written (so
//! the local expiry timer starts that much late), and the attempt that finds the Lease expired
//! lands up to 2.2 retry periods after the expiry. With a 3 s Lease renewed every second that
//! is about 7.4 s after the holder's last renewal; docs/reliability.md (issue 14) asks for
//! lease duration + 2 s.
//!
//! Here the expiry rule itself is client-go's, unchanged: a Lease held by another identity may
//! be taken once its record has gone unchanged for its own `leaseDurationSeconds` of local time,
//! counted from when the first read that returned that record *answered* (client-go
//! `observedTime`). Only the instants of the attempts change:
//!
//! * **No read before a renewal can have landed.** The holder writes its next renewal at the
//!   earliest one retry period after its previous write was acknowledged (client-go `renew`:
//!   `wait.Until(…, RetryPeriod)` after each success), and that write landed after the standby
//!   *sent* its latest read that still returned the previous record. So nothing new can be seen
//!   before that send instant + retry period ([`Why::RenewalDue`]).
//! * **From then on, a read every [`observe_interval`]** until the record changes
//!   ([`Why::Overdue`]). A renewal is therefore seen at most one observe interval (plus a read's
//!   latency) after it was written, whichever renewal turns out to be the holder's last.
//! * **An attempt exactly at the expiry** ([`Why::Expiry`]), never later, so the takeover lands
//!   at observation + lease duration instead of up to 2.2 retry periods after it.
//! * **Failed requests back off as client-go does** (jittered retry period, [`Why::Backoff`]),
//!   except that an expiry is not slept through.
//!
//! Safety is client-go's by construction: the expiry is counted from the same local instant
//! client-go counts from, and a takeover is still a PUT carrying the resourceVersion of a read
//! that returned the unchanged record. A standby here never takes over earlier than a client-go
//! standby that made the same reads, so a Go and a Rust replica can share one Lease either way
//! round. Wall clocks are never compared: `renewTime` is not an input. (An estimate built from
//! `renewTime` could move the expiry before the observation; with lease 15 s / renew deadline
//! 10 s / retry 5 s, and 3 s / 2 s / 1 s, the lease duration equals retry period + renew
//! deadline, the longest a client-go leader keeps acting after its last acknowledged renewal,
//! so a Go leader leaves no room for that.)
//!
//! The cost is reads: about two per retry period while the holder renews on time (the read at
//! the due instant usually comes a moment early, the next one sees the renewal), against
//! client-go's one per 1–2.2 retry periods; and one per observe interval while a renewal is
//! overdue.
//!
//! What the timing assumes: the holder runs with a retry period no shorter than this
//! replica's (the same flags, as in one Deployment). A holder renewing more often is seen late,
//! which only delays a takeover (never hastens it).

use std::time::Duration;

use tokio::time::Instant;

use super::JITTER_FACTOR;

/// The longest pause between reads while a renewal is due.
pub(super) const MAX_OBSERVE_INTERVAL: Duration = Duration::from_millis(500);

/// How often a standby reads the Lease while the holder's renewal is due: a quarter of the
/// retry period, at most [`MAX_OBSERVE_INTERVAL`]. The observation lag it leaves (250 ms with a
/// 1 s retry period, 500 ms with upstream's 5 s) is the main part of the takeover's margin over
/// the lease duration; the rest is the latency of three requests (the read that sees the last
/// renewal, the GET and the PUT of the takeover).
pub(super) fn observe_interval(retry_period: Duration) -> Duration {
    (retry_period / 4).min(MAX_OBSERVE_INTERVAL)
}

/// What the standby's reads saw of the record it holds now. Instants are local (monotonic).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Sighting {
    /// When the answer of the first read that returned this record arrived (client-go
    /// `observedTime`): the lease expires `lease_duration` after it.
    pub(super) seen_at: Instant,
    /// When the latest read that still returned the previous record was sent: the holder wrote
    /// this record after that instant. `None` when this record is the first one seen.
    pub(super) previous_read_sent: Option<Instant>,
    /// The record's own `leaseDurationSeconds` (client-go measures the expiry with the record's
    /// value, not with its own flag).
    pub(super) lease_duration: Duration,
}

impl Sighting {
    /// The first instant at which client-go's rule lets another identity take the Lease.
    pub(super) fn expiry(&self) -> Instant {
        self.seen_at + self.lease_duration
    }
}

/// Why the attempt that just ended did not leave this replica holding the Lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum NotAcquired {
    /// The Lease was read and is held by another identity, not yet expired.
    HeldByOther,
    /// A request failed (the read, the create, or the takeover's PUT, e.g. 409 Conflict because
    /// another standby took the Lease first).
    Failed,
}

/// The standby's timings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Timing {
    /// `--leader-election-retry-period`.
    pub(super) retry_period: Duration,
    /// See [`observe_interval`].
    pub(super) observe_interval: Duration,
}

impl Timing {
    /// The timings of a replica configured with `retry_period`.
    pub(super) fn new(retry_period: Duration) -> Self {
        Self {
            retry_period,
            observe_interval: observe_interval(retry_period),
        }
    }
}

/// Why the next attempt is at that instant (logged at debug level, and what the tests compare).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Why {
    /// The holder's next renewal cannot have landed before then.
    RenewalDue,
    /// The holder's renewal is due or overdue: read again after an observe interval.
    Overdue,
    /// The Lease expires then, unless a renewal shows up.
    Expiry,
    /// The last request failed: client-go's jittered retry period.
    Backoff,
}

/// When and why to try next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Wake {
    /// The instant of the next attempt.
    pub(super) at: Instant,
    /// Which rule chose it.
    pub(super) why: Why,
}

/// The instant of the next attempt of a replica that does not hold the Lease.
///
/// `sighting` is `None` while no read has succeeded yet; `jitter_unit` in `[0, 1)` draws the
/// backoff's jitter.
pub(super) fn next_attempt(
    sighting: Option<&Sighting>,
    last: NotAcquired,
    timing: Timing,
    now: Instant,
    jitter_unit: f64,
) -> Wake {
    let backoff = Wake {
        at: now + jittered(timing.retry_period, jitter_unit),
        why: Why::Backoff,
    };
    let Some(sighting) = sighting else {
        return backoff;
    };
    let expiry = sighting.expiry();
    match last {
        NotAcquired::Failed => {
            // client-go's backoff, but not past an expiry still ahead, nor longer than an
            // observe interval once the expiry has passed (the usual failure then is the
            // takeover's PUT losing to another standby, and the next read shows the winner).
            let not_after = if expiry > now {
                Wake {
                    at: expiry,
                    why: Why::Expiry,
                }
            } else {
                Wake {
                    at: now + timing.observe_interval,
                    why: Why::Overdue,
                }
            };
            earliest(backoff, not_after)
        }
        NotAcquired::HeldByOther => {
            // Without a read that still saw the previous record, the renewal may be due now.
            let due = sighting
                .previous_read_sent
                .map_or(now, |sent| sent + timing.retry_period);
            let look = if due > now {
                Wake {
                    at: due,
                    why: Why::RenewalDue,
                }
            } else {
                Wake {
                    at: now + timing.observe_interval,
                    why: Why::Overdue,
                }
            };
            earliest(
                Wake {
                    at: expiry,
                    why: Why::Expiry,
                },
                look,
            )
        }
    }
}

/// The earlier of two wakes; `a` on a tie.
fn earliest(a: Wake, b: Wake) -> Wake {
    if b.at < a.at { b } else { a }
}

/// When a leader whose renewal cycle starts at `cycle_start` gives up if no renewal succeeds:
/// client-go's `cycle_start + renew_deadline`, but never later than `renewed_at` (its last
/// successful renewal) + retry period + renew deadline, the instant client-go's loop reaches
/// when the cycle starts on time.
///
/// The two differ only when the cycle starts late: the process was frozen (SIGSTOP, a paused
/// VM) or starved during the retry period's sleep. client-go then keeps leading until a renew
/// deadline after it runs again, acting for up to that long while a standby may have taken the
/// Lease at its expiry; here leadership ends as soon as the process runs again. The leader
/// stops at or before client-go's instant, never after, so standbys of either kind stay safe.
pub(super) fn renew_deadline(
    cycle_start: Instant,
    renewed_at: Instant,
    retry_period: Duration,
    renew_deadline: Duration,
) -> Instant {
    (cycle_start + renew_deadline).min(renewed_at + retry_period + renew_deadline)
}

/// client-go `wait.Jitter`: `period` plus up to `JITTER_FACTOR × period`, `unit` in `[0, 1)`.
pub(super) fn jittered(period: Duration, unit: f64) -> Duration {
    Duration::try_from_secs_f64(period.as_secs_f64() * (1.0 + unit * JITTER_FACTOR))
        .unwrap_or(period)
}

#[cfg(test)]
mod tests;
