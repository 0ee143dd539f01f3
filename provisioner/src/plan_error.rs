//! Every way a claim, its StorageClass or the cluster topology can stop a volume from being
//! planned, and what each failure means for the retry state machine (spec §4.7).
//!
//! Messages are upstream's (external-provisioner `prepareProvision`, `makeVolumeName`,
//! `checkDriverCapabilities`, `getSecretReference`, `GenerateAccessibilityRequirements`): they
//! become `ProvisioningFailed` Event messages, which users search for. Causes sit in `#[source]`
//! and are not repeated in the outer message (STYLE.md §1.3), so the text Go prints is
//! [`PlanError::event_message`], the whole chain joined with `": "`.

use csi_common::access_modes::AccessModeError;
use csi_common::quantity::QuantityError;
use csi_common::quote::go_quote;
use thiserror::Error;

use crate::params::ParamError;
use crate::secrets::SecretError;
use crate::source::SourceError;
use crate::topology::TopologyError;

/// Where provisioning stands after an attempt (sig-storage-lib-external-provisioner
/// `ProvisioningState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProvisioningState {
    /// The driver is certainly not working on the volume: record the error and retry later from
    /// scratch.
    Finished,
    /// The driver may still be creating the volume: keep the claim "in progress" and repeat the
    /// same request until a definite answer.
    InBackground,
    /// The attempt failed before reaching the driver: keep whatever state the claim had.
    NoChange,
    /// Give the scheduler another go: remove `volume.kubernetes.io/selected-node` from the claim
    /// (only meaningful when it has one; otherwise treated as `Finished`).
    Reschedule,
}

/// A controller capability the claim needs but the driver does not report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MissingCapability {
    /// Plugin `CONTROLLER_SERVICE`.
    ControllerService,
    /// Controller `CREATE_DELETE_VOLUME`.
    CreateDeleteVolume,
    /// Controller `CREATE_DELETE_SNAPSHOT` (restore from a VolumeSnapshot).
    CreateDeleteSnapshot,
    /// Controller `CLONE_VOLUME` (clone a PersistentVolumeClaim).
    CloneVolume,
    /// Controller `MODIFY_VOLUME` (VolumeAttributesClass).
    ModifyVolume,
}

impl MissingCapability {
    /// Upstream's message (`checkDriverCapabilities`).
    fn message(self) -> &'static str {
        match self {
            Self::ControllerService => {
                "CSI driver does not support dynamic provisioning: plugin CONTROLLER_SERVICE capability is not reported"
            }
            Self::CreateDeleteVolume => {
                "CSI driver does not support dynamic provisioning: controller CREATE_DELETE_VOLUME capability is not reported"
            }
            Self::CreateDeleteSnapshot => {
                "CSI driver does not support snapshot restore: controller CREATE_DELETE_SNAPSHOT capability is not reported"
            }
            Self::CloneVolume => {
                "CSI driver does not support clone operations: controller CLONE_VOLUME capability is not reported"
            }
            Self::ModifyVolume => {
                "CSI driver does not support VolumeAttributesClass: controller MODIFY_VOLUME capability is not reported"
            }
        }
    }
}

/// Why no CreateVolume request can be planned for a claim.
#[derive(Debug, Error)]
pub(crate) enum PlanError {
    /// The claim's StorageClass is not in the cache. Upstream fails before Provision: retry, no
    /// Event.
    #[error("storageclass.storage.k8s.io {} not found", go_quote(.name))]
    StorageClassNotFound {
        /// Class name from the claim (beta annotation, else `spec.storageClassName`).
        name: String,
    },
    /// `spec.dataSourceRef.namespace` needs the CrossNamespaceVolumeDataSource gate (alpha,
    /// off by default).
    #[error(
        "dataSourceRef namespace specified but the CrossNamespaceVolumeDataSource feature is disabled"
    )]
    DataSourceRefNamespace,
    /// A data source without a name.
    #[error("the PVC source not found for PVC {claim}")]
    DataSourceNameEmpty {
        /// Claim name.
        claim: String,
    },
    /// A VolumeSnapshot data source outside `snapshot.storage.k8s.io`.
    #[error(
        "the PVC source does not belong to the right APIGroup. Expected snapshot.storage.k8s.io, Got {group}"
    )]
    SnapshotApiGroup {
        /// The data source's apiGroup (may be empty).
        group: String,
    },
    /// A data source kind that neither clone nor snapshot handles: a volume populator's job.
    /// Upstream's `IgnoredError`: no `ProvisioningFailed`, no retry, one Normal `Provisioning`
    /// Event ([`POPULATOR_EVENT_MESSAGE`]).
    #[error(
        "data source ({kind}) is not handled by the provisioner, assuming an external populator will provision it"
    )]
    ExternalPopulator {
        /// The data source kind.
        kind: String,
    },
    /// The driver lacks a capability the claim needs.
    #[error("{}", .0.message())]
    MissingCapability(MissingCapability),
    /// `spec.selector` is set: dynamic provisioning cannot honour a selector.
    #[error("claim Selector is not supported")]
    SelectorNotSupported,
    /// `--volume-name-prefix` is empty.
    #[error("volume name prefix cannot be of length 0")]
    EmptyVolumeNamePrefix,
    /// The claim has no `metadata.uid`.
    #[error("corrupted PVC object, it is missing UID")]
    MissingUid,
    /// `--volume-name-uuid-length` cannot be applied to this UID (upstream slices out of bounds
    /// and panics).
    #[error(
        "--volume-name-uuid-length={length} is out of range: use -1 for the whole claim UID or 1..={available} characters of it"
    )]
    UuidLengthOutOfRange {
        /// The configured length.
        length: i64,
        /// Hex characters the UID has without dashes.
        available: usize,
    },
    /// A StorageClass parameter problem found while resolving fsType.
    #[error(transparent)]
    FsType(ParamError),
    /// `resources.requests.storage` is not a usable byte count.
    #[error("invalid storage request {}", go_quote(.value))]
    StorageRequest {
        /// The quantity as written.
        value: String,
        /// Why it is not a byte count.
        #[source]
        source: QuantityError,
    },
    /// An access mode with no CSI equivalent.
    #[error(transparent)]
    AccessMode(AccessModeError),
    /// The selected node has no CSINode (deleted with its node, or the kubelet has not created it
    /// yet): upstream v6.1 asks for a reschedule (#1437). This is also how a deleted Node shows:
    /// upstream never looks the Node itself up, and its CSINode goes with it.
    #[error(
        "failed to get selected CSINode {node}: csinode.storage.k8s.io {} not found",
        go_quote(.node)
    )]
    SelectedCsiNodeNotFound {
        /// Node name.
        node: String,
    },
    /// Accessibility requirements could not be built.
    #[error("error generating accessibility requirements")]
    Topology(#[source] TopologyError),
    /// A secret reference in the StorageClass is malformed or resolves to an invalid name.
    #[error(transparent)]
    Secret(SecretError),
    /// A reserved `csi.storage.k8s.io/` parameter key is unknown.
    #[error("failed to strip CSI Parameters of prefixed keys")]
    StripParameters(#[source] ParamError),
    /// A PV without `spec.csi` reached deletion.
    #[error("invalid CSI PV")]
    InvalidCsiPv,
    /// An in-tree PV (CSI migration) whose source csi-translation-lib refuses to translate;
    /// its text alone, as upstream's `Delete` returns it.
    #[error(transparent)]
    Translation(csi_common::migration::TranslationError),
    /// A claim of an in-tree StorageClass that kube-controller-manager handed to this
    /// migration driver: upstream provisions it through csi-translation-lib, this provisioner
    /// does not (docs/compatibility.md). Said on the claim instead of leaving it silently
    /// Pending.
    #[error(
        "provisioning a volume of the in-tree StorageClass {class:?} (provisioner {provisioner:?}) through CSI migration is not supported by this csi-provisioner"
    )]
    MigratedClass {
        /// The StorageClass.
        class: String,
        /// Its in-tree provisioner name.
        provisioner: String,
    },
    /// The clone or snapshot source cannot be used (yet).
    #[error(transparent)]
    Source(SourceError),
}

/// Message of the Normal `Provisioning` Event upstream sends for [`PlanError::ExternalPopulator`].
pub(crate) const POPULATOR_EVENT_MESSAGE: &str =
    "Assuming an external populator will provision the volume";

impl PlanError {
    /// The state upstream's `Provision` returns with this error (spec §4.3, §4.7).
    pub(crate) fn state(&self) -> ProvisioningState {
        match self {
            // Failures of the request's own inputs: nothing reached the driver and nothing will
            // until someone edits the claim or class.
            Self::DataSourceRefNamespace
            | Self::DataSourceNameEmpty { .. }
            | Self::SnapshotApiGroup { .. }
            | Self::ExternalPopulator { .. }
            | Self::MissingCapability(_)
            | Self::SelectorNotSupported
            | Self::EmptyVolumeNamePrefix
            | Self::MissingUid
            | Self::UuidLengthOutOfRange { .. }
            | Self::FsType(_)
            | Self::StorageRequest { .. }
            | Self::AccessMode(_)
            | Self::StripParameters(_)
            | Self::InvalidCsiPv
            | Self::Translation(_)
            | Self::MigratedClass { .. } => ProvisioningState::Finished,
            // The node the scheduler picked is gone: let it pick another.
            Self::SelectedCsiNodeNotFound { .. } => ProvisioningState::Reschedule,
            // Upstream returns NoChange for these: an earlier in-background attempt stays in
            // progress.
            Self::StorageClassNotFound { .. }
            | Self::Topology(_)
            | Self::Secret(_)
            | Self::Source(_) => ProvisioningState::NoChange,
        }
    }

    /// Whether the claim is retried slowly rather than with the normal backoff: a data source
    /// that cannot be used only becomes usable when someone (or the snapshot controller)
    /// changes it, which takes seconds to minutes; retrying from one second on would only
    /// repeat the same Event (beyond upstream, which uses the normal backoff).
    pub(crate) fn retries_slowly(&self) -> bool {
        matches!(self, Self::Source(_) | Self::MigratedClass { .. })
    }

    /// Upstream's `IgnoredError`: stop working on the claim without a `ProvisioningFailed`
    /// Event and without a retry (the claim is picked up again when it changes).
    pub(crate) fn is_ignored(&self) -> bool {
        matches!(self, Self::ExternalPopulator { .. })
    }

    /// Whether upstream reports this failure as a Warning `ProvisioningFailed` Event on the
    /// claim. Not for ignored claims, and not for a missing StorageClass, which the lib detects
    /// before it starts provisioning (it only logs and retries).
    pub(crate) fn emits_event(&self) -> bool {
        !self.is_ignored() && !matches!(self, Self::StorageClassNotFound { .. })
    }

    /// The full text Go prints for this error: the message and every cause, joined with
    /// `": "`. Use it for the `ProvisioningFailed` Event and the log line.
    pub(crate) fn event_message(&self) -> String {
        csi_common::logging::error_chain(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_match_upstream_texts() {
        let cases: Vec<(PlanError, &str)> = vec![
            (
                PlanError::StorageClassNotFound {
                    name: "gold".into(),
                },
                r#"storageclass.storage.k8s.io "gold" not found"#,
            ),
            (
                PlanError::SelectorNotSupported,
                "claim Selector is not supported",
            ),
            (
                PlanError::EmptyVolumeNamePrefix,
                "volume name prefix cannot be of length 0",
            ),
            (
                PlanError::MissingUid,
                "corrupted PVC object, it is missing UID",
            ),
            (
                PlanError::MissingCapability(MissingCapability::ControllerService),
                "CSI driver does not support dynamic provisioning: plugin CONTROLLER_SERVICE \
                 capability is not reported",
            ),
            (
                PlanError::MissingCapability(MissingCapability::CreateDeleteVolume),
                "CSI driver does not support dynamic provisioning: controller \
                 CREATE_DELETE_VOLUME capability is not reported",
            ),
            (
                PlanError::MissingCapability(MissingCapability::CreateDeleteSnapshot),
                "CSI driver does not support snapshot restore: controller CREATE_DELETE_SNAPSHOT \
                 capability is not reported",
            ),
            (
                PlanError::MissingCapability(MissingCapability::CloneVolume),
                "CSI driver does not support clone operations: controller CLONE_VOLUME \
                 capability is not reported",
            ),
            (
                PlanError::MissingCapability(MissingCapability::ModifyVolume),
                "CSI driver does not support VolumeAttributesClass: controller MODIFY_VOLUME \
                 capability is not reported",
            ),
            (
                PlanError::DataSourceRefNamespace,
                "dataSourceRef namespace specified but the CrossNamespaceVolumeDataSource \
                 feature is disabled",
            ),
            (
                PlanError::DataSourceNameEmpty { claim: "c1".into() },
                "the PVC source not found for PVC c1",
            ),
            (
                PlanError::SnapshotApiGroup {
                    group: "example.com".into(),
                },
                "the PVC source does not belong to the right APIGroup. Expected \
                 snapshot.storage.k8s.io, Got example.com",
            ),
            (
                PlanError::ExternalPopulator { kind: "Foo".into() },
                "data source (Foo) is not handled by the provisioner, assuming an external \
                 populator will provision it",
            ),
            (
                PlanError::SelectedCsiNodeNotFound { node: "n1".into() },
                r#"failed to get selected CSINode n1: csinode.storage.k8s.io "n1" not found"#,
            ),
            (
                PlanError::StorageRequest {
                    value: "1Gb".into(),
                    source: QuantityError::Format,
                },
                "invalid storage request \"1Gb\": quantities must match the regular expression \
                 '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
            ),
            (
                PlanError::StripParameters(ParamError::UnknownReservedKey {
                    key: "csi.storage.k8s.io/foo".into(),
                }),
                "failed to strip CSI Parameters of prefixed keys: found unknown parameter key \
                 \"csi.storage.k8s.io/foo\" with reserved namespace csi.storage.k8s.io/",
            ),
            (
                PlanError::Topology(TopologyError::NoAvailableTopology),
                "error generating accessibility requirements: no available topology found",
            ),
            (PlanError::InvalidCsiPv, "invalid CSI PV"),
        ];
        for (err, want) in cases {
            assert_eq!(err.event_message(), want);
        }
    }

    #[test]
    fn states_follow_upstream_provision() {
        let cases: Vec<(PlanError, ProvisioningState, bool, bool)> = vec![
            // (error, state, ignored, event)
            (
                PlanError::SelectorNotSupported,
                ProvisioningState::Finished,
                false,
                true,
            ),
            (
                PlanError::SelectedCsiNodeNotFound { node: "n".into() },
                ProvisioningState::Reschedule,
                false,
                true,
            ),
            (
                PlanError::Topology(TopologyError::NoAvailableTopology),
                ProvisioningState::NoChange,
                false,
                true,
            ),
            (
                PlanError::StorageClassNotFound { name: "x".into() },
                ProvisioningState::NoChange,
                false,
                false,
            ),
            (
                PlanError::ExternalPopulator { kind: "X".into() },
                ProvisioningState::Finished,
                true,
                false,
            ),
            (
                PlanError::StripParameters(ParamError::FsTypeConflict),
                ProvisioningState::Finished,
                false,
                true,
            ),
            (
                PlanError::Source(SourceError::SnapshotNotReady("ns/s".into())),
                ProvisioningState::NoChange,
                false,
                true,
            ),
        ];
        for (err, state, ignored, event) in cases {
            assert_eq!(err.state(), state, "{err}");
            assert_eq!(err.is_ignored(), ignored, "{err}");
            assert_eq!(err.emits_event(), event, "{err}");
            assert_eq!(
                err.retries_slowly(),
                matches!(err, PlanError::Source(_)),
                "{err}"
            );
        }
    }
}
