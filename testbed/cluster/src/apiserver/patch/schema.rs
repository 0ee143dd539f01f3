//! Strategic-merge-patch metadata: which list fields merge, and by which key.
//!
//! kube-apiserver reads this from the Go struct tags of the built-in types
//! (`patchStrategy:"merge"` and `patchMergeKey:"..."`, via `strategicpatch.NewPatchMetaFromStruct`).
//! The table below copies those tags for the Kinds the in-memory server stores, from
//! k8s.io/api `core/v1/types.go` and `storage/v1/types.go` and k8s.io/apimachinery
//! `meta/v1/types.go` (ObjectMeta). Only lists carry a
//! strategy that matters when APPLYING a patch: struct and map fields always merge key by key,
//! and every list without a `patchStrategy:"merge"` tag is atomic (replaced by the patch). The
//! `retainKeys` half of `merge,retainKeys` only affects patch generation; a `$retainKeys`
//! directive in a body is honoured wherever it appears.
//!
//! Kinds whose lists are all atomic need no entry: PersistentVolume (accessModes, mountOptions,
//! nodeAffinity terms), StorageClass (mountOptions and allowedTopologies are `+listType=atomic`),
//! CSIDriver (volumeLifecycleModes is a `+listType=set` without a patch tag, tokenRequests is
//! atomic), CSIStorageCapacity, VolumeAttachment, and Lease, core/v1 Event and ConfigMap, which
//! have no list fields of their own. The ObjectMeta rules apply to every Kind, including unknown
//! ones.

/// How the elements of a list field are merged by a strategic merge patch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ListMerge {
    /// `patchStrategy:"merge"` on a list of scalars: set union.
    Scalars,
    /// `patchStrategy:"merge" patchMergeKey:"<key>"` on a list of objects.
    ByKey(&'static str),
}

impl ListMerge {
    /// The merge key, `None` for lists of scalars.
    pub(super) fn merge_key(self) -> Option<&'static str> {
        match self {
            ListMerge::Scalars => None,
            ListMerge::ByKey(key) => Some(key),
        }
    }
}

/// Kind `"*"` applies to every Kind. Paths are JSON field names joined by `.`; list elements
/// do not add a path segment (`spec.containers.ports` is the ports list of any container).
const RULES: &[(&str, &str, ListMerge)] = &[
    // ObjectMeta: finalizers `patchStrategy:"merge"`; ownerReferences merge key uid.
    ("*", "metadata.finalizers", ListMerge::Scalars),
    ("*", "metadata.ownerReferences", ListMerge::ByKey("uid")),
    // PersistentVolumeClaimStatus.conditions: merge key type (external-resizer's
    // `$setElementOrder/conditions` patches rely on it). Spec lists (accessModes) are atomic.
    (
        "PersistentVolumeClaim",
        "status.conditions",
        ListMerge::ByKey("type"),
    ),
    // CSINodeSpec.drivers: merge key name (kubelet's plugin registration).
    ("CSINode", "spec.drivers", ListMerge::ByKey("name")),
    // NodeSpec.podCIDRs (scalars), NodeStatus.conditions and .addresses (merge key type).
    // taints, volumesAttached, volumesInUse and images carry no patch tags.
    ("Node", "spec.podCIDRs", ListMerge::Scalars),
    ("Node", "status.conditions", ListMerge::ByKey("type")),
    ("Node", "status.addresses", ListMerge::ByKey("type")),
    // PodSpec (tolerations, readinessGates, containerStatuses ... are atomic).
    ("Pod", "spec.volumes", ListMerge::ByKey("name")),
    ("Pod", "spec.initContainers", ListMerge::ByKey("name")),
    ("Pod", "spec.containers", ListMerge::ByKey("name")),
    ("Pod", "spec.ephemeralContainers", ListMerge::ByKey("name")),
    ("Pod", "spec.imagePullSecrets", ListMerge::ByKey("name")),
    ("Pod", "spec.hostAliases", ListMerge::ByKey("ip")),
    (
        "Pod",
        "spec.topologySpreadConstraints",
        ListMerge::ByKey("topologyKey"),
    ),
    ("Pod", "spec.schedulingGates", ListMerge::ByKey("name")),
    ("Pod", "spec.resourceClaims", ListMerge::ByKey("name")),
    // Container / EphemeralContainerCommon, in each of the three container lists.
    (
        "Pod",
        "spec.initContainers.ports",
        ListMerge::ByKey("containerPort"),
    ),
    ("Pod", "spec.initContainers.env", ListMerge::ByKey("name")),
    (
        "Pod",
        "spec.initContainers.volumeMounts",
        ListMerge::ByKey("mountPath"),
    ),
    (
        "Pod",
        "spec.initContainers.volumeDevices",
        ListMerge::ByKey("devicePath"),
    ),
    (
        "Pod",
        "spec.containers.ports",
        ListMerge::ByKey("containerPort"),
    ),
    ("Pod", "spec.containers.env", ListMerge::ByKey("name")),
    (
        "Pod",
        "spec.containers.volumeMounts",
        ListMerge::ByKey("mountPath"),
    ),
    (
        "Pod",
        "spec.containers.volumeDevices",
        ListMerge::ByKey("devicePath"),
    ),
    (
        "Pod",
        "spec.ephemeralContainers.ports",
        ListMerge::ByKey("containerPort"),
    ),
    (
        "Pod",
        "spec.ephemeralContainers.env",
        ListMerge::ByKey("name"),
    ),
    (
        "Pod",
        "spec.ephemeralContainers.volumeMounts",
        ListMerge::ByKey("mountPath"),
    ),
    (
        "Pod",
        "spec.ephemeralContainers.volumeDevices",
        ListMerge::ByKey("devicePath"),
    ),
    // PodStatus.
    ("Pod", "status.conditions", ListMerge::ByKey("type")),
    ("Pod", "status.podIPs", ListMerge::ByKey("ip")),
    ("Pod", "status.hostIPs", ListMerge::ByKey("ip")),
];

/// The merge strategy of the list at `path` in an object of `kind`; `None` means atomic.
pub(super) fn list_merge(kind: &str, path: &str) -> Option<ListMerge> {
    RULES
        .iter()
        .find(|(rule_kind, rule_path, _)| {
            (*rule_kind == "*" || *rule_kind == kind) && *rule_path == path
        })
        .map(|(_, _, merge)| *merge)
}
