use std::collections::VecDeque;
use std::sync::Mutex;

use prometheus::Registry;
use tokio::time::Instant;

use super::*;
use crate::workqueue::metrics::QueueMetrics;

const START: Duration = Duration::from_secs(1);
const MAX: Duration = Duration::from_secs(10);

/// What one worker did with key `"a"` when its syncs returned a script of outcomes.
#[derive(Debug, PartialEq, Eq)]
struct Run {
    /// Seconds from the add to each sync.
    syncs: Vec<u64>,
    /// Failures the queue counts for `"a"` afterwards.
    failures: u32,
    /// `workqueue_retries_total`.
    retries: u64,
}

/// One worker on a queue backing off from 1 s to 10 s; the syncs of `"a"` return `script` one
/// by one, then [`Outcome::Done`]. Needs a paused clock: every due delay fires at once.
async fn run(script: &[Outcome]) -> Run {
    let metrics = QueueMetrics::unregistered("test");
    let (queue, delays) = WorkQueue::new(START, MAX, metrics.clone());
    tokio::spawn(delays);
    let script = Arc::new(Mutex::new(script.iter().copied().collect::<VecDeque<_>>()));
    let syncs = Arc::new(Mutex::new(Vec::new()));
    let task = tokio::spawn(worker(Arc::clone(&queue), {
        let syncs = Arc::clone(&syncs);
        move |key: &'static str| {
            assert_eq!(key, "a");
            syncs.lock().unwrap().push(Instant::now());
            let outcome = script.lock().unwrap().pop_front();
            async move { outcome.unwrap_or(Outcome::Done) }
        }
    }));
    let added = Instant::now();
    queue.add("a");
    tokio::time::sleep(Duration::from_mins(10)).await;
    let failures = queue.failures(&"a");
    queue.shut_down();
    tokio::time::timeout(Duration::from_hours(1), task)
        .await
        .expect("the worker returns once the queue is shut down")
        .unwrap();
    let syncs = syncs
        .lock()
        .unwrap()
        .iter()
        .map(|at| at.duration_since(added).as_secs())
        .collect();
    Run {
        syncs,
        failures,
        retries: metrics.retries.get(),
    }
}

#[tokio::test(start_paused = true)]
async fn each_outcome_is_applied_to_the_queue_as_client_go_controllers_do() {
    use Outcome::{Done, Requeue, Retry, RetryAfter};
    let five = Duration::from_secs(5);
    let cases: [(&str, &[Outcome], &[u64], u64); 6] = [
        ("done: synced once, nothing left", &[Done], &[0], 0),
        (
            "retry: backoff from start, doubling; done forgets it",
            &[Retry, Retry, Done],
            &[0, 1, 3],
            2,
        ),
        (
            "retry: the backoff is capped at max",
            &[Retry, Retry, Retry, Retry, Retry],
            &[0, 1, 3, 7, 15, 25],
            5,
        ),
        (
            "retry after: exactly that long, the backoff neither reset nor advanced",
            &[Retry, RetryAfter(five), Retry],
            &[0, 1, 6, 8],
            2,
        ),
        (
            "requeue: at once, the backoff neither reset nor advanced",
            &[Retry, Requeue, Retry],
            &[0, 1, 1, 3],
            2,
        ),
        ("requeue twice", &[Requeue, Requeue], &[0, 0, 0], 0),
    ];
    for (name, script, syncs, retries) in cases {
        assert_eq!(
            run(script).await,
            Run {
                syncs: syncs.to_vec(),
                failures: 0,
                retries,
            },
            "{name}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_key_still_failing_keeps_its_failure_count() {
    let metrics = QueueMetrics::unregistered("test");
    let (queue, delays) = WorkQueue::new(START, MAX, metrics);
    tokio::spawn(delays);
    queue.add("a");
    let key = queue.get().await.unwrap();
    Outcome::Retry.apply(&queue, &key);
    queue.done(&key);
    assert_eq!(queue.failures(&"a"), 1);
    let key = queue.get().await.unwrap();
    Outcome::RetryAfter(Duration::from_secs(30)).apply(&queue, &key);
    queue.done(&key);
    assert_eq!(queue.failures(&"a"), 1);
    queue.shut_down();
}

#[tokio::test(start_paused = true)]
async fn run_until_stops_after_the_item_in_hand_is_finished() {
    let registry = Registry::new();
    let mut workers = Workers::new(WorkQueueMetrics::register(&registry).unwrap());
    let queue = workers.queue::<String>("test", START, MAX);
    let finished = Arc::new(Mutex::new(Vec::new()));
    workers.spawn(&queue, 2, &finished, |finished, key: String| async move {
        // A CSI call bounded by --timeout.
        tokio::time::sleep(Duration::from_secs(10)).await;
        finished.lock().unwrap().push(key);
        Outcome::Done
    });
    queue.add("in-hand".to_owned());
    let started = Instant::now();
    workers
        .run_until(tokio::time::sleep(Duration::from_secs(1)))
        .await
        .unwrap();
    assert_eq!(started.elapsed(), Duration::from_secs(10));
    assert_eq!(*finished.lock().unwrap(), ["in-hand"]);
    queue.add("late".to_owned());
    assert_eq!(queue.get().await, None, "the queue is shut down");
}

#[tokio::test(start_paused = true)]
async fn a_panicking_worker_ends_run_until_with_an_error() {
    let registry = Registry::new();
    let mut workers = Workers::new(WorkQueueMetrics::register(&registry).unwrap());
    let queue = workers.queue::<u32>("test", START, MAX);
    workers.spawn(&queue, 3, &Arc::new(()), |_, key: u32| async move {
        assert_ne!(key, 13, "unlucky key");
        Outcome::Done
    });
    queue.add(1);
    queue.add(13);
    let err = workers.run_until(std::future::pending()).await.unwrap_err();
    let Error::Worker(join) = err;
    assert!(join.is_panic());
}

#[tokio::test(start_paused = true)]
async fn each_queue_reports_its_series_under_its_name() {
    let registry = Registry::new();
    let mut workers = Workers::new(WorkQueueMetrics::register(&registry).unwrap());
    let queue = workers.queue::<String>("csi-attacher-pv", START, MAX);
    queue.add("pv-1".to_owned());
    let text = crate::metrics::render(&registry).unwrap();
    for series in [
        r#"workqueue_adds_total{name="csi-attacher-pv"} 1"#,
        r#"workqueue_depth{name="csi-attacher-pv"} 1"#,
        r#"workqueue_unfinished_work_seconds{name="csi-attacher-pv"} 0"#,
        r#"workqueue_longest_running_processor_seconds{name="csi-attacher-pv"} 0"#,
    ] {
        assert!(text.contains(series), "{series} missing from\n{text}");
    }
    workers.shut_down().await;
}
