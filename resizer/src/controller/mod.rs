//! The resize controller: the PVC and PV informers, the `<driver>-pvc` queue fed by the PVC
//! event handlers and the resync, and `--workers` workers running [`expand::sync`]
//! (external-resizer `pkg/controller/controller.go`, spec sidecars.md §2.4).

mod expand;
#[cfg(test)]
mod fixture;
mod legacy;
pub(crate) mod modify;
mod pods;
mod state;
mod write;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use csi_common::capabilities::ControllerCapabilities;
use csi_common::controller::{self, Workers};
use csi_common::events::EventRecorder;
use csi_common::informer::Store;
use csi_common::informer::{self, Change, InformerTask, Keyed as _};
use csi_common::workqueue::WorkQueue;
use csi_common::workqueue::metrics::WorkQueueMetrics;
use futures::FutureExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

use self::pods::PodWatch;
use self::state::State;
use crate::cached;
use crate::csi::ExpandDriver;
use crate::mode::Resizer;
use crate::{decide, inuse};

/// What the controller is configured with.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// The driver name.
    pub(crate) driver: String,
    /// CSI or trivial resizer.
    pub(crate) resizer: Resizer,
    /// The driver's controller capabilities (SINGLE_NODE_MULTI_WRITER for access modes).
    pub(crate) capabilities: ControllerCapabilities,
    /// `--workers`.
    pub(crate) workers: usize,
    /// `--retry-interval-start`.
    pub(crate) retry_start: Duration,
    /// `--retry-interval-max`; also the slow-set window.
    pub(crate) retry_max: Duration,
    /// `--resync-period`.
    pub(crate) resync: Duration,
    /// The `AnnotateFsResize` gate.
    pub(crate) annotate_fs_resize: bool,
    /// When a pod using the claim holds the call back (`--handle-volume-inuse-error` and
    /// the driver's VolumeExpansion capability).
    pub(crate) in_use: inuse::Gate,
    /// The `RecoverVolumeExpansionFailure` gate.
    pub(crate) flow: Flow,
}

/// Which resize flow runs (spec §2.4 step 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    /// `RecoverVolumeExpansionFailure=true` (GA, the default).
    ExpandAndRecover,
    /// `RecoverVolumeExpansionFailure=false`.
    Legacy,
}

/// The informer caches.
#[derive(Clone)]
pub(crate) struct Stores {
    /// Projections: a lookup builds the real PersistentVolumeClaim (see [`crate::cached`]).
    claims: Store<cached::PersistentVolumeClaim>,
    /// Projections: a lookup builds the real PersistentVolume (see [`crate::cached`]).
    volumes: Store<cached::PersistentVolume>,
}

impl std::fmt::Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stores")
            .field("claims", &self.claims.len())
            .field("volumes", &self.volumes.len())
            .finish()
    }
}

impl Stores {
    fn claim(&self, key: &str) -> Option<Arc<PersistentVolumeClaim>> {
        let (namespace, name) = key.split_once('/')?;
        let pvc = self.claims.lookup(Some(namespace), name)?;
        Some(Arc::new(pvc.to_full()))
    }

    /// Every cached claim, each rebuilt as the caller reaches it: rebuilding them all into one
    /// `Vec` held thousands of full claims at once, the peak of a start with 5,000 claims
    /// (docs/bench.md, "A fresh start").
    fn all_claims(&self) -> impl Iterator<Item = PersistentVolumeClaim> {
        self.claims.state().into_iter().map(|pvc| pvc.to_full())
    }

    /// The queue key of every cached claim, without rebuilding any.
    fn claim_keys(&self) -> Vec<String> {
        self.claims
            .state()
            .iter()
            .map(|pvc| {
                let (namespace, name) = pvc.key();
                queue_key(namespace, name)
            })
            .collect()
    }

    fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        let pv = self.volumes.lookup(None, name)?;
        Some(Arc::new(pv.to_full()))
    }

    /// Whether PV `name` is cached, without building it.
    fn has_volume(&self, name: &str) -> bool {
        self.volumes.lookup(None, name).is_some()
    }
}

/// `namespace/name`, the queue key (client-go `MetaNamespaceKeyFunc`).
fn key(pvc: &PersistentVolumeClaim) -> String {
    queue_key(pvc.namespace().as_deref(), &pvc.name_any())
}

/// `namespace/name`, the work queue's key of a claim.
fn queue_key(namespace: Option<&str>, name: &str) -> String {
    format!("{}/{name}", namespace.unwrap_or_default())
}

/// Starts the informers; the caches fill in the returned tasks.
pub(crate) fn stores(client: &Client) -> (Stores, Vec<InformerTask>, StoreHandlers) {
    let handlers = StoreHandlers::default();
    let (claims, pvc_task) = informer::projected_informer(
        kube::Api::<cached::ClaimWire>::all(client.clone()),
        watcher::Config::default(),
        cached::claim_projection(),
        {
            let handlers = handlers.clone();
            move |change: Change<'_, cached::PersistentVolumeClaim>| match change {
                Change::Applied { old, new } => handlers.claim(&Change::Applied {
                    old: old.map(|old| Arc::new(old.to_full())),
                    new: &new.to_full(),
                }),
                Change::Deleted(pvc) => handlers.claim(&Change::Deleted(&pvc.to_full())),
            }
        },
    );
    let (volumes, pv_task) = informer::projected_informer(
        kube::Api::<cached::VolumeWire>::all(client.clone()),
        watcher::Config::default(),
        cached::volume_projection(),
        {
            let handlers = handlers.clone();
            move |change: Change<'_, cached::PersistentVolume>| handlers.volume(&change)
        },
    );
    (
        Stores { claims, volumes },
        vec![pvc_task, pv_task],
        handlers,
    )
}

/// The PVC informer's event handlers; they do nothing until [`run`] connects them to the
/// queue, so the caches can fill while the sidecar waits for the Lease. The second field
/// routes to the modify controller's queue, connected by [`modify::run`].
#[derive(Clone, Default)]
pub(crate) struct StoreHandlers(Arc<Mutex<Option<Arc<Routing>>>>, modify::Handlers);

impl std::fmt::Debug for StoreHandlers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreHandlers").finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct Routing {
    queue: Arc<WorkQueue<String>>,
    state: Arc<State>,
    pods: Option<Arc<PodWatch>>,
}

impl StoreHandlers {
    /// The modify controller's handlers.
    pub(crate) fn modify(&self) -> &modify::Handlers {
        &self.1
    }

    fn connect(&self, routing: Routing) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(routing));
    }

    /// Not upstream (whose PV informer has no handlers): a PV carrying the pre-resize-capacity
    /// annotation queues its claim, so the annotation goes even when kubelet finished the
    /// claim before this cache saw the annotation being added.
    fn volume(&self, change: &Change<'_, cached::PersistentVolume>) {
        let Some(routing) = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        else {
            return;
        };
        if let Change::Applied { new, .. } = *change
            && let Some(key) = decide::claim_of_annotated_volume(&new.to_full())
        {
            routing.queue.add(key);
        }
    }

    /// add → queue; update → queue if [`decide::update_needs_sync`]; delete → forget its
    /// backoff and memory.
    fn claim(&self, change: &Change<'_, PersistentVolumeClaim>) {
        self.1.claim(change);
        let Some(routing) = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        else {
            return;
        };
        match *change {
            Change::Applied { ref old, new } => {
                if old
                    .as_deref()
                    .is_none_or(|old| decide::update_needs_sync(old, new))
                {
                    routing.queue.add(key(new));
                }
            }
            Change::Deleted(pvc) => {
                let key = key(pvc);
                routing.queue.forget(&key);
                routing.state.forget(&key, decide::bound_volume(pvc));
                if let Some(pods) = &routing.pods {
                    pods.forget(&pvc.namespace().unwrap_or_default(), &pvc.name_any());
                }
            }
        }
    }
}

/// Everything a sync needs.
pub(crate) struct Context<D> {
    client: Client,
    driver: D,
    settings: Settings,
    stores: Stores,
    state: Arc<State>,
    recorder: EventRecorder,
    /// The pod watches of the in-use gate; `None` with `--handle-volume-inuse-error=false`.
    pods: Option<Arc<PodWatch>>,
}

/// What [`run`] is built from.
pub(crate) struct Deps<D> {
    /// The main client.
    pub(crate) client: Client,
    /// ControllerExpandVolume.
    pub(crate) driver: D,
    /// Flags and capabilities.
    pub(crate) settings: Settings,
    /// The caches, started by [`stores`].
    pub(crate) stores: Stores,
    /// Events on claims.
    pub(crate) recorder: EventRecorder,
    /// Where the queue reports.
    pub(crate) metrics: WorkQueueMetrics,
}

/// Runs the controller until `stop` resolves.
pub(crate) async fn run<D: ExpandDriver>(
    deps: Deps<D>,
    handlers: &StoreHandlers,
    stop: impl Future<Output = ()> + Send + 'static,
) -> controller::Result<()> {
    let stop = stop.boxed().shared();
    let settings = deps.settings;
    let mut workers = Workers::new(deps.metrics);
    let queue = workers.queue(
        &crate::names::queue_name(&settings.driver),
        settings.retry_start,
        settings.retry_max,
    );
    let state = Arc::new(State::new(settings.retry_max));
    let pods = (settings.in_use != inuse::Gate::Off).then(|| {
        let queue = Arc::clone(&queue);
        // The claim's last pod is gone: sync it now, with its backoff reset (the minutes it
        // waited for the pod say nothing about the driver, and an offline driver may still
        // answer FAILED_PRECONDITION once or twice while the volume is being detached).
        PodWatch::new(
            deps.client.clone(),
            Arc::new(move |key: String| {
                queue.forget(&key);
                queue.add(key);
            }),
        )
    });
    let stores = deps.stores;
    let context = Arc::new(Context {
        client: deps.client,
        driver: deps.driver,
        stores: stores.clone(),
        state: Arc::clone(&state),
        recorder: deps.recorder,
        pods: pods.clone(),
        settings,
    });
    let claims = stores.claims.wait_until_ready().await;
    let volumes = stores.volumes.wait_until_ready().await;
    // The moment the resizer is ready to work, in the words csi-provisioner uses (the benches
    // and operators time a start by it); an informer gone before it synced (shutting down)
    // is no such moment.
    if claims.is_ok() && volumes.is_ok() {
        tracing::info!("caches synced, starting controllers");
    } else {
        tracing::warn!("an informer stopped before its cache synced");
    }
    handlers.connect(Routing {
        queue: Arc::clone(&queue),
        state,
        pods,
    });
    workers.spawn(
        &queue,
        context.settings.workers,
        &context,
        |ctx, key| async move { expand::sync(&ctx, &key).await },
    );
    drive(workers, queue, stores, context.settings.resync, stop).await
}

/// The end of both controllers' `run`: every cached claim queued once, the periodic resync,
/// and the workers until `stop`.
async fn drive(
    workers: Workers,
    queue: Arc<WorkQueue<String>>,
    stores: Stores,
    every: Duration,
    stop: futures::future::Shared<futures::future::BoxFuture<'static, ()>>,
) -> controller::Result<()> {
    resync(&stores, &queue);
    let mut background = tokio::task::JoinSet::new();
    background.spawn(resync_loop(stores, queue, every, stop.clone()));
    let result = workers.run_until(stop).await;
    background.shutdown().await;
    result
}

/// client-go's resync: every cached claim goes on the queue again (the update handler's
/// same-resourceVersion rule).
fn resync(stores: &Stores, queue: &WorkQueue<String>) {
    for key in stores.claim_keys() {
        queue.add(key);
    }
}

async fn resync_loop(
    stores: Stores,
    queue: Arc<WorkQueue<String>>,
    every: Duration,
    stop: futures::future::Shared<futures::future::BoxFuture<'static, ()>>,
) {
    if every.is_zero() {
        return;
    }
    let mut ticks = tokio::time::interval(every);
    ticks.tick().await;
    let mut stop = std::pin::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => return,
            _ = ticks.tick() => resync(&stores, &queue),
        }
    }
}

#[cfg(test)]
mod tests;
