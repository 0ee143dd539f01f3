//! What the resize controller remembers between syncs of a claim, in memory only (as upstream):
//! the claims whose last call ended with a final error, the slow set of infeasible sizes
//! (csi-lib-utils `slowset`, spec §5.6), and the claims and PV sizes this process wrote, so a
//! sync that runs before the watch delivers our own write does not act on the older copy
//! (upstream updates its informer cache in place after each write for the same reason).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use tokio::time::Instant;

/// Per-claim memory, keyed `namespace/name`.
#[derive(Debug)]
pub(crate) struct State {
    window: Duration,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    final_errors: HashSet<String>,
    slow: HashMap<String, Instant>,
    written: HashMap<String, i64>,
    claims: HashMap<String, Arc<PersistentVolumeClaim>>,
    in_use: HashSet<String>,
}

/// A resourceVersion as a number, to tell which of two copies is newer. Kubernetes calls them
/// opaque, but etcd's (and the in-memory API server's) are increasing integers; when either
/// does not parse, the cache wins.
fn version(pvc: &PersistentVolumeClaim) -> Option<u64> {
    pvc.metadata.resource_version.as_deref()?.parse().ok()
}

impl State {
    /// `window`: how long an infeasible size waits (`--retry-interval-max`).
    pub(crate) fn new(window: Duration) -> Self {
        Self {
            window,
            inner: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the claim's last expansion ended with a final error.
    pub(crate) fn final_error(&self, key: &str) -> bool {
        self.lock().final_errors.contains(key)
    }

    /// Records how the last expansion ended: `Some(true)` final error, `Some(false)` an
    /// uncertain one, `None` success.
    pub(crate) fn record(&self, key: &str, final_error: Option<bool>) {
        let mut inner = self.lock();
        if final_error == Some(true) {
            inner.final_errors.insert(key.to_owned());
        } else {
            inner.final_errors.remove(key);
        }
    }

    /// Sets or clears the in-use mark: the driver said FAILED_PRECONDITION ("volume in use")
    /// for the claim's last call (upstream `markPVCAsInUse`, keyed by claim here: a deleted
    /// claim is forgotten, so a new one of the same name starts unmarked).
    pub(crate) fn set_in_use(&self, key: &str, marked: bool) {
        let mut inner = self.lock();
        if marked {
            inner.in_use.insert(key.to_owned());
        } else {
            inner.in_use.remove(key);
        }
    }

    /// Whether the claim carries the in-use mark.
    pub(crate) fn in_use(&self, key: &str) -> bool {
        self.lock().in_use.contains(key)
    }

    /// Puts the claim in the slow set, unless it is there already.
    pub(crate) fn slow_add(&self, key: &str) {
        self.lock()
            .slow
            .entry(key.to_owned())
            .or_insert_with(Instant::now);
    }

    /// Takes the claim out of the slow set.
    pub(crate) fn slow_remove(&self, key: &str) {
        self.lock().slow.remove(key);
    }

    /// How long the claim must still wait, if it is in the slow set and its window has not
    /// passed; an expired entry is removed (the claim gets one more attempt).
    pub(crate) fn slow_remaining(&self, key: &str) -> Option<Duration> {
        let mut inner = self.lock();
        let since = *inner.slow.get(key)?;
        let remaining = self
            .window
            .checked_sub(since.elapsed())
            .filter(|d| !d.is_zero());
        if remaining.is_none() {
            inner.slow.remove(key);
        }
        remaining
    }

    /// The newer of the cached claim and the one this process last wrote.
    pub(crate) fn claim(
        &self,
        key: &str,
        cached: Arc<PersistentVolumeClaim>,
    ) -> Arc<PersistentVolumeClaim> {
        let mut inner = self.lock();
        let Some(written) = inner.claims.get(key) else {
            return cached;
        };
        match (version(written), version(&cached)) {
            (Some(ours), Some(theirs)) if ours > theirs => Arc::clone(written),
            _ => {
                inner.claims.remove(key);
                cached
            }
        }
    }

    /// Remembers the claim as this process wrote it.
    pub(crate) fn set_claim(&self, key: &str, pvc: PersistentVolumeClaim) {
        self.lock().claims.insert(key.to_owned(), Arc::new(pvc));
    }

    /// The PV size we last wrote for `pv`, if any.
    pub(crate) fn written(&self, pv: &str) -> Option<i64> {
        self.lock().written.get(pv).copied()
    }

    /// Remembers that `pv` now has `size`.
    pub(crate) fn set_written(&self, pv: &str, size: i64) {
        self.lock().written.insert(pv.to_owned(), size);
    }

    /// Forgets a deleted claim (and its PV).
    pub(crate) fn forget(&self, key: &str, pv: Option<&str>) {
        let mut inner = self.lock();
        inner.final_errors.remove(key);
        inner.slow.remove(key);
        inner.claims.remove(key);
        inner.in_use.remove(key);
        if let Some(pv) = pv {
            inner.written.remove(pv);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn slow_set_holds_a_claim_for_the_window_then_lets_one_attempt_through() {
        let state = State::new(Duration::from_mins(5));
        assert_eq!(state.slow_remaining("ns/a"), None);
        state.slow_add("ns/a");
        assert_eq!(state.slow_remaining("ns/a"), Some(Duration::from_mins(5)));
        tokio::time::advance(Duration::from_mins(2)).await;
        // Adding again keeps the first timestamp.
        state.slow_add("ns/a");
        assert_eq!(state.slow_remaining("ns/a"), Some(Duration::from_mins(3)));
        tokio::time::advance(Duration::from_mins(3)).await;
        assert_eq!(state.slow_remaining("ns/a"), None);
        // Expired entries are gone: re-adding starts a fresh window.
        state.slow_add("ns/a");
        assert_eq!(state.slow_remaining("ns/a"), Some(Duration::from_mins(5)));
        state.slow_remove("ns/a");
        assert_eq!(state.slow_remaining("ns/a"), None);
    }

    #[test]
    fn final_errors_are_recorded_and_cleared() {
        let state = State::new(Duration::from_secs(1));
        state.record("ns/a", Some(true));
        assert!(state.final_error("ns/a"));
        state.record("ns/a", Some(false));
        assert!(!state.final_error("ns/a"));
        state.record("ns/a", Some(true));
        state.record("ns/a", None);
        assert!(!state.final_error("ns/a"));
        let claim = |rv: &str| {
            let mut pvc = PersistentVolumeClaim::default();
            pvc.metadata.resource_version = Some(rv.to_owned());
            Arc::new(pvc)
        };
        // Our write is newer than the cache: ours; once the cache catches up: the cache's.
        state.set_claim("ns/a", (*claim("12")).clone());
        let seen = |cached: &str| {
            state
                .claim("ns/a", claim(cached))
                .metadata
                .resource_version
                .clone()
        };
        assert_eq!(seen("11").as_deref(), Some("12"));
        assert_eq!(seen("13").as_deref(), Some("13"));
        assert_eq!(seen("11").as_deref(), Some("11"));
        state.set_written("pv", 5);
        assert_eq!(state.written("pv"), Some(5));
        state.record("ns/a", Some(true));
        state.set_in_use("ns/a", true);
        assert!(state.in_use("ns/a"));
        state.forget("ns/a", Some("pv"));
        assert!(!state.final_error("ns/a"));
        assert!(!state.in_use("ns/a"));
        assert_eq!(state.written("pv"), None);
    }
}
