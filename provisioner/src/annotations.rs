//! The annotation keys, finalizer and volume attribute names the provisioner reads and writes,
//! and the readers of the class name they take part in: a leaf that the decisions, the secret
//! resolution and the PV builder share (names as in Kubernetes and external-provisioner).

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Claim annotation (set by kube-controller-manager) naming the provisioner that should act.
pub(crate) const ANN_STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
/// Older spelling of [`ANN_STORAGE_PROVISIONER`], read when the GA one is absent.
pub(crate) const ANN_BETA_STORAGE_PROVISIONER: &str =
    "volume.beta.kubernetes.io/storage-provisioner";
/// CSI migration: the CSI driver an in-tree claim or volume was handed to.
pub(crate) const ANN_MIGRATED_TO: &str = "pv.kubernetes.io/migrated-to";
/// The node the scheduler picked for a WaitForFirstConsumer claim.
pub(crate) const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// Ancient spelling of [`ANN_SELECTED_NODE`], still read by the lib.
pub(crate) const ANN_ALPHA_SELECTED_NODE: &str = "volume.alpha.kubernetes.io/selected-node";
/// Beta class annotation; takes precedence over `spec.storageClassName` on claims and volumes.
pub(crate) const ANN_BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
/// PV annotation: the provisioner that created the volume (the class's `provisioner`).
pub(crate) const ANN_PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
/// PV annotation: provisioner secret name for DeleteVolume (empty when none).
pub(crate) const ANN_DELETION_SECRET_NAME: &str =
    "volume.kubernetes.io/provisioner-deletion-secret-name";
/// PV annotation: provisioner secret namespace for DeleteVolume (empty when none).
pub(crate) const ANN_DELETION_SECRET_NAMESPACE: &str =
    "volume.kubernetes.io/provisioner-deletion-secret-namespace";
/// Finalizer that keeps a PV (and so the knowledge of its storage) until DeleteVolume succeeded.
pub(crate) const PV_FINALIZER: &str = "external-provisioner.volume.kubernetes.io/finalizer";
/// `spec.csi.volumeAttributes` key holding the provisioner instance identity.
pub(crate) const PROVISIONER_ID_KEY: &str = "storage.kubernetes.io/csiProvisionerIdentity";

/// The claim's class name: the beta annotation if present (even empty), else
/// `spec.storageClassName`, else "" (Kubernetes `GetPersistentVolumeClaimClass`).
pub(crate) fn claim_class_name(pvc: &PersistentVolumeClaim) -> String {
    class_name(
        &pvc.metadata,
        pvc.spec
            .as_ref()
            .and_then(|s| s.storage_class_name.as_ref()),
    )
}

/// The volume's class name, same precedence as [`claim_class_name`] (Kubernetes
/// `GetPersistentVolumeClass`).
pub(crate) fn pv_class_name(pv: &PersistentVolume) -> String {
    class_name(
        &pv.metadata,
        pv.spec.as_ref().and_then(|s| s.storage_class_name.as_ref()),
    )
}

fn class_name(metadata: &ObjectMeta, spec_class: Option<&String>) -> String {
    metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANN_BETA_STORAGE_CLASS))
        .or(spec_class)
        .cloned()
        .unwrap_or_default()
}
