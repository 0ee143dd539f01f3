use super::*;

#[test]
fn equal_values_share_one_copy_and_different_values_do_not() {
    let mut interner = Interner::default();
    let a = interner.str("ReadWriteOnce");
    let b = interner.str(&String::from("ReadWriteOnce"));
    let c = interner.str("ReadOnlyMany");
    assert!(Arc::ptr_eq(&a, &b));
    assert!(!Arc::ptr_eq(&a, &c));
    assert_eq!(&*c, "ReadOnlyMany");

    let l1 = interner.list(["ReadWriteOnce", "ReadOnlyMany"]);
    let owned = ["ReadWriteOnce".to_owned(), "ReadOnlyMany".to_owned()];
    let l2 = interner.list(owned.iter().map(String::as_str));
    let reversed = interner.list(["ReadOnlyMany", "ReadWriteOnce"]);
    assert!(Arc::ptr_eq(&l1, &l2));
    assert!(!Arc::ptr_eq(&l1, &reversed), "a list keeps its order");
    assert!(Arc::ptr_eq(&l1[0], &a), "the items are the shared strings");
    assert_eq!(to_vec(&reversed), ["ReadOnlyMany", "ReadWriteOnce"]);

    let map = BTreeMap::from([
        ("b".to_owned(), "2".to_owned()),
        ("a".to_owned(), String::new()),
    ]);
    let p1 = interner.pairs(map.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let p2 = interner.pairs([("a", ""), ("b", "2")]);
    assert!(Arc::ptr_eq(&p1, &p2));
    assert_eq!(to_map(&p1, str::to_owned), map);
    assert!(!Arc::ptr_eq(&p1, &interner.pairs([("a", ""), ("b", "3")])));

    // The empty list and map are values too (`finalizers: []` is not an absent list).
    assert!(interner.list([]).is_empty());
    assert!(interner.pairs([]).is_empty());
}

#[test]
fn the_sweep_threshold_is_twice_what_survived_and_never_below_the_floor() {
    for (live, want) in [
        (0, SWEEP_FLOOR),
        (1, SWEEP_FLOOR),
        (SWEEP_FLOOR / 2, SWEEP_FLOOR),
        (SWEEP_FLOOR, 2 * SWEEP_FLOOR),
        (5_000, 10_000),
        (usize::MAX, usize::MAX),
    ] {
        assert_eq!(next_sweep(live), want, "live {live}");
    }
}

/// A long-running cache sees an endless stream of unique values (names, handles); the interner
/// must forget those no object holds, and keep those that are still held.
#[test]
fn values_no_one_holds_are_forgotten_and_held_values_stay_shared() {
    let mut interner = Interner::default();
    let held: Vec<Arc<str>> = (0..100)
        .map(|i| interner.str(&format!("held-{i}")))
        .collect();
    let held_list = interner.list(["x", "y"]);
    let mut most = 0;
    for i in 0..20_000 {
        let gone = interner.str(&format!("gone-{i}"));
        drop(gone);
        let _ = interner.pairs([("key", format!("v{i}").as_str())]);
        most = most.max(interner.len());
    }
    // 100 held strings, "x", "y", "key" and the held list; each table at most twice its live
    // values (or the floor) before it is swept.
    assert!(
        most <= 2 * 104 + 3 * SWEEP_FLOOR,
        "the tables grew to {most}"
    );
    for (i, value) in held.iter().enumerate() {
        assert!(
            Arc::ptr_eq(value, &interner.str(&format!("held-{i}"))),
            "held-{i} lost"
        );
    }
    assert!(Arc::ptr_eq(&held_list, &interner.list(["x", "y"])));
}

fn affinity(terms: &[(&str, &str, Option<&[&str]>)]) -> VolumeNodeAffinity {
    use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorTerm};
    VolumeNodeAffinity {
        required: Some(NodeSelector {
            node_selector_terms: terms
                .iter()
                .map(|(key, operator, values)| NodeSelectorTerm {
                    match_expressions: Some(vec![NodeSelectorRequirement {
                        key: (*key).to_owned(),
                        operator: (*operator).to_owned(),
                        values: values.map(|v| v.iter().map(|s| (*s).to_owned()).collect()),
                    }]),
                    match_fields: None,
                })
                .collect(),
        }),
    }
}

/// Volumes of one node or zone share one affinity; an affinity that differs anywhere (a value,
/// an operator, the order of the terms, an absent list against an empty one) is its own copy,
/// and each copy reads back exactly as it was given.
#[test]
fn equal_node_affinities_share_one_copy_and_any_difference_is_kept() {
    let mut interner = Interner::default();
    let node = affinity(&[("topology.hostpath.csi/node", "In", Some(&["node-1"]))]);
    let a = interner.node_affinity(node.clone());
    let b = interner.node_affinity(node.clone());
    assert!(Arc::ptr_eq(&a, &b));
    assert_eq!(**a, node);

    let zones = affinity(&[("zone", "In", Some(&["a"])), ("zone", "In", Some(&["b"]))]);
    let mut different = vec![
        affinity(&[("topology.hostpath.csi/node", "In", Some(&["node-2"]))]),
        affinity(&[("topology.hostpath.csi/node", "NotIn", Some(&["node-1"]))]),
        affinity(&[("topology.hostpath.csi/node", "Exists", None)]),
        affinity(&[("topology.hostpath.csi/node", "Exists", Some(&[]))]),
        affinity(&[("zone", "In", Some(&["b"])), ("zone", "In", Some(&["a"]))]),
        zones,
        affinity(&[]),
        VolumeNodeAffinity { required: None },
    ];
    let mut fields = node.clone();
    let term = &mut fields.required.as_mut().unwrap().node_selector_terms[0];
    term.match_fields = term.match_expressions.take();
    different.push(fields);

    let mut seen = vec![a];
    for value in different {
        let shared = interner.node_affinity(value.clone());
        assert_eq!(**shared, value);
        assert!(
            seen.iter().all(|s| !Arc::ptr_eq(s, &shared)),
            "{value:?} shares another affinity's copy"
        );
        assert!(Arc::ptr_eq(&shared, &interner.node_affinity(value)));
        seen.push(shared);
    }
}
