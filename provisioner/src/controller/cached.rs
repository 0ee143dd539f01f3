//! What the PersistentVolumeClaim and PersistentVolume caches hold: the objects cut down to the
//! fields the provisioner reads, with their string maps kept as short sorted lists.
//!
//! k8s-openapi's `PersistentVolume` is 3472 bytes before any string (an inline `Option` for each
//! of some thirty in-tree volume sources), and every map (annotations, capacity, requests, a
//! claim's status capacity, a CSI volume's attributes) is a `BTreeMap` that allocates a node
//! with room for eleven entries (544 bytes) for the one or two entries it holds. The caches keep
//! these projections instead (docs/bench.md, csi-provisioner bench, has what that saved); with
//! the group, version, kind and plural of the real types (`csi_common::same_resource_as!`), the
//! list and watch requests are unchanged. [`super::stores::Stores`] hands out real objects
//! built from them ([`PersistentVolumeClaim::to_full`], [`PersistentVolume::to_full`]), so the
//! decisions, requests and patches read the same values as before.
//!
//! Kept, and why:
//! * Claims: all of `metadata` but `managedFields` (a reschedule writes the cached claim back
//!   with a full Update, as upstream does, so nothing the API server would keep may be missing;
//!   the annotations and labels move to sorted lists, see [`trim_claim`]); the whole spec (class, size,
//!   access modes, volume mode, selector, data sources, VolumeAttributesClass, bound volume:
//!   provisioning, cloning and the Update read or carry all of it); of the status only the
//!   phase (an Update never writes the status, a subresource).
//! * Volumes: all of `metadata` but `managedFields` (annotations and labels as sorted lists,
//!   see [`trim_volume`]); of the spec everything but the in-tree sources (a PV without `csi` is
//!   only ever the provisioner's through its annotations): `capacity`, `claimRef`, `csi` (its
//!   attributes as a sorted list), the reclaim policy, node affinity, class, VolumeAttributesClass,
//!   access modes, mount options, volume mode; of the status only the phase.

use csi_common::cached::{required, sorted_pairs};
use k8s_openapi::api::core::v1::{
    self as real, ObjectReference, SecretReference, TypedLocalObjectReference,
    TypedObjectReference, VolumeNodeAffinity,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::Deserialize;

/// A string map kept as a list sorted by key ([`sorted_pairs`]).
type Pairs<V> = Option<Box<[(String, V)]>>;

/// The two string maps of an object's metadata, as sorted lists. A claim made from a
/// StatefulSet's `volumeClaimTemplates` carries the template's labels, and a `BTreeMap` holds
/// even one label in a 544-byte node (docs/bench.md, "Memory per cached object").
#[derive(Debug, Clone, Default, PartialEq)]
struct MetaMaps {
    annotations: Pairs<String>,
    labels: Pairs<String>,
}

/// The fields of a `v1` PersistentVolumeClaim the provisioner reads.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub(crate) struct PersistentVolumeClaim {
    /// Trimmed by [`trim_claim`].
    #[serde(default, deserialize_with = "required")]
    pub(crate) metadata: ObjectMeta,
    /// The whole spec.
    pub(crate) spec: Option<ClaimSpec>,
    /// The phase only.
    pub(crate) status: Option<Phase>,
    /// `metadata.annotations` and `metadata.labels` once [`trim_claim`] has moved them here.
    #[serde(skip)]
    maps: MetaMaps,
}

/// A `PersistentVolumeClaimSpec`, its maps as sorted lists and its rarely set structures boxed.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClaimSpec {
    access_modes: Option<Vec<String>>,
    data_source: Option<Box<TypedLocalObjectReference>>,
    data_source_ref: Option<Box<TypedObjectReference>>,
    resources: Option<Resources>,
    selector: Option<Box<LabelSelector>>,
    storage_class_name: Option<String>,
    volume_attributes_class_name: Option<String>,
    volume_mode: Option<String>,
    volume_name: Option<String>,
}

/// `VolumeResourceRequirements` with its maps as sorted lists.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
struct Resources {
    #[serde(default, deserialize_with = "sorted_pairs")]
    limits: Pairs<Quantity>,
    #[serde(default, deserialize_with = "sorted_pairs")]
    requests: Pairs<Quantity>,
}

/// The `phase` of a claim's or a volume's status.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub(crate) struct Phase {
    phase: Option<String>,
}

impl PersistentVolumeClaim {
    /// Whether `spec.dataSource` or `spec.dataSourceRef` is set (a clone, restore or populator).
    pub(crate) fn names_data_source(&self) -> bool {
        self.spec
            .as_ref()
            .is_some_and(|spec| spec.data_source.is_some() || spec.data_source_ref.is_some())
    }

    /// The real claim with the fields kept here; the status has only its phase.
    pub(crate) fn to_full(&self) -> real::PersistentVolumeClaim {
        real::PersistentVolumeClaim {
            metadata: with_maps(&self.metadata, &self.maps),
            spec: self
                .spec
                .as_ref()
                .map(|spec| real::PersistentVolumeClaimSpec {
                    access_modes: spec.access_modes.clone(),
                    data_source: spec.data_source.as_deref().cloned(),
                    data_source_ref: spec.data_source_ref.as_deref().cloned(),
                    resources: spec
                        .resources
                        .as_ref()
                        .map(|r| real::VolumeResourceRequirements {
                            limits: to_map(r.limits.as_deref()),
                            requests: to_map(r.requests.as_deref()),
                        }),
                    selector: spec.selector.as_deref().cloned(),
                    storage_class_name: spec.storage_class_name.clone(),
                    volume_attributes_class_name: spec.volume_attributes_class_name.clone(),
                    volume_mode: spec.volume_mode.clone(),
                    volume_name: spec.volume_name.clone(),
                }),
            status: self
                .status
                .as_ref()
                .map(|status| real::PersistentVolumeClaimStatus {
                    phase: status.phase.clone(),
                    ..Default::default()
                }),
        }
    }
}

csi_common::same_resource_as!(PersistentVolumeClaim, real::PersistentVolumeClaim);

/// The fields of a `v1` PersistentVolume the provisioner reads.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub(crate) struct PersistentVolume {
    /// Trimmed by [`trim_volume`].
    #[serde(default, deserialize_with = "required")]
    pub(crate) metadata: ObjectMeta,
    /// All but the in-tree sources.
    spec: Option<VolumeSpec>,
    /// The phase only.
    status: Option<Phase>,
    /// `metadata.annotations` and `metadata.labels` once [`trim_volume`] has moved them here.
    #[serde(skip)]
    maps: MetaMaps,
}

/// A `PersistentVolumeSpec` without the in-tree sources, its maps as sorted lists.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
struct VolumeSpec {
    access_modes: Option<Vec<String>>,
    #[serde(default, deserialize_with = "sorted_pairs")]
    capacity: Pairs<Quantity>,
    claim_ref: Option<Box<ObjectReference>>,
    csi: Option<Box<CsiSource>>,
    mount_options: Option<Vec<String>>,
    node_affinity: Option<Box<VolumeNodeAffinity>>,
    persistent_volume_reclaim_policy: Option<String>,
    storage_class_name: Option<String>,
    volume_attributes_class_name: Option<String>,
    volume_mode: Option<String>,
}

/// A `CSIPersistentVolumeSource` with its attributes as a sorted list: every PV the provisioner
/// makes has at least `storage.kubernetes.io/csiProvisionerIdentity`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CsiSource {
    controller_expand_secret_ref: Option<SecretReference>,
    controller_publish_secret_ref: Option<SecretReference>,
    #[serde(default, deserialize_with = "required")]
    driver: String,
    fs_type: Option<String>,
    node_expand_secret_ref: Option<SecretReference>,
    node_publish_secret_ref: Option<SecretReference>,
    node_stage_secret_ref: Option<SecretReference>,
    read_only: Option<bool>,
    #[serde(default, deserialize_with = "sorted_pairs")]
    volume_attributes: Pairs<String>,
    #[serde(default, deserialize_with = "required")]
    volume_handle: String,
}

impl PersistentVolume {
    /// The real PersistentVolume with the fields kept here; no in-tree source, the status has
    /// only its phase.
    pub(crate) fn to_full(&self) -> real::PersistentVolume {
        real::PersistentVolume {
            metadata: with_maps(&self.metadata, &self.maps),
            spec: self.spec.as_ref().map(|spec| real::PersistentVolumeSpec {
                access_modes: spec.access_modes.clone(),
                capacity: to_map(spec.capacity.as_deref()),
                claim_ref: spec.claim_ref.as_deref().cloned(),
                csi: spec
                    .csi
                    .as_deref()
                    .map(|csi| real::CSIPersistentVolumeSource {
                        controller_expand_secret_ref: csi.controller_expand_secret_ref.clone(),
                        controller_publish_secret_ref: csi.controller_publish_secret_ref.clone(),
                        driver: csi.driver.clone(),
                        fs_type: csi.fs_type.clone(),
                        node_expand_secret_ref: csi.node_expand_secret_ref.clone(),
                        node_publish_secret_ref: csi.node_publish_secret_ref.clone(),
                        node_stage_secret_ref: csi.node_stage_secret_ref.clone(),
                        read_only: csi.read_only,
                        volume_attributes: to_map(csi.volume_attributes.as_deref()),
                        volume_handle: csi.volume_handle.clone(),
                    }),
                mount_options: spec.mount_options.clone(),
                node_affinity: spec.node_affinity.as_deref().cloned(),
                persistent_volume_reclaim_policy: spec.persistent_volume_reclaim_policy.clone(),
                storage_class_name: spec.storage_class_name.clone(),
                volume_attributes_class_name: spec.volume_attributes_class_name.clone(),
                volume_mode: spec.volume_mode.clone(),
                ..Default::default()
            }),
            status: self
                .status
                .as_ref()
                .map(|status| real::PersistentVolumeStatus {
                    phase: status.phase.clone(),
                    ..Default::default()
                }),
        }
    }
}

csi_common::same_resource_as!(PersistentVolume, real::PersistentVolume);

/// What the claim cache drops: `managedFields`, which nothing reads (and which an Update
/// without them leaves as it is). The annotations and labels move to sorted lists.
pub(crate) fn trim_claim(claim: &mut PersistentVolumeClaim) {
    claim.maps = trim_meta(&mut claim.metadata);
}

/// What the volume cache drops: `managedFields`. The annotations and labels move to sorted
/// lists.
pub(crate) fn trim_volume(volume: &mut PersistentVolume) {
    volume.maps = trim_meta(&mut volume.metadata);
}

/// Drops `managedFields` and takes the annotations and labels out as sorted lists.
fn trim_meta(meta: &mut ObjectMeta) -> MetaMaps {
    csi_common::informer::trim_managed_fields(meta);
    MetaMaps {
        annotations: meta.annotations.take().map(|map| map.into_iter().collect()),
        labels: meta.labels.take().map(|map| map.into_iter().collect()),
    }
}

/// `meta` with the annotations and labels put back as maps.
fn with_maps(meta: &ObjectMeta, maps: &MetaMaps) -> ObjectMeta {
    let mut meta = meta.clone();
    if maps.annotations.is_some() {
        meta.annotations = to_map(maps.annotations.as_deref());
    }
    if maps.labels.is_some() {
        meta.labels = to_map(maps.labels.as_deref());
    }
    meta
}

fn to_map<V: Clone>(
    pairs: Option<&[(String, V)]>,
) -> Option<std::collections::BTreeMap<String, V>> {
    pairs.map(|pairs| pairs.iter().cloned().collect())
}

#[cfg(test)]
mod tests;
