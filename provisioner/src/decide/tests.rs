use super::*;
use crate::annotations::{ANN_BETA_STORAGE_CLASS, pv_class_name};
use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, PersistentVolumeClaimSpec, PersistentVolumeSpec,
    PersistentVolumeStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

const DRIVER: &str = "csi.example.com";

fn pvc(
    annotations: &[(&str, &str)],
    class: Option<&str>,
    volume_name: Option<&str>,
) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some("claim".into()),
            namespace: Some("ns".into()),
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            storage_class_name: class.map(str::to_owned),
            volume_name: volume_name.map(str::to_owned),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    }
}

fn class(provisioner: &str, binding: Option<&str>) -> StorageClass {
    StorageClass {
        metadata: ObjectMeta {
            name: Some("gold".into()),
            ..ObjectMeta::default()
        },
        provisioner: provisioner.to_owned(),
        volume_binding_mode: binding.map(str::to_owned),
        ..StorageClass::default()
    }
}

#[derive(Debug, PartialEq)]
enum Want {
    Ignore,
    Wait,
    Provision(Option<String>),
    ClassMissing(String),
}

fn summarize(step: ClaimStep) -> Want {
    match step {
        ClaimStep::Ignore => Want::Ignore,
        ClaimStep::WaitForSelectedNode => Want::Wait,
        ClaimStep::Provision { selected_node } => Want::Provision(selected_node),
        ClaimStep::Fail(PlanError::StorageClassNotFound { name }) => Want::ClassMissing(name),
        ClaimStep::Fail(other) => panic!("unexpected failure {other}"),
    }
}

#[test]
#[allow(clippy::too_many_lines, reason = "table test: one row per case")]
#[allow(clippy::type_complexity, reason = "table test rows are tuples")]
fn decide_claim_picks_our_unbound_claims() {
    let ga = ANN_STORAGE_PROVISIONER;
    let beta = ANN_BETA_STORAGE_PROVISIONER;
    let immediate = class(DRIVER, Some("Immediate"));
    let unset = class(DRIVER, None);
    let wffc = class(DRIVER, Some("WaitForFirstConsumer"));
    let foreign = class("other.csi", Some("Immediate"));
    let cases: Vec<(&str, PersistentVolumeClaim, Option<&StorageClass>, Want)> = vec![
        (
            "GA annotation, immediate",
            pvc(&[(ga, DRIVER)], Some("gold"), None),
            Some(&immediate),
            Want::Provision(None),
        ),
        (
            "beta annotation only",
            pvc(&[(beta, DRIVER)], Some("gold"), None),
            Some(&immediate),
            Want::Provision(None),
        ),
        (
            "binding mode unset means immediate",
            pvc(&[(ga, DRIVER)], Some("gold"), None),
            Some(&unset),
            Want::Provision(None),
        ),
        (
            "GA names another provisioner, beta ignored",
            pvc(&[(ga, "other.csi"), (beta, DRIVER)], Some("gold"), None),
            Some(&immediate),
            Want::Ignore,
        ),
        (
            "empty GA annotation",
            pvc(&[(ga, ""), (beta, DRIVER)], Some("gold"), None),
            Some(&immediate),
            Want::Ignore,
        ),
        (
            "no annotation",
            pvc(&[], Some("gold"), None),
            Some(&immediate),
            Want::Ignore,
        ),
        (
            "migrated-to alone is not enough",
            pvc(
                &[(ga, "kubernetes.io/aws-ebs"), (ANN_MIGRATED_TO, DRIVER)],
                Some("gold"),
                None,
            ),
            Some(&immediate),
            Want::Ignore,
        ),
        (
            "already bound",
            pvc(&[(ga, DRIVER)], Some("gold"), Some("pv-1")),
            Some(&immediate),
            Want::Ignore,
        ),
        (
            "empty volumeName is unbound",
            pvc(&[(ga, DRIVER)], Some("gold"), Some("")),
            Some(&immediate),
            Want::Provision(None),
        ),
        (
            "class missing",
            pvc(&[(ga, DRIVER)], Some("gold"), None),
            None,
            Want::ClassMissing("gold".into()),
        ),
        (
            "class of another provisioner",
            pvc(&[(ga, DRIVER)], Some("gold"), None),
            Some(&foreign),
            Want::Ignore,
        ),
        (
            "late binding without node",
            pvc(&[(ga, DRIVER)], Some("gold"), None),
            Some(&wffc),
            Want::Wait,
        ),
        (
            "late binding, empty node",
            pvc(&[(ga, DRIVER), (ANN_SELECTED_NODE, "")], Some("gold"), None),
            Some(&wffc),
            Want::Wait,
        ),
        (
            "late binding with node",
            pvc(
                &[(ga, DRIVER), (ANN_SELECTED_NODE, "n1")],
                Some("gold"),
                None,
            ),
            Some(&wffc),
            Want::Provision(Some("n1".into())),
        ),
        (
            "late binding, alpha node annotation is not enough",
            pvc(
                &[(ga, DRIVER), (ANN_ALPHA_SELECTED_NODE, "n1")],
                Some("gold"),
                None,
            ),
            Some(&wffc),
            Want::Wait,
        ),
        (
            "immediate keeps a selected node",
            pvc(
                &[(ga, DRIVER), (ANN_SELECTED_NODE, "n2")],
                Some("gold"),
                None,
            ),
            Some(&immediate),
            Want::Provision(Some("n2".into())),
        ),
        (
            "immediate reads the alpha node annotation",
            pvc(
                &[(ga, DRIVER), (ANN_ALPHA_SELECTED_NODE, "n3")],
                Some("gold"),
                None,
            ),
            Some(&immediate),
            Want::Provision(Some("n3".into())),
        ),
        (
            "beta class annotation names the missing class",
            pvc(
                &[(ga, DRIVER), (ANN_BETA_STORAGE_CLASS, "silver")],
                Some("gold"),
                None,
            ),
            None,
            Want::ClassMissing("silver".into()),
        ),
    ];
    for (name, claim, class, want) in cases {
        assert_eq!(
            summarize(decide_claim(DRIVER, &claim, class)),
            want,
            "{name}"
        );
    }
}

#[test]
fn a_claim_of_an_in_tree_class_handed_to_a_migration_driver_fails_with_a_clear_error() {
    const EBS: &str = "ebs.csi.aws.com";
    let claim = pvc(&[(ANN_STORAGE_PROVISIONER, EBS)], Some("gold"), None);
    let step = decide_claim(EBS, &claim, Some(&class("kubernetes.io/aws-ebs", None)));
    let ClaimStep::Fail(err) = step else {
        panic!("{step:?}")
    };
    assert_eq!(
        err.event_message(),
        r#"provisioning a volume of the in-tree StorageClass "gold" (provisioner "kubernetes.io/aws-ebs") through CSI migration is not supported by this csi-provisioner"#
    );
    assert!(err.emits_event() && err.retries_slowly());
    assert_eq!(
        err.state(),
        crate::plan_error::ProvisioningState::Finished,
        "nothing reached the driver"
    );
    // Another plugin's in-tree class, or a driver no plugin migrated to: not ours, as before.
    let cases = [
        (EBS, "kubernetes.io/gce-pd"),
        (DRIVER, "kubernetes.io/aws-ebs"),
    ];
    for (driver, provisioner) in cases {
        let claim = pvc(&[(ANN_STORAGE_PROVISIONER, driver)], Some("gold"), None);
        assert_eq!(
            summarize(decide_claim(
                driver,
                &claim,
                Some(&class(provisioner, None))
            )),
            Want::Ignore,
            "{driver} {provisioner}"
        );
    }
}

#[test]
fn class_names_prefer_the_beta_annotation() {
    assert_eq!(claim_class_name(&pvc(&[], Some("gold"), None)), "gold");
    assert_eq!(claim_class_name(&pvc(&[], None, None)), "");
    assert_eq!(
        claim_class_name(&pvc(&[(ANN_BETA_STORAGE_CLASS, "b")], Some("gold"), None)),
        "b"
    );
    assert_eq!(
        claim_class_name(&pvc(&[(ANN_BETA_STORAGE_CLASS, "")], Some("gold"), None)),
        ""
    );
    let missing = decide_claim(
        DRIVER,
        &pvc(&[(ANN_STORAGE_PROVISIONER, DRIVER)], None, None),
        None,
    );
    let ClaimStep::Fail(err) = missing else {
        panic!("{missing:?}")
    };
    assert_eq!(
        err.to_string(),
        r#"storageclass.storage.k8s.io "" not found"#
    );
    assert!(!err.emits_event());
}

struct Pv {
    annotations: Vec<(&'static str, &'static str)>,
    csi_driver: Option<&'static str>,
    reclaim: Option<&'static str>,
    phase: Option<&'static str>,
    finalizer: bool,
    deleting: bool,
}

impl Pv {
    fn ours() -> Self {
        Self {
            annotations: vec![(ANN_PROVISIONED_BY, DRIVER)],
            csi_driver: Some(DRIVER),
            reclaim: Some("Delete"),
            phase: Some("Bound"),
            finalizer: true,
            deleting: false,
        }
    }

    fn build(&self) -> PersistentVolume {
        PersistentVolume {
            metadata: ObjectMeta {
                name: Some("pvc-1".into()),
                annotations: Some(
                    self.annotations
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect(),
                ),
                finalizers: Some(
                    [
                        Some("kubernetes.io/pv-protection".to_owned()),
                        self.finalizer.then(|| PV_FINALIZER.to_owned()),
                    ]
                    .into_iter()
                    .flatten()
                    .collect(),
                ),
                deletion_timestamp: self
                    .deleting
                    .then(|| Time(k8s_openapi::jiff::Timestamp::default())),
                ..ObjectMeta::default()
            },
            spec: Some(PersistentVolumeSpec {
                csi: self.csi_driver.map(|d| CSIPersistentVolumeSource {
                    driver: d.to_owned(),
                    volume_handle: "vol-1".into(),
                    ..CSIPersistentVolumeSource::default()
                }),
                persistent_volume_reclaim_policy: self.reclaim.map(str::to_owned),
                ..PersistentVolumeSpec::default()
            }),
            status: Some(PersistentVolumeStatus {
                phase: self.phase.map(str::to_owned),
                ..PersistentVolumeStatus::default()
            }),
        }
    }
}

#[test]
#[allow(clippy::too_many_lines, reason = "table test: one row per case")]
fn decide_volume_maintains_the_finalizer_and_deletes_released_volumes() {
    let cases: Vec<(&str, Pv, VolumeStep)> = vec![
        ("bound with finalizer", Pv::ours(), VolumeStep::Nothing),
        (
            "bound without finalizer",
            Pv {
                finalizer: false,
                ..Pv::ours()
            },
            VolumeStep::AddFinalizer,
        ),
        (
            "bound static CSI PV of ours",
            Pv {
                annotations: vec![],
                finalizer: false,
                ..Pv::ours()
            },
            VolumeStep::AddFinalizer,
        ),
        (
            "pending without finalizer",
            Pv {
                phase: Some("Pending"),
                finalizer: false,
                ..Pv::ours()
            },
            VolumeStep::Nothing,
        ),
        (
            "bound but being deleted",
            Pv {
                finalizer: false,
                deleting: true,
                ..Pv::ours()
            },
            VolumeStep::Nothing,
        ),
        (
            "retain with finalizer",
            Pv {
                reclaim: Some("Retain"),
                ..Pv::ours()
            },
            VolumeStep::RemoveFinalizer,
        ),
        (
            "recycle with finalizer",
            Pv {
                reclaim: Some("Recycle"),
                ..Pv::ours()
            },
            VolumeStep::RemoveFinalizer,
        ),
        (
            "retain released never reaches the driver",
            Pv {
                reclaim: Some("Retain"),
                phase: Some("Released"),
                finalizer: false,
                ..Pv::ours()
            },
            VolumeStep::Nothing,
        ),
        (
            "retain released with finalizer only loses it",
            Pv {
                reclaim: Some("Retain"),
                phase: Some("Released"),
                ..Pv::ours()
            },
            VolumeStep::RemoveFinalizer,
        ),
        (
            "released delete",
            Pv {
                phase: Some("Released"),
                ..Pv::ours()
            },
            VolumeStep::Delete,
        ),
        (
            "released delete without finalizer",
            Pv {
                phase: Some("Released"),
                finalizer: false,
                ..Pv::ours()
            },
            VolumeStep::Delete,
        ),
        (
            "released, deleted, finalizer still there",
            Pv {
                phase: Some("Released"),
                deleting: true,
                ..Pv::ours()
            },
            VolumeStep::Delete,
        ),
        (
            "released, deleted, finalizer gone",
            Pv {
                phase: Some("Released"),
                deleting: true,
                finalizer: false,
                ..Pv::ours()
            },
            VolumeStep::Nothing,
        ),
        (
            "failed phase is not deleted",
            Pv {
                phase: Some("Failed"),
                ..Pv::ours()
            },
            VolumeStep::Nothing,
        ),
        (
            "available phase is not deleted",
            Pv {
                phase: Some("Available"),
                ..Pv::ours()
            },
            VolumeStep::Nothing,
        ),
        (
            "provisioned by another driver",
            Pv {
                annotations: vec![(ANN_PROVISIONED_BY, "other.csi")],
                ..Pv::ours()
            },
            VolumeStep::Ignore,
        ),
        (
            "provisioned by in-tree, migrated to us",
            Pv {
                annotations: vec![
                    (ANN_PROVISIONED_BY, "kubernetes.io/gce-pd"),
                    (ANN_MIGRATED_TO, DRIVER),
                ],
                csi_driver: None,
                phase: Some("Released"),
                ..Pv::ours()
            },
            VolumeStep::Delete,
        ),
        (
            "annotation wins over spec.csi.driver",
            Pv {
                annotations: vec![(ANN_PROVISIONED_BY, "other.csi")],
                csi_driver: Some(DRIVER),
                finalizer: false,
                ..Pv::ours()
            },
            VolumeStep::Ignore,
        ),
        (
            "static PV of another driver",
            Pv {
                annotations: vec![],
                csi_driver: Some("other.csi"),
                ..Pv::ours()
            },
            VolumeStep::Ignore,
        ),
        (
            "static non-CSI PV",
            Pv {
                annotations: vec![],
                csi_driver: None,
                ..Pv::ours()
            },
            VolumeStep::Ignore,
        ),
        (
            "static non-CSI PV migrated to us",
            Pv {
                annotations: vec![(ANN_MIGRATED_TO, DRIVER)],
                csi_driver: None,
                finalizer: false,
                ..Pv::ours()
            },
            VolumeStep::AddFinalizer,
        ),
    ];
    for (name, pv, want) in cases {
        assert_eq!(decide_volume(DRIVER, &pv.build()), want, "{name}");
    }
}

#[test]
fn volume_handle_needs_a_csi_source() {
    assert_eq!(volume_handle(&Pv::ours().build()).unwrap(), "vol-1");
    let err = volume_handle(
        &Pv {
            csi_driver: None,
            ..Pv::ours()
        }
        .build(),
    )
    .unwrap_err();
    assert_eq!(err.to_string(), "invalid CSI PV");
}

#[test]
fn an_in_tree_pv_is_deleted_through_its_translation() {
    let in_tree = |source: serde_json::Value| -> PersistentVolume {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "pv-1"}, "spec": source}))
            .unwrap()
    };
    let csi = Pv::ours().build();
    let (id, migrated) = volume_to_delete(&csi).unwrap();
    assert_eq!((id.as_ref(), migrated), ("vol-1", false));
    let ebs = in_tree(
        serde_json::json!({"awsElasticBlockStore": {"volumeID": "aws://us-east-1a/vol-2"}}),
    );
    let (id, migrated) = volume_to_delete(&ebs).unwrap();
    assert_eq!((id.as_ref(), migrated), ("vol-2", true));
    let cases = [
        (
            serde_json::json!({"awsElasticBlockStore": {"volumeID": "aws://us-east-1a/bad"}}),
            // external-provisioner's `Delete` returns csi-translation-lib's error as it is.
            "failed to translate Kubernetes ID to EBS Volume ID Invalid format for AWS volume (aws://us-east-1a/bad)",
        ),
        (
            serde_json::json!({"nfs": {"server": "s", "path": "/"}}),
            "invalid CSI PV",
        ),
    ];
    for (source, want) in cases {
        let err = volume_to_delete(&in_tree(source)).unwrap_err();
        assert_eq!(err.event_message(), want);
    }
}

#[test]
fn pv_class_name_prefers_the_beta_annotation() {
    let mut pv = Pv::ours().build();
    assert_eq!(pv_class_name(&pv), "");
    pv.spec.as_mut().unwrap().storage_class_name = Some("gold".into());
    assert_eq!(pv_class_name(&pv), "gold");
    pv.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(ANN_BETA_STORAGE_CLASS.into(), "old".into());
    assert_eq!(pv_class_name(&pv), "old");
}
