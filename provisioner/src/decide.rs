//! Which claims and volumes are this provisioner's business, and what to do with them next
//! (spec §4.1, §5 steps 1-3).
//!
//! Rust counterpart of external-provisioner's `ShouldProvision` plus the lib's
//! `shouldProvision` (claims) and the lib's `isProvisionerForVolume`,
//! `handleProtectionFinalizer` and `shouldDelete` (volumes). Pure decisions over the objects;
//! the controller carries them out.

use std::borrow::Cow;

use csi_common::migration;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;

use crate::annotations::{
    ANN_ALPHA_SELECTED_NODE, ANN_BETA_STORAGE_PROVISIONER, ANN_MIGRATED_TO, ANN_PROVISIONED_BY,
    ANN_SELECTED_NODE, ANN_STORAGE_PROVISIONER, PV_FINALIZER, claim_class_name,
};
use crate::plan_error::PlanError;

const BINDING_WAIT_FOR_FIRST_CONSUMER: &str = "WaitForFirstConsumer";
const PHASE_BOUND: &str = "Bound";
const PHASE_RELEASED: &str = "Released";
const RECLAIM_DELETE: &str = "Delete";
const RECLAIM_RETAIN: &str = "Retain";
const RECLAIM_RECYCLE: &str = "Recycle";

/// What to do with a claim.
#[derive(Debug)]
pub(crate) enum ClaimStep {
    /// Not ours, already bound, or its class names another provisioner: nothing to do, no Event.
    Ignore,
    /// WaitForFirstConsumer class and the scheduler has not picked a node yet.
    WaitForSelectedNode,
    /// Plan and create the volume.
    Provision {
        /// The scheduler's node (or a node-deployment instance's), if any.
        selected_node: Option<String>,
    },
    /// Cannot proceed now ([`PlanError::StorageClassNotFound`]: retry with backoff, no Event).
    Fail(PlanError),
}

/// Decides whether a claim needs a volume from `driver_name` (spec §4.1 steps 2-4).
///
/// `class` is the claim's StorageClass (named by [`claim_class_name`]) from the cache, `None` if
/// it does not exist. Claims are ours when `volume.kubernetes.io/storage-provisioner` (or, only
/// if that is absent, the beta annotation) names the driver. `pv.kubernetes.io/migrated-to`
/// alone does not make a claim ours: the lib still needs the storage-provisioner annotation to
/// name a provisioner it knows, and this provisioner knows no in-tree names. Phase and
/// deletionTimestamp are not looked at (upstream does not either).
pub(crate) fn decide_claim(
    driver_name: &str,
    pvc: &PersistentVolumeClaim,
    class: Option<&StorageClass>,
) -> ClaimStep {
    let volume_name = pvc.spec.as_ref().and_then(|s| s.volume_name.as_deref());
    if volume_name.is_some_and(|name| !name.is_empty()) {
        return ClaimStep::Ignore;
    }
    let annotation = |key: &str| {
        pvc.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(String::as_str)
    };
    let provisioner =
        annotation(ANN_STORAGE_PROVISIONER).or_else(|| annotation(ANN_BETA_STORAGE_PROVISIONER));
    if provisioner != Some(driver_name) {
        return ClaimStep::Ignore;
    }
    let Some(class) = class else {
        return ClaimStep::Fail(PlanError::StorageClassNotFound {
            name: claim_class_name(pvc),
        });
    };
    if class.provisioner != driver_name {
        // kube-controller-manager names a migration driver as the storage provisioner of a
        // claim whose class is the in-tree plugin's: upstream provisions it (spec §6.5), this
        // provisioner cannot yet, and says so rather than leave the claim silently Pending.
        let in_tree = migration::Plugin::of_csi_driver(driver_name)
            .is_some_and(|plugin| plugin.in_tree_name() == class.provisioner);
        if in_tree {
            return ClaimStep::Fail(PlanError::MigratedClass {
                class: class.metadata.name.clone().unwrap_or_default(),
                provisioner: class.provisioner.clone(),
            });
        }
        // The class was changed to another provisioner after the annotation was set.
        return ClaimStep::Ignore;
    }
    if class.volume_binding_mode.as_deref() == Some(BINDING_WAIT_FOR_FIRST_CONSUMER) {
        // The lib looks at the GA annotation only here (the alpha one only when provisioning).
        return match annotation(ANN_SELECTED_NODE) {
            Some(node) if !node.is_empty() => ClaimStep::Provision {
                selected_node: Some(node.to_owned()),
            },
            _ => ClaimStep::WaitForSelectedNode,
        };
    }
    ClaimStep::Provision {
        selected_node: selected_node(pvc).map(str::to_owned),
    }
}

/// The claim's selected node: the GA annotation, else the alpha one; an empty value counts as
/// none.
pub(crate) fn selected_node(pvc: &PersistentVolumeClaim) -> Option<&str> {
    let annotations = pvc.metadata.annotations.as_ref()?;
    annotations
        .get(ANN_SELECTED_NODE)
        .or_else(|| annotations.get(ANN_ALPHA_SELECTED_NODE))
        .map(String::as_str)
        .filter(|node| !node.is_empty())
}

/// What to do with a PersistentVolume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VolumeStep {
    /// Another provisioner's (or a non-CSI static) volume.
    Ignore,
    /// Ours, Bound, reclaim policy Delete, not being deleted, no finalizer yet: add
    /// [`PV_FINALIZER`] (strategic-merge patch) so the storage cannot be orphaned by deleting
    /// the PV object first.
    AddFinalizer,
    /// Ours with reclaim policy Retain or Recycle and our finalizer: remove it, deleting such a
    /// PV must never wait for us.
    RemoveFinalizer,
    /// Released with reclaim policy Delete: DeleteVolume, delete the PV object, then remove
    /// [`PV_FINALIZER`].
    Delete,
    /// Ours, nothing to do now.
    Nothing,
}

/// Decides the next step for a volume (spec §5 steps 1-3).
///
/// Ownership: with `pv.kubernetes.io/provisioned-by`, it or `pv.kubernetes.io/migrated-to` must
/// name the driver; without it (a statically created PV), `spec.csi.driver` must, or
/// `migrated-to`. A finalizer change is returned before any deletion decision: the controller
/// patches and sees the volume again. Retain and Recycle volumes never reach the driver.
pub(crate) fn decide_volume(driver_name: &str, pv: &PersistentVolume) -> VolumeStep {
    if !is_ours(driver_name, pv) {
        return VolumeStep::Ignore;
    }
    let spec = pv.spec.as_ref();
    let reclaim = spec.and_then(|s| s.persistent_volume_reclaim_policy.as_deref());
    let phase = pv.status.as_ref().and_then(|s| s.phase.as_deref());
    let deleting = pv.metadata.deletion_timestamp.is_some();
    let has_finalizer = pv
        .metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == PV_FINALIZER));

    if reclaim == Some(RECLAIM_DELETE) && !deleting && phase == Some(PHASE_BOUND) && !has_finalizer
    {
        return VolumeStep::AddFinalizer;
    }
    if matches!(reclaim, Some(RECLAIM_RETAIN | RECLAIM_RECYCLE)) && has_finalizer {
        return VolumeStep::RemoveFinalizer;
    }
    if deleting && !has_finalizer {
        // Our finalizer is gone: the storage was deleted already.
        return VolumeStep::Nothing;
    }
    if phase == Some(PHASE_RELEASED) && reclaim == Some(RECLAIM_DELETE) {
        return VolumeStep::Delete;
    }
    VolumeStep::Nothing
}

fn is_ours(driver_name: &str, pv: &PersistentVolume) -> bool {
    let annotations = pv.metadata.annotations.as_ref();
    let annotation = |key: &str| annotations.and_then(|a| a.get(key)).map(String::as_str);
    let migrated_to_us = annotation(ANN_MIGRATED_TO) == Some(driver_name);
    match annotation(ANN_PROVISIONED_BY) {
        Some(provisioner) => provisioner == driver_name || migrated_to_us,
        None => match pv.spec.as_ref().and_then(|s| s.csi.as_ref()) {
            Some(csi) => csi.driver == driver_name,
            None => migrated_to_us,
        },
    }
}

/// The CSI volume id a Released PV is deleted with, and whether it is a translation: an
/// in-tree PV of a plugin migrated to CSI (kube-controller-manager leaves its deletion to the
/// driver's provisioner, `migrated-to`) is translated first, as external-provisioner's
/// `Delete` does with csi-translation-lib; any other PV needs `spec.csi`.
pub(crate) fn volume_to_delete(pv: &PersistentVolume) -> Result<(Cow<'_, str>, bool), PlanError> {
    match migration::translated_spec(pv) {
        Some(Ok(spec)) => spec
            .csi
            .map(|csi| (Cow::Owned(csi.volume_handle), true))
            .ok_or(PlanError::InvalidCsiPv),
        Some(Err(refused)) => Err(PlanError::Translation(refused)),
        None => volume_handle(pv).map(|handle| (Cow::Borrowed(handle), false)),
    }
}

/// The CSI volume id to delete: `spec.csi.volumeHandle` ("invalid CSI PV" without `spec.csi`).
pub(crate) fn volume_handle(pv: &PersistentVolume) -> Result<&str, PlanError> {
    pv.spec
        .as_ref()
        .and_then(|s| s.csi.as_ref())
        .map(|csi| csi.volume_handle.as_str())
        .ok_or(PlanError::InvalidCsiPv)
}

#[cfg(test)]
mod tests;
