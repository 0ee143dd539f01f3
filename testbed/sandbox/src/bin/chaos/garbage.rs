//! The `driver-garbage` fault: a sampled fifth of the burst method's answers are OK answers
//! with nonsense in them (the mock driver's `Garbage`, docs/reliability.md "Driver garbage"),
//! and what the row reads besides convergence: how many answers of each kind were garbled,
//! and the sidecar's peak resident memory.
//!
//! The method that undoes the burst's (DeleteVolume, ControllerUnpublishVolume) answers no
//! fields, so its garbage is its status: a megabyte of error message ([`teardown_faults`]),
//! armed through the burst and again for the verdict's deletions.
//!
//! Every kind armed here is one a correct sidecar recovers from on a later, good answer (a
//! Warning, a DeleteVolume of the unusable volume, a retry). CreateVolume with an empty
//! `volume_id` on *every* call for a while is the `driver-empty-ids` row (`empty_ids.rs`).
//! Not armed: an expanded size *above* the request (CSI allows it, so it is no garbage: the sidecar
//! records the larger size, which the row's "at the requested size" check would call a
//! failure of the suite, not of the sidecar).

use std::fmt::Write as _;

use k8s_openapi::api::core::v1::Event;
use testbed_mock_csi::{
    Action, DEFAULT_NODE_ID, DEFAULT_TOPOLOGY_KEY, Fault as DriverFault, Garbage, Method, When,
};

use crate::rig::Rig;
use crate::workload::{Verdict, Workload};

/// Share of the burst method's answers garbled, in percent (the "e.g. 20 %").
const GARBLED_PERCENT: f64 = 20.0;

/// Peak resident memory (`VmHWM`) a replica may reach in a garbage row. The debug builds
/// idle at about 30 MiB and stay under 65 MiB with thousands of objects cached
/// (docs/bench.md); a sidecar that kept garbage answers (1 MiB publish contexts, 10,000
/// topology segments) would pass this within the burst.
const PEAK_RSS_LIMIT_KIB: u64 = 192 * 1024;

/// One kind of garbage answer.
struct Kind {
    /// Its name in the table.
    name: &'static str,
    garbage: Garbage,
    /// Whether the sidecar's answer to it is a Warning event (rather than a silent repair).
    warns: bool,
}

const fn kind(name: &'static str, garbage: Garbage, warns: bool) -> Kind {
    Kind {
        name,
        garbage,
        warns,
    }
}

fn topology(segments: usize, key: &str, value: &str) -> Garbage {
    Garbage::Topology {
        segments,
        key: key.to_owned(),
        value: value.to_owned(),
    }
}

/// The garbage kinds for the burst's `method`. Each is a CreateVolume,
/// ControllerPublishVolume or ControllerExpandVolume corruption the mock supports and the
/// sidecar's own `driver_garbage` tests pin the outcome of (the comments).
fn kinds(method: Method) -> Vec<Kind> {
    match method {
        Method::CreateVolume => vec![
            // Warning, retried with the same name: the idempotent answer names the volume.
            kind("empty volume_id", Garbage::EmptyVolumeId, true),
            // Below the request: Warning, DeleteVolume, retried.
            kind("capacity 1024", Garbage::CreatedCapacity(1024), true),
            kind("capacity -1", Garbage::CreatedCapacity(-1), true),
            // CSI's "unknown": the PV gets the requested size.
            kind("capacity 0", Garbage::CreatedCapacity(0), false),
            // Not a label key: Warning, DeleteVolume, retried.
            kind(
                "topology key `not a/label/key`",
                topology(1, "not a/label/key", "v"),
                true,
            ),
            // One node selector term, not 10,000.
            kind(
                "10,000 identical segments",
                topology(10_000, DEFAULT_TOPOLOGY_KEY, DEFAULT_NODE_ID),
                false,
            ),
            // Dropped: a PV without node affinity.
            kind("empty segment", topology(1, "", ""), false),
            // 40,000 node selector terms, a PV above kube-apiserver's 3 MiB request limit:
            // Warning, DeleteVolume, retried.
            kind(
                "40,000 distinct zones",
                Garbage::DistinctTopologies {
                    segments: 40_000,
                    key: DEFAULT_TOPOLOGY_KEY.to_owned(),
                },
                true,
            ),
        ],
        // Warning: the context cannot be stored; the retry's good answer attaches.
        Method::ControllerPublishVolume => vec![kind(
            "1 MiB publish context",
            Garbage::PublishContextBytes(1 << 20),
            true,
        )],
        // Warning, nothing below the request recorded, retried.
        Method::ControllerExpandVolume => vec![
            kind("expanded 0", Garbage::ExpandedCapacity(0), true),
            kind(
                "expanded 1Gi for 2Gi",
                Garbage::ExpandedCapacity(1 << 30),
                true,
            ),
            kind("expanded -1", Garbage::ExpandedCapacity(-1), true),
        ],
        _ => Vec::new(),
    }
}

/// Per-kind share, in percent, so that `kinds` independent samples garble about
/// [`GARBLED_PERCENT`] of the answers: 1 - (1 - p)^kinds = 20 %.
fn percent_per_kind(kinds: usize) -> u8 {
    let kinds = i32::try_from(kinds.max(1)).unwrap_or(i32::MAX);
    let per_kind = 1.0 - (1.0 - GARBLED_PERCENT / 100.0).powf(1.0 / f64::from(kinds));
    // At most 20 and at least 1: the cast cannot truncate.
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a value in 1..=20"
    )]
    let percent = (per_kind * 100.0).round().clamp(1.0, 100.0) as u8;
    percent
}

/// The sample of kind number `k`: its own seed, so the kinds hit different calls.
fn when(seed: u64, k: usize, per_kind: u8) -> When {
    let k = u64::try_from(k).unwrap_or(u64::MAX);
    When::Sampled {
        percent: per_kind,
        seed: seed ^ k.wrapping_mul(0xA076_1D64_78BD_642F),
    }
}

/// The driver faults of `driver-garbage` for the burst's `method`: one sampled fault per kind.
/// The mock applies the first matching garbage fault, so a call hit by two samples gets the
/// earlier kind.
pub(crate) fn driver_faults(method: Method, seed: u64) -> Vec<DriverFault> {
    let kinds = kinds(method);
    let per_kind = percent_per_kind(kinds.len());
    kinds
        .into_iter()
        .enumerate()
        .map(|(k, kind)| DriverFault {
            method,
            when: when(seed, k, per_kind),
            action: Action::Garbage(kind.garbage),
        })
        .collect()
}

/// The method that undoes the burst's `method`, when it has one: DeleteVolume after
/// CreateVolume, ControllerUnpublishVolume after ControllerPublishVolume.
fn teardown(method: Method) -> Option<Method> {
    match method {
        Method::CreateVolume => Some(Method::DeleteVolume),
        Method::ControllerPublishVolume => Some(Method::ControllerUnpublishVolume),
        _ => None,
    }
}

/// Bytes of the teardown's error message: a megabyte, as a driver that puts a whole backend
/// response or stack trace in its status would send.
const TEARDOWN_MESSAGE_BYTES: usize = 1 << 20;

/// The garbage of the teardown method. Its response has no fields (CSI spec:
/// `DeleteVolumeResponse {}`, `ControllerUnpublishVolumeResponse {}`), so its only garbage is
/// its status: a fifth of its calls fail `Internal` with a megabyte of message, which the
/// sidecar must cut before it goes into an Event, a PV annotation or a VolumeAttachment's
/// `status.detachError`, and retry until the volume is gone.
pub(crate) fn teardown_faults(method: Method, seed: u64) -> Vec<DriverFault> {
    let Some(teardown) = teardown(method) else {
        return Vec::new();
    };
    let mut message = String::with_capacity(TEARDOWN_MESSAGE_BYTES);
    message.push_str("backend error: ");
    while message.len() + "ünïcödé ".len() <= TEARDOWN_MESSAGE_BYTES {
        message.push_str("ünïcödé ");
    }
    vec![DriverFault {
        method: teardown,
        when: When::Sampled {
            percent: 20,
            seed: seed.rotate_left(17),
        },
        action: Action::Error(tonic::Code::Internal, message),
    }]
}

/// The row's verdict: [`outcome`] of the burst, then the workload's verdict with the teardown
/// garbage armed again for its deletions, then how many teardown calls it garbled.
pub(crate) async fn verdict(
    rig: &mut Rig,
    work: &mut Workload,
    seed: u64,
    notes: &mut Vec<String>,
    problems: &mut Vec<String>,
) -> anyhow::Result<Verdict> {
    let method = work.method();
    outcome(rig, method, seed, notes, problems);
    for driver_fault in teardown_faults(method, seed) {
        rig.driver.inject(driver_fault);
    }
    let verdict = work.verdict(rig).await;
    rig.driver.clear_faults();
    teardown_outcome(rig, method, notes);
    verdict
}

/// Notes how many teardown calls got the megabyte error (they fail `Internal`; no other fault
/// of this row makes that code); every one was retried: the verdict's orphan count is the
/// proof that the volumes went in the end.
fn teardown_outcome(rig: &Rig, method: Method, notes: &mut Vec<String>) {
    let Some(teardown) = teardown(method) else {
        return;
    };
    let calls = rig.driver.calls_of(teardown);
    let garbled = calls
        .iter()
        .filter(|c| c.code == Some(tonic::Code::Internal))
        .count();
    notes.push(format!(
        "{garbled} of {} {} answers a 1 MiB Internal error",
        calls.len(),
        teardown.name()
    ));
}

/// Which kind (index into `kinds(method)`) the `n`-th call (1-based) of `method` was
/// garbled with, replaying the mock's sampling in its order of precedence.
fn kind_of_call(method: Method, seed: u64, n: u32) -> Option<usize> {
    let count = kinds(method).len();
    let per_kind = percent_per_kind(count);
    (0..count).find(|&k| when(seed, k, per_kind).matches(n))
}

/// How many answers of the burst's method were garbled, per kind.
#[derive(Debug)]
struct Garbled {
    /// Calls of the method (every one since the faults were armed: they are armed before the
    /// burst's first call).
    calls: usize,
    /// Per kind: its name, whether the sidecar warns about it, and how many answers had it.
    per_kind: Vec<(&'static str, bool, usize)>,
}

impl Garbled {
    /// Replays the mock's sampling over the method's recorded calls.
    fn count(rig: &Rig, method: Method, seed: u64) -> Self {
        let calls = rig.driver.calls_of(method).len();
        let mut per_kind: Vec<(&'static str, bool, usize)> = kinds(method)
            .into_iter()
            .map(|k| (k.name, k.warns, 0))
            .collect();
        for n in 1..=u32::try_from(calls).unwrap_or(u32::MAX) {
            if let Some(k) = kind_of_call(method, seed, n) {
                per_kind[k].2 += 1;
            }
        }
        Self { calls, per_kind }
    }

    /// Garbled answers of the kinds the sidecar answers with a Warning event.
    fn warned_kinds(&self) -> usize {
        self.per_kind
            .iter()
            .filter(|(_, warns, _)| *warns)
            .map(|(_, _, n)| n)
            .sum()
    }

    /// "garbled 41 of 230 CreateVolume answers (empty volume_id 6, ...)".
    fn note(&self, method: Method) -> String {
        let total: usize = self.per_kind.iter().map(|(_, _, n)| n).sum();
        let mut note = format!(
            "garbled {total} of {} {} answers (",
            self.calls,
            method.name()
        );
        for (i, (name, _, hits)) in self.per_kind.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            let _ = write!(note, "{sep}{name} {hits}");
        }
        note.push(')');
        note
    }
}

/// Warning events the sidecar recorded (an aggregated event counts its `count`).
fn warning_events(rig: &Rig) -> usize {
    rig.server
        .list_objects::<Event>(None)
        .unwrap_or_default()
        .iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .map(|e| e.count.map_or(1, |c| usize::try_from(c).unwrap_or(1)))
        .sum()
}

/// What the row observed besides convergence: the garbled answers per kind, the Warning
/// events they caused (the positive signal that the sidecar saw the garbage; events are
/// written asynchronously, so the count is what was stored when the burst converged), and the
/// replicas' peak memory, read before they stop (a sidecar that kept the garbage would grow).
fn outcome(
    rig: &Rig,
    method: Method,
    seed: u64,
    notes: &mut Vec<String>,
    problems: &mut Vec<String>,
) {
    let garbled = Garbled::count(rig, method, seed);
    notes.push(garbled.note(method));
    let warnings = warning_events(rig);
    notes.push(format!("{warnings} Warning events"));
    if garbled.warned_kinds() > 0 && warnings == 0 {
        problems.push("garbage that needs a Warning event made none".to_owned());
    }
    match peak_rss(rig) {
        Some(kib) => {
            notes.push(format!(
                "peak RSS {}.{} MiB",
                kib / 1024,
                kib % 1024 * 10 / 1024
            ));
            if kib > PEAK_RSS_LIMIT_KIB {
                problems.push(format!("peak RSS over {} MiB", PEAK_RSS_LIMIT_KIB / 1024));
            }
        }
        None => problems.push("no replica's peak RSS could be read".to_owned()),
    }
}

/// `VmHWM` (peak resident memory) of `pid` in KiB, or `None` if it cannot be read (the
/// process is gone).
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?;
    line.trim().trim_end_matches("kB").trim().parse().ok()
}

/// The highest peak resident memory of the running replicas, in KiB.
fn peak_rss(rig: &Rig) -> Option<u64> {
    rig.replicas
        .iter()
        .filter_map(|r| r.process.pid())
        .filter_map(peak_rss_kib)
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kinds_together_garble_about_a_fifth_of_the_calls() {
        for method in [
            Method::CreateVolume,
            Method::ControllerPublishVolume,
            Method::ControllerExpandVolume,
        ] {
            let hit = (1..=10_000)
                .filter(|&n| kind_of_call(method, 1, n).is_some())
                .count();
            assert!((1_700..2_300).contains(&hit), "{method}: {hit} of 10000");
        }
    }

    #[test]
    fn every_kind_is_drawn_and_the_replay_matches_the_armed_faults() {
        let method = Method::CreateVolume;
        let faults = driver_faults(method, 7);
        assert_eq!(faults.len(), kinds(method).len());
        let mut seen = vec![false; faults.len()];
        for n in 1..=2_000 {
            let armed = faults.iter().position(|f| f.when.matches(n));
            assert_eq!(armed, kind_of_call(method, 7, n), "call {n}");
            if let Some(k) = armed {
                seen[k] = true;
            }
        }
        assert!(seen.iter().all(|s| *s), "{seen:?}");
    }

    #[test]
    fn other_methods_get_no_garbage() {
        assert!(driver_faults(Method::DeleteVolume, 1).is_empty());
        assert!(teardown_faults(Method::ControllerExpandVolume, 1).is_empty());
    }

    #[test]
    fn the_teardown_fails_a_fifth_of_its_calls_with_a_megabyte() {
        let faults = teardown_faults(Method::CreateVolume, 3);
        let [fault] = faults.as_slice() else {
            panic!("{faults:?}");
        };
        assert_eq!(fault.method, Method::DeleteVolume);
        let Action::Error(tonic::Code::Internal, message) = &fault.action else {
            panic!("{:?}", fault.action);
        };
        assert!(
            (TEARDOWN_MESSAGE_BYTES - 16..=TEARDOWN_MESSAGE_BYTES).contains(&message.len()),
            "{}",
            message.len()
        );
        let hit = (1..=10_000).filter(|&n| fault.when.matches(n)).count();
        assert!((1_700..2_300).contains(&hit), "{hit} of 10000");
        let unpublish = teardown_faults(Method::ControllerPublishVolume, 3);
        assert_eq!(unpublish[0].method, Method::ControllerUnpublishVolume);
    }

    #[test]
    fn the_peak_rss_of_this_process_is_read() {
        let kib = peak_rss_kib(std::process::id()).unwrap();
        assert!(kib > 0);
    }
}
