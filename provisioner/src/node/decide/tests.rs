use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PersistentVolumeClaim,
    VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::StorageClass;

use super::*;

/// A claim with at most one annotation.
fn claim(annotation: Option<(&str, &str)>) -> PersistentVolumeClaim {
    let mut claim = PersistentVolumeClaim::default();
    if let Some((key, value)) = annotation {
        claim.metadata.annotations = Some(BTreeMap::from([(key.to_owned(), value.to_owned())]));
    }
    claim
}

fn class(binding: Option<&str>) -> StorageClass {
    StorageClass {
        volume_binding_mode: binding.map(str::to_owned),
        ..StorageClass::default()
    }
}

/// (annotation, binding mode, `--node-deployment-immediate-binding`, expected).
type Case<'a> = (Option<(&'a str, &'a str)>, Option<&'a str>, bool, Ownership);

#[test]
fn ownership_follows_upstream_check_node() {
    let selected = "volume.kubernetes.io/selected-node";
    let alpha = "volume.alpha.kubernetes.io/selected-node";
    let immediate = Some("Immediate");
    let late = Some("WaitForFirstConsumer");
    // (annotations, binding mode, immediate binding flag, expected)
    let cases: [Case<'_>; 12] = [
        (Some((selected, "n1")), late, true, Ownership::Mine),
        (Some((selected, "n1")), immediate, false, Ownership::Mine),
        (Some((selected, "n2")), late, true, Ownership::NotMine),
        (Some((selected, "n2")), immediate, true, Ownership::NotMine),
        (None, late, true, Ownership::NotMine),
        (Some((selected, "")), late, true, Ownership::NotMine),
        (None, immediate, true, Ownership::Race),
        (Some((selected, "")), immediate, true, Ownership::Race),
        (None, immediate, false, Ownership::NotMine),
        // Upstream reads only the GA annotation here.
        (Some((alpha, "n1")), late, true, Ownership::NotMine),
        (Some((alpha, "n2")), immediate, true, Ownership::Race),
        // No binding mode is not Immediate for upstream's checkNode.
        (None, None, true, Ownership::NotMine),
    ];
    for (annotations, binding, immediate_binding, want) in cases {
        assert_eq!(
            ownership(
                "n1",
                immediate_binding,
                &claim(annotations),
                &class(binding)
            ),
            want,
            "{annotations:?} {binding:?} {immediate_binding}"
        );
    }
}

#[test]
fn claim_delay_doubles_to_the_cap_minus_up_to_one_base_of_jitter() {
    let base = Duration::from_secs(20);
    let max = Duration::from_mins(1);
    let cases = [
        (0, 0.0, Duration::from_secs(20)),
        (0, 1.0, Duration::ZERO),
        (0, 0.5, Duration::from_secs(10)),
        (1, 0.0, Duration::from_secs(40)),
        (1, 0.25, Duration::from_secs(35)),
        (2, 0.0, Duration::from_mins(1)),
        (2, 1.0, Duration::from_secs(40)),
        (40, 0.0, Duration::from_mins(1)),
        // Out-of-range jitter is clamped.
        (0, 7.0, Duration::ZERO),
        (0, -1.0, Duration::from_secs(20)),
    ];
    for (attempt, jitter, want) in cases {
        assert_eq!(
            claim_delay(attempt, base, max, jitter),
            want,
            "{attempt} {jitter}"
        );
    }
    assert_eq!(
        claim_delay(3, Duration::ZERO, Duration::ZERO, 0.5),
        Duration::ZERO
    );
}

#[test]
fn capacity_suffices_when_any_topology_has_room() {
    assert!(capacity_suffices(0, &[]));
    assert!(capacity_suffices(10, &[5, 10]));
    assert!(!capacity_suffices(11, &[5, 10]));
    assert!(!capacity_suffices(1, &[]));
}

fn requirement(key: &str, operator: &str, values: &[&str]) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.into(),
        operator: operator.into(),
        values: Some(values.iter().map(|v| (*v).to_owned()).collect()),
    }
}

fn affinity(terms: Vec<Vec<NodeSelectorRequirement>>) -> VolumeNodeAffinity {
    VolumeNodeAffinity {
        required: Some(NodeSelector {
            node_selector_terms: terms
                .into_iter()
                .map(|expressions| NodeSelectorTerm {
                    match_expressions: Some(expressions),
                    match_fields: None,
                })
                .collect(),
        }),
    }
}

#[test]
fn volumes_are_accessible_where_their_node_affinity_matches_the_node_topology() {
    let node = BTreeMap::from([
        ("topology/node".to_owned(), "n1".to_owned()),
        ("topology/rack".to_owned(), "7".to_owned()),
    ]);
    let key = "topology/node";
    let cases = [
        (affinity(vec![vec![requirement(key, "In", &["n1"])]]), true),
        (affinity(vec![vec![requirement(key, "In", &["n2"])]]), false),
        (
            affinity(vec![
                vec![requirement(key, "In", &["n2"])],
                vec![requirement(key, "In", &["n1"])],
            ]),
            true,
        ),
        (
            affinity(vec![vec![
                requirement(key, "In", &["n1"]),
                requirement("topology/rack", "In", &["8"]),
            ]]),
            false,
        ),
        (
            affinity(vec![vec![requirement(key, "NotIn", &["n2"])]]),
            true,
        ),
        (
            affinity(vec![vec![requirement("zone", "Exists", &[])]]),
            false,
        ),
        (
            affinity(vec![vec![requirement("zone", "DoesNotExist", &[])]]),
            true,
        ),
        (
            affinity(vec![vec![requirement("topology/rack", "Gt", &["6"])]]),
            true,
        ),
        (
            affinity(vec![vec![requirement("topology/rack", "Lt", &["6"])]]),
            false,
        ),
        (
            affinity(vec![vec![requirement(key, "Near", &["n1"])]]),
            false,
        ),
        // An empty term matches nothing.
        (affinity(vec![vec![]]), false),
    ];
    for (affinity, want) in cases {
        assert_eq!(
            volume_is_accessible(Some(&affinity), &node),
            want,
            "{affinity:?}"
        );
    }
    // No affinity: accessible everywhere (upstream).
    assert!(volume_is_accessible(None, &node));
    assert!(volume_is_accessible(
        Some(&VolumeNodeAffinity { required: None }),
        &node
    ));
}

#[test]
fn volumes_without_affinity_are_deleted_by_the_node_their_identity_names() {
    let node = BTreeMap::from([("topology/node".to_owned(), "n1".to_owned())]);
    let here = affinity(vec![vec![requirement("topology/node", "In", &["n1"])]]);
    let there = affinity(vec![vec![requirement("topology/node", "In", &["n2"])]]);
    let driver = "d.example.com";
    let cases = [
        // Affinity decides when there is one, whatever the identity says.
        (Some(&here), Some("1-2-d.example.com-n2"), true),
        (Some(&there), Some("1-2-d.example.com-n1"), false),
        // No affinity: the node in the identity.
        (None, Some("1700000000000-42-d.example.com-n1"), true),
        (None, Some("1700000000000-42-d.example.com-n2"), false),
        (None, Some("1700000000000-42-d.example.com-x-n1"), false),
        // No node in the identity (central provisioner, static PV, other driver): everyone, as
        // upstream.
        (None, Some("1700000000000-42-d.example.com"), true),
        (None, Some("1700000000000-42-other.example.com-n2"), true),
        (None, Some("not-an-identity-d.example.com-n2"), true),
        (None, None, true),
    ];
    for (affinity, identity, want) in cases {
        assert_eq!(
            may_delete(affinity, identity, driver, "n1", &node),
            want,
            "{identity:?} {affinity:?}"
        );
    }
}
