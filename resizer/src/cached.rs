//! What the PersistentVolume cache holds: PVs cut down to the fields the resizer reads.
//!
//! k8s-openapi's `PersistentVolume` is 3472 bytes before any string (an inline `Option` for each
//! of some thirty in-tree volume sources); cached in full, a bound PVC+PV pair cost about
//! 9.7 KiB (docs/bench.md, csi-resizer bench). The cache keeps this projection, with the group,
//! version, kind and plural of the real type (`csi_common::same_resource_as!`), and a lookup
//! hands out a real `PersistentVolume` built from it ([`PersistentVolume::to_full`]), so the
//! decisions, requests and patches read the same values as before.
//!
//! Kept, and why: of `metadata` all but what [`trim_volume`] drops (the name for requests,
//! patches and events; annotations for the pre-resize capacity and the modify secret); of the
//! spec `capacity` (the size to grow from), `claimRef` (bound to this claim?), of `csi` the
//! driver, handle, fsType and expand Secret, and `accessModes`, `mountOptions` and `volumeMode`
//! (the volume capability of ControllerExpandVolume). Maps with a string key are kept as lists
//! sorted by key, rebuilt by [`PersistentVolume::to_full`]. Not the in-tree sources (a PV without `csi` is
//! not the resizer's, whichever source it has), `volumeAttributesClassName` (written, never
//! read: the claim's status says the class), node affinity, reclaim policy, class nor status.
//!
//! The claims stay k8s-openapi's `PersistentVolumeClaim` (trimmed, [`trim_claim`]): the status
//! transitions diff old and new claims field by field to build the `/status` patches, and a
//! claim is 1.2 KiB, a third of a PV (docs/bench.md).

use csi_common::cached::{required, sorted_pairs};
use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, ObjectReference, PersistentVolumeClaim, SecretReference,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

/// The fields of a `v1` PersistentVolume the resizer reads.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub(crate) struct PersistentVolume {
    /// Trimmed by [`trim_volume`].
    #[serde(default, deserialize_with = "required")]
    pub(crate) metadata: ObjectMeta,
    /// The volume.
    pub(crate) spec: Option<PersistentVolumeSpec>,
    /// `metadata.annotations` once [`trim_volume`] has moved them here, sorted by key.
    #[serde(skip)]
    pub(crate) annotations: Option<Box<[(String, String)]>>,
}

/// What the resizer reads of a `PersistentVolumeSpec`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PersistentVolumeSpec {
    /// The volume capability's access mode.
    pub(crate) access_modes: Option<Vec<String>>,
    /// The size the volume has (`storage`), as a list sorted by key (see
    /// [`csi_common::cached::sorted_pairs`]).
    #[serde(default, deserialize_with = "sorted_pairs")]
    pub(crate) capacity: Option<Box<[(String, Quantity)]>>,
    /// The claim the volume is bound to.
    pub(crate) claim_ref: Option<ObjectReference>,
    /// The CSI volume; without it the PV is not the resizer's.
    pub(crate) csi: Option<CsiSource>,
    /// The mount flags of the volume capability.
    pub(crate) mount_options: Option<Vec<String>>,
    /// `Block` or `Filesystem`.
    pub(crate) volume_mode: Option<String>,
}

/// What the resizer reads of a `CSIPersistentVolumeSource`: not the volume attributes, the
/// read-only flag nor the Secrets of the RPCs other sidecars and the kubelet call
/// (ControllerExpandVolume and ControllerModifyVolume take none of them).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CsiSource {
    /// Which resizer handles the volume.
    #[serde(default, deserialize_with = "required")]
    pub(crate) driver: String,
    /// The CSI volume ID.
    #[serde(default, deserialize_with = "required")]
    pub(crate) volume_handle: String,
    /// The filesystem type of a mount volume.
    pub(crate) fs_type: Option<String>,
    /// The Secret for ControllerExpandVolume (and ControllerModifyVolume without the
    /// annotations).
    pub(crate) controller_expand_secret_ref: Option<SecretReference>,
}

impl PersistentVolume {
    /// The real PersistentVolume with the fields kept here, for the code that reads one (the
    /// decisions, the CSI requests, the patches); the fields not kept are unset, and none of
    /// that code reads them.
    pub(crate) fn to_full(&self) -> k8s_openapi::api::core::v1::PersistentVolume {
        let map = |pairs: &Option<Box<[(String, Quantity)]>>| {
            pairs.as_ref().map(|pairs| pairs.iter().cloned().collect())
        };
        let mut metadata = self.metadata.clone();
        if let Some(annotations) = &self.annotations {
            metadata.annotations = Some(annotations.iter().cloned().collect());
        }
        k8s_openapi::api::core::v1::PersistentVolume {
            metadata,
            spec: self
                .spec
                .as_ref()
                .map(|spec| k8s_openapi::api::core::v1::PersistentVolumeSpec {
                    access_modes: spec.access_modes.clone(),
                    capacity: map(&spec.capacity),
                    claim_ref: spec.claim_ref.clone(),
                    csi: spec.csi.as_ref().map(|csi| CSIPersistentVolumeSource {
                        driver: csi.driver.clone(),
                        volume_handle: csi.volume_handle.clone(),
                        fs_type: csi.fs_type.clone(),
                        controller_expand_secret_ref: csi.controller_expand_secret_ref.clone(),
                        ..Default::default()
                    }),
                    mount_options: spec.mount_options.clone(),
                    volume_mode: spec.volume_mode.clone(),
                    ..Default::default()
                }),
            status: None,
        }
    }
}

csi_common::same_resource_as!(
    PersistentVolume,
    k8s_openapi::api::core::v1::PersistentVolume
);

/// What the PersistentVolume cache drops: the metadata the resizer never reads (labels, owner
/// references, `managedFields`). The annotations (pre-resize capacity, modify secret) move from
/// their `BTreeMap`, which allocates room for eleven entries (544 bytes), to a list of the one or
/// two a PV has.
pub(crate) fn trim_volume(pv: &mut PersistentVolume) {
    trim_meta(&mut pv.metadata);
    if let Some(map) = pv.metadata.annotations.take() {
        pv.annotations = Some(map.into_iter().collect());
    }
}

/// What the PersistentVolumeClaim cache drops: labels, owner references and `managedFields`,
/// which neither the update filters, the decisions nor the status patches read (they read the
/// annotations, the resourceVersion, the uid and the spec and status fields).
pub(crate) fn trim_claim(pvc: &mut PersistentVolumeClaim) {
    trim_meta(&mut pvc.metadata);
}

fn trim_meta(meta: &mut ObjectMeta) {
    csi_common::informer::trim_managed_fields(meta);
    meta.labels = None;
    meta.owner_references = None;
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    type RealPv = k8s_openapi::api::core::v1::PersistentVolume;

    /// A bound CSI PV as csi-provisioner and the resizer leave it, with every field the resizer
    /// reads set, plus fields it does not read (label, owner reference, in-tree source, node
    /// affinity, status).
    fn volume_json() -> Value {
        json!({
            "kind": "PersistentVolume",
            "apiVersion": "v1",
            "metadata": {
                "name": "pvc-dbaa5493-3cc2-45fc-9d93-d1c6eb28560a",
                "uid": "e53a3fcd-672e-40ed-a167-7a8c6bc87f93",
                "resourceVersion": "368",
                "creationTimestamp": "2026-11-21T15:35:48Z",
                "labels": {"team": "storage"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "1"}],
                "annotations": {
                    "pv.kubernetes.io/provisioned-by": "hostpath.csi.k8s.io",
                    "volume.alpha.kubernetes.io/pre-resize-capacity": "1Gi"
                },
                "finalizers": ["kubernetes.io/pv-protection"],
                "managedFields": [{"manager": "csi-provisioner", "operation": "Update"}]
            },
            "spec": {
                "capacity": {"storage": "1Gi"},
                "csi": {
                    "driver": "hostpath.csi.k8s.io",
                    "volumeHandle": "39d5bfc9-e5c1-11f1-9a92-6a32d2d0897e",
                    "fsType": "xfs",
                    "readOnly": true,
                    "volumeAttributes": {"storage.kubernetes.io/csiProvisionerIdentity": "1-2-h"},
                    "controllerExpandSecretRef": {"name": "s", "namespace": "ns"}
                },
                "accessModes": ["ReadWriteOnce"],
                "claimRef": {"kind": "PersistentVolumeClaim", "namespace": "fixtures",
                             "name": "fx-pvc", "uid": "u-1", "resourceVersion": "300"},
                "persistentVolumeReclaimPolicy": "Delete",
                "storageClassName": "fixtures-hostpath",
                "mountOptions": ["noatime"],
                "volumeMode": "Block",
                "volumeAttributesClassName": "gold",
                "nfs": {"server": "nfs.example.com", "path": "/export"},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "topology.hostpath.csi/node", "operator": "In", "values": ["n"]}
                ]}]}}
            },
            "status": {"phase": "Bound"}
        })
    }

    /// The real PV cut down to what the projection keeps.
    fn kept(mut real: RealPv) -> RealPv {
        real.status = None;
        real.spec = real
            .spec
            .map(|spec| k8s_openapi::api::core::v1::PersistentVolumeSpec {
                access_modes: spec.access_modes,
                capacity: spec.capacity,
                claim_ref: spec.claim_ref,
                csi: spec.csi.map(|csi| CSIPersistentVolumeSource {
                    driver: csi.driver,
                    volume_handle: csi.volume_handle,
                    fs_type: csi.fs_type,
                    controller_expand_secret_ref: csi.controller_expand_secret_ref,
                    ..Default::default()
                }),
                mount_options: spec.mount_options,
                volume_mode: spec.volume_mode,
                ..Default::default()
            });
        real
    }

    fn assert_reads_as_k8s_openapi(json: Value) {
        let real: RealPv = serde_json::from_value(json.clone()).unwrap();
        let projection: PersistentVolume = serde_json::from_value(json).unwrap();
        assert_eq!(projection.to_full(), kept(real));
    }

    #[test]
    fn the_projection_reads_what_k8s_openapi_reads() {
        assert_reads_as_k8s_openapi(volume_json());
        assert_reads_as_k8s_openapi(json!({}));
        assert_reads_as_k8s_openapi(json!({"metadata": null, "spec": null}));
        assert_reads_as_k8s_openapi(
            json!({"spec": {"csi": {"driver": null, "volumeHandle": null}}}),
        );
        let full = kept(serde_json::from_value(volume_json()).unwrap());
        let spec = full.spec.as_ref().unwrap();
        assert!(
            spec.capacity.is_some()
                && spec.claim_ref.is_some()
                && spec
                    .csi
                    .as_ref()
                    .is_some_and(|c| c.controller_expand_secret_ref.is_some())
                && spec.access_modes.is_some()
                && spec.mount_options.is_some()
                && spec.volume_mode.is_some()
                && full
                    .metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.len() == 2),
            "the fixture sets every field the resizer reads"
        );
    }

    #[test]
    fn the_caches_drop_only_what_the_resizer_never_reads() {
        /// What both caches keep of `meta`.
        fn kept_meta(meta: &ObjectMeta) -> ObjectMeta {
            ObjectMeta {
                managed_fields: None,
                labels: None,
                owner_references: None,
                ..meta.clone()
            }
        }
        let mut pv: PersistentVolume = serde_json::from_value(volume_json()).unwrap();
        let untrimmed = pv.to_full();
        let want = PersistentVolume {
            metadata: ObjectMeta {
                annotations: None,
                ..kept_meta(&pv.metadata)
            },
            annotations: Some(Box::new([
                (
                    "pv.kubernetes.io/provisioned-by".into(),
                    "hostpath.csi.k8s.io".into(),
                ),
                (
                    "volume.alpha.kubernetes.io/pre-resize-capacity".into(),
                    "1Gi".into(),
                ),
            ])),
            ..pv.clone()
        };
        trim_volume(&mut pv);
        assert_eq!(pv, want);
        assert_eq!(
            pv.to_full(),
            RealPv {
                metadata: ObjectMeta {
                    annotations: untrimmed.metadata.annotations.clone(),
                    ..kept_meta(&untrimmed.metadata)
                },
                ..untrimmed
            },
            "a trimmed PV reads as the untrimmed one but for labels, owner references and \
             managedFields"
        );

        let mut pvc: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {
                "name": "c", "namespace": "ns", "uid": "u", "resourceVersion": "5",
                "labels": {"a": "b"},
                "annotations": {"volume.kubernetes.io/storage-resizer": "d"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "1"}],
                "managedFields": [{"manager": "kubectl", "operation": "Update"}]
            },
            "spec": {"volumeName": "pv", "resources": {"requests": {"storage": "2Gi"}}},
            "status": {"capacity": {"storage": "1Gi"}}
        }))
        .unwrap();
        let want = PersistentVolumeClaim {
            metadata: kept_meta(&pvc.metadata),
            ..pvc.clone()
        };
        trim_claim(&mut pvc);
        assert_eq!(pvc, want);
    }

    #[test]
    fn the_projection_is_the_resource_it_projects() {
        use kube::Resource;
        assert_eq!(
            PersistentVolume::url_path(&(), None),
            RealPv::url_path(&(), None)
        );
        assert_eq!(PersistentVolume::api_version(&()), RealPv::api_version(&()));
        assert_eq!(PersistentVolume::kind(&()), RealPv::kind(&()));
    }
}
