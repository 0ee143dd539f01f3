//! The attach flow (external-attacher `syncAttach` / `csiAttach`) and the trivial handler.
//!
//! Everything that can be checked is checked before the finalizer goes on (spec §1.4 step 4),
//! so a VolumeAttachment that can never attach stays deletable. Every failure is written to
//! `status.attachError`, recorded as a Warning event and retried with backoff: none is final,
//! because each can be fixed from outside (the PV, the CSINode, the Secret, the driver).

use csi_common::access_modes::AccessModeError;
use csi_common::controller::Outcome;
use csi_common::events::EventType;
use csi_common::kube_client::KubeError;
use csi_common::secrets::{self, FetchError};
use csi_common::status::CsiError;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};

use super::Context;
use super::settled::Done;
use crate::cached::VolumeAttachment;
use crate::csi::AttachDriver;
use crate::decide::VaAction;
use crate::node::{self, NodeIdError};
use crate::source::{self, Purpose, SourceError};
use crate::{patch, request};

/// Event reasons, as kube-controller-manager's attach-detach controller names them on Pods.
pub(super) const ATTACHED: &str = "SuccessfulAttachVolume";
pub(super) const ATTACH_FAILED: &str = "FailedAttachVolume";

/// Why an attach did not finish. All are retried with backoff (upstream retries every attach
/// error until it succeeds).
#[derive(Debug, thiserror::Error)]
pub(super) enum AttachError {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Node(#[from] NodeIdError),
    #[error(transparent)]
    AccessMode(#[from] AccessModeError),
    /// external-attacher's `getCredentialsFromPV` text.
    #[error("failed to load secret \"{}/{}\": {}", .0.namespace, .0.name, .0.source)]
    Secret(FetchError),
    #[error("could not add PersistentVolume finalizer: {0}")]
    PvFinalizer(KubeError),
    #[error("could not save VolumeAttachment: {0}")]
    SaveAttachment(KubeError),
    /// The driver's answer, in grpc-go's words.
    #[error(transparent)]
    Csi(#[from] CsiError),
    /// Published, but the publish context cannot be stored; the VolumeAttachment keeps its
    /// finalizer (the volume is attached in the backend and must be unpublished on delete).
    #[error(transparent)]
    PublishContext(#[from] patch::PublishContextTooLarge),
}

impl AttachError {
    /// The `errorCode` of `status.attachError`: the gRPC code of a driver error.
    fn grpc_code(&self) -> Option<i32> {
        match self {
            Self::Csi(err) => err.code.map(|code| code as i32),
            _ => None,
        }
    }
}

/// Publishes the volume and marks the VolumeAttachment attached.
pub(super) async fn attach<D: AttachDriver>(ctx: &Context<D>, va: &VolumeAttachment) -> Outcome {
    let name = va.metadata.name.as_deref().unwrap_or_default();
    tracing::info!(va = name, "attaching");
    match publish(ctx, va).await {
        Ok(published) => {
            let stale = va
                .metadata
                .resource_version
                .iter()
                .chain(&published.patched_version);
            let marked = ctx.settled.write(
                va,
                VaAction::Attach,
                stale.cloned().collect(),
                patch_status(ctx, name, &published.status),
            );
            match marked.await {
                Ok(()) => {
                    tracing::info!(va = name, "attached");
                    ctx.event(va, EventType::Normal, ATTACHED, &success_message(va));
                    Outcome::Done
                }
                Err(err) => {
                    tracing::warn!(va = name, error = %err, "failed to mark as attached");
                    let Published { status, call, .. } = published;
                    ctx.settled.answered(va, call, Done::Published(status));
                    Outcome::Retry
                }
            }
        }
        Err(err) => {
            let message = err.to_string();
            tracing::warn!(va = name, error = %message, "failed to attach");
            let code = ctx.settings.error_codes.then(|| err.grpc_code()).flatten();
            let body = patch::attach_error(&message, Timestamp::now(), code);
            if let Err(save) = patch_status(ctx, name, &body).await {
                tracing::warn!(va = name, error = %save, "failed to save attach error");
            }
            ctx.event(
                va,
                EventType::Warning,
                ATTACH_FAILED,
                &failure_message(va, &message),
            );
            Outcome::Retry
        }
    }
}

/// What a successful ControllerPublishVolume leaves to write.
struct Published {
    /// The attached status.
    status: serde_json::Value,
    /// The resourceVersion of our metadata patch, if one was sent.
    patched_version: Option<String>,
    /// The volume id and node id of the call.
    call: (String, String),
}

/// Checks, finalizers, then ControllerPublishVolume, unless an earlier sync's call succeeded
/// and only its status write failed (`Settled::answer`).
async fn publish<D: AttachDriver>(
    ctx: &Context<D>,
    va: &VolumeAttachment,
) -> Result<Published, AttachError> {
    let pv = source::pv_name(va).and_then(|name| ctx.stores.volume(name));
    let volume = source::resolve(va, pv.as_deref(), Purpose::Attach)?;
    let secret = volume
        .csi
        .controller_publish_secret_ref
        .as_ref()
        .map(secrets::SecretRef::from);
    let secrets = match &secret {
        Some(reference) => secrets::fetch(&ctx.client, reference)
            .await
            .map_err(AttachError::Secret)?,
        None => std::collections::HashMap::default(),
    };
    let csi_node = ctx.stores.csi_node(&va.spec.node_name);
    let node_id = node::for_attach(
        csi_node.as_deref(),
        &va.spec.node_name,
        &ctx.settings.driver,
    )?;
    let publish = request::publish(&volume, &node_id, secrets, &ctx.settings.publish)?;

    if let Some(pv) = &pv
        && let Some(body) = patch::pv_add_finalizer(pv, &ctx.finalizer)
    {
        let name = pv.metadata.name.as_deref().unwrap_or_default();
        ctx.patch_volume(name, body)
            .await
            .map_err(|err| AttachError::PvFinalizer(KubeError(err)))?;
    }
    let secret_text = secret.as_ref().map(source::secret_text);
    let annotations = source::attach_annotations(&volume, &node_id, secret_text.as_deref());
    let mut patched_version = None;
    if let Some(body) = patch::va_attach_metadata(va, &ctx.finalizer, &annotations) {
        let name = va.metadata.name.as_deref().unwrap_or_default();
        let patched = ctx
            .attachments()
            .patch(name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .map_err(|err| AttachError::SaveAttachment(KubeError(err)))?;
        patched_version = patched.metadata.resource_version;
    }
    let call = (publish.volume_id.clone(), publish.node_id.clone());
    let status = match ctx.settled.answer(va, &call) {
        Some(Done::Published(status)) => {
            tracing::debug!(
                va = va.metadata.name.as_deref().unwrap_or_default(),
                "published already, writing the attached status"
            );
            status
        }
        _ => patch::attached(&ctx.driver.publish(publish, volume.migrated).await?)?,
    };
    Ok(Published {
        status,
        patched_version,
        call,
    })
}

/// The trivial handler: mark attached, nothing else (spec §1.4, trivial handler).
pub(super) async fn trivial<D>(ctx: &Context<D>, va: &VolumeAttachment) -> Outcome {
    let Some(body) = crate::decide::trivial_patch(va, &ctx.settings.driver) else {
        return Outcome::Done;
    };
    let name = va.metadata.name.as_deref().unwrap_or_default();
    match patch_status(ctx, name, &body).await {
        Ok(()) => Outcome::Done,
        Err(err) => {
            tracing::warn!(va = name, error = %err, "failed to mark as attached");
            Outcome::Retry
        }
    }
}

/// A merge patch of `/status`.
pub(super) async fn patch_status<D>(
    ctx: &Context<D>,
    name: &str,
    body: &serde_json::Value,
) -> Result<(), KubeError> {
    ctx.attachments()
        .patch_status(name, &PatchParams::default(), &Patch::Merge(body))
        .await
        .map(drop)
        .map_err(KubeError)
}

pub(super) fn subject(va: &VolumeAttachment) -> String {
    let volume = source::pv_name(va).unwrap_or("inline volume");
    format!("volume \"{volume}\" on node \"{}\"", va.spec.node_name)
}

fn success_message(va: &VolumeAttachment) -> String {
    format!("Attached {}", subject(va))
}

fn failure_message(va: &VolumeAttachment, error: &str) -> String {
    format!("Attach of {} failed: {error}", subject(va))
}
