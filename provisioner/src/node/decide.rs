//! Pure decisions of node deployment (spec §6.2): whose claim is it, how long to wait before
//! racing the other nodes for an Immediate claim, is there room on this node, and is a volume
//! this node's to delete. Rust counterparts of external-provisioner's `checkNode`, the
//! jittered rate limiter of `becomeOwner`, `checkCapacity` and `VolumeIsAccessible`.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    NodeSelectorRequirement, NodeSelectorTerm, PersistentVolumeClaim, VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::StorageClass;

use crate::annotations::ANN_SELECTED_NODE;

const BINDING_IMMEDIATE: &str = "Immediate";

/// Who provisions a claim in node deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ownership {
    /// `volume.kubernetes.io/selected-node` names this node: provision it.
    Mine,
    /// Another node's claim, or one this node does not race for (WaitForFirstConsumer before
    /// the scheduler chose, or Immediate with `--node-deployment-immediate-binding=false`).
    NotMine,
    /// An Immediate claim nobody took yet: wait, then try to set selected-node to this node.
    Race,
}

/// Upstream `checkNode`: only the GA selected-node annotation counts (the alpha one is not
/// read here, as upstream), and only a class whose `volumeBindingMode` is exactly `Immediate`
/// is raced for (the API server always defaults the field; upstream treats a missing one as
/// not Immediate too).
pub(crate) fn ownership(
    node_name: &str,
    immediate_binding: bool,
    claim: &PersistentVolumeClaim,
    class: &StorageClass,
) -> Ownership {
    let selected = claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANN_SELECTED_NODE))
        .map_or("", String::as_str);
    match selected {
        "" if immediate_binding
            && class.volume_binding_mode.as_deref() == Some(BINDING_IMMEDIATE) =>
        {
            Ownership::Race
        }
        "" => Ownership::NotMine,
        node if node == node_name => Ownership::Mine,
        _ => Ownership::NotMine,
    }
}

/// The wait before the `attempt`-th try (0-based) to claim a claim: `base * 2^attempt`,
/// capped at `max`, minus `jitter` (0..1) of one `base` so that the nodes do not all try at
/// once (upstream's jittered `ItemExponentialFailureRateLimiter`; the spec: "jitter subtracts
/// up to one base delay").
pub(crate) fn claim_delay(attempt: u32, base: Duration, max: Duration, jitter: f64) -> Duration {
    let exponential = base
        .checked_mul(2_u32.saturating_pow(attempt))
        .unwrap_or(max)
        .min(max);
    exponential.saturating_sub(base.mul_f64(jitter.clamp(0.0, 1.0)))
}

/// Upstream `checkCapacity`: a claim without a size always fits; otherwise it fits when any
/// answered topology has at least the requested bytes available.
pub(crate) fn capacity_suffices(requested: i64, available: &[i64]) -> bool {
    requested == 0 || available.iter().any(|a| requested <= *a)
}

/// Whether this node may delete a volume. Upstream `Delete` asks only
/// [`volume_is_accessible`], so a PV without node affinity (a driver without topology) is
/// deleted by whichever instance gets to it first, which calls DeleteVolume on its own
/// node-local driver and leaks the storage on the node that has it. Fixed here for the PVs a
/// node deployment made: their provisioner identity ends in `-<driver>-<node>`, and only that
/// node deletes them. PVs without such an identity (static PVs) keep upstream's rule.
pub(crate) fn may_delete(
    affinity: Option<&VolumeNodeAffinity>,
    identity: Option<&str>,
    driver: &str,
    node_name: &str,
    topology: &BTreeMap<String, String>,
) -> bool {
    let has_affinity = affinity.and_then(|a| a.required.as_ref()).is_some();
    match identity.and_then(identity_node(driver)) {
        Some(node) if !has_affinity => node == node_name,
        _ => volume_is_accessible(affinity, topology),
    }
}

/// The node in a node deployment's provisioner identity `<millis>-<random>-<driver>-<node>`.
fn identity_node(driver: &str) -> impl Fn(&str) -> Option<&str> + '_ {
    move |identity| {
        let mut parts = identity.splitn(3, '-');
        let (Some(millis), Some(random), Some(rest)) = (parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !numeric(millis) || !numeric(random) {
            return None;
        }
        rest.strip_prefix(driver)?
            .strip_prefix('-')
            .filter(|node| !node.is_empty())
    }
}

/// Upstream `VolumeIsAccessible`: whether a PV with `affinity` can be used on a node whose
/// labels are this node's NodeGetInfo topology. A PV without required node affinity is
/// accessible everywhere (so every node deployment instance may delete it, as upstream).
/// Terms are ORed, expressions ANDed (`MatchNodeSelectorTerms`); a term without expressions
/// matches nothing, and `matchFields` never match because the node stand-in has no name.
pub(crate) fn volume_is_accessible(
    affinity: Option<&VolumeNodeAffinity>,
    topology: &BTreeMap<String, String>,
) -> bool {
    let Some(required) = affinity.and_then(|a| a.required.as_ref()) else {
        return true;
    };
    required
        .node_selector_terms
        .iter()
        .any(|term| term_matches(term, topology))
}

fn term_matches(term: &NodeSelectorTerm, labels: &BTreeMap<String, String>) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    fields.is_empty()
        && expressions
            .iter()
            .all(|requirement| requirement_matches(requirement, labels))
}

fn requirement_matches(
    requirement: &NodeSelectorRequirement,
    labels: &BTreeMap<String, String>,
) -> bool {
    let values = requirement.values.as_deref().unwrap_or_default();
    let value = labels.get(&requirement.key);
    let number = |v: &str| v.parse::<i64>().ok();
    match requirement.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(have), [bound]) = (value.and_then(|v| number(v)), values) else {
                return false;
            };
            let Some(bound) = number(bound) else {
                return false;
            };
            if requirement.operator == "Gt" {
                have > bound
            } else {
                have < bound
            }
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests;
