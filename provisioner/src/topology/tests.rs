use super::*;
use k8s_openapi::api::core::v1::TopologySelectorLabelRequirement;
use k8s_openapi::api::storage::v1::{CSINodeDriver, CSINodeSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

const DRIVER: &str = "csi.example.com";
const ZONE: &str = "topology.example.com/zone";
const RACK: &str = "topology.example.com/rack";

fn node(name: &str, labels: &[(&str, &str)]) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            ..ObjectMeta::default()
        },
        ..Node::default()
    }
}

fn csinode(name: &str, drivers: &[(&str, &[&str])]) -> CSINode {
    CSINode {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        spec: CSINodeSpec {
            drivers: drivers
                .iter()
                .map(|(driver, keys)| CSINodeDriver {
                    name: (*driver).to_owned(),
                    node_id: name.to_owned(),
                    topology_keys: Some(keys.iter().map(|k| (*k).to_owned()).collect()),
                    allocatable: None,
                })
                .collect(),
        },
    }
}

fn allowed(terms: &[&[(&str, &[&str])]]) -> Vec<TopologySelectorTerm> {
    terms
        .iter()
        .map(|expressions| TopologySelectorTerm {
            match_label_expressions: Some(
                expressions
                    .iter()
                    .map(|(key, values)| TopologySelectorLabelRequirement {
                        key: (*key).to_owned(),
                        values: values.iter().map(|v| (*v).to_owned()).collect(),
                    })
                    .collect(),
            ),
        })
        .collect()
}

fn topo(segments: &[(&str, &str)]) -> Topology {
    Topology {
        segments: segments
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    }
}

/// Three zones, one node each (`n-a`, `n-b`, `n-c`), plus a node without the driver's labels.
fn cluster() -> (Vec<Node>, Vec<CSINode>) {
    let nodes = vec![
        node("n-b", &[(ZONE, "b"), (RACK, "r1")]),
        node("n-a", &[(ZONE, "a"), (RACK, "r1")]),
        node("n-c", &[(ZONE, "c"), (RACK, "r2")]),
        node("n-a2", &[(ZONE, "a"), (RACK, "r1")]),
        node("bare", &[("kubernetes.io/hostname", "bare")]),
    ];
    let csinodes = vec![
        csinode("n-a", &[(DRIVER, &[ZONE])]),
        csinode("n-b", &[(DRIVER, &[ZONE]), ("other.csi", &[RACK])]),
        csinode("n-c", &[(DRIVER, &[ZONE])]),
        csinode("n-a2", &[(DRIVER, &[ZONE])]),
        csinode("bare", &[("other.csi", &[])]),
    ];
    (nodes, csinodes)
}

/// What a case expects: `(requisite, preferred)` or no requirement, or an error text.
type Expected = Result<Option<(Vec<Topology>, Vec<Topology>)>, String>;

struct Case {
    name: &'static str,
    allowed: Vec<TopologySelectorTerm>,
    selected: Option<&'static str>,
    strict: bool,
    immediate: bool,
    want: Expected,
}

fn run(case: &Case, nodes: &[Node], csinodes: &[CSINode], pvc_name: &str) {
    let got = accessibility_requirements(&RequirementInputs {
        driver_name: DRIVER,
        pvc_name,
        allowed_topologies: &case.allowed,
        selected_node: case.selected,
        strict_topology: case.strict,
        immediate_topology: case.immediate,
        view: TopologyView { nodes, csinodes },
    });
    match &case.want {
        Ok(want) => {
            let got = got.unwrap_or_else(|e| panic!("{}: {e}", case.name));
            let got = got.map(|r| (r.requisite, r.preferred));
            assert_eq!(&got, want, "{}", case.name);
        }
        Err(text) => assert_eq!(
            got.expect_err(case.name).to_string(),
            *text,
            "{}",
            case.name
        ),
    }
}

fn zone(z: &str) -> Topology {
    topo(&[(ZONE, z)])
}

#[test]
#[allow(clippy::too_many_lines, reason = "table test: one row per case")]
fn requirements_cover_every_branch_of_the_upstream_algorithm() {
    let (nodes, csinodes) = cluster();
    // "claim" hashes to an offset; the immediate cases below use a name whose rotation is
    // computed from the same helper, so they check the rotation rather than a magic number.
    let pvc = "claim";
    let (hash, index) = pvc_name_hash_and_index_offset(pvc);
    let rot3 = usize::try_from(hash.wrapping_add(index) % 3).unwrap();
    let abc = vec![zone("a"), zone("b"), zone("c")];
    let rotated3 = {
        let mut r = abc[rot3..].to_vec();
        r.extend_from_slice(&abc[..rot3]);
        r
    };
    let cases = vec![
        Case {
            name: "immediate, aggregated cluster topology, deduplicated and sorted",
            allowed: vec![],
            selected: None,
            strict: false,
            immediate: true,
            want: Ok(Some((abc.clone(), rotated3.clone()))),
        },
        Case {
            name: "immediate, --immediate-topology=false sends nothing",
            allowed: vec![],
            selected: None,
            strict: false,
            immediate: false,
            want: Ok(None),
        },
        Case {
            name: "immediate, allowedTopologies win even with --immediate-topology=false",
            allowed: allowed(&[&[(ZONE, &["c", "a", "b"])]]),
            selected: None,
            strict: false,
            immediate: false,
            want: Ok(Some((abc.clone(), rotated3.clone()))),
        },
        Case {
            name: "allowedTopologies with only empty terms fall back to no requirement",
            allowed: vec![TopologySelectorTerm {
                match_label_expressions: None,
            }],
            selected: None,
            strict: false,
            immediate: true,
            want: Ok(None),
        },
        Case {
            name: "late binding, non-strict, aggregated: preferred starts at the node",
            allowed: vec![],
            selected: Some("n-b"),
            strict: false,
            immediate: false,
            want: Ok(Some((abc.clone(), vec![zone("b"), zone("c"), zone("a")]))),
        },
        Case {
            name: "late binding, non-strict, allowedTopologies: preferred starts at the node",
            allowed: allowed(&[&[(ZONE, &["a", "c"])]]),
            selected: Some("n-c"),
            strict: false,
            immediate: true,
            want: Ok(Some((
                vec![zone("a"), zone("c")],
                vec![zone("c"), zone("a")],
            ))),
        },
        Case {
            name: "late binding, non-strict, node outside allowedTopologies",
            allowed: allowed(&[&[(ZONE, &["a", "c"])]]),
            selected: Some("n-b"),
            strict: false,
            immediate: true,
            want: Err(format!(
                r#"topology [{{{ZONE} b}}] from selected node "n-b" is not in requisite: [[{{{ZONE} a}}] [{{{ZONE} c}}]]"#
            )),
        },
        Case {
            name: "late binding, strict: only the node's topology",
            allowed: vec![],
            selected: Some("n-a"),
            strict: true,
            immediate: true,
            want: Ok(Some((vec![zone("a")], vec![zone("a")]))),
        },
        Case {
            name: "late binding, strict, node inside allowedTopologies",
            allowed: allowed(&[&[(ZONE, &["a"])], &[(ZONE, &["b"])]]),
            selected: Some("n-b"),
            strict: true,
            immediate: true,
            want: Ok(Some((vec![zone("b")], vec![zone("b")]))),
        },
        Case {
            name: "late binding, strict, node outside allowedTopologies",
            allowed: allowed(&[&[(ZONE, &["a", "c"])]]),
            selected: Some("n-b"),
            strict: true,
            immediate: true,
            want: Err(format!(
                r#"selected node '"n-b"' topology '[{{{ZONE} b}}]' is not in allowed topologies: [[{{{ZONE} a}}] [{{{ZONE} c}}]]"#
            )),
        },
        Case {
            name: "late binding, selected CSINode gone",
            allowed: vec![],
            selected: Some("gone"),
            strict: false,
            immediate: true,
            want: Err(
                r#"failed to get selected CSINode gone: csinode.storage.k8s.io "gone" not found"#
                    .to_owned(),
            ),
        },
        Case {
            name: "late binding, driver not on the selected node",
            allowed: vec![],
            selected: Some("bare"),
            strict: false,
            immediate: true,
            want: Err("no topology key found for node bare".to_owned()),
        },
    ];
    for case in &cases {
        run(case, &nodes, &csinodes, pvc);
    }
}

#[test]
fn missing_labels_and_empty_clusters_are_reported() {
    let keys_everywhere = vec![csinode("n1", &[(DRIVER, &[ZONE, RACK])])];
    let unlabelled = vec![node("n1", &[(ZONE, "a")])];
    let case = Case {
        name: "selected node lacks a key's label",
        allowed: vec![],
        selected: Some("n1"),
        strict: false,
        immediate: true,
        want: Err(format!(
            "topology labels from selected node map[{ZONE}:a] does not match topology keys \
             from CSINode [{ZONE} {RACK}]"
        )),
    };
    run(&case, &unlabelled, &keys_everywhere, "c");
    let case = Case {
        name: "selected Node object unknown",
        want: Err(format!(
            "topology labels from selected node map[] does not match topology keys from \
             CSINode [{ZONE} {RACK}]"
        )),
        ..case
    };
    run(&case, &[], &keys_everywhere, "c");

    let case = Case {
        name: "immediate, keys on a CSINode but no node has all labels",
        allowed: vec![],
        selected: None,
        strict: false,
        immediate: true,
        want: Err(format!(
            "topologyKeys [{ZONE} {RACK}] were not found on any nodes"
        )),
    };
    run(&case, &unlabelled, &keys_everywhere, "c");
    let case = Case {
        name: "immediate, the driver registered no keys anywhere",
        want: Err("no available topology found".to_owned()),
        ..case
    };
    run(&case, &unlabelled, &[csinode("n1", &[(DRIVER, &[])])], "c");
}

#[test]
fn allowed_topologies_flatten_as_a_cartesian_product() {
    let terms = allowed(&[
        &[(ZONE, &["z1", "z2"]), (RACK, &["rA", "rB"])],
        &[(ZONE, &["z1"]), (RACK, &["rA"])],
        &[(RACK, &["rC"])],
    ]);
    let mut flat = flatten(&terms);
    let pair = |z: &str, r: &str| {
        vec![
            (RACK.to_owned(), r.to_owned()),
            (ZONE.to_owned(), z.to_owned()),
        ]
    };
    assert_eq!(
        flat,
        vec![
            pair("z1", "rA"),
            pair("z2", "rA"),
            pair("z1", "rB"),
            pair("z2", "rB"),
            pair("z1", "rA"),
            vec![(RACK.to_owned(), "rC".to_owned())],
        ]
    );
    flat.sort_by(compare_terms);
    flat.dedup();
    // Shorter terms first, then by key and value; the duplicate is gone.
    assert_eq!(flat.len(), 5);
    assert_eq!(flat[0], vec![(RACK.to_owned(), "rC".to_owned())]);
    assert_eq!(flat[1], pair("z1", "rA"));
    assert_eq!(flat[4], pair("z2", "rB"));
}

#[test]
fn statefulset_ordinals_rotate_preferred_topologies() {
    let (nodes, csinodes) = cluster();
    let first = |pvc: &str| {
        accessibility_requirements(&RequirementInputs {
            driver_name: DRIVER,
            pvc_name: pvc,
            allowed_topologies: &[],
            selected_node: None,
            strict_topology: false,
            immediate_topology: true,
            view: TopologyView {
                nodes: &nodes,
                csinodes: &csinodes,
            },
        })
        .unwrap()
        .unwrap()
        .preferred[0]
            .clone()
    };
    let zones = [zone("a"), zone("b"), zone("c")];
    let position = |t: &Topology| zones.iter().position(|z| z == t).unwrap();
    let replica0 = position(&first("data-web-0"));
    // Consecutive replicas land in consecutive zones.
    assert_eq!(position(&first("data-web-1")), (replica0 + 1) % 3);
    assert_eq!(position(&first("data-web-2")), (replica0 + 2) % 3);
    assert_eq!(position(&first("data-web-3")), replica0);
    // Every claim template of one replica lands together (only "web" is hashed).
    assert_eq!(position(&first("logs-web-1")), (replica0 + 1) % 3);
}

#[test]
fn pvc_name_hash_matches_go_fnv32_and_ordinal_rules() {
    // FNV-1 32-bit reference vectors.
    assert_eq!(fnv1_32(b""), 0x811c_9dc5);
    assert_eq!(fnv1_32(b"a"), 0x050c_5d7e);
    assert_eq!(fnv1_32(b"foobar"), 0x31f0_b262);
    let cases: &[(&str, &[u8], u32)] = &[
        ("mydata", b"mydata", 0),
        ("data-web-7", b"web", 7),
        ("web-7", b"web", 7),
        ("a-b-c-web-12", b"web", 12),
        ("web-x", b"web-x", 0),
        ("web-+1", b"web-+1", 0),
        ("web-", b"web-", 0),
        ("web-4294967296", b"web-4294967296", 0),
        ("web-4294967295", b"web", 4_294_967_295),
        ("-5", b"", 5),
    ];
    for &(name, hashed, index) in cases {
        assert_eq!(
            pvc_name_hash_and_index_offset(name),
            (fnv1_32(hashed), index),
            "{name}"
        );
    }
}

#[test]
fn subset_matches_upstream_semantics() {
    let t = |pairs: &[(&str, &str)]| -> Term {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    let node = t(&[("k1", "a"), ("k2", "b"), ("k3", "c")]);
    assert!(subset(&t(&[]), &node));
    assert!(subset(&t(&[("k2", "b")]), &node));
    assert!(subset(&t(&[("k1", "a"), ("k3", "c")]), &node));
    assert!(!subset(&t(&[("k2", "x")]), &node));
    assert!(!subset(&t(&[("k4", "d")]), &node));
    assert!(!subset(&t(&[("k1", "a"), ("k4", "d")]), &node));
    assert!(!subset(&node, &t(&[("k1", "a")])));
}

#[test]
fn fixture_single_node_cluster_gives_the_captured_requirement() {
    // The hostpath capture: one node `ref-node` labelled `topology.hostpath.csi/node=ref-node`.
    let key = "topology.hostpath.csi/node";
    let nodes = vec![node(
        "ref-node",
        &[
            ("beta.kubernetes.io/os", "linux"),
            ("kubernetes.io/hostname", "ref-node"),
            ("kubernetes.io/os", "linux"),
            (key, "ref-node"),
        ],
    )];
    let csinodes = vec![csinode("ref-node", &[("hostpath.csi.k8s.io", &[key])])];
    let got = accessibility_requirements(&RequirementInputs {
        driver_name: "hostpath.csi.k8s.io",
        pvc_name: "fx-pvc",
        allowed_topologies: &[],
        selected_node: None,
        strict_topology: false,
        immediate_topology: true,
        view: TopologyView {
            nodes: &nodes,
            csinodes: &csinodes,
        },
    })
    .unwrap()
    .unwrap();
    let want = vec![topo(&[(key, "ref-node")])];
    assert_eq!(got.requisite, want);
    assert_eq!(got.preferred, want);
}

#[test]
fn node_affinity_has_one_term_per_accessible_topology() {
    assert_eq!(node_affinity(&[]), None);
    assert_eq!(node_affinity(&[topo(&[])]), None);
    let affinity = node_affinity(&[
        topo(&[(ZONE, "a"), (RACK, "r1")]),
        topo(&[]),
        topo(&[(ZONE, "b")]),
    ])
    .unwrap();
    let terms = affinity.required.unwrap().node_selector_terms;
    assert_eq!(terms.len(), 2);
    let expressions = terms[0].match_expressions.as_ref().unwrap();
    assert_eq!(
        expressions
            .iter()
            .map(|e| (
                e.key.as_str(),
                e.operator.as_str(),
                e.values.clone().unwrap()
            ))
            .collect::<Vec<_>>(),
        vec![
            (RACK, "In", vec!["r1".to_owned()]),
            (ZONE, "In", vec!["a".to_owned()]),
        ]
    );
    assert_eq!(terms[1].match_expressions.as_ref().unwrap().len(), 1);
}

#[test]
fn repeated_topologies_make_one_term_each_in_first_seen_order() {
    let mut accessible = vec![topo(&[(ZONE, "b")]); 10_000];
    accessible.push(topo(&[(ZONE, "a"), (RACK, "r1")]));
    accessible.push(topo(&[(RACK, "r1"), (ZONE, "a")]));
    let terms = node_affinity(&accessible)
        .unwrap()
        .required
        .unwrap()
        .node_selector_terms;
    let values: Vec<usize> = terms
        .iter()
        .map(|t| t.match_expressions.as_ref().unwrap().len())
        .collect();
    assert_eq!(values, [1, 2]);
}
