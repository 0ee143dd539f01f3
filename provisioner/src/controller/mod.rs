//! The claim and volume controllers (sig-storage-lib-external-provisioner's
//! `ProvisionController` plus external-provisioner's `Provision`/`Delete`), on shared informer
//! caches and three work queues named as upstream's (`claims`, `volumes`, `unsavedpvs`).
//!
//! * [`claim`]: PVC → CreateVolume → PV, with the state model of spec §4.7 and the
//!   deleted-claim cleanup of [`in_progress`].
//! * [`volume`]: PV finalizer maintenance and Released → DeleteVolume → PV removal (§5).
//! * [`save`]: PVs whose creation failed after the volume was made, retried forever (§4.5).
//! * [`protection`]: clone and snapshot sources: lookups, finalizers, the clone-protection
//!   queue (`cloning-protection`) and the snapshot sweep (§6.4).
//!
//! `--worker-threads` workers serve `claims` and as many serve `volumes`, so at most that many
//! CreateVolume and, separately, DeleteVolume calls run at once, as upstream.

mod after_create;
mod cached;
pub(crate) mod claim;
pub(crate) mod in_progress;
pub(crate) mod protection;
pub(crate) mod save;
mod secrets;
pub(crate) mod stores;
pub(crate) mod volume;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use csi_common::capabilities::{
    ControllerCapabilities, PluginCapabilities, PluginServiceCapability,
};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::Client;

use crate::args::{Config, RetrySettings};
use crate::csi::VolumeDriver;
use crate::metrics::ControllerMetrics;
use crate::node::NodeDeployment;
use crate::request::{DataSourceOptions, ProvisionOptions};
use csi_common::controller::Workers;
use csi_common::events::EventRecorder;
use csi_common::workqueue::metrics::WorkQueueMetrics;

use self::in_progress::{InProgress, Infeasible};
use self::protection::{ProtectionSettings, SourceKey};
use self::save::{SavedLately, Unsaved};
use self::stores::{Handlers, Stores, Wanted};
use csi_common::workqueue::WorkQueue;

/// Workers of the `unsavedpvs` queue (upstream's fixed 4).
const UNSAVED_WORKERS: usize = 4;
/// client-go `DefaultControllerRateLimiter`'s per-item backoff, used for `unsavedpvs`.
const UNSAVED_BACKOFF: (Duration, Duration) = (Duration::from_millis(5), Duration::from_secs(1000));

pub(crate) use csi_common::controller::Error;

/// What the controllers need besides the caches they build themselves.
pub(crate) struct ControllerDeps<D> {
    /// Main API client (rate limited by `--kube-api-qps` / `--kube-api-burst`).
    pub(crate) client: Client,
    /// The driver's controller RPCs.
    pub(crate) driver: D,
    /// Request and PV construction settings.
    pub(crate) options: ProvisionOptions,
    /// Concurrency, retry and feature settings.
    pub(crate) settings: Settings,
    /// Event sink.
    pub(crate) recorder: EventRecorder,
    /// `controller_*` metrics.
    pub(crate) metrics: ControllerMetrics,
    /// `workqueue_*` metrics.
    pub(crate) workqueue_metrics: WorkQueueMetrics,
    /// `--node-deployment`: this node's claims and volumes only.
    pub(crate) node: Option<NodeDeployment>,
}

impl<D> std::fmt::Debug for ControllerDeps<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerDeps")
            .field("options", &self.options)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// Controller-level settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settings {
    /// `--worker-threads`.
    pub(crate) worker_threads: usize,
    /// `--retry-interval-start` / `--retry-interval-max`.
    pub(crate) retry: RetrySettings,
    /// `--timeout`: also the window for cleaning up a volume that came back too small.
    pub(crate) timeout: Duration,
    /// Topology in use (driver capability and gate): Nodes and CSINodes are cached.
    pub(crate) topology: bool,
    /// The driver publishes volumes: VolumeAttachments are cached and block deletion.
    pub(crate) attachments: bool,
    /// The `VolumeAttributesClass` gate: as given, then resolved at start by `run` (off when
    /// not given and the API server does not serve the kind). `Some(false)`: claims' classes
    /// are ignored.
    pub(crate) vac_gate: Option<bool>,
    /// Clone-protection workers and the snapshot sweep.
    pub(crate) protection: ProtectionSettings,
}

impl Settings {
    /// Settings from the flags and the driver's capabilities.
    pub(crate) fn new(
        config: &Config,
        plugin: &PluginCapabilities,
        controller: &ControllerCapabilities,
    ) -> Self {
        Self {
            worker_threads: config.worker_threads,
            retry: config.retry,
            timeout: config.timeout,
            topology: config.provisioning.topology_gate
                && plugin.has_volume_accessibility_constraints(),
            attachments: controller.has_publish_unpublish_volume(),
            vac_gate: config.provisioning.volume_attributes_class_gate,
            protection: ProtectionSettings {
                clone_workers: if controller.has_clone_volume() {
                    config.data_sources.cloning_protection_threads
                } else {
                    0
                },
                snapshot_sweep: (controller.has_create_delete_snapshot()
                    && !config.data_sources.snapshot_orphan_sweep_interval.is_zero())
                .then_some(config.data_sources.snapshot_orphan_sweep_interval),
            },
        }
    }
}

/// Request and PV settings from the flags and the driver (the `Topology` gate off hides the
/// driver's VOLUME_ACCESSIBILITY_CONSTRAINTS, as upstream then ignores topology).
pub(crate) fn provision_options(
    config: &Config,
    driver_name: &str,
    plugin: &PluginCapabilities,
    controller: &ControllerCapabilities,
    provisioner_identity: &str,
) -> ProvisionOptions {
    let plugin_caps = if config.provisioning.topology_gate {
        plugin.clone()
    } else {
        PluginCapabilities::from_values(
            plugin
                .services()
                .filter(|s| *s != PluginServiceCapability::VolumeAccessibilityConstraints),
            plugin.volume_expansion(),
        )
    };
    let p = &config.provisioning;
    ProvisionOptions {
        driver_name: driver_name.to_owned(),
        volume_name_prefix: p.volume_name_prefix.clone(),
        volume_name_uuid_length: p.volume_name_uuid_length,
        default_fstype: p.default_fstype.clone(),
        extra_create_metadata: p.extra_create_metadata,
        strict_topology: p.strict_topology,
        immediate_topology: p.immediate_topology,
        controller_publish_readonly: p.controller_publish_readonly,
        provisioner_identity: provisioner_identity.to_owned(),
        plugin_caps,
        controller_caps: controller.clone(),
        data_sources: DataSourceOptions {
            cross_namespace: config.data_sources.cross_namespace,
            prevent_volume_mode_conversion: config.data_sources.prevent_volume_mode_conversion,
        },
    }
}

/// A claim in the `claims` queue: upstream keys claims by UID; the name lets the worker find
/// the claim in the cache and tell a deleted claim from a re-created one of the same name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ClaimKey {
    /// `metadata.uid`.
    pub(crate) uid: String,
    /// `metadata.namespace`.
    pub(crate) namespace: String,
    /// `metadata.name`.
    pub(crate) name: String,
}

impl ClaimKey {
    /// The key of `claim` (`None` for an object without uid or name, which the API never sends).
    pub(crate) fn of(claim: &PersistentVolumeClaim) -> Option<Self> {
        Some(Self {
            uid: claim.metadata.uid.clone()?,
            namespace: claim.metadata.namespace.clone().unwrap_or_default(),
            name: claim.metadata.name.clone()?,
        })
    }
}

/// Everything a worker needs, shared by all of them.
pub(crate) struct Context<D> {
    pub(crate) client: Client,
    pub(crate) driver: D,
    pub(crate) options: ProvisionOptions,
    pub(crate) settings: Settings,
    pub(crate) recorder: EventRecorder,
    pub(crate) metrics: ControllerMetrics,
    pub(crate) stores: Stores,
    pub(crate) claims: Arc<WorkQueue<ClaimKey>>,
    pub(crate) volumes: Arc<WorkQueue<String>>,
    pub(crate) in_progress: Arc<InProgress>,
    pub(crate) infeasible: Infeasible,
    pub(crate) unsaved: Unsaved,
    /// UIDs of PVs whose storage we deleted: the cache may still show them with our finalizer
    /// for a moment, which must not cause a second DeleteVolume.
    pub(crate) deleted: Arc<DeletedVolumes>,
    /// `--node-deployment`: this node's claims and volumes only.
    pub(crate) node: Option<NodeDeployment>,
}

/// UIDs of PVs whose volume the driver deleted, until their object is gone from the cache.
///
/// A UID is noted as [`Deletion::Storage`] once DeleteVolume succeeded: if deleting the PV
/// object then fails (an error, a conflict, an answer lost with the connection), the retry
/// goes on from the API writes instead of asking the driver again. Upstream calls DeleteVolume
/// again, which CSI makes idempotent: a call for a volume the driver has already deleted
/// (docs/compatibility.md).
///
/// It becomes [`Deletion::Object`] *before* the write that lets the API server delete the
/// object (the PATCH removing our finalizer, [`DeletedVolumes::write`]) and goes back to
/// `Storage` if that fails. The object's Deleted event, whose handler drops the UID, can reach
/// the informer before that PATCH's answer reaches the sync; a note made after the answer then
/// stayed for the life of the process. A heap profile of a 15-minute `chaos --churn`
/// (heaptrack, 24,880 lifecycles) found this set grown to 8,192 slots, so more than 3,584
/// UIDs, left that way. Noting early is harmless: only syncs of the same PV read it, and the
/// work queue never runs two of those at once.
#[derive(Debug, Default)]
pub(crate) struct DeletedVolumes(std::sync::Mutex<std::collections::HashMap<String, Deletion>>);

/// How far the deletion of a PV whose volume the driver deleted has got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deletion {
    /// DeleteVolume succeeded; the PV object is still to be deleted.
    Storage,
    /// The write that lets the API server remove the object was sent: events that still show
    /// the PV need no sync.
    Object,
}

impl DeletedVolumes {
    fn map(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, Deletion>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Notes that the driver deleted the volume of PV `uid`.
    pub(crate) fn storage_deleted(&self, uid: Option<&str>) {
        if let Some(uid) = uid {
            self.map().insert(uid.to_owned(), Deletion::Storage);
        }
    }

    /// How far the deletion of PV `uid` has got; `None`: its volume was not deleted by us.
    pub(crate) fn stage(&self, uid: &str) -> Option<Deletion> {
        self.map().get(uid).copied()
    }

    /// Runs `write`, which lets the API server delete the PV `uid`, with the UID noted as
    /// [`Deletion::Object`] already; back to [`Deletion::Storage`] if the write fails.
    pub(crate) async fn write<T, E>(
        &self,
        uid: Option<&str>,
        write: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        if let Some(uid) = uid {
            self.map().insert(uid.to_owned(), Deletion::Object);
        }
        let result = write.await;
        if result.is_err()
            && let Some(uid) = uid
            && let Some(stage) = self.map().get_mut(uid)
        {
            *stage = Deletion::Storage;
        }
        result
    }

    /// Whether events of PV `uid` need no sync: it is on its way out.
    pub(crate) fn contains(&self, uid: &str) -> bool {
        self.stage(uid) == Some(Deletion::Object)
    }

    fn remove(&self, uid: &str) {
        self.map().remove(uid);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map().len()
    }
}

/// Turns informer events into queue adds (client-go's `ResourceEventHandler`s).
struct QueueHandlers {
    claims: Arc<WorkQueue<ClaimKey>>,
    volumes: Arc<WorkQueue<String>>,
    in_progress: Arc<InProgress>,
    deleted: Arc<DeletedVolumes>,
    /// PVs saved lately; dropped as the informer shows them.
    saved: Arc<SavedLately>,
    /// The clone-protection queue, when the driver can clone.
    protection: Option<Arc<WorkQueue<SourceKey>>>,
}

impl Handlers for QueueHandlers {
    fn claim_applied(&self, claim: &PersistentVolumeClaim) {
        if let Some(key) = ClaimKey::of(claim) {
            self.claims.add(key);
        }
        if let Some(queue) = &self.protection {
            protection::claim_changed(queue, claim, false);
        }
    }

    fn claim_deleted(&self, claim: &PersistentVolumeClaim) {
        if let Some(queue) = &self.protection {
            protection::claim_changed(queue, claim, true);
        }
        // Upstream ignores deletions; a claim in progress must be finished and cleaned up now
        // rather than after its backoff, so it goes back to the queue.
        if let Some(key) = ClaimKey::of(claim)
            && self.in_progress.contains(&key.uid)
        {
            self.claims.add(key);
        }
    }

    fn volume_applied(&self, volume: &PersistentVolume) {
        if let Some(name) = &volume.metadata.name {
            self.saved.shown(name);
            self.volumes.add(name.clone());
        }
    }

    fn volume_deleted(&self, volume: &PersistentVolume) {
        if let Some(name) = &volume.metadata.name {
            self.saved.shown(name);
            self.volumes.forget(name);
        }
        if let Some(uid) = &volume.metadata.uid {
            self.deleted.remove(uid);
        }
    }

    fn attachment_deleted(&self, attachment: &VolumeAttachment) {
        // A deletion blocked by this attachment can go ahead now instead of after its backoff.
        if let Some(pv) = &attachment.spec.source.persistent_volume_name {
            self.volumes.add(pv.clone());
        }
    }
}

/// Runs both controllers until `stop` resolves, then lets in-flight work finish.
pub(crate) async fn run<D: VolumeDriver>(
    deps: ControllerDeps<D>,
    stop: impl Future<Output = ()> + Send,
) -> Result<(), Error> {
    let ControllerDeps {
        client,
        driver,
        options,
        settings,
        recorder,
        metrics,
        workqueue_metrics,
        node,
    } = deps;
    let retry = settings.retry;
    let mut background = tokio::task::JoinSet::new();

    let mut workers = Workers::new(workqueue_metrics);
    let claims = workers.queue("claims", retry.start, retry.max);
    let volumes = workers.queue("volumes", retry.start, retry.max);
    let unsaved_queue = workers.queue("unsavedpvs", UNSAVED_BACKOFF.0, UNSAVED_BACKOFF.1);
    // Upstream names this queue `claims` too, so their workqueue metrics add up; a name of its
    // own keeps them apart (docs/compatibility.md).
    let protection_queue = (settings.protection.clone_workers > 0)
        .then(|| workers.queue("cloning-protection", retry.start, retry.max));

    let in_progress = Arc::new(InProgress::default());
    let deleted = Arc::new(DeletedVolumes::default());
    let saved = Arc::new(SavedLately::default());
    let handlers = Arc::new(QueueHandlers {
        claims: Arc::clone(&claims),
        volumes: Arc::clone(&volumes),
        in_progress: Arc::clone(&in_progress),
        deleted: Arc::clone(&deleted),
        saved: Arc::clone(&saved),
        protection: protection_queue.clone(),
    });
    let (stores, informers) = stores::start(
        &client,
        Wanted {
            // Node deployment computes topology from this node alone (upstream's stand-ins).
            topology: settings.topology && node.is_none(),
            attachments: settings.attachments,
        },
        &handlers,
    );
    for informer in informers {
        background.spawn(informer);
    }

    let ctx = Arc::new(Context {
        client,
        driver,
        options,
        infeasible: Infeasible::new(retry.max),
        unsaved: Unsaved::new(unsaved_queue, saved),
        settings,
        recorder,
        metrics,
        stores,
        claims,
        volumes,
        in_progress,
        deleted,
        node,
    });

    let mut stop = std::pin::pin!(stop);
    tokio::select! {
        () = ctx.stores.ready() => tracing::info!("caches synced, starting controllers"),
        () = &mut stop => {
            workers.shut_down().await;
            background.shutdown().await;
            return Ok(());
        }
    }

    let threads = ctx.settings.worker_threads;
    workers.spawn(
        &ctx.claims,
        threads,
        &ctx,
        |ctx, key: ClaimKey| async move { claim::sync(&ctx, &key).await },
    );
    workers.spawn(
        &ctx.volumes,
        threads,
        &ctx,
        |ctx, name: String| async move { volume::sync(&ctx, &name).await },
    );
    workers.spawn(
        &ctx.unsaved.queue,
        UNSAVED_WORKERS,
        &ctx,
        |ctx, name: String| async move { save::sync(&ctx, &name).await },
    );

    if let Some(queue) = &protection_queue {
        workers.spawn(
            queue,
            ctx.settings.protection.clone_workers,
            &ctx,
            |ctx, key: SourceKey| async move { protection::sync_clone_source(&ctx, &key).await },
        );
    }
    if let Some(interval) = ctx.settings.protection.snapshot_sweep {
        background.spawn(protection::sweep_snapshots(Arc::clone(&ctx), interval));
    }

    // Workers finish the item in hand (each CSI call is bounded by --timeout) and return.
    let result = workers.run_until(stop).await;
    background.shutdown().await;
    result
}

#[cfg(test)]
mod tests;
