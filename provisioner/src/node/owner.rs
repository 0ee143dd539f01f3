//! Carries out node deployment's claim decisions inside the claim controller: provision a claim
//! of this node, leave other nodes' claims alone, and race for Immediate claims (upstream
//! `checkNode` and `becomeOwner`).
//!
//! The race: wait a jittered per-claim delay ([`decide::claim_delay`], growing with every
//! lost attempt); give up at once when the informer shows another node took the claim; check
//! GetCapacity (no room: do not claim; a failing check still claims, so provisioning reports
//! the problem as an Event, as upstream); then a full Update of the cached claim with
//! selected-node set to this node. The claim's resourceVersion makes one instance win; a
//! conflict means another writer was first, and the next attempt waits longer. Upstream sleeps
//! in a claims worker meanwhile and polls the cache every `max(base/100, 10ms)`; here the wait
//! is a delayed requeue, so no worker is held, and the informer's update of the claim ends the
//! wait of the losers at once (the claim is queued on every change).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use csi_common::controller::Outcome;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Api;
use kube::api::PostParams;
use proto::csi::v1::GetCapacityRequest;
use tokio::time::Instant;

use super::NodeDeployment;
use super::decide::{self, Ownership};
use crate::annotations::ANN_SELECTED_NODE;
use crate::controller::{ClaimKey, Context};
use crate::request::{ProvisionInputs, plan_provision, requested_bytes};
use crate::topology::{RequirementInputs, accessibility_requirements};

/// The per-claim state of the race (upstream: the jittered rate limiter's failure count).
#[derive(Debug, Default)]
pub(crate) struct Races(Mutex<HashMap<String, Race>>);

/// One claim's race.
#[derive(Debug, Default, Clone, Copy)]
struct Race {
    /// Attempts so far: the next wait is `base * 2^attempts` (capped).
    attempts: u32,
    /// When the current wait ends; `None` between waits.
    due: Option<Instant>,
}

/// Where a wait stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Try to claim now.
    Over,
    /// Come back after this long.
    Pending(std::time::Duration),
}

impl Races {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Race>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts the next wait of `uid`'s race, or says whether the current one is over.
    fn wait(&self, uid: &str, node: &NodeDeployment, now: Instant) -> Wait {
        let mut map = self.map();
        let race = map.entry(uid.to_owned()).or_default();
        match race.due {
            Some(due) if due <= now => {
                race.due = None;
                Wait::Over
            }
            Some(due) => Wait::Pending(due.saturating_duration_since(now)),
            None => {
                let settings = &node.settings;
                let delay = decide::claim_delay(
                    race.attempts,
                    settings.base_delay,
                    settings.max_delay,
                    fastrand::f64(),
                );
                race.attempts = race.attempts.saturating_add(1);
                race.due = Some(now + delay);
                Wait::Pending(delay)
            }
        }
    }

    /// The race of `uid` is over (won, lost, the claim is not raced for any more or gone): the
    /// next race starts with the shortest wait (upstream `Forget`).
    pub(super) fn forget(&self, uid: &str) {
        self.map().remove(uid);
    }
}

/// Whether this instance provisions `claim` of `class` now (always, outside node deployment);
/// gives the class back when it does and the outcome of the sync when it does not. A missing
/// class (which the claim decision never lets through) is retried rather than a panic.
pub(crate) async fn check<D>(
    ctx: &Context<D>,
    key: &ClaimKey,
    claim: &PersistentVolumeClaim,
    class: Option<Arc<StorageClass>>,
) -> Result<Arc<StorageClass>, Outcome> {
    let Some(class) = class else {
        return Err(Outcome::Retry);
    };
    let Some(node) = ctx.node.as_ref() else {
        return Ok(class);
    };
    let settings = &node.settings;
    match decide::ownership(
        &settings.node_name,
        settings.immediate_binding,
        claim,
        &class,
    ) {
        Ownership::Mine => {
            node.races.forget(&key.uid);
            Ok(class)
        }
        Ownership::NotMine => {
            node.races.forget(&key.uid);
            Err(Outcome::Done)
        }
        Ownership::Race => Err(race(ctx, node, key, claim, &class).await),
    }
}

/// One step of the race for an Immediate claim.
async fn race<D>(
    ctx: &Context<D>,
    node: &NodeDeployment,
    key: &ClaimKey,
    claim: &PersistentVolumeClaim,
    class: &StorageClass,
) -> Outcome {
    if !fits_allowed_topologies(ctx, node, claim, class) {
        tracing::debug!(claim = %format_args!("{}/{}", key.namespace, key.name), "ignoring claim: its class's allowedTopologies do not include this node");
        node.races.forget(&key.uid);
        return Outcome::Done;
    }
    match node.races.wait(&key.uid, node, Instant::now()) {
        Wait::Pending(delay) => return Outcome::RetryAfter(delay),
        Wait::Over => {}
    }
    let name = format!("{}/{}", key.namespace, key.name);
    match has_capacity(ctx, node, claim, class).await {
        Ok(true) => {}
        Ok(false) => {
            // Upstream waits for the next resync; the growing wait retries sooner.
            tracing::info!(claim = %name, "not enough capacity on this node to take the claim");
            return requeue_next_wait(node, key);
        }
        Err(err) => {
            tracing::info!(claim = %name, error = %err, "proceeding with taking the claim although the capacity check failed");
        }
    }
    let mut updated = claim.clone();
    updated
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(
            ANN_SELECTED_NODE.to_owned(),
            node.settings.node_name.clone(),
        );
    let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &key.namespace);
    match api
        .replace(&key.name, &PostParams::default(), &updated)
        .await
    {
        Ok(_) => {
            tracing::info!(claim = %name, node = %node.settings.node_name, "took the claim for this node");
            node.races.forget(&key.uid);
            // Provisioning starts when the informer brings the updated claim.
            Outcome::Done
        }
        Err(kube::Error::Api(status)) if status.code == 409 => {
            tracing::info!(claim = %name, "conflict while taking the claim, will try again");
            requeue_next_wait(node, key)
        }
        Err(err) => {
            tracing::warn!(claim = %name, error = csi_common::kube_client::error_text(&err), "selecting this node for the claim failed");
            Outcome::Retry
        }
    }
}

/// Starts the next (longer) wait right away.
fn requeue_next_wait(node: &NodeDeployment, key: &ClaimKey) -> Outcome {
    match node.races.wait(&key.uid, node, Instant::now()) {
        Wait::Pending(delay) => Outcome::RetryAfter(delay),
        Wait::Over => Outcome::Requeue,
    }
}

/// Upstream only races for a class with allowedTopologies when a requirement can be made for
/// this node.
fn fits_allowed_topologies<D>(
    ctx: &Context<D>,
    node: &NodeDeployment,
    claim: &PersistentVolumeClaim,
    class: &StorageClass,
) -> bool {
    let allowed = class.allowed_topologies.as_deref().unwrap_or_default();
    if allowed.is_empty() || !ctx.options.supports_topology() {
        return true;
    }
    accessibility_requirements(&RequirementInputs {
        driver_name: &ctx.options.driver_name,
        pvc_name: claim.metadata.name.as_deref().unwrap_or_default(),
        allowed_topologies: allowed,
        selected_node: Some(&node.settings.node_name),
        strict_topology: ctx.options.strict_topology,
        immediate_topology: ctx.options.immediate_topology,
        view: node.topology_view(),
    })
    .is_ok()
}

/// Upstream `checkCapacity`: the request as if provisioning on this node now, then GetCapacity
/// for each requisite topology (once without topology when there is none).
async fn has_capacity<D>(
    ctx: &Context<D>,
    node: &NodeDeployment,
    claim: &PersistentVolumeClaim,
    class: &StorageClass,
) -> Result<bool, String> {
    let requested = requested_bytes(claim).map_err(|e| e.event_message())?;
    if requested == 0 {
        return Ok(true);
    }
    let plan = plan_provision(
        &ctx.options,
        &ProvisionInputs {
            pvc: claim,
            class,
            selected_node: Some(&node.settings.node_name),
            topology: node.topology_view(),
            cached_requirement: None,
        },
    )
    .map_err(|e| e.event_message())?;
    let request = plan.request;
    let topologies = match request.accessibility_requirements {
        Some(requirement) if !requirement.requisite.is_empty() => {
            requirement.requisite.into_iter().map(Some).collect()
        }
        _ => vec![None],
    };
    let mut available = Vec::new();
    for topology in topologies {
        let response = node
            .capacity
            .get_capacity(GetCapacityRequest {
                volume_capabilities: request.volume_capabilities.clone(),
                parameters: request.parameters.clone(),
                accessible_topology: topology,
            })
            .await
            .map_err(|e| format!("GetCapacity: {e}"))?;
        available.push(response.available_capacity);
    }
    Ok(decide::capacity_suffices(requested, &available))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn each_wait_ends_at_its_due_time_and_the_next_one_is_longer() {
        let node = super::super::tests::deployment();
        let races = Races::default();
        let start = Instant::now();
        let Wait::Pending(first) = races.wait("u1", &node, start) else {
            panic!("a race starts with a wait");
        };
        assert!(first <= Duration::from_secs(20), "{first:?}");
        // Asked again before the due time (another change of the claim): the rest of it.
        let half = start + first / 2;
        assert_eq!(
            races.wait("u1", &node, half),
            Wait::Pending(first.checked_sub(first / 2).unwrap())
        );
        assert_eq!(races.wait("u1", &node, start + first), Wait::Over);
        // Lost (a conflict or no room): the next wait is 40s minus up to 20s of jitter.
        let Wait::Pending(second) = races.wait("u1", &node, start + first) else {
            panic!("the next attempt waits again");
        };
        assert!(
            (Duration::from_secs(20)..=Duration::from_secs(40)).contains(&second),
            "{second:?}"
        );
        // Other claims race on their own.
        assert!(
            matches!(races.wait("u2", &node, start), Wait::Pending(d) if d <= Duration::from_secs(20))
        );
        // Won or given up: the next race starts short again.
        races.forget("u1");
        assert!(
            matches!(races.wait("u1", &node, start), Wait::Pending(d) if d <= Duration::from_secs(20))
        );
    }
}
