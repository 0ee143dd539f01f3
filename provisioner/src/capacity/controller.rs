//! The executor of capacity tracking: informer caches, two queues named as upstream's, and
//! the sync functions that carry out [`super::decide`]'s decisions.
//!
//! * `csitopology` (one worker, one key): recompute the wanted (segment, class) keys from the
//!   caches after any Node label, CSINode, StorageClass or CSIStorageCapacity change; queue the
//!   new keys, forget the vanished ones, delete obsolete objects, set the gauges.
//! * `csistoragecapacity` (`--capacity-threads` workers, one key per pair): poll GetCapacity
//!   when the key is due or a refresh was asked for, then create, update or keep its object.
//!   The sync ends with the key queued again for its next poll.
//!
//! The caches are this controller's own (Nodes trimmed to labels, PersistentVolumes to the
//! few fields a refresh needs), so the provisioning controllers are untouched: a PV of this
//! driver appearing (provisioned) or going away (deleted) refreshes the keys of its class
//! in its segments (upstream calls into the capacity controller from Provision/Delete).

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use csi_common::controller::{Outcome, Workers};
use csi_common::informer::{
    Change, InformerTask, filtered_informer, informer, trim_managed_fields,
};
use csi_common::kube_client::error_text;
use csi_common::workqueue::WorkQueue;
use csi_common::workqueue::metrics::WorkQueueMetrics;
use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, Node, PersistentVolume, PersistentVolumeSpec,
};
use k8s_openapi::api::storage::v1::{CSINode, CSIStorageCapacity, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client};
use proto::csi::v1::{GetCapacityRequest, Topology};
use tokio::time::Instant;

use super::csi::CapacityDriver;
use super::decide::{self, Capacity, CapacityKey, Step, Template};
use super::metrics::CapacityMetrics;
use super::settings::CapacitySettings;
use crate::args::RetrySettings;
use crate::controller::stores::{trim_class, trim_csinode, trim_node};

pub(crate) use csi_common::controller::Error;

/// What the controller needs; built at start-up by `run` in lib.rs.
pub(crate) struct Deps<D> {
    /// Main client: Node, CSINode, StorageClass and PV caches (upstream's shared factory).
    pub(crate) client: Client,
    /// Capacity client (`--kube-api-capacity-qps/burst`): the CSIStorageCapacity cache and
    /// every write.
    pub(crate) capacity_client: Client,
    /// GetCapacity.
    pub(crate) driver: D,
    /// Flags and environment.
    pub(crate) settings: CapacitySettings,
    /// `--retry-interval-start` / `--retry-interval-max` (upstream uses them for both queues).
    pub(crate) retry: RetrySettings,
    /// Namespace, labels and owner of our objects.
    pub(crate) template: Template,
    /// The gauges.
    pub(crate) metrics: CapacityMetrics,
    /// `workqueue_*`.
    pub(crate) workqueue_metrics: WorkQueueMetrics,
}

/// Per-key bookkeeping.
#[derive(Debug, Default)]
struct KeyState {
    /// The last checked GetCapacity answer.
    value: Option<Capacity>,
    /// Current poll interval (before jitter).
    interval: Option<Duration>,
    /// When the next poll is due.
    due: Option<Instant>,
    /// A volume changed in this key's segment: poll at the next sync.
    refresh: bool,
    /// The object we last wrote: the cache may not have it yet, and a second sync in between
    /// must neither create a duplicate nor update from a stale copy.
    written: Option<CSIStorageCapacity>,
}

/// What the workers and the informer handlers share.
#[derive(Debug, Default)]
struct State {
    desired: BTreeSet<CapacityKey>,
    keys: HashMap<CapacityKey, KeyState>,
    /// Cached object names per key (kept by the CSIStorageCapacity handler): a sync looks up
    /// its object without scanning the cache.
    objects: HashMap<CapacityKey, BTreeSet<String>>,
}

type SharedState = Arc<Mutex<State>>;

fn lock(state: &SharedState) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

struct Ctx<D> {
    driver: D,
    settings: CapacitySettings,
    template: Template,
    metrics: CapacityMetrics,
    api: Api<CSIStorageCapacity>,
    caches: Caches,
    state: SharedState,
    topology: Arc<WorkQueue<()>>,
    capacities: Arc<WorkQueue<CapacityKey>>,
}

#[derive(Clone)]
struct Caches {
    classes: Store<StorageClass>,
    nodes: Store<Node>,
    csinodes: Store<CSINode>,
    capacities: Store<CSIStorageCapacity>,
    volumes: Store<PersistentVolume>,
}

impl Caches {
    async fn ready(&self) {
        // A writer is only dropped when its informer task is aborted, i.e. at shutdown.
        let _ = self.classes.wait_until_ready().await;
        let _ = self.nodes.wait_until_ready().await;
        let _ = self.csinodes.wait_until_ready().await;
        let _ = self.capacities.wait_until_ready().await;
        let _ = self.volumes.wait_until_ready().await;
    }
}

/// Runs capacity tracking until `stop` resolves, then lets in-flight work finish.
pub(crate) async fn run<D: CapacityDriver>(
    deps: Deps<D>,
    stop: impl Future<Output = ()> + Send,
) -> Result<(), Error> {
    let mut workers = Workers::new(deps.workqueue_metrics.clone());
    let topology = workers.queue("csitopology", deps.retry.start, deps.retry.max);
    let capacities = workers.queue("csistoragecapacity", deps.retry.start, deps.retry.max);
    let ready = Arc::new(AtomicBool::new(false));
    let state = SharedState::default();
    let handlers = Arc::new(Handlers {
        driver: deps.template.driver.clone(),
        topology: Arc::clone(&topology),
        capacities: Arc::clone(&capacities),
        state: Arc::clone(&state),
        ready: Arc::clone(&ready),
    });
    let (caches, tasks) = start_caches(&deps, &handlers);
    let mut background = tokio::task::JoinSet::new();
    for task in tasks {
        background.spawn(task);
    }
    let ctx = Arc::new(Ctx {
        api: Api::namespaced(deps.capacity_client, &deps.template.namespace),
        driver: deps.driver,
        settings: deps.settings,
        template: deps.template,
        metrics: deps.metrics,
        caches,
        state,
        topology,
        capacities,
    });
    let mut stop = std::pin::pin!(stop);
    tokio::select! {
        () = ctx.caches.ready() => tracing::info!("capacity caches synced, starting capacity tracking"),
        () = &mut stop => {
            workers.shut_down().await;
            background.shutdown().await;
            return Ok(());
        }
    }
    ready.store(true, Ordering::Release);
    ctx.topology.add(());
    workers.spawn(&ctx.topology, 1, &ctx, |ctx, ()| async move {
        sync_topology(&ctx).await
    });
    let threads = ctx.settings.threads;
    workers.spawn(
        &ctx.capacities,
        threads,
        &ctx,
        |ctx, key: CapacityKey| async move { sync_key(&ctx, &key).await },
    );
    let result = workers.run_until(stop).await;
    background.shutdown().await;
    result
}

/// Recomputes the wanted keys, queues new ones, deletes obsolete objects, sets the gauges.
async fn sync_topology<D>(ctx: &Ctx<D>) -> Outcome {
    let driver = &ctx.template.driver;
    let segments = decide::segments(
        driver,
        &ctx.caches.csinodes.state(),
        &ctx.caches.nodes.state(),
    );
    let desired = decide::desired_keys(
        &segments,
        &ctx.caches.classes.state(),
        driver,
        ctx.settings.for_immediate_binding,
    );
    let added: Vec<CapacityKey> = {
        let mut state = lock(&ctx.state);
        let added = desired.difference(&state.desired).cloned().collect();
        state.keys.retain(|k, _| desired.contains(k));
        state.desired.clone_from(&desired);
        added
    };
    for key in added {
        ctx.capacities.add(key);
    }
    let objects = ctx.caches.capacities.state();
    let obsolete = decide::obsolete(objects.iter().map(AsRef::as_ref), &desired);
    ctx.metrics
        .set(desired.len(), obsolete.current, obsolete.names.len());
    let mut outcome = Outcome::Done;
    for name in obsolete.names {
        match ctx.api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => tracing::info!(name, "deleted obsolete CSIStorageCapacity"),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(err) => {
                tracing::warn!(
                    name,
                    error = error_text(&err),
                    "cannot delete obsolete CSIStorageCapacity"
                );
                outcome = Outcome::Retry;
            }
        }
    }
    outcome
}

/// Polls the key if due, then makes its object say what the driver said; queues the key
/// again for its next poll.
async fn sync_key<D: CapacityDriver>(ctx: &Ctx<D>, key: &CapacityKey) -> Outcome {
    let now = Instant::now();
    let poll = {
        let mut state = lock(&ctx.state);
        if !state.desired.contains(key) {
            state.keys.remove(key);
            return Outcome::Done;
        }
        let k = state.keys.entry(key.clone()).or_default();
        let poll = k.refresh || k.value.is_none() || k.due.is_none_or(|due| now >= due);
        k.refresh = false;
        poll
    };
    if poll && let Err(outcome) = poll_key(ctx, key, now).await {
        // The retry must poll again even when the key's regular poll is not due yet.
        if let Some(k) = lock(&ctx.state).keys.get_mut(key) {
            k.refresh = true;
        }
        return outcome;
    }
    let Some((value, existing)) = current(ctx, key) else {
        return Outcome::Done;
    };
    let written = match decide::decide(key, value, existing.as_ref(), &ctx.template) {
        Step::Keep => None,
        Step::Create(object) => Some(ctx.api.create(&PostParams::default(), &object).await),
        Step::Update(object) => {
            let name = object.metadata.name.clone().unwrap_or_default();
            Some(
                ctx.api
                    .replace(&name, &PostParams::default(), &object)
                    .await,
            )
        }
    };
    match written {
        None => {}
        Some(Ok(object)) => {
            tracing::info!(
                name = object.metadata.name.as_deref().unwrap_or_default(),
                class = key.class,
                segment = ?key.segment,
                capacity = object.capacity.as_ref().map(|q| q.0.as_str()),
                "CSIStorageCapacity written"
            );
            if let Some(k) = lock(&ctx.state).keys.get_mut(key) {
                k.written = Some(object);
            }
        }
        Some(Err(err)) => {
            tracing::warn!(class = key.class, segment = ?key.segment, error = error_text(&err), "cannot write CSIStorageCapacity");
            return Outcome::Retry;
        }
    }
    ctx.capacities.forget(key);
    let due = lock(&ctx.state).keys.get(key).and_then(|k| k.due);
    due.map_or(Outcome::Done, |due| {
        Outcome::RetryAfter(
            due.saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1)),
        )
    })
}

/// The key's last value and its object: the cached one, or the one we wrote last if the
/// cache does not have it yet (or has an older version of it).
fn current<D>(ctx: &Ctx<D>, key: &CapacityKey) -> Option<(Capacity, Option<CSIStorageCapacity>)> {
    let state = lock(&ctx.state);
    let k = state.keys.get(key)?;
    let value = k.value?;
    let cached = state
        .objects
        .get(key)
        .and_then(|names| names.iter().next())
        .and_then(|name| {
            ctx.caches
                .capacities
                .get(&ObjectRef::new(name).within(&ctx.template.namespace))
        });
    let existing = match (cached, &k.written) {
        (Some(cached), Some(written)) if newer(written, &cached) => Some(written.clone()),
        (Some(cached), _) => Some((*cached).clone()),
        (None, written) => written.clone(),
    };
    Some((value, existing))
}

/// Whether `a` is a later version of the same object than `b` (kube-apiserver's
/// resourceVersions are etcd revisions, increasing integers).
fn newer(a: &CSIStorageCapacity, b: &CSIStorageCapacity) -> bool {
    let rv = |o: &CSIStorageCapacity| {
        o.metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
    };
    a.metadata.name == b.metadata.name && rv(a) > rv(b)
}

/// GetCapacity for `key`, checked and recorded with the key's next due time. `Err` is the
/// sync's outcome: the class is gone (done) or the call or its answer failed (retry).
async fn poll_key<D: CapacityDriver>(
    ctx: &Ctx<D>,
    key: &CapacityKey,
    now: Instant,
) -> Result<(), Outcome> {
    let Some(class) = ctx.caches.classes.get(&ObjectRef::new(&key.class)) else {
        // The topology sync drops the key.
        return Err(Outcome::Done);
    };
    // Upstream sends the class parameters as they are (spec Appendix B) and no capability.
    let request = GetCapacityRequest {
        volume_capabilities: Vec::new(),
        parameters: class
            .parameters
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
        accessible_topology: (!key.segment.is_empty()).then(|| Topology {
            segments: key.segment.clone().into_iter().collect(),
        }),
    };
    let response = ctx.driver.get_capacity(request).await.map_err(|err| {
        tracing::warn!(class = key.class, segment = ?key.segment, error = %err, "GetCapacity failed");
        Outcome::Retry
    })?;
    let value = decide::capacity_of(&response).map_err(|bad| {
        tracing::error!(
            class = key.class,
            segment = ?key.segment,
            "{bad}: the CSI driver's answer is not published"
        );
        Outcome::Retry
    })?;
    if let Some(k) = lock(&ctx.state).keys.get_mut(key) {
        let changed = k.value != Some(value);
        let interval = decide::next_interval(k.interval, changed, ctx.settings.poll_interval);
        k.interval = Some(interval);
        k.due = Some(now + decide::jittered(interval, fastrand::f64()));
        k.value = Some(value);
    }
    Ok(())
}

/// Informer events → queue adds (client-go's `ResourceEventHandler`s).
struct Handlers {
    driver: String,
    topology: Arc<WorkQueue<()>>,
    capacities: Arc<WorkQueue<CapacityKey>>,
    state: SharedState,
    /// Set once the caches are synced: PV events of the initial list are not provisioning.
    ready: Arc<AtomicBool>,
}

impl Handlers {
    fn capacity_changed(&self, change: &Change<'_, CSIStorageCapacity>) {
        let mut state = lock(&self.state);
        let (old, new, gone) = match change {
            Change::Applied { old, new } => (old.as_deref(), Some(*new), None),
            Change::Deleted(gone) => (None, None, Some(*gone)),
        };
        for object in old.into_iter().chain(gone) {
            if let (Some(key), Some(name)) = (decide::key_of(object), &object.metadata.name) {
                if let Some(names) = state.objects.get_mut(&key) {
                    names.remove(name);
                }
                if gone.is_some()
                    && let Some(k) = state.keys.get_mut(&key)
                    && k.written.as_ref().and_then(|w| w.metadata.name.as_ref()) == Some(name)
                {
                    // Deleted by someone else: re-create, do not update the deleted copy.
                    k.written = None;
                }
                self.capacities.add(key);
            }
        }
        if let Some(object) = new
            && let (Some(key), Some(name)) = (decide::key_of(object), &object.metadata.name)
        {
            state
                .objects
                .entry(key.clone())
                .or_default()
                .insert(name.clone());
            self.capacities.add(key);
        }
        drop(state);
        self.topology.add(());
    }

    fn volume_changed(&self, volume: &PersistentVolume) {
        if !self.ready.load(Ordering::Acquire) {
            return;
        }
        let mut state = lock(&self.state);
        let keys = decide::keys_for_volume(volume, &self.driver, &state.desired);
        for key in keys {
            if let Some(k) = state.keys.get_mut(&key) {
                k.refresh = true;
            }
            self.capacities.add(key);
        }
    }
}

/// Starts the five caches; their events go to `handlers`.
fn start_caches<D>(deps: &Deps<D>, handlers: &Arc<Handlers>) -> (Caches, Vec<InformerTask>) {
    let mut tasks = Vec::new();
    let topology_changed = {
        let handlers = Arc::clone(handlers);
        move || handlers.topology.add(())
    };
    let (classes, task) = informer(Api::all(deps.client.clone()), trim_class, {
        let changed = topology_changed.clone();
        move |_: Change<'_, StorageClass>| changed()
    });
    tasks.push(task);
    let (nodes, task) = informer(Api::all(deps.client.clone()), trim_node, {
        let changed = topology_changed.clone();
        move |change: Change<'_, Node>| {
            // Only labels are kept, so any real change is a label change; a resync is not.
            if let Change::Applied {
                old: Some(old),
                new,
            } = &change
                && old.metadata.labels == new.metadata.labels
            {
                return;
            }
            changed();
        }
    });
    tasks.push(task);
    let (csinodes, task) = informer(Api::all(deps.client.clone()), trim_csinode, {
        move |_: Change<'_, CSINode>| topology_changed()
    });
    tasks.push(task);
    let selector = watcher::Config::default().labels(&deps.template.label_selector());
    let (capacities, task) = filtered_informer(
        Api::namespaced(deps.capacity_client.clone(), &deps.template.namespace),
        selector,
        trim_capacity,
        {
            let handlers = Arc::clone(handlers);
            move |change: Change<'_, CSIStorageCapacity>| handlers.capacity_changed(&change)
        },
    );
    tasks.push(task);
    let (volumes, task) = informer(Api::all(deps.client.clone()), trim_volume, {
        let handlers = Arc::clone(handlers);
        move |change: Change<'_, PersistentVolume>| match change {
            Change::Applied { old: None, new } => handlers.volume_changed(new),
            Change::Deleted(gone) => handlers.volume_changed(gone),
            Change::Applied { .. } => {}
        }
    });
    tasks.push(task);
    let caches = Caches {
        classes,
        nodes,
        csinodes,
        capacities,
        volumes,
    };
    (caches, tasks)
}

fn trim_capacity(capacity: &mut CSIStorageCapacity) {
    trim_managed_fields(&mut capacity.metadata);
}

/// What [`decide::keys_for_volume`] reads: driver, class, node affinity.
fn trim_volume(volume: &mut PersistentVolume) {
    let meta = std::mem::take(&mut volume.metadata);
    volume.metadata = ObjectMeta {
        name: meta.name,
        resource_version: meta.resource_version,
        ..ObjectMeta::default()
    };
    let spec = volume.spec.take().unwrap_or_default();
    volume.spec = Some(PersistentVolumeSpec {
        storage_class_name: spec.storage_class_name,
        node_affinity: spec.node_affinity,
        csi: spec.csi.map(|csi| CSIPersistentVolumeSource {
            driver: csi.driver,
            ..CSIPersistentVolumeSource::default()
        }),
        ..PersistentVolumeSpec::default()
    });
    volume.status = None;
}
