//! How many resource requests the server has received, by Kubernetes verb and resource: the
//! positive signal a test waits for (for example that a client opened a new watch after the
//! last one expired) instead of sleeping. kube-apiserver's own `apiserver_request_total` has
//! more labels; this fake keeps the two a test needs.

use std::collections::HashMap;
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
}
