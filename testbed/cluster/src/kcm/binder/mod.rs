//! The PV binder (kube-controller-manager's `persistentvolume-binder` controller): gathers
//! what [`decide`] needs from the API, then carries the decision out with full-object PUTs
//! (`update` and `update /status`, as the fixture traffic shows), each guarded by the
//! object's resourceVersion so a concurrent writer makes us re-read instead of clobbering.

pub(crate) mod decide;

use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{ListParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};

use super::objects::{
    self, ANN_BETA_STORAGE_PROVISIONER, ANN_STORAGE_PROVISIONER, claim_phase, volume_phase,
};
use super::{Context, Error, Result};
use decide::{ClaimAction, ClaimInputs, ClassLookup, Reclaim, VolumeAction};

fn pvc_api(ctx: &Context, claim: &PersistentVolumeClaim) -> Api<PersistentVolumeClaim> {
    Api::namespaced(ctx.client.clone(), &claim.namespace().unwrap_or_default())
}

fn pv_api(ctx: &Context) -> Api<PersistentVolume> {
    Api::all(ctx.client.clone())
}

/// The claim's class from the class cache; one the cache does not have is asked of the API
/// server before the claim is told it is missing (the cache may not have seen a new class).
async fn lookup_class(ctx: &Context, claim: &PersistentVolumeClaim) -> Result<ClassLookup> {
    let name = objects::claim_class(claim);
    if name.is_empty() {
        return Ok(ClassLookup::NoClass);
    }
    if let Some(class) = ctx.classes.get(&ObjectRef::new(name)) {
        return Ok(ClassLookup::Found(Box::new(Arc::unwrap_or_clone(class))));
    }
    let classes: Api<StorageClass> = Api::all(ctx.client.clone());
    Ok(match classes.get_opt(name).await.map_err(Error::Api)? {
        Some(class) => ClassLookup::Found(Box::new(class)),
        None => ClassLookup::Missing(name.to_owned()),
    })
}

/// `GetDefaultClass` over the class cache, else (no default there) over a LIST, as
/// [`lookup_class`] double-checks.
async fn default_class(ctx: &Context) -> Result<Option<String>> {
    let cached = ctx.classes.state();
    if let Some(name) = newest_default(cached.iter().map(AsRef::as_ref)) {
        return Ok(Some(name));
    }
    let classes: Api<StorageClass> = Api::all(ctx.client.clone());
    let list = classes
        .list(&ListParams::default())
        .await
        .map_err(Error::Api)?;
    Ok(newest_default(list.items.iter()))
}

/// `GetDefaultClass`: the newest class marked default (name breaks ties).
fn newest_default<'a>(classes: impl Iterator<Item = &'a StorageClass>) -> Option<String> {
    classes
        .filter(|c| objects::is_default_class(c))
        .max_by(|a, b| {
            let created = |c: &StorageClass| c.metadata.creation_timestamp.clone().map(|t| t.0);
            created(a)
                .cmp(&created(b))
                .then_with(|| b.name_any().cmp(&a.name_any()))
        })
        .map(ResourceExt::name_any)
}

/// The cached volumes a match for `claim` can choose from: those reserved for it and the free
/// ones, each as its newest copy (our own writes included, as upstream's `ctrl.volumes`).
fn match_candidates(ctx: &Context, claim: &PersistentVolumeClaim) -> Vec<Arc<PersistentVolume>> {
    ctx.volumes_by_claim
        .candidates_for(claim, true)
        .iter()
        .filter_map(|v| ctx.volumes.get(&ObjectRef::new(v)))
        .collect()
}

/// The volume a claim names: from the volume cache, else from the API server, so a cache
/// that has not seen the volume yet never makes the claim Lost.
async fn named_volume(ctx: &Context, name: &str) -> Result<Option<PersistentVolume>> {
    if let Some(volume) = ctx.volumes.get(&ObjectRef::new(name)) {
        return Ok(Some(Arc::unwrap_or_clone(volume)));
    }
    pv_api(ctx).get_opt(name).await.map_err(Error::Api)
}

/// Names of running, unscheduled Pods that use the claim (`findNonScheduledPodsByPVC`).
async fn unscheduled_pods(ctx: &Context, claim: &PersistentVolumeClaim) -> Result<Vec<String>> {
    let pods: Api<Pod> =
        Api::namespaced(ctx.client.clone(), &claim.namespace().unwrap_or_default());
    let list = pods
        .list(&ListParams::default())
        .await
        .map_err(Error::Api)?;
    Ok(list
        .items
        .iter()
        .filter(|p| !super::protection::pod_is_terminated(p))
        .filter(|p| {
            p.spec
                .as_ref()
                .is_none_or(|s| s.node_name.as_deref().unwrap_or("").is_empty())
        })
        .filter(|p| super::protection::pod_references_claim(p, &claim.name_any()))
        .map(ResourceExt::name_any)
        .collect())
}

/// One `syncClaim` pass over the current state of `claim`.
pub(crate) async fn sync_claim(ctx: &Context, claim: PersistentVolumeClaim) -> Result<()> {
    let class = lookup_class(ctx, &claim).await?;
    // Upstream reads volumes from its informer cache (`ctrl.volumes`), never with a LIST: a
    // LIST per sync made every claim sync cost as much as encoding and decoding every volume,
    // which at a few thousand volumes was most of the test bed's CPU. The match only looks at
    // the volumes reserved for the claim and the free ones, which the index names.
    let named = objects::claim_volume_name(&claim);
    let (cached, fresh) = if named.is_empty() {
        (match_candidates(ctx, &claim), None)
    } else {
        (Vec::new(), named_volume(ctx, named).await?)
    };
    let volumes: Vec<&PersistentVolume> = cached.iter().map(AsRef::as_ref).chain(&fresh).collect();
    let late_binding =
        matches!(&class, ClassLookup::Found(c) if objects::is_wait_for_first_consumer(c));
    let pods = if late_binding {
        unscheduled_pods(ctx, &claim).await?
    } else {
        Vec::new()
    };
    let default = if objects::claim_has_class(&claim) {
        None
    } else {
        default_class(ctx).await?
    };
    let decision = decide::decide_claim(
        &claim,
        &ClaimInputs {
            class: &class,
            volumes: &volumes,
            unscheduled_pods: &pods,
            default_class: default.as_deref(),
        },
    );
    tracing::debug!(claim = %claim.name_any(), ?decision.action, "claim sync");
    let api = pvc_api(ctx, &claim);
    let pp = PostParams::default();
    let claim = match decision.action {
        ClaimAction::Nothing => claim,
        ClaimAction::Bind(volume) => Box::pin(bind(ctx, *volume, claim)).await?,
        ClaimAction::AssignDefaultClass(class) => {
            let mut clone = claim.clone();
            clone
                .spec
                .get_or_insert_with(Default::default)
                .storage_class_name = Some(class);
            ctx.claims.wrote(
                api.replace(&claim.name_any(), &pp, &clone)
                    .await
                    .map_err(Error::Api)?,
            )
        }
        ClaimAction::SetProvisioner(provisioner) => {
            if decide::has_provisioner(&claim, &provisioner) {
                claim
            } else {
                let mut clone = claim.clone();
                objects::set_annotation(&mut clone, ANN_BETA_STORAGE_PROVISIONER, &provisioner);
                objects::set_annotation(&mut clone, ANN_STORAGE_PROVISIONER, &provisioner);
                ctx.claims.wrote(
                    api.replace(&claim.name_any(), &pp, &clone)
                        .await
                        .map_err(Error::Api)?,
                )
            }
        }
        ClaimAction::Pending => set_claim_status(ctx, claim, claim_phase::PENDING, None).await?,
        ClaimAction::Lost => set_claim_status(ctx, claim, claim_phase::LOST, None).await?,
    };
    if let Some(event) = decision.event {
        ctx.recorder.event(
            &objects::claim_reference(&claim),
            event.type_,
            event.reason,
            event.message,
        );
    }
    Ok(())
}

async fn set_claim_status(
    ctx: &Context,
    claim: PersistentVolumeClaim,
    phase: &str,
    volume: Option<&PersistentVolume>,
) -> Result<PersistentVolumeClaim> {
    match objects::with_claim_status(&claim, phase, volume) {
        None => Ok(claim),
        Some(updated) => pvc_api(ctx, &claim)
            .replace_status(&claim.name_any(), &PostParams::default(), &updated)
            .await
            .map(|saved| ctx.claims.wrote(saved))
            .map_err(Error::Api),
    }
}

async fn set_volume_phase(
    ctx: &Context,
    volume: PersistentVolume,
    phase: &str,
) -> Result<PersistentVolume> {
    match objects::with_volume_phase(&volume, phase, None) {
        None => Ok(volume),
        Some(updated) => pv_api(ctx)
            .replace_status(&volume.name_any(), &PostParams::default(), &updated)
            .await
            .map(|saved| ctx.volumes.wrote(saved))
            .map_err(Error::Api),
    }
}

/// `bind`: volume spec, volume phase, claim spec, claim status, in that order, each written
/// only when it differs. A failure stops here; the next sync resumes from what was saved.
async fn bind(
    ctx: &Context,
    volume: PersistentVolume,
    claim: PersistentVolumeClaim,
) -> Result<PersistentVolumeClaim> {
    let pp = PostParams::default();
    let volume = match objects::with_volume_bound_to_claim(&volume, &claim) {
        None => volume,
        Some(updated) => ctx.volumes.wrote(
            pv_api(ctx)
                .replace(&volume.name_any(), &pp, &updated)
                .await
                .map_err(Error::Api)?,
        ),
    };
    let volume = set_volume_phase(ctx, volume, volume_phase::BOUND).await?;
    let claim = match objects::with_claim_bound_to_volume(&claim, &volume) {
        None => claim,
        Some(updated) => ctx.claims.wrote(
            pvc_api(ctx, &claim)
                .replace(&claim.name_any(), &pp, &updated)
                .await
                .map_err(Error::Api)?,
        ),
    };
    tracing::info!(claim = %claim.name_any(), volume = %volume.name_any(), "binding");
    set_claim_status(ctx, claim, claim_phase::BOUND, Some(&volume)).await
}

/// One `syncVolume` pass over the current state of `volume`.
pub(crate) async fn sync_volume(ctx: &Context, volume: PersistentVolume) -> Result<()> {
    // The claim from the claim cache; as upstream, a claim the cache does not have is
    // double-checked against the API server before the volume is released.
    let claim = match objects::claim_ref(&volume) {
        Some(r) if r.uid.as_deref().is_some_and(|u| !u.is_empty()) => {
            let (namespace, name) = (
                r.namespace.as_deref().unwrap_or_default(),
                r.name.as_deref().unwrap_or_default(),
            );
            if let Some(claim) = ctx.claims.get(&ObjectRef::new(name).within(namespace)) {
                Some(Arc::unwrap_or_clone(claim))
            } else {
                let api: Api<PersistentVolumeClaim> =
                    Api::namespaced(ctx.client.clone(), namespace);
                api.get_opt(name).await.map_err(Error::Api)?
            }
        }
        _ => None,
    };
    let action = decide::decide_volume(&volume, claim.as_ref());
    tracing::debug!(volume = %volume.name_any(), ?action, "volume sync");
    match action {
        VolumeAction::SyncClaim => {
            if let Some(claim) = &claim {
                ctx.sync_claim_next(claim);
            }
        }
        VolumeAction::SetPhase(phase) => {
            set_volume_phase(ctx, volume, phase).await?;
        }
        VolumeAction::Release(reclaim) => {
            let phase = objects::pv_phase(&volume);
            let volume = if phase == volume_phase::RELEASED || phase == volume_phase::FAILED {
                volume
            } else {
                tracing::info!(volume = %volume.name_any(), "claim is gone, volume released");
                set_volume_phase(ctx, volume, volume_phase::RELEASED).await?
            };
            if let Reclaim::Fail(event) = reclaim
                && objects::pv_phase(&volume) != volume_phase::FAILED
            {
                let failed = set_volume_phase(ctx, volume, volume_phase::FAILED).await?;
                ctx.recorder.event(
                    &objects::volume_reference(&failed),
                    event.type_,
                    event.reason,
                    event.message,
                );
            }
        }
        VolumeAction::Unbind { clear_claim_ref } => {
            let mut clone = volume.clone();
            if clear_claim_ref {
                if let Some(spec) = clone.spec.as_mut() {
                    spec.claim_ref = None;
                }
                if let Some(annotations) = clone.metadata.annotations.as_mut() {
                    annotations.remove(objects::ANN_BOUND_BY_CONTROLLER);
                    if annotations.is_empty() {
                        clone.metadata.annotations = None;
                    }
                }
            } else if let Some(r) = clone.spec.as_mut().and_then(|s| s.claim_ref.as_mut()) {
                r.uid = None;
            }
            let saved = ctx.volumes.wrote(
                pv_api(ctx)
                    .replace(&volume.name_any(), &PostParams::default(), &clone)
                    .await
                    .map_err(Error::Api)?,
            );
            set_volume_phase(ctx, saved, volume_phase::AVAILABLE).await?;
        }
    }
    Ok(())
}
