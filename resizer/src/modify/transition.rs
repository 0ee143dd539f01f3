//! The claim status each modify step leaves, as pure functions from the claim before to the
//! claim after (external-resizer `modify_status.go`: `markControllerModifyVolumeStatus`,
//! `markControllerModifyVolumeCompleted`, `markRolledBack`, and `util.MergePVCConditions`;
//! spec sidecars.md §2.3 "Written by the modify controller"). `crate::patch` turns the pair
//! into the `/status` patch.

use csi_common::status::{CsiError, code_name};
use k8s_openapi::api::core::v1::{
    ModifyVolumeStatus, PersistentVolumeClaim, PersistentVolumeClaimCondition,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::names::modify;

/// Replaces conditions by type and keeps the other types in place. A replaced condition
/// keeps its `lastTransitionTime` when status and reason are unchanged, else it becomes
/// `now` (Kubernetes' meaning of the field); `lastProbeTime` is always the new one.
pub(crate) fn merge_conditions(
    old: &[PersistentVolumeClaimCondition],
    new: Vec<PersistentVolumeClaimCondition>,
    now: Timestamp,
) -> Vec<PersistentVolumeClaimCondition> {
    let mut new: Vec<Option<PersistentVolumeClaimCondition>> = new.into_iter().map(Some).collect();
    let stamp = |mut condition: PersistentVolumeClaimCondition,
                 before: Option<&PersistentVolumeClaimCondition>| {
        condition.last_transition_time = match before {
            Some(b) if b.status == condition.status && b.reason == condition.reason => {
                b.last_transition_time.clone()
            }
            _ => Some(Time(now)),
        };
        condition
    };
    let mut result = Vec::with_capacity(old.len() + new.len());
    for existing in old {
        match new
            .iter_mut()
            .find(|c| c.as_ref().is_some_and(|c| c.type_ == existing.type_))
            .and_then(Option::take)
        {
            Some(replacement) => result.push(stamp(replacement, Some(existing))),
            None => result.push(existing.clone()),
        }
    }
    for condition in new.into_iter().flatten() {
        result.push(stamp(condition, None));
    }
    result
}

fn condition(
    type_: &str,
    reason: Option<String>,
    message: String,
    now: Timestamp,
) -> PersistentVolumeClaimCondition {
    PersistentVolumeClaimCondition {
        type_: type_.to_owned(),
        status: "True".to_owned(),
        reason,
        message: Some(message),
        last_probe_time: Some(Time(now)),
        last_transition_time: None,
    }
}

fn set_status(pvc: &mut PersistentVolumeClaim, status: &str, target: &str) {
    pvc.status
        .get_or_insert_with(Default::default)
        .modify_volume_status = Some(ModifyVolumeStatus {
        status: status.to_owned(),
        target_volume_attributes_class_name: Some(target.to_owned()),
    });
}

fn set_conditions(
    pvc: &mut PersistentVolumeClaim,
    new: Vec<PersistentVolumeClaimCondition>,
    now: Timestamp,
) {
    let status = pvc.status.get_or_insert_with(Default::default);
    let merged = merge_conditions(status.conditions.as_deref().unwrap_or_default(), new, now);
    status.conditions = (!merged.is_empty()).then_some(merged);
}

fn remove_conditions(pvc: &mut PersistentVolumeClaim, types: &[&str]) {
    let status = pvc.status.get_or_insert_with(Default::default);
    let kept: Vec<_> = status
        .conditions
        .take()
        .unwrap_or_default()
        .into_iter()
        .filter(|c| !types.contains(&c.type_.as_str()))
        .collect();
    status.conditions = (!kept.is_empty()).then_some(kept);
}

/// The target class does not exist yet: `Pending` with the spec class; conditions untouched.
pub(crate) fn pending(pvc: &PersistentVolumeClaim, target: &str) -> PersistentVolumeClaim {
    let mut new = pvc.clone();
    set_status(&mut new, modify::PENDING, target);
    new
}

/// Before the first call for `target`: `InProgress` and `ModifyingVolume` "Modifying volume
/// to "X" is in progress.".
pub(crate) fn in_progress(
    pvc: &PersistentVolumeClaim,
    target: &str,
    now: Timestamp,
) -> PersistentVolumeClaim {
    let mut new = pvc.clone();
    set_status(&mut new, modify::IN_PROGRESS, target);
    let message = format!("Modifying volume to {target:?} is in progress.");
    set_conditions(
        &mut new,
        vec![condition(modify::MODIFYING_VOLUME, None, message, now)],
        now,
    );
    new
}

/// A failed call for `target` with a gRPC status: `status` (from
/// [`crate::modify::decide::failure`]), `ModifyingVolume` saying whether it is "still in
/// progress" (`uncertain`) or "failed. Waiting for retry.", and `ModifyVolumeError` with the
/// gRPC code name as reason and the status message as message.
pub(crate) fn failed(
    pvc: &PersistentVolumeClaim,
    target: &str,
    status: &str,
    uncertain: bool,
    error: &CsiError,
    now: Timestamp,
) -> PersistentVolumeClaim {
    let mut new = pvc.clone();
    set_status(&mut new, status, target);
    let modifying = if uncertain {
        format!("Modifying volume to {target:?} is still in progress.")
    } else {
        format!("Modifying volume to {target:?} failed. Waiting for retry.")
    };
    let reason = error.code.map(|c| code_name(c).to_owned());
    set_conditions(
        &mut new,
        vec![
            condition(modify::MODIFYING_VOLUME, None, modifying, now),
            condition(
                modify::MODIFY_VOLUME_ERROR,
                reason,
                error.message.clone(),
                now,
            ),
        ],
        now,
    );
    new
}

/// Success: no `modifyVolumeStatus`, `currentVolumeAttributesClassName` = `target`, both
/// modify conditions removed.
pub(crate) fn completed(pvc: &PersistentVolumeClaim, target: &str) -> PersistentVolumeClaim {
    let mut new = pvc.clone();
    remove_conditions(&mut new, &modify::CONDITIONS);
    let status = new.status.get_or_insert_with(Default::default);
    status.modify_volume_status = None;
    status.current_volume_attributes_class_name = Some(target.to_owned());
    new
}

/// Rollback to no class: the `ModifyingVolume` condition goes (the last attempt's
/// `modifyVolumeStatus` and `ModifyVolumeError` stay as the record of what happened).
pub(crate) fn rolled_back(pvc: &PersistentVolumeClaim) -> PersistentVolumeClaim {
    let mut new = pvc.clone();
    remove_conditions(&mut new, &[modify::MODIFYING_VOLUME]);
    new
}

#[cfg(test)]
mod tests;
