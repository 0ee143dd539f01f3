//! The detach flow (external-attacher `syncDetach` / `csiDetach`).
//!
//! The node ID falls back to the VolumeAttachment's annotation when the CSINode or its driver
//! entry is gone, and the volume handle to the attach's annotation when the PersistentVolume is
//! gone (not upstream, issue #235). After a successful ControllerUnpublishVolume the finalizer
//! goes first and the status second, so a failure in between cannot cause a second unpublish
//! (upstream v4.9, issue #587); NotFound on the status write means the object is already gone,
//! and the status write is left out when the finalizer removal's answer shows it is gone.
//! Should that write fail all the same, the retry does not unpublish again (`Settled::answer`).

use csi_common::controller::Outcome;
use csi_common::events::EventType;
use csi_common::kube_client::KubeError;
use csi_common::secrets::{self, FetchError};
use csi_common::status::CsiError;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};

use super::Context;
use super::attach::patch_status;
use super::settled::Done;
use crate::cached::VolumeAttachment;
use crate::csi::AttachDriver;
use crate::decide::{self, VaAction};
use crate::node::{self, NodeIdError};
use crate::source::{self, SourceError};
use crate::{patch, request};

/// Event reasons, as kube-controller-manager's attach-detach controller names them.
const DETACHED: &str = "SuccessfulDetachVolume";
const DETACH_FAILED: &str = "FailedDetachVolume";

/// Why a detach did not finish; all are retried with backoff, forever, as upstream does (the
/// driver must answer success for a volume that is already detached).
#[derive(Debug, thiserror::Error)]
enum DetachError {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Node(#[from] NodeIdError),
    #[error("failed to load secret \"{}/{}\": {}", .0.namespace, .0.name, .0.source)]
    Secret(FetchError),
    #[error(transparent)]
    Csi(#[from] CsiError),
    #[error("could not mark as detached: {0}")]
    MarkDetached(KubeError),
}

/// Unpublishes the volume, then drops the finalizer and marks the VolumeAttachment detached.
pub(super) async fn detach<D: AttachDriver>(ctx: &Context<D>, va: &VolumeAttachment) -> Outcome {
    let name = va.metadata.name.as_deref().unwrap_or_default();
    tracing::info!(va = name, "detaching");
    match unpublish(ctx, va).await {
        Ok(()) => {
            tracing::info!(va = name, "detached");
            let message = format!("Detached {}", super::attach::subject(va));
            ctx.event(va, EventType::Normal, DETACHED, &message);
            Outcome::Done
        }
        Err(err) => {
            let message = err.to_string();
            tracing::warn!(va = name, error = %message, "failed to detach");
            let body = patch::detach_error(&message, Timestamp::now());
            if let Err(save) = patch_status(ctx, name, &body).await
                && save.code() != Some(404)
            {
                tracing::warn!(va = name, error = %save, "failed to save detach error");
            }
            let text = format!("Detach of {} failed: {message}", super::attach::subject(va));
            ctx.event(va, EventType::Warning, DETACH_FAILED, &text);
            Outcome::Retry
        }
    }
}

async fn unpublish<D: AttachDriver>(
    ctx: &Context<D>,
    va: &VolumeAttachment,
) -> Result<(), DetachError> {
    let pv = source::pv_name(va).and_then(|name| ctx.stores.volume(name));
    let target = source::detach_target(va, pv.as_deref())?;
    let csi_node = ctx.stores.csi_node(&va.spec.node_name);
    let node_id = node::for_detach(csi_node.as_deref(), va, &ctx.settings.driver)?;
    let call = (target.volume_id.clone(), node_id.clone());
    if ctx.settled.unpublished(va, &call) {
        tracing::debug!(
            va = va.metadata.name.as_deref().unwrap_or_default(),
            "unpublished already, removing the finalizer"
        );
    } else {
        let secrets = match &target.secret {
            Some(reference) => secrets::fetch(&ctx.client, reference)
                .await
                .map_err(DetachError::Secret)?,
            None => std::collections::HashMap::default(),
        };
        ctx.driver
            .unpublish(
                request::unpublish(&target, &node_id, secrets),
                target.migrated,
            )
            .await?;
    }
    let stale = va.metadata.resource_version.iter().cloned().collect();
    let marked = ctx
        .settled
        .write(va, VaAction::Detach, stale, mark_detached(ctx, va))
        .await;
    if marked.is_err() {
        ctx.settled.answered(va, call, Done::Unpublished);
    }
    marked.map_err(DetachError::MarkDetached)
}

/// Finalizer off (main resource), then the status (`/status`); NotFound on either means the
/// API server already deleted the object, which is what a detach wants. When removing our
/// finalizer deleted the object, the status write is skipped: it could only answer 404.
async fn mark_detached<D>(ctx: &Context<D>, va: &VolumeAttachment) -> Result<(), KubeError> {
    let name = va.metadata.name.as_deref().unwrap_or_default();
    if let Some(body) = patch::va_remove_finalizer(va, &ctx.finalizer) {
        match ctx
            .attachments()
            .patch(name, &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            Ok(answer) if decide::gone_after_finalizer_removal(&answer) => return Ok(()),
            Ok(_) => {}
            Err(err) if super::is_not_found(&err) => return Ok(()),
            Err(err) => return Err(KubeError(err)),
        }
    }
    match patch_status(ctx, name, &patch::detached()).await {
        Err(err) if err.code() == Some(404) => Ok(()),
        other => other,
    }
}
