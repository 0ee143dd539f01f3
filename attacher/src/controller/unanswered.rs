//! The sync after a write whose answer was lost (module docs of `settled.rs`): the object is
//! read from the API server, because the cache may predate the write.
//!
//! If the read shows the write stored (nothing left to do, or the object gone), it is recorded
//! as settled, as if its answer had come ([`Settled::stored_unseen`]): without that, the next
//! sync of the same name, started by a late watch event while the cache is still behind, would
//! repeat the call from the cache. The attacher's model test
//! (`settled/properties.rs`) found that second sync.

use std::sync::Arc;

use super::Context;
use super::settled::Settled;
use crate::cached::VolumeAttachment;
use crate::decide::{self, VaAction};

/// What the read-back found.
#[derive(Debug)]
pub(super) enum ReadBack {
    /// The write was stored, or the object is gone: nothing to do.
    Settled,
    /// The object as the API server has it, to be synced instead of the cached one.
    Pending(Arc<VolumeAttachment>),
}

/// Reads `name` from the API server; `cached` is what the cache shows for it.
pub(super) async fn read_back<D>(
    ctx: &Context<D>,
    name: &str,
    cached: &VolumeAttachment,
) -> Result<ReadBack, kube::Error> {
    let fresh = ctx.attachments().get_opt(name).await?;
    let decide =
        |va: &VolumeAttachment| decide::va_action(va, &ctx.settings.driver, &ctx.finalizer, false);
    if let Some(va) = fresh
        && !matches!(decide(&va), VaAction::NotOurs | VaAction::UpToDate)
    {
        return Ok(ReadBack::Pending(Arc::new(va)));
    }
    settle(&ctx.settled, cached, decide(cached), || {
        ctx.stores.attachment(name).map(|va| decide(&va))
    });
    Ok(ReadBack::Settled)
}

/// Records that `action`, which the cached version `cached` asks for, is already stored; then
/// reads the cache again (`now`: the action it asks for, `None` once the object left it) and
/// drops the record if the cache caught up meanwhile, since the event handler that would have
/// dropped it may have run before the record was made.
pub(super) fn settle(
    settled: &Settled,
    cached: &VolumeAttachment,
    action: VaAction,
    now: impl FnOnce() -> Option<VaAction>,
) {
    let Some(name) = cached.metadata.name.as_deref() else {
        return;
    };
    if !matches!(action, VaAction::Attach | VaAction::Detach) {
        return;
    }
    settled.stored_unseen(cached, action);
    match now() {
        None => settled.gone(name),
        Some(VaAction::NotOurs | VaAction::UpToDate) => settled.forget(name),
        Some(VaAction::Attach | VaAction::Detach) => {}
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn va() -> VolumeAttachment {
        VolumeAttachment {
            metadata: ObjectMeta {
                name: Some("va".into()),
                uid: Some("u1".into()),
                resource_version: Some("5".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn a_stored_write_is_recorded_unless_the_cache_caught_up_meanwhile() {
        use VaAction::{Attach, Detach, NotOurs, UpToDate};
        // (the cached version asks for, the cache asks for after the record, record kept)
        let cases = [
            (Attach, Some(Attach), true),
            (Detach, Some(Detach), true),
            (Attach, Some(UpToDate), false),
            (Detach, None, false),
            (Attach, Some(NotOurs), false),
            (UpToDate, Some(UpToDate), false),
        ];
        for (cached, now, kept) in cases {
            let settled = Settled::default();
            settle(&settled, &va(), cached, || now);
            assert_eq!(
                settled.entry("va").is_some(),
                kept,
                "{cached:?} then {now:?}"
            );
            if kept {
                let record = settled.entry("va").unwrap();
                assert!(record.covers(&va(), cached), "covers the cached version");
            }
        }
    }
}
