//! `sync_attachment` with a counting driver (the seam of `crate::csi`) against testbed's
//! in-memory API server, its watches cut so the caches stay behind: the case of a write stored
//! with its answer lost, which needs the API server's `lose_answers` fault and a cache that a
//! broken connection left behind, together.

use std::sync::atomic::{AtomicUsize, Ordering};

use csi_common::status::CsiError;
use csi_common::workqueue::metrics::QueueMetrics;
use k8s_openapi::api::core::v1::PersistentVolume as FullVolume;
use k8s_openapi::api::storage::v1::VolumeAttachment as FullAttachment;
use kube::api::DeleteParams;
use proto::csi::v1::{
    ControllerPublishVolumeRequest, ControllerUnpublishVolumeRequest, ListVolumesRequest,
    ListVolumesResponse,
};
use serde_json::json;
use testbed_cluster::apiserver::ApiServer;
use testbed_support::wait::eventually;

use super::*;
use crate::request::PublishSettings;

const DRIVER: &str = "fake.csi.example.com";
const VA: &str = "va-1";

/// Counts publishes and unpublishes; every call succeeds.
#[derive(Debug, Default)]
struct CountingDriver {
    publishes: AtomicUsize,
    unpublishes: AtomicUsize,
}

impl AttachDriver for CountingDriver {
    async fn publish(
        &self,
        _: ControllerPublishVolumeRequest,
        _: bool,
    ) -> Result<std::collections::HashMap<String, String>, CsiError> {
        self.publishes.fetch_add(1, Ordering::SeqCst);
        Ok(std::collections::HashMap::new())
    }

    async fn unpublish(
        &self,
        _: ControllerUnpublishVolumeRequest,
        _: bool,
    ) -> Result<(), CsiError> {
        self.unpublishes.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    async fn list_volumes(
        &self,
        _: ListVolumesRequest,
        _: Duration,
    ) -> Result<ListVolumesResponse, CsiError> {
        Ok(ListVolumesResponse::default())
    }
}

struct Harness {
    server: ApiServer,
    ctx: Context<CountingDriver>,
    informers: tokio::task::JoinSet<()>,
}

fn settings() -> Settings {
    Settings {
        driver: DRIVER.into(),
        handler: Handler::Csi { reconcile: false },
        publish: PublishSettings::default(),
        workers: 1,
        retry_start: Duration::from_millis(100),
        retry_max: Duration::from_secs(1),
        resync: Duration::ZERO,
        reconcile_every: Duration::from_mins(1),
        timeout: Duration::from_secs(10),
        max_entries: 0,
        error_codes: false,
    }
}

fn queue() -> Arc<WorkQueue<String>> {
    WorkQueue::new(
        Duration::from_millis(100),
        Duration::from_secs(1),
        QueueMetrics::unregistered("test"),
    )
    .0
}

/// A PV of [`DRIVER`] (with our finalizer), its node's CSINode and VolumeAttachment [`VA`], and informers
/// filling the caches.
fn harness() -> Harness {
    let server = ApiServer::new();
    let client = server.client();
    // The PV carries our finalizer already, so a repeated attach is not stopped earlier by
    // a PV patch built from a stale cache.
    let pv: FullVolume = serde_json::from_value(json!({
        "metadata": {"name": "pv-1", "finalizers": [crate::names::finalizer(DRIVER)]},
        "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"},
            "csi": {"driver": DRIVER, "volumeHandle": "vol-1"}}}))
    .unwrap();
    server.put_object(&pv).unwrap();
    let node: CSINode = serde_json::from_value(json!({
        "metadata": {"name": "node-1"},
        "spec": {"drivers": [{"name": DRIVER, "nodeID": "node-id-1"}]}}))
    .unwrap();
    server.put_object(&node).unwrap();
    let va: FullAttachment = serde_json::from_value(json!({
        "metadata": {"name": VA},
        "spec": {"attacher": DRIVER, "nodeName": "node-1",
            "source": {"persistentVolumeName": "pv-1"}}}))
    .unwrap();
    server.put_object(&va).unwrap();

    let (stores, tasks, _handlers) = stores(&client);
    let mut informers = tokio::task::JoinSet::new();
    for task in tasks {
        informers.spawn(task);
    }
    let ctx = Context {
        client,
        driver: CountingDriver::default(),
        finalizer: crate::names::finalizer(DRIVER),
        stores,
        queues: Queues {
            attach: queue(),
            detach: queue(),
            volumes: queue(),
        },
        forced: Mutex::default(),
        locks: Arc::new(KeyLocks::default()),
        settled: Arc::new(Settled::default()),
        recorder: EventRecorder::channel(16).0,
        settings: settings(),
    };
    Harness {
        server,
        ctx,
        informers,
    }
}

impl Harness {
    /// Waits until the cached VA satisfies `ready` and the other caches are full.
    async fn cached(&self, ready: impl Fn(&VolumeAttachment) -> bool) {
        let stores = &self.ctx.stores;
        eventually("the caches", Duration::from_secs(10), async || {
            let va = stores.attachment(VA)?;
            (ready(&va) && stores.volume("pv-1").is_some() && stores.csi_node("node-1").is_some())
                .then_some(())
        })
        .await;
    }

    /// Stops the informers: the caches keep what they have, as after watches a broken
    /// connection cut.
    fn cut_watches(&mut self) {
        self.informers.abort_all();
    }

    async fn stored(&self) -> Option<VolumeAttachment> {
        self.ctx.attachments().get_opt(VA).await.unwrap()
    }

    fn calls(&self) -> (usize, usize) {
        let driver = &self.ctx.driver;
        (
            driver.publishes.load(Ordering::SeqCst),
            driver.unpublishes.load(Ordering::SeqCst),
        )
    }
}

fn attached(va: &VolumeAttachment) -> bool {
    va.status.as_ref().is_some_and(|s| s.attached)
}

/// The watches cut while the cache shows the VA unattached; an attach whose status write is
/// stored and its answer lost.
async fn attach_with_a_lost_answer() -> Harness {
    let mut h = harness();
    h.cached(|va| !attached(va)).await;
    h.cut_watches();
    h.server
        .faults()
        .lose_answers("patch", "volumeattachments/status", 1);
    assert_eq!(sync_attachment(&h.ctx, VA).await, Outcome::Retry);
    assert_eq!(h.calls(), (1, 0));
    h
}

#[tokio::test]
async fn an_attach_whose_answer_was_lost_is_read_back_not_published_again() {
    let h = attach_with_a_lost_answer().await;
    assert!(
        h.stored().await.as_ref().is_some_and(attached),
        "the write whose answer was lost is stored"
    );
    // The retry, from a cache that still shows the VA unattached.
    assert!(!attached(&h.ctx.stores.attachment(VA).unwrap()));
    assert_eq!(sync_attachment(&h.ctx, VA).await, Outcome::Done);
    assert_eq!(h.calls(), (1, 0), "no second ControllerPublishVolume");
    assert_late_syncs_skip(&h).await;
}

/// A sync started by a late watch event, from the cache still behind: the read-back's record
/// covers it, with no second read.
async fn assert_late_syncs_skip(h: &Harness) {
    let (calls, gets) = (
        h.calls(),
        h.server.requests().get("get", "volumeattachments"),
    );
    assert_eq!(sync_attachment(&h.ctx, VA).await, Outcome::Done);
    assert_eq!(h.calls(), calls, "the cache still shows the old version");
    assert_eq!(
        h.server.requests().get("get", "volumeattachments"),
        gets,
        "read back once"
    );
}

/// Attached with the watches live; then deleted (our finalizer holds it), and the cache shows
/// the deletion.
async fn attach_then_delete(h: &Harness) {
    h.cached(|va| !attached(va)).await;
    assert_eq!(sync_attachment(&h.ctx, VA).await, Outcome::Done);
    h.ctx
        .attachments()
        .delete(VA, &DeleteParams::default())
        .await
        .unwrap();
    h.cached(|va| attached(va) && va.metadata.deletion_timestamp.is_some())
        .await;
}

#[tokio::test]
async fn a_detach_whose_finalizer_removal_answer_was_lost_is_not_unpublished_again() {
    let mut h = harness();
    attach_then_delete(&h).await;
    h.cut_watches();

    h.server
        .faults()
        .lose_answers("patch", "volumeattachments", 1);
    assert_eq!(sync_attachment(&h.ctx, VA).await, Outcome::Retry);
    assert_eq!(h.calls(), (1, 1));
    assert!(
        h.stored().await.is_none(),
        "the finalizer went, and the VA with it"
    );
    assert!(
        h.ctx.stores.attachment(VA).is_some(),
        "the cache still has it"
    );
    assert_eq!(sync_attachment(&h.ctx, VA).await, Outcome::Done);
    assert_eq!(h.calls(), (1, 1), "no second ControllerUnpublishVolume");
    assert_late_syncs_skip(&h).await;
}

#[tokio::test]
async fn an_attach_whose_status_write_was_refused_is_finished_without_a_second_publish() {
    let h = harness();
    h.cached(|va| !attached(va)).await;
    h.server
        .faults()
        .fail("patch", "volumeattachments/status", 500, 1);
    assert_eq!(sync_attachment(&h.ctx, VA).await, Outcome::Retry);
    assert_eq!(h.calls(), (1, 0));
    assert!(!h.stored().await.as_ref().is_some_and(attached));
    // Upstream publishes again here; the driver's answer is kept instead.
    assert_eq!(sync_attachment(&h.ctx, VA).await, Outcome::Done);
    assert_eq!(h.calls(), (1, 0), "no second ControllerPublishVolume");
    assert!(h.stored().await.as_ref().is_some_and(attached));
}

#[tokio::test]
async fn a_detach_whose_finalizer_removal_was_refused_is_finished_without_a_second_unpublish() {
    let h = harness();
    attach_then_delete(&h).await;
    h.server.faults().fail("patch", "volumeattachments", 500, 1);
    assert_eq!(sync_attachment(&h.ctx, VA).await, Outcome::Retry);
    assert_eq!(h.calls(), (1, 1));
    assert!(h.stored().await.is_some(), "the finalizer is still on");
    assert_eq!(sync_attachment(&h.ctx, VA).await, Outcome::Done);
    assert_eq!(h.calls(), (1, 1), "no second ControllerUnpublishVolume");
    assert!(
        h.stored().await.is_none(),
        "the finalizer went, and the VA with it"
    );
}

#[tokio::test]
async fn a_read_back_that_fails_is_tried_again_by_the_next_sync() {
    let h = attach_with_a_lost_answer().await;
    h.server.faults().fail("get", "volumeattachments", 503, 1);
    assert_eq!(sync_attachment(&h.ctx, VA).await, Outcome::Retry);
    assert_eq!(h.calls(), (1, 0), "no publish from the cache in between");
    assert_eq!(sync_attachment(&h.ctx, VA).await, Outcome::Done);
    assert_eq!(h.calls(), (1, 0));
    assert_late_syncs_skip(&h).await;
}
