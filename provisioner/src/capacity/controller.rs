//! The executor of capacity tracking: two queues named as upstream's, and
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
use csi_common::informer::{Store, resource_version};
use csi_common::kube_client::error_text;
use csi_common::workqueue::WorkQueue;
use csi_common::workqueue::metrics::WorkQueueMetrics;
use k8s_openapi::api::storage::v1::CSIStorageCapacity;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client};
use proto::csi::v1::{GetCapacityRequest, Topology};
use tokio::time::Instant;

use super::caches::{Caches, Handlers, start_caches};
use super::csi::CapacityDriver;
use super::decide::{self, Capacity, CapacityKey, SegmentSource, Step, Template, Tombstone};
use super::metrics::CapacityMetrics;
use super::settings::CapacitySettings;
use super::version::{Capacity as Object, CapacityVersion};
use crate::args::RetrySettings;

pub(crate) use csi_common::controller::Error;

/// What the controller needs; built at start-up by `run` in lib.rs.
pub(crate) struct Deps<D> {
    /// Main client: Node, CSINode, StorageClass and PV caches (upstream's shared factory).
    pub(crate) client: Client,
    /// Capacity client (`--kube-api-capacity-qps/burst`): the CSIStorageCapacity cache and
    /// every write.
    pub(crate) capacity_client: Client,
    /// The version the start-up probe picked: the cache and every write use it.
    pub(crate) version: CapacityVersion,
    /// GetCapacity.
    pub(crate) driver: D,
    /// Flags and environment.
    pub(crate) settings: CapacitySettings,
    /// `--retry-interval-start` / `--retry-interval-max` (upstream uses them for both queues).
    pub(crate) retry: RetrySettings,
    /// Namespace, labels and owner of our objects.
    pub(crate) template: Template,
    /// Central mode (the caches) or node mode (this node's segment).
    pub(crate) segments: SegmentSource,
    /// The gauges.
    pub(crate) metrics: CapacityMetrics,
    /// `workqueue_*`.
    pub(crate) workqueue_metrics: WorkQueueMetrics,
}

/// Per-key bookkeeping.
#[derive(Debug, Default)]
pub(super) struct KeyState {
    /// The last checked GetCapacity answer.
    value: Option<Capacity>,
    /// Current poll interval (before jitter).
    interval: Option<Duration>,
    /// When the next poll is due.
    due: Option<Instant>,
    /// A volume changed in this key's segment: poll at the next sync.
    pub(super) refresh: bool,
    /// The object we last wrote: the cache may not have it yet, and a second sync in between
    /// must neither create a duplicate nor update from a stale copy.
    written: Option<CSIStorageCapacity>,
    /// The last of the key's objects the informer saw deleted: a write's answer that comes
    /// after its deletion's event is not the key's object.
    deleted: Option<Tombstone>,
}

impl KeyState {
    /// The informer saw `object`, one of this key's objects, deleted (by a user, or by the
    /// obsolete sweep): the next sync creates the object again rather than update it.
    pub(super) fn saw_deleted(&mut self, object: &CSIStorageCapacity) {
        self.deleted = Tombstone::of(object);
        if let (Some(deleted), Some(written)) = (&self.deleted, &self.written)
            && deleted.buries(written)
        {
            self.written = None;
        }
    }

    /// Our create or update of `object` succeeded.
    fn wrote(&mut self, object: CSIStorageCapacity) {
        let buried = self.deleted.as_ref().is_some_and(|d| d.buries(&object));
        self.written = (!buried).then_some(object);
    }
}

/// What the workers and the informer handlers share.
#[derive(Debug, Default)]
pub(super) struct State {
    pub(super) desired: BTreeSet<CapacityKey>,
    pub(super) keys: HashMap<CapacityKey, KeyState>,
    /// Cached object names per key (kept by the CSIStorageCapacity handler): a sync looks up
    /// its object without scanning the cache.
    pub(super) objects: HashMap<CapacityKey, BTreeSet<String>>,
}

pub(super) type SharedState = Arc<Mutex<State>>;

pub(super) fn lock(state: &SharedState) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

struct Ctx<D> {
    driver: D,
    settings: CapacitySettings,
    template: Template,
    segments: SegmentSource,
    metrics: CapacityMetrics,
    api: Api<Object>,
    caches: Caches,
    state: SharedState,
    topology: Arc<WorkQueue<()>>,
    capacities: Arc<WorkQueue<CapacityKey>>,
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
        api: Api::namespaced_with(
            deps.capacity_client,
            &deps.template.namespace,
            &deps.version,
        ),
        driver: deps.driver,
        settings: deps.settings,
        template: deps.template,
        segments: deps.segments,
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
    let segments = decide::wanted_segments(
        &ctx.segments,
        driver,
        &ctx.caches
            .csinodes
            .as_ref()
            .map(Store::state)
            .unwrap_or_default(),
        &ctx.caches
            .nodes
            .as_ref()
            .map(Store::state)
            .unwrap_or_default(),
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
    let obsolete = decide::obsolete(objects.iter().map(|o| &o.0), &desired, &ctx.template);
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
        Step::Create(object) => Some(
            ctx.api
                .create(&PostParams::default(), &Object(*object))
                .await,
        ),
        Step::Update(object) => {
            let name = object.metadata.name.clone().unwrap_or_default();
            Some(
                ctx.api
                    .replace(&name, &PostParams::default(), &Object(*object))
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
                k.wrote(object.0);
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
        (Some(cached), _) => Some(cached.0.clone()),
        (None, written) => written.clone(),
    };
    Some((value, existing))
}

/// Whether `a` is a later version of the same object than `b`.
fn newer(a: &CSIStorageCapacity, b: &CSIStorageCapacity) -> bool {
    a.metadata.name == b.metadata.name
        && resource_version(&a.metadata) > resource_version(&b.metadata)
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
