//! `Debug` for the CSI messages that carry secrets.
//!
//! The CSI spec marks credential maps with `[(csi_secret) = true]` and requires that
//! they are "not logged". The generator leaves these messages without a derived
//! `Debug` (`skip_debug`), and this module supplies one that prints every field
//! except the secret map, which shows as [`STRIPPED`] — the same marker
//! csi-lib-utils' `protosanitizer` uses, so logs read alike.
//!
//! Each impl destructures its message without `..`: a field added by a future spec
//! update is a compile error here rather than a field silently missing from logs.
//! The list is derived from the descriptor, and a test walks the descriptor set to
//! check that every message with a `csi_secret` field is in [`SECRET_BEARING_MESSAGES`].

use std::fmt;

use crate::csi::v1;

/// What a secret map prints as, in `Debug` output and in [`crate::sanitize`] JSON.
pub const STRIPPED: &str = "***stripped***";

/// Debug-prints as [`STRIPPED`], without quotes.
struct Stripped;

impl fmt::Debug for Stripped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(STRIPPED)
    }
}

/// Implements `Debug` for messages whose `secrets` field is the only secret; the
/// field lists before and after `secrets` keep the declaration order in the output.
macro_rules! redacted_debug {
    ($($message:ident { $($before:ident),* ; $($after:ident),* })*) => {
        $(
            impl fmt::Debug for v1::$message {
                fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    let v1::$message { $($before,)* secrets: _, $($after,)* } = self;
                    f.debug_struct(stringify!($message))
                        $(.field(stringify!($before), $before))*
                        .field("secrets", &Stripped)
                        $(.field(stringify!($after), $after))*
                        .finish()
                }
            }
        )*

        /// Full protobuf names of the messages with a `csi_secret` field, in the
        /// order they are declared in the CSI spec. Every one has a redacting `Debug`.
        pub const SECRET_BEARING_MESSAGES: &[&str] = &[
            $(concat!("csi.v1.", stringify!($message)),)*
        ];
    };
}

redacted_debug! {
    CreateVolumeRequest {
        name, capacity_range, volume_capabilities, parameters;
        volume_content_source, accessibility_requirements, mutable_parameters
    }
    DeleteVolumeRequest { volume_id; }
    ControllerPublishVolumeRequest {
        volume_id, node_id, volume_capability, readonly;
        volume_context
    }
    ControllerUnpublishVolumeRequest { volume_id, node_id; }
    ValidateVolumeCapabilitiesRequest {
        volume_id, volume_context, volume_capabilities, parameters;
        mutable_parameters
    }
    ControllerModifyVolumeRequest { volume_id; mutable_parameters }
    CreateSnapshotRequest { source_volume_id, name; parameters }
    DeleteSnapshotRequest { snapshot_id; }
    ListSnapshotsRequest { max_entries, starting_token, source_volume_id, snapshot_id; }
    GetSnapshotRequest { snapshot_id; }
    ControllerExpandVolumeRequest { volume_id, capacity_range; volume_capability }
    NodeStageVolumeRequest {
        volume_id, publish_context, staging_target_path, volume_capability;
        volume_context
    }
    NodePublishVolumeRequest {
        volume_id, publish_context, staging_target_path, target_path, volume_capability,
        readonly;
        volume_context
    }
    NodeExpandVolumeRequest {
        volume_id, volume_path, capacity_range, staging_target_path, volume_capability;
    }
    CreateVolumeGroupSnapshotRequest { name, source_volume_ids; parameters }
    DeleteVolumeGroupSnapshotRequest { group_snapshot_id, snapshot_ids; }
    GetVolumeGroupSnapshotRequest { group_snapshot_id, snapshot_ids; }
    GetMetadataAllocatedRequest { snapshot_id, starting_offset, max_results; }
    GetMetadataDeltaRequest {
        base_snapshot_id, target_snapshot_id, starting_offset, max_results;
    }
}

#[cfg(test)]
mod tests;
