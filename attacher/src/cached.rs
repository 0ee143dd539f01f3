//! What the informer caches hold: VolumeAttachments and PersistentVolumes cut down to the fields
//! the attacher reads.
//!
//! k8s-openapi's types hold every field inline: `PersistentVolumeSpec` has an `Option` for each
//! of some thirty in-tree volume sources, and a VolumeAttachment carries a whole one for
//! `spec.source.inlineVolumeSpec`, so `PersistentVolume` is 3472 bytes and `VolumeAttachment`
//! 3600 before any string. Cached in full, a PV+VA pair cost about 10 KiB (docs/bench.md). These
//! projections have the group, version, kind and plural of the real types (taken from them), so
//! `Api`, the watch and the object references of Events are the same; serde skips the fields
//! they do not name, which also saves reading them.
//!
//! What is kept, and why:
//! * VolumeAttachment: all of `metadata` (the informer drops `managedFields` and keeps the
//!   annotations as a short list, see [`trim_attachment`]) and all of `status`, because the
//!   update filter compares whole objects like upstream's `shouldEnqueueVAChange`; of the spec,
//!   which the API server never lets change, the fields the attacher reads, with the inline
//!   volume spec boxed (rarely there).
//! * PersistentVolume: `metadata` (the informer drops what nothing reads, see [`trim_volume`]);
//!   of the spec what a publish request and the source check read: `accessModes`,
//!   `mountOptions`, `volumeMode`, `csi`, and whether one of the in-tree sources that
//!   csi-translation-lib migrates is set.
//!
//! Fields that k8s-openapi treats as required read an absent or `null` value as the default, as
//! k8s-openapi's own deserializers do.
//!
//! The helpers (`required`, `sorted_pairs`, `same_resource_as!`) are in `csi_common::cached`,
//! shared with the resizer.

use csi_common::cached::{self, meta_without_managed_fields, required, sorted_pairs};
use k8s_openapi::api::core::v1::SecretReference;
use k8s_openapi::api::storage::v1::VolumeAttachmentStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde::de::IgnoredAny;

/// The fields of a `storage.k8s.io/v1` VolumeAttachment the attacher reads.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub(crate) struct VolumeAttachment {
    /// All of it but `managedFields`, which is skipped unread.
    #[serde(default, deserialize_with = "meta_without_managed_fields")]
    pub(crate) metadata: ObjectMeta,
    /// Immutable after create.
    #[serde(default, deserialize_with = "required")]
    pub(crate) spec: VolumeAttachmentSpec,
    /// All of it.
    pub(crate) status: Option<VolumeAttachmentStatus>,
    /// `metadata.annotations` once [`trim_attachment`] has moved them here, sorted by key. Read
    /// them with [`VolumeAttachment::annotation`].
    #[serde(skip)]
    pub(crate) annotations: Box<[(String, String)]>,
}

impl VolumeAttachment {
    /// The value of annotation `key`, from `metadata` or, in a cached object, from the list
    /// [`trim_attachment`] moved them to.
    pub(crate) fn annotation(&self, key: &str) -> Option<&str> {
        match &self.metadata.annotations {
            Some(map) => map.get(key).map(String::as_str),
            None => cached::lookup(&self.annotations, key).map(String::as_str),
        }
    }
}

/// `spec` of a VolumeAttachment.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct VolumeAttachmentSpec {
    /// The driver name.
    #[serde(default, deserialize_with = "required")]
    pub(crate) attacher: String,
    /// The node to attach to.
    #[serde(default, deserialize_with = "required")]
    pub(crate) node_name: String,
    /// The volume.
    #[serde(default, deserialize_with = "required")]
    pub(crate) source: VolumeAttachmentSource,
}

/// `spec.source` of a VolumeAttachment: a PersistentVolume or an inline (migrated) volume.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct VolumeAttachmentSource {
    /// The PersistentVolume's name.
    pub(crate) persistent_volume_name: Option<String>,
    /// Boxed: only VolumeAttachments of migrated inline volumes have one.
    pub(crate) inline_volume_spec: Option<Box<PersistentVolumeSpec>>,
}

/// The fields of a `v1` PersistentVolume the attacher reads.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub(crate) struct PersistentVolume {
    /// Trimmed by [`trim_volume`].
    #[serde(default, deserialize_with = "meta_without_managed_fields")]
    pub(crate) metadata: ObjectMeta,
    /// The volume.
    pub(crate) spec: Option<PersistentVolumeSpec>,
}

/// What the attacher reads of a `PersistentVolumeSpec` (of a PersistentVolume or of a
/// VolumeAttachment's `inlineVolumeSpec`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PersistentVolumeSpec {
    /// Become the CSI access mode.
    pub(crate) access_modes: Option<Vec<String>>,
    /// Become the mount flags.
    pub(crate) mount_options: Option<Vec<String>>,
    /// `Block` or `Filesystem`.
    pub(crate) volume_mode: Option<String>,
    /// The CSI volume.
    pub(crate) csi: Option<CsiSource>,
    /// The in-tree sources csi-translation-lib migrates: only whether they are set matters.
    pub(crate) aws_elastic_block_store: Option<IgnoredAny>,
    /// See `aws_elastic_block_store`.
    pub(crate) gce_persistent_disk: Option<IgnoredAny>,
    /// See `aws_elastic_block_store`.
    pub(crate) azure_disk: Option<IgnoredAny>,
    /// See `aws_elastic_block_store`.
    pub(crate) azure_file: Option<IgnoredAny>,
    /// See `aws_elastic_block_store`.
    pub(crate) cinder: Option<IgnoredAny>,
    /// See `aws_elastic_block_store`.
    pub(crate) vsphere_volume: Option<IgnoredAny>,
    /// See `aws_elastic_block_store`.
    pub(crate) portworx_volume: Option<IgnoredAny>,
}

/// What the attacher reads of a `CSIPersistentVolumeSource`. Not the driver name (a
/// VolumeAttachment's driver is its `spec.attacher`, as upstream matches it), nor the Secrets of
/// the RPCs other sidecars and the kubelet call.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CsiSource {
    /// The CSI volume ID.
    #[serde(default, deserialize_with = "required")]
    pub(crate) volume_handle: String,
    /// The filesystem type of a mount volume.
    pub(crate) fs_type: Option<String>,
    /// Publish read-only.
    pub(crate) read_only: Option<bool>,
    /// The CSI volume context, as a list sorted by key: a `BTreeMap` allocates room for eleven
    /// entries (544 bytes) and a provisioned PV has one or two
    /// (`storage.kubernetes.io/csiProvisionerIdentity`).
    #[serde(default, deserialize_with = "sorted_pairs")]
    pub(crate) volume_attributes: Option<Box<[(String, String)]>>,
    /// The Secret for ControllerPublishVolume and ControllerUnpublishVolume.
    pub(crate) controller_publish_secret_ref: Option<SecretReference>,
}

csi_common::same_resource_as!(
    VolumeAttachment,
    k8s_openapi::api::storage::v1::VolumeAttachment
);
csi_common::same_resource_as!(
    PersistentVolume,
    k8s_openapi::api::core::v1::PersistentVolume
);

/// What the VolumeAttachment cache drops: `managedFields`, which nothing reads. Everything else
/// stays, for the update filter's whole-object comparison; the annotations move from their
/// `BTreeMap`, which allocates room for eleven entries (544 bytes, the biggest single allocation
/// of a cached VolumeAttachment), to a list of exactly the two or three a VolumeAttachment has.
pub(crate) fn trim_attachment(va: &mut VolumeAttachment) {
    csi_common::informer::trim_managed_fields(&mut va.metadata);
    if let Some(map) = va.metadata.annotations.take() {
        va.annotations = map.into_iter().collect();
    }
}

/// What the PersistentVolume cache drops: the metadata the attacher never reads (labels,
/// annotations, owner references, `managedFields`). PVs are only looked up by name and their
/// updates are filtered on `deletionTimestamp` and `finalizers` alone.
pub(crate) fn trim_volume(pv: &mut PersistentVolume) {
    let meta = &mut pv.metadata;
    csi_common::informer::trim_managed_fields(meta);
    meta.labels = None;
    meta.annotations = None;
    meta.owner_references = None;
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// fixtures/objects/va-attach-error.json (managedFields shortened), plus a label and an
    /// owner reference, which the update filter compares too.
    fn attachment_json() -> Value {
        json!({
            "kind": "VolumeAttachment",
            "apiVersion": "storage.k8s.io/v1",
            "metadata": {
                "name": "fx-va-fail",
                "uid": "8e7410aa-6c83-483d-b1f6-d5ab1a23ba12",
                "resourceVersion": "427",
                "creationTimestamp": "2026-11-21T15:36:23Z",
                "labels": {"team": "storage"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "ref-node",
                                     "uid": "1"}],
                "annotations": {"csi.alpha.kubernetes.io/node-id": "ref-node"},
                "finalizers": ["external-attacher/hostpath-csi-k8s-io"],
                "managedFields": [{"manager": "csi-attacher", "operation": "Update"}]
            },
            "spec": {
                "attacher": "hostpath.csi.k8s.io",
                "source": {"persistentVolumeName": "fx-static-pv"},
                "nodeName": "ref-node"
            },
            "status": {
                "attached": false,
                "attachmentMetadata": {"device": "/dev/xvdb"},
                "attachError": {
                    "time": "2026-11-21T15:36:28Z",
                    "message": "rpc error: code = NotFound desc = volume id fx-no-such-volume does not exist",
                    "errorCode": 5
                },
                "detachError": {"message": "gone"}
            }
        })
    }

    /// fixtures/objects/pv-2-after-attach.json (managedFields shortened), plus a label, an owner
    /// reference, a publish secret, a read-only flag and a block volume mode.
    fn volume_json() -> Value {
        json!({
            "kind": "PersistentVolume",
            "apiVersion": "v1",
            "metadata": {
                "name": "pvc-dbaa5493-3cc2-45fc-9d93-d1c6eb28560a",
                "uid": "e53a3fcd-672e-40ed-a167-7a8c6bc87f93",
                "resourceVersion": "368",
                "creationTimestamp": "2026-11-21T15:35:48Z",
                "deletionTimestamp": "2026-11-21T15:37:00Z",
                "labels": {"team": "storage"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "1"}],
                "annotations": {"pv.kubernetes.io/provisioned-by": "hostpath.csi.k8s.io"},
                "finalizers": [
                    "external-provisioner.volume.kubernetes.io/finalizer",
                    "kubernetes.io/pv-protection",
                    "external-attacher/hostpath-csi-k8s-io"
                ],
                "managedFields": [{"manager": "csi-provisioner", "operation": "Update"}]
            },
            "spec": {
                "capacity": {"storage": "1Gi"},
                "csi": {
                    "driver": "hostpath.csi.k8s.io",
                    "volumeHandle": "39d5bfc9-e5c1-11f1-9a92-6a32d2d0897e",
                    "fsType": "xfs",
                    "readOnly": true,
                    "volumeAttributes": {
                        "storage.kubernetes.io/csiProvisionerIdentity": "1795275348577-3187-hostpath.csi.k8s.io",
                        "fixtures.example.com/color": "blue"
                    },
                    "controllerPublishSecretRef": {"name": "s", "namespace": "ns"}
                },
                "accessModes": ["ReadWriteOnce", "ReadOnlyMany"],
                "claimRef": {"kind": "PersistentVolumeClaim", "namespace": "fixtures",
                             "name": "fx-pvc"},
                "persistentVolumeReclaimPolicy": "Delete",
                "storageClassName": "fixtures-hostpath",
                "mountOptions": ["noatime"],
                "volumeMode": "Block",
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "topology.hostpath.csi/node", "operator": "In", "values": ["n"]}
                ]}]}}
            },
            "status": {"phase": "Bound"}
        })
    }

    type RealVa = k8s_openapi::api::storage::v1::VolumeAttachment;
    type RealPv = k8s_openapi::api::core::v1::PersistentVolume;
    type RealSpec = k8s_openapi::api::core::v1::PersistentVolumeSpec;

    /// Every field a projection keeps has the value k8s-openapi reads.
    fn assert_same_spec(projection: &PersistentVolumeSpec, real: &RealSpec) {
        assert_eq!(projection.access_modes, real.access_modes);
        assert_eq!(projection.mount_options, real.mount_options);
        assert_eq!(projection.volume_mode, real.volume_mode);
        match (&projection.csi, &real.csi) {
            (Some(csi), Some(real_csi)) => {
                assert_eq!(csi.volume_handle, real_csi.volume_handle);
                assert_eq!(csi.fs_type, real_csi.fs_type);
                assert_eq!(csi.read_only, real_csi.read_only);
                let real_attributes: Option<Box<[(String, String)]>> = real_csi
                    .volume_attributes
                    .clone()
                    .map(|map| map.into_iter().collect());
                assert_eq!(csi.volume_attributes, real_attributes);
                assert_eq!(
                    csi.controller_publish_secret_ref,
                    real_csi.controller_publish_secret_ref
                );
            }
            (None, None) => {}
            other => panic!("CSI source read differently: {other:?}"),
        }
        let in_tree = [
            (
                projection.aws_elastic_block_store,
                real.aws_elastic_block_store.is_some(),
            ),
            (
                projection.gce_persistent_disk,
                real.gce_persistent_disk.is_some(),
            ),
            (projection.azure_disk, real.azure_disk.is_some()),
            (projection.azure_file, real.azure_file.is_some()),
            (projection.cinder, real.cinder.is_some()),
            (projection.vsphere_volume, real.vsphere_volume.is_some()),
            (projection.portworx_volume, real.portworx_volume.is_some()),
        ];
        for (i, (kept, set)) in in_tree.into_iter().enumerate() {
            assert_eq!(kept.is_some(), set, "in-tree source {i}");
        }
    }

    fn assert_same_attachment(json: Value) {
        let real: RealVa = serde_json::from_value(json.clone()).unwrap();
        let projection: VolumeAttachment = serde_json::from_value(json).unwrap();
        // `managedFields` is skipped unread (csi_common::cached::meta_without_managed_fields).
        assert_eq!(
            projection.metadata,
            ObjectMeta {
                managed_fields: None,
                ..real.metadata.clone()
            }
        );
        assert_eq!(projection.spec.attacher, real.spec.attacher);
        assert_eq!(projection.spec.node_name, real.spec.node_name);
        let (source, real_source) = (&projection.spec.source, &real.spec.source);
        assert_eq!(
            source.persistent_volume_name,
            real_source.persistent_volume_name
        );
        match (&source.inline_volume_spec, &real_source.inline_volume_spec) {
            (Some(inline), Some(real_inline)) => assert_same_spec(inline, real_inline),
            (None, None) => {}
            other => panic!("inline volume spec read differently: {other:?}"),
        }
        assert_eq!(projection.status, real.status);
    }

    fn assert_same_volume(json: Value) {
        let real: RealPv = serde_json::from_value(json.clone()).unwrap();
        let projection: PersistentVolume = serde_json::from_value(json).unwrap();
        // `managedFields` is skipped unread (csi_common::cached::meta_without_managed_fields).
        assert_eq!(
            projection.metadata,
            ObjectMeta {
                managed_fields: None,
                ..real.metadata.clone()
            }
        );
        match (&projection.spec, &real.spec) {
            (Some(spec), Some(real_spec)) => assert_same_spec(spec, real_spec),
            (None, None) => {}
            other => panic!("spec read differently: {other:?}"),
        }
    }

    #[test]
    fn projections_read_what_k8s_openapi_reads() {
        assert_same_attachment(attachment_json());
        assert_same_volume(volume_json());

        let mut inline = attachment_json();
        inline["spec"]["source"] = json!({"inlineVolumeSpec": volume_json()["spec"]});
        assert_same_attachment(inline);

        let mut in_tree = volume_json();
        in_tree["spec"]["csi"] = Value::Null;
        in_tree["spec"]["gcePersistentDisk"] = json!({"pdName": "disk"});
        in_tree["spec"]["nfs"] = json!({"server": "nfs.example.com", "path": "/export"});
        assert_same_volume(in_tree);
    }

    #[test]
    fn absent_and_null_required_fields_read_as_k8s_openapi_reads_them() {
        assert_same_attachment(json!({}));
        assert_same_attachment(json!({"metadata": null, "spec": null, "status": null}));
        assert_same_attachment(
            json!({"spec": {"attacher": null, "nodeName": null, "source": null}}),
        );
        assert_same_volume(json!({}));
        assert_same_volume(json!({"metadata": null, "spec": null}));
        assert_same_volume(json!({"spec": {"csi": {"driver": "d", "volumeHandle": null}}}));
        assert_same_volume(
            json!({"spec": {"csi": {"volumeHandle": "h", "volumeAttributes": null}}}),
        );
        assert_same_volume(json!({"spec": {"csi": {"volumeHandle": "h", "volumeAttributes": {}}}}));
    }

    #[test]
    fn the_caches_drop_only_what_the_attacher_never_reads() {
        let mut va: VolumeAttachment = serde_json::from_value(attachment_json()).unwrap();
        va.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert("a-first".into(), "1".into());
        let untrimmed = va.clone();
        let mut want = va.clone();
        want.metadata.managed_fields = None;
        want.metadata.annotations = None;
        want.annotations = Box::new([
            ("a-first".into(), "1".into()),
            ("csi.alpha.kubernetes.io/node-id".into(), "ref-node".into()),
        ]);
        trim_attachment(&mut va);
        assert_eq!(
            va, want,
            "a VolumeAttachment keeps all but managedFields, its annotations in a list"
        );
        for key in ["a-first", "csi.alpha.kubernetes.io/node-id", "missing", "z"] {
            assert_eq!(va.annotation(key), untrimmed.annotation(key), "{key}");
        }
        assert_eq!(
            va.annotation("csi.alpha.kubernetes.io/node-id"),
            Some("ref-node")
        );

        let mut pv: PersistentVolume = serde_json::from_value(volume_json()).unwrap();
        let mut want = pv.clone();
        want.metadata.managed_fields = None;
        want.metadata.labels = None;
        want.metadata.annotations = None;
        want.metadata.owner_references = None;
        trim_volume(&mut pv);
        assert_eq!(pv, want);
        assert!(
            pv.metadata.name.is_some()
                && pv.metadata.uid.is_some()
                && pv.metadata.resource_version.is_some()
                && pv.metadata.deletion_timestamp.is_some()
                && pv
                    .metadata
                    .finalizers
                    .as_ref()
                    .is_some_and(|f| f.len() == 3),
            "a PersistentVolume keeps what lookups, filters, patches and events read"
        );
    }

    #[test]
    fn projections_are_the_resources_they_project() {
        use kube::Resource;
        assert_eq!(
            VolumeAttachment::url_path(&(), None),
            RealVa::url_path(&(), None)
        );
        assert_eq!(
            PersistentVolume::url_path(&(), None),
            RealPv::url_path(&(), None)
        );
        assert_eq!(VolumeAttachment::api_version(&()), RealVa::api_version(&()));
        assert_eq!(PersistentVolume::kind(&()), RealPv::kind(&()));
    }
}
