//! The volume controller: one `volumes` work item = one PV (spec §5). Keeps our finalizer on
//! Bound Delete-policy PVs, removes it from Retain/Recycle ones, and for a Released PV with
//! reclaim policy Delete calls DeleteVolume, deletes the PV object and then removes the
//! finalizer, exactly as the Go provisioner does (DELETE, then a strategic-merge PATCH with
//! `$deleteFromPrimitiveList/finalizers`).
//!
//! A PV that any VolumeAttachment still points at is not deleted yet (`VolumeFailedDelete`
//! "persistentvolume X is still attached to node Y"); the deletion is retried when the
//! attachment goes away or after the backoff.
//!
//! Unlike upstream, a retry after the PV object could not be deleted does not call
//! DeleteVolume again: the driver's success is kept until the PV is gone ([`DeletedVolumes`]).
//!
//! [`DeletedVolumes`]: super::DeletedVolumes

use k8s_openapi::api::core::v1::PersistentVolume;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use proto::csi::v1::DeleteVolumeRequest;
use serde_json::json;
use tokio::time::Instant;

use crate::annotations::{PV_FINALIZER, pv_class_name};
use crate::csi::VolumeDriver;
use crate::decide::{VolumeStep, decide_volume, volume_to_delete};
use csi_common::controller::Outcome;
use csi_common::events::{EventType, reference};

use super::secrets::deletion_secrets;
use super::{Context, Deletion};

/// One pass over PV `name`.
pub(crate) async fn sync<D: VolumeDriver>(ctx: &Context<D>, name: &str) -> Outcome {
    let Some(volume) = ctx.stores.volume(name) else {
        return Outcome::Done;
    };
    if volume
        .metadata
        .uid
        .as_deref()
        .is_some_and(|uid| ctx.deleted.contains(uid))
    {
        return Outcome::Done;
    }
    match decide_volume(&ctx.options.driver_name, &volume) {
        VolumeStep::Ignore | VolumeStep::Nothing => Outcome::Done,
        VolumeStep::AddFinalizer => patch_or_retry(ctx, name, add_finalizer_patch(&volume)).await,
        VolumeStep::RemoveFinalizer => {
            patch_or_retry(ctx, name, remove_finalizer_patch(&volume)).await
        }
        VolumeStep::Delete => delete(ctx, &volume).await,
    }
}

async fn patch_or_retry<D>(ctx: &Context<D>, name: &str, patch: serde_json::Value) -> Outcome {
    match patch_volume(ctx, name, &patch).await {
        Ok(()) => Outcome::Done,
        Err(err) => {
            tracing::warn!(
                volume = name,
                error = csi_common::kube_client::error_text(&err),
                "cannot update the volume's finalizers"
            );
            Outcome::Retry
        }
    }
}

/// Strategic-merge PATCH; a PV that is gone needs no finalizer change.
async fn patch_volume<D>(
    ctx: &Context<D>,
    name: &str,
    patch: &serde_json::Value,
) -> Result<(), kube::Error> {
    let api: Api<PersistentVolume> = Api::all(ctx.client.clone());
    match api
        .patch(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(err) => Err(err),
    }
}

fn finalizers(volume: &PersistentVolume) -> Vec<String> {
    volume.metadata.finalizers.clone().unwrap_or_default()
}

/// What client-go's `CreateTwoWayMergePatch` produces for appending our finalizer.
pub(crate) fn add_finalizer_patch(volume: &PersistentVolume) -> serde_json::Value {
    let mut order = finalizers(volume);
    order.push(PV_FINALIZER.to_owned());
    json!({"metadata": {"$setElementOrder/finalizers": order, "finalizers": [PV_FINALIZER]}})
}

/// What the Go provisioner sends to remove our finalizer (fixtures:
/// `{"metadata":{"$deleteFromPrimitiveList/finalizers":[ours],"$setElementOrder/finalizers":[rest]}}`).
pub(crate) fn remove_finalizer_patch(volume: &PersistentVolume) -> serde_json::Value {
    let rest: Vec<String> = finalizers(volume)
        .into_iter()
        .filter(|f| f != PV_FINALIZER)
        .collect();
    json!({"metadata": {
        "$deleteFromPrimitiveList/finalizers": [PV_FINALIZER],
        "$setElementOrder/finalizers": rest,
    }})
}

/// DeleteVolume, then delete the PV object, then drop our finalizer (spec §5 steps 4-5).
async fn delete<D: VolumeDriver>(ctx: &Context<D>, volume: &PersistentVolume) -> Outcome {
    let started = Instant::now();
    let name = volume.metadata.name.clone().unwrap_or_default();
    let class = pv_class_name(volume);
    let failed = |message: String| {
        tracing::warn!(volume = %name, error = %message, "deletion failed");
        ctx.recorder.event(
            &reference(volume),
            EventType::Warning,
            "VolumeFailedDelete",
            message,
        );
        ctx.metrics.delete_failed(&class);
        Outcome::Retry
    };

    let (volume_id, migrated) = match volume_to_delete(volume) {
        Ok((id, migrated)) => (id.into_owned(), migrated),
        Err(err) => return failed(err.event_message()),
    };
    if let Some(node) = &ctx.node
        && !node.owns_volume(&ctx.options.driver_name, volume)
    {
        // Upstream's IgnoredError "PV was not provisioned on this node": another node's.
        return Outcome::Done;
    }
    let uid = volume.metadata.uid.as_deref();
    // The stage first, the cache after: see `storage_step`.
    let stage = uid.and_then(|uid| ctx.deleted.stage(uid));
    let cached = ctx
        .stores
        .volume(&name)
        .is_some_and(|current| current.metadata.uid.as_deref() == uid);
    let step = storage_step(stage, cached);
    if step == StorageStep::Gone {
        return Outcome::Done;
    }
    if step == StorageStep::Deleted {
        // An earlier pass deleted the volume and then failed to delete the object: the
        // driver has nothing left to do.
        tracing::debug!(volume = %name, "volume deleted already, deleting the PV");
    } else {
        if let Some(node) = ctx.stores.attached_node(&name) {
            return failed(format!(
                "persistentvolume {name} is still attached to node {node}"
            ));
        }
        let secrets = match deletion_secrets(ctx, volume).await {
            Ok(secrets) => secrets,
            Err(err) => return failed(csi_common::logging::error_chain(&err)),
        };
        let request = DeleteVolumeRequest { volume_id, secrets };
        if let Err(err) = ctx.driver.delete_volume(request, migrated).await {
            return failed(err.to_string());
        }
        ctx.deleted.storage_deleted(uid);
        tracing::info!(volume = %name, "volume deleted");
    }

    let api: Api<PersistentVolume> = Api::all(ctx.client.clone());
    match api.delete(&name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(err) => {
            tracing::warn!(volume = %name, error = csi_common::kube_client::error_text(&err), "Failed to delete volume");
            return Outcome::Retry;
        }
    }
    // The object we hold may be older than the API's (e.g. the attacher removed its finalizer);
    // the patch only names ours to delete, so a stale order list cannot drop another one.
    let current = ctx.stores.volume(&name);
    let patch = remove_finalizer_patch(current.as_deref().unwrap_or(volume));
    // Events the DELETE and PATCH caused may still show the PV with our finalizer: its UID is
    // noted (before the PATCH, `DeletedVolumes` says why) so they cause no sync at all.
    let removed = ctx.deleted.write(uid, patch_volume(ctx, &name, &patch));
    if let Err(err) = removed.await {
        tracing::warn!(volume = %name, error = csi_common::kube_client::error_text(&err), "cannot remove the provisioner finalizer");
        return Outcome::Retry;
    }
    ctx.metrics.deleted(&class, started.elapsed());
    Outcome::Done
}

/// What a deletion does about the volume's storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StorageStep {
    /// Call DeleteVolume.
    Call,
    /// An earlier pass deleted it ([`DeletedVolumes`](super::DeletedVolumes) has its stage):
    /// go on with the object.
    Deleted,
    /// The PV is gone: nothing to do.
    Gone,
}

/// The storage step from the stage an earlier pass left (read first) and whether the cache
/// still holds this very PV (read after). The sync read the PV from the cache before; if the
/// PV's Deleted event came in between, its handler, which runs once the cache has dropped the
/// object, has dropped the stage too, and a missing stage alone would call DeleteVolume a
/// second time for a volume that is gone (seen once in CI: the chaos `driver-errors` row's
/// check of calls repeated after an OK answer). A stage missing while the cache still holds
/// the PV was never there: the storage is still to be deleted.
fn storage_step(stage: Option<Deletion>, cached: bool) -> StorageStep {
    match (stage, cached) {
        (Some(_), _) => StorageStep::Deleted,
        (None, true) => StorageStep::Call,
        (None, false) => StorageStep::Gone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn the_driver_is_called_only_for_a_cached_pv_without_a_finished_deletion() {
        let cases = [
            (None, true, StorageStep::Call),
            (Some(Deletion::Storage), true, StorageStep::Deleted),
            (Some(Deletion::Object), true, StorageStep::Deleted),
            (Some(Deletion::Storage), false, StorageStep::Deleted),
            // Deleted between the sync's read and now: the handler dropped the stage.
            (None, false, StorageStep::Gone),
        ];
        for (stage, cached, want) in cases {
            assert_eq!(storage_step(stage, cached), want, "{stage:?} {cached}");
        }
    }

    fn pv(finalizers: &[&str]) -> PersistentVolume {
        PersistentVolume {
            metadata: ObjectMeta {
                name: Some("pvc-1".into()),
                finalizers: Some(finalizers.iter().map(|f| (*f).to_owned()).collect()),
                ..ObjectMeta::default()
            },
            ..PersistentVolume::default()
        }
    }

    #[test]
    fn finalizer_removal_patch_matches_the_go_provisioner() {
        let volume = pv(&[
            "kubernetes.io/pv-protection",
            PV_FINALIZER,
            "external-attacher/hostpath-csi-k8s-io",
        ]);
        assert_eq!(
            remove_finalizer_patch(&volume).to_string(),
            r#"{"metadata":{"$deleteFromPrimitiveList/finalizers":["external-provisioner.volume.kubernetes.io/finalizer"],"$setElementOrder/finalizers":["kubernetes.io/pv-protection","external-attacher/hostpath-csi-k8s-io"]}}"#
        );
    }

    #[test]
    fn finalizer_addition_patch_appends_ours() {
        let volume = pv(&["kubernetes.io/pv-protection"]);
        assert_eq!(
            add_finalizer_patch(&volume),
            json!({"metadata": {
                "$setElementOrder/finalizers": ["kubernetes.io/pv-protection", PV_FINALIZER],
                "finalizers": [PV_FINALIZER],
            }})
        );
    }
}
