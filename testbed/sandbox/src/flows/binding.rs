//! Flows of the controller-manager stand-in: claims of the sandbox class are handed to the
//! driver's provisioner, and a manually created volume reserved for a claim goes through
//! Bound and Released like under the real PV binder.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::json;

use super::{FlowError, FlowResult, failed, ms_since, wait_for};
use crate::{NAMESPACE, Sandbox};
use testbed_cluster::kcm::objects::{
    self, ANN_BETA_STORAGE_PROVISIONER, ANN_BIND_COMPLETED, ANN_STORAGE_PROVISIONER,
};

const WAIT: Duration = Duration::from_secs(15);

/// Every start-up claim gets both storage-provisioner annotations naming the driver, and an
/// `ExternalProvisioning` event.
pub(super) async fn annotated(sb: &Sandbox) -> FlowResult {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(sb.client().clone(), NAMESPACE);
    let driver = sb.driver_name().to_owned();
    let start = tokio::time::Instant::now();
    for name in sb.claims() {
        wait_for(
            &format!("{ANN_STORAGE_PROVISIONER} on {name}"),
            WAIT,
            || async {
                let claim = claims.get_opt(name).await.ok().flatten()?;
                (objects::annotation(&claim, ANN_STORAGE_PROVISIONER) == Some(&driver)
                    && objects::annotation(&claim, ANN_BETA_STORAGE_PROVISIONER) == Some(&driver))
                .then_some(())
            },
        )
        .await?;
    }
    let mut notes = vec![format!(
        "{n}/{n} claims annotated {ANN_STORAGE_PROVISIONER}={driver} (and the beta key) within {} ms",
        ms_since(start),
        n = sb.claims().len()
    )];
    // The controller-manager writes its events from a background task (client-go's recorder
    // does too), so an annotated claim's event may still be on its way: wait for all of them.
    let events: Api<Event> = Api::namespaced(sb.client().clone(), NAMESPACE);
    let external = wait_for(
        "an ExternalProvisioning event for every claim",
        WAIT,
        || async {
            let count = events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .filter(|e| e.reason.as_deref() == Some("ExternalProvisioning"))
                .filter(|e| {
                    e.involved_object
                        .name
                        .as_ref()
                        .is_some_and(|n| sb.claims().contains(n))
                })
                .count();
            (count >= sb.claims().len()).then_some(count)
        },
    )
    .await?;
    notes.push(format!(
        "ExternalProvisioning events from persistentvolume-controller: {external}"
    ));
    let phases: Vec<String> = claims
        .list(&ListParams::default())
        .await
        .map_err(|e| failed("cannot list claims", e))?
        .items
        .iter()
        .filter(|c| {
            c.metadata
                .name
                .as_ref()
                .is_some_and(|n| sb.claims().contains(n))
        })
        .map(|c| objects::pvc_phase(c).to_owned())
        .collect();
    let pending = phases.iter().filter(|p| *p == "Pending").count();
    notes.push(format!(
        "claim phases: {pending} Pending, {} other",
        phases.len() - pending
    ));
    Ok(notes)
}

const PV: &str = "sandbox-static-pv";
const PVC: &str = "sandbox-static-claim";

/// A Retain volume reserved for [`PVC`] by name only, and that claim (no class).
fn static_objects(sb: &Sandbox) -> Result<(PersistentVolume, PersistentVolumeClaim), FlowError> {
    let volume = serde_json::from_value(json!({
        "metadata": {"name": PV},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "claimRef": {"namespace": NAMESPACE, "name": PVC},
            "csi": {"driver": sb.driver_name(), "volumeHandle": "sandbox-static-volume"},
        },
    }))
    .map_err(|e| failed("bad PersistentVolume", e))?;
    let claim = serde_json::from_value(json!({
        "metadata": {"name": PVC, "namespace": NAMESPACE},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": "",
        },
    }))
    .map_err(|e| failed("bad PersistentVolumeClaim", e))?;
    Ok((volume, claim))
}

/// A volume created by hand and reserved for a claim by name binds to it (both Bound, the
/// claim's uid filled in); deleting the claim releases the volume; the Released volume can be
/// deleted (pv-protection lets it go).
pub(super) async fn static_binding(sb: &Sandbox) -> FlowResult {
    let pp = PostParams::default();
    let volumes: Api<PersistentVolume> = Api::all(sb.client().clone());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(sb.client().clone(), NAMESPACE);
    let (volume, claim) = static_objects(sb)?;

    let start = tokio::time::Instant::now();
    volumes
        .create(&pp, &volume)
        .await
        .map_err(|e| failed("cannot create the volume", e))?;
    let claim = claims
        .create(&pp, &claim)
        .await
        .map_err(|e| failed("cannot create the claim", e))?;
    let mut notes = vec![format!(
        "created PV {PV} reserved for {NAMESPACE}/{PVC} (claimRef without uid) and the claim"
    )];

    let (pv, pvc) = wait_for("the volume and the claim to be Bound", WAIT, || async {
        let pv = volumes.get_opt(PV).await.ok().flatten()?;
        let pvc = claims.get_opt(PVC).await.ok().flatten()?;
        (objects::pv_phase(&pv) == "Bound" && objects::pvc_phase(&pvc) == "Bound")
            .then_some((pv, pvc))
    })
    .await?;
    let claim_uid = objects::claim_ref(&pv).and_then(|r| r.uid.clone());
    if claim_uid != claim.metadata.uid {
        return Err(FlowError::Failed(format!(
            "claimRef uid is {claim_uid:?}, want the claim's {:?}",
            claim.metadata.uid
        )));
    }
    if objects::claim_volume_name(&pvc) != PV
        || objects::annotation(&pvc, ANN_BIND_COMPLETED) != Some("yes")
    {
        return Err(FlowError::Failed(format!(
            "claim is Bound but volumeName={:?} bind-completed={:?}",
            objects::claim_volume_name(&pvc),
            objects::annotation(&pvc, ANN_BIND_COMPLETED)
        )));
    }
    notes.push(format!(
        "both Bound after {} ms (claimRef uid filled in, volumeName set, bind-completed=yes)",
        ms_since(start)
    ));

    let start = tokio::time::Instant::now();
    claims
        .delete(PVC, &DeleteParams::default())
        .await
        .map_err(|e| failed("cannot delete the claim", e))?;
    wait_for("the claim to go (pvc-protection)", WAIT, || async {
        matches!(claims.get_opt(PVC).await, Ok(None)).then_some(())
    })
    .await?;
    wait_for("the volume to be Released", WAIT, || async {
        let pv = volumes.get_opt(PV).await.ok().flatten()?;
        (objects::pv_phase(&pv) == "Released").then_some(())
    })
    .await?;
    notes.push(format!(
        "claim deleted -> volume Released after {} ms (reclaimPolicy Retain keeps it)",
        ms_since(start)
    ));

    let start = tokio::time::Instant::now();
    volumes
        .delete(PV, &DeleteParams::default())
        .await
        .map_err(|e| failed("cannot delete the volume", e))?;
    wait_for(
        "the Released volume to go (pv-protection)",
        WAIT,
        || async { matches!(volumes.get_opt(PV).await, Ok(None)).then_some(()) },
    )
    .await?;
    notes.push(format!(
        "Released volume deleted, pv-protection finalizer lifted after {} ms",
        ms_since(start)
    ));
    Ok(notes)
}
