//! The volume modification flow: a VolumeAttributesClass of the sandbox's driver is created
//! and the dynamically provisioned claim is switched to it; csi-resizer's modify controller
//! calls ControllerModifyVolume with the class' parameters, writes the PV's
//! `volumeAttributesClassName` and then the claim's `currentVolumeAttributesClassName`
//! (spec sidecars.md §2.5). The sandbox's driver reports MODIFY_VOLUME for this.

use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::VolumeAttributesClass;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use super::provisioning::{CLAIM, dynamic_volume};
use super::{
    FlowResult, claim_event_reasons, failed, ms_since, require_sidecar, require_successful_call,
    wait_for,
};
use crate::{NAMESPACE, Sandbox};

const RESIZER: &str = "csi-resizer";
const CLASS: &str = "sandbox-gold";
const WAIT: Duration = Duration::from_secs(20);

/// Create class `sandbox-gold` and switch the claim to it; the PV, then the claim, follow.
pub(super) async fn modified(sb: &Sandbox) -> FlowResult {
    let addr = require_sidecar(sb, RESIZER)?;
    let pv_name = dynamic_volume(sb).await?;
    let class: VolumeAttributesClass = serde_json::from_value(json!({
        "metadata": {"name": CLASS},
        "driverName": sb.driver_name(),
        "parameters": {"iops": "3000"},
    }))
    .map_err(|e| failed("build the VolumeAttributesClass", e))?;
    Api::<VolumeAttributesClass>::all(sb.client().clone())
        .create(&PostParams::default(), &class)
        .await
        .map_err(|e| failed("create the VolumeAttributesClass", e))?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(sb.client().clone(), NAMESPACE);
    let volumes: Api<PersistentVolume> = Api::all(sb.client().clone());
    let mut notes = Vec::new();
    let start = tokio::time::Instant::now();
    claims
        .patch(
            CLAIM,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"volumeAttributesClassName": CLASS}})),
        )
        .await
        .map_err(|e| failed("switch the claim's class", e))?;
    wait_for(&format!("PV {pv_name} class {CLASS}"), WAIT, || async {
        let pv = volumes.get_opt(&pv_name).await.ok().flatten()?;
        (pv.spec?.volume_attributes_class_name.as_deref() == Some(CLASS)).then_some(())
    })
    .await?;
    notes.push(format!(
        "PV {pv_name} volumeAttributesClassName {CLASS} {} ms after the claim was switched",
        ms_since(start)
    ));
    wait_for(
        &format!("{CLAIM} status.currentVolumeAttributesClassName {CLASS}"),
        WAIT,
        || async {
            let claim = claims.get_opt(CLAIM).await.ok().flatten()?;
            let status = claim.status?;
            (status.current_volume_attributes_class_name.as_deref() == Some(CLASS)
                && status.modify_volume_status.is_none())
            .then_some(())
        },
    )
    .await?;
    notes.push(format!(
        "{NAMESPACE}/{CLAIM} status.currentVolumeAttributesClassName {CLASS} {} ms after the claim was switched",
        ms_since(start)
    ));

    let reasons = claim_event_reasons(
        sb,
        CLAIM,
        |r| r.starts_with("VolumeModify"),
        "VolumeModifySuccessful",
    )
    .await?;
    notes.push(format!("modify events on the claim: {reasons:?}"));

    notes.push(
        require_successful_call(addr, RESIZER, "/csi.v1.Controller/ControllerModifyVolume").await?,
    );
    Ok(notes)
}
