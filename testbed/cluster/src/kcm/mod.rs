//! A kube-controller-manager stand-in: the parts of it the CSI sidecars rely on, talking to an
//! API server through a `kube::Client` exactly as the real one talks HTTP, so it works against
//! the in-memory [`crate::apiserver`] and against a real cluster alike.
//!
//! What runs (behaviour of kube-controller-manager v1.36, see provisioner.md §2 and the
//! fixtures' "who writes what in the volume lifecycle"):
//! - the PV binder (module `binder`): annotates claims of external provisioners with
//!   `volume.kubernetes.io/storage-provisioner` (+ the beta key) and emits
//!   `ExternalProvisioning`; binds claims to volumes reserved for them (volume status Bound,
//!   claim `spec.volumeName` + `bind-completed` + `bound-by-controller`, claim status Bound
//!   with capacity and access modes); binds free Available volumes that match; marks volumes
//!   Released when their claim is gone; marks volumes Available when unclaimed;
//! - pvc-protection and pv-protection (module `protection`);
//! - on request only: the scheduler's node selection for WaitForFirstConsumer claims
//!   ([`scheduler::select_node`]) and the attach-detach controller's VolumeAttachments
//!   ([`attach_detach`]).
//!
//! What does not: in-tree volume plugins (provisioning, deleting, recycling), CSI migration,
//! the expand controller, node affinity checks, metrics.
//!
//! Where the binder differs from upstream's, and why it does not matter to a sidecar: a claim
//! sync matches against the volume cache as upstream's `findBestMatchForClaim` does, but
//! reads the volume a claim names with a GET (upstream reads its cache), so a lagging cache
//! never marks a claim Lost; and it does not write its own updates into its cache (upstream's
//! `storeVolumeUpdate`), so it meets a few more bind conflicts (409, then a retry) than
//! upstream would. Both change when a bind lands, never what it binds.

pub mod attach_detach;
mod binder;
pub mod events;
pub mod objects;
mod protection;
pub mod scheduler;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::{FutureExt as _, StreamExt as _};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{StorageClass, VolumeAttachment};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt as _};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnboundedReceiverStream;

use csi_common::events::EventRecorder;

/// The Event source component of the PV binder and its protection helpers.
pub const COMPONENT: &str = "persistentvolume-controller";

/// Tunables.
#[derive(Debug, Clone)]
pub struct Config {
    /// How often every claim and volume is synced again without a change
    /// (`--pvclaimbinder-sync-period`, 15 s upstream). Each unbound claim of an external
    /// provisioner emits `ExternalProvisioning` again at every sync, as upstream does.
    pub resync_period: Duration,
    /// Delay before retrying a sync that failed for another reason than a conflict.
    pub retry_interval: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            resync_period: Duration::from_secs(15),
            retry_interval: Duration::from_secs(1),
        }
    }
}

/// Why a sync failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API request failed (a 409 conflict means someone wrote first; the sync is retried).
    #[error("API request failed")]
    Api(#[source] kube::Error),
}

impl Error {
    fn is_conflict(&self) -> bool {
        matches!(self, Error::Api(kube::Error::Api(status)) if status.code == 409)
    }
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The resourceVersion of the newest state of each claim (`namespace/name`) that a claim sync
/// finished acting on. Upstream has nothing like it; it lets a test wait for the positive
/// signal that the controller-manager has seen a change before asserting what it did not do.
#[derive(Clone, Debug, Default)]
pub struct ClaimSyncs(Arc<Mutex<HashMap<String, u64>>>);

impl ClaimSyncs {
    fn record(&self, claim: &PersistentVolumeClaim) {
        let Some(version) = claim
            .resource_version()
            .and_then(|rv| rv.parse::<u64>().ok())
        else {
            return;
        };
        let key = format!(
            "{}/{}",
            claim.namespace().unwrap_or_default(),
            claim.name_any()
        );
        let mut synced = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let newest = synced.entry(key).or_default();
        *newest = (*newest).max(version);
    }

    /// The resourceVersion of the newest state of `namespace/name` a sync finished with.
    pub fn synced_version(&self, namespace: &str, name: &str) -> Option<u64> {
        let synced = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        synced.get(&format!("{namespace}/{name}")).copied()
    }
}

/// Shared by the reconcilers.
pub(crate) struct Context {
    client: Client,
    recorder: EventRecorder,
    config: Config,
    claim_syncs: ClaimSyncs,
    /// The volume informer's cache (upstream's `ctrl.volumes`), what claim syncs match
    /// against.
    volumes: Store<PersistentVolume>,
    /// Claims a volume sync wants synced next (upstream's `ctrl.claimQueue.Add` in
    /// `syncVolume`): that claim sync then finds the volume in `volumes`, which a sync started
    /// by the claim controller's own watch of volumes may not yet.
    claim_queue: mpsc::UnboundedSender<ObjectRef<PersistentVolumeClaim>>,
    /// Held during a claim sync: one at a time, as upstream's single claim worker.
    claim_worker: tokio::sync::Mutex<()>,
    /// Held during a volume sync: one at a time, as upstream's single volume worker.
    volume_worker: tokio::sync::Mutex<()>,
}

impl Context {
    /// Has the claim controller sync `claim` (its current state) next.
    pub(crate) fn sync_claim_next(&self, claim: &PersistentVolumeClaim) {
        // The controller is gone only while shutting down; nothing to sync then.
        let _ = self.claim_queue.send(ObjectRef::from_obj(claim));
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

async fn reconcile_claim(obj: Arc<PersistentVolumeClaim>, ctx: Arc<Context>) -> Result<Action> {
    let _worker = ctx.claim_worker.lock().await;
    let api: Api<PersistentVolumeClaim> =
        Api::namespaced(ctx.client.clone(), &obj.namespace().unwrap_or_default());
    // The watch cache may lag behind our own writes; sync the current object.
    let Some(claim) = api.get_opt(&obj.name_any()).await.map_err(Error::Api)? else {
        return Ok(Action::await_change());
    };
    let synced = claim.clone();
    if !protection::sync_claim(&ctx, &claim).await? {
        Box::pin(binder::sync_claim(&ctx, claim)).await?;
    }
    ctx.claim_syncs.record(&synced);
    Ok(Action::requeue(ctx.config.resync_period))
}

async fn reconcile_volume(obj: Arc<PersistentVolume>, ctx: Arc<Context>) -> Result<Action> {
    let _worker = ctx.volume_worker.lock().await;
    let api: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let Some(volume) = api.get_opt(&obj.name_any()).await.map_err(Error::Api)? else {
        return Ok(Action::await_change());
    };
    if !protection::sync_volume(&ctx, &volume).await? {
        Box::pin(binder::sync_volume(&ctx, volume)).await?;
    }
    Ok(Action::requeue(ctx.config.resync_period))
}

// The signature is the one `Controller::run` requires.
#[allow(clippy::needless_pass_by_value)]
fn error_policy<K>(_obj: Arc<K>, error: &Error, ctx: Arc<Context>) -> Action {
    if error.is_conflict() {
        // Someone wrote first: re-read and try again right away.
        Action::requeue(Duration::from_millis(50))
    } else {
        tracing::warn!(error = %error, source = ?std::error::Error::source(error), "sync failed");
        Action::requeue(ctx.config.retry_interval)
    }
}

fn claim_of_volume(volume: &PersistentVolume) -> Option<ObjectRef<PersistentVolumeClaim>> {
    let r = objects::claim_ref(volume)?;
    Some(ObjectRef::new(r.name.as_deref()?).within(r.namespace.as_deref()?))
}

/// Runs the binder and the protection controllers until `shutdown` resolves, then lets
/// running syncs finish; claim syncs are recorded in `claim_syncs`.
pub async fn run(
    client: Client,
    config: Config,
    claim_syncs: ClaimSyncs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let shutdown = shutdown.boxed().shared();
    let wc = watcher::Config::default;
    // One sync at a time per controller, as upstream's single-worker queues: a lock in each
    // reconciler rather than kube-runtime's `concurrency(1)`, which under a burst of a few
    // hundred claims left some never reconciled (the chaos suite saw 50 of 200 claims never
    // get the storage-provisioner annotation; kube-rs #1322 reports the same symptom).
    let claims: Api<PersistentVolumeClaim> = Api::all(client.clone());
    let volumes: Api<PersistentVolume> = Api::all(client.clone());

    let volume_controller = Controller::new(volumes.clone(), wc());
    let volume_store = volume_controller.store();
    let cached_volumes = volume_store.clone();
    let volume_controller = volume_controller
        .watches(claims.clone(), wc(), move |claim: PersistentVolumeClaim| {
            // A claim change (including its deletion) concerns its volume and any volume
            // reserved for it. This runs for every claim event over every cached volume, so
            // it compares in place (no name copied per volume).
            let (name, namespace) = (claim.metadata.name.as_deref(), claim.namespace());
            let mut refs: Vec<ObjectRef<PersistentVolume>> = volume_store
                .state()
                .iter()
                .filter(|v| {
                    objects::claim_ref(v)
                        .is_some_and(|r| r.name.as_deref() == name && r.namespace == namespace)
                })
                .map(|v| ObjectRef::from_obj(&**v))
                .collect();
            let volume_name = objects::claim_volume_name(&claim);
            if !volume_name.is_empty() {
                refs.push(ObjectRef::new(volume_name));
            }
            refs
        })
        .graceful_shutdown_on(shutdown.clone());

    let (claim_queue, queued_claims) = mpsc::unbounded_channel();
    let claim_controller = Controller::new(claims, wc());
    let claim_store = claim_controller.store();
    let claim_controller = claim_controller
        .reconcile_on(UnboundedReceiverStream::new(queued_claims))
        .watches(volumes, wc(), |volume: PersistentVolume| {
            claim_of_volume(&volume)
        })
        .watches(
            Api::<StorageClass>::all(client.clone()),
            wc(),
            move |class: StorageClass| {
                let name = class.name_any();
                claim_store
                    .state()
                    .iter()
                    .filter(|c| objects::claim_class(c) == name)
                    .map(|c| ObjectRef::from_obj(&**c))
                    .collect::<Vec<_>>()
            },
        )
        .watches(Api::<Pod>::all(client.clone()), wc(), |pod: Pod| {
            let namespace = pod.namespace().unwrap_or_default();
            pod.spec
                .iter()
                .flat_map(|s| s.volumes.iter().flatten())
                .filter_map(|v| {
                    v.persistent_volume_claim
                        .as_ref()
                        .map(|c| c.claim_name.clone())
                        .or_else(|| {
                            v.ephemeral
                                .as_ref()
                                .map(|_| format!("{}-{}", pod.name_any(), v.name))
                        })
                })
                .map(|name| ObjectRef::new(&name).within(&namespace))
                .collect::<Vec<_>>()
        })
        .graceful_shutdown_on(shutdown);

    // The writer ends once both controllers (and with them every recorder clone) are gone.
    let (recorder, events) = EventRecorder::new(client.clone(), COMPONENT.to_owned());
    let ctx = Arc::new(Context {
        client,
        recorder,
        config,
        claim_syncs,
        volumes: cached_volumes,
        claim_queue,
        claim_worker: tokio::sync::Mutex::new(()),
        volume_worker: tokio::sync::Mutex::new(()),
    });
    let volumes = volume_controller
        .run(reconcile_volume, error_policy, ctx.clone())
        .for_each(|result| {
            if let Err(err) = result {
                tracing::debug!(controller = "volume", error = %err, "controller event");
            }
            std::future::ready(())
        });
    let claims = claim_controller
        .run(reconcile_claim, error_policy, ctx)
        .for_each(|result| {
            if let Err(err) = result {
                tracing::debug!(controller = "claim", error = %err, "controller event");
            }
            std::future::ready(())
        });
    futures::join!(volumes, claims, events);
}

/// A running controller-manager stand-in (spawned on the current Tokio runtime) plus the
/// on-request scheduler and attach-detach actions.
pub struct ControllerManager {
    client: Client,
    claim_syncs: ClaimSyncs,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for ControllerManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerManager")
            .field(
                "running",
                &self.task.as_ref().is_some_and(|t| !t.is_finished()),
            )
            .finish_non_exhaustive()
    }
}

impl ControllerManager {
    /// Spawns [`run`] with `client` and `config`.
    pub fn start(client: Client, config: Config) -> Self {
        let (stop, stopped) = oneshot::channel::<()>();
        let claim_syncs = ClaimSyncs::default();
        let task = tokio::spawn(run(
            client.clone(),
            config,
            claim_syncs.clone(),
            async move {
                let _ = stopped.await;
            },
        ));
        Self {
            client,
            claim_syncs,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// The client it uses.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// What the claim syncs have acted on so far.
    pub fn claim_syncs(&self) -> &ClaimSyncs {
        &self.claim_syncs
    }

    /// Plays the scheduler for a WaitForFirstConsumer claim: see [`scheduler::select_node`].
    ///
    /// # Errors
    /// See [`scheduler::Error`].
    pub async fn select_node(
        &self,
        namespace: &str,
        claim: &str,
        node: &str,
    ) -> Result<PersistentVolumeClaim, scheduler::Error> {
        scheduler::select_node(&self.client, namespace, claim, node).await
    }

    /// Creates the VolumeAttachment for a volume on a node: see [`attach_detach::attach`].
    ///
    /// # Errors
    /// See [`attach_detach::Error`].
    pub async fn attach(&self, volume: &str, node: &str) -> attach_detach::Result<String> {
        attach_detach::attach(&self.client, volume, node).await
    }

    /// Deletes the VolumeAttachment for a volume on a node: see [`attach_detach::detach`].
    ///
    /// # Errors
    /// See [`attach_detach::Error`].
    pub async fn detach(&self, volume: &str, node: &str) -> attach_detach::Result<String> {
        attach_detach::detach(&self.client, volume, node).await
    }

    /// Waits for a VolumeAttachment to be attached: see [`attach_detach::wait_attached`].
    ///
    /// # Errors
    /// See [`attach_detach::Error`].
    pub async fn wait_attached(
        &self,
        name: &str,
        timeout: Duration,
    ) -> attach_detach::Result<VolumeAttachment> {
        attach_detach::wait_attached(&self.client, name, timeout).await
    }

    /// Stops the controllers, letting running syncs finish.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for ControllerManager {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
