//! Leader election against an in-process Lease API (an axum router speaking the
//! coordination.k8s.io/v1 Lease and core/v1 Event endpoints with resourceVersion conflicts), on
//! tokio's paused clock so lease timing is exact.

// The fake API server's helpers live outside #[test] functions, where clippy's
// allow-unwrap-in-tests does not reach.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use csi_common::fence::Fence;
use csi_common::leader::{
    LeaderElectionConfig, LeaderElector, Leadership, LostReason, MASTER_STATUS_METRIC,
};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use prometheus::Registry;
use serde_json::json;
use tokio::time::{Instant, sleep};
use tower::ServiceBuilder;

const NS: &str = "fixtures";
const LEASE: &str = "external-resizer-hostpath-csi-k8s-io";
const CLIENT_HEADER: &str = "x-test-client";

/// One request as the fake API server saw it.
#[derive(Clone, Debug)]
struct Logged {
    client: String,
    method: Method,
    path: String,
    status: u16,
    /// When the answer was ready (on the paused clock: when the write took effect).
    at: Instant,
}

#[derive(Default)]
struct ApiState {
    leases: BTreeMap<(String, String), Lease>,
    next_rv: u64,
    requests: Vec<Logged>,
    events: Vec<Event>,
    /// Clients whose requests get a 500.
    failing: BTreeSet<String>,
    /// Clients whose requests never get an answer.
    hanging: BTreeSet<String>,
    /// Per client, how many more Lease writes are carried out with their answers lost.
    losing: BTreeMap<String, usize>,
}

/// A minimal Lease API: GET/POST/PUT/DELETE with resourceVersion checks and Status bodies shaped
/// like kube-apiserver's, plus POST of core/v1 Events.
#[derive(Clone, Default)]
struct FakeApi {
    state: Arc<Mutex<ApiState>>,
}

impl FakeApi {
    fn lock(&self) -> MutexGuard<'_, ApiState> {
        self.state.lock().unwrap()
    }

    fn router(&self) -> Router {
        Router::new()
            .route(
                "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
                post(create_lease),
            )
            .route(
                "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}",
                get(get_lease).put(replace_lease).delete(delete_lease),
            )
            .route("/api/v1/namespaces/{ns}/events", post(create_event))
            .layer(middleware::from_fn_with_state(self.clone(), gate))
            .with_state(self.clone())
    }

    /// A kube client whose requests carry `name`, so the server can log and fail them per
    /// contender.
    fn client(&self, name: &str) -> kube::Client {
        let value = HeaderValue::from_str(name).unwrap();
        let service = ServiceBuilder::new()
            .map_request(move |mut req: http::Request<kube::client::Body>| {
                req.headers_mut().insert(CLIENT_HEADER, value.clone());
                req
            })
            .service(self.router());
        kube::Client::new(service, "default")
    }

    fn lease(&self) -> Lease {
        self.lock()
            .leases
            .get(&(NS.to_owned(), LEASE.to_owned()))
            .cloned()
            .expect("lease exists")
    }

    fn spec(&self) -> LeaseSpec {
        self.lease().spec.expect("lease has a spec")
    }

    /// Stores a Lease as if another process had written it.
    fn put_lease(&self, spec: LeaseSpec, labels: Option<BTreeMap<String, String>>) {
        let mut state = self.lock();
        state.next_rv += 1;
        let rv = state.next_rv;
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(LEASE.to_owned()),
                namespace: Some(NS.to_owned()),
                uid: Some(format!("uid-{LEASE}")),
                resource_version: Some(rv.to_string()),
                labels,
                ..ObjectMeta::default()
            },
            spec: Some(spec),
        };
        state
            .leases
            .insert((NS.to_owned(), LEASE.to_owned()), lease);
    }

    /// Bumps the stored resourceVersion without changing the spec (another writer with the same
    /// identity, as two replicas on one host in the golden capture).
    fn touch_lease(&self) {
        let mut state = self.lock();
        state.next_rv += 1;
        let rv = state.next_rv.to_string();
        let lease = state
            .leases
            .get_mut(&(NS.to_owned(), LEASE.to_owned()))
            .expect("lease exists");
        lease.metadata.resource_version = Some(rv);
    }

    fn set_failing(&self, client: &str) {
        self.lock().failing.insert(client.to_owned());
    }

    fn clear_failing(&self, client: &str) {
        self.lock().failing.remove(client);
    }

    fn set_hanging(&self, client: &str) {
        self.lock().hanging.insert(client.to_owned());
    }

    /// The next `count` Lease writes of `client` are stored with their answers lost.
    fn lose_answers(&self, client: &str, count: usize) {
        self.lock().losing.insert(client.to_owned(), count);
    }

    fn take_lost_answer(&self, client: &str) -> bool {
        let mut state = self.lock();
        match state.losing.get_mut(client) {
            Some(left) if *left > 0 => {
                *left -= 1;
                true
            }
            _ => false,
        }
    }

    /// The Lease requests (not Events) of one client, in order.
    fn requests_of(&self, client: &str) -> Vec<(Method, u16)> {
        self.lock()
            .requests
            .iter()
            .filter(|r| r.client == client && r.path.contains("/leases"))
            .map(|r| (r.method.clone(), r.status))
            .collect()
    }

    /// When the last successful PUT of the Lease by `client` (a renewal or takeover) took effect.
    fn last_write_of(&self, client: &str) -> Option<Instant> {
        self.lock()
            .requests
            .iter()
            .rev()
            .find(|r| {
                r.client == client
                    && r.path.contains("/leases")
                    && r.method == Method::PUT
                    && r.status == 200
            })
            .map(|r| r.at)
    }

    fn clear_requests(&self) {
        self.lock().requests.clear();
    }

    fn events(&self) -> Vec<Event> {
        self.lock().events.clone()
    }
}

fn status(code: StatusCode, reason: &str, message: &str, name: &str) -> Response {
    let body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": {"name": name, "group": "coordination.k8s.io", "kind": "leases"},
        "code": code.as_u16(),
    });
    (code, Json(body)).into_response()
}

fn not_found(name: &str) -> Response {
    status(
        StatusCode::NOT_FOUND,
        "NotFound",
        &format!("leases.coordination.k8s.io \"{name}\" not found"),
        name,
    )
}

/// Logs every request and applies the per-client fault injection.
async fn gate(State(api): State<FakeApi>, request: Request, next: Next) -> Response {
    let client = request
        .headers()
        .get(CLIENT_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let (failing, hanging) = {
        let state = api.lock();
        (
            state.failing.contains(&client),
            state.hanging.contains(&client),
        )
    };
    if hanging {
        std::future::pending::<()>().await;
    }
    let lose = method != Method::GET && path.contains("/leases") && api.take_lost_answer(&client);
    let mut response = if failing {
        status(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "injected failure",
            "",
        )
    } else {
        next.run(request).await
    };
    if lose {
        // Carried out, then the connection breaks while the answer is read: the client gets
        // an error for a write kube-apiserver committed (as testbed's `Faults::lose_answers`).
        let cut = futures::stream::once(async {
            Err::<axum::body::Bytes, _>(std::io::Error::from(std::io::ErrorKind::ConnectionReset))
        });
        *response.body_mut() = axum::body::Body::from_stream(cut);
    }
    api.lock().requests.push(Logged {
        client,
        method,
        path,
        status: response.status().as_u16(),
        at: Instant::now(),
    });
    response
}

async fn get_lease(
    State(api): State<FakeApi>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    match api.lock().leases.get(&(ns, name.clone())) {
        Some(lease) => Json(lease.clone()).into_response(),
        None => not_found(&name),
    }
}

async fn create_lease(
    State(api): State<FakeApi>,
    Path(ns): Path<String>,
    Json(mut lease): Json<Lease>,
) -> Response {
    let name = lease.metadata.name.clone().unwrap_or_default();
    let mut state = api.lock();
    let key = (ns.clone(), name.clone());
    if state.leases.contains_key(&key) {
        return status(
            StatusCode::CONFLICT,
            "AlreadyExists",
            &format!("leases.coordination.k8s.io \"{name}\" already exists"),
            &name,
        );
    }
    state.next_rv += 1;
    lease.metadata.namespace = Some(ns);
    lease.metadata.uid = Some(format!("uid-{name}"));
    lease.metadata.resource_version = Some(state.next_rv.to_string());
    lease.metadata.creation_timestamp = Some(Time(Timestamp::now()));
    state.leases.insert(key, lease.clone());
    (StatusCode::CREATED, Json(lease)).into_response()
}

async fn replace_lease(
    State(api): State<FakeApi>,
    Path((ns, name)): Path<(String, String)>,
    Json(mut lease): Json<Lease>,
) -> Response {
    let mut state = api.lock();
    let key = (ns, name.clone());
    let Some(stored) = state.leases.get(&key) else {
        return not_found(&name);
    };
    if lease.metadata.resource_version != stored.metadata.resource_version {
        return status(
            StatusCode::CONFLICT,
            "Conflict",
            &format!(
                "Operation cannot be fulfilled on leases.coordination.k8s.io \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
            ),
            &name,
        );
    }
    lease.metadata.uid.clone_from(&stored.metadata.uid);
    state.next_rv += 1;
    lease.metadata.resource_version = Some(state.next_rv.to_string());
    state.leases.insert(key, lease.clone());
    Json(lease).into_response()
}

async fn delete_lease(
    State(api): State<FakeApi>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    match api.lock().leases.remove(&(ns, name.clone())) {
        Some(_) => Json(json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": {"name": name, "group": "coordination.k8s.io", "kind": "leases"}
        }))
        .into_response(),
        None => not_found(&name),
    }
}

async fn create_event(
    State(api): State<FakeApi>,
    Path(_ns): Path<String>,
    Json(event): Json<Event>,
) -> Response {
    api.lock().events.push(event.clone());
    (StatusCode::CREATED, Json(event)).into_response()
}

fn config(identity: &str) -> LeaderElectionConfig {
    LeaderElectionConfig::new(LEASE, NS, identity)
}

fn elector(api: &FakeApi, config: LeaderElectionConfig) -> LeaderElector {
    LeaderElector::new(api.client(&config.identity), config).unwrap()
}

/// Runs `acquire` in a task and reports when it returned.
fn spawn_acquire(elector: LeaderElector) -> tokio::task::JoinHandle<(Instant, Leadership)> {
    tokio::spawn(async move {
        let leadership = elector.acquire().await;
        (Instant::now(), leadership)
    })
}

/// Lets spawned tasks (Event posts) run without advancing the clock meaningfully.
async fn settle() {
    sleep(Duration::from_millis(1)).await;
}

fn render(registry: &Registry) -> String {
    csi_common::metrics::render(registry).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_lone_candidate_creates_the_lease_like_client_go() {
    let api = FakeApi::default();
    let mut c = config("vm");
    c.labels = BTreeMap::from([("team".to_owned(), "storage".to_owned())]);
    let leadership = elector(&api, c).acquire().await;
    assert!(leadership.is_leader());
    settle().await;

    // GET (404), POST, then the immediate first renewal (fast-path PUT), as in the capture.
    assert_eq!(
        api.requests_of("vm"),
        [(Method::GET, 404), (Method::POST, 201), (Method::PUT, 200)]
    );
    let lease = api.lease();
    let spec = lease.spec.clone().unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("vm"));
    assert_eq!(spec.lease_duration_seconds, Some(15));
    assert_eq!(spec.lease_transitions, Some(0));
    assert!(spec.acquire_time.is_some());
    assert!(spec.renew_time >= spec.acquire_time);
    assert_eq!(
        lease.metadata.labels,
        Some(BTreeMap::from([("team".to_owned(), "storage".to_owned())]))
    );
    // MicroTime: six fractional digits and a Z, e.g. 2026-11-21T15:36:56.181130Z.
    let json = serde_json::to_value(&spec).unwrap();
    let renew = json["renewTime"].as_str().unwrap();
    let fraction = renew.split('.').nth(1).unwrap();
    assert_eq!(fraction.len(), 7, "{renew}");
    assert!(fraction.ends_with('Z'), "{renew}");
}

#[tokio::test(start_paused = true)]
async fn two_contenders_end_up_with_exactly_one_leader() {
    let api = FakeApi::default();
    let a = spawn_acquire(elector(&api, config("a")));
    let b = spawn_acquire(elector(&api, config("b")));

    // A minute of renewals and retries: the winner keeps renewing, the other keeps waiting.
    sleep(Duration::from_mins(1)).await;
    assert!(
        a.is_finished() ^ b.is_finished(),
        "exactly one contender must lead"
    );
    let (winner, loser, winner_name) = if a.is_finished() {
        (a, b, "a")
    } else {
        (b, a, "b")
    };
    let spec = api.spec();
    assert_eq!(spec.holder_identity.as_deref(), Some(winner_name));
    assert_eq!(spec.lease_transitions, Some(0));
    let (_, leadership) = winner.await.unwrap();
    assert!(leadership.is_leader());
    loser.abort();
}

#[tokio::test(start_paused = true)]
async fn a_standby_takes_over_only_a_full_lease_duration_after_it_last_saw_a_change() {
    let api = FakeApi::default();
    let leader = elector(&api, config("a")).acquire().await;
    sleep(Duration::from_secs(1)).await;

    let standby_started = Instant::now();
    let standby = spawn_acquire(elector(&api, config("b")));
    sleep(Duration::from_secs(2)).await;
    // The leader stops renewing (its process hangs or dies).
    drop(leader);

    // The standby saw the record last change when it first read it; 15 s of local time must
    // pass from then, whatever renewTime says.
    sleep(standby_started + Duration::from_millis(14_900) - Instant::now()).await;
    assert!(!standby.is_finished(), "took over before the lease expired");

    let (acquired_at, leadership) = standby.await.unwrap();
    let waited = acquired_at - standby_started;
    assert!(
        waited >= Duration::from_secs(15),
        "took over after {waited:?}"
    );
    // Its attempts are at most retry period × (1 + 1.2) = 11 s apart.
    assert!(
        waited <= Duration::from_secs(26),
        "took over after {waited:?}"
    );
    assert!(leadership.is_leader());
    let spec = api.spec();
    assert_eq!(spec.holder_identity.as_deref(), Some("b"));
    assert_eq!(spec.lease_transitions, Some(1));
}

#[tokio::test(start_paused = true)]
async fn a_standby_ignores_a_skewed_renew_time_and_waits_on_its_own_clock() {
    // A Lease held by someone else whose renewTime is years old (a dead leader, or its clock far
    // behind) or an hour ahead (its clock far ahead): either way the standby takes it exactly
    // one lease duration after it first saw the record, on its own clock.
    for renewed in ["2020-01-01T00:00:00.000000Z", "2099-01-01T00:00:00.000000Z"] {
        let api = FakeApi::default();
        let renewed: Timestamp = renewed.parse().unwrap();
        api.put_lease(
            LeaseSpec {
                holder_identity: Some("other".into()),
                lease_duration_seconds: Some(15),
                acquire_time: Some(MicroTime(renewed)),
                renew_time: Some(MicroTime(renewed)),
                lease_transitions: Some(4),
                ..LeaseSpec::default()
            },
            None,
        );
        let started = Instant::now();
        let (acquired_at, _leadership) = spawn_acquire(elector(&api, config("b"))).await.unwrap();
        assert_eq!(acquired_at - started, Duration::from_secs(15), "{renewed}");
        assert_eq!(api.spec().lease_transitions, Some(5));
    }
}

/// The chaos suite's timings (`FAST_LEADER_ELECTION`): lease 3 s, renew deadline 2 s, retry 1 s.
fn fast(identity: &str) -> LeaderElectionConfig {
    LeaderElectionConfig {
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_secs(1),
        ..config(identity)
    }
}

/// Asserts that a takeover at `acquired_at` came at least a lease duration and at most that
/// plus an observe interval after the holder's last renewal at `renewed` (requests take no time
/// on the paused clock).
fn assert_took_over_at_expiry(
    renewed: Instant,
    acquired_at: Instant,
    lease: Duration,
    observe: Duration,
) {
    let took = acquired_at - renewed;
    assert!(took >= lease, "took over after {took:?}");
    assert!(took <= lease + observe, "took over after {took:?}");
}

/// Waits (on the paused clock) until `done` holds.
async fn until(mut done: impl FnMut() -> bool) {
    while !done() {
        sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_standby_takes_over_at_the_expiry_and_never_before_the_old_leader_stops() {
    let api = FakeApi::default();
    let mut leader = elector(&api, fast("a")).acquire().await;
    sleep(Duration::from_millis(500)).await;
    let standby = spawn_acquire(elector(&api, fast("b")));
    // Several renewals seen by the standby, then the leader's API requests hang (a partition,
    // or a SIGSTOP: the leader process keeps its own deadline).
    sleep(Duration::from_millis(7_300)).await;
    api.set_hanging("a");
    let last_renewal = api.last_write_of("a").unwrap();
    let lost = leader.lost().await;
    let stopped_at = Instant::now();
    let (acquired_at, _leadership) = standby.await.unwrap();

    // The old leader gives up one retry period + the renew deadline after its last renewal.
    assert_eq!(stopped_at - last_renewal, Duration::from_secs(3), "{lost}");
    assert!(
        acquired_at >= stopped_at,
        "took over {:?} before the old leader stopped",
        stopped_at - acquired_at
    );
    // The standby saw that renewal within an observe interval (250 ms) and attempted at the
    // expiry.
    assert_took_over_at_expiry(
        last_renewal,
        acquired_at,
        Duration::from_secs(3),
        Duration::from_millis(250),
    );
    assert_eq!(api.spec().holder_identity.as_deref(), Some("b"));
}

#[tokio::test(start_paused = true)]
async fn with_upstream_timings_a_killed_leader_is_replaced_half_a_second_after_its_lease() {
    let api = FakeApi::default();
    let leader = elector(&api, config("a")).acquire().await;
    sleep(Duration::from_secs(2)).await;
    let standby = spawn_acquire(elector(&api, config("b")));
    sleep(Duration::from_secs(31)).await;
    // SIGKILL: renewals stop, nothing is released.
    drop(leader);
    let last_renewal = api.last_write_of("a").unwrap();
    let (acquired_at, _leadership) = standby.await.unwrap();
    // Never before lease duration (= retry period + renew deadline, when the leader would
    // have stopped), at most an observe interval (500 ms) after it.
    assert_took_over_at_expiry(
        last_renewal,
        acquired_at,
        Duration::from_secs(15),
        Duration::from_millis(500),
    );
}

#[tokio::test(start_paused = true)]
async fn a_late_renewal_is_seen_at_once_and_restarts_the_expiry() {
    let api = FakeApi::default();
    let leader = elector(&api, fast("a")).acquire().await;
    let standby = spawn_acquire(elector(&api, fast("b")));
    sleep(Duration::from_millis(5_500)).await;
    // The leader's next renewal fails, the one after it succeeds late (within its deadline).
    api.set_failing("a");
    let before = api.last_write_of("a").unwrap();
    sleep(Duration::from_millis(1_200)).await;
    api.clear_failing("a");
    until(|| api.last_write_of("a") > Some(before)).await;
    let late_renewal = api.last_write_of("a").unwrap();
    assert!(late_renewal - before > Duration::from_millis(1_500));
    // Killed right after the late renewal: the expiry counts from it, not from `before`.
    drop(leader);
    let (acquired_at, _leadership) = standby.await.unwrap();
    assert_took_over_at_expiry(
        late_renewal,
        acquired_at,
        Duration::from_secs(3),
        Duration::from_millis(250),
    );
}

#[tokio::test(start_paused = true)]
async fn a_standby_reads_about_twice_per_renewal() {
    let api = FakeApi::default();
    let _leader = elector(&api, config("a")).acquire().await;
    let standby = spawn_acquire(elector(&api, config("b")));
    // Past the first renewals (a first sighting is read every observe interval until the
    // record changes), then a minute of steady renewals every 5 s.
    sleep(Duration::from_secs(11)).await;
    api.clear_requests();
    sleep(Duration::from_mins(1)).await;
    let renewals = api.requests_of("a").len();
    let reads = api.requests_of("b");
    assert_eq!(renewals, 12, "{:?}", api.requests_of("a"));
    assert!(reads.iter().all(|r| *r == (Method::GET, 200)), "{reads:?}");
    // client-go reads once per 5-11 s; reading every observe interval would be 120.
    assert!(
        (renewals..=2 * renewals + 1).contains(&reads.len()),
        "{} reads for {renewals} renewals",
        reads.len()
    );
    assert!(!standby.is_finished());
    standby.abort();
}

#[tokio::test(start_paused = true)]
async fn a_lease_already_naming_this_identity_is_taken_at_once() {
    let api = FakeApi::default();
    let acquired: Timestamp = "2026-11-21T15:36:56.181130Z".parse().unwrap();
    api.put_lease(
        LeaseSpec {
            holder_identity: Some("vm".into()),
            lease_duration_seconds: Some(15),
            acquire_time: Some(MicroTime(acquired)),
            renew_time: Some(MicroTime(acquired)),
            lease_transitions: Some(3),
            ..LeaseSpec::default()
        },
        None,
    );
    let started = Instant::now();
    let (acquired_at, _leadership) = spawn_acquire(elector(&api, config("vm"))).await.unwrap();
    assert_eq!(acquired_at, started);
    let spec = api.spec();
    // A renewal, not a transition: acquireTime and leaseTransitions are kept.
    assert_eq!(spec.lease_transitions, Some(3));
    assert_eq!(spec.acquire_time, Some(MicroTime(acquired)));
}

#[tokio::test(start_paused = true)]
async fn a_released_lease_is_taken_by_the_standby_at_its_next_attempt() {
    let api = FakeApi::default();
    let with_release = |identity: &str| LeaderElectionConfig {
        lease_duration: Duration::from_mins(1),
        renew_deadline: Duration::from_secs(40),
        retry_period: Duration::from_secs(5),
        release_on_cancel: true,
        ..config(identity)
    };
    let leader = elector(&api, with_release("a")).acquire().await;
    sleep(Duration::from_secs(1)).await;
    let standby = spawn_acquire(elector(&api, with_release("b")));
    sleep(Duration::from_secs(1)).await;

    leader.release().await.unwrap();
    let released_at = Instant::now();
    // client-go release(): same Lease, empty holder, 1 s duration, transitions kept.
    let spec = api.spec();
    assert_eq!(spec.holder_identity.as_deref(), Some(""));
    assert_eq!(spec.lease_duration_seconds, Some(1));
    assert_eq!(spec.lease_transitions, Some(0));
    assert!(spec.acquire_time.is_some() && spec.acquire_time == spec.renew_time);
    assert!(
        api.events()
            .iter()
            .any(|e| e.message.as_deref() == Some("a stopped leading"))
    );

    let (acquired_at, leadership) = standby.await.unwrap();
    // Next attempt, not a 60 s expiry.
    assert!(acquired_at - released_at <= Duration::from_secs(11));
    assert!(leadership.is_leader());
    let spec = api.spec();
    assert_eq!(spec.holder_identity.as_deref(), Some("b"));
    assert_eq!(spec.lease_transitions, Some(1));
    assert_eq!(spec.lease_duration_seconds, Some(60));
}

#[tokio::test(start_paused = true)]
async fn release_without_release_on_cancel_stops_renewing_but_leaves_the_lease() {
    let api = FakeApi::default();
    let leader = elector(&api, config("a")).acquire().await;
    sleep(Duration::from_secs(1)).await;
    leader.release().await.unwrap();
    api.clear_requests();

    sleep(Duration::from_secs(30)).await;
    assert_eq!(api.spec().holder_identity.as_deref(), Some("a"));
    // Only the "stopped leading" Event was posted; no Lease request after release.
    assert!(
        api.requests_of("a").is_empty(),
        "{:?}",
        api.requests_of("a")
    );
    assert!(
        api.events()
            .iter()
            .any(|e| e.message.as_deref() == Some("a stopped leading"))
    );
}

#[tokio::test(start_paused = true)]
async fn a_conflict_on_renew_is_followed_by_get_and_put() {
    let api = FakeApi::default();
    let registry = Registry::new();
    let e = elector(&api, config("vm"));
    e.register_metrics(&registry).unwrap();
    let mut leadership = e.acquire().await;
    sleep(Duration::from_secs(1)).await;

    api.touch_lease();
    api.clear_requests();
    sleep(Duration::from_secs(5)).await;

    // The optimistic PUT carries a stale resourceVersion: 409, then GET + PUT (as in
    // traffic/go-sidecar-requests.txt at 15:37:11).
    assert_eq!(
        api.requests_of("vm"),
        [(Method::PUT, 409), (Method::GET, 200), (Method::PUT, 200)]
    );
    assert!(leadership.is_leader());
    assert!(
        render(&registry).contains("leader_election_slowpath_total{name=\"\"} 1\n"),
        "{}",
        render(&registry)
    );
    let still_leading = tokio::time::timeout(Duration::from_mins(1), leadership.lost()).await;
    assert!(
        still_leading.is_err(),
        "leadership was lost: {still_leading:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn failing_renewals_past_the_renew_deadline_report_lost_leadership() {
    let api = FakeApi::default();
    let registry = Registry::new();
    let e = elector(&api, config("a"));
    e.register_metrics(&registry).unwrap();
    let mut leadership = e.acquire().await;
    // acquire() returns after the create; the first renewal runs at once.
    let last_renewal = Instant::now();
    sleep(Duration::from_secs(1)).await;
    assert!(render(&registry).contains("leader_election_master_status{name=\"\"} 1\n"));

    api.clear_requests();
    api.set_failing("a");
    let lost = leadership.lost().await;
    let lost_after = Instant::now() - last_renewal;

    // Next renewal cycle starts one retry period after the last success and gives up at the
    // renew deadline: 5 s + 10 s.
    assert_eq!(lost_after, Duration::from_secs(15));
    let LostReason::RenewDeadlineExceeded {
        renew_deadline,
        last_error,
    } = &lost.reason
    else {
        panic!("unexpected reason {:?}", lost.reason);
    };
    assert_eq!(*renew_deadline, Duration::from_secs(10));
    let last_error = last_error.as_deref().unwrap();
    assert!(
        last_error.contains("error retrieving resource lock"),
        "{last_error}"
    );
    assert_eq!(lost.lease, format!("{NS}/{LEASE}"));
    assert!(!leadership.is_leader());
    assert!(render(&registry).contains("leader_election_master_status{name=\"\"} 0\n"));
    // Resolves again on every later call.
    assert_eq!(leadership.lost().await, lost);
    // Attempts at 5 s and 10 s: the optimistic PUT and the GET fallback both failed.
    let attempts = api.requests_of("a");
    assert!(
        attempts.iter().all(|(_, status)| *status == 500),
        "{attempts:?}"
    );
    assert!(attempts.len() >= 4, "{attempts:?}");
}

#[tokio::test(start_paused = true)]
async fn a_leader_frozen_past_its_deadline_gives_up_as_soon_as_it_runs_again() {
    let api = FakeApi::default();
    let mut leadership = elector(&api, fast("a")).acquire().await;
    settle().await;
    let last_renewal = api.last_write_of("a").unwrap();
    api.clear_requests();
    // Frozen (SIGSTOP) for 3.5 s: the clock jumps without the renew task running, as when
    // the process is stopped in its retry-period sleep.
    tokio::time::advance(Duration::from_millis(3_500)).await;
    let resumed = Instant::now();
    let lost = tokio::time::timeout(Duration::from_secs(10), leadership.lost())
        .await
        .expect("still leading 10 s after the freeze");
    // Its deadline (last renewal + retry period + renew deadline = 3 s) passed while frozen:
    // lost at once, without another request (client-go would renew for 2 s more first).
    assert_eq!(Instant::now(), resumed, "{lost}");
    assert!(resumed - last_renewal > Duration::from_secs(3));
    assert!(matches!(
        lost.reason,
        LostReason::RenewDeadlineExceeded { .. }
    ));
    assert!(!leadership.is_leader());
    assert!(
        api.requests_of("a").is_empty(),
        "{:?}",
        api.requests_of("a")
    );
}

#[tokio::test(start_paused = true)]
async fn the_fence_is_open_while_renewals_keep_up_and_shut_for_a_thawed_leader() {
    let api = FakeApi::default();
    let fence = Fence::new();
    let elector = elector(&api, fast("a")).with_fence(fence.clone());
    assert!(!fence.is_open(), "a standby's writes are fenced");
    let mut leadership = elector.acquire().await;
    assert!(fence.is_open(), "open from the moment it leads");
    // Renewals every retry period move the fence on: still open well past one deadline
    // (retry period + renew deadline = 3 s) after the acquisition.
    sleep(Duration::from_secs(10)).await;
    assert!(fence.is_open());
    assert!(leadership.is_leader());

    // Frozen for 3.5 s in its retry-period sleep: on thawing, the fence is shut by the clock
    // alone, whichever task runs first; the renewal task then reports the loss.
    tokio::time::advance(Duration::from_millis(3_500)).await;
    assert!(!fence.is_open());
    leadership.lost().await;
    assert!(!fence.is_open());
}

#[tokio::test(start_paused = true)]
async fn a_hanging_api_server_is_cut_off_at_the_renew_deadline() {
    let api = FakeApi::default();
    let mut leadership = elector(&api, config("a")).acquire().await;
    let last_renewal = Instant::now();
    sleep(Duration::from_secs(1)).await;
    api.set_hanging("a");
    let lost = leadership.lost().await;
    assert_eq!(Instant::now() - last_renewal, Duration::from_secs(15));
    assert_eq!(
        lost.reason,
        LostReason::RenewDeadlineExceeded {
            renew_deadline: Duration::from_secs(10),
            last_error: None
        }
    );
}

#[tokio::test(start_paused = true)]
async fn health_is_ok_for_a_standby_and_fails_for_a_leader_stuck_past_lease_plus_20s() {
    let api = FakeApi::default();
    let leader = elector(&api, config("a"));
    let leader_health = leader.health();
    assert_eq!(leader_health.check(), Ok(()), "not yet leading");
    let mut leadership = leader.acquire().await;
    let last_renewal = Instant::now();

    let standby = elector(&api, config("b"));
    let standby_health = standby.health();
    let standby_task = spawn_acquire(standby);

    sleep(Duration::from_secs(1)).await;
    api.set_failing("a");
    let _lost = leadership.lost().await;

    // Lease duration (15 s) + 20 s tolerance after the last successful renewal.
    sleep(last_renewal + Duration::from_millis(34_900) - Instant::now()).await;
    assert_eq!(leader_health.check(), Ok(()));
    assert_eq!(standby_health.check(), Ok(()));
    sleep(Duration::from_millis(200)).await;
    assert_eq!(
        leader_health.check(),
        Err(format!(
            "failed election to renew leadership on lease {LEASE}"
        ))
    );
    // Meanwhile the standby took over; as the new leader it is healthy.
    assert!(standby_task.is_finished());
    assert_eq!(standby_health.check(), Ok(()));
}

#[tokio::test(start_paused = true)]
async fn leading_puts_the_configured_labels_on_the_lease_and_keeps_others() {
    let api = FakeApi::default();
    api.put_lease(
        LeaseSpec {
            holder_identity: Some(String::new()),
            lease_duration_seconds: Some(1),
            ..LeaseSpec::default()
        },
        Some(BTreeMap::from([
            ("keep".to_owned(), "me".to_owned()),
            ("team".to_owned(), "old".to_owned()),
        ])),
    );
    let mut c = config("a");
    c.labels = csi_common::leader::merge_labels([
        csi_common::leader::parse_labels("team:storage").unwrap(),
        csi_common::leader::parse_labels("tier:gold").unwrap(),
    ]);
    let _leadership = elector(&api, c).acquire().await;
    let labels = api.lease().metadata.labels.unwrap();
    assert_eq!(
        labels,
        BTreeMap::from([
            ("keep".to_owned(), "me".to_owned()),
            ("team".to_owned(), "storage".to_owned()),
            ("tier".to_owned(), "gold".to_owned()),
        ])
    );
}

#[tokio::test(start_paused = true)]
async fn becoming_leader_posts_a_leader_election_event_on_the_lease() {
    let api = FakeApi::default();
    let _leadership = elector(&api, config("vm")).acquire().await;
    settle().await;
    let events = api.events();
    assert_eq!(events.len(), 1, "{events:?}");
    let event = serde_json::to_value(&events[0]).unwrap();
    let name = event["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with(&format!("{LEASE}.")), "{name}");
    assert_eq!(event["metadata"]["namespace"], NS);
    assert_eq!(
        event["involvedObject"],
        json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "name": LEASE,
            "namespace": NS,
            "uid": format!("uid-{LEASE}"),
            "resourceVersion": "1",
        })
    );
    assert_eq!(event["reason"], "LeaderElection");
    assert_eq!(event["message"], "vm became leader");
    assert_eq!(event["type"], "Normal");
    assert_eq!(event["count"], 1);
    assert_eq!(event["source"], json!({"component": format!("{LEASE}/vm")}));
    assert_eq!(event["reportingComponent"], format!("{LEASE}/vm"));
    assert_eq!(event["reportingInstance"], "");
}

#[tokio::test(start_paused = true)]
async fn the_master_status_gauge_matches_upstream_exposition() {
    let api = FakeApi::default();
    let registry = Registry::new();
    let e = elector(&api, config("a"));
    e.register_metrics(&registry).unwrap();
    // Same three lines as metrics/csi-resizer-leader-election-standby-metrics.prom.
    let standby = "# HELP leader_election_master_status [ALPHA] Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.\n# TYPE leader_election_master_status gauge\nleader_election_master_status{name=\"\"} 0\n";
    assert_eq!(render(&registry), standby);
    assert!(
        e.register_metrics(&registry).is_err(),
        "double registration"
    );

    let leading = e.leading();
    let _leadership = e.acquire().await;
    assert!(*leading.borrow());
    assert_eq!(
        render(&registry),
        standby.replace("{name=\"\"} 0", "{name=\"\"} 1")
    );
    assert!(render(&registry).starts_with(&format!("# HELP {MASTER_STATUS_METRIC} ")));
}

#[tokio::test(start_paused = true)]
async fn dropping_leadership_stops_renewals() {
    let api = FakeApi::default();
    let leadership = elector(&api, config("a")).acquire().await;
    let leading = leadership.leading();
    sleep(Duration::from_secs(1)).await;
    drop(leadership);
    assert!(!*leading.borrow());
    api.clear_requests();
    sleep(Duration::from_mins(1)).await;
    assert!(api.requests_of("a").is_empty());
}

#[test]
fn invalid_timings_are_an_error_not_a_panic() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let api = FakeApi::default();
        let bad = LeaderElectionConfig {
            lease_duration: Duration::from_secs(10),
            renew_deadline: Duration::from_secs(10),
            ..config("a")
        };
        let err = LeaderElector::new(api.client("a"), bad).unwrap_err();
        assert!(
            err.to_string()
                .contains("must be greater than the renew deadline")
        );
        let bad = LeaderElectionConfig {
            renew_deadline: Duration::from_secs(6),
            retry_period: Duration::from_secs(5),
            ..config("a")
        };
        let err = LeaderElector::new(api.client("a"), bad).unwrap_err();
        assert!(err.to_string().contains("jitter factor 1.2"), "{err}");
    });
}

/// A renewal kube-apiserver stored whose answer was lost (the connection broke on the way
/// back): an optimistic PUT of the record the leader last saw would carry the resourceVersion
/// from before that renewal and be refused, so after any failed renewal the leader reads the
/// Lease first, finds itself the holder and renews from there. Leadership is kept; nothing
/// changed hands.
#[tokio::test(start_paused = true)]
async fn a_renewal_stored_with_its_answer_lost_keeps_the_leadership() {
    let api = FakeApi::default();
    let mut leader = elector(&api, fast("a")).acquire().await;
    let transitions = api.spec().lease_transitions;
    api.clear_requests();
    api.lose_answers("a", 1);
    // Bounded: on the paused clock a wait that never ends would spin.
    tokio::time::timeout(
        Duration::from_mins(1),
        until(|| api.requests_of("a").len() >= 3),
    )
    .await
    .expect("three Lease requests within a minute");
    let requests = api.requests_of("a");
    assert_eq!(
        requests[..3],
        [(Method::PUT, 200), (Method::GET, 200), (Method::PUT, 200)],
        "the renewal whose answer was lost, then the read and the renewal from what it read"
    );
    assert!(
        futures::FutureExt::now_or_never(leader.lost()).is_none(),
        "still leading"
    );
    assert_eq!(api.spec().holder_identity.as_deref(), Some("a"));
    assert_eq!(api.spec().lease_transitions, transitions);
}
