//! The strings users, tooling and other controllers match on, exactly as external-attacher
//! writes them (spec sidecars.md §1.3, §5.4).

use csi_common::leader;

/// The VolumeAttachment annotation holding the node ID the volume was attached with. Detach
/// falls back to it when the CSINode is gone (external-attacher `vaNodeIDAnnotation`).
pub(crate) const NODE_ID_ANNOTATION: &str = "csi.alpha.kubernetes.io/node-id";

/// The VolumeAttachment annotation holding the volume handle the volume was attached with.
/// Not upstream: external-attacher reads the handle from the PersistentVolume on every detach,
/// so a VolumeAttachment whose PV was force-deleted can never be detached and its finalizer has
/// to be removed by hand (issue #235). Written with the node-ID annotation, before the
/// finalizer, so every VolumeAttachment this attacher ever published carries it.
pub(crate) const VOLUME_HANDLE_ANNOTATION: &str = "csi-attacher/volume-handle";

/// The VolumeAttachment annotation naming the publish Secret (`<namespace>/<name>`) the volume
/// was attached with, for the same reason: ControllerUnpublishVolume needs it too.
pub(crate) const PUBLISH_SECRET_ANNOTATION: &str = "csi-attacher/publish-secret";

/// The finalizer on VolumeAttachments and PersistentVolumes: `external-attacher/` followed by
/// the sanitized driver name (`ebs.csi.aws.com` → `external-attacher/ebs-csi-aws-com`).
pub(crate) fn finalizer(driver: &str) -> String {
    format!("external-attacher/{}", leader::sanitize(driver))
}

/// Whether `meta` lists `finalizer`.
pub(crate) fn has_finalizer(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    finalizer: &str,
) -> bool {
    meta.finalizers
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|f| f == finalizer)
}

/// The Lease is `external-attacher-leader-<driver>`, sanitized as a whole (the sidecar runtime
/// puts the prefix and the driver name together).
pub(crate) const LEASE_PREFIX: &str = "external-attacher-leader-";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finalizer_and_lease_match_upstream_for_real_driver_names() {
        let cases = [
            (
                "ebs.csi.aws.com",
                "external-attacher/ebs-csi-aws-com",
                "external-attacher-leader-ebs-csi-aws-com",
            ),
            (
                "fake.csi.example.com",
                "external-attacher/fake-csi-example-com",
                "external-attacher-leader-fake-csi-example-com",
            ),
            (
                "driver.",
                "external-attacher/driver-X",
                "external-attacher-leader-driver-X",
            ),
        ];
        for (driver, want_finalizer, want_lease) in cases {
            assert_eq!(finalizer(driver), want_finalizer, "{driver}");
            let lease = leader::lease_name(&format!("{LEASE_PREFIX}{driver}"));
            assert_eq!(lease, want_lease, "{driver}");
        }
    }
}
