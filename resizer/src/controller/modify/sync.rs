//! One claim's modify sync: decide with `crate::modify::decide`, then carry it out — the
//! status writes through `/status`, ControllerModifyVolume, the PV's class, the events
//! (external-resizer `modify_volume.go` and `modify_status.go`, spec sidecars.md §2.5).

use std::collections::HashMap;

use csi_common::controller::Outcome;
use csi_common::events::{self, EventType};
use csi_common::logging::error_chain;
use csi_common::quote::go_quote;
use csi_common::secrets;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::VolumeAttributesClass;
use k8s_openapi::jiff::Timestamp;

use super::Context;
use crate::controller::write;
use crate::csi::ModifyDriver;
use crate::decide::bound_volume;
use crate::modify::decide::{self, Plan, Skip, Slow};
use crate::modify::error::ModifyError;
use crate::modify::request::{self, Metadata};
use crate::modify::transition;
use crate::names::modify::{self, reason};
use crate::patch;

/// Syncs the claim `key` (`namespace/name`); every error is retried rate-limited (upstream
/// has no delayed requeue in this controller).
pub(super) async fn sync<M: ModifyDriver>(ctx: &Context<M>, key: &str) -> Outcome {
    let Some(cached) = ctx.stores.claim(key) else {
        return Outcome::Done;
    };
    let pvc = match write::current_claim(&ctx.client, &ctx.state, key, cached).await {
        Ok(pvc) => pvc,
        Err(outcome) => return outcome,
    };
    let pv = bound_volume(&pvc).and_then(|name| ctx.stores.volume(name));
    match decide::qualifies(&pvc, pv.as_deref(), &ctx.settings.driver) {
        Ok(()) => {}
        Err(Skip::VolumeNotCached(name)) => {
            tracing::debug!(pvc = key, pv = name, "PV not in the cache yet: retrying");
            return Outcome::Retry;
        }
        Err(Skip::NotBound | Skip::NotOurs) => return Outcome::Done,
    }
    let Some(pv) = pv else {
        return Outcome::Retry;
    };
    match decide::slow(&pvc) {
        Slow::Leave => ctx.state.slow_remove(key),
        Slow::Hold { infeasible } => {
            let waiting = ctx.state.slow_remaining(key).is_some();
            if infeasible {
                ctx.state.slow_add(key);
            }
            if waiting {
                tracing::debug!(
                    pvc = key,
                    "skipping volume modification for pvc {key}, because modification previously failed with infeasible error"
                );
                return Outcome::Retry;
            }
        }
    }
    let uncertain = ctx.uncertain().contains(key);
    match decide::plan(&pvc, uncertain) {
        Plan::Nothing => Outcome::Done,
        Plan::RollBack { modifying } => roll_back(ctx, &pvc, modifying).await,
        Plan::Continue(target) => {
            let Some(class) = class(ctx, &pvc, &target) else {
                return Outcome::Retry;
            };
            call(ctx, key, &pvc, &pv, &class, &target).await
        }
        Plan::Start(target) => {
            let Some(class) = class(ctx, &pvc, &target) else {
                // Pending, and no error: the claim waits for the class (its creation queues
                // the claim, `super::Handlers::class`).
                let next = transition::pending(&pvc, &target);
                return match write::claim_status(&ctx.client, &ctx.state, &pvc, &next, true).await {
                    Ok(_) => Outcome::Done,
                    Err(outcome) => outcome,
                };
            };
            let next = transition::in_progress(&pvc, &target, Timestamp::now());
            let current =
                match write::claim_status(&ctx.client, &ctx.state, &pvc, &next, true).await {
                    Ok(written) => written,
                    Err(outcome) => return outcome,
                };
            event(
                ctx,
                &current,
                EventType::Normal,
                reason::VOLUME_MODIFY,
                format!(
                    "external resizer is modifying volume {} with vac {target}",
                    name(&current)
                ),
            );
            call(ctx, key, &current, &pv, &class, &target).await
        }
    }
}

fn name(pvc: &PersistentVolumeClaim) -> &str {
    pvc.metadata.name.as_deref().unwrap_or_default()
}

fn event<M>(
    ctx: &Context<M>,
    pvc: &PersistentVolumeClaim,
    type_: EventType,
    reason: &'static str,
    message: String,
) {
    ctx.recorder
        .event(&events::reference(pvc), type_, reason, message);
}

/// The class from the cache, or a Warning `VAC "X" does not exist.` (upstream `getTargetVAC`).
fn class<M>(
    ctx: &Context<M>,
    pvc: &PersistentVolumeClaim,
    target: &str,
) -> Option<std::sync::Arc<VolumeAttributesClass>> {
    let class = ctx.class(target);
    if class.is_none() {
        event(
            ctx,
            pvc,
            EventType::Warning,
            reason::VOLUME_MODIFY_FAILED,
            format!("VAC {} does not exist.", go_quote(target)),
        );
    }
    class
}

/// Step 3: `VolumeModifyCanceled` and the `ModifyingVolume` condition removed, when there is
/// one.
async fn roll_back<M>(ctx: &Context<M>, pvc: &PersistentVolumeClaim, modifying: bool) -> Outcome {
    if !modifying {
        return Outcome::Done;
    }
    event(
        ctx,
        pvc,
        EventType::Normal,
        reason::VOLUME_MODIFY_CANCELED,
        "Cancelled modify.".to_owned(),
    );
    let next = transition::rolled_back(pvc);
    match write::claim_status(&ctx.client, &ctx.state, pvc, &next, true).await {
        Ok(_) => Outcome::Done,
        Err(outcome) => outcome,
    }
}

/// Steps 6-8: the call and what its answer leaves.
async fn call<M: ModifyDriver>(
    ctx: &Context<M>,
    key: &str,
    pvc: &PersistentVolumeClaim,
    pv: &PersistentVolume,
    class: &VolumeAttributesClass,
    target: &str,
) -> Outcome {
    let result = if ctx.state.modified(key, target) {
        // An earlier sync's call succeeded and a write after it failed (`State::modified`).
        tracing::debug!(pvc = key, target, "volume modified already, recording it");
        Ok(())
    } else {
        // A call for another class: what the volume had is no longer known.
        ctx.state.forget_modified(key);
        modify_volume(ctx, pvc, pv, class).await
    };
    match result {
        Ok(()) => {
            ctx.state.remember_modified(key, target);
            succeeded(ctx, key, pvc, pv, target).await
        }
        Err(err) => failed(ctx, key, pvc, target, &err).await,
    }
}

/// ControllerModifyVolume with the modify secret (PV annotations, else the expand secret).
async fn modify_volume<M: ModifyDriver>(
    ctx: &Context<M>,
    pvc: &PersistentVolumeClaim,
    pv: &PersistentVolume,
    class: &VolumeAttributesClass,
) -> Result<(), ModifyError> {
    let secrets = match secrets::controller_modify(pv) {
        Some(reference) => secrets::fetch(&ctx.client, &reference)
            .await
            .map_err(ModifyError::Secret)?,
        None => HashMap::default(),
    };
    let metadata = ctx.settings.extra_metadata.then(|| Metadata {
        pvc_name: name(pvc),
        pvc_namespace: pvc.metadata.namespace.as_deref().unwrap_or_default(),
    });
    let request = request::modify(pv, class.parameters.as_ref(), secrets, metadata)?;
    ctx.driver.modify(request).await.map_err(ModifyError::Csi)
}

/// Step 7: the PV's class first (so a claim never shows a class its PV does not have), then
/// the claim's status, then `VolumeModifySuccessful`.
async fn succeeded<M>(
    ctx: &Context<M>,
    key: &str,
    pvc: &PersistentVolumeClaim,
    pv: &PersistentVolume,
    target: &str,
) -> Outcome {
    ctx.uncertain().remove(key);
    let pv_name = pv.metadata.name.as_deref().unwrap_or_default();
    if let Err(err) = write::volume(
        &ctx.client,
        pv_name,
        patch::pv_volume_attributes_class(target),
    )
    .await
    {
        tracing::warn!(
            pvc = key,
            error = error_chain(&err),
            "update pv.Spec.VolumeAttributesClassName for PVC {} failed",
            go_quote(name(pvc))
        );
        return Outcome::Retry;
    }
    let next = transition::completed(pvc, target);
    match write::claim_status(&ctx.client, &ctx.state, pvc, &next, false).await {
        Ok(written) => {
            ctx.state.forget_modified(key);
            event(
                ctx,
                &written,
                EventType::Normal,
                reason::VOLUME_MODIFY_SUCCESSFUL,
                format!(
                    "external resizer modified volume {} with vac {target} successfully",
                    name(&written)
                ),
            );
            Outcome::Done
        }
        Err(outcome) => outcome,
    }
}

/// Step 8. With a driver status: the uncertain set, the status and both conditions, the slow
/// set for `Infeasible`, Warning `VolumeModifyFailed`. Without one: nothing is written
/// (upstream); unlike upstream, a Warning still says why (a missing Secret is otherwise
/// invisible outside the log).
async fn failed<M>(
    ctx: &Context<M>,
    key: &str,
    pvc: &PersistentVolumeClaim,
    target: &str,
    err: &ModifyError,
) -> Outcome {
    let Some((status, failure)) = err
        .status()
        .and_then(|status| Some((status, decide::failure(status.code)?)))
    else {
        tracing::warn!(pvc = key, error = error_chain(err), "cannot modify volume");
        event(
            ctx,
            pvc,
            EventType::Warning,
            reason::VOLUME_MODIFY_FAILED,
            error_chain(err),
        );
        return Outcome::Retry;
    };
    if failure.uncertain {
        ctx.uncertain().insert(key.to_owned());
    } else {
        ctx.uncertain().remove(key);
    }
    let next = transition::failed(
        pvc,
        target,
        failure.status,
        failure.uncertain,
        status,
        Timestamp::now(),
    );
    let written = match write::claim_status(&ctx.client, &ctx.state, pvc, &next, true).await {
        Ok(written) => written,
        Err(outcome) => return outcome,
    };
    if failure.status == modify::INFEASIBLE {
        ctx.state.slow_add(key);
    }
    let message = if failure.uncertain {
        format!("{status}. Still modifying to VAC {target}")
    } else {
        status.to_string()
    };
    tracing::warn!(pvc = key, "{message}");
    event(
        ctx,
        &written,
        EventType::Warning,
        reason::VOLUME_MODIFY_FAILED,
        message,
    );
    Outcome::Retry
}
