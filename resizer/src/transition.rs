//! The PVC status a step of the resize flow leaves behind, as pure functions from the claim
//! before to the claim after (external-resizer `markControllerResizeInProgress`,
//! `markControllerExpansionFailed`, `markForPendingNodeExpansion`, `markOverallExpansionAsFinished`
//! and `MergeResizeConditionsOfPVC`, spec sidecars.md §2.3-§2.4). `crate::patch` turns the pair
//! into the `/status` patch.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PersistentVolumeClaimCondition};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::names::{self, condition, resize_status};

fn new_condition(
    type_: &str,
    message: Option<String>,
    now: Timestamp,
) -> PersistentVolumeClaimCondition {
    PersistentVolumeClaimCondition {
        type_: type_.to_owned(),
        status: "True".to_owned(),
        last_transition_time: Some(Time(now)),
        message,
        ..Default::default()
    }
}

/// Replaces the resize conditions as a group: other condition types are kept in place; a
/// resize condition that is also in `new` with the same status is kept as it was (so its
/// `lastTransitionTime` stays); other old resize conditions are kept only with `keep_old`;
/// then the remaining new conditions follow.
pub(crate) fn merge_resize_conditions(
    old: &[PersistentVolumeClaimCondition],
    new: Vec<PersistentVolumeClaimCondition>,
    keep_old: bool,
) -> Vec<PersistentVolumeClaimCondition> {
    let mut new: Vec<Option<PersistentVolumeClaimCondition>> = new.into_iter().map(Some).collect();
    let mut result = Vec::with_capacity(old.len() + new.len());
    for existing in old {
        if !condition::RESIZE_GROUP.contains(&existing.type_.as_str()) {
            result.push(existing.clone());
            continue;
        }
        match new
            .iter_mut()
            .find(|c| c.as_ref().is_some_and(|c| c.type_ == existing.type_))
        {
            Some(slot) => {
                let replacement = slot.take().unwrap_or_else(|| existing.clone());
                result.push(if replacement.status == existing.status {
                    existing.clone()
                } else {
                    replacement
                });
            }
            None if keep_old => result.push(existing.clone()),
            None => {}
        }
    }
    result.extend(new.into_iter().flatten());
    result
}

fn set_conditions(
    pvc: &mut PersistentVolumeClaim,
    new: Vec<PersistentVolumeClaimCondition>,
    keep_old: bool,
) {
    let status = pvc.status.get_or_insert_with(Default::default);
    let merged = merge_resize_conditions(
        status.conditions.as_deref().unwrap_or_default(),
        new,
        keep_old,
    );
    status.conditions = (!merged.is_empty()).then_some(merged);
}

fn set_resize_status(pvc: &mut PersistentVolumeClaim, value: Option<&str>) {
    let status = pvc.status.get_or_insert_with(Default::default);
    let mut map = status
        .allocated_resource_statuses
        .take()
        .unwrap_or_default();
    match value {
        Some(v) => {
            map.insert(names::STORAGE.to_owned(), v.to_owned());
        }
        None => {
            map.remove(names::STORAGE);
        }
    }
    // An emptied map becomes null, as upstream writes it.
    status.allocated_resource_statuses = (!map.is_empty()).then_some(map);
}

fn set_annotation(pvc: &mut PersistentVolumeClaim, value: Option<&str>) {
    let mut map = pvc.metadata.annotations.take().unwrap_or_default();
    match value {
        Some(v) => {
            map.insert(names::NODE_EXPANSION_NOT_REQUIRED.to_owned(), v.to_owned());
        }
        None => {
            map.remove(names::NODE_EXPANSION_NOT_REQUIRED);
        }
    }
    pvc.metadata.annotations = (!map.is_empty()).then_some(map);
}

fn storage(bytes: i64) -> BTreeMap<String, Quantity> {
    BTreeMap::from([(
        names::STORAGE.to_owned(),
        Quantity(csi_common::quantity::format_binary_si(bytes)),
    )])
}

/// Step 5: `Resizing`, no node-expansion-not-required annotation,
/// `ControllerResizeInProgress`, allocated = `target`.
pub(crate) fn in_progress(
    pvc: &PersistentVolumeClaim,
    target: i64,
    now: Timestamp,
) -> PersistentVolumeClaim {
    let mut new = legacy::in_progress(pvc, now);
    set_annotation(&mut new, None);
    set_resize_status(&mut new, Some(resize_status::CONTROLLER_IN_PROGRESS));
    let status = new.status.get_or_insert_with(Default::default);
    let mut allocated = status.allocated_resources.take().unwrap_or_default();
    allocated.extend(storage(target));
    status.allocated_resources = Some(allocated);
    new
}

/// Step 8, a final error: `ControllerResizeError` with `failed to expand pvc with <error>`,
/// and `ControllerResizeInfeasible` when the driver said the size is impossible.
pub(crate) fn failed(
    pvc: &PersistentVolumeClaim,
    error: &str,
    infeasible: bool,
    now: Timestamp,
) -> PersistentVolumeClaim {
    let mut new = pvc.clone();
    let message = format!("failed to expand pvc with {error}");
    set_conditions(
        &mut new,
        vec![new_condition(
            condition::CONTROLLER_RESIZE_ERROR,
            Some(message),
            now,
        )],
        true,
    );
    if infeasible {
        set_resize_status(&mut new, Some(resize_status::CONTROLLER_INFEASIBLE));
    }
    new
}

/// Step 9 with node expansion required: `FileSystemResizePending` (other resize conditions
/// kept), no not-required annotation, `NodeResizePending`.
pub(crate) fn node_pending(pvc: &PersistentVolumeClaim, now: Timestamp) -> PersistentVolumeClaim {
    let mut new = legacy::node_pending(pvc, now);
    set_annotation(&mut new, None);
    set_resize_status(&mut new, Some(resize_status::NODE_PENDING));
    new
}

/// Step 9 without node expansion: `status.capacity` = the driver's size, resize conditions
/// cleared, the resize status key removed, the not-required annotation set.
pub(crate) fn finished(pvc: &PersistentVolumeClaim, size: i64) -> PersistentVolumeClaim {
    let mut new = legacy::finished(pvc, size);
    set_resize_status(&mut new, None);
    set_annotation(&mut new, Some("true"));
    new
}

/// The legacy flow (`RecoverVolumeExpansionFailure=false`, upstream `markPVCResizeInProgress`,
/// `markPVCAsFSResizeRequired`, `markPVCResizeFinished`): the same conditions, and none of
/// the recovery fields (`allocatedResources`, `allocatedResourceStatuses`, the
/// node-expansion-not-required annotation) are touched. The expand-and-recover steps above
/// are these plus the recovery fields.
pub(crate) mod legacy {
    use super::{
        PersistentVolumeClaim, PersistentVolumeClaimCondition, Timestamp, condition, new_condition,
        set_conditions, storage,
    };

    /// `pvc` with `condition` added (other resize conditions kept).
    fn with_condition(
        pvc: &PersistentVolumeClaim,
        condition: PersistentVolumeClaimCondition,
    ) -> PersistentVolumeClaim {
        let mut new = pvc.clone();
        set_conditions(&mut new, vec![condition], true);
        new
    }

    /// `Resizing` (other resize conditions kept).
    pub(crate) fn in_progress(
        pvc: &PersistentVolumeClaim,
        now: Timestamp,
    ) -> PersistentVolumeClaim {
        with_condition(pvc, new_condition(condition::RESIZING, None, now))
    }

    /// `FileSystemResizePending` (other resize conditions kept).
    pub(crate) fn node_pending(
        pvc: &PersistentVolumeClaim,
        now: Timestamp,
    ) -> PersistentVolumeClaim {
        with_condition(
            pvc,
            new_condition(
                condition::FILE_SYSTEM_RESIZE_PENDING,
                Some(condition::FILE_SYSTEM_RESIZE_PENDING_MESSAGE.to_owned()),
                now,
            ),
        )
    }

    /// `status.capacity` = the driver's size, resize conditions cleared.
    pub(crate) fn finished(pvc: &PersistentVolumeClaim, size: i64) -> PersistentVolumeClaim {
        let mut new = pvc.clone();
        set_conditions(&mut new, Vec::new(), false);
        let status = new.status.get_or_insert_with(Default::default);
        let mut capacity = status.capacity.take().unwrap_or_default();
        capacity.extend(storage(size));
        status.capacity = Some(capacity);
        new
    }
}

#[cfg(test)]
mod tests;
