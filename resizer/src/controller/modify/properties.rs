//! A property test of the modify controller: the real [`super::sync::sync`] against the
//! in-memory API server, driven by random schedules of user changes to
//! `spec.volumeAttributesClassName`, a class created late, and driver answers.
//!
//! What the doubles copy of the real peers:
//! - the API server is testbed's in-memory one (resourceVersions, merge patches, `/status`);
//!   every sync runs once the informers' caches show the latest versions, as a sync started
//!   by the watch event of a write would;
//! - the driver ([`Backend`]) keeps the class its volume has. An answer with a final code
//!   (OK, InvalidArgument, Internal) means the driver did (OK) or did not do the modification;
//!   a non-final one (Unavailable, DeadlineExceeded) may come after the driver applied it (an
//!   answer lost on the way back, CSI spec "Timeouts") or not, and the driver may still be
//!   working towards that target. It is idempotent: a call for the class the volume already
//!   has is never refused with a final error.
//!
//! The properties, from upstream's modify controller (spec sidecars.md §2.5) and the CSI spec:
//! - after a non-final answer for class T, every ControllerModifyVolume is for T until a final
//!   answer for T (upstream's uncertain set: changing the target while the driver may still
//!   apply the old one would leave the volume in a state nobody asked for);
//! - no call names a class that does not exist;
//! - after every sync, the claim's `currentVolumeAttributesClassName` is the PV's
//!   `volumeAttributesClassName` (the PV is written first, so a claim never shows a class its
//!   PV lacks), conditions are unique by type, and another controller's condition is kept;
//! - once the faults stop, the claim converges: the class the driver has is the claim's
//!   current one, nothing is `InProgress`, and a spec class that exists is applied with both
//!   modify conditions gone.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use csi_common::controller::Outcome;
use csi_common::events::EventRecorder;
use csi_common::status::CsiError;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::VolumeAttributesClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use proptest::prelude::*;
use proto::csi::v1::ControllerModifyVolumeRequest;
use serde_json::json;
use testbed_cluster::apiserver::ApiServer;
use testbed_support::wait::eventually;
use tonic::Code;

use super::{Context, Settings, State};
use crate::controller::fixture;
use crate::csi::ModifyDriver;
use crate::modify::decide;
use crate::names::modify;

const DRIVER: &str = "fake.csi.example.com";
const KEY: &str = "default/data";
/// A condition of another controller, which every modify write must keep.
const FOREIGN: &str = "Resizing";
/// The classes a user may ask for; `bronze` exists only once [`Step::CreateBronze`] ran.
const CLASSES: [&str; 3] = ["gold", "silver", "bronze"];
/// The slow-set window of infeasible classes (`--retry-interval-max`), short so a
/// converging claim does not wait long.
const WINDOW: Duration = Duration::from_millis(20);

/// How the driver answers one ControllerModifyVolume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Ok,
    /// Final and infeasible.
    InvalidArgument,
    /// Final, retried.
    Internal,
    /// Not final; `applied`: the driver made the change before the answer was lost.
    Unavailable {
        applied: bool,
    },
    DeadlineExceeded {
        applied: bool,
    },
}

impl Answer {
    fn code(self) -> Option<Code> {
        match self {
            Self::Ok => None,
            Self::InvalidArgument => Some(Code::InvalidArgument),
            Self::Internal => Some(Code::Internal),
            Self::Unavailable { .. } => Some(Code::Unavailable),
            Self::DeadlineExceeded { .. } => Some(Code::DeadlineExceeded),
        }
    }

    fn applies(self) -> bool {
        matches!(
            self,
            Self::Ok
                | Self::Unavailable { applied: true }
                | Self::DeadlineExceeded { applied: true }
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// The next call gets this answer (calls without one get OK).
    Answer(Answer),
    /// The user sets the spec class (`None`: null).
    SetSpec(Option<&'static str>),
    /// The class `bronze` is created.
    CreateBronze,
    /// One sync of the claim.
    Sync,
}

/// The driver's side: the class its volume has, and what it was asked.
#[derive(Debug, Default)]
struct Backend {
    answers: VecDeque<Answer>,
    /// The class the volume has.
    class: Option<String>,
    /// The target of a non-final answer not yet followed by a final one.
    uncertain: Option<String>,
    calls: Vec<String>,
    /// Broken properties, in words.
    violations: Vec<String>,
}

#[derive(Debug, Default)]
struct ScriptedBackend(Mutex<Backend>);

impl ModifyDriver for ScriptedBackend {
    async fn modify(&self, request: ControllerModifyVolumeRequest) -> Result<(), CsiError> {
        let mut backend = self.0.lock().unwrap();
        let target = request
            .mutable_parameters
            .get("class")
            .cloned()
            .unwrap_or_default();
        if let Some(uncertain) = &backend.uncertain
            && *uncertain != target
        {
            let violation = format!("called for {target} while {uncertain} may still be applied");
            backend.violations.push(violation);
        }
        backend.calls.push(target.clone());
        let mut answer = backend.answers.pop_front().unwrap_or(Answer::Ok);
        // Idempotent, as the CSI spec asks of every controller call: a volume that already has
        // the class cannot be refused it (a final error would say the driver did not do what
        // it did). Transient answers stay: the call may still fail on the way.
        if backend.class.as_deref() == Some(target.as_str())
            && answer.code().is_some_and(csi_common::status::is_final)
        {
            answer = Answer::Ok;
        }
        if answer.applies() {
            backend.class = Some(target.clone());
        }
        match answer.code() {
            None => {
                backend.uncertain = None;
                Ok(())
            }
            Some(code) => {
                backend.uncertain = (!csi_common::status::is_final(code)).then_some(target.clone());
                Err(CsiError::status(code, format!("{code:?} for {target}")))
            }
        }
    }
}

struct Harness {
    server: ApiServer,
    ctx: Context<ScriptedBackend>,
    _events: tokio::sync::mpsc::Receiver<csi_common::events::NewEvent>,
    informers: tokio::task::JoinSet<()>,
}

fn class(name: &str) -> VolumeAttributesClass {
    VolumeAttributesClass {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        driver_name: DRIVER.into(),
        // The driver reads its target from here.
        parameters: Some(BTreeMap::from([("class".to_owned(), name.to_owned())])),
    }
}

/// A claim bound to a PV of [`DRIVER`] with no class, a [`FOREIGN`] condition, the classes
/// `gold` and `silver`, and caches that have seen them.
async fn harness() -> Harness {
    let server = ApiServer::new();
    let client = server.client();
    let status = json!({"status": {"phase": "Bound", "conditions": [
        {"type": FOREIGN, "status": "True"}
    ]}});
    fixture::bound_claim(&client, DRIVER, "1Gi", status).await;
    let classes: Api<VolumeAttributesClass> = Api::all(client.clone());
    for name in ["gold", "silver"] {
        classes
            .create(&PostParams::default(), &class(name))
            .await
            .unwrap();
    }
    let (stores, tasks, handlers) = crate::controller::stores(&client);
    let (class_store, class_task) = super::classes(&client, handlers.modify());
    let mut informers = tokio::task::JoinSet::new();
    for task in tasks.into_iter().chain([class_task]) {
        informers.spawn(task);
    }
    let (recorder, events) = EventRecorder::channel(4096);
    let ctx = Context {
        client,
        driver: ScriptedBackend::default(),
        settings: Settings {
            driver: DRIVER.into(),
            extra_metadata: false,
            workers: 1,
            retry_start: Duration::from_millis(1),
            retry_max: WINDOW,
            resync: Duration::ZERO,
        },
        stores,
        classes: class_store,
        state: Arc::new(State::new(WINDOW)),
        uncertain: Arc::default(),
        recorder,
    };
    let harness = Harness {
        server,
        ctx,
        _events: events,
        informers,
    };
    harness.caught_up().await;
    harness
}

impl Harness {
    async fn claim(&self) -> PersistentVolumeClaim {
        fixture::claim(&self.ctx.client).await
    }

    async fn volume(&self) -> PersistentVolume {
        fixture::volume(&self.ctx.client).await
    }

    /// Waits until the caches show the latest claim, PV and classes.
    async fn caught_up(&self) {
        let claim = self.claim().await.metadata.resource_version;
        let volume = self.volume().await.metadata.resource_version;
        let classes: Vec<String> = Api::<VolumeAttributesClass>::all(self.ctx.client.clone())
            .list(&kube::api::ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|c| c.metadata.name)
            .collect();
        eventually("the caches", Duration::from_secs(10), async || {
            let cached = self.ctx.stores.claim(KEY)?;
            let pv = self.ctx.stores.volume("pv-1")?;
            let all = classes
                .iter()
                .all(|c| self.ctx.classes.get(&ObjectRef::new(c)).is_some());
            (cached.metadata.resource_version == claim
                && pv.metadata.resource_version == volume
                && all)
                .then_some(())
        })
        .await;
    }

    /// The user's patch. kube-apiserver refuses (422) a null class once the claim has a
    /// current one (PVC validation, copied by the in-memory server): the user's change is then
    /// simply not made.
    async fn set_spec(&self, class: Option<&str>) {
        let patched = Api::<PersistentVolumeClaim>::namespaced(self.ctx.client.clone(), "default")
            .patch(
                "data",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"volumeAttributesClassName": class}})),
            )
            .await;
        match patched {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 422 && class.is_none() => {}
            Err(err) => panic!("setting the class to {class:?}: {err}"),
        }
    }

    async fn create_bronze(&self) -> bool {
        Api::<VolumeAttributesClass>::all(self.ctx.client.clone())
            .create(&PostParams::default(), &class("bronze"))
            .await
            .is_ok()
    }

    /// One sync, then the per-sync properties: whether the claim is queued again (the
    /// sync's retry, or the informer's update filter passing the watch event of what the sync
    /// wrote, as `Handlers::claim` does) and the violations found, in words.
    async fn sync(&self) -> (bool, Vec<String>) {
        let before = self.ctx.stores.claim(KEY).unwrap();
        let outcome = super::sync::sync(&self.ctx, KEY).await;
        self.caught_up().await;
        let claim = self.claim().await;
        let requeued = outcome == Outcome::Retry
            || (claim.metadata.resource_version != before.metadata.resource_version
                && decide::update_needs_sync(&before, &claim, true));
        let pv = self.volume().await;
        let mut violations = Vec::new();
        let current = decide::current_class(&claim);
        let pv_class = pv
            .spec
            .as_ref()
            .and_then(|s| s.volume_attributes_class_name.as_deref())
            .unwrap_or_default();
        if current != pv_class {
            violations.push(format!("claim shows {current:?}, PV has {pv_class:?}"));
        }
        violations.extend(fixture::repeated_conditions(&claim));
        let types = fixture::conditions(&claim);
        if !types.iter().any(|t| t == FOREIGN) {
            violations.push(format!("{FOREIGN} condition lost: {types:?}"));
        }
        (requeued, violations)
    }
}

/// Runs `schedule`, then lets the claim converge with a healthy driver; every violation seen,
/// and the classes the driver was called for.
async fn run(schedule: Vec<Step>) -> (Vec<String>, Vec<String>) {
    let harness = harness().await;
    let mut violations = Vec::new();
    let mut bronze = false;
    for step in schedule {
        match step {
            Step::Answer(answer) => harness
                .ctx
                .driver
                .0
                .lock()
                .unwrap()
                .answers
                .push_back(answer),
            Step::SetSpec(class) => harness.set_spec(class).await,
            Step::CreateBronze => bronze |= harness.create_bronze().await,
            Step::Sync => violations.extend(harness.sync().await.1),
        }
        harness.caught_up().await;
    }
    // The faults stop: the driver answers OK from now on, and syncs run while the claim is
    // queued (the queue's retries, the watch events of our writes). The first sync stands
    // for the one the user's last change queued.
    harness.ctx.driver.0.lock().unwrap().answers.clear();
    let mut settled = false;
    for _ in 0..12 {
        let (requeued, found) = harness.sync().await;
        violations.extend(found);
        if !requeued {
            settled = true;
            break;
        }
        // Past the slow-set window, as the rate-limited retry would be.
        tokio::time::sleep(WINDOW).await;
    }
    let claim = harness.claim().await;
    let backend = harness.ctx.driver.0.lock().unwrap();
    violations.extend(backend.violations.iter().cloned());
    if let Some(call) = backend.calls.iter().find(|c| {
        !(c.as_str() == "gold" || c.as_str() == "silver" || (bronze && c.as_str() == "bronze"))
    }) {
        violations.push(format!("a call for {call:?}, which does not exist"));
    }
    if !settled {
        violations.push("did not settle in 12 syncs".to_owned());
    }
    let current = decide::current_class(&claim);
    let status = decide::modify_status(&claim).map(|s| s.status.clone());
    if current != backend.class.as_deref().unwrap_or_default() {
        violations.push(format!(
            "claim shows {current:?}, the driver has {:?}",
            backend.class
        ));
    }
    if status.as_deref() == Some(modify::IN_PROGRESS) {
        violations.push("still InProgress".to_owned());
    }
    let spec = decide::spec_class(&claim);
    if !spec.is_empty() && (spec != "bronze" || bronze) {
        let modifying = fixture::conditions(&claim)
            .into_iter()
            .filter(|t| modify::CONDITIONS.contains(&t.as_str()))
            .collect::<Vec<_>>();
        if current != spec || status.is_some() || !modifying.is_empty() {
            violations.push(format!(
                "spec {spec:?} not applied: current {current:?}, status {status:?}, {modifying:?}"
            ));
        }
    }
    (violations, backend.calls.clone())
}

fn step() -> impl Strategy<Value = Step> {
    let answer = prop_oneof![
        Just(Answer::Ok),
        Just(Answer::InvalidArgument),
        Just(Answer::Internal),
        any::<bool>().prop_map(|applied| Answer::Unavailable { applied }),
        any::<bool>().prop_map(|applied| Answer::DeadlineExceeded { applied }),
    ];
    let spec = prop_oneof![
        Just(None),
        Just(Some(CLASSES[0])),
        Just(Some(CLASSES[1])),
        Just(Some(CLASSES[2])),
    ];
    prop_oneof![
        3 => answer.prop_map(Step::Answer),
        2 => spec.prop_map(Step::SetSpec),
        1 => Just(Step::CreateBronze),
        4 => Just(Step::Sync),
    ]
}

proptest! {
    #![proptest_config(fixture::property_config())]

    /// Any schedule of user changes, a late class and driver answers: the properties of the
    /// module docs hold.
    #[test]
    fn the_modify_controller_keeps_an_uncertain_target_and_converges(
        schedule in prop::collection::vec(step(), 0..24)
    ) {
        let (violations, _) = fixture::paused_runtime().block_on(run(schedule));
        prop_assert!(violations.is_empty(), "{violations:#?}");
    }
}

/// A fixed schedule through the uncertain path, so the property test is known to reach it: a
/// lost answer for `gold`, the user switching to `silver`, then the driver healthy again.
#[tokio::test(start_paused = true)]
async fn an_uncertain_gold_is_finished_before_silver() {
    use Step::{Answer as A, SetSpec, Sync};
    let schedule = vec![
        SetSpec(Some("gold")),
        A(Answer::DeadlineExceeded { applied: true }),
        Sync,
        SetSpec(Some("silver")),
        Sync,
    ];
    let (violations, calls) = run(schedule).await;
    assert_eq!(violations, Vec::<String>::new());
    assert_eq!(calls, ["gold", "gold", "silver"]);
}

/// The call succeeds and a write after it is refused (the PV's class; then, after the sync's
/// first status write, `InProgress`, the claim's finished status): each retry finishes from
/// the driver's answer. Upstream calls again.
#[tokio::test]
async fn a_modify_whose_writes_were_refused_is_finished_without_a_second_call() {
    let h = harness().await;
    h.set_spec(Some("gold")).await;
    h.caught_up().await;
    let calls = || h.ctx.driver.0.lock().unwrap().calls.clone();
    for (resource, passed) in [
        ("persistentvolumes", 0),
        ("persistentvolumeclaims/status", 1),
    ] {
        h.server
            .faults()
            .fail_after("patch", resource, passed, 500, 1);
        assert_eq!(
            super::sync::sync(&h.ctx, KEY).await,
            Outcome::Retry,
            "{resource}"
        );
        assert_eq!(calls(), ["gold"], "{resource}");
        h.caught_up().await;
    }
    assert_eq!(super::sync::sync(&h.ctx, KEY).await, Outcome::Done);
    assert_eq!(calls(), ["gold"], "no second ControllerModifyVolume");
    assert_eq!(decide::current_class(&h.claim().await), "gold");
}

/// A status write stored with its answer lost, while the watch is cut (an API server restart
/// does both; docs/reliability.md, "What the suite found"): the next sync reads the claim back
/// instead of calling again from the stale cache, and so does a later one.
#[tokio::test]
async fn a_finished_modify_whose_answer_was_lost_is_read_back_not_called_again() {
    let mut h = harness().await;
    h.set_spec(Some("gold")).await;
    h.caught_up().await;
    h.ctx
        .driver
        .0
        .lock()
        .unwrap()
        .answers
        .push_back(Answer::Unavailable { applied: false });
    assert_eq!(super::sync::sync(&h.ctx, KEY).await, Outcome::Retry);
    h.caught_up().await;
    h.informers.abort_all();
    h.server
        .faults()
        .lose_answers("patch", "persistentvolumeclaims/status", 1);
    // The call succeeds, the PV gets the class, the claim's finished status is stored and
    // its answer lost.
    assert_eq!(super::sync::sync(&h.ctx, KEY).await, Outcome::Retry);
    assert_eq!(decide::current_class(&h.claim().await), "gold");
    let calls = || h.ctx.driver.0.lock().unwrap().calls.clone();
    assert_eq!(calls(), ["gold", "gold"]);
    for sync in ["the retry", "a late watch event's sync"] {
        assert_eq!(
            super::sync::sync(&h.ctx, KEY).await,
            Outcome::Done,
            "{sync}"
        );
        assert_eq!(calls(), ["gold", "gold"], "{sync}: no third call");
    }
}
