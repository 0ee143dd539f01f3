//! The in-memory volume table and the CSI semantics of every stateful RPC, kept free of gRPC
//! transport so each rule is unit-tested directly.
//!
//! Behaviour follows the CSI spec v1.12.0 error tables and, where the spec leaves room,
//! csi-driver-host-path v1.18 (`pkg/hostpath/controllerserver.go`), the driver the golden fixtures
//! were captured from: idempotent CreateVolume by name with AlreadyExists on a size conflict,
//! OutOfRange above the maximum volume size, NotFound for unknown volumes and nodes on publish,
//! OK for deleting or unpublishing what is already gone.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use indexmap::IndexMap;
use proto::csi::v1 as csi;
use tonic::Status;

mod snapshots;

pub use snapshots::MockSnapshot;

use super::config::VolumeExpansion;
use super::config::{ControllerRpc, MockDriverConfig, NodeRpc, PluginCapability, PluginService};

/// A volume in the mock driver's table.
#[derive(Debug, Clone, PartialEq)]
pub struct MockVolume {
    /// `Volume.volume_id`.
    pub volume_id: String,
    /// The `CreateVolumeRequest.name` it was created under (empty for volumes added by a test).
    pub name: String,
    /// `Volume.capacity_bytes`.
    pub capacity_bytes: i64,
    /// `CreateVolumeRequest.parameters` as received.
    pub parameters: BTreeMap<String, String>,
    /// `Volume.volume_context` (csi-driver-host-path echoes the parameters here).
    pub volume_context: BTreeMap<String, String>,
    /// `Volume.accessible_topology`, one segment map per topology.
    pub accessible_topology: Vec<BTreeMap<String, String>>,
    /// `Volume.content_source`, when created from a snapshot or another volume.
    pub content_source: Option<csi::VolumeContentSource>,
    /// Nodes the volume is controller-published to, with the `readonly` flag of that publish.
    pub published_nodes: BTreeMap<String, bool>,
    /// Staging paths from `NodeStageVolume`.
    pub staged_paths: BTreeSet<String>,
    /// Target paths from `NodePublishVolume`.
    pub published_paths: BTreeSet<String>,
    /// The last `ControllerModifyVolumeRequest.mutable_parameters` (or CreateVolume's).
    pub mutable_parameters: BTreeMap<String, String>,
}

impl MockVolume {
    /// A volume with only an id and a size, e.g. a pre-existing (static) volume for a test.
    pub fn new(volume_id: impl Into<String>, capacity_bytes: i64) -> Self {
        MockVolume {
            volume_id: volume_id.into(),
            name: String::new(),
            capacity_bytes,
            parameters: BTreeMap::new(),
            volume_context: BTreeMap::new(),
            accessible_topology: Vec::new(),
            content_source: None,
            published_nodes: BTreeMap::new(),
            staged_paths: BTreeSet::new(),
            published_paths: BTreeSet::new(),
            mutable_parameters: BTreeMap::new(),
        }
    }

    /// The volume as the CSI `Volume` message.
    pub fn to_proto(&self) -> csi::Volume {
        csi::Volume {
            capacity_bytes: self.capacity_bytes,
            volume_id: self.volume_id.clone(),
            volume_context: to_map(&self.volume_context),
            content_source: self.content_source.clone(),
            accessible_topology: self.accessible_topology.iter().map(topology).collect(),
        }
    }

    fn published_node_ids(&self) -> Vec<String> {
        self.published_nodes.keys().cloned().collect()
    }
}

fn to_map<M: FromIterator<(String, String)>>(map: &BTreeMap<String, String>) -> M {
    map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn from_map<'a>(
    map: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> BTreeMap<String, String> {
    map.into_iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The StorageClass parameter csi-driver-host-path picks a capacity kind by (`storageKind`).
const KIND_PARAMETER: &str = "kind";

fn topology(segments: &BTreeMap<String, String>) -> csi::Topology {
    csi::Topology {
        segments: to_map(segments),
    }
}

/// Whether every segment of `wanted` is one of `ours` (a requisite/GetCapacity topology names a
/// subset of the keys; a key we do not have cannot match).
fn topology_matches<'a>(
    ours: &BTreeMap<String, String>,
    wanted: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> bool {
    wanted.into_iter().all(|(k, v)| ours.get(k) == Some(v))
}

/// The id CreateVolume gives the volume `name`: it depends only on the name, so a deleted and
/// re-created name gets the same id and tests can predict it. Two FNV-1a 64 hashes with
/// different offsets, printed like a UUID.
pub fn volume_id_for(name: &str) -> String {
    fn fnv1a(bytes: &[u8], offset: u64) -> u64 {
        bytes.iter().fold(offset, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    }
    let a = fnv1a(name.as_bytes(), 0xcbf2_9ce4_8422_2325);
    let b = fnv1a(name.as_bytes(), 0x8422_2325_cbf2_9ce4);
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}

fn unimplemented(what: &str) -> Status {
    Status::unimplemented(format!("{what} is not supported by this driver"))
}

fn require_controller(
    cfg: &MockDriverConfig,
    cap: ControllerRpc,
    what: &str,
) -> Result<(), Status> {
    if cfg.has_controller(cap) {
        Ok(())
    } else {
        Err(unimplemented(what))
    }
}

fn require_node(cfg: &MockDriverConfig, cap: NodeRpc, what: &str) -> Result<(), Status> {
    if cfg.has_node(cap) {
        Ok(())
    } else {
        Err(unimplemented(what))
    }
}

fn require_id(id: &str) -> Result<(), Status> {
    if id.is_empty() {
        Err(Status::invalid_argument("Volume ID missing in request"))
    } else {
        Ok(())
    }
}

/// Every capability must name exactly one access type (CSI spec, `VolumeCapability.access_type`),
/// and csi-driver-host-path refuses a request mixing block and mount.
fn check_capabilities(caps: &[csi::VolumeCapability]) -> Result<(), Status> {
    use csi::volume_capability::AccessType;
    let mut block = false;
    let mut mount = false;
    for cap in caps {
        match cap.access_type {
            Some(AccessType::Block(_)) => block = true,
            Some(AccessType::Mount(_)) => mount = true,
            None => {
                return Err(Status::invalid_argument(
                    "cannot have both mount and block access type be undefined",
                ));
            }
        }
    }
    if block && mount {
        return Err(Status::invalid_argument(
            "cannot have both block and mount access type",
        ));
    }
    Ok(())
}

/// The validated `CapacityRange`: (required, limit), 0 meaning unset.
fn capacity_range(range: Option<&csi::CapacityRange>) -> Result<(i64, i64), Status> {
    let (required, limit) = range.map_or((0, 0), |r| (r.required_bytes, r.limit_bytes));
    if required < 0 || limit < 0 {
        return Err(Status::invalid_argument("cannot have negative capacity"));
    }
    if limit > 0 && required > limit {
        return Err(Status::invalid_argument("capacity cannot exceed limit"));
    }
    Ok((required, limit))
}

fn round_up(size: i64, unit: i64) -> i64 {
    match size % unit {
        0 => size,
        rest => size.saturating_add(unit - rest),
    }
}

fn exceeds_maximum(requested: i64, max: i64) -> Status {
    Status::out_of_range(format!(
        "Requested capacity {requested} exceeds maximum allowed {max}"
    ))
}

/// The mock driver's volumes, by id in creation order, and their ids by name. A driver looks
/// its volumes up by id and by name on every call; scanning a list instead cost the bench's
/// test bed 7 % of its CPU at 5,000 volumes (docs/bench.md, "The mock driver's volume table").
#[derive(Debug, Default)]
pub(crate) struct VolumeTable {
    volumes: IndexMap<String, MockVolume>,
    ids_by_name: HashMap<String, String>,
    snapshots: Vec<MockSnapshot>,
}

impl VolumeTable {
    pub(crate) fn snapshot(&self) -> Vec<MockVolume> {
        self.volumes.values().cloned().collect()
    }

    /// Adds or replaces (by id, in place) a volume, bypassing every check.
    pub(crate) fn upsert(&mut self, volume: MockVolume) {
        if let Some(old) = self.volumes.get(&volume.volume_id) {
            self.ids_by_name.remove(&old.name);
        }
        self.insert(volume);
    }

    /// Adds a volume at the end (or in its place, when its id is known already). A name is
    /// unique among created volumes (CreateVolume answers a known name with its volume); an
    /// inserted volume has none, and is not found by name.
    fn insert(&mut self, volume: MockVolume) {
        if !volume.name.is_empty() {
            self.ids_by_name
                .insert(volume.name.clone(), volume.volume_id.clone());
        }
        self.volumes.insert(volume.volume_id.clone(), volume);
    }

    /// Removes the volume `id`, keeping the others in creation order.
    fn remove(&mut self, id: &str) {
        if let Some(volume) = self.volumes.shift_remove(id)
            && self.ids_by_name.get(&volume.name) == Some(&volume.volume_id)
        {
            self.ids_by_name.remove(&volume.name);
        }
    }

    fn by_id(&self, id: &str) -> Option<&MockVolume> {
        self.volumes.get(id)
    }

    fn by_id_mut(&mut self, id: &str) -> Option<&mut MockVolume> {
        self.volumes.get_mut(id)
    }

    fn by_name(&self, name: &str) -> Option<&MockVolume> {
        self.ids_by_name
            .get(name)
            .and_then(|id| self.volumes.get(id))
    }

    fn not_found(id: &str) -> Status {
        Status::not_found(format!("volume id {id} does not exist in the volumes list"))
    }

    fn used(&self) -> i64 {
        self.volumes.values().map(|v| v.capacity_bytes).sum()
    }

    /// csi-driver-host-path `GetCapacity` with `--capacity`: the kind's size minus what
    /// volumes of that kind use, never below 0.
    fn available_of_kind(&self, cfg: &MockDriverConfig, kind: Option<&String>) -> i64 {
        let Some(total) = kind.and_then(|k| cfg.capacity_by_kind.get(k)) else {
            return 0;
        };
        let used: i64 = self
            .volumes
            .values()
            .filter(|v| v.parameters.get(KIND_PARAMETER) == kind)
            .map(|v| v.capacity_bytes)
            .sum();
        (total - used).max(0)
    }

    fn available(&self, cfg: &MockDriverConfig) -> Option<i64> {
        cfg.total_capacity.map(|total| (total - self.used()).max(0))
    }

    fn topology_enabled(cfg: &MockDriverConfig) -> bool {
        !cfg.topology.is_empty()
            && cfg.has_plugin(PluginCapability::Service(
                PluginService::VolumeAccessibilityConstraints,
            ))
    }

    /// The topology of a new volume; a requisite topology the plugin cannot provision in is
    /// RESOURCE_EXHAUSTED (CSI spec, CreateVolume errors).
    fn accessible_topology(
        cfg: &MockDriverConfig,
        req: &csi::CreateVolumeRequest,
    ) -> Result<Vec<BTreeMap<String, String>>, Status> {
        if !Self::topology_enabled(cfg) {
            return Ok(Vec::new());
        }
        let requisite = req
            .accessibility_requirements
            .as_ref()
            .map(|r| r.requisite.as_slice())
            .unwrap_or_default();
        if !requisite.is_empty()
            && !requisite
                .iter()
                .any(|t| topology_matches(&cfg.topology, &t.segments))
        {
            return Err(Status::resource_exhausted(
                "requisite topology cannot be satisfied by this driver",
            ));
        }
        Ok(vec![cfg.topology.clone()])
    }

    pub(crate) fn create_volume(
        &mut self,
        cfg: &MockDriverConfig,
        req: csi::CreateVolumeRequest,
    ) -> Result<csi::CreateVolumeResponse, Status> {
        require_controller(cfg, ControllerRpc::CreateDeleteVolume, "CreateVolume")?;
        if req.name.is_empty() {
            return Err(Status::invalid_argument("Name missing in request"));
        }
        if req.volume_capabilities.is_empty() {
            return Err(Status::invalid_argument(
                "Volume Capabilities missing in request",
            ));
        }
        check_capabilities(&req.volume_capabilities)?;
        let (required, limit) = capacity_range(req.capacity_range.as_ref())?;
        // CSI spec, CreateVolumeRequest.mutable_parameters: "SHALL NOT be specified unless the
        // SP has the MODIFY_VOLUME plugin capability"; a driver without it cannot apply them,
        // so a request carrying them is refused rather than silently dropping them.
        if !req.mutable_parameters.is_empty() && !cfg.has_controller(ControllerRpc::ModifyVolume) {
            return Err(Status::invalid_argument(
                "mutable_parameters given but the driver does not have the MODIFY_VOLUME capability",
            ));
        }

        // Idempotency (CSI spec, CreateVolume): the same name returns the same volume unless the
        // existing one is incompatible with the new request, which is ALREADY_EXISTS.
        if let Some(existing) = self.by_name(&req.name) {
            if existing.capacity_bytes < required || (limit > 0 && existing.capacity_bytes > limit)
            {
                return Err(Status::already_exists(format!(
                    "Volume with the same name: {} but with different size already exist",
                    req.name
                )));
            }
            if req.volume_content_source.is_some()
                && existing.content_source != req.volume_content_source
            {
                return Err(Status::already_exists(
                    "existing volume source does not match the requested one",
                ));
            }
            return Ok(csi::CreateVolumeResponse {
                volume: Some(existing.to_proto()),
            });
        }

        let source_size = req
            .volume_content_source
            .as_ref()
            .map(|source| self.content_source_size(cfg, source))
            .transpose()?;
        let wanted = match (required, limit, source_size) {
            // No size asked for: as big as the source.
            (0, _, Some(source)) => source,
            (0, 0, None) => cfg.default_volume_size,
            (0, limit, None) => cfg.default_volume_size.min(limit),
            (required, _, _) => required,
        };
        if let Some(source) = source_size {
            snapshots::check_source_fits(wanted, limit, source)?;
        }
        if wanted > cfg.max_volume_size {
            return Err(exceeds_maximum(wanted, cfg.max_volume_size));
        }
        let size = round_up(wanted, cfg.allocation_unit);
        if limit > 0 && size > limit {
            return Err(Status::out_of_range(format!(
                "capacity {wanted} rounded up to the allocation unit {} exceeds the limit {limit}",
                cfg.allocation_unit
            )));
        }

        let accessible_topology = Self::accessible_topology(cfg, &req)?;

        if let Some(available) = self.available(cfg)
            && size > available
        {
            return Err(Status::resource_exhausted(format!(
                "insufficient capacity: requested {size}, available {available}"
            )));
        }

        let parameters = from_map(&req.parameters);
        let volume = MockVolume {
            volume_id: volume_id_for(&req.name),
            name: req.name,
            capacity_bytes: size,
            volume_context: parameters.clone(),
            parameters,
            accessible_topology,
            content_source: req.volume_content_source,
            mutable_parameters: from_map(&req.mutable_parameters),
            ..MockVolume::new(String::new(), 0)
        };
        let response = csi::CreateVolumeResponse {
            volume: Some(volume.to_proto()),
        };
        self.insert(volume);
        Ok(response)
    }

    pub(crate) fn delete_volume(
        &mut self,
        cfg: &MockDriverConfig,
        req: &csi::DeleteVolumeRequest,
    ) -> Result<csi::DeleteVolumeResponse, Status> {
        require_controller(cfg, ControllerRpc::CreateDeleteVolume, "DeleteVolume")?;
        require_id(&req.volume_id)?;
        // CSI spec: deleting a volume that does not exist is OK (idempotency).
        self.remove(&req.volume_id);
        Ok(csi::DeleteVolumeResponse {})
    }

    pub(crate) fn controller_publish(
        &mut self,
        cfg: &MockDriverConfig,
        req: &csi::ControllerPublishVolumeRequest,
    ) -> Result<csi::ControllerPublishVolumeResponse, Status> {
        require_controller(
            cfg,
            ControllerRpc::PublishUnpublishVolume,
            "ControllerPublishVolume",
        )?;
        require_id(&req.volume_id)?;
        if req.node_id.is_empty() {
            return Err(Status::invalid_argument("Node ID cannot be empty"));
        }
        if req.volume_capability.is_none() {
            return Err(Status::invalid_argument(
                "Volume Capabilities cannot be empty",
            ));
        }
        if !cfg.knows_node(&req.node_id) {
            return Err(Status::not_found(format!(
                "Not matching Node ID {} to mock Node ID {}",
                req.node_id, cfg.node_id
            )));
        }
        let attached_to_node = self
            .volumes
            .values()
            .filter(|v| v.published_nodes.contains_key(&req.node_id))
            .count();
        let volume = self
            .by_id_mut(&req.volume_id)
            .ok_or_else(|| Self::not_found(&req.volume_id))?;
        let publish_context = to_map(&cfg.publish_context);
        match volume.published_nodes.get(&req.node_id) {
            Some(readonly) if *readonly != req.readonly => Err(Status::already_exists(
                "Volume published but has incompatible readonly flag",
            )),
            Some(_) => Ok(csi::ControllerPublishVolumeResponse { publish_context }),
            None => {
                let limit = usize::try_from(cfg.max_volumes_per_node).unwrap_or(0);
                if limit > 0 && attached_to_node >= limit {
                    return Err(Status::resource_exhausted(format!(
                        "Cannot attach any more volumes to this node ('{}')",
                        req.node_id
                    )));
                }
                volume
                    .published_nodes
                    .insert(req.node_id.clone(), req.readonly);
                Ok(csi::ControllerPublishVolumeResponse { publish_context })
            }
        }
    }

    pub(crate) fn controller_unpublish(
        &mut self,
        cfg: &MockDriverConfig,
        req: &csi::ControllerUnpublishVolumeRequest,
    ) -> Result<csi::ControllerUnpublishVolumeResponse, Status> {
        require_controller(
            cfg,
            ControllerRpc::PublishUnpublishVolume,
            "ControllerUnpublishVolume",
        )?;
        require_id(&req.volume_id)?;
        // CSI spec: an empty node_id means "unpublish from all nodes".
        if !req.node_id.is_empty() && !cfg.knows_node(&req.node_id) {
            return Err(Status::not_found(format!(
                "Node ID {} does not match to expected Node ID {}",
                req.node_id, cfg.node_id
            )));
        }
        // A volume that does not exist is not published: OK (external-attacher PR #165).
        if let Some(volume) = self.by_id_mut(&req.volume_id) {
            if req.node_id.is_empty() {
                volume.published_nodes.clear();
            } else {
                volume.published_nodes.remove(&req.node_id);
            }
        }
        Ok(csi::ControllerUnpublishVolumeResponse {})
    }

    pub(crate) fn validate_capabilities(
        &self,
        req: csi::ValidateVolumeCapabilitiesRequest,
    ) -> Result<csi::ValidateVolumeCapabilitiesResponse, Status> {
        require_id(&req.volume_id)?;
        if req.volume_capabilities.is_empty() {
            return Err(Status::invalid_argument(
                "Volume Capabilities missing in request",
            ));
        }
        if self.by_id(&req.volume_id).is_none() {
            return Err(Self::not_found(&req.volume_id));
        }
        check_capabilities(&req.volume_capabilities)?;
        Ok(csi::ValidateVolumeCapabilitiesResponse {
            confirmed: Some(csi::validate_volume_capabilities_response::Confirmed {
                volume_context: req.volume_context,
                volume_capabilities: req.volume_capabilities,
                parameters: req.parameters,
                mutable_parameters: req.mutable_parameters,
            }),
            message: String::new(),
        })
    }

    pub(crate) fn list_volumes(
        &self,
        cfg: &MockDriverConfig,
        req: &csi::ListVolumesRequest,
    ) -> Result<csi::ListVolumesResponse, Status> {
        require_controller(cfg, ControllerRpc::ListVolumes, "ListVolumes")?;
        let max_entries = usize::try_from(req.max_entries)
            .map_err(|_| Status::invalid_argument("max_entries must not be negative"))?;
        // The token is the index of the next entry. CSI spec: a token the plugin cannot use is
        // ABORTED.
        let start = if req.starting_token.is_empty() {
            0
        } else {
            req.starting_token
                .parse::<usize>()
                .ok()
                .filter(|i| *i <= self.volumes.len())
                .ok_or_else(|| {
                    Status::aborted(format!("invalid starting_token {:?}", req.starting_token))
                })?
        };
        let end = if max_entries == 0 {
            self.volumes.len()
        } else {
            start.saturating_add(max_entries).min(self.volumes.len())
        };
        let with_nodes = cfg.has_controller(ControllerRpc::ListVolumesPublishedNodes);
        let with_condition = cfg.has_controller(ControllerRpc::VolumeCondition);
        let entries = self
            .volumes
            .get_range(start..end)
            .into_iter()
            .flat_map(indexmap::map::Slice::values)
            .map(|v| csi::list_volumes_response::Entry {
                volume: Some(v.to_proto()),
                status: (with_nodes || with_condition).then(|| {
                    csi::list_volumes_response::VolumeStatus {
                        published_node_ids: if with_nodes {
                            v.published_node_ids()
                        } else {
                            Vec::new()
                        },
                        volume_condition: with_condition.then(healthy),
                    }
                }),
            })
            .collect();
        let next_token = if end < self.volumes.len() {
            end.to_string()
        } else {
            String::new()
        };
        Ok(csi::ListVolumesResponse {
            entries,
            next_token,
        })
    }

    pub(crate) fn get_capacity(
        &self,
        cfg: &MockDriverConfig,
        req: &csi::GetCapacityRequest,
    ) -> Result<csi::GetCapacityResponse, Status> {
        require_controller(cfg, ControllerRpc::GetCapacity, "GetCapacity")?;
        if let Some((available, maximum)) = cfg.capacity_answer {
            return Ok(csi::GetCapacityResponse {
                available_capacity: available,
                maximum_volume_size: maximum,
                minimum_volume_size: None,
            });
        }
        let elsewhere = req
            .accessible_topology
            .as_ref()
            .is_some_and(|t| !topology_matches(&cfg.topology, &t.segments));
        // Without a total, csi-driver-host-path reports its maximum volume size as available.
        let available = if elsewhere {
            0
        } else if cfg.capacity_by_kind.is_empty() {
            self.available(cfg).unwrap_or(cfg.max_volume_size)
        } else {
            self.available_of_kind(cfg, req.parameters.get(KIND_PARAMETER))
        };
        Ok(csi::GetCapacityResponse {
            available_capacity: available,
            maximum_volume_size: Some(cfg.max_volume_size.min(available)),
            minimum_volume_size: Some(0),
        })
    }

    pub(crate) fn controller_expand(
        &mut self,
        cfg: &MockDriverConfig,
        req: &csi::ControllerExpandVolumeRequest,
    ) -> Result<csi::ControllerExpandVolumeResponse, Status> {
        require_controller(cfg, ControllerRpc::ExpandVolume, "ControllerExpandVolume")?;
        require_id(&req.volume_id)?;
        let Some(range) = req.capacity_range.as_ref() else {
            return Err(Status::invalid_argument("Capacity range not provided"));
        };
        let (required, limit) = capacity_range(Some(range))?;
        if required > cfg.max_volume_size {
            return Err(exceeds_maximum(required, cfg.max_volume_size));
        }
        let available = self.available(cfg);
        let offline_only = cfg
            .has_plugin(PluginCapability::VolumeExpansion(VolumeExpansion::Offline))
            && !cfg.has_plugin(PluginCapability::VolumeExpansion(VolumeExpansion::Online));
        let volume = self
            .by_id_mut(&req.volume_id)
            .ok_or_else(|| Self::not_found(&req.volume_id))?;
        // CSI spec, ControllerExpandVolume: an OFFLINE-only plugin answers FAILED_PRECONDITION
        // while the volume is published.
        if offline_only && !volume.published_nodes.is_empty() {
            return Err(Status::failed_precondition(format!(
                "volume {} is published and the driver only supports offline expansion",
                volume.volume_id
            )));
        }
        let size = round_up(required, cfg.allocation_unit);
        if limit > 0 && size > limit {
            return Err(Status::out_of_range(format!(
                "capacity {required} rounded up to the allocation unit exceeds the limit {limit}"
            )));
        }
        if size > volume.capacity_bytes {
            let growth = size - volume.capacity_bytes;
            if available.is_some_and(|a| growth > a) {
                return Err(Status::resource_exhausted(format!(
                    "insufficient capacity to grow by {growth} bytes"
                )));
            }
            volume.capacity_bytes = size;
        }
        Ok(csi::ControllerExpandVolumeResponse {
            capacity_bytes: volume.capacity_bytes,
            node_expansion_required: cfg.node_expansion_required,
        })
    }

    pub(crate) fn controller_get_volume(
        &self,
        cfg: &MockDriverConfig,
        req: &csi::ControllerGetVolumeRequest,
    ) -> Result<csi::ControllerGetVolumeResponse, Status> {
        require_controller(cfg, ControllerRpc::GetVolume, "ControllerGetVolume")?;
        require_id(&req.volume_id)?;
        let volume = self
            .by_id(&req.volume_id)
            .ok_or_else(|| Self::not_found(&req.volume_id))?;
        Ok(csi::ControllerGetVolumeResponse {
            volume: Some(volume.to_proto()),
            status: Some(csi::controller_get_volume_response::VolumeStatus {
                published_node_ids: volume.published_node_ids(),
                volume_condition: cfg
                    .has_controller(ControllerRpc::VolumeCondition)
                    .then(healthy),
            }),
        })
    }

    pub(crate) fn controller_modify(
        &mut self,
        cfg: &MockDriverConfig,
        req: &csi::ControllerModifyVolumeRequest,
    ) -> Result<csi::ControllerModifyVolumeResponse, Status> {
        require_controller(cfg, ControllerRpc::ModifyVolume, "ControllerModifyVolume")?;
        require_id(&req.volume_id)?;
        if req.mutable_parameters.is_empty() {
            return Err(Status::invalid_argument(
                "mutable_parameters missing in request",
            ));
        }
        let volume = self
            .by_id_mut(&req.volume_id)
            .ok_or_else(|| Self::not_found(&req.volume_id))?;
        volume.mutable_parameters = from_map(&req.mutable_parameters);
        Ok(csi::ControllerModifyVolumeResponse {})
    }

    pub(crate) fn node_stage(
        &mut self,
        cfg: &MockDriverConfig,
        req: &csi::NodeStageVolumeRequest,
    ) -> Result<csi::NodeStageVolumeResponse, Status> {
        require_node(cfg, NodeRpc::StageUnstageVolume, "NodeStageVolume")?;
        require_id(&req.volume_id)?;
        if req.staging_target_path.is_empty() {
            return Err(Status::invalid_argument(
                "Staging Target Path missing in request",
            ));
        }
        let Some(cap) = &req.volume_capability else {
            return Err(Status::invalid_argument(
                "Volume Capability missing in request",
            ));
        };
        check_capabilities(std::slice::from_ref(cap))?;
        let volume = self
            .by_id_mut(&req.volume_id)
            .ok_or_else(|| Self::not_found(&req.volume_id))?;
        volume.staged_paths.insert(req.staging_target_path.clone());
        Ok(csi::NodeStageVolumeResponse {})
    }

    pub(crate) fn node_unstage(
        &mut self,
        cfg: &MockDriverConfig,
        req: &csi::NodeUnstageVolumeRequest,
    ) -> Result<csi::NodeUnstageVolumeResponse, Status> {
        require_node(cfg, NodeRpc::StageUnstageVolume, "NodeUnstageVolume")?;
        require_id(&req.volume_id)?;
        if req.staging_target_path.is_empty() {
            return Err(Status::invalid_argument(
                "Staging Target Path missing in request",
            ));
        }
        if let Some(volume) = self.by_id_mut(&req.volume_id) {
            volume.staged_paths.remove(&req.staging_target_path);
        }
        Ok(csi::NodeUnstageVolumeResponse {})
    }

    pub(crate) fn node_publish(
        &mut self,
        cfg: &MockDriverConfig,
        req: &csi::NodePublishVolumeRequest,
    ) -> Result<csi::NodePublishVolumeResponse, Status> {
        require_id(&req.volume_id)?;
        if req.target_path.is_empty() {
            return Err(Status::invalid_argument("Target path missing in request"));
        }
        let Some(cap) = &req.volume_capability else {
            return Err(Status::invalid_argument(
                "Volume capability missing in request",
            ));
        };
        check_capabilities(std::slice::from_ref(cap))?;
        let stage = cfg.has_node(NodeRpc::StageUnstageVolume);
        let volume = self
            .by_id_mut(&req.volume_id)
            .ok_or_else(|| Self::not_found(&req.volume_id))?;
        // CSI spec: with STAGE_UNSTAGE_VOLUME the CO must stage first; publishing an unstaged
        // volume is FAILED_PRECONDITION.
        if stage && !volume.staged_paths.contains(&req.staging_target_path) {
            return Err(Status::failed_precondition(format!(
                "volume {} is not staged at {:?}",
                req.volume_id, req.staging_target_path
            )));
        }
        volume.published_paths.insert(req.target_path.clone());
        Ok(csi::NodePublishVolumeResponse {})
    }

    pub(crate) fn node_unpublish(
        &mut self,
        req: &csi::NodeUnpublishVolumeRequest,
    ) -> Result<csi::NodeUnpublishVolumeResponse, Status> {
        require_id(&req.volume_id)?;
        if req.target_path.is_empty() {
            return Err(Status::invalid_argument("Target path missing in request"));
        }
        let volume = self
            .by_id_mut(&req.volume_id)
            .ok_or_else(|| Self::not_found(&req.volume_id))?;
        volume.published_paths.remove(&req.target_path);
        Ok(csi::NodeUnpublishVolumeResponse {})
    }

    pub(crate) fn node_volume_stats(
        &self,
        cfg: &MockDriverConfig,
        req: &csi::NodeGetVolumeStatsRequest,
    ) -> Result<csi::NodeGetVolumeStatsResponse, Status> {
        require_node(cfg, NodeRpc::GetVolumeStats, "NodeGetVolumeStats")?;
        require_id(&req.volume_id)?;
        if req.volume_path.is_empty() {
            return Err(Status::invalid_argument("Volume path missing in request"));
        }
        let volume = self
            .by_id(&req.volume_id)
            .ok_or_else(|| Self::not_found(&req.volume_id))?;
        Ok(csi::NodeGetVolumeStatsResponse {
            usage: vec![csi::VolumeUsage {
                available: volume.capacity_bytes,
                total: volume.capacity_bytes,
                used: 0,
                unit: csi::volume_usage::Unit::Bytes.into(),
            }],
            volume_condition: cfg.has_node(NodeRpc::VolumeCondition).then(healthy),
        })
    }

    pub(crate) fn node_expand(
        &self,
        cfg: &MockDriverConfig,
        req: &csi::NodeExpandVolumeRequest,
    ) -> Result<csi::NodeExpandVolumeResponse, Status> {
        require_node(cfg, NodeRpc::ExpandVolume, "NodeExpandVolume")?;
        require_id(&req.volume_id)?;
        if req.volume_path.is_empty() {
            return Err(Status::invalid_argument("Volume path missing in request"));
        }
        let volume = self
            .by_id(&req.volume_id)
            .ok_or_else(|| Self::not_found(&req.volume_id))?;
        // The controller already grew the volume; the node side only reports the size.
        Ok(csi::NodeExpandVolumeResponse {
            capacity_bytes: volume.capacity_bytes,
        })
    }
}

fn healthy() -> csi::VolumeCondition {
    csi::VolumeCondition {
        abnormal: false,
        message: "volume is healthy".to_owned(),
    }
}

#[cfg(test)]
mod tests;
