//! Snapshot sources (spec §4.3 step 3 and §6.4, upstream `getSnapshotSource`): whatever the
//! VolumeSnapshot, its content and the claim hold, a volume is restored only from a snapshot
//! that is not being deleted (unless our finalizer already guards a restore in progress,
//! #1449), is bound to a content that points back at it, belongs to this driver, is ready,
//! has a handle and is no larger than the claim's request, with no volume mode conversion
//! unless the content allows it; the snapshot id sent is the content's handle. And every
//! snapshot that passes all of those checks is used: the decision refuses nothing else.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use proptest::prelude::*;
use proto::csi::v1::volume_content_source::{SnapshotSource, Type};

use super::{config, hostile, mode, size};
use crate::source::{
    ContentView, SNAPSHOT_FINALIZER, SnapshotInputs, SnapshotView, SourceKind, SourceRef,
    decide_snapshot,
};

const DRIVER: &str = "csi.example.com";

/// Mostly the `good` value, sometimes empty or anything.
fn mostly(good: &'static str) -> impl Strategy<Value = String> {
    prop_oneof![
        12 => Just(good.to_owned()),
        1 => Just(String::new()),
        1 => hostile(),
    ]
}

/// Mostly `Some(good)`, sometimes absent, empty or anything.
fn mostly_some(good: &'static str) -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        12 => Just(Some(good.to_owned())),
        1 => Just(None),
        1 => Just(Some(String::new())),
        1 => hostile().prop_map(Some),
    ]
}

fn snapshot() -> impl Strategy<Value = Option<SnapshotView>> {
    let finalizers = proptest::collection::vec(
        prop_oneof![
            3 => Just(SNAPSHOT_FINALIZER.to_owned()),
            1 => Just("other.example.com/finalizer".to_owned()),
            1 => hostile(),
        ],
        0..3,
    );
    let restore_size = proptest::option::weighted(
        0.8,
        prop_oneof![
            4 => Just(1_i64 << 30),
            2 => Just(2_i64 << 30),
            1 => Just(0_i64),
            1 => any::<i64>(),
        ],
    );
    proptest::option::weighted(
        0.9,
        (
            (mostly("uid-snap"), mostly("ns"), mostly("snap")),
            proptest::bool::weighted(0.15),
            finalizers,
            mostly_some("content-1"),
            proptest::option::weighted(0.9, proptest::bool::weighted(0.85)),
            restore_size,
        )
            .prop_map(
                |((uid, namespace, name), deleting, finalizers, bound, ready, restore_size)| {
                    SnapshotView {
                        uid,
                        namespace,
                        name,
                        deleting,
                        finalizers,
                        bound_content: bound,
                        ready_to_use: ready,
                        restore_size,
                    }
                },
            ),
    )
}

fn content() -> impl Strategy<Value = Option<ContentView>> {
    proptest::option::weighted(
        0.9,
        (
            (mostly("uid-snap"), mostly("ns"), mostly("snap")),
            mostly(DRIVER),
            mode(),
            mostly_some("snap-handle"),
            proptest::bool::weighted(0.3),
        )
            .prop_map(
                |((uid, namespace, name), driver, source_mode, handle, allow)| ContentView {
                    snapshot_uid: uid,
                    snapshot_namespace: namespace,
                    snapshot_name: name,
                    driver,
                    source_volume_mode: source_mode,
                    snapshot_handle: handle,
                    allow_volume_mode_change: allow,
                },
            ),
    )
}

fn claim(request: Option<String>, mode: Option<String>) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some("new".to_owned()),
            namespace: Some("ns".to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            volume_mode: mode,
            resources: Some(VolumeResourceRequirements {
                requests: request.map(|s| BTreeMap::from([("storage".to_owned(), Quantity(s))])),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    }
}

/// Upstream's checks, each stated on its own, in no particular order.
fn passes_every_check(
    snapshot: &SnapshotView,
    content: &ContentView,
    request: Option<&str>,
    claim_mode: Option<&str>,
    prevent_conversion: bool,
) -> bool {
    let guarded = snapshot.finalizers.iter().any(|f| f == SNAPSHOT_FINALIZER);
    let requested = request
        .and_then(|r| csi_common::quantity::parse_bytes(r).ok())
        .unwrap_or(0);
    let converts = matches!(
        (content.source_volume_mode.as_deref(), claim_mode),
        (Some(from), Some(to)) if from != to
    );
    (!snapshot.deleting || guarded)
        && snapshot
            .bound_content
            .as_deref()
            .is_some_and(|c| !c.is_empty())
        && content.snapshot_uid == snapshot.uid
        && content.snapshot_namespace == snapshot.namespace
        && content.snapshot_name == snapshot.name
        && content.driver == DRIVER
        && snapshot.ready_to_use == Some(true)
        && content
            .snapshot_handle
            .as_deref()
            .is_some_and(|h| !h.is_empty())
        && snapshot.restore_size.is_none_or(|size| requested >= size)
        && !(prevent_conversion && converts && !content.allow_volume_mode_change)
}

proptest! {
    #![proptest_config(config(3000))]

    /// A snapshot is restored exactly when upstream's checks all pass, and the id sent is the
    /// content's handle.
    #[test]
    fn a_volume_is_restored_exactly_from_a_ready_bound_snapshot_of_this_driver(
        snapshot in snapshot(),
        content in content(),
        request in size(),
        claim_mode in mode(),
        prevent_conversion in any::<bool>(),
    ) {
        let claim = claim(request.clone(), claim_mode.clone());
        let reference = SourceRef {
            kind: SourceKind::Snapshot,
            namespace: "ns".to_owned(),
            name: "snap".to_owned(),
            api_group: "snapshot.storage.k8s.io".to_owned(),
            cross_namespace: false,
        };
        let inputs = SnapshotInputs {
            claim: &claim,
            class_provisioner: DRIVER,
            snapshot: snapshot.as_ref(),
            content: content.as_ref(),
            prevent_volume_mode_conversion: prevent_conversion,
        };
        let result = decide_snapshot(&reference, &inputs);
        prop_assert_eq!(&result, &decide_snapshot(&reference, &inputs), "not deterministic");
        let expected = match (&snapshot, &content) {
            (Some(snapshot), Some(content)) => passes_every_check(
                snapshot,
                content,
                request.as_deref(),
                claim_mode.as_deref(),
                prevent_conversion,
            ),
            _ => false,
        };
        match result {
            Ok(source) => {
                prop_assert!(expected, "restored from a snapshot upstream refuses");
                let handle = content.and_then(|c| c.snapshot_handle).unwrap_or_default();
                prop_assert_eq!(
                    source.r#type,
                    Some(Type::Snapshot(SnapshotSource { snapshot_id: handle }))
                );
            }
            Err(err) => {
                prop_assert!(!expected, "refused a good snapshot: {}", err);
                prop_assert!(!err.to_string().is_empty());
            }
        }
    }
}
