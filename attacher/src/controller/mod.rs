//! The attacher's controllers: informers feed the VolumeAttachment queues (attach and detach
//! apart, upstream #761) and the PersistentVolume queue; workers carry out the decisions of
//! `crate::decide` (external-attacher `controller.go`, `csi_handler.go`, `trivial_handler.go`).

mod attach;
mod backlog;
mod detach;
mod locks;
mod reconcile;
mod settled;
#[cfg(test)]
mod tests;
mod unanswered;
mod volume;

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use csi_common::controller::{self, Outcome, Workers};
use csi_common::events::{self, EventRecorder, EventType};
use csi_common::informer::Store;
use csi_common::informer::{self, Change, InformerTask};
use csi_common::kube_client::KubeError;
use csi_common::workqueue::WorkQueue;
use csi_common::workqueue::metrics::WorkQueueMetrics;
use futures::FutureExt;
use k8s_openapi::api::storage::v1::CSINode;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client};

use self::locks::KeyLocks;
use self::settled::Settled;
use self::unanswered::ReadBack;
use crate::cached::{self, PersistentVolume, VolumeAttachment};
use crate::csi::AttachDriver;
use crate::decide::{self, VaAction};
use crate::filter;
use crate::request::PublishSettings;

pub(crate) use self::backlog::Backlog;

/// Queue names: upstream's two, plus the detach queue this attacher adds.
pub(crate) const ATTACH_QUEUE: &str = "csi-attacher-va";
/// Not upstream: detaches get their own queue and workers (upstream #761).
pub(crate) const DETACH_QUEUE: &str = "csi-attacher-va-detach";
/// Upstream's PersistentVolume queue.
pub(crate) const VOLUME_QUEUE: &str = "csi-attacher-pv";

/// Which handler the driver gets (spec §1.2 step 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handler {
    /// CONTROLLER_SERVICE with PUBLISH_UNPUBLISH_VOLUME: real attach and detach.
    Csi {
        /// LIST_VOLUMES and LIST_VOLUMES_PUBLISHED_NODES: the reconciler runs.
        reconcile: bool,
    },
    /// Anything else: VolumeAttachments are marked attached, nothing more.
    Trivial,
}

/// What the controllers are configured with.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// The driver name (`spec.attacher` of our VolumeAttachments).
    pub(crate) driver: String,
    /// CSI or trivial handler.
    pub(crate) handler: Handler,
    /// Capabilities and `--default-fstype`.
    pub(crate) publish: PublishSettings,
    /// `--worker-threads`: workers per queue.
    pub(crate) workers: usize,
    /// `--retry-interval-start` / `--retry-interval-max`.
    pub(crate) retry_start: Duration,
    /// See `retry_start`.
    pub(crate) retry_max: Duration,
    /// `--resync`.
    pub(crate) resync: Duration,
    /// `--reconcile-sync`.
    pub(crate) reconcile_every: Duration,
    /// `--timeout`: bounds a whole ListVolumes pass.
    pub(crate) timeout: Duration,
    /// `--max-entries`.
    pub(crate) max_entries: i32,
    /// `MutableCSINodeAllocatableCount`: attach errors carry the gRPC code.
    pub(crate) error_codes: bool,
}

/// The informer caches.
#[derive(Clone)]
pub(crate) struct Stores {
    attachments: Store<VolumeAttachment>,
    volumes: Store<PersistentVolume>,
    csi_nodes: Store<CSINode>,
}

impl std::fmt::Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stores")
            .field("attachments", &self.attachments.len())
            .finish_non_exhaustive()
    }
}

impl Stores {
    /// The VolumeAttachment cache (for the backlog metrics).
    pub(crate) fn attachments(&self) -> Store<VolumeAttachment> {
        self.attachments.clone()
    }

    fn attachment(&self, name: &str) -> Option<Arc<VolumeAttachment>> {
        self.attachments.get(&ObjectRef::new(name))
    }

    fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        self.volumes.get(&ObjectRef::new(name))
    }

    fn csi_node(&self, name: &str) -> Option<Arc<CSINode>> {
        self.csi_nodes.get(&ObjectRef::new(name))
    }
}

/// The queues, shared by the event handlers, the workers and the reconciler.
#[derive(Debug, Clone)]
struct Queues {
    attach: Arc<WorkQueue<String>>,
    detach: Arc<WorkQueue<String>>,
    volumes: Arc<WorkQueue<String>>,
}

impl Queues {
    /// Puts a VolumeAttachment on the queue of the operation it needs now.
    fn add_attachment(&self, va: &VolumeAttachment) {
        let Some(name) = va.metadata.name.clone() else {
            return;
        };
        if va.metadata.deletion_timestamp.is_some() {
            self.detach.add(name);
        } else {
            self.attach.add(name);
        }
    }
}

/// Everything a sync needs.
pub(crate) struct Context<D> {
    client: Client,
    driver: D,
    settings: Settings,
    finalizer: String,
    stores: Stores,
    queues: Queues,
    /// The reconciler's one-shot requests to redo an operation (upstream `forceSync`).
    forced: Mutex<HashSet<String>>,
    locks: Arc<KeyLocks>,
    /// Our finished attaches and detaches the cache may not show yet.
    settled: Arc<Settled>,
    recorder: EventRecorder,
}

impl<D> Context<D> {
    fn attachments(&self) -> Api<VolumeAttachment> {
        Api::all(self.client.clone())
    }

    fn volumes(&self) -> Api<PersistentVolume> {
        Api::all(self.client.clone())
    }

    /// Sends a JSON patch (RFC 6902) built by `crate::patch` to PV `name`; a body that is not
    /// a JSON patch is a serialization error, never an empty patch.
    async fn patch_volume(
        &self,
        name: &str,
        body: serde_json::Value,
    ) -> Result<PersistentVolume, kube::Error> {
        let patch: json_patch::Patch =
            serde_json::from_value(body).map_err(kube::Error::SerdeError)?;
        self.volumes()
            .patch(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Json::<()>(patch),
            )
            .await
    }

    fn take_forced(&self, name: &str) -> bool {
        self.forced
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name)
    }

    fn force(&self, name: &str) {
        self.forced
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_owned());
    }

    /// A Warning or Normal event on the VolumeAttachment and, when there is one, its PV (not
    /// upstream: external-attacher records no events, issue #363).
    fn event(&self, va: &VolumeAttachment, type_: EventType, reason: &'static str, message: &str) {
        self.recorder
            .event(&events::reference(va), type_, reason, message);
        if type_ == EventType::Warning
            && let Some(pv) = crate::source::pv_name(va).and_then(|name| self.stores.volume(name))
        {
            self.recorder
                .event(&events::reference(pv.as_ref()), type_, reason, message);
        }
    }
}

/// Starts the informers; the caches fill in the returned tasks.
pub(crate) fn stores(client: &Client) -> (Stores, Vec<InformerTask>, StoreHandlers) {
    let handlers = StoreHandlers::default();
    let (attachments, va_task) =
        informer::informer(Api::all(client.clone()), cached::trim_attachment, {
            let handlers = handlers.clone();
            move |change: Change<'_, VolumeAttachment>| handlers.attachment(change)
        });
    let (volumes, pv_task) = informer::informer(Api::all(client.clone()), cached::trim_volume, {
        let handlers = handlers.clone();
        move |change: Change<'_, PersistentVolume>| handlers.volume(&change)
    });
    let (csi_nodes, node_task) = informer::informer(
        Api::all(client.clone()),
        |node: &mut CSINode| informer::trim_managed_fields(&mut node.metadata),
        |_: Change<'_, CSINode>| {},
    );
    (
        Stores {
            attachments,
            volumes,
            csi_nodes,
        },
        vec![va_task, pv_task, node_task],
        handlers,
    )
}

/// The informers' event handlers; they do nothing until [`run`] connects them to the queues,
/// so the caches can fill while the sidecar waits for the Lease.
#[derive(Clone, Default)]
pub(crate) struct StoreHandlers(Arc<Mutex<Option<Arc<Routing>>>>);

impl std::fmt::Debug for StoreHandlers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreHandlers").finish_non_exhaustive()
    }
}

#[derive(Debug, Clone)]
struct Routing {
    driver: String,
    finalizer: String,
    queues: Queues,
    locks: Arc<KeyLocks>,
    settled: Arc<Settled>,
}

impl StoreHandlers {
    /// The routing, cheap to take for every event (one `Arc` clone).
    fn routing(&self) -> Option<Arc<Routing>> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn connect(&self, routing: Routing) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(routing));
    }

    /// VA add → queue; update → queue unless only our own error fields changed; delete → the
    /// PV queue, so its finalizer can go.
    fn attachment(&self, change: Change<'_, VolumeAttachment>) {
        let Some(routing) = self.routing() else {
            return;
        };
        match change {
            Change::Applied { old, new } => {
                if new.spec.attacher != routing.driver {
                    return;
                }
                // The cache has caught up with an attach: later versions are synced normally
                // (settled.rs), even when the filter below drops this event.
                if new.status.as_ref().is_some_and(|s| s.attached)
                    && let Some(name) = &new.metadata.name
                {
                    routing.settled.forget(name);
                }
                if old.is_none_or(|old| filter::va_update_needs_sync(&old, new)) {
                    routing.queues.add_attachment(new);
                }
            }
            Change::Deleted(va) => {
                if let Some(name) = &va.metadata.name {
                    routing.locks.forget(name);
                    routing.settled.gone(name);
                }
                if let Some(pv) = crate::source::pv_name(va) {
                    routing.queues.volumes.add(pv.to_owned());
                }
            }
        }
    }

    fn volume(&self, change: &Change<'_, PersistentVolume>) {
        let Some(routing) = self.routing() else {
            return;
        };
        if let Change::Applied { new, .. } = *change
            && filter::pv_needs_sync(new, &routing.finalizer, &routing.driver)
            && let Some(name) = &new.metadata.name
        {
            routing.queues.volumes.add(name.clone());
        }
    }
}

/// What [`run`] is built from.
pub(crate) struct Deps<D> {
    /// The main client (its QPS and burst are `--kube-api-qps` / `--kube-api-burst`).
    pub(crate) client: Client,
    /// The driver's controller RPCs.
    pub(crate) driver: D,
    /// Flags and capabilities.
    pub(crate) settings: Settings,
    /// The caches, started by [`stores`].
    pub(crate) stores: Stores,
    /// Events on VolumeAttachments and PersistentVolumes.
    pub(crate) recorder: EventRecorder,
    /// Where the queues report.
    pub(crate) metrics: WorkQueueMetrics,
}

/// Runs the controllers until `stop` resolves.
pub(crate) async fn run<D: AttachDriver>(
    deps: Deps<D>,
    handlers: &StoreHandlers,
    stop: impl Future<Output = ()> + Send + 'static,
) -> controller::Result<()> {
    let Deps {
        client,
        driver,
        settings,
        stores,
        recorder,
        metrics,
    } = deps;
    let stop = stop.boxed().shared();
    let mut workers = Workers::new(metrics);
    let queues = Queues {
        attach: workers.queue(ATTACH_QUEUE, settings.retry_start, settings.retry_max),
        detach: workers.queue(DETACH_QUEUE, settings.retry_start, settings.retry_max),
        volumes: workers.queue(VOLUME_QUEUE, settings.retry_start, settings.retry_max),
    };
    let finalizer = crate::names::finalizer(&settings.driver);
    let context = Arc::new(Context {
        client,
        driver,
        finalizer: finalizer.clone(),
        stores: stores.clone(),
        queues: queues.clone(),
        forced: Mutex::default(),
        locks: Arc::new(KeyLocks::default()),
        settled: Arc::new(Settled::default()),
        recorder,
        settings,
    });
    let attachments = stores.attachments.wait_until_ready().await;
    let volumes = stores.volumes.wait_until_ready().await;
    let csi_nodes = stores.csi_nodes.wait_until_ready().await;
    // The moment the attacher is ready to work, in the words csi-provisioner uses (the benches
    // and operators time a start by it); an informer gone before it synced (shutting down)
    // is no such moment.
    if attachments.is_ok() && volumes.is_ok() && csi_nodes.is_ok() {
        tracing::info!("caches synced, starting controllers");
    } else {
        tracing::warn!("an informer stopped before its cache synced");
    }
    handlers.connect(Routing {
        driver: context.settings.driver.clone(),
        finalizer,
        queues: queues.clone(),
        locks: Arc::clone(&context.locks),
        settled: Arc::clone(&context.settled),
    });
    resync(&context);

    let count = context.settings.workers;
    workers.spawn(&queues.attach, count, &context, |ctx, name| async move {
        sync_attachment(&ctx, &name).await
    });
    workers.spawn(&queues.detach, count, &context, |ctx, name| async move {
        sync_attachment(&ctx, &name).await
    });
    workers.spawn(&queues.volumes, count, &context, |ctx, name| async move {
        volume::sync(&ctx, &name).await
    });

    let mut background = tokio::task::JoinSet::new();
    background.spawn(resync_loop(Arc::clone(&context), stop.clone()));
    if context.settings.handler == (Handler::Csi { reconcile: true }) {
        background.spawn(reconcile::run(Arc::clone(&context), stop.clone()));
    }
    let result = workers.run_until(stop).await;
    background.shutdown().await;
    result
}

/// client-go's resync: every cached VolumeAttachment of ours, and every PV that needs a sync,
/// goes on its queue again (a safety net for missed events, spec §1.1 `--resync`).
fn resync<D>(ctx: &Context<D>) {
    for va in ctx.stores.attachments.state() {
        if va.spec.attacher == ctx.settings.driver {
            ctx.queues.add_attachment(&va);
        }
    }
    for pv in ctx.stores.volumes.state() {
        if filter::pv_needs_sync(&pv, &ctx.finalizer, &ctx.settings.driver)
            && let Some(name) = &pv.metadata.name
        {
            ctx.queues.volumes.add(name.clone());
        }
    }
}

async fn resync_loop<D: Send + Sync + 'static>(
    ctx: Arc<Context<D>>,
    stop: futures::future::Shared<futures::future::BoxFuture<'static, ()>>,
) {
    if ctx.settings.resync.is_zero() {
        return;
    }
    let mut ticks = tokio::time::interval(ctx.settings.resync);
    ticks.tick().await;
    let mut stop = std::pin::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => return,
            _ = ticks.tick() => resync(&ctx),
        }
    }
}

/// One VolumeAttachment, from either queue: decided from the cache, then carried out.
async fn sync_attachment<D: AttachDriver>(ctx: &Context<D>, name: &str) -> Outcome {
    let _guard = ctx.locks.lock(name).await;
    let unanswered = ctx.settled.take_unanswered(name);
    // Our own finished write, read before the cache (settled.rs says why the order matters).
    let settled = ctx.settled.entry(name);
    let Some(mut va) = ctx.stores.attachment(name) else {
        ctx.settled.gone(name);
        return Outcome::Done;
    };
    if unanswered {
        // Our last write may be stored though its answer was lost (settled.rs): act on the
        // object as the API server has it, not on a cache that may predate the write.
        match unanswered::read_back(ctx, name, &va).await {
            Ok(ReadBack::Settled) => return Outcome::Done,
            Ok(ReadBack::Pending(fresh)) => va = fresh,
            Err(err) => {
                ctx.settled.mark_unanswered(name);
                let error = KubeError(err);
                tracing::warn!(va = name, %error, "cannot read the VolumeAttachment");
                return Outcome::Retry;
            }
        }
    }
    if ctx.settings.handler == Handler::Trivial {
        return attach::trivial(ctx, &va).await;
    }
    let forced = ctx.take_forced(name);
    if forced {
        // The driver says the volume is not published: no kept answer stands for it.
        ctx.settled.drop_answer(name);
    }
    match decide::va_action(&va, &ctx.settings.driver, &ctx.finalizer, forced) {
        VaAction::NotOurs | VaAction::UpToDate => {
            ctx.settled.forget(name);
            ctx.settled.drop_answer(name);
            Outcome::Done
        }
        action if !forced && settled.is_some_and(|record| record.covers(&va, action)) => {
            Outcome::Done
        }
        VaAction::Attach => attach::attach(ctx, &va).await,
        VaAction::Detach => detach::detach(ctx, &va).await,
    }
}

/// The API server answered 404: the object is already gone.
fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 404)
}
