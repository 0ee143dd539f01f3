use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, ObjectReference, PersistentVolumeClaimSpec,
    PersistentVolumeClaimStatus, PersistentVolumeSpec, PersistentVolumeStatus,
    VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;
use crate::kcm::events::EventType;

fn claim() -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some("data".into()),
            namespace: Some("ns".into()),
            uid: Some("claim-uid".into()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: Some("fast".into()),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([("storage".into(), Quantity("1Gi".into()))])),
                limits: None,
            }),
            ..Default::default()
        }),
        status: Some(PersistentVolumeClaimStatus {
            phase: Some("Pending".into()),
            ..Default::default()
        }),
    }
}

fn volume(name: &str, size: &str) -> PersistentVolume {
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            capacity: Some(BTreeMap::from([("storage".into(), Quantity(size.into()))])),
            storage_class_name: Some("fast".into()),
            persistent_volume_reclaim_policy: Some("Delete".into()),
            ..Default::default()
        }),
        status: Some(PersistentVolumeStatus {
            phase: Some("Available".into()),
            ..Default::default()
        }),
    }
}

fn reserved(mut v: PersistentVolume, uid: Option<&str>) -> PersistentVolume {
    v.spec.as_mut().unwrap().claim_ref = Some(ObjectReference {
        name: Some("data".into()),
        namespace: Some("ns".into()),
        uid: uid.map(str::to_owned),
        ..Default::default()
    });
    v
}

fn class(provisioner: &str, mode: &str) -> ClassLookup {
    ClassLookup::Found(Box::new(StorageClass {
        metadata: ObjectMeta {
            name: Some("fast".into()),
            ..Default::default()
        },
        provisioner: provisioner.into(),
        volume_binding_mode: Some(mode.into()),
        ..Default::default()
    }))
}

fn decide(
    claim: &PersistentVolumeClaim,
    class: &ClassLookup,
    volumes: &[PersistentVolume],
) -> ClaimDecision {
    let volumes: Vec<&PersistentVolume> = volumes.iter().collect();
    decide_claim(
        claim,
        &ClaimInputs {
            class,
            volumes: &volumes,
            unscheduled_pods: &[],
            default_class: None,
        },
    )
}

fn bound_to(decision: &ClaimDecision) -> Option<String> {
    match &decision.action {
        ClaimAction::Bind(v) => v.metadata.name.clone(),
        _ => None,
    }
}

#[test]
fn an_external_provisioner_claim_is_annotated_with_an_external_provisioning_event() {
    let d = decide(&claim(), &class("mock.csi.k8s.io", "Immediate"), &[]);
    assert!(matches!(&d.action, ClaimAction::SetProvisioner(p) if p == "mock.csi.k8s.io"));
    let event = d.event.unwrap();
    assert_eq!(event.reason, "ExternalProvisioning");
    assert_eq!(event.type_, EventType::Normal);
    assert_eq!(
        event.message,
        "Waiting for a volume to be created either by the external provisioner 'mock.csi.k8s.io' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered."
    );
}

#[test]
fn a_missing_class_gives_the_listers_not_found_text_and_no_write() {
    let d = decide(&claim(), &ClassLookup::Missing("fast".into()), &[]);
    assert!(matches!(d.action, ClaimAction::Nothing));
    let event = d.event.unwrap();
    assert_eq!(event.reason, "ProvisioningFailed");
    assert_eq!(event.type_, EventType::Warning);
    assert_eq!(
        event.message,
        "storageclass.storage.k8s.io \"fast\" not found"
    );
}

#[test]
fn late_binding_waits_for_a_selected_node_before_provisioning() {
    let wffc = class("mock.csi.k8s.io", "WaitForFirstConsumer");
    let d = decide(&claim(), &wffc, &[]);
    assert!(matches!(d.action, ClaimAction::Pending));
    assert_eq!(d.event.unwrap().reason, "WaitForFirstConsumer");

    let mut selected = claim();
    objects::set_annotation(&mut selected, ANN_SELECTED_NODE, "node-1");
    let d = decide(&selected, &wffc, &[]);
    assert!(matches!(d.action, ClaimAction::SetProvisioner(_)));
}

#[test]
fn late_binding_names_the_unscheduled_pods() {
    let wffc = class("mock.csi.k8s.io", "WaitForFirstConsumer");
    let pods = ["web-0".to_owned()];
    let d = decide_claim(
        &claim(),
        &ClaimInputs {
            class: &wffc,
            volumes: &[],
            unscheduled_pods: &pods,
            default_class: None,
        },
    );
    let event = d.event.unwrap();
    assert_eq!(event.reason, "WaitForPodScheduled");
    assert_eq!(event.message, "waiting for pod web-0 to be scheduled");
}

#[test]
fn a_volume_reserved_for_the_claim_wins_over_a_smaller_free_one() {
    let volumes = [
        volume("small", "1Gi"),
        reserved(volume("reserved", "5Gi"), None),
    ];
    let d = decide(&claim(), &class("mock.csi.k8s.io", "Immediate"), &volumes);
    assert_eq!(bound_to(&d).as_deref(), Some("reserved"));
}

#[test]
fn the_smallest_fitting_available_volume_is_chosen() {
    let volumes = [
        volume("big", "10Gi"),
        volume("tiny", "500Mi"),
        volume("fits", "2Gi"),
    ];
    let d = decide(&claim(), &class("mock.csi.k8s.io", "Immediate"), &volumes);
    assert_eq!(bound_to(&d).as_deref(), Some("fits"));
}

#[test]
fn free_volumes_of_another_class_or_phase_are_not_matched() {
    let mut other_class = volume("other", "1Gi");
    other_class.spec.as_mut().unwrap().storage_class_name = Some("slow".into());
    let mut released = volume("released", "1Gi");
    released.status.as_mut().unwrap().phase = Some("Released".into());
    let d = decide(
        &claim(),
        &class("mock.csi.k8s.io", "Immediate"),
        &[other_class, released],
    );
    assert!(matches!(d.action, ClaimAction::SetProvisioner(_)));
}

#[test]
fn late_binding_still_binds_a_reserved_volume_but_not_a_free_one() {
    let wffc = class("mock.csi.k8s.io", "WaitForFirstConsumer");
    let d = decide(&claim(), &wffc, &[volume("free", "1Gi")]);
    assert!(matches!(d.action, ClaimAction::Pending));
    let d = decide(
        &claim(),
        &wffc,
        &[reserved(volume("mine", "1Gi"), Some("claim-uid"))],
    );
    assert_eq!(bound_to(&d).as_deref(), Some("mine"));
}

#[test]
fn a_class_less_claim_gets_the_default_class_first() {
    let mut c = claim();
    c.spec.as_mut().unwrap().storage_class_name = None;
    let d = decide_claim(
        &c,
        &ClaimInputs {
            class: &ClassLookup::NoClass,
            volumes: &[],
            unscheduled_pods: &[],
            default_class: Some("standard"),
        },
    );
    assert!(matches!(&d.action, ClaimAction::AssignDefaultClass(n) if n == "standard"));
    let d = decide(&c, &ClassLookup::NoClass, &[]);
    assert!(matches!(d.action, ClaimAction::Pending));
    assert_eq!(d.event.unwrap().reason, "FailedBinding");
}

#[test]
fn an_in_tree_provisioner_fails_for_lack_of_a_plugin() {
    let d = decide(
        &claim(),
        &class("kubernetes.io/no-provisioner", "Immediate"),
        &[],
    );
    assert!(matches!(d.action, ClaimAction::Nothing));
    assert_eq!(
        d.event.unwrap().message,
        "no volume plugin matched name: kubernetes.io/no-provisioner"
    );
}

#[test]
fn a_requested_volume_that_is_too_small_is_a_mismatch() {
    let mut c = claim();
    c.spec.as_mut().unwrap().volume_name = Some("tiny".into());
    let d = decide(&c, &class("x", "Immediate"), &[volume("tiny", "1Mi")]);
    assert!(matches!(d.action, ClaimAction::Pending));
    let event = d.event.unwrap();
    assert_eq!(event.reason, "VolumeMismatch");
    assert_eq!(
        event.message,
        "Cannot bind to requested volume \"tiny\": requested PV is too small"
    );
}

#[test]
fn a_bound_claim_whose_volume_vanished_is_lost_once() {
    let mut c = claim();
    objects::set_annotation(&mut c, ANN_BIND_COMPLETED, "yes");
    c.spec.as_mut().unwrap().volume_name = Some("gone".into());
    let d = decide(&c, &class("x", "Immediate"), &[]);
    assert!(matches!(d.action, ClaimAction::Lost));
    assert_eq!(d.event.unwrap().reason, "ClaimLost");
    c.status.as_mut().unwrap().phase = Some("Lost".into());
    let d = decide(&c, &class("x", "Immediate"), &[]);
    assert!(matches!(d.action, ClaimAction::Nothing) && d.event.is_none());
}

#[test]
fn volume_phases_follow_the_claim_ref() {
    let c = claim();
    assert_eq!(
        decide_volume(&volume("v", "1Gi"), None),
        VolumeAction::SetPhase("Available")
    );
    assert_eq!(
        decide_volume(&reserved(volume("v", "1Gi"), None), Some(&c)),
        VolumeAction::SetPhase("Available")
    );
    let bound = reserved(volume("v", "1Gi"), Some("claim-uid"));
    // Claim not bound yet: the claim sync finishes the binding.
    assert_eq!(decide_volume(&bound, Some(&c)), VolumeAction::SyncClaim);
    let mut bound_claim = c.clone();
    bound_claim.spec.as_mut().unwrap().volume_name = Some("v".into());
    assert_eq!(
        decide_volume(&bound, Some(&bound_claim)),
        VolumeAction::SetPhase("Bound")
    );
}

#[test]
fn a_volume_whose_claim_is_gone_is_released_and_left_to_its_csi_deleter() {
    let mut v = reserved(volume("v", "1Gi"), Some("claim-uid"));
    v.spec.as_mut().unwrap().csi = Some(CSIPersistentVolumeSource {
        driver: "mock.csi.k8s.io".into(),
        volume_handle: "h".into(),
        ..Default::default()
    });
    assert_eq!(
        decide_volume(&v, None),
        VolumeAction::Release(Reclaim::Nothing)
    );
    // A claim with the same name but another uid is a different claim.
    let mut recreated = claim();
    recreated.metadata.uid = Some("other".into());
    assert_eq!(
        decide_volume(&v, Some(&recreated)),
        VolumeAction::Release(Reclaim::Nothing)
    );
}

#[test]
fn released_volumes_without_a_deleter_fail_as_upstream_does() {
    let v = reserved(volume("v", "1Gi"), Some("claim-uid"));
    match decide_volume(&v, None) {
        VolumeAction::Release(Reclaim::Fail(event)) => {
            assert_eq!(event.reason, "VolumeFailedDelete");
        }
        other => panic!("unexpected {other:?}"),
    }
    let mut retain = v.clone();
    retain
        .spec
        .as_mut()
        .unwrap()
        .persistent_volume_reclaim_policy = Some("Retain".into());
    assert_eq!(
        decide_volume(&retain, None),
        VolumeAction::Release(Reclaim::Nothing)
    );
}

#[test]
fn a_volume_bound_by_the_controller_to_a_claim_bound_elsewhere_is_freed() {
    let mut v = reserved(volume("v", "1Gi"), Some("claim-uid"));
    objects::set_annotation(&mut v, ANN_BOUND_BY_CONTROLLER, "yes");
    let mut c = claim();
    c.spec.as_mut().unwrap().volume_name = Some("other".into());
    assert_eq!(
        decide_volume(&v, Some(&c)),
        VolumeAction::Unbind {
            clear_claim_ref: true
        }
    );
}
