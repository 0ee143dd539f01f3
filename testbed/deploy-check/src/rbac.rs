//! RBAC rules as (group, resource, verb) triples, and the comparison of what a manifest grants
//! with what a binary was seen to send: a missing grant breaks the sidecar in a real cluster, an
//! unused one is privilege nobody needs. Deliberate differences are listed with their reason
//! ([`Allowance`]).

use std::collections::BTreeSet;

use serde_json::Value;

/// One permission: what an RBAC rule grants and a request needs.
pub type Triple = (String, String, String);

/// `(group, resource, verb)` from string slices.
pub fn triple(group: &str, resource: &str, verb: &str) -> Triple {
    (group.to_owned(), resource.to_owned(), verb.to_owned())
}

/// Everything the rules of `role` (a Role or ClusterRole object) grant. Wildcards are not
/// expanded: a manifest here never uses them, and the comparison would then report `*` as
/// granted but never used.
pub fn granted(role: &Value) -> BTreeSet<Triple> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect()
    };
    let mut out = BTreeSet::new();
    for rule in role["rules"].as_array().into_iter().flatten() {
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                for verb in strings(&rule["verbs"]) {
                    out.insert((group.clone(), resource.clone(), verb));
                }
            }
        }
    }
    out
}

/// A permission the comparison accepts without seeing it used or granted, and why.
#[derive(Debug, Clone, Copy)]
pub struct Allowance {
    /// API group.
    pub group: &'static str,
    /// Resource (`plural` or `plural/subresource`).
    pub resource: &'static str,
    /// Verbs covered.
    pub verbs: &'static [&'static str],
    /// Why it is granted though no test run used it.
    pub reason: &'static str,
}

impl Allowance {
    fn covers(&self, (group, resource, verb): &Triple) -> bool {
        self.group == group && self.resource == resource && self.verbs.contains(&verb.as_str())
    }
}

/// What is wrong with a manifest's grants compared with the requests seen.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Difference {
    /// Sent but not granted: the sidecar would get 403 Forbidden.
    pub missing: BTreeSet<Triple>,
    /// Granted but never sent, and not allowed by an [`Allowance`].
    pub unused: BTreeSet<Triple>,
}

impl Difference {
    /// Whether the manifest matches the requests.
    pub fn is_empty(&self) -> bool {
        self.missing.is_empty() && self.unused.is_empty()
    }
}

/// Compares `granted` with `used`, accepting unused grants covered by `allowances`.
pub fn compare(
    granted: &BTreeSet<Triple>,
    used: &BTreeSet<Triple>,
    allowances: &[Allowance],
) -> Difference {
    Difference {
        missing: used.difference(granted).cloned().collect(),
        unused: granted
            .difference(used)
            .filter(|t| !allowances.iter().any(|a| a.covers(t)))
            .cloned()
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn rules_expand_to_every_group_resource_and_verb() {
        let role = json!({"rules": [
            {"apiGroups": [""], "resources": ["persistentvolumes"], "verbs": ["get", "patch"]},
            {"apiGroups": ["storage.k8s.io"], "resources": ["volumeattachments/status"],
             "verbs": ["patch"]}]});
        assert_eq!(
            granted(&role),
            BTreeSet::from([
                triple("", "persistentvolumes", "get"),
                triple("", "persistentvolumes", "patch"),
                triple("storage.k8s.io", "volumeattachments/status", "patch"),
            ])
        );
    }

    #[test]
    fn missing_and_unused_grants_are_reported_unless_allowed() {
        let granted = BTreeSet::from([
            triple("", "pods", "get"),
            triple("", "secrets", "get"),
            triple("", "events", "create"),
        ]);
        let used = BTreeSet::from([
            triple("", "events", "create"),
            triple("", "events", "patch"),
        ]);
        let allowances = [Allowance {
            group: "",
            resource: "secrets",
            verbs: &["get"],
            reason: "only with secrets configured",
        }];
        assert_eq!(
            compare(&granted, &used, &allowances),
            Difference {
                missing: BTreeSet::from([triple("", "events", "patch")]),
                unused: BTreeSet::from([triple("", "pods", "get")]),
            }
        );
    }
}
