//! The claim and volume decisions (spec §4.1, §5 steps 1-3): whatever the annotations, phase,
//! reclaim policy, finalizers and owner, a bound claim is never provisioned again, a claim is
//! provisioned only for this driver's class, a WaitForFirstConsumer claim waits for its node,
//! and a volume is deleted only when it is ours, Released and its reclaim policy is Delete.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PersistentVolumeSpec, PersistentVolumeStatus,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use proptest::prelude::*;

use super::{config, hostile};
use crate::annotations::{
    ANN_ALPHA_SELECTED_NODE, ANN_BETA_STORAGE_PROVISIONER, ANN_MIGRATED_TO, ANN_PROVISIONED_BY,
    ANN_SELECTED_NODE, ANN_STORAGE_PROVISIONER, PV_FINALIZER,
};
use crate::decide::{ClaimStep, VolumeStep, decide_claim, decide_volume};

const DRIVER: &str = "csi.example.com";

/// This driver's name, another one, empty, or anything.
fn driver_name() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => Just(DRIVER.to_owned()),
        1 => Just("other.example.com".to_owned()),
        1 => Just(String::new()),
        1 => hostile(),
    ]
}

/// An annotation value: absent, empty, or one of `values`.
fn maybe(values: impl Strategy<Value = String>) -> impl Strategy<Value = Option<String>> {
    prop_oneof![Just(None), Just(Some(String::new())), values.prop_map(Some)]
}

fn annotations(
    entries: Vec<(&'static str, Option<String>)>,
    extra: BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut out = extra;
    out.extend(
        entries
            .into_iter()
            .filter_map(|(key, value)| value.map(|v| (key.to_owned(), v))),
    );
    out
}

fn claim() -> impl Strategy<Value = PersistentVolumeClaim> {
    (
        maybe(driver_name()),
        maybe(driver_name()),
        maybe(hostile()),
        maybe(hostile()),
        maybe(prop_oneof![Just("pv-1".to_owned()), hostile()]),
        proptest::collection::btree_map(hostile(), hostile(), 0..2),
    )
        .prop_map(
            |(provisioner, beta, node, alpha_node, volume_name, extra)| PersistentVolumeClaim {
                metadata: ObjectMeta {
                    name: Some("claim".to_owned()),
                    namespace: Some("ns".to_owned()),
                    annotations: Some(annotations(
                        vec![
                            (ANN_STORAGE_PROVISIONER, provisioner),
                            (ANN_BETA_STORAGE_PROVISIONER, beta),
                            (ANN_SELECTED_NODE, node),
                            (ANN_ALPHA_SELECTED_NODE, alpha_node),
                        ],
                        extra,
                    )),
                    ..ObjectMeta::default()
                },
                spec: Some(PersistentVolumeClaimSpec {
                    storage_class_name: Some("gold".to_owned()),
                    volume_name,
                    ..PersistentVolumeClaimSpec::default()
                }),
                status: None,
            },
        )
}

fn class() -> impl Strategy<Value = Option<StorageClass>> {
    proptest::option::of(
        (
            driver_name(),
            maybe(prop_oneof![
                Just("Immediate".to_owned()),
                Just("WaitForFirstConsumer".to_owned()),
                hostile(),
            ]),
        )
            .prop_map(|(provisioner, volume_binding_mode)| StorageClass {
                metadata: ObjectMeta {
                    name: Some("gold".to_owned()),
                    ..ObjectMeta::default()
                },
                provisioner,
                volume_binding_mode,
                ..StorageClass::default()
            }),
    )
}

fn annotation<'a>(pvc: &'a PersistentVolumeClaim, key: &str) -> Option<&'a str> {
    pvc.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

fn volume() -> impl Strategy<Value = PersistentVolume> {
    let policy = maybe(prop_oneof![
        Just("Delete".to_owned()),
        Just("Retain".to_owned()),
        Just("Recycle".to_owned()),
        hostile(),
    ]);
    let phase = maybe(prop_oneof![
        Just("Bound".to_owned()),
        Just("Released".to_owned()),
        Just("Available".to_owned()),
        Just("Failed".to_owned()),
        hostile(),
    ]);
    let finalizers = proptest::option::of(proptest::collection::vec(
        prop_oneof![Just(PV_FINALIZER.to_owned()), hostile()],
        0..3,
    ));
    (
        policy,
        phase,
        any::<bool>(),
        finalizers,
        (maybe(driver_name()), maybe(driver_name())),
        proptest::option::of(driver_name()),
    )
        .prop_map(
            |(policy, phase, deleting, finalizers, (provisioned_by, migrated_to), csi_driver)| {
                PersistentVolume {
                    metadata: ObjectMeta {
                        name: Some("pv-1".to_owned()),
                        annotations: Some(annotations(
                            vec![
                                (ANN_PROVISIONED_BY, provisioned_by),
                                (ANN_MIGRATED_TO, migrated_to),
                            ],
                            BTreeMap::new(),
                        )),
                        deletion_timestamp: deleting.then_some(Time(Timestamp::UNIX_EPOCH)),
                        finalizers,
                        ..ObjectMeta::default()
                    },
                    spec: Some(PersistentVolumeSpec {
                        persistent_volume_reclaim_policy: policy,
                        csi: csi_driver.map(|driver| CSIPersistentVolumeSource {
                            driver,
                            volume_handle: "vol-1".to_owned(),
                            ..CSIPersistentVolumeSource::default()
                        }),
                        ..PersistentVolumeSpec::default()
                    }),
                    status: Some(PersistentVolumeStatus {
                        phase,
                        ..PersistentVolumeStatus::default()
                    }),
                }
            },
        )
}

fn has_our_finalizer(pv: &PersistentVolume) -> bool {
    pv.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == PV_FINALIZER)
}

/// Whether the volume names this driver as its provisioner, its migration target or (a static
/// PV without the provisioned-by annotation) its CSI driver.
fn names_driver(pv: &PersistentVolume) -> bool {
    let annotation = |key: &str| pv.metadata.annotations.as_ref().and_then(|a| a.get(key));
    let csi_driver = pv
        .spec
        .as_ref()
        .and_then(|s| s.csi.as_ref())
        .map(|c| &c.driver);
    [
        annotation(ANN_PROVISIONED_BY),
        annotation(ANN_MIGRATED_TO),
        csi_driver,
    ]
    .into_iter()
    .flatten()
    .any(|name| name == DRIVER)
}

proptest! {
    #![proptest_config(config(2000))]

    /// A claim is provisioned only when it is unbound, its storage-provisioner annotation
    /// names this driver and its class is this driver's; a WaitForFirstConsumer claim only
    /// with the scheduler's node, which is then the one passed on.
    #[test]
    fn a_claim_is_provisioned_only_when_unbound_and_ours(pvc in claim(), class in class()) {
        let step = decide_claim(DRIVER, &pvc, class.as_ref());
        let bound = pvc
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_deref())
            .is_some_and(|name| !name.is_empty());
        if bound {
            // Never create for a claim already bound.
            prop_assert!(matches!(step, ClaimStep::Ignore), "{step:?}");
        }
        let ours = annotation(&pvc, ANN_STORAGE_PROVISIONER)
            .or_else(|| annotation(&pvc, ANN_BETA_STORAGE_PROVISIONER))
            == Some(DRIVER);
        match &step {
            ClaimStep::Provision { selected_node } => {
                prop_assert!(!bound && ours);
                let class = class.as_ref().expect("provisioned without a class");
                prop_assert_eq!(&class.provisioner, DRIVER);
                if class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer") {
                    let node = annotation(&pvc, ANN_SELECTED_NODE);
                    prop_assert!(node.is_some_and(|n| !n.is_empty()));
                    prop_assert_eq!(selected_node.as_deref(), node);
                }
                prop_assert!(selected_node.as_ref().is_none_or(|n| !n.is_empty()));
            }
            ClaimStep::WaitForSelectedNode => {
                let class = class.as_ref().expect("waiting without a class");
                prop_assert_eq!(class.volume_binding_mode.as_deref(), Some("WaitForFirstConsumer"));
            }
            ClaimStep::Fail(_) => prop_assert!(class.is_none() && ours && !bound),
            ClaimStep::Ignore => {}
        }
    }

    /// A volume is deleted only when it is ours, Released and its reclaim policy is Delete,
    /// and not once its finalizer is gone while it is being deleted (the storage is gone
    /// already); Retain and Recycle volumes never reach DeleteVolume nor get the finalizer;
    /// another driver's volume is never touched.
    #[test]
    fn a_volume_is_deleted_only_when_released_with_policy_delete(pv in volume()) {
        let step = decide_volume(DRIVER, &pv);
        let spec = pv.spec.as_ref();
        let policy = spec.and_then(|s| s.persistent_volume_reclaim_policy.as_deref());
        let phase = pv.status.as_ref().and_then(|s| s.phase.as_deref());
        let deleting = pv.metadata.deletion_timestamp.is_some();
        if !names_driver(&pv) {
            prop_assert_eq!(step, VolumeStep::Ignore);
        }
        match step {
            VolumeStep::Delete => {
                prop_assert_eq!(policy, Some("Delete"));
                prop_assert_eq!(phase, Some("Released"));
                prop_assert!(!deleting || has_our_finalizer(&pv));
            }
            VolumeStep::AddFinalizer => {
                prop_assert_eq!(policy, Some("Delete"));
                prop_assert!(!deleting && !has_our_finalizer(&pv));
            }
            VolumeStep::RemoveFinalizer => {
                prop_assert!(matches!(policy, Some("Retain" | "Recycle")));
                prop_assert!(has_our_finalizer(&pv));
            }
            VolumeStep::Ignore | VolumeStep::Nothing => {}
        }
        if policy == Some("Retain") {
            // Never delete a volume whose PV has reclaimPolicy Retain.
            prop_assert_ne!(step, VolumeStep::Delete);
        }
    }
}
