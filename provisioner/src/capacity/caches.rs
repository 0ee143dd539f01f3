//! The capacity controller's informer caches and their event handlers (client-go's
//! `ResourceEventHandler`s): StorageClasses, Nodes (trimmed to labels), CSINodes, the
//! CSIStorageCapacities of `$NAMESPACE` with our two labels, and PersistentVolumes trimmed to
//! what a refresh reads. Handlers only update the shared index and queue keys.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use csi_common::informer::Store;
use csi_common::informer::{
    Change, InformerTask, filtered_informer, informer, trim_managed_fields,
};
use csi_common::workqueue::WorkQueue;
use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, Node, PersistentVolume, PersistentVolumeSpec,
};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::runtime::watcher;

use super::controller::{Deps, SharedState, lock};
use super::decide::{self, CapacityKey, SegmentSource};
use super::version::Capacity;
use crate::controller::stores::{trim_class, trim_csinode, trim_node};

/// Read access to the five caches.
#[derive(Clone)]
pub(super) struct Caches {
    pub(super) classes: Store<StorageClass>,
    /// Central mode only: node mode has its segment from NodeGetInfo.
    pub(super) nodes: Option<Store<Node>>,
    /// Central mode only.
    pub(super) csinodes: Option<Store<CSINode>>,
    /// At the probed version.
    pub(super) capacities: Store<Capacity>,
    pub(super) volumes: Store<PersistentVolume>,
}

impl Caches {
    /// Waits until every cache has its initial list.
    pub(super) async fn ready(&self) {
        // A writer is only dropped when its informer task is aborted, i.e. at shutdown.
        let _ = self.classes.wait_until_ready().await;
        if let Some(nodes) = &self.nodes {
            let _ = nodes.wait_until_ready().await;
        }
        if let Some(csinodes) = &self.csinodes {
            let _ = csinodes.wait_until_ready().await;
        }
        let _ = self.capacities.wait_until_ready().await;
        let _ = self.volumes.wait_until_ready().await;
    }
}

/// Informer events → queue adds (client-go's `ResourceEventHandler`s).
pub(super) struct Handlers {
    pub(super) driver: String,
    pub(super) topology: Arc<WorkQueue<()>>,
    pub(super) capacities: Arc<WorkQueue<CapacityKey>>,
    pub(super) state: SharedState,
    /// Set once the caches are synced: PV events of the initial list are not provisioning.
    pub(super) ready: Arc<AtomicBool>,
}

/// Forgets that `name` is an object of `key`. A key left without objects is dropped: the
/// keys name StorageClasses, and on a cluster whose classes come and go a map that kept every
/// key ever seen grew without end (the `--churn-capacity` run of `chaos`, a new class per
/// batch: RSS rising from minute 30).
fn forget_object(
    objects: &mut HashMap<CapacityKey, BTreeSet<String>>,
    key: &CapacityKey,
    name: &str,
) {
    if let Some(names) = objects.get_mut(key) {
        names.remove(name);
        if names.is_empty() {
            objects.remove(key);
        }
    }
}

impl Handlers {
    fn capacity_changed(&self, change: &Change<'_, Capacity>) {
        let mut state = lock(&self.state);
        let (old, new, gone) = match change {
            Change::Applied { old, new } => (old.as_deref(), Some(*new), None),
            Change::Deleted(gone) => (None, None, Some(*gone)),
        };
        for object in old.into_iter().chain(gone) {
            if let (Some(key), Some(name)) = (decide::key_of(object), &object.metadata.name) {
                forget_object(&mut state.objects, &key, name);
                if gone.is_some()
                    && let Some(k) = state.keys.get_mut(&key)
                {
                    k.saw_deleted(object);
                }
                self.capacities.add(key);
            }
        }
        if let Some(object) = new
            && let (Some(key), Some(name)) = (decide::key_of(object), &object.metadata.name)
        {
            state
                .objects
                .entry(key.clone())
                .or_default()
                .insert(name.clone());
            self.capacities.add(key);
        }
        drop(state);
        self.topology.add(());
    }

    fn volume_changed(&self, volume: &PersistentVolume) {
        if !self.ready.load(Ordering::Acquire) {
            return;
        }
        let mut state = lock(&self.state);
        let keys = decide::keys_for_volume(volume, &self.driver, &state.desired);
        for key in keys {
            if let Some(k) = state.keys.get_mut(&key) {
                k.refresh = true;
            }
            self.capacities.add(key);
        }
    }
}

/// Starts the caches (Nodes and CSINodes in central mode only); their events go to
/// `handlers`.
pub(super) fn start_caches<D>(
    deps: &Deps<D>,
    handlers: &Arc<Handlers>,
) -> (Caches, Vec<InformerTask>) {
    let mut tasks = Vec::new();
    let topology_changed = {
        let handlers = Arc::clone(handlers);
        move || handlers.topology.add(())
    };
    let (classes, task) = informer(Api::all(deps.client.clone()), trim_class, {
        let changed = topology_changed.clone();
        move |_: Change<'_, StorageClass>| changed()
    });
    tasks.push(task);
    let (nodes, csinodes) = match deps.segments {
        SegmentSource::Cluster => {
            let (nodes, csinodes) = node_caches(deps, topology_changed, &mut tasks);
            (Some(nodes), Some(csinodes))
        }
        SegmentSource::Node(_) => (None, None),
    };
    let selector = watcher::Config::default().labels(&deps.template.label_selector());
    let (capacities, task) = filtered_informer(
        Api::namespaced_with(
            deps.capacity_client.clone(),
            &deps.template.namespace,
            &deps.version,
        ),
        selector,
        trim_capacity,
        {
            let handlers = Arc::clone(handlers);
            move |change: Change<'_, Capacity>| handlers.capacity_changed(&change)
        },
    );
    tasks.push(task);
    let (volumes, task) = informer(Api::all(deps.client.clone()), trim_volume, {
        let handlers = Arc::clone(handlers);
        move |change: Change<'_, PersistentVolume>| match change {
            Change::Applied { old: None, new } => handlers.volume_changed(new),
            Change::Deleted(gone) => handlers.volume_changed(gone),
            Change::Applied { .. } => {}
        }
    });
    tasks.push(task);
    let caches = Caches {
        classes,
        nodes,
        csinodes,
        capacities,
        volumes,
    };
    (caches, tasks)
}

/// The Node (labels only) and CSINode caches the central mode computes segments from.
fn node_caches<D>(
    deps: &Deps<D>,
    topology_changed: impl Fn() + Clone + Send + Sync + 'static,
    tasks: &mut Vec<InformerTask>,
) -> (Store<Node>, Store<CSINode>) {
    let (nodes, task) = informer(Api::all(deps.client.clone()), trim_node, {
        let changed = topology_changed.clone();
        move |change: Change<'_, Node>| {
            // Only labels are kept, so any real change is a label change; a resync is not.
            if let Change::Applied {
                old: Some(old),
                new,
            } = &change
                && old.metadata.labels == new.metadata.labels
            {
                return;
            }
            changed();
        }
    });
    tasks.push(task);
    let (csinodes, task) = informer(Api::all(deps.client.clone()), trim_csinode, {
        move |_: Change<'_, CSINode>| topology_changed()
    });
    tasks.push(task);
    (nodes, csinodes)
}

fn trim_capacity(capacity: &mut Capacity) {
    trim_managed_fields(&mut capacity.metadata);
}

/// What [`decide::keys_for_volume`] reads: driver, class, node affinity.
fn trim_volume(volume: &mut PersistentVolume) {
    let meta = std::mem::take(&mut volume.metadata);
    volume.metadata = ObjectMeta {
        name: meta.name,
        resource_version: meta.resource_version,
        ..ObjectMeta::default()
    };
    let spec = volume.spec.take().unwrap_or_default();
    volume.spec = Some(PersistentVolumeSpec {
        storage_class_name: spec.storage_class_name,
        node_affinity: spec.node_affinity,
        csi: spec.csi.map(|csi| CSIPersistentVolumeSource {
            driver: csi.driver,
            ..CSIPersistentVolumeSource::default()
        }),
        ..PersistentVolumeSpec::default()
    });
    volume.status = None;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(class: &str) -> CapacityKey {
        CapacityKey {
            segment: decide::Segment::from([("zone".to_owned(), "a".to_owned())]),
            class: class.to_owned(),
        }
    }

    #[test]
    fn a_key_without_objects_is_forgotten() {
        let mut objects = HashMap::new();
        objects.insert(
            key("fast"),
            BTreeSet::from(["csisc-1".to_owned(), "csisc-2".to_owned()]),
        );
        forget_object(&mut objects, &key("fast"), "csisc-1");
        assert_eq!(
            objects.get(&key("fast")),
            Some(&BTreeSet::from(["csisc-2".to_owned()]))
        );
        forget_object(&mut objects, &key("fast"), "csisc-2");
        assert!(objects.is_empty());
        // Unknown keys and names change nothing.
        forget_object(&mut objects, &key("slow"), "csisc-3");
        assert!(objects.is_empty());
    }

    #[test]
    fn classes_that_come_and_go_leave_no_keys() {
        let mut objects = HashMap::new();
        for round in 0..1000 {
            let class = format!("class-{round}");
            objects
                .entry(key(&class))
                .or_insert_with(BTreeSet::new)
                .insert(format!("csisc-{round}"));
            if round > 0 {
                forget_object(
                    &mut objects,
                    &key(&format!("class-{}", round - 1)),
                    &format!("csisc-{}", round - 1),
                );
            }
            assert_eq!(objects.len(), 1, "round {round}");
        }
    }
}
