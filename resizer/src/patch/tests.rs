use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolumeClaimCondition, PersistentVolumeClaimStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;

use super::*;

fn storage(q: &str) -> BTreeMap<String, Quantity> {
    BTreeMap::from([("storage".to_owned(), Quantity(q.to_owned()))])
}

fn cond(type_: &str) -> PersistentVolumeClaimCondition {
    PersistentVolumeClaimCondition {
        type_: type_.into(),
        status: "True".into(),
        ..Default::default()
    }
}

fn pvc(conditions: Vec<PersistentVolumeClaimCondition>) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            resource_version: Some("7".into()),
            annotations: Some(BTreeMap::from([(
                names::NODE_EXPANSION_NOT_REQUIRED.to_owned(),
                "true".to_owned(),
            )])),
            ..Default::default()
        },
        status: Some(PersistentVolumeClaimStatus {
            capacity: Some(storage("1Gi")),
            allocated_resource_statuses: Some(BTreeMap::from([(
                "storage".to_owned(),
                "NodeResizePending".to_owned(),
            )])),
            conditions: Some(conditions),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn status_patch_carries_only_changes_with_optional_resource_version() {
    let old = pvc(vec![cond("Custom"), cond("Resizing")]);
    let mut new = old.clone();
    new.metadata.annotations = None;
    let status = new.status.as_mut().unwrap();
    status.capacity = Some(storage("2Gi"));
    status.allocated_resources = Some(storage("2Gi"));
    status.allocated_resource_statuses = None;
    status.conditions = Some(vec![cond("Custom"), cond("ControllerResizeError")]);
    assert_eq!(
        pvc_status(&old, &new, true),
        json!({
            "metadata": {
                "annotations": null,
                "resourceVersion": "7",
            },
            "status": {
                "capacity": {"storage": "2Gi"},
                "allocatedResources": {"storage": "2Gi"},
                "allocatedResourceStatuses": null,
                "$setElementOrder/conditions": [{"type": "Custom"}, {"type": "ControllerResizeError"}],
                "conditions": [
                    {"type": "ControllerResizeError", "status": "True"},
                    {"$patch": "delete", "type": "Resizing"},
                ],
            },
        })
    );
    // Without the check (the "failed" writes), no resourceVersion.
    assert_eq!(
        pvc_status(&old, &new, false).pointer("/metadata/resourceVersion"),
        None
    );
    // Nothing changed: only the check remains.
    assert_eq!(
        pvc_status(&old, &old, true),
        json!({"metadata": {"resourceVersion": "7"}})
    );
    // All conditions gone.
    let mut cleared = old.clone();
    cleared.status.as_mut().unwrap().conditions = None;
    assert_eq!(
        pvc_status(&old, &cleared, false),
        json!({"status": {"conditions": null}})
    );
    // A map key changed, another kept.
    let mut one_key = old.clone();
    one_key.metadata.annotations = Some(BTreeMap::from([
        (
            names::NODE_EXPANSION_NOT_REQUIRED.to_owned(),
            "true".to_owned(),
        ),
        ("x".to_owned(), "y".to_owned()),
    ]));
    assert_eq!(
        pvc_status(&old, &one_key, false),
        json!({"metadata": {"annotations": {"x": "y"}}})
    );
}

#[test]
fn pv_patches() {
    let pv = PersistentVolume::default();
    assert_eq!(
        pv_capacity(&pv, 2 << 30, Some("1Gi")),
        json!({
            "spec": {"capacity": {"storage": "2Gi"}},
            "metadata": {"annotations": {names::PRE_RESIZE_CAPACITY: "1Gi"}},
        })
    );
    assert_eq!(
        pv_capacity(&pv, 1_500_000_000, None),
        json!({"spec": {"capacity": {"storage": "1500000000"}}})
    );
    // Only if absent: an earlier pre-resize capacity is the one to restore.
    let annotated = PersistentVolume {
        metadata: ObjectMeta {
            annotations: Some(BTreeMap::from([(
                names::PRE_RESIZE_CAPACITY.to_owned(),
                "512Mi".to_owned(),
            )])),
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(
        pv_capacity(&annotated, 2 << 30, Some("1Gi")),
        json!({"spec": {"capacity": {"storage": "2Gi"}}})
    );
    assert_eq!(
        pv_remove_pre_resize_capacity(),
        json!({"metadata": {"annotations": {names::PRE_RESIZE_CAPACITY: null}}})
    );
}

#[test]
fn modify_status_fields_are_patched_field_by_field() {
    use k8s_openapi::api::core::v1::ModifyVolumeStatus;
    let before = pvc(vec![]);
    let mut started = before.clone();
    started.status.as_mut().unwrap().modify_volume_status = Some(ModifyVolumeStatus {
        status: "InProgress".into(),
        target_volume_attributes_class_name: Some("gold".into()),
    });
    assert_eq!(
        pvc_status(&before, &started, true),
        json!({"metadata": {"resourceVersion": "7"},
               "status": {"modifyVolumeStatus": {"status": "InProgress", "targetVolumeAttributesClassName": "gold"}}})
    );
    let mut infeasible = started.clone();
    infeasible
        .status
        .as_mut()
        .unwrap()
        .modify_volume_status
        .as_mut()
        .unwrap()
        .status = "Infeasible".into();
    assert_eq!(
        pvc_status(&started, &infeasible, false),
        json!({"status": {"modifyVolumeStatus": {"status": "Infeasible"}}})
    );
    let mut done = infeasible.clone();
    let status = done.status.as_mut().unwrap();
    status.modify_volume_status = None;
    status.current_volume_attributes_class_name = Some("gold".into());
    assert_eq!(
        pvc_status(&infeasible, &done, false),
        json!({"status": {"currentVolumeAttributesClassName": "gold", "modifyVolumeStatus": null}})
    );
    assert_eq!(
        pv_volume_attributes_class("gold"),
        json!({"spec": {"volumeAttributesClassName": "gold"}})
    );
}
