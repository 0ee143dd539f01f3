//! How the mock driver presents itself: name, capabilities, node, topology and capacity limits.
//!
//! The defaults describe a driver shaped like csi-driver-host-path v1.18 (the driver the golden
//! fixtures were captured from): controller service with attach, expansion, capacity and listing;
//! one node with a node-scoped topology segment; a 1 TiB maximum volume size.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

pub use proto::csi::v1::controller_service_capability::rpc::Type as ControllerRpc;
pub use proto::csi::v1::node_service_capability::rpc::Type as NodeRpc;
pub use proto::csi::v1::plugin_capability::service::Type as PluginService;
pub use proto::csi::v1::plugin_capability::volume_expansion::Type as VolumeExpansion;

use super::fault::Fault;

/// Driver name reported by `GetPluginInfo` unless configured otherwise.
pub const DEFAULT_DRIVER_NAME: &str = "mock.csi.k8s.io";
/// Node id reported by `NodeGetInfo` unless configured otherwise.
pub const DEFAULT_NODE_ID: &str = "mock-node";
/// Topology key of the default node-scoped segment (value: the node id).
pub const DEFAULT_TOPOLOGY_KEY: &str = "topology.mock.csi.k8s.io/node";

const GI: i64 = 1 << 30;
const TI: i64 = 1 << 40;

/// One entry of `GetPluginCapabilitiesResponse.capabilities`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PluginCapability {
    /// A `PluginCapability.Service` entry (CONTROLLER_SERVICE, VOLUME_ACCESSIBILITY_CONSTRAINTS, ...).
    Service(PluginService),
    /// A `PluginCapability.VolumeExpansion` entry (ONLINE or OFFLINE).
    VolumeExpansion(VolumeExpansion),
}

impl fmt::Display for PluginCapability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PluginCapability::Service(s) => f.write_str(s.as_str_name()),
            PluginCapability::VolumeExpansion(e) => f.write_str(e.as_str_name()),
        }
    }
}

/// A capability name that the CSI spec does not define.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} capability {name:?}")]
pub struct UnknownCapability {
    /// Which capability list the name was meant for (`plugin`, `controller`, `node`).
    pub kind: &'static str,
    /// The name as given.
    pub name: String,
}

fn spec_name(s: &str) -> String {
    s.trim().to_ascii_uppercase().replace('-', "_")
}

impl FromStr for PluginCapability {
    type Err = UnknownCapability;

    /// Parses a spec enum name: a service type (`CONTROLLER_SERVICE`) or an expansion type
    /// (`ONLINE`, `OFFLINE`, also accepted as `ONLINE_EXPANSION`/`VOLUME_EXPANSION_ONLINE`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let name = spec_name(s);
        if let Some(t) =
            PluginService::from_str_name(&name).filter(|t| *t != PluginService::Unknown)
        {
            return Ok(PluginCapability::Service(t));
        }
        let expansion = name
            .trim_start_matches("VOLUME_EXPANSION_")
            .trim_end_matches("_EXPANSION");
        VolumeExpansion::from_str_name(expansion)
            .filter(|t| *t != VolumeExpansion::Unknown)
            .map(PluginCapability::VolumeExpansion)
            .ok_or_else(|| UnknownCapability {
                kind: "plugin",
                name: s.to_owned(),
            })
    }
}

/// Parses a controller RPC capability by its spec name (`CREATE_DELETE_VOLUME`, any case).
pub fn parse_controller_rpc(s: &str) -> Result<ControllerRpc, UnknownCapability> {
    ControllerRpc::from_str_name(&spec_name(s))
        .filter(|t| *t != ControllerRpc::Unknown)
        .ok_or_else(|| UnknownCapability {
            kind: "controller",
            name: s.to_owned(),
        })
}

/// Parses a node RPC capability by its spec name (`STAGE_UNSTAGE_VOLUME`, any case).
pub fn parse_node_rpc(s: &str) -> Result<NodeRpc, UnknownCapability> {
    NodeRpc::from_str_name(&spec_name(s))
        .filter(|t| *t != NodeRpc::Unknown)
        .ok_or_else(|| UnknownCapability {
            kind: "node",
            name: s.to_owned(),
        })
}

/// Everything that shapes the mock driver's answers. Start from [`Default`] and override fields.
///
/// Capabilities gate behaviour the way real drivers do: an RPC whose controller or node
/// capability is missing answers `Unimplemented` (e.g. `ControllerPublishVolume` without
/// `PUBLISH_UNPUBLISH_VOLUME`), and created volumes carry `accessible_topology` only while the
/// plugin advertises `VOLUME_ACCESSIBILITY_CONSTRAINTS` (CSI spec, `Volume.accessible_topology`).
#[derive(Debug, Clone)]
pub struct MockDriverConfig {
    /// `GetPluginInfoResponse.name`.
    pub driver_name: String,
    /// `GetPluginInfoResponse.vendor_version`.
    pub vendor_version: String,
    /// `GetPluginInfoResponse.manifest`.
    pub manifest: BTreeMap<String, String>,
    /// `GetPluginCapabilitiesResponse.capabilities`, in this order.
    pub plugin_capabilities: Vec<PluginCapability>,
    /// `ControllerGetCapabilitiesResponse.capabilities`, in this order; also gates controller RPCs.
    pub controller_capabilities: Vec<ControllerRpc>,
    /// `NodeGetCapabilitiesResponse.capabilities`, in this order; also gates node RPCs.
    pub node_capabilities: Vec<NodeRpc>,
    /// `NodeGetInfoResponse.node_id`; `ControllerPublishVolume` accepts this node.
    pub node_id: String,
    /// More node ids that `ControllerPublishVolume` accepts (a multi-node cluster behind one
    /// controller); any other node id is `NotFound`, as in csi-driver-host-path.
    pub extra_node_ids: Vec<String>,
    /// `NodeGetInfoResponse.max_volumes_per_node`; when positive, publishing more volumes than
    /// this to one node is `ResourceExhausted`. 0 means no limit.
    pub max_volumes_per_node: i64,
    /// Topology segments of the node (`NodeGetInfoResponse.accessible_topology`) and of every
    /// created volume. Empty means no topology.
    pub topology: BTreeMap<String, String>,
    /// Total storage; creating or expanding beyond what is left is `ResourceExhausted`.
    /// `None` means unlimited (then `GetCapacity` reports `max_volume_size`, like
    /// csi-driver-host-path without `--capacity`).
    pub total_capacity: Option<i64>,
    /// csi-driver-host-path's `--capacity <kind>=<quantity>`: when not empty, GetCapacity reads
    /// the `kind` parameter (the StorageClass's, which the provisioner passes as is) and
    /// answers that kind's size minus the sizes of the volumes created with the same `kind`
    /// parameter; a kind that is missing or not listed has no capacity (0), as in host-path.
    /// Topology is still honoured: a foreign segment has 0.
    pub capacity_by_kind: BTreeMap<String, i64>,
    /// Fault injection for a broken driver: GetCapacity answers exactly this
    /// `(available_capacity, maximum_volume_size)`, negative values included, instead of
    /// computing them. No real driver should; consumers must not publish such answers.
    pub capacity_answer: Option<(i64, Option<i64>)>,
    /// Largest volume; a bigger request is `OutOfRange` "Requested capacity N exceeds maximum
    /// allowed M", csi-driver-host-path's answer.
    pub max_volume_size: i64,
    /// Size of a volume created without `capacity_range` (the spec lets the plugin choose).
    pub default_volume_size: i64,
    /// Allocation unit: requested sizes are rounded up to a multiple of this (1 = exact).
    pub allocation_unit: i64,
    /// `ControllerExpandVolumeResponse.node_expansion_required` (csi-driver-host-path: true).
    pub node_expansion_required: bool,
    /// `ControllerPublishVolumeResponse.publish_context` (csi-driver-host-path: empty).
    pub publish_context: BTreeMap<String, String>,
    /// Initial `ProbeResponse.ready`: `None` leaves the field out (csi-driver-host-path's answer,
    /// which callers must read as ready), `Some(false)` reports "still initializing".
    pub probe_ready: Option<bool>,
    /// Log every call at `info` (otherwise at `debug`).
    pub log_calls: bool,
    /// Faults active from the first call on (more can be injected through the handle).
    pub faults: Vec<Fault>,
}

impl Default for MockDriverConfig {
    fn default() -> Self {
        MockDriverConfig {
            driver_name: DEFAULT_DRIVER_NAME.to_owned(),
            vendor_version: env!("CARGO_PKG_VERSION").to_owned(),
            manifest: BTreeMap::new(),
            plugin_capabilities: vec![
                PluginCapability::Service(PluginService::ControllerService),
                PluginCapability::Service(PluginService::VolumeAccessibilityConstraints),
                PluginCapability::VolumeExpansion(VolumeExpansion::Online),
            ],
            controller_capabilities: vec![
                ControllerRpc::CreateDeleteVolume,
                ControllerRpc::PublishUnpublishVolume,
                ControllerRpc::ListVolumes,
                ControllerRpc::GetCapacity,
                ControllerRpc::ExpandVolume,
                ControllerRpc::SingleNodeMultiWriter,
            ],
            node_capabilities: vec![
                NodeRpc::StageUnstageVolume,
                NodeRpc::ExpandVolume,
                NodeRpc::SingleNodeMultiWriter,
            ],
            node_id: DEFAULT_NODE_ID.to_owned(),
            extra_node_ids: Vec::new(),
            max_volumes_per_node: 0,
            topology: BTreeMap::from([(
                DEFAULT_TOPOLOGY_KEY.to_owned(),
                DEFAULT_NODE_ID.to_owned(),
            )]),
            total_capacity: None,
            capacity_by_kind: BTreeMap::new(),
            capacity_answer: None,
            max_volume_size: TI,
            default_volume_size: GI,
            allocation_unit: 1,
            node_expansion_required: true,
            publish_context: BTreeMap::new(),
            probe_ready: None,
            log_calls: false,
            faults: Vec::new(),
        }
    }
}

impl MockDriverConfig {
    /// Whether `GetPluginCapabilities` lists `cap`.
    pub fn has_plugin(&self, cap: PluginCapability) -> bool {
        self.plugin_capabilities.contains(&cap)
    }

    /// Whether `ControllerGetCapabilities` lists `cap`.
    pub fn has_controller(&self, cap: ControllerRpc) -> bool {
        self.controller_capabilities.contains(&cap)
    }

    /// Whether `NodeGetCapabilities` lists `cap`.
    pub fn has_node(&self, cap: NodeRpc) -> bool {
        self.node_capabilities.contains(&cap)
    }

    /// Whether `ControllerPublishVolume` knows `node_id`.
    pub fn knows_node(&self, node_id: &str) -> bool {
        self.node_id == node_id || self.extra_node_ids.iter().any(|n| n == node_id)
    }

    /// Checks the numbers that the volume arithmetic divides by or compares against.
    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.allocation_unit <= 0 {
            return Err(format!(
                "allocation_unit must be positive, got {}",
                self.allocation_unit
            ));
        }
        if self.max_volume_size < 0 || self.default_volume_size < 0 {
            return Err("volume sizes must not be negative".to_owned());
        }
        if self.total_capacity.is_some_and(|c| c < 0) {
            return Err("total_capacity must not be negative".to_owned());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_capabilities_parse_from_service_and_expansion_names() {
        assert_eq!(
            "CONTROLLER_SERVICE".parse(),
            Ok(PluginCapability::Service(PluginService::ControllerService))
        );
        assert_eq!(
            "volume-accessibility-constraints".parse(),
            Ok(PluginCapability::Service(
                PluginService::VolumeAccessibilityConstraints
            ))
        );
        for name in ["ONLINE", "online_expansion", "VOLUME_EXPANSION_ONLINE"] {
            assert_eq!(
                name.parse(),
                Ok(PluginCapability::VolumeExpansion(VolumeExpansion::Online)),
                "{name}"
            );
        }
        assert!("UNKNOWN".parse::<PluginCapability>().is_err());
        assert!("FLYING".parse::<PluginCapability>().is_err());
    }

    #[test]
    fn controller_and_node_capabilities_parse_from_spec_names() {
        assert_eq!(
            parse_controller_rpc("expand_volume"),
            Ok(ControllerRpc::ExpandVolume)
        );
        assert_eq!(
            parse_controller_rpc("PUBLISH_UNPUBLISH_VOLUME"),
            Ok(ControllerRpc::PublishUnpublishVolume)
        );
        assert_eq!(
            parse_node_rpc("STAGE_UNSTAGE_VOLUME"),
            Ok(NodeRpc::StageUnstageVolume)
        );
        assert!(parse_node_rpc("CREATE_DELETE_VOLUME").is_err());
        assert!(parse_controller_rpc("UNKNOWN").is_err());
    }

    #[test]
    fn default_config_is_valid_and_knows_only_its_own_node() {
        let cfg = MockDriverConfig::default();
        assert_eq!(cfg.validate(), Ok(()));
        assert!(cfg.knows_node(DEFAULT_NODE_ID));
        assert!(!cfg.knows_node("other"));
        let bad = MockDriverConfig {
            allocation_unit: 0,
            ..MockDriverConfig::default()
        };
        assert!(bad.validate().is_err());
    }
}
