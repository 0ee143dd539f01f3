//! The snapshots of the csi-provisioner churn: what external-snapshotter would do for a
//! VolumeSnapshot of a bound claim (CreateSnapshot on the driver, a VolumeSnapshotContent bound
//! to the VolumeSnapshot, both ready), and its cleanup once the restored claims are gone.
//!
//! No snapshot controller runs here, as in the sandbox's restore flow: the objects are stored
//! ready, so the churn exercises what csi-provisioner does with them (reads them, puts its
//! source-protection finalizer on the VolumeSnapshot while it restores, takes it off once the
//! PV is built), not the snapshotter's work.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::DeleteParams;
use proto::csi::v1::controller_client::ControllerClient;
use proto::csi::v1::{CreateSnapshotRequest, DeleteSnapshotRequest};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::rig::{NAMESPACE, Rig};

/// A `snapshot.storage.k8s.io/v1` VolumeSnapshot, its spec and status as they come.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct VolumeSnapshot {
    pub(super) metadata: ObjectMeta,
    #[serde(default)]
    spec: Value,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    status: Value,
}

/// A `snapshot.storage.k8s.io/v1` VolumeSnapshotContent, its spec and status as they come.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct VolumeSnapshotContent {
    metadata: ObjectMeta,
    #[serde(default)]
    spec: Value,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    status: Value,
}

/// The group, version, kind and plural of a snapshot.storage.k8s.io/v1 type, and its metadata.
macro_rules! snapshot_resource {
    ($type:ty, $kind:literal, $plural:literal, $scope:ty) => {
        impl k8s_openapi::Resource for $type {
            const API_VERSION: &'static str = "snapshot.storage.k8s.io/v1";
            const GROUP: &'static str = "snapshot.storage.k8s.io";
            const KIND: &'static str = $kind;
            const VERSION: &'static str = "v1";
            const URL_PATH_SEGMENT: &'static str = $plural;
            type Scope = $scope;
        }

        impl k8s_openapi::Metadata for $type {
            type Ty = ObjectMeta;

            fn metadata(&self) -> &ObjectMeta {
                &self.metadata
            }

            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

snapshot_resource!(
    VolumeSnapshot,
    "VolumeSnapshot",
    "volumesnapshots",
    k8s_openapi::NamespaceResourceScope
);
snapshot_resource!(
    VolumeSnapshotContent,
    "VolumeSnapshotContent",
    "volumesnapshotcontents",
    k8s_openapi::ClusterResourceScope
);

/// The content's name for VolumeSnapshot `name`.
fn content_name(name: &str) -> String {
    format!("content-{name}")
}

/// Snapshots volume `volume_handle` on the driver and stores VolumeSnapshot `name` and its
/// content, both ready to use; returns the driver's snapshot id.
pub(super) async fn publish(rig: &Rig, name: &str, volume_handle: &str) -> anyhow::Result<String> {
    let mut csi = ControllerClient::new(rig.driver.channel()?);
    let snapshot = csi
        .create_snapshot(CreateSnapshotRequest {
            name: format!("snapshot-{name}"),
            source_volume_id: volume_handle.to_owned(),
            ..CreateSnapshotRequest::default()
        })
        .await?
        .into_inner()
        .snapshot
        .ok_or_else(|| anyhow::anyhow!("CreateSnapshot answered no snapshot"))?;
    let content = content_name(name);
    let stored = rig.server.put_object(&VolumeSnapshot {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(NAMESPACE.to_owned()),
            ..ObjectMeta::default()
        },
        spec: json!({"source": {"volumeSnapshotContentName": content}}),
        status: json!({"boundVolumeSnapshotContentName": content, "readyToUse": true,
                       "restoreSize": snapshot.size_bytes.to_string()}),
    })?;
    rig.server.put_object(&VolumeSnapshotContent {
        metadata: ObjectMeta {
            name: Some(content),
            ..ObjectMeta::default()
        },
        spec: json!({
            "driver": testbed_mock_csi::DEFAULT_DRIVER_NAME, "deletionPolicy": "Delete",
            "sourceVolumeMode": "Filesystem",
            "source": {"snapshotHandle": snapshot.snapshot_id},
            "volumeSnapshotRef": {"name": name, "namespace": NAMESPACE,
                                  "uid": stored.metadata.uid},
        }),
        status: json!({"snapshotHandle": snapshot.snapshot_id, "readyToUse": true,
                       "restoreSize": snapshot.size_bytes}),
    })?;
    Ok(snapshot.snapshot_id)
}

/// Deletes VolumeSnapshot `name` through the API (its finalizers hold it until they are
/// gone), its content, and the driver's snapshot `snapshot_id`.
pub(super) async fn remove(rig: &Rig, name: &str, snapshot_id: &str) -> anyhow::Result<()> {
    let snapshots: Api<VolumeSnapshot> = Api::namespaced(rig.server.client(), NAMESPACE);
    match snapshots.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    rig.server
        .delete_object::<VolumeSnapshotContent>(None, &content_name(name))?;
    let mut csi = ControllerClient::new(rig.driver.channel()?);
    csi.delete_snapshot(DeleteSnapshotRequest {
        snapshot_id: snapshot_id.to_owned(),
        ..DeleteSnapshotRequest::default()
    })
    .await?;
    Ok(())
}

/// How many VolumeSnapshots the API server still holds (a finalizer left on one keeps it).
pub(super) fn left(rig: &Rig) -> anyhow::Result<usize> {
    Ok(rig
        .server
        .list_objects::<VolumeSnapshot>(Some(NAMESPACE))?
        .len())
}
