//! Capacity tracking (spec §2.7, upstream `capacity.go`): whatever GetCapacity answers and
//! whatever objects the cache holds, a decision writes an object that says what the driver
//! said and then leaves it alone (applying the decision twice writes once), deletes only our
//! own live objects and keeps exactly one per wanted key, polls within the bounds upstream
//! documents, and names a node's objects with a label value kube-apiserver accepts.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::storage::v1::CSIStorageCapacity;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta, OwnerReference, Time,
};
use k8s_openapi::jiff::Timestamp;
use proptest::prelude::*;
use std::time::Duration;

use super::{config, hostile};
use crate::capacity::decide::{
    Capacity, CapacityKey, DRIVER_LABEL, MANAGED_BY_LABEL, MAX_POLL_FACTOR, Segment, Step,
    Template, decide, jittered, key_of, managed_by, next_interval, obsolete,
};

const DRIVER: &str = "csi.example.com";

fn owner() -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".to_owned(),
        kind: "ReplicaSet".to_owned(),
        name: "csi-provisioner-abc".to_owned(),
        uid: "uid-rs".to_owned(),
        controller: Some(true),
        ..OwnerReference::default()
    }
}

fn template() -> impl Strategy<Value = Template> {
    (any::<bool>(), proptest::option::of("[a-z0-9]{1,20}")).prop_map(|(owned, node)| Template {
        namespace: "kube-system".to_owned(),
        driver: DRIVER.to_owned(),
        owner: owned.then(owner),
        managed_by: managed_by(node.as_deref()),
    })
}

fn segment() -> impl Strategy<Value = Segment> {
    proptest::collection::btree_map(
        prop_oneof![
            "topology.example.com/zone",
            "topology.example.com/rack",
            hostile()
        ],
        prop_oneof!["zone-[a-c]", hostile()],
        0..3,
    )
}

fn key() -> impl Strategy<Value = CapacityKey> {
    (segment(), prop_oneof!["gold", "silver", hostile()])
        .prop_map(|(segment, class)| CapacityKey { segment, class })
}

/// Byte counts as drivers report them: round numbers, odd ones, zero, the extremes.
fn bytes() -> impl Strategy<Value = i64> {
    prop_oneof![
        3 => (0_i64..=1 << 20).prop_map(|gib| gib << 30),
        2 => 0_i64..=i64::MAX,
        1 => Just(0_i64),
        1 => Just(i64::MAX),
    ]
}

fn capacity() -> impl Strategy<Value = Capacity> {
    (bytes(), proptest::option::of(bytes())).prop_map(|(available, maximum_volume_size)| Capacity {
        available,
        maximum_volume_size,
    })
}

/// A quantity an existing object may hold: what we would write, the same number spelled
/// differently, another number, or garbage another writer left.
fn stored_quantity() -> impl Strategy<Value = Option<Quantity>> {
    proptest::option::weighted(
        0.9,
        prop_oneof![
            2 => bytes().prop_map(|b| b.to_string()),
            1 => Just("1Gi".to_owned()),
            1 => Just("1073741824".to_owned()),
            1 => hostile(),
        ]
        .prop_map(Quantity),
    )
}

/// An object already in the cache for some key, with or without our owner.
fn existing() -> impl Strategy<Value = CSIStorageCapacity> {
    (
        stored_quantity(),
        stored_quantity(),
        proptest::collection::vec(
            prop_oneof![
                Just(owner()),
                Just(OwnerReference {
                    uid: "uid-other".to_owned(),
                    ..owner()
                }),
            ],
            0..3,
        ),
    )
        .prop_map(
            |(capacity, maximum_volume_size, owners)| CSIStorageCapacity {
                metadata: ObjectMeta {
                    name: Some("csisc-abcde".to_owned()),
                    namespace: Some("kube-system".to_owned()),
                    resource_version: Some("42".to_owned()),
                    owner_references: Some(owners),
                    ..ObjectMeta::default()
                },
                capacity,
                maximum_volume_size,
                storage_class_name: "gold".to_owned(),
                node_topology: None,
            },
        )
}

fn parsed(q: Option<&Quantity>) -> Option<i64> {
    q.map(|q| csi_common::quantity::parse_bytes(&q.0).expect("we wrote a quantity we cannot read"))
}

/// Kubernetes label value syntax (`validation.IsValidLabelValue`), written out independently.
fn valid_label_value(value: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    value.len() <= 63
        && (value.is_empty()
            || (value.starts_with(alnum)
                && value.ends_with(alnum)
                && value
                    .chars()
                    .all(|c| alnum(c) || c == '-' || c == '_' || c == '.')))
}

/// A node name kube-apiserver accepts: a DNS-1123 subdomain of up to 253 characters.
fn node_name() -> impl Strategy<Value = String> {
    proptest::collection::vec("[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", 1..5)
        .prop_map(|labels| labels.join("."))
        .prop_filter("at most 253 characters", |name| name.len() <= 253)
}

/// Objects in a namespace: ours or another manager's, live or being deleted, for a wanted key
/// or not, some with the same key.
fn objects() -> impl Strategy<Value = Vec<CSIStorageCapacity>> {
    proptest::collection::vec(
        (
            0_u8..20,
            prop_oneof!["gold", "silver", "bronze"],
            proptest::option::of(prop_oneof!["zone-a", "zone-b", "zone-c"]),
            proptest::bool::weighted(0.1),
            prop_oneof![
                6 => Just(Some(managed_by(None))),
                1 => Just(Some(managed_by(Some("node-1")))),
                1 => Just(None),
            ],
            proptest::bool::weighted(0.1),
        )
            .prop_map(|(n, class, zone, deleting, managed, expression)| {
                let mut labels = BTreeMap::from([(DRIVER_LABEL.to_owned(), DRIVER.to_owned())]);
                if let Some(managed) = managed {
                    labels.insert(MANAGED_BY_LABEL.to_owned(), managed);
                }
                CSIStorageCapacity {
                    metadata: ObjectMeta {
                        name: Some(format!("csisc-{n:02}")),
                        labels: Some(labels),
                        deletion_timestamp: deleting.then_some(Time(Timestamp::UNIX_EPOCH)),
                        ..ObjectMeta::default()
                    },
                    storage_class_name: class,
                    node_topology: Some(LabelSelector {
                        match_labels: zone.map(|z| BTreeMap::from([("zone".to_owned(), z)])),
                        match_expressions: expression.then(|| {
                            vec![LabelSelectorRequirement {
                                key: "zone".to_owned(),
                                operator: "Exists".to_owned(),
                                values: None,
                            }]
                        }),
                    }),
                    ..CSIStorageCapacity::default()
                }
            }),
        0..12,
    )
    // Names are unique in a namespace.
    .prop_map(|mut objects| {
        objects.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        objects.dedup_by(|a, b| a.metadata.name == b.metadata.name);
        objects
    })
}

fn wanted() -> impl Strategy<Value = BTreeSet<CapacityKey>> {
    proptest::collection::btree_set(
        (
            prop_oneof!["gold", "silver"],
            proptest::option::of(prop_oneof!["zone-a", "zone-b"]),
        )
            .prop_map(|(class, zone)| CapacityKey {
                segment: zone
                    .map(|z| BTreeMap::from([("zone".to_owned(), z)]))
                    .unwrap_or_default(),
                class,
            }),
        0..5,
    )
}

proptest! {
    #![proptest_config(config(2000))]

    /// What a decision writes says what the driver said, keeps the object's identity and the
    /// other owners, has ours, and is left alone by the next decision.
    #[test]
    fn an_object_is_written_once_with_the_drivers_numbers(
        key in key(),
        capacity in capacity(),
        existing in proptest::option::weighted(0.7, existing()),
        template in template(),
    ) {
        let step = decide(&key, capacity, existing.as_ref(), &template);
        let written = match step {
            Step::Keep => {
                let existing = existing.expect("kept an object that does not exist");
                prop_assert_eq!(
                    existing.capacity.as_ref().and_then(|q| csi_common::quantity::parse_bytes(&q.0).ok()),
                    Some(capacity.available)
                );
                existing
            }
            Step::Create(object) => {
                prop_assert!(existing.is_none(), "created a second object for a key");
                prop_assert_eq!(key_of(&object), Some(key.clone()));
                prop_assert_eq!(object.metadata.labels.clone(), Some(template.labels()));
                *object
            }
            Step::Update(object) => {
                let existing = existing.expect("updated an object that does not exist");
                prop_assert_eq!(&object.metadata.name, &existing.metadata.name);
                prop_assert_eq!(
                    &object.metadata.resource_version,
                    &existing.metadata.resource_version
                );
                let owners = object.metadata.owner_references.clone().unwrap_or_default();
                for other in existing.metadata.owner_references.iter().flatten() {
                    prop_assert!(owners.contains(other), "dropped owner {:?}", other);
                }
                *object
            }
        };
        if let Some(ours) = &template.owner {
            let owners = written.metadata.owner_references.clone().unwrap_or_default();
            prop_assert!(owners.contains(ours), "our owner reference is missing");
        }
        prop_assert_eq!(parsed(written.capacity.as_ref()), Some(capacity.available));
        prop_assert_eq!(
            parsed(written.maximum_volume_size.as_ref()),
            capacity.maximum_volume_size
        );
        prop_assert_eq!(decide(&key, capacity, Some(&written), &template), Step::Keep);
    }

    /// Only our own live objects are deleted, and each wanted key keeps exactly one object:
    /// the first by name among ours.
    #[test]
    fn obsolete_objects_are_ours_and_one_object_per_wanted_key_stays(
        objects in objects(),
        desired in wanted(),
    ) {
        let template = Template {
            namespace: "kube-system".to_owned(),
            driver: DRIVER.to_owned(),
            owner: None,
            managed_by: managed_by(None),
        };
        let result = obsolete(&objects, &desired, &template);
        let ours = template.labels();
        let is_ours = |o: &CSIStorageCapacity| {
            o.metadata.deletion_timestamp.is_none()
                && ours.iter().all(|(k, v)| {
                    o.metadata.labels.as_ref().and_then(|l| l.get(k)) == Some(v)
                })
        };
        let deleted: BTreeSet<&str> = result.names.iter().map(String::as_str).collect();
        prop_assert_eq!(deleted.len(), result.names.len(), "a name deleted twice");
        let mut kept: BTreeMap<CapacityKey, &str> = BTreeMap::new();
        for object in &objects {
            let name = object.metadata.name.as_deref().unwrap_or_default();
            if !is_ours(object) {
                prop_assert!(!deleted.contains(name), "deleted {} which is not ours", name);
                continue;
            }
            if deleted.contains(name) {
                continue;
            }
            let key = key_of(object);
            prop_assert!(
                key.as_ref().is_some_and(|k| desired.contains(k)),
                "kept {} for a key nobody wants", name
            );
            let key = key.unwrap_or_else(|| unreachable!());
            prop_assert!(
                kept.insert(key, name).is_none(),
                "two objects kept for one key"
            );
        }
        prop_assert_eq!(result.current, kept.len());
        // The survivor of each key is the first of our objects for it by name.
        for (key, name) in &kept {
            let first = objects
                .iter()
                .filter(|o| is_ours(o) && key_of(o).as_ref() == Some(key))
                .filter_map(|o| o.metadata.name.as_deref())
                .min();
            prop_assert_eq!(first, Some(*name));
        }
    }

    /// A node's `managed-by` value is a label value kube-apiserver accepts, names no other
    /// node, and is the same on every restart; no node name, however malformed, panics.
    #[test]
    fn managed_by_is_a_valid_label_value_unique_per_node(
        a in node_name(),
        b in node_name(),
        anything in hostile(),
    ) {
        let value = managed_by(Some(&a));
        prop_assert!(valid_label_value(&value), "{:?} for node {:?}", value, a);
        prop_assert_eq!(&value, &managed_by(Some(&a)));
        if a != b {
            prop_assert_ne!(&value, &managed_by(Some(&b)), "nodes {:?} and {:?}", a, b);
        }
        let hostile_value = managed_by(Some(&anything));
        prop_assert!(hostile_value.len() <= 63, "{:?} for {:?}", hostile_value, anything);
    }

    /// Polls of an unchanged key slow down to at most 8 intervals apart and a change goes
    /// back to the interval; the jitter stays within ±10 %.
    #[test]
    fn poll_intervals_stay_between_the_interval_and_eight_times_it(
        base_ms in 1_u64..=3_600_000,
        changes in proptest::collection::vec(any::<bool>(), 1..40),
        unit in prop_oneof![0.0_f64..1.0, Just(1.0), Just(-1.0), Just(f64::INFINITY)],
    ) {
        let base = Duration::from_millis(base_ms);
        let mut previous = None;
        for changed in changes {
            let next = next_interval(previous, changed, base);
            prop_assert!(next >= base && next <= base * MAX_POLL_FACTOR);
            if changed {
                prop_assert_eq!(next, base);
            }
            if let Some(previous) = previous && !changed {
                prop_assert!(next >= previous);
            }
            let spread = jittered(next, unit);
            prop_assert!(spread >= next.mul_f64(0.9) && spread <= next.mul_f64(1.1));
            previous = Some(next);
        }
    }
}
