//! Fault injection: make chosen calls of one RPC fail with a gRPC status or answer late.
//!
//! A [`Fault`] counts the calls of its method that arrive after it was injected (the first such
//! call is call 1), so a test can arm "the next CreateVolume times out" at any point without
//! knowing how many calls came before.

use std::time::Duration;

use tonic::{Code, Status};

use super::method::Method;

/// Which calls of the method a fault applies to, counted from the moment it was injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// Every call.
    Every,
    /// Only the n-th call (1-based); `Nth(1)` is the next call.
    Nth(u32),
    /// The first n calls, then never again.
    FirstN(u32),
    /// Every call after the first n (which are answered normally).
    After(u32),
    /// A seeded sample: each call is affected with probability `percent`/100, decided by
    /// hashing `seed` with the call number, so a run with the same seed and call order fails
    /// the same calls (the reliability suite's "20% of calls fail").
    Sampled {
        /// Share of the calls affected, 0 to 100.
        percent: u8,
        /// Seed of the sample.
        seed: u64,
    },
}

/// SplitMix64 of `seed` and `n`: a well-mixed, reproducible value per call.
fn mix(seed: u64, n: u32) -> u64 {
    let mut z = seed ^ u64::from(n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl When {
    /// Whether the `seen`-th call (1-based) is affected.
    pub fn matches(self, seen: u32) -> bool {
        match self {
            When::Every => true,
            When::Nth(n) => seen == n,
            When::FirstN(n) => seen <= n,
            When::After(n) => seen > n,
            When::Sampled { percent, seed } => mix(seed, seen) % 100 < u64::from(percent),
        }
    }

    /// Whether no call after the `seen`-th can be affected any more.
    fn exhausted(self, seen: u32) -> bool {
        match self {
            When::Every | When::After(_) | When::Sampled { .. } => false,
            When::Nth(n) | When::FirstN(n) => seen >= n,
        }
    }
}

/// What happens to an affected call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Answer at once with this gRPC status; the volume table is not touched.
    Error(Code, String),
    /// Wait this long (on the tokio clock, so paused-time tests work), then answer normally.
    Delay(Duration),
    /// Wait this long, then answer with this gRPC status without touching the volume table.
    DelayThenError(Duration, Code, String),
    /// Answer at once with one of these codes (picked from the call number, so reproducible)
    /// and this message; the volume table is not touched. An empty list answers `Internal`.
    ErrorAmong(Vec<Code>, String),
}

/// An injected fault: `action` on the calls of `method` selected by `when`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// The RPC whose calls are affected.
    pub method: Method,
    /// Which of its calls are affected.
    pub when: When,
    /// What happens to them.
    pub action: Action,
}

impl Fault {
    /// Every call of `method` fails with `code` and `message`; narrow it with [`Fault::on`].
    pub fn error(method: Method, code: Code, message: impl Into<String>) -> Self {
        Fault {
            method,
            when: When::Every,
            action: Action::Error(code, message.into()),
        }
    }

    /// Every call of `method` is answered normally after `delay`; narrow it with [`Fault::on`].
    pub fn delay(method: Method, delay: Duration) -> Self {
        Fault {
            method,
            when: When::Every,
            action: Action::Delay(delay),
        }
    }

    /// The same fault, applied to the calls selected by `when`.
    #[must_use]
    pub fn on(self, when: When) -> Self {
        Fault { when, ..self }
    }
}

/// What the injected faults decided for one call.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    /// Total delay before answering (delays of several matching faults add up).
    pub(crate) delay: Duration,
    /// The status to answer with instead of running the RPC (the first matching error wins).
    pub(crate) error: Option<Status>,
}

/// The injected faults with their per-fault call counters.
#[derive(Debug, Default)]
pub(crate) struct FaultTable {
    active: Vec<(Fault, u32)>,
}

impl FaultTable {
    pub(crate) fn inject(&mut self, fault: Fault) {
        self.active.push((fault, 0));
    }

    pub(crate) fn clear(&mut self) {
        self.active.clear();
    }

    /// Counts one call of `method` against every fault for it and returns what to do.
    pub(crate) fn on_call(&mut self, method: Method) -> Plan {
        let mut plan = Plan::default();
        for (fault, seen) in self.active.iter_mut().filter(|(f, _)| f.method == method) {
            *seen = seen.saturating_add(1);
            if !fault.when.matches(*seen) {
                continue;
            }
            let (delay, error) = match &fault.action {
                Action::Error(code, msg) => (Duration::ZERO, Some((*code, msg))),
                Action::Delay(d) => (*d, None),
                Action::DelayThenError(d, code, msg) => (*d, Some((*code, msg))),
                Action::ErrorAmong(codes, msg) => {
                    let pick = usize::try_from(mix(u64::MAX, *seen) % 64).unwrap_or(0);
                    let code = codes
                        .get(pick % codes.len().max(1))
                        .copied()
                        .unwrap_or(Code::Internal);
                    (Duration::ZERO, Some((code, msg)))
                }
            };
            plan.delay = plan.delay.saturating_add(delay);
            if plan.error.is_none() {
                plan.error = error.map(|(code, msg)| Status::new(code, msg.clone()));
            }
        }
        self.active.retain(|(f, seen)| !f.when.exhausted(*seen));
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codes(table: &mut FaultTable, method: Method, calls: usize) -> Vec<Option<Code>> {
        (0..calls)
            .map(|_| table.on_call(method).error.map(|s| s.code()))
            .collect()
    }

    #[test]
    fn nth_call_fault_hits_only_that_call_counted_from_injection() {
        let mut t = FaultTable::default();
        t.on_call(Method::CreateVolume);
        t.inject(Fault::error(Method::CreateVolume, Code::Internal, "boom").on(When::Nth(2)));
        assert_eq!(
            codes(&mut t, Method::CreateVolume, 4),
            [None, Some(Code::Internal), None, None]
        );
    }

    #[test]
    fn first_n_and_after_n_split_the_calls() {
        let mut t = FaultTable::default();
        t.inject(Fault::error(Method::Probe, Code::Unavailable, "x").on(When::FirstN(2)));
        t.inject(Fault::error(Method::Probe, Code::Aborted, "y").on(When::After(3)));
        assert_eq!(
            codes(&mut t, Method::Probe, 5),
            [
                Some(Code::Unavailable),
                Some(Code::Unavailable),
                None,
                Some(Code::Aborted),
                Some(Code::Aborted)
            ]
        );
    }

    #[test]
    fn faults_for_other_methods_neither_fire_nor_count() {
        let mut t = FaultTable::default();
        t.inject(Fault::error(Method::DeleteVolume, Code::Internal, "x").on(When::Nth(1)));
        assert_eq!(codes(&mut t, Method::CreateVolume, 2), [None, None]);
        assert_eq!(
            codes(&mut t, Method::DeleteVolume, 2),
            [Some(Code::Internal), None]
        );
    }

    #[test]
    fn delays_add_up_and_the_first_error_wins() {
        let mut t = FaultTable::default();
        t.inject(Fault::delay(Method::GetCapacity, Duration::from_secs(1)));
        t.inject(Fault {
            method: Method::GetCapacity,
            when: When::Every,
            action: Action::DelayThenError(
                Duration::from_secs(2),
                Code::DeadlineExceeded,
                "a".into(),
            ),
        });
        t.inject(Fault::error(Method::GetCapacity, Code::Internal, "b"));
        let plan = t.on_call(Method::GetCapacity);
        assert_eq!(plan.delay, Duration::from_secs(3));
        assert_eq!(plan.error.map(|s| s.code()), Some(Code::DeadlineExceeded));
    }

    #[test]
    fn a_sampled_fault_hits_about_its_share_the_same_calls_for_the_same_seed() {
        let sampled = |seed| {
            let mut t = FaultTable::default();
            t.inject(Fault {
                method: Method::CreateVolume,
                when: When::Sampled { percent: 20, seed },
                action: Action::ErrorAmong(
                    vec![Code::Unavailable, Code::Aborted, Code::Internal],
                    "chaos".into(),
                ),
            });
            codes(&mut t, Method::CreateVolume, 1000)
        };
        let first = sampled(7);
        assert_eq!(first, sampled(7));
        assert_ne!(first, sampled(8));
        let hit = first.iter().flatten().count();
        assert!((150..250).contains(&hit), "{hit} of 1000 calls failed");
        for code in [Code::Unavailable, Code::Aborted, Code::Internal] {
            assert!(first.contains(&Some(code)), "{code:?} never picked");
        }
    }

    #[test]
    fn cleared_faults_stop_firing() {
        let mut t = FaultTable::default();
        t.inject(Fault::error(Method::Probe, Code::Internal, "x"));
        t.clear();
        assert_eq!(codes(&mut t, Method::Probe, 1), [None]);
    }
}
