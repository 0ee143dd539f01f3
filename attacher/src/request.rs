//! ControllerPublishVolume and ControllerUnpublishVolume requests for a resolved volume
//! (external-attacher `csiAttach` / `csiDetach` and `GetVolumeCapabilities`).

use std::collections::HashMap;

use csi_common::access_modes::{self, AccessModeError};
use csi_common::capabilities::ControllerCapabilities;
use csi_common::volume_capability::{self, AccessType};
use proto::csi::v1::{ControllerPublishVolumeRequest, ControllerUnpublishVolumeRequest};

use crate::source::{DetachTarget, Volume};

/// What the driver and the flags decide about every publish request.
#[derive(Debug, Clone, Default)]
pub(crate) struct PublishSettings {
    /// The driver's controller capabilities (PUBLISH_READONLY, SINGLE_NODE_MULTI_WRITER).
    pub(crate) capabilities: ControllerCapabilities,
    /// `--default-fstype`: used when the PV has no `spec.csi.fsType`.
    pub(crate) default_fs_type: String,
}

/// The publish request; fails only when the PV's access modes have no CSI equivalent.
pub(crate) fn publish(
    volume: &Volume<'_>,
    node_id: &str,
    secrets: HashMap<String, String>,
    settings: &PublishSettings,
) -> Result<ControllerPublishVolumeRequest, AccessModeError> {
    let spec = volume.spec;
    let mode = access_modes::set_to_csi(volume.access_modes(), &settings.capabilities)?;
    let mount_flags = spec.mount_options.as_deref().unwrap_or_default();
    let fs_type = volume
        .csi
        .fs_type
        .as_deref()
        .filter(|t| !t.is_empty())
        .unwrap_or(&settings.default_fs_type);
    let access = if spec.volume_mode.as_deref() == Some("Block") {
        AccessType::Block
    } else {
        AccessType::Mount {
            fs_type,
            mount_flags,
        }
    };
    Ok(ControllerPublishVolumeRequest {
        volume_id: volume.csi.volume_handle.clone(),
        node_id: node_id.to_owned(),
        volume_capability: Some(volume_capability::build(mode, &access)),
        // CSI spec, ControllerPublishVolumeRequest.readonly: "The CO MUST set this field to
        // false if SP does not have the PUBLISH_READONLY controller capability."
        readonly: volume.csi.read_only.unwrap_or(false)
            && settings.capabilities.has_publish_readonly(),
        secrets,
        volume_context: volume
            .csi
            .volume_attributes
            .iter()
            .flatten()
            .cloned()
            .collect(),
    })
}

/// The unpublish request.
pub(crate) fn unpublish(
    target: &DetachTarget,
    node_id: &str,
    secrets: HashMap<String, String>,
) -> ControllerUnpublishVolumeRequest {
    ControllerUnpublishVolumeRequest {
        volume_id: target.volume_id.clone(),
        node_id: node_id.to_owned(),
        secrets,
    }
}

#[cfg(test)]
mod tests {
    use proto::csi::v1::ControllerGetCapabilitiesResponse;
    use proto::csi::v1::ControllerServiceCapability;
    use proto::csi::v1::controller_service_capability::{Rpc, Type, rpc};
    use proto::csi::v1::volume_capability::access_mode::Mode;
    use proto::csi::v1::volume_capability::{self as cap, AccessMode, BlockVolume, MountVolume};

    use super::*;
    use crate::cached::{CsiSource, PersistentVolumeSpec};

    fn caps(list: &[rpc::Type]) -> ControllerCapabilities {
        ControllerCapabilities::from_response(&ControllerGetCapabilitiesResponse {
            capabilities: list
                .iter()
                .map(|t| ControllerServiceCapability {
                    r#type: Some(Type::Rpc(Rpc { r#type: *t as i32 })),
                })
                .collect(),
        })
    }

    struct Case {
        name: &'static str,
        volume_mode: Option<&'static str>,
        fs_type: Option<&'static str>,
        read_only: Option<bool>,
        access_modes: &'static [&'static str],
        capabilities: &'static [rpc::Type],
        default_fs_type: &'static str,
        want_access: cap::AccessType,
        want_mode: Mode,
        want_readonly: bool,
    }

    fn mount(fs: &str) -> cap::AccessType {
        cap::AccessType::Mount(MountVolume {
            fs_type: fs.into(),
            mount_flags: vec!["noatime".into()],
            volume_mount_group: String::new(),
        })
    }

    fn cases() -> [Case; 6] {
        [
            Case {
                name: "mount with the PV's fsType",
                volume_mode: None,
                fs_type: Some("xfs"),
                read_only: None,
                access_modes: &["ReadWriteOnce"],
                capabilities: &[],
                default_fs_type: "ext4",
                want_access: mount("xfs"),
                want_mode: Mode::SingleNodeWriter,
                want_readonly: false,
            },
            Case {
                name: "empty fsType takes --default-fstype",
                volume_mode: Some("Filesystem"),
                fs_type: Some(""),
                read_only: None,
                access_modes: &["ReadWriteOnce"],
                capabilities: &[rpc::Type::SingleNodeMultiWriter],
                default_fs_type: "ext4",
                want_access: mount("ext4"),
                want_mode: Mode::SingleNodeMultiWriter,
                want_readonly: false,
            },
            Case {
                name: "no fsType and no default leaves it to the driver",
                volume_mode: None,
                fs_type: None,
                read_only: None,
                access_modes: &["ReadWriteMany"],
                capabilities: &[],
                default_fs_type: "",
                want_access: mount(""),
                want_mode: Mode::MultiNodeMultiWriter,
                want_readonly: false,
            },
            Case {
                name: "block",
                volume_mode: Some("Block"),
                fs_type: Some("xfs"),
                read_only: None,
                access_modes: &["ReadOnlyMany"],
                capabilities: &[],
                default_fs_type: "ext4",
                want_access: cap::AccessType::Block(BlockVolume {}),
                want_mode: Mode::MultiNodeReaderOnly,
                want_readonly: false,
            },
            Case {
                name: "read-only forced off without PUBLISH_READONLY",
                volume_mode: None,
                fs_type: Some("xfs"),
                read_only: Some(true),
                access_modes: &["ReadWriteOncePod"],
                capabilities: &[],
                default_fs_type: "",
                want_access: mount("xfs"),
                want_mode: Mode::SingleNodeWriter,
                want_readonly: false,
            },
            Case {
                name: "read-only kept with PUBLISH_READONLY",
                volume_mode: None,
                fs_type: Some("xfs"),
                read_only: Some(true),
                access_modes: &["ReadWriteOncePod"],
                capabilities: &[rpc::Type::PublishReadonly, rpc::Type::SingleNodeMultiWriter],
                default_fs_type: "",
                want_access: mount("xfs"),
                want_mode: Mode::SingleNodeSingleWriter,
                want_readonly: true,
            },
        ]
    }

    #[test]
    fn publish_requests_follow_external_attacher() {
        for case in cases() {
            let spec = PersistentVolumeSpec {
                volume_mode: case.volume_mode.map(str::to_owned),
                access_modes: Some(case.access_modes.iter().map(|m| (*m).to_owned()).collect()),
                mount_options: Some(vec!["noatime".into()]),
                ..Default::default()
            };
            let csi = CsiSource {
                volume_handle: "vol-1".into(),
                fs_type: case.fs_type.map(str::to_owned),
                read_only: case.read_only,
                volume_attributes: Some(Box::new([("a".to_owned(), "b".to_owned())])),
                ..Default::default()
            };
            let volume = Volume::csi(&spec, &csi);
            let settings = PublishSettings {
                capabilities: caps(case.capabilities),
                default_fs_type: case.default_fs_type.into(),
            };
            let secrets = HashMap::from([("k".to_owned(), "v".to_owned())]);
            let request = publish(&volume, "node-id", secrets.clone(), &settings).unwrap();
            assert_eq!(request.volume_id, "vol-1", "{}", case.name);
            assert_eq!(request.node_id, "node-id", "{}", case.name);
            assert_eq!(request.secrets, secrets, "{}", case.name);
            assert_eq!(request.readonly, case.want_readonly, "{}", case.name);
            assert_eq!(
                request.volume_context,
                HashMap::from([("a".to_owned(), "b".to_owned())]),
                "{}",
                case.name
            );
            let capability = request.volume_capability.unwrap();
            assert_eq!(
                capability.access_type,
                Some(case.want_access),
                "{}",
                case.name
            );
            assert_eq!(
                capability.access_mode,
                Some(AccessMode {
                    mode: case.want_mode as i32
                }),
                "{}",
                case.name
            );
        }
    }

    #[test]
    fn access_modes_without_csi_equivalent_are_refused() {
        let spec = PersistentVolumeSpec {
            access_modes: Some(vec!["ReadOnlyMany".into(), "ReadWriteOnce".into()]),
            ..Default::default()
        };
        let csi = CsiSource::default();
        let volume = Volume::csi(&spec, &csi);
        assert_eq!(
            publish(&volume, "n", HashMap::new(), &PublishSettings::default()),
            Err(AccessModeError::ReadOnlyManyWithReadWriteOnce)
        );
    }
}
