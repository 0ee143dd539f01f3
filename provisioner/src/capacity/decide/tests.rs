use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, NodeSelector, NodeSelectorRequirement, PersistentVolumeSpec,
    VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::{CSINodeDriver, CSINodeSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelectorRequirement, Time};
use k8s_openapi::jiff::Timestamp;

use super::*;

const DRIVER: &str = "hostpath.csi.k8s.io";
const ZONE: &str = "topology.example.com/zone";
const RACK: &str = "topology.example.com/rack";

fn seg(pairs: &[(&str, &str)]) -> Segment {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn node(name: &str, labels: &[(&str, &str)]) -> Arc<Node> {
    Arc::new(Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(seg(labels)),
            ..ObjectMeta::default()
        },
        ..Node::default()
    })
}

fn csinode(name: &str, driver: &str, keys: Option<&[&str]>) -> Arc<CSINode> {
    Arc::new(CSINode {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        spec: CSINodeSpec {
            drivers: vec![CSINodeDriver {
                name: driver.into(),
                node_id: name.into(),
                topology_keys: keys.map(|k| k.iter().map(|s| (*s).to_owned()).collect()),
                ..CSINodeDriver::default()
            }],
        },
    })
}

#[test]
fn segments_come_from_csinode_keys_and_node_labels() {
    struct Row {
        name: &'static str,
        csinodes: Vec<Arc<CSINode>>,
        nodes: Vec<Arc<Node>>,
        want: Vec<Segment>,
    }
    let rows = [
        Row {
            name: "two nodes in one zone give one segment, keys sorted",
            csinodes: vec![
                csinode("n1", DRIVER, Some(&[ZONE, RACK])),
                csinode("n2", DRIVER, Some(&[ZONE, RACK])),
            ],
            nodes: vec![
                node("n1", &[(ZONE, "a"), (RACK, "1"), ("other", "x")]),
                node("n2", &[(ZONE, "a"), (RACK, "1")]),
            ],
            want: vec![seg(&[(RACK, "1"), (ZONE, "a")])],
        },
        Row {
            name: "a node lacking a key, a CSINode without Node, another driver: skipped",
            csinodes: vec![
                csinode("n1", DRIVER, Some(&[ZONE])),
                csinode("n2", DRIVER, Some(&[ZONE])),
                csinode("gone", DRIVER, Some(&[ZONE])),
                csinode("n3", "other.csi.k8s.io", Some(&[ZONE])),
            ],
            nodes: vec![
                node("n1", &[(ZONE, "a")]),
                node("n2", &[]),
                node("n3", &[(ZONE, "c")]),
            ],
            want: vec![seg(&[(ZONE, "a")])],
        },
        Row {
            name: "a driver without topology keys has the one empty segment",
            csinodes: vec![
                csinode("n1", DRIVER, None),
                csinode("n2", DRIVER, Some(&[])),
            ],
            nodes: vec![node("n1", &[]), node("n2", &[(ZONE, "a")])],
            want: vec![Segment::new()],
        },
        Row {
            name: "no CSINode lists the driver: no segment",
            csinodes: vec![csinode("n1", "other.csi.k8s.io", Some(&[ZONE]))],
            nodes: vec![node("n1", &[(ZONE, "a")])],
            want: vec![],
        },
    ];
    for row in rows {
        let got: Vec<Segment> = segments(DRIVER, &row.csinodes, &row.nodes)
            .into_iter()
            .collect();
        assert_eq!(got, row.want, "{}", row.name);
    }
}

fn class(name: &str, provisioner: &str, binding: Option<&str>) -> Arc<StorageClass> {
    Arc::new(StorageClass {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        provisioner: provisioner.into(),
        volume_binding_mode: binding.map(Into::into),
        ..StorageClass::default()
    })
}

#[test]
fn only_late_binding_classes_of_the_driver_are_tracked_unless_immediate_is_asked_for() {
    let classes = [
        class("late", DRIVER, Some("WaitForFirstConsumer")),
        class("now", DRIVER, Some("Immediate")),
        class("default-is-immediate", DRIVER, None),
        class("foreign", "other.csi.k8s.io", Some("WaitForFirstConsumer")),
    ];
    let segments = BTreeSet::from([seg(&[(ZONE, "a")]), seg(&[(ZONE, "b")])]);
    let names = |immediate| {
        desired_keys(&segments, &classes, DRIVER, immediate)
            .into_iter()
            .map(|k| format!("{}/{}", k.class, k.segment[ZONE]))
            .collect::<Vec<_>>()
    };
    assert_eq!(names(false), ["late/a", "late/b"]);
    assert_eq!(
        names(true),
        [
            "default-is-immediate/a",
            "late/a",
            "now/a",
            "default-is-immediate/b",
            "late/b",
            "now/b"
        ]
    );
}

fn key(class: &str, zone: &str) -> CapacityKey {
    CapacityKey {
        segment: seg(&[(ZONE, zone)]),
        class: class.into(),
    }
}

fn owner() -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".into(),
        kind: "ReplicaSet".into(),
        name: "csi-provisioner-5d8f".into(),
        uid: "3a4b".into(),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

fn template() -> Template {
    Template {
        namespace: "kube-system".into(),
        driver: DRIVER.into(),
        owner: Some(owner()),
        managed_by: MANAGED_BY.into(),
    }
}

fn gib(n: i64) -> i64 {
    n << 30
}

fn capacity(available: i64, max: Option<i64>) -> Capacity {
    Capacity {
        available,
        maximum_volume_size: max,
    }
}

/// An existing object for `key("fast", "a")` named `name`.
fn object(name: &str, available: &str, max: Option<&str>) -> CSIStorageCapacity {
    let mut object = new_object(&key("fast", "a"), capacity(0, None), &template());
    object.metadata.name = Some(name.into());
    object.metadata.resource_version = Some("7".into());
    object.capacity = Some(Quantity(available.into()));
    object.maximum_volume_size = max.map(|m| Quantity(m.into()));
    object
}

#[test]
fn a_new_object_has_upstreams_shape() {
    let created = new_object(
        &key("fast", "a"),
        capacity(gib(10), Some(gib(1))),
        &template(),
    );
    let json = serde_json::to_value(&created).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSIStorageCapacity",
            "metadata": {
                "generateName": "csisc-",
                "namespace": "kube-system",
                "labels": {
                    "csi.storage.k8s.io/drivername": DRIVER,
                    "csi.storage.k8s.io/managed-by": "external-provisioner",
                },
                "ownerReferences": [{
                    "apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": "csi-provisioner-5d8f", "uid": "3a4b", "controller": true,
                }],
            },
            "nodeTopology": {"matchLabels": {ZONE: "a"}},
            "storageClassName": "fast",
            "capacity": "10Gi",
            "maximumVolumeSize": "1Gi",
        })
    );
    assert_eq!(key_of(&created), Some(key("fast", "a")));
}

#[test]
fn objects_are_written_only_when_a_value_or_the_owner_differs() {
    let k = key("fast", "a");
    let t = template();
    let no_owner = |mut o: CSIStorageCapacity| {
        o.metadata.owner_references = None;
        o
    };
    let rows: [(&str, Option<CSIStorageCapacity>, Capacity, &str); 7] = [
        ("no object", None, capacity(0, None), "create"),
        (
            "same values, other spelling",
            Some(object("csisc-1", "10737418240", Some("1Gi"))),
            capacity(gib(10), Some(gib(1))),
            "keep",
        ),
        (
            "capacity changed",
            Some(object("csisc-1", "10Gi", Some("1Gi"))),
            capacity(gib(9), Some(gib(1))),
            "update",
        ),
        (
            "maximum appeared",
            Some(object("csisc-1", "10Gi", None)),
            capacity(gib(10), Some(gib(1))),
            "update",
        ),
        (
            "maximum went away",
            Some(object("csisc-1", "10Gi", Some("1Gi"))),
            capacity(gib(10), None),
            "update",
        ),
        (
            "owner missing",
            Some(no_owner(object("csisc-1", "10Gi", None))),
            capacity(gib(10), None),
            "update",
        ),
        (
            "garbage quantity",
            Some(object("csisc-1", "ten", None)),
            capacity(gib(10), None),
            "update",
        ),
    ];
    for (name, existing, value, want) in rows {
        let step = decide(&k, value, existing.as_ref(), &t);
        let got = match &step {
            Step::Create(_) => "create",
            Step::Update(_) => "update",
            Step::Keep => "keep",
        };
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn an_update_keeps_name_version_and_other_owners_and_appends_ours() {
    let mut existing = object("csisc-1", "10Gi", Some("1Gi"));
    let foreign = OwnerReference {
        name: "other".into(),
        ..owner()
    };
    existing.metadata.owner_references = Some(vec![foreign.clone()]);
    let Step::Update(updated) = decide(
        &key("fast", "a"),
        capacity(gib(4), None),
        Some(&existing),
        &template(),
    ) else {
        panic!("update expected");
    };
    assert_eq!(updated.metadata.name.as_deref(), Some("csisc-1"));
    assert_eq!(updated.metadata.resource_version.as_deref(), Some("7"));
    assert_eq!(updated.capacity, Some(Quantity("4Gi".into())));
    assert_eq!(updated.maximum_volume_size, None);
    assert_eq!(
        updated.metadata.owner_references,
        Some(vec![foreign, owner()])
    );
}

#[test]
fn malformed_get_capacity_answers_are_refused() {
    let response = |available, max| GetCapacityResponse {
        available_capacity: available,
        maximum_volume_size: max,
        minimum_volume_size: None,
    };
    assert_eq!(
        capacity_of(&response(-1, None)),
        Err(BadResponse::NegativeCapacity(-1))
    );
    assert_eq!(
        capacity_of(&response(5, Some(-5))),
        Err(BadResponse::NegativeMaximum(-5))
    );
    assert_eq!(capacity_of(&response(0, None)), Ok(capacity(0, None)));
    assert_eq!(
        capacity_of(&response(gib(2), Some(gib(1)))),
        Ok(capacity(gib(2), Some(gib(1))))
    );
}

#[test]
fn unwanted_foreign_shaped_and_duplicate_objects_are_obsolete() {
    let desired = BTreeSet::from([key("fast", "a"), key("fast", "b")]);
    let mut other_zone = object("csisc-3", "1Gi", None);
    other_zone.node_topology = Some(LabelSelector {
        match_labels: Some(seg(&[(ZONE, "gone")])),
        match_expressions: None,
    });
    let mut expression = object("csisc-4", "1Gi", None);
    expression.node_topology = Some(LabelSelector {
        match_labels: Some(seg(&[(ZONE, "a")])),
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: ZONE.into(),
            operator: "Exists".into(),
            values: None,
        }]),
    });
    let mut deleting = object("csisc-5", "1Gi", None);
    deleting.node_topology = other_zone.node_topology.clone();
    deleting.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
    let objects = [
        object("csisc-2", "1Gi", None),
        object("csisc-1", "1Gi", None),
        other_zone,
        expression,
        deleting,
    ];
    assert_eq!(
        obsolete(&objects, &desired, &template()),
        Obsolete {
            names: vec!["csisc-2".into(), "csisc-3".into(), "csisc-4".into()],
            current: 1,
        }
    );
}

/// Node mode: objects of another node's instance (its own `managed-by` value) or of another
/// manager are never ours to delete, not even when their key is unwanted here or duplicates
/// ours; ours are judged as in central mode.
#[test]
fn in_node_mode_only_objects_with_our_managed_by_label_can_be_obsolete() {
    let node_a = Template {
        managed_by: managed_by(Some("node-a")),
        ..template()
    };
    let labelled = |name: &str, zone: &str, managed: &str| {
        let mut o = new_object(&key("fast", zone), capacity(0, None), &node_a);
        o.metadata.name = Some(name.into());
        o.metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(MANAGED_BY_LABEL.into(), managed.into());
        o
    };
    let mut unlabelled = labelled("csisc-9", "b", "x");
    unlabelled.metadata.labels = None;
    let desired = BTreeSet::from([key("fast", "a")]);
    let objects = [
        labelled("csisc-1", "a", "external-provisioner-node-a"),
        // Another node's object for another segment, and one duplicating our key.
        labelled("csisc-2", "b", "external-provisioner-node-b"),
        labelled("csisc-3", "a", "external-provisioner-node-b"),
        // The central instance's object.
        labelled("csisc-4", "b", MANAGED_BY),
        unlabelled,
        // Ours, but for a segment this node does not have (its topology changed).
        labelled("csisc-5", "b", "external-provisioner-node-a"),
    ];
    assert_eq!(
        obsolete(&objects, &desired, &node_a),
        Obsolete {
            names: vec!["csisc-5".into()],
            current: 1,
        }
    );
}

#[test]
fn the_segments_are_the_clusters_centrally_and_this_nodes_alone_in_node_mode() {
    let nodes = [node("n1", &[(ZONE, "a")]), node("n2", &[(ZONE, "b")])];
    let keys: &[&str] = &[ZONE];
    let csinodes = [
        csinode("n1", DRIVER, Some(keys)),
        csinode("n2", DRIVER, Some(keys)),
    ];
    let rows = [
        (
            SegmentSource::Cluster,
            vec![seg(&[(ZONE, "a")]), seg(&[(ZONE, "b")])],
        ),
        // The caches are not consulted: a node's segment need not be among them.
        (
            SegmentSource::Node(seg(&[(ZONE, "c")])),
            vec![seg(&[(ZONE, "c")])],
        ),
        // A driver without topology on this node: the one empty segment.
        (SegmentSource::Node(Segment::new()), vec![Segment::new()]),
    ];
    for (source, want) in rows {
        let got: Vec<Segment> = wanted_segments(&source, DRIVER, &csinodes, &nodes)
            .into_iter()
            .collect();
        assert_eq!(got, want, "{source:?}");
    }
}

#[test]
fn fnv1a_32_matches_gos_fnv_new32a() {
    assert_eq!(fnv1a_32(b""), 0x811c_9dc5);
    assert_eq!(fnv1a_32(b"a"), 0xe40c_292c);
    assert_eq!(fnv1a_32(b"foobar"), 0xbf9c_f968);
}

#[test]
fn the_managed_by_value_names_the_node_and_fits_a_label() {
    let long = "n".repeat(60);
    let long_hashed = managed_by(Some(&long));
    let other_long = managed_by(Some(&format!("{long}x")));
    let rows: [(Option<&str>, &str); 3] = [
        (None, "external-provisioner"),
        (Some("node-a"), "external-provisioner-node-a"),
        // Exactly 63 characters: kept as it is.
        (
            Some("n234567890123456789012345678901234567890-2"),
            "external-provisioner-n234567890123456789012345678901234567890-2",
        ),
    ];
    for (node, want) in rows {
        assert_eq!(managed_by(node), want, "{node:?}");
    }
    assert!(long_hashed.len() <= 63, "{long_hashed}");
    assert!(
        long_hashed.ends_with(&format!("-{:x}", fnv1a_32(long.as_bytes()))),
        "{long_hashed}"
    );
    assert!(
        long_hashed.starts_with("external-provisioner-nnnn"),
        "{long_hashed}"
    );
    assert_ne!(
        long_hashed, other_long,
        "distinct nodes keep distinct values"
    );
    assert_eq!(managed_by(Some(&long)), long_hashed, "stable");
    // A cut that would end in `-` or `.` is trimmed back to an alphanumeric character.
    // (20 for `external-provisioner`, 2 dashes, at most 8 hex digits: 33 of the node name fit.)
    let dotted = managed_by(Some(&format!("{}.{}", "a".repeat(32), "b".repeat(40))));
    assert!(dotted.len() <= 63, "{dotted}");
    assert!(!dotted.contains(".-"), "{dotted}");
    assert!(
        dotted.starts_with(&format!("external-provisioner-{}-", "a".repeat(32))),
        "{dotted}"
    );
    // A malformed, non-ASCII node name is cut at a character boundary, not kept whole.
    // (The 33rd byte falls inside the `é`.)
    let unicode = managed_by(Some(&format!("{}é{}", "a".repeat(32), "a".repeat(40))));
    assert!(unicode.len() <= 63, "{unicode}");
    assert!(
        unicode.starts_with(&format!("external-provisioner-{}-", "a".repeat(32))),
        "{unicode}"
    );
}

#[test]
fn unchanged_keys_are_polled_less_often_and_a_change_resets_the_interval() {
    let base = Duration::from_mins(1);
    let rows = [
        (None, false, base),
        (None, true, base),
        (Some(base), false, base * 2),
        (Some(base * 4), false, base * 8),
        (Some(base * 8), false, base * 8),
        (Some(base * 8), true, base),
    ];
    for (previous, changed, want) in rows {
        assert_eq!(
            next_interval(previous, changed, base),
            want,
            "{previous:?} {changed}"
        );
    }
    assert_eq!(jittered(base, 0.0), Duration::from_secs(54));
    assert_eq!(jittered(base, 0.5), base);
    assert!(jittered(base, 0.999) < Duration::from_secs(66));
}

fn volume(driver: &str, class: &str, zones: Option<&[&str]>) -> PersistentVolume {
    PersistentVolume {
        spec: Some(PersistentVolumeSpec {
            storage_class_name: Some(class.into()),
            csi: Some(CSIPersistentVolumeSource {
                driver: driver.into(),
                volume_handle: "h".into(),
                ..CSIPersistentVolumeSource::default()
            }),
            node_affinity: zones.map(|zones| VolumeNodeAffinity {
                required: Some(NodeSelector {
                    node_selector_terms: zones
                        .iter()
                        .map(|z| NodeSelectorTerm {
                            match_expressions: Some(vec![NodeSelectorRequirement {
                                key: ZONE.into(),
                                operator: "In".into(),
                                values: Some(vec![(*z).to_owned()]),
                            }]),
                            match_fields: None,
                        })
                        .collect(),
                }),
            }),
            ..PersistentVolumeSpec::default()
        }),
        ..PersistentVolume::default()
    }
}

#[test]
fn a_volume_refreshes_the_keys_of_its_class_in_its_segments() {
    let desired = BTreeSet::from([
        key("fast", "a"),
        key("fast", "b"),
        key("fast", "c"),
        key("slow", "a"),
    ]);
    let zones = |v: &PersistentVolume| {
        keys_for_volume(v, DRIVER, &desired)
            .into_iter()
            .map(|k| format!("{}/{}", k.class, k.segment[ZONE]))
            .collect::<Vec<_>>()
    };
    assert_eq!(zones(&volume(DRIVER, "fast", Some(&["a"]))), ["fast/a"]);
    assert_eq!(
        zones(&volume(DRIVER, "fast", Some(&["a", "c"]))),
        ["fast/a", "fast/c"]
    );
    assert_eq!(
        zones(&volume(DRIVER, "fast", None)),
        ["fast/a", "fast/b", "fast/c"]
    );
    assert!(zones(&volume("other.csi.k8s.io", "fast", None)).is_empty());
    assert!(zones(&volume(DRIVER, "unknown", None)).is_empty());
}

fn named(name: &str, resource_version: Option<&str>) -> CSIStorageCapacity {
    CSIStorageCapacity {
        metadata: ObjectMeta {
            name: Some(name.into()),
            resource_version: resource_version.map(Into::into),
            ..ObjectMeta::default()
        },
        ..CSIStorageCapacity::default()
    }
}

#[test]
fn a_tombstone_buries_the_states_its_deletion_ended() {
    // (deleted name, its resourceVersion, written name, its resourceVersion, buried)
    let cases = [
        ("csisc-a", Some("12"), "csisc-a", Some("11"), true),
        ("csisc-a", Some("12"), "csisc-a", Some("12"), true),
        // Written after the deletion: a later object of that name.
        ("csisc-a", Some("12"), "csisc-a", Some("13"), false),
        ("csisc-a", Some("12"), "csisc-b", Some("11"), false),
        ("csisc-a", None, "csisc-a", Some("11"), true),
        ("csisc-a", Some("12"), "csisc-a", Some("not-a-number"), true),
        ("csisc-a", None, "csisc-b", None, false),
    ];
    for (deleted, deleted_rv, written, written_rv, buried) in cases {
        let tombstone = Tombstone::of(&named(deleted, deleted_rv)).unwrap();
        assert_eq!(
            tombstone.buries(&named(written, written_rv)),
            buried,
            "{deleted}@{deleted_rv:?} vs {written}@{written_rv:?}"
        );
    }
    assert_eq!(Tombstone::of(&CSIStorageCapacity::default()), None);
}
