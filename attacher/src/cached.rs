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
use csi_common::migration::{self, InTreeSource};
use k8s_openapi::api::core::v1::{
    AWSElasticBlockStoreVolumeSource, AzureDiskVolumeSource, AzureFilePersistentVolumeSource,
    CinderPersistentVolumeSource, GCEPersistentDiskVolumeSource, PortworxVolumeSource,
    SecretReference, VsphereVirtualDiskVolumeSource,
};
use k8s_openapi::api::storage::v1::VolumeAttachmentStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

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
    /// The in-tree sources csi-translation-lib migrates, translated at attach and detach (CSI
    /// migration). Boxed: 8 bytes each on the PVs that have none, nearly all of them.
    pub(crate) aws_elastic_block_store: Option<Box<AWSElasticBlockStoreVolumeSource>>,
    /// See `aws_elastic_block_store`.
    pub(crate) gce_persistent_disk: Option<Box<GCEPersistentDiskVolumeSource>>,
    /// See `aws_elastic_block_store`.
    pub(crate) azure_disk: Option<Box<AzureDiskVolumeSource>>,
    /// See `aws_elastic_block_store`.
    pub(crate) azure_file: Option<Box<AzureFilePersistentVolumeSource>>,
    /// See `aws_elastic_block_store`.
    pub(crate) cinder: Option<Box<CinderPersistentVolumeSource>>,
    /// See `aws_elastic_block_store`.
    pub(crate) vsphere_volume: Option<Box<VsphereVirtualDiskVolumeSource>>,
    /// See `aws_elastic_block_store`.
    pub(crate) portworx_volume: Option<Box<PortworxVolumeSource>>,
    /// The bound claim's namespace, the Secret namespace of a migrated Azure File share that
    /// names none; [`trim_volume`] keeps it for those alone.
    pub(crate) claim_ref: Option<Box<ClaimRef>>,
}

impl PersistentVolumeSpec {
    /// The in-tree source csi-translation-lib would translate, if the spec has one (its
    /// `IsPVMigratable`; the API server lets a PV have one volume source at most).
    pub(crate) fn in_tree_source(&self) -> Option<InTreeSource<'_>> {
        None.or_else(|| self.gce_persistent_disk.as_deref().map(InTreeSource::GcePd))
            .or_else(|| {
                self.aws_elastic_block_store
                    .as_deref()
                    .map(InTreeSource::AwsEbs)
            })
            .or_else(|| self.cinder.as_deref().map(InTreeSource::Cinder))
            .or_else(|| self.azure_disk.as_deref().map(InTreeSource::AzureDisk))
            .or_else(|| self.azure_file.as_deref().map(InTreeSource::AzureFile))
            .or_else(|| self.vsphere_volume.as_deref().map(InTreeSource::Vsphere))
            .or_else(|| self.portworx_volume.as_deref().map(InTreeSource::Portworx))
    }
}

/// What the attacher reads of a PV's `spec.claimRef`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub(crate) struct ClaimRef {
    /// The claim's namespace.
    pub(crate) namespace: Option<String>,
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

/// What the PersistentVolume cache drops: the metadata the attacher never reads (owner
/// references, `managedFields`, and every label and annotation but the few CSI migration
/// reads: the zone labels of a GCE PD, the `migrated-to` annotation of the rollback rule, the
/// resource group of an Azure File share), and the claim reference of all but Azure File PVs.
/// PVs are only looked up by name and their updates are filtered on `deletionTimestamp`,
/// `finalizers` and `migrated-to`.
pub(crate) fn trim_volume(pv: &mut PersistentVolume) {
    let meta = &mut pv.metadata;
    csi_common::informer::trim_managed_fields(meta);
    keep_only(
        &mut meta.labels,
        &[migration::BETA_ZONE_LABEL, migration::ZONE_LABEL],
    );
    keep_only(
        &mut meta.annotations,
        &[
            migration::MIGRATED_TO_ANNOTATION,
            migration::AZURE_FILE_RESOURCE_GROUP_ANNOTATION,
        ],
    );
    meta.owner_references = None;
    if let Some(spec) = pv.spec.as_mut()
        && spec.azure_file.is_none()
    {
        spec.claim_ref = None;
    }
}

/// `map` with only the `keys` (`None` when none of them is there).
fn keep_only(map: &mut Option<std::collections::BTreeMap<String, String>>, keys: &[&str]) {
    if let Some(entries) = map.as_mut() {
        entries.retain(|key, _| keys.contains(&key.as_str()));
        if entries.is_empty() {
            *map = None;
        }
    }
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
        assert_eq!(
            projection.aws_elastic_block_store.as_deref(),
            real.aws_elastic_block_store.as_ref()
        );
        assert_eq!(
            projection.gce_persistent_disk.as_deref(),
            real.gce_persistent_disk.as_ref()
        );
        assert_eq!(projection.azure_disk.as_deref(), real.azure_disk.as_ref());
        assert_eq!(projection.azure_file.as_deref(), real.azure_file.as_ref());
        assert_eq!(projection.cinder.as_deref(), real.cinder.as_ref());
        assert_eq!(
            projection.vsphere_volume.as_deref(),
            real.vsphere_volume.as_ref()
        );
        assert_eq!(
            projection.portworx_volume.as_deref(),
            real.portworx_volume.as_ref()
        );
        assert_eq!(
            projection.claim_ref.as_ref().map(|c| &c.namespace),
            real.claim_ref.as_ref().map(|c| &c.namespace)
        );
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

        // Every in-tree source CSI migration translates, each field set (one object holds
        // them all only to read them all).
        let mut in_tree = volume_json();
        in_tree["spec"]["csi"] = Value::Null;
        for (key, source) in in_tree_sources() {
            in_tree["spec"][key] = source;
        }
        assert_same_volume(in_tree);
    }

    fn in_tree_sources() -> [(&'static str, Value); 7] {
        [
            (
                "awsElasticBlockStore",
                json!({"volumeID": "aws://us-east-1a/vol-1", "fsType": "ext4",
                                             "partition": 1, "readOnly": true}),
            ),
            (
                "gcePersistentDisk",
                json!({"pdName": "disk", "fsType": "ext4", "partition": 2,
                                          "readOnly": true}),
            ),
            (
                "azureDisk",
                json!({"diskName": "d", "diskURI": "/subscriptions/s/d", "kind": "Managed",
                                  "cachingMode": "ReadOnly", "fsType": "ext4", "readOnly": true}),
            ),
            (
                "azureFile",
                json!({"secretName": "azure-storage-account-a-secret",
                                  "secretNamespace": "ns", "shareName": "share", "readOnly": true}),
            ),
            (
                "cinder",
                json!({"volumeID": "c-1", "fsType": "ext4", "readOnly": true,
                               "secretRef": {"name": "s", "namespace": "ns"}}),
            ),
            (
                "vsphereVolume",
                json!({"volumePath": "[ds] v.vmdk", "fsType": "ext4",
                                      "storagePolicyName": "gold", "storagePolicyID": "1"}),
            ),
            (
                "portworxVolume",
                json!({"volumeID": "px-1", "fsType": "xfs", "readOnly": true}),
            ),
        ]
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
        want.spec.as_mut().unwrap().claim_ref = None;
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

        // An in-tree PV keeps what CSI migration reads: the zone labels, the migrated-to and
        // resource-group annotations, and for an Azure File share its claim's namespace.
        let mut json = volume_json();
        json["metadata"]["labels"] = json!({
            "team": "storage",
            "failure-domain.beta.kubernetes.io/zone": "us-central1-a",
            "topology.kubernetes.io/zone": "us-central1-a",
        });
        json["metadata"]["annotations"] = json!({
            "pv.kubernetes.io/provisioned-by": "kubernetes.io/azure-file",
            "pv.kubernetes.io/migrated-to": "file.csi.azure.com",
            "kubernetes.io/azure-file-resource-group": "rg",
        });
        json["spec"]["csi"] = Value::Null;
        json["spec"]["azureFile"] = in_tree_sources()[3].1.clone();
        let mut pv: PersistentVolume = serde_json::from_value(json).unwrap();
        trim_volume(&mut pv);
        let meta = &pv.metadata;
        let keys = |map: &Option<std::collections::BTreeMap<String, String>>| {
            map.iter()
                .flatten()
                .map(|(k, _)| k.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            keys(&meta.labels),
            [
                "failure-domain.beta.kubernetes.io/zone",
                "topology.kubernetes.io/zone"
            ]
        );
        assert_eq!(
            keys(&meta.annotations),
            [
                "kubernetes.io/azure-file-resource-group",
                "pv.kubernetes.io/migrated-to"
            ]
        );
        let spec = pv.spec.as_ref().unwrap();
        assert_eq!(
            spec.claim_ref.as_ref().and_then(|c| c.namespace.as_deref()),
            Some("fixtures")
        );
        assert!(spec.azure_file.is_some());
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
