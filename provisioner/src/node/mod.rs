//! Node deployment (`--node-deployment`, spec §6.2): one csi-provisioner per node next to a
//! node-local driver, each provisioning only the claims of its own node and deleting only the
//! volumes that live there (external-provisioner's `NodeDeployment`, `checkNode`,
//! `becomeOwner`, `checkCapacity` and the node check of `Delete`).
//!
//! At start the driver's `NodeGetInfo` says which topology this node has ([`NodeInfo`]); a
//! Node and a CSINode built from it stand in for the real ones when topology requirements are
//! computed, as upstream does (its provisioning path never watches the real objects in this
//! mode). WaitForFirstConsumer claims are provisioned by the node the scheduler picked. Immediate
//! claims are raced for ([`owner`]): after a jittered, per-claim doubling wait each instance
//! checks GetCapacity and tries to write its own name into `volume.kubernetes.io/selected-node`
//! with a full Update; the resourceVersion makes exactly one of them win, and the winner
//! provisions the claim when the informer brings the updated claim back.
//!
//! The decisions are in [`decide`]; what is left out of upstream is listed in
//! docs/compatibility.md (no worker sleeps while waiting: the wait is a delayed requeue).

pub(crate) mod decide;
pub(crate) mod owner;

use std::collections::BTreeMap;
use std::time::Duration;

use csi_common::connection::Connection;
use csi_common::status::CsiError;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Node, PersistentVolume};
use k8s_openapi::api::storage::v1::{CSINode, CSINodeDriver, CSINodeSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use proto::csi::v1::node_client::NodeClient;
use proto::csi::v1::{GetCapacityRequest, GetCapacityResponse, NodeGetInfoRequest};

use crate::annotations::PROVISIONER_ID_KEY;
use crate::args::NodeDeploymentSettings;
use crate::topology::TopologyView;

/// What `NodeGetInfo` said about this node at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeInfo {
    /// `node_id`: the driver's name for the node (goes into the stand-in CSINode).
    pub(crate) node_id: String,
    /// `accessible_topology.segments`: the node's topology (empty: none).
    pub(crate) topology: BTreeMap<String, String>,
}

/// Calls `NodeGetInfo` once, bounded by `--timeout` (upstream: at start, fatal on error).
pub(crate) async fn node_info(
    connection: &Connection,
    timeout: Duration,
) -> Result<NodeInfo, CsiError> {
    let mut request = tonic::Request::new(NodeGetInfoRequest {});
    request.set_timeout(timeout);
    let response = NodeClient::new(connection.channel())
        .node_get_info(request)
        .await?
        .into_inner();
    Ok(NodeInfo {
        node_id: response.node_id,
        topology: response
            .accessible_topology
            .map(|t| t.segments.into_iter().collect())
            .unwrap_or_default(),
    })
}

/// The driver's `GetCapacity`, used by the capacity pre-check before claiming a claim. A seam
/// of its own so the claim controller's [`crate::csi::VolumeDriver`] stays two calls.
pub(crate) trait CapacitySource: Send + Sync + 'static {
    /// One `GetCapacity` call.
    fn get_capacity(
        &self,
        request: GetCapacityRequest,
    ) -> BoxFuture<'_, Result<GetCapacityResponse, CsiError>>;
}

/// The capacity controller's GetCapacity over the driver connection (bounded by `--timeout`)
/// serves the pre-check too.
impl CapacitySource for crate::capacity::csi::TonicCapacity {
    fn get_capacity(
        &self,
        request: GetCapacityRequest,
    ) -> BoxFuture<'_, Result<GetCapacityResponse, CsiError>> {
        Box::pin(crate::capacity::csi::CapacityDriver::get_capacity(
            self, request,
        ))
    }
}

/// Everything node deployment needs at run time.
pub(crate) struct NodeDeployment {
    /// `NODE_NAME` and the `--node-deployment-*` flags.
    pub(crate) settings: NodeDeploymentSettings,
    /// `NodeGetInfo`.
    pub(crate) info: NodeInfo,
    /// The stand-in Node (labels = the node's topology).
    nodes: Vec<Node>,
    /// The stand-in CSINode (the driver with the topology's keys).
    csinodes: Vec<CSINode>,
    /// GetCapacity for the pre-check.
    capacity: Box<dyn CapacitySource>,
    /// Per-claim waits of the race for Immediate claims.
    races: owner::Races,
}

impl std::fmt::Debug for NodeDeployment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeDeployment")
            .field("settings", &self.settings)
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

impl NodeDeployment {
    /// Node deployment for `driver` on the node `settings` names.
    pub(crate) fn new(
        driver: &str,
        settings: NodeDeploymentSettings,
        info: NodeInfo,
        capacity: Box<dyn CapacitySource>,
    ) -> Self {
        let (node, csinode) = stand_ins(driver, &settings.node_name, &info);
        Self {
            settings,
            info,
            nodes: vec![node],
            csinodes: vec![csinode],
            capacity,
            races: owner::Races::default(),
        }
    }

    /// The topology the provisioning path sees: this node alone.
    pub(crate) fn topology_view(&self) -> TopologyView<'_> {
        TopologyView {
            nodes: &self.nodes,
            csinodes: &self.csinodes,
        }
    }

    /// Forgets the race for a claim that is gone.
    pub(crate) fn claim_gone(&self, uid: &str) {
        self.races.forget(uid);
    }

    /// Whether a volume lives on this node, so this instance may delete it (upstream `Delete`:
    /// otherwise an `IgnoredError`, nothing logged as a failure, no Event); see
    /// [`decide::may_delete`] for PVs without node affinity.
    pub(crate) fn owns_volume(&self, driver: &str, volume: &PersistentVolume) -> bool {
        let spec = volume.spec.as_ref();
        decide::may_delete(
            spec.and_then(|s| s.node_affinity.as_ref()),
            spec.and_then(|s| s.csi.as_ref())
                .and_then(|csi| csi.volume_attributes.as_ref())
                .and_then(|a| a.get(PROVISIONER_ID_KEY))
                .map(String::as_str),
            driver,
            &self.settings.node_name,
            &self.info.topology,
        )
    }
}

/// `<id>-<node>`: upstream appends the node name to the per-process provisioner identity in
/// node deployment, so each node's PVs say which instance made them.
pub(crate) fn node_identity(identity: &str, node_name: &str) -> String {
    format!("{identity}-{node_name}")
}

/// Upstream's pretend cluster: a Node named after this node whose labels are the node's
/// topology, and its CSINode listing the driver with the topology's keys.
fn stand_ins(driver: &str, node_name: &str, info: &NodeInfo) -> (Node, CSINode) {
    let node = Node {
        metadata: ObjectMeta {
            name: Some(node_name.to_owned()),
            labels: Some(info.topology.clone()),
            ..ObjectMeta::default()
        },
        ..Node::default()
    };
    let csinode = CSINode {
        metadata: ObjectMeta {
            name: Some(node_name.to_owned()),
            ..ObjectMeta::default()
        },
        spec: CSINodeSpec {
            drivers: vec![CSINodeDriver {
                name: driver.to_owned(),
                node_id: info.node_id.clone(),
                topology_keys: Some(info.topology.keys().cloned().collect()),
                ..CSINodeDriver::default()
            }],
        },
    };
    (node, csinode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{RequirementInputs, accessibility_requirements};

    struct NoCapacity;

    impl CapacitySource for NoCapacity {
        fn get_capacity(
            &self,
            _: GetCapacityRequest,
        ) -> BoxFuture<'_, Result<GetCapacityResponse, CsiError>> {
            Box::pin(async { Err(CsiError::status(tonic::Code::Unimplemented, "none")) })
        }
    }

    /// node-a with base delay 20s and max 1m.
    pub(super) fn deployment() -> NodeDeployment {
        NodeDeployment::new(
            "d.example.com",
            NodeDeploymentSettings {
                node_name: "node-a".into(),
                immediate_binding: true,
                base_delay: Duration::from_secs(20),
                max_delay: Duration::from_mins(1),
            },
            NodeInfo {
                node_id: "id-a".into(),
                topology: BTreeMap::from([("example.com/node".into(), "a".into())]),
            },
            Box::new(NoCapacity),
        )
    }

    #[test]
    fn the_stand_in_node_makes_requirements_for_this_node_only() {
        let node = deployment();
        let requirement = accessibility_requirements(&RequirementInputs {
            driver_name: "d.example.com",
            pvc_name: "c",
            allowed_topologies: &[],
            selected_node: Some("node-a"),
            strict_topology: false,
            immediate_topology: true,
            view: node.topology_view(),
        })
        .unwrap()
        .unwrap();
        assert_eq!(requirement.requisite.len(), 1);
        assert_eq!(requirement.requisite[0].segments["example.com/node"], "a");
        assert_eq!(requirement.preferred, requirement.requisite);
        let csinode = node.topology_view().csinode("node-a").unwrap();
        assert_eq!(csinode.spec.drivers[0].node_id, "id-a");
    }

    #[test]
    fn the_identity_gets_the_node_name() {
        assert_eq!(
            node_identity("1700000000000-42-d.example.com", "node-a"),
            "1700000000000-42-d.example.com-node-a"
        );
    }
}
