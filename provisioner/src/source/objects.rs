//! The fields the provisioner reads from custom resources it has no typed Rust API for:
//! snapshot.storage.k8s.io/v1 VolumeSnapshot and VolumeSnapshotContent (spec §2.6) and
//! gateway.networking.k8s.io/v1beta1 ReferenceGrant. They are fetched as
//! [`kube::api::DynamicObject`]s; a field of the wrong type reads as absent, so a malformed
//! object makes the source unusable with a clear reason instead of failing to decode.

use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::Value;

use super::{ALLOW_VOLUME_MODE_CHANGE, SNAPSHOT_API_GROUP};

/// snapshot.storage.k8s.io/v1 VolumeSnapshot.
pub(crate) fn snapshot_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(SNAPSHOT_API_GROUP, "v1", "VolumeSnapshot"),
        "volumesnapshots",
    )
}

/// snapshot.storage.k8s.io/v1 VolumeSnapshotContent.
pub(crate) fn content_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(SNAPSHOT_API_GROUP, "v1", "VolumeSnapshotContent"),
        "volumesnapshotcontents",
    )
}

/// gateway.networking.k8s.io/v1beta1 ReferenceGrant (the version upstream reads).
pub(crate) fn grant_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("gateway.networking.k8s.io", "v1beta1", "ReferenceGrant"),
        "referencegrants",
    )
}

/// What the provisioner reads of a VolumeSnapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SnapshotView {
    /// `metadata.uid`.
    pub(crate) uid: String,
    /// `metadata.namespace`.
    pub(crate) namespace: String,
    /// `metadata.name`.
    pub(crate) name: String,
    /// `metadata.deletionTimestamp` is set.
    pub(crate) deleting: bool,
    /// `metadata.finalizers`.
    pub(crate) finalizers: Vec<String>,
    /// `status.boundVolumeSnapshotContentName`.
    pub(crate) bound_content: Option<String>,
    /// `status.readyToUse`.
    pub(crate) ready_to_use: Option<bool>,
    /// `status.restoreSize` in bytes.
    pub(crate) restore_size: Option<i64>,
}

impl SnapshotView {
    /// Reads a VolumeSnapshot.
    pub(crate) fn from_object(object: &DynamicObject) -> Self {
        let status = object.data.get("status");
        Self {
            uid: object.metadata.uid.clone().unwrap_or_default(),
            namespace: object.metadata.namespace.clone().unwrap_or_default(),
            name: object.metadata.name.clone().unwrap_or_default(),
            deleting: object.metadata.deletion_timestamp.is_some(),
            finalizers: object.metadata.finalizers.clone().unwrap_or_default(),
            bound_content: string(status, "boundVolumeSnapshotContentName"),
            ready_to_use: status
                .and_then(|s| s.get("readyToUse"))
                .and_then(Value::as_bool),
            restore_size: restore_size(status),
        }
    }
}

/// What the provisioner reads of a VolumeSnapshotContent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ContentView {
    /// `spec.volumeSnapshotRef.uid`.
    pub(crate) snapshot_uid: String,
    /// `spec.volumeSnapshotRef.namespace`.
    pub(crate) snapshot_namespace: String,
    /// `spec.volumeSnapshotRef.name`.
    pub(crate) snapshot_name: String,
    /// `spec.driver`.
    pub(crate) driver: String,
    /// `spec.sourceVolumeMode`.
    pub(crate) source_volume_mode: Option<String>,
    /// `status.snapshotHandle`.
    pub(crate) snapshot_handle: Option<String>,
    /// Annotation `snapshot.storage.kubernetes.io/allow-volume-mode-change` parses as true
    /// (Go `strconv.ParseBool`).
    pub(crate) allow_volume_mode_change: bool,
}

impl ContentView {
    /// Reads a VolumeSnapshotContent.
    pub(crate) fn from_object(object: &DynamicObject) -> Self {
        let spec = object.data.get("spec");
        let snapshot_ref = spec.and_then(|s| s.get("volumeSnapshotRef"));
        let allow = object
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ALLOW_VOLUME_MODE_CHANGE))
            .is_some_and(|v| matches!(v.as_str(), "1" | "t" | "T" | "true" | "TRUE" | "True"));
        Self {
            snapshot_uid: string(snapshot_ref, "uid").unwrap_or_default(),
            snapshot_namespace: string(snapshot_ref, "namespace").unwrap_or_default(),
            snapshot_name: string(snapshot_ref, "name").unwrap_or_default(),
            driver: string(spec, "driver").unwrap_or_default(),
            source_volume_mode: string(spec, "sourceVolumeMode"),
            snapshot_handle: string(object.data.get("status"), "snapshotHandle"),
            allow_volume_mode_change: allow,
        }
    }
}

/// One `spec.from` entry of a ReferenceGrant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct GrantFrom {
    /// `group`.
    pub(crate) group: String,
    /// `kind`.
    pub(crate) kind: String,
    /// `namespace`.
    pub(crate) namespace: String,
}

/// One `spec.to` entry of a ReferenceGrant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct GrantTo {
    /// `group`.
    pub(crate) group: String,
    /// `kind`.
    pub(crate) kind: String,
    /// `name` ("" = every object of the kind).
    pub(crate) name: String,
}

/// What the provisioner reads of a ReferenceGrant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct GrantView {
    /// `spec.from`.
    pub(crate) from: Vec<GrantFrom>,
    /// `spec.to`.
    pub(crate) to: Vec<GrantTo>,
}

impl GrantView {
    /// Reads a ReferenceGrant.
    pub(crate) fn from_object(object: &DynamicObject) -> Self {
        let spec = object.data.get("spec");
        let entries = |field: &str| -> Vec<&Value> {
            spec.and_then(|s| s.get(field))
                .and_then(Value::as_array)
                .map(|a| a.iter().collect())
                .unwrap_or_default()
        };
        Self {
            from: entries("from")
                .into_iter()
                .map(|e| GrantFrom {
                    group: string(Some(e), "group").unwrap_or_default(),
                    kind: string(Some(e), "kind").unwrap_or_default(),
                    namespace: string(Some(e), "namespace").unwrap_or_default(),
                })
                .collect(),
            to: entries("to")
                .into_iter()
                .map(|e| GrantTo {
                    group: string(Some(e), "group").unwrap_or_default(),
                    kind: string(Some(e), "kind").unwrap_or_default(),
                    name: string(Some(e), "name").unwrap_or_default(),
                })
                .collect(),
        }
    }
}

fn string(parent: Option<&Value>, field: &str) -> Option<String> {
    parent
        .and_then(|p| p.get(field))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// `status.restoreSize`: a quantity (string) as the CRD declares it; an integer is accepted too
/// (int-or-string quantities serialize as numbers when written by some clients).
fn restore_size(status: Option<&Value>) -> Option<i64> {
    match status?.get("restoreSize")? {
        Value::String(s) => csi_common::quantity::parse_bytes(s).ok(),
        Value::Number(n) => n.as_i64(),
        _ => None,
    }
}
