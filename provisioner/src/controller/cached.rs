//! What the PersistentVolumeClaim and PersistentVolume caches hold: the objects cut down to the
//! fields the provisioner reads, in a compact form of their own.
//!
//! k8s-openapi's `PersistentVolume` is 3472 bytes before any string (an inline `Option` for each
//! of some thirty in-tree volume sources), and every map (annotations, capacity, requests, a
//! claim's status capacity, a CSI volume's attributes) is a `BTreeMap` that allocates a node
//! with room for eleven entries (544 bytes) for the one or two entries it holds. The watches
//! read [`ClaimWire`] and [`VolumeWire`], which name only the fields kept (serde skips the rest);
//! with the group, version, kind and plural of the real types (`csi_common::same_resource_as!`),
//! the list and watch requests are unchanged. The caches then hold [`PersistentVolumeClaim`] and
//! [`PersistentVolume`], made from them by [`claim_projection`] and [`volume_projection`]: the
//! metadata as a [`Meta`], and every string most objects share (namespace, class, driver,
//! access modes, annotations, finalizers, the claimRef's kind, ..., and a volume's whole node
//! affinity) as one copy from an [`Interner`] (docs/bench.md, "Shared strings and a compact
//! metadata", has what each step saved). [`super::stores::Stores`] hands out real objects built
//! from them ([`PersistentVolumeClaim::to_full`], [`PersistentVolume::to_full`]), so the
//! decisions, requests and patches read the same values as before.
//!
//! Kept, and why:
//! * Claims: all of `metadata` but `managedFields` (a reschedule writes the cached claim back
//!   with a full Update, as upstream does, so nothing the API server would keep may be missing;
//!   see [`Meta`]); the whole spec (class, size,
//!   access modes, volume mode, selector, data sources, VolumeAttributesClass, bound volume:
//!   provisioning, cloning and the Update read or carry all of it); of the status only the
//!   phase (an Update never writes the status, a subresource).
//! * Volumes: all of `metadata` but `managedFields`; of the spec `capacity`, `claimRef`, `csi`,
//!   the reclaim policy, node affinity, class, VolumeAttributesClass, access modes, mount
//!   options, volume mode, and the in-tree source of the seven plugins CSI migration translates
//!   (one box, on the PVs that have one: such a PV is the provisioner's to delete through its
//!   `migrated-to` annotation); not the other in-tree sources (a PV without `csi` is only ever
//!   the provisioner's through its annotations); of the status only the phase.

use std::collections::BTreeMap;
use std::sync::Arc;

use csi_common::cached::{Meta, Reference, meta_without_managed_fields};
use csi_common::informer::Keyed;
use csi_common::intern::{
    Interner, NodeAffinity, SharedList, SharedPairs, to_map, to_quantities, to_vec, with_interner,
};
use csi_common::migration::InTreeVolume;
use k8s_openapi::api::core::v1::{
    self as real, CSIPersistentVolumeSource, ObjectReference, SecretReference,
    TypedLocalObjectReference, TypedObjectReference, VolumeNodeAffinity,
    VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::Deserialize;

/// The fields of a `v1` PersistentVolumeClaim the provisioner reads, as the watch reads them.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub(crate) struct ClaimWire {
    /// All of it but `managedFields`, which is skipped unread.
    #[serde(default, deserialize_with = "meta_without_managed_fields")]
    pub(crate) metadata: ObjectMeta,
    /// The whole spec.
    spec: Option<ClaimSpecWire>,
    /// The phase only.
    status: Option<PhaseWire>,
}

/// A `PersistentVolumeClaimSpec`, as read.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ClaimSpecWire {
    access_modes: Option<Vec<String>>,
    data_source: Option<TypedLocalObjectReference>,
    data_source_ref: Option<TypedObjectReference>,
    resources: Option<VolumeResourceRequirements>,
    selector: Option<LabelSelector>,
    storage_class_name: Option<String>,
    volume_attributes_class_name: Option<String>,
    volume_mode: Option<String>,
    volume_name: Option<String>,
}

/// The `phase` of a claim's or a volume's status, as read.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
struct PhaseWire {
    phase: Option<String>,
}

csi_common::same_resource_as!(ClaimWire, real::PersistentVolumeClaim);

/// The fields of a `v1` PersistentVolume the provisioner reads, as the watch reads them.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub(crate) struct VolumeWire {
    /// All of it but `managedFields`, which is skipped unread.
    #[serde(default, deserialize_with = "meta_without_managed_fields")]
    pub(crate) metadata: ObjectMeta,
    /// All but the in-tree sources.
    spec: Option<VolumeSpecWire>,
    /// The phase only.
    status: Option<PhaseWire>,
}

/// A `PersistentVolumeSpec` without the in-tree sources CSI migration does not translate, as
/// read.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
struct VolumeSpecWire {
    access_modes: Option<Vec<String>>,
    capacity: Option<BTreeMap<String, Quantity>>,
    claim_ref: Option<ObjectReference>,
    csi: Option<CSIPersistentVolumeSource>,
    mount_options: Option<Vec<String>>,
    node_affinity: Option<VolumeNodeAffinity>,
    persistent_volume_reclaim_policy: Option<String>,
    storage_class_name: Option<String>,
    volume_attributes_class_name: Option<String>,
    volume_mode: Option<String>,
    aws_elastic_block_store: Option<real::AWSElasticBlockStoreVolumeSource>,
    gce_persistent_disk: Option<real::GCEPersistentDiskVolumeSource>,
    azure_disk: Option<real::AzureDiskVolumeSource>,
    azure_file: Option<real::AzureFilePersistentVolumeSource>,
    cinder: Option<real::CinderPersistentVolumeSource>,
    vsphere_volume: Option<real::VsphereVirtualDiskVolumeSource>,
    portworx_volume: Option<real::PortworxVolumeSource>,
}

csi_common::same_resource_as!(VolumeWire, real::PersistentVolume);

/// A cached claim: the fields of [`ClaimWire`], compact.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PersistentVolumeClaim {
    meta: Meta,
    spec: Option<ClaimSpec>,
    status: Option<Phase>,
}

/// A claim's spec; the rarely set structures boxed, the strings most claims share interned.
#[derive(Debug, Clone, PartialEq)]
struct ClaimSpec {
    access_modes: Option<SharedList>,
    data_source: Option<Box<TypedLocalObjectReference>>,
    data_source_ref: Option<Box<TypedObjectReference>>,
    resources: Option<Resources>,
    selector: Option<Box<LabelSelector>>,
    storage_class_name: Option<Arc<str>>,
    volume_attributes_class_name: Option<Arc<str>>,
    volume_mode: Option<Arc<str>>,
    volume_name: Option<Box<str>>,
}

/// `VolumeResourceRequirements`: quantities by resource name.
#[derive(Debug, Clone, PartialEq)]
struct Resources {
    limits: Option<SharedPairs>,
    requests: Option<SharedPairs>,
}

/// A status with only its phase.
#[derive(Debug, Clone, PartialEq)]
struct Phase(Option<Arc<str>>);

/// Makes the cached claims; owns the claim cache's [`Interner`].
pub(crate) fn claim_projection() -> impl FnMut(ClaimWire) -> PersistentVolumeClaim + Send {
    with_interner(PersistentVolumeClaim::new)
}

/// Makes the cached volumes; owns the volume cache's [`Interner`].
pub(crate) fn volume_projection() -> impl FnMut(VolumeWire) -> PersistentVolume + Send {
    with_interner(PersistentVolume::new)
}

impl PersistentVolumeClaim {
    /// The compact form of `wire`.
    pub(crate) fn new(wire: ClaimWire, interner: &mut Interner) -> Self {
        Self {
            meta: Meta::new(wire.metadata, interner),
            spec: wire.spec.map(|spec| ClaimSpec {
                access_modes: interner.opt_list(spec.access_modes),
                data_source: spec.data_source.map(Box::new),
                data_source_ref: spec.data_source_ref.map(Box::new),
                resources: spec.resources.map(|r| Resources {
                    limits: interner.quantities(r.limits),
                    requests: interner.quantities(r.requests),
                }),
                selector: spec.selector.map(Box::new),
                storage_class_name: interner.opt_str(spec.storage_class_name),
                volume_attributes_class_name: interner.opt_str(spec.volume_attributes_class_name),
                volume_mode: interner.opt_str(spec.volume_mode),
                volume_name: spec.volume_name.map(String::into_boxed_str),
            }),
            status: wire.status.map(|s| Phase(interner.opt_str(s.phase))),
        }
    }

    /// Whether `spec.dataSource` or `spec.dataSourceRef` is set (a clone, restore or populator).
    pub(crate) fn names_data_source(&self) -> bool {
        self.spec
            .as_ref()
            .is_some_and(|spec| spec.data_source.is_some() || spec.data_source_ref.is_some())
    }

    /// The real claim with the fields kept here; the status has only its phase.
    pub(crate) fn to_full(&self) -> real::PersistentVolumeClaim {
        real::PersistentVolumeClaim {
            metadata: self.meta.to_object_meta(),
            spec: self
                .spec
                .as_ref()
                .map(|spec| real::PersistentVolumeClaimSpec {
                    access_modes: spec.access_modes.as_deref().map(to_vec),
                    data_source: spec.data_source.as_deref().cloned(),
                    data_source_ref: spec.data_source_ref.as_deref().cloned(),
                    resources: spec.resources.as_ref().map(|r| VolumeResourceRequirements {
                        limits: r.limits.as_deref().map(to_quantities),
                        requests: r.requests.as_deref().map(to_quantities),
                    }),
                    selector: spec.selector.as_deref().cloned(),
                    storage_class_name: owned(spec.storage_class_name.as_deref()),
                    volume_attributes_class_name: owned(
                        spec.volume_attributes_class_name.as_deref(),
                    ),
                    volume_mode: owned(spec.volume_mode.as_deref()),
                    volume_name: owned(spec.volume_name.as_deref()),
                }),
            status: self
                .status
                .as_ref()
                .map(|status| real::PersistentVolumeClaimStatus {
                    phase: owned(status.0.as_deref()),
                    ..Default::default()
                }),
        }
    }
}

impl Keyed for PersistentVolumeClaim {
    fn key(&self) -> (Option<&str>, &str) {
        self.meta.key()
    }
}

/// A cached volume: the fields of [`VolumeWire`], compact.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PersistentVolume {
    meta: Meta,
    spec: Option<VolumeSpec>,
    status: Option<Phase>,
}

/// A volume's spec; the rarely set structures boxed, the strings
/// most volumes share interned.
#[derive(Debug, Clone, PartialEq)]
struct VolumeSpec {
    access_modes: Option<SharedList>,
    capacity: Option<SharedPairs>,
    claim_ref: Option<Box<Reference>>,
    csi: Option<Box<CsiSource>>,
    mount_options: Option<SharedList>,
    node_affinity: Option<Arc<NodeAffinity>>,
    persistent_volume_reclaim_policy: Option<Arc<str>>,
    storage_class_name: Option<Arc<str>>,
    volume_attributes_class_name: Option<Arc<str>>,
    volume_mode: Option<Arc<str>>,
    /// The in-tree source of a PV of a plugin migrated to CSI, deleted through its translation.
    in_tree: Option<Box<InTreeVolume>>,
}

/// A `CSIPersistentVolumeSource`: every PV the provisioner makes has at least the attribute
/// `storage.kubernetes.io/csiProvisionerIdentity`, the same in all of them; the five Secret
/// references are set only when the class names Secrets.
#[derive(Debug, Clone, PartialEq)]
struct CsiSource {
    driver: Arc<str>,
    volume_handle: Box<str>,
    fs_type: Option<Arc<str>>,
    read_only: Option<bool>,
    volume_attributes: Option<SharedPairs>,
    secrets: Option<Box<CsiSecrets>>,
}

/// The Secret references of a CSI volume source.
#[derive(Debug, Clone, Default, PartialEq)]
struct CsiSecrets {
    controller_expand: Option<SecretReference>,
    controller_publish: Option<SecretReference>,
    node_expand: Option<SecretReference>,
    node_publish: Option<SecretReference>,
    node_stage: Option<SecretReference>,
}

impl PersistentVolume {
    /// The compact form of `wire`.
    pub(crate) fn new(wire: VolumeWire, interner: &mut Interner) -> Self {
        Self {
            meta: Meta::new(wire.metadata, interner),
            spec: wire.spec.map(|spec| VolumeSpec {
                access_modes: interner.opt_list(spec.access_modes),
                capacity: interner.quantities(spec.capacity),
                claim_ref: spec
                    .claim_ref
                    .map(|r| Box::new(Reference::new(r, interner))),
                csi: spec.csi.map(|csi| Box::new(CsiSource::new(csi, interner))),
                mount_options: interner.opt_list(spec.mount_options),
                node_affinity: spec.node_affinity.map(|a| interner.node_affinity(a)),
                persistent_volume_reclaim_policy: interner
                    .opt_str(spec.persistent_volume_reclaim_policy),
                storage_class_name: interner.opt_str(spec.storage_class_name),
                volume_attributes_class_name: interner.opt_str(spec.volume_attributes_class_name),
                volume_mode: interner.opt_str(spec.volume_mode),
                in_tree: InTreeVolume::of((
                    spec.aws_elastic_block_store,
                    spec.gce_persistent_disk,
                    spec.azure_disk,
                    spec.azure_file,
                    spec.cinder,
                    spec.vsphere_volume,
                    spec.portworx_volume,
                ))
                .map(Box::new),
            }),
            status: wire.status.map(|s| Phase(interner.opt_str(s.phase))),
        }
    }

    /// The real PersistentVolume with the fields kept here; of the in-tree sources only those CSI
    /// migration translates, the status has only its phase.
    pub(crate) fn to_full(&self) -> real::PersistentVolume {
        real::PersistentVolume {
            metadata: self.meta.to_object_meta(),
            spec: self.spec.as_ref().map(|spec| {
                let mut full = real::PersistentVolumeSpec {
                    access_modes: spec.access_modes.as_deref().map(to_vec),
                    capacity: spec.capacity.as_deref().map(to_quantities),
                    claim_ref: spec
                        .claim_ref
                        .as_deref()
                        .map(Reference::to_object_reference),
                    csi: spec.csi.as_deref().map(CsiSource::to_full),
                    mount_options: spec.mount_options.as_deref().map(to_vec),
                    node_affinity: spec.node_affinity.as_deref().map(|a| (**a).clone()),
                    persistent_volume_reclaim_policy: owned(
                        spec.persistent_volume_reclaim_policy.as_deref(),
                    ),
                    storage_class_name: owned(spec.storage_class_name.as_deref()),
                    volume_attributes_class_name: owned(
                        spec.volume_attributes_class_name.as_deref(),
                    ),
                    volume_mode: owned(spec.volume_mode.as_deref()),
                    ..Default::default()
                };
                if let Some(in_tree) = &spec.in_tree {
                    in_tree.restore(&mut full);
                }
                full
            }),
            status: self
                .status
                .as_ref()
                .map(|status| real::PersistentVolumeStatus {
                    phase: owned(status.0.as_deref()),
                    ..Default::default()
                }),
        }
    }
}

impl Keyed for PersistentVolume {
    fn key(&self) -> (Option<&str>, &str) {
        self.meta.key()
    }
}

impl CsiSource {
    fn new(csi: CSIPersistentVolumeSource, interner: &mut Interner) -> Self {
        let secrets = CsiSecrets {
            controller_expand: csi.controller_expand_secret_ref,
            controller_publish: csi.controller_publish_secret_ref,
            node_expand: csi.node_expand_secret_ref,
            node_publish: csi.node_publish_secret_ref,
            node_stage: csi.node_stage_secret_ref,
        };
        Self {
            driver: interner.str(&csi.driver),
            volume_handle: csi.volume_handle.into_boxed_str(),
            fs_type: interner.opt_str(csi.fs_type),
            read_only: csi.read_only,
            volume_attributes: interner.opt_map(csi.volume_attributes),
            secrets: (secrets != CsiSecrets::default()).then(|| Box::new(secrets)),
        }
    }

    fn to_full(&self) -> CSIPersistentVolumeSource {
        let secrets = self.secrets.as_deref();
        let secret = |pick: fn(&CsiSecrets) -> &Option<SecretReference>| {
            secrets.and_then(|s| pick(s).clone())
        };
        CSIPersistentVolumeSource {
            controller_expand_secret_ref: secret(|s| &s.controller_expand),
            controller_publish_secret_ref: secret(|s| &s.controller_publish),
            driver: self.driver.to_string(),
            fs_type: owned(self.fs_type.as_deref()),
            node_expand_secret_ref: secret(|s| &s.node_expand),
            node_publish_secret_ref: secret(|s| &s.node_publish),
            node_stage_secret_ref: secret(|s| &s.node_stage),
            read_only: self.read_only,
            volume_attributes: self
                .volume_attributes
                .as_deref()
                .map(|a| to_map(a, str::to_owned)),
            volume_handle: self.volume_handle.to_string(),
        }
    }
}

fn owned(value: Option<&str>) -> Option<String> {
    value.map(str::to_owned)
}

#[cfg(test)]
mod tests;
