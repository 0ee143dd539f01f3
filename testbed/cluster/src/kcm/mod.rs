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
//! Reads as upstream's: the syncs read claims, volumes and classes from informer caches, and
//! see their own writes before the watch delivers them, as upstream's `storeClaimUpdate` /
//! `storeVolumeUpdate` make them (module `cache`). Where the binder differs, and why it does not
//! matter to a sidecar: what a cache does not have is asked of the API server before the
//! binder acts on its absence (upstream does so only for a volume's claim before releasing
//! the volume), so a cache that lags behind a create never marks a claim Lost or a class
//! missing. That changes when a bind lands, never what it binds.
//!
//! Queues as upstream's: kube-runtime's `Controller`s only turn watch events and mapped
//! triggers into keys; one worker per controller takes the keys from a client-go style work
//! queue ([`csi_common::workqueue`]: a key queued at most once, a key added while it is being
//! synced is synced once more afterwards), as pv_controller's single `claimWorker` and
//! `volumeWorker` do, and queues each object that still exists again a resync period after
//! its sync. Holding a lock inside the reconcilers instead left
//! every waiting reconcile in kube-runtime's scheduler, which scans all of them on each poll:
//! at 5,000 claims that scan was a quarter of the test bed's CPU (docs/bench.md, "What limits
//! the burst at QPS 1000").

pub mod attach_detach;
mod binder;
mod cache;
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
use kube::runtime::WatchStreamExt as _;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, watcher};
use kube::{Api, Client, ResourceExt as _};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use cache::{Newest, VolumesByClaim};
use csi_common::events::EventRecorder;
use csi_common::workqueue::WorkQueue;
use csi_common::workqueue::metrics::QueueMetrics;

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
    /// The claim informer's cache plus our own writes (upstream's `ctrl.claims`).
    claims: Newest<PersistentVolumeClaim>,
    /// The volume informer's cache plus our own writes (upstream's `ctrl.volumes`), what
    /// claim syncs match against.
    volumes: Newest<PersistentVolume>,
    /// The volumes of `volumes` by the claim they are reserved for.
    volumes_by_claim: Arc<VolumesByClaim>,
    /// The StorageClass informer's cache (upstream's `classLister`).
    classes: Store<StorageClass>,
    /// Claims to sync, taken by the single claim worker (upstream's `claimQueue`).
    claim_queue: Arc<WorkQueue<ObjectRef<PersistentVolumeClaim>>>,
    /// Volumes to sync, taken by the single volume worker (upstream's `volumeQueue`).
    volume_queue: Arc<WorkQueue<ObjectRef<PersistentVolume>>>,
}

impl Context {
    /// Has the claim worker sync `claim` (its current state) next, as upstream's
    /// `ctrl.claimQueue.Add` in `syncVolume`: that claim sync then finds the volume in
    /// `volumes`, which a sync started by the claim controller's own watch of volumes may not
    /// yet.
    pub(crate) fn sync_claim_next(&self, claim: &PersistentVolumeClaim) {
        self.claim_queue.add(ObjectRef::from_obj(claim));
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The claim controller's reconciler: queues the claim for the claim worker, which queues it
/// again one resync period after each sync.
// The signature is the one `Controller::run` requires.
#[allow(clippy::unused_async)]
async fn queue_claim(obj: Arc<PersistentVolumeClaim>, ctx: Arc<Context>) -> Result<Action> {
    ctx.claim_queue.add(ObjectRef::from_obj(&*obj));
    Ok(Action::await_change())
}

/// The volume controller's reconciler, as [`queue_claim`].
#[allow(clippy::unused_async)]
async fn queue_volume(obj: Arc<PersistentVolume>, ctx: Arc<Context>) -> Result<Action> {
    ctx.volume_queue.add(ObjectRef::from_obj(&*obj));
    Ok(Action::await_change())
}

// Queuing never fails; `Controller::run` requires an error policy all the same.
#[allow(clippy::needless_pass_by_value)]
fn error_policy<K>(_obj: Arc<K>, _error: &Error, ctx: Arc<Context>) -> Action {
    Action::requeue(ctx.config.retry_interval)
}

/// `syncClaim` of the newest state of the claim `key` we know of (upstream's `claimWorker`
/// reads `ctrl.claims`). Returns whether the claim exists; one the informer has not seen yet
/// is synced when its watch event queues it.
async fn sync_claim(ctx: &Context, key: &ObjectRef<PersistentVolumeClaim>) -> Result<bool> {
    let Some(claim) = ctx.claims.get(key) else {
        return Ok(false);
    };
    let claim = Arc::unwrap_or_clone(claim);
    let synced = claim.clone();
    if !protection::sync_claim(ctx, &claim).await? {
        Box::pin(binder::sync_claim(ctx, claim)).await?;
    }
    ctx.claim_syncs.record(&synced);
    Ok(true)
}

/// `syncVolume` of the newest state of the volume `key` we know of, as [`sync_claim`].
async fn sync_volume(ctx: &Context, key: &ObjectRef<PersistentVolume>) -> Result<bool> {
    let Some(volume) = ctx.volumes.get(key) else {
        return Ok(false);
    };
    let volume = Arc::unwrap_or_clone(volume);
    if !protection::sync_volume(ctx, &volume).await? {
        Box::pin(binder::sync_volume(ctx, volume)).await?;
    }
    Ok(true)
}

/// When a failed sync of a key is tried again: a conflict (someone wrote first) at once after
/// a re-read, anything else after the retry interval.
fn retry_delay(error: &Error, config: &Config) -> Duration {
    if error.is_conflict() {
        Duration::from_millis(50)
    } else {
        config.retry_interval
    }
}

/// One worker: takes the keys of `queue` one at a time until it is shut down. An object that
/// exists is synced again a resync period after each sync (upstream resyncs every claim and
/// volume each `--pvclaimbinder-sync-period`); counted from the end of the sync, so a worker
/// that is behind is not handed a second copy of its backlog.
async fn work<K>(
    ctx: Arc<Context>,
    queue: Arc<WorkQueue<ObjectRef<K>>>,
    sync: impl AsyncFn(&Context, &ObjectRef<K>) -> Result<bool>,
) where
    K: kube::Resource + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync,
{
    while let Some(key) = queue.get().await {
        match sync(&ctx, &key).await {
            Ok(true) => queue.add_after(key.clone(), ctx.config.resync_period),
            Ok(false) => {}
            Err(error) => {
                if !error.is_conflict() {
                    tracing::warn!(error = %error, source = ?std::error::Error::source(&error), "sync failed");
                }
                queue.add_after(key.clone(), retry_delay(&error, &ctx.config));
            }
        }
        queue.done(&key);
    }
}

fn claim_of_volume(volume: &PersistentVolume) -> Option<ObjectRef<PersistentVolumeClaim>> {
    let r = objects::claim_ref(volume)?;
    Some(ObjectRef::new(r.name.as_deref()?).within(r.namespace.as_deref()?))
}

/// The volumes a claim change concerns: the volume it names (upstream's `deleteClaim`
/// queues that one), and, once the claim is being deleted, every volume reserved for it, so a
/// volume provisioned for a claim deleted before it bound is released at once rather than at
/// its next resync.
fn volumes_of_claim(
    volumes: &VolumesByClaim,
    claim: &PersistentVolumeClaim,
) -> Vec<ObjectRef<PersistentVolume>> {
    let mut refs: Vec<ObjectRef<PersistentVolume>> = Vec::new();
    if objects::is_deleting(claim) {
        refs.extend(
            volumes
                .candidates_for(claim, false)
                .iter()
                .map(|v| ObjectRef::new(v)),
        );
    }
    let volume_name = objects::claim_volume_name(claim);
    if !volume_name.is_empty() {
        refs.push(ObjectRef::new(volume_name));
    }
    refs
}

/// The claims a pod uses: its claim volumes and the claims of its generic ephemeral volumes
/// (named `<pod>-<volume>`).
// The signature is the one `Controller::watches` requires.
#[allow(clippy::needless_pass_by_value)]
fn claims_of_pod(pod: Pod) -> Vec<ObjectRef<PersistentVolumeClaim>> {
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
        .collect()
}

/// One watch as one of kube-controller-manager's informers runs it: with its own backoff
/// after errors (client-go's reflector: 800 ms doubling to 30 s with jitter, reset after two
/// quiet minutes, which kube-runtime's `default_backoff` copies). kube-runtime's `Controller`
/// instead puts one backoff over all the watches of a controller (its trigger backoff), so
/// after an API server restart with a compaction each watch's one 410 lengthened a wait that
/// stalled all of them: the claim watch of the chaos suite's `api-restart-compacted` row
/// showed deleted claims 107 s late, and the row failed (docs/reliability.md). The
/// controllers here get [`NoSharedBackoff`].
fn informer_watch<K>(
    api: Api<K>,
) -> impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    watcher(api, watcher::Config::default()).default_backoff()
}

/// The trigger backoff of the stand-in's controllers: none, since every watch backs off on
/// its own ([`informer_watch`]).
struct NoSharedBackoff;

impl Iterator for NoSharedBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(Duration::ZERO)
    }
}

impl kube::runtime::utils::Backoff for NoSharedBackoff {
    fn reset(&mut self) {}
}

/// The volume controller and its cache: the volume informer (a reflector over
/// [`informer_watch`], where `Controller::new` would use a watch without its own backoff),
/// with `index` fed from its events; claims trigger the volumes they name.
fn volume_controller(
    volumes: &Api<PersistentVolume>,
    claims: &Api<PersistentVolumeClaim>,
    index: &Arc<VolumesByClaim>,
) -> (Controller<PersistentVolume>, Store<PersistentVolume>) {
    let (cached_volumes, volume_writer) = reflector::store();
    let fed = index.clone();
    let volume_events = informer_watch(volumes.clone()).inspect(move |event| {
        if let Ok(event) = event {
            fed.apply(event);
        }
    });
    let index = index.clone();
    let controller = Controller::for_stream(
        reflector::reflector(volume_writer, volume_events).applied_objects(),
        cached_volumes.clone(),
    )
    .watches_stream(
        informer_watch(claims.clone()).touched_objects(),
        move |claim: PersistentVolumeClaim| volumes_of_claim(&index, &claim),
    )
    .trigger_backoff(NoSharedBackoff);
    (controller, cached_volumes)
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
    let claims: Api<PersistentVolumeClaim> = Api::all(client.clone());
    let volumes: Api<PersistentVolume> = Api::all(client.clone());

    let volumes_by_claim = Arc::new(VolumesByClaim::default());
    let (volume_controller, cached_volumes) =
        volume_controller(&volumes, &claims, &volumes_by_claim);
    let volume_controller = volume_controller.graceful_shutdown_on(shutdown.clone());

    let (class_store, class_writer) = reflector::store();
    let (claim_store, claim_writer) = reflector::store();
    let cached_claims = claim_store.clone();
    let claim_controller = Controller::for_stream(
        reflector::reflector(claim_writer, informer_watch(claims)).applied_objects(),
        claim_store.clone(),
    )
    .watches_stream(
        informer_watch(volumes).touched_objects(),
        |volume: PersistentVolume| claim_of_volume(&volume),
    )
    .watches_stream(
        // The class informer (upstream's `classLister`) is also the trigger of claim syncs
        // on class changes: one watch of classes for both.
        reflector::reflector(
            class_writer,
            informer_watch(Api::<StorageClass>::all(client.clone())),
        )
        .touched_objects(),
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
    .watches_stream(
        informer_watch(Api::<Pod>::all(client.clone())).touched_objects(),
        claims_of_pod,
    )
    .trigger_backoff(NoSharedBackoff)
    .graceful_shutdown_on(shutdown.clone());

    // The writer ends once the controllers and the workers (and with them every recorder
    // clone) are gone. One write at a time, as kube-controller-manager's broadcaster.
    let (recorder, events) = EventRecorder::one_at_a_time(client.clone(), COMPONENT.to_owned());
    // The backoff bounds go unused: failed syncs are retried with `add_after`.
    let (claim_queue, claim_delays) = WorkQueue::new(
        config.retry_interval,
        config.retry_interval,
        QueueMetrics::unregistered("claims"),
    );
    let (volume_queue, volume_delays) = WorkQueue::new(
        config.retry_interval,
        config.retry_interval,
        QueueMetrics::unregistered("volumes"),
    );
    let ctx = Arc::new(Context {
        client,
        recorder,
        config,
        claim_syncs,
        claims: Newest::new(cached_claims),
        volumes: Newest::new(cached_volumes),
        volumes_by_claim,
        classes: class_store,
        claim_queue: claim_queue.clone(),
        volume_queue: volume_queue.clone(),
    });
    let workers = futures::future::join4(
        work(ctx.clone(), claim_queue.clone(), sync_claim),
        work(ctx.clone(), volume_queue.clone(), sync_volume),
        claim_delays,
        volume_delays,
    );
    let volumes = volume_controller
        .run(queue_volume, error_policy, ctx.clone())
        .for_each(|result| {
            if let Err(err) = result {
                tracing::debug!(controller = "volume", error = %err, "controller event");
            }
            std::future::ready(())
        });
    let claims = claim_controller
        .run(queue_claim, error_policy, ctx)
        .for_each(|result| {
            if let Err(err) = result {
                tracing::debug!(controller = "claim", error = %err, "controller event");
            }
            std::future::ready(())
        });
    // Once both controllers stopped, the workers finish the sync they are in and end.
    let controllers = async move {
        futures::join!(volumes, claims);
        claim_queue.shut_down();
        volume_queue.shut_down();
    };
    futures::join!(controllers, workers, events);
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
