//! Which informer notifications put an object on a queue (external-attacher `controller.go`
//! event handlers).
//!
//! The VolumeAttachment filter is what keeps the backoff working: the attacher's own
//! `attachError` / `detachError` writes come back as updates, and re-queueing them at once would
//! retry a failing attach immediately instead of after the backoff.

use crate::cached::{PersistentVolume, VolumeAttachment};
use crate::decide;
use crate::names::has_finalizer;

/// Whether a VolumeAttachment update needs a sync: always on a resync (same resourceVersion),
/// otherwise unless only `status.attachError` / `status.detachError` (and the bookkeeping
/// fields resourceVersion and managedFields) changed.
pub(crate) fn va_update_needs_sync(old: &VolumeAttachment, new: &VolumeAttachment) -> bool {
    if old.metadata.resource_version == new.metadata.resource_version {
        return true;
    }
    without_errors(old) != without_errors(new)
}

fn without_errors(va: &VolumeAttachment) -> VolumeAttachment {
    let mut va = va.clone();
    va.metadata.resource_version = None;
    va.metadata.managed_fields = None;
    if let Some(status) = va.status.as_mut() {
        status.attach_error = None;
        status.detach_error = None;
    }
    va
}

/// Whether a PersistentVolume add/update needs a sync: it carries our finalizer and the
/// finalizer may go once no VolumeAttachment uses it (being deleted, or an in-tree PV whose
/// CSI migration to `driver` was rolled back: [`decide::pv_finalizer_may_go`]).
pub(crate) fn pv_needs_sync(pv: &PersistentVolume, finalizer: &str, driver: &str) -> bool {
    has_finalizer(&pv.metadata, finalizer) && decide::pv_finalizer_may_go(pv, driver)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::storage::v1::{VolumeAttachmentStatus, VolumeError};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn va(rv: &str, attached: bool, attach_error: Option<&str>, node: &str) -> VolumeAttachment {
        VolumeAttachment {
            metadata: ObjectMeta {
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            spec: crate::cached::VolumeAttachmentSpec {
                node_name: node.into(),
                ..Default::default()
            },
            status: Some(VolumeAttachmentStatus {
                attached,
                attach_error: attach_error.map(|m| VolumeError {
                    message: Some(m.into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn own_error_writes_do_not_requeue() {
        let base = va("1", false, None, "n");
        let cases = [
            ("resync", va("1", false, None, "n"), true),
            (
                "only attachError written",
                va("2", false, Some("boom"), "n"),
                false,
            ),
            ("attached changed", va("2", true, None, "n"), true),
            ("spec changed", va("2", false, None, "m"), true),
        ];
        for (name, new, want) in cases {
            assert_eq!(va_update_needs_sync(&base, &new), want, "{name}");
        }
        let deleted = VolumeAttachment {
            metadata: ObjectMeta {
                resource_version: Some("3".into()),
                deletion_timestamp: Some(Time(Timestamp::UNIX_EPOCH)),
                ..Default::default()
            },
            ..va("3", false, Some("boom"), "n")
        };
        assert!(
            va_update_needs_sync(&va("2", false, Some("boom"), "n"), &deleted),
            "deletion"
        );
    }

    #[test]
    fn only_deleted_pvs_with_our_finalizer_are_synced() {
        let pv = |deleting: bool, finalizers: &[&str]| PersistentVolume {
            metadata: ObjectMeta {
                deletion_timestamp: deleting.then_some(Time(Timestamp::UNIX_EPOCH)),
                finalizers: Some(finalizers.iter().map(|f| (*f).to_owned()).collect()),
                ..Default::default()
            },
            ..Default::default()
        };
        let cases = [
            ("deleted, ours", pv(true, &["a", "f"]), true),
            ("deleted, not ours", pv(true, &["a"]), false),
            ("live, ours", pv(false, &["f"]), false),
        ];
        for (name, pv, want) in cases {
            assert_eq!(pv_needs_sync(&pv, "f", "d"), want, "{name}");
        }
    }
}
