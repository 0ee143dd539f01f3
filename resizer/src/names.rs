//! The strings users, tooling, kubelet and kube-controller-manager match on, exactly as
//! external-resizer and Kubernetes write them (spec sidecars.md §2.3, §2.4, §5.4).

/// The Lease is `external-resizer-<driver>`, sanitized as a whole (the sidecar runtime puts the
/// prefix and the driver name together).
pub(crate) const LEASE_PREFIX: &str = "external-resizer-";

/// The work queue (and the `name` label of its `workqueue_*` series): `<driver>-pvc`, the
/// driver name as it is (external-resizer `controller.go`: `fmt.Sprintf("%s-pvc", name)`).
pub(crate) fn queue_name(driver: &str) -> String {
    format!("{driver}-pvc")
}

/// The Events' `source.component`: `external-resizer <driver>`.
pub(crate) fn event_component(driver: &str) -> String {
    format!("external-resizer {driver}")
}

/// PV annotation: the PVC's `status.capacity` before a resize that needs node expansion, so
/// the PV controller can restore it if the claim is re-bound meanwhile.
pub(crate) const PRE_RESIZE_CAPACITY: &str = "volume.alpha.kubernetes.io/pre-resize-capacity";

/// PVC annotation: the expansion finished without node expansion; kubelet skips
/// NodeExpandVolume.
pub(crate) const NODE_EXPANSION_NOT_REQUIRED: &str =
    "volume.kubernetes.io/node-expansion-not-required";

/// The `storage` resource key of capacities, requests and allocated resources.
pub(crate) const STORAGE: &str = "storage";

/// PVC condition types (core/v1 `PersistentVolumeClaimConditionType`).
pub(crate) mod condition {
    /// The controller expansion is in progress.
    pub(crate) const RESIZING: &str = "Resizing";
    /// The controller part is done; kubelet must run NodeExpandVolume.
    pub(crate) const FILE_SYSTEM_RESIZE_PENDING: &str = "FileSystemResizePending";
    /// ControllerExpandVolume failed with a final error.
    pub(crate) const CONTROLLER_RESIZE_ERROR: &str = "ControllerResizeError";
    /// Written by kubelet; part of the resize group when conditions are merged.
    pub(crate) const NODE_RESIZE_ERROR: &str = "NodeResizeError";

    /// The condition types replaced as a group (external-resizer `knownResizeConditions`).
    pub(crate) const RESIZE_GROUP: [&str; 4] = [
        RESIZING,
        FILE_SYSTEM_RESIZE_PENDING,
        CONTROLLER_RESIZE_ERROR,
        NODE_RESIZE_ERROR,
    ];

    /// The `FileSystemResizePending` message.
    pub(crate) const FILE_SYSTEM_RESIZE_PENDING_MESSAGE: &str =
        "Waiting for user to (re-)start a pod to finish file system resize of volume on node.";
}

/// `status.allocatedResourceStatuses.storage` values (core/v1 `ClaimResourceStatus`).
pub(crate) mod resize_status {
    /// The controller is expanding (or was, with an uncertain outcome).
    pub(crate) const CONTROLLER_IN_PROGRESS: &str = "ControllerResizeInProgress";
    /// The driver said the size is impossible (InvalidArgument, OutOfRange, NotFound).
    pub(crate) const CONTROLLER_INFEASIBLE: &str = "ControllerResizeInfeasible";
    /// The controller part is done; kubelet's turn.
    pub(crate) const NODE_PENDING: &str = "NodeResizePending";
    /// Written by kubelet.
    pub(crate) const NODE_IN_PROGRESS: &str = "NodeResizeInProgress";
    /// Written by kubelet.
    pub(crate) const NODE_INFEASIBLE: &str = "NodeResizeInfeasible";
}

/// Event reasons (spec §2.3).
pub(crate) mod reason {
    /// Normal, before each expand attempt.
    pub(crate) const RESIZING: &str = "Resizing";
    /// Warning, an expand error.
    pub(crate) const VOLUME_RESIZE_FAILED: &str = "VolumeResizeFailed";
    /// Normal, no node expansion needed.
    pub(crate) const VOLUME_RESIZE_SUCCESSFUL: &str = "VolumeResizeSuccessful";
    /// Normal, node expansion needed.
    pub(crate) const FILE_SYSTEM_RESIZE_REQUIRED: &str = "FileSystemResizeRequired";
}

/// The modify controller's strings (spec sidecars.md §2.3, §2.5; external-resizer
/// `pkg/modifycontroller`, `pkg/util`).
pub(crate) mod modify {
    /// PVC condition: a ControllerModifyVolume is in progress (or failed and is retried).
    pub(crate) const MODIFYING_VOLUME: &str = "ModifyingVolume";
    /// PVC condition: the last ControllerModifyVolume failed; reason = the gRPC code name.
    pub(crate) const MODIFY_VOLUME_ERROR: &str = "ModifyVolumeError";
    /// The two modify condition types, removed together on success.
    pub(crate) const CONDITIONS: [&str; 2] = [MODIFYING_VOLUME, MODIFY_VOLUME_ERROR];

    /// `status.modifyVolumeStatus.status`: the target class does not exist yet.
    pub(crate) const PENDING: &str = "Pending";
    /// `status.modifyVolumeStatus.status`: the driver is (or may be) modifying.
    pub(crate) const IN_PROGRESS: &str = "InProgress";
    /// `status.modifyVolumeStatus.status`: the driver said InvalidArgument.
    pub(crate) const INFEASIBLE: &str = "Infeasible";

    /// `--extra-modify-metadata` keys of `mutable_parameters` (external-resizer
    /// `modify_volume.go` `pvcNameKey`, `pvcNamespaceKey`, `pvNameKey`).
    pub(crate) const PVC_NAME_KEY: &str = "csi.storage.k8s.io/pvc/name";
    /// See [`PVC_NAME_KEY`].
    pub(crate) const PVC_NAMESPACE_KEY: &str = "csi.storage.k8s.io/pvc/namespace";
    /// See [`PVC_NAME_KEY`].
    pub(crate) const PV_NAME_KEY: &str = "csi.storage.k8s.io/pv/name";

    /// Event reasons (external-resizer `util.VolumeModify*`).
    pub(crate) mod reason {
        /// Normal, before the first call for a new target.
        pub(crate) const VOLUME_MODIFY: &str = "VolumeModify";
        /// Normal, the driver modified the volume.
        pub(crate) const VOLUME_MODIFY_SUCCESSFUL: &str = "VolumeModifySuccessful";
        /// Warning, the call failed or the class does not exist.
        pub(crate) const VOLUME_MODIFY_FAILED: &str = "VolumeModifyFailed";
        /// Normal, the user rolled the class back to none.
        pub(crate) const VOLUME_MODIFY_CANCELED: &str = "VolumeModifyCanceled";
    }
}

#[cfg(test)]
mod tests {
    use csi_common::leader;

    use super::*;

    #[test]
    fn lease_queue_and_component_match_upstream_for_real_driver_names() {
        let cases = [
            (
                "ebs.csi.aws.com",
                "external-resizer-ebs-csi-aws-com",
                "ebs.csi.aws.com-pvc",
            ),
            (
                "fake.csi.example.com",
                "external-resizer-fake-csi-example-com",
                "fake.csi.example.com-pvc",
            ),
            ("driver.", "external-resizer-driver-X", "driver.-pvc"),
        ];
        for (driver, lease, queue) in cases {
            assert_eq!(
                leader::lease_name(&format!("{LEASE_PREFIX}{driver}")),
                lease
            );
            assert_eq!(queue_name(driver), queue);
        }
        assert_eq!(
            event_component("ebs.csi.aws.com"),
            "external-resizer ebs.csi.aws.com"
        );
    }
}
