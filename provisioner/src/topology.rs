//! CreateVolume `accessibility_requirements` from the StorageClass's `allowedTopologies`, the
//! scheduler's selected node and the cluster's CSINode/Node objects; and PV `nodeAffinity` from
//! where the driver says the volume is accessible (spec §4.4).
//!
//! Rust counterpart of external-provisioner `GenerateAccessibilityRequirements` and
//! `GenerateVolumeNodeAffinity`. A *term* is one set of `key=value` segments that must all hold
//! (AND); requisite and preferred are lists of terms (OR). Terms are kept sorted by key so that
//! equal terms compare equal and lists sort the way upstream sorts them (shorter terms first,
//! then by key and value).
//!
//! Two choices upstream makes at random are made deterministically here: with immediate binding
//! the topology keys come from the first CSINode (by name) that lists keys for the driver, and
//! a claim without a name (impossible through kube-apiserver) hashes as 0.

use std::collections::BTreeMap;

use csi_common::quote::go_quote;
use k8s_openapi::api::core::v1::{
    Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, TopologySelectorTerm,
    VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::CSINode;
use proto::csi::v1::{Topology, TopologyRequirement};
use thiserror::Error;

/// A read-only snapshot of the cluster objects topology is computed from (the controller's
/// reflector stores).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TopologyView<'a> {
    /// All Nodes.
    pub(crate) nodes: &'a [Node],
    /// All CSINodes.
    pub(crate) csinodes: &'a [CSINode],
}

impl<'a> TopologyView<'a> {
    /// The Node with this name.
    pub(crate) fn node(&self, name: &str) -> Option<&'a Node> {
        self.nodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(name))
    }

    /// The CSINode with this name (CSINodes are named after their Node).
    pub(crate) fn csinode(&self, name: &str) -> Option<&'a CSINode> {
        self.csinodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(name))
    }
}

/// One topology term: `(key, value)` segments sorted by key.
type Term = Vec<(String, String)>;

/// Why no accessibility requirement could be built. Messages are upstream's.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub(crate) enum TopologyError {
    /// The selected node has no CSINode object (upstream: a Kubernetes NotFound, which makes the
    /// claim be rescheduled).
    #[error(
        "failed to get selected CSINode {node}: csinode.storage.k8s.io {} not found",
        go_quote(.node)
    )]
    SelectedCsiNodeNotFound {
        /// Node name.
        node: String,
    },
    /// The selected node's CSINode lists no topology keys for this driver (driver not running
    /// there, or not registered yet).
    #[error("no topology key found for node {node}")]
    NoTopologyKey {
        /// Node name.
        node: String,
    },
    /// The selected node lacks a label for one of the driver's topology keys (or the Node is
    /// not known).
    #[error(
        "topology labels from selected node {} does not match topology keys from CSINode {}",
        go_map(.labels),
        go_list(.keys)
    )]
    LabelsMismatch {
        /// The node's labels (empty when the Node is unknown).
        labels: BTreeMap<String, String>,
        /// The driver's topology keys.
        keys: Vec<String>,
    },
    /// `--strict-topology`: the selected node is outside the class's allowedTopologies.
    #[error(
        "selected node '{}' topology '{}' is not in allowed topologies: {}",
        go_quote(.node),
        go_term(.term),
        go_terms(.allowed)
    )]
    NotInAllowedTopologies {
        /// Node name.
        node: String,
        /// The node's term.
        term: Term,
        /// The flattened allowed terms.
        allowed: Vec<Term>,
    },
    /// The selected node's term matches none of the requisite terms.
    #[error(
        "topology {} from selected node {} is not in requisite: {}",
        go_term(.term),
        go_quote(.node),
        go_terms(.requisite)
    )]
    NotInRequisite {
        /// The node's term.
        term: Term,
        /// Node name.
        node: String,
        /// The requisite terms.
        requisite: Vec<Term>,
    },
    /// Immediate binding, no allowedTopologies, and no CSINode lists topology keys for the
    /// driver yet: wait until the driver registers somewhere.
    #[error("no available topology found")]
    NoAvailableTopology,
    /// A CSINode names topology keys, but no Node carries labels for all of them.
    #[error("topologyKeys {} were not found on any nodes", go_list(.keys))]
    KeysNotOnAnyNode {
        /// The driver's topology keys.
        keys: Vec<String>,
    },
}

/// What the requirement depends on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequirementInputs<'a> {
    /// The CSI driver name (selects the CSINode entry).
    pub(crate) driver_name: &'a str,
    /// Claim name (the StatefulSet spreading heuristic hashes it).
    pub(crate) pvc_name: &'a str,
    /// The class's `allowedTopologies`.
    pub(crate) allowed_topologies: &'a [TopologySelectorTerm],
    /// The scheduler's node for WaitForFirstConsumer claims.
    pub(crate) selected_node: Option<&'a str>,
    /// `--strict-topology`.
    pub(crate) strict_topology: bool,
    /// `--immediate-topology`.
    pub(crate) immediate_topology: bool,
    /// Cluster objects.
    pub(crate) view: TopologyView<'a>,
}

/// Builds CreateVolume `accessibility_requirements`; `None` means "send none".
///
/// * Selected node: its term comes from its CSINode's keys for the driver and its labels. With
///   `strict_topology` requisite = preferred = that term (which must fit allowedTopologies).
///   Otherwise requisite is the flattened allowedTopologies or, without them, every Node's term
///   for the same keys; preferred is requisite rotated to start at the first term the node
///   satisfies.
/// * No selected node: requisite is the flattened allowedTopologies; without them nothing when
///   `immediate_topology` is off, else every Node's term for the keys of the first CSINode that
///   has keys. Preferred is requisite rotated by the hash of the claim name plus its StatefulSet
///   ordinal, which spreads a StatefulSet's volumes over the zones.
pub(crate) fn accessibility_requirements(
    inputs: &RequirementInputs<'_>,
) -> Result<Option<TopologyRequirement>, TopologyError> {
    let allowed = inputs.allowed_topologies;
    let mut requisite: Vec<Term> = Vec::new();
    let mut selected: Option<(&str, Term, Vec<String>)> = None;

    if let Some(node) = inputs.selected_node {
        let csinode =
            inputs
                .view
                .csinode(node)
                .ok_or_else(|| TopologyError::SelectedCsiNodeNotFound {
                    node: node.to_owned(),
                })?;
        let keys = driver_keys(csinode, inputs.driver_name);
        if keys.is_empty() {
            return Err(TopologyError::NoTopologyKey {
                node: node.to_owned(),
            });
        }
        let labels = inputs
            .view
            .node(node)
            .and_then(|n| n.metadata.labels.clone())
            .unwrap_or_default();
        let term = term_for(&labels, &keys).ok_or_else(|| TopologyError::LabelsMismatch {
            labels: labels.clone(),
            keys: keys.clone(),
        })?;
        if inputs.strict_topology {
            if !allowed.is_empty() {
                let flat = flatten(allowed);
                if !flat.iter().any(|t| subset(t, &term)) {
                    return Err(TopologyError::NotInAllowedTopologies {
                        node: node.to_owned(),
                        term,
                        allowed: flat,
                    });
                }
            }
            requisite.push(term.clone());
        }
        selected = Some((node, term, keys));
    }

    if requisite.is_empty() {
        if allowed.is_empty() {
            if selected.is_none() && !inputs.immediate_topology {
                // Neither the claim nor the class restricts placement, and the driver was told
                // not to be bothered with the cluster's topology.
                return Ok(None);
            }
            let keys = match &selected {
                Some((_, _, keys)) => keys.clone(),
                None => first_csinode_keys(inputs.view, inputs.driver_name),
            };
            if keys.is_empty() {
                // Upstream logs "No topology keys found on any node": the driver has not
                // registered anywhere yet; retry until it has.
                return Err(TopologyError::NoAvailableTopology);
            }
            requisite = cluster_terms(inputs.view, &keys)?;
        } else {
            requisite = flatten(allowed);
        }
    }
    // Possible when allowedTopologies only has empty terms: behave as if topology were off.
    if requisite.is_empty() {
        return Ok(None);
    }
    requisite.sort_by(compare_terms);
    requisite.dedup();

    let preferred = match &selected {
        None => {
            let (hash, index) = pvc_name_hash_and_index_offset(inputs.pvc_name);
            let len = u32::try_from(requisite.len()).unwrap_or(u32::MAX);
            let start = usize::try_from(hash.wrapping_add(index) % len).unwrap_or(0);
            rotated(&requisite, start)
        }
        Some(_) if inputs.strict_topology => requisite.clone(),
        Some((node, term, _)) => {
            let start = requisite
                .iter()
                .position(|t| subset(t, term))
                .ok_or_else(|| TopologyError::NotInRequisite {
                    term: term.clone(),
                    node: (*node).to_owned(),
                    requisite: requisite.clone(),
                })?;
            rotated(&requisite, start)
        }
    };
    Ok(Some(TopologyRequirement {
        requisite: to_csi(&requisite),
        preferred: to_csi(&preferred),
    }))
}

/// PV `spec.nodeAffinity` from CreateVolume's `accessible_topology`: one node selector term per
/// topology (OR), each segment an `In [value]` expression (AND).
///
/// `None` when the driver reported no usable topology. (Upstream returns an affinity with no
/// terms when every reported topology is empty, which kube-apiserver rejects; that case is
/// `None` here too.) Beyond upstream, repeated topologies make one term: a driver answering
/// the same segment thousands of times would otherwise make a PV of megabytes.
pub(crate) fn node_affinity(accessible: &[Topology]) -> Option<VolumeNodeAffinity> {
    let mut seen = std::collections::BTreeSet::new();
    let terms: Vec<NodeSelectorTerm> = accessible
        .iter()
        .filter(|t| !t.segments.is_empty())
        .filter_map(|t| {
            let mut segments: Vec<(&String, &String)> = t.segments.iter().collect();
            segments.sort();
            seen.insert(segments.clone()).then_some(segments)
        })
        .map(|segments| NodeSelectorTerm {
            match_expressions: Some(
                segments
                    .into_iter()
                    .map(|(key, value)| NodeSelectorRequirement {
                        key: key.clone(),
                        operator: "In".to_owned(),
                        values: Some(vec![value.clone()]),
                    })
                    .collect(),
            ),
            match_fields: None,
        })
        .collect();
    if terms.is_empty() {
        return None;
    }
    Some(VolumeNodeAffinity {
        required: Some(NodeSelector {
            node_selector_terms: terms,
        }),
    })
}

/// The driver's topology keys on one CSINode.
fn driver_keys(csinode: &CSINode, driver_name: &str) -> Vec<String> {
    csinode
        .spec
        .drivers
        .iter()
        .find(|d| d.name == driver_name)
        .and_then(|d| d.topology_keys.clone())
        .unwrap_or_default()
}

fn first_csinode_keys(view: TopologyView<'_>, driver_name: &str) -> Vec<String> {
    let mut csinodes: Vec<&CSINode> = view.csinodes.iter().collect();
    csinodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    csinodes
        .into_iter()
        .map(|c| driver_keys(c, driver_name))
        .find(|keys| !keys.is_empty())
        .unwrap_or_default()
}

/// The term of every Node that has labels for all `keys`.
fn cluster_terms(view: TopologyView<'_>, keys: &[String]) -> Result<Vec<Term>, TopologyError> {
    let terms: Vec<Term> = view
        .nodes
        .iter()
        .filter_map(|n| n.metadata.labels.as_ref())
        .filter_map(|labels| term_for(labels, keys))
        .filter(|term| !term.is_empty())
        .collect();
    if terms.is_empty() {
        return Err(TopologyError::KeysNotOnAnyNode {
            keys: keys.to_vec(),
        });
    }
    Ok(terms)
}

/// The sorted term of `keys` in `labels`, `None` if a key is missing.
fn term_for(labels: &BTreeMap<String, String>, keys: &[String]) -> Option<Term> {
    let mut term = keys
        .iter()
        .map(|k| labels.get(k).map(|v| (k.clone(), v.clone())))
        .collect::<Option<Term>>()?;
    term.sort();
    Some(term)
}

/// Expands allowedTopologies into terms: within a selector term the value lists of the
/// expressions are multiplied out (`zone in {a,b}` AND `rack in {x}` gives `{zone=a,rack=x}`,
/// `{zone=b,rack=x}`); the terms of all selector terms are concatenated.
fn flatten(allowed: &[TopologySelectorTerm]) -> Vec<Term> {
    let mut all = Vec::new();
    for selector in allowed {
        let mut terms: Vec<Term> = Vec::new();
        for expression in selector.match_label_expressions.iter().flatten() {
            let mut next = Vec::new();
            for value in &expression.values {
                let segment = (expression.key.clone(), value.clone());
                if terms.is_empty() {
                    next.push(vec![segment]);
                } else {
                    for term in &terms {
                        let mut extended = term.clone();
                        extended.push(segment.clone());
                        next.push(extended);
                    }
                }
            }
            terms = next;
        }
        all.extend(terms);
    }
    for term in &mut all {
        term.sort();
    }
    all
}

/// Upstream's term order: fewer segments first, then segment by segment on key and value.
fn compare_terms(a: &Term, b: &Term) -> std::cmp::Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// Whether every segment of `part` is in `whole` (both sorted by key), upstream's
/// `topologyTerm.subset`.
fn subset(part: &Term, whole: &Term) -> bool {
    if part.is_empty() {
        return true;
    }
    let mut matched = 0;
    for (key, value) in whole {
        let (want_key, want_value) = &part[matched];
        if want_key != key {
            continue;
        }
        if want_value != value {
            return false;
        }
        matched += 1;
        if matched == part.len() {
            return true;
        }
    }
    false
}

fn rotated(terms: &[Term], start: usize) -> Vec<Term> {
    let mut out = terms[start..].to_vec();
    out.extend_from_slice(&terms[..start]);
    out
}

fn to_csi(terms: &[Term]) -> Vec<Topology> {
    terms
        .iter()
        .filter(|t| !t.is_empty())
        .map(|t| Topology {
            segments: t.iter().cloned().collect(),
        })
        .collect()
}

/// The in-tree StatefulSet spreading heuristic (`getPVCNameHashAndIndexOffset`): for
/// `claim-statefulset-N` hash only `statefulset` and add `N`, so replica N of a StatefulSet
/// lands N terms further along and all claims of one replica land together.
fn pvc_name_hash_and_index_offset(pvc_name: &str) -> (u32, u32) {
    if pvc_name.is_empty() {
        return (0, 0);
    }
    let mut hashed = pvc_name;
    let mut index = 0;
    if let Some(last_dash) = pvc_name.rfind('-') {
        let ordinal = &pvc_name[last_dash + 1..];
        // Go's ParseUint(s, 10, 32): digits only, no sign, within u32.
        let parsed = (!ordinal.is_empty() && ordinal.bytes().all(|b| b.is_ascii_digit()))
            .then(|| ordinal.parse::<u32>().ok())
            .flatten();
        if let Some(ordinal) = parsed {
            index = ordinal;
            hashed = &pvc_name[..last_dash];
            if let Some(dash) = hashed.rfind('-') {
                hashed = &hashed[dash + 1..];
            }
        }
    }
    (fnv1_32(hashed.as_bytes()), index)
}

/// 32-bit FNV-1 (Go's `hash/fnv.New32`, multiply then xor).
fn fnv1_32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |hash, &b| {
        hash.wrapping_mul(0x0100_0193) ^ u32::from(b)
    })
}

/// A term as Go's `%v` prints upstream's `[]topologySegment`: `[{key value} {key value}]`.
fn go_term(term: &Term) -> String {
    let segments: Vec<String> = term.iter().map(|(k, v)| format!("{{{k} {v}}}")).collect();
    format!("[{}]", segments.join(" "))
}

fn go_terms(terms: &[Term]) -> String {
    let terms: Vec<String> = terms.iter().map(go_term).collect();
    format!("[{}]", terms.join(" "))
}

/// A map as Go's `%v` prints it: `map[k1:v1 k2:v2]`, keys sorted.
fn go_map(map: &BTreeMap<String, String>) -> String {
    let pairs: Vec<String> = map.iter().map(|(k, v)| format!("{k}:{v}")).collect();
    format!("map[{}]", pairs.join(" "))
}

/// A string list as Go's `%v` prints a `[]string` (`[a b c]`), as upstream's topology errors do.
fn go_list(items: &[String]) -> String {
    format!("[{}]", items.join(" "))
}

#[cfg(test)]
mod tests;
