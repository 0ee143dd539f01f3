//! Saving the PersistentVolume after CreateVolume succeeded (the lib's queued volume store,
//! spec §4.5): one synchronous POST; if that fails, the PV waits in the `unsavedpvs` queue and is
//! retried with backoff until it is saved. The volume is never deleted because its PV could not
//! be saved. AlreadyExists counts as saved (a previous attempt or another replica wrote it).
//! `ProvisioningSucceeded` is sent when the PV is saved.
//!
//! Beyond upstream: every attempt first checks that the claim still exists. A claim deleted
//! after the driver answered and before its PV was saved gets no PV; its volume is deleted
//! instead (retried with the queue's backoff until DeleteVolume succeeds), so no Released PV is
//! left behind under reclaim policy Retain (docs/compatibility.md).
//!
//! Also beyond upstream: a PV this process saved counts as existing until the PV informer
//! shows it (at most [`SAVED_GRACE`]). Without that, a claim update arriving in the informer's
//! lag (another writer touching the claim) re-ran CreateVolume for a volume already saved, as
//! the lib does; the chaos suite's `conflicts` fault found it (docs/reliability.md).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolume};
use kube::Api;
use kube::api::PostParams;
use tokio::time::Instant;

use proto::csi::v1::DeleteVolumeRequest;

use crate::csi::VolumeDriver;
use crate::decide::volume_handle;
use csi_common::controller::Outcome;
use csi_common::events::EventType;

use super::secrets::deletion_secrets;
use super::{ClaimKey, Context};
use csi_common::workqueue::WorkQueue;

/// A PV waiting to be saved, with what its success Event and metrics need.
#[derive(Debug, Clone)]
pub(crate) struct PendingVolume {
    /// The PV to POST.
    pub(crate) volume: PersistentVolume,
    /// The claim the `ProvisioningSucceeded` Event is about.
    pub(crate) claim: ObjectReference,
    /// `class` label of the provision metrics.
    pub(crate) class: String,
    /// `source` label of the provision metrics.
    pub(crate) source: String,
    /// When the successful provisioning attempt started.
    pub(crate) started: Instant,
}

/// How long a PV saved by this process counts as existing while the PV informer has not shown
/// it yet: the informer lags by milliseconds, a minute is far beyond that.
const SAVED_GRACE: Duration = Duration::from_mins(1);

/// PVs this process saved and the PV informer has not shown yet, by name, with when they were
/// saved.
///
/// An entry is dropped as soon as the informer shows (or deletes) its PV, and in any case once
/// it is older than [`SAVED_GRACE`]. The table is shrunk as it empties: after a burst of 5,000
/// provisions it had grown to hold them all (0.45 MiB) and, before, kept that and the last
/// minute's names until the next save, however long that was (docs/bench.md, "What a burst
/// leaves behind").
#[derive(Debug, Default)]
pub(crate) struct SavedLately(Mutex<HashMap<String, Instant>>);

impl SavedLately {
    /// Notes that PV `name` was saved at `now`, and forgets saves older than [`SAVED_GRACE`].
    fn insert(&self, name: &str, now: Instant) {
        let mut saved = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        saved.retain(|_, at| now.saturating_duration_since(*at) < SAVED_GRACE);
        saved.insert(name.to_owned(), now);
    }

    /// Whether PV `name` was saved within [`SAVED_GRACE`] of `now` and not shown since.
    fn contains(&self, name: &str, now: Instant) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .is_some_and(|at| now.saturating_duration_since(*at) < SAVED_GRACE)
    }

    /// The PV informer shows PV `name` (or its deletion): the cache answers for it from now on.
    pub(crate) fn shown(&self, name: &str) {
        let mut saved = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if saved.remove(name).is_some() && saved.len() * 4 < saved.capacity() {
            // Halving at most once per three quarters removed keeps removals O(1) amortized.
            saved.shrink_to_fit();
        }
    }

    #[cfg(test)]
    fn capacity(&self) -> usize {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .capacity()
    }
}

/// PVs not saved yet, by name, and their queue; and PVs saved lately, by name.
#[derive(Debug)]
pub(crate) struct Unsaved {
    pub(crate) queue: Arc<WorkQueue<String>>,
    pending: Mutex<HashMap<String, PendingVolume>>,
    saved: Arc<SavedLately>,
}

impl Unsaved {
    /// `saved` is shared with the PV informer's handler, which calls [`SavedLately::shown`].
    pub(crate) fn new(queue: Arc<WorkQueue<String>>, saved: Arc<SavedLately>) -> Self {
        Self {
            queue,
            pending: Mutex::new(HashMap::new()),
            saved,
        }
    }

    /// Whether PV `name` is waiting to be saved, or was saved within [`SAVED_GRACE`] and the
    /// informer has not shown it yet.
    pub(crate) fn contains(&self, name: &str) -> bool {
        let pending = self
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(name);
        pending || self.saved.contains(name, Instant::now())
    }

    fn get(&self, name: &str) -> Option<PendingVolume> {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned()
    }

    fn remove(&self, name: &str) {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
    }

    fn push(&self, name: String, pending: PendingVolume) {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.clone(), pending);
        self.queue.add(name);
    }
}

/// POSTs the PV; AlreadyExists is success.
async fn create<D>(ctx: &Context<D>, volume: &PersistentVolume) -> Result<(), kube::Error> {
    let api: Api<PersistentVolume> = Api::all(ctx.client.clone());
    match api.create(&PostParams::default(), volume).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => {
            tracing::debug!(
                volume = volume.metadata.name.as_deref().unwrap_or_default(),
                "volume already exists"
            );
            Ok(())
        }
        Err(err) => Err(err),
    }
}

fn saved<D>(ctx: &Context<D>, pending: &PendingVolume) {
    let name = pending.volume.metadata.name.clone().unwrap_or_default();
    ctx.unsaved.saved.insert(&name, Instant::now());
    // The informer may have shown the PV before the POST's answer came back: its handler then
    // found nothing to drop, and the entry would only go with its grace.
    if ctx.stores.volume(&name).is_some() {
        ctx.unsaved.saved.shown(&name);
    }
    ctx.recorder.event(
        &pending.claim,
        EventType::Normal,
        "ProvisioningSucceeded",
        format!("Successfully provisioned volume {name}"),
    );
    ctx.metrics
        .provisioned(&pending.class, &pending.source, pending.started.elapsed());
    tracing::info!(volume = %name, claim = pending.claim.name.as_deref().unwrap_or_default(), "volume provisioned");
}

/// How one attempt to save a PV ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attempt {
    /// The PV is stored.
    Saved,
    /// The claim is gone and so is its volume: nothing is left to save.
    Abandoned,
    /// Try again later.
    Failed,
}

/// One attempt: POST the PV while its claim exists, else delete the volume instead.
async fn attempt<D: VolumeDriver>(ctx: &Context<D>, pending: &PendingVolume) -> Attempt {
    let name = pending.volume.metadata.name.as_deref().unwrap_or_default();
    if !claim_exists(ctx, &pending.claim) {
        return match delete_volume(ctx, &pending.volume).await {
            Ok(()) => {
                tracing::info!(volume = %name, claim = pending.claim.name.as_deref().unwrap_or_default(), "claim deleted before its volume was saved; deleted the volume instead");
                Attempt::Abandoned
            }
            Err(err) => {
                tracing::warn!(volume = %name, error = err, "cannot delete the volume of a claim deleted before its PV was saved, retrying");
                Attempt::Failed
            }
        };
    }
    match create(ctx, &pending.volume).await {
        Ok(()) => Attempt::Saved,
        Err(err) => {
            tracing::error!(volume = %name, error = csi_common::kube_client::error_text(&err), "Failed to save volume");
            Attempt::Failed
        }
    }
}

/// Whether the claim the PV is for still exists (same UID, not being deleted), as far as the
/// cache knows. A reference without a UID cannot be checked and counts as existing.
fn claim_exists<D>(ctx: &Context<D>, claim: &ObjectReference) -> bool {
    let Some(uid) = claim.uid.clone() else {
        return true;
    };
    let key = ClaimKey {
        uid,
        namespace: claim.namespace.clone().unwrap_or_default(),
        name: claim.name.clone().unwrap_or_default(),
    };
    ctx.stores.live_claim(&key).is_some()
}

/// DeleteVolume for the volume `volume` describes, with its provisioner secret.
async fn delete_volume<D: VolumeDriver>(
    ctx: &Context<D>,
    volume: &PersistentVolume,
) -> Result<(), String> {
    let volume_id = volume_handle(volume)
        .map_err(|err| err.event_message())?
        .to_owned();
    let secrets = deletion_secrets(ctx, volume)
        .await
        .map_err(|err| csi_common::logging::error_chain(&err))?;
    ctx.driver
        // A PV this provisioner made: always a CSI volume.
        .delete_volume(DeleteVolumeRequest { volume_id, secrets }, false)
        .await
        .map_err(|err| err.to_string())
}

/// Saves a freshly built PV: once now, then in the background until it is saved or its claim
/// is gone.
pub(crate) async fn store<D: VolumeDriver>(ctx: &Context<D>, pending: PendingVolume) {
    match attempt(ctx, &pending).await {
        Attempt::Saved => saved(ctx, &pending),
        Attempt::Abandoned => {}
        Attempt::Failed => {
            let name = pending.volume.metadata.name.clone().unwrap_or_default();
            ctx.unsaved.push(name, pending);
        }
    }
}

/// One `unsavedpvs` pass over PV `name`: saved, or abandoned with its claim, is done; a
/// failure is retried with the queue's backoff.
pub(crate) async fn sync<D: VolumeDriver>(ctx: &Context<D>, name: &str) -> Outcome {
    let Some(pending) = ctx.unsaved.get(name) else {
        return Outcome::Done;
    };
    match attempt(ctx, &pending).await {
        Attempt::Saved => {
            // Noted as saved before it leaves the pending set, so that it never counts as
            // missing in between.
            saved(ctx, &pending);
            ctx.unsaved.remove(name);
            Outcome::Done
        }
        Attempt::Abandoned => {
            ctx.unsaved.remove(name);
            Outcome::Done
        }
        Attempt::Failed => Outcome::Retry,
    }
}

#[cfg(test)]
mod tests;
