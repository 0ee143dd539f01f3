//! Clone sources (spec §4.3 step 3 and §6.4, upstream `getPVCSource`): whatever the source
//! claim, its PV and the new claim hold, a clone is only ever made from a live, Bound claim
//! whose PV is this driver's, is bound back to that very claim and is Bound, into a claim at
//! least as large and of the same volume mode; the volume id sent is that PV's handle.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, ObjectReference, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PersistentVolumeClaimStatus, PersistentVolumeSpec,
    PersistentVolumeStatus, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use proptest::prelude::*;
use proto::csi::v1::volume_content_source::{Type, VolumeSource};

use super::{config, hostile, mode, size};
use crate::source::{CloneInputs, SourceKind, SourceRef, decide_clone};

const DRIVER: &str = "csi.example.com";

/// Mostly the `good` value, sometimes absent or anything.
fn mostly(good: &'static str) -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        16 => Just(Some(good.to_owned())),
        1 => Just(None),
        1 => hostile().prop_map(Some),
    ]
}

#[derive(Debug, Clone)]
struct ClaimFields {
    name: &'static str,
    class: Option<String>,
    size: Option<String>,
    mode: Option<String>,
    phase: Option<String>,
    volume: Option<String>,
    deleting: bool,
}

fn claim_fields(name: &'static str) -> impl Strategy<Value = ClaimFields> {
    (
        prop_oneof![
            4 => Just(Some("gold".to_owned())),
            1 => Just(Some(String::new())),
            1 => Just(None),
        ],
        size(),
        mode(),
        mostly("Bound"),
        mostly("pv-src"),
        proptest::bool::weighted(0.1),
    )
        .prop_map(
            move |(class, size, mode, phase, volume, deleting)| ClaimFields {
                name,
                class,
                size,
                mode,
                phase,
                volume,
                deleting,
            },
        )
}

fn claim(fields: &ClaimFields) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(fields.name.to_owned()),
            namespace: Some("ns".to_owned()),
            uid: Some(format!("uid-{}", fields.name)),
            deletion_timestamp: fields.deleting.then_some(Time(Timestamp::UNIX_EPOCH)),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            storage_class_name: fields.class.clone(),
            volume_mode: fields.mode.clone(),
            volume_name: fields.volume.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: fields
                    .size
                    .clone()
                    .map(|s| BTreeMap::from([("storage".to_owned(), Quantity(s))])),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: Some(PersistentVolumeClaimStatus {
            phase: fields.phase.clone(),
            ..PersistentVolumeClaimStatus::default()
        }),
    }
}

/// The source's PV: this driver's or another's, bound back to the source claim or to another
/// one (uid, namespace or name differing), Bound or not.
fn volume() -> impl Strategy<Value = Option<PersistentVolume>> {
    let claim_ref =
        (mostly("uid-src"), mostly("ns"), mostly("src")).prop_map(|(uid, namespace, name)| {
            ObjectReference {
                uid,
                namespace,
                name,
                ..ObjectReference::default()
            }
        });
    proptest::option::weighted(
        0.9,
        (
            proptest::option::weighted(0.9, mostly(DRIVER)),
            proptest::option::weighted(0.9, claim_ref),
            mostly("Bound"),
        )
            .prop_map(|(driver, claim_ref, phase)| PersistentVolume {
                metadata: ObjectMeta {
                    name: Some("pv-src".to_owned()),
                    ..ObjectMeta::default()
                },
                spec: Some(PersistentVolumeSpec {
                    csi: driver.map(|driver| CSIPersistentVolumeSource {
                        driver: driver.unwrap_or_default(),
                        volume_handle: "vol-src".to_owned(),
                        ..CSIPersistentVolumeSource::default()
                    }),
                    claim_ref,
                    ..PersistentVolumeSpec::default()
                }),
                status: Some(PersistentVolumeStatus {
                    phase,
                    ..PersistentVolumeStatus::default()
                }),
            }),
    )
}

fn bytes(fields: &ClaimFields) -> i64 {
    fields
        .size
        .as_deref()
        .and_then(|s| csi_common::quantity::parse_bytes(s).ok())
        .unwrap_or(0)
}

fn block(fields: &ClaimFields) -> bool {
    fields.mode.as_deref() == Some("Block")
}

proptest! {
    #![proptest_config(config(2000))]

    /// A clone is made only from a source that upstream's checks accept, and names its PV.
    #[test]
    fn a_clone_comes_only_from_a_bound_claim_of_this_driver(
        new in claim_fields("new"),
        source in proptest::option::weighted(0.9, claim_fields("src")),
        pv in volume(),
    ) {
        let new_claim = claim(&new);
        let source_claim = source.as_ref().map(claim);
        let reference = SourceRef {
            kind: SourceKind::Clone,
            namespace: "ns".to_owned(),
            name: "src".to_owned(),
            api_group: String::new(),
            cross_namespace: false,
        };
        let result = decide_clone(
            &reference,
            &CloneInputs {
                claim: &new_claim,
                class_provisioner: DRIVER,
                source: source_claim.as_ref(),
                source_pv: pv.as_ref(),
            },
        );
        let Ok(content) = result else {
            return Ok(());
        };
        let source = source.expect("cloned from a missing claim");
        let pv = pv.expect("cloned from a missing PV");
        prop_assert!(!source.deleting);
        prop_assert_eq!(source.phase.as_deref(), Some("Bound"));
        prop_assert!(source.class.is_some() && new.class.is_some());
        prop_assert!(bytes(&new) >= bytes(&source));
        prop_assert_eq!(block(&new), block(&source));
        let spec = pv.spec.expect("no PV spec");
        let csi = spec.csi.expect("cloned from a non-CSI PV");
        prop_assert_eq!(&csi.driver, DRIVER);
        let claim_ref = spec.claim_ref.expect("cloned from an unbound PV");
        prop_assert_eq!(claim_ref.uid.as_deref(), Some("uid-src"));
        prop_assert_eq!(claim_ref.namespace.as_deref(), Some("ns"));
        prop_assert_eq!(claim_ref.name.as_deref(), Some("src"));
        let phase = pv.status.and_then(|s| s.phase);
        prop_assert_eq!(phase.as_deref(), Some("Bound"));
        prop_assert_eq!(
            content.r#type,
            Some(Type::Volume(VolumeSource { volume_id: csi.volume_handle }))
        );
    }
}
