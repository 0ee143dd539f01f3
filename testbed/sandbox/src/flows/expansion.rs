//! The volume expansion flow: the dynamically provisioned claim's request is raised, and
//! csi-resizer calls ControllerExpandVolume, grows the PV and writes the claim's
//! `status.capacity`. The sandbox's driver answers `node_expansion_required=false` (there is
//! no kubelet to run NodeExpandVolume), so the resizer finishes the claim itself, with
//! `VolumeResizeSuccessful`.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::provisioning::{CLAIM, dynamic_volume};
use super::{
    FlowResult, claim_event_reasons, failed, ms_since, require_sidecar, require_successful_call,
    wait_for,
};
use crate::{NAMESPACE, Sandbox};

const RESIZER: &str = "csi-resizer";
const NEW_SIZE: &str = "2Gi";
const WAIT: Duration = Duration::from_secs(20);

fn storage(map: Option<&BTreeMap<String, Quantity>>) -> Option<&str> {
    map?.get("storage").map(|q| q.0.as_str())
}

/// Raise the request to 2Gi; the PV and the claim's status follow.
pub(super) async fn expanded(sb: &Sandbox) -> FlowResult {
    let addr = require_sidecar(sb, RESIZER)?;
    let pv_name = dynamic_volume(sb).await?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(sb.client().clone(), NAMESPACE);
    let volumes: Api<PersistentVolume> = Api::all(sb.client().clone());
    let mut notes = Vec::new();
    let start = tokio::time::Instant::now();
    claims
        .patch(
            CLAIM,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"resources": {"requests": {"storage": NEW_SIZE}}}})),
        )
        .await
        .map_err(|e| failed("raise the claim's request", e))?;
    wait_for(
        &format!("PV {pv_name} capacity {NEW_SIZE}"),
        WAIT,
        || async {
            let pv = volumes.get_opt(&pv_name).await.ok().flatten()?;
            (storage(pv.spec?.capacity.as_ref()) == Some(NEW_SIZE)).then_some(())
        },
    )
    .await?;
    notes.push(format!(
        "PV {pv_name} capacity {NEW_SIZE} {} ms after the request was raised",
        ms_since(start)
    ));
    wait_for(
        &format!("{CLAIM} status.capacity {NEW_SIZE}"),
        WAIT,
        || async {
            let claim = claims.get_opt(CLAIM).await.ok().flatten()?;
            (storage(claim.status?.capacity.as_ref()) == Some(NEW_SIZE)).then_some(())
        },
    )
    .await?;
    notes.push(format!(
        "{NAMESPACE}/{CLAIM} status.capacity {NEW_SIZE} {} ms after the request was raised",
        ms_since(start)
    ));

    let reasons = claim_event_reasons(
        sb,
        CLAIM,
        |r| r.starts_with("Resiz") || r.starts_with("VolumeResize"),
        "VolumeResizeSuccessful",
    )
    .await?;
    notes.push(format!("resize events on the claim: {reasons:?}"));

    notes.push(
        require_successful_call(addr, RESIZER, "/csi.v1.Controller/ControllerExpandVolume").await?,
    );
    Ok(notes)
}
