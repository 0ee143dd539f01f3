use k8s_openapi::api::core::v1::{PersistentVolumeClaimSpec, PersistentVolumeClaimStatus};
use tonic::Code;

use super::*;

fn now() -> Timestamp {
    Timestamp::from_second(2_000_000_000).unwrap()
}

fn later() -> Timestamp {
    Timestamp::from_second(2_000_000_100).unwrap()
}

fn cond(type_: &str, reason: Option<&str>, at: Timestamp) -> PersistentVolumeClaimCondition {
    PersistentVolumeClaimCondition {
        type_: type_.into(),
        status: "True".into(),
        reason: reason.map(str::to_owned),
        last_transition_time: Some(Time(at)),
        ..Default::default()
    }
}

/// A claim with a `Resizing` condition (kept by every modify write) and spec class `gold`.
fn pvc() -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        spec: Some(PersistentVolumeClaimSpec {
            volume_attributes_class_name: Some("gold".into()),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: Some(PersistentVolumeClaimStatus {
            conditions: Some(vec![cond("Resizing", None, now())]),
            ..Default::default()
        }),
        ..PersistentVolumeClaim::default()
    }
}

fn conditions(pvc: &PersistentVolumeClaim) -> Vec<(String, Option<String>, Option<String>)> {
    pvc.status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.type_, c.reason, c.message))
        .collect()
}

fn status(pvc: &PersistentVolumeClaim) -> Option<(String, String)> {
    let s = pvc.status.as_ref()?.modify_volume_status.as_ref()?;
    Some((
        s.status.clone(),
        s.target_volume_attributes_class_name
            .clone()
            .unwrap_or_default(),
    ))
}

#[test]
fn merging_keeps_other_types_and_the_transition_time_of_an_unchanged_condition() {
    let old = vec![
        cond("Resizing", None, now()),
        cond("ModifyVolumeError", Some("Internal"), now()),
    ];
    let merged = merge_conditions(
        &old,
        vec![
            cond("ModifyVolumeError", Some("Internal"), later()),
            cond("ModifyingVolume", None, later()),
        ],
        later(),
    );
    let times: Vec<_> = merged
        .iter()
        .map(|c| (c.type_.as_str(), c.last_transition_time.clone().unwrap().0))
        .collect();
    assert_eq!(
        times,
        vec![
            ("Resizing", now()),
            ("ModifyVolumeError", now()),
            ("ModifyingVolume", later()),
        ]
    );
    // Another reason is a transition.
    let merged = merge_conditions(
        &old,
        vec![cond("ModifyVolumeError", Some("InvalidArgument"), later())],
        later(),
    );
    assert_eq!(merged[1].last_transition_time, Some(Time(later())));
}

#[test]
fn each_step_leaves_the_status_upstream_writes() {
    let pending = pending(&pvc(), "gold");
    assert_eq!(status(&pending), Some(("Pending".into(), "gold".into())));
    assert_eq!(
        conditions(&pending),
        conditions(&pvc()),
        "conditions untouched"
    );

    let started = in_progress(&pvc(), "gold", now());
    assert_eq!(status(&started), Some(("InProgress".into(), "gold".into())));
    assert_eq!(
        conditions(&started),
        vec![
            ("Resizing".into(), None, None),
            (
                "ModifyingVolume".into(),
                None,
                Some("Modifying volume to \"gold\" is in progress.".into())
            ),
        ]
    );

    let infeasible = failed(
        &started,
        "gold",
        "Infeasible",
        false,
        &CsiError::status(Code::InvalidArgument, "bad iops"),
        later(),
    );
    assert_eq!(
        status(&infeasible),
        Some(("Infeasible".into(), "gold".into()))
    );
    assert_eq!(
        conditions(&infeasible),
        vec![
            ("Resizing".into(), None, None),
            (
                "ModifyingVolume".into(),
                None,
                Some("Modifying volume to \"gold\" failed. Waiting for retry.".into())
            ),
            (
                "ModifyVolumeError".into(),
                Some("InvalidArgument".into()),
                Some("bad iops".into())
            ),
        ]
    );

    let uncertain = failed(
        &started,
        "gold",
        "InProgress",
        true,
        &CsiError::status(Code::DeadlineExceeded, "slow"),
        later(),
    );
    assert_eq!(
        conditions(&uncertain)[1].2.as_deref(),
        Some("Modifying volume to \"gold\" is still in progress.")
    );
    assert_eq!(
        conditions(&uncertain)[2].1.as_deref(),
        Some("DeadlineExceeded")
    );

    let done = completed(&infeasible, "gold");
    assert_eq!(status(&done), None);
    assert_eq!(
        done.status
            .as_ref()
            .unwrap()
            .current_volume_attributes_class_name
            .as_deref(),
        Some("gold")
    );
    assert_eq!(conditions(&done), vec![("Resizing".into(), None, None)]);

    let back = rolled_back(&infeasible);
    assert_eq!(status(&back), Some(("Infeasible".into(), "gold".into())));
    assert_eq!(
        conditions(&back)
            .into_iter()
            .map(|c| c.0)
            .collect::<Vec<_>>(),
        vec!["Resizing".to_owned(), "ModifyVolumeError".to_owned()]
    );
}
