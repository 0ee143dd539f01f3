//! The controller-manager stand-in against the in-memory API server, driven through its HTTP
//! API as the sidecars would: the provisioning handshake, static binding, release on claim
//! deletion, the protection finalizers, late binding and VolumeAttachments.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failed setup step should panic"
)]

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{StorageClass, VolumeAttachment};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client, ResourceExt as _};
use serde_json::json;
use testbed_cluster::apiserver::ApiServer;
use testbed_cluster::kcm::{self, ControllerManager, attach_detach};
use testbed_support::wait::eventually;

const DRIVER: &str = "mock.csi.k8s.io";
const WAIT: Duration = Duration::from_secs(10);

struct Setup {
    server: ApiServer,
    client: Client,
    kcm: ControllerManager,
}

fn start() -> Setup {
    start_with_resync(Duration::from_secs(2))
}

fn start_with_resync(resync_period: Duration) -> Setup {
    let server = ApiServer::new();
    let client = server.client();
    let kcm = ControllerManager::start(
        client.clone(),
        kcm::Config {
            resync_period,
            retry_interval: Duration::from_millis(200),
        },
    );
    Setup {
        server,
        client,
        kcm,
    }
}

/// Creates claims `<prefix>-0` .. `<prefix>-<count - 1>` of `class`, 32 at a time.
async fn create_claims(
    s: &Setup,
    prefix: &str,
    count: usize,
    class: &str,
) -> Vec<PersistentVolumeClaim> {
    use futures::StreamExt as _;
    futures::stream::iter(0..count)
        .map(|i| async move { create_claim(s, &format!("{prefix}-{i}"), class).await })
        .buffer_unordered(32)
        .collect()
        .await
}

fn pvc_of(s: &Setup, name: &str) -> Option<PersistentVolumeClaim> {
    s.server.get_object(Some("default"), name).unwrap()
}

fn pv_of(s: &Setup, name: &str) -> Option<PersistentVolume> {
    s.server.get_object(None, name).unwrap()
}

fn annotation<'a>(obj: &'a impl kube::Resource, key: &str) -> Option<&'a str> {
    obj.meta()
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

fn pv_phase(pv: &PersistentVolume) -> &str {
    pv.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn pvc_phase(pvc: &PersistentVolumeClaim) -> &str {
    pvc.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

async fn create_class(s: &Setup, name: &str, binding: &str) {
    let class: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": name},
        "provisioner": DRIVER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": binding,
    }))
    .unwrap();
    Api::<StorageClass>::all(s.client.clone())
        .create(&PostParams::default(), &class)
        .await
        .unwrap();
}

async fn create_claim(s: &Setup, name: &str, class: &str) -> PersistentVolumeClaim {
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": class,
        },
    }))
    .unwrap();
    Api::<PersistentVolumeClaim>::namespaced(s.client.clone(), "default")
        .create(&PostParams::default(), &claim)
        .await
        .unwrap()
}

/// A CSI volume reserved for `claim` (with `uid` when given, as csi-provisioner writes it).
async fn create_volume(
    s: &Setup,
    name: &str,
    claim: &str,
    uid: Option<&str>,
    class: &str,
    policy: &str,
) -> PersistentVolume {
    let mut claim_ref = json!({"kind": "PersistentVolumeClaim", "apiVersion": "v1",
        "namespace": "default", "name": claim});
    if let Some(uid) = uid {
        claim_ref["uid"] = json!(uid);
    }
    let volume: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": {"pv.kubernetes.io/provisioned-by": DRIVER}},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": policy,
            "storageClassName": class,
            "claimRef": claim_ref,
            "csi": {"driver": DRIVER, "volumeHandle": format!("handle-{name}")},
        },
    }))
    .unwrap();
    Api::<PersistentVolume>::all(s.client.clone())
        .create(&PostParams::default(), &volume)
        .await
        .unwrap()
}

/// Creates for each of `claims` (of `class`) what csi-provisioner creates, a volume pre-bound
/// with the claim's uid, and waits until as many claims as `claims` are Bound.
async fn provision_and_wait_bound(s: &Setup, claims: &[PersistentVolumeClaim], class: &str) {
    use futures::StreamExt as _;
    futures::stream::iter(claims)
        .map(|claim| async move {
            let uid = claim.metadata.uid.clone().unwrap();
            let name = format!("pvc-{uid}");
            create_volume(s, &name, &claim.name_any(), Some(&uid), class, "Delete").await
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    eventually("every claim Bound", Duration::from_mins(1), async || {
        let listed = s
            .server
            .list_objects::<PersistentVolumeClaim>(Some("default"))
            .unwrap();
        let bound = listed.iter().filter(|c| pvc_phase(c) == "Bound").count();
        (bound == claims.len()).then_some(())
    })
    .await;
}

async fn events_for(s: &Setup, object: &str) -> Vec<Event> {
    Api::<Event>::namespaced(s.client.clone(), "default")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(object))
        .collect()
}

#[tokio::test]
async fn the_dynamic_provisioning_handshake_annotates_then_binds_claim_and_volume() {
    let s = start();
    create_class(&s, "fast", "Immediate").await;
    let claim = create_claim(&s, "data", "fast").await;

    let annotated = eventually("the storage-provisioner annotations", WAIT, async || {
        pvc_of(&s, "data")
            .filter(|c| annotation(c, "volume.kubernetes.io/storage-provisioner") == Some(DRIVER))
    })
    .await;
    assert_eq!(
        annotation(&annotated, "volume.beta.kubernetes.io/storage-provisioner"),
        Some(DRIVER)
    );
    assert_eq!(pvc_phase(&annotated), "Pending");

    // Events are written by the recorder's background task: wait for it.
    let event = eventually("an ExternalProvisioning event", WAIT, async || {
        events_for(&s, "data")
            .await
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("ExternalProvisioning"))
    })
    .await;
    assert_eq!(event.type_.as_deref(), Some("Normal"));
    assert_eq!(
        event.source.and_then(|s| s.component).as_deref(),
        Some("persistentvolume-controller")
    );
    assert!(
        event
            .message
            .unwrap()
            .contains("external provisioner 'mock.csi.k8s.io'")
    );

    // What csi-provisioner creates: pre-bound with the claim's uid.
    let uid = claim.metadata.uid.clone().unwrap();
    let pv_name = format!("pvc-{uid}");
    create_volume(&s, &pv_name, "data", Some(&uid), "fast", "Delete").await;

    let bound = eventually("the claim to be Bound", WAIT, async || {
        pvc_of(&s, "data").filter(|c| pvc_phase(c) == "Bound")
    })
    .await;
    let spec = bound.spec.as_ref().unwrap();
    assert_eq!(spec.volume_name.as_deref(), Some(pv_name.as_str()));
    assert_eq!(
        annotation(&bound, "pv.kubernetes.io/bind-completed"),
        Some("yes")
    );
    assert_eq!(
        annotation(&bound, "pv.kubernetes.io/bound-by-controller"),
        Some("yes")
    );
    let status = bound.status.as_ref().unwrap();
    assert_eq!(status.capacity.as_ref().unwrap()["storage"].0, "1Gi");
    assert_eq!(
        status.access_modes.as_deref(),
        Some(&["ReadWriteOnce".to_owned()][..])
    );

    let volume = eventually("the volume to be Bound", WAIT, async || {
        pv_of(&s, &pv_name).filter(|v| pv_phase(v) == "Bound")
    })
    .await;
    // Reserved by its creator, so the binder does not claim it as its own binding.
    assert_eq!(
        annotation(&volume, "pv.kubernetes.io/bound-by-controller"),
        None
    );
    s.kcm.stop().await;
}

#[tokio::test]
async fn a_static_volume_reserved_by_name_is_bound_and_gets_the_claim_uid() {
    let s = start();
    create_volume(&s, "static-pv", "static", None, "", "Retain").await;
    let claim = create_claim(&s, "static", "").await;

    let volume = eventually("the volume to be Bound", WAIT, async || {
        pv_of(&s, "static-pv").filter(|v| pv_phase(v) == "Bound")
    })
    .await;
    let claim_ref = volume.spec.unwrap().claim_ref.unwrap();
    assert_eq!(claim_ref.uid, claim.metadata.uid);
    assert_eq!(claim_ref.kind.as_deref(), Some("PersistentVolumeClaim"));

    let bound = eventually("the claim to be Bound", WAIT, async || {
        pvc_of(&s, "static").filter(|c| pvc_phase(c) == "Bound")
    })
    .await;
    assert_eq!(
        bound.spec.as_ref().unwrap().volume_name.as_deref(),
        Some("static-pv")
    );
    // A claim without class never gets a provisioner annotation.
    assert_eq!(
        annotation(&bound, "volume.kubernetes.io/storage-provisioner"),
        None
    );
    s.kcm.stop().await;
}

#[tokio::test]
async fn deleting_a_bound_claim_releases_its_volume_and_the_released_volume_can_be_deleted() {
    let s = start();
    create_volume(&s, "pv-1", "doomed", None, "", "Retain").await;
    create_claim(&s, "doomed", "").await;
    eventually("binding", WAIT, async || {
        pv_of(&s, "pv-1").filter(|v| pv_phase(v) == "Bound")
    })
    .await;
    eventually("claim binding", WAIT, async || {
        pvc_of(&s, "doomed").filter(|c| pvc_phase(c) == "Bound")
    })
    .await;

    let claims = Api::<PersistentVolumeClaim>::namespaced(s.client.clone(), "default");
    claims
        .delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    // pvc-protection lets it go (no Pod uses it), then the binder releases the volume.
    eventually("the claim to disappear", WAIT, async || {
        pvc_of(&s, "doomed").is_none().then_some(())
    })
    .await;
    let released = eventually("the volume to be Released", WAIT, async || {
        pv_of(&s, "pv-1").filter(|v| pv_phase(v) == "Released")
    })
    .await;
    assert!(
        released
            .metadata
            .finalizers
            .unwrap_or_default()
            .contains(&"kubernetes.io/pv-protection".to_owned()),
        "admission adds pv-protection"
    );

    // Not Bound any more, so pv-protection lets the volume go.
    Api::<PersistentVolume>::all(s.client.clone())
        .delete("pv-1", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the volume to disappear", WAIT, async || {
        pv_of(&s, "pv-1").is_none().then_some(())
    })
    .await;
    s.kcm.stop().await;
}

#[tokio::test]
async fn a_claim_used_by_a_scheduled_pod_stays_until_the_pod_is_gone() {
    let s = start();
    create_claim(&s, "in-use", "").await;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "app", "namespace": "default"},
        "spec": {
            "nodeName": "node-1",
            "containers": [{"name": "app", "image": "busybox"}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "in-use"}}],
        },
    }))
    .unwrap();
    let pods = Api::<Pod>::namespaced(s.client.clone(), "default");
    pods.create(&PostParams::default(), &pod).await.unwrap();

    let deleted = Api::<PersistentVolumeClaim>::namespaced(s.client.clone(), "default")
        .delete("in-use", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .expect("the finalizer holds the claim");
    let deleted_at: u64 = deleted.resource_version().unwrap().parse().unwrap();
    // Positive signal: a claim sync has acted on the deletion.
    eventually("a claim sync to see the deletion", WAIT, async || {
        let synced = s.kcm.claim_syncs().synced_version("default", "in-use")?;
        (synced >= deleted_at).then_some(())
    })
    .await;
    let held = pvc_of(&s, "in-use").expect("the claim is held by its finalizer");
    assert!(held.metadata.deletion_timestamp.is_some());

    pods.delete("app", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    eventually(
        "the claim to disappear once the pod is gone",
        WAIT,
        async || pvc_of(&s, "in-use").is_none().then_some(()),
    )
    .await;
    s.kcm.stop().await;
}

#[tokio::test]
async fn wait_for_first_consumer_claims_get_their_provisioner_only_once_a_node_is_selected() {
    let s = start();
    create_class(&s, "late", "WaitForFirstConsumer").await;
    create_claim(&s, "late-claim", "late").await;

    let waiting = eventually("a WaitForFirstConsumer event", WAIT, async || {
        events_for(&s, "late-claim")
            .await
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("WaitForFirstConsumer"))
    })
    .await;
    assert_eq!(
        waiting.message.as_deref(),
        Some("waiting for first consumer to be created before binding")
    );
    let claim = pvc_of(&s, "late-claim").unwrap();
    assert_eq!(
        annotation(&claim, "volume.kubernetes.io/storage-provisioner"),
        None
    );

    let selected = s
        .kcm
        .select_node("default", "late-claim", "node-1")
        .await
        .unwrap();
    assert_eq!(
        annotation(&selected, "volume.kubernetes.io/selected-node"),
        Some("node-1")
    );
    eventually(
        "the provisioner annotation after node selection",
        WAIT,
        async || {
            pvc_of(&s, "late-claim").filter(|c| {
                annotation(c, "volume.kubernetes.io/storage-provisioner") == Some(DRIVER)
            })
        },
    )
    .await;
    s.kcm.stop().await;
}

#[tokio::test]
async fn an_unclaimed_volume_becomes_available() {
    let s = start();
    let volume: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": "free"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "csi": {"driver": DRIVER, "volumeHandle": "free-handle"},
        },
    }))
    .unwrap();
    Api::<PersistentVolume>::all(s.client.clone())
        .create(&PostParams::default(), &volume)
        .await
        .unwrap();
    eventually("phase Available", WAIT, async || {
        pv_of(&s, "free").filter(|v| pv_phase(v) == "Available")
    })
    .await;
    s.kcm.stop().await;
}

#[tokio::test]
async fn attach_creates_the_volume_attachment_the_csi_plugin_would_and_detach_deletes_it() {
    let s = start();
    create_volume(&s, "pv-a", "nobody", None, "", "Retain").await;
    let name = s.kcm.attach("pv-a", "node-1").await.unwrap();
    assert_eq!(
        name,
        attach_detach::attachment_name("handle-pv-a", DRIVER, "node-1")
    );
    let vas = Api::<VolumeAttachment>::all(s.client.clone());
    let va = vas.get(&name).await.unwrap();
    assert_eq!(va.spec.attacher, DRIVER);
    assert_eq!(va.spec.node_name, "node-1");
    assert_eq!(
        va.spec.source.persistent_volume_name.as_deref(),
        Some("pv-a")
    );
    // Asking again is idempotent.
    assert_eq!(s.kcm.attach("pv-a", "node-1").await.unwrap(), name);

    // Nobody attached it yet.
    let err = s
        .kcm
        .wait_attached(&name, Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(matches!(err, attach_detach::Error::Timeout { .. }), "{err}");

    // Play external-attacher.
    let mut attached = va.clone();
    attached
        .status
        .get_or_insert_with(Default::default)
        .attached = true;
    vas.replace_status(&name, &PostParams::default(), &attached)
        .await
        .unwrap();
    let va = s.kcm.wait_attached(&name, WAIT).await.unwrap();
    assert!(va.status.unwrap().attached);

    assert_eq!(s.kcm.detach("pv-a", "node-1").await.unwrap(), name);
    attach_detach::wait_detached(s.kcm.client(), &name, WAIT)
        .await
        .unwrap();
    s.kcm.stop().await;
}

#[tokio::test]
async fn a_repeated_event_is_counted_on_one_event_object_as_client_go_does() {
    let s = start();
    // No such class: every sync (2 s resync here) reports the same ProvisioningFailed.
    create_claim(&s, "orphan", "no-such-class").await;
    let event = eventually("the event count to reach 2", WAIT, async || {
        let failed: Vec<Event> = events_for(&s, "orphan")
            .await
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("ProvisioningFailed"))
            .collect();
        assert!(failed.len() <= 1, "one Event object, not {}", failed.len());
        failed.into_iter().find(|e| e.count.unwrap_or(0) >= 2)
    })
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(
        event.message.as_deref(),
        Some("storageclass.storage.k8s.io \"no-such-class\" not found")
    );
    assert!(event.last_timestamp >= event.first_timestamp);
    s.kcm.stop().await;
}

/// A burst like the chaos suite's: every claim of a few hundred created at once is annotated
/// for its provisioner (upstream's claim worker takes every queued claim in turn). With
/// kube-runtime's `concurrency(1)` some claims of such a burst were never reconciled.
#[tokio::test(flavor = "multi_thread")]
async fn every_claim_of_a_burst_gets_its_provisioner() {
    const CLAIMS: usize = 300;
    let s = start();
    create_class(&s, "burst", "Immediate").await;
    create_claims(&s, "burst", CLAIMS, "burst").await;
    eventually(
        "every claim annotated",
        Duration::from_mins(1),
        async || {
            let claims = s
                .server
                .list_objects::<PersistentVolumeClaim>(Some("default"))
                .unwrap();
            let annotated = claims
                .iter()
                .filter(|c| {
                    annotation(*c, "volume.kubernetes.io/storage-provisioner") == Some(DRIVER)
                })
                .count();
            (annotated == CLAIMS).then_some(())
        },
    )
    .await;
}

/// Claim syncs match against the binder's volume cache (upstream's `ctrl.volumes`), which may
/// not yet hold a volume when the claim's own watch of volumes starts a sync. As upstream, the
/// volume sync of a provisioned volume whose claim is not bound yet has the claim synced next,
/// so every claim of a burst is bound without waiting for a resync (an hour here).
#[tokio::test(flavor = "multi_thread")]
async fn provisioned_volumes_are_bound_from_the_caches_without_waiting_for_a_resync() {
    const CLAIMS: usize = 100;
    let s = start_with_resync(Duration::from_hours(1));
    create_class(&s, "burst", "Immediate").await;
    let claims = create_claims(&s, "burst", CLAIMS, "burst").await;
    provision_and_wait_bound(&s, &claims, "burst").await;
    // The binder reads claims, volumes and classes from its informer caches, as upstream's:
    // a GET only double-checks what a lagging cache does not have yet. Reading from the API
    // server instead costs several GETs per claim (the claim at each of its syncs, its class,
    // its volume, the volume's claim).
    let requests = s.server.requests();
    let gets: usize = [
        "persistentvolumeclaims",
        "persistentvolumes",
        "storageclasses",
    ]
    .iter()
    .map(|resource| requests.get("get", resource))
    .sum();
    assert!(gets < CLAIMS, "{gets} GETs for {CLAIMS} claims");
    s.kcm.stop().await;
}

/// kube-controller-manager syncs claims in pv_controller's one `claimWorker` and writes its
/// Events through one broadcaster goroutine that waits for each answer, so however many claims
/// wait, it has one claim write and one Event write in flight at a time: the pace a sidecar
/// meets in a cluster. With 20 ms on every request, two claim syncs or two Event writes at
/// once would overlap. The claims of a WaitForFirstConsumer class with no node yet are synced
/// without a write and each records an Event, so their Events come faster than 20 ms apart.
#[tokio::test(flavor = "multi_thread")]
async fn claims_are_written_and_events_sent_one_at_a_time_as_by_upstreams_single_workers() {
    const CLAIMS: usize = 20;
    let s = start_with_resync(Duration::from_hours(1));
    create_class(&s, "serial", "Immediate").await;
    create_class(&s, "late", "WaitForFirstConsumer").await;
    s.server.faults().add_latency(Duration::from_millis(20));
    let claims = create_claims(&s, "serial", CLAIMS, "serial").await;
    create_claims(&s, "late", CLAIMS, "late").await;
    eventually(
        "an Event for every claim",
        Duration::from_mins(1),
        async || {
            let events = s.server.list_objects::<Event>(Some("default")).unwrap();
            let count = |reason: &str| {
                events
                    .iter()
                    .filter(|e| e.reason.as_deref() == Some(reason))
                    .count()
            };
            (count("ExternalProvisioning") == CLAIMS && count("WaitForFirstConsumer") == CLAIMS)
                .then_some(())
        },
    )
    .await;
    provision_and_wait_bound(&s, &claims, "serial").await;
    let requests = s.server.requests();
    // Each claim was written (annotated, then bound) and its status set, and each had its
    // Event: the claim worker and the Event writer had work for many claims at once, and took
    // it one piece at a time.
    assert!(requests.get("update", "persistentvolumeclaims") >= CLAIMS);
    assert!(requests.get("update", "persistentvolumeclaims/status") >= CLAIMS);
    assert!(requests.get("create", "events") >= 2 * CLAIMS);
    assert_eq!(
        requests.peak_in_flight("update", "persistentvolumeclaims"),
        1
    );
    assert_eq!(
        requests.peak_in_flight("update", "persistentvolumeclaims/status"),
        1
    );
    assert_eq!(requests.peak_in_flight("create", "events"), 1);
    s.kcm.stop().await;
}

/// After an API server restart with a compaction, every watch of the stand-in meets refused
/// connections and then one 410 Gone, as each of kube-controller-manager's informers would,
/// and each backs off on its own, as client-go's reflectors do. kube-runtime's controllers
/// put one backoff over all the watches of a controller instead, so the errors of its watches
/// added up: the chaos suite's `api-restart-compacted` row saw claims deleted after such a
/// restart release their volumes only 107 s later (docs/reliability.md). Here the volume must
/// be Released within 40 s of its claim's deletion: with a backoff per watch it took 8-19 s
/// in five runs (the 410's backoff, doubled by jitter at most, plus a resync); with the shared
/// backoff none of three runs got there within 30 s.
#[tokio::test(flavor = "multi_thread")]
async fn after_a_restart_with_compaction_a_deleted_claim_still_releases_its_volume_promptly() {
    let s = start();
    create_volume(&s, "pv-1", "doomed", None, "", "Retain").await;
    create_claim(&s, "doomed", "").await;
    eventually("binding", WAIT, async || {
        pvc_of(&s, "doomed").filter(|c| pvc_phase(c) == "Bound")
    })
    .await;
    let listening = s.server.listen().await.unwrap();
    let _listening = s
        .server
        .restart(listening, Duration::from_secs(3), true)
        .await
        .unwrap();
    let claims = Api::<PersistentVolumeClaim>::namespaced(s.client.clone(), "default");
    claims
        .delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the volume Released", Duration::from_secs(40), async || {
        pv_of(&s, "pv-1").filter(|v| pv_phase(v) == "Released")
    })
    .await;
    s.kcm.stop().await;
}
