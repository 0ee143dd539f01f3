//! Saving the PersistentVolume after CreateVolume succeeded (the lib's queued volume store,
//! spec §4.5): one synchronous POST; if that fails, the PV waits in the `unsavedpvs` queue and is
//! retried with backoff until it is saved. The volume is never deleted because its PV could not
//! be saved. AlreadyExists counts as saved (a previous attempt or another replica wrote it).
//! `ProvisioningSucceeded` is sent when the PV is saved.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolume};
use kube::Api;
use kube::api::PostParams;
use tokio::time::Instant;

use crate::csi::VolumeDriver;
use crate::events::EventType;

use super::Context;
use super::queue::WorkQueue;

/// A PV waiting to be saved, with what its success Event and metrics need.
#[derive(Debug, Clone)]
pub struct PendingVolume {
    /// The PV to POST.
    pub volume: PersistentVolume,
    /// The claim the `ProvisioningSucceeded` Event is about.
    pub claim: ObjectReference,
    /// `class` label of the provision metrics.
    pub class: String,
    /// `source` label of the provision metrics.
    pub source: String,
    /// When the successful provisioning attempt started.
    pub started: Instant,
}

/// PVs not saved yet, by name, and their queue.
#[derive(Debug)]
pub struct Unsaved {
    pub(crate) queue: Arc<WorkQueue<String>>,
    pending: Mutex<HashMap<String, PendingVolume>>,
}

impl Unsaved {
    pub(crate) fn new(queue: Arc<WorkQueue<String>>) -> Self {
        Self {
            queue,
            pending: Mutex::new(HashMap::new()),
        }
    }

    /// Whether PV `name` is waiting to be saved.
    pub fn contains(&self, name: &str) -> bool {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(name)
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

/// Saves a freshly built PV: once now, then in the background until it succeeds.
pub(crate) async fn store<D>(ctx: &Context<D>, pending: PendingVolume) {
    match create(ctx, &pending.volume).await {
        Ok(()) => saved(ctx, &pending),
        Err(err) => {
            let name = pending.volume.metadata.name.clone().unwrap_or_default();
            tracing::error!(volume = %name, error = csi_common::kube_client::error_text(&err), "Failed to save volume");
            ctx.unsaved.push(name, pending);
        }
    }
}

/// One `unsavedpvs` worker.
pub(crate) async fn worker<D: VolumeDriver>(ctx: Arc<Context<D>>) {
    while let Some(name) = ctx.unsaved.queue.get().await {
        if let Some(pending) = ctx.unsaved.get(&name) {
            match create(&ctx, &pending.volume).await {
                Ok(()) => {
                    ctx.unsaved.remove(&name);
                    ctx.unsaved.queue.forget(&name);
                    saved(&ctx, &pending);
                }
                Err(err) => {
                    tracing::error!(volume = %name, error = csi_common::kube_client::error_text(&err), "Failed to save volume");
                    ctx.unsaved.queue.add_rate_limited(name.clone());
                }
            }
        }
        ctx.unsaved.queue.done(&name);
    }
}
