//! The API writes both controllers make: a claim's `/status` patch from the claim before to
//! the claim after (remembered in `State` so the next sync does not act on an older cached
//! copy), and a PV strategic-merge patch. A status write that failed after it left, its answer
//! lost to a broken connection, may be stored all the same: `State` notes it, and the next
//! sync of either controller reads the claim from the API server before it acts
//! ([`current_claim`]; the chaos suite's `api-restart-compacted` row saw a claim's finished
//! status stored, its answer cut by the restart, and the next sync, from a cache the cut
//! watch had not updated, call ControllerExpandVolume again for a size the claim already
//! recorded). The claim read is kept like a write's answer, so a later sync from the same
//! stale cache acts on it too.

use std::sync::Arc;

use csi_common::controller::Outcome;
use csi_common::logging::error_chain;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};

use super::state::State;
use crate::patch;

/// Writes the claim's status from `old` to `new` through `/status`; the written claim, or the
/// outcome when the write failed (a conflict is retried quietly: the cache was stale). An
/// empty patch is not sent.
pub(super) async fn claim_status(
    client: &Client,
    state: &State,
    old: &PersistentVolumeClaim,
    new: &PersistentVolumeClaim,
    resource_version_check: bool,
) -> Result<PersistentVolumeClaim, Outcome> {
    let body = patch::pvc_status(old, new, resource_version_check);
    if body.get("status").is_none() && body.pointer("/metadata/annotations").is_none() {
        return Ok(new.clone());
    }
    let namespace = old.metadata.namespace.as_deref().unwrap_or_default();
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let name = old.metadata.name.as_deref().unwrap_or_default();
    let (params, patch) = (PatchParams::default(), Patch::Strategic(body));
    let write = api.patch_status(name, &params, &patch);
    match state
        .write_claim(&format!("{namespace}/{name}"), write)
        .await
    {
        Ok(written) => Ok(written),
        Err(kube::Error::Api(status)) if status.code == 409 => {
            tracing::debug!(pvc = name, "conflict writing the claim status: retrying");
            Err(Outcome::Retry)
        }
        Err(err) => {
            tracing::warn!(
                pvc = name,
                error = error_chain(&err),
                "cannot update the claim status"
            );
            if csi_common::kube_client::may_have_been_applied(&err) {
                state.mark_uncertain(&format!("{namespace}/{name}"));
            }
            Err(Outcome::Retry)
        }
    }
}

/// The claim a sync acts on: the newer of `cached` and the copy this process last wrote or
/// read back; after a status write whose answer was lost, the claim as the API server has it
/// (read once, then kept). `Err` is the outcome to return: `Done` when the claim is gone,
/// `Retry` when it cannot be read now (the read is tried again next time).
pub(super) async fn current_claim(
    client: &Client,
    state: &State,
    key: &str,
    cached: Arc<PersistentVolumeClaim>,
) -> Result<Arc<PersistentVolumeClaim>, Outcome> {
    let pvc = state.claim(key, cached);
    if !state.take_uncertain(key) {
        return Ok(pvc);
    }
    let namespace = pvc.metadata.namespace.as_deref().unwrap_or_default();
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let read = api.get_opt(pvc.metadata.name.as_deref().unwrap_or_default());
    match state.read_back(key, read).await {
        Ok(Some(fresh)) => Ok(Arc::new(fresh)),
        Ok(None) => Err(Outcome::Done),
        Err(err) => {
            state.mark_uncertain(key);
            tracing::warn!(
                pvc = key,
                error = error_chain(&err),
                "cannot read the claim"
            );
            Err(Outcome::Retry)
        }
    }
}

/// A strategic-merge patch of the PV named `name`.
pub(super) async fn volume(
    client: &Client,
    name: &str,
    body: serde_json::Value,
) -> Result<Arc<PersistentVolume>, kube::Error> {
    let api: Api<PersistentVolume> = Api::all(client.clone());
    api.patch(name, &PatchParams::default(), &Patch::Strategic(body))
        .await
        .map(Arc::new)
}
