//! Node deployment (spec §6.2, upstream `checkNode`, `becomeOwner`, `checkCapacity`,
//! `VolumeIsAccessible`): whatever the claims, classes and volumes hold, no two nodes both
//! own a claim, a node races only for an Immediate claim nobody took, the race's waits stay
//! within upstream's jittered exponential bounds, more room never turns a fit into a misfit,
//! and a volume a node deployment made is deleted by its own node only.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PersistentVolumeClaim,
    VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use proptest::prelude::*;

use super::{config, hostile};
use crate::annotations::ANN_SELECTED_NODE;
use crate::node::decide::{
    Ownership, capacity_suffices, claim_delay, may_delete, ownership, volume_is_accessible,
};

const DRIVER: &str = "csi.example.com";
const NODES: [&str; 3] = ["node-a", "node-b", "node-c"];

fn selected_node() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        2 => Just(None),
        1 => Just(Some(String::new())),
        4 => proptest::sample::select(&NODES[..]).prop_map(|n| Some(n.to_owned())),
        1 => Just(Some("node-z".to_owned())),
        1 => hostile().prop_map(Some),
    ]
}

fn binding_mode() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        Just(Some("Immediate".to_owned())),
        Just(Some("WaitForFirstConsumer".to_owned())),
        hostile().prop_map(Some),
    ]
}

/// A Go duration flag's range: 0 up to about 292 years (`time.Duration` is i64 nanoseconds).
fn go_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        4 => (0_u64..=600_000).prop_map(Duration::from_millis),
        1 => (0_u64..=i64::MAX.unsigned_abs()).prop_map(Duration::from_nanos),
    ]
}

/// A node's topology from NodeGetInfo.
fn topology() -> impl Strategy<Value = BTreeMap<String, String>> {
    proptest::collection::btree_map(
        prop_oneof!["zone", "rack", hostile()],
        prop_oneof!["a", "b", "10", hostile()],
        0..3,
    )
}

fn requirement() -> impl Strategy<Value = NodeSelectorRequirement> {
    (
        prop_oneof!["zone", "rack", hostile()],
        prop_oneof![
            4 => Just("In".to_owned()),
            1 => Just("NotIn".to_owned()),
            1 => Just("Exists".to_owned()),
            1 => Just("DoesNotExist".to_owned()),
            1 => Just("Gt".to_owned()),
            1 => Just("Lt".to_owned()),
            1 => hostile(),
        ],
        proptest::option::of(proptest::collection::vec(
            prop_oneof!["a", "b", "5", "20", hostile()],
            0..3,
        )),
    )
        .prop_map(|(key, operator, values)| NodeSelectorRequirement {
            key,
            operator,
            values,
        })
}

fn affinity() -> impl Strategy<Value = Option<VolumeNodeAffinity>> {
    proptest::option::weighted(
        0.7,
        proptest::option::weighted(
            0.9,
            proptest::collection::vec(
                proptest::option::of(proptest::collection::vec(requirement(), 0..3)),
                0..3,
            ),
        )
        .prop_map(|terms| VolumeNodeAffinity {
            required: terms.map(|terms| NodeSelector {
                node_selector_terms: terms
                    .into_iter()
                    .map(|expressions| NodeSelectorTerm {
                        match_expressions: expressions,
                        match_fields: None,
                    })
                    .collect(),
            }),
        }),
    )
}

/// A provisioner identity: a node deployment's `<millis>-<random>-<driver>-<node>`, the
/// central one, or anything.
fn identity() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        4 => proptest::sample::select(&NODES[..])
            .prop_map(|n| Some(format!("1732700000000-8081-{DRIVER}-{n}"))),
        1 => Just(Some("1732700000000-8081-csi.example.com".to_owned())),
        1 => Just(None),
        1 => hostile().prop_map(Some),
    ]
}

proptest! {
    #![proptest_config(config(2000))]

    /// At most one node owns a claim, the one its selected-node annotation names; a node races
    /// only for a claim nobody took, of an Immediate class, with immediate binding on.
    #[test]
    fn no_two_nodes_own_a_claim(
        selected in selected_node(),
        mode in binding_mode(),
        immediate_binding in any::<bool>(),
    ) {
        let claim = PersistentVolumeClaim {
            metadata: ObjectMeta {
                annotations: selected
                    .clone()
                    .map(|s| BTreeMap::from([(ANN_SELECTED_NODE.to_owned(), s)])),
                ..ObjectMeta::default()
            },
            ..PersistentVolumeClaim::default()
        };
        let class = StorageClass {
            provisioner: DRIVER.to_owned(),
            volume_binding_mode: mode.clone(),
            ..StorageClass::default()
        };
        let answers: Vec<Ownership> = NODES
            .iter()
            .map(|node| ownership(node, immediate_binding, &claim, &class))
            .collect();
        let mine = answers.iter().filter(|a| **a == Ownership::Mine).count();
        prop_assert!(mine <= 1, "{:?}", answers);
        let selected = selected.unwrap_or_default();
        for (node, answer) in NODES.iter().zip(&answers) {
            prop_assert_eq!(*answer == Ownership::Mine, selected == *node);
            if *answer == Ownership::Race {
                prop_assert!(selected.is_empty());
                prop_assert!(immediate_binding);
                prop_assert_eq!(mode.as_deref(), Some("Immediate"));
            }
        }
    }

    /// The wait before a try never exceeds `--node-deployment-max-delay` nor `base × 2^attempt`,
    /// is at most one base below the smaller of the two, and does not shrink from one attempt
    /// to the next; no flag value or attempt count panics.
    #[test]
    fn race_waits_grow_to_the_cap_with_at_most_one_base_of_jitter(
        base in go_duration(),
        max in go_duration(),
        attempt in prop_oneof![0_u32..70, Just(u32::MAX)],
        jitter in 0.0_f64..1.0,
    ) {
        let delay = claim_delay(attempt, base, max, jitter);
        let exponential = base
            .checked_mul(2_u32.saturating_pow(attempt))
            .unwrap_or(Duration::MAX);
        let ceiling = exponential.min(max);
        prop_assert!(delay <= ceiling, "{:?} above {:?}", delay, ceiling);
        prop_assert!(delay >= ceiling.saturating_sub(base));
        if attempt < u32::MAX {
            prop_assert!(claim_delay(attempt + 1, base, max, jitter) >= delay);
        }
    }

    /// A claim fits when a topology has room; more room, or another topology, never makes it
    /// stop fitting, and a smaller claim fits wherever a larger one does.
    #[test]
    fn more_room_never_turns_a_fit_into_a_misfit(
        requested in 0_i64..=i64::MAX,
        available in proptest::collection::vec(any::<i64>(), 0..4),
        more in any::<i64>(),
        smaller in 0_i64..=i64::MAX,
    ) {
        let fits = capacity_suffices(requested, &available);
        prop_assert_eq!(
            fits,
            requested == 0 || available.iter().any(|a| *a >= requested)
        );
        let mut wider = available.clone();
        wider.push(more);
        prop_assert!(!fits || capacity_suffices(requested, &wider));
        prop_assert!(!fits || capacity_suffices(smaller.min(requested), &available));
    }

    /// A node deployment's volume without node affinity is deleted by the node its identity
    /// names and by no other (upstream lets every node's instance delete it and leaks the
    /// storage); with node affinity, whoever the affinity admits, as upstream.
    #[test]
    fn only_the_node_that_made_a_volume_deletes_it(
        affinity in affinity(),
        identity in identity(),
        topology in topology(),
    ) {
        let deleters: Vec<&str> = NODES
            .iter()
            .copied()
            .filter(|node| may_delete(affinity.as_ref(), identity.as_deref(), DRIVER, node, &topology))
            .collect();
        let has_affinity = affinity.as_ref().and_then(|a| a.required.as_ref()).is_some();
        let made_by = identity
            .as_deref()
            .and_then(|i| NODES.iter().copied().find(|n| *i == format!("1732700000000-8081-{DRIVER}-{n}")));
        match made_by {
            Some(node) if !has_affinity => prop_assert_eq!(deleters, vec![node]),
            _ => {
                let accessible = volume_is_accessible(affinity.as_ref(), &topology);
                let expected = if accessible { NODES.to_vec() } else { Vec::new() };
                prop_assert_eq!(deleters, expected);
            }
        }
    }

    /// A volume pinned to exactly this node's topology (`In [value]` for each of its labels)
    /// is accessible here, and one that requires a label this node lacks is not.
    #[test]
    fn a_volume_is_accessible_where_its_affinity_names_the_nodes_topology(
        topology in topology(),
        missing in "[a-z]{1,8}\\.example\\.com/missing",
    ) {
        prop_assume!(!topology.contains_key(&missing));
        let term = |expressions: Vec<NodeSelectorRequirement>| VolumeNodeAffinity {
            required: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_expressions: Some(expressions),
                    match_fields: None,
                }],
            }),
        };
        let pinned: Vec<NodeSelectorRequirement> = topology
            .iter()
            .map(|(key, value)| NodeSelectorRequirement {
                key: key.clone(),
                operator: "In".to_owned(),
                values: Some(vec![value.clone()]),
            })
            .collect();
        // A term without expressions matches nothing (MatchNodeSelectorTerms).
        prop_assert_eq!(
            volume_is_accessible(Some(&term(pinned.clone())), &topology),
            !pinned.is_empty()
        );
        let mut lacking = pinned;
        lacking.push(NodeSelectorRequirement {
            key: missing,
            operator: "Exists".to_owned(),
            values: None,
        });
        prop_assert!(!volume_is_accessible(Some(&term(lacking)), &topology));
        prop_assert!(volume_is_accessible(None, &topology));
    }
}
