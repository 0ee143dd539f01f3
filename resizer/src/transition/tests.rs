use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolumeClaimCondition, PersistentVolumeClaimStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;

const GI: i64 = 1 << 30;

fn cond(type_: &str, status: &str, at: i64) -> PersistentVolumeClaimCondition {
    PersistentVolumeClaimCondition {
        type_: type_.into(),
        status: status.into(),
        last_transition_time: Some(Time(Timestamp::from_second(at).unwrap())),
        ..Default::default()
    }
}

fn types(conditions: &[PersistentVolumeClaimCondition]) -> Vec<&str> {
    conditions.iter().map(|c| c.type_.as_str()).collect()
}

#[test]
fn resize_conditions_are_replaced_as_a_group() {
    let old = vec![
        cond("Custom", "True", 1),
        cond("Resizing", "True", 2),
        cond("NodeResizeError", "True", 3),
    ];
    // Same type and status: the old one stays (its transition time too).
    let kept = merge_resize_conditions(&old, vec![cond("Resizing", "True", 9)], false);
    assert_eq!(types(&kept), ["Custom", "Resizing"]);
    assert_eq!(kept[1], old[1]);
    // keep_old keeps the other resize conditions; new types go last.
    let merged =
        merge_resize_conditions(&old, vec![cond("ControllerResizeError", "True", 9)], true);
    assert_eq!(
        types(&merged),
        [
            "Custom",
            "Resizing",
            "NodeResizeError",
            "ControllerResizeError"
        ]
    );
    // A status change replaces the old condition in place.
    let changed = merge_resize_conditions(&old, vec![cond("Resizing", "False", 9)], true);
    assert_eq!(changed[1], cond("Resizing", "False", 9));
    // Dropping all resize conditions keeps the rest.
    assert_eq!(
        types(&merge_resize_conditions(&old, vec![], false)),
        ["Custom"]
    );
}

fn pvc() -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            annotations: Some(BTreeMap::from([
                (
                    names::NODE_EXPANSION_NOT_REQUIRED.to_owned(),
                    "true".to_owned(),
                ),
                ("keep".to_owned(), "me".to_owned()),
            ])),
            ..Default::default()
        },
        status: Some(PersistentVolumeClaimStatus {
            capacity: Some(storage(GI)),
            conditions: Some(vec![cond("Custom", "True", 1)]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn now() -> Timestamp {
    Timestamp::from_second(100).unwrap()
}

fn resize_status_of(pvc: &PersistentVolumeClaim) -> Option<&str> {
    pvc.status
        .as_ref()?
        .allocated_resource_statuses
        .as_ref()?
        .get("storage")
        .map(String::as_str)
}

#[test]
fn in_progress_marks_resizing_and_allocates_the_target() {
    let next = in_progress(&pvc(), 2 * GI, now());
    let status = next.status.as_ref().unwrap();
    assert_eq!(
        types(status.conditions.as_ref().unwrap()),
        ["Custom", "Resizing"]
    );
    assert_eq!(status.allocated_resources, Some(storage(2 * GI)));
    assert_eq!(resize_status_of(&next), Some("ControllerResizeInProgress"));
    let annotations = next.metadata.annotations.unwrap();
    assert!(!annotations.contains_key(names::NODE_EXPANSION_NOT_REQUIRED));
    assert!(annotations.contains_key("keep"));
}

#[test]
fn failures_write_controller_resize_error_and_infeasible_status() {
    let progressing = in_progress(&pvc(), 2 * GI, now());
    let infeasible = failed(&progressing, "boom", true, now());
    let conditions = infeasible
        .status
        .as_ref()
        .unwrap()
        .conditions
        .clone()
        .unwrap();
    assert_eq!(
        types(&conditions),
        ["Custom", "Resizing", "ControllerResizeError"]
    );
    assert_eq!(
        conditions[2].message.as_deref(),
        Some("failed to expand pvc with boom")
    );
    assert_eq!(
        resize_status_of(&infeasible),
        Some("ControllerResizeInfeasible")
    );
    let other = failed(&progressing, "boom", false, now());
    assert_eq!(resize_status_of(&other), Some("ControllerResizeInProgress"));
}

#[test]
fn node_pending_and_finished() {
    let progressing = in_progress(&pvc(), 2 * GI, now());
    let pending = node_pending(&progressing, now());
    let conditions = pending.status.as_ref().unwrap().conditions.clone().unwrap();
    assert_eq!(
        types(&conditions),
        ["Custom", "Resizing", "FileSystemResizePending"]
    );
    assert_eq!(
        conditions[2].message.as_deref(),
        Some(condition::FILE_SYSTEM_RESIZE_PENDING_MESSAGE)
    );
    assert_eq!(resize_status_of(&pending), Some("NodeResizePending"));
    assert_eq!(
        pending.status.as_ref().unwrap().capacity,
        Some(storage(GI)),
        "kubelet writes it"
    );

    let done = finished(&progressing, 2 * GI);
    let status = done.status.as_ref().unwrap();
    assert_eq!(types(status.conditions.as_ref().unwrap()), ["Custom"]);
    assert_eq!(
        status.allocated_resource_statuses, None,
        "emptied map is null"
    );
    assert_eq!(status.capacity, Some(storage(2 * GI)));
    assert_eq!(status.allocated_resources, Some(storage(2 * GI)));
    assert_eq!(
        done.metadata
            .annotations
            .unwrap()
            .get(names::NODE_EXPANSION_NOT_REQUIRED)
            .map(String::as_str),
        Some("true")
    );
}

#[test]
fn the_legacy_flow_writes_conditions_and_capacity_but_no_recovery_fields() {
    let original = pvc();
    let progressing = legacy::in_progress(&original, now());
    let pending = legacy::node_pending(&progressing, now());
    let done = legacy::finished(&progressing, 2 * GI);
    for (next, conditions) in [
        (&progressing, &["Custom", "Resizing"][..]),
        (
            &pending,
            &["Custom", "Resizing", "FileSystemResizePending"][..],
        ),
        (&done, &["Custom"][..]),
    ] {
        let status = next.status.as_ref().unwrap();
        assert_eq!(types(status.conditions.as_ref().unwrap()), conditions);
        assert_eq!(status.allocated_resources, None);
        assert_eq!(status.allocated_resource_statuses, None);
        assert_eq!(next.metadata.annotations, original.metadata.annotations);
    }
    assert_eq!(pending.status.as_ref().unwrap().capacity, Some(storage(GI)));
    assert_eq!(
        done.status.as_ref().unwrap().capacity,
        Some(storage(2 * GI))
    );
}
