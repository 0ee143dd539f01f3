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
    let mut writes = Writes::default();
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
fn at_most_the_concurrent_writes_are_in_flight() {
    let mut writes = Writes::default();
    for i in 0..CONCURRENT_WRITES {
        assert!(writes.has_room(), "room for write {i}");
        assert!(writes.submit(format!("ns/{i}"), creation("x")).is_some());
    }
    assert!(!writes.has_room());
    // An action waiting for its Event's write takes no slot of its own.
    assert_eq!(writes.submit("ns/0".into(), patching("x", 2)), None);
    assert_eq!(writes.in_flight.len(), CONCURRENT_WRITES);
    assert_eq!(writes.done("ns/0"), Some(patching("x", 2)));
    assert!(!writes.has_room(), "the waiting patch took the slot over");
    assert_eq!(writes.done("ns/0"), None);
    assert!(writes.has_room());
}

#[test]
fn dropped_events_write_nothing_and_the_others_are_keyed_by_namespace_and_name() {
    assert_eq!(event_key(&Action::Drop), None);
    assert_eq!(event_key(&creation("a.1")).as_deref(), Some("ns/a.1"));
    assert_eq!(event_key(&patching("a.1", 2)).as_deref(), Some("ns/a.1"));
}

type ApiHandle = Handle<Request<Body>, Response<Body>>;

/// A recorder whose writer talks to `handle`, which answers nothing until the test says so.
fn recorder() -> (EventRecorder, ApiHandle, tokio::task::JoinHandle<()>) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let (recorder, writer) = EventRecorder::new(client, "test".into());
    (recorder, handle, tokio::spawn(writer))
}

/// The next request the writer sends, as method, path and JSON body. The timeout only turns a
/// writer that never sends it into a failure instead of a hang.
async fn next(
    handle: &mut ApiHandle,
) -> (
    String,
    String,
    serde_json::Value,
    SendResponse<Response<Body>>,
) {
    let (request, respond) = tokio::time::timeout(Duration::from_secs(30), handle.next_request())
        .await
        .expect("the writer sent no request")
        .expect("the client is gone");
    let method = request.method().to_string();
    let path = request.uri().path().to_owned();
    let bytes = request.into_body().collect_bytes().await.unwrap();
    (
        method,
        path,
        serde_json::from_slice(&bytes).unwrap(),
        respond,
    )
}

/// Answers a write with the Event the API server would return (any Event parses).
fn answer(respond: SendResponse<Response<Body>>) {
    let body = serde_json::to_vec(&Event::default()).unwrap();
    respond.send_response(Response::new(Body::from(body)));
}

#[tokio::test]
async fn events_of_different_objects_are_written_concurrently() {
    let (recorder, mut handle, writer) = recorder();
    for i in 0..CONCURRENT_WRITES {
        recorder.event(
            &claim(&format!("c{i}")),
            EventType::Normal,
            "Provisioning",
            "started",
        );
    }
    // Every write is sent while none has been answered: a writer that waited for each answer
    // would send only the first.
    let mut pending = Vec::new();
    for _ in 0..CONCURRENT_WRITES {
        let (method, path, body, respond) = next(&mut handle).await;
        assert_eq!(method, "POST");
        assert_eq!(path, "/api/v1/namespaces/fixtures/events");
        assert_eq!(body["reason"], "Provisioning");
        pending.push((
            body["involvedObject"]["name"].as_str().unwrap().to_owned(),
            respond,
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
    drop(recorder);
    writer.await.unwrap();
}

#[tokio::test]
async fn writes_of_one_event_keep_their_order_and_the_newest_count_wins() {
    let (recorder, mut handle, writer) = recorder();
    recorder.event(
        &claim("a"),
        EventType::Warning,
        "ProvisioningFailed",
        "no space",
    );
    let (method, _, created, create_a) = next(&mut handle).await;
    assert_eq!(method, "POST");
    let name = created["metadata"]["name"].as_str().unwrap().to_owned();

    // Two repeats while the creation is unanswered, then another object's event.
    recorder.event(
        &claim("a"),
        EventType::Warning,
        "ProvisioningFailed",
        "no space",
    );
    recorder.event(
        &claim("a"),
        EventType::Warning,
        "ProvisioningFailed",
        "no space",
    );
    recorder.event(&claim("b"), EventType::Normal, "Provisioning", "started");

    // b's event does not wait for a's; a's patches were recorded first and did not go out.
    let (method, _, created_b, create_b) = next(&mut handle).await;
    assert_eq!(method, "POST");
    assert_eq!(created_b["involvedObject"]["name"], "b");

    // Once a's creation is answered, one patch goes out, with the newest count.
    answer(create_a);
    let (method, path, patch, patch_a) = next(&mut handle).await;
    assert_eq!(method, "PATCH");
    assert_eq!(path, format!("/api/v1/namespaces/fixtures/events/{name}"));
    assert_eq!(patch["count"], 3);

    answer(create_b);
    answer(patch_a);
    drop(recorder);
    // The writer ends once the recorders are gone and every write has been answered; had the
    // superseded patch gone out, it would wait here for an answer and the test would hang.
    tokio::time::timeout(Duration::from_secs(30), writer)
        .await
        .expect("the writer ended")
        .unwrap();
}
