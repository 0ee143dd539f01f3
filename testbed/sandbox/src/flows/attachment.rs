//! The attach and detach flow: the controller-manager stand-in's attach-detach helper asks for
//! the dynamically provisioned volume on the sandbox node, csi-attacher publishes it (finalizer,
//! node-ID annotation, `status.attached`), and after the VolumeAttachment is deleted
//! unpublishes it and lets the object go.

use std::time::Duration;

use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::Api;

use super::{FlowError, FlowResult, failed, metric_value, ms_since, require_sidecar, wait_for};
use crate::{NODE_NAME, Sandbox};
use testbed_support::http_client;

const ATTACHER: &str = "csi-attacher";
const NODE_ID_ANNOTATION: &str = "csi.alpha.kubernetes.io/node-id";
const WAIT: Duration = Duration::from_secs(20);

/// Attach, check, detach, check.
pub(super) async fn attached_and_detached(sb: &Sandbox) -> FlowResult {
    let addr = require_sidecar(sb, ATTACHER)?;
    let pv = super::provisioning::dynamic_volume(sb).await?;
    let mut notes = Vec::new();
    let start = tokio::time::Instant::now();
    let name = sb
        .kcm()
        .attach(&pv, NODE_NAME)
        .await
        .map_err(|e| failed("create the VolumeAttachment", e))?;
    let va = sb
        .kcm()
        .wait_attached(&name, WAIT)
        .await
        .map_err(|e| failed("attach", e))?;
    let finalizers = va.metadata.finalizers.clone().unwrap_or_default();
    let node_id = va
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(NODE_ID_ANNOTATION))
        .cloned()
        .unwrap_or_default();
    if !finalizers
        .iter()
        .any(|f| f.starts_with("external-attacher/"))
        || node_id.is_empty()
    {
        return Err(FlowError::Failed(format!(
            "attached {name} lacks the finalizer or the node-ID annotation: {finalizers:?}, {node_id:?}"
        )));
    }
    notes.push(format!(
        "{pv} attached to {NODE_NAME} as {name} within {} ms (finalizers {finalizers:?}, node ID {node_id})",
        ms_since(start)
    ));

    let start = tokio::time::Instant::now();
    sb.kcm()
        .detach(&pv, NODE_NAME)
        .await
        .map_err(|e| failed("delete the VolumeAttachment", e))?;
    let attachments: Api<VolumeAttachment> = Api::all(sb.client().clone());
    wait_for(&format!("{name} to go (detach)"), WAIT, || async {
        matches!(attachments.get_opt(&name).await, Ok(None)).then_some(())
    })
    .await?;
    notes.push(format!(
        "{name} detached and gone within {} ms",
        ms_since(start)
    ));

    let metrics = http_client::get(addr, "/metrics", Duration::from_secs(5))
        .await
        .map_err(|e| failed("GET /metrics", e))?;
    let count = |method: &str| {
        metric_value(
            &metrics.body,
            "csi_sidecar_operations_seconds_count",
            &[("method_name", method), ("grpc_status_code", "OK")],
        )
        .unwrap_or(0.0)
    };
    let publishes = count("/csi.v1.Controller/ControllerPublishVolume");
    let unpublishes = count("/csi.v1.Controller/ControllerUnpublishVolume");
    if publishes < 1.0 || unpublishes < 1.0 {
        return Err(FlowError::Failed(format!(
            "{ATTACHER} /metrics: {publishes} successful publishes, {unpublishes} unpublishes"
        )));
    }
    notes.push(format!(
        "{ATTACHER} /metrics: successful ControllerPublishVolume {publishes}, ControllerUnpublishVolume {unpublishes}"
    ));
    Ok(notes)
}
