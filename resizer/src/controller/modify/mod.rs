//! The modify controller (external-resizer `pkg/modifycontroller/controller.go`, spec
//! sidecars.md §2.5): the VolumeAttributesClass informer, its own `<driver>-pvc` queue (the
//! same name as the resize queue, so the `workqueue_*` series merge as upstream's do), fed by
//! the PVC informer shared with the resize controller, and `--workers` workers running
//! [`sync::sync`]. It runs only for a driver with MODIFY_VOLUME and the
//! `VolumeAttributesClass` gate on.

#[cfg(test)]
mod properties;
mod sync;

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use csi_common::controller::{self, Workers};
use csi_common::events::EventRecorder;
use csi_common::informer::Store;
use csi_common::informer::{self, Change, InformerTask};
use csi_common::workqueue::WorkQueue;
use csi_common::workqueue::metrics::WorkQueueMetrics;
use futures::FutureExt;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::VolumeAttributesClass;
use kube::Client;
use kube::runtime::reflector::ObjectRef;

use super::state::State;
use super::{Stores, key};
use crate::csi::ModifyDriver;
use crate::decide::bound_volume;
use crate::modify::decide;

/// What the modify controller is configured with.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// The driver name.
    pub(crate) driver: String,
    /// `--extra-modify-metadata`.
    pub(crate) extra_metadata: bool,
    /// `--workers` (the modify controller runs as many again as the resize controller).
    pub(crate) workers: usize,
    /// `--retry-interval-start`.
    pub(crate) retry_start: Duration,
    /// `--retry-interval-max`; also the slow-set window of infeasible classes.
    pub(crate) retry_max: Duration,
    /// `--resync-period`.
    pub(crate) resync: Duration,
}

/// What [`run`] is built from.
pub(crate) struct Deps<M> {
    /// The main client.
    pub(crate) client: Client,
    /// ControllerModifyVolume.
    pub(crate) driver: M,
    /// Flags.
    pub(crate) settings: Settings,
    /// The claim and volume caches shared with the resize controller.
    pub(crate) stores: Stores,
    /// The VolumeAttributesClass cache, started by [`classes`].
    pub(crate) classes: Store<VolumeAttributesClass>,
    /// Events on claims.
    pub(crate) recorder: EventRecorder,
    /// Where the queue reports.
    pub(crate) metrics: WorkQueueMetrics,
}

/// Everything a sync needs.
pub(crate) struct Context<M> {
    client: Client,
    driver: M,
    settings: Settings,
    stores: Stores,
    classes: Store<VolumeAttributesClass>,
    /// The slow set of infeasible classes and the claims this controller wrote.
    state: Arc<State>,
    /// Claims whose last call may still run on the driver: their target must not change.
    uncertain: Arc<Mutex<HashSet<String>>>,
    recorder: EventRecorder,
}

impl<M> Context<M> {
    fn class(&self, name: &str) -> Option<Arc<VolumeAttributesClass>> {
        self.classes.get(&ObjectRef::new(name))
    }

    fn uncertain(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.uncertain
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// The modify controller's informer handlers; they do nothing until [`run`] connects them, so
/// the caches can fill while the sidecar waits for the Lease.
#[derive(Clone, Default)]
pub(crate) struct Handlers(Arc<Mutex<Option<Arc<Routing>>>>);

impl std::fmt::Debug for Handlers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handlers").finish_non_exhaustive()
    }
}

struct Routing {
    queue: Arc<WorkQueue<String>>,
    stores: Stores,
    state: Arc<State>,
    uncertain: Arc<Mutex<HashSet<String>>>,
}

impl Handlers {
    fn routing(&self) -> Option<Arc<Routing>> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// add → queue; update → queue if [`decide::update_needs_sync`]; delete → forget the
    /// backoff (upstream `addPVC`, `updatePVC`, `deletePVC`) and, unlike upstream, what this
    /// controller remembers of the claim (a claim created again under the name starts clean).
    pub(super) fn claim(&self, change: &Change<'_, PersistentVolumeClaim>) {
        let Some(routing) = self.routing() else {
            return;
        };
        match *change {
            Change::Applied { ref old, new } => {
                let queue = old.as_deref().is_none_or(|old| {
                    let cached = bound_volume(new).is_some_and(|pv| routing.stores.has_volume(pv));
                    decide::update_needs_sync(old, new, cached)
                });
                if queue {
                    routing.queue.add(key(new));
                }
            }
            Change::Deleted(pvc) => {
                let key = key(pvc);
                routing.queue.forget(&key);
                routing.state.forget(&key, None);
                routing
                    .uncertain
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&key);
            }
        }
    }

    /// Beyond upstream (no handlers on its class informer): a class that appears queues the
    /// claims waiting for it, instead of leaving them `Pending` until the next resync.
    fn class(&self, change: &Change<'_, VolumeAttributesClass>) {
        let Some(routing) = self.routing() else {
            return;
        };
        if let Change::Applied { old: None, new } = *change {
            let name = new.metadata.name.as_deref().unwrap_or_default();
            for pvc in routing.stores.all_claims() {
                if decide::waits_for_class(&pvc, name) {
                    routing.queue.add(key(&pvc));
                }
            }
        }
    }
}

/// Starts the VolumeAttributesClass informer (only when the modify controller runs, so
/// expansion alone needs no RBAC for classes).
pub(crate) fn classes(
    client: &Client,
    handlers: &Handlers,
) -> (Store<VolumeAttributesClass>, InformerTask) {
    let handlers = handlers.clone();
    informer::informer(
        kube::Api::all(client.clone()),
        |vac: &mut VolumeAttributesClass| informer::trim_managed_fields(&mut vac.metadata),
        move |change: Change<'_, VolumeAttributesClass>| handlers.class(&change),
    )
}

/// Runs the modify controller until `stop` resolves.
pub(crate) async fn run<M: ModifyDriver>(
    deps: Deps<M>,
    handlers: &Handlers,
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
    let stores = deps.stores;
    let _ = stores.claims.wait_until_ready().await;
    let _ = stores.volumes.wait_until_ready().await;
    let _ = deps.classes.wait_until_ready().await;
    // Upstream `initUncertainPVCs`: a call may have been running for every InProgress claim
    // when the previous process stopped.
    let uncertain: HashSet<String> = stores
        .all_claims()
        .filter(decide::uncertain_at_start)
        .map(|pvc| key(&pvc))
        .collect();
    let state = Arc::new(State::new(settings.retry_max));
    let uncertain = Arc::new(Mutex::new(uncertain));
    let context = Arc::new(Context {
        client: deps.client,
        driver: deps.driver,
        state: Arc::clone(&state),
        settings,
        stores: stores.clone(),
        classes: deps.classes,
        uncertain: Arc::clone(&uncertain),
        recorder: deps.recorder,
    });
    *handlers.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(Routing {
        queue: Arc::clone(&queue),
        stores: stores.clone(),
        state,
        uncertain,
    }));
    workers.spawn(
        &queue,
        context.settings.workers,
        &context,
        |ctx, key| async move { sync::sync(&ctx, &key).await },
    );
    super::drive(workers, queue, stores, context.settings.resync, stop).await
}
