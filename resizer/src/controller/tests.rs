//! The sync with a scripted driver (the seam of `crate::csi`) against testbed's in-memory API
//! server: driver answers the mock driver cannot give.

use std::collections::VecDeque;
use std::sync::Mutex;

use csi_common::controller::Outcome;
use csi_common::events::NewEvent;
use csi_common::status::CsiError;
use kube::Api;
use kube::api::{Patch, PatchParams};
use proto::csi::v1::ControllerExpandVolumeRequest;
use serde_json::json;
use testbed_cluster::apiserver::ApiServer;
use testbed_support::wait::eventually;
use tokio::sync::mpsc;

use super::fixture::{self, storage};
use super::*;
use crate::csi::Expanded;

const DRIVER: &str = "fake.csi.example.com";
const GI: i64 = 1 << 30;
const KEY: &str = "default/data";

/// Answers ControllerExpandVolume from a script and records the requested sizes.
#[derive(Debug, Default)]
struct ScriptedDriver {
    answers: Mutex<VecDeque<Result<Expanded, CsiError>>>,
    requested: Mutex<Vec<i64>>,
}

impl ExpandDriver for ScriptedDriver {
    async fn expand(
        &self,
        request: ControllerExpandVolumeRequest,
        _: bool,
    ) -> Result<Expanded, CsiError> {
        let size = request.capacity_range.map_or(0, |r| r.required_bytes);
        self.requested.lock().unwrap().push(size);
        self.answers
            .lock()
            .unwrap()
            .pop_front()
            .expect("an answer scripted for every call")
    }
}

struct Harness {
    server: ApiServer,
    ctx: Context<ScriptedDriver>,
    events: mpsc::Receiver<NewEvent>,
    informers: tokio::task::JoinSet<()>,
}

fn settings() -> Settings {
    Settings {
        driver: DRIVER.into(),
        resizer: Resizer::Csi,
        capabilities: ControllerCapabilities::default(),
        workers: 1,
        retry_start: Duration::from_millis(100),
        retry_max: Duration::from_secs(1),
        resync: Duration::ZERO,
        annotate_fs_resize: true,
        in_use: crate::inuse::Gate::Off,
        flow: super::Flow::ExpandAndRecover,
    }
}

/// A 1Gi claim bound to a 1Gi PV of [`DRIVER`], grown to 2Gi, seen by the caches.
async fn harness(answers: Vec<Result<Expanded, CsiError>>) -> Harness {
    let server = ApiServer::new();
    let client = server.client();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let status = json!({"status": {"phase": "Bound", "capacity": {"storage": "1Gi"}}});
    fixture::bound_claim(&client, DRIVER, "1Gi", status).await;
    let grown = claims
        .patch(
            "data",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}})),
        )
        .await
        .unwrap();

    let (stores, tasks, _handlers) = stores(&client);
    let mut informers = tokio::task::JoinSet::new();
    for task in tasks {
        informers.spawn(task);
    }
    eventually("the caches", Duration::from_secs(10), async || {
        let cached = stores.claim(KEY)?;
        (cached.metadata.resource_version == grown.metadata.resource_version
            && stores.volume("pv-1").is_some())
        .then_some(())
    })
    .await;
    let (recorder, events) = EventRecorder::channel(16);
    let ctx = Context {
        client,
        driver: ScriptedDriver {
            answers: Mutex::new(answers.into()),
            requested: Mutex::default(),
        },
        settings: settings(),
        stores,
        state: Arc::new(State::new(Duration::from_secs(1))),
        recorder,
        pods: None,
    };
    Harness {
        server,
        ctx,
        events,
        informers,
    }
}

impl Harness {
    async fn claim(&self) -> PersistentVolumeClaim {
        fixture::claim(&self.ctx.client).await
    }

    async fn pv_capacity(&self) -> String {
        let pv = fixture::volume(&self.ctx.client).await;
        pv.spec.unwrap().capacity.unwrap()["storage"].0.clone()
    }

    fn reasons(&mut self) -> Vec<(&'static str, String)> {
        let mut seen = Vec::new();
        while let Ok(event) = self.events.try_recv() {
            seen.push((event.reason, event.message));
        }
        seen
    }
}

fn answer(capacity: i64, node_expansion_required: bool) -> Expanded {
    Expanded {
        capacity,
        node_expansion_required,
    }
}

#[tokio::test]
async fn a_driver_answering_less_than_asked_changes_no_capacity() {
    for capacity in [0, GI] {
        let mut h = harness(vec![Ok(answer(capacity, false))]).await;
        assert_eq!(expand::sync(&h.ctx, KEY).await, Outcome::Retry);

        let claim = h.claim().await;
        let status = claim.status.unwrap();
        assert_eq!(status.capacity, Some(storage("1Gi")), "{capacity}");
        assert_eq!(h.pv_capacity().await, "1Gi");
        let error = status
            .conditions
            .unwrap()
            .into_iter()
            .find(|c| c.type_ == "ControllerResizeError")
            .unwrap();
        assert_eq!(
            error.message.unwrap(),
            format!(
                "failed to expand pvc with CSI driver returned capacity {capacity} bytes, less than the requested {} bytes",
                2 * GI
            )
        );
        let reasons = h.reasons();
        assert_eq!(
            reasons.last().unwrap().0,
            "VolumeResizeFailed",
            "{reasons:?}"
        );
        // Final: a lower request may be the next target.
        assert!(h.ctx.state.final_error(KEY));
    }
}

#[tokio::test]
async fn the_driver_s_rounded_up_size_is_what_pv_and_claim_get() {
    let mut h = harness(vec![Ok(answer(3 * GI, false))]).await;
    assert_eq!(expand::sync(&h.ctx, KEY).await, Outcome::Done);
    assert_eq!(*h.ctx.driver.requested.lock().unwrap(), [2 * GI]);
    assert_eq!(h.pv_capacity().await, "3Gi");
    let status = h.claim().await.status.unwrap();
    assert_eq!(status.capacity, Some(storage("3Gi")));
    assert_eq!(status.allocated_resources, Some(storage("2Gi")));
    let reasons: Vec<_> = h.reasons().into_iter().map(|(r, _)| r).collect();
    assert_eq!(reasons, ["Resizing", "VolumeResizeSuccessful"]);
}

#[tokio::test]
async fn a_sync_from_the_stale_cache_after_our_write_does_not_expand_again() {
    let mut h = harness(vec![Ok(answer(2 * GI, true))]).await;
    assert_eq!(expand::sync(&h.ctx, KEY).await, Outcome::Done);
    // The caches may still hold the claim and PV from before our writes: the sync must act on
    // what we wrote (NodeResizePending, PV at 2Gi) and leave it to kubelet.
    assert_eq!(expand::sync(&h.ctx, KEY).await, Outcome::Done);
    assert_eq!(*h.ctx.driver.requested.lock().unwrap(), [2 * GI]);
    let reasons: Vec<_> = h.reasons().into_iter().map(|(r, _)| r).collect();
    assert_eq!(reasons, ["Resizing", "FileSystemResizeRequired"]);
}

/// The chaos suite's `api-restart-compacted` duplicate: the claim's finished status is stored
/// but its answer lost to a broken connection, and the watch is down, so the cache still
/// has the claim from before. The next sync reads the claim from the API server and does not
/// expand again for a size the claim already records; nor does a later sync from the same
/// stale cache (before the claim read was kept, that one called the driver a third time).
#[tokio::test]
async fn a_status_write_whose_answer_was_lost_is_read_back_before_the_next_call() {
    let unavailable = || Err(CsiError::status(tonic::Code::Unavailable, "busy"));
    let mut h = harness(vec![
        unavailable(),
        Ok(answer(2 * GI, false)),
        Ok(answer(2 * GI, false)),
        // Scripted so that a wrong third call shows as the count below, not a panic.
        Ok(answer(2 * GI, false)),
    ])
    .await;
    // The watch is cut: the caches keep the claim and PV from before the writes.
    h.informers.abort_all();
    // A first attempt fails at the driver, after the in-progress status was written; the
    // second sync then has only the finished status to write, and its answer is lost.
    assert_eq!(expand::sync(&h.ctx, KEY).await, Outcome::Retry);
    h.server
        .faults()
        .lose_answers("patch", "persistentvolumeclaims/status", 1);
    assert_eq!(expand::sync(&h.ctx, KEY).await, Outcome::Retry);
    assert_eq!(*h.ctx.driver.requested.lock().unwrap(), [2 * GI, 2 * GI]);
    let stored = h.claim().await.status.unwrap();
    assert_eq!(
        stored.capacity,
        Some(storage("2Gi")),
        "the lost write is stored"
    );

    assert_eq!(expand::sync(&h.ctx, KEY).await, Outcome::Done);
    assert_eq!(
        *h.ctx.driver.requested.lock().unwrap(),
        [2 * GI, 2 * GI],
        "no third ControllerExpandVolume for the size the claim records"
    );
    // A sync started by a late watch event, the cache still behind: the claim read back is
    // kept as our own write's answer would be, so no second read and no call.
    let gets = h.server.requests().get("get", "persistentvolumeclaims");
    assert_eq!(expand::sync(&h.ctx, KEY).await, Outcome::Done);
    assert_eq!(h.ctx.driver.requested.lock().unwrap().len(), 2);
    assert_eq!(
        h.server.requests().get("get", "persistentvolumeclaims"),
        gets
    );
    // The failed attempt, then the one whose answer was lost; the read-back claim needs
    // nothing more (the success Event went with the answer).
    let reasons: Vec<_> = h.reasons().into_iter().map(|(r, _)| r).collect();
    assert_eq!(reasons, ["Resizing", "VolumeResizeFailed", "Resizing"]);
}

#[tokio::test]
async fn an_infeasible_claim_from_before_a_restart_is_tried_once_at_once_then_waits() {
    let too_big = || Err(CsiError::status(tonic::Code::OutOfRange, "too big"));
    let mut h = harness(vec![too_big(), too_big()]).await;
    assert_eq!(expand::sync(&h.ctx, KEY).await, Outcome::Retry);
    eventually(
        "the cache sees ControllerResizeInfeasible",
        Duration::from_secs(10),
        async || {
            let claim = h.ctx.stores.claim(KEY)?;
            let statuses = claim
                .status
                .as_ref()?
                .allocated_resource_statuses
                .as_ref()?;
            (statuses.get("storage")?.as_str() == "ControllerResizeInfeasible").then_some(())
        },
    )
    .await;
    // A new process (restart, failover): empty in-memory sets. Upstream's `expandAndRecover`
    // reads the slow set before marking the claim, so this first sync calls the driver.
    h.ctx.state = Arc::new(State::new(Duration::from_mins(1)));
    assert_eq!(expand::sync(&h.ctx, KEY).await, Outcome::Retry);
    assert_eq!(*h.ctx.driver.requested.lock().unwrap(), [2 * GI, 2 * GI]);
    // Now the claim waits out the slow-retry window without a call.
    assert!(matches!(
        expand::sync(&h.ctx, KEY).await,
        Outcome::RetryAfter(_)
    ));
    assert_eq!(h.ctx.driver.requested.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn the_resync_queues_every_cached_claim_by_its_key_without_rebuilding_it() {
    // The keys come from the compact cache; they must be the ones the event handlers queue.
    let h = harness(vec![]).await;
    let rebuilt: Vec<String> = h.ctx.stores.all_claims().map(|pvc| key(&pvc)).collect();
    assert_eq!(rebuilt, vec![KEY.to_owned()]);
    assert_eq!(h.ctx.stores.claim_keys(), rebuilt);
}
