//! Data sources at run time (spec §4.3 step 10, §6.4): looking up the clone or snapshot source of
//! a claim, protecting it with a finalizer before CreateVolume, and the two controllers that
//! take those finalizers off again.
//!
//! * [`with_content_source`]: ReferenceGrant check for a cross-namespace source, lookups, the
//!   pure [`crate::source`] decision, then the finalizer (a plain Update carrying the
//!   resourceVersion that was checked, so a source whose deletion started meanwhile makes the
//!   update fail with a conflict instead of being used unprotected).
//! * [`release_snapshot`]: after the PV is built (or a claim deleted during its create is
//!   cleaned up), the snapshot finalizer comes off unless another claim without a PV still
//!   restores from the same snapshot (upstream removes it regardless and leaves the other claim
//!   unprotected until its own next attempt).
//! * [`sync_clone_source`]: the clone-protection controller (`--cloning-protection-threads`
//!   workers): a source claim being deleted loses the cloning-protection finalizer once no
//!   Pending claim clones it and no create from it is in progress.
//! * [`sweep_snapshots`]: every `--snapshot-orphan-sweep-interval`, snapshots carrying our
//!   finalizer that no Pending claim references lose it (attempts that never finished, e.g.
//!   the claim was deleted).
//!
//! "Still needed" ([`source::still_needed`]) always includes the creates in progress
//! ([`super::in_progress`]): a claim being deleted is no longer Pending for us, but its create is
//! repeated from the stored plan, so its source stays protected until the driver has answered.

use std::sync::Arc;
use std::time::Duration;

use csi_common::controller::Outcome;
use csi_common::kube_client::error_text;
use csi_common::workqueue::WorkQueue;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::Api;
use kube::api::{DynamicObject, ListParams, PostParams};

use crate::args::RetrySettings;
use crate::naming::volume_name;
use crate::plan_error::PlanError;
use crate::request::ProvisionPlan;
use crate::source::objects::{content_resource, grant_resource, snapshot_resource};
use crate::source::{
    self, CLONE_FINALIZER, CloneInputs, ContentView, GrantView, SNAPSHOT_FINALIZER, SnapshotInputs,
    SnapshotView, SourceError, SourceKind, SourceRef,
};

use super::Context;

/// Key of the clone-protection queue: the source claim's namespace and name.
pub(crate) type SourceKey = (String, String);

/// Settings of the data-source controllers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct ProtectionSettings {
    /// Clone-protection workers (`--cloning-protection-threads`); 0 = the driver cannot clone,
    /// so the controller does not run (upstream starts it only with CLONE_VOLUME).
    pub(crate) clone_workers: usize,
    /// Snapshot sweep period (`--snapshot-orphan-sweep-interval`); `None` when 0 or the driver
    /// cannot restore snapshots (no CREATE_DELETE_SNAPSHOT).
    pub(crate) snapshot_sweep: Option<Duration>,
}

/// The delay before retrying a claim whose source cannot be used: a tenth of
/// `--retry-interval-max` (30 s by default), at least `--retry-interval-start`.
pub(crate) fn slow_retry(retry: RetrySettings) -> Duration {
    (retry.max / 10).clamp(retry.start, retry.max)
}

/// Fills `volume_content_source` of a plan whose claim has a clone or snapshot source, and
/// protects the source. A plan without a source, or one reused from an attempt in progress
/// (already filled), is returned as it is.
pub(crate) async fn with_content_source<D>(
    ctx: &Context<D>,
    claim: &PersistentVolumeClaim,
    class_provisioner: &str,
    plan: Arc<ProvisionPlan>,
) -> Result<Arc<ProvisionPlan>, PlanError> {
    let Some(source) = plan.source.clone() else {
        return Ok(plan);
    };
    if plan.request.volume_content_source.is_some() {
        return Ok(plan);
    }
    if source.cross_namespace {
        check_grant(ctx, claim, &source).await?;
    }
    let content_source = match source.kind {
        SourceKind::Clone => clone_source(ctx, claim, class_provisioner, &source).await?,
        SourceKind::Snapshot => snapshot_source(ctx, claim, class_provisioner, &source).await?,
    };
    let mut filled = (*plan).clone();
    filled.request.volume_content_source = Some(content_source);
    Ok(Arc::new(filled))
}

fn lookup_error(what: String, err: &kube::Error) -> PlanError {
    PlanError::Source(SourceError::Lookup {
        what,
        error: error_text(err),
    })
}

fn is_status(err: &kube::Error, code: u16) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == code)
}

async fn check_grant<D>(
    ctx: &Context<D>,
    claim: &PersistentVolumeClaim,
    source: &SourceRef,
) -> Result<(), PlanError> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &source.namespace, &grant_resource());
    let grants = match api.list(&ListParams::default()).await {
        Ok(list) => list.items.iter().map(GrantView::from_object).collect(),
        // No ReferenceGrant CRD installed: nothing grants anything.
        Err(err) if is_status(&err, 404) => Vec::new(),
        Err(err) => {
            return Err(lookup_error(
                format!("ReferenceGrants in namespace {}", source.namespace),
                &err,
            ));
        }
    };
    let claim_namespace = claim.metadata.namespace.as_deref().unwrap_or_default();
    if source::grant_allows(&grants, claim_namespace, source) {
        return Ok(());
    }
    Err(PlanError::Source(SourceError::NotGranted {
        kind: source.kind_name(),
        namespace: source.namespace.clone(),
        name: source.name.clone(),
        claim_namespace: claim_namespace.to_owned(),
        claim: claim.metadata.name.clone().unwrap_or_default(),
    }))
}

async fn clone_source<D>(
    ctx: &Context<D>,
    claim: &PersistentVolumeClaim,
    class_provisioner: &str,
    source: &SourceRef,
) -> Result<proto::csi::v1::VolumeContentSource, PlanError> {
    let source_claim = ctx.stores.claim(&source.namespace, &source.name);
    let pv_name = source_claim
        .as_ref()
        .and_then(|c| c.spec.as_ref())
        .and_then(|s| s.volume_name.clone())
        .filter(|n| !n.is_empty());
    // Upstream reads the source PV directly, not from the cache.
    let source_pv = match pv_name {
        Some(name) => {
            let api: Api<PersistentVolume> = Api::all(ctx.client.clone());
            api.get_opt(&name)
                .await
                .map_err(|err| lookup_error(format!("PersistentVolume {name}"), &err))?
        }
        None => None,
    };
    let content_source = source::decide_clone(
        source,
        &CloneInputs {
            claim,
            class_provisioner,
            source: source_claim.as_deref(),
            source_pv: source_pv.as_ref(),
        },
    )
    .map_err(PlanError::Source)?;
    if let Some(source_claim) = source_claim {
        add_claim_finalizer(ctx, &source_claim).await?;
    }
    Ok(content_source)
}

/// Adds the cloning-protection finalizer with an Update of the checked object.
async fn add_claim_finalizer<D>(
    ctx: &Context<D>,
    source: &PersistentVolumeClaim,
) -> Result<(), PlanError> {
    let finalizers = source.metadata.finalizers.clone().unwrap_or_default();
    if finalizers.iter().any(|f| f == CLONE_FINALIZER) {
        return Ok(());
    }
    let mut updated = source.clone();
    updated
        .metadata
        .finalizers
        .get_or_insert_with(Vec::new)
        .push(CLONE_FINALIZER.to_owned());
    let namespace = source.metadata.namespace.clone().unwrap_or_default();
    let name = source.metadata.name.clone().unwrap_or_default();
    let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &namespace);
    api.replace(&name, &PostParams::default(), &updated)
        .await
        .map_err(|err| {
            lookup_error(
                format!("(protect) PersistentVolumeClaim {namespace}/{name}"),
                &err,
            )
        })?;
    tracing::info!(source = %format_args!("{namespace}/{name}"), "added the cloning-protection finalizer");
    Ok(())
}

async fn snapshot_source<D>(
    ctx: &Context<D>,
    claim: &PersistentVolumeClaim,
    class_provisioner: &str,
    source: &SourceRef,
) -> Result<proto::csi::v1::VolumeContentSource, PlanError> {
    let snapshots: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &source.namespace, &snapshot_resource());
    let full = format!("{}/{}", source.namespace, source.name);
    let object = snapshots
        .get_opt(&source.name)
        .await
        .map_err(|err| lookup_error(format!("VolumeSnapshot {full}"), &err))?;
    let snapshot = object.as_ref().map(SnapshotView::from_object);
    let content = match snapshot.as_ref().and_then(|s| s.bound_content.clone()) {
        Some(name) if !name.is_empty() => {
            let contents: Api<DynamicObject> =
                Api::all_with(ctx.client.clone(), &content_resource());
            contents
                .get_opt(&name)
                .await
                .map_err(|err| lookup_error(format!("VolumeSnapshotContent {name}"), &err))?
                .as_ref()
                .map(ContentView::from_object)
        }
        _ => None,
    };
    let content_source = source::decide_snapshot(
        source,
        &SnapshotInputs {
            claim,
            class_provisioner,
            snapshot: snapshot.as_ref(),
            content: content.as_ref(),
            prevent_volume_mode_conversion: ctx.options.data_sources.prevent_volume_mode_conversion,
        },
    )
    .map_err(PlanError::Source)?;
    if let Some(mut object) = object
        && !has_finalizer(&object)
    {
        object
            .metadata
            .finalizers
            .get_or_insert_with(Vec::new)
            .push(SNAPSHOT_FINALIZER.to_owned());
        match snapshots
            .replace(&source.name, &PostParams::default(), &object)
            .await
        {
            Ok(_) => tracing::info!(snapshot = %full, "added the source-protection finalizer"),
            // Upstream tolerates RBAC without VolumeSnapshot update (older deployments).
            Err(err) if is_status(&err, 403) => {
                tracing::warn!(snapshot = %full, error = error_text(&err), "cannot protect the snapshot; restoring without its finalizer");
            }
            Err(err) => {
                return Err(lookup_error(
                    format!("(protect) VolumeSnapshot {full}"),
                    &err,
                ));
            }
        }
    }
    Ok(content_source)
}

fn has_finalizer(object: &DynamicObject) -> bool {
    object
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == SNAPSHOT_FINALIZER)
}

/// Removes our finalizer from `object` (Update); conflicts and the like are only logged, the
/// sweep retries.
async fn remove_snapshot_finalizer(api: &Api<DynamicObject>, mut object: DynamicObject) {
    let name = object.metadata.name.clone().unwrap_or_default();
    let namespace = object.metadata.namespace.clone().unwrap_or_default();
    if let Some(finalizers) = object.metadata.finalizers.as_mut() {
        finalizers.retain(|f| f != SNAPSHOT_FINALIZER);
    }
    // An Update must name its kind; list items of some servers (and of typed lists) lack it.
    let resource = snapshot_resource();
    object.types = Some(kube::core::TypeMeta {
        api_version: resource.api_version,
        kind: resource.kind,
    });
    match api.replace(&name, &PostParams::default(), &object).await {
        Ok(_) => {
            tracing::info!(snapshot = %format_args!("{namespace}/{name}"), "removed the source-protection finalizer");
        }
        Err(err) => {
            tracing::warn!(snapshot = %format_args!("{namespace}/{name}"), error = error_text(&err), "cannot remove the source-protection finalizer; the sweep retries");
        }
    }
}

/// Whether `claim` already has its PV: bound to one (`spec.volumeName`), or ours is saved or
/// waiting to be saved (`known(pv_name)`). Such a claim no longer reads its source, even while
/// it stays Pending until the PV binder catches up.
fn has_volume(
    claim: &PersistentVolumeClaim,
    pv_name: Option<&str>,
    known: impl Fn(&str) -> bool,
) -> bool {
    let bound = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    bound || pv_name.is_some_and(known)
}

/// The claims that may still restore from a snapshot after claim `claim_uid` is done with it:
/// every other claim without a PV. Counting claims whose PV exists would let two restores that
/// finish within the binder's lag each keep the finalizer for the other, leaving it to the sweep
/// (or for ever with `--snapshot-orphan-sweep-interval=0`).
fn restoring_claims<'a>(
    claims: &'a [PersistentVolumeClaim],
    claim_uid: &'a str,
    has_volume: impl Fn(&PersistentVolumeClaim) -> bool + 'a,
) -> impl Iterator<Item = &'a PersistentVolumeClaim> {
    claims
        .iter()
        .filter(move |c| c.metadata.uid.as_deref() != Some(claim_uid))
        .filter(move |c| !has_volume(c))
}

/// The sources of the creates in progress but claim `claim_uid`'s.
fn other_creates<'a>(
    in_flight: &'a [(String, SourceRef)],
    claim_uid: &'a str,
) -> impl Iterator<Item = &'a SourceRef> {
    in_flight
        .iter()
        .filter(move |(uid, _)| uid != claim_uid)
        .map(|(_, source)| source)
}

/// After claim `claim_uid` is done with its snapshot (its PV is built, or it was deleted and its
/// volume creation finished): unprotect the snapshot unless another claim restores from it.
pub(crate) async fn release_snapshot<D>(ctx: &Context<D>, claim_uid: &str, plan: &ProvisionPlan) {
    let Some(source) = plan
        .source
        .as_ref()
        .filter(|s| s.kind == SourceKind::Snapshot)
    else {
        return;
    };
    let claims = ctx.stores.claims_with_data_source();
    let options = &ctx.options;
    let claim_has_volume = |claim: &PersistentVolumeClaim| {
        let pv_name = claim.metadata.uid.as_deref().and_then(|uid| {
            volume_name(
                &options.volume_name_prefix,
                uid,
                options.volume_name_uuid_length,
            )
            .ok()
        });
        has_volume(claim, pv_name.as_deref(), |name| {
            ctx.stores.volume(name).is_some() || ctx.unsaved.contains(name)
        })
    };
    let in_flight = ctx.in_progress.sources();
    if source::still_needed(
        SourceKind::Snapshot,
        &source.namespace,
        &source.name,
        restoring_claims(&claims, claim_uid, claim_has_volume),
        other_creates(&in_flight, claim_uid),
    ) {
        return;
    }
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &source.namespace, &snapshot_resource());
    match api.get_opt(&source.name).await {
        Ok(Some(object)) if has_finalizer(&object) => remove_snapshot_finalizer(&api, object).await,
        Ok(_) => {}
        Err(err) => {
            tracing::warn!(snapshot = %format_args!("{}/{}", source.namespace, source.name), error = error_text(&err), "cannot read the snapshot to unprotect it; the sweep retries");
        }
    }
}

/// Queues what the clone-protection controller must look at after `claim` changed: the claim
/// itself when it is a protected source being deleted, and its own clone source when it no
/// longer needs it (bound, deleted), so a waiting source is released at once.
pub(crate) fn claim_changed(
    queue: &WorkQueue<SourceKey>,
    claim: &PersistentVolumeClaim,
    deleted: bool,
) {
    let namespace = claim.metadata.namespace.clone().unwrap_or_default();
    let protected = claim
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == CLONE_FINALIZER);
    if protected
        && claim.metadata.deletion_timestamp.is_some()
        && let Some(name) = &claim.metadata.name
    {
        queue.add((namespace.clone(), name.clone()));
    }
    let pending = matches!(
        claim.status.as_ref().and_then(|s| s.phase.as_deref()),
        None | Some("" | "Pending")
    );
    // The source as provisioning reads it: `dataSourceRef` may name another namespace.
    if (deleted || !pending || claim.metadata.deletion_timestamp.is_some())
        && let Ok(Some(source)) = source::reference(claim, true)
        && source.kind == SourceKind::Clone
    {
        queue.add((source.namespace, source.name));
    }
}

/// One clone-protection work item: remove the finalizer of a source claim being deleted once
/// no Pending claim clones it and no create from it is in progress; otherwise retry with backoff.
pub(crate) async fn sync_clone_source<D>(ctx: &Context<D>, key: &SourceKey) -> Outcome {
    let (namespace, name) = key;
    let Some(claim) = ctx.stores.claim(namespace, name) else {
        return Outcome::Done;
    };
    let protected = claim
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == CLONE_FINALIZER);
    if !protected || claim.metadata.deletion_timestamp.is_none() {
        return Outcome::Done;
    }
    let claims = ctx.stores.claims_with_data_source();
    let in_flight = ctx.in_progress.sources();
    if source::still_needed(
        SourceKind::Clone,
        namespace,
        name,
        claims.iter(),
        in_flight.iter().map(|(_, from)| from),
    ) {
        return Outcome::Retry;
    }
    let mut updated = (*claim).clone();
    if let Some(finalizers) = updated.metadata.finalizers.as_mut() {
        finalizers.retain(|f| f != CLONE_FINALIZER);
    }
    let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), namespace);
    match api.replace(name, &PostParams::default(), &updated).await {
        Ok(_) => {
            tracing::info!(source = %format_args!("{namespace}/{name}"), "removed the cloning-protection finalizer");
            Outcome::Done
        }
        Err(err) if is_status(&err, 404) => Outcome::Done,
        Err(err) => {
            tracing::warn!(source = %format_args!("{namespace}/{name}"), error = error_text(&err), "cannot remove the cloning-protection finalizer");
            Outcome::Retry
        }
    }
}

/// The snapshot sweep: runs until aborted.
pub(crate) async fn sweep_snapshots<D>(ctx: Arc<Context<D>>, interval: Duration) {
    let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &snapshot_resource());
    loop {
        tokio::time::sleep(interval).await;
        let snapshots = match api.list(&ListParams::default()).await {
            Ok(list) => list.items,
            Err(err) => {
                tracing::warn!(
                    error = error_text(&err),
                    "snapshot sweep: cannot list VolumeSnapshots"
                );
                continue;
            }
        };
        let claims = ctx.stores.claims_with_data_source();
        let in_flight = ctx.in_progress.sources();
        for object in snapshots.into_iter().filter(has_finalizer) {
            let namespace = object.metadata.namespace.clone().unwrap_or_default();
            let name = object.metadata.name.clone().unwrap_or_default();
            if source::still_needed(
                SourceKind::Snapshot,
                &namespace,
                &name,
                claims.iter(),
                in_flight.iter().map(|(_, from)| from),
            ) {
                continue;
            }
            let namespaced: Api<DynamicObject> =
                Api::namespaced_with(ctx.client.clone(), &namespace, &snapshot_resource());
            remove_snapshot_finalizer(&namespaced, object).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use csi_common::workqueue::metrics::QueueMetrics;
    use k8s_openapi::api::core::v1::{
        PersistentVolumeClaimSpec, PersistentVolumeClaimStatus, TypedLocalObjectReference,
        TypedObjectReference,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    use super::*;
    use crate::source::PVC_KIND;

    fn claim(name: &str, phase: &str, clones: Option<&str>) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                data_source: clones.map(|source| TypedLocalObjectReference {
                    api_group: None,
                    kind: PVC_KIND.into(),
                    name: source.into(),
                }),
                ..PersistentVolumeClaimSpec::default()
            }),
            status: Some(PersistentVolumeClaimStatus {
                phase: Some(phase.into()),
                ..PersistentVolumeClaimStatus::default()
            }),
        }
    }

    fn deleting(mut claim: PersistentVolumeClaim, finalizer: &str) -> PersistentVolumeClaim {
        claim.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        claim.metadata.finalizers = Some(vec![finalizer.into()]);
        claim
    }

    /// `claim` cloning `namespace/name` through `dataSourceRef` (no `dataSource`: the API server
    /// copies only same-namespace references).
    fn cross_namespace(
        mut claim: PersistentVolumeClaim,
        namespace: &str,
        name: &str,
    ) -> PersistentVolumeClaim {
        claim.spec.as_mut().unwrap().data_source_ref = Some(TypedObjectReference {
            api_group: None,
            kind: PVC_KIND.into(),
            name: name.into(),
            namespace: Some(namespace.into()),
        });
        claim
    }

    #[tokio::test]
    async fn claim_changes_queue_the_sources_that_may_be_released() {
        let cases: Vec<(&str, PersistentVolumeClaim, bool, Vec<&str>)> = vec![
            (
                "protected source being deleted",
                deleting(claim("src", "Bound", None), CLONE_FINALIZER),
                false,
                vec!["ns/src"],
            ),
            (
                "deleted without our finalizer",
                deleting(claim("src", "Bound", None), "other/finalizer"),
                false,
                vec![],
            ),
            (
                "clone bound",
                claim("copy", "Bound", Some("src")),
                false,
                vec!["ns/src"],
            ),
            (
                "clone pending",
                claim("copy", "Pending", Some("src")),
                false,
                vec![],
            ),
            (
                "pending clone deleted",
                claim("copy", "Pending", Some("src")),
                true,
                vec!["ns/src"],
            ),
            (
                "plain claim bound",
                claim("plain", "Bound", None),
                false,
                vec![],
            ),
            (
                "cross-namespace clone bound",
                cross_namespace(claim("copy", "Bound", None), "other", "src"),
                false,
                vec!["other/src"],
            ),
            (
                "pending cross-namespace clone deleted",
                cross_namespace(claim("copy", "Pending", None), "other", "src"),
                true,
                vec!["other/src"],
            ),
        ];
        for (name, changed, deleted, want) in cases {
            let (queue, _delays) = WorkQueue::<SourceKey>::new(
                Duration::from_millis(1),
                Duration::from_millis(2),
                QueueMetrics::unregistered("cloning-protection"),
            );
            claim_changed(&queue, &changed, deleted);
            let mut got = Vec::new();
            while !queue.is_empty() {
                let key = queue.get().await.unwrap();
                queue.done(&key);
                got.push(format!("{}/{}", key.0, key.1));
            }
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn claims_that_have_their_volume_do_not_hold_a_snapshot_for_another_restore() {
        let restore = |uid: &str, volume_name: Option<&str>| {
            let mut claim = claim(uid, "Pending", None);
            claim.metadata.uid = Some(uid.into());
            let spec = claim.spec.as_mut().unwrap();
            spec.data_source = Some(TypedLocalObjectReference {
                api_group: Some(source::SNAPSHOT_API_GROUP.into()),
                kind: source::SNAPSHOT_KIND.into(),
                name: "snap".into(),
            });
            spec.volume_name = volume_name.map(Into::into);
            claim
        };
        // The PVs the provisioner knows of (saved or waiting to be saved), by claim uid.
        let known = |claim: &PersistentVolumeClaim| {
            let pv = claim
                .metadata
                .uid
                .as_deref()
                .map(|uid| format!("pvc-{uid}"));
            has_volume(claim, pv.as_deref(), |name| name == "pvc-saved")
        };
        let cases = [
            (
                "another restore without a volume",
                restore("other", None),
                true,
            ),
            (
                "another restore whose PV is saved",
                restore("saved", None),
                false,
            ),
            (
                "another restore bound to a PV",
                restore("other", Some("pv-1")),
                false,
            ),
            ("the claim itself", restore("self", None), false),
        ];
        for (name, other, want) in cases {
            let claims = [restore("self", None), other];
            let needed = source::still_needed(
                SourceKind::Snapshot,
                "ns",
                "snap",
                restoring_claims(&claims, "self", known),
                [],
            );
            assert_eq!(needed, want, "{name}");
        }
    }

    #[test]
    fn the_slow_retry_is_a_tenth_of_the_maximum_backoff_within_the_flags() {
        let retry = |start, max| RetrySettings {
            start: Duration::from_millis(start),
            max: Duration::from_millis(max),
        };
        let cases = [
            (retry(1_000, 300_000), Duration::from_secs(30)),
            (retry(40, 400), Duration::from_millis(40)),
            (retry(5_000, 20_000), Duration::from_secs(5)),
        ];
        for (settings, want) in cases {
            assert_eq!(slow_retry(settings), want, "{settings:?}");
        }
    }
}
