//! node-driver-registrar flow: kubelet's plugin watcher (the fake one in [`testbed_kubelet`],
//! writing to the sandbox's API server) finds the registration socket, registers the driver
//! (`GetInfo` and `NotifyRegistrationStatus` with `:authority` = the socket path as kubelet's
//! grpc-go dial sends it, `NodeGetInfo` on the announced endpoint, Node annotation and
//! `CSINode`), and the
//! registrar's `/healthz` follows its socket. Then the socket is deleted: kubelet de-registers
//! the driver and the registrar puts the socket back, so the driver is registered again.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::CSINode;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;

use super::{FlowError, FlowResult, ms_since, require_sidecar};
use crate::{NODE_NAME, Sandbox};
use testbed_kubelet::grpc_dial::Authority;
use testbed_kubelet::{FakeKubelet, KubeletConfig, NODE_ID_ANNOTATION, NodeApi};
use testbed_support::http_client;

const REGISTRAR: &str = "csi-node-driver-registrar";
const WAIT: Duration = Duration::from_secs(15);

fn failed(what: &str) -> impl Fn(&dyn std::fmt::Display) -> FlowError + '_ {
    move |err| FlowError::Failed(format!("{what}: {err}"))
}

/// Creates the Node the fake kubelet runs on, as a real kubelet registers its Node before it
/// registers plugins. Returns whether it had to.
async fn ensure_node(sb: &Sandbox) -> Result<bool, FlowError> {
    let nodes: Api<Node> = Api::all(sb.client().clone());
    if nodes
        .get_opt(NODE_NAME)
        .await
        .map_err(|e| failed("GET Node")(&e))?
        .is_some()
    {
        return Ok(false);
    }
    let node = Node {
        metadata: ObjectMeta {
            name: Some(NODE_NAME.to_owned()),
            ..ObjectMeta::default()
        },
        ..Node::default()
    };
    nodes
        .create(&PostParams::default(), &node)
        .await
        .map_err(|e| failed("create Node")(&e))?;
    Ok(true)
}

/// Registration through the fake kubelet, `/healthz`, and re-registration after the socket
/// was deleted.
pub(super) async fn registered(sb: &Sandbox) -> FlowResult {
    let addr = require_sidecar(sb, REGISTRAR)?;
    let mut notes = Vec::new();
    if ensure_node(sb).await? {
        notes.push(format!(
            "Node {NODE_NAME} created (kubelet's own registration)"
        ));
    }
    let kubelet = FakeKubelet::start(KubeletConfig {
        node_api: Some(NodeApi {
            client: sb.client().clone(),
            node_name: NODE_NAME.to_owned(),
        }),
        // What a real kubelet sends; a registrar that refuses it never registers on a node.
        registration_authority: Authority::SocketPath,
        ..KubeletConfig::new(sb.registration_dir())
    })
    .map_err(|e| failed("start the fake kubelet")(&e))?;

    let start = tokio::time::Instant::now();
    let plugin = kubelet
        .wait_registered(sb.driver_name(), WAIT)
        .await
        .map_err(|e| failed("registration")(&e))?;
    notes.push(format!(
        "kubelet (registration :authority = the socket path, as grpc-go's passthrough dial sends it) registered {} from {} in {} ms: endpoint {}, versions {:?}, NodeGetInfo node id {}",
        plugin.name,
        plugin.socket.display(),
        ms_since(start),
        plugin.endpoint,
        plugin.supported_versions,
        plugin.node.as_ref().map_or("-", |n| n.node_id.as_str()),
    ));

    let csinode = Api::<CSINode>::all(sb.client().clone())
        .get(NODE_NAME)
        .await
        .map_err(|e| failed("GET CSINode")(&e))?;
    let entry = csinode
        .spec
        .drivers
        .iter()
        .find(|d| d.name == sb.driver_name())
        .ok_or_else(|| {
            FlowError::Failed(format!("CSINode {NODE_NAME} does not list the driver"))
        })?;
    notes.push(format!(
        "CSINode {NODE_NAME}: driver {} nodeID {} topologyKeys {:?}",
        entry.name,
        entry.node_id,
        entry.topology_keys.clone().unwrap_or_default()
    ));
    let node = Api::<Node>::all(sb.client().clone())
        .get(NODE_NAME)
        .await
        .map_err(|e| failed("GET Node")(&e))?;
    let annotation = node
        .metadata
        .annotations
        .unwrap_or_default()
        .remove(NODE_ID_ANNOTATION)
        .ok_or_else(|| FlowError::Failed(format!("Node has no {NODE_ID_ANNOTATION} annotation")))?;
    notes.push(format!(
        "Node {NODE_NAME} {NODE_ID_ANNOTATION}={annotation}"
    ));

    let healthz = http_client::get(addr, "/healthz", Duration::from_secs(5))
        .await
        .map_err(|e| failed("GET /healthz")(&e))?;
    if (healthz.status, healthz.body.as_str()) != (200, "ok") {
        return Err(FlowError::Failed(format!(
            "registrar /healthz answered {} {:?}, want 200 \"ok\"",
            healthz.status, healthz.body
        )));
    }
    notes.push(format!("{REGISTRAR} GET /healthz -> 200 \"ok\""));

    let start = tokio::time::Instant::now();
    std::fs::remove_file(&plugin.socket).map_err(|e| failed("delete the socket")(&e))?;
    kubelet
        .wait_deregistered(sb.driver_name(), WAIT)
        .await
        .map_err(|e| failed("de-registration")(&e))?;
    notes.push(format!(
        "registration socket deleted -> kubelet de-registered the driver after {} ms",
        ms_since(start)
    ));
    kubelet
        .wait_registered(sb.driver_name(), WAIT)
        .await
        .map_err(|e| failed("re-registration")(&e))?;
    notes.push(format!(
        "registrar re-created the socket -> registered again {} ms after the deletion",
        ms_since(start)
    ));
    kubelet.stop().await;
    Ok(notes)
}
