//! csi-provisioner data-source flows: a clone of the dynamic-provisioning claim ends Bound with
//! the source protected by `provisioner.storage.kubernetes.io/cloning-protection`, and a
//! restore from a VolumeSnapshot of it ends Bound with the volume made from the snapshot and the
//! snapshot's source-protection finalizer gone afterwards.
//!
//! No snapshot controller runs in the sandbox: the restore flow plays external-snapshotter's
//! part (CreateSnapshot on the mock driver, a VolumeSnapshotContent bound to the VolumeSnapshot,
//! both statuses ready through `/status`).

use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use proto::csi::v1::CreateSnapshotRequest;
use proto::csi::v1::controller_client::ControllerClient;
use serde_json::json;
use testbed_cluster::kcm::objects;
use testbed_kubelet::grpc_dial::{Authority, dial};

use super::provisioning::CLAIM;
use super::{FlowResult, claim_event_reasons, failed, ms_since, require_sidecar, wait_for};
use crate::{NAMESPACE, STORAGE_CLASS, Sandbox};

const CLONE: &str = "sandbox-clone";
const RESTORE: &str = "sandbox-restore";
const SNAPSHOT: &str = "sandbox-snapshot";
const CLONE_FINALIZER: &str = "provisioner.storage.kubernetes.io/cloning-protection";
const SNAPSHOT_FINALIZER: &str =
    "provisioner.storage.kubernetes.io/volumesnapshot-as-source-protection";
const WAIT: Duration = Duration::from_secs(30);

fn snapshot_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("snapshot.storage.k8s.io", "v1", kind),
        plural,
    )
}

/// A claim of the sandbox class with `source` (kind, apiGroup, name) as its data source.
fn claim_from(name: &str, kind: &str, group: Option<&str>, source: &str) -> serde_json::Value {
    json!({
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": STORAGE_CLASS,
            "dataSource": {"kind": kind, "apiGroup": group, "name": source},
            "dataSourceRef": {"kind": kind, "apiGroup": group, "name": source},
        },
    })
}

/// Creates claim `value` and waits until it is Bound; returns its PV and the time it took.
async fn create_and_bind(
    sb: &Sandbox,
    value: serde_json::Value,
) -> Result<(PersistentVolume, u128), super::FlowError> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(sb.client().clone(), NAMESPACE);
    let claim: PersistentVolumeClaim =
        serde_json::from_value(value).map_err(|e| failed("bad claim", e))?;
    let name = claim.metadata.name.clone().unwrap_or_default();
    let start = tokio::time::Instant::now();
    claims
        .create(&PostParams::default(), &claim)
        .await
        .map_err(|e| failed("cannot create the claim", e))?;
    let bound = wait_for(&format!("{name} to be Bound"), WAIT, || async {
        let claim = claims.get_opt(&name).await.ok().flatten()?;
        (objects::pvc_phase(&claim) == "Bound").then_some(claim)
    })
    .await?;
    let took = ms_since(start);
    let volumes: Api<PersistentVolume> = Api::all(sb.client().clone());
    let pv = volumes
        .get(objects::claim_volume_name(&bound))
        .await
        .map_err(|e| failed("GET the PV", e))?;
    Ok((pv, took))
}

fn handle_of(pv: &PersistentVolume) -> String {
    pv.spec
        .as_ref()
        .and_then(|s| s.csi.as_ref())
        .map(|c| c.volume_handle.clone())
        .unwrap_or_default()
}

/// The dynamic-provisioning claim's PV handle (the source of both flows).
async fn source_handle(sb: &Sandbox) -> Result<String, super::FlowError> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(sb.client().clone(), NAMESPACE);
    let source = claims
        .get(CLAIM)
        .await
        .map_err(|e| failed("the dynamic-provisioning claim (run that flow first)", e))?;
    let volumes: Api<PersistentVolume> = Api::all(sb.client().clone());
    let pv = volumes
        .get(objects::claim_volume_name(&source))
        .await
        .map_err(|e| failed("GET the source PV", e))?;
    Ok(handle_of(&pv))
}

/// Clone flow: the clone is Bound, its source claim carries the cloning-protection finalizer.
pub(super) async fn cloned(sb: &Sandbox) -> FlowResult {
    require_sidecar(sb, "csi-provisioner")?;
    let source = source_handle(sb).await?;
    let (pv, took) =
        create_and_bind(sb, claim_from(CLONE, "PersistentVolumeClaim", None, CLAIM)).await?;
    let mut notes = vec![format!(
        "{NAMESPACE}/{CLONE} (clone of {CLAIM}) Bound to {} after {took} ms",
        pv.metadata.name.as_deref().unwrap_or_default()
    )];
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(sb.client().clone(), NAMESPACE);
    let source_claim = claims
        .get(CLAIM)
        .await
        .map_err(|e| failed("GET the source claim", e))?;
    let protected = source_claim
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == CLONE_FINALIZER);
    if !protected {
        return Err(super::FlowError::Failed(format!(
            "{CLAIM} lacks {CLONE_FINALIZER}: {:?}",
            source_claim.metadata.finalizers
        )));
    }
    notes.push(format!(
        "{CLAIM} carries {CLONE_FINALIZER} (source volume {source})"
    ));
    let reasons = claim_event_reasons(
        sb,
        CLONE,
        |r| r.starts_with("Provisioning"),
        "ProvisioningSucceeded",
    )
    .await?;
    notes.push(format!("events on the clone: {reasons:?}"));
    Ok(notes)
}

/// Restore flow: snapshot the source volume, restore it, check the finalizer comes off.
pub(super) async fn restored(sb: &Sandbox) -> FlowResult {
    require_sidecar(sb, "csi-provisioner")?;
    let source = source_handle(sb).await?;
    let channel = dial(sb.csi_socket(), Authority::Localhost)
        .await
        .map_err(|e| failed("dial the driver", e))?;
    let snapshot = ControllerClient::new(channel)
        .create_snapshot(CreateSnapshotRequest {
            name: format!("snapshot-{SNAPSHOT}"),
            source_volume_id: source.clone(),
            ..CreateSnapshotRequest::default()
        })
        .await
        .map_err(|e| failed("CreateSnapshot", e))?
        .into_inner()
        .snapshot
        .unwrap_or_default();
    let mut notes = vec![format!(
        "CreateSnapshot of {source}: {} ({} bytes)",
        snapshot.snapshot_id, snapshot.size_bytes
    )];
    let snapshots: Api<DynamicObject> = Api::namespaced_with(
        sb.client().clone(),
        NAMESPACE,
        &snapshot_resource("VolumeSnapshot", "volumesnapshots"),
    );
    publish_snapshot(sb, &snapshots, &snapshot, &source).await?;

    let (pv, took) = create_and_bind(
        sb,
        claim_from(
            RESTORE,
            "VolumeSnapshot",
            Some("snapshot.storage.k8s.io"),
            SNAPSHOT,
        ),
    )
    .await?;
    notes.push(format!(
        "{NAMESPACE}/{RESTORE} (restore of {SNAPSHOT}) Bound to {} after {took} ms",
        pv.metadata.name.as_deref().unwrap_or_default()
    ));
    wait_for(
        &format!("{SNAPSHOT_FINALIZER} removed from {SNAPSHOT}"),
        WAIT,
        || async {
            let current = snapshots.get(SNAPSHOT).await.ok()?;
            (!current
                .metadata
                .finalizers
                .iter()
                .flatten()
                .any(|f| f == SNAPSHOT_FINALIZER))
            .then_some(())
        },
    )
    .await?;
    notes.push(format!(
        "{SNAPSHOT} no longer carries {SNAPSHOT_FINALIZER} once the PV is built"
    ));
    Ok(notes)
}

/// What external-snapshotter would write for `snapshot` of volume `source`: the VolumeSnapshot,
/// its VolumeSnapshotContent, both statuses ready.
async fn publish_snapshot(
    sb: &Sandbox,
    snapshots: &Api<DynamicObject>,
    snapshot: &proto::csi::v1::Snapshot,
    source: &str,
) -> Result<(), super::FlowError> {
    let contents: Api<DynamicObject> = Api::all_with(
        sb.client().clone(),
        &snapshot_resource("VolumeSnapshotContent", "volumesnapshotcontents"),
    );
    let content = format!("content-{SNAPSHOT}");
    let object = |value: serde_json::Value| {
        serde_json::from_value::<DynamicObject>(value).map_err(|e| failed("bad object", e))
    };
    let created = snapshots
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
                "metadata": {"name": SNAPSHOT},
                "spec": {"source": {"persistentVolumeClaimName": CLAIM}}
            }))?,
        )
        .await
        .map_err(|e| failed("create the VolumeSnapshot", e))?;
    contents
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotContent",
                "metadata": {"name": content},
                "spec": {
                    "driver": sb.driver_name(), "deletionPolicy": "Delete",
                    "source": {"volumeHandle": source},
                    "sourceVolumeMode": "Filesystem",
                    "volumeSnapshotRef": {"name": SNAPSHOT, "namespace": NAMESPACE,
                                          "uid": created.metadata.uid}
                }
            }))?,
        )
        .await
        .map_err(|e| failed("create the VolumeSnapshotContent", e))?;
    let status = |value: serde_json::Value| Patch::Merge(json!({ "status": value }));
    contents
        .patch_status(
            &content,
            &PatchParams::default(),
            &status(
                json!({"snapshotHandle": snapshot.snapshot_id, "readyToUse": true,
                           "restoreSize": snapshot.size_bytes}),
            ),
        )
        .await
        .map_err(|e| failed("content status", e))?;
    snapshots
        .patch_status(
            SNAPSHOT,
            &PatchParams::default(),
            &status(
                json!({"boundVolumeSnapshotContentName": content, "readyToUse": true,
                           "restoreSize": snapshot.size_bytes.to_string()}),
            ),
        )
        .await
        .map_err(|e| failed("snapshot status", e))?;
    Ok(())
}
