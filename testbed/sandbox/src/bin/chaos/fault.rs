//! The faults: what each arms before the burst, and what it does once a quarter of the burst
//! is done ("strike"), with the upstream behaviour the spec records for the same fault.

use std::time::Duration;

use testbed_mock_csi::{Action, Fault as DriverFault, Method, When};
use tonic::Code;

use crate::Sidecar;
use crate::rig::CSI_TIMEOUT;

/// A fault the suite injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Fault {
    /// The leader is SIGKILLed (no Lease release); a standby runs.
    LeaderKill,
    /// The leader is SIGSTOPped past its renew deadline, then SIGCONTed.
    LeaderStop,
    /// 20% of the driver's controller calls fail with a random code.
    DriverErrors,
    /// The first 10 calls hang past `--timeout` (and then succeed on the driver).
    DriverHang,
    /// The driver process crashes with calls in flight and comes back a second later.
    DriverCrash,
    /// The API server restarts: watches dropped, connections refused for 3 s.
    ApiRestart,
    /// The same, with a compaction while it was down (resumed watches get 410 Gone).
    ApiRestartCompacted,
    /// Another writer updates every object all the time (resourceVersion conflicts).
    Conflicts,
    /// Claims deleted mid-provisioning / VAs deleted mid-attach / PVCs resized again
    /// mid-expansion.
    MidOp,
    /// The StorageClass deleted mid-provisioning (provisioner only).
    ClassDeleted,
    /// 20% of the burst method's answers are OK with nonsense in them (`garbage.rs`).
    DriverGarbage,
    /// Every CreateVolume answer has an empty volume_id until each claim had two, then the
    /// driver recovers (provisioner only; `empty_ids.rs`).
    DriverEmptyIds,
}

/// Every fault, in the table's order.
pub(crate) const ALL: [Fault; 12] = [
    Fault::LeaderKill,
    Fault::LeaderStop,
    Fault::DriverErrors,
    Fault::DriverHang,
    Fault::DriverCrash,
    Fault::ApiRestart,
    Fault::ApiRestartCompacted,
    Fault::Conflicts,
    Fault::MidOp,
    Fault::ClassDeleted,
    Fault::DriverGarbage,
    Fault::DriverEmptyIds,
];

/// The driver's controller calls the faults act on.
const CONTROLLER_CALLS: [Method; 4] = [
    Method::CreateVolume,
    Method::DeleteVolume,
    Method::ControllerPublishVolume,
    Method::ControllerExpandVolume,
];

impl Fault {
    /// The name in the table (the flag value).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Fault::LeaderKill => "leader-kill",
            Fault::LeaderStop => "leader-stop",
            Fault::DriverErrors => "driver-errors",
            Fault::DriverHang => "driver-hang",
            Fault::DriverCrash => "driver-crash",
            Fault::ApiRestart => "api-restart",
            Fault::ApiRestartCompacted => "api-restart-compacted",
            Fault::Conflicts => "conflicts",
            Fault::MidOp => "mid-op",
            Fault::ClassDeleted => "class-deleted",
            Fault::DriverGarbage => "driver-garbage",
            Fault::DriverEmptyIds => "driver-empty-ids",
        }
    }

    /// Whether the fault means anything for this sidecar.
    pub(crate) fn applies_to(self, sidecar: Sidecar) -> bool {
        !matches!(self, Fault::ClassDeleted | Fault::DriverEmptyIds)
            || sidecar == Sidecar::Provisioner
    }

    /// Whether two replicas run (leader election faults).
    pub(crate) fn needs_standby(self) -> bool {
        matches!(self, Fault::LeaderKill | Fault::LeaderStop)
    }

    /// Driver faults armed before the burst. Faults that strike mid-burst slow the burst's
    /// method down, so there is a burst in progress to strike.
    pub(crate) fn driver_faults(self, method: Method, seed: u64) -> Vec<DriverFault> {
        match self {
            Fault::DriverErrors => CONTROLLER_CALLS
                .iter()
                .map(|&method| DriverFault {
                    method,
                    when: When::Sampled { percent: 20, seed },
                    action: Action::ErrorAmong(
                        vec![
                            Code::Unavailable,
                            Code::DeadlineExceeded,
                            Code::Internal,
                            Code::ResourceExhausted,
                            Code::Aborted,
                        ],
                        "injected by chaos".to_owned(),
                    ),
                })
                .collect(),
            Fault::DriverGarbage => {
                let mut faults = crate::garbage::driver_faults(method, seed);
                faults.extend(crate::garbage::teardown_faults(method, seed));
                faults
            }
            Fault::DriverEmptyIds => crate::empty_ids::driver_faults(),
            Fault::DriverHang => {
                vec![DriverFault::delay(method, CSI_TIMEOUT * 2).on(When::FirstN(10))]
            }
            Fault::Conflicts | Fault::ApiRestart | Fault::ApiRestartCompacted => {
                vec![DriverFault::delay(method, Duration::from_millis(50))]
            }
            Fault::LeaderKill | Fault::LeaderStop | Fault::DriverCrash => {
                vec![DriverFault::delay(method, Duration::from_millis(100))]
            }
            Fault::MidOp | Fault::ClassDeleted => {
                vec![DriverFault::delay(method, Duration::from_millis(300))]
            }
        }
    }

    /// Upstream's behaviour for the same fault where the spec records it (the pain-point
    /// lists: provisioner.md §9, sidecars.md §1.7 attacher, §2.8 resizer).
    pub(crate) fn upstream(self, sidecar: Sidecar) -> &'static str {
        use Sidecar::{Attacher, Provisioner, Resizer};
        match (self, sidecar) {
            (Fault::LeaderKill | Fault::LeaderStop, Provisioner) => {
                "leader election lost under load -> exit and restart (#416, #322); handover waits for the Lease if the identity is not stable (#1147)"
            }
            (Fault::LeaderKill | Fault::LeaderStop, Attacher) => {
                "\"timeout might hide a successful attach\" (#179): publish retried until a definitive answer"
            }
            (Fault::LeaderKill | Fault::LeaderStop | Fault::MidOp, Resizer) => {
                "\"PV expanded but PVC not updated\" (#223, #225, #56)"
            }
            (Fault::DriverErrors, Provisioner) => {
                "retry storms on permanent errors (#154, #153, PR #1369); non-final codes retried"
            }
            (Fault::DriverErrors, Attacher) => {
                "old versions treated final Unpublish errors as detached (#164, #165); now every error is retried"
            }
            (Fault::DriverErrors | Fault::DriverHang, Resizer) => {
                "VolumeResizeSuccessful shown right after a DeadlineExceeded failure (#474)"
            }
            (Fault::DriverHang, Provisioner) => {
                "timeouts with 100+ PVCs at 100 workers (#322, #211); DeadlineExceeded is non-final, so the claim stays in progress"
            }
            (Fault::DriverHang, Attacher) => "\"timeout might hide a successful attach\" (#179)",
            (Fault::DriverCrash, _) => {
                "exits on \"Lost connection to CSI driver\" and crash-loops while the driver restarts (provisioner §9.16)"
            }
            (Fault::ApiRestart | Fault::ApiRestartCompacted, _) | (Fault::Conflicts, Resizer) => {
                "not recorded in the spec"
            }
            (Fault::Conflicts, Provisioner) => {
                "PVs stuck Terminating around the finalizer: patch conflicts and races (#1277, #1217)"
            }
            (Fault::Conflicts, Attacher) => {
                "duplicate ControllerUnpublish calls (#587, fixed in 4.9)"
            }
            (Fault::MidOp, Provisioner) => {
                "volume leaks when the PVC is deleted between CreateVolume and PV creation (#486, #1469 open)"
            }
            (Fault::MidOp, Attacher) => "a VA whose PV is gone can never be detached (#235)",
            (Fault::DriverGarbage, Provisioner) => {
                "capacity below the request: DeleteVolume and retry; 0: the requested size; one NodeSelectorTerm per returned topology, keys unchecked (§4.4)"
            }
            (Fault::DriverGarbage, Attacher) => {
                "publish_context copied into status.attachmentMetadata unchecked (sidecars §1 flow 7)"
            }
            (Fault::DriverGarbage, Resizer) => {
                "the returned capacity_bytes written to the PV as the new size (sidecars §2, PV spec.capacity)"
            }
            (Fault::DriverEmptyIds, _) => {
                "a PV with an empty volumeHandle, which kube-apiserver refuses (required): its save retried forever (docs/compatibility.md)"
            }
            (Fault::ClassDeleted, _) => {
                "deletion secrets unavailable once the class is deleted (#330, fixed by PV annotations, PR #713)"
            }
        }
    }
}
