//! How many resource requests the server has received, by Kubernetes verb and resource: the
//! positive signal a test waits for (for example that a client opened a new watch after the
//! last one expired) instead of sleeping. kube-apiserver's own `apiserver_request_total` has
//! more labels; this fake keeps the two a test needs.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};

/// Request counts of an [`super::ApiServer`] (see [`super::ApiServer::requests`]).
#[derive(Debug, Default)]
pub struct RequestCounts(Mutex<HashMap<(String, String), usize>>);

impl RequestCounts {
    pub(crate) fn count(&self, verb: &str, resource: &str) {
        let mut counts = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        *counts
            .entry((verb.to_owned(), resource.to_owned()))
            .or_default() += 1;
    }

    /// Requests received so far with Kubernetes verb `verb` (`get`, `list`, `watch`, ...) on
    /// `resource` (`plural` or `plural/status`), failed ones included.
    pub fn get(&self, verb: &str, resource: &str) -> usize {
        let counts = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        counts
            .get(&(verb.to_owned(), resource.to_owned()))
            .copied()
            .unwrap_or_default()
    }

    /// Every count so far, by (verb, resource). Two snapshots taken around a step tell what
    /// the clients did in it, including requests nobody thought to ask about (the bench's
    /// API request accounting).
    pub fn snapshot(&self) -> BTreeMap<(String, String), usize> {
        let counts = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        counts.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
