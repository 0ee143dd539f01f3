//! Fault injection: make chosen calls of one RPC fail with a gRPC status or answer late.
//!
//! A [`Fault`] counts the calls of its method that arrive after it was injected (the first such
//! call is call 1), so a test can arm "the next CreateVolume times out" at any point without
//! knowing how many calls came before.

use std::collections::HashMap;
use std::time::Duration;

use proto::csi::v1 as csi;
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
    /// Carry the call out normally (the volume table changes as for a good call), then answer
    /// OK with this corruption of the response: the driver did the work but said nonsense.
    Garbage(Garbage),
}

/// A well-formed gRPC answer with nonsense in it, as buggy drivers send. Each applies only to
/// the response of the RPC named in its doc; on any other RPC it changes nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Garbage {
    /// CreateVolume: `volume.volume_id` is empty although the volume was created. Copies a
    /// driver that fills the response from a half-initialised object (the CSI spec says the
    /// id "MUST be specified"); the created volume stays in the table under its real id.
    EmptyVolumeId,
    /// CreateVolume: `volume.capacity_bytes` is this value instead of the size created. Copies
    /// drivers answering 0 ("unknown", allowed by the spec, e.g. NFS-like drivers) or a size
    /// below the request (a driver rounding down to its allocation unit).
    CreatedCapacity(i64),
    /// CreateVolume: `volume.accessible_topology` is `segments` copies of one segment with
    /// `key` = `value`. Copies drivers reporting keys that are not Kubernetes label keys
    /// (spaces, several slashes), empty segments (`segments` 1 with an empty key) and
    /// runaway lists (thousands of segments from a driver looping over its zones).
    Topology {
        /// Number of segments in the answer.
        segments: usize,
        /// The key of every segment; an empty key makes the segments empty maps.
        key: String,
        /// The value of that key.
        value: String,
    },
    /// CreateVolume: `volume.accessible_topology` is `segments` different segments, `key` =
    /// `zone-00000`, `zone-00001`, ... Copies a driver listing every zone or node of a large
    /// backend as reachable: each distinct segment becomes one node selector term of the PV,
    /// so tens of thousands make a PV larger than kube-apiserver accepts (3 MiB of JSON).
    DistinctTopologies {
        /// Number of segments in the answer.
        segments: usize,
        /// The key of every segment.
        key: String,
    },
    /// ControllerPublishVolume: `publish_context` carries one entry of this many bytes. Copies
    /// a driver stuffing a device map or certificate into the context, past the 256 KiB a
    /// VolumeAttachment status can hold once the API server's limits apply.
    PublishContextBytes(usize),
    /// ControllerExpandVolume: `capacity_bytes` is this value (0 or below the request) although
    /// the volume was expanded. Copies drivers answering their old size or nothing.
    ExpandedCapacity(i64),
    /// GetCapacity: `available_capacity` is this value (negative from a driver subtracting
    /// reservations past zero).
    AvailableCapacity(i64),
}

impl Garbage {
    /// Corrupts a CreateVolume answer.
    pub(crate) fn create(&self, mut resp: csi::CreateVolumeResponse) -> csi::CreateVolumeResponse {
        let Some(volume) = resp.volume.as_mut() else {
            return resp;
        };
        match self {
            Garbage::EmptyVolumeId => volume.volume_id.clear(),
            Garbage::CreatedCapacity(bytes) => volume.capacity_bytes = *bytes,
            Garbage::Topology {
                segments,
                key,
                value,
            } => {
                let segment = if key.is_empty() {
                    HashMap::new()
                } else {
                    HashMap::from([(key.clone(), value.clone())])
                };
                volume.accessible_topology = (0..*segments)
                    .map(|_| csi::Topology {
                        segments: segment.clone(),
                    })
                    .collect();
            }
            Garbage::DistinctTopologies { segments, key } => {
                volume.accessible_topology = (0..*segments)
                    .map(|i| csi::Topology {
                        segments: HashMap::from([(key.clone(), format!("zone-{i:05}"))]),
                    })
                    .collect();
            }
            _ => {}
        }
        resp
    }

    /// Corrupts a ControllerPublishVolume answer.
    pub(crate) fn publish(
        &self,
        mut resp: csi::ControllerPublishVolumeResponse,
    ) -> csi::ControllerPublishVolumeResponse {
        if let Garbage::PublishContextBytes(bytes) = self {
            resp.publish_context
                .insert("garbage".into(), "x".repeat(*bytes));
        }
        resp
    }

    /// Corrupts a ControllerExpandVolume answer.
    pub(crate) fn expand(
        &self,
        mut resp: csi::ControllerExpandVolumeResponse,
    ) -> csi::ControllerExpandVolumeResponse {
        if let Garbage::ExpandedCapacity(bytes) = self {
            resp.capacity_bytes = *bytes;
        }
        resp
    }

    /// Corrupts a GetCapacity answer.
    pub(crate) fn capacity(&self, mut resp: csi::GetCapacityResponse) -> csi::GetCapacityResponse {
        if let Garbage::AvailableCapacity(bytes) = self {
            resp.available_capacity = *bytes;
        }
        resp
    }
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
    /// The corruption of a successful answer (the first matching one wins).
    pub(crate) garbage: Option<Garbage>,
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
            if let Action::Garbage(garbage) = &fault.action {
                plan.garbage.get_or_insert_with(|| garbage.clone());
                continue;
            }
            let (delay, error) = match &fault.action {
                Action::Garbage(_) => (Duration::ZERO, None),
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

    fn created() -> csi::CreateVolumeResponse {
        csi::CreateVolumeResponse {
            volume: Some(csi::Volume {
                volume_id: "vol-1".into(),
                capacity_bytes: 1 << 30,
                accessible_topology: vec![csi::Topology {
                    segments: HashMap::from([("zone".into(), "a".into())]),
                }],
                ..csi::Volume::default()
            }),
        }
    }

    #[test]
    fn a_garbage_fault_answers_ok_for_the_matching_call_only() {
        let mut t = FaultTable::default();
        t.inject(Fault {
            method: Method::CreateVolume,
            when: When::Nth(2),
            action: Action::Garbage(Garbage::EmptyVolumeId),
        });
        let plans: Vec<_> = (0..3).map(|_| t.on_call(Method::CreateVolume)).collect();
        assert!(plans.iter().all(|p| p.error.is_none()));
        let garbage: Vec<_> = plans.into_iter().map(|p| p.garbage).collect();
        assert_eq!(garbage, [None, Some(Garbage::EmptyVolumeId), None]);
    }

    #[test]
    fn empty_volume_id_clears_only_the_id() {
        let volume = Garbage::EmptyVolumeId.create(created()).volume.unwrap();
        assert_eq!(volume.volume_id, "");
        assert_eq!(volume.capacity_bytes, 1 << 30);
    }

    #[test]
    fn created_capacity_replaces_the_size() {
        for bytes in [0, 1024, -1] {
            let volume = Garbage::CreatedCapacity(bytes).create(created()).volume;
            assert_eq!(volume.unwrap().capacity_bytes, bytes);
        }
    }

    #[test]
    fn topology_garbage_repeats_the_segment_and_an_empty_key_makes_empty_segments() {
        let many = Garbage::Topology {
            segments: 10_000,
            key: "not a/label/key".into(),
            value: "v".into(),
        };
        let topology = many.create(created()).volume.unwrap().accessible_topology;
        assert_eq!(topology.len(), 10_000);
        assert_eq!(topology[9_999].segments["not a/label/key"], "v");
        let empty = Garbage::Topology {
            segments: 1,
            key: String::new(),
            value: String::new(),
        };
        let topology = empty.create(created()).volume.unwrap().accessible_topology;
        assert_eq!(topology.len(), 1);
        assert!(topology[0].segments.is_empty());
    }

    #[test]
    fn distinct_topologies_name_a_different_zone_in_each_segment() {
        let garbage = Garbage::DistinctTopologies {
            segments: 40_000,
            key: "topology.example.com/zone".into(),
        };
        let topology = garbage
            .create(created())
            .volume
            .unwrap()
            .accessible_topology;
        assert_eq!(topology.len(), 40_000);
        assert_eq!(
            topology[0].segments["topology.example.com/zone"],
            "zone-00000"
        );
        assert_eq!(
            topology[39_999].segments["topology.example.com/zone"],
            "zone-39999"
        );
    }

    #[test]
    fn publish_context_bytes_adds_one_entry_of_that_size() {
        let resp = Garbage::PublishContextBytes(1 << 20)
            .publish(csi::ControllerPublishVolumeResponse::default());
        assert_eq!(resp.publish_context["garbage"].len(), 1 << 20);
    }

    #[test]
    fn expanded_capacity_replaces_the_answered_size() {
        let resp = Garbage::ExpandedCapacity(0).expand(csi::ControllerExpandVolumeResponse {
            capacity_bytes: 2 << 30,
            node_expansion_required: true,
        });
        assert_eq!(resp.capacity_bytes, 0);
        assert!(resp.node_expansion_required);
    }

    #[test]
    fn available_capacity_replaces_the_available_bytes() {
        let resp = Garbage::AvailableCapacity(-5).capacity(csi::GetCapacityResponse::default());
        assert_eq!(resp.available_capacity, -5);
    }

    #[test]
    fn garbage_for_another_rpc_changes_nothing() {
        assert_eq!(Garbage::AvailableCapacity(-5).create(created()), created());
        let publish = csi::ControllerPublishVolumeResponse::default();
        assert_eq!(Garbage::EmptyVolumeId.publish(publish.clone()), publish);
    }
}
