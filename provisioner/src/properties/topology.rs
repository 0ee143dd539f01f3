//! Topology (spec §4.4, CSI spec `TopologyRequirement`): the CreateVolume accessibility
//! requirement from allowedTopologies, the selected node, `--strict-topology`,
//! `--immediate-topology` and the CSINode/Node labels; and the PV node affinity from the
//! driver's accessible topology. No panic for any cluster; what is sent obeys the CSI spec
//! (preferred is a subset of requisite) and upstream's rules (requisite comes from the class or
//! from nodes that exist; strict topology sends the selected node's topology alone).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::{Node, TopologySelectorLabelRequirement, TopologySelectorTerm};
use k8s_openapi::api::storage::v1::{CSINode, CSINodeDriver, CSINodeSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use proptest::prelude::*;
use proto::csi::v1::Topology;

use super::{config, hostile};
use crate::topology::{
    RequirementInputs, TopologyError, TopologyView, accessibility_requirements, node_affinity,
};

const DRIVER: &str = "csi.example.com";
/// Few keys and values, so that nodes, CSINodes and classes meet.
const KEYS: [&str; 3] = [
    "topology.example.com/zone",
    "topology.example.com/rack",
    "kubernetes.io/hostname",
];
const VALUES: [&str; 3] = ["a", "b", "c"];

fn label_key() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => proptest::sample::select(KEYS.to_vec()).prop_map(str::to_owned),
        1 => hostile(),
    ]
}

fn label_value() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => proptest::sample::select(VALUES.to_vec()).prop_map(str::to_owned),
        1 => hostile(),
    ]
}

/// A node's labels: mostly values for the topology keys, sometimes missing, plus anything.
fn labels() -> impl Strategy<Value = BTreeMap<String, String>> {
    (
        proptest::collection::vec(proptest::option::weighted(0.85, label_value()), KEYS.len()),
        proptest::collection::btree_map(hostile(), hostile(), 0..2),
    )
        .prop_map(|(values, extra)| {
            let mut labels = extra;
            for (key, value) in KEYS.iter().zip(values) {
                if let Some(value) = value {
                    labels.insert((*key).to_owned(), value);
                }
            }
            labels
        })
}

/// A node's CSINode entry: the driver with the cluster's keys (most nodes), the driver with
/// other keys (duplicated, hostile, none), only another driver, or no CSINode at all.
#[derive(Debug, Clone)]
enum Registration {
    Cluster,
    Keys(Option<Vec<String>>),
    OtherDriver,
    Missing,
}

fn registration() -> impl Strategy<Value = Registration> {
    prop_oneof![
        6 => Just(Registration::Cluster),
        1 => proptest::option::of(proptest::collection::vec(label_key(), 0..3))
            .prop_map(Registration::Keys),
        1 => Just(Registration::OtherDriver),
        1 => Just(Registration::Missing),
    ]
}

fn csinode(name: &str, driver: &str, keys: Option<Vec<String>>) -> CSINode {
    CSINode {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        spec: CSINodeSpec {
            drivers: vec![CSINodeDriver {
                name: driver.to_owned(),
                node_id: name.to_owned(),
                topology_keys: keys,
                allocatable: None,
            }],
        },
    }
}

/// Two to five nodes `n0`..`n4` (some without a Node object) with their CSINodes; the
/// driver's topology keys are one subset of [`KEYS`] for the cluster, as a driver reports the
/// same keys everywhere.
fn cluster() -> impl Strategy<Value = (Vec<Node>, Vec<CSINode>)> {
    (
        proptest::sample::subsequence(KEYS.to_vec(), 1..=2),
        proptest::collection::vec(
            (proptest::option::weighted(0.9, labels()), registration()),
            2..6,
        ),
    )
        .prop_map(|(keys, members)| {
            let keys: Vec<String> = keys.into_iter().map(str::to_owned).collect();
            let mut nodes = Vec::new();
            let mut csinodes = Vec::new();
            for (i, (labels, registration)) in members.into_iter().enumerate() {
                let name = format!("n{i}");
                if let Some(labels) = labels {
                    nodes.push(Node {
                        metadata: ObjectMeta {
                            name: Some(name.clone()),
                            labels: Some(labels),
                            ..ObjectMeta::default()
                        },
                        ..Node::default()
                    });
                }
                match registration {
                    Registration::Cluster => {
                        csinodes.push(csinode(&name, DRIVER, Some(keys.clone())));
                    }
                    Registration::Keys(own) => csinodes.push(csinode(&name, DRIVER, own)),
                    Registration::OtherDriver => {
                        csinodes.push(csinode(&name, "other.example.com", Some(keys.clone())));
                    }
                    Registration::Missing => {}
                }
            }
            (nodes, csinodes)
        })
}

/// allowedTopologies as kube-apiserver admits them: distinct keys per term, at least one value
/// per expression (`ValidateTopologySelectorTerm`).
fn valid_allowed() -> impl Strategy<Value = Vec<TopologySelectorTerm>> {
    let term = proptest::collection::btree_map(
        proptest::sample::select(KEYS.to_vec()).prop_map(str::to_owned),
        proptest::collection::vec(label_value(), 1..3),
        1..3,
    )
    .prop_map(|expressions| TopologySelectorTerm {
        match_label_expressions: Some(
            expressions
                .into_iter()
                .map(|(key, values)| TopologySelectorLabelRequirement { key, values })
                .collect(),
        ),
    });
    prop_oneof![Just(Vec::new()), proptest::collection::vec(term, 1..3)]
}

/// allowedTopologies kube-apiserver would refuse: duplicate keys, no values, no expressions.
fn any_allowed() -> impl Strategy<Value = Vec<TopologySelectorTerm>> {
    let term = proptest::option::of(proptest::collection::vec(
        (label_key(), proptest::collection::vec(label_value(), 0..3))
            .prop_map(|(key, values)| TopologySelectorLabelRequirement { key, values }),
        0..3,
    ))
    .prop_map(|match_label_expressions| TopologySelectorTerm {
        match_label_expressions,
    });
    proptest::collection::vec(term, 0..3)
}

/// Everything the requirement depends on.
#[derive(Debug, Clone)]
struct Case {
    nodes: Vec<Node>,
    csinodes: Vec<CSINode>,
    allowed: Vec<TopologySelectorTerm>,
    selected: Option<String>,
    strict: bool,
    immediate: bool,
    pvc_name: String,
}

fn case(allowed: impl Strategy<Value = Vec<TopologySelectorTerm>>) -> impl Strategy<Value = Case> {
    let node = proptest::sample::select(vec!["n0", "n1", "n2", "n3", "n4"]).prop_map(str::to_owned);
    (
        cluster(),
        allowed,
        proptest::option::of(prop_oneof![6 => node, 1 => hostile()]),
        any::<bool>(),
        any::<bool>(),
        prop_oneof!["[a-z]{1,8}-[a-z]{1,8}-[0-9]{1,10}", hostile()],
    )
        .prop_map(
            |((nodes, csinodes), allowed, selected, strict, immediate, pvc_name)| Case {
                nodes,
                csinodes,
                allowed,
                selected,
                strict,
                immediate,
                pvc_name,
            },
        )
}

impl Case {
    fn requirement(&self) -> Result<Option<proto::csi::v1::TopologyRequirement>, TopologyError> {
        accessibility_requirements(&RequirementInputs {
            driver_name: DRIVER,
            pvc_name: &self.pvc_name,
            allowed_topologies: &self.allowed,
            selected_node: self.selected.as_deref(),
            strict_topology: self.strict,
            immediate_topology: self.immediate,
            view: TopologyView {
                nodes: &self.nodes,
                csinodes: &self.csinodes,
            },
        })
    }

    /// Whether kube-apiserver admits the class's allowedTopologies: no key twice in a term.
    fn admissible(&self) -> bool {
        self.allowed.iter().all(|term| {
            let keys: Vec<&String> = term
                .match_label_expressions
                .iter()
                .flatten()
                .map(|e| &e.key)
                .collect();
            keys.iter().collect::<BTreeSet<_>>().len() == keys.len()
        })
    }

    /// The labels of the first Node with this name (the view's lookup).
    fn labels(&self, name: &str) -> BTreeMap<String, String> {
        self.nodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(name))
            .and_then(|n| n.metadata.labels.clone())
            .unwrap_or_default()
    }

    /// Whether the topology is one of the flattened allowedTopologies terms: exactly the keys
    /// of one selector term, each with one of its values.
    fn allowed_contains(&self, topology: &Topology) -> bool {
        self.allowed.iter().any(|term| {
            let expressions = term.match_label_expressions.as_deref().unwrap_or_default();
            expressions.len() == topology.segments.len()
                && expressions.iter().all(|e| {
                    topology
                        .segments
                        .get(&e.key)
                        .is_some_and(|v| e.values.contains(v))
                })
        })
    }
}

fn segments(topology: &Topology) -> BTreeMap<&String, &String> {
    topology.segments.iter().collect()
}

/// Whether `labels` satisfy every segment.
fn satisfies(labels: &BTreeMap<String, String>, topology: &Topology) -> bool {
    topology
        .segments
        .iter()
        .all(|(k, v)| labels.get(k) == Some(v))
}

proptest! {
    #![proptest_config(config(1000))]

    /// Any objects, valid or not: no panic, the same answer twice, and a requirement that
    /// obeys the CSI spec: requisite non-empty without empty topologies, and preferred the
    /// same topologies (upstream sends all of requisite as preferred, rotated). Without
    /// duplicates too, unless a selector term names a key twice: kube-apiserver refuses such
    /// a class (`ValidateTopologySelectorTerm`); upstream then sends `zone=a AND zone=b` as
    /// `{zone: b}`, possibly twice, and so does this provisioner.
    #[test]
    fn any_cluster_gives_a_well_formed_requirement_or_an_error(case in case(any_allowed())) {
        let requirement = case.requirement();
        prop_assert_eq!(&requirement, &case.requirement(), "not deterministic");
        if let Ok(Some(requirement)) = requirement {
            prop_assert!(!requirement.requisite.is_empty());
            prop_assert!(requirement.requisite.iter().all(|t| !t.segments.is_empty()));
            prop_assert_eq!(requirement.preferred.len(), requirement.requisite.len());
            let requisite: BTreeSet<_> = requirement.requisite.iter().map(segments).collect();
            let preferred: BTreeSet<_> = requirement.preferred.iter().map(segments).collect();
            if case.admissible() {
                prop_assert_eq!(requisite.len(), requirement.requisite.len(), "duplicates");
            }
            prop_assert_eq!(preferred, requisite);
        }
    }

    /// With objects the API server admits: requisite comes from the class's allowedTopologies
    /// when it has some, else from Nodes that exist; a selected node is the first preferred
    /// topology; `--strict-topology` sends the node's topology alone; without a selected node,
    /// allowedTopologies and `--immediate-topology`, nothing is sent.
    #[test]
    fn the_requirement_follows_the_class_the_nodes_and_the_selected_node(
        case in case(valid_allowed()),
    ) {
        let Ok(requirement) = case.requirement() else {
            return Ok(());
        };
        let Some(requirement) = requirement else {
            prop_assert!(
                case.selected.is_none() && case.allowed.is_empty() && !case.immediate,
                "no requirement for {case:?}"
            );
            return Ok(());
        };
        let selected = case.selected.as_deref().map(|name| case.labels(name));
        if let Some(labels) = &selected {
            prop_assert!(satisfies(labels, &requirement.preferred[0]), "{requirement:?}");
            if case.strict {
                prop_assert_eq!(requirement.requisite.len(), 1);
                prop_assert_eq!(&requirement.preferred, &requirement.requisite);
            }
        }
        let strict_node = selected.is_some() && case.strict;
        for topology in &requirement.requisite {
            if !case.allowed.is_empty() && !strict_node {
                prop_assert!(case.allowed_contains(topology), "{topology:?} not allowed");
            } else {
                let on_a_node = case.nodes.iter().any(|n| {
                    n.metadata.labels.as_ref().is_some_and(|l| satisfies(l, topology))
                });
                prop_assert!(on_a_node, "{topology:?} is on no node");
            }
        }
    }

    /// A selected node without a CSINode entry for the driver, or without the labels its keys
    /// name, is an error (the scheduler must pick again), never a requirement that ignores it.
    #[test]
    fn a_selected_node_the_driver_is_not_on_is_an_error(case in case(valid_allowed())) {
        let Some(node) = case.selected.as_deref() else {
            return Ok(());
        };
        let keys: Vec<String> = case
            .csinodes
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(node))
            .and_then(|c| c.spec.drivers.iter().find(|d| d.name == DRIVER))
            .and_then(|d| d.topology_keys.clone())
            .unwrap_or_default();
        let labels = case.labels(node);
        if keys.is_empty() || keys.iter().any(|k| !labels.contains_key(k)) {
            prop_assert!(case.requirement().is_err());
        }
    }

    /// PV node affinity: one non-empty term per distinct non-empty topology (OR), each
    /// segment `In [value]`; none when the driver reported no usable topology (an affinity
    /// without terms is refused by kube-apiserver).
    #[test]
    fn node_affinity_has_one_term_per_distinct_topology(
        accessible in proptest::collection::vec(
            proptest::collection::hash_map(label_key(), label_value(), 0..3),
            0..6,
        ),
    ) {
        let topologies: Vec<Topology> = accessible
            .into_iter()
            .map(|segments: HashMap<String, String>| Topology { segments })
            .collect();
        let distinct: BTreeSet<BTreeMap<&String, &String>> = topologies
            .iter()
            .filter(|t| !t.segments.is_empty())
            .map(segments)
            .collect();
        match node_affinity(&topologies) {
            None => prop_assert!(distinct.is_empty()),
            Some(affinity) => {
                let terms = affinity.required.map(|r| r.node_selector_terms).unwrap_or_default();
                prop_assert_eq!(terms.len(), distinct.len());
                let made: BTreeSet<BTreeMap<String, String>> = terms
                    .iter()
                    .map(|term| {
                        term.match_expressions
                            .iter()
                            .flatten()
                            .map(|r| {
                                assert_eq!(r.operator, "In");
                                let values = r.values.clone().unwrap_or_default();
                                assert_eq!(values.len(), 1);
                                (r.key.clone(), values[0].clone())
                            })
                            .collect()
                    })
                    .collect();
                let wanted: BTreeSet<BTreeMap<String, String>> = distinct
                    .iter()
                    .map(|t| t.iter().map(|(k, v)| ((*k).clone(), (*v).clone())).collect())
                    .collect();
                prop_assert_eq!(made, wanted);
            }
        }
    }
}
