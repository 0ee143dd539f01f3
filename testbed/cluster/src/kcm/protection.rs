//! The pvc-protection and pv-protection controllers: they hold back deletion of a claim
//! while a scheduled Pod uses it, and of a volume while it is Bound, by owning the
//! `kubernetes.io/pvc-protection` / `kubernetes.io/pv-protection` finalizers (which admission
//! adds on create). Upstream `pkg/controller/volume/pvcprotection` and `pvprotection`: the
//! finalizer is removed with a full-object PUT once the object is unused, and added to
//! objects that lack it.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt as _};

use super::objects::{self, PV_PROTECTION_FINALIZER, PVC_PROTECTION_FINALIZER, volume_phase};
use super::{Context, Error, Result};

/// What a protection controller does with one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProtectionStep {
    /// Leave it alone.
    Nothing,
    /// Add the finalizer (object predates admission adding it).
    AddFinalizer,
    /// Drop the finalizer: deleting and no longer in use.
    RemoveFinalizer,
}

/// `IsDeletionCandidate` / `NeedToAddFinalizer` for a finalizer and an in-use verdict.
fn step(
    obj: &impl kube::Resource,
    finalizer: &str,
    in_use: impl FnOnce() -> bool,
) -> ProtectionStep {
    let has = objects::has_finalizer(obj, finalizer);
    if objects::is_deleting(obj) {
        if has && !in_use() {
            ProtectionStep::RemoveFinalizer
        } else {
            ProtectionStep::Nothing
        }
    } else if has {
        ProtectionStep::Nothing
    } else {
        ProtectionStep::AddFinalizer
    }
}

/// pv-protection: a volume is in use while its phase is Bound.
pub(crate) fn decide_volume(volume: &PersistentVolume) -> ProtectionStep {
    step(volume, PV_PROTECTION_FINALIZER, || {
        objects::pv_phase(volume) == volume_phase::BOUND
    })
}

/// pvc-protection: a claim is in use while a scheduled Pod references it.
pub(crate) fn decide_claim(claim: &PersistentVolumeClaim, pods: &[Pod]) -> ProtectionStep {
    step(claim, PVC_PROTECTION_FINALIZER, || {
        pods.iter().any(|p| pod_uses_claim(p, claim))
    })
}

/// Succeeded or Failed.
pub(crate) fn pod_is_terminated(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Whether the Pod names the claim directly, or owns it as a generic ephemeral volume
/// (`<pod>-<volume>`).
pub(crate) fn pod_references_claim(pod: &Pod, claim_name: &str) -> bool {
    let pod_name = pod.name_any();
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .any(|v| {
            v.persistent_volume_claim
                .as_ref()
                .is_some_and(|c| c.claim_name == claim_name)
                || (v.ephemeral.is_some() && format!("{pod_name}-{}", v.name) == claim_name)
        })
}

/// `podUsesPVC`: only scheduled Pods count (kubelet will not start a Pod whose claim is being
/// deleted); a direct reference counts even after the Pod finished, an ephemeral one only
/// while it runs.
fn pod_uses_claim(pod: &Pod, claim: &PersistentVolumeClaim) -> bool {
    let scheduled = pod
        .spec
        .as_ref()
        .is_some_and(|s| s.node_name.as_deref().is_some_and(|n| !n.is_empty()));
    if !scheduled || pod.namespace() != claim.namespace() {
        return false;
    }
    let name = claim.name_any();
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .any(|v| {
            v.persistent_volume_claim
                .as_ref()
                .is_some_and(|c| c.claim_name == name)
                || (!pod_is_terminated(pod)
                    && v.ephemeral.is_some()
                    && format!("{}-{}", pod.name_any(), v.name) == name)
        })
}

fn with_finalizer(obj: &mut impl kube::Resource, finalizer: &str, present: bool) {
    let list = obj.meta_mut().finalizers.get_or_insert_with(Vec::new);
    list.retain(|f| f != finalizer);
    if present {
        list.push(finalizer.to_owned());
    }
    if list.is_empty() {
        obj.meta_mut().finalizers = None;
    }
}

/// Runs pvc-protection for `claim`; returns whether it wrote.
pub(crate) async fn sync_claim(ctx: &Context, claim: &PersistentVolumeClaim) -> Result<bool> {
    let namespace = claim.namespace().unwrap_or_default();
    // Upstream asks the informer first and the API server when the informer says "unused";
    // reading the API server directly gives the same answer.
    let pods = if objects::is_deleting(claim) {
        let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
        api.list(&ListParams::default())
            .await
            .map_err(Error::Api)?
            .items
    } else {
        Vec::new()
    };
    let present = match decide_claim(claim, &pods) {
        ProtectionStep::Nothing => return Ok(false),
        ProtectionStep::AddFinalizer => true,
        ProtectionStep::RemoveFinalizer => false,
    };
    let mut clone = claim.clone();
    with_finalizer(&mut clone, PVC_PROTECTION_FINALIZER, present);
    let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &namespace);
    ctx.claims.wrote(
        api.replace(&claim.name_any(), &PostParams::default(), &clone)
            .await
            .map_err(Error::Api)?,
    );
    tracing::info!(claim = %claim.name_any(), present, "pvc-protection finalizer");
    Ok(true)
}

/// Runs pv-protection for `volume`; returns whether it wrote.
pub(crate) async fn sync_volume(ctx: &Context, volume: &PersistentVolume) -> Result<bool> {
    let present = match decide_volume(volume) {
        ProtectionStep::Nothing => return Ok(false),
        ProtectionStep::AddFinalizer => true,
        ProtectionStep::RemoveFinalizer => false,
    };
    let mut clone = volume.clone();
    with_finalizer(&mut clone, PV_PROTECTION_FINALIZER, present);
    let api: Api<PersistentVolume> = Api::all(ctx.client.clone());
    ctx.volumes.wrote(
        api.replace(&volume.name_any(), &PostParams::default(), &clone)
            .await
            .map_err(Error::Api)?,
    );
    tracing::info!(volume = %volume.name_any(), present, "pv-protection finalizer");
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        PersistentVolumeClaimVolumeSource, PersistentVolumeStatus, PodSpec, PodStatus, Volume,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn meta(finalizer: &str, deleting: bool) -> ObjectMeta {
        ObjectMeta {
            name: Some("data".into()),
            namespace: Some("ns".into()),
            finalizers: Some(vec![finalizer.to_owned()]),
            deletion_timestamp: deleting.then_some(Time(jiff::Timestamp::UNIX_EPOCH)),
            ..Default::default()
        }
    }

    fn claim(deleting: bool) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: meta(PVC_PROTECTION_FINALIZER, deleting),
            ..Default::default()
        }
    }

    fn pod(node: Option<&str>, phase: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("app".into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: node.map(str::to_owned),
                volumes: Some(vec![Volume {
                    name: "v".into(),
                    persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                        claim_name: "data".into(),
                        read_only: None,
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn a_deleting_claim_loses_its_finalizer_when_no_scheduled_pod_uses_it() {
        assert_eq!(
            decide_claim(&claim(true), &[]),
            ProtectionStep::RemoveFinalizer
        );
        assert_eq!(
            decide_claim(&claim(true), &[pod(None, "Pending")]),
            ProtectionStep::RemoveFinalizer
        );
    }

    #[test]
    fn a_scheduled_pod_keeps_the_claim_even_after_it_finished() {
        assert_eq!(
            decide_claim(&claim(true), &[pod(Some("node"), "Running")]),
            ProtectionStep::Nothing
        );
        assert_eq!(
            decide_claim(&claim(true), &[pod(Some("node"), "Succeeded")]),
            ProtectionStep::Nothing
        );
    }

    #[test]
    fn a_live_claim_without_finalizer_gets_one() {
        let mut c = claim(false);
        c.metadata.finalizers = None;
        assert_eq!(decide_claim(&c, &[]), ProtectionStep::AddFinalizer);
        assert_eq!(decide_claim(&claim(false), &[]), ProtectionStep::Nothing);
    }

    #[test]
    fn a_deleting_volume_keeps_its_finalizer_only_while_bound() {
        let volume = |phase: &str| PersistentVolume {
            metadata: meta(PV_PROTECTION_FINALIZER, true),
            spec: None,
            status: Some(PersistentVolumeStatus {
                phase: Some(phase.into()),
                ..Default::default()
            }),
        };
        assert_eq!(decide_volume(&volume("Bound")), ProtectionStep::Nothing);
        assert_eq!(
            decide_volume(&volume("Released")),
            ProtectionStep::RemoveFinalizer
        );
        assert_eq!(
            decide_volume(&volume("Available")),
            ProtectionStep::RemoveFinalizer
        );
    }
}
