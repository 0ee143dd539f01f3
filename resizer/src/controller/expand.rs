//! One claim's sync: decide with `crate::decide`, then carry it out — status writes through
//! `/status`, ControllerExpandVolume (or the trivial resizer), the PV capacity, the events
//! (external-resizer `expand_and_recover.go`, spec sidecars.md §2.4).

use std::sync::Arc;

use csi_common::controller::Outcome;
use csi_common::events::{self, EventType};
use csi_common::logging::error_chain;
use csi_common::quote::go_quote;
use csi_common::secrets::{self, SecretRef};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::jiff::Timestamp;

use super::{Context, Flow, legacy};
use crate::csi::{ExpandDriver, Expanded};
use crate::decide::{self, History, Skip};
use crate::error::ExpandError;
use crate::inuse;
use crate::mode::Resizer;
use crate::names::{self, reason, resize_status};
use crate::{patch, request, transition};

#[cfg(test)]
mod properties;

/// Syncs the claim `key` (`namespace/name`).
pub(super) async fn sync<D: ExpandDriver>(ctx: &Context<D>, key: &str) -> Outcome {
    let Some(cached) = ctx.stores.claim(key) else {
        return Outcome::Done;
    };
    let pvc = match super::write::current_claim(&ctx.client, &ctx.state, key, cached).await {
        Ok(pvc) => pvc,
        Err(outcome) => return outcome,
    };
    let pv = decide::bound_volume(&pvc).and_then(|name| ctx.stores.volume(name));
    if ctx.settings.annotate_fs_resize
        && let Some(pv) = &pv
        && decide::pre_resize_annotation_done(&pvc, pv, &ctx.settings.driver)
        && let Err(err) = patch_volume(ctx, pv, patch::pv_remove_pre_resize_capacity()).await
    {
        tracing::warn!(
            pvc = key,
            error = error_chain(&err),
            "cannot remove the pre-resize-capacity annotation"
        );
        return Outcome::Retry;
    }
    let mut claim = match decide::claim(&pvc, pv.as_deref(), &ctx.settings.driver) {
        Ok(claim) => claim,
        Err(skip) => {
            release_pods(ctx, &pvc);
            return skipped(ctx, &pvc, key, &skip);
        }
    };
    let Some(pv) = pv else {
        return Outcome::Retry;
    };
    let pv_name = name(&pv);
    if let Some(written) = ctx.state.written(pv_name) {
        claim.pv = claim.pv.max(written);
    }
    if ctx.settings.flow == Flow::Legacy {
        return legacy::sync(ctx, key, &pvc, &pv, &claim).await;
    }
    // Read before marking, as upstream's `expandAndRecover` (`inSlowSet`, then
    // `markForSlowRetry`): an Infeasible claim that this process has not seen fail yet (after
    // a restart or a failover) gets one attempt at once, then waits out the window.
    let slow = ctx.state.slow_remaining(key);
    if claim.resize_status.as_deref() == Some(resize_status::CONTROLLER_INFEASIBLE) {
        ctx.state.slow_add(key);
    }
    let history = History {
        final_error: ctx.state.final_error(key),
        trivial: ctx.settings.resizer == Resizer::Trivial,
    };
    let Some(target) = decide::target(&claim, history) else {
        release_pods(ctx, &pvc);
        return Outcome::Done;
    };
    let mut current = (*pvc).clone();
    if claim.allocated == Some(target) {
        if let Some(remaining) = slow {
            tracing::debug!(
                pvc = key,
                ?remaining,
                "infeasible size: waiting for the slow-retry window"
            );
            return Outcome::RetryAfter(remaining);
        }
    } else {
        ctx.state.slow_remove(key);
        let next = transition::in_progress(&current, target, Timestamp::now());
        current = match write_status(ctx, &current, &next, true).await {
            Ok(written) => written,
            Err(outcome) => return outcome,
        };
    }

    if let Some(expanded) = ctx.state.expanded(key, target) {
        // Our last sync expanded the volume to this size but could not record it (state.rs).
        tracing::debug!(
            pvc = key,
            target,
            "the volume is expanded already: recording it"
        );
        return succeeded(ctx, key, &pv, &current, target, expanded).await;
    }
    if let Some(outcome) = in_use_gate(ctx, key, &current).await {
        return outcome;
    }
    resizing_event(ctx, &current, pv_name);
    match resize(ctx, &pv, target).await {
        Ok(expanded) => succeeded(ctx, key, &pv, &current, target, expanded).await,
        Err(err) => failed(ctx, key, pv_name, &current, &err).await,
    }
}

/// Step 6: while a pod uses a claim the driver may not expand now (it said FAILED_PRECONDITION
/// last time, or it expands only offline), Warning `VolumeResizeFailed` and a retry; the pod
/// watch also queues the claim as soon as its last pod goes. `None`: go on and call the
/// driver (step 7 clears the in-use mark).
pub(super) async fn in_use_gate<D>(
    ctx: &Context<D>,
    key: &str,
    current: &PersistentVolumeClaim,
) -> Option<Outcome> {
    let settings = &ctx.settings;
    let pods = ctx.pods.as_ref()?;
    if !settings
        .in_use
        .must_check(settings.resizer, ctx.state.in_use(key))
    {
        return None;
    }
    let namespace = current.metadata.namespace.as_deref().unwrap_or_default();
    let claim = current.metadata.name.as_deref().unwrap_or_default();
    match pods.in_use(namespace, claim).await {
        Ok(false) => {
            ctx.state.set_in_use(key, false);
            None
        }
        Ok(true) => {
            let message = inuse::message(namespace, claim, &settings.driver);
            tracing::info!(pvc = key, "{message}");
            resize_failed(ctx, current, message);
            Some(Outcome::Retry)
        }
        // The watch keeps trying in the background (e.g. until pod RBAC is granted).
        Err(err) => {
            tracing::warn!(pvc = key, "cannot tell whether a pod uses the claim: {err}");
            Some(Outcome::Retry)
        }
    }
}

/// The PV's name (cached objects always have one).
pub(super) fn name(pv: &PersistentVolume) -> &str {
    pv.metadata.name.as_deref().unwrap_or_default()
}

fn skipped<D>(ctx: &Context<D>, pvc: &PersistentVolumeClaim, key: &str, skip: &Skip) -> Outcome {
    if skip.is_user_error() {
        tracing::warn!(pvc = key, error = error_chain(skip), "cannot resize");
        event(
            ctx,
            pvc,
            EventType::Warning,
            reason::VOLUME_RESIZE_FAILED,
            error_chain(skip),
        );
    } else if skip.retry() {
        tracing::info!(pvc = key, reason = %skip, "retrying");
    } else {
        tracing::trace!(pvc = key, reason = %skip, "nothing to do");
    }
    if skip.retry() {
        Outcome::Retry
    } else {
        Outcome::Done
    }
}

/// Normal `Resizing`, before each call.
pub(super) fn resizing_event<D>(ctx: &Context<D>, pvc: &PersistentVolumeClaim, pv_name: &str) {
    event(
        ctx,
        pvc,
        EventType::Normal,
        reason::RESIZING,
        format!("External resizer is resizing volume {pv_name}"),
    );
}

/// Warning `VolumeResizeFailed`.
pub(super) fn resize_failed<D>(ctx: &Context<D>, pvc: &PersistentVolumeClaim, message: String) {
    event(
        ctx,
        pvc,
        EventType::Warning,
        reason::VOLUME_RESIZE_FAILED,
        message,
    );
}

pub(super) fn event<D>(
    ctx: &Context<D>,
    pvc: &PersistentVolumeClaim,
    type_: EventType,
    reason: &'static str,
    message: String,
) {
    ctx.recorder
        .event(&events::reference(pvc), type_, reason, message);
}

/// Step 7: the CSI resizer's call, or the trivial resizer's answer.
pub(super) async fn resize<D: ExpandDriver>(
    ctx: &Context<D>,
    pv: &PersistentVolume,
    target: i64,
) -> Result<Expanded, ExpandError> {
    match ctx.settings.resizer {
        Resizer::Csi => expand(ctx, pv, target).await,
        // external-resizer `trivialResizer`: the volume needs no controller call; kubelet grows
        // the file system.
        Resizer::Trivial => Ok(Expanded {
            capacity: target,
            node_expansion_required: true,
        }),
    }
}

/// ControllerExpandVolume with the expand secret; an answer below `target` is an error.
async fn expand<D: ExpandDriver>(
    ctx: &Context<D>,
    pv: &PersistentVolume,
    target: i64,
) -> Result<Expanded, ExpandError> {
    let (spec, migrated) = request::volume(pv)?;
    let csi = spec.csi.as_ref().ok_or(ExpandError::NoVolumeHandle)?;
    let secrets = match &csi.controller_expand_secret_ref {
        Some(reference) => secrets::fetch(&ctx.client, &SecretRef::from(reference))
            .await
            .map_err(ExpandError::Secret)?,
        None => std::collections::HashMap::default(),
    };
    let request = request::expand(&spec, csi, target, secrets, &ctx.settings.capabilities)?;
    let expanded = ctx
        .driver
        .expand(request, migrated)
        .await
        .map_err(ExpandError::Csi)?;
    expanded.at_least(target)
}

/// Step 9: PV capacity (and the pre-resize annotation), then the claim's status and event.
/// `VolumeResizeSuccessful` is only ever sent here, after the driver said OK for this target
/// (not after a DeadlineExceeded, upstream #474), and `FileSystemResizePending` is never
/// written when the driver said node expansion is not required (upstream #414).
pub(super) async fn succeeded<D: ExpandDriver>(
    ctx: &Context<D>,
    key: &str,
    pv: &PersistentVolume,
    current: &PersistentVolumeClaim,
    target: i64,
    expanded: Expanded,
) -> Outcome {
    ctx.state.remember_expanded(key, target, expanded);
    ctx.state.record(key, None);
    ctx.state.slow_remove(key);
    let pre_resize = (expanded.node_expansion_required && ctx.settings.annotate_fs_resize)
        .then(|| {
            current
                .status
                .as_ref()
                .and_then(|s| s.capacity.as_ref())
                .and_then(|c| c.get(names::STORAGE))
                .map(|q| q.0.clone())
        })
        .flatten();
    let resized = patch_volume(
        ctx,
        pv,
        patch::pv_capacity(pv, expanded.capacity, pre_resize.as_deref()),
    );
    if let Err(err) = ctx
        .state
        .write_volume(name(pv), expanded.capacity, resized)
        .await
    {
        tracing::warn!(
            pvc = key,
            error = error_chain(&err),
            "cannot update the PV capacity"
        );
        event(
            ctx,
            current,
            EventType::Warning,
            reason::VOLUME_RESIZE_FAILED,
            format!(
                "error updating PV {} capacity: {}",
                go_quote(name(pv)),
                error_chain(&err)
            ),
        );
        return Outcome::Retry;
    }
    let (next, reason, message) = if expanded.node_expansion_required {
        (
            if ctx.settings.flow == Flow::ExpandAndRecover {
                transition::node_pending(current, Timestamp::now())
            } else {
                transition::legacy::node_pending(current, Timestamp::now())
            },
            reason::FILE_SYSTEM_RESIZE_REQUIRED,
            "Require file system resize of volume on node",
        )
    } else {
        (
            if ctx.settings.flow == Flow::ExpandAndRecover {
                transition::finished(current, expanded.capacity)
            } else {
                transition::legacy::finished(current, expanded.capacity)
            },
            reason::VOLUME_RESIZE_SUCCESSFUL,
            "Resize volume succeeded",
        )
    };
    match write_status(ctx, current, &next, true).await {
        Ok(written) => {
            ctx.state.forget_expanded(key);
            event(ctx, &written, EventType::Normal, reason, message.to_owned());
            Outcome::Done
        }
        Err(outcome) => outcome,
    }
}

/// Step 8: remember how it ended, write `ControllerResizeError` (and `ControllerResizeInfeasible`)
/// for a final error without the resourceVersion check, Warning `VolumeResizeFailed`, retry.
async fn failed<D>(
    ctx: &Context<D>,
    key: &str,
    pv_name: &str,
    current: &PersistentVolumeClaim,
    err: &ExpandError,
) -> Outcome {
    let is_final = err.is_final();
    ctx.state.record(key, Some(is_final));
    if err.is_in_use() {
        ctx.state.set_in_use(key, true);
    }
    let message = failure_message(ctx, pv_name, err);
    tracing::warn!(pvc = key, final_error = is_final, "{message}");
    if err.shows_condition() {
        let infeasible = err.is_infeasible();
        if infeasible {
            ctx.state.slow_add(key);
        } else {
            ctx.state.slow_remove(key);
        }
        // The condition carries the error alone ("failed to expand pvc with rpc error: …", as
        // upstream); the event carries the whole message.
        let next = transition::failed(current, &error_chain(err), infeasible, Timestamp::now());
        // A failed write is logged there; the retry below comes back to it.
        let _ = write_status(ctx, current, &next, false).await;
    } else {
        ctx.state.slow_remove(key);
    }
    resize_failed(ctx, current, message);
    Outcome::Retry
}

/// The claim needs no expansion (any more): it stops waiting for its pods, so its
/// namespace's pod watch does not outlive the reason for it (e.g. the user lowered the request
/// while a StatefulSet pod keeps using the claim).
pub(super) fn release_pods<D>(ctx: &Context<D>, pvc: &PersistentVolumeClaim) {
    if let Some(pods) = &ctx.pods {
        pods.forget(
            pvc.metadata.namespace.as_deref().unwrap_or_default(),
            pvc.metadata.name.as_deref().unwrap_or_default(),
        );
    }
}

/// Upstream's `resize volume "<pv>" by resizer "<driver>" failed: <error>`.
pub(super) fn failure_message<D>(ctx: &Context<D>, pv_name: &str, err: &ExpandError) -> String {
    format!(
        "resize volume {} by resizer {} failed: {}",
        go_quote(pv_name),
        go_quote(&ctx.settings.driver),
        error_chain(err)
    )
}

/// Writes the claim's status from `old` to `new` (`super::write::claim_status`).
pub(super) async fn write_status<D>(
    ctx: &Context<D>,
    old: &PersistentVolumeClaim,
    new: &PersistentVolumeClaim,
    resource_version_check: bool,
) -> Result<PersistentVolumeClaim, Outcome> {
    super::write::claim_status(&ctx.client, &ctx.state, old, new, resource_version_check).await
}

async fn patch_volume<D>(
    ctx: &Context<D>,
    pv: &PersistentVolume,
    body: serde_json::Value,
) -> Result<Arc<PersistentVolume>, kube::Error> {
    super::write::volume(&ctx.client, name(pv), body).await
}
