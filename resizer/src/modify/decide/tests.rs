use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, PersistentVolumeClaimCondition, PersistentVolumeClaimSpec,
    PersistentVolumeClaimStatus, PersistentVolumeSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;

const DRIVER: &str = "hostpath.csi.k8s.io";

/// A Bound claim of `pv-1` with spec class `spec`, current class `current` and `status`
/// (`(status, target)`); `""` for a spec or current class means nil.
fn pvc(spec: &str, current: &str, status: Option<(&str, &str)>) -> PersistentVolumeClaim {
    let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some("data".into()),
            namespace: Some("ns".into()),
            resource_version: Some("10".into()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            volume_name: Some("pv-1".into()),
            volume_attributes_class_name: some(spec),
            ..Default::default()
        }),
        status: Some(PersistentVolumeClaimStatus {
            phase: Some("Bound".into()),
            current_volume_attributes_class_name: some(current),
            modify_volume_status: status.map(|(status, target)| ModifyVolumeStatus {
                status: status.into(),
                target_volume_attributes_class_name: Some(target.into()),
            }),
            ..Default::default()
        }),
    }
}

fn with_modifying(mut pvc: PersistentVolumeClaim) -> PersistentVolumeClaim {
    pvc.status.as_mut().unwrap().conditions = Some(vec![PersistentVolumeClaimCondition {
        type_: modify::MODIFYING_VOLUME.into(),
        status: "True".into(),
        ..Default::default()
    }]);
    pvc
}

fn pv(driver: Option<&str>) -> PersistentVolume {
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some("pv-1".into()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            csi: driver.map(|d| CSIPersistentVolumeSource {
                driver: d.into(),
                volume_handle: "vol-1".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn which_claims_the_modifier_handles() {
    let mut unbound = pvc("gold", "", None);
    unbound.status.as_mut().unwrap().phase = Some("Pending".into());
    let ours = pv(Some(DRIVER));
    let cases = vec![
        (pvc("gold", "", None), Some(ours.clone()), Ok(())),
        (unbound, Some(ours.clone()), Err(Skip::NotBound)),
        (
            pvc("gold", "", None),
            None,
            Err(Skip::VolumeNotCached("pv-1".into())),
        ),
        (
            pvc("gold", "", None),
            Some(pv(Some("other"))),
            Err(Skip::NotOurs),
        ),
        (pvc("gold", "", None), Some(pv(None)), Err(Skip::NotOurs)),
    ];
    for (claim, volume, want) in cases {
        assert_eq!(
            qualifies(&claim, volume.as_ref(), DRIVER),
            want,
            "{volume:?}"
        );
    }
}

#[test]
fn updates_that_queue_the_claim() {
    let newer = |mut p: PersistentVolumeClaim| {
        p.metadata.resource_version = Some("11".into());
        p
    };
    let mut unbound = newer(pvc("gold", "", None));
    unbound.status.as_mut().unwrap().phase = Some("Pending".into());
    // (old, new, PV cached, queued)
    let cases = vec![
        (pvc("", "", None), newer(pvc("gold", "", None)), true, true),
        (
            pvc("gold", "", Some(("Pending", "gold"))),
            newer(pvc("silver", "", Some(("Pending", "gold")))),
            true,
            true,
        ),
        // Only the status changed (our own write): not queued.
        (
            pvc("gold", "", None),
            newer(pvc("gold", "", Some(("InProgress", "gold")))),
            true,
            false,
        ),
        // No modifyVolumeStatus: queued.
        (
            pvc("gold", "", Some(("InProgress", "gold"))),
            newer(pvc("gold", "gold", None)),
            true,
            true,
        ),
        // A resync (same resourceVersion) notices a class created meanwhile.
        (
            pvc("gold", "", Some(("Pending", "gold"))),
            pvc("gold", "", Some(("Pending", "gold"))),
            true,
            true,
        ),
        (
            pvc("", "", None),
            newer(pvc("gold", "", None)),
            false,
            false,
        ),
        (pvc("", "", None), unbound, true, false),
    ];
    for (i, (old, new, cached, want)) in cases.into_iter().enumerate() {
        assert_eq!(update_needs_sync(&old, &new, cached), want, "row {i}");
    }
}

#[test]
fn a_new_class_queues_the_claims_waiting_for_it() {
    assert!(waits_for_class(
        &pvc("gold", "", Some(("Pending", "gold"))),
        "gold"
    ));
    assert!(waits_for_class(&pvc("gold", "", None), "gold"));
    assert!(!waits_for_class(&pvc("gold", "gold", None), "gold"));
    assert!(!waits_for_class(
        &pvc("gold", "", Some(("InProgress", "gold"))),
        "gold"
    ));
    assert!(!waits_for_class(&pvc("silver", "", None), "gold"));
}

#[test]
fn the_slow_set_holds_only_the_target_the_status_is_about() {
    let cases = vec![
        (pvc("gold", "", None), Slow::Leave),
        (pvc("gold", "", Some(("Infeasible", "silver"))), Slow::Leave),
        (pvc("", "", Some(("Infeasible", "gold"))), Slow::Leave),
        (
            pvc("gold", "", Some(("Infeasible", "gold"))),
            Slow::Hold { infeasible: true },
        ),
        (
            pvc("gold", "", Some(("InProgress", "gold"))),
            Slow::Hold { infeasible: false },
        ),
    ];
    for (claim, want) in cases {
        assert_eq!(slow(&claim), want, "{:?}", modify_status(&claim));
    }
}

#[test]
fn the_plan_follows_upstream_modify() {
    let start = |s: &str| Plan::Start(s.to_owned());
    let cont = |s: &str| Plan::Continue(s.to_owned());
    // (claim, uncertain, plan)
    let cases = vec![
        // Step 2: reached.
        (pvc("gold", "gold", None), false, Plan::Nothing),
        (pvc("", "", None), false, Plan::Nothing),
        // First class, or a new one.
        (pvc("gold", "", None), false, start("gold")),
        (pvc("silver", "gold", None), false, start("silver")),
        // Step 3: rolled back to no class.
        (
            pvc("", "", Some(("Infeasible", "gold"))),
            false,
            Plan::RollBack { modifying: false },
        ),
        (
            with_modifying(pvc("", "", Some(("Infeasible", "gold")))),
            false,
            Plan::RollBack { modifying: true },
        ),
        (
            with_modifying(pvc("", "", Some(("Pending", "gold")))),
            true,
            Plan::RollBack { modifying: true },
        ),
        // Step 4: an uncertain call keeps its target, even when the spec moved on.
        (
            pvc("silver", "", Some(("InProgress", "gold"))),
            true,
            cont("gold"),
        ),
        (
            pvc("", "", Some(("InProgress", "gold"))),
            false,
            cont("gold"),
        ),
        // A final error: the user may change the target.
        (
            pvc("silver", "", Some(("InProgress", "gold"))),
            false,
            start("silver"),
        ),
        // Rollback to the previous class after Infeasible.
        (
            pvc("gold", "gold", Some(("Infeasible", "bad"))),
            false,
            start("gold"),
        ),
        // Uncertain only counts while InProgress.
        (
            pvc("silver", "", Some(("Infeasible", "gold"))),
            true,
            start("silver"),
        ),
        (
            pvc("gold", "", Some(("Pending", "gold"))),
            false,
            start("gold"),
        ),
    ];
    for (i, (claim, uncertain, want)) in cases.into_iter().enumerate() {
        assert_eq!(plan(&claim, uncertain), want, "row {i}");
    }
}

#[test]
fn each_grpc_code_leaves_its_status() {
    let in_progress = |uncertain| {
        Some(Failure {
            status: modify::IN_PROGRESS,
            uncertain,
        })
    };
    let cases = vec![
        (
            Some(Code::InvalidArgument),
            Some(Failure {
                status: modify::INFEASIBLE,
                uncertain: false,
            }),
        ),
        (Some(Code::OutOfRange), in_progress(false)),
        (Some(Code::NotFound), in_progress(false)),
        (Some(Code::Internal), in_progress(false)),
        (Some(Code::FailedPrecondition), in_progress(false)),
        (Some(Code::DeadlineExceeded), in_progress(true)),
        (Some(Code::Unavailable), in_progress(true)),
        (Some(Code::ResourceExhausted), in_progress(true)),
        (Some(Code::Aborted), in_progress(true)),
        (Some(Code::Cancelled), in_progress(true)),
        (None, None),
    ];
    for (code, want) in cases {
        assert_eq!(failure(code), want, "{code:?}");
    }
}

#[test]
fn in_progress_claims_are_uncertain_at_start() {
    assert!(uncertain_at_start(&pvc(
        "gold",
        "",
        Some(("InProgress", "gold"))
    )));
    assert!(!uncertain_at_start(&pvc(
        "gold",
        "",
        Some(("Infeasible", "gold"))
    )));
    assert!(!uncertain_at_start(&pvc(
        "gold",
        "",
        Some(("Pending", "gold"))
    )));
    assert!(!uncertain_at_start(&pvc("gold", "gold", None)));
}
