//! The PersistentVolume queue: drops the attacher's finalizer from a deleted PV, or from an
//! in-tree PV whose CSI migration was rolled back, once no VolumeAttachment (of any driver)
//! names it (external-attacher `SyncNewOrUpdatedPersistentVolume`).

use csi_common::controller::Outcome;

use super::Context;
use crate::decide;

/// One pass over PV `name`.
pub(super) async fn sync<D>(ctx: &Context<D>, name: &str) -> Outcome {
    let Some(pv) = ctx.stores.volume(name) else {
        return Outcome::Done;
    };
    let attachments = ctx.stores.attachments.state();
    let ours = (ctx.finalizer.as_str(), ctx.settings.driver.as_str());
    let Some(body) = decide::pv_release(&pv, ours, attachments.iter().map(AsRef::as_ref)) else {
        return Outcome::Done;
    };
    match ctx.patch_volume(name, body).await {
        Ok(_) => {
            tracing::info!(pv = name, "removed finalizer");
            Outcome::Done
        }
        Err(err) if super::is_not_found(&err) => Outcome::Done,
        Err(err) => {
            let err = csi_common::kube_client::KubeError(err);
            tracing::warn!(pv = name, error = %err, "failed to remove finalizer");
            Outcome::Retry
        }
    }
}
