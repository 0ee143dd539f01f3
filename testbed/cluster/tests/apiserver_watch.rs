//! WATCH exchanges of the golden fixtures (b1-b5, c1, c4, d1, d2, d4): framing (one event per
//! chunk, newline-terminated), bookmark shapes, the initial-events-end bookmark, resume from a
//! resourceVersion, 410 as an ERROR event, streams ending at timeoutSeconds or on
//! `drop_watches()`. Paused clock: timeouts elapse instantly.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failed step should panic with its error"
)]

use crate::apiserver_support::*;
use serde_json::json;

#[tokio::test(start_paused = true)]
async fn a_watch_without_resource_version_replays_state_then_marks_the_end_with_a_bookmark() {
    let s = fixture_server().await;
    let rv = s.resource_version();
    for query in [
        "watch=1&allowWatchBookmarks=true&timeoutSeconds=3",
        "watch=1&allowWatchBookmarks=true&resourceVersion=0&timeoutSeconds=3",
    ] {
        // b3, b5
        let mut w = Watch::open(&s, &format!("{PVCS}?{query}")).await;
        for name in ["fx-list-a", "fx-list-b", "fx-list-c"] {
            let e = w.next_event().await.unwrap();
            assert_eq!(
                (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
                (Some("ADDED"), Some(name))
            );
            assert_eq!(
                e["object"]["kind"], "PersistentVolumeClaim",
                "watch objects carry kind"
            );
        }
        let bookmark = w.next_frame().await.unwrap();
        assert_eq!(
            bookmark,
            format!(
                "{{\"type\":\"BOOKMARK\",\"object\":{{\"kind\":\"PersistentVolumeClaim\",\"apiVersion\":\"v1\",\"metadata\":{{\"resourceVersion\":\"{rv}\",\"annotations\":{{\"k8s.io/initial-events-end\":\"true\"}}}},\"spec\":{{\"resources\":{{}}}},\"status\":{{}}}}}}\n"
            )
        );
        assert_eq!(
            w.next_frame().await,
            None,
            "the stream ends at timeoutSeconds with no final event"
        );
    }
    // b4: without allowWatchBookmarks there is no bookmark at all.
    let mut w = Watch::open(&s, &format!("{PVCS}?watch=1&timeoutSeconds=3")).await;
    let mut types = Vec::new();
    while let Some((t, _, _)) = w.next_summary().await {
        types.push(t);
    }
    assert_eq!(types, vec!["ADDED", "ADDED", "ADDED"]);
}

#[tokio::test(start_paused = true)]
async fn a_watch_from_a_resource_version_streams_changes_and_the_last_state_on_delete() {
    let s = fixture_server().await;
    let from = s.resource_version();
    // b1: create, label patch, delete (finalizer), finalizer removal.
    let mut w = Watch::open(
        &s,
        &format!("{PVCS}?watch=1&allowWatchBookmarks=true&resourceVersion={from}&timeoutSeconds=5"),
    )
    .await;
    assert_eq!(post(&s, PVCS, &pvc("fx-watch")).await.status, 201);
    let path = format!("{PVCS}/fx-watch");
    patch(
        &s,
        &path,
        "application/merge-patch+json",
        r#"{"metadata":{"labels":{"step":"patched"}}}"#,
    )
    .await;
    delete(&s, &path, "").await;
    let r = patch(
        &s,
        &path,
        "application/merge-patch+json",
        r#"{"metadata":{"finalizers":null}}"#,
    )
    .await;
    assert_eq!(r.status, 200);
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(w.next_event().await.unwrap());
    }
    let types: Vec<_> = seen
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(types, vec!["ADDED", "MODIFIED", "MODIFIED", "DELETED"]);
    assert!(seen[2]["object"]["metadata"]["deletionTimestamp"].is_string());
    let deleted = &seen[3]["object"];
    assert_eq!(
        deleted["metadata"]["finalizers"],
        json!(["kubernetes.io/pvc-protection"]),
        "DELETED carries the last stored state"
    );
    let rvs: Vec<u64> = seen
        .iter()
        .map(|e| {
            e["object"]["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(rvs.windows(2).all(|p| p[0] < p[1]), "{rvs:?}");
    assert_eq!(rvs[3], s.resource_version());
    // Two seconds before the deadline comes a periodic bookmark at the last RV (b1), then the end.
    let bookmark = w.next_frame().await.unwrap();
    assert_eq!(
        bookmark,
        format!(
            "{{\"type\":\"BOOKMARK\",\"object\":{{\"kind\":\"PersistentVolumeClaim\",\"apiVersion\":\"v1\",\"metadata\":{{\"resourceVersion\":\"{}\"}},\"spec\":{{\"resources\":{{}}}},\"status\":{{}}}}}}\n",
            rvs[3]
        )
    );
    assert_eq!(w.next_frame().await, None);
    // Resuming from the middle replays exactly the later events.
    let mut resumed = Watch::open(
        &s,
        &format!("{PVCS}?watch=1&resourceVersion={}&timeoutSeconds=1", rvs[1]),
    )
    .await;
    assert_eq!(resumed.next_summary().await.unwrap().0, "MODIFIED");
    assert_eq!(resumed.next_summary().await.unwrap().0, "DELETED");
    assert_eq!(resumed.next_frame().await, None);
}

#[tokio::test(start_paused = true)]
async fn a_too_old_resource_version_is_one_error_event_and_a_future_one_is_silence() {
    let s = fixture_server().await;
    post(&s, PVCS, &pvc("bump")).await;
    s.faults().compact();
    let oldest = s.resource_version();
    // c1
    let mut w = Watch::open(
        &s,
        &format!("{PVCS}?watch=1&allowWatchBookmarks=true&resourceVersion=1&timeoutSeconds=5"),
    )
    .await;
    assert_eq!(
        w.next_frame().await.unwrap(),
        format!(
            "{{\"type\":\"ERROR\",\"object\":{{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{{}},\"status\":\"Failure\",\"message\":\"too old resource version: 1 ({oldest})\",\"reason\":\"Expired\",\"code\":410}}}}\n"
        )
    );
    assert_eq!(w.next_frame().await, None);
    // c4
    let mut w = Watch::open(
        &s,
        &format!("{PVCS}?watch=1&resourceVersion=100538&timeoutSeconds=10"),
    )
    .await;
    post(&s, PVCS, &pvc("ignored")).await;
    assert_eq!(w.next_frame().await, None);
}

#[tokio::test(start_paused = true)]
async fn streaming_lists_send_initial_events_then_live_ones() {
    let s = fixture_server().await;
    // d1
    let rv = s.resource_version();
    let mut w = Watch::open(&s, &format!("{PVCS}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=4")).await;
    for _ in 0..3 {
        assert_eq!(w.next_summary().await.unwrap().0, "ADDED");
    }
    let end = w.next_event().await.unwrap();
    assert_eq!(end["type"], "BOOKMARK");
    assert_eq!(
        end["object"]["metadata"],
        json!({"resourceVersion": rv.to_string(), "annotations": {"k8s.io/initial-events-end": "true"}})
    );
    patch(
        &s,
        &format!("{PVCS}/fx-list-b"),
        "application/merge-patch+json",
        r#"{"metadata":{"labels":{"step":"live-after-initial-events"}}}"#,
    )
    .await;
    let (t, name, _) = w.next_summary().await.unwrap();
    assert_eq!((t.as_str(), name.as_str()), ("MODIFIED", "fx-list-b"));
    // d2 (resourceVersion=0) and d4 (no bookmarks: no end marker).
    let mut w = Watch::open(&s, &format!("{PVCS}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&resourceVersion=0&timeoutSeconds=2")).await;
    let mut types = Vec::new();
    while let Some((t, _, _)) = w.next_summary().await {
        types.push(t);
    }
    assert_eq!(types, vec!["ADDED", "ADDED", "ADDED", "BOOKMARK"]);
    let mut w = Watch::open(&s, &format!("{PVCS}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=2")).await;
    let mut types = Vec::new();
    while let Some((t, _, _)) = w.next_summary().await {
        types.push(t);
    }
    assert_eq!(types, vec!["ADDED", "ADDED", "ADDED"]);
}

/// The object of a watch event line, as sent.
fn object_of(frame: &str) -> &str {
    let start = frame.find(",\"object\":").unwrap() + ",\"object\":".len();
    &frame[start..frame.len() - 2]
}

#[tokio::test(start_paused = true)]
async fn a_watch_started_after_a_write_lists_the_object_with_the_bytes_of_its_event() {
    // The server encodes a stored object once for every watch that sends it (the write's
    // watchers and the initial events of later ones): what each gets must be the same bytes
    // a watch that encodes it afresh would get, in kube-apiserver's field order.
    let s = fixture_server().await;
    let mut live = Watch::open(
        &s,
        &format!(
            "{PVCS}?watch=1&resourceVersion={}&timeoutSeconds=30",
            s.resource_version()
        ),
    )
    .await;
    patch(
        &s,
        &format!("{PVCS}/fx-list-b"),
        "application/merge-patch+json",
        r#"{"metadata":{"labels":{"step":"shared-encoding"}}}"#,
    )
    .await;
    let modified = live.next_frame().await.unwrap();
    assert!(modified.starts_with("{\"type\":\"MODIFIED\",\"object\":{\"kind\":\"PersistentVolumeClaim\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"fx-list-b\","));

    let query = "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=30";
    let mut later = Watch::open(&s, &format!("{PVCS}?{query}")).await;
    let mut listed = None;
    // Up to the initial-events-end bookmark.
    while let Some(frame) = later.next_frame().await {
        if frame.starts_with("{\"type\":\"BOOKMARK\"") {
            break;
        }
        if frame.contains("\"name\":\"fx-list-b\"") {
            listed = Some(frame);
        }
    }
    let listed = listed.expect("fx-list-b among the initial events");
    assert!(listed.starts_with("{\"type\":\"ADDED\","));
    assert_eq!(object_of(&listed), object_of(&modified));
}

#[tokio::test(start_paused = true)]
async fn dropping_watches_ends_every_open_stream_at_once() {
    let s = fixture_server().await;
    let mut a = Watch::open(
        &s,
        &format!(
            "{PVCS}?watch=1&resourceVersion={}&timeoutSeconds=300",
            s.resource_version()
        ),
    )
    .await;
    let mut b = Watch::open(&s, "/api/v1/persistentvolumes?watch=1&timeoutSeconds=300").await;
    tokio::task::yield_now().await;
    s.faults().drop_watches();
    assert_eq!(a.next_frame().await, None);
    assert_eq!(b.next_frame().await, None);
}

#[tokio::test(start_paused = true)]
async fn a_label_selected_watch_sees_objects_enter_and_leave_the_selection() {
    let s = fixture_server().await;
    let mut w = Watch::open(
        &s,
        &format!(
            "{PVCS}?watch=1&labelSelector=team%3Dblue&resourceVersion={}&timeoutSeconds=5",
            s.resource_version()
        ),
    )
    .await;
    let a = format!("{PVCS}/fx-list-a");
    patch(
        &s,
        &a,
        "application/merge-patch+json",
        r#"{"metadata":{"labels":{"team":"blue"}}}"#,
    )
    .await;
    patch(
        &s,
        &a,
        "application/merge-patch+json",
        r#"{"metadata":{"annotations":{"x":"y"}}}"#,
    )
    .await;
    patch(
        &s,
        &a,
        "application/merge-patch+json",
        r#"{"metadata":{"labels":{"team":"red"}}}"#,
    )
    .await;
    patch(
        &s,
        &format!("{PVCS}/fx-list-b"),
        "application/merge-patch+json",
        r#"{"metadata":{"labels":{"other":"x"}}}"#,
    )
    .await;
    let mut types = Vec::new();
    for _ in 0..3 {
        types.push(w.next_summary().await.unwrap().0);
    }
    assert_eq!(types, vec!["ADDED", "MODIFIED", "DELETED"]);
}

/// Open watches are counted per client (User-Agent product) while they are served, and no
/// longer once the client drops the stream: the churn mode of the reliability suite reads
/// this to see a sidecar that keeps watches it no longer uses.
#[tokio::test]
async fn open_watches_are_counted_per_client_until_the_client_drops_them() {
    use tower::ServiceExt as _;
    let s = fixture_server().await;
    let open = |agent: &'static str| {
        let router = s.router();
        async move {
            let request = http::Request::builder()
                .uri(format!("{PVCS}?watch=1"))
                .header("user-agent", agent)
                .body(axum::body::Body::empty())
                .unwrap();
            router.oneshot(request).await.unwrap()
        }
    };
    let first = open("csi-attacher/v0.1.0").await;
    let second = open("csi-attacher/v0.1.0").await;
    let other = open("kube-controller-manager/v1.34.0").await;
    let count = |client: &str| s.requests().open_watches().get(client).copied();
    assert_eq!(count("csi-attacher"), Some(2));
    assert_eq!(count("kube-controller-manager"), Some(1));
    drop((first, second));
    testbed_support::wait::eventually(
        "the dropped watches no longer counted",
        std::time::Duration::from_secs(10),
        async || (count("csi-attacher").is_none()).then_some(()),
    )
    .await;
    assert_eq!(count("kube-controller-manager"), Some(1));
    drop(other);
}

/// kube-apiserver sends a bookmark on a watch that allows them about once a minute, each at the
/// latest resourceVersion the watch has passed, whatever events flow in between. The server
/// keeps one timer per watch and sets it again after each bookmark: a timer that was not set
/// again would fire at once on every turn (a flood of bookmarks), one made anew per event cost
/// a timer registration per event and watcher.
#[tokio::test(start_paused = true)]
async fn bookmarks_come_once_a_minute_at_the_latest_resource_version_while_events_flow() {
    let s = fixture_server().await;
    let rv = s.resource_version();
    let opened = tokio::time::Instant::now();
    let mut w = Watch::open(
        &s,
        &format!("{PVCS}?watch=1&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds=600"),
    )
    .await;
    for (minute, name) in [(1, "fx-live-1"), (2, "fx-live-2")] {
        let created = post(&s, PVCS, &pvc(name)).await;
        assert_eq!(created.status, 201, "{}", created.body);
        let (kind, seen, written) = w.next_summary().await.unwrap();
        assert_eq!((kind.as_str(), seen.as_str()), ("ADDED", name));
        let bookmark = w.next_event().await.unwrap();
        assert_eq!(bookmark["type"], "BOOKMARK", "{bookmark}");
        assert_eq!(bookmark["object"]["metadata"]["resourceVersion"], written);
        assert_eq!(
            opened.elapsed().as_secs(),
            60 * minute,
            "bookmark {minute} a minute after the last"
        );
    }
}
