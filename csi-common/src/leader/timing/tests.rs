use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The chaos suite's timings: lease 3 s, retry period 1 s, so an observe interval of 250 ms.
fn chaos() -> Timing {
    Timing::new(Duration::from_secs(1))
}

/// Upstream's defaults: lease 15 s, retry period 5 s, observe interval 500 ms.
fn defaults() -> Timing {
    Timing::new(Duration::from_secs(5))
}

#[test]
fn the_observe_interval_is_a_quarter_retry_period_at_most_half_a_second() {
    assert_eq!(observe_interval(Duration::from_secs(1)), ms(250));
    assert_eq!(observe_interval(Duration::from_secs(2)), ms(500));
    assert_eq!(observe_interval(Duration::from_secs(5)), ms(500));
    assert_eq!(observe_interval(ms(100)), ms(25));
}

/// One row: a record first answered at `seen` ms, after a read sent at `previous_read_sent`
/// still returned the previous record, with a lease of `lease` ms; the attempt that ended at
/// `now` did not acquire for reason `last`; the next attempt must be at `wake`.
struct Case {
    what: &'static str,
    timing: Timing,
    seen: u64,
    previous_read_sent: Option<u64>,
    lease: u64,
    last: NotAcquired,
    now: u64,
    jitter: f64,
    wake: (u64, Why),
}

impl Case {
    fn chaos() -> Self {
        Self {
            what: "",
            timing: chaos(),
            seen: 0,
            previous_read_sent: None,
            lease: 3_000,
            last: NotAcquired::HeldByOther,
            now: 0,
            jitter: 0.0,
            wake: (0, Why::Expiry),
        }
    }

    fn defaults() -> Self {
        Self {
            timing: defaults(),
            lease: 15_000,
            ..Self::chaos()
        }
    }

    fn check(&self) {
        let t0 = Instant::now();
        let at = |n: u64| t0 + ms(n);
        let sighting = Sighting {
            seen_at: at(self.seen),
            previous_read_sent: self.previous_read_sent.map(at),
            lease_duration: ms(self.lease),
        };
        let wake = next_attempt(
            Some(&sighting),
            self.last,
            self.timing,
            at(self.now),
            self.jitter,
        );
        let (expected, why) = self.wake;
        assert_eq!(
            wake,
            Wake {
                at: at(expected),
                why
            },
            "{}",
            self.what
        );
    }
}

#[test]
fn a_standby_reads_when_the_renewal_is_due_then_every_observe_interval_until_the_expiry() {
    for case in [
        Case {
            what: "a renewal just seen: nothing new can land before the previous read + retry",
            seen: 10_000,
            previous_read_sent: Some(9_760),
            lease: 3_000,
            now: 10_000,
            wake: (10_760, Why::RenewalDue),
            ..Case::chaos()
        },
        Case {
            what: "the same with upstream's defaults",
            seen: 10_000,
            previous_read_sent: Some(9_510),
            lease: 15_000,
            now: 10_000,
            wake: (14_510, Why::RenewalDue),
            ..Case::defaults()
        },
        Case {
            what: "the renewal is due and the record unchanged: read again an observe interval later",
            seen: 10_000,
            previous_read_sent: Some(9_760),
            lease: 3_000,
            now: 10_760,
            wake: (11_010, Why::Overdue),
            ..Case::chaos()
        },
        Case {
            what: "unchanged record, still overdue: keep reading every observe interval",
            seen: 10_000,
            previous_read_sent: Some(9_760),
            lease: 3_000,
            now: 12_000,
            wake: (12_250, Why::Overdue),
            ..Case::chaos()
        },
        Case {
            what: "unchanged record, the expiry comes before the next read: attempt at the expiry",
            seen: 10_000,
            previous_read_sent: Some(9_760),
            lease: 3_000,
            now: 12_900,
            wake: (13_000, Why::Expiry),
            ..Case::chaos()
        },
        Case {
            what: "an expiry that passed while the attempt ran: attempt at once (the instant is past)",
            seen: 10_000,
            previous_read_sent: Some(9_760),
            lease: 3_000,
            now: 13_020,
            wake: (13_000, Why::Expiry),
            ..Case::chaos()
        },
        Case {
            what: "first record ever seen: the renewal may be due now",
            seen: 10_000,
            previous_read_sent: None,
            lease: 3_000,
            now: 10_000,
            wake: (10_250, Why::Overdue),
            ..Case::chaos()
        },
        Case {
            what: "a wide gap between the reads (e.g. after a backoff): the due instant is past",
            seen: 10_000,
            previous_read_sent: Some(4_000),
            lease: 15_000,
            now: 10_000,
            wake: (10_500, Why::Overdue),
            ..Case::defaults()
        },
        Case {
            what: "a record with a 1 s lease (a released Lease's duration) expires before the due read",
            seen: 10_000,
            previous_read_sent: Some(9_900),
            lease: 1_000,
            now: 10_000,
            wake: (11_000, Why::Expiry),
            ..Case::defaults()
        },
        Case {
            what: "a record seen long ago and never changed since (the holder is gone): expiry",
            seen: 1_000,
            previous_read_sent: None,
            lease: 15_000,
            now: 15_900,
            wake: (16_000, Why::Expiry),
            ..Case::defaults()
        },
    ] {
        case.check();
    }
}

#[test]
fn failed_requests_back_off_like_client_go_but_not_past_the_expiry() {
    for case in [
        Case {
            what: "a failed request backs off like client-go (jitter 0)",
            seen: 10_000,
            previous_read_sent: Some(9_760),
            lease: 15_000,
            last: NotAcquired::Failed,
            now: 10_000,
            wake: (15_000, Why::Backoff),
            ..Case::defaults()
        },
        Case {
            what: "a failed request backs off like client-go (jitter 0.5: 1.6 retry periods)",
            seen: 10_000,
            previous_read_sent: Some(9_760),
            lease: 15_000,
            last: NotAcquired::Failed,
            now: 10_000,
            jitter: 0.5,
            wake: (18_000, Why::Backoff),
            ..Case::defaults()
        },
        Case {
            what: "a failed request does not sleep through the expiry",
            seen: 10_000,
            previous_read_sent: Some(9_760),
            lease: 3_000,
            last: NotAcquired::Failed,
            now: 12_500,
            wake: (13_000, Why::Expiry),
            ..Case::chaos()
        },
        Case {
            what: "a failed takeover after the expiry (another standby won): read again soon",
            seen: 10_000,
            previous_read_sent: Some(9_760),
            lease: 3_000,
            last: NotAcquired::Failed,
            now: 13_010,
            wake: (13_260, Why::Overdue),
            ..Case::chaos()
        },
    ] {
        case.check();
    }
}

#[test]
fn before_any_successful_read_failures_back_off_like_client_go() {
    let now = Instant::now();
    for (unit, expected) in [(0.0, 5_000), (0.5, 8_000)] {
        let wake = next_attempt(None, NotAcquired::Failed, defaults(), now, unit);
        assert_eq!(
            wake,
            Wake {
                at: now + ms(expected),
                why: Why::Backoff
            }
        );
    }
}

#[test]
fn the_next_attempt_is_never_later_than_a_retry_period_while_reads_succeed() {
    // client-go's attempts are at least a retry period apart; these are never further apart
    // than one, whatever the instants (so every renewal client-go would see, this sees too).
    let t0 = Instant::now();
    for timing in [chaos(), defaults()] {
        let lease = timing.retry_period * 3;
        for prev in [None, Some(0), Some(400), Some(900), Some(999)] {
            for now in [1_000, 1_200, 1_900, 2_600, 3_999] {
                let sighting = Sighting {
                    seen_at: t0 + ms(1_000),
                    previous_read_sent: prev.map(|p| t0 + ms(p)),
                    lease_duration: lease,
                };
                let wake = next_attempt(
                    Some(&sighting),
                    NotAcquired::HeldByOther,
                    timing,
                    t0 + ms(now),
                    0.0,
                );
                assert!(
                    wake.at <= t0 + ms(now) + timing.retry_period,
                    "{timing:?} prev {prev:?} now {now}: {wake:?}"
                );
                assert!(wake.at <= sighting.expiry(), "{wake:?}");
            }
        }
    }
}

#[test]
fn a_leader_gives_up_a_renew_deadline_after_a_cycle_that_starts_on_time_and_at_once_after_a_freeze()
{
    let t0 = Instant::now();
    let at = |n: u64| t0 + ms(n);
    let (retry, deadline) = (Duration::from_secs(1), Duration::from_secs(2));
    // (cycle start, last successful renewal, expected deadline), all in ms from t0.
    for (start, renewed, expected) in [
        // The first cycle, right after acquiring: client-go's deadline.
        (0, 0, 2_000),
        // A cycle that starts a retry period after the last renewal: the same instant.
        (1_000, 0, 3_000),
        // A cycle that starts 2.5 s late (frozen during the sleep): the deadline is the one an
        // on-time cycle would have had, already past.
        (3_500, 0, 3_000),
        // Starved for 300 ms: the cycle keeps the on-time deadline, not 300 ms more.
        (1_300, 0, 3_000),
    ] {
        assert_eq!(
            renew_deadline(at(start), at(renewed), retry, deadline),
            at(expected),
            "cycle at {start} ms, renewed at {renewed} ms"
        );
    }
}

#[test]
fn jitter_stays_between_one_and_two_point_two_periods() {
    let period = Duration::from_secs(5);
    assert_eq!(jittered(period, 0.0), period);
    assert_eq!(jittered(period, 0.5), Duration::from_secs(8));
    assert!(jittered(period, 0.999_999) < Duration::from_secs(11));
}
