//! What the modify controller does with a claim (external-resizer `modify_volume.go`
//! `modify`, `delayModificationIfRecentlyInfeasible`, `controllerModifyVolumeWithTarget`;
//! spec sidecars.md §2.5). Every function here reads objects and returns a value.

use k8s_openapi::api::core::v1::{ModifyVolumeStatus, PersistentVolume, PersistentVolumeClaim};
use tonic::Code;

use crate::decide::{bound_volume, has_condition};
use crate::names::modify;

/// `spec.volumeAttributesClassName`, nil read as empty (upstream `ptr.Deref(.., "")`).
pub(crate) fn spec_class(pvc: &PersistentVolumeClaim) -> &str {
    pvc.spec
        .as_ref()
        .and_then(|s| s.volume_attributes_class_name.as_deref())
        .unwrap_or_default()
}

/// `status.currentVolumeAttributesClassName`, nil read as empty.
pub(crate) fn current_class(pvc: &PersistentVolumeClaim) -> &str {
    pvc.status
        .as_ref()
        .and_then(|s| s.current_volume_attributes_class_name.as_deref())
        .unwrap_or_default()
}

/// `status.modifyVolumeStatus`.
pub(crate) fn modify_status(pvc: &PersistentVolumeClaim) -> Option<&ModifyVolumeStatus> {
    pvc.status.as_ref()?.modify_volume_status.as_ref()
}

fn status_is(pvc: &PersistentVolumeClaim, value: &str) -> bool {
    modify_status(pvc).is_some_and(|s| s.status == value)
}

/// `status.modifyVolumeStatus.targetVolumeAttributesClassName`, empty when unset.
pub(crate) fn status_target(pvc: &PersistentVolumeClaim) -> &str {
    modify_status(pvc)
        .and_then(|s| s.target_volume_attributes_class_name.as_deref())
        .unwrap_or_default()
}

/// Why the modify controller leaves a claim alone (spec §2.3 "Which PVCs are handled by the
/// modify controller").
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Skip {
    /// Not Bound or no `spec.volumeName`.
    NotBound,
    /// The PV is not in the cache yet: retried (the creation race of upstream #521).
    VolumeNotCached(String),
    /// Not a CSI volume, or another driver's (the modifier has no CSI migration).
    NotOurs,
}

/// Whether the modify controller of `driver` handles this claim.
pub(crate) fn qualifies(
    pvc: &PersistentVolumeClaim,
    pv: Option<&PersistentVolume>,
    driver: &str,
) -> Result<(), Skip> {
    let name = bound_volume(pvc).ok_or(Skip::NotBound)?;
    let pv = pv.ok_or_else(|| Skip::VolumeNotCached(name.to_owned()))?;
    let csi = pv.spec.as_ref().and_then(|s| s.csi.as_ref());
    if csi.is_some_and(|csi| csi.driver == driver) {
        Ok(())
    } else {
        Err(Skip::NotOurs)
    }
}

/// The PVC update filter (spec §2.5): the spec class changed, or there is no
/// `modifyVolumeStatus`, or it is a resync (same resourceVersion, so a class created after
/// the claim is noticed); and the claim is Bound with its PV in the cache (`pv_cached`).
pub(crate) fn update_needs_sync(
    old: &PersistentVolumeClaim,
    new: &PersistentVolumeClaim,
    pv_cached: bool,
) -> bool {
    let resync = old.metadata.resource_version == new.metadata.resource_version;
    let changed = spec_class(old) != spec_class(new) || modify_status(new).is_none() || resync;
    changed && bound_volume(new).is_some() && pv_cached
}

/// Beyond upstream (whose class informer has no handlers): a class that appears queues the
/// claims waiting for it (`Pending` with this target, or no status yet and this spec class),
/// so they do not wait for the next resync.
pub(crate) fn waits_for_class(pvc: &PersistentVolumeClaim, class: &str) -> bool {
    spec_class(pvc) == class
        && (status_is(pvc, modify::PENDING) || modify_status(pvc).is_none())
        && current_class(pvc) != class
}

/// Step 1, the slow set of infeasible targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slow {
    /// The user asked for another class (or there is no status): it may be feasible, so
    /// the claim leaves the slow set.
    Leave,
    /// The status is about the spec class: a claim in the slow set waits; `infeasible`
    /// (re)enters it (upstream `markForSlowRetry`).
    Hold {
        /// The status is `Infeasible`.
        infeasible: bool,
    },
}

/// Step 1 for this claim.
pub(crate) fn slow(pvc: &PersistentVolumeClaim) -> Slow {
    let spec = pvc
        .spec
        .as_ref()
        .and_then(|s| s.volume_attributes_class_name.as_deref());
    match (modify_status(pvc), spec) {
        (Some(status), Some(spec))
            if status
                .target_volume_attributes_class_name
                .as_deref()
                .unwrap_or_default()
                == spec =>
        {
            Slow::Hold {
                infeasible: status.status == modify::INFEASIBLE,
            }
        }
        _ => Slow::Leave,
    }
}

/// Steps 2-5: what to do with a claim that passed the slow-set check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Plan {
    /// No status and the spec class is the current one.
    Nothing,
    /// The spec class is empty and nothing is in progress: the user rolled back. With a
    /// `ModifyingVolume` condition, `VolumeModifyCanceled` and the condition goes; the
    /// `modifyVolumeStatus` is left as it is (it records the last attempt).
    RollBack {
        /// The claim has a `ModifyingVolume` condition.
        modifying: bool,
    },
    /// A call may still run on the driver (uncertain), or the user emptied the spec while
    /// one was in progress: go on towards the status' target; no new status write.
    Continue(String),
    /// Go for the spec class: `Pending` if it does not exist, else `InProgress` and the call.
    Start(String),
}

/// Steps 2-5; `uncertain`: the last call for this claim ended without a final answer (or was
/// `InProgress` when this process started).
pub(crate) fn plan(pvc: &PersistentVolumeClaim, uncertain: bool) -> Plan {
    let spec = spec_class(pvc);
    let status = modify_status(pvc);
    if status.is_none() && spec == current_class(pvc) {
        return Plan::Nothing;
    }
    let in_progress = status_is(pvc, modify::IN_PROGRESS);
    if spec.is_empty() && !in_progress {
        return Plan::RollBack {
            modifying: has_condition(pvc, modify::MODIFYING_VOLUME),
        };
    }
    if (in_progress && uncertain) || spec.is_empty() {
        return Plan::Continue(status_target(pvc).to_owned());
    }
    Plan::Start(spec.to_owned())
}

/// What a ControllerModifyVolume error leaves (step 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Failure {
    /// The new `modifyVolumeStatus.status`: `Infeasible` for InvalidArgument (the only
    /// infeasible code of the modifier; NotFound and OutOfRange stay `InProgress`), else
    /// `InProgress`.
    pub(crate) status: &'static str,
    /// The driver may still be working: the target must not change (the uncertain set), and
    /// the messages say "still in progress".
    pub(crate) uncertain: bool,
}

/// Step 8 for a failed call with gRPC `code`; `None` for an error without a status, which
/// upstream returns without touching the claim.
pub(crate) fn failure(code: Option<Code>) -> Option<Failure> {
    let code = code?;
    let is_final = csi_common::status::is_final_error(Some(code));
    Some(Failure {
        status: if is_final && code == Code::InvalidArgument {
            modify::INFEASIBLE
        } else {
            modify::IN_PROGRESS
        },
        uncertain: !is_final,
    })
}

/// The claims to treat as uncertain at start-up: `InProgress` ones (a call may have been
/// running when the previous process stopped).
pub(crate) fn uncertain_at_start(pvc: &PersistentVolumeClaim) -> bool {
    status_is(pvc, modify::IN_PROGRESS)
}

#[cfg(test)]
mod tests;
