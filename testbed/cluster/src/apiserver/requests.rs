//! How many resource requests the server has received, by Kubernetes verb and resource: the
//! positive signal a test waits for (for example that a client opened a new watch after the
//! last one expired) instead of sleeping. kube-apiserver's own `apiserver_request_total` has
//! more labels; this fake keeps the two a test needs, and the same counts per client (the
//! product of its `User-Agent`, what kube-apiserver's audit log and managedFields name it by),
//! so a bench can tell a sidecar's requests from the controller-manager stand-in's.
//!
//! It also keeps which client sent which kind of request ([`RequestCounts::by_client`]), as
//! kube-apiserver's audit log records each request's `userAgent`, `verb` and `objectRef`
//! (`apiGroup`, `resource`, `subresource`): what an RBAC rule must grant that client.
//!
//! And how many requests of each (verb, resource) were being served at once, at most
//! ([`RequestCounts::peak_in_flight`]): kube-apiserver serves requests concurrently, so how
//! many a client has in flight is the client's doing. A test reads it to pin how a peer
//! behaves, for example that the controller-manager stand-in writes claims one at a time as
//! pv_controller's single claim worker does.

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
    all: Mutex<HashMap<(String, String), usize>>,
    by_client: Mutex<HashMap<(String, String, String), usize>>,
    /// Kinds of request by client (see [`client_of`]).
    permissions: Mutex<BTreeMap<String, BTreeSet<Permission>>>,
    /// Watches being served, by client: kube-apiserver's `apiserver_registered_watchers`
    /// (per kind there) counts the same streams.
    watching: Mutex<BTreeMap<String, usize>>,
    /// Requests being served now and the most served at once, by (verb, resource).
    in_flight: Mutex<HashMap<(String, String), InFlightCount>>,
}

#[derive(Debug, Default, Clone, Copy)]
struct InFlightCount {
    now: usize,
    peak: usize,
}

/// A request being served: counted in flight until dropped.
#[derive(Debug)]
pub(crate) struct InFlight<'a> {
    counts: &'a RequestCounts,
    key: (String, String),
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut in_flight = self
            .counts
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = in_flight.get_mut(&self.key) {
            count.now = count.now.saturating_sub(1);
        }
    }
}

impl RequestCounts {
    /// Records that the client with `user_agent` sent `verb` on `group`/`resource`.
    pub(crate) fn record_client(&self, user_agent: Option<&str>, permission: Permission) {
        let client = client_of(user_agent);
        let mut clients = self
            .permissions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        clients
            .entry(client.to_owned())
            .or_default()
            .insert(permission);
    }

    /// Every kind of request the client whose User-Agent starts with `client/` has sent so
    /// far, failed and refused ones included (RBAC is checked before anything else).
    pub fn by_client(&self, client: &str) -> BTreeSet<Permission> {
        let clients = self
            .permissions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        clients.get(client).cloned().unwrap_or_default()
    }

    /// Counts one request of `client` (see [`client_of`]).
    pub(crate) fn count(&self, client: &str, verb: &str, resource: &str) {
        let mut counts = self.all.lock().unwrap_or_else(PoisonError::into_inner);
        *counts
            .entry((verb.to_owned(), resource.to_owned()))
            .or_default() += 1;
        drop(counts);
        let mut counts = self
            .by_client
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *counts
            .entry((client.to_owned(), verb.to_owned(), resource.to_owned()))
            .or_default() += 1;
    }

    /// Every count of `client` (a `User-Agent` product such as `csi-provisioner`) so far, by
    /// (verb, resource).
    pub fn snapshot_of(&self, client: &str) -> BTreeMap<(String, String), usize> {
        let counts = self
            .by_client
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        counts
            .iter()
            .filter(|((c, _, _), _)| c == client)
            .map(|((_, verb, resource), n)| ((verb.clone(), resource.clone()), *n))
            .collect()
    }

    /// Requests received so far with Kubernetes verb `verb` (`get`, `list`, `watch`, ...) on
    /// `resource` (`plural` or `plural/status`), failed ones included.
    pub fn get(&self, verb: &str, resource: &str) -> usize {
        let counts = self.all.lock().unwrap_or_else(PoisonError::into_inner);
        counts
            .get(&(verb.to_owned(), resource.to_owned()))
            .copied()
            .unwrap_or_default()
    }

    /// Notes that a `verb` request on `resource` is being served until the returned guard is
    /// dropped.
    pub(crate) fn begin(&self, verb: &str, resource: &str) -> InFlight<'_> {
        let key = (verb.to_owned(), resource.to_owned());
        let mut in_flight = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let count = in_flight.entry(key.clone()).or_default();
        count.now += 1;
        count.peak = count.peak.max(count.now);
        drop(in_flight);
        InFlight { counts: self, key }
    }

    /// The most `verb` requests on `resource` (`plural` or `plural/status`) served at once so
    /// far, from every client: a request is in flight from its arrival, any latency the test
    /// injected included, until its answer starts (for a watch, until its stream opens).
    pub fn peak_in_flight(&self, verb: &str, resource: &str) -> usize {
        self.in_flight_count(verb, resource).peak
    }

    /// How many `verb` requests on `resource` are being served now (see
    /// [`RequestCounts::peak_in_flight`]): a test that must catch a client waiting on a request
    /// waits for this to be above zero.
    pub fn in_flight(&self, verb: &str, resource: &str) -> usize {
        self.in_flight_count(verb, resource).now
    }

    fn in_flight_count(&self, verb: &str, resource: &str) -> InFlightCount {
        let in_flight = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        in_flight
            .get(&(verb.to_owned(), resource.to_owned()))
            .copied()
            .unwrap_or_default()
    }

    /// Notes a watch of `client` opened; [`RequestCounts::watch_closed`] when it ends.
    pub(crate) fn watch_opened(&self, client: &str) {
        let mut watching = self.watching.lock().unwrap_or_else(PoisonError::into_inner);
        *watching.entry(client.to_owned()).or_default() += 1;
    }

    /// Notes a watch of `client` ended (timed out, dropped, or its client went away).
    pub(crate) fn watch_closed(&self, client: &str) {
        let mut watching = self.watching.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(open) = watching.get_mut(client) {
            *open = open.saturating_sub(1);
            if *open == 0 {
                watching.remove(client);
            }
        }
    }

    /// The watches being served now, by client (its User-Agent product): a client that opens
    /// watches and never lets them go shows here (the reliability suite's churn mode).
    pub fn open_watches(&self) -> BTreeMap<String, usize> {
        self.watching
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Every count so far, by (verb, resource). Two snapshots taken around a step tell what
    /// the clients did in it, including requests nobody thought to ask about (the bench's
    /// API request accounting).
    pub fn snapshot(&self) -> BTreeMap<(String, String), usize> {
        let counts = self.all.lock().unwrap_or_else(PoisonError::into_inner);
        counts.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }
}

/// The client a request comes from, as kube-apiserver names a field manager by default: the
/// `User-Agent` up to its first `/` (`csi-provisioner/v6.0.0 (linux/amd64)` is
/// `csi-provisioner`); empty without one.
pub(crate) fn client_of(user_agent: Option<&str>) -> &str {
    user_agent.map_or("", |agent| agent.split('/').next().unwrap_or(agent))
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
    fn the_peak_counts_requests_served_at_once_per_verb_and_resource() {
        let counts = RequestCounts::default();
        assert_eq!(counts.peak_in_flight("update", "persistentvolumeclaims"), 0);
        let first = counts.begin("update", "persistentvolumeclaims");
        let second = counts.begin("update", "persistentvolumeclaims");
        let other = counts.begin("update", "persistentvolumeclaims/status");
        assert_eq!(counts.peak_in_flight("update", "persistentvolumeclaims"), 2);
        assert_eq!(counts.in_flight("update", "persistentvolumeclaims"), 2);
        drop(first);
        drop(second);
        // One after the other: the peak stays what it was, and one more at a time adds nothing.
        let third = counts.begin("update", "persistentvolumeclaims");
        drop(third);
        assert_eq!(counts.peak_in_flight("update", "persistentvolumeclaims"), 2);
        assert_eq!(counts.in_flight("update", "persistentvolumeclaims"), 0);
        assert_eq!(
            counts.peak_in_flight("update", "persistentvolumeclaims/status"),
            1
        );
        drop(other);
        let later = RequestCounts::default();
        for _ in 0..3 {
            drop(later.begin("create", "events"));
        }
        assert_eq!(later.peak_in_flight("create", "events"), 1);
    }

    #[test]
    fn a_snapshot_holds_every_verb_and_resource_counted() {
        let counts = RequestCounts::default();
        counts.count("csi-attacher", "patch", "volumeattachments");
        counts.count("csi-attacher", "patch", "volumeattachments");
        counts.count("csi-attacher", "patch", "volumeattachments/status");
        counts.count("kube-controller-manager", "watch", "persistentvolumes");
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

    #[test]
    fn each_clients_requests_are_counted_apart() {
        let counts = RequestCounts::default();
        counts.count("csi-provisioner", "create", "persistentvolumes");
        counts.count(
            "kube-controller-manager",
            "update",
            "persistentvolumes/status",
        );
        counts.count("csi-provisioner", "create", "persistentvolumes");
        let key = |verb: &str, resource: &str| (verb.to_owned(), resource.to_owned());
        assert_eq!(
            counts.snapshot_of("csi-provisioner"),
            BTreeMap::from([(key("create", "persistentvolumes"), 2)])
        );
        assert_eq!(
            counts.snapshot_of("kube-controller-manager"),
            BTreeMap::from([(key("update", "persistentvolumes/status"), 1)])
        );
        assert_eq!(counts.snapshot().len(), 2);
    }

    #[test]
    fn open_watches_are_counted_per_client_until_closed() {
        let counts = RequestCounts::default();
        counts.watch_opened("csi-attacher");
        counts.watch_opened("csi-attacher");
        counts.watch_opened("kube-controller-manager");
        counts.watch_closed("csi-attacher");
        assert_eq!(
            counts.open_watches(),
            BTreeMap::from([
                ("csi-attacher".to_owned(), 1),
                ("kube-controller-manager".to_owned(), 1)
            ])
        );
        counts.watch_closed("csi-attacher");
        counts.watch_closed("csi-attacher");
        assert_eq!(
            counts.open_watches(),
            BTreeMap::from([("kube-controller-manager".to_owned(), 1)])
        );
    }

    #[test]
    fn a_client_is_named_by_its_user_agent_product() {
        assert_eq!(
            client_of(Some("csi-provisioner/v6.0.0 (linux/amd64)")),
            "csi-provisioner"
        );
        assert_eq!(client_of(Some("kubectl")), "kubectl");
        assert_eq!(client_of(None), "");
    }
}
