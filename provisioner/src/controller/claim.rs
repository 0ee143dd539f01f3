//! The claim controller: one `claims` work item = one provisioning attempt for one claim UID
//! (sig-storage-lib-external-provisioner `syncClaim` + `provisionClaimOperation`, and
//! external-provisioner `Provision`).
//!
//! An attempt: decide whether the claim is ours and ready ([`decide_claim`]); skip it while an
//! InvalidArgument refusal is fresh; stop if its PV exists already; emit `Provisioning`; plan
//! the request (or reuse the plan of an attempt still in progress); fetch the provisioner
//! secret; CreateVolume; then either save the PV or classify the failure into the state model
//! of spec §4.7 and requeue with the per-claim exponential backoff.
//!
//! A claim that is gone from the cache but still [`in progress`](super::in_progress) is
//! finished from its stored plan and its volume deleted (`sync_gone`).

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Api;
use kube::api::PostParams;
use proto::csi::v1::{CreateVolumeResponse, DeleteVolumeRequest};
use tokio::time::Instant;
use tonic::Code;

use crate::annotations::{ANN_ALPHA_SELECTED_NODE, ANN_SELECTED_NODE, claim_class_name};
use crate::csi::VolumeDriver;
use crate::decide::{ClaimStep, decide_claim};
use crate::naming::volume_name;
use crate::plan_error::{POPULATOR_EVENT_MESSAGE, PlanError, ProvisioningState};
use crate::pv::{BuildPvError, build_pv};
use crate::request::{ProvisionInputs, ProvisionPlan, plan_provision};
use crate::topology::TopologyView;
use crate::vac::VacError;
use csi_common::controller::Outcome;
use csi_common::events::{EventType, reference};
use csi_common::secrets;
use csi_common::status::CsiError;

use super::after_create::{self, AfterCreate, GoneCreate, after_create, after_gone_create};
use super::in_progress::Entry;
use super::protection;
use super::save::{self, PendingVolume};
use super::stores::TopologyStores;
use super::{ClaimKey, Context};

/// How many DeleteVolume attempts clean up a volume that came back unusable (upstream: 5 within
/// one `--timeout`).
const CLEANUP_ATTEMPTS: u32 = 5;

/// One attempt for `key`: the cached claim if it still exists (same UID), else the stored copy
/// of a claim in progress.
pub(crate) async fn sync<D: VolumeDriver>(ctx: &Context<D>, key: &ClaimKey) -> Outcome {
    match live_claim(ctx, key) {
        Some(claim) => sync_claim(ctx, key, claim).await,
        None => sync_gone(ctx, key).await,
    }
}

/// [`super::stores::Stores::live_claim`].
fn live_claim<D>(ctx: &Context<D>, key: &ClaimKey) -> Option<Arc<PersistentVolumeClaim>> {
    ctx.stores.live_claim(key)
}

/// Labels of the provision metrics: class name and `spec.dataSource.kind`.
fn metric_labels(claim: &PersistentVolumeClaim) -> (String, String) {
    let source = claim
        .spec
        .as_ref()
        .and_then(|s| s.data_source.as_ref())
        .map(|d| d.kind.clone())
        .unwrap_or_default();
    (claim_class_name(claim), source)
}

async fn sync_claim<D: VolumeDriver>(
    ctx: &Context<D>,
    key: &ClaimKey,
    claim: Arc<PersistentVolumeClaim>,
) -> Outcome {
    let class_name = claim_class_name(&claim);
    let class = ctx.stores.class(&class_name);
    let selected_node = match decide_claim(&ctx.options.driver_name, &claim, class.as_deref()) {
        ClaimStep::Ignore => {
            // Bound (possibly by another replica that finished our create) or not ours.
            ctx.in_progress.remove(&key.uid);
            ctx.infeasible.forget(&key.uid);
            return Outcome::Done;
        }
        ClaimStep::WaitForSelectedNode => return Outcome::Done,
        ClaimStep::Fail(err) => {
            let attempt = Attempt::new(ctx, key, &claim);
            return attempt.plan_failed(err).await;
        }
        ClaimStep::Provision { selected_node } => selected_node,
    };
    // decide_claim only provisions with a class; node deployment then decides whose it is.
    let class = match crate::node::owner::check(ctx, key, &claim, class).await {
        Ok(class) => class,
        Err(outcome) => return outcome,
    };

    let class_uid = class.metadata.uid.clone().unwrap_or_default();
    if let Some(wait) = ctx.infeasible.remaining(&key.uid, &class_uid) {
        // Upstream: "recently infeasible", no CSI call until the window has passed.
        return Outcome::RetryAfter(wait);
    }

    let attempt = Attempt::new(ctx, key, &claim);
    let pv_name = match volume_name(
        &ctx.options.volume_name_prefix,
        &key.uid,
        ctx.options.volume_name_uuid_length,
    ) {
        Ok(name) => name,
        Err(err) => return attempt.plan_failed(err).await,
    };
    if ctx.stores.volume(&pv_name).is_some() || ctx.unsaved.contains(&pv_name) {
        // The lib's existence short-cut: the PV exists (or is being saved, or was saved by us and
        // the informer has not shown it yet), nothing to create.
        ctx.in_progress.remove(&key.uid);
        return Outcome::Done;
    }

    ctx.recorder.event(
        &attempt.reference,
        EventType::Normal,
        "Provisioning",
        format!(
            "External provisioner is provisioning volume for claim \"{}/{}\"",
            key.namespace, key.name
        ),
    );

    let planned_claim = claim_for_plan(ctx, &claim);
    let plan = match plan_for(ctx, key, &planned_claim, &class, selected_node.as_deref()).await {
        Ok(plan) => plan,
        Err(failure) => return attempt.no_plan(failure).await,
    };
    for warning in &plan.warnings {
        tracing::warn!(claim = %attempt.name(), "{warning}");
    }

    let mut request = plan.request.clone();
    if let Some(secret) = &plan.provisioner_secret {
        match secrets::fetch(&ctx.client, secret).await {
            Ok(data) => request.secrets = data,
            Err(err) => {
                let message = csi_common::logging::error_chain(&err);
                return attempt.failed(&message, ProvisioningState::NoChange).await;
            }
        }
    }

    // Registered before the call, so a deletion while it runs finds the claim in progress.
    ctx.in_progress.insert(
        &key.uid,
        Entry {
            plan: Arc::clone(&plan),
            volume_id: None,
        },
    );
    let result = ctx.driver.create_volume(request).await;

    let now = after_create::Claim {
        live: live_claim(ctx, key).is_some(),
        may_reschedule: ctx.settings.topology && selected_node.is_some(),
    };
    match after_create(result.as_ref(), now) {
        AfterCreate::Save(response) => {
            let inputs = ProvisionInputs {
                pvc: &planned_claim,
                class: &class,
                selected_node: selected_node.as_deref(),
                topology: TopologyView {
                    nodes: &[],
                    csinodes: &[],
                },
                cached_requirement: plan.topology.as_ref(),
            };
            attempt.created(&inputs, &plan, response).await
        }
        AfterCreate::Infeasible { message } => attempt.infeasible(&message).await,
        AfterCreate::Failed { message, state } => attempt.failed(&message, state).await,
        AfterCreate::Gone(gone) => finish_gone(ctx, key, &plan, gone).await,
    }
}

/// The claim went away while its CreateVolume ran: delete what was created, keep trying while
/// the driver may still be creating, or stop when nothing was created.
async fn finish_gone<D: VolumeDriver>(
    ctx: &Context<D>,
    key: &ClaimKey,
    plan: &ProvisionPlan,
    gone: GoneCreate<'_>,
) -> Outcome {
    match gone {
        GoneCreate::Created(response) => {
            if remember_volume(ctx, key, response).is_some() {
                sync_gone(ctx, key).await
            } else {
                protection::release_snapshot(ctx, &key.uid, plan).await;
                Outcome::Done
            }
        }
        GoneCreate::StillCreating(err) => still_creating(key, err),
        GoneCreate::NothingCreated(err) => nothing_created(ctx, key, plan, err).await,
    }
}

/// Why an attempt has no plan.
enum PlanFailure {
    /// The claim, its class or the topology.
    Plan(PlanError),
    /// The claim's VolumeAttributesClass.
    Class(VacError),
}

/// The plan of this attempt: the stored one while the claim is in progress (the driver may
/// still be creating the volume, so the very same request is repeated), else a fresh one
/// with its clone or snapshot source looked up and protected and the VolumeAttributesClass's
/// parameters.
async fn plan_for<D>(
    ctx: &Context<D>,
    key: &ClaimKey,
    claim: &PersistentVolumeClaim,
    class: &StorageClass,
    selected_node: Option<&str>,
) -> Result<Arc<ProvisionPlan>, PlanFailure> {
    if let Some(entry) = ctx.in_progress.get(&key.uid) {
        return Ok(entry.plan);
    }
    let plan = fresh_plan(ctx, claim, class, selected_node).map_err(PlanFailure::Plan)?;
    // The class first: it has no side effects, while looking the source up protects it.
    let plan = crate::vac::with_class(&ctx.client, &ctx.options.driver_name, claim, plan)
        .await
        .map_err(PlanFailure::Class)?;
    protection::with_content_source(ctx, claim, &class.provisioner, plan)
        .await
        .map_err(PlanFailure::Plan)
}

/// A new plan from the cached objects (node deployment: from this node's stand-ins).
fn fresh_plan<D>(
    ctx: &Context<D>,
    claim: &PersistentVolumeClaim,
    class: &StorageClass,
    selected_node: Option<&str>,
) -> Result<Arc<ProvisionPlan>, PlanError> {
    let snapshot = ctx.stores.topology.as_ref().map(TopologyStores::snapshot);
    let topology = match (&ctx.node, snapshot.as_deref()) {
        (Some(node), _) => node.topology_view(),
        (None, Some(s)) => TopologyView {
            nodes: &s.nodes,
            csinodes: &s.csinodes,
        },
        (None, None) => TopologyView {
            nodes: &[],
            csinodes: &[],
        },
    };
    let inputs = ProvisionInputs {
        pvc: claim,
        class,
        selected_node,
        topology,
        cached_requirement: None,
    };
    plan_provision(&ctx.options, &inputs).map(Arc::new)
}

/// With `--feature-gates=VolumeAttributesClass=false` upstream ignores the claim's class name;
/// planning sees the claim without it.
fn claim_for_plan<D>(
    ctx: &Context<D>,
    claim: &Arc<PersistentVolumeClaim>,
) -> Arc<PersistentVolumeClaim> {
    let has_vac = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_attributes_class_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    if has_vac && ctx.settings.vac_gate == Some(false) {
        let mut copy = (**claim).clone();
        if let Some(spec) = copy.spec.as_mut() {
            spec.volume_attributes_class_name = None;
        }
        return Arc::new(copy);
    }
    Arc::clone(claim)
}

/// Records the volume a create for a gone claim made; `None` (and the claim forgotten) when the
/// driver answered without one, so there is nothing to delete.
fn remember_volume<D>(
    ctx: &Context<D>,
    key: &ClaimKey,
    response: &CreateVolumeResponse,
) -> Option<String> {
    if let Some(volume) = &response.volume
        && !volume.volume_id.is_empty()
    {
        ctx.in_progress
            .set_volume(&key.uid, volume.volume_id.clone());
        Some(volume.volume_id.clone())
    } else {
        ctx.in_progress.remove(&key.uid);
        None
    }
}

/// A claim that is gone from the cache (deleted, being deleted, or re-created under a new UID).
///
/// Beyond upstream (#486, #1469): if it was in progress, the create it started is driven to a
/// definite answer with the same request, and a volume that exists is deleted, so deleting a
/// claim never leaks a volume.
async fn sync_gone<D: VolumeDriver>(ctx: &Context<D>, key: &ClaimKey) -> Outcome {
    ctx.infeasible.forget(&key.uid);
    if let Some(node) = &ctx.node {
        node.claim_gone(&key.uid);
    }
    let Some(entry) = ctx.in_progress.get(&key.uid) else {
        return Outcome::Done;
    };
    let claim = format!("{}/{}", key.namespace, key.name);
    let secrets = match &entry.plan.provisioner_secret {
        Some(secret) => match secrets::fetch(&ctx.client, secret).await {
            Ok(data) => data,
            Err(err) => {
                // The secret may have gone with the claim's namespace; try without it.
                tracing::warn!(%claim, error = csi_common::logging::error_chain(&err), "cleaning up without provisioner secret");
                HashMap::default()
            }
        },
        None => HashMap::default(),
    };
    let volume_id = if let Some(volume_id) = entry.volume_id {
        volume_id
    } else {
        tracing::info!(%claim, volume = %entry.plan.pv_name, "claim deleted while its volume was being created; finishing CreateVolume to clean up");
        let mut request = entry.plan.request.clone();
        request.secrets.clone_from(&secrets);
        let result = ctx.driver.create_volume(request).await;
        match after_gone_create(result.as_ref()) {
            GoneCreate::Created(response) => {
                let Some(volume_id) = remember_volume(ctx, key, response) else {
                    // The driver answered without a volume: nothing to delete.
                    protection::release_snapshot(ctx, &key.uid, &entry.plan).await;
                    return Outcome::Done;
                };
                volume_id
            }
            GoneCreate::StillCreating(err) => return still_creating(key, err),
            GoneCreate::NothingCreated(err) => {
                return nothing_created(ctx, key, &entry.plan, err).await;
            }
        }
    };
    let request = DeleteVolumeRequest {
        volume_id: volume_id.clone(),
        secrets,
    };
    // A volume this provisioner just made: a CSI volume, never a translation.
    match ctx.driver.delete_volume(request, false).await {
        Ok(()) => {
            tracing::info!(%claim, volume_id, "deleted the volume of a claim deleted during provisioning");
            ctx.in_progress.remove(&key.uid);
            // Nothing is restored from the snapshot any more for this claim.
            protection::release_snapshot(ctx, &key.uid, &entry.plan).await;
            Outcome::Done
        }
        Err(err) => {
            tracing::warn!(%claim, volume_id, error = %err, "cannot delete the volume of a deleted claim, retrying");
            Outcome::Retry
        }
    }
}

/// CreateVolume for a claim that is gone may still be running on the driver: keep trying.
fn still_creating(key: &ClaimKey, err: &CsiError) -> Outcome {
    tracing::info!(claim = %format_args!("{}/{}", key.namespace, key.name), error = %err, "CreateVolume for a deleted claim still in progress");
    Outcome::Retry
}

/// CreateVolume for a claim that is gone failed finally: no volume exists, and the snapshot it
/// was restoring from is no longer needed for it.
async fn nothing_created<D>(
    ctx: &Context<D>,
    key: &ClaimKey,
    plan: &ProvisionPlan,
    err: &CsiError,
) -> Outcome {
    tracing::info!(claim = %format_args!("{}/{}", key.namespace, key.name), error = %err, "CreateVolume for a deleted claim failed finally; nothing to clean up");
    ctx.in_progress.remove(&key.uid);
    protection::release_snapshot(ctx, &key.uid, plan).await;
    Outcome::Done
}

/// One provisioning attempt of a live claim: where failures are reported.
struct Attempt<'a, D> {
    ctx: &'a Context<D>,
    key: &'a ClaimKey,
    claim: &'a Arc<PersistentVolumeClaim>,
    reference: k8s_openapi::api::core::v1::ObjectReference,
    /// Whether the claim was in progress before this attempt (NoChange keeps that).
    was_in_progress: bool,
    started: Instant,
}

impl<'a, D: VolumeDriver> Attempt<'a, D> {
    fn new(ctx: &'a Context<D>, key: &'a ClaimKey, claim: &'a Arc<PersistentVolumeClaim>) -> Self {
        Self {
            ctx,
            key,
            claim,
            reference: reference(&**claim),
            was_in_progress: ctx.in_progress.contains(&key.uid),
            started: Instant::now(),
        }
    }

    fn name(&self) -> String {
        format!("{}/{}", self.key.namespace, self.key.name)
    }

    /// No plan for this attempt.
    async fn no_plan(&self, failure: PlanFailure) -> Outcome {
        match failure {
            PlanFailure::Plan(err) => self.plan_failed(err).await,
            PlanFailure::Class(err) => self.failed(&err.to_string(), err.state()).await,
        }
    }

    /// A planning failure (before any CSI call).
    async fn plan_failed(&self, err: PlanError) -> Outcome {
        if err.is_ignored() {
            if matches!(err, PlanError::ExternalPopulator { .. }) {
                self.ctx.recorder.event(
                    &self.reference,
                    EventType::Normal,
                    "Provisioning",
                    POPULATOR_EVENT_MESSAGE,
                );
            }
            return Outcome::Done;
        }
        let message = err.event_message();
        if !err.emits_event() {
            // The lib logs these and retries without an Event (e.g. the class does not exist).
            tracing::info!(claim = %self.name(), error = %message, "cannot provision claim yet");
            let (class, source) = metric_labels(self.claim);
            self.ctx.metrics.provision_failed(&class, &source);
            return self.settle(err.state()).await;
        }
        let outcome = self.failed(&message, err.state()).await;
        if err.retries_slowly() {
            return Outcome::RetryAfter(protection::slow_retry(self.ctx.settings.retry));
        }
        outcome
    }

    /// A failure with `state`: Warning Event, metric, state transition, backoff.
    async fn failed(&self, message: &str, state: ProvisioningState) -> Outcome {
        tracing::warn!(claim = %self.name(), error = message, ?state, "provisioning failed");
        self.ctx.recorder.event(
            &self.reference,
            EventType::Warning,
            "ProvisioningFailed",
            message,
        );
        let (class, source) = metric_labels(self.claim);
        self.ctx.metrics.provision_failed(&class, &source);
        self.settle(state).await
    }

    /// Applies the state model (spec §4.7) and asks for a retry.
    async fn settle(&self, state: ProvisioningState) -> Outcome {
        match state {
            ProvisioningState::Finished => {
                self.ctx.in_progress.remove(&self.key.uid);
            }
            ProvisioningState::InBackground => {}
            ProvisioningState::NoChange => {
                if !self.was_in_progress {
                    self.ctx.in_progress.remove(&self.key.uid);
                }
            }
            ProvisioningState::Reschedule => {
                self.ctx.in_progress.remove(&self.key.uid);
                self.reschedule().await;
            }
        }
        Outcome::Retry
    }

    /// Removes the selected-node annotation so the scheduler picks another node (upstream: a
    /// full Update of the claim). A failed update is only logged: the claim is retried anyway.
    async fn reschedule(&self) {
        let Some(current) = live_claim(self.ctx, self.key) else {
            return;
        };
        let has_node = current.metadata.annotations.as_ref().is_some_and(|a| {
            a.contains_key(ANN_SELECTED_NODE) || a.contains_key(ANN_ALPHA_SELECTED_NODE)
        });
        if !has_node {
            return;
        }
        let mut updated = (*current).clone();
        if let Some(annotations) = updated.metadata.annotations.as_mut() {
            annotations.remove(ANN_SELECTED_NODE);
            annotations.remove(ANN_ALPHA_SELECTED_NODE);
        }
        let api: Api<PersistentVolumeClaim> =
            Api::namespaced(self.ctx.client.clone(), &self.key.namespace);
        match api
            .replace(&self.key.name, &PostParams::default(), &updated)
            .await
        {
            Ok(_) => {
                tracing::info!(claim = %self.name(), "removed the selected node so the claim is rescheduled");
            }
            Err(err) => {
                tracing::warn!(claim = %self.name(), error = csi_common::kube_client::error_text(&err), "cannot remove the selected node annotation");
            }
        }
    }

    /// CreateVolume succeeded: save the PV, or clean up a volume that cannot be used.
    async fn created(
        &self,
        inputs: &ProvisionInputs<'_>,
        plan: &ProvisionPlan,
        response: &CreateVolumeResponse,
    ) -> Outcome {
        match build_pv(&self.ctx.options, inputs, plan, response) {
            Ok(volume) => {
                self.ctx.in_progress.remove(&self.key.uid);
                self.ctx.infeasible.forget(&self.key.uid);
                let (class, source) = metric_labels(self.claim);
                save::store(
                    self.ctx,
                    PendingVolume {
                        volume,
                        claim: self.reference.clone(),
                        class,
                        source,
                        started: self.started,
                    },
                )
                .await;
                protection::release_snapshot(self.ctx, &self.key.uid, plan).await;
                Outcome::Done
            }
            Err(err) => self.unusable_volume(&err, plan).await,
        }
    }

    /// CreateVolume refused the claim as infeasible ([`AfterCreate::Infeasible`]): no CSI call
    /// for this claim and class until the slow retry.
    async fn infeasible(&self, message: &str) -> Outcome {
        let class_uid = self
            .ctx
            .stores
            .class(&claim_class_name(self.claim))
            .and_then(|c| c.metadata.uid.clone())
            .unwrap_or_default();
        self.ctx.infeasible.refuse(&self.key.uid, &class_uid);
        self.failed(message, ProvisioningState::Finished).await;
        Outcome::RetryAfter(self.ctx.settings.retry.max)
    }

    /// CreateVolume succeeded but the volume cannot be used: delete it and try again
    /// (InBackground, spec §4.5).
    async fn unusable_volume(&self, err: &BuildPvError, plan: &ProvisionPlan) -> Outcome {
        let mut message = err.to_string();
        if let Some(volume_id) = err.cleanup_volume_id()
            && let Err(cleanup) = self.cleanup(volume_id, plan).await
        {
            message = err.with_cleanup_failure(&plan.pv_name, &cleanup.to_string());
        }
        self.failed(&message, err.state()).await
    }

    /// DeleteVolume with the provisioner secret, a few times within one `--timeout`.
    async fn cleanup(&self, volume_id: &str, plan: &ProvisionPlan) -> Result<(), CsiError> {
        let secrets = match &plan.provisioner_secret {
            Some(secret) => secrets::fetch(&self.ctx.client, secret)
                .await
                .unwrap_or_default(),
            None => HashMap::default(),
        };
        let deadline = Instant::now() + self.ctx.settings.timeout;
        let mut last = CsiError::status(Code::DeadlineExceeded, "cleanup did not finish in time");
        for _ in 0..CLEANUP_ATTEMPTS {
            if Instant::now() >= deadline {
                break;
            }
            let request = DeleteVolumeRequest {
                volume_id: volume_id.to_owned(),
                secrets: secrets.clone(),
            };
            match self.ctx.driver.delete_volume(request, false).await {
                Ok(()) => return Ok(()),
                Err(err) => last = err,
            }
        }
        Err(last)
    }
}
