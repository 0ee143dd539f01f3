use super::*;

const COMPONENT: &str = "hostpath.csi.k8s.io_vm_342aa73b-bed2-4d9c-b078-3bc38b998238";

/// A claim in namespace `fixtures` (also used by the writer's tests).
pub(super) fn claim(name: &str) -> ObjectReference {
    ObjectReference {
        kind: Some("PersistentVolumeClaim".into()),
        namespace: Some("fixtures".into()),
        name: Some(name.into()),
        uid: Some(format!("uid-{name}")),
        api_version: Some("v1".into()),
        resource_version: Some("394".into()),
        field_path: None,
    }
}

fn event(
    object: ObjectReference,
    type_: EventType,
    reason: &'static str,
    message: &str,
) -> NewEvent {
    NewEvent {
        object,
        type_,
        reason,
        message: message.into(),
    }
}

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(1_795_275_383 + second).unwrap()
}

fn at_nanos(second: i64, nanos: i32) -> Timestamp {
    Timestamp::new(1_795_275_383 + second, nanos).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_first_event_is_created_with_upstream_shape() {
    let mut c = Correlator::new(COMPONENT.into());
    let e = event(
        claim("fx-pvc"),
        EventType::Normal,
        "Provisioning",
        "External provisioner is provisioning volume for claim \"fixtures/fx-pvc\"",
    );
    let Action::Create(created) = c.correlate(&e, at_nanos(0, 123_456_789), Instant::now()) else {
        panic!("expected a create");
    };
    let json = serde_json::to_value(&*created).unwrap();
    let name = json["metadata"]["name"].as_str().unwrap();
    let (object, hex) = name.split_once('.').unwrap();
    assert_eq!(object, "fx-pvc");
    assert_eq!(
        u64::from_str_radix(hex, 16).unwrap(),
        now_nanos(at_nanos(0, 123_456_789))
    );
    assert_eq!(
        json["firstTimestamp"],
        serde_json::json!(Time(at(0))),
        "whole seconds"
    );
    // A second event in the same second gets its own name.
    let other = event(
        claim("fx-pvc"),
        EventType::Normal,
        "ProvisioningSucceeded",
        "done",
    );
    let Action::Create(second) = c.correlate(&other, at_nanos(0, 223_456_789), Instant::now())
    else {
        panic!("expected a create");
    };
    assert_ne!(second.metadata.name, created.metadata.name);
    assert_eq!(json["metadata"]["namespace"], "fixtures");
    assert_eq!(json["involvedObject"]["kind"], "PersistentVolumeClaim");
    assert_eq!(json["involvedObject"]["uid"], "uid-fx-pvc");
    assert_eq!(json["involvedObject"]["resourceVersion"], "394");
    assert_eq!(json["reason"], "Provisioning");
    assert_eq!(json["type"], "Normal");
    assert_eq!(json["count"], 1);
    assert_eq!(json["source"]["component"], COMPONENT);
    assert_eq!(json["reportingComponent"], COMPONENT);
    assert_eq!(json["firstTimestamp"], json["lastTimestamp"]);
    assert!(json["firstTimestamp"].as_str().unwrap().ends_with('Z'));
}

#[tokio::test(start_paused = true)]
async fn a_repeated_event_patches_count_last_timestamp_and_message() {
    let mut c = Correlator::new(COMPONENT.into());
    let msg = "rpc error: code = OutOfRange desc = Requested capacity 2199023255552 exceeds maximum allowed 1099511627776";
    let e = event(
        claim("fx-pvc-toobig"),
        EventType::Warning,
        "ProvisioningFailed",
        msg,
    );
    let Action::Create(first) = c.correlate(&e, at(0), Instant::now()) else {
        panic!("expected a create");
    };
    let first_name = first.metadata.name.clone().unwrap();
    for count in 2..=5 {
        tokio::time::advance(Duration::from_secs(1)).await;
        match c.correlate(&e, at(count), Instant::now()) {
            Action::Patch {
                namespace,
                name,
                patch,
                fallback,
            } => {
                assert_eq!(namespace, "fixtures");
                assert_eq!(name, first_name);
                assert_eq!(
                    patch,
                    serde_json::json!({
                        "count": count,
                        "lastTimestamp": Time(at(count)),
                        "message": msg,
                    })
                );
                assert_eq!(fallback.count, Some(i32::try_from(count).unwrap()));
                assert_eq!(fallback.first_timestamp, Some(Time(at(0))));
            }
            other => panic!("expected a patch, got {other:?}"),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn different_objects_reasons_or_messages_are_separate_events() {
    let mut c = Correlator::new(COMPONENT.into());
    let now = Instant::now();
    for e in [
        event(claim("a"), EventType::Warning, "ProvisioningFailed", "x"),
        event(claim("b"), EventType::Warning, "ProvisioningFailed", "x"),
        event(claim("a"), EventType::Normal, "Provisioning", "x"),
        event(claim("a"), EventType::Warning, "ProvisioningFailed", "y"),
    ] {
        assert!(
            matches!(c.correlate(&e, at(0), now), Action::Create(_)),
            "{e:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn many_distinct_messages_are_aggregated_into_one_combined_event() {
    let mut c = Correlator::new(COMPONENT.into());
    let now = Instant::now();
    for i in 0..9 {
        let e = event(
            claim("a"),
            EventType::Warning,
            "ProvisioningFailed",
            &format!("error {i}"),
        );
        assert!(matches!(c.correlate(&e, at(i), now), Action::Create(_)));
    }
    let tenth = event(
        claim("a"),
        EventType::Warning,
        "ProvisioningFailed",
        "error 9",
    );
    let Action::Create(combined) = c.correlate(&tenth, at(9), now) else {
        panic!("the first combined event is created");
    };
    assert_eq!(
        combined.message.as_deref(),
        Some("(combined from similar events): error 9")
    );
    let eleventh = event(
        claim("a"),
        EventType::Warning,
        "ProvisioningFailed",
        "error 10",
    );
    match c.correlate(&eleventh, at(10), now) {
        Action::Patch { name, patch, .. } => {
            assert_eq!(Some(name), combined.metadata.name);
            assert_eq!(patch["count"], 2);
            assert_eq!(patch["message"], "(combined from similar events): error 10");
        }
        other => panic!("expected a patch, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn aggregation_window_restarts_after_ten_quiet_minutes() {
    let mut c = Correlator::new(COMPONENT.into());
    for i in 0..9 {
        let e = event(
            claim("a"),
            EventType::Warning,
            "ProvisioningFailed",
            &format!("error {i}"),
        );
        c.correlate(&e, at(i), Instant::now());
    }
    tokio::time::advance(AGGREGATE_INTERVAL + Duration::from_secs(1)).await;
    let e = event(
        claim("a"),
        EventType::Warning,
        "ProvisioningFailed",
        "error 99",
    );
    let Action::Create(created) = c.correlate(&e, at(700), Instant::now()) else {
        panic!("expected a create");
    };
    assert_eq!(created.message.as_deref(), Some("error 99"), "not combined");
}

#[tokio::test(start_paused = true)]
async fn the_spam_filter_allows_a_burst_of_25_then_one_per_five_minutes() {
    let mut c = Correlator::new(COMPONENT.into());
    let e = event(claim("a"), EventType::Normal, "Provisioning", "again");
    let mut written = 0;
    for _ in 0..40 {
        if !matches!(c.correlate(&e, at(0), Instant::now()), Action::Drop) {
            written += 1;
        }
    }
    assert_eq!(written, 25);
    tokio::time::advance(Duration::from_secs(299)).await;
    assert!(matches!(
        c.correlate(&e, at(299), Instant::now()),
        Action::Drop
    ));
    tokio::time::advance(Duration::from_secs(2)).await;
    assert!(matches!(
        c.correlate(&e, at(301), Instant::now()),
        Action::Patch { .. }
    ));
    // Another object has its own bucket.
    let other = event(claim("b"), EventType::Normal, "Provisioning", "again");
    assert!(matches!(
        c.correlate(&other, at(301), Instant::now()),
        Action::Create(_)
    ));
}

#[tokio::test(start_paused = true)]
async fn cluster_scoped_objects_get_their_events_in_the_default_namespace() {
    let mut c = Correlator::new(COMPONENT.into());
    let pv = ObjectReference {
        kind: Some("PersistentVolume".into()),
        name: Some("pvc-1".into()),
        uid: Some("u".into()),
        api_version: Some("v1".into()),
        ..ObjectReference::default()
    };
    let e = event(
        pv,
        EventType::Warning,
        "VolumeFailedDelete",
        "persistentvolume pvc-1 is still attached to node n1",
    );
    let Action::Create(created) = c.correlate(&e, at(0), Instant::now()) else {
        panic!("expected a create");
    };
    assert_eq!(created.metadata.namespace.as_deref(), Some("default"));
}

#[test]
fn the_recorder_never_blocks_when_its_queue_is_full() {
    let (recorder, mut rx) = EventRecorder::channel(1);
    recorder.event(&claim("a"), EventType::Normal, "Provisioning", "one");
    recorder.event(&claim("a"), EventType::Normal, "Provisioning", "two");
    assert_eq!(rx.try_recv().unwrap().message, "one");
    assert!(rx.try_recv().is_err(), "the second event was dropped");
}

#[test]
fn cache_keys_tell_apart_what_client_go_keys_tell_apart() {
    let key = |parts: &[&str]| super::fingerprint(parts);
    // Equal parts, equal key: a repeated event finds its entry.
    assert_eq!(
        key(&["src", "obj", "Normal", "Reason", "msg"]),
        key(&["src", "obj", "Normal", "Reason", "msg"])
    );
    let distinct = [
        key(&["src", "obj", "Normal", "Reason", "msg"]),
        // The same bytes split differently (client-go's separators keep these apart).
        key(&["src", "obj", "Normal", "Reaso", "nmsg"]),
        key(&["src", "obj", "Normal", "Reason", "msg2"]),
        key(&["src", "obj", "Warning", "Reason", "msg"]),
        // The aggregator's key (no message) differs from the message key.
        key(&["src", "obj", "Normal", "Reason"]),
        key(&["src", "obj", "Normal", "Reason", ""]),
    ];
    for (i, a) in distinct.iter().enumerate() {
        for b in &distinct[i + 1..] {
            assert_ne!(a, b);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn the_dedup_cache_forgets_the_least_recently_used_event_past_4096() {
    let mut c = Correlator::new(COMPONENT.into());
    let now = Instant::now();
    let failed = |i: usize| {
        event(
            claim(&format!("c{i}")),
            EventType::Warning,
            "ProvisioningFailed",
            "no space",
        )
    };
    for i in 0..CACHE_SIZE {
        assert!(matches!(
            c.correlate(&failed(i), at(0), now),
            Action::Create(_)
        ));
    }
    // c0 is used again, so c1 is now the least recently used; one more object evicts it.
    assert!(matches!(
        c.correlate(&failed(0), at(1), now),
        Action::Patch { .. }
    ));
    assert!(matches!(
        c.correlate(&failed(CACHE_SIZE), at(2), now),
        Action::Create(_)
    ));
    assert!(
        matches!(c.correlate(&failed(1), at(3), now), Action::Create(_)),
        "c1 was forgotten: a new Event, as client-go's LRU does"
    );
    match c.correlate(&failed(0), at(4), now) {
        Action::Patch {
            namespace,
            name,
            patch,
            ..
        } => {
            assert_eq!(namespace, "fixtures");
            assert_eq!(name, format!("c0.{:x}", now_nanos(at(0))));
            assert_eq!(patch["count"], 3);
        }
        other => panic!("c0 is remembered, got {other:?}"),
    }
    assert!(c.seen.len() <= CACHE_SIZE);
    assert!(c.spam.len() <= CACHE_SIZE);
    assert!(c.aggregates.len() <= CACHE_SIZE);
}

#[test]
fn distinct_messages_count_each_message_once_and_stop_at_the_aggregation_limit() {
    let mut d = Distinct::default();
    d.insert(7);
    d.insert(7);
    assert_eq!(d.len(), 1);
    d.insert(8);
    d.insert(7);
    d.insert(8);
    assert_eq!(d.len(), 2);
    for m in 100..200 {
        d.insert(m);
    }
    assert_eq!(d.len(), AGGREGATE_MAX_EVENTS);
    d.clear();
    assert_eq!(d.len(), 0);
}

#[test]
fn cache_entries_stay_small() {
    // Each cache holds up to 4,096 entries in a table of 8,192 buckets, so a field added here
    // costs its size 8,192 times over; these are the sizes the churn run was measured with.
    assert!(std::mem::size_of::<Seen>() <= 32);
    assert!(std::mem::size_of::<Bucket>() <= 32);
    assert!(std::mem::size_of::<Aggregate>() <= 64);
}

#[test]
fn a_churning_cache_keeps_the_table_its_bound_needs() {
    // One new key and one eviction per event, for long: the table must not double when the
    // evictions' tombstones use up its room for growth (the minute-36 step of the churn).
    for bound in [64, 1000] {
        let mut map: HashMap<Fingerprint, u64> = HashMap::new();
        let mut fill = 0;
        for tick in 0..60_000_u64 {
            map.insert(Fingerprint::from(tick), tick);
            let _ = evict_oldest_to(&mut map, bound, |v| *v);
            assert!(map.len() <= bound);
            if map.len() == bound && fill == 0 {
                fill = map.capacity();
            }
            assert!(
                fill == 0 || map.capacity() <= fill,
                "bound {bound}: the table grew from {fill} to {} entries after {tick} events",
                map.capacity()
            );
        }
        // The most recent keys are the ones kept.
        assert!(map.contains_key(&Fingerprint::from(59_999_u64)));
        assert!(!map.contains_key(&Fingerprint::from(59_999 - u64::try_from(bound).unwrap())));
    }
}

#[test]
fn the_caches_start_at_the_table_size_they_end_at() {
    // The real path: a table as `Correlator::new` makes it, churned through `evict_oldest` at
    // CACHE_SIZE for long enough that, without the rebuild, it doubles (7,168 to 14,336).
    let correlator = Correlator::new(COMPONENT.to_owned());
    let start = correlator.seen.capacity();
    assert_eq!(start, 7168);
    assert_eq!(correlator.aggregates.capacity(), start);
    assert_eq!(correlator.spam.capacity(), start);
    let mut map: HashMap<Fingerprint, u64> = HashMap::with_capacity(table_capacity(CACHE_SIZE));
    assert_eq!(map.capacity(), start);
    for tick in 0..60_000_u64 {
        map.insert(Fingerprint::from(tick), tick);
        evict_oldest(&mut map, |v| *v);
        // Tombstones lower `capacity()` (entries plus room for growth); a rebuild brings it
        // back; only a doubling takes it above the start.
        assert!(
            map.capacity() <= start,
            "after {tick} events: {}",
            map.capacity()
        );
    }
}

#[test]
fn a_bound_whose_table_is_exactly_full_does_not_rebuild_on_every_eviction() {
    // 895 + 1 entries fill a 1,024-slot table (896 entries): without headroom the rebuilt
    // table had room for one insert, and every eviction rebuilt it.
    let bound = 895;
    let mut map: HashMap<Fingerprint, u64> = HashMap::new();
    let mut rebuilds = 0;
    for tick in 0..20_000_u64 {
        map.insert(Fingerprint::from(tick), tick);
        if evict_oldest_to(&mut map, bound, |v| *v) {
            rebuilds += 1;
        }
    }
    assert!(rebuilds < 100, "{rebuilds} rebuilds in 20,000 events");
}
