//! The registry of kinds the in-memory API server serves.
//!
//! One [`ResourceInfo`] per (group, version, resource): what discovery advertises (copied from
//! kube-apiserver v1.36.2 discovery, fixtures `n4`-`n7`), which storage bucket holds the objects
//! (core/v1 and events.k8s.io/v1 Events share one, as they share one etcd key), whether a
//! `/status` subresource exists, what a DELETE answers (`ReturnDeletedObject` in the upstream
//! registry: the object or a `Status`, fixtures `j9`-`j12`) and the zero-valued fields Go
//! serializes for an empty object (seen in bookmarks, fixture `b1`, and in stored objects, e.g.
//! a VolumeAttachment's `status.attached: false`).

use std::sync::OnceLock;

use serde_json::Value;

use super::Config;

/// What a DELETE that removes the object at once answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeleteResponse {
    /// The deleted object (registry `ReturnDeletedObject: true`: storage.k8s.io, PV, PVC, Pod).
    Object,
    /// A `Status` with `status: Success` and `details.uid` (ConfigMap, Lease, Secret, Event).
    Status,
}

/// How objects of this resource are presented from their storage bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum View {
    /// Stored as served.
    Native,
    /// events.k8s.io/v1 Event: stored as a core/v1 Event, converted on the way in and out.
    EventsV1,
}

/// Everything the server knows about one resource.
#[derive(Debug)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "independent facts of a registry row, not a state machine"
)]
pub(crate) struct ResourceInfo {
    /// API group, "" for core.
    pub(crate) group: &'static str,
    /// API version, e.g. "v1".
    pub(crate) version: &'static str,
    /// Resource name in URLs, e.g. "persistentvolumeclaims".
    pub(crate) plural: &'static str,
    /// Singular name for discovery.
    pub(crate) singular: &'static str,
    /// Kind, e.g. "PersistentVolumeClaim".
    pub(crate) kind: &'static str,
    /// Namespaced or cluster-scoped.
    pub(crate) namespaced: bool,
    /// Has a `/status` subresource: the main resource ignores status changes and `/status`
    /// ignores everything but status (and metadata, fixtures k1-k3).
    pub(crate) status_subresource: bool,
    /// Short names for discovery (`kubectl get pvc`).
    pub(crate) short_names: &'static [&'static str],
    /// Discovery categories (`kubectl get all`).
    pub(crate) categories: &'static [&'static str],
    /// Verbs advertised by discovery.
    pub(crate) verbs: &'static [&'static str],
    /// Discovery `storageVersionHash` as kube-apiserver v1.36.2 reports it.
    pub(crate) storage_version_hash: Option<&'static str>,
    /// What an immediate DELETE answers.
    pub(crate) delete_response: DeleteResponse,
    /// Storage bucket; two resources with the same bucket are two views of one object set.
    pub(crate) bucket: &'static str,
    /// JSON object of the fields Go serializes for a zero-valued object (besides metadata).
    pub(crate) zero: &'static str,
    /// Top-level field order (Go struct order): kind, apiVersion, metadata, then the kind's own.
    pub(crate) top_order: &'static [&'static str],
    /// Conversion between storage and this view.
    pub(crate) view: View,
    /// `metadata.generation` is maintained (custom resources and Pods).
    pub(crate) generation: bool,
    /// The group used in 422 details (the internal group: "" for events.k8s.io, fixture m7).
    pub(crate) validation_group: &'static str,
    /// A custom resource (snapshot.storage.k8s.io): no typed decoding, CRD-style discovery.
    pub(crate) custom: bool,
    /// Not served unless [`Config::enabled_resources`] names it: a version kube-apiserver
    /// v1.36.2 no longer has (storage.k8s.io/v1beta1 CSIStorageCapacity, removed in 1.27).
    pub(crate) off_by_default: bool,
}

impl ResourceInfo {
    /// `v1` or `group/v1`.
    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Whether `config` serves this resource: not switched off by
    /// [`Config::disabled_resources`] and, if off by default, switched on by
    /// [`Config::enabled_resources`] (`<group>/<version>/<resource>` entries, `v1/<resource>`
    /// for the core group, as `--runtime-config` names them).
    pub(crate) fn served(&self, config: &Config) -> bool {
        let name = if self.group.is_empty() {
            format!("{}/{}", self.version, self.plural)
        } else {
            format!("{}/{}/{}", self.group, self.version, self.plural)
        };
        !config.disabled_resources.contains(&name)
            && (!self.off_by_default || config.enabled_resources.contains(&name))
    }

    /// `plural` or `plural.group`, as used in Status messages.
    pub(crate) fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_owned()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// The zero-valued object fields as JSON.
    pub(crate) fn zero_value(&self) -> Value {
        serde_json::from_str(self.zero).unwrap_or(Value::Object(serde_json::Map::new()))
    }
}

const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
const NAMESPACE_VERBS: &[&str] = &[
    "create", "delete", "get", "list", "patch", "update", "watch",
];
/// Custom resources list their verbs in this order in discovery.
const CRD_VERBS: &[&str] = &[
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "create",
    "update",
    "watch",
];
const SPEC_STATUS: &[&str] = &["kind", "apiVersion", "metadata", "spec", "status"];

const CORE_EVENT_ORDER: &[&str] = &[
    "kind",
    "apiVersion",
    "metadata",
    "involvedObject",
    "reason",
    "message",
    "source",
    "firstTimestamp",
    "lastTimestamp",
    "count",
    "type",
    "eventTime",
    "series",
    "action",
    "related",
    "reportingComponent",
    "reportingInstance",
];
const EVENTS_V1_ORDER: &[&str] = &[
    "kind",
    "apiVersion",
    "metadata",
    "eventTime",
    "series",
    "reportingController",
    "reportingInstance",
    "action",
    "reason",
    "regarding",
    "related",
    "note",
    "type",
    "deprecatedSource",
    "deprecatedFirstTimestamp",
    "deprecatedLastTimestamp",
    "deprecatedCount",
];

#[allow(clippy::too_many_arguments)]
const fn res(
    group: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    status_subresource: bool,
    short_names: &'static [&'static str],
    hash: Option<&'static str>,
    delete_response: DeleteResponse,
    zero: &'static str,
) -> ResourceInfo {
    ResourceInfo {
        group,
        version: "v1",
        plural,
        singular,
        kind,
        namespaced,
        status_subresource,
        short_names,
        categories: &[],
        verbs: VERBS,
        storage_version_hash: hash,
        delete_response,
        bucket: plural,
        zero,
        top_order: SPEC_STATUS,
        view: View::Native,
        generation: false,
        validation_group: group,
        custom: false,
        off_by_default: false,
    }
}

use DeleteResponse::{Object, Status};

static REGISTRY: OnceLock<Vec<ResourceInfo>> = OnceLock::new();

/// Every resource served, in discovery order within each group version.
pub(crate) fn all() -> &'static [ResourceInfo] {
    REGISTRY.get_or_init(build)
}

#[allow(clippy::too_many_lines, reason = "one registry row per resource")]
fn build() -> Vec<ResourceInfo> {
    const NODE_ZERO: &str = r#"{"spec":{},"status":{"daemonEndpoints":{"kubeletEndpoint":{"Port":0}},"nodeInfo":{"machineID":"","systemUUID":"","bootID":"","kernelVersion":"","osImage":"","containerRuntimeVersion":"","kubeletVersion":"","kubeProxyVersion":"","operatingSystem":"","architecture":""}}}"#;
    const CORE_EVENT_ZERO: &str = r#"{"involvedObject":{},"source":{},"firstTimestamp":null,"lastTimestamp":null,"eventTime":null,"reportingComponent":"","reportingInstance":""}"#;
    const EVENTS_V1_ZERO: &str = r#"{"eventTime":null,"regarding":{},"deprecatedSource":{},"deprecatedFirstTimestamp":null,"deprecatedLastTimestamp":null}"#;
    vec![
        // core/v1, alphabetical like /api/v1 (fixture n6).
        ResourceInfo {
            top_order: &[
                "kind",
                "apiVersion",
                "metadata",
                "immutable",
                "data",
                "binaryData",
            ],
            ..res(
                "",
                "configmaps",
                "configmap",
                "ConfigMap",
                true,
                false,
                &["cm"],
                Some("qFsyl6wFWjQ="),
                Status,
                "{}",
            )
        },
        ResourceInfo {
            top_order: CORE_EVENT_ORDER,
            ..res(
                "",
                "events",
                "event",
                "Event",
                true,
                false,
                &["ev"],
                Some("r2yiGXH7wu8="),
                Status,
                CORE_EVENT_ZERO,
            )
        },
        ResourceInfo {
            verbs: NAMESPACE_VERBS,
            ..res(
                "",
                "namespaces",
                "namespace",
                "Namespace",
                false,
                true,
                &["ns"],
                Some("Q3oi5N2YM8M="),
                Object,
                r#"{"spec":{},"status":{}}"#,
            )
        },
        res(
            "",
            "nodes",
            "node",
            "Node",
            false,
            true,
            &["no"],
            Some("XwShjMxG9Fs="),
            Status,
            NODE_ZERO,
        ),
        res(
            "",
            "persistentvolumeclaims",
            "persistentvolumeclaim",
            "PersistentVolumeClaim",
            true,
            true,
            &["pvc"],
            Some("QWTyNDq0dC4="),
            Object,
            r#"{"spec":{"resources":{}},"status":{}}"#,
        ),
        res(
            "",
            "persistentvolumes",
            "persistentvolume",
            "PersistentVolume",
            false,
            true,
            &["pv"],
            Some("HN/zwEC+JgM="),
            Object,
            r#"{"spec":{},"status":{}}"#,
        ),
        ResourceInfo {
            categories: &["all"],
            generation: true,
            ..res(
                "",
                "pods",
                "pod",
                "Pod",
                true,
                true,
                &["po"],
                Some("xPOwRZ+Yhw8="),
                Object,
                r#"{"spec":{"containers":null},"status":{}}"#,
            )
        },
        ResourceInfo {
            top_order: &[
                "kind",
                "apiVersion",
                "metadata",
                "immutable",
                "data",
                "stringData",
                "type",
            ],
            ..res(
                "",
                "secrets",
                "secret",
                "Secret",
                true,
                false,
                &[],
                Some("S6u1pOWzb84="),
                Status,
                "{}",
            )
        },
        // coordination.k8s.io/v1 (fixture n5).
        res(
            "coordination.k8s.io",
            "leases",
            "lease",
            "Lease",
            true,
            false,
            &[],
            Some("gqkMMb/YqFM="),
            Status,
            r#"{"spec":{}}"#,
        ),
        // events.k8s.io/v1 (fixture n7): the same objects as core/v1 events.
        ResourceInfo {
            top_order: EVENTS_V1_ORDER,
            bucket: "events",
            view: View::EventsV1,
            validation_group: "",
            ..res(
                "events.k8s.io",
                "events",
                "event",
                "Event",
                true,
                false,
                &["ev"],
                Some("r2yiGXH7wu8="),
                Status,
                EVENTS_V1_ZERO,
            )
        },
        // storage.k8s.io/v1 (fixture n4).
        res(
            "storage.k8s.io",
            "csidrivers",
            "csidriver",
            "CSIDriver",
            false,
            false,
            &[],
            Some("hL6j/rwBV5w="),
            Object,
            r#"{"spec":{}}"#,
        ),
        res(
            "storage.k8s.io",
            "csinodes",
            "csinode",
            "CSINode",
            false,
            false,
            &[],
            Some("Pe62DkZtjuo="),
            Object,
            r#"{"spec":{"drivers":null}}"#,
        ),
        capacity_v1(),
        // storage.k8s.io/v1beta1 CSIStorageCapacity as Kubernetes 1.21-1.26 served it (the
        // same fields as v1, which came in 1.24; removed in 1.27): off unless
        // `Config::enabled_resources` names it. Same storage bucket as v1, as both versions
        // are one etcd key upstream; a cluster of 1.21-1.23 is this entry on and v1 off.
        // Both on at once (1.24-1.26) is not modelled: an object keeps the apiVersion it was
        // written at instead of being converted to the version read.
        ResourceInfo {
            version: "v1beta1",
            off_by_default: true,
            storage_version_hash: None,
            ..capacity_v1()
        },
        ResourceInfo {
            top_order: &[
                "kind",
                "apiVersion",
                "metadata",
                "provisioner",
                "parameters",
                "reclaimPolicy",
                "mountOptions",
                "allowVolumeExpansion",
                "volumeBindingMode",
                "allowedTopologies",
            ],
            ..res(
                "storage.k8s.io",
                "storageclasses",
                "storageclass",
                "StorageClass",
                false,
                false,
                &["sc"],
                Some("K+m6uJwbjGY="),
                Object,
                r#"{"provisioner":""}"#,
            )
        },
        res(
            "storage.k8s.io",
            "volumeattachments",
            "volumeattachment",
            "VolumeAttachment",
            false,
            true,
            &[],
            Some("tJx/ezt6UDU="),
            Object,
            r#"{"spec":{"attacher":"","source":{},"nodeName":""},"status":{"attached":false}}"#,
        ),
        ResourceInfo {
            top_order: &["kind", "apiVersion", "metadata", "driverName", "parameters"],
            ..res(
                "storage.k8s.io",
                "volumeattributesclasses",
                "volumeattributesclass",
                "VolumeAttributesClass",
                false,
                false,
                &["vac"],
                Some("tIjydgKBC5w="),
                Object,
                r#"{"driverName":""}"#,
            )
        },
        // snapshot.storage.k8s.io/v1: custom resources of external-snapshotter (not in the
        // capture cluster; CRD registry semantics: Status on delete, generation maintained).
        ResourceInfo {
            top_order: &[
                "kind",
                "apiVersion",
                "metadata",
                "driver",
                "parameters",
                "deletionPolicy",
            ],
            ..crd(
                "volumesnapshotclasses",
                "volumesnapshotclass",
                "VolumeSnapshotClass",
                false,
                false,
                &["vsclass", "vsclasses"],
            )
        },
        crd(
            "volumesnapshotcontents",
            "volumesnapshotcontent",
            "VolumeSnapshotContent",
            false,
            true,
            &["vsc", "vscs"],
        ),
        crd(
            "volumesnapshots",
            "volumesnapshot",
            "VolumeSnapshot",
            true,
            true,
            &["vs"],
        ),
        // gateway.networking.k8s.io/v1beta1 ReferenceGrant, as the Gateway API CRDs (standard
        // channel) install it: namespaced, no status subresource, short name `refgrant`,
        // category `gateway-api`. Only v1beta1 is served, the version csi-provisioner reads.
        ResourceInfo {
            version: "v1beta1",
            categories: &["gateway-api"],
            top_order: &["kind", "apiVersion", "metadata", "spec"],
            ..crd_in(
                "gateway.networking.k8s.io",
                "referencegrants",
                "referencegrant",
                "ReferenceGrant",
                true,
                false,
                &["refgrant"],
            )
        },
    ]
}

/// storage.k8s.io/v1 CSIStorageCapacity; its v1beta1 row differs only in version.
fn capacity_v1() -> ResourceInfo {
    ResourceInfo {
        top_order: &[
            "kind",
            "apiVersion",
            "metadata",
            "nodeTopology",
            "storageClassName",
            "capacity",
            "maximumVolumeSize",
        ],
        ..res(
            "storage.k8s.io",
            "csistoragecapacities",
            "csistoragecapacity",
            "CSIStorageCapacity",
            true,
            false,
            &[],
            Some("xeVl+2Ly1kE="),
            Status,
            r#"{"storageClassName":""}"#,
        )
    }
}

const fn crd(
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    status: bool,
    short_names: &'static [&'static str],
) -> ResourceInfo {
    crd_in(
        "snapshot.storage.k8s.io",
        plural,
        singular,
        kind,
        namespaced,
        status,
        short_names,
    )
}

/// A custom resource of `group` (CRD registry semantics: no typed decoding, Status on delete,
/// generation maintained).
const fn crd_in(
    group: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    status: bool,
    short_names: &'static [&'static str],
) -> ResourceInfo {
    ResourceInfo {
        verbs: CRD_VERBS,
        generation: true,
        custom: true,
        ..res(
            group,
            plural,
            singular,
            kind,
            namespaced,
            status,
            short_names,
            None,
            Status,
            "{}",
        )
    }
}

/// Look up a resource by group, version and plural.
pub(crate) fn find(group: &str, version: &str, plural: &str) -> Option<&'static ResourceInfo> {
    all()
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The one version served of `group` (`v1` for every group but the Gateway API's).
pub(crate) fn group_version_of(group: &str) -> &'static str {
    all()
        .iter()
        .find(|r| r.group == group)
        .map_or("v1", |r| r.version)
}

/// The group versions served, core first, in `/apis` order.
pub(crate) fn groups() -> Vec<&'static str> {
    let mut groups: Vec<&'static str> = Vec::new();
    for r in all() {
        if !r.group.is_empty() && !groups.contains(&r.group) {
            groups.push(r.group);
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_zero_template_is_a_json_object() {
        for r in all() {
            let zero: Value = serde_json::from_str(r.zero).expect(r.plural);
            assert!(zero.is_object(), "{}", r.plural);
        }
    }

    #[test]
    fn core_and_events_k8s_io_events_share_one_bucket() {
        let core = find("", "v1", "events").unwrap();
        let events = find("events.k8s.io", "v1", "events").unwrap();
        assert_eq!(core.bucket, events.bucket);
        assert_eq!(events.view, View::EventsV1);
    }

    #[test]
    fn storage_k8s_io_kinds_return_the_deleted_object_and_lease_a_status() {
        assert_eq!(
            find("storage.k8s.io", "v1", "storageclasses")
                .unwrap()
                .delete_response,
            DeleteResponse::Object
        );
        assert_eq!(
            find("coordination.k8s.io", "v1", "leases")
                .unwrap()
                .delete_response,
            DeleteResponse::Status
        );
        assert_eq!(
            find("", "v1", "configmaps").unwrap().delete_response,
            DeleteResponse::Status
        );
    }
}
