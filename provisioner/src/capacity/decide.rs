//! Pure decisions of capacity tracking: objects in, a value out. The executor
//! ([`super::controller`]) reads the caches, calls these and carries out the result.
//!
//! Upstream counterparts: `topology/nodes.go` (segments), `capacity.go` `workItem`,
//! `syncCapacity` (create/update), `deleteObsolete` (objects without a work item, duplicates)
//! and `onPVCreated`/`onPVDeleted` (which items a volume refreshes).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use csi_common::informer::resource_version;
use csi_common::quantity::{format_binary_si, parse_bytes};
use k8s_openapi::api::core::v1::{Node, NodeSelectorTerm, PersistentVolume};
use k8s_openapi::api::storage::v1::{CSINode, CSIStorageCapacity, StorageClass};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use proto::csi::v1::GetCapacityResponse;

/// Label with the driver name on every object we manage (upstream `DriverNameLabel`).
pub(crate) const DRIVER_LABEL: &str = "csi.storage.k8s.io/drivername";
/// Label naming the manager of an object (upstream `ManagedByLabel`).
pub(crate) const MANAGED_BY_LABEL: &str = "csi.storage.k8s.io/managed-by";
/// Its value in central mode, and the prefix of `external-provisioner-<node>` in node mode.
pub(crate) const MANAGED_BY: &str = "external-provisioner";
/// A label value has at most 63 characters (Kubernetes label syntax, upstream uses
/// `validation.DNS1035LabelMaxLength`).
const LABEL_VALUE_MAX: usize = 63;
/// `generateName` of created objects.
pub(crate) const GENERATE_NAME: &str = "csisc-";
/// A key whose capacity keeps coming back unchanged is polled at most this many
/// `--capacity-poll-interval`s apart.
pub(crate) const MAX_POLL_FACTOR: u32 = 8;

/// One topology segment: the driver's topology keys with one node's values (empty when the
/// driver has no topology keys: the segment then covers every node).
pub(crate) type Segment = BTreeMap<String, String>;

/// One work item: a segment and a StorageClass of the driver.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct CapacityKey {
    /// Where.
    pub(crate) segment: Segment,
    /// `metadata.name` of the StorageClass.
    pub(crate) class: String,
}

/// What GetCapacity reported, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Capacity {
    /// `available_capacity` in bytes (≥ 0).
    pub(crate) available: i64,
    /// `maximum_volume_size` in bytes (≥ 0) when the driver sent it.
    pub(crate) maximum_volume_size: Option<i64>,
}

/// A GetCapacity answer that must not become an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BadResponse {
    /// `available_capacity` below zero (the API server would refuse it too).
    #[error("GetCapacity returned a negative available_capacity ({0})")]
    NegativeCapacity(i64),
    /// `maximum_volume_size` below zero.
    #[error("GetCapacity returned a negative maximum_volume_size ({0})")]
    NegativeMaximum(i64),
}

/// The checked value of a GetCapacity response. `maximum_volume_size` is optional in CSI
/// (a wrapper type): absent means the object has no `maximumVolumeSize`. An
/// `available_capacity` of zero is a valid answer and is published, as upstream does.
pub(crate) fn capacity_of(response: &GetCapacityResponse) -> Result<Capacity, BadResponse> {
    if response.available_capacity < 0 {
        return Err(BadResponse::NegativeCapacity(response.available_capacity));
    }
    if let Some(max) = response.maximum_volume_size.filter(|m| *m < 0) {
        return Err(BadResponse::NegativeMaximum(max));
    }
    Ok(Capacity {
        available: response.available_capacity,
        maximum_volume_size: response.maximum_volume_size,
    })
}

/// The segments of `driver` (upstream `nodeTopology.sync`): for every CSINode listing the
/// driver, its topology keys (sorted) with the values of the Node of the same name. A Node
/// that is missing or lacks one of the keys contributes nothing; a driver listed without
/// keys gives the one empty segment.
pub(crate) fn segments(
    driver: &str,
    csinodes: &[Arc<CSINode>],
    nodes: &[Arc<Node>],
) -> BTreeSet<Segment> {
    let labels: HashMap<&str, Option<&BTreeMap<String, String>>> = nodes
        .iter()
        .filter_map(|n| Some((n.metadata.name.as_deref()?, n.metadata.labels.as_ref())))
        .collect();
    let empty = BTreeMap::new();
    let mut out = BTreeSet::new();
    for csinode in csinodes {
        let Some(entry) = csinode.spec.drivers.iter().find(|d| d.name == driver) else {
            continue;
        };
        // CSINodes are named after their Node; a CSINode without a Node is skipped.
        let Some(node_labels) = csinode
            .metadata
            .name
            .as_deref()
            .and_then(|name| labels.get(name))
        else {
            continue;
        };
        let node_labels = node_labels.unwrap_or(&empty);
        let keys = entry.topology_keys.as_deref().unwrap_or_default();
        let segment: Option<Segment> = keys
            .iter()
            .map(|k| Some((k.clone(), node_labels.get(k)?.clone())))
            .collect();
        if let Some(segment) = segment {
            out.insert(segment);
        }
    }
    out
}

/// Where the segments come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SegmentSource {
    /// Central mode: every node's segment, from the CSINode and Node caches.
    Cluster,
    /// Node deployment (spec §6.2): only this node's segment, NodeGetInfo's
    /// `accessible_topology` (empty: the one empty segment), as upstream's fixed node topology.
    Node(Segment),
}

/// The segments to publish: this node's alone in node mode (the caches are not read, and
/// not even started), [`segments`] of the caches in central mode.
pub(crate) fn wanted_segments(
    source: &SegmentSource,
    driver: &str,
    csinodes: &[Arc<CSINode>],
    nodes: &[Arc<Node>],
) -> BTreeSet<Segment> {
    match source {
        SegmentSource::Cluster => segments(driver, csinodes, nodes),
        SegmentSource::Node(segment) => BTreeSet::from([segment.clone()]),
    }
}

/// The `managed-by` label value: `external-provisioner` centrally, and
/// `external-provisioner-<node>` in node mode, so each node's instance selects and deletes
/// only its own objects. A value longer than a label allows (63 characters) keeps as much of
/// the node name as fits before `-<16 hex digits of FNV-1a of the node name>`: still unique
/// per node and stable across restarts (upstream also shortens it, with its own hash).
pub(crate) fn managed_by(node: Option<&str>) -> String {
    let Some(node) = node else {
        return MANAGED_BY.to_owned();
    };
    let full = format!("{MANAGED_BY}-{node}");
    if full.len() <= LABEL_VALUE_MAX {
        return full;
    }
    // Go's `fmt.Sprintf("%x", fnv.New32a().Sum32())`: lower-case hex without padding.
    let hash = format!("{:x}", fnv1a_32(node.as_bytes()));
    let room = LABEL_VALUE_MAX - MANAGED_BY.len() - hash.len() - 2;
    // Node names are DNS subdomains (ASCII); a malformed `--node-name` may not be, so the cut
    // goes back to a character boundary rather than keeping the whole name, which made the
    // value longer than a label allows (found by the capacity property test). The kept part
    // must end alphanumeric before the `-` (label value syntax).
    let kept = node[..node.floor_char_boundary(room)]
        .trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    if kept.is_empty() {
        format!("{MANAGED_BY}-{hash}")
    } else {
        format!("{MANAGED_BY}-{kept}-{hash}")
    }
}

/// 32-bit FNV-1a (Go's `hash/fnv.New32a`: xor, then multiply), the hash spec §2.7 names for
/// shortening a node's `managed-by` value. The `fnv` crate only has the 64-bit variant.
fn fnv1a_32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(*byte)).wrapping_mul(0x0100_0193)
    })
}

/// Whether `class` gets capacity objects: it names the driver, and it waits for the first
/// consumer unless `immediate` (`--capacity-for-immediate-binding`). A class without
/// `volumeBindingMode` is Immediate (the API default).
pub(crate) fn tracked(class: &StorageClass, driver: &str, immediate: bool) -> bool {
    class.provisioner == driver
        && class.metadata.deletion_timestamp.is_none()
        && (immediate || class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer"))
}

/// Every (segment, class) pair that should have an object.
pub(crate) fn desired_keys(
    segments: &BTreeSet<Segment>,
    classes: &[Arc<StorageClass>],
    driver: &str,
    immediate: bool,
) -> BTreeSet<CapacityKey> {
    let mut out = BTreeSet::new();
    for class in classes.iter().filter(|c| tracked(c, driver, immediate)) {
        let Some(name) = class.metadata.name.as_deref() else {
            continue;
        };
        for segment in segments {
            out.insert(CapacityKey {
                segment: segment.clone(),
                class: name.to_owned(),
            });
        }
    }
    out
}

/// The key an object stands for, `None` if its `nodeTopology` is not one we would write
/// (anything but plain `matchLabels`), which makes it obsolete.
pub(crate) fn key_of(object: &CSIStorageCapacity) -> Option<CapacityKey> {
    let segment = match &object.node_topology {
        None => Segment::new(),
        Some(selector) => {
            if selector
                .match_expressions
                .as_ref()
                .is_some_and(|e| !e.is_empty())
            {
                return None;
            }
            selector.match_labels.clone().unwrap_or_default()
        }
    };
    Some(CapacityKey {
        segment,
        class: object.storage_class_name.clone(),
    })
}

/// Where our objects go and who owns them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Template {
    /// `NAMESPACE`.
    pub(crate) namespace: String,
    /// The driver name (label value).
    pub(crate) driver: String,
    /// From `--capacity-ownerref-level`; `None` with -1.
    pub(crate) owner: Option<OwnerReference>,
    /// The `managed-by` label value ([`managed_by`]).
    pub(crate) managed_by: String,
}

impl Template {
    /// The two labels every managed object has (and the informer selects on).
    pub(crate) fn labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (DRIVER_LABEL.to_owned(), self.driver.clone()),
            (MANAGED_BY_LABEL.to_owned(), self.managed_by.clone()),
        ])
    }

    /// The informer's label selector, `k1=v1,k2=v2`.
    pub(crate) fn label_selector(&self) -> String {
        self.labels()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// What to do for one key.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Step {
    /// No object yet: create this one (it has `generateName`, no name).
    Create(Box<CSIStorageCapacity>),
    /// The object is stale: replace it with this (same name and resourceVersion).
    Update(Box<CSIStorageCapacity>),
    /// The object says what the driver says.
    Keep,
}

/// Create, update or keep the object of `key` so that it holds `capacity`; `existing` is the
/// object the cache has for the key (the first by name if there are duplicates, the others
/// being obsolete). Quantities are compared as numbers (`1Gi` equals `1073741824`); an
/// object without our owner reference gets it appended (upstream keeps other owners).
pub(crate) fn decide(
    key: &CapacityKey,
    capacity: Capacity,
    existing: Option<&CSIStorageCapacity>,
    template: &Template,
) -> Step {
    let Some(existing) = existing else {
        return Step::Create(Box::new(new_object(key, capacity, template)));
    };
    let same = |q: Option<&Quantity>, want: Option<i64>| {
        q.map(|q| parse_bytes(&q.0).ok()) == want.map(Some)
    };
    let owners = existing
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default();
    let owner_missing = template.owner.as_ref().is_some_and(|o| !owners.contains(o));
    if same(existing.capacity.as_ref(), Some(capacity.available))
        && same(
            existing.maximum_volume_size.as_ref(),
            capacity.maximum_volume_size,
        )
        && !owner_missing
    {
        return Step::Keep;
    }
    let mut updated = existing.clone();
    updated.capacity = Some(quantity(capacity.available));
    updated.maximum_volume_size = capacity.maximum_volume_size.map(quantity);
    if owner_missing && let Some(owner) = &template.owner {
        updated
            .metadata
            .owner_references
            .get_or_insert_with(Vec::new)
            .push(owner.clone());
    }
    Step::Update(Box::new(updated))
}

fn quantity(bytes: i64) -> Quantity {
    Quantity(format_binary_si(bytes))
}

/// A new object for `key`, as upstream writes it.
pub(crate) fn new_object(
    key: &CapacityKey,
    capacity: Capacity,
    template: &Template,
) -> CSIStorageCapacity {
    CSIStorageCapacity {
        metadata: ObjectMeta {
            generate_name: Some(GENERATE_NAME.to_owned()),
            namespace: Some(template.namespace.clone()),
            labels: Some(template.labels()),
            owner_references: template.owner.clone().map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        node_topology: Some(LabelSelector {
            match_labels: (!key.segment.is_empty()).then(|| key.segment.clone()),
            match_expressions: None,
        }),
        storage_class_name: key.class.clone(),
        capacity: Some(quantity(capacity.available)),
        maximum_volume_size: capacity.maximum_volume_size.map(quantity),
    }
}

/// The names of objects to delete: those whose key is not wanted (vanished class or segment,
/// foreign `nodeTopology`) and duplicates of a wanted key (all but the first by name).
/// Objects already being deleted are left alone, and so are objects without both of
/// `template`'s labels: another node's instance (or another manager) owns them. The informer
/// selects on the labels already; the check keeps the decision right on its own.
pub(crate) fn obsolete<'a>(
    objects: impl IntoIterator<Item = &'a CSIStorageCapacity>,
    desired: &BTreeSet<CapacityKey>,
    template: &Template,
) -> Obsolete {
    let ours = template.labels();
    let mut sorted: Vec<&CSIStorageCapacity> = objects
        .into_iter()
        .filter(|o| o.metadata.deletion_timestamp.is_none())
        .filter(|o| {
            let labels = o.metadata.labels.as_ref();
            ours.iter()
                .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
        })
        .collect();
    sorted.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut seen = BTreeSet::new();
    let mut names = Vec::new();
    for object in sorted {
        let Some(name) = object.metadata.name.clone() else {
            continue;
        };
        match key_of(object) {
            Some(key) if desired.contains(&key) && !seen.contains(&key) => {
                seen.insert(key);
            }
            _ => names.push(name),
        }
    }
    Obsolete {
        names,
        current: seen.len(),
    }
}

/// The result of [`obsolete`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Obsolete {
    /// Objects to delete.
    pub(crate) names: Vec<String>,
    /// Wanted keys that have an object (`csistoragecapacities_desired_current`).
    pub(crate) current: usize,
}

/// The next poll interval of a key: `base` after a change (or the first poll), doubled after
/// an unchanged answer, capped at [`MAX_POLL_FACTOR`] × `base`.
pub(crate) fn next_interval(previous: Option<Duration>, changed: bool, base: Duration) -> Duration {
    match previous {
        Some(previous) if !changed => (previous * 2).min(base * MAX_POLL_FACTOR),
        _ => base,
    }
}

/// `interval` spread by ±10% with `unit` in `[0, 1)`, so keys created together do not all
/// poll in the same second.
pub(crate) fn jittered(interval: Duration, unit: f64) -> Duration {
    interval.mul_f64(0.9 + 0.2 * unit.clamp(0.0, 1.0))
}

/// The wanted keys a volume's creation or deletion changes the capacity of: those of its
/// class whose segment satisfies one of its node affinity terms, or every key of the class
/// when it has no node affinity. Volumes of other drivers change nothing.
pub(crate) fn keys_for_volume(
    volume: &PersistentVolume,
    driver: &str,
    desired: &BTreeSet<CapacityKey>,
) -> Vec<CapacityKey> {
    let Some(spec) = &volume.spec else {
        return Vec::new();
    };
    if spec.csi.as_ref().is_none_or(|csi| csi.driver != driver) {
        return Vec::new();
    }
    let Some(class) = spec.storage_class_name.as_deref() else {
        return Vec::new();
    };
    let terms: &[NodeSelectorTerm] = spec
        .node_affinity
        .as_ref()
        .and_then(|a| a.required.as_ref())
        .map(|r| r.node_selector_terms.as_slice())
        .unwrap_or_default();
    desired
        .iter()
        .filter(|k| k.class == class)
        .filter(|k| terms.is_empty() || terms.iter().any(|t| term_matches(t, &k.segment)))
        .cloned()
        .collect()
}

/// A term holds in a segment when each of its `In` expressions names the segment's value for
/// that key. Other operators never come from a CSI PV (upstream writes `In` only); they are
/// taken as matching, which at worst polls once too often.
fn term_matches(term: &NodeSelectorTerm, segment: &Segment) -> bool {
    term.match_expressions
        .as_deref()
        .unwrap_or_default()
        .iter()
        .filter(|e| e.operator == "In")
        .all(|e| {
            segment
                .get(&e.key)
                .is_some_and(|v| e.values.as_deref().unwrap_or_default().contains(v))
        })
}

/// A CSIStorageCapacity the informer saw deleted: its name and the resourceVersion of the
/// deletion (kube-apiserver stamps the last state in a DELETED event with it).
///
/// kube-apiserver sends watch events apart from a writer's answer, so the deletion of an
/// object we just created or updated can reach us before that write's answer does. Taken for
/// the key's current object, such an answer kept the deleted object from being created again
/// until the driver's capacity changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tombstone {
    name: String,
    resource_version: Option<u64>,
}

impl Tombstone {
    /// The tombstone of `deleted`, the object of a DELETED event (`None` without a name).
    pub(crate) fn of(deleted: &CSIStorageCapacity) -> Option<Self> {
        Some(Self {
            name: deleted.metadata.name.clone()?,
            resource_version: resource_version(&deleted.metadata),
        })
    }

    /// Whether `written`, the answer to our create or update, is a state this deletion ended:
    /// the same name and a resourceVersion no later than the deletion's. Without both
    /// versions the name decides: an update of an object already deleted fails, and a
    /// generated name is not given out again while its object exists.
    pub(crate) fn buries(&self, written: &CSIStorageCapacity) -> bool {
        written.metadata.name.as_deref() == Some(self.name.as_str())
            && match (self.resource_version, resource_version(&written.metadata)) {
                (Some(deleted), Some(written)) => written <= deleted,
                _ => true,
            }
    }
}

#[cfg(test)]
mod tests;
