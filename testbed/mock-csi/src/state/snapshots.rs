//! Snapshots and volume content sources (CSI spec v1.12.0, CreateSnapshot / DeleteSnapshot and
//! the CreateVolume `volume_content_source` rules).
//!
//! Copied behaviour, each unit-tested in `state/tests.rs`:
//! * CreateSnapshot needs CREATE_DELETE_SNAPSHOT (else UNIMPLEMENTED), a name and a source
//!   volume id (INVALID_ARGUMENT), an existing source volume (NOT_FOUND); it is idempotent by
//!   name, and the same name for another source volume is ALREADY_EXISTS. Snapshots are cut at
//!   once (`ready_to_use: true`, the source's size), as csi-driver-host-path does.
//! * DeleteSnapshot of an unknown id is OK (idempotency).
//! * CreateVolume from a source: the source kind needs its capability (CLONE_VOLUME for a
//!   volume, CREATE_DELETE_SNAPSHOT for a snapshot; else INVALID_ARGUMENT, "source
//!   incompatible or not supported"); a missing source is NOT_FOUND; a volume smaller than its
//!   source, by `required_bytes` or by `limit_bytes`, is OUT_OF_RANGE; no size requested means
//!   the source's size.

use proto::csi::v1 as csi;
use tonic::Status;

use super::{ControllerRpc, MockDriverConfig, VolumeTable, require_controller, volume_id_for};

/// A snapshot in the mock driver's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MockSnapshot {
    /// `Snapshot.snapshot_id`.
    pub snapshot_id: String,
    /// The CreateSnapshot `name` (idempotency key).
    pub name: String,
    /// `Snapshot.source_volume_id`.
    pub source_volume_id: String,
    /// `Snapshot.size_bytes`: the source volume's capacity when cut.
    pub size_bytes: i64,
    /// `Snapshot.creation_time`.
    pub created: std::time::SystemTime,
}

impl MockSnapshot {
    fn to_proto(&self) -> csi::Snapshot {
        csi::Snapshot {
            size_bytes: self.size_bytes,
            snapshot_id: self.snapshot_id.clone(),
            source_volume_id: self.source_volume_id.clone(),
            creation_time: Some(prost_types::Timestamp::from(self.created)),
            ready_to_use: true,
            group_snapshot_id: String::new(),
        }
    }
}

impl VolumeTable {
    /// A copy of the snapshot table, in creation order.
    pub(crate) fn snapshots(&self) -> Vec<MockSnapshot> {
        self.snapshots.clone()
    }

    pub(crate) fn create_snapshot(
        &mut self,
        cfg: &MockDriverConfig,
        req: &csi::CreateSnapshotRequest,
    ) -> Result<csi::CreateSnapshotResponse, Status> {
        require_controller(cfg, ControllerRpc::CreateDeleteSnapshot, "CreateSnapshot")?;
        if req.name.is_empty() {
            return Err(Status::invalid_argument("Name missing in request"));
        }
        if req.source_volume_id.is_empty() {
            return Err(Status::invalid_argument(
                "SourceVolumeId missing in request",
            ));
        }
        if let Some(existing) = self.snapshots.iter().find(|s| s.name == req.name) {
            if existing.source_volume_id != req.source_volume_id {
                return Err(Status::already_exists(format!(
                    "snapshot with the same name: {} but with different SourceVolumeId already exist",
                    req.name
                )));
            }
            return Ok(csi::CreateSnapshotResponse {
                snapshot: Some(existing.to_proto()),
            });
        }
        let source = self
            .by_id(&req.source_volume_id)
            .ok_or_else(|| Self::not_found(&req.source_volume_id))?;
        let snapshot = MockSnapshot {
            snapshot_id: format!("snap-{}", volume_id_for(&req.name)),
            name: req.name.clone(),
            source_volume_id: source.volume_id.clone(),
            size_bytes: source.capacity_bytes,
            created: std::time::SystemTime::now(),
        };
        let response = csi::CreateSnapshotResponse {
            snapshot: Some(snapshot.to_proto()),
        };
        self.snapshots.push(snapshot);
        Ok(response)
    }

    pub(crate) fn delete_snapshot(
        &mut self,
        cfg: &MockDriverConfig,
        req: &csi::DeleteSnapshotRequest,
    ) -> Result<csi::DeleteSnapshotResponse, Status> {
        require_controller(cfg, ControllerRpc::CreateDeleteSnapshot, "DeleteSnapshot")?;
        if req.snapshot_id.is_empty() {
            return Err(Status::invalid_argument("Snapshot ID missing in request"));
        }
        self.snapshots.retain(|s| s.snapshot_id != req.snapshot_id);
        Ok(csi::DeleteSnapshotResponse {})
    }

    /// The size of a content source, after checking that the driver supports its kind and that
    /// it exists.
    pub(crate) fn content_source_size(
        &self,
        cfg: &MockDriverConfig,
        source: &csi::VolumeContentSource,
    ) -> Result<i64, Status> {
        use csi::volume_content_source::Type;
        let unsupported = |what: &str| {
            Status::invalid_argument(format!(
                "{what} is not supported by this driver (source incompatible or not supported)"
            ))
        };
        match &source.r#type {
            Some(Type::Volume(v)) => {
                if !cfg.has_controller(ControllerRpc::CloneVolume) {
                    return Err(unsupported("cloning a volume"));
                }
                self.by_id(&v.volume_id)
                    .map(|v| v.capacity_bytes)
                    .ok_or_else(|| Self::not_found(&v.volume_id))
            }
            Some(Type::Snapshot(s)) => {
                if !cfg.has_controller(ControllerRpc::CreateDeleteSnapshot) {
                    return Err(unsupported("restoring a snapshot"));
                }
                self.snapshots
                    .iter()
                    .find(|snap| snap.snapshot_id == s.snapshot_id)
                    .map(|snap| snap.size_bytes)
                    .ok_or_else(|| {
                        Status::not_found(format!("source snapshot {} not found", s.snapshot_id))
                    })
            }
            None => Err(Status::invalid_argument("not a proper volume source")),
        }
    }
}

/// A volume of `size` bytes (`limit` 0 = no limit) cannot hold a source of `source` bytes: CSI
/// spec "Unsupported capacity_range", OUT_OF_RANGE.
pub(crate) fn check_source_fits(size: i64, limit: i64, source: i64) -> Result<(), Status> {
    if size < source || (limit > 0 && limit < source) {
        return Err(Status::out_of_range(format!(
            "requested size {size} (limit {limit}) is smaller than the source's {source} bytes"
        )));
    }
    Ok(())
}
