//! How many resource requests the server has received, by Kubernetes verb and resource: the
//! positive signal a test waits for (for example that a client opened a new watch after the
//! last one expired) instead of sleeping. kube-apiserver's own `apiserver_request_total` has
//! more labels; this fake keeps the two a test needs.
//!
//! It also keeps which client sent which kind of request ([`RequestCounts::by_client`]), as
//! kube-apiserver's audit log records each request's `userAgent`, `verb` and `objectRef`
//! (`apiGroup`, `resource`, `subresource`): what an RBAC rule must grant that client.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Mutex, PoisonError};

/// One kind of request a client sent, named as an RBAC rule names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Permission {
    /// API group (`""` for the core group).
    pub group: String,
    /// `plural` or `plural/subresource`.
    pub resource: String,
    /// Kubernetes verb (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, ...).
    pub verb: String,
}

/// Request counts of an [`super::ApiServer`] (see [`super::ApiServer::requests`]).
#[derive(Debug, Default)]
pub struct RequestCounts {
    counts: Mutex<HashMap<(String, String), usize>>,
    /// By client: the product part of the User-Agent (`csi-provisioner` of
    /// `csi-provisioner/v5.3.0`), `""` without one.
    clients: Mutex<BTreeMap<String, BTreeSet<Permission>>>,
}

impl RequestCounts {
    /// Records that the client with `user_agent` sent `verb` on `group`/`resource`.
    pub(crate) fn record_client(&self, user_agent: Option<&str>, permission: Permission) {
        let client = user_agent
            .map(|agent| agent.split('/').next().unwrap_or_default())
            .unwrap_or_default();
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        clients
            .entry(client.to_owned())
            .or_default()
            .insert(permission);
    }

    /// Every kind of request the client whose User-Agent starts with `client/` has sent so
    /// far, failed and refused ones included (RBAC is checked before anything else).
    pub fn by_client(&self, client: &str) -> BTreeSet<Permission> {
        let clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        clients.get(client).cloned().unwrap_or_default()
    }

    pub(crate) fn count(&self, verb: &str, resource: &str) {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        *counts
            .entry((verb.to_owned(), resource.to_owned()))
            .or_default() += 1;
    }

    /// Requests received so far with Kubernetes verb `verb` (`get`, `list`, `watch`, ...) on
    /// `resource` (`plural` or `plural/status`), failed ones included.
    pub fn get(&self, verb: &str, resource: &str) -> usize {
        let counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        counts
            .get(&(verb.to_owned(), resource.to_owned()))
            .copied()
            .unwrap_or_default()
    }

    /// Every count so far, by (verb, resource). Two snapshots taken around a step tell what
    /// the clients did in it, including requests nobody thought to ask about (the bench's
    /// API request accounting).
    pub fn snapshot(&self) -> BTreeMap<(String, String), usize> {
        let counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        counts.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_kept_per_user_agent_product_as_rbac_names_them() {
        let counts = RequestCounts::default();
        let permission = |group: &str, resource: &str, verb: &str| Permission {
            group: group.to_owned(),
            resource: resource.to_owned(),
            verb: verb.to_owned(),
        };
        counts.record_client(
            Some("csi-attacher/v0.1.0"),
            permission("storage.k8s.io", "volumeattachments/status", "patch"),
        );
        counts.record_client(
            Some("csi-attacher/v0.1.0 (linux/amd64)"),
            permission("storage.k8s.io", "volumeattachments/status", "patch"),
        );
        counts.record_client(None, permission("", "pods", "list"));
        assert_eq!(
            counts.by_client("csi-attacher"),
            BTreeSet::from([permission(
                "storage.k8s.io",
                "volumeattachments/status",
                "patch"
            )])
        );
        assert_eq!(
            counts.by_client(""),
            BTreeSet::from([permission("", "pods", "list")])
        );
        assert!(counts.by_client("csi-resizer").is_empty());
    }

    #[test]
    fn a_snapshot_holds_every_verb_and_resource_counted() {
        let counts = RequestCounts::default();
        counts.count("patch", "volumeattachments");
        counts.count("patch", "volumeattachments");
        counts.count("patch", "volumeattachments/status");
        counts.count("watch", "persistentvolumes");
        let key = |verb: &str, resource: &str| (verb.to_owned(), resource.to_owned());
        assert_eq!(
            counts.snapshot(),
            BTreeMap::from([
                (key("patch", "volumeattachments"), 2),
                (key("patch", "volumeattachments/status"), 1),
                (key("watch", "persistentvolumes"), 1),
            ])
        );
    }
}
