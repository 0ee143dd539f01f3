use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, ObjectReference, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PersistentVolumeClaimStatus, PersistentVolumeSpec,
    PersistentVolumeStatus, TypedLocalObjectReference, TypedObjectReference,
    VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::DynamicObject;
use serde_json::json;

use super::objects::{GrantFrom, GrantTo};
use super::*;

const DRIVER: &str = "hostpath.csi.k8s.io";

fn claim(name: &str, size: &str) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            uid: Some(format!("uid-{name}")),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            storage_class_name: Some("fast".into()),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([("storage".into(), Quantity(size.into()))])),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    }
}

fn bound(mut pvc: PersistentVolumeClaim, pv: &str) -> PersistentVolumeClaim {
    pvc.spec.as_mut().unwrap().volume_name = Some(pv.into());
    pvc.status = Some(PersistentVolumeClaimStatus {
        phase: Some("Bound".into()),
        ..PersistentVolumeClaimStatus::default()
    });
    pvc
}

fn with_source(mut pvc: PersistentVolumeClaim, kind: &str, name: &str) -> PersistentVolumeClaim {
    let group = (kind == SNAPSHOT_KIND).then(|| SNAPSHOT_API_GROUP.to_owned());
    pvc.spec.as_mut().unwrap().data_source = Some(TypedLocalObjectReference {
        api_group: group,
        kind: kind.into(),
        name: name.into(),
    });
    pvc
}

fn source_pv(claim: &PersistentVolumeClaim, driver: &str) -> PersistentVolume {
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some("pv-src".into()),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeSpec {
            csi: Some(CSIPersistentVolumeSource {
                driver: driver.into(),
                volume_handle: "vol-src".into(),
                ..CSIPersistentVolumeSource::default()
            }),
            claim_ref: Some(ObjectReference {
                namespace: claim.metadata.namespace.clone(),
                name: claim.metadata.name.clone(),
                uid: claim.metadata.uid.clone(),
                ..ObjectReference::default()
            }),
            ..PersistentVolumeSpec::default()
        }),
        status: Some(PersistentVolumeStatus {
            phase: Some("Bound".into()),
            ..PersistentVolumeStatus::default()
        }),
    }
}

fn clone_ref() -> SourceRef {
    SourceRef {
        kind: SourceKind::Clone,
        namespace: "ns".into(),
        name: "src".into(),
        api_group: String::new(),
        cross_namespace: false,
    }
}

type CloneEdit = fn(
    &mut PersistentVolumeClaim,
    &mut Option<PersistentVolumeClaim>,
    &mut Option<PersistentVolume>,
);

#[test]
fn clone_sources_are_checked_like_upstream() {
    let cases: Vec<(&str, CloneEdit, Option<&str>)> = vec![
        ("usable", |_, _, _| {}, None),
        (
            "bigger request is fine",
            |c, _, _| *c = claim("new", "2Gi"),
            None,
        ),
        (
            "missing source",
            |_, s, _| *s = None,
            Some("PersistentVolumeClaim ns/src specified as the data source does not exist"),
        ),
        (
            "source being deleted",
            |_, s, _| {
                s.as_mut().unwrap().metadata.deletion_timestamp =
                    Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
            },
            Some("PersistentVolumeClaim ns/src specified as the data source is being deleted"),
        ),
        (
            "source not bound",
            |_, s, _| s.as_mut().unwrap().status = None,
            Some(
                "the PVC ns/src is not yet bound to a PV, will not attempt to use it as a clone source",
            ),
        ),
        (
            "too small",
            |c, _, _| *c = claim("new", "512Mi"),
            Some(
                "error, new PVC request must be greater than or equal in size to the specified PVC data source, requested 536870912 but source is 1073741824",
            ),
        ),
        (
            "other driver",
            |_, _, pv| {
                pv.as_mut()
                    .unwrap()
                    .spec
                    .as_mut()
                    .unwrap()
                    .csi
                    .as_mut()
                    .unwrap()
                    .driver = "other.csi".into();
            },
            Some(
                "the source PV pv-src of PVC ns/src cannot be cloned: provisioned by driver other.csi, not hostpath.csi.k8s.io",
            ),
        ),
        (
            "PV gone",
            |_, _, pv| *pv = None,
            Some("the source PV pv-src of PVC ns/src cannot be cloned: not found"),
        ),
        (
            "PV bound to a re-created claim of the same name",
            |_, s, _| s.as_mut().unwrap().metadata.uid = Some("uid-new-incarnation".into()),
            Some("the source PV pv-src of PVC ns/src cannot be cloned: bound to another claim"),
        ),
        (
            "volume mode differs",
            |c, _, _| c.spec.as_mut().unwrap().volume_mode = Some("Block".into()),
            Some(
                "the source PVC and destination PVCs must have the same volume mode for cloning. Source is Filesystem. Requested is Block",
            ),
        ),
    ];
    check_clone_cases(cases);
}

#[test]
fn a_clone_needs_spec_storage_class_name_on_both_claims_as_upstream() {
    let cases: Vec<(&str, CloneEdit, Option<&str>)> = vec![
        (
            "no class on the new claim",
            |c, _, _| c.spec.as_mut().unwrap().storage_class_name = None,
            Some(
                "the requested PVC new has no spec.storageClassName; cloning needs one on both claims",
            ),
        ),
        (
            "the new claim's class only in the beta annotation",
            |c, _, _| *c = beta_class_only(c.clone()),
            Some(
                "the requested PVC new has no spec.storageClassName; cloning needs one on both claims",
            ),
        ),
        (
            "the source's class only in the beta annotation",
            |_, s, _| *s = s.clone().map(beta_class_only),
            Some(
                "the source PVC ns/src has no spec.storageClassName; cloning needs one on both claims",
            ),
        ),
        (
            "a source with the empty class (statically bound) passes upstream's nil check",
            |_, s, _| {
                s.as_mut()
                    .unwrap()
                    .spec
                    .as_mut()
                    .unwrap()
                    .storage_class_name = Some(String::new());
            },
            None,
        ),
    ];
    check_clone_cases(cases);
}

/// Runs [`decide_clone`] for a 1Gi claim cloning a bound 1Gi source after each edit.
fn check_clone_cases(cases: Vec<(&str, CloneEdit, Option<&str>)>) {
    for (name, edit, want) in cases {
        let mut new = claim("new", "1Gi");
        let src = bound(claim("src", "1Gi"), "pv-src");
        let mut pv = Some(source_pv(&src, DRIVER));
        let mut source = Some(src);
        edit(&mut new, &mut source, &mut pv);
        let got = decide_clone(
            &clone_ref(),
            &CloneInputs {
                claim: &new,
                class_provisioner: DRIVER,
                source: source.as_ref(),
                source_pv: pv.as_ref(),
            },
        );
        match want {
            None => assert_eq!(
                got.unwrap().r#type,
                Some(Type::Volume(VolumeSource {
                    volume_id: "vol-src".into()
                })),
                "{name}"
            ),
            Some(message) => assert_eq!(got.unwrap_err().to_string(), message, "{name}"),
        }
    }
}

/// `claim` naming its class only in the `volume.beta.kubernetes.io/storage-class` annotation.
fn beta_class_only(mut claim: PersistentVolumeClaim) -> PersistentVolumeClaim {
    let class = claim.spec.as_mut().unwrap().storage_class_name.take();
    claim.metadata.annotations = Some(BTreeMap::from([(
        "volume.beta.kubernetes.io/storage-class".to_owned(),
        class.unwrap_or_default(),
    )]));
    claim
}

fn snapshot_ref() -> SourceRef {
    SourceRef {
        kind: SourceKind::Snapshot,
        namespace: "ns".into(),
        name: "snap".into(),
        api_group: SNAPSHOT_API_GROUP.into(),
        cross_namespace: false,
    }
}

fn ready_snapshot() -> SnapshotView {
    SnapshotView {
        uid: "uid-snap".into(),
        namespace: "ns".into(),
        name: "snap".into(),
        deleting: false,
        finalizers: vec![],
        bound_content: Some("content".into()),
        ready_to_use: Some(true),
        restore_size: Some(1 << 30),
    }
}

fn its_content() -> ContentView {
    ContentView {
        snapshot_uid: "uid-snap".into(),
        snapshot_namespace: "ns".into(),
        snapshot_name: "snap".into(),
        driver: DRIVER.into(),
        source_volume_mode: Some("Filesystem".into()),
        snapshot_handle: Some("snap-handle".into()),
        allow_volume_mode_change: false,
    }
}

type SnapshotEdit =
    fn(&mut PersistentVolumeClaim, &mut Option<SnapshotView>, &mut Option<ContentView>, &mut bool);

#[test]
#[allow(clippy::too_many_lines, reason = "table test: one row per case")]
fn snapshot_sources_are_checked_like_upstream() {
    let cases: Vec<(&str, SnapshotEdit, Option<&str>)> = vec![
        ("usable", |_, _, _, _| {}, None),
        (
            "deleting but already protected by us",
            |_, s, _, _| {
                let s = s.as_mut().unwrap();
                s.deleting = true;
                s.finalizers = vec![SNAPSHOT_FINALIZER.into()];
            },
            None,
        ),
        (
            "other mode allowed by the content",
            |c, _, content, _| {
                c.spec.as_mut().unwrap().volume_mode = Some("Block".into());
                content.as_mut().unwrap().allow_volume_mode_change = true;
            },
            None,
        ),
        (
            "other mode with the check off",
            |c, _, _, prevent| {
                c.spec.as_mut().unwrap().volume_mode = Some("Block".into());
                *prevent = false;
            },
            None,
        ),
        (
            "missing",
            |_, s, _, _| *s = None,
            Some("VolumeSnapshot ns/snap specified as the data source does not exist"),
        ),
        (
            "deleting",
            |_, s, _, _| s.as_mut().unwrap().deleting = true,
            Some("VolumeSnapshot ns/snap specified as the data source is being deleted"),
        ),
        (
            "no content",
            |_, s, _, _| s.as_mut().unwrap().bound_content = None,
            Some("snapshot ns/snap not bound to a VolumeSnapshotContent"),
        ),
        (
            "content gone",
            |_, _, c, _| *c = None,
            Some("VolumeSnapshotContent content of snapshot ns/snap is unusable: not found"),
        ),
        (
            "content of another snapshot",
            |_, _, c, _| c.as_mut().unwrap().snapshot_uid = "uid-older".into(),
            Some(
                "VolumeSnapshotContent content of snapshot ns/snap is unusable: it is bound to another VolumeSnapshot",
            ),
        ),
        (
            "foreign driver",
            |_, _, c, _| c.as_mut().unwrap().driver = "other.csi".into(),
            Some(
                "VolumeSnapshotContent content of snapshot ns/snap is unusable: it belongs to driver other.csi, not hostpath.csi.k8s.io",
            ),
        ),
        (
            "not ready",
            |_, s, _, _| s.as_mut().unwrap().ready_to_use = Some(false),
            Some("snapshot ns/snap is not Ready"),
        ),
        (
            "no handle",
            |_, _, c, _| c.as_mut().unwrap().snapshot_handle = None,
            Some(
                "VolumeSnapshotContent content of snapshot ns/snap is unusable: it has no status.snapshotHandle",
            ),
        ),
        (
            "too small",
            |c, _, _, _| *c = claim("new", "1Mi"),
            Some(
                "requested volume size 1048576 is less than the size 1073741824 for the source snapshot ns/snap",
            ),
        ),
        (
            "mode conversion",
            |c, _, _, _| c.spec.as_mut().unwrap().volume_mode = Some("Block".into()),
            Some(
                "requested volume ns/new modifies the mode of the source volume but does not have permission to do so. snapshot.storage.kubernetes.io/allow-volume-mode-change annotation is not present on snapshotcontent content",
            ),
        ),
    ];
    for (name, edit, want) in cases {
        let mut new = claim("new", "1Gi");
        let mut snapshot = Some(ready_snapshot());
        let mut content = Some(its_content());
        let mut prevent = true;
        edit(&mut new, &mut snapshot, &mut content, &mut prevent);
        let got = decide_snapshot(
            &snapshot_ref(),
            &SnapshotInputs {
                claim: &new,
                class_provisioner: DRIVER,
                snapshot: snapshot.as_ref(),
                content: content.as_ref(),
                prevent_volume_mode_conversion: prevent,
            },
        );
        match want {
            None => assert_eq!(
                got.unwrap().r#type,
                Some(Type::Snapshot(SnapshotSource {
                    snapshot_id: "snap-handle".into()
                })),
                "{name}"
            ),
            Some(message) => assert_eq!(got.unwrap_err().to_string(), message, "{name}"),
        }
    }
}

#[test]
fn references_are_normalised_in_upstream_order() {
    let plain = with_source(claim("new", "1Gi"), PVC_KIND, "src");
    assert_eq!(reference(&plain, false).unwrap(), Some(clone_ref()));

    let mut cross = claim("new", "1Gi");
    cross.spec.as_mut().unwrap().data_source_ref = Some(TypedObjectReference {
        api_group: Some(SNAPSHOT_API_GROUP.into()),
        kind: SNAPSHOT_KIND.into(),
        name: "snap".into(),
        namespace: Some("other".into()),
    });
    assert!(matches!(
        reference(&cross, false),
        Err(PlanError::DataSourceRefNamespace)
    ));
    let got = reference(&cross, true).unwrap().unwrap();
    assert_eq!(got.namespace, "other");
    assert!(got.cross_namespace);
    assert_eq!(got.kind, SourceKind::Snapshot);

    // dataSource wins over dataSourceRef.
    let mut both = with_source(claim("new", "1Gi"), PVC_KIND, "src");
    both.spec.as_mut().unwrap().data_source_ref = cross.spec.unwrap().data_source_ref;
    assert_eq!(reference(&both, false).unwrap(), Some(clone_ref()));

    let populator = with_source(claim("new", "1Gi"), "Hello", "h");
    assert!(matches!(
        reference(&populator, false),
        Err(PlanError::ExternalPopulator { .. })
    ));
    assert_eq!(reference(&claim("new", "1Gi"), false).unwrap(), None);
}

fn grant(from_ns: &str, kind: &str, name: &str) -> GrantView {
    GrantView {
        from: vec![GrantFrom {
            group: String::new(),
            kind: PVC_KIND.into(),
            namespace: from_ns.into(),
        }],
        to: vec![GrantTo {
            group: SNAPSHOT_API_GROUP.into(),
            kind: kind.into(),
            name: name.into(),
        }],
    }
}

#[test]
fn reference_grants_must_name_the_claim_namespace_and_the_source() {
    let source = SourceRef {
        cross_namespace: true,
        namespace: "other".into(),
        ..snapshot_ref()
    };
    let cases = [
        (vec![], false),
        (vec![grant("ns", SNAPSHOT_KIND, "snap")], true),
        (vec![grant("ns", SNAPSHOT_KIND, "")], true),
        (vec![grant("elsewhere", SNAPSHOT_KIND, "snap")], false),
        (vec![grant("ns", SNAPSHOT_KIND, "other-snap")], false),
        (vec![grant("ns", PVC_KIND, "snap")], false),
        (
            vec![
                grant("elsewhere", SNAPSHOT_KIND, ""),
                grant("ns", SNAPSHOT_KIND, "snap"),
            ],
            true,
        ),
    ];
    for (grants, want) in cases {
        assert_eq!(grant_allows(&grants, "ns", &source), want, "{grants:?}");
    }
}

#[test]
fn only_pending_claims_keep_a_source_protected() {
    let pending = with_source(claim("a", "1Gi"), PVC_KIND, "src");
    let done = bound(with_source(claim("b", "1Gi"), PVC_KIND, "src"), "pv-b");
    let other = with_source(claim("c", "1Gi"), PVC_KIND, "other");
    let none: [&SourceRef; 0] = [];
    assert!(still_needed(
        SourceKind::Clone,
        "ns",
        "src",
        [&pending, &done],
        none
    ));
    assert!(!still_needed(
        SourceKind::Clone,
        "ns",
        "src",
        [&done, &other],
        none
    ));
    assert!(!still_needed(
        SourceKind::Snapshot,
        "ns",
        "src",
        [&pending],
        none
    ));
    assert!(!still_needed(
        SourceKind::Clone,
        "elsewhere",
        "src",
        [&pending],
        none
    ));
}

#[test]
fn a_create_still_in_flight_keeps_its_source_protected_while_its_claim_is_deleted() {
    let mut terminating = with_source(claim("a", "1Gi"), PVC_KIND, "src");
    terminating.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    let source = |kind, namespace: &str, name: &str| SourceRef {
        kind,
        namespace: namespace.into(),
        name: name.into(),
        api_group: String::new(),
        cross_namespace: false,
    };
    let cases = [
        ("nothing in flight", vec![], false),
        (
            "a create from the source",
            vec![source(SourceKind::Clone, "ns", "src")],
            true,
        ),
        (
            "a create from another claim",
            vec![source(SourceKind::Clone, "ns", "other")],
            false,
        ),
        (
            "a restore from a snapshot of that name",
            vec![source(SourceKind::Snapshot, "ns", "src")],
            false,
        ),
        (
            "a create from that name in another namespace",
            vec![source(SourceKind::Clone, "elsewhere", "src")],
            false,
        ),
    ];
    for (name, in_flight, want) in cases {
        let needed = still_needed(SourceKind::Clone, "ns", "src", [&terminating], &in_flight);
        assert_eq!(needed, want, "{name}");
    }
}

#[test]
fn custom_resources_are_read_without_typed_decoding() {
    let snapshot: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
        "metadata": {"name": "snap", "namespace": "ns", "uid": "u1",
                     "finalizers": [SNAPSHOT_FINALIZER]},
        "status": {"boundVolumeSnapshotContentName": "c1", "readyToUse": true,
                   "restoreSize": "1Gi"}
    }))
    .unwrap();
    let view = SnapshotView::from_object(&snapshot);
    assert_eq!(view.bound_content.as_deref(), Some("c1"));
    assert_eq!(view.restore_size, Some(1 << 30));
    assert_eq!(view.ready_to_use, Some(true));
    assert_eq!(view.finalizers, [SNAPSHOT_FINALIZER]);

    let content: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotContent",
        "metadata": {"name": "c1", "annotations": {ALLOW_VOLUME_MODE_CHANGE: "True"}},
        "spec": {"driver": DRIVER, "sourceVolumeMode": "Block",
                 "volumeSnapshotRef": {"name": "snap", "namespace": "ns", "uid": "u1"}},
        "status": {"snapshotHandle": "h1", "readyToUse": "not a bool"}
    }))
    .unwrap();
    let view = ContentView::from_object(&content);
    assert_eq!(view.snapshot_handle.as_deref(), Some("h1"));
    assert_eq!(view.source_volume_mode.as_deref(), Some("Block"));
    assert!(view.allow_volume_mode_change);
    assert_eq!(view.snapshot_uid, "u1");

    let grant: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1beta1", "kind": "ReferenceGrant",
        "metadata": {"name": "g", "namespace": "other"},
        "spec": {"from": [{"group": "", "kind": PVC_KIND, "namespace": "ns"}],
                 "to": [{"group": SNAPSHOT_API_GROUP, "kind": SNAPSHOT_KIND}]}
    }))
    .unwrap();
    assert_eq!(
        GrantView::from_object(&grant),
        grant_view_ns_to_any_snapshot()
    );
}

fn grant_view_ns_to_any_snapshot() -> GrantView {
    grant("ns", SNAPSHOT_KIND, "")
}

#[test]
fn only_the_upstream_annotation_key_allows_a_volume_mode_change() {
    // Upstream `annAllowVolumeModeChange`; the `snapshot.storage.k8s.io/` spelling is not it.
    let cases = [
        (
            "snapshot.storage.kubernetes.io/allow-volume-mode-change",
            true,
        ),
        ("snapshot.storage.k8s.io/allow-volume-mode-change", false),
    ];
    for (key, want) in cases {
        let content: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotContent",
            "metadata": {"name": "c1", "annotations": {key: "true"}},
            "spec": {"driver": DRIVER, "sourceVolumeMode": "Block"}
        }))
        .unwrap();
        assert_eq!(
            ContentView::from_object(&content).allow_volume_mode_change,
            want,
            "{key}"
        );
    }
}
