//! The shared informer caches: one reflector per resource, started once and read by both
//! controllers (spec §4.1: PVCs, PVs, StorageClasses; Nodes and CSINodes only for drivers with
//! VOLUME_ACCESSIBILITY_CONSTRAINTS; VolumeAttachments only with PUBLISH_UNPUBLISH_VOLUME).
//!
//! Memory matters (upstream issue #587: ~200 MiB per 5k volumes), so every cached object is
//! trimmed before it is stored: claims and volumes are cached as the projections of
//! [`super::cached`] (only the fields the provisioner reads; a lookup builds the real object),
//! and of the other kinds `managedFields` everywhere (often half of an object), everything but
//! name, uid and labels of a Node (its status with images and conditions is the bulk of it and
//! the provisioner reads only topology labels), and the status of a VolumeAttachment (only its
//! existence matters, spec §2.5).

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use csi_common::informer::Store;
use csi_common::informer::{
    Change, informer, projected_informer, trim_managed_fields as trim_meta,
};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass, VolumeAttachment};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Client};

use super::ClaimKey;
use super::cached;

/// A future that keeps one cache filled; it runs until aborted.
pub(crate) use csi_common::informer::InformerTask;

/// Read access to every cache.
#[derive(Clone)]
pub(crate) struct Stores {
    /// PersistentVolumeClaims, all namespaces (read them through [`Stores::claim`]).
    pub(crate) claims: Store<cached::PersistentVolumeClaim>,
    /// PersistentVolumes (read them through [`Stores::volume`]).
    pub(crate) volumes: Store<cached::PersistentVolume>,
    /// StorageClasses.
    pub(crate) classes: Store<StorageClass>,
    /// Nodes and CSINodes, when topology is in use.
    pub(crate) topology: Option<TopologyStores>,
    /// VolumeAttachments, when the driver publishes volumes.
    pub(crate) attachments: Option<Store<VolumeAttachment>>,
}

impl Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stores")
            .field("claims", &self.claims.len())
            .field("volumes", &self.volumes.len())
            .field("classes", &self.classes.len())
            .finish_non_exhaustive()
    }
}

impl Stores {
    /// The claim `namespace/name`.
    pub(crate) fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.claims
            .lookup(Some(namespace), name)
            .map(|claim| Arc::new(claim.to_full()))
    }

    /// Every cached claim that names a data source, as a k8s-openapi object (the projections
    /// converted back): what the source-protection controllers scan. Only these can need a
    /// source, so the rest of the cache is not copied.
    pub(crate) fn claims_with_data_source(&self) -> Vec<PersistentVolumeClaim> {
        self.claims
            .state()
            .iter()
            .filter(|claim| claim.names_data_source())
            .map(|claim| claim.to_full())
            .collect()
    }

    /// The claim of `key` if it still exists (same UID) and is not being deleted. A claim with
    /// a deletionTimestamp only waits for its finalizers: upstream still provisions it (and the
    /// PV ends up Released), here it counts as gone, so a create in progress is cleaned up at
    /// once and no new volume is made for it.
    pub(crate) fn live_claim(&self, key: &ClaimKey) -> Option<Arc<PersistentVolumeClaim>> {
        self.claim(&key.namespace, &key.name)
            .filter(|claim| claim.metadata.uid.as_deref() == Some(key.uid.as_str()))
            .filter(|claim| claim.metadata.deletion_timestamp.is_none())
    }

    /// The PV `name`.
    pub(crate) fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        self.volumes
            .lookup(None, name)
            .map(|volume| Arc::new(volume.to_full()))
    }

    /// The StorageClass `name`.
    pub(crate) fn class(&self, name: &str) -> Option<Arc<StorageClass>> {
        self.classes.get(&ObjectRef::new(name))
    }

    /// The node a VolumeAttachment for PV `name` points at, if any VolumeAttachment does.
    pub(crate) fn attached_node(&self, pv_name: &str) -> Option<String> {
        let attachments = self.attachments.as_ref()?;
        attachments
            .find(|va| va.spec.source.persistent_volume_name.as_deref() == Some(pv_name))
            .map(|va| va.spec.node_name.clone())
    }
}

/// Nodes and CSINodes with a lazily rebuilt snapshot: topology code wants slices, and copying
/// the caches for every claim would cost O(nodes) per claim; the snapshot is rebuilt only after
/// a Node or CSINode changed.
#[derive(Clone)]
pub(crate) struct TopologyStores {
    nodes: Store<Node>,
    csinodes: Store<CSINode>,
    generation: Arc<AtomicU64>,
    snapshot: Arc<Mutex<Option<Snapshot>>>,
}

/// A snapshot and the generation it was built at.
type Snapshot = (u64, Arc<TopologySnapshot>);

/// All Nodes (trimmed to name, uid and labels) and CSINodes at one point in time.
#[derive(Debug, Default)]
pub(crate) struct TopologySnapshot {
    /// Nodes.
    pub(crate) nodes: Vec<Node>,
    /// CSINodes.
    pub(crate) csinodes: Vec<CSINode>,
}

impl TopologyStores {
    /// The current snapshot (rebuilt if a Node or CSINode changed since the last one).
    pub(crate) fn snapshot(&self) -> Arc<TopologySnapshot> {
        let generation = self.generation.load(Ordering::Acquire);
        let mut cached = self.snapshot.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((built, snapshot)) = cached.as_ref()
            && *built == generation
        {
            return Arc::clone(snapshot);
        }
        let snapshot = Arc::new(TopologySnapshot {
            nodes: self.nodes.state().iter().map(|n| (**n).clone()).collect(),
            csinodes: self
                .csinodes
                .state()
                .iter()
                .map(|n| (**n).clone())
                .collect(),
        });
        *cached = Some((generation, Arc::clone(&snapshot)));
        snapshot
    }
}

impl Debug for TopologyStores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopologyStores")
            .field("nodes", &self.nodes.len())
            .field("csinodes", &self.csinodes.len())
            .finish_non_exhaustive()
    }
}

/// What the informers report to the controllers (client-go's event handlers).
pub(crate) trait Handlers: Send + Sync + 'static {
    /// A claim was added or changed.
    fn claim_applied(&self, claim: &PersistentVolumeClaim);
    /// A claim was deleted.
    fn claim_deleted(&self, claim: &PersistentVolumeClaim);
    /// A PV was added or changed.
    fn volume_applied(&self, volume: &PersistentVolume);
    /// A PV was deleted.
    fn volume_deleted(&self, volume: &PersistentVolume);
    /// A VolumeAttachment was deleted (a blocked deletion may proceed now).
    fn attachment_deleted(&self, attachment: &VolumeAttachment);
}

/// Which caches to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Wanted {
    /// Nodes and CSINodes.
    pub(crate) topology: bool,
    /// VolumeAttachments.
    pub(crate) attachments: bool,
}

/// The stores and the futures that fill them (spawn each; they run until aborted).
pub(crate) fn start<H: Handlers>(
    client: &Client,
    wanted: Wanted,
    handlers: &Arc<H>,
) -> (Stores, Vec<InformerTask>) {
    let mut tasks: Vec<InformerTask> = Vec::new();

    let (claims, task) = projected_informer(
        Api::<cached::ClaimWire>::all(client.clone()),
        watcher::Config::default(),
        cached::claim_projection(),
        {
            let handlers = Arc::clone(handlers);
            move |change: Change<'_, cached::PersistentVolumeClaim>| match change {
                Change::Applied { new, .. } => handlers.claim_applied(&new.to_full()),
                Change::Deleted(claim) => handlers.claim_deleted(&claim.to_full()),
            }
        },
    );
    tasks.push(task);

    let (volumes, task) = projected_informer(
        Api::<cached::VolumeWire>::all(client.clone()),
        watcher::Config::default(),
        cached::volume_projection(),
        {
            let handlers = Arc::clone(handlers);
            move |change: Change<'_, cached::PersistentVolume>| match change {
                Change::Applied { new, .. } => handlers.volume_applied(&new.to_full()),
                Change::Deleted(pv) => handlers.volume_deleted(&pv.to_full()),
            }
        },
    );
    tasks.push(task);

    let (classes, task) = informer(
        Api::all(client.clone()),
        trim_class,
        |_: Change<'_, StorageClass>| {},
    );
    tasks.push(task);

    let topology = wanted.topology.then(|| {
        let generation = Arc::new(AtomicU64::new(0));
        let bump = {
            let generation = Arc::clone(&generation);
            move || {
                generation.fetch_add(1, Ordering::AcqRel);
            }
        };
        let (nodes, task) = informer(Api::all(client.clone()), trim_node, {
            let bump = bump.clone();
            move |_: Change<'_, Node>| bump()
        });
        tasks.push(task);
        let (csinodes, task) = informer(
            Api::all(client.clone()),
            trim_csinode,
            move |_: Change<'_, CSINode>| bump(),
        );
        tasks.push(task);
        TopologyStores {
            nodes,
            csinodes,
            generation,
            snapshot: Arc::new(Mutex::new(None)),
        }
    });

    let attachments = wanted.attachments.then(|| {
        let (attachments, task) = informer(Api::all(client.clone()), trim_attachment, {
            let handlers = Arc::clone(handlers);
            move |change: Change<'_, VolumeAttachment>| {
                if let Change::Deleted(va) = change {
                    handlers.attachment_deleted(va);
                }
            }
        });
        tasks.push(task);
        attachments
    });

    (
        Stores {
            claims,
            volumes,
            classes,
            topology,
            attachments,
        },
        tasks,
    )
}

impl Stores {
    /// Waits until every cache has its initial list (client-go `WaitForCacheSync`).
    pub(crate) async fn ready(&self) {
        // A writer is only dropped when its informer task is aborted, i.e. at shutdown.
        let _ = self.claims.wait_until_ready().await;
        let _ = self.volumes.wait_until_ready().await;
        let _ = self.classes.wait_until_ready().await;
        if let Some(topology) = &self.topology {
            let _ = topology.nodes.wait_until_ready().await;
            let _ = topology.csinodes.wait_until_ready().await;
        }
        if let Some(attachments) = &self.attachments {
            let _ = attachments.wait_until_ready().await;
        }
    }
}

pub(crate) fn trim_class(class: &mut StorageClass) {
    trim_meta(&mut class.metadata);
}

pub(crate) fn trim_csinode(csinode: &mut CSINode) {
    trim_meta(&mut csinode.metadata);
}

/// Keeps name, uid, resourceVersion and labels: topology needs labels only.
pub(crate) fn trim_node(node: &mut Node) {
    let meta = std::mem::take(&mut node.metadata);
    node.metadata = ObjectMeta {
        name: meta.name,
        uid: meta.uid,
        resource_version: meta.resource_version,
        labels: meta.labels,
        ..ObjectMeta::default()
    };
    node.spec = None;
    node.status = None;
}

/// Any VolumeAttachment for a PV blocks its deletion; its status is irrelevant (spec §2.5).
fn trim_attachment(attachment: &mut VolumeAttachment) {
    trim_meta(&mut attachment.metadata);
    attachment.status = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeSpec, NodeStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
    use std::collections::BTreeMap;

    #[test]
    fn nodes_are_cached_with_labels_only() {
        let mut node = Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                uid: Some("u1".into()),
                labels: Some(BTreeMap::from([(
                    "topology.hostpath.csi/node".into(),
                    "n1".into(),
                )])),
                annotations: Some(BTreeMap::from([("a".into(), "b".into())])),
                managed_fields: Some(vec![ManagedFieldsEntry::default()]),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec::default()),
            status: Some(NodeStatus::default()),
        };
        trim_node(&mut node);
        assert_eq!(node.metadata.name.as_deref(), Some("n1"));
        assert_eq!(node.metadata.uid.as_deref(), Some("u1"));
        assert_eq!(node.metadata.labels.as_ref().map(BTreeMap::len), Some(1));
        assert!(node.metadata.annotations.is_none());
        assert!(node.metadata.managed_fields.is_none());
        assert!(node.spec.is_none() && node.status.is_none());
    }
}
