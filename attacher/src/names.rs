//! The strings users, tooling and other controllers match on, exactly as external-attacher
//! writes them (spec sidecars.md §1.3, §5.4).

use csi_common::leader;

/// The VolumeAttachment annotation holding the node ID the volume was attached with. Detach
/// falls back to it when the CSINode is gone (external-attacher `vaNodeIDAnnotation`).
pub(crate) const NODE_ID_ANNOTATION: &str = "csi.alpha.kubernetes.io/node-id";

/// The finalizer on VolumeAttachments and PersistentVolumes: `external-attacher/` followed by
/// the sanitized driver name (`ebs.csi.aws.com` → `external-attacher/ebs-csi-aws-com`).
pub(crate) fn finalizer(driver: &str) -> String {
    format!("external-attacher/{}", leader::sanitize(driver))
}

/// The Lease name: `external-attacher-leader-<driver>`, sanitized as a whole.
pub(crate) fn lease(driver: &str) -> String {
    leader::lease_name(&format!("external-attacher-leader-{driver}"))
}

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
            assert_eq!(lease(driver), want_lease, "{driver}");
        }
    }
}
