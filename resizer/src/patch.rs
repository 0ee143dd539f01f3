//! The exact bodies the resizer sends: the PVC `/status` strategic-merge patch computed from
//! the claim before and after a transition (what external-resizer's `util.CreatePVCPatch`
//! builds with apimachinery's `CreateTwoWayMergePatch`), and the PV patches.
//!
//! The PVC patch carries only what changed: annotations and status maps key by key (`null`
//! removes a key; a map that became empty is `null` as a whole), and the conditions as
//! `$setElementOrder/conditions` plus the changed items and `$patch: delete` for the removed
//! types (conditions merge by `type`). With the resourceVersion check, the old
//! `metadata.resourceVersion` goes into the patch, so a stale copy gets 409 Conflict.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use serde_json::{Map, Value, json};

use crate::names;

fn map_diff<V: serde::Serialize + PartialEq>(
    old: Option<&BTreeMap<String, V>>,
    new: Option<&BTreeMap<String, V>>,
) -> Option<Value> {
    let empty = BTreeMap::new();
    let (old, new) = (old.unwrap_or(&empty), new.unwrap_or(&empty));
    if old == new {
        return None;
    }
    if new.is_empty() {
        return Some(Value::Null);
    }
    let mut diff = Map::new();
    for (key, value) in new {
        if old.get(key) != Some(value) {
            diff.insert(key.clone(), json!(value));
        }
    }
    for key in old.keys().filter(|k| !new.contains_key(*k)) {
        diff.insert(key.clone(), Value::Null);
    }
    Some(Value::Object(diff))
}

/// The `/status` patch taking `old` to `new`; `resource_version_check` adds the old
/// resourceVersion (upstream keeps it except for the "expansion failed" writes).
pub(crate) fn pvc_status(
    old: &PersistentVolumeClaim,
    new: &PersistentVolumeClaim,
    resource_version_check: bool,
) -> Value {
    let mut metadata = Map::new();
    if let Some(annotations) = map_diff(
        old.metadata.annotations.as_ref(),
        new.metadata.annotations.as_ref(),
    ) {
        metadata.insert("annotations".into(), annotations);
    }
    if resource_version_check {
        metadata.insert(
            "resourceVersion".into(),
            json!(old.metadata.resource_version),
        );
    }
    let default = k8s_openapi::api::core::v1::PersistentVolumeClaimStatus::default();
    let (os, ns) = (
        old.status.as_ref().unwrap_or(&default),
        new.status.as_ref().unwrap_or(&default),
    );
    let mut status = Map::new();
    for (field, diff) in [
        (
            "capacity",
            map_diff(os.capacity.as_ref(), ns.capacity.as_ref()),
        ),
        (
            "allocatedResources",
            map_diff(
                os.allocated_resources.as_ref(),
                ns.allocated_resources.as_ref(),
            ),
        ),
        (
            "allocatedResourceStatuses",
            map_diff(
                os.allocated_resource_statuses.as_ref(),
                ns.allocated_resource_statuses.as_ref(),
            ),
        ),
    ] {
        if let Some(diff) = diff {
            status.insert(field.into(), diff);
        }
    }
    modify_fields(os, ns, &mut status);
    let (oc, nc) = (
        os.conditions.as_deref().unwrap_or_default(),
        ns.conditions.as_deref().unwrap_or_default(),
    );
    if oc != nc {
        if nc.is_empty() {
            status.insert("conditions".into(), Value::Null);
        } else {
            let order: Vec<Value> = nc.iter().map(|c| json!({ "type": c.type_ })).collect();
            status.insert("$setElementOrder/conditions".into(), Value::Array(order));
            let mut items: Vec<Value> = nc
                .iter()
                .filter(|c| !oc.contains(c))
                .map(|c| json!(c))
                .collect();
            items.extend(
                oc.iter()
                    .filter(|o| !nc.iter().any(|n| n.type_ == o.type_))
                    .map(|o| json!({ "$patch": "delete", "type": o.type_ })),
            );
            status.insert("conditions".into(), Value::Array(items));
        }
    }
    let mut patch = Map::new();
    if !metadata.is_empty() {
        patch.insert("metadata".into(), Value::Object(metadata));
    }
    if !status.is_empty() {
        patch.insert("status".into(), Value::Object(status));
    }
    Value::Object(patch)
}

/// The modify controller's status fields: `currentVolumeAttributesClassName` as a value, and
/// `modifyVolumeStatus` field by field (`null` when it goes), as a two-way merge patch of the
/// struct has them.
fn modify_fields(
    old: &k8s_openapi::api::core::v1::PersistentVolumeClaimStatus,
    new: &k8s_openapi::api::core::v1::PersistentVolumeClaimStatus,
    status: &mut Map<String, Value>,
) {
    if old.current_volume_attributes_class_name != new.current_volume_attributes_class_name {
        status.insert(
            "currentVolumeAttributesClassName".into(),
            json!(new.current_volume_attributes_class_name),
        );
    }
    match (&old.modify_volume_status, &new.modify_volume_status) {
        (a, b) if a == b => {}
        (_, None) => {
            status.insert("modifyVolumeStatus".into(), Value::Null);
        }
        (old, Some(new)) => {
            let mut diff = Map::new();
            if old.as_ref().map(|o| &o.status) != Some(&new.status) {
                diff.insert("status".into(), json!(new.status));
            }
            let target = |s: &k8s_openapi::api::core::v1::ModifyVolumeStatus| {
                s.target_volume_attributes_class_name.clone()
            };
            if old.as_ref().map(target) != Some(target(new)) {
                diff.insert("targetVolumeAttributesClassName".into(), json!(target(new)));
            }
            status.insert("modifyVolumeStatus".into(), Value::Object(diff));
        }
    }
}

/// PV `spec.volumeAttributesClassName` = `class` (the modify controller's success, written
/// before the claim's status).
pub(crate) fn pv_volume_attributes_class(class: &str) -> Value {
    json!({ "spec": { "volumeAttributesClassName": class } })
}

/// PV `spec.capacity.storage` = `size` (binary SI, as `resource.NewQuantity(.., BinarySI)`),
/// plus the pre-resize-capacity annotation when given and not already there.
pub(crate) fn pv_capacity(
    pv: &PersistentVolume,
    size: i64,
    pre_resize_capacity: Option<&str>,
) -> Value {
    let mut patch = json!({
        "spec": { "capacity": { names::STORAGE: csi_common::quantity::format_binary_si(size) } }
    });
    let present = pv
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(names::PRE_RESIZE_CAPACITY));
    if let Some(capacity) = pre_resize_capacity.filter(|_| !present) {
        patch["metadata"] = json!({ "annotations": { names::PRE_RESIZE_CAPACITY: capacity } });
    }
    patch
}

/// Removes the pre-resize-capacity annotation.
pub(crate) fn pv_remove_pre_resize_capacity() -> Value {
    json!({ "metadata": { "annotations": { names::PRE_RESIZE_CAPACITY: null } } })
}

#[cfg(test)]
mod tests;
