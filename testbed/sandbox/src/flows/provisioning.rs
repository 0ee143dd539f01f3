//! csi-provisioner flows: dynamic provisioning (a claim of the sandbox class gets a volume and a
//! PV written the way the Go provisioner writes it, the controller-manager stand-in binds
//! them, the start-up claims end Bound too) and deletion (deleting the claim releases the PV,
//! the provisioner deletes the volume and the PV).
//!
//! The mock driver reports VOLUME_ACCESSIBILITY_CONSTRAINTS, so provisioning needs the node's
//! topology: the CSINode entry with the driver's topology key and the matching Node label.
//! The registration flow normally leaves both behind (kubelet writes them); when it did not
//! run, [`ensure_topology`] writes what kubelet would have.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSINode, CSINodeDriver, CSINodeSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::{
    FlowError, FlowResult, claim_event_reasons, failed, metric_value, ms_since, require_sidecar,
    wait_for,
};
use crate::{NAMESPACE, NODE_NAME, STORAGE_CLASS, Sandbox};
use testbed_cluster::kcm::objects::{self, ANN_PROVISIONED_BY};
use testbed_mock_csi::DEFAULT_TOPOLOGY_KEY;
use testbed_support::http_client;

const PROVISIONER: &str = "csi-provisioner";
/// The claim these flows create (and the deletion flow deletes).
pub(super) const CLAIM: &str = "sandbox-dynamic";
/// The finalizer the provisioner puts on PVs it writes.
const PV_FINALIZER: &str = "external-provisioner.volume.kubernetes.io/finalizer";
const WAIT: Duration = Duration::from_secs(30);

/// Makes sure the node carries the driver's topology (Node label + CSINode topology key), as
/// kubelet writes them when the driver registers. Returns a note when it had to write them.
pub(super) async fn ensure_topology(sb: &Sandbox) -> Result<Option<String>, FlowError> {
    let csinodes: Api<CSINode> = Api::all(sb.client().clone());
    let registered = csinodes
        .get_opt(NODE_NAME)
        .await
        .map_err(|e| failed("GET CSINode", e))?
        .is_some_and(|c| {
            c.spec.drivers.iter().any(|d| {
                d.name == sb.driver_name()
                    && d.topology_keys.as_ref().is_some_and(|k| !k.is_empty())
            })
        });
    if registered {
        return Ok(None);
    }
    let nodes: Api<Node> = Api::all(sb.client().clone());
    let node = Node {
        metadata: ObjectMeta {
            name: Some(NODE_NAME.to_owned()),
            labels: Some(BTreeMap::from([(
                DEFAULT_TOPOLOGY_KEY.to_owned(),
                NODE_NAME.to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        ..Node::default()
    };
    if nodes
        .get_opt(NODE_NAME)
        .await
        .map_err(|e| failed("GET Node", e))?
        .is_some()
    {
        let patch = json!({"metadata": {"labels": {DEFAULT_TOPOLOGY_KEY: NODE_NAME}}});
        nodes
            .patch(NODE_NAME, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| failed("label Node", e))?;
    } else {
        nodes
            .create(&PostParams::default(), &node)
            .await
            .map_err(|e| failed("create Node", e))?;
    }
    let entry = CSINodeDriver {
        name: sb.driver_name().to_owned(),
        node_id: NODE_NAME.to_owned(),
        topology_keys: Some(vec![DEFAULT_TOPOLOGY_KEY.to_owned()]),
        ..CSINodeDriver::default()
    };
    let existing = csinodes
        .get_opt(NODE_NAME)
        .await
        .map_err(|e| failed("GET CSINode", e))?;
    if let Some(mut csinode) = existing {
        csinode.spec.drivers.retain(|d| d.name != sb.driver_name());
        csinode.spec.drivers.push(entry);
        csinodes
            .replace(NODE_NAME, &PostParams::default(), &csinode)
            .await
            .map_err(|e| failed("update CSINode", e))?;
    } else {
        let csinode = CSINode {
            metadata: ObjectMeta {
                name: Some(NODE_NAME.to_owned()),
                ..ObjectMeta::default()
            },
            spec: CSINodeSpec {
                drivers: vec![entry],
            },
        };
        csinodes
            .create(&PostParams::default(), &csinode)
            .await
            .map_err(|e| failed("create CSINode", e))?;
    }
    Ok(Some(format!(
        "wrote the node topology kubelet would have ({DEFAULT_TOPOLOGY_KEY}={NODE_NAME} on Node and CSINode)"
    )))
}

/// Checks the PV against what the Go provisioner writes (fixture pv-0): provisioned-by, the
/// deletion-secret annotations, our finalizer, claimRef with the claim's uid, the CSI source
/// with the provisioner identity attribute, and node affinity from the driver's topology.
fn check_pv(
    sb: &Sandbox,
    pv: &PersistentVolume,
    claim: &PersistentVolumeClaim,
) -> Result<String, FlowError> {
    let name = pv.metadata.name.clone().unwrap_or_default();
    let bad = |what: String| FlowError::Failed(format!("PV {name}: {what}"));
    let annotations = pv.metadata.annotations.clone().unwrap_or_default();
    if annotations.get(ANN_PROVISIONED_BY).map(String::as_str) != Some(sb.driver_name()) {
        return Err(bad(format!(
            "{ANN_PROVISIONED_BY} is {:?}",
            annotations.get(ANN_PROVISIONED_BY)
        )));
    }
    for key in [
        "volume.kubernetes.io/provisioner-deletion-secret-name",
        "volume.kubernetes.io/provisioner-deletion-secret-namespace",
    ] {
        if !annotations.contains_key(key) {
            return Err(bad(format!("annotation {key} missing")));
        }
    }
    if !pv
        .metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == PV_FINALIZER))
    {
        return Err(bad(format!("finalizer {PV_FINALIZER} missing")));
    }
    if objects::claim_ref(pv).and_then(|r| r.uid.clone()) != claim.metadata.uid {
        return Err(bad("claimRef uid differs from the claim's".to_owned()));
    }
    let spec = pv.spec.clone().unwrap_or_default();
    let csi = spec.csi.ok_or_else(|| bad("no spec.csi".to_owned()))?;
    if csi.driver != sb.driver_name() {
        return Err(bad(format!("spec.csi.driver is {}", csi.driver)));
    }
    let identity = csi
        .volume_attributes
        .unwrap_or_default()
        .remove("storage.kubernetes.io/csiProvisionerIdentity")
        .ok_or_else(|| bad("no csiProvisionerIdentity volume attribute".to_owned()))?;
    if spec.node_affinity.is_none() {
        return Err(bad(
            "no nodeAffinity although the driver reports topology".to_owned()
        ));
    }
    Ok(format!(
        "PV {name}: provisioned-by {}, deletion-secret annotations, finalizer {PV_FINALIZER}, claimRef uid, volumeHandle {}, identity {identity}, nodeAffinity, capacity {:?}",
        sb.driver_name(),
        csi.volume_handle,
        spec.capacity
            .unwrap_or_default()
            .get("storage")
            .map(|q| q.0.clone())
            .unwrap_or_default(),
    ))
}

/// Start-up claims may have failed while the node had no topology yet and be in backoff; a
/// change to a claim makes the provisioner look at it again at once (as upstream's informer
/// does). Waits until all of them are Bound.
async fn startup_claims_bound(
    sb: &Sandbox,
    claims: &Api<PersistentVolumeClaim>,
) -> Result<String, FlowError> {
    for name in sb.claims() {
        let patch =
            json!({"metadata": {"labels": {"sandbox.example.com/provisioning-flow": "seen"}}});
        claims
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| failed("touch a start-up claim", e))?;
    }
    let start = tokio::time::Instant::now();
    for name in sb.claims() {
        wait_for(
            &format!("start-up claim {name} to be Bound"),
            WAIT,
            || async {
                let claim = claims.get_opt(name).await.ok().flatten()?;
                (objects::pvc_phase(&claim) == "Bound").then_some(())
            },
        )
        .await?;
    }
    Ok(format!(
        "{n}/{n} start-up claims Bound ({} ms after the check began)",
        ms_since(start),
        n = sb.claims().len()
    ))
}

/// A new claim of the sandbox class is provisioned by csi-provisioner and bound by the
/// controller-manager stand-in; the start-up claims end Bound as well.
pub(super) async fn provisioned(sb: &Sandbox) -> FlowResult {
    let addr = require_sidecar(sb, PROVISIONER)?;
    let mut notes = Vec::new();
    notes.extend(ensure_topology(sb).await?);

    let claims: Api<PersistentVolumeClaim> = Api::namespaced(sb.client().clone(), NAMESPACE);
    let volumes: Api<PersistentVolume> = Api::all(sb.client().clone());
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": CLAIM, "namespace": NAMESPACE},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": STORAGE_CLASS,
        },
    }))
    .map_err(|e| failed("bad claim", e))?;
    let start = tokio::time::Instant::now();
    let created = claims
        .create(&PostParams::default(), &claim)
        .await
        .map_err(|e| failed("cannot create the claim", e))?;
    let bound = wait_for(&format!("{CLAIM} to be Bound"), WAIT, || async {
        let claim = claims.get_opt(CLAIM).await.ok().flatten()?;
        (objects::pvc_phase(&claim) == "Bound").then_some(claim)
    })
    .await?;
    let pv_name = objects::claim_volume_name(&bound).to_owned();
    notes.push(format!(
        "{NAMESPACE}/{CLAIM} Bound to {pv_name} after {} ms",
        ms_since(start)
    ));
    let pv = volumes
        .get(&pv_name)
        .await
        .map_err(|e| failed("GET the PV", e))?;
    notes.push(check_pv(sb, &pv, &created)?);

    let reasons = claim_event_reasons(
        sb,
        CLAIM,
        |r| r.starts_with("Provisioning"),
        "ProvisioningSucceeded",
    )
    .await?;
    notes.push(format!("events on the claim: {reasons:?}"));

    notes.push(startup_claims_bound(sb, &claims).await?);

    let metrics = http_client::get(addr, "/metrics", Duration::from_secs(5))
        .await
        .map_err(|e| failed("GET /metrics", e))?;
    let provisioned = metric_value(
        &metrics.body,
        "controller_persistentvolumeclaim_provision_total",
        &[("class", STORAGE_CLASS)],
    )
    .unwrap_or(0.0);
    let creates = metric_value(
        &metrics.body,
        "csi_sidecar_operations_seconds_count",
        &[
            ("method_name", "/csi.v1.Controller/CreateVolume"),
            ("grpc_status_code", "OK"),
        ],
    )
    .unwrap_or(0.0);
    notes.push(format!(
        "{PROVISIONER} /metrics: controller_persistentvolumeclaim_provision_total{{class=\"{STORAGE_CLASS}\"}} {provisioned}, successful CreateVolume calls {creates}"
    ));
    Ok(notes)
}

/// Deleting the claim releases its PV; csi-provisioner calls DeleteVolume, deletes the PV and
/// drops its finalizer.
/// The PV the "dynamic provisioning" flow bound to its claim; [`FlowError::Skipped`] when that
/// flow did not pass.
pub(super) async fn dynamic_volume(sb: &Sandbox) -> Result<String, FlowError> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(sb.client().clone(), NAMESPACE);
    let claim = claims
        .get_opt(CLAIM)
        .await
        .map_err(|e| failed("GET the claim", e))?
        .ok_or_else(|| {
            FlowError::Skipped(format!(
                "{CLAIM} does not exist (dynamic provisioning did not pass)"
            ))
        })?;
    let pv_name = objects::claim_volume_name(&claim).to_owned();
    if pv_name.is_empty() {
        return Err(FlowError::Skipped(format!("{CLAIM} is not bound")));
    }
    Ok(pv_name)
}

pub(super) async fn deleted(sb: &Sandbox) -> FlowResult {
    let addr = require_sidecar(sb, PROVISIONER)?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(sb.client().clone(), NAMESPACE);
    let volumes: Api<PersistentVolume> = Api::all(sb.client().clone());
    let pv_name = dynamic_volume(sb).await?;
    let mut notes = Vec::new();
    let start = tokio::time::Instant::now();
    claims
        .delete(CLAIM, &DeleteParams::default())
        .await
        .map_err(|e| failed("cannot delete the claim", e))?;
    wait_for("the claim to go (pvc-protection)", WAIT, || async {
        matches!(claims.get_opt(CLAIM).await, Ok(None)).then_some(())
    })
    .await?;
    notes.push(format!(
        "{NAMESPACE}/{CLAIM} deleted after {} ms",
        ms_since(start)
    ));
    wait_for(&format!("PV {pv_name} to be deleted"), WAIT, || async {
        matches!(volumes.get_opt(&pv_name).await, Ok(None)).then_some(())
    })
    .await?;
    notes.push(format!(
        "PV {pv_name} Released, its volume deleted and the PV removed {} ms after the claim went",
        ms_since(start)
    ));

    let events: Api<Event> = Api::namespaced(sb.client().clone(), "default");
    let failures = events
        .list(&ListParams::default())
        .await
        .map_err(|e| failed("cannot list events", e))?
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("VolumeFailedDelete"))
        .filter(|e| e.involved_object.name.as_deref() == Some(pv_name.as_str()))
        .count();
    if failures > 0 {
        notes.push(format!(
            "{failures} VolumeFailedDelete event(s) before it succeeded"
        ));
    }
    let metrics = http_client::get(addr, "/metrics", Duration::from_secs(5))
        .await
        .map_err(|e| failed("GET /metrics", e))?;
    let deleted = metric_value(
        &metrics.body,
        "controller_persistentvolume_delete_total",
        &[("class", STORAGE_CLASS)],
    )
    .unwrap_or(0.0);
    if deleted < 1.0 {
        return Err(FlowError::Failed(format!(
            "controller_persistentvolume_delete_total{{class=\"{STORAGE_CLASS}\"}} is {deleted}"
        )));
    }
    let deletes = metric_value(
        &metrics.body,
        "csi_sidecar_operations_seconds_count",
        &[
            ("method_name", "/csi.v1.Controller/DeleteVolume"),
            ("grpc_status_code", "OK"),
        ],
    )
    .unwrap_or(0.0);
    notes.push(format!(
        "{PROVISIONER} /metrics: controller_persistentvolume_delete_total{{class=\"{STORAGE_CLASS}\"}} {deleted}, successful DeleteVolume calls {deletes}"
    ));
    Ok(notes)
}
