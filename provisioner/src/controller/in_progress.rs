//! Claims whose CreateVolume may still be running on the driver ("claims in progress", spec
//! §4.7), and claims recently refused as infeasible (§4.8).
//!
//! A claim enters [`InProgress`] when a CreateVolume outcome is InBackground (timeout,
//! Unavailable, Aborted, ...). Its entry keeps the claim copy and the exact request plan, so
//! every retry sends the same name, parameters and topology, even after the claim was deleted.
//! That is the leak fix beyond upstream (#486, #1469): for a deleted claim the controller keeps
//! retrying the create from this entry until the driver gives a definite answer, and if a
//! volume exists it deletes it instead of writing a PV. The entry also remembers the volume
//! once the driver reported it, so the cleanup does not depend on another CreateVolume.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::request::ProvisionPlan;
use crate::source::SourceRef;

/// One claim whose volume may exist on the driver without a PV.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    /// The request (without secrets) every retry repeats.
    pub(crate) plan: Arc<ProvisionPlan>,
    /// The driver's volume id, once a CreateVolume succeeded for a claim that is gone.
    pub(crate) volume_id: Option<String>,
}

/// Claims in progress, keyed by claim UID.
#[derive(Debug, Default)]
pub(crate) struct InProgress {
    entries: Mutex<HashMap<String, Entry>>,
}

impl InProgress {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        // Single-statement critical sections: a panic cannot leave a half-updated map.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The entry of claim `uid`.
    pub(crate) fn get(&self, uid: &str) -> Option<Entry> {
        self.lock().get(uid).cloned()
    }

    /// Whether claim `uid` is in progress.
    pub(crate) fn contains(&self, uid: &str) -> bool {
        self.lock().contains_key(uid)
    }

    /// Records (or replaces) the entry of claim `uid`.
    pub(crate) fn insert(&self, uid: &str, entry: Entry) {
        self.lock().insert(uid.to_owned(), entry);
    }

    /// Remembers that the driver created `volume_id` for claim `uid`.
    pub(crate) fn set_volume(&self, uid: &str, volume_id: String) {
        if let Some(entry) = self.lock().get_mut(uid) {
            entry.volume_id = Some(volume_id);
        }
    }

    /// The data sources of the creates in progress, with their claim's UID: a source must stay
    /// protected while a create from it may still run.
    pub(crate) fn sources(&self) -> Vec<(String, SourceRef)> {
        self.lock()
            .iter()
            .filter_map(|(uid, entry)| Some((uid.clone(), entry.plan.source.clone()?)))
            .collect()
    }

    /// Forgets claim `uid`; returns its entry.
    pub(crate) fn remove(&self, uid: &str) -> Option<Entry> {
        self.lock().remove(uid)
    }
}

/// A claim the driver refused with InvalidArgument, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Refusal {
    class_uid: String,
    at: Instant,
}

/// Claims refused as infeasible: no CreateVolume for them until the window passed or their
/// StorageClass was re-created (upstream `recentlyInfeasible`).
#[derive(Debug)]
pub(crate) struct Infeasible {
    window: Duration,
    refused: Mutex<HashMap<String, Refusal>>,
}

impl Infeasible {
    /// Refusals are honoured for `window` (upstream meant `--retry-interval-max`; see
    /// docs/compatibility.md).
    pub(crate) fn new(window: Duration) -> Self {
        Self {
            window,
            refused: Mutex::new(HashMap::new()),
        }
    }

    /// Records that claim `uid` of class `class_uid` was refused now.
    pub(crate) fn refuse(&self, uid: &str, class_uid: &str) {
        self.refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                uid.to_owned(),
                Refusal {
                    class_uid: class_uid.to_owned(),
                    at: Instant::now(),
                },
            );
    }

    /// How long claim `uid` must still wait before the next CreateVolume, if at all. An entry
    /// whose window passed or whose class was re-created (different UID) is dropped.
    pub(crate) fn remaining(&self, uid: &str, class_uid: &str) -> Option<Duration> {
        let mut refused = self.refused.lock().unwrap_or_else(PoisonError::into_inner);
        let refusal = refused.get(uid)?;
        let elapsed = refusal.at.elapsed();
        if refusal.class_uid != class_uid || elapsed >= self.window {
            refused.remove(uid);
            return None;
        }
        Some(self.window.saturating_sub(elapsed))
    }

    /// Forgets claim `uid` (deleted, or provisioned after all).
    pub(crate) fn forget(&self, uid: &str) {
        self.refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::SourceKind;

    fn entry(source: Option<SourceRef>) -> Entry {
        Entry {
            plan: Arc::new(ProvisionPlan {
                pv_name: "pvc-1".into(),
                request: proto::csi::v1::CreateVolumeRequest::default(),
                provisioner_secret: None,
                pv_secrets: crate::secrets::PvSecretRefs::default(),
                topology: None,
                requested_bytes: 0,
                fs_type: String::new(),
                block: false,
                warnings: Vec::new(),
                source,
            }),
            volume_id: None,
        }
    }

    #[test]
    fn the_sources_of_the_creates_in_progress_are_listed_with_their_claim() {
        let snapshot = SourceRef {
            kind: SourceKind::Snapshot,
            namespace: "ns".into(),
            name: "snap".into(),
            api_group: crate::source::SNAPSHOT_API_GROUP.into(),
            cross_namespace: false,
        };
        let in_progress = InProgress::default();
        in_progress.insert("restore", entry(Some(snapshot.clone())));
        in_progress.insert("plain", entry(None));
        assert_eq!(in_progress.sources(), [("restore".to_owned(), snapshot)]);
        in_progress.remove("restore");
        assert!(in_progress.sources().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn an_infeasible_claim_waits_out_the_window() {
        let infeasible = Infeasible::new(Duration::from_mins(5));
        infeasible.refuse("uid", "class-1");
        assert_eq!(
            infeasible.remaining("uid", "class-1"),
            Some(Duration::from_mins(5))
        );
        tokio::time::advance(Duration::from_secs(100)).await;
        assert_eq!(
            infeasible.remaining("uid", "class-1"),
            Some(Duration::from_secs(200))
        );
        tokio::time::advance(Duration::from_secs(200)).await;
        assert_eq!(infeasible.remaining("uid", "class-1"), None);
        assert_eq!(infeasible.remaining("other", "class-1"), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_recreated_class_ends_the_infeasible_window_early() {
        let infeasible = Infeasible::new(Duration::from_mins(5));
        infeasible.refuse("uid", "class-1");
        assert_eq!(infeasible.remaining("uid", "class-2"), None);
        // The entry is gone for good, even for the old class UID.
        assert_eq!(infeasible.remaining("uid", "class-1"), None);
    }
}
