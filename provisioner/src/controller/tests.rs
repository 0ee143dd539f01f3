//! The controllers through the fake-driver seam, against the in-memory API server in-process
//! (real list/watch/patch semantics, no sockets), with short retry intervals.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use csi_common::capabilities::{ControllerCapability, PluginCapabilities, PluginServiceCapability};
use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, Event, ObjectReference, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PersistentVolumeSpec, PersistentVolumeStatus,
    TypedLocalObjectReference, VolumeResourceRequirements,
};
use k8s_openapi::api::storage::v1::{
    StorageClass, VolumeAttachment, VolumeAttachmentSource, VolumeAttachmentSpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use proto::csi::v1::{CreateVolumeRequest, CreateVolumeResponse, DeleteVolumeRequest, Volume};
use testbed_cluster::apiserver::ApiServer;
use tokio::sync::Notify;
use tokio::time::Instant;
use tonic::Code;

use testbed_support::wait::eventually;

use super::*;
use crate::args::RetrySettings;
use csi_common::status::CsiError;

const DRIVER: &str = "fake.csi.k8s.io";
const START: Duration = Duration::from_millis(40);
const MAX: Duration = Duration::from_millis(400);

/// A scripted driver: CreateVolume answers come from `script` (default: success), a `hold`
/// keeps calls waiting until released, and every call is recorded.
#[derive(Clone, Default)]
struct FakeDriver {
    state: Arc<Mutex<FakeState>>,
    hold: Arc<Mutex<Option<Arc<Notify>>>>,
}

#[derive(Default)]
struct FakeState {
    creates: Vec<(Instant, CreateVolumeRequest)>,
    deletes: Vec<DeleteVolumeRequest>,
    script: VecDeque<CsiError>,
    delete_script: VecDeque<CsiError>,
    volumes: HashMap<String, String>,
}

impl FakeDriver {
    fn fail_next(&self, errors: impl IntoIterator<Item = CsiError>) {
        self.state.lock().unwrap().script.extend(errors);
    }

    fn hold_creates(&self) -> Arc<Notify> {
        let notify = Arc::new(Notify::new());
        *self.hold.lock().unwrap() = Some(Arc::clone(&notify));
        notify
    }

    fn creates(&self) -> Vec<(Instant, CreateVolumeRequest)> {
        self.state.lock().unwrap().creates.clone()
    }

    fn deletes(&self) -> Vec<DeleteVolumeRequest> {
        self.state.lock().unwrap().deletes.clone()
    }

    fn volumes(&self) -> HashMap<String, String> {
        self.state.lock().unwrap().volumes.clone()
    }
}

impl VolumeDriver for FakeDriver {
    async fn create_volume(
        &self,
        request: CreateVolumeRequest,
    ) -> Result<CreateVolumeResponse, CsiError> {
        self.state
            .lock()
            .unwrap()
            .creates
            .push((Instant::now(), request.clone()));
        let hold = self.hold.lock().unwrap().take();
        if let Some(hold) = hold {
            hold.notified().await;
        }
        let mut state = self.state.lock().unwrap();
        if let Some(err) = state.script.pop_front() {
            return Err(err);
        }
        let id = format!("vol-{}", request.name);
        state.volumes.insert(id.clone(), request.name.clone());
        Ok(CreateVolumeResponse {
            volume: Some(Volume {
                capacity_bytes: request.capacity_range.map_or(0, |c| c.required_bytes),
                volume_id: id,
                ..Volume::default()
            }),
        })
    }

    async fn delete_volume(&self, request: DeleteVolumeRequest, _: bool) -> Result<(), CsiError> {
        let mut state = self.state.lock().unwrap();
        state.deletes.push(request.clone());
        if let Some(err) = state.delete_script.pop_front() {
            return Err(err);
        }
        state.volumes.remove(&request.volume_id);
        Ok(())
    }
}

struct Harness {
    server: ApiServer,
    client: kube::Client,
    driver: FakeDriver,
    registry: prometheus::Registry,
    stop: Arc<Notify>,
    task: tokio::task::JoinHandle<Result<(), Error>>,
}

impl Harness {
    async fn start(attachments: bool) -> Self {
        let mut rpcs = vec![ControllerCapability::CreateDeleteVolume];
        if attachments {
            rpcs.push(ControllerCapability::PublishUnpublishVolume);
        }
        Self::with_capabilities(rpcs).await
    }

    /// A driver with these controller capabilities.
    async fn with_capabilities(rpcs: Vec<ControllerCapability>) -> Self {
        let server = ApiServer::new();
        let client = server.client();
        let driver = FakeDriver::default();
        let options = crate::request::ProvisionOptions {
            driver_name: DRIVER.into(),
            volume_name_prefix: "pvc".into(),
            volume_name_uuid_length: -1,
            default_fstype: String::new(),
            extra_create_metadata: false,
            strict_topology: false,
            immediate_topology: true,
            controller_publish_readonly: false,
            provisioner_identity: "1-2-fake.csi.k8s.io".into(),
            plugin_caps: PluginCapabilities::from_values(
                [PluginServiceCapability::ControllerService],
                [],
            ),
            controller_caps: crate::request::tests::controller_caps(&rpcs),
            data_sources: crate::request::DataSourceOptions::default(),
        };
        let registry = prometheus::Registry::new();
        let (recorder, writer) =
            EventRecorder::new(client.clone(), "fake.csi.k8s.io_test_uuid".into());
        tokio::spawn(writer);
        let deps = ControllerDeps {
            client: client.clone(),
            driver: driver.clone(),
            options,
            settings: Settings {
                worker_threads: 4,
                retry: RetrySettings {
                    start: START,
                    max: MAX,
                },
                timeout: Duration::from_secs(1),
                topology: false,
                attachments: rpcs.contains(&ControllerCapability::PublishUnpublishVolume),
                vac_gate: None,
                protection: super::protection::ProtectionSettings::default(),
            },
            recorder,
            metrics: ControllerMetrics::register(&registry).unwrap(),
            workqueue_metrics: WorkQueueMetrics::register(&registry).unwrap(),
            node: None,
        };
        let stop = Arc::new(Notify::new());
        let task = tokio::spawn({
            let stop = Arc::clone(&stop);
            async move { run(deps, async move { stop.notified().await }).await }
        });
        let harness = Self {
            server,
            client,
            driver,
            registry,
            stop,
            task,
        };
        harness.create_class("fast", "Delete").await;
        harness
    }

    async fn stop(self) {
        self.stop.notify_one();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("controllers stop")
            .unwrap()
            .unwrap();
    }

    async fn create_class(&self, name: &str, reclaim: &str) {
        let class = StorageClass {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            provisioner: DRIVER.into(),
            reclaim_policy: Some(reclaim.into()),
            parameters: Some(BTreeMap::from([("color".into(), "blue".into())])),
            ..StorageClass::default()
        };
        Api::<StorageClass>::all(self.client.clone())
            .create(&PostParams::default(), &class)
            .await
            .unwrap();
    }

    async fn create_claim(&self, name: &str) -> PersistentVolumeClaim {
        self.create_claim_with(name, "fast", true).await
    }

    /// A claim no controller-manager has handed to our driver yet.
    async fn create_claim_unannotated(&self, name: &str) -> PersistentVolumeClaim {
        self.create_claim_with(name, "fast", false).await
    }

    async fn create_claim_with(
        &self,
        name: &str,
        class: &str,
        annotated: bool,
    ) -> PersistentVolumeClaim {
        self.claims()
            .create(
                &PostParams::default(),
                &claim_object(name, class, annotated),
            )
            .await
            .unwrap()
    }

    fn claims(&self) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.client.clone(), "default")
    }

    fn volumes(&self) -> Api<PersistentVolume> {
        Api::all(self.client.clone())
    }

    /// Deletes the claim and, standing in for kube-controller-manager's pvc-protection
    /// controller, drops its finalizer so it is really gone.
    async fn delete_claim(&self, name: &str) {
        self.claims()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
        let patch = serde_json::json!({"metadata": {"finalizers": null}});
        let _ = self
            .claims()
            .patch(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await;
    }

    /// The value of one counter series (`name{labels}` as rendered), 0 while it does not exist.
    fn counter(&self, series: &str) -> u64 {
        let text = csi_common::metrics::render(&self.registry).unwrap();
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
            .map_or(0, |value| value.parse().unwrap())
    }

    /// Waits until `queue` has finished every item added to it so far (as many
    /// `workqueue_work_duration_seconds` observations as `workqueue_adds_total`): whatever
    /// the syncs of those items were going to write is written.
    async fn processed(&self, queue: &str) {
        let adds = format!(r#"workqueue_adds_total{{name="{queue}"}}"#);
        let done = format!(r#"workqueue_work_duration_seconds_count{{name="{queue}"}}"#);
        eventually(
            &format!("the {queue} queue to finish its work"),
            WAIT,
            async || (self.counter(&done) == self.counter(&adds)).then_some(()),
        )
        .await;
    }

    async fn events(&self, reason: &str) -> Vec<Event> {
        Api::<Event>::namespaced(self.client.clone(), "default")
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .collect()
    }
}

/// A 1Gi ReadWriteOnce claim of `class`; `annotated`: already handed to our driver by the
/// controller-manager.
fn claim_object(name: &str, class: &str, annotated: bool) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            annotations: annotated.then(|| {
                BTreeMap::from([(
                    "volume.kubernetes.io/storage-provisioner".into(),
                    DRIVER.into(),
                )])
            }),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: Some(class.into()),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([("storage".into(), Quantity("1Gi".into()))])),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        ..PersistentVolumeClaim::default()
    }
}

/// How long a controller test waits for a positive signal.
const WAIT: Duration = Duration::from_secs(10);

/// The claim queue's adds counter: one per claim event that queued work.
const CLAIM_ADDS: &str = r#"workqueue_adds_total{name="claims"}"#;
/// The volume queue's adds counter.
const VOLUME_ADDS: &str = r#"workqueue_adds_total{name="volumes"}"#;
/// PVs that could not be saved at once and wait in the `unsavedpvs` queue.
const UNSAVED_ADDS: &str = r#"workqueue_adds_total{name="unsavedpvs"}"#;

fn uid(claim: &PersistentVolumeClaim) -> String {
    claim.metadata.uid.clone().unwrap()
}

#[tokio::test]
async fn a_claim_gets_a_volume_and_a_pv_bound_to_it() {
    let h = Harness::start(false).await;
    let claim = h.create_claim("data").await;
    let pv_name = format!("pvc-{}", uid(&claim));
    let pv = eventually("the PV", WAIT, async || {
        h.volumes().get_opt(&pv_name).await.unwrap()
    })
    .await;

    let creates = h.driver.creates();
    assert_eq!(creates.len(), 1);
    let request = &creates[0].1;
    assert_eq!(request.name, pv_name);
    assert_eq!(request.capacity_range.unwrap().required_bytes, 1 << 30);
    assert_eq!(
        request.parameters.get("color").map(String::as_str),
        Some("blue")
    );

    let spec = pv.spec.unwrap();
    let claim_ref = spec.claim_ref.unwrap();
    assert_eq!(claim_ref.uid, claim.metadata.uid);
    assert_eq!(claim_ref.name.as_deref(), Some("data"));
    assert_eq!(spec.csi.unwrap().volume_handle, format!("vol-{pv_name}"));
    assert_eq!(
        pv.metadata.finalizers.unwrap(),
        vec![
            "external-provisioner.volume.kubernetes.io/finalizer".to_owned(),
            "kubernetes.io/pv-protection".to_owned()
        ],
        "ours from the POST, pv-protection from admission (fixture pv-0)"
    );
    let succeeded = eventually("ProvisioningSucceeded", WAIT, async || {
        let events = h.events("ProvisioningSucceeded").await;
        (!events.is_empty()).then_some(events)
    })
    .await;
    assert_eq!(
        succeeded[0].message.as_deref(),
        Some(format!("Successfully provisioned volume {pv_name}").as_str())
    );
    assert_eq!(h.events("Provisioning").await.len(), 1);
    h.stop().await;
}

#[tokio::test]
async fn failures_are_retried_with_exponential_backoff_and_one_aggregated_event() {
    let h = Harness::start(false).await;
    h.driver
        .fail_next((0..3).map(|_| CsiError::status(Code::Internal, "backend busy")));
    let claim = h.create_claim("data").await;
    let pv_name = format!("pvc-{}", uid(&claim));
    eventually("the PV", WAIT, async || {
        h.volumes().get_opt(&pv_name).await.unwrap()
    })
    .await;

    let times: Vec<Instant> = h.driver.creates().iter().map(|(t, _)| *t).collect();
    assert_eq!(times.len(), 4);
    let gaps: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
    // start, 2×start, 4×start (the claim does not change meanwhile, so nothing retries early).
    for (gap, factor) in gaps.iter().zip([1, 2, 4]) {
        assert!(*gap >= START * factor, "{gaps:?}");
    }
    let failed = eventually("aggregated ProvisioningFailed", WAIT, async || {
        let events = h.events("ProvisioningFailed").await;
        (events.len() == 1 && events[0].count == Some(3)).then_some(events)
    })
    .await;
    assert_eq!(
        failed[0].message.as_deref(),
        Some("rpc error: code = Internal desc = backend busy")
    );
    assert_eq!(failed[0].type_.as_deref(), Some("Warning"));
    h.stop().await;
}

#[tokio::test]
async fn invalid_argument_is_retried_only_after_the_slow_window() {
    let h = Harness::start(false).await;
    h.driver
        .fail_next([CsiError::status(Code::InvalidArgument, "bad parameter")]);
    let claim = h.create_claim("data").await;
    let pv_name = format!("pvc-{}", uid(&claim));
    let failed = eventually("the infeasible event", WAIT, async || {
        let events = h.events("ProvisioningFailed").await;
        (!events.is_empty()).then_some(events)
    })
    .await;
    assert_eq!(
        failed[0].message.as_deref(),
        Some(
            "Volume provisioning failed with infeasible error. Retries will be delayed. rpc error: code = InvalidArgument desc = bad parameter"
        )
    );
    // A change to the claim does not bypass the window.
    let mut changed = h.claims().get("data").await.unwrap();
    changed.metadata.labels = Some(BTreeMap::from([("touched".into(), "yes".into())]));
    h.claims()
        .replace("data", &PostParams::default(), &changed)
        .await
        .unwrap();

    eventually("the PV", WAIT, async || {
        h.volumes().get_opt(&pv_name).await.unwrap()
    })
    .await;
    let times: Vec<Instant> = h.driver.creates().iter().map(|(t, _)| *t).collect();
    assert_eq!(times.len(), 2, "exactly one retry");
    assert!(
        times[1] - times[0] >= MAX,
        "retried after {:?}",
        times[1] - times[0]
    );
    h.stop().await;
}

#[tokio::test]
async fn a_claim_deleted_during_a_timed_out_create_does_not_leak_its_volume() {
    let h = Harness::start(false).await;
    // Timeouts keep the claim in progress long enough (40+80+160+320 ms) for the deletion to
    // land before the driver finally answers.
    h.driver
        .fail_next((0..4).map(|_| CsiError::status(Code::DeadlineExceeded, "timeout")));
    let claim = h.create_claim("data").await;
    let pv_name = format!("pvc-{}", uid(&claim));
    eventually("the first CreateVolume", WAIT, async || {
        (!h.driver.creates().is_empty()).then_some(())
    })
    .await;
    h.delete_claim("data").await;

    eventually("the cleanup DeleteVolume", WAIT, async || {
        (!h.driver.deletes().is_empty()).then_some(())
    })
    .await;
    let creates = h.driver.creates();
    assert!(
        creates.len() >= 2,
        "the create was finished after the claim was deleted"
    );
    assert!(
        creates.iter().all(|(_, r)| r.name == pv_name),
        "same name every time"
    );
    assert_eq!(h.driver.deletes()[0].volume_id, format!("vol-{pv_name}"));
    assert!(h.driver.volumes().is_empty());
    // The sync that cleaned up has returned: any PV it was going to write is written.
    h.processed("claims").await;
    assert!(
        h.volumes().get_opt(&pv_name).await.unwrap().is_none(),
        "no PV for a deleted claim"
    );
    assert_eq!(h.counter(UNSAVED_ADDS), 0, "no PV waiting to be saved");
    h.stop().await;
}

#[tokio::test]
async fn a_claim_deleted_while_create_volume_is_in_flight_does_not_leak_its_volume() {
    let h = Harness::start(false).await;
    let release = h.driver.hold_creates();
    let claim = h.create_claim("data").await;
    let pv_name = format!("pvc-{}", uid(&claim));
    eventually("the CreateVolume in flight", WAIT, async || {
        (!h.driver.creates().is_empty()).then_some(())
    })
    .await;
    // Nothing writes the claim while its create is held, so the next add is the deletion's.
    let adds = h.counter(CLAIM_ADDS);
    h.delete_claim("data").await;
    eventually("the claim gone from the API", WAIT, async || {
        h.claims()
            .get_opt("data")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    // The informer saw the deletion (its handler re-queues a claim in progress, after the
    // cache was updated) before the driver answers.
    eventually("the provisioner to see the deletion", WAIT, async || {
        (h.counter(CLAIM_ADDS) > adds).then_some(())
    })
    .await;
    release.notify_one();

    eventually("the cleanup DeleteVolume", WAIT, async || {
        (!h.driver.deletes().is_empty()).then_some(())
    })
    .await;
    assert!(h.driver.volumes().is_empty());
    assert_eq!(
        h.driver.creates().len(),
        1,
        "the create that succeeded is not repeated"
    );
    h.processed("claims").await;
    assert!(h.volumes().get_opt(&pv_name).await.unwrap().is_none());
    assert_eq!(h.counter(UNSAVED_ADDS), 0, "no PV waiting to be saved");
    h.stop().await;
}

#[tokio::test]
async fn a_missing_provisioner_secret_is_reported_in_client_go_words() {
    let h = Harness::start(false).await;
    let class = StorageClass {
        metadata: ObjectMeta {
            name: Some("secured".into()),
            ..ObjectMeta::default()
        },
        provisioner: DRIVER.into(),
        parameters: Some(BTreeMap::from([
            (
                crate::params::PREFIXED_PROVISIONER_SECRET_NAME_KEY.into(),
                "absent".into(),
            ),
            (
                crate::params::PREFIXED_PROVISIONER_SECRET_NAMESPACE_KEY.into(),
                "default".into(),
            ),
        ])),
        ..StorageClass::default()
    };
    Api::<StorageClass>::all(h.client.clone())
        .create(&PostParams::default(), &class)
        .await
        .unwrap();
    h.create_claim_with("data", "secured", true).await;
    let failed = eventually("ProvisioningFailed", WAIT, async || {
        h.events("ProvisioningFailed").await.into_iter().next()
    })
    .await;
    // external-provisioner `getCredentials` wraps client-go's error, which prints the API
    // server's Status message and nothing else.
    assert_eq!(
        failed.message.as_deref(),
        Some(r#"error getting secret absent in namespace default: secrets "absent" not found"#)
    );
    assert!(h.driver.creates().is_empty());
    h.stop().await;
}

#[tokio::test]
async fn a_claim_deleted_before_its_pv_is_saved_gets_no_pv_and_its_volume_is_deleted() {
    let h = Harness::start(false).await;
    // The driver answers, but every PV create fails until the deletion has been seen: the
    // answered volume waits in `unsavedpvs` while its claim goes away.
    h.server
        .faults()
        .fail("create", "persistentvolumes", 500, usize::MAX);
    let claim = h.create_claim("data").await;
    let pv_name = format!("pvc-{}", uid(&claim));
    eventually("the PV waiting to be saved", WAIT, async || {
        (h.counter(r#"workqueue_adds_total{name="unsavedpvs"}"#) >= 1).then_some(())
    })
    .await;
    h.delete_claim("data").await;

    let deletes = eventually("the volume deleted", WAIT, async || {
        let deletes = h.driver.deletes();
        (!deletes.is_empty()).then_some(deletes)
    })
    .await;
    assert_eq!(deletes[0].volume_id, format!("vol-{pv_name}"));
    assert!(h.driver.volumes().is_empty());
    // Deleting the volume ended the save: the PV is never written, whatever the API server does.
    h.server.faults().clear();
    assert!(h.volumes().get_opt(&pv_name).await.unwrap().is_none());
    assert!(h.events("ProvisioningSucceeded").await.is_empty());
    h.stop().await;
}

#[tokio::test]
async fn a_clone_of_a_missing_claim_says_so_and_retries_on_the_slow_timer() {
    let h = Harness::with_capabilities(vec![
        ControllerCapability::CreateDeleteVolume,
        ControllerCapability::CloneVolume,
    ])
    .await;
    let mut clone = claim_object("copy", "fast", true);
    clone.spec.as_mut().unwrap().data_source = Some(TypedLocalObjectReference {
        api_group: None,
        kind: "PersistentVolumeClaim".into(),
        name: "original".into(),
    });
    h.claims()
        .create(&PostParams::default(), &clone)
        .await
        .unwrap();
    let refused = |count: i32| {
        let h = &h;
        async move {
            let events = h.events("ProvisioningFailed").await;
            let event = events
                .into_iter()
                .find(|e| e.involved_object.name.as_deref() == Some("copy"))?;
            (event.count >= Some(count)).then_some(event)
        }
    };
    let first = eventually("the refusal", WAIT, async || refused(1).await).await;
    assert_eq!(
        first.message.as_deref(),
        Some("PersistentVolumeClaim default/original specified as the data source does not exist"),
    );
    // Retried without any change of the claim, and on the fixed slow timer: the same Event's
    // count goes up, the exponential backoff is never used.
    let second = eventually("the slow retry", WAIT, async || refused(2).await).await;
    assert_eq!(second.message, first.message);
    assert_eq!(h.counter(r#"workqueue_retries_total{name="claims"}"#), 0);
    assert!(h.driver.creates().is_empty());
    h.stop().await;
}

fn released_pv(name: &str, reclaim: &str, finalizers: &[&str]) -> PersistentVolume {
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(name.into()),
            annotations: Some(BTreeMap::from([
                ("pv.kubernetes.io/provisioned-by".into(), DRIVER.into()),
                (
                    "volume.kubernetes.io/provisioner-deletion-secret-name".into(),
                    String::new(),
                ),
                (
                    "volume.kubernetes.io/provisioner-deletion-secret-namespace".into(),
                    String::new(),
                ),
            ])),
            finalizers: Some(finalizers.iter().map(|f| (*f).to_owned()).collect()),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeSpec {
            capacity: Some(BTreeMap::from([("storage".into(), Quantity("1Gi".into()))])),
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            persistent_volume_reclaim_policy: Some(reclaim.into()),
            storage_class_name: Some("fast".into()),
            claim_ref: Some(ObjectReference {
                name: Some("gone".into()),
                namespace: Some("default".into()),
                uid: Some("0000".into()),
                ..ObjectReference::default()
            }),
            csi: Some(CSIPersistentVolumeSource {
                driver: DRIVER.into(),
                volume_handle: format!("vol-{name}"),
                ..CSIPersistentVolumeSource::default()
            }),
            ..PersistentVolumeSpec::default()
        }),
        status: Some(PersistentVolumeStatus {
            phase: Some("Released".into()),
            ..PersistentVolumeStatus::default()
        }),
    }
}

#[tokio::test]
async fn a_released_delete_volume_is_deleted_with_its_pv() {
    a_released_pv_is_deleted_with_one_delete_volume(|_| {}).await;
}

/// A Released PV of reclaim policy Delete, with the API server's `fault`s, is deleted after
/// exactly one DeleteVolume for its volume. Where DeleteVolume succeeds and then the PV's
/// DELETE fails, the retry deletes the PV without asking the driver again (upstream asks again).
async fn a_released_pv_is_deleted_with_one_delete_volume(fault: impl FnOnce(&ApiServer)) {
    let h = Harness::start(false).await;
    fault(&h.server);
    h.server
        .put_object(&released_pv(
            "pvc-1",
            "Delete",
            &[crate::annotations::PV_FINALIZER],
        ))
        .unwrap();
    eventually("the PV gone", WAIT, async || {
        h.volumes()
            .get_opt("pvc-1")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    let deletes = h.driver.deletes();
    assert_eq!(deletes.len(), 1, "{deletes:?}");
    assert_eq!(deletes[0].volume_id, "vol-pvc-1");
    h.stop().await;
}

#[tokio::test]
async fn a_pv_delete_refused_after_delete_volume_is_retried_without_the_driver() {
    a_released_pv_is_deleted_with_one_delete_volume(|server| {
        server.faults().fail("delete", "persistentvolumes", 500, 1);
    })
    .await;
}

#[tokio::test]
async fn a_pv_delete_whose_answer_was_lost_is_retried_without_the_driver() {
    // The DELETE is stored (the PV gets its deletionTimestamp and keeps our finalizer), the
    // answer is cut off: the next sync sees a Released PV with our finalizer.
    a_released_pv_is_deleted_with_one_delete_volume(|server| {
        server
            .faults()
            .lose_answers("delete", "persistentvolumes", 1);
    })
    .await;
}

#[tokio::test]
async fn a_retained_volume_never_reaches_the_driver_and_loses_our_finalizer() {
    let h = Harness::start(false).await;
    h.server
        .put_object(&released_pv(
            "pvc-1",
            "Retain",
            &[crate::annotations::PV_FINALIZER],
        ))
        .unwrap();
    eventually("our finalizer removed", WAIT, async || {
        let pv = h.volumes().get("pvc-1").await.unwrap();
        pv.metadata
            .finalizers
            .unwrap_or_default()
            .is_empty()
            .then_some(())
    })
    .await;
    // The PATCH comes back as an update of the PV; its sync sees the PV without our finalizer.
    eventually("the update queued", WAIT, async || {
        (h.counter(VOLUME_ADDS) >= 2).then_some(())
    })
    .await;
    h.processed("volumes").await;
    assert!(h.driver.deletes().is_empty());
    h.stop().await;
}

#[tokio::test]
async fn a_volume_attachment_blocks_deletion_until_it_is_gone() {
    let h = Harness::start(true).await;
    let attachment = VolumeAttachment {
        metadata: ObjectMeta {
            name: Some("csi-1".into()),
            ..ObjectMeta::default()
        },
        spec: VolumeAttachmentSpec {
            attacher: DRIVER.into(),
            node_name: "node-1".into(),
            source: VolumeAttachmentSource {
                persistent_volume_name: Some("pvc-1".into()),
                ..VolumeAttachmentSource::default()
            },
        },
        status: None,
    };
    let attachments: Api<VolumeAttachment> = Api::all(h.client.clone());
    attachments
        .create(&PostParams::default(), &attachment)
        .await
        .unwrap();
    h.server
        .put_object(&released_pv(
            "pvc-1",
            "Delete",
            &[crate::annotations::PV_FINALIZER],
        ))
        .unwrap();
    let blocked = eventually("VolumeFailedDelete", WAIT, async || {
        let events = h.events("VolumeFailedDelete").await;
        (!events.is_empty()).then_some(events)
    })
    .await;
    assert_eq!(
        blocked[0].message.as_deref(),
        Some("persistentvolume pvc-1 is still attached to node node-1")
    );
    assert_eq!(blocked[0].metadata.namespace.as_deref(), Some("default"));
    assert!(h.driver.deletes().is_empty());

    attachments
        .delete("csi-1", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the PV gone", WAIT, async || {
        h.volumes()
            .get_opt("pvc-1")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    assert_eq!(h.driver.deletes().len(), 1);
    h.stop().await;
}

#[tokio::test]
async fn a_pv_that_cannot_be_saved_is_retried_without_a_second_volume() {
    let h = Harness::start(false).await;
    h.server
        .faults()
        .fail("create", "persistentvolumes", 500, 3);
    let claim = h.create_claim("data").await;
    let pv_name = format!("pvc-{}", uid(&claim));
    eventually("the PV", WAIT, async || {
        h.volumes().get_opt(&pv_name).await.unwrap()
    })
    .await;
    assert_eq!(
        h.driver.creates().len(),
        1,
        "the volume is not created again"
    );
    eventually("ProvisioningSucceeded", WAIT, async || {
        (!h.events("ProvisioningSucceeded").await.is_empty()).then_some(())
    })
    .await;
    h.stop().await;
}

/// kube-apiserver may store the PV and the answer be lost on the way (a broken connection):
/// the PV waits in `unsavedpvs`, and the next POST's AlreadyExists counts as saved (save.rs);
/// no second volume, one success Event.
#[tokio::test]
async fn a_pv_whose_save_answer_was_lost_is_saved_once_without_a_second_volume() {
    let h = Harness::start(false).await;
    h.server
        .faults()
        .lose_answers("create", "persistentvolumes", 1);
    let claim = h.create_claim("data").await;
    eventually("ProvisioningSucceeded", WAIT, async || {
        (!h.events("ProvisioningSucceeded").await.is_empty()).then_some(())
    })
    .await;
    assert_eq!(
        h.server.requests().get("create", "persistentvolumes"),
        2,
        "the lost POST and the one answered AlreadyExists"
    );
    let pv_name = format!("pvc-{}", uid(&claim));
    assert!(h.volumes().get_opt(&pv_name).await.unwrap().is_some());
    assert_eq!(
        h.driver.creates().len(),
        1,
        "the volume is not created again"
    );
    assert_eq!(h.events("ProvisioningSucceeded").await.len(), 1);
    h.stop().await;
}

#[tokio::test]
async fn a_claim_being_deleted_gets_no_volume() {
    let h = Harness::start(false).await;
    h.create_claim_unannotated("leaving").await;
    // Deleted while nobody had annotated it for our driver yet: pvc-protection (added by
    // admission) keeps it around with a deletionTimestamp.
    h.claims()
        .delete("leaving", &DeleteParams::default())
        .await
        .unwrap();
    let mut claim = h.claims().get("leaving").await.unwrap();
    assert!(claim.metadata.deletion_timestamp.is_some());
    claim.metadata.annotations = Some(BTreeMap::from([(
        "volume.kubernetes.io/storage-provisioner".into(),
        DRIVER.into(),
    )]));
    h.claims()
        .replace("leaving", &PostParams::default(), &claim)
        .await
        .unwrap();
    // Claim events reach the queue in order: once a claim created after the edit is
    // provisioned, the edit has been queued too, and then every queued claim is synced.
    let sentinel = h.create_claim("sentinel").await;
    let sentinel_pv = format!("pvc-{}", uid(&sentinel));
    eventually("the sentinel's PV", WAIT, async || {
        h.volumes().get_opt(&sentinel_pv).await.unwrap()
    })
    .await;
    h.processed("claims").await;
    let creates: Vec<String> = h
        .driver
        .creates()
        .into_iter()
        .map(|(_, request)| request.name)
        .collect();
    assert_eq!(
        creates,
        [sentinel_pv],
        "no CreateVolume for a claim being deleted"
    );
    h.stop().await;
}

#[tokio::test]
async fn a_deleted_event_that_lands_during_the_finalizer_patch_leaves_no_note() {
    // The informer's handler drops the note while the PATCH still waits for its answer (the
    // API server deleted the PV at once): nothing may stay behind.
    let deleted = DeletedVolumes::default();
    let patched = deleted
        .write(Some("uid-1"), async {
            assert!(deleted.contains("uid-1"), "noted before the write");
            deleted.remove("uid-1");
            Ok::<_, ()>(())
        })
        .await;
    assert_eq!(patched, Ok(()));
    assert_eq!(deleted.len(), 0);
}

#[tokio::test]
async fn a_failed_finalizer_patch_drops_the_note_and_a_good_one_keeps_it() {
    let deleted = DeletedVolumes::default();
    let failed = deleted
        .write(Some("uid-1"), async { Err::<(), _>("409") })
        .await;
    assert_eq!(failed, Err("409"));
    assert!(
        !deleted.contains("uid-1"),
        "the next sync must not be skipped"
    );
    assert_eq!(
        deleted.stage("uid-1"),
        Some(Deletion::Storage),
        "but it must not call DeleteVolume again"
    );
    deleted
        .write(Some("uid-1"), async { Ok::<_, ()>(()) })
        .await
        .unwrap();
    assert!(deleted.contains("uid-1"), "until the Deleted event");
}
