//! The ListVolumes reconciler (external-attacher `ReconcileVA`): every `--reconcile-sync`, ask
//! the driver where each volume is published and give every VolumeAttachment whose
//! `status.attached` disagrees a one-shot forced sync. It writes nothing to the API itself.

use std::sync::Arc;

use futures::future::{BoxFuture, Shared};
use proto::csi::v1::ListVolumesRequest;
use tokio::time::Instant;

use super::Context;
use crate::csi::AttachDriver;
use crate::node;
use crate::reconcile::{Published, listed_volume_id, out_of_sync};
use crate::source;

/// Runs a pass every `--reconcile-sync` until `stop`.
pub(super) async fn run<D: AttachDriver>(
    ctx: Arc<Context<D>>,
    stop: Shared<BoxFuture<'static, ()>>,
) {
    let mut ticks = tokio::time::interval(ctx.settings.reconcile_every);
    ticks.tick().await;
    let mut stop = std::pin::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => return,
            _ = ticks.tick() => pass(&ctx).await,
        }
    }
}

/// One pass; a ListVolumes failure only ends the pass (logged), as upstream.
async fn pass<D: AttachDriver>(ctx: &Context<D>) {
    let published = match list(ctx).await {
        Ok(published) => published,
        Err(err) => {
            tracing::warn!(error = %err, "failed to ListVolumes");
            return;
        }
    };
    for va in ctx.stores.attachments.state() {
        if va.spec.attacher != ctx.settings.driver {
            continue;
        }
        let csi_node = ctx.stores.csi_node(&va.spec.node_name);
        let Ok(node_id) = node::for_detach(csi_node.as_deref(), &va, &ctx.settings.driver) else {
            continue;
        };
        let pv = source::pv_name(&va).and_then(|name| ctx.stores.volume(name));
        let Ok(target) = source::detach_target(&va, pv.as_deref()) else {
            continue;
        };
        let migrated = target.migrated || va.spec.source.inline_volume_spec.is_some();
        let Ok(volume_id) =
            listed_volume_id(&target.volume_id, migrated, &ctx.settings.driver, &node_id)
        else {
            continue;
        };
        let attached = va.status.as_ref().is_some_and(|s| s.attached);
        if out_of_sync(attached, &published, &volume_id, &node_id) {
            let name = va.metadata.name.clone().unwrap_or_default();
            tracing::warn!(
                va = name,
                volume = %volume_id,
                attached,
                "attached status differs from the driver's; syncing again"
            );
            ctx.force(&name);
            ctx.queues.add_attachment(&va);
        }
    }
}

/// All pages, under one `--timeout` for the whole listing.
async fn list<D: AttachDriver>(ctx: &Context<D>) -> Result<Published, String> {
    let deadline = Instant::now() + ctx.settings.timeout;
    let mut published = Published::default();
    let mut token = String::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err("context deadline exceeded".to_owned());
        }
        let request = ListVolumesRequest {
            max_entries: ctx.settings.max_entries,
            starting_token: std::mem::take(&mut token),
        };
        let page = ctx
            .driver
            .list_volumes(request, left)
            .await
            .map_err(|err| err.to_string())?;
        token.clone_from(&page.next_token);
        published.add_page(page);
        if token.is_empty() {
            return Ok(published);
        }
    }
}
