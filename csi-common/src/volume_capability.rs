//! The one `VolumeCapability` a sidecar sends for a volume: Block, or Mount with a filesystem
//! type and mount flags, plus the CSI access mode.
//!
//! The provisioner builds it from a claim and its StorageClass (CreateVolume), the attacher from
//! a PersistentVolume (ControllerPublishVolume), the resizer from a PersistentVolume
//! (ControllerExpandVolume). Only the inputs differ, so the shape lives here once. The CSI spec
//! (`VolumeCapability`) allows exactly one access type; `volume_mount_group` stays empty because
//! none of the controller sidecars knows a pod's fsGroup.
//!
//! ```
//! use csi_common::volume_capability::{AccessType, build};
//! use proto::csi::v1::volume_capability::access_mode::Mode;
//!
//! let flags = vec!["noatime".to_owned()];
//! let capability = build(Mode::SingleNodeWriter, &AccessType::Mount { fs_type: "ext4", mount_flags: &flags });
//! assert_eq!(capability.access_mode.unwrap().mode, Mode::SingleNodeWriter as i32);
//! ```

use proto::csi::v1::VolumeCapability;
use proto::csi::v1::volume_capability::access_mode::Mode;
use proto::csi::v1::volume_capability::{self as cap, AccessMode, BlockVolume, MountVolume};

/// How the volume is consumed: a raw block device or a mounted filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessType<'a> {
    /// `volumeMode: Block`.
    Block,
    /// `volumeMode: Filesystem` (or unset).
    Mount {
        /// The filesystem type; empty lets the driver choose.
        fs_type: &'a str,
        /// Mount options (a PV's `spec.mountOptions`, a class's `mountOptions`).
        mount_flags: &'a [String],
    },
}

/// The capability for `mode` and `access`.
pub fn build(mode: Mode, access: &AccessType<'_>) -> VolumeCapability {
    let access_type = match *access {
        AccessType::Block => cap::AccessType::Block(BlockVolume {}),
        AccessType::Mount {
            fs_type,
            mount_flags,
        } => cap::AccessType::Mount(MountVolume {
            fs_type: fs_type.to_owned(),
            mount_flags: mount_flags.to_vec(),
            volume_mount_group: String::new(),
        }),
    };
    VolumeCapability {
        access_mode: Some(AccessMode { mode: mode as i32 }),
        access_type: Some(access_type),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_has_no_filesystem_fields() {
        let capability = build(Mode::MultiNodeMultiWriter, &AccessType::Block);
        assert_eq!(
            capability.access_type,
            Some(cap::AccessType::Block(BlockVolume {}))
        );
        assert_eq!(
            capability.access_mode,
            Some(AccessMode {
                mode: Mode::MultiNodeMultiWriter as i32
            })
        );
    }

    #[test]
    fn mount_carries_fs_type_and_flags_and_no_mount_group() {
        let flags = vec!["ro".to_owned(), "noatime".to_owned()];
        let capability = build(
            Mode::SingleNodeWriter,
            &AccessType::Mount {
                fs_type: "xfs",
                mount_flags: &flags,
            },
        );
        assert_eq!(
            capability.access_type,
            Some(cap::AccessType::Mount(MountVolume {
                fs_type: "xfs".to_owned(),
                mount_flags: flags,
                volume_mount_group: String::new(),
            }))
        );
    }
}
