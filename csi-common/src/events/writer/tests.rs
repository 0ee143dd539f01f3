use std::time::Duration;

use http::{Request, Response};
use kube::client::Body;
use tower_test::mock::{self, Handle, SendResponse};

use super::*;
use crate::events::tests::claim;
use crate::events::{EventRecorder, EventType};

fn creation(name: &str) -> Action {
    Action::Create(Box::new(Event {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            namespace: Some("ns".into()),
            name: Some(name.into()),
            ..Default::default()
        },
        ..Event::default()
    }))
}

fn patching(name: &str, count: i32) -> Action {
    Action::Patch {
        namespace: "ns".into(),
        name: name.into(),
        patch: serde_json::json!({ "count": count }),
        fallback: Box::new(Event::default()),
    }
}

#[test]
fn writes_of_one_event_run_one_at_a_time_and_only_the_newest_waits() {
    let mut writes = Writes::new(CONCURRENT_WRITES);
    assert_eq!(
        writes.submit("ns/a".into(), creation("a")),
        Some(("ns/a".into(), creation("a")))
    );
    assert_eq!(writes.submit("ns/a".into(), patching("a", 2)), None);
    assert_eq!(writes.submit("ns/a".into(), patching("a", 3)), None);
    assert_eq!(
        writes.submit("ns/b".into(), creation("b")),
        Some(("ns/b".into(), creation("b")))
    );
    // The create of a ended: the newest patch starts, the one it superseded never does.
    assert_eq!(writes.done("ns/a"), Some(patching("a", 3)));
    assert_eq!(writes.done("ns/a"), None);
    assert_eq!(writes.done("ns/b"), None);
    assert!(writes.in_flight.is_empty(), "every slot is freed");
    // A write that ended frees its Event: the next action for it starts at once.
    assert_eq!(
        writes.submit("ns/a".into(), patching("a", 4)),
        Some(("ns/a".into(), patching("a", 4)))
    );
}

#[test]
fn at_most_the_concurrent_writes_are_in_flight_while_the_bucket_has_tokens() {
    let mut writes = Writes::new(CONCURRENT_WRITES);
    for i in 0..CONCURRENT_WRITES {
        assert!(writes.has_room(true), "room for write {i}");
        assert!(writes.submit(format!("ns/{i}"), creation("x")).is_some());
    }
    assert!(!writes.has_room(true));
    // An action waiting for its Event's write takes no slot of its own.
    assert_eq!(writes.submit("ns/0".into(), patching("x", 2)), None);
    assert_eq!(writes.in_flight.len(), CONCURRENT_WRITES);
    assert_eq!(writes.done("ns/0"), Some(patching("x", 2)));
    assert!(
        !writes.has_room(true),
        "the waiting patch took the slot over"
    );
    assert_eq!(writes.done("ns/0"), None);
    assert!(writes.has_room(true));
}

#[test]
fn a_throttling_bucket_or_a_limit_of_one_leaves_one_write_in_flight() {
    // (limit, writes in flight, whether the bucket has a token to spare, whether another may
    // start)
    let cases = [
        (CONCURRENT_WRITES, 0, false, true),
        (CONCURRENT_WRITES, 0, true, true),
        (CONCURRENT_WRITES, 1, false, false),
        (CONCURRENT_WRITES, 1, true, true),
        (CONCURRENT_WRITES, CONCURRENT_WRITES - 1, false, false),
        (CONCURRENT_WRITES, CONCURRENT_WRITES - 1, true, true),
        (CONCURRENT_WRITES, CONCURRENT_WRITES, true, false),
        (1, 0, true, true),
        (1, 1, true, false),
        // A limit of none would write nothing: it is taken as one.
        (0, 0, true, true),
        (0, 1, true, false),
    ];
    for (limit, in_flight, token_free, room) in cases {
        let mut writes = Writes::new(limit);
        for i in 0..in_flight {
            writes.submit(format!("ns/{i}"), creation("x"));
        }
        assert_eq!(
            writes.has_room(token_free),
            room,
            "limit {limit}, {in_flight} in flight, token free: {token_free}"
        );
    }
}

#[test]
fn dropped_events_write_nothing_and_the_others_are_keyed_by_namespace_and_name() {
    assert_eq!(event_key(&Action::Drop), None);
    assert_eq!(event_key(&creation("a.1")).as_deref(), Some("ns/a.1"));
    assert_eq!(event_key(&patching("a.1", 2)).as_deref(), Some("ns/a.1"));
}

type ApiHandle = Handle<Request<Body>, Response<Body>>;

/// A recorder whose writer talks through `bucket` to `handle`, which answers nothing until the
/// test says so. Each request carries the instant it left the bucket.
fn recorder(bucket: RateLimitLayer) -> (EventRecorder, ApiHandle, tokio::task::JoinHandle<()>) {
    let (client, handle) = stamped_client(&bucket);
    let (recorder, writer) = EventRecorder::with_bucket(client, bucket, "test".into());
    (recorder, handle, tokio::spawn(writer))
}

/// A client whose requests go through `bucket` to the returned handle, each stamped with the
/// instant it left the bucket.
fn stamped_client(bucket: &RateLimitLayer) -> (Client, ApiHandle) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let stamped = tower::ServiceBuilder::new()
        .map_request(|mut request: Request<Body>| {
            request.extensions_mut().insert(Instant::now());
            request
        })
        .service(service);
    let client = Client::new(tower::Layer::layer(bucket, stamped), "default");
    (client, handle)
}

/// A request the writer sent.
struct Sent {
    method: String,
    path: String,
    body: serde_json::Value,
    /// When it left the bucket.
    at: Instant,
    respond: SendResponse<Response<Body>>,
}

/// The next request the writer sends. The timeout only turns a writer that never sends it into
/// a failure instead of a hang.
async fn next(handle: &mut ApiHandle) -> Sent {
    let (request, respond) = tokio::time::timeout(Duration::from_secs(30), handle.next_request())
        .await
        .expect("the writer sent no request")
        .expect("the client is gone");
    let method = request.method().to_string();
    let path = request.uri().path().to_owned();
    let at = *request.extensions().get::<Instant>().unwrap();
    let bytes = request.into_body().collect_bytes().await.unwrap();
    Sent {
        method,
        path,
        body: serde_json::from_slice(&bytes).unwrap(),
        at,
        respond,
    }
}

/// Answers a write with the Event the API server would return (any Event parses).
fn answer(respond: SendResponse<Response<Body>>) {
    let body = serde_json::to_vec(&Event::default()).unwrap();
    respond.send_response(Response::new(Body::from(body)));
}

/// Drops the recorder and waits for its writer, which ends once every write was answered.
async fn close(recorder: EventRecorder, writer: tokio::task::JoinHandle<()>) {
    drop(recorder);
    writer.await.unwrap();
}

fn failed(object: &str) -> NewEvent {
    NewEvent {
        object: claim(object),
        type_: EventType::Warning,
        reason: "ProvisioningFailed",
        message: "no space".into(),
    }
}

fn record(recorder: &EventRecorder, event: &NewEvent) {
    recorder.event(
        &event.object,
        event.type_,
        event.reason,
        event.message.clone(),
    );
}

#[tokio::test]
async fn events_of_different_objects_are_written_concurrently() {
    let (recorder, mut handle, writer) = recorder(RateLimitLayer::unlimited());
    for i in 0..CONCURRENT_WRITES {
        record(&recorder, &failed(&format!("c{i}")));
    }
    // Every write is sent while none has been answered: a writer that waited for each answer
    // would send only the first.
    let mut pending = Vec::new();
    for _ in 0..CONCURRENT_WRITES {
        let sent = next(&mut handle).await;
        assert_eq!(sent.method, "POST");
        assert_eq!(sent.path, "/api/v1/namespaces/fixtures/events");
        assert_eq!(sent.body["reason"], "ProvisioningFailed");
        pending.push((
            sent.body["involvedObject"]["name"]
                .as_str()
                .unwrap()
                .to_owned(),
            sent.respond,
        ));
    }
    let mut objects: Vec<_> = pending.iter().map(|(object, _)| object.clone()).collect();
    objects.sort();
    let mut expected: Vec<_> = (0..CONCURRENT_WRITES).map(|i| format!("c{i}")).collect();
    expected.sort();
    assert_eq!(objects, expected);
    for (_, respond) in pending {
        answer(respond);
    }
    close(recorder, writer).await;
}

#[tokio::test]
async fn writes_of_one_event_keep_their_order_and_the_newest_count_wins() {
    let (recorder, mut handle, writer) = recorder(RateLimitLayer::unlimited());
    record(&recorder, &failed("a"));
    let create_a = next(&mut handle).await;
    assert_eq!(create_a.method, "POST");
    let name = create_a.body["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_owned();

    // Two repeats while the creation is unanswered, then another object's event.
    record(&recorder, &failed("a"));
    record(&recorder, &failed("a"));
    record(&recorder, &failed("b"));

    // b's event does not wait for a's; a's patches were recorded first and did not go out.
    let create_b = next(&mut handle).await;
    assert_eq!(create_b.method, "POST");
    assert_eq!(create_b.body["involvedObject"]["name"], "b");

    // Once a's creation is answered, one patch goes out, with the newest count.
    answer(create_a.respond);
    let patch_a = next(&mut handle).await;
    assert_eq!(patch_a.method, "PATCH");
    assert_eq!(
        patch_a.path,
        format!("/api/v1/namespaces/fixtures/events/{name}")
    );
    assert_eq!(patch_a.body["count"], 3);

    answer(create_b.respond);
    answer(patch_a.respond);
    drop(recorder);
    // The writer ends once the recorders are gone and every write has been answered; had the
    // superseded patch gone out, it would wait here for an answer and the test would hang.
    tokio::time::timeout(Duration::from_secs(30), writer)
        .await
        .expect("the writer ended")
        .unwrap();
}

/// Records an event for `a`, then one for `b`; takes a's write, leaves it unanswered for 10 s,
/// answers it and takes the next write, which must be b's. Returns when a's write was sent,
/// when it was answered, and b's write.
async fn b_after_a_held_10_s(
    recorder: &EventRecorder,
    handle: &mut ApiHandle,
) -> (Instant, Instant, Sent) {
    record(recorder, &failed("a"));
    record(recorder, &failed("b"));
    let a = next(handle).await;
    assert_eq!(a.body["involvedObject"]["name"], "a");
    tokio::time::sleep(Duration::from_secs(10)).await;
    let answered = Instant::now();
    answer(a.respond);
    let b = next(handle).await;
    assert_eq!(b.body["involvedObject"]["name"], "b");
    (a.at, answered, b)
}

#[tokio::test(start_paused = true)]
async fn while_the_bucket_throttles_the_next_write_waits_for_the_one_in_flight() {
    // One token, then one a second: a's write spends the burst.
    let (recorder, mut handle, writer) = recorder(RateLimitLayer::new(1.0, 1).unwrap());
    let start = Instant::now();
    // A writer that started b's write beside a's would have reserved the next token and sent
    // it 1 s in.
    let (a_at, answered, b) = b_after_a_held_10_s(&recorder, &mut handle).await;
    assert_eq!(a_at, start);
    assert_eq!(
        b.at, answered,
        "started when a's answer came, with a refilled token"
    );

    answer(b.respond);
    close(recorder, writer).await;
}

#[tokio::test(start_paused = true)]
async fn a_recorder_of_one_write_at_a_time_waits_for_each_answer() {
    let (client, mut handle) = stamped_client(&RateLimitLayer::unlimited());
    let (recorder, writer) = EventRecorder::one_at_a_time(client, "test".into());
    let writer = tokio::spawn(writer);
    // With no bucket to wait for, a writer that started b's write beside a's would have sent
    // it at once.
    let (_, answered, b) = b_after_a_held_10_s(&recorder, &mut handle).await;
    assert_eq!(b.at, answered, "sent when a's answer came");

    answer(b.respond);
    close(recorder, writer).await;
}

#[tokio::test(start_paused = true)]
async fn with_tokens_to_spare_in_the_bucket_writes_go_out_together() {
    // A bucket of 100: three writes leave 97, above nine tenths.
    let (recorder, mut handle, writer) = recorder(RateLimitLayer::new(100.0, 100).unwrap());
    let start = Instant::now();
    for object in ["a", "b", "c"] {
        record(&recorder, &failed(object));
    }
    // All three are sent while none is answered.
    let sent = [
        next(&mut handle).await,
        next(&mut handle).await,
        next(&mut handle).await,
    ];
    for s in sent {
        assert_eq!(s.at, start);
        answer(s.respond);
    }
    close(recorder, writer).await;
}

#[tokio::test(start_paused = true)]
async fn each_attempt_of_a_write_takes_one_token_and_waits_for_it() {
    // One token, then 2 a second.
    let (recorder, mut handle, writer) = recorder(RateLimitLayer::new(2.0, 1).unwrap());
    let start = Instant::now();
    record(&recorder, &failed("a"));
    record(&recorder, &failed("b"));
    let a = next(&mut handle).await;
    assert_eq!(a.at, start, "the burst passes at once");

    // The bucket is spent: b's write starts once a's ended and waits half a second for its
    // token (had the client's bucket taken a second one for it, a whole second).
    answer(a.respond);
    let b = next(&mut handle).await;
    assert_eq!(b.body["involvedObject"]["name"], "b");
    assert_eq!(b.at - start, Duration::from_millis(500));

    // A failed attempt is tried again a second later, with a token of its own.
    b.respond
        .send_error(std::io::Error::other("connection reset by peer"));
    let again = next(&mut handle).await;
    assert_eq!(again.body["involvedObject"]["name"], "b");
    assert_eq!(again.at - start, Duration::from_millis(1500));

    answer(again.respond);
    close(recorder, writer).await;
}
