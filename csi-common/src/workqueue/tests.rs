use super::*;

fn queue(start: Duration, max: Duration) -> Arc<WorkQueue<&'static str>> {
    let (queue, delays) = WorkQueue::new(start, max, QueueMetrics::unregistered("test"));
    tokio::spawn(delays);
    queue
}

async fn next(queue: &WorkQueue<&'static str>) -> Option<&'static str> {
    tokio::time::timeout(Duration::from_hours(1), queue.get())
        .await
        .ok()
        .flatten()
}

#[test]
fn backoff_doubles_from_start_up_to_max_and_forget_resets_it() {
    let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(10));
    let delays: Vec<u64> = (0..6).map(|_| backoff.next_delay(&"a").as_secs()).collect();
    assert_eq!(delays, [1, 2, 4, 8, 10, 10]);
    assert_eq!(backoff.failures(&"a"), 6);
    assert_eq!(backoff.next_delay(&"b"), Duration::from_secs(1), "per item");
    backoff.forget(&"a");
    assert_eq!(backoff.next_delay(&"a"), Duration::from_secs(1));
}

#[test]
fn backoff_saturates_at_max_after_many_failures() {
    let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_mins(5));
    for _ in 0..200 {
        backoff.next_delay(&"a");
    }
    assert_eq!(backoff.next_delay(&"a"), Duration::from_mins(5));
}

#[tokio::test(start_paused = true)]
async fn an_item_is_queued_once_however_often_it_is_added() {
    let q = queue(Duration::from_secs(1), Duration::from_secs(10));
    q.add("a");
    q.add("a");
    q.add("b");
    assert_eq!(q.len(), 2);
    assert_eq!(next(&q).await, Some("a"));
    assert_eq!(next(&q).await, Some("b"));
    assert!(q.is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_item_added_while_processing_is_handed_out_again_only_after_done() {
    let q = queue(Duration::from_secs(1), Duration::from_secs(10));
    q.add("a");
    assert_eq!(next(&q).await, Some("a"));
    q.add("a");
    assert!(
        q.is_empty(),
        "not handed to a second worker while processing"
    );
    q.done(&"a");
    assert_eq!(q.len(), 1);
    assert_eq!(next(&q).await, Some("a"));
    q.done(&"a");
    assert!(q.is_empty());
}

#[tokio::test(start_paused = true)]
async fn rate_limited_adds_wait_for_the_exponential_backoff() {
    let q = queue(Duration::from_secs(1), Duration::from_secs(4));
    let start = Instant::now();
    let mut waited = Vec::new();
    for _ in 0..4 {
        let before = Instant::now();
        q.add_rate_limited("a");
        assert_eq!(next(&q).await, Some("a"));
        waited.push((Instant::now() - before).as_secs());
        q.done(&"a");
    }
    assert_eq!(waited, [1, 2, 4, 4]);
    assert_eq!(q.failures(&"a"), 4);
    q.forget(&"a");
    q.add_rate_limited("a");
    let before = Instant::now();
    assert_eq!(next(&q).await, Some("a"));
    assert_eq!((Instant::now() - before).as_secs(), 1);
    assert!(Instant::now() - start >= Duration::from_secs(12));
}

#[tokio::test(start_paused = true)]
async fn add_after_keeps_the_earliest_time_and_a_direct_add_overtakes_it() {
    let q = queue(Duration::from_secs(1), Duration::from_secs(10));
    let before = Instant::now();
    q.add_after("a", Duration::from_secs(30));
    q.add_after("a", Duration::from_secs(5));
    q.add_after("a", Duration::from_mins(1));
    assert_eq!(next(&q).await, Some("a"));
    assert_eq!((Instant::now() - before).as_secs(), 5);
    q.done(&"a");

    q.add_after("b", Duration::from_secs(30));
    q.add("b");
    assert_eq!(next(&q).await, Some("b"));
    assert_eq!((Instant::now() - before).as_secs(), 5, "added at once");
    q.done(&"b");
    // The pending delayed add still fires later, as in client-go.
    assert_eq!(next(&q).await, Some("b"));
    assert_eq!((Instant::now() - before).as_secs(), 35);
}

#[tokio::test(start_paused = true)]
async fn shut_down_releases_waiting_workers() {
    let q = queue(Duration::from_secs(1), Duration::from_secs(10));
    let waiter = tokio::spawn({
        let q = Arc::clone(&q);
        async move { q.get().await }
    });
    tokio::task::yield_now().await;
    q.shut_down();
    assert_eq!(waiter.await.unwrap(), None);
    q.add("a");
    assert_eq!(q.get().await, None);
}

#[tokio::test(start_paused = true)]
async fn many_workers_each_get_distinct_items() {
    let q = queue(Duration::from_secs(1), Duration::from_secs(10));
    let keys: Vec<&'static str> = vec!["a", "b", "c", "d", "e", "f", "g", "h"];
    let mut workers = Vec::new();
    for _ in 0..4 {
        let q = Arc::clone(&q);
        workers.push(tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(k) = q.get().await {
                got.push(k);
                tokio::time::sleep(Duration::from_millis(10)).await;
                q.done(&k);
            }
            got
        }));
    }
    for k in &keys {
        q.add(k);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    q.shut_down();
    let mut all = Vec::new();
    for w in workers {
        all.extend(w.await.unwrap());
    }
    all.sort_unstable();
    assert_eq!(all, keys);
}

#[tokio::test(start_paused = true)]
async fn processing_seconds_reports_sum_and_longest() {
    let q = queue(Duration::from_secs(1), Duration::from_secs(10));
    q.add("a");
    assert_eq!(next(&q).await, Some("a"));
    tokio::time::sleep(Duration::from_secs(3)).await;
    q.add("b");
    assert_eq!(next(&q).await, Some("b"));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (sum, longest) = q.processing_seconds();
    assert!((sum - 5.0).abs() < 0.01, "{sum}");
    assert!((longest - 4.0).abs() < 0.01, "{longest}");
}

#[test]
fn a_table_shrinks_only_when_at_most_a_quarter_full_and_above_the_floor() {
    let cases = [
        // (len, capacity, shrink?)
        (0, 0, false),
        (0, SHRINK_FLOOR, false),
        (0, SHRINK_FLOOR + 1, true),
        (1000, 4000, true),
        (1001, 4000, false),
        (4000, 4000, false),
        (usize::MAX, usize::MAX, false),
    ];
    for (len, capacity, want) in cases {
        assert_eq!(
            should_shrink(len, capacity),
            want,
            "len {len}, capacity {capacity}"
        );
    }
}

/// A queue of numbered keys holding `0..burst`.
fn numbered_queue(burst: u32) -> Arc<WorkQueue<u32>> {
    let (q, delays) = WorkQueue::new(
        Duration::from_secs(1),
        Duration::from_secs(10),
        QueueMetrics::unregistered("test"),
    );
    tokio::spawn(delays);
    for key in 0..burst {
        q.add(key);
    }
    q
}

#[tokio::test(start_paused = true)]
async fn a_drained_burst_gives_its_tables_back() {
    const BURST: u32 = 5000;
    let q = numbered_queue(BURST);
    let (queue, dirty, _) = q.capacities();
    assert!(
        queue >= BURST as usize && dirty >= BURST as usize,
        "{queue} {dirty}"
    );
    for _ in 0..BURST {
        let key = q.get().await.expect("queued");
        q.done(&key);
    }
    assert!(q.is_empty());
    let (queue, dirty, processing) = q.capacities();
    for (table, capacity) in [
        ("queue", queue),
        ("dirty", dirty),
        ("processing", processing),
    ] {
        assert!(
            capacity <= 2 * SHRINK_FLOOR,
            "{table} kept {capacity} slots after the burst"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn items_queued_while_the_tables_shrink_are_all_handed_out_once() {
    let q = numbered_queue(3000);
    let mut seen = std::collections::HashSet::new();
    // Drain most of the burst (the tables shrink on the way), adding new keys in between.
    for round in 0..2900u32 {
        let key = q.get().await.expect("queued");
        assert!(seen.insert(key), "{key} handed out twice");
        q.done(&key);
        if round % 10 == 0 {
            q.add(10_000 + round);
        }
    }
    while !q.is_empty() {
        let key = q.get().await.expect("queued");
        assert!(seen.insert(key), "{key} handed out twice");
        q.done(&key);
    }
    assert_eq!(seen.len(), 3000 + 290);
}
