//! One claim's sync with `RecoverVolumeExpansionFailure=false` (external-resizer
//! `controller.go` `resizePVC` / `resizeVolume`, spec sidecars.md §2.4 "Legacy flow"): the
//! request is the target, `Resizing`, the in-use gate, the call, the PV capacity, then
//! `FileSystemResizePending` or the new `status.capacity`. No `allocatedResources`, no
//! resize status, no slow set, no recovery by lowering the request, and a failure is only a
//! Warning event (no `ControllerResizeError` condition).

use csi_common::controller::Outcome;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::jiff::Timestamp;

use super::Context;
use super::expand::{
    failure_message, in_use_gate, name, release_pods, resize, resize_failed, resizing_event,
    succeeded, write_status,
};
use crate::csi::ExpandDriver;
use crate::decide::{self, Claim};
use crate::transition;

/// Syncs a claim that qualifies (`decide::claim`) with the legacy flow.
pub(super) async fn sync<D: ExpandDriver>(
    ctx: &Context<D>,
    key: &str,
    pvc: &PersistentVolumeClaim,
    pv: &PersistentVolume,
    claim: &Claim,
) -> Outcome {
    let Some(target) = decide::legacy_target(claim) else {
        release_pods(ctx, pvc);
        return Outcome::Done;
    };
    let next = transition::legacy::in_progress(pvc, Timestamp::now());
    let current = match write_status(ctx, pvc, &next, true).await {
        Ok(written) => written,
        Err(outcome) => return outcome,
    };
    if let Some(expanded) = ctx.state.expanded(key, target) {
        // As in the recovery flow (state.rs): expanded already, only not recorded.
        return succeeded(ctx, key, pv, &current, target, expanded).await;
    }
    if let Some(outcome) = in_use_gate(ctx, key, &current).await {
        return outcome;
    }
    let pv_name = name(pv);
    resizing_event(ctx, &current, pv_name);
    match resize(ctx, pv, target).await {
        Ok(expanded) => succeeded(ctx, key, pv, &current, target, expanded).await,
        Err(err) => {
            if err.is_in_use() {
                ctx.state.set_in_use(key, true);
            }
            let message = failure_message(ctx, pv_name, &err);
            tracing::warn!(pvc = key, "{message}");
            resize_failed(ctx, &current, message);
            Outcome::Retry
        }
    }
}
