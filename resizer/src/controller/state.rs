//! What the resize controller remembers between syncs of a claim, in memory only (as upstream):
//! the claims whose last call ended with a final error, the slow set of infeasible sizes
//! (csi-lib-utils `slowset`, spec §5.6), and the claims and PV sizes this process wrote (or read
//! back after a write whose answer was lost), so a sync that runs before the watch delivers our
//! own write does not act on the older copy (upstream updates its informer cache in place
//! after each write for the same reason).
//!
//! A claim's written copy is announced *before* its write ([`State::write_claim`]): the claim
//! can be deleted while the write is on its way, and its Deleted event (whose handler forgets
//! the claim) can reach the informer before the write's answer reaches the sync. A copy stored
//! after the answer then outlived the forget, a whole claim kept for the life of the process;
//! the same race left records behind in csi-attacher and csi-provisioner, where a heap profile
//! of `chaos --churn` found it. Now the answer only replaces an announcement that is still
//! there.
//!
//! The driver's answer to a ControllerExpandVolume is kept until the claim's status records
//! it ([`State::expanded`]): a sync whose status write failed (a conflict with a user who
//! raised the request again meanwhile, a lost connection) finishes from that answer instead of
//! asking the driver again for a size it already gave. Upstream calls the driver again (the
//! call is idempotent); the chaos suite counts such a call as a duplicated expansion, and the
//! in-memory API server's held answers produced one every time
//! (`a_claim_grown_again_before_its_pv_write_returns_expands_each_size_once`). A restarted
//! process has no answers and calls again, as upstream. The modify controller keeps the
//! driver's success for a class the same way ([`State::modified`]): a PV class write or claim
//! status write that fails after ControllerModifyVolume succeeded is retried without a second
//! call.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use tokio::time::Instant;

use crate::csi::Expanded;

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
    /// PV sizes written, by PV name; `None` while the write is on its way (announced as the
    /// claims are, see the module docs).
    written: HashMap<String, Option<i64>>,
    claims: HashMap<String, Written>,
    in_use: HashSet<String>,
    /// Claims whose last status write may be stored though its answer was lost (the
    /// connection broke on the way): the next sync reads the claim from the API server first.
    uncertain: HashSet<String>,
    /// The driver's last answer per claim, with the size asked for, until the claim's status
    /// records it.
    expanded: HashMap<String, (i64, Expanded)>,
    /// The class per claim that the driver's last ControllerModifyVolume applied, until the
    /// claim's status records it.
    modified: HashMap<String, String>,
    /// Tells apart the announcements of two writes of one claim (the resize and the modify
    /// controller may both write it).
    writes: u64,
}

/// A claim status this process writes or wrote.
#[derive(Debug)]
enum Written {
    /// The write with this number is on its way.
    Pending(u64),
    /// The claim as the write's answer showed it.
    Claim(Arc<PersistentVolumeClaim>),
}

/// A resourceVersion as a number (csi-common `resource_version`); when either does not parse,
/// the cache wins.
fn version(pvc: &PersistentVolumeClaim) -> Option<u64> {
    csi_common::informer::resource_version(&pvc.metadata)
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

    /// Notes that a status write of the claim may be stored though its answer was lost.
    pub(crate) fn mark_uncertain(&self, key: &str) {
        self.lock().uncertain.insert(key.to_owned());
    }

    /// Whether a status write of the claim may be stored unseen; clears the note.
    pub(crate) fn take_uncertain(&self, key: &str) -> bool {
        self.lock().uncertain.remove(key)
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
        let Some(Written::Claim(written)) = inner.claims.get(key) else {
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

    /// Runs `write`, a write of the claim `key`, announced first (see the module docs); keeps
    /// the claim it answers unless the claim was forgotten meanwhile or a newer copy is kept.
    pub(crate) async fn write_claim<E>(
        &self,
        key: &str,
        write: impl Future<Output = Result<PersistentVolumeClaim, E>>,
    ) -> Result<PersistentVolumeClaim, E> {
        let number = {
            let mut inner = self.lock();
            inner.writes += 1;
            let number = inner.writes;
            inner
                .claims
                .entry(key.to_owned())
                .or_insert(Written::Pending(number));
            number
        };
        let result = write.await;
        let mut inner = self.lock();
        match (&result, inner.claims.get_mut(key)) {
            (Ok(answer), Some(entry)) => {
                let newer_kept = matches!(entry, Written::Claim(kept)
                    if version(kept).is_some_and(|kept| version(answer).is_none_or(|ours| kept > ours)));
                if !newer_kept {
                    *entry = Written::Claim(Arc::new(answer.clone()));
                }
            }
            (Err(_), Some(Written::Pending(pending))) if *pending == number => {
                inner.claims.remove(key);
            }
            _ => {}
        }
        result
    }

    /// Runs `read`, a GET of the claim `key` after a status write whose answer was lost,
    /// announced like a write: the claim it returns is kept as that write's answer would have
    /// been, so a later sync from a cache still behind acts on it too (the attacher's model
    /// test found such a second sync; `a_status_write_whose_answer_was_lost_is_read_back_before_the_next_call`
    /// shows it here).
    pub(crate) async fn read_back<E>(
        &self,
        key: &str,
        read: impl Future<Output = Result<Option<PersistentVolumeClaim>, E>>,
    ) -> Result<Option<PersistentVolumeClaim>, E> {
        // `None` is a claim that is gone, `Some` a failed read: neither keeps a copy.
        let kept = self.write_claim(key, async {
            match read.await {
                Ok(Some(claim)) => Ok(claim),
                Ok(None) => Err(None),
                Err(err) => Err(Some(err)),
            }
        });
        match kept.await {
            Ok(claim) => Ok(Some(claim)),
            Err(None) => Ok(None),
            Err(Some(err)) => Err(err),
        }
    }

    /// The PV size we last wrote for `pv`, if any.
    pub(crate) fn written(&self, pv: &str) -> Option<i64> {
        self.lock().written.get(pv).copied().flatten()
    }

    /// Runs `write`, which sets `pv`'s capacity to `size`, announced first like
    /// [`State::write_claim`]: the size is kept unless the claim was forgotten meanwhile.
    pub(crate) async fn write_volume<T, E>(
        &self,
        pv: &str,
        size: i64,
        write: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        self.lock().written.entry(pv.to_owned()).or_insert(None);
        let result = write.await;
        let mut inner = self.lock();
        match (&result, inner.written.get_mut(pv)) {
            (Ok(_), Some(entry)) => *entry = Some(size),
            (Err(_), Some(None)) => {
                inner.written.remove(pv);
            }
            _ => {}
        }
        result
    }

    /// The driver's answer to this process's ControllerExpandVolume of the claim `key` to
    /// `target` bytes, if the claim's status does not record it yet.
    pub(crate) fn expanded(&self, key: &str, target: i64) -> Option<Expanded> {
        match self.lock().expanded.get(key) {
            Some((asked, answer)) if *asked == target => Some(*answer),
            _ => None,
        }
    }

    /// Keeps the driver's `answer` for `target` (replacing one for another size).
    pub(crate) fn remember_expanded(&self, key: &str, target: i64, answer: Expanded) {
        self.lock()
            .expanded
            .insert(key.to_owned(), (target, answer));
    }

    /// The claim's status records the expansion.
    pub(crate) fn forget_expanded(&self, key: &str) {
        self.lock().expanded.remove(key);
    }

    /// Whether this process's ControllerModifyVolume of the claim `key` to class `target`
    /// succeeded and the claim's status does not record it yet.
    pub(crate) fn modified(&self, key: &str, target: &str) -> bool {
        self.lock()
            .modified
            .get(key)
            .is_some_and(|class| class == target)
    }

    /// Keeps the driver's success for class `target` (replacing one for another class).
    pub(crate) fn remember_modified(&self, key: &str, target: &str) {
        self.lock()
            .modified
            .insert(key.to_owned(), target.to_owned());
    }

    /// The claim's status records the modification.
    pub(crate) fn forget_modified(&self, key: &str) {
        self.lock().modified.remove(key);
    }

    /// Forgets a deleted claim (and its PV).
    pub(crate) fn forget(&self, key: &str, pv: Option<&str>) {
        let mut inner = self.lock();
        inner.expanded.remove(key);
        inner.modified.remove(key);
        inner.final_errors.remove(key);
        inner.slow.remove(key);
        inner.claims.remove(key);
        inner.in_use.remove(key);
        inner.uncertain.remove(key);
        if let Some(pv) = pv {
            inner.written.remove(pv);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_expansion_is_kept_for_its_size_until_recorded_or_the_claim_goes() {
        let state = State::new(Duration::from_mins(5));
        let answer = Expanded {
            capacity: 2 << 30,
            node_expansion_required: true,
        };
        assert_eq!(state.expanded("ns/a", 2 << 30), None);
        state.remember_expanded("ns/a", 2 << 30, answer);
        assert_eq!(state.expanded("ns/a", 2 << 30), Some(answer));
        assert_eq!(state.expanded("ns/a", 3 << 30), None, "another size");
        assert_eq!(state.expanded("ns/b", 2 << 30), None, "another claim");
        state.forget_expanded("ns/a");
        assert_eq!(state.expanded("ns/a", 2 << 30), None, "recorded");
        state.remember_expanded("ns/a", 2 << 30, answer);
        state.forget("ns/a", None);
        assert_eq!(state.expanded("ns/a", 2 << 30), None, "claim gone");
    }

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

    #[tokio::test]
    async fn final_errors_are_recorded_and_cleared() {
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
        let answer = (*claim("12")).clone();
        state
            .write_claim("ns/a", async { Ok::<_, ()>(answer) })
            .await
            .unwrap();
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
        state
            .write_volume("pv", 5, async { Ok::<_, ()>(()) })
            .await
            .unwrap();
        assert_eq!(state.written("pv"), Some(5));
        state.record("ns/a", Some(true));
        state.set_in_use("ns/a", true);
        assert!(state.in_use("ns/a"));
        state.forget("ns/a", Some("pv"));
        assert!(!state.final_error("ns/a"));
        assert!(!state.in_use("ns/a"));
        assert_eq!(state.written("pv"), None);
    }

    fn claim(rv: &str) -> PersistentVolumeClaim {
        let mut pvc = PersistentVolumeClaim::default();
        pvc.metadata.resource_version = Some(rv.to_owned());
        pvc
    }

    fn kept(state: &State) -> usize {
        state.lock().claims.len()
    }

    #[tokio::test]
    async fn a_claim_forgotten_while_its_write_runs_is_not_kept() {
        // The claim is deleted and its Deleted event handled while our status write still
        // waits for its answer: nothing may stay behind.
        let state = State::new(Duration::from_secs(1));
        let written = state
            .write_claim("ns/a", async {
                state.forget("ns/a", None);
                Ok::<_, ()>(claim("12"))
            })
            .await;
        assert!(written.is_ok());
        assert_eq!(kept(&state), 0);

        let resized = state
            .write_volume("pv", 5, async {
                state.forget("ns/a", Some("pv"));
                Ok::<_, ()>(())
            })
            .await;
        assert!(resized.is_ok());
        assert_eq!(state.lock().written.len(), 0);
        let failed = state
            .write_volume("pv", 5, async { Err::<(), _>("409") })
            .await;
        assert!(failed.is_err());
        assert_eq!(state.lock().written.len(), 0);
    }

    #[tokio::test]
    async fn a_claim_read_back_is_kept_like_an_answer_and_a_gone_or_failed_read_keeps_nothing() {
        let state = State::new(Duration::from_secs(1));
        let read = state
            .read_back("ns/a", async { Ok::<_, ()>(Some(claim("12"))) })
            .await;
        assert!(read.unwrap().is_some());
        let seen = state.claim("ns/a", Arc::new(claim("11")));
        assert_eq!(seen.metadata.resource_version.as_deref(), Some("12"));
        state.forget("ns/a", None);

        let gone = state.read_back("ns/a", async { Ok::<_, ()>(None) }).await;
        assert_eq!(gone, Ok(None));
        assert_eq!(kept(&state), 0);
        let failed = state
            .read_back("ns/a", async {
                Err::<Option<PersistentVolumeClaim>, _>("503")
            })
            .await;
        assert_eq!(failed, Err("503"));
        assert_eq!(kept(&state), 0);
        // Deleted while the read was on its way: nothing stays behind.
        let raced = state
            .read_back("ns/a", async {
                state.forget("ns/a", None);
                Ok::<_, ()>(Some(claim("12")))
            })
            .await;
        assert!(raced.unwrap().is_some());
        assert_eq!(kept(&state), 0);
    }

    #[tokio::test]
    async fn a_failed_write_leaves_nothing_and_a_newer_copy_is_not_replaced() {
        let state = State::new(Duration::from_secs(1));
        let failed = state
            .write_claim("ns/a", async { Err::<PersistentVolumeClaim, _>("409") })
            .await;
        assert_eq!(failed.unwrap_err(), "409");
        assert_eq!(kept(&state), 0);

        // Two writers of one claim: the later answer (version 14) is kept even if the earlier
        // (version 13) comes back last.
        let late = state.write_claim("ns/a", async {
            state
                .write_claim("ns/a", async { Ok::<_, ()>(claim("14")) })
                .await
                .unwrap();
            Ok::<_, ()>(claim("13"))
        });
        late.await.unwrap();
        let seen = state.claim("ns/a", Arc::new(claim("10")));
        assert_eq!(seen.metadata.resource_version.as_deref(), Some("14"));
    }
}
