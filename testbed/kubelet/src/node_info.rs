//! What kubelet's CSI plugin handler writes to the API server when a driver registers or goes
//! away (`nodeinfomanager.InstallCSIDriver` / `UninstallCSIDriver`).
//!
//! On registration, after `NodeGetInfo`:
//! * the Node gets the annotation `csi.volume.kubernetes.io/nodeid`, a JSON map of driver name
//!   to node id (fixture `objects/node.json`: `{"hostpath.csi.k8s.io":"ref-node"}`), and one
//!   label per topology segment (a different existing value is a collision error);
//! * the `CSINode` named like the node (created on first use, owned by the Node with
//!   `controller: true`, fixture `objects/csinode.json`) lists the driver with its `nodeID`, its
//!   sorted `topologyKeys` and `allocatable.count` when `max_volumes_per_node` is positive.
//!
//! On de-registration the driver leaves `CSINode.spec.drivers` and the annotation map (the
//! annotation goes when the map is empty); topology labels stay, as in kubelet.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::{CSINode, CSINodeDriver, CSINodeSpec, VolumeNodeResources};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Api;
use kube::api::PostParams;

use super::NodeInfo;

/// The Node annotation mapping driver names to node ids.
pub const NODE_ID_ANNOTATION: &str = "csi.volume.kubernetes.io/nodeid";

/// How often an update that lost an optimistic-concurrency race (409) is retried.
const CONFLICT_RETRIES: usize = 5;

/// Where the fake kubelet writes: a client and the name of "its" Node.
#[derive(Clone)]
pub struct NodeApi {
    /// A client of the API server (e.g. `testbed_cluster::apiserver::ApiServer::client()`).
    pub client: kube::Client,
    /// The node this kubelet runs on; the Node object must exist.
    pub node_name: String,
}

impl std::fmt::Debug for NodeApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeApi")
            .field("node_name", &self.node_name)
            .finish_non_exhaustive()
    }
}

fn is_conflict(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 409)
}

fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 404)
}

/// Records `driver` on the Node and in the CSINode.
///
/// # Errors
/// The text kubelet would report in `NotifyRegistrationStatus`.
pub(super) async fn install(api: &NodeApi, driver: &str, info: &NodeInfo) -> Result<(), String> {
    if info.node_id.is_empty() {
        return Err("error adding CSI driver node info: driverNodeID must not be empty".to_owned());
    }
    let node = update_node(api, |node| {
        let meta = &mut node.metadata;
        let mut ids = node_ids(meta)?;
        ids.insert(driver.to_owned(), info.node_id.clone());
        set_node_ids(meta, &ids)?;
        let labels = meta.labels.get_or_insert_with(BTreeMap::new);
        for (key, value) in &info.topology {
            match labels.get(key) {
                Some(existing) if existing != value => {
                    return Err(format!(
                        "detected topology value collision: driver reported {key:?}:{value:?} but existing label is {key:?}:{existing:?}"
                    ));
                }
                _ => {
                    labels.insert(key.clone(), value.clone());
                }
            }
        }
        Ok(())
    })
    .await?;

    let entry = CSINodeDriver {
        name: driver.to_owned(),
        node_id: info.node_id.clone(),
        topology_keys: Some(info.topology.keys().cloned().collect()),
        allocatable: (info.max_volumes_per_node > 0).then(|| VolumeNodeResources {
            count: i32::try_from(info.max_volumes_per_node).ok(),
        }),
    };
    update_csinode(api, &node, |drivers| {
        drivers.retain(|d| d.name != driver);
        drivers.push(entry.clone());
    })
    .await
}

/// Removes `driver` from the CSINode and the Node annotation.
///
/// # Errors
/// When the API server refuses the updates.
pub(super) async fn uninstall(api: &NodeApi, driver: &str) -> Result<(), String> {
    let csinodes: Api<CSINode> = Api::all(api.client.clone());
    for _ in 0..CONFLICT_RETRIES {
        let mut csinode = match csinodes.get(&api.node_name).await {
            Ok(csinode) => csinode,
            Err(err) if is_not_found(&err) => break,
            Err(err) => return Err(format!("error getting CSINode: {err}")),
        };
        let before = csinode.spec.drivers.len();
        csinode.spec.drivers.retain(|d| d.name != driver);
        if csinode.spec.drivers.len() == before {
            break;
        }
        match csinodes
            .replace(&api.node_name, &PostParams::default(), &csinode)
            .await
        {
            Ok(_) => break,
            Err(err) if is_conflict(&err) => {}
            Err(err) => return Err(format!("error updating CSINode: {err}")),
        }
    }
    update_node(api, |node| {
        let meta = &mut node.metadata;
        let mut ids = node_ids(meta)?;
        ids.remove(driver);
        set_node_ids(meta, &ids)
    })
    .await
    .map(drop)
}

fn node_ids(meta: &ObjectMeta) -> Result<BTreeMap<String, String>, String> {
    match meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(NODE_ID_ANNOTATION))
    {
        None => Ok(BTreeMap::new()),
        Some(text) => serde_json::from_str(text).map_err(|err| {
            format!("failed to unmarshal annotation {NODE_ID_ANNOTATION:?} value {text:?}: {err}")
        }),
    }
}

fn set_node_ids(meta: &mut ObjectMeta, ids: &BTreeMap<String, String>) -> Result<(), String> {
    let annotations = meta.annotations.get_or_insert_with(BTreeMap::new);
    if ids.is_empty() {
        annotations.remove(NODE_ID_ANNOTATION);
    } else {
        let text = serde_json::to_string(ids).map_err(|err| err.to_string())?;
        annotations.insert(NODE_ID_ANNOTATION.to_owned(), text);
    }
    Ok(())
}

/// Get, change, replace the Node, retrying on conflicts; returns the stored Node.
async fn update_node(
    api: &NodeApi,
    change: impl Fn(&mut Node) -> Result<(), String>,
) -> Result<Node, String> {
    let nodes: Api<Node> = Api::all(api.client.clone());
    for _ in 0..CONFLICT_RETRIES {
        let mut node = nodes
            .get(&api.node_name)
            .await
            .map_err(|err| format!("error getting node {:?}: {err}", api.node_name))?;
        let before = node.clone();
        change(&mut node)?;
        if node == before {
            return Ok(node);
        }
        match nodes
            .replace(&api.node_name, &PostParams::default(), &node)
            .await
        {
            Ok(stored) => return Ok(stored),
            Err(err) if is_conflict(&err) => {}
            Err(err) => return Err(format!("error updating node {:?}: {err}", api.node_name)),
        }
    }
    Err(format!(
        "error updating node {:?}: too many conflicts",
        api.node_name
    ))
}

/// Get-or-create, change the driver list, replace the CSINode, retrying on conflicts.
async fn update_csinode(
    api: &NodeApi,
    node: &Node,
    change: impl Fn(&mut Vec<CSINodeDriver>),
) -> Result<(), String> {
    let csinodes: Api<CSINode> = Api::all(api.client.clone());
    for _ in 0..CONFLICT_RETRIES {
        let result = match csinodes.get(&api.node_name).await {
            Ok(mut csinode) => {
                let before = csinode.spec.drivers.clone();
                change(&mut csinode.spec.drivers);
                if csinode.spec.drivers == before {
                    return Ok(());
                }
                csinodes
                    .replace(&api.node_name, &PostParams::default(), &csinode)
                    .await
            }
            Err(err) if is_not_found(&err) => {
                let mut drivers = Vec::new();
                change(&mut drivers);
                let csinode = CSINode {
                    metadata: ObjectMeta {
                        name: Some(api.node_name.clone()),
                        owner_references: Some(vec![OwnerReference {
                            api_version: "v1".to_owned(),
                            kind: "Node".to_owned(),
                            name: api.node_name.clone(),
                            uid: node.metadata.uid.clone().unwrap_or_default(),
                            controller: Some(true),
                            block_owner_deletion: None,
                        }]),
                        ..ObjectMeta::default()
                    },
                    spec: CSINodeSpec { drivers },
                };
                csinodes.create(&PostParams::default(), &csinode).await
            }
            Err(err) => return Err(format!("error getting CSINode: {err}")),
        };
        match result {
            Ok(_) => return Ok(()),
            Err(err) if is_conflict(&err) => {}
            Err(err) => return Err(format!("error updating CSINode: {err}")),
        }
    }
    Err("error updating CSINode: too many conflicts".to_owned())
}
