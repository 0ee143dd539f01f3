//! Typed capability sets built from the driver's capability responses.
//!
//! Rust counterpart of csi-lib-utils `rpc.PluginCapabilitySet`, `ControllerCapabilitySet` and
//! `GroupControllerCapabilitySet` (plus a node set, which upstream leaves to each sidecar). The
//! constructors are pure functions over the generated response messages, so sidecars and tests
//! can build sets without a driver; `identity` makes the calls.
//!
//! Entries the sidecars cannot act on are dropped rather than rejected: capabilities whose oneof
//! is unset, the spec's `UNKNOWN` (0) value, and enum numbers newer than the vendored CSI spec
//! (a newer driver may advertise them; the spec tells the CO to ignore what it does not know).

use std::collections::BTreeSet;

use proto::csi::v1::{
    ControllerGetCapabilitiesResponse, GetPluginCapabilitiesResponse,
    GroupControllerGetCapabilitiesResponse, NodeGetCapabilitiesResponse,
    controller_service_capability, group_controller_service_capability, node_service_capability,
    plugin_capability,
};

/// A controller RPC capability (`ControllerServiceCapability.RPC.Type`).
pub type ControllerCapability = controller_service_capability::rpc::Type;
/// A node RPC capability (`NodeServiceCapability.RPC.Type`).
pub type NodeCapability = node_service_capability::rpc::Type;
/// A group controller RPC capability (`GroupControllerServiceCapability.RPC.Type`).
pub type GroupControllerCapability = group_controller_service_capability::rpc::Type;
/// A plugin service capability (`PluginCapability.Service.Type`).
pub type PluginServiceCapability = plugin_capability::service::Type;
/// A plugin volume expansion capability (`PluginCapability.VolumeExpansion.Type`).
pub type VolumeExpansionCapability = plugin_capability::volume_expansion::Type;

/// What `GetPluginCapabilities` reported: the services the plugin offers and how it expands
/// volumes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PluginCapabilities {
    services: BTreeSet<PluginServiceCapability>,
    volume_expansion: BTreeSet<VolumeExpansionCapability>,
}

impl PluginCapabilities {
    /// Builds the set from a `GetPluginCapabilitiesResponse`.
    pub fn from_response(response: &GetPluginCapabilitiesResponse) -> Self {
        let mut caps = Self::default();
        for capability in &response.capabilities {
            match &capability.r#type {
                Some(plugin_capability::Type::Service(service)) => {
                    if let Some(t) = known(service.r#type, PluginServiceCapability::Unknown) {
                        caps.services.insert(t);
                    }
                }
                Some(plugin_capability::Type::VolumeExpansion(expansion)) => {
                    if let Some(t) = known(expansion.r#type, VolumeExpansionCapability::Unknown) {
                        caps.volume_expansion.insert(t);
                    }
                }
                None => {}
            }
        }
        caps
    }

    /// Builds a set from lists of known values (for tests and fakes).
    pub fn from_values(
        services: impl IntoIterator<Item = PluginServiceCapability>,
        volume_expansion: impl IntoIterator<Item = VolumeExpansionCapability>,
    ) -> Self {
        Self {
            services: services.into_iter().collect(),
            volume_expansion: volume_expansion.into_iter().collect(),
        }
    }

    /// Whether the plugin reported this service capability.
    pub fn contains(&self, service: PluginServiceCapability) -> bool {
        self.services.contains(&service)
    }

    /// Whether the plugin reported this volume expansion capability.
    pub fn contains_volume_expansion(&self, expansion: VolumeExpansionCapability) -> bool {
        self.volume_expansion.contains(&expansion)
    }

    /// The reported service capabilities, in enum order.
    pub fn services(&self) -> impl Iterator<Item = PluginServiceCapability> + '_ {
        self.services.iter().copied()
    }

    /// The reported volume expansion capabilities, in enum order.
    pub fn volume_expansion(&self) -> impl Iterator<Item = VolumeExpansionCapability> + '_ {
        self.volume_expansion.iter().copied()
    }

    /// `CONTROLLER_SERVICE`: the plugin serves the Controller service (controller sidecars
    /// refuse to run without it).
    pub fn has_controller_service(&self) -> bool {
        self.contains(PluginServiceCapability::ControllerService)
    }

    /// `VOLUME_ACCESSIBILITY_CONSTRAINTS`: volumes may not be equally accessible from all
    /// nodes, so the provisioner sends topology requirements.
    pub fn has_volume_accessibility_constraints(&self) -> bool {
        self.contains(PluginServiceCapability::VolumeAccessibilityConstraints)
    }

    /// `GROUP_CONTROLLER_SERVICE`: the plugin serves the GroupController service.
    pub fn has_group_controller_service(&self) -> bool {
        self.contains(PluginServiceCapability::GroupControllerService)
    }

    /// `VolumeExpansion.ONLINE`: volumes can be expanded while published.
    pub fn has_online_expansion(&self) -> bool {
        self.contains_volume_expansion(VolumeExpansionCapability::Online)
    }

    /// `VolumeExpansion.OFFLINE`: volumes can only be expanded while not published.
    pub fn has_offline_expansion(&self) -> bool {
        self.contains_volume_expansion(VolumeExpansionCapability::Offline)
    }
}

/// What `ControllerGetCapabilities` reported.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ControllerCapabilities {
    rpcs: BTreeSet<ControllerCapability>,
}

impl ControllerCapabilities {
    /// Builds the set from a `ControllerGetCapabilitiesResponse`.
    pub fn from_response(response: &ControllerGetCapabilitiesResponse) -> Self {
        let rpcs = response
            .capabilities
            .iter()
            .filter_map(|capability| match &capability.r#type {
                Some(controller_service_capability::Type::Rpc(rpc)) => {
                    known(rpc.r#type, ControllerCapability::Unknown)
                }
                None => None,
            })
            .collect();
        Self { rpcs }
    }

    /// Whether the driver reported this capability.
    pub fn contains(&self, capability: ControllerCapability) -> bool {
        self.rpcs.contains(&capability)
    }

    /// The reported capabilities, in enum order.
    pub fn iter(&self) -> impl Iterator<Item = ControllerCapability> + '_ {
        self.rpcs.iter().copied()
    }

    /// `CREATE_DELETE_VOLUME` (provisioner).
    pub fn has_create_delete_volume(&self) -> bool {
        self.contains(ControllerCapability::CreateDeleteVolume)
    }

    /// `PUBLISH_UNPUBLISH_VOLUME` (attacher; without it the attacher marks attachments attached
    /// without calling the driver).
    pub fn has_publish_unpublish_volume(&self) -> bool {
        self.contains(ControllerCapability::PublishUnpublishVolume)
    }

    /// `LIST_VOLUMES` (attacher's reconciliation with ListVolumes).
    pub fn has_list_volumes(&self) -> bool {
        self.contains(ControllerCapability::ListVolumes)
    }

    /// `LIST_VOLUMES_PUBLISHED_NODES` (attacher; needed together with `LIST_VOLUMES`).
    pub fn has_list_volumes_published_nodes(&self) -> bool {
        self.contains(ControllerCapability::ListVolumesPublishedNodes)
    }

    /// `GET_CAPACITY` (provisioner's storage capacity tracking).
    pub fn has_get_capacity(&self) -> bool {
        self.contains(ControllerCapability::GetCapacity)
    }

    /// `CREATE_DELETE_SNAPSHOT` (provisioner: volumes from snapshots).
    pub fn has_create_delete_snapshot(&self) -> bool {
        self.contains(ControllerCapability::CreateDeleteSnapshot)
    }

    /// `CLONE_VOLUME` (provisioner: volumes from PVCs).
    pub fn has_clone_volume(&self) -> bool {
        self.contains(ControllerCapability::CloneVolume)
    }

    /// `PUBLISH_READONLY` (attacher passes `readonly` to ControllerPublishVolume).
    pub fn has_publish_readonly(&self) -> bool {
        self.contains(ControllerCapability::PublishReadonly)
    }

    /// `EXPAND_VOLUME` (resizer).
    pub fn has_expand_volume(&self) -> bool {
        self.contains(ControllerCapability::ExpandVolume)
    }

    /// `SINGLE_NODE_MULTI_WRITER`: the driver understands the single-node access modes, so
    /// `ReadWriteOnce` maps to SINGLE_NODE_MULTI_WRITER and `ReadWriteOncePod` to
    /// SINGLE_NODE_SINGLE_WRITER (csi-lib-utils `accessmodes`).
    pub fn has_single_node_multi_writer(&self) -> bool {
        self.contains(ControllerCapability::SingleNodeMultiWriter)
    }

    /// `MODIFY_VOLUME` (resizer's VolumeAttributesClass support).
    pub fn has_modify_volume(&self) -> bool {
        self.contains(ControllerCapability::ModifyVolume)
    }
}

/// What `NodeGetCapabilities` reported.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeCapabilities {
    rpcs: BTreeSet<NodeCapability>,
}

impl NodeCapabilities {
    /// Builds the set from a `NodeGetCapabilitiesResponse`.
    pub fn from_response(response: &NodeGetCapabilitiesResponse) -> Self {
        let rpcs = response
            .capabilities
            .iter()
            .filter_map(|capability| match &capability.r#type {
                Some(node_service_capability::Type::Rpc(rpc)) => {
                    known(rpc.r#type, NodeCapability::Unknown)
                }
                None => None,
            })
            .collect();
        Self { rpcs }
    }

    /// Whether the driver reported this capability.
    pub fn contains(&self, capability: NodeCapability) -> bool {
        self.rpcs.contains(&capability)
    }

    /// The reported capabilities, in enum order.
    pub fn iter(&self) -> impl Iterator<Item = NodeCapability> + '_ {
        self.rpcs.iter().copied()
    }

    /// `EXPAND_VOLUME`: the node plugin expands file systems (NodeExpandVolume).
    pub fn has_expand_volume(&self) -> bool {
        self.contains(NodeCapability::ExpandVolume)
    }

    /// `SINGLE_NODE_MULTI_WRITER` on the node service.
    pub fn has_single_node_multi_writer(&self) -> bool {
        self.contains(NodeCapability::SingleNodeMultiWriter)
    }
}

/// What `GroupControllerGetCapabilities` reported.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupControllerCapabilities {
    rpcs: BTreeSet<GroupControllerCapability>,
}

impl GroupControllerCapabilities {
    /// Builds the set from a `GroupControllerGetCapabilitiesResponse`.
    pub fn from_response(response: &GroupControllerGetCapabilitiesResponse) -> Self {
        let rpcs = response
            .capabilities
            .iter()
            .filter_map(|capability| match &capability.r#type {
                Some(group_controller_service_capability::Type::Rpc(rpc)) => {
                    known(rpc.r#type, GroupControllerCapability::Unknown)
                }
                None => None,
            })
            .collect();
        Self { rpcs }
    }

    /// Whether the driver reported this capability.
    pub fn contains(&self, capability: GroupControllerCapability) -> bool {
        self.rpcs.contains(&capability)
    }

    /// The reported capabilities, in enum order.
    pub fn iter(&self) -> impl Iterator<Item = GroupControllerCapability> + '_ {
        self.rpcs.iter().copied()
    }
}

/// Converts a wire enum number, dropping numbers this spec version does not know and the
/// `UNKNOWN` placeholder.
fn known<T>(value: i32, unknown: T) -> Option<T>
where
    T: TryFrom<i32> + PartialEq + Copy,
{
    T::try_from(value).ok().filter(|t| *t != unknown)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::csi::v1::{
        ControllerServiceCapability, GroupControllerServiceCapability, NodeServiceCapability,
        PluginCapability,
    };

    fn controller_rpc(value: i32) -> ControllerServiceCapability {
        ControllerServiceCapability {
            r#type: Some(controller_service_capability::Type::Rpc(
                controller_service_capability::Rpc { r#type: value },
            )),
        }
    }

    fn plugin_service(value: i32) -> PluginCapability {
        PluginCapability {
            r#type: Some(plugin_capability::Type::Service(
                plugin_capability::Service { r#type: value },
            )),
        }
    }

    fn plugin_expansion(value: i32) -> PluginCapability {
        PluginCapability {
            r#type: Some(plugin_capability::Type::VolumeExpansion(
                plugin_capability::VolumeExpansion { r#type: value },
            )),
        }
    }

    #[test]
    fn controller_capabilities_keep_known_values_and_drop_the_rest() {
        struct Case {
            name: &'static str,
            wire: Vec<ControllerServiceCapability>,
            want: Vec<ControllerCapability>,
        }
        let cases = [
            Case {
                name: "empty response",
                wire: vec![],
                want: vec![],
            },
            Case {
                name: "known values, duplicates collapse",
                wire: vec![
                    controller_rpc(ControllerCapability::PublishUnpublishVolume as i32),
                    controller_rpc(ControllerCapability::CreateDeleteVolume as i32),
                    controller_rpc(ControllerCapability::CreateDeleteVolume as i32),
                ],
                want: vec![
                    ControllerCapability::CreateDeleteVolume,
                    ControllerCapability::PublishUnpublishVolume,
                ],
            },
            Case {
                name: "UNKNOWN, unset oneof and future numbers are ignored",
                wire: vec![
                    controller_rpc(0),
                    ControllerServiceCapability { r#type: None },
                    controller_rpc(9999),
                    controller_rpc(-1),
                    controller_rpc(ControllerCapability::ExpandVolume as i32),
                ],
                want: vec![ControllerCapability::ExpandVolume],
            },
        ];
        for case in cases {
            let caps = ControllerCapabilities::from_response(&ControllerGetCapabilitiesResponse {
                capabilities: case.wire,
            });
            assert_eq!(caps.iter().collect::<Vec<_>>(), case.want, "{}", case.name);
        }
    }

    #[test]
    fn controller_helpers_answer_for_their_capability_only() {
        type Helper = fn(&ControllerCapabilities) -> bool;
        let all = [
            ControllerCapability::CreateDeleteVolume,
            ControllerCapability::PublishUnpublishVolume,
            ControllerCapability::ListVolumes,
            ControllerCapability::GetCapacity,
            ControllerCapability::CreateDeleteSnapshot,
            ControllerCapability::CloneVolume,
            ControllerCapability::PublishReadonly,
            ControllerCapability::ExpandVolume,
            ControllerCapability::ListVolumesPublishedNodes,
            ControllerCapability::SingleNodeMultiWriter,
            ControllerCapability::ModifyVolume,
        ];
        let helpers: [(ControllerCapability, Helper); 11] = [
            (
                ControllerCapability::CreateDeleteVolume,
                ControllerCapabilities::has_create_delete_volume,
            ),
            (
                ControllerCapability::PublishUnpublishVolume,
                ControllerCapabilities::has_publish_unpublish_volume,
            ),
            (
                ControllerCapability::ListVolumes,
                ControllerCapabilities::has_list_volumes,
            ),
            (
                ControllerCapability::GetCapacity,
                ControllerCapabilities::has_get_capacity,
            ),
            (
                ControllerCapability::CreateDeleteSnapshot,
                ControllerCapabilities::has_create_delete_snapshot,
            ),
            (
                ControllerCapability::CloneVolume,
                ControllerCapabilities::has_clone_volume,
            ),
            (
                ControllerCapability::PublishReadonly,
                ControllerCapabilities::has_publish_readonly,
            ),
            (
                ControllerCapability::ExpandVolume,
                ControllerCapabilities::has_expand_volume,
            ),
            (
                ControllerCapability::ListVolumesPublishedNodes,
                ControllerCapabilities::has_list_volumes_published_nodes,
            ),
            (
                ControllerCapability::SingleNodeMultiWriter,
                ControllerCapabilities::has_single_node_multi_writer,
            ),
            (
                ControllerCapability::ModifyVolume,
                ControllerCapabilities::has_modify_volume,
            ),
        ];
        for reported in all {
            let caps = ControllerCapabilities::from_response(&ControllerGetCapabilitiesResponse {
                capabilities: vec![controller_rpc(reported as i32)],
            });
            for (capability, helper) in helpers {
                assert_eq!(
                    helper(&caps),
                    capability == reported,
                    "helper for {capability:?} with only {reported:?} reported"
                );
            }
        }
    }

    #[test]
    fn plugin_capabilities_split_services_and_volume_expansion() {
        struct Case {
            name: &'static str,
            wire: Vec<PluginCapability>,
            services: Vec<PluginServiceCapability>,
            expansion: Vec<VolumeExpansionCapability>,
        }
        let cases = [
            Case {
                name: "empty",
                wire: vec![],
                services: vec![],
                expansion: vec![],
            },
            Case {
                name: "controller service with topology and online expansion",
                wire: vec![
                    plugin_service(PluginServiceCapability::VolumeAccessibilityConstraints as i32),
                    plugin_service(PluginServiceCapability::ControllerService as i32),
                    plugin_expansion(VolumeExpansionCapability::Online as i32),
                ],
                services: vec![
                    PluginServiceCapability::ControllerService,
                    PluginServiceCapability::VolumeAccessibilityConstraints,
                ],
                expansion: vec![VolumeExpansionCapability::Online],
            },
            Case {
                name: "unknown and unset entries are ignored",
                wire: vec![
                    plugin_service(0),
                    plugin_service(77),
                    plugin_expansion(0),
                    plugin_expansion(42),
                    PluginCapability { r#type: None },
                    plugin_expansion(VolumeExpansionCapability::Offline as i32),
                ],
                services: vec![],
                expansion: vec![VolumeExpansionCapability::Offline],
            },
        ];
        for case in cases {
            let caps = PluginCapabilities::from_response(&GetPluginCapabilitiesResponse {
                capabilities: case.wire,
            });
            assert_eq!(
                caps.services().collect::<Vec<_>>(),
                case.services,
                "{}",
                case.name
            );
            assert_eq!(
                caps.volume_expansion().collect::<Vec<_>>(),
                case.expansion,
                "{}",
                case.name
            );
        }
    }

    #[test]
    fn plugin_helpers_match_the_reported_values() {
        let caps = PluginCapabilities::from_values(
            [PluginServiceCapability::ControllerService],
            [VolumeExpansionCapability::Offline],
        );
        assert!(caps.has_controller_service());
        assert!(!caps.has_volume_accessibility_constraints());
        assert!(!caps.has_group_controller_service());
        assert!(caps.has_offline_expansion());
        assert!(!caps.has_online_expansion());

        let caps = PluginCapabilities::from_values(
            [
                PluginServiceCapability::VolumeAccessibilityConstraints,
                PluginServiceCapability::GroupControllerService,
            ],
            [VolumeExpansionCapability::Online],
        );
        assert!(!caps.has_controller_service());
        assert!(caps.has_volume_accessibility_constraints());
        assert!(caps.has_group_controller_service());
        assert!(caps.has_online_expansion());
        assert!(!caps.has_offline_expansion());
    }

    #[test]
    fn node_capabilities_ignore_unknown_numbers() {
        let rpc = |value| NodeServiceCapability {
            r#type: Some(node_service_capability::Type::Rpc(
                node_service_capability::Rpc { r#type: value },
            )),
        };
        let caps = NodeCapabilities::from_response(&NodeGetCapabilitiesResponse {
            capabilities: vec![
                rpc(NodeCapability::StageUnstageVolume as i32),
                rpc(NodeCapability::ExpandVolume as i32),
                rpc(0),
                rpc(1234),
                NodeServiceCapability { r#type: None },
            ],
        });
        assert_eq!(
            caps.iter().collect::<Vec<_>>(),
            vec![
                NodeCapability::StageUnstageVolume,
                NodeCapability::ExpandVolume
            ]
        );
        assert!(caps.has_expand_volume());
        assert!(!caps.has_single_node_multi_writer());
    }

    #[test]
    fn group_controller_capabilities_ignore_unknown_numbers() {
        let rpc = |value| GroupControllerServiceCapability {
            r#type: Some(group_controller_service_capability::Type::Rpc(
                group_controller_service_capability::Rpc { r#type: value },
            )),
        };
        let caps =
            GroupControllerCapabilities::from_response(&GroupControllerGetCapabilitiesResponse {
                capabilities: vec![
                    rpc(GroupControllerCapability::CreateDeleteGetVolumeGroupSnapshot as i32),
                    rpc(0),
                    rpc(555),
                ],
            });
        assert_eq!(
            caps.iter().collect::<Vec<_>>(),
            vec![GroupControllerCapability::CreateDeleteGetVolumeGroupSnapshot]
        );
        assert!(caps.contains(GroupControllerCapability::CreateDeleteGetVolumeGroupSnapshot));
    }
}
